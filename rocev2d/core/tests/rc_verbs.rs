//! Every RC verb end to end through two engines on an ideal link (`testing::Pair`): the bytes
//! land where they should, and both sides complete with the right opcode, length and status.

use rocev2_core::cq::{WcOpcode, WcStatus, WorkCompletion};
use rocev2_core::mr::{Lkey, Rkey};
use rocev2_core::qp::{RecvWr, SendOp, SendWr, Sge};
use rocev2_core::testing::{Conn, ConnectOptions, LinkConfig, Pair};
use rocev2_core::time::Duration;

const STEPS: usize = 200_000;

fn pair() -> (Pair, Conn) {
    let link = LinkConfig::default().delay(Duration::from_micros(2));
    let mut p = Pair::new(link.clone(), link);
    let c = p.connect(ConnectOptions::default()).unwrap();
    (p, c)
}

fn fill(p: &mut Pair, a: bool, c: &Conn, seed: u8) {
    let (mem, id) = if a {
        (&mut p.a.mem, c.mr_a.id)
    } else {
        (&mut p.b.mem, c.mr_b.id)
    };
    for (i, b) in mem.get_mut(id).unwrap().iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(seed);
    }
}

fn bytes(p: &Pair, a: bool, c: &Conn, off: usize, len: usize) -> Vec<u8> {
    let (mem, id) = if a {
        (&p.a.mem, c.mr_a.id)
    } else {
        (&p.b.mem, c.mr_b.id)
    };
    mem.get(id).unwrap()[off..off + len].to_vec()
}

fn sge(mr: &rocev2_core::mr::MrInfo, off: u64, len: u32) -> Sge {
    Sge {
        addr: mr.addr + off,
        length: len,
        lkey: mr.lkey,
    }
}

/// On an ideal link nothing is ever resent, NAKed or unexpected.
fn assert_clean(p: &Pair, c: &Conn) {
    for (ep, q) in [(&p.a.ep, c.qa), (&p.b.ep, c.qb)] {
        let k = ep.qp(q).unwrap().counters();
        assert_eq!(
            (
                k.retransmits,
                k.timeouts,
                k.naks_sent,
                k.unexpected_responses,
                k.duplicate_requests
            ),
            (0, 0, 0, 0, 0),
            "{k:?}"
        );
        assert_eq!(ep.stats().total_drops(), 0);
    }
}

fn only(wcs: Vec<WorkCompletion>) -> WorkCompletion {
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    wcs[0]
}

#[test]
fn send_recv_multi_mtu_two_sges() {
    let (mut p, c) = pair();
    fill(&mut p, true, &c, 7);
    // 4096 + 100 bytes from two SGEs into a receive WQE of three SGEs.
    p.b.ep
        .post_recv(
            c.qb,
            RecvWr {
                wr_id: 9,
                sg_list: vec![
                    sge(&c.mr_b, 0, 1000),
                    sge(&c.mr_b, 2000, 2000),
                    sge(&c.mr_b, 8000, 2000),
                ],
            },
        )
        .unwrap();
    let wr = SendWr::new(1, SendOp::Send)
        .sge(sge(&c.mr_a, 100, 4000))
        .sge(sge(&c.mr_a, 5000, 196));
    p.a.ep.post_send(c.qa, wr).unwrap();
    assert!(p.drive(STEPS));
    assert_clean(&p, &c);
    let s = only(p.completions(true, c.cq_a));
    assert_eq!(
        (s.wr_id, s.status, s.opcode),
        (1, WcStatus::Success, WcOpcode::Send)
    );
    let r = only(p.completions(false, c.cq_b));
    assert_eq!(
        (r.wr_id, r.status, r.opcode, r.byte_len),
        (9, WcStatus::Success, WcOpcode::Recv, 4196)
    );
    assert_eq!(r.src_qp, c.qa);
    let mut sent = bytes(&p, true, &c, 100, 4000);
    sent.extend(bytes(&p, true, &c, 5000, 196));
    let mut got = bytes(&p, false, &c, 0, 1000);
    got.extend(bytes(&p, false, &c, 2000, 2000));
    got.extend(bytes(&p, false, &c, 8000, 1196));
    assert_eq!(got, sent);
    assert_eq!(
        bytes(&p, false, &c, 9196, 4),
        vec![0; 4],
        "nothing past the message"
    );
    // 4196 bytes at MTU 1024 are 5 packets; all acknowledged.
    assert_eq!(p.a.ep.qp(c.qa).unwrap().counters().tx_packets, 5);
}

#[test]
fn send_with_immediate_and_invalidate_report_in_completion() {
    let (mut p, c) = pair();
    for id in [1, 2] {
        p.b.ep
            .post_recv(
                c.qb,
                RecvWr {
                    wr_id: id,
                    sg_list: vec![sge(&c.mr_b, 0, 64)],
                },
            )
            .unwrap();
    }
    p.a.ep
        .post_send(
            c.qa,
            SendWr::new(10, SendOp::SendWithImm { imm: 0xdead_beef }).inline(b"hi".to_vec()),
        )
        .unwrap();
    p.a.ep
        .post_send(
            c.qa,
            SendWr::new(
                11,
                SendOp::SendWithInv {
                    rkey: Rkey::new(0x1234),
                },
            )
            .inline(b"yo".to_vec()),
        )
        .unwrap();
    assert!(p.drive(STEPS));
    assert_clean(&p, &c);
    let r = p.completions(false, c.cq_b);
    assert_eq!(r.len(), 2);
    assert_eq!(
        (r[0].wr_id, r[0].imm_data, r[0].byte_len),
        (1, Some(0xdead_beef), 2)
    );
    assert_eq!(
        (r[1].wr_id, r[1].invalidated_rkey, r[1].imm_data),
        (2, Some(0x1234), None)
    );
    assert_eq!(bytes(&p, false, &c, 0, 2), b"yo");
    assert_eq!(
        p.completions(true, c.cq_a)
            .iter()
            .map(|w| w.wr_id)
            .collect::<Vec<_>>(),
        vec![10, 11]
    );
}

#[test]
fn write_multi_mtu_and_write_with_imm() {
    let (mut p, c) = pair();
    fill(&mut p, true, &c, 3);
    p.b.ep
        .post_recv(
            c.qb,
            RecvWr {
                wr_id: 77,
                sg_list: vec![],
            },
        )
        .unwrap();
    let w = SendOp::Write {
        remote_addr: c.mr_b.addr + 10,
        rkey: c.mr_b.rkey,
    };
    p.a.ep
        .post_send(c.qa, SendWr::new(1, w).sge(sge(&c.mr_a, 0, 3 * 1024 + 5)))
        .unwrap();
    let wi = SendOp::WriteWithImm {
        remote_addr: c.mr_b.addr + 20_000,
        rkey: c.mr_b.rkey,
        imm: 42,
    };
    p.a.ep
        .post_send(c.qa, SendWr::new(2, wi).sge(sge(&c.mr_a, 40_000, 2048)))
        .unwrap();
    assert!(p.drive(STEPS));
    assert_clean(&p, &c);
    assert_eq!(
        bytes(&p, false, &c, 10, 3 * 1024 + 5),
        bytes(&p, true, &c, 0, 3 * 1024 + 5)
    );
    assert_eq!(
        bytes(&p, false, &c, 20_000, 2048),
        bytes(&p, true, &c, 40_000, 2048)
    );
    assert_eq!(
        bytes(&p, false, &c, 9, 1),
        vec![0],
        "nothing before the target"
    );
    let s = p.completions(true, c.cq_a);
    assert_eq!(
        s.iter()
            .map(|w| (w.wr_id, w.opcode, w.status))
            .collect::<Vec<_>>(),
        vec![
            (1, WcOpcode::RdmaWrite, WcStatus::Success),
            (2, WcOpcode::RdmaWrite, WcStatus::Success)
        ]
    );
    let r = only(p.completions(false, c.cq_b));
    assert_eq!(
        (r.wr_id, r.opcode, r.imm_data, r.byte_len),
        (77, WcOpcode::RecvRdmaWithImm, Some(42), 2048)
    );
}

#[test]
fn read_multi_mtu_into_two_sges() {
    let (mut p, c) = pair();
    fill(&mut p, false, &c, 99);
    let r = SendOp::Read {
        remote_addr: c.mr_b.addr + 333,
        rkey: c.mr_b.rkey,
    };
    p.a.ep
        .post_send(
            c.qa,
            SendWr::new(5, r)
                .sge(sge(&c.mr_a, 0, 2500))
                .sge(sge(&c.mr_a, 10_000, 2500)),
        )
        .unwrap();
    assert!(p.drive(STEPS));
    assert_clean(&p, &c);
    let w = only(p.completions(true, c.cq_a));
    assert_eq!(
        (w.wr_id, w.opcode, w.status, w.byte_len),
        (5, WcOpcode::RdmaRead, WcStatus::Success, 5000)
    );
    let mut got = bytes(&p, true, &c, 0, 2500);
    got.extend(bytes(&p, true, &c, 10_000, 2500));
    assert_eq!(got, bytes(&p, false, &c, 333, 5000));
    assert!(
        p.completions(false, c.cq_b).is_empty(),
        "a READ completes nothing at the responder"
    );
}

#[test]
fn atomics_return_original_and_apply_once() {
    let (mut p, c) = pair();
    let target = c.mr_b.addr + 64;
    p.b.mem.get_mut(c.mr_b.id).unwrap()[64..72].copy_from_slice(&5u64.to_ne_bytes());
    let fa = SendOp::FetchAdd {
        remote_addr: target,
        rkey: c.mr_b.rkey,
        add: 10,
    };
    p.a.ep
        .post_send(c.qa, SendWr::new(1, fa).sge(sge(&c.mr_a, 0, 8)))
        .unwrap();
    let cs = SendOp::CompareSwap {
        remote_addr: target,
        rkey: c.mr_b.rkey,
        compare: 15,
        swap: 1000,
    };
    p.a.ep
        .post_send(c.qa, SendWr::new(2, cs).sge(sge(&c.mr_a, 8, 8)))
        .unwrap();
    let miss = SendOp::CompareSwap {
        remote_addr: target,
        rkey: c.mr_b.rkey,
        compare: 15,
        swap: 7,
    };
    p.a.ep
        .post_send(c.qa, SendWr::new(3, miss).sge(sge(&c.mr_a, 16, 8)))
        .unwrap();
    assert!(p.drive(STEPS));
    assert_clean(&p, &c);
    let wcs = p.completions(true, c.cq_a);
    assert_eq!(
        wcs.iter().map(|w| (w.opcode, w.status)).collect::<Vec<_>>(),
        vec![
            (WcOpcode::FetchAdd, WcStatus::Success),
            (WcOpcode::CompSwap, WcStatus::Success),
            (WcOpcode::CompSwap, WcStatus::Success)
        ]
    );
    let word = |p: &Pair, a: bool, off: usize| {
        u64::from_ne_bytes(bytes(p, a, &c, off, 8).try_into().unwrap())
    };
    assert_eq!(word(&p, true, 0), 5, "FetchAdd returns the original");
    assert_eq!(word(&p, true, 8), 15, "CmpSwap hit returns the original");
    assert_eq!(
        word(&p, true, 16),
        1000,
        "CmpSwap miss returns the current value"
    );
    assert_eq!(word(&p, false, 64), 1000);
}

#[test]
fn zero_length_send_write_read_and_unsignaled() {
    let (mut p, c) = pair();
    p.b.ep
        .post_recv(
            c.qb,
            RecvWr {
                wr_id: 1,
                sg_list: vec![],
            },
        )
        .unwrap();
    p.a.ep
        .post_send(c.qa, SendWr::new(1, SendOp::Send))
        .unwrap();
    // A zero-length WRITE or READ carries an R_Key that is not checked.
    p.a.ep
        .post_send(
            c.qa,
            SendWr::new(
                2,
                SendOp::Write {
                    remote_addr: 0,
                    rkey: Rkey::new(0xbad),
                },
            )
            .unsignaled(),
        )
        .unwrap();
    p.a.ep
        .post_send(
            c.qa,
            SendWr::new(
                3,
                SendOp::Read {
                    remote_addr: 0,
                    rkey: Rkey::new(0xbad),
                },
            ),
        )
        .unwrap();
    assert!(p.drive(STEPS));
    assert_clean(&p, &c);
    let ids: Vec<u64> = p
        .completions(true, c.cq_a)
        .iter()
        .map(|w| w.wr_id)
        .collect();
    assert_eq!(ids, vec![1, 3], "the unsignaled WRITE completes silently");
    assert_eq!(only(p.completions(false, c.cq_b)).byte_len, 0);
}

#[test]
fn psn_wraps_around_2_pow_24() {
    let link = LinkConfig::default().delay(Duration::from_micros(1));
    let mut p = Pair::new(link.clone(), link);
    let c = p
        .connect(ConnectOptions {
            psn_a: 0xff_fffd,
            psn_b: 0xff_ffff,
            ..ConnectOptions::default()
        })
        .unwrap();
    fill(&mut p, true, &c, 1);
    fill(&mut p, false, &c, 2);
    let w = SendOp::Write {
        remote_addr: c.mr_b.addr,
        rkey: c.mr_b.rkey,
    };
    p.a.ep
        .post_send(c.qa, SendWr::new(1, w).sge(sge(&c.mr_a, 0, 8 * 1024)))
        .unwrap();
    let r = SendOp::Read {
        remote_addr: c.mr_a.addr + 20_000,
        rkey: c.mr_a.rkey,
    };
    p.b.ep
        .post_send(c.qb, SendWr::new(2, r).sge(sge(&c.mr_b, 30_000, 6 * 1024)))
        .unwrap();
    assert!(p.drive(STEPS));
    assert_clean(&p, &c);
    assert_eq!(only(p.completions(true, c.cq_a)).status, WcStatus::Success);
    assert_eq!(only(p.completions(false, c.cq_b)).status, WcStatus::Success);
    assert_eq!(
        bytes(&p, false, &c, 0, 8 * 1024),
        bytes(&p, true, &c, 0, 8 * 1024)
    );
    assert_eq!(
        bytes(&p, false, &c, 30_000, 6 * 1024),
        bytes(&p, true, &c, 20_000, 6 * 1024)
    );
}

#[test]
fn fence_waits_for_earlier_read() {
    let (mut p, c) = pair();
    fill(&mut p, false, &c, 5);
    let r = SendOp::Read {
        remote_addr: c.mr_b.addr,
        rkey: c.mr_b.rkey,
    };
    p.a.ep
        .post_send(c.qa, SendWr::new(1, r).sge(sge(&c.mr_a, 0, 4096)))
        .unwrap();
    // Fenced: writes what the READ fetched, so it must not start before the READ completes.
    let w = SendOp::Write {
        remote_addr: c.mr_b.addr + 8192,
        rkey: c.mr_b.rkey,
    };
    p.a.ep
        .post_send(c.qa, SendWr::new(2, w).sge(sge(&c.mr_a, 0, 4096)).fence())
        .unwrap();
    assert!(p.drive(STEPS));
    assert_clean(&p, &c);
    assert_eq!(
        bytes(&p, false, &c, 8192, 4096),
        bytes(&p, false, &c, 0, 4096)
    );
}

#[test]
fn post_in_wrong_state_and_bad_requests_refused() {
    use rocev2_core::EndpointError;
    use rocev2_core::qp::PostError;
    let link = LinkConfig::default();
    let mut p = Pair::new(link.clone(), link);
    let pd = p.a.ep.alloc_pd();
    let cq = p.a.ep.create_cq(8);
    let q =
        p.a.ep
            .create_qp(rocev2_core::qp::QpConfig::new(pd, cq, cq))
            .unwrap();
    let e =
        p.a.ep
            .post_send(q, SendWr::new(1, SendOp::Send))
            .unwrap_err();
    assert!(
        matches!(e, EndpointError::Post(PostError::WrongState(_))),
        "{e:?}"
    );
    let e =
        p.a.ep
            .post_recv(
                q,
                RecvWr {
                    wr_id: 1,
                    sg_list: vec![],
                },
            )
            .unwrap_err();
    assert!(
        matches!(e, EndpointError::Post(PostError::WrongState(_))),
        "receive WQEs need Init"
    );
    let (mut p, c) = pair();
    let fa = SendOp::FetchAdd {
        remote_addr: c.mr_b.addr,
        rkey: c.mr_b.rkey,
        add: 1,
    };
    assert_eq!(
        p.a.ep
            .post_send(c.qa, SendWr::new(1, fa).sge(sge(&c.mr_a, 0, 4))),
        Err(EndpointError::Post(PostError::BadAtomic))
    );
    let big = vec![0u8; 65];
    assert_eq!(
        p.a.ep
            .post_send(c.qa, SendWr::new(1, SendOp::Send).inline(big)),
        Err(EndpointError::Post(PostError::BadInline))
    );
    let many = (0..5).fold(SendWr::new(1, SendOp::Send), |w, i| {
        w.sge(sge(&c.mr_a, i * 8, 8))
    });
    assert_eq!(
        p.a.ep.post_send(c.qa, many),
        Err(EndpointError::Post(PostError::TooManySge))
    );
    let _ = Lkey::new(0);
}
