//! UD queue pairs end to end: two endpoints of a `testing::Pair`, each with a UD QP in RTS
//! (IBA Vol. 1 §9.8, §11.4), exchanging SENDs through the wire. Checks what the application
//! sees (the GRH area, payload, source QP, sender GID, immediate data), what is dropped and
//! counted (Q_Key mismatch, no or too small a receive buffer, packets for the other QP type),
//! and that random UD traffic over faulty links never panics and never corrupts data.

use proptest::prelude::*;
use rocev2_core::cq::{WcOpcode, WcStatus, WorkCompletion};
use rocev2_core::endpoint::DropReason;
use rocev2_core::mr::MrInfo;
use rocev2_core::qp::{Mtu, RecvWr, SendOp, SendWr, Sge, UdDest};
use rocev2_core::testing::{ConnectOptions, LinkConfig, Pair, UdConn};
use rocev2_core::time::Duration;
use rocev2_core::wire::{FrameRepr, Opcode, Qpn, grh};
use std::collections::BTreeSet;
use std::net::Ipv4Addr;

const QKEY: u32 = 0x1111_1111;

fn sge(mr: &MrInfo, off: u64, len: u32) -> Sge {
    Sge {
        addr: mr.addr + off,
        length: len,
        lkey: mr.lkey,
    }
}

fn recv(p: &mut Pair, on_b: bool, qpn: Qpn, mr: &MrInfo, wr_id: u64, off: u64, len: u32) {
    let h = if on_b { &mut p.b } else { &mut p.a };
    h.ep.post_recv(
        qpn,
        RecvWr {
            wr_id,
            sg_list: vec![sge(mr, off, len)],
        },
    )
    .unwrap();
}

fn to_b(c: &UdConn, q_key: u32) -> UdDest {
    UdDest {
        ah: c.ah_ab,
        remote_qpn: c.qb,
        remote_qkey: q_key,
    }
}

fn pair() -> (Pair, UdConn) {
    let mut p = Pair::new(LinkConfig::default(), LinkConfig::default());
    let c = p.ud(1 << 16, Mtu::Mtu1024, QKEY).unwrap();
    (p, c)
}

fn only(wcs: Vec<WorkCompletion>) -> WorkCompletion {
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    wcs[0]
}

/// A SEND with immediate lands after the 40-byte GRH area, which holds the IPv4 header the
/// frame arrived with at offset 20 (rdma_rxe's image); the completion counts both, names A's
/// QP and GID, and carries the immediate.
#[test]
fn ud_send_with_imm_delivers_grh_area_src_qp_and_payload() {
    let (mut p, c) = pair();
    p.trace = Some(Vec::new());
    let msg: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    p.a.mem.get_mut(c.mr_a.id).unwrap()[..1000].copy_from_slice(&msg);
    recv(&mut p, true, c.qb, &c.mr_b, 7, 64, 40 + 1024);
    let wr = SendWr::new(1, SendOp::SendWithImm { imm: 0xc0ffee })
        .sge(sge(&c.mr_a, 0, 1000))
        .ud(to_b(&c, QKEY));
    p.a.ep.post_send(c.qa, wr).unwrap();
    assert!(p.drive(1000));

    let sent = only(p.completions(true, c.cq_a));
    assert_eq!((sent.wr_id, sent.status), (1, WcStatus::Success));
    let got = only(p.completions(false, c.cq_b));
    assert_eq!(
        (got.wr_id, got.status, got.opcode),
        (7, WcStatus::Success, WcOpcode::Recv)
    );
    assert_eq!(got.byte_len, 1040);
    assert_eq!(got.imm_data, Some(0xc0ffee));
    assert_eq!(got.src_qp, c.qa);
    assert_eq!(got.qp_num, c.qb);
    assert!(got.with_grh());
    let sgid = got.ud.unwrap().sgid;
    assert_eq!(sgid, Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped());

    let trace = p.trace.take().unwrap();
    assert_eq!(trace.len(), 1, "one packet, no ACK");
    let frame = &trace[0].1;
    assert_eq!(frame[42], 0x65, "UD SEND Only with Immediate");
    let buf = &p.b.mem.get(c.mr_b.id).unwrap()[64..64 + 1040];
    assert_eq!(buf[..20], [0u8; 20]);
    assert_eq!(buf[20..40], frame[14..34], "the IPv4 header as received");
    assert_eq!(grh::source_gid(buf[..40].try_into().unwrap()), sgid);
    assert_eq!(buf[40..], msg[..]);
    assert_eq!(p.b.ep.ud_qp(c.qb).unwrap().counters().rx_packets, 1);
}

/// IBA §10.2.4: a packet whose Q_Key is not the receiver's is dropped and counted; a work
/// request's Q_Key with the high bit set sends the QP's own Q_Key instead.
#[test]
fn ud_qkey_mismatch_dropped_and_high_bit_uses_own_qkey() {
    let (mut p, c) = pair();
    recv(&mut p, true, c.qb, &c.mr_b, 7, 0, 40 + 16);
    let wrong = SendWr::new(1, SendOp::Send)
        .inline(vec![1; 16])
        .ud(to_b(&c, QKEY ^ 0x100));
    p.a.ep.post_send(c.qa, wrong).unwrap();
    assert!(p.drive(1000));
    assert_eq!(
        only(p.completions(true, c.cq_a)).status,
        WcStatus::Success,
        "UD gives the sender no word of the drop"
    );
    assert!(p.completions(false, c.cq_b).is_empty());
    assert_eq!(p.b.ep.stats().drops(DropReason::BadQkey), 1);

    let own = SendWr::new(2, SendOp::Send)
        .inline(vec![2; 16])
        .ud(to_b(&c, 0x8000_0000));
    p.a.ep.post_send(c.qa, own).unwrap();
    assert!(p.drive(1000));
    let got = only(p.completions(false, c.cq_b));
    assert_eq!((got.wr_id, got.byte_len), (7, 56));
    assert_eq!(p.b.ep.stats().total_drops(), 1);
}

/// IBA class D: with no receive buffer, or one too small for GRH area plus payload, the
/// message is dropped silently and counted; a too-small buffer stays posted.
#[test]
fn ud_missing_or_small_receive_buffer_dropped() {
    let (mut p, c) = pair();
    let send = |p: &mut Pair, id, len| {
        let wr = SendWr::new(id, SendOp::Send)
            .sge(sge(&c.mr_a, 0, len))
            .ud(to_b(&c, QKEY));
        p.a.ep.post_send(c.qa, wr).unwrap();
        assert!(p.drive(1000));
    };
    send(&mut p, 1, 8);
    assert_eq!(p.b.ep.stats().drops(DropReason::NoRecvWqe), 1);
    recv(&mut p, true, c.qb, &c.mr_b, 7, 0, 40 + 8);
    send(&mut p, 2, 9);
    assert_eq!(p.b.ep.stats().drops(DropReason::TooLong), 1);
    assert!(p.completions(false, c.cq_b).is_empty());
    send(&mut p, 3, 8);
    assert_eq!(only(p.completions(false, c.cq_b)).byte_len, 48);
    let sent: Vec<_> = p
        .completions(true, c.cq_a)
        .iter()
        .map(|w| w.wr_id)
        .collect();
    assert_eq!(sent, [1, 2, 3]);
}

/// A message longer than the MTU never leaves: LOC_LEN_ERR, the QP enters SQE, and RTS
/// brings it back (IBA §10.3.1).
#[test]
fn ud_send_longer_than_mtu_fails_locally() {
    let (mut p, c) = pair();
    let wr = |id, len| {
        SendWr::new(id, SendOp::Send)
            .sge(sge(&c.mr_a, 0, len))
            .ud(to_b(&c, QKEY))
    };
    p.a.ep.post_send(c.qa, wr(1, 1025)).unwrap();
    p.a.ep.post_send(c.qa, wr(2, 8)).unwrap();
    assert!(p.drive(1000));
    let got: Vec<_> = p
        .completions(true, c.cq_a)
        .iter()
        .map(|w| (w.wr_id, w.status))
        .collect();
    assert_eq!(got, [(1, WcStatus::LocLenErr), (2, WcStatus::WrFlushErr)]);
    assert_eq!(p.ab.stats().sent, 0);
    let now = p.now;
    let rts = rocev2_core::qp::QpAttr::default();
    p.a.ep
        .modify_qp(c.qa, rocev2_core::qp::QpState::Rts, &rts, now, &mut p.a.mem)
        .unwrap();
    recv(&mut p, true, c.qb, &c.mr_b, 7, 0, 64);
    p.a.ep.post_send(c.qa, wr(3, 8)).unwrap();
    assert!(p.drive(1000));
    assert_eq!(only(p.completions(false, c.cq_b)).wr_id, 7);
}

/// RC packets for a UD QP and UD packets for an RC QP are dropped as `wrong_transport`.
#[test]
fn ud_and_rc_packets_for_the_other_qp_type_dropped() {
    let (mut p, c) = pair();
    let rc = p.connect(ConnectOptions::default()).unwrap();
    p.trace = Some(Vec::new());
    recv(&mut p, true, c.qb, &c.mr_b, 7, 0, 64);
    let ud = SendWr::new(1, SendOp::Send)
        .inline(vec![1; 4])
        .ud(to_b(&c, QKEY));
    p.a.ep.post_send(c.qa, ud).unwrap();
    let rc_send = SendWr::new(2, SendOp::Send).inline(vec![2; 4]);
    p.a.ep.post_send(rc.qa, rc_send).unwrap();
    let now = p.now;
    let mut frames = Vec::new();
    let mut buf = Vec::new();
    while let Some(n) = p.a.ep.poll_transmit(now, &mut p.a.mem, &mut buf) {
        frames.push(buf[..n].to_vec());
    }
    assert_eq!(frames.len(), 2);
    for f in frames {
        let (mut repr, payload) = FrameRepr::parse(&f).unwrap();
        let is_ud = repr.roce.deth.is_some();
        repr.roce.bth.dest_qp = if is_ud { rc.qb } else { c.qb };
        let mut g = vec![0; repr.buffer_len(payload.len()).unwrap()];
        repr.emit(&mut g, payload).unwrap();
        assert_eq!(
            p.b.ep.handle_frame(now, &g, &mut p.b.mem),
            Err(DropReason::WrongTransport),
            "{}",
            repr.roce.bth.opcode
        );
    }
    assert_eq!(p.b.ep.stats().drops(DropReason::WrongTransport), 2);
}

/// Through the UDP-socket entry points the GRH area is rebuilt from the metadata: the same
/// bytes the frame path writes, since our sender writes IPv4 Identification 0.
#[test]
fn ud_datagram_entry_points_write_the_same_grh_area() {
    let (mut p, c) = pair();
    for (id, off) in [(7, 0), (8, 256)] {
        recv(&mut p, true, c.qb, &c.mr_b, id, off, 40 + 32);
    }
    for id in [1, 2] {
        let wr = SendWr::new(id, SendOp::Send)
            .inline(vec![id as u8; 32])
            .ud(to_b(&c, QKEY));
        p.a.ep.post_send(c.qa, wr).unwrap();
    }
    let now = p.now;
    let mut buf = Vec::new();
    let n = p.a.ep.poll_transmit(now, &mut p.a.mem, &mut buf).unwrap();
    assert_eq!(p.b.ep.handle_frame(now, &buf[..n], &mut p.b.mem), Ok(()));
    let (m, n) =
        p.a.ep
            .poll_transmit_datagram(now, &mut p.a.mem, &mut buf)
            .unwrap();
    assert_eq!(
        p.b.ep.handle_datagram(now, &m, &buf[..n], &mut p.b.mem),
        Ok(())
    );
    let mem = p.b.mem.get(c.mr_b.id).unwrap();
    let (frame_grh, datagram_grh) = (&mem[..40], &mem[256..296]);
    assert_eq!(
        frame_grh[20..22],
        [0x45, 26 << 2 | 2],
        "IPv4, DSCP 26, ECT(0)"
    );
    assert_eq!(datagram_grh, frame_grh);
    assert_eq!(mem[296..328], [2u8; 32]);
}

// ---------------------------------------------------------------------------------------------
// Random traffic

#[derive(Debug, Clone)]
enum Op {
    /// A posts a send of `len` bytes (inline when short enough) with immediate `wr_id`;
    /// `qkey` 0 = right, 1 = wrong, 2 = high bit.
    Send {
        len: u16,
        inline: bool,
        imm: bool,
        qkey: u8,
    },
    /// B posts a receive buffer of `len` bytes.
    Recv { len: u16 },
    /// The pair runs this many steps.
    Run(u8),
    /// A recorded A→B frame is re-sent to B with its Q_Key, destination QP, P_Key or opcode
    /// changed (valid ICRC).
    Inject { frame: u16, field: u8, value: u32 },
    /// A leaves SQE (if there) for RTS.
    Recover,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u16..1100, any::<bool>(), any::<bool>(), 0u8..3)
            .prop_map(|(len, inline, imm, qkey)| Op::Send { len, inline, imm, qkey }),
        4 => prop_oneof![0u16..1200, Just(40 + 1024)].prop_map(|len| Op::Recv { len }),
        3 => any::<u8>().prop_map(Op::Run),
        2 => (any::<u16>(), 0u8..4, any::<u32>())
            .prop_map(|(frame, field, value)| Op::Inject { frame, field, value }),
        1 => Just(Op::Recover),
    ]
}

fn links() -> impl Strategy<Value = LinkConfig> {
    (
        0.0..0.2f64,
        0.0..0.2f64,
        0.0..0.3f64,
        0.0..0.1f64,
        any::<u64>(),
    )
        .prop_map(|(loss, dup, reorder, corrupt, seed)| {
            LinkConfig::default()
                .delay(Duration::from_micros(2))
                .loss(loss)
                .duplicate(dup)
                .reorder(reorder, Duration::from_micros(5))
                .corrupt(corrupt)
                .seed(seed)
        })
}

/// `frame` with one header field changed, re-emitted with a valid ICRC.
fn mutate(frame: &[u8], field: u8, value: u32) -> Option<Vec<u8>> {
    let (mut repr, payload) = FrameRepr::parse(frame).ok()?;
    let r = &mut repr.roce;
    match field {
        0 => r.deth.as_mut()?.q_key = value,
        1 => r.bth.dest_qp = Qpn::new(value),
        2 => r.bth.p_key = value as u16,
        _ => {
            // Toggle immediate data: an injected immediate is u32::MAX, which no send uses.
            r.bth.opcode = Opcode(r.bth.opcode.0 ^ 1);
            r.immdt = match r.immdt {
                Some(_) => None,
                None => Some(rocev2_core::wire::ImmDtRepr { imm: u32::MAX }),
            };
        }
    }
    let mut out = vec![0; repr.buffer_len(payload.len()).ok()?];
    repr.emit(&mut out, payload).ok()?;
    Some(out)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the sequence of sends, receives, faults and injected frames: nothing panics,
    /// the pair goes idle, every send completes once, every receive completion names a posted
    /// buffer once, and a successful one holds GRH area plus exactly the bytes that were sent
    /// (each message is filled with its immediate's low byte).
    #[test]
    fn ud_random_traffic_never_panics(ops in prop::collection::vec(op(), 1..60), ab in links(), ba in links()) {
        let mut p = Pair::new(ab, ba);
        let c = p.ud(1 << 20, Mtu::Mtu1024, QKEY).unwrap();
        p.trace = Some(Vec::new());
        let (mut next_send, mut sends) = (0u64, BTreeSet::new());
        let mut recvs = std::collections::BTreeMap::new();
        let mut recv_off = 0u64;
        for op in ops {
            match op {
                Op::Send { len, inline, imm, qkey } => {
                    next_send += 1;
                    let id = next_send;
                    let q_key = [QKEY, QKEY ^ 1, 0x8000_0000][qkey as usize];
                    let sop = if imm { SendOp::SendWithImm { imm: id as u32 } } else { SendOp::Send };
                    let data = vec![id as u8; usize::from(len)];
                    let off = (id % 512) * 2048;
                    p.a.mem.get_mut(c.mr_a.id).unwrap()[off as usize..][..data.len()].copy_from_slice(&data);
                    let wr = if inline && len <= 64 {
                        SendWr::new(id, sop).inline(data)
                    } else {
                        SendWr::new(id, sop).sge(sge(&c.mr_a, off, u32::from(len)))
                    };
                    if p.a.ep.post_send(c.qa, wr.ud(to_b(&c, q_key))).is_ok() {
                        sends.insert(id);
                    }
                }
                Op::Recv { len } => {
                    let id = 1000 + recvs.len() as u64;
                    let off = recv_off % ((1 << 20) - 2048);
                    recv_off += 2048;
                    if p.b.ep.post_recv(c.qb, RecvWr { wr_id: id, sg_list: vec![sge(&c.mr_b, off, u32::from(len))] }).is_ok() {
                        recvs.insert(id, (off, len));
                    }
                }
                Op::Run(n) => {
                    for _ in 0..n {
                        p.step();
                    }
                }
                Op::Inject { frame, field, value } => {
                    let trace = p.trace.as_ref().unwrap();
                    let from_a: Vec<_> = trace.iter().filter(|(a, _)| *a).collect();
                    if let Some((_, f)) = from_a.get(usize::from(frame) % from_a.len().max(1))
                        && let Some(g) = mutate(f, field, value) {
                            let now = p.now;
                            let _ = p.b.ep.handle_frame(now, &g, &mut p.b.mem);
                        }
                }
                Op::Recover => {
                    let now = p.now;
                    let _ = p.a.ep.modify_qp(c.qa, rocev2_core::qp::QpState::Rts, &Default::default(), now, &mut p.a.mem);
                }
            }
        }
        prop_assert!(p.drive(100_000), "never idle");
        let mut done = BTreeSet::new();
        for w in p.completions(true, c.cq_a) {
            prop_assert!(sends.contains(&w.wr_id), "unknown send {w:?}");
            prop_assert!(done.insert(w.wr_id), "send completed twice {w:?}");
        }
        prop_assert_eq!(&done, &sends, "every send completes");
        let mut got = BTreeSet::new();
        for w in p.completions(false, c.cq_b) {
            let Some(&(off, cap)) = recvs.get(&w.wr_id) else {
                return Err(TestCaseError::fail(format!("unknown receive {w:?}")));
            };
            prop_assert!(got.insert(w.wr_id), "receive completed twice {w:?}");
            if w.status != WcStatus::Success {
                continue;
            }
            prop_assert!(w.byte_len >= 40 && w.byte_len <= u32::from(cap));
            prop_assert_eq!(w.src_qp, c.qa);
            let body = &p.b.mem.get(c.mr_b.id).unwrap()[(off + 40) as usize..(off + u64::from(w.byte_len)) as usize];
            if let Some(imm) = w.imm_data.filter(|i| *i != u32::MAX) {
                prop_assert!(body.iter().all(|b| *b == imm as u8), "payload of message {imm}");
            }
        }
    }
}
