//! Every error the RC rules define, end to end: the responder's NAK on the wire, the completion
//! status on both sides, the QP states, and memory left untouched.

use rocev2_core::cq::{WcOpcode, WcStatus, WorkCompletion};
use rocev2_core::mr::{AccessFlags, Lkey, MrInfo, Rkey};
use rocev2_core::qp::{QpAttr, QpState, RecvWr, SendOp, SendWr, Sge};
use rocev2_core::testing::{Conn, ConnectOptions, LinkConfig, Pair};
use rocev2_core::time::Duration;
use rocev2_core::wire::{FrameRepr, NakCode, Operation, Syndrome};
use rocev2_core::{DropReason, Endpoint};

const STEPS: usize = 100_000;

fn pair_with(o: ConnectOptions) -> (Pair, Conn) {
    let link = LinkConfig::default().delay(Duration::from_micros(2));
    let mut p = Pair::new(link.clone(), link);
    p.trace = Some(Vec::new());
    let c = p.connect(o).unwrap();
    (p, c)
}

fn pair() -> (Pair, Conn) {
    pair_with(ConnectOptions::default())
}

fn sge(mr: &MrInfo, off: u64, len: u32) -> Sge {
    Sge {
        addr: mr.addr + off,
        length: len,
        lkey: mr.lkey,
    }
}

/// The AETH syndromes of every ACK/NAK B sent.
fn acks_from_b(p: &Pair) -> Vec<Syndrome> {
    p.trace
        .as_ref()
        .unwrap()
        .iter()
        .filter(|(from_a, _)| !from_a)
        .filter_map(|(_, f)| FrameRepr::parse(f).ok())
        .filter(|(r, _)| r.roce.bth.opcode.operation() == Some(Operation::Acknowledge))
        .map(|(r, _)| r.roce.aeth.unwrap().syndrome)
        .collect()
}

fn statuses(wcs: &[WorkCompletion]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|w| (w.wr_id, w.status)).collect()
}

fn b_untouched(p: &Pair, c: &Conn) -> bool {
    p.b.mem.get(c.mr_b.id).unwrap().iter().all(|b| *b == 0)
}

#[test]
fn bad_rkey_write_is_nak_remote_access_and_writes_nothing() {
    let (mut p, c) = pair();
    p.a.mem.get_mut(c.mr_a.id).unwrap().fill(0xab);
    let bad = Rkey::new(c.mr_b.rkey.value() ^ 0x5a5a);
    p.a.ep
        .post_send(
            c.qa,
            SendWr::new(
                1,
                SendOp::Write {
                    remote_addr: c.mr_b.addr,
                    rkey: bad,
                },
            )
            .sge(sge(&c.mr_a, 0, 3000)),
        )
        .unwrap();
    p.a.ep
        .post_send(
            c.qa,
            SendWr::new(2, SendOp::Send)
                .sge(sge(&c.mr_a, 0, 8))
                .unsignaled(),
        )
        .unwrap();
    assert!(p.drive(STEPS));
    assert_eq!(
        acks_from_b(&p),
        vec![Syndrome::Nak(NakCode::RemoteAccessError)]
    );
    // The failed WRITE reports the error; the request behind it is flushed even though it was
    // unsignaled (IBA §10.3.1).
    assert_eq!(
        statuses(&p.completions(true, c.cq_a)),
        vec![(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(p.a.ep.qp(c.qa).unwrap().state(), QpState::Error);
    assert_eq!(p.b.ep.qp(c.qb).unwrap().state(), QpState::Error);
    assert!(b_untouched(&p, &c));
}

#[test]
fn both_sides_of_a_refused_access_keep_why_their_qp_failed() {
    use rocev2_core::qp::ErrorCause;
    let (mut p, c) = pair();
    let bad = Rkey::new(c.mr_b.rkey.value() ^ 1);
    let w = SendOp::Write {
        remote_addr: c.mr_b.addr,
        rkey: bad,
    };
    p.a.ep
        .post_send(c.qa, SendWr::new(1, w).sge(sge(&c.mr_a, 0, 64)))
        .unwrap();
    assert!(p.drive(STEPS));
    let (a, b) = (p.a.ep.qp(c.qa).unwrap(), p.b.ep.qp(c.qb).unwrap());
    assert_eq!(
        a.error_cause(),
        Some(ErrorCause::Completion(WcStatus::RemAccessErr))
    );
    // The passive side posted nothing that failed: only its QP's cause says why, as the
    // affiliated event IBV_EVENT_QP_ACCESS_ERR (3) would on an HCA.
    let cause = b
        .error_cause()
        .expect("the responder's QP records its cause");
    assert_eq!(cause, ErrorCause::Responder(NakCode::RemoteAccessError));
    assert_eq!(cause.ibv_event(), Some(3));
    // A request posted to the QP in ERROR completes at once, flushed (IBA §10.3.1), as an
    // HCA completes it; a receive too.
    p.b.ep
        .post_send(c.qb, SendWr::new(9, SendOp::Send))
        .unwrap();
    p.b.ep
        .post_recv(
            c.qb,
            RecvWr {
                wr_id: 10,
                sg_list: vec![],
            },
        )
        .unwrap();
    let mut wcs = Vec::new();
    p.b.ep.poll_cq(c.cq_b, &mut wcs, 8);
    let flushed: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    assert_eq!(
        flushed,
        [
            (9, WcStatus::WrFlushErr, WcOpcode::Send),
            (10, WcStatus::WrFlushErr, WcOpcode::Recv)
        ]
    );
    // The QP still says why it failed.
    assert_eq!(p.b.ep.qp(c.qb).unwrap().error_cause(), Some(cause));
    // A reset QP starts a new life, without the old cause.
    let now = p.now;
    p.b.ep
        .modify_qp(c.qb, QpState::Reset, &QpAttr::default(), now, &mut p.b.mem)
        .unwrap();
    assert_eq!(p.b.ep.qp(c.qb).unwrap().error_cause(), None);
}

#[test]
fn out_of_bounds_read_is_remote_access_error() {
    let (mut p, c) = pair();
    let r = SendOp::Read {
        remote_addr: c.mr_b.addr + c.mr_b.len - 100,
        rkey: c.mr_b.rkey,
    };
    p.a.ep
        .post_send(c.qa, SendWr::new(1, r).sge(sge(&c.mr_a, 0, 200)))
        .unwrap();
    assert!(p.drive(STEPS));
    assert_eq!(
        acks_from_b(&p),
        vec![Syndrome::Nak(NakCode::RemoteAccessError)]
    );
    assert_eq!(
        statuses(&p.completions(true, c.cq_a)),
        vec![(1, WcStatus::RemAccessErr)]
    );
    assert!(
        p.a.mem.get(c.mr_a.id).unwrap().iter().all(|b| *b == 0),
        "no data was placed"
    );
}

#[test]
fn mr_without_remote_write_refuses_write() {
    let (mut p, c) = pair();
    let ro =
        p.b.ep
            .register_mr(
                c.pd_b,
                0x2000_0000,
                4096,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
            )
            .unwrap();
    p.b.mem.insert(ro.id, vec![0; 4096]);
    let w = SendOp::Write {
        remote_addr: ro.addr,
        rkey: ro.rkey,
    };
    p.a.ep
        .post_send(c.qa, SendWr::new(1, w).inline(vec![1; 8]))
        .unwrap();
    assert!(p.drive(STEPS));
    assert_eq!(
        acks_from_b(&p),
        vec![Syndrome::Nak(NakCode::RemoteAccessError)]
    );
    assert_eq!(
        statuses(&p.completions(true, c.cq_a)),
        vec![(1, WcStatus::RemAccessErr)]
    );
    assert!(p.b.mem.get(ro.id).unwrap().iter().all(|b| *b == 0));
}

#[test]
fn qp_without_remote_read_access_is_invalid_request() {
    let (mut p, c) = pair_with(ConnectOptions {
        qp_access: AccessFlags::REMOTE_WRITE,
        ..ConnectOptions::default()
    });
    let r = SendOp::Read {
        remote_addr: c.mr_b.addr,
        rkey: c.mr_b.rkey,
    };
    p.a.ep
        .post_send(c.qa, SendWr::new(1, r).sge(sge(&c.mr_a, 0, 64)))
        .unwrap();
    assert!(p.drive(STEPS));
    assert_eq!(
        acks_from_b(&p),
        vec![Syndrome::Nak(NakCode::InvalidRequest)]
    );
    assert_eq!(
        statuses(&p.completions(true, c.cq_a)),
        vec![(1, WcStatus::RemInvReqErr)]
    );
}

#[test]
fn misaligned_atomic_is_invalid_request() {
    let (mut p, c) = pair();
    let fa = SendOp::FetchAdd {
        remote_addr: c.mr_b.addr + 4,
        rkey: c.mr_b.rkey,
        add: 1,
    };
    p.a.ep
        .post_send(c.qa, SendWr::new(1, fa).sge(sge(&c.mr_a, 0, 8)))
        .unwrap();
    assert!(p.drive(STEPS));
    assert_eq!(
        acks_from_b(&p),
        vec![Syndrome::Nak(NakCode::InvalidRequest)]
    );
    assert_eq!(
        statuses(&p.completions(true, c.cq_a)),
        vec![(1, WcStatus::RemInvReqErr)]
    );
    assert!(b_untouched(&p, &c));
}

#[test]
fn missing_receive_wqe_rnr_naks_until_retries_run_out() {
    let (mut p, c) = pair_with(ConnectOptions {
        rnr_retry: 2,
        min_rnr_timer: 1,
        ..ConnectOptions::default()
    });
    p.a.ep
        .post_send(c.qa, SendWr::new(1, SendOp::Send).inline(vec![7; 16]))
        .unwrap();
    assert!(p.drive(STEPS));
    // The first attempt and two retries are each answered with an RNR NAK carrying B's timer.
    let rnr = Syndrome::RnrNak(rocev2_core::wire::RnrTimer::from_code(1));
    assert_eq!(acks_from_b(&p), vec![rnr; 3]);
    assert_eq!(
        statuses(&p.completions(true, c.cq_a)),
        vec![(1, WcStatus::RnrRetryExcErr)]
    );
    assert_eq!(p.a.ep.qp(c.qa).unwrap().counters().rnr_naks_received, 3);
    // RNR is not an error at the responder: B stays in RTS.
    assert_eq!(p.b.ep.qp(c.qb).unwrap().state(), QpState::Rts);
    // Each retry waited the RNR timer (10 us) at least.
    assert!(
        p.now >= rocev2_core::time::Instant::from_nanos(20_000),
        "{}",
        p.now
    );
}

#[test]
fn rnr_retries_forever_until_a_receive_is_posted() {
    let (mut p, c) = pair_with(ConnectOptions {
        rnr_retry: 7,
        min_rnr_timer: 1,
        ..ConnectOptions::default()
    });
    p.a.ep
        .post_send(c.qa, SendWr::new(1, SendOp::Send).inline(vec![7; 16]))
        .unwrap();
    for _ in 0..200 {
        p.step();
    }
    assert!(p.completions(true, c.cq_a).is_empty(), "still retrying");
    p.b.ep
        .post_recv(
            c.qb,
            RecvWr {
                wr_id: 5,
                sg_list: vec![sge(&c.mr_b, 0, 64)],
            },
        )
        .unwrap();
    assert!(p.drive(STEPS));
    assert_eq!(
        statuses(&p.completions(true, c.cq_a)),
        vec![(1, WcStatus::Success)]
    );
    assert_eq!(
        statuses(&p.completions(false, c.cq_b)),
        vec![(5, WcStatus::Success)]
    );
    assert_eq!(&p.b.mem.get(c.mr_b.id).unwrap()[..16], &[7; 16]);
}

#[test]
fn dead_link_exhausts_retry_count() {
    let mut p = Pair::new(LinkConfig::default().loss(1.0), LinkConfig::default());
    let c = p
        .connect(ConnectOptions {
            retry_cnt: 3,
            timeout: 10,
            ..ConnectOptions::default()
        })
        .unwrap();
    p.a.ep
        .post_send(
            c.qa,
            SendWr::new(
                1,
                SendOp::Write {
                    remote_addr: c.mr_b.addr,
                    rkey: c.mr_b.rkey,
                },
            )
            .inline(vec![1; 8]),
        )
        .unwrap();
    p.a.ep
        .post_send(c.qa, SendWr::new(2, SendOp::Send).inline(vec![1; 8]))
        .unwrap();
    assert!(p.drive(STEPS));
    assert_eq!(
        statuses(&p.completions(true, c.cq_a)),
        vec![(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    let k = *p.a.ep.qp(c.qa).unwrap().counters();
    // The first transmission plus three retries, each ended by the 4.096 us * 2^10 timer.
    assert_eq!(k.timeouts, 4);
    let t = 4_096 << 10;
    assert!(
        p.now.as_nanos() >= 4 * t && p.now.as_nanos() < 5 * t,
        "{}",
        p.now
    );
}

#[test]
fn bad_lkey_is_local_protection_error_and_sends_nothing() {
    let (mut p, c) = pair();
    let bad = Sge {
        addr: c.mr_a.addr,
        length: 64,
        lkey: Lkey::new(c.mr_a.lkey.value() ^ 1),
    };
    p.a.ep
        .post_send(
            c.qa,
            SendWr::new(
                1,
                SendOp::Write {
                    remote_addr: c.mr_b.addr,
                    rkey: c.mr_b.rkey,
                },
            )
            .sge(bad),
        )
        .unwrap();
    assert!(p.drive(STEPS));
    assert_eq!(
        statuses(&p.completions(true, c.cq_a)),
        vec![(1, WcStatus::LocProtErr)]
    );
    assert!(
        p.trace.as_ref().unwrap().is_empty(),
        "nothing went on the wire"
    );
    assert!(b_untouched(&p, &c));
}

#[test]
fn message_longer_than_receive_buffer_is_length_error() {
    let (mut p, c) = pair();
    p.b.ep
        .post_recv(
            c.qb,
            RecvWr {
                wr_id: 3,
                sg_list: vec![sge(&c.mr_b, 0, 1000)],
            },
        )
        .unwrap();
    p.a.ep
        .post_send(
            c.qa,
            SendWr::new(1, SendOp::Send).sge(sge(&c.mr_a, 0, 2000)),
        )
        .unwrap();
    assert!(p.drive(STEPS));
    assert_eq!(
        acks_from_b(&p),
        vec![Syndrome::Nak(NakCode::InvalidRequest)]
    );
    let b = p.completions(false, c.cq_b);
    assert_eq!(
        (b[0].wr_id, b[0].status, b[0].opcode),
        (3, WcStatus::LocLenErr, WcOpcode::Recv)
    );
    assert_eq!(
        statuses(&p.completions(true, c.cq_a)),
        vec![(1, WcStatus::RemInvReqErr)]
    );
}

#[test]
fn modify_to_error_flushes_both_queues() {
    let (mut p, c) = pair();
    for i in 0..3 {
        p.b.ep
            .post_recv(
                c.qb,
                RecvWr {
                    wr_id: 10 + i,
                    sg_list: vec![],
                },
            )
            .unwrap();
    }
    let now = p.now;
    p.b.ep
        .modify_qp(c.qb, QpState::Error, &QpAttr::default(), now, &mut p.b.mem)
        .unwrap();
    let wcs = p.completions(false, c.cq_b);
    assert_eq!(
        statuses(&wcs),
        vec![
            (10, WcStatus::WrFlushErr),
            (11, WcStatus::WrFlushErr),
            (12, WcStatus::WrFlushErr)
        ]
    );
    assert!(wcs.iter().all(|w| w.opcode == WcOpcode::Recv));
    // A packet for a QP in Error is ignored; the sender's retries then run out.
    p.a.ep
        .post_send(c.qa, SendWr::new(1, SendOp::Send).inline(vec![1]))
        .unwrap();
    assert!(p.drive(STEPS));
    assert_eq!(
        statuses(&p.completions(true, c.cq_a)),
        vec![(1, WcStatus::RetryExcErr)]
    );
}

#[test]
fn cq_overrun_moves_qp_to_error() {
    let (mut p, c) = pair_with(ConnectOptions {
        cq_len: 2,
        ..ConnectOptions::default()
    });
    for i in 0..3 {
        p.a.ep
            .post_send(
                c.qa,
                SendWr::new(
                    i,
                    SendOp::Write {
                        remote_addr: c.mr_b.addr,
                        rkey: c.mr_b.rkey,
                    },
                )
                .inline(vec![1]),
            )
            .unwrap();
    }
    assert!(p.drive(STEPS));
    assert!(p.a.ep.cq(c.cq_a).unwrap().is_overrun());
    assert_eq!(p.a.ep.qp(c.qa).unwrap().state(), QpState::Error);
}

/// Two shards of one interface (`Endpoint::with_qpn_block`): B's QPs are numbered in its block
/// only, a frame for a QPN of another block counts as `mis_steered` (a steering mistake), one
/// for an unused QPN of B's own block as `unknown_qp`, and the transfer is intact afterwards.
#[test]
fn sharded_endpoint_counts_mis_steered_frames() {
    let link = LinkConfig::default().delay(Duration::from_micros(2));
    let mut p = Pair::new(link.clone(), link);
    p.trace = Some(Vec::new());
    p.a.ep = Endpoint::with_qpn_block(1, 2);
    p.b.ep = Endpoint::with_qpn_block(2, 3);
    let c = p.connect(ConnectOptions::default()).unwrap();
    assert_eq!(
        c.qa.value() >> 18,
        2,
        "A's QPN {:#x} in block 2",
        c.qa.value()
    );
    assert_eq!(
        c.qb.value() >> 18,
        3,
        "B's QPN {:#x} in block 3",
        c.qb.value()
    );
    assert_eq!(p.b.ep.qpn_block(), Some(3));
    let frame = first_inline_write(&mut p, &c, 7);
    let now = p.now;
    let retarget = |qpn: u32| {
        let (mut repr, payload) = FrameRepr::parse(&frame).unwrap();
        repr.roce.bth.dest_qp = rocev2_core::wire::Qpn::new(qpn);
        let mut f = vec![0; repr.buffer_len(payload.len()).unwrap()];
        repr.emit(&mut f, payload).unwrap();
        f
    };
    // Block 0 holds QPN 0x11, the first QPN of an unsharded endpoint.
    assert_eq!(
        p.b.ep.handle_frame(now, &retarget(0x11), &mut p.b.mem),
        Err(DropReason::MisSteered)
    );
    assert_eq!(
        p.b.ep
            .handle_frame(now, &retarget(c.qb.value() + 1), &mut p.b.mem),
        Err(DropReason::UnknownQp)
    );
    let s = p.b.ep.stats();
    assert_eq!(
        (
            s.drops(DropReason::MisSteered),
            s.drops(DropReason::UnknownQp)
        ),
        (1, 1)
    );
    assert_eq!(DropReason::MisSteered.name(), "mis_steered");
    assert!(b_untouched(&p, &c), "no dropped frame wrote memory");
    assert!(p.drive(STEPS));
    assert_eq!(&p.b.mem.get(c.mr_b.id).unwrap()[..32], &[7; 32]);
}

/// Posts a 32-byte inline WRITE of `byte`s from A to B's region and returns its one frame,
/// taken from the trace after one step (B has not handled it yet).
fn first_inline_write(p: &mut Pair, c: &Conn, byte: u8) -> Vec<u8> {
    p.a.ep
        .post_send(
            c.qa,
            SendWr::new(
                1,
                SendOp::Write {
                    remote_addr: c.mr_b.addr,
                    rkey: c.mr_b.rkey,
                },
            )
            .inline(vec![byte; 32]),
        )
        .unwrap();
    p.step();
    p.trace.as_ref().unwrap()[0].1.clone()
}

#[test]
fn foreign_frames_are_counted_drops() {
    let (mut p, c) = pair();
    let frame = first_inline_write(&mut p, &c, 9);
    let now = p.now;
    let mut corrupt = frame.clone();
    let last = corrupt.len() - 10;
    corrupt[last] ^= 0x01;
    assert_eq!(
        p.b.ep.handle_frame(now, &corrupt, &mut p.b.mem),
        Err(DropReason::BadIcrc)
    );
    let (mut repr, payload) = FrameRepr::parse(&frame).unwrap();
    repr.roce.bth.dest_qp = rocev2_core::wire::Qpn::new(0x999);
    let mut other_qp = vec![0; repr.buffer_len(payload.len()).unwrap()];
    repr.emit(&mut other_qp, payload).unwrap();
    assert_eq!(
        p.b.ep.handle_frame(now, &other_qp, &mut p.b.mem),
        Err(DropReason::UnknownQp)
    );
    let (mut repr, payload) = FrameRepr::parse(&frame).unwrap();
    if let rocev2_core::wire::IpRepr::V4 { src, .. } = &mut repr.ip {
        *src = core::net::Ipv4Addr::new(10, 9, 9, 9);
    }
    let mut spoofed = vec![0; repr.buffer_len(payload.len()).unwrap()];
    repr.emit(&mut spoofed, payload).unwrap();
    assert_eq!(
        p.b.ep.handle_frame(now, &spoofed, &mut p.b.mem),
        Err(DropReason::WrongSource)
    );
    assert_eq!(
        p.b.ep.handle_frame(now, &frame[..40], &mut p.b.mem),
        Err(DropReason::Truncated)
    );
    let s = p.b.ep.stats();
    assert_eq!(
        (
            s.drops(DropReason::BadIcrc),
            s.drops(DropReason::UnknownQp),
            s.drops(DropReason::WrongSource)
        ),
        (1, 1, 1)
    );
    assert!(b_untouched(&p, &c), "no dropped frame wrote memory");
    // The genuine frame still works afterwards.
    assert!(p.drive(STEPS));
    assert_eq!(&p.b.mem.get(c.mr_b.id).unwrap()[..32], &[9; 32]);
}

/// A paced pair, so a multi-packet message is still in flight when a test intervenes.
fn paced_pair() -> (Pair, Conn) {
    let link = LinkConfig::default()
        .delay(Duration::from_micros(2))
        .rate(rocev2_core::time::Rate::from_gbps(1));
    let mut p = Pair::new(link.clone(), link);
    p.trace = Some(Vec::new());
    let c = p.connect(ConnectOptions::default()).unwrap();
    (p, c)
}

#[test]
fn deregistering_the_target_mid_write_stops_placement() {
    let (mut p, c) = paced_pair();
    p.a.mem.get_mut(c.mr_a.id).unwrap().fill(0xee);
    let w = SendOp::Write {
        remote_addr: c.mr_b.addr,
        rkey: c.mr_b.rkey,
    };
    p.a.ep
        .post_send(c.qa, SendWr::new(1, w).sge(sge(&c.mr_a, 0, 8 * 1024)))
        .unwrap();
    while p.b.ep.qp(c.qb).unwrap().counters().rx_packets < 2 {
        assert!(p.step());
    }
    p.b.ep.deregister_mr(c.mr_b.id).unwrap();
    assert!(p.drive(STEPS));
    assert_eq!(
        statuses(&p.completions(true, c.cq_a)),
        vec![(1, WcStatus::RemAccessErr)]
    );
    assert_eq!(
        acks_from_b(&p).last(),
        Some(&Syndrome::Nak(NakCode::RemoteAccessError))
    );
    let m = p.b.mem.get(c.mr_b.id).unwrap();
    assert!(
        m[..2048].iter().all(|b| *b == 0xee),
        "what arrived before stays"
    );
    assert!(
        m[2048..8192].iter().all(|b| *b == 0),
        "nothing is placed after deregistration"
    );
}

#[test]
fn deregistering_the_source_mid_send_is_local_protection_error() {
    let (mut p, c) = paced_pair();
    p.b.ep
        .post_recv(
            c.qb,
            RecvWr {
                wr_id: 1,
                sg_list: vec![sge(&c.mr_b, 0, 16 * 1024)],
            },
        )
        .unwrap();
    p.a.ep
        .post_send(
            c.qa,
            SendWr::new(7, SendOp::Send).sge(sge(&c.mr_a, 0, 16 * 1024)),
        )
        .unwrap();
    // The send window lets A queue every packet at once, so go back to the first: a NAK or
    // timeout makes A rebuild packets, and every rebuild checks the SGEs again.
    p.step();
    p.a.ep.deregister_mr(c.mr_a.id).unwrap();
    let now = p.now;
    let mut dropped = 0;
    // Lose the in-flight packets so A must rebuild them from the deregistered source.
    while p
        .ab
        .poll_deliver(rocev2_core::time::Instant::FAR_FUTURE)
        .is_some()
    {
        dropped += 1;
    }
    assert!(dropped > 1, "packets were in flight");
    p.now = now;
    assert!(p.drive(STEPS));
    assert_eq!(
        statuses(&p.completions(true, c.cq_a)),
        vec![(7, WcStatus::LocProtErr)]
    );
}
