//! The switch-port program on synthetic frames through `BPF_PROG_TEST_RUN`: loading it proves
//! it passes this kernel's verifier; each test then checks the verdicts, the bytes that leave
//! the program and the counters. Needs root (CAP_BPF, CAP_NET_ADMIN); skips loudly otherwise.
//!
//! The modelled queue is set by hand before each packet with a last-update time in the future,
//! so it does not drain: every packet finds exactly the queue the test chose.

use rocev2_core::wire::ip::ipv4_header_checksum;
use rocev2_ebpf_common::{
    fault::{FaultConfig, from_ppb},
    queue::{NANOBITS_PER_BYTE, QueueState},
    red::{PROB_ONE, RedConfig, probability},
    switch_port::{Counter, HIST_BUCKETS},
};
use rocev2_ebpf_loader::switch_port::{IofdSpec, PortSpec, Shaper, Unattached};

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
        dvl_accept: false,
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
    let c = ipv4_header_checksum(&ip);
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
                    assert_eq!(ipv4_header_checksum(&out[14..34]), 0);
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
    let c = ipv4_header_checksum(&f[14..34]);
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
    use rocev2_ebpf_common::switch_port::CFQ_PRIORITY;
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

/// A network namespace made for one test and deleted with it.
struct Netns(String);

impl Netns {
    fn new(tag: &str) -> Netns {
        let name = format!("rv2-{tag}-{}", std::process::id());
        ip(&["netns", "add", &name]);
        Netns(name)
    }

    /// `ip -n NS args…`, which must succeed.
    fn ip(&self, args: &[&str]) -> String {
        let mut all = vec!["-n", &self.0];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// Runs `f` on a thread that has entered the namespace (BPF_PROG_TEST_RUN then builds its
    /// packet there: the FIB lookup and the redirect see this namespace's routes and links).
    fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.0);
        std::thread::scope(|s| {
            s.spawn(|| {
                use std::os::fd::AsFd as _;
                let ns = std::fs::File::open(&path).expect("netns file");
                rustix::thread::move_into_link_name_space(
                    ns.as_fd(),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                )
                .expect("setns");
                f()
            })
            .join()
            .expect("thread")
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.0])
            .status();
    }
}

fn ip(args: &[&str]) -> String {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .expect("ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The frames of a pcap file (classic format, as `tcpdump -w` writes).
fn pcap_frames(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= bytes.len() {
        let caplen = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        out.push(bytes[at + 16..at + 16 + caplen].to_vec());
        at += 16 + caplen;
    }
    out
}

const PREV_HOP_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x77, 0x02];
const PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x77, 0x01];

/// DVL notification, the sending side (seed 003 slide 10 #5): in a namespace of its own, `n1`
/// plays the congested port and the route back to the flows' sources (10.0.0.1, fd00::1) leads
/// out of `n0` to a previous hop with a known MAC. The packet that isolates its flow leaves the
/// program byte for byte as it came, and a copy — the previous hop's MAC, `n0`'s MAC,
/// EtherType 0x88b5, the IP packet unchanged — leaves by `n0` (captured on its peer `n1`).
/// While isolated, the next notification waits for `NOTIFY_PERIOD_NS`; a flow with no route
/// back counts a failure and its packet is untouched too. IPv4 and IPv6.
#[test]
fn switch_dvl_notification_sent_upstream_original_untouched() {
    use rocev2_ebpf_common::dvl::{NOTIFY_ETHERTYPE, NOTIFY_PERIOD_NS};
    if !need_root("switch_dvl_notification_sent_upstream_original_untouched") {
        return;
    }
    let ns = Netns::new("dvltx");
    for cmd in [
        "link add n0 type veth peer name n1",
        "link set n0 address 02:00:00:00:77:01",
        "link set lo up",
        "link set n0 up",
        "link set n1 up",
        "addr add 10.77.0.1/24 dev n0",
        "addr add fd77::1/64 dev n0 nodad",
        "neigh add 10.77.0.2 lladdr 02:00:00:00:77:02 dev n0 nud permanent",
        "neigh add fd77::2 lladdr 02:00:00:00:77:02 dev n0 nud permanent",
        "route add 10.0.0.1/32 via 10.77.0.2 dev n0",
        "route add fd00::1/128 via fd77::2 dev n0",
    ] {
        ns.ip(&cmd.split(' ').collect::<Vec<_>>());
    }
    ip(&[
        "netns",
        "exec",
        &ns.0,
        "sysctl",
        "-qw",
        "net.ipv4.conf.all.forwarding=1",
        "net.ipv6.conf.all.forwarding=1",
    ]);
    let port: u32 = ns
        .ip(&["-o", "link", "show", "n1"])
        .split(':')
        .next()
        .and_then(|n| n.trim().parse().ok())
        .expect("ifindex");

    // Capture what arrives on n1 from n0 with the notification EtherType.
    let pcap = std::env::temp_dir().join(format!("{}.pcap", ns.0));
    let mut tcpdump = std::process::Command::new("ip")
        .args([
            "netns", "exec", &ns.0, "tcpdump", "-i", "n1", "-U", "-c", "3", "-w",
        ])
        .arg(&pcap)
        .args(["ether", "proto", "0x88b5"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("tcpdump");
    {
        use std::io::BufRead as _;
        let mut line = String::new();
        let mut err = std::io::BufReader::new(tcpdump.stderr.as_mut().expect("stderr"));
        while !line.contains("listening on") {
            line.clear();
            assert!(
                err.read_line(&mut line).expect("tcpdump stderr") > 0,
                "tcpdump quit"
            );
        }
    }

    let v4 = frame_v4(2, 4791, 1000);
    let v6 = frame_v6(2);
    let mut unrouted = frame_v4(2, 4791, 1000);
    unrouted[26] = 11; // source 11.0.0.1: no route back (the IP checksum is not checked)
    let (runs, stats) = ns.run(|| {
        let mut sw = Unattached::load(
            &PortSpec {
                dvl_threshold_bytes: Some(30_000),
                ..spec()
            },
            port,
        )
        .expect("load");
        let mut step = |frame: &[u8]| {
            sw.set_queue(&frozen(30_000)).expect("queue");
            sw.set_cfq(&frozen(0)).expect("cfq");
            sw.run(frame).expect("run")
        };
        let mut runs = vec![step(&v4), step(&v4)];
        std::thread::sleep(std::time::Duration::from_nanos(NOTIFY_PERIOD_NS));
        runs.push(step(&v4));
        runs.push(step(&v6));
        runs.push(step(&unrouted));
        (runs, sw.stats().expect("stats"))
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while tcpdump.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = tcpdump.kill();
            let _ = tcpdump.wait();
            panic!("tcpdump saw fewer than 3 notifications");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let frames = pcap_frames(&std::fs::read(&pcap).expect("pcap"));
    let _ = std::fs::remove_file(&pcap);

    // The packets themselves: passed, byte-identical.
    for (i, ((verdict, out), sent)) in runs.iter().zip([&v4, &v4, &v4, &v6, &unrouted]).enumerate()
    {
        assert_eq!(*verdict, TC_ACT_OK, "packet {i}");
        assert_eq!(out, sent, "packet {i} left changed");
    }
    let c = |k| stats.counter(k);
    // Isolation of v4 (sent), the second v4 packet within the period (none), the third after
    // it (sent), v6 isolation (sent), the unrouted flow's isolation (failed).
    assert_eq!(c(Counter::DvlIsolated), 3);
    assert_eq!(c(Counter::DvlNotifySent), 3);
    assert_eq!(c(Counter::DvlNotifyFailed), 1);
    assert_eq!(c(Counter::HelperError), 0);
    // The notifications on the wire: new Ethernet header, the IP packet unchanged.
    assert_eq!(frames.len(), 3);
    for (got, sent) in frames.iter().zip([&v4, &v4, &v6]) {
        assert_eq!(&got[..6], &PREV_HOP_MAC);
        assert_eq!(&got[6..12], &PORT_MAC);
        assert_eq!(&got[12..14], &NOTIFY_ETHERTYPE.to_be_bytes());
        assert_eq!(&got[14..], &sent[14..], "IP packet unchanged");
    }
}

/// A notification frame as a downstream port sends it for `frame`'s flow.
fn notification(frame: &[u8]) -> Vec<u8> {
    let mut n = frame.to_vec();
    n[12..14].copy_from_slice(&rocev2_ebpf_common::dvl::NOTIFY_ETHERTYPE.to_be_bytes());
    n
}

/// DVL notification, the accepting side: on a port configured to accept, the ingress program
/// puts a notification's flow into the port's table (refreshing its time when there) and drops
/// the frame; the port's egress then queues that flow's packets in the CFQ though its own
/// queue is empty. Malformed notifications are counted and dropped, a full table counted;
/// other frames pass untouched; a port not configured to accept ignores notifications.
#[test]
fn switch_dvl_notification_accepted_into_table() {
    use rocev2_ebpf_common::switch_port::CFQ_PRIORITY;
    if !need_root("switch_dvl_notification_accepted_into_table") {
        return;
    }
    let dvl = PortSpec {
        dvl_threshold_bytes: Some(30_000),
        dvl_accept: true,
        ..spec()
    };
    let mut sw = Unattached::load(&dvl, 7).expect("load");
    let v4 = frame_v4(2, 4791, 1000);
    let note = notification(&v4);
    assert_eq!(sw.run_accept(&note).expect("run").0, TC_ACT_SHOT);
    let s = sw.stats().expect("stats");
    assert_eq!(s.counter(Counter::DvlNotifyAccepted), 1);
    assert_eq!(s.isolated.len(), 1);
    let (key, since) = s.isolated[0];
    assert_eq!(&key.src[10..], &[0xff, 0xff, 10, 0, 0, 1]);
    assert_eq!(&key.dst[10..], &[0xff, 0xff, 10, 0, 0, 2]);
    assert_eq!(
        (key.src_port, key.dst_port, key.protocol, key.port),
        (0xc000, 4791, 17, 7)
    );
    // Again: refreshed, still one entry.
    std::thread::sleep(std::time::Duration::from_millis(1));
    assert_eq!(sw.run_accept(&note).expect("run").0, TC_ACT_SHOT);
    let s = sw.stats().expect("stats");
    assert_eq!(s.isolated.len(), 1);
    assert!(s.isolated[0].1 > since, "time refreshed");
    // The egress program now sends the flow to the CFQ with its queues empty (no detection).
    sw.set_queue(&frozen(0)).expect("queue");
    sw.set_cfq(&frozen(0)).expect("cfq");
    assert_eq!(
        sw.run_priority(&v4).expect("run"),
        (TC_ACT_OK, CFQ_PRIORITY)
    );
    assert_eq!(sw.stats().expect("stats").counter(Counter::DvlIsolated), 0);

    // IPv6.
    assert_eq!(
        sw.run_accept(&notification(&frame_v6(2))).expect("run").0,
        TC_ACT_SHOT
    );
    let s = sw.stats().expect("stats");
    assert_eq!(s.counter(Counter::DvlNotifyAccepted), 3);
    assert!(
        s.isolated
            .iter()
            .any(|(k, _)| k.src[0] == 0xfd && k.src[15] == 1)
    );

    // Malformed: cut inside the UDP ports, IPv4 header length below 5, IP version 5, nothing
    // after the Ethernet header.
    let mut short_ihl = note.clone();
    short_ihl[14] = 0x44;
    let mut version5 = note.clone();
    version5[14] = 0x55;
    for bad in [
        &note[..14 + 20 + 2],
        &short_ihl[..],
        &version5[..],
        &note[..14],
    ] {
        assert_eq!(
            sw.run_accept(bad).expect("run"),
            (TC_ACT_SHOT, bad.to_vec())
        );
    }
    let s = sw.stats().expect("stats");
    assert_eq!(s.counter(Counter::DvlNotifyMalformed), 4);
    assert_eq!(s.counter(Counter::DvlNotifyAccepted), 3);

    // Other frames pass untouched, uncounted.
    assert_eq!(sw.run_accept(&v4).expect("run"), (TC_ACT_OK, v4.clone()));

    // A full table: counted, dropped.
    for n in 0..rocev2_ebpf_common::dvl::CFT_ENTRIES {
        let mut other = notification(&frame_v4(2, 5000 + n as u16, 10));
        other[14 + 20] = 0x10; // another source port too
        sw.run_accept(&other).expect("run");
    }
    let s = sw.stats().expect("stats");
    assert_eq!(
        s.counter(Counter::DvlNotifyAccepted) + s.counter(Counter::DvlNotifyTableFull),
        3 + u64::from(rocev2_ebpf_common::dvl::CFT_ENTRIES)
    );
    assert_eq!(
        s.isolated.len(),
        rocev2_ebpf_common::dvl::CFT_ENTRIES as usize
    );
    assert!(s.counter(Counter::DvlNotifyTableFull) >= 1);

    // A DVL port not configured to accept: the notification passes as any other frame (the
    // stack drops an unknown EtherType), nothing enters its table.
    let mut plain = Unattached::load(
        &PortSpec {
            dvl_accept: false,
            ..dvl
        },
        7,
    )
    .expect("load");
    assert_eq!(
        plain.run_accept(&note).expect("run"),
        (TC_ACT_OK, note.clone())
    );
    let s = plain.stats().expect("stats");
    assert!(s.isolated.is_empty());
    assert_eq!(s.counter(Counter::DvlNotifyAccepted), 0);
}
