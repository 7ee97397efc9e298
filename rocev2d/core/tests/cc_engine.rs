//! Congestion control inside the engine, end to end through `testing::Pair`: CE marks become
//! CNPs at the receiver, CNPs cut the sender's rate and the pacer enforces it; DCQCN+'s τ and
//! DASR's N travel in REXT only to peers that announced them; the rate recovers when marking
//! stops.

use rocev2_core::cc::{CcConfig, DasrParams, DcqcnParams, DcqcnPlusParams, NpConfig, ReceiverCc};
use rocev2_core::cq::WcStatus;
use rocev2_core::qp::{ExtCaps, SendOp, SendWr, Sge};
use rocev2_core::testing::{Conn, ConnectOptions, LinkConfig, Pair};
use rocev2_core::time::{Duration, Instant, Rate};
use rocev2_core::wire::frame::Ecn;
use rocev2_core::wire::{FrameRepr, Opcode, Operation};

const G10: Rate = Rate::from_gbps(10);

fn pair(cc: CcConfig, peer_ext: ExtCaps, rx: ReceiverCc) -> (Pair, Conn) {
    let link = LinkConfig::default()
        .delay(Duration::from_micros(2))
        .rate(G10);
    let mut p = Pair::new(link.clone(), link);
    p.trace = Some(Vec::new());
    let c = p
        .connect(ConnectOptions {
            cc: Some(cc),
            peer_ext,
            mr_len: 1 << 20,
            ..ConnectOptions::default()
        })
        .unwrap();
    p.b.ep.set_receiver_cc(rx);
    (p, c)
}

fn write(p: &mut Pair, c: &Conn, id: u64, len: u32) -> SendWr {
    let _ = p;
    SendWr::new(
        id,
        SendOp::Write {
            remote_addr: c.mr_b.addr,
            rkey: c.mr_b.rkey,
        },
    )
    .sge(Sge {
        addr: c.mr_a.addr,
        length: len,
        lkey: c.mr_a.lkey,
    })
}

/// Frames B sent, parsed.
fn from_b(p: &Pair) -> Vec<FrameRepr> {
    p.trace
        .as_ref()
        .unwrap()
        .iter()
        .filter(|(a, _)| !a)
        .map(|(_, f)| FrameRepr::parse(f).unwrap().0)
        .collect()
}

#[test]
fn dcqcn_ce_marks_become_cnps_that_cut_the_rate_then_it_recovers() {
    let rx = ReceiverCc::new(
        NpConfig::Dcqcn {
            interval: Duration::from_micros(50),
        },
        None,
    );
    let (mut p, c) = pair(
        CcConfig::Dcqcn(DcqcnParams::paper(G10)),
        ExtCaps::default(),
        rx,
    );
    p.ab.set_ce_mark(1.0);
    for i in 0..16 {
        let wr = write(&mut p, &c, i, 60 * 1024);
        p.a.ep.post_send(c.qa, wr).unwrap();
    }
    while p.now < Instant::from_nanos(300_000) {
        assert!(p.step());
    }
    let a = *p.a.ep.qp(c.qa).unwrap().counters();
    let b = *p.b.ep.qp(c.qb).unwrap().counters();
    // At most one CNP per 50 us (seed 002 §II-B 2): 300 us allow 6 (+1 at the start).
    assert!((3..=7).contains(&b.cnps_sent), "{b:?}");
    assert_eq!(a.cnps_received, b.cnps_sent);
    let snap = p.a.ep.qp(c.qa).unwrap().cc_snapshot(p.now).unwrap();
    assert!(
        snap.rate < Rate::from_gbps(3),
        "rate after repeated cuts: {}",
        snap.rate
    );
    assert_eq!(snap.cnps, b.cnps_sent);
    // Marking stops: everything completes and the rate recovers to line rate.
    p.ab.set_ce_mark(0.0);
    assert!(p.drive(2_000_000));
    assert_eq!(p.completions(true, c.cq_a).len(), 16);
    assert_eq!(
        p.a.ep.qp(c.qa).unwrap().cc_snapshot(p.now).unwrap().rate,
        G10
    );
    // ACKs and CNPs are not ECN-capable, so switches never mark them; CNPs carry BECN.
    let b_frames = from_b(&p);
    let cnps: Vec<_> = b_frames
        .iter()
        .filter(|f| f.roce.bth.opcode == Opcode::CNP)
        .collect();
    assert_eq!(cnps.len() as u64, b.cnps_sent);
    assert!(
        cnps.iter()
            .all(|f| f.roce.bth.becn && f.roce.ext.is_none() && f.roce.bth.dest_qp == c.qa)
    );
    assert!(b_frames.iter().all(|f| f.ip.ecn() == Ecn::NotEct));
}

#[test]
fn pacer_holds_the_configured_rate() {
    let (mut p, c) = pair(
        CcConfig::LineRate(Rate::from_gbps(1)),
        ExtCaps::default(),
        ReceiverCc::default(),
    );
    let wr = write(&mut p, &c, 1, 256 * 1024);
    p.a.ep.post_send(c.qa, wr).unwrap();
    assert!(p.drive(1_000_000));
    // 256 KiB plus headers at 1 Gbit/s take 2.1 ms; the 16 KiB burst allowance saves 0.13 ms.
    let elapsed = p.now.as_nanos();
    assert!((1_900_000..2_400_000).contains(&elapsed), "{elapsed} ns");
}

#[test]
fn dcqcn_plus_cnps_carry_tau_to_peers_that_asked() {
    let params = DcqcnPlusParams::paper(G10, 1024);
    let caps = ExtCaps {
        cnp_tau: true,
        ..ExtCaps::default()
    };
    let (mut p, c) = pair(
        CcConfig::DcqcnPlus(params),
        caps,
        ReceiverCc::new(NpConfig::DcqcnPlus(params), None),
    );
    p.ab.set_ce_mark(1.0);
    for i in 0..4 {
        let wr = write(&mut p, &c, i, 60 * 1024);
        p.a.ep.post_send(c.qa, wr).unwrap();
    }
    while p.now < Instant::from_nanos(200_000) {
        assert!(p.step());
    }
    let taus: Vec<Option<u32>> = from_b(&p)
        .iter()
        .filter(|f| f.roce.bth.opcode == Opcode::CNP)
        .map(|f| f.roce.ext.and_then(|e| e.tau_ns))
        .collect();
    // One congested flow: τ = l·δ = 1 · 1 µs (seed 002 eq. (11)); at most one CNP per 45 µs.
    assert!(!taus.is_empty() && taus.len() <= 5, "{taus:?}");
    assert!(taus.iter().all(|t| *t == Some(1000)), "{taus:?}");
    let snap = p.a.ep.qp(c.qa).unwrap().cc_snapshot(p.now).unwrap();
    assert_eq!(snap.cnps, taus.len() as u64);
}

#[test]
fn dart_lookahead_sets_n_and_the_sender_caps_at_line_over_n() {
    let caps = ExtCaps {
        dasr_n: true,
        lookahead: true,
        ..ExtCaps::default()
    };
    let rx = ReceiverCc::new(
        NpConfig::Dcqcn {
            interval: Duration::from_micros(50),
        },
        Some(DasrParams::paper(G10)),
    );
    let (mut p, c) = pair(CcConfig::Dart(DcqcnParams::paper(G10)), caps, rx);
    // A (id 0x0001, from 10.0.0.1) announces a 4-sender incast listing itself, 2 and 3.
    let wr = write(&mut p, &c, 1, 64 * 1024).lookahead(4, &[1, 2, 3]);
    p.a.ep.post_send(c.qa, wr).unwrap();
    assert!(p.drive(1_000_000));
    let ns: Vec<Option<u16>> = from_b(&p)
        .iter()
        .filter(|f| f.roce.bth.opcode == Opcode::rc(Operation::Acknowledge))
        .map(|f| f.roce.ext.and_then(|e| e.dasr_n))
        .collect();
    // N = 4 throughout: three listed members (A among them) and one announced by size only.
    // When A's message ends A leaves the set, but an ACK's recipient is always counted
    // (seed 000 §III-B, §III-D).
    assert!(!ns.is_empty() && ns.iter().all(|n| *n == Some(4)), "{ns:?}");
    let snap = p.a.ep.qp(c.qa).unwrap().cc_snapshot(p.now).unwrap();
    assert_eq!(snap.n, Some(4));
    // line/N · η: 10 Gbit/s / 4 · 0.95 (cc/dasr.rs, DASR_UTILISATION).
    assert_eq!(snap.rate, Rate::from_bps(2_375_000_000));
    // The look-ahead went out once, on the first packet, in REXT.
    let la = p
        .trace
        .as_ref()
        .unwrap()
        .iter()
        .filter(|(a, _)| *a)
        .filter_map(|(_, f)| FrameRepr::parse(f).ok())
        .filter(|(r, _)| r.roce.ext.is_some_and(|e| e.lookahead.is_some()))
        .count();
    assert_eq!(la, 1);
}

#[test]
fn standard_peer_never_sees_rext() {
    // DASR and DCQCN+ run at B, but A announced nothing: B's ACKs and CNPs stay plain IBA.
    let params = DcqcnPlusParams::paper(G10, 1024);
    let rx = ReceiverCc::new(NpConfig::DcqcnPlus(params), Some(DasrParams::paper(G10)));
    let (mut p, c) = pair(
        CcConfig::Dcqcn(DcqcnParams::paper(G10)),
        ExtCaps::default(),
        rx,
    );
    p.ab.set_ce_mark(0.5);
    let wr = write(&mut p, &c, 1, 256 * 1024).lookahead(4, &[2, 3]);
    p.a.ep.post_send(c.qa, wr).unwrap();
    assert!(p.drive(1_000_000));
    let all: Vec<FrameRepr> = p
        .trace
        .as_ref()
        .unwrap()
        .iter()
        .map(|(_, f)| FrameRepr::parse(f).unwrap().0)
        .collect();
    assert!(
        all.iter().any(|f| f.roce.bth.opcode == Opcode::CNP),
        "CNPs were sent"
    );
    assert!(
        all.iter()
            .all(|f| f.roce.bth.tver == 0 && f.roce.ext.is_none())
    );
}

#[test]
fn iofd_tokens_only_on_short_messages_and_the_peer_accepts_them() {
    use rocev2_core::qp::{IofdTokens, QpConfig};
    let link = LinkConfig::default()
        .delay(Duration::from_micros(2))
        .rate(G10);
    let mut p = Pair::new(link.clone(), link);
    p.trace = Some(Vec::new());
    let c = p
        .connect(ConnectOptions {
            mr_len: 1 << 20,
            caps: |pd, cq| {
                QpConfig::new(pd, cq, cq).with_iofd_tokens(IofdTokens {
                    tokens: 4,
                    max_message_bytes: 8192,
                })
            },
            ..ConnectOptions::default()
        })
        .unwrap();
    // A short WRITE (several packets), then a long one.
    let short = write(&mut p, &c, 1, 8192);
    p.a.ep.post_send(c.qa, short).unwrap();
    let long = write(&mut p, &c, 2, 64 * 1024);
    p.a.ep.post_send(c.qa, long).unwrap();
    assert!(p.drive(1_000_000));
    // Both completed: B accepted the frames (the ICRC masks Resv6a).
    let wcs = p.completions(true, c.cq_a);
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let data: Vec<FrameRepr> = p
        .trace
        .as_ref()
        .unwrap()
        .iter()
        .filter(|(a, _)| *a)
        .map(|(_, f)| FrameRepr::parse(f).unwrap().0)
        .filter(|f| f.roce.bth.opcode != Opcode::rc(Operation::Acknowledge))
        .collect();
    let tokens: Vec<u8> = data.iter().map(|f| f.roce.bth.deflection_tokens).collect();
    let short_pkts = tokens.iter().take_while(|&&t| t == 4).count();
    assert!(
        short_pkts >= 2,
        "short message has tokens on every packet: {tokens:?}"
    );
    assert!(
        tokens[short_pkts..].iter().all(|&t| t == 0) && tokens.len() > short_pkts,
        "long message has none: {tokens:?}"
    );
    // B's ACKs carry none.
    assert!(from_b(&p).iter().all(|f| f.roce.bth.deflection_tokens == 0));
}

#[test]
fn dart_auss_keeps_a_sender_whose_message_lost_a_packet() {
    // A writes one 4-packet message and its second packet is lost: B takes the first, sees the
    // third and the last out of sequence (and NAKs), then go-back-N resends the rest. The
    // AUSS counts messages by their first and last packets (seed 000 §III-B); the discarded
    // out-of-sequence copy of the last packet must not end the message, or A leaves the set
    // while its message is still in flight and the receiver hands out too large shares.
    let caps = ExtCaps {
        dasr_n: true,
        ..ExtCaps::default()
    };
    let rx = ReceiverCc::new(
        NpConfig::Dcqcn {
            interval: Duration::from_micros(50),
        },
        Some(DasrParams::paper(G10)),
    );
    let (mut p, c) = pair(CcConfig::Dart(DcqcnParams::paper(G10)), caps, rx);
    let wr = write(&mut p, &c, 1, 4096);
    p.a.ep.post_send(c.qa, wr).unwrap();
    let mut sent_by_a = 0;
    let mut checked = false;
    for _ in 0..100_000 {
        let busy = p.step_losing(|from_a, _| {
            sent_by_a += from_a as u32;
            from_a && sent_by_a == 2
        });
        // First, third and last packet delivered, the resend not yet: A's message is open.
        if !checked && p.ab.stats().delivered == 3 {
            let mut cc = p.b.ep.receiver_cc().clone();
            // An ACK to another sender (id 0x63) counts it and A.
            assert_eq!(cc.dasr_n(p.now, 0xffff, 0x63), Some(2));
            checked = true;
        }
        if !busy {
            break;
        }
    }
    assert!(checked, "never saw three of A's packets delivered");
    let wcs = p.completions(true, c.cq_a);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status, WcStatus::Success, "{wcs:?}");
    // The message ended: A has left the set.
    let mut cc = p.b.ep.receiver_cc().clone();
    assert_eq!(cc.dasr_n(p.now, 0xffff, 0x63), Some(1));
}
