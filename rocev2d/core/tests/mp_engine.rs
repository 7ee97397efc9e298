//! MP-RDMA (seed 001 §3) end to end through `testing::Pair`: negotiation, out-of-order
//! placement and in-order completion under reordering and loss, and the synchronise flag.

use rocev2_core::EndpointError;
use rocev2_core::cq::{WcOpcode, WcStatus};
use rocev2_core::mprdma::MpConfig;
use rocev2_core::qp::{ExtCaps, PostError, QpConfig, QpMode, RecvWr, SendOp, SendWr, Sge};
use rocev2_core::testing::{ConnectOptions, LinkConfig, Pair};
use rocev2_core::time::{Duration, Rate};
use rocev2_core::wire::frame::Frame;

fn mp_caps(pd: rocev2_core::mr::PdId, cq: rocev2_core::qp::CqId) -> QpConfig {
    QpConfig::new(pd, cq, cq).with_multipath(MpConfig::paper())
}

/// Multipath without the synchronise delay (α = 0): only the receiver's rule protects order.
fn mp_caps_no_delay(pd: rocev2_core::mr::PdId, cq: rocev2_core::qp::CqId) -> QpConfig {
    QpConfig::new(pd, cq, cq).with_multipath(MpConfig {
        sync_alpha: 0.0,
        ..MpConfig::paper()
    })
}

fn link(seed: u64) -> LinkConfig {
    LinkConfig::default()
        .delay(Duration::from_micros(2))
        .rate(Rate::from_gbps(10))
        .seed(seed)
}

fn options(peer_mp: bool) -> ConnectOptions {
    ConnectOptions {
        mr_len: 1 << 20,
        caps: mp_caps,
        peer_ext: ExtCaps {
            multipath: peer_mp,
            ..ExtCaps::default()
        },
        ..ConnectOptions::default()
    }
}

fn sge(mr: &rocev2_core::mr::MrInfo, off: u64, len: u32) -> Sge {
    Sge {
        addr: mr.addr + off,
        length: len,
        lkey: mr.lkey,
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u64).wrapping_mul(2654435761).wrapping_add(seed) >> 7) as u8)
        .collect()
}

fn source_ports(trace: &[(bool, Vec<u8>)], from_a: bool) -> std::collections::BTreeSet<u16> {
    trace
        .iter()
        .filter(|(a, _)| *a == from_a)
        .map(|(_, f)| {
            let fr = Frame::new_checked(&f[..]).unwrap();
            u16::from_be_bytes([fr.udp_header()[0], fr.udp_header()[1]])
        })
        .collect()
}

#[test]
fn mp_negotiated_only_when_both_offer() {
    let mut p = Pair::new(link(1), link(2));
    let c = p.connect(options(true)).unwrap();
    assert_eq!(p.a.ep.qp(c.qa).unwrap().mode(), QpMode::MultiPath);
    // A standard peer announces nothing: ordinary RC on one port, no REXT.
    let mut p = Pair::new(link(1), link(2));
    p.trace = Some(Vec::new());
    let c = p.connect(options(false)).unwrap();
    assert_eq!(p.a.ep.qp(c.qa).unwrap().mode(), QpMode::Rc);
    p.a.mem.get_mut(c.mr_a.id).unwrap()[..8192].copy_from_slice(&pattern(1, 8192));
    let wr = SendWr::new(
        1,
        SendOp::Write {
            remote_addr: c.mr_b.addr,
            rkey: c.mr_b.rkey,
        },
    )
    .sge(sge(&c.mr_a, 0, 8192));
    p.a.ep.post_send(c.qa, wr).unwrap();
    assert!(p.drive(100_000));
    let trace = p.trace.take().unwrap();
    assert_eq!(source_ports(&trace, true).len(), 1);
    for (_, f) in &trace {
        let fr = Frame::new_checked(&f[..]).unwrap();
        assert_eq!(
            fr.transport().bth().tver(),
            0,
            "no REXT towards a standard peer"
        );
    }
}

#[test]
fn mp_refuses_read_and_atomics() {
    let mut p = Pair::new(link(1), link(2));
    let c = p.connect(options(true)).unwrap();
    let wr = SendWr::new(
        1,
        SendOp::Read {
            remote_addr: c.mr_b.addr,
            rkey: c.mr_b.rkey,
        },
    )
    .sge(sge(&c.mr_a, 0, 64));
    assert_eq!(
        p.a.ep.post_send(c.qa, wr),
        Err(EndpointError::Post(PostError::Unsupported))
    );
}

/// WRITEs and SENDs over a link that reorders a third of the packets and loses 1%: data lands
/// where it belongs, every work request completes successfully and in order, and the packets
/// spread over many virtual paths.
#[test]
fn mp_reordered_lossy_writes_and_sends_complete_in_order() {
    let mut lost_total = 0;
    for seed in 0..6u64 {
        let ab = link(seed).reorder(0.3, Duration::from_micros(6)).loss(0.01);
        let ba = link(seed + 100).loss(0.01);
        let mut p = Pair::new(ab, ba);
        p.trace = Some(Vec::new());
        let c = p.connect(options(true)).unwrap();
        let src = pattern(seed, 1 << 19);
        p.a.mem.get_mut(c.mr_a.id).unwrap()[..1 << 19].copy_from_slice(&src);
        let mut expect = Vec::new();
        for i in 0..8u64 {
            let len = 20_000 + i as u32 * 3_001;
            let off = i << 16;
            let op = if i % 2 == 0 {
                SendOp::Write {
                    remote_addr: c.mr_b.addr + off,
                    rkey: c.mr_b.rkey,
                }
            } else {
                p.b.ep
                    .post_recv(
                        c.qb,
                        RecvWr {
                            wr_id: 100 + i,
                            sg_list: vec![sge(&c.mr_b, off, 1 << 16)],
                        },
                    )
                    .unwrap();
                SendOp::Send
            };
            p.a.ep
                .post_send(c.qa, SendWr::new(i, op).sge(sge(&c.mr_a, off, len)))
                .unwrap();
            expect.push((i, off as usize, len as usize));
        }
        assert!(p.drive(2_000_000), "seed {seed}: never idle");
        let wcs = p.completions(true, c.cq_a);
        let ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
        assert_eq!(ids, (0..8).collect::<Vec<_>>(), "seed {seed}");
        assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
        let rx = p.completions(false, c.cq_b);
        let rx_ids: Vec<u64> = rx.iter().map(|w| w.wr_id).collect();
        assert_eq!(rx_ids, [101, 103, 105, 107], "seed {seed}");
        for w in &rx {
            assert_eq!(w.opcode, WcOpcode::Recv);
            assert_eq!(w.byte_len, 20_000 + (w.wr_id as u32 - 100) * 3_001);
        }
        let dst = p.b.mem.get(c.mr_b.id).unwrap();
        for (i, off, len) in expect {
            assert_eq!(
                dst[off..off + len],
                src[off..off + len],
                "seed {seed} wr {i}"
            );
        }
        let ports = source_ports(p.trace.as_ref().unwrap(), true);
        assert!(ports.len() >= 16, "seed {seed}: {} VPs", ports.len());
        let snap = p.a.ep.qp(c.qa).unwrap().mp_snapshot().unwrap();
        let rx = p.b.ep.qp(c.qb).unwrap().mp_snapshot().unwrap().rx;
        let counters = p.a.ep.qp(c.qa).unwrap().counters();
        eprintln!(
            "seed {seed}: lost {} retransmits {} timeouts {} loss NACKs {} bitmap drops {} ood p99.9 {}",
            p.ab.stats().lost,
            counters.retransmits,
            counters.timeouts,
            rx.loss_nacks,
            rx.bitmap_drops,
            rx.ood_percentile(0.999)
        );
        // Every data packet the link lost was resent (the a→b link carries data only); a run
        // that lost only ACKs needs no retransmission, since later AACKs cover them.
        let lost = p.ab.stats().lost;
        lost_total += lost;
        assert!(
            counters.retransmits >= lost,
            "seed {seed}: {lost} lost, {} resent",
            counters.retransmits
        );
        let sent: u64 = snap.tx_vps.iter().map(|(_, v)| v.packets).sum();
        assert!(sent >= 8 * 20, "per-VP counters add up: {sent}");
    }
    assert!(lost_total > 0, "the loss was exercised");
}

/// seed 001 §3.4: a WRITE of data then a synchronised WRITE of a flag; with packets reordered
/// by up to 20 µs, the flag is never in memory before all the data, on every step of many runs:
/// with the sender's delay, and without it (the receiver's NACK alone keeps the order).
#[test]
fn mp_synchronised_flag_never_before_data() {
    for (caps, want_nacks) in [(mp_caps as fn(_, _) -> _, false), (mp_caps_no_delay, true)] {
        let nacks = sync_runs(caps);
        eprintln!("synchronise NACKs over 20 runs: {nacks}");
        if want_nacks {
            assert!(
                nacks > 0,
                "without the delay the receiver must refuse early flags"
            );
        }
    }
}

fn sync_runs(caps: fn(rocev2_core::mr::PdId, rocev2_core::qp::CqId) -> QpConfig) -> u64 {
    let len = 64 * 1024;
    let flag_off = 1 << 19;
    let mut sync_nacks = 0;
    for seed in 0..20u64 {
        let ab = link(seed).reorder(0.5, Duration::from_micros(20));
        let mut p = Pair::new(ab, link(seed + 1000));
        let c = p
            .connect(ConnectOptions {
                caps,
                ..options(true)
            })
            .unwrap();
        let src = pattern(seed, len);
        let mem = p.a.mem.get_mut(c.mr_a.id).unwrap();
        mem[..len].copy_from_slice(&src);
        mem[flag_off] = 1;
        let write = |wr_id, off: u64, len| {
            SendWr::new(
                wr_id,
                SendOp::Write {
                    remote_addr: c.mr_b.addr + off,
                    rkey: c.mr_b.rkey,
                },
            )
            .sge(sge(&c.mr_a, off, len))
        };
        p.a.ep.post_send(c.qa, write(1, 0, len as u32)).unwrap();
        p.a.ep
            .post_send(c.qa, write(2, flag_off as u64, 1).synchronise())
            .unwrap();
        let mut steps = 0;
        while p.step() {
            steps += 1;
            assert!(steps < 1_000_000, "seed {seed}: never idle");
            let dst = p.b.mem.get(c.mr_b.id).unwrap();
            if dst[flag_off] == 1 {
                assert_eq!(
                    dst[..len],
                    src[..],
                    "seed {seed}: flag visible before the data"
                );
            }
        }
        let rx = p.b.ep.qp(c.qb).unwrap().mp_snapshot().unwrap().rx;
        sync_nacks += rx.sync_nacks;
        let wcs = p.completions(true, c.cq_a);
        assert_eq!(wcs.len(), 2, "seed {seed}");
        assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
        assert_eq!(p.b.mem.get(c.mr_b.id).unwrap()[flag_off], 1);
    }
    sync_nacks
}

/// A responder error is RC's on a multipath QP too: a WRITE under a wrong R_Key ends both QPs,
/// the requester's with a remote access error.
#[test]
fn mp_bad_rkey_completes_with_remote_access_error() {
    let mut p = Pair::new(link(1), link(2));
    let c = p.connect(options(true)).unwrap();
    let wr = SendWr::new(
        7,
        SendOp::Write {
            remote_addr: c.mr_b.addr,
            rkey: rocev2_core::mr::Rkey::new(c.mr_b.rkey.value() ^ 0x100),
        },
    )
    .sge(sge(&c.mr_a, 0, 4096));
    p.a.ep.post_send(c.qa, wr).unwrap();
    assert!(p.drive(100_000));
    let wcs = p.completions(true, c.cq_a);
    assert_eq!(wcs.len(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (7, WcStatus::RemAccessErr));
}

/// seed 001 §3.4 "connection restart": after 3 idle RTTs the sender starts again from IW, and
/// (§3.2) spreads that window over IW random VPs since no ACK clock runs.
#[test]
fn mp_restarts_from_iw_on_random_vps_after_idle() {
    let mut p = Pair::new(link(1), link(2));
    p.trace = Some(Vec::new());
    let c = p.connect(options(true)).unwrap();
    let write = |wr_id, len| {
        SendWr::new(
            wr_id,
            SendOp::Write {
                remote_addr: c.mr_b.addr,
                rkey: c.mr_b.rkey,
            },
        )
        .sge(sge(&c.mr_a, 0, len))
    };
    p.a.ep.post_send(c.qa, write(1, 256 << 10)).unwrap();
    assert!(p.drive(1_000_000));
    let grown = p.a.ep.qp(c.qa).unwrap().mp_snapshot().unwrap().cwnd;
    assert_ne!(grown, MpConfig::paper().iw as f64);
    // Idle far longer than 3 RTTs (about 5 µs each here), then a new message.
    p.now += Duration::from_micros(500);
    p.trace = Some(Vec::new());
    p.a.ep.post_send(c.qa, write(2, 64 << 10)).unwrap();
    p.step();
    let snap = p.a.ep.qp(c.qa).unwrap().mp_snapshot().unwrap();
    let iw = MpConfig::paper().iw;
    assert_eq!(snap.in_flight, iw, "the whole IW leaves at once");
    assert_eq!(snap.cwnd, iw as f64, "restarted from IW");
    let first = p.trace.take().unwrap();
    let ports = source_ports(&first[..iw as usize], true);
    assert!(
        ports.len() >= iw as usize - 2,
        "IW over random VPs: {}",
        ports.len()
    );
    assert!(p.drive(1_000_000));
}

/// seed 001 §3.2 end to end: the receiver echoes CE in every ACK (E flag) and the sender takes
/// half a packet off cwnd for each, so with every data packet marked the window sits at its
/// floor; the per-VP counters see the marks on both sides, and the transfer still completes.
#[test]
fn mp_ecn_echo_shrinks_the_window() {
    let mut p = Pair::new(link(1).ce_mark(1.0), link(2));
    let c = p.connect(options(true)).unwrap();
    let wr = SendWr::new(
        1,
        SendOp::Write {
            remote_addr: c.mr_b.addr,
            rkey: c.mr_b.rkey,
        },
    )
    .sge(sge(&c.mr_a, 0, 128 << 10));
    p.a.ep.post_send(c.qa, wr).unwrap();
    assert!(p.drive(1_000_000));
    let tx = p.a.ep.qp(c.qa).unwrap().mp_snapshot().unwrap();
    let rx = p.b.ep.qp(c.qb).unwrap().mp_snapshot().unwrap();
    assert_eq!(tx.cwnd, 1.0, "every ACK carried ECE");
    let (sent, echoed): (u64, u64) = tx
        .tx_vps
        .iter()
        .fold((0, 0), |(s, e), (_, v)| (s + v.packets, e + v.ecn_marks));
    let marked: u64 = rx.rx_vps.iter().map(|(_, v)| v.ecn_marks).sum();
    assert!(
        sent >= 128 && echoed == marked && marked >= 128,
        "{sent} {echoed} {marked}"
    );
    let wcs = p.completions(true, c.cq_a);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status, WcStatus::Success);
}

/// Heavy loss both ways (15%): tails and lost retransmissions leave nothing to overflow the
/// bitmap, so early retransmission and, as the last resort, the retransmission timeout (§3.4)
/// finish the job; every WRITE completes with the right bytes.
#[test]
fn mp_heavy_loss_recovered_by_early_retransmit_and_rto() {
    let mut timeouts = 0;
    for seed in 0..8u64 {
        let mut p = Pair::new(link(seed).loss(0.15), link(seed + 50).loss(0.15));
        let c = p
            .connect(ConnectOptions {
                timeout: 4, // 65 µs
                ..options(true)
            })
            .unwrap();
        let src = pattern(seed, 64 << 10);
        p.a.mem.get_mut(c.mr_a.id).unwrap()[..64 << 10].copy_from_slice(&src);
        for i in 0..4u64 {
            let off = i * (16 << 10);
            let wr = SendWr::new(
                i,
                SendOp::Write {
                    remote_addr: c.mr_b.addr + off,
                    rkey: c.mr_b.rkey,
                },
            )
            .sge(sge(&c.mr_a, off, 16 << 10));
            p.a.ep.post_send(c.qa, wr).unwrap();
        }
        assert!(p.drive(2_000_000), "seed {seed}: never idle");
        let wcs = p.completions(true, c.cq_a);
        assert_eq!(wcs.len(), 4, "seed {seed}");
        assert!(
            wcs.iter().all(|w| w.status == WcStatus::Success),
            "seed {seed}: {wcs:?}"
        );
        assert_eq!(
            p.b.mem.get(c.mr_b.id).unwrap()[..64 << 10],
            src[..],
            "seed {seed}"
        );
        timeouts += p.a.ep.qp(c.qa).unwrap().counters().timeouts;
    }
    eprintln!("retransmission timeouts over 8 runs: {timeouts}");
    assert!(timeouts > 0, "the last resort was exercised");
}

/// A SEND that arrives before its receive WQE is dropped and RNR-NAKed; the sender waits (RNR
/// retry 7: forever, as in RC) and the SEND lands once the WQE is posted.
#[test]
fn mp_send_before_recv_waits_for_the_wqe() {
    let mut p = Pair::new(link(1), link(2));
    let c = p
        .connect(ConnectOptions {
            timeout: 4,
            ..options(true)
        })
        .unwrap();
    let src = pattern(3, 5000);
    p.a.mem.get_mut(c.mr_a.id).unwrap()[..5000].copy_from_slice(&src);
    let wr = SendWr::new(1, SendOp::Send).sge(sge(&c.mr_a, 0, 5000));
    p.a.ep.post_send(c.qa, wr).unwrap();
    for _ in 0..200 {
        p.step();
    }
    let rx = p.b.ep.qp(c.qb).unwrap().mp_snapshot().unwrap().rx;
    assert!(rx.rnr_drops > 0);
    assert!(
        p.completions(true, c.cq_a).is_empty(),
        "still waiting, no error"
    );
    let counters = *p.a.ep.qp(c.qa).unwrap().counters();
    assert!(
        counters.rnr_naks_received > 0 && counters.timeouts == 0,
        "{counters:?}"
    );
    p.b.ep
        .post_recv(
            c.qb,
            RecvWr {
                wr_id: 9,
                sg_list: vec![sge(&c.mr_b, 0, 8192)],
            },
        )
        .unwrap();
    assert!(p.drive(1_000_000));
    let wcs = p.completions(true, c.cq_a);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status, WcStatus::Success);
    let rx = p.completions(false, c.cq_b);
    assert_eq!((rx[0].wr_id, rx[0].byte_len), (9, 5000));
    assert_eq!(p.b.mem.get(c.mr_b.id).unwrap()[..5000], src[..]);
}

/// seed 001 §3.2 multipath ACK clocking: after the initial window's random VPs, packets go out
/// on the VPs their ACKs came back on; new VPs appear only through random draws (burst timer,
/// probes), so a clean transfer of 1024 packets uses hardly more VPs than IW.
#[test]
fn mp_ack_clocking_keeps_to_the_acks_vps() {
    let mut p = Pair::new(link(1), link(2));
    p.trace = Some(Vec::new());
    let c = p.connect(options(true)).unwrap();
    let wr = SendWr::new(
        1,
        SendOp::Write {
            remote_addr: c.mr_b.addr,
            rkey: c.mr_b.rkey,
        },
    )
    .sge(sge(&c.mr_a, 0, 1 << 20));
    p.a.ep.post_send(c.qa, wr).unwrap();
    assert!(p.drive(1_000_000));
    let snap = p.a.ep.qp(c.qa).unwrap().mp_snapshot().unwrap();
    let vps = source_ports(p.trace.as_ref().unwrap(), true);
    let sent: u64 = snap.tx_vps.iter().map(|(_, v)| v.packets).sum();
    eprintln!(
        "{sent} packets on {} VPs, {} random-VP sends",
        vps.len(),
        snap.random_vp_sends
    );
    assert!(sent >= 1024);
    assert!(
        vps.len() as u64 <= snap.random_vp_sends,
        "every VP came from a random draw"
    );
    assert!(snap.random_vp_sends <= 2 * MpConfig::paper().iw as u64);
}

/// seed 001 §3.4 early retransmission resends packets whose ACKs are overdue, not packets
/// merely in flight: on a clean link a lone 1 MiB WRITE sends its 1024 packets once, and a
/// ping-pong of 4 KiB WRITEs (each waits for the previous completion, so no new data ever
/// follows a message's tail) sends 4 packets per message, with no retransmission counted.
#[test]
fn mp_clean_link_sends_each_packet_once() {
    let mut p = Pair::new(link(1), link(2));
    let c = p.connect(options(true)).unwrap();
    let write = |wr_id, len| {
        SendWr::new(
            wr_id,
            SendOp::Write {
                remote_addr: c.mr_b.addr,
                rkey: c.mr_b.rkey,
            },
        )
        .sge(sge(&c.mr_a, 0, len))
    };
    let sent = |p: &Pair| -> u64 {
        let snap = p.a.ep.qp(c.qa).unwrap().mp_snapshot().unwrap();
        snap.tx_vps.iter().map(|(_, v)| v.packets).sum()
    };
    p.a.ep.post_send(c.qa, write(1, 1 << 20)).unwrap();
    assert!(p.drive(1_000_000));
    assert_eq!(p.completions(true, c.cq_a).len(), 1);
    assert_eq!(sent(&p), 1024, "1 MiB WRITE");
    for i in 0..50u64 {
        p.a.ep.post_send(c.qa, write(10 + i, 4096)).unwrap();
        assert!(p.drive(1_000_000));
        let wcs = p.completions(true, c.cq_a);
        assert_eq!(wcs.len(), 1);
        assert_eq!(wcs[0].status, WcStatus::Success);
    }
    assert_eq!(
        sent(&p),
        1024 + 50 * 4,
        "50 ping-pong messages of 4 packets"
    );
    assert_eq!(p.a.ep.qp(c.qa).unwrap().counters().retransmits, 0);
}

/// seed 001 §3.4 loss recovery when the retransmission is lost too: the test drops data PSN
/// 40 and then its first retransmission, while 8 MiB of WRITEs keep new data queued (so no
/// early retransmission applies). Packets sent after the lost retransmission overflow the
/// bitmap again and NACK PSN 40 again; that NACK re-enters recovery and the third copy lands,
/// with no retransmission timeout (an RC timeout of 67 ms, which the paper's RTO would be).
#[test]
fn mp_lost_retransmission_recovered_without_timeout() {
    use rocev2_core::wire::frame::FrameRepr;
    let mut p = Pair::new(link(1), link(2));
    let c = p
        .connect(ConnectOptions {
            mr_len: 8 << 20,
            timeout: 14,
            ..options(true)
        })
        .unwrap();
    let src = pattern(7, 8 << 20);
    p.a.mem.get_mut(c.mr_a.id).unwrap().copy_from_slice(&src);
    for i in 0..8u64 {
        let off = i << 20;
        let wr = SendWr::new(
            i,
            SendOp::Write {
                remote_addr: c.mr_b.addr + off,
                rkey: c.mr_b.rkey,
            },
        )
        .sge(sge(&c.mr_a, off, 1 << 20));
        p.a.ep.post_send(c.qa, wr).unwrap();
    }
    let victim = (ConnectOptions::default().psn_a + 40) & 0xff_ffff;
    let (mut copies, mut dropped) = (0, 0);
    let mut lose = |from_a: bool, f: &[u8]| {
        let Ok((r, _)) = FrameRepr::parse(f) else {
            return false;
        };
        let data = r
            .roce
            .bth
            .opcode
            .operation()
            .is_some_and(|o| o.is_request());
        if !from_a || !data || r.roce.bth.psn.value() != victim {
            return false;
        }
        copies += 1;
        let lost = copies <= 2;
        dropped += lost as u32;
        lost
    };
    let mut idle = false;
    for _ in 0..4_000_000 {
        if !p.step_losing(&mut lose) {
            idle = true;
            break;
        }
    }
    assert!(idle, "never idle");
    assert_eq!(dropped, 2, "the first send and the first retransmission");
    let wcs = p.completions(true, c.cq_a);
    assert_eq!(wcs.len(), 8);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert!(p.b.mem.get(c.mr_b.id).unwrap()[..] == src[..], "data");
    let counters = p.a.ep.qp(c.qa).unwrap().counters();
    let rx = p.b.ep.qp(c.qb).unwrap().mp_snapshot().unwrap().rx;
    eprintln!(
        "copies of the victim {copies}; retransmits {}, timeouts {}, loss NACKs {}, bitmap \
         drops {}, finished at {:?}",
        counters.retransmits, counters.timeouts, rx.loss_nacks, rx.bitmap_drops, p.now
    );
    assert_eq!(counters.timeouts, 0, "recovered without the RTO");
}
