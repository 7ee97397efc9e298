//! The switch-port program on synthetic frames through `BPF_PROG_TEST_RUN`: loading it proves
//! it passes this kernel's verifier; each test then checks the verdicts, the bytes that leave
//! the program and the counters. Needs root (CAP_BPF, CAP_NET_ADMIN); skips loudly otherwise.
//!
//! The modelled queue is set by hand before each packet with a last-update time in the future,
//! so it does not drain: every packet finds exactly the queue the test chose.

use rocev2_ebpf_common::{
    fault::{FaultConfig, from_ppb},
    queue::{NANOBITS_PER_BYTE, QueueState},
    red::{PROB_ONE, RedConfig, probability},
    switch::{Counter, HIST_BUCKETS},
};
use rocev2_ebpf_loader::switch::{IofdSpec, PortSpec, Shaper, Unattached};

const TC_ACT_OK: u32 = 0;
const TC_ACT_SHOT: u32 = 2;

const RED: RedConfig = RedConfig {
    kmin_bytes: 20_000,
    kmax_bytes: 100_000,
    pmax: PROB_ONE / 5,
    drop_non_ect: false,
};

fn spec() -> PortSpec {
    PortSpec {
        rate_bps: 10_000_000_000,
        buffer_bytes: 200_000,
        red: RED,
        hist_bucket_bytes: 10_000,
        faults: FaultConfig::default(),
        shaper: Shaper::None,
        iofd: None,
        dvl_threshold_bytes: None,
    }
}

fn need_root(test: &str) -> bool {
    // Effective uid 0, from /proc/self/status.
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false);
    if !root {
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "\nSKIPPED (needs root): {test}");
    }
    root
}

fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Ethernet + IPv4 + UDP + BTH + `payload` bytes + ICRC, ECN field `ecn`, to UDP port `port`.
fn frame_v4(ecn: u8, port: u16, payload: usize) -> Vec<u8> {
    let udp_len = 8 + 12 + payload + 4;
    let ip_len = 20 + udp_len;
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
    let mut ip = vec![
        0x45,
        (0x1a << 2) | ecn,
        (ip_len >> 8) as u8,
        ip_len as u8,
        0x12,
        0x34,
        0x40,
        0,
        64,
        17,
        0,
        0,
        10,
        0,
        0,
        1,
        10,
        0,
        0,
        2,
    ];
    let c = ipv4_checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0xc0, 0x00]);
    f.extend_from_slice(&port.to_be_bytes());
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    // BTH: RC SEND only, dest QP 0x11, PSN 7.
    f.extend_from_slice(&[0x04, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0, 0, 0, 7]);
    f.extend((0..payload).map(|i| i as u8));
    f.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    f
}

/// Ethernet + IPv6 + UDP + BTH, traffic class ECN `ecn`.
fn frame_v6(ecn: u8) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x86, 0xdd];
    let payload_len: u16 = 8 + 12 + 64 + 4;
    f.extend_from_slice(&[0x60 | 0x06, (ecn << 4), 0, 0]);
    f.extend_from_slice(&payload_len.to_be_bytes());
    f.extend_from_slice(&[17, 64]);
    f.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    f.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    f.extend_from_slice(&[0xc0, 0x00, 0x12, 0xb7]);
    f.extend_from_slice(&payload_len.to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&[0x04, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0, 0, 0, 7]);
    f.extend(std::iter::repeat_n(0x5a, 64));
    f.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    f
}

/// The queue a packet will find: `bytes`, never draining (last update in the far future).
fn frozen(bytes: u64) -> QueueState {
    QueueState {
        backlog_nbit: bytes * NANOBITS_PER_BYTE,
        last_ns: u64::MAX,
        max_bytes: 0,
    }
}

#[test]
fn switch_red_marking_follows_curve() {
    if !need_root("switch_red_marking_follows_curve") {
        return;
    }
    let mut prog = Unattached::load(&spec(), 1).expect("load (verifier)");
    let frame = frame_v4(2, 4791, 1000);
    let n = 20_000u64;
    let mut total_marked = 0;
    for q in [0u64, 20_000, 40_000, 60_000, 80_000, 100_000, 120_000] {
        let mut marked = 0u64;
        for _ in 0..n {
            prog.set_queue(&frozen(q)).expect("set queue");
            let (verdict, out) = prog.run(&frame).expect("run");
            assert_eq!(verdict, TC_ACT_OK);
            match out[15] & 3 {
                3 => {
                    marked += 1;
                    // The helper keeps the IPv4 checksum valid.
                    assert_eq!(ipv4_checksum(&out[14..34]), 0);
                }
                2 => assert_eq!(out, frame),
                other => panic!("ECN field became {other}"),
            }
        }
        total_marked += marked;
        let p = f64::from(probability(&RED, q as u32)) / f64::from(PROB_ONE);
        let measured = marked as f64 / n as f64;
        // Binomial: 5 standard deviations (and at least one packet's worth).
        let tol = 5.0 * (p * (1.0 - p) / n as f64).sqrt() + 1.0 / n as f64;
        println!("q = {q:6} B: p = {p:.4}, measured {measured:.4} ± {tol:.4}");
        assert!(
            (measured - p).abs() <= tol,
            "q = {q}: measured {measured}, curve {p}"
        );
    }
    let stats = prog.stats().expect("stats");
    assert_eq!(stats.counter(Counter::CeMarked), total_marked);
    assert_eq!(stats.counter(Counter::Packets), 7 * n);
    assert_eq!(stats.counter(Counter::EcnCapable), 7 * n);
    assert_eq!(stats.counter(Counter::Roce), 7 * n);
    assert_eq!(stats.counter(Counter::DropBuffer), 0);
    // Histogram: 10 kB buckets; each level's packets are in bucket q / 10 000.
    for (i, q) in [0u64, 20_000, 40_000, 60_000, 80_000, 100_000, 120_000]
        .iter()
        .enumerate()
    {
        let b = (q / 10_000) as usize;
        assert_eq!(stats.hist[0][b], n, "bucket {b} (level {i})");
        assert_eq!(stats.hist[1][b], n);
    }
    assert_eq!(stats.hist[2][12], n, "everything above K_max marked");
    assert_eq!(
        stats.hist[2][0] + stats.hist[2][2],
        0,
        "nothing at or below K_min"
    );
}

#[test]
fn switch_ipv6_marked_not_ect_untouched() {
    if !need_root("switch_ipv6_marked_not_ect_untouched") {
        return;
    }
    let mut prog = Unattached::load(&spec(), 1).expect("load");
    // Above K_max: probability 1.
    prog.set_queue(&frozen(150_000)).expect("set");
    let (v, out) = prog.run(&frame_v6(1)).expect("run");
    assert_eq!(v, TC_ACT_OK);
    assert_eq!((out[15] >> 4) & 3, 3, "IPv6 ECT(1) → CE");
    prog.set_queue(&frozen(150_000)).expect("set");
    let plain = frame_v4(0, 4791, 100);
    let (v, out) = prog.run(&plain).expect("run");
    assert_eq!((v, out), (TC_ACT_OK, plain), "Not-ECT passes unmarked");
    // Not RoCE but ECT (say, DCTCP over TCP... here UDP 9999): marked as well.
    prog.set_queue(&frozen(150_000)).expect("set");
    let (_, out) = prog.run(&frame_v4(2, 9999, 100)).expect("run");
    assert_eq!(out[15] & 3, 3);
    let s = prog.stats().expect("stats");
    assert_eq!(s.counter(Counter::CeMarked), 2);
    assert_eq!(s.counter(Counter::Roce), 2);
    assert_eq!(s.counter(Counter::EcnCapable), 2);
}

#[test]
fn switch_drop_non_ect_above_kmax() {
    if !need_root("switch_drop_non_ect_above_kmax") {
        return;
    }
    let mut s = spec();
    s.red.drop_non_ect = true;
    let mut prog = Unattached::load(&s, 1).expect("load");
    prog.set_queue(&frozen(150_000)).expect("set");
    assert_eq!(
        prog.run(&frame_v4(0, 4791, 100)).expect("run").0,
        TC_ACT_SHOT
    );
    prog.set_queue(&frozen(10_000)).expect("set");
    assert_eq!(prog.run(&frame_v4(0, 4791, 100)).expect("run").0, TC_ACT_OK);
    assert_eq!(prog.stats().expect("stats").counter(Counter::DropNonEct), 1);
}

#[test]
fn switch_tail_drop_beyond_buffer_and_queue_grows() {
    if !need_root("switch_tail_drop_beyond_buffer_and_queue_grows") {
        return;
    }
    let mut prog = Unattached::load(&spec(), 1).expect("load");
    let frame = frame_v4(2, 4791, 1000);
    let len = frame.len() as u64;
    // From an empty, non-draining queue, packets pile up until the buffer is full.
    prog.set_queue(&frozen(0)).expect("set");
    let fits = 200_000 / len;
    for i in 0..fits + 10 {
        let (v, _) = prog.run(&frame).expect("run");
        let want = if i < fits { TC_ACT_OK } else { TC_ACT_SHOT };
        assert_eq!(v, want, "packet {i} of {len} bytes");
    }
    let s = prog.stats().expect("stats");
    assert_eq!(s.counter(Counter::DropBuffer), 10);
    assert_eq!(s.queue_bytes, fits * len);
    assert_eq!(s.queue_max_bytes, fits * len);
    assert_eq!(s.counter(Counter::Bytes), (fits + 10) * len);
    // Histogram: the last bucket (open-ended) holds every arrival at ≥ 310 kB — none here;
    // the drops found the queue in bucket 19 (190–200 kB).
    assert!(s.hist[0][19] >= 10);
    assert_eq!(s.hist[0][HIST_BUCKETS as usize - 1], 0);
}

#[test]
fn switch_faults_loss_rate_blackhole_and_corruption() {
    if !need_root("switch_faults_loss_rate_blackhole_and_corruption") {
        return;
    }
    let frame = frame_v4(2, 4791, 200);
    // Loss 10%: binomial over 20 000 packets, 5σ = 1.06%.
    let mut s = spec();
    s.faults = FaultConfig {
        loss: from_ppb(100_000_000),
        seed: 1,
        ..FaultConfig::default()
    };
    let mut prog = Unattached::load(&s, 1).expect("load");
    let n = 20_000u32;
    let mut shot = 0u32;
    for _ in 0..n {
        prog.set_queue(&frozen(0)).expect("set");
        if prog.run(&frame).expect("run").0 == TC_ACT_SHOT {
            shot += 1;
        }
    }
    let rate = f64::from(shot) / f64::from(n);
    println!("loss: {shot} of {n} = {rate:.4}");
    assert!((rate - 0.1).abs() < 0.0106, "{rate}");
    assert_eq!(
        prog.stats().expect("stats").counter(Counter::FaultLoss),
        u64::from(shot)
    );

    // Blackhole: every RoCEv2 frame, no other.
    s.faults = FaultConfig {
        blackhole: true,
        ..FaultConfig::default()
    };
    let mut prog = Unattached::load(&s, 1).expect("load");
    assert_eq!(prog.run(&frame).expect("run").0, TC_ACT_SHOT);
    assert_eq!(prog.run(&frame_v4(2, 9999, 10)).expect("run").0, TC_ACT_OK);
    assert_eq!(
        prog.stats()
            .expect("stats")
            .counter(Counter::FaultBlackhole),
        1
    );

    // Corruption always: exactly one bit differs, after the BTH (byte 54 on), never before.
    s.faults = FaultConfig {
        corrupt: rocev2_ebpf_common::fault::PROB_MAX,
        seed: 9,
        ..FaultConfig::default()
    };
    let mut prog = Unattached::load(&s, 1).expect("load");
    let mut positions = std::collections::BTreeSet::new();
    for _ in 0..400 {
        prog.set_queue(&frozen(0)).expect("set");
        let (v, out) = prog.run(&frame).expect("run");
        assert_eq!(v, TC_ACT_OK);
        assert_eq!(out.len(), frame.len());
        let diff: Vec<(usize, u8)> = frame
            .iter()
            .zip(&out)
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .map(|(i, (a, b))| (i, a ^ b))
            .collect();
        assert_eq!(diff.len(), 1, "{diff:?}");
        let (at, x) = diff[0];
        assert_eq!(x.count_ones(), 1);
        assert!(
            at >= 14 + 20 + 8 + 12,
            "flipped byte {at} inside the headers"
        );
        positions.insert(at);
    }
    // Spread over the 204 corruptible bytes (payload + ICRC).
    assert!(positions.len() > 100, "{}", positions.len());
    assert_eq!(
        prog.stats().expect("stats").counter(Counter::FaultCorrupt),
        400
    );
}

const TC_ACT_REDIRECT: u32 = 7;

/// An RC WRITE packet: `opcode` (0x06 FIRST, 0x07 MIDDLE, 0x08 LAST, 0x0a ONLY), destination
/// QP `qp`, `tokens` in BTH Resv6a, a RETH announcing `len` on FIRST/ONLY.
fn write_packet(opcode: u8, qp: u32, tokens: u8, len: u32) -> Vec<u8> {
    let mut f = frame_v4(2, 4791, 0);
    let bth = 14 + 20 + 8;
    f[bth] = opcode;
    f[bth + 4] = tokens;
    f[bth + 5..bth + 8].copy_from_slice(&qp.to_be_bytes()[1..]);
    let icrc = f.split_off(f.len() - 4);
    if opcode == 0x06 || opcode == 0x0a {
        f.extend_from_slice(&[0u8; 12]);
        f.extend_from_slice(&len.to_be_bytes());
    }
    f.extend(std::iter::repeat_n(0xab, 256));
    f.extend_from_slice(&icrc);
    // Fix the IP and UDP lengths and the IP checksum.
    let ip_len = (f.len() - 14) as u16;
    f[16..18].copy_from_slice(&ip_len.to_be_bytes());
    f[24..26].copy_from_slice(&[0, 0]);
    let c = ipv4_checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
    f
}

#[test]
fn switch_iofd_deflects_short_messages_in_order() {
    if !need_root("switch_iofd_deflects_short_messages_in_order") {
        return;
    }
    let mut s = spec();
    s.iofd = Some(IofdSpec {
        threshold_bytes: 15_000,
        max_message_bytes: 8192,
        alternates: [1, 0, 0, 0],
    });
    let mut prog = Unattached::load(&s, 1).expect("load");
    let bth4 = 14 + 20 + 8 + 4;
    let mut run = |q: u64, f: &[u8]| {
        prog.set_queue(&frozen(q)).expect("set");
        prog.run(f).expect("run")
    };
    // Below the threshold: a short message waits in line.
    assert_eq!(run(15_000, &write_packet(0x06, 5, 4, 4096)).0, TC_ACT_OK);
    // Above: the start packet is redirected with one token spent…
    let (v, out) = run(20_000, &write_packet(0x06, 7, 4, 4096));
    assert_eq!(v, TC_ACT_REDIRECT);
    assert_eq!(out[bth4] & 0x3f, 3);
    // …and so is the rest of the message, whatever the queue now…
    let (v, out) = run(0, &write_packet(0x07, 7, 4, 0));
    assert_eq!((v, out[bth4] & 0x3f), (TC_ACT_REDIRECT, 3));
    assert_eq!(run(0, &write_packet(0x08, 7, 4, 0)).0, TC_ACT_REDIRECT);
    // …until its last packet freed the entry: the next message of the QP decides afresh.
    assert_eq!(run(0, &write_packet(0x07, 7, 4, 0)).0, TC_ACT_OK);
    // Long messages and packets without tokens are never deflected; nor is an ACK.
    assert_eq!(
        run(150_000, &write_packet(0x06, 8, 4, 100_000)).0,
        TC_ACT_OK
    );
    assert_eq!(run(150_000, &write_packet(0x0a, 9, 0, 256)).0, TC_ACT_OK);
    assert_eq!(run(150_000, &write_packet(0x11, 9, 4, 0)).0, TC_ACT_OK);
    // A single-packet message needs no entry.
    assert_eq!(
        run(150_000, &write_packet(0x0a, 10, 1, 256)).0,
        TC_ACT_REDIRECT
    );
    // Eight messages in flight fill the table; the ninth waits; live entries are kept.
    for qp in 100..108 {
        assert_eq!(
            run(150_000, &write_packet(0x06, qp, 4, 4096)).0,
            TC_ACT_REDIRECT
        );
    }
    assert_eq!(run(150_000, &write_packet(0x06, 200, 4, 4096)).0, TC_ACT_OK);
    for qp in 100..108 {
        assert_eq!(
            run(0, &write_packet(0x07, qp, 4, 0)).0,
            TC_ACT_REDIRECT,
            "qp {qp}"
        );
    }
    let st = prog.stats().expect("stats");
    let c = |k| st.counter(k);
    assert_eq!(c(Counter::IofdMessages), 1 + 1 + 8);
    assert_eq!(c(Counter::IofdDeflected), 3 + 1 + 8 + 8);
    assert_eq!(c(Counter::IofdLong), 1);
    assert_eq!(c(Counter::IofdNoTokens), 1);
    assert_eq!(c(Counter::IofdTableFull), 1);
    assert_eq!(c(Counter::HelperError), 0);
}

/// DVL (seed 003 slides 10, 12): a flow whose packet finds the normal queue at the threshold is
/// isolated (table entry, `skb->priority` = the CFQ band, bytes in the modelled CFQ); its next
/// packets follow it while the CFQ holds anything; another flow is untouched; the flow is
/// released when both queues are below the threshold and the CFQ is empty.
#[test]
fn switch_dvl_isolates_and_releases_flow() {
    use rocev2_ebpf_common::switch::CFQ_PRIORITY;
    if !need_root("switch_dvl_isolates_and_releases_flow") {
        return;
    }
    let mut port = Unattached::load(
        &PortSpec {
            dvl_threshold_bytes: Some(30_000),
            ..spec()
        },
        1,
    )
    .expect("load");
    let congested = frame_v4(2, 4791, 1000);
    // Same addresses, another destination port: another flow.
    let victim = frame_v4(2, 4792, 1000);
    let len = congested.len() as u64;
    let step = |port: &mut Unattached, normal: u64, cfq: u64, frame: &[u8]| {
        port.set_queue(&frozen(normal)).expect("queue");
        port.set_cfq(&frozen(cfq)).expect("cfq");
        port.run_priority(frame).expect("run")
    };

    // Below the threshold: normal queue, priority untouched.
    assert_eq!(step(&mut port, 29_999, 0, &congested), (TC_ACT_OK, 0));
    let s = port.stats().expect("stats");
    assert_eq!(s.counter(Counter::DvlIsolated), 0);
    assert!(s.isolated.is_empty());

    // At the threshold: isolated, into the CFQ band.
    assert_eq!(
        step(&mut port, 30_000, 0, &congested),
        (TC_ACT_OK, CFQ_PRIORITY)
    );
    let s = port.stats().expect("stats");
    assert_eq!(s.counter(Counter::DvlIsolated), 1);
    assert_eq!(s.counter(Counter::DvlCongested), 1);
    assert_eq!(s.cfq_bytes, len);
    assert_eq!(s.queue_bytes, 30_000, "nothing joined the normal queue");
    assert_eq!(s.isolated.len(), 1);
    let key = s.isolated[0].0;
    assert_eq!(&key.src[10..], &[0xff, 0xff, 10, 0, 0, 1]);
    assert_eq!(&key.dst[10..], &[0xff, 0xff, 10, 0, 0, 2]);
    assert_eq!(
        (key.src_port, key.dst_port, key.protocol, key.port),
        (0xc000, 4791, 17, 1)
    );

    // Another flow below the threshold stays normal, even with the CFQ busy.
    assert_eq!(step(&mut port, 10_000, 5_000, &victim), (TC_ACT_OK, 0));
    // The isolated flow stays isolated while its CFQ holds a byte, with the normal queue empty.
    assert_eq!(step(&mut port, 0, 1, &congested), (TC_ACT_OK, CFQ_PRIORITY));
    // ... and while the normal queue is at the threshold, CFQ empty.
    assert_eq!(
        step(&mut port, 30_000, 0, &congested),
        (TC_ACT_OK, CFQ_PRIORITY)
    );
    // Both below, CFQ empty, within the hold time: kept; after it: released, back to the
    // normal queue.
    assert_eq!(
        step(&mut port, 29_999, 0, &congested),
        (TC_ACT_OK, CFQ_PRIORITY)
    );
    std::thread::sleep(std::time::Duration::from_nanos(
        rocev2_ebpf_common::dvl::HOLD_NS,
    ));
    assert_eq!(step(&mut port, 29_999, 0, &congested), (TC_ACT_OK, 0));
    let s = port.stats().expect("stats");
    assert_eq!(s.counter(Counter::DvlReleased), 1);
    assert_eq!(s.counter(Counter::DvlCongested), 4);
    assert!(s.isolated.is_empty());

    // Each queue has its own buffer: a CFQ packet that does not fit in the CFQ is dropped, a
    // normal one beside a full CFQ is not.
    assert_eq!(step(&mut port, 40_000, 199_500, &congested).0, TC_ACT_SHOT);
    assert_eq!(step(&mut port, 10_000, 199_500, &victim), (TC_ACT_OK, 0));
    assert_eq!(port.stats().expect("stats").counter(Counter::DropBuffer), 1);
}
