//! `write_bw --verify` moves 64 MiB by RDMA WRITE between two namespaces over each datapath;
//! the CRC-32 of what landed in the server's memory equals the client's. With `-q 2` over AF_XDP
//! on veths of two queues, two engine shards per side each move their QP's data on their own
//! queue; `-q 2` on a veth of one queue is refused.

mod common;
use common::*;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_write_bw");

fn write_bw(test: &str, mode: &str) {
    if !need_root(test) {
        return;
    }
    let tb = pair();
    let (s, c) = run_pair(
        &tb,
        BIN,
        &["--datapath", mode, "--verify", "-s", "65536", "-n", "1024"],
        Duration::from_secs(180),
    );
    assert!(
        s.stdout.contains("received 67108864 bytes by RDMA WRITE"),
        "{}",
        s.stdout
    );
    assert!(s.stdout.contains("verify: OK"), "{}", s.stdout);
    assert!(c.stdout.contains("verify: OK (crc32 "), "{}", c.stdout);
    assert!(
        c.stdout
            .contains(&format!("RDMA_Write BW Test ({mode} datapath")),
        "{}",
        c.stdout
    );
    let row = c
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("65536"))
        .expect("result row");
    let mbs: f64 = row.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(mbs > 0.0, "{row}");
}

#[test]
fn write_bw_verify_udp_64mib_matches() {
    write_bw("write_bw_verify_udp_64mib_matches", "udp");
}

#[test]
fn write_bw_verify_packet_64mib_matches() {
    write_bw("write_bw_verify_packet_64mib_matches", "packet");
}

#[test]
fn write_bw_verify_xdp_64mib_matches() {
    write_bw("write_bw_verify_xdp_64mib_matches", "xdp");
}

/// The `shard K: …` line of one side's output.
fn shard_line(out: &str, k: u32) -> &str {
    out.lines()
        .find(|l| l.starts_with(&format!("shard {k}: ")))
        .unwrap_or_else(|| panic!("no shard {k} line in\n{out}"))
}

/// The number after `key ` in `line`.
fn counter(line: &str, key: &str) -> u64 {
    let at = line
        .find(&format!("{key} "))
        .unwrap_or_else(|| panic!("{key} in {line}"));
    line[at + key.len() + 1..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{key} value in {line}"))
}

/// Steering wrong on purpose, as RSS on a NIC does to a flow that hashes elsewhere: the
/// client's shard k binds queue k + 1 mod 2 (`--cross-queues`), so its WRITEs for the server's
/// QP k reach the server's queue 1 − k, the shard of the other QP, and the server's ACKs reach
/// the client's shard of the other QP too. Every such frame is handed to its QP's shard: both
/// CRCs verify, both sides forwarded frames, and none was dropped as `mis_steered`.
#[test]
fn write_bw_verify_xdp_crossed_queues_forwarded_to_their_shard() {
    if !need_root("write_bw_verify_xdp_crossed_queues_forwarded_to_their_shard") {
        return;
    }
    let tb = pair_with_queues(2);
    let args = [
        "--datapath",
        "xdp",
        "-q",
        "2",
        "--verify",
        "-s",
        "65536",
        "-n",
        "256",
    ];
    let mut crossed = args.to_vec();
    crossed.push("--cross-queues");
    let (s, c) = run_pair_args(&tb, BIN, &args, &crossed, Duration::from_secs(180));
    assert_eq!(s.stdout.matches("verify: OK").count(), 2, "{}", s.stdout);
    assert_eq!(
        c.stdout.matches("verify: OK (crc32 ").count(),
        2,
        "{}",
        c.stdout
    );
    for (side, out) in [("server", &s.stdout), ("client", &c.stdout)] {
        let (mut forwarded, mut taken) = (0, 0);
        for k in 0..2 {
            let l = shard_line(out, k);
            assert!(l.contains("forwarded to their shard"), "{side}: {l}");
            assert_eq!(counter(l, "mis_steered"), 0, "{side}: {l}");
            forwarded += counter(l, "rx_forwarded");
            taken += counter(l, "rx_from_shards");
        }
        assert!(forwarded > 0, "{side} forwarded nothing:\n{out}");
        assert!(taken > 0, "{side}: no shard took a forwarded frame:\n{out}");
    }
    // The client's shard k bound queue k + 1 mod 2.
    assert!(
        shard_line(&c.stdout, 0).contains("rx/tx queue 1 only"),
        "{}",
        c.stdout
    );
}

/// AF_PACKET shards each see every frame of the interface: a shard drops the frames of the
/// other's QPs quietly (`rx_other_shard`) instead of counting them as steering mistakes, and
/// both QPs' data verify.
#[test]
fn write_bw_verify_packet_two_qps_other_shards_frames_dropped_quietly() {
    if !need_root("write_bw_verify_packet_two_qps_other_shards_frames_dropped_quietly") {
        return;
    }
    let tb = pair_with_queues(2);
    let (s, c) = run_pair(
        &tb,
        BIN,
        &[
            "--datapath",
            "packet",
            "-q",
            "2",
            "--verify",
            "-s",
            "65536",
            "-n",
            "128",
        ],
        Duration::from_secs(180),
    );
    assert_eq!(s.stdout.matches("verify: OK").count(), 2, "{}", s.stdout);
    for (side, out) in [("server", &s.stdout), ("client", &c.stdout)] {
        for k in 0..2 {
            let l = shard_line(out, k);
            assert!(l.contains("their shard sees them too"), "{side}: {l}");
            assert!(counter(l, "rx_other_shard") > 0, "{side}: {l}");
            assert_eq!(counter(l, "mis_steered"), 0, "{side}: {l}");
            assert_eq!(counter(l, "rx_forwarded"), 0, "{side}: {l}");
        }
    }
}

#[test]
fn write_bw_verify_xdp_two_qps_one_queue_each() {
    if !need_root("write_bw_verify_xdp_two_qps_one_queue_each") {
        return;
    }
    let tb = pair_with_queues(2);
    let (s, c) = run_pair(
        &tb,
        BIN,
        &[
            "--datapath",
            "xdp",
            "-q",
            "2",
            "--verify",
            "-s",
            "65536",
            "-n",
            "512",
        ],
        Duration::from_secs(180),
    );
    assert_eq!(s.stdout.matches("verify: OK").count(), 2, "{}", s.stdout);
    assert_eq!(
        s.stdout
            .matches("received 33554432 bytes by RDMA WRITE")
            .count(),
        2,
        "{}",
        s.stdout
    );
    assert_eq!(
        c.stdout.matches("verify: OK (crc32 ").count(),
        2,
        "{}",
        c.stdout
    );
    assert!(
        c.stdout.contains("RDMA_Write BW Test (xdp datapath, 2 QPs"),
        "{}",
        c.stdout
    );
    assert!(c.stdout.contains("qp 0: 33554432 bytes"), "{}", c.stdout);
    assert!(c.stdout.contains("qp 1: 33554432 bytes"), "{}", c.stdout);
    let row = c
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("65536"))
        .expect("result row");
    assert_eq!(row.split_whitespace().nth(1), Some("1024"), "{row}");
    // Each shard's socket is bound to its queue alone, so what it received arrived on that
    // queue; none of it was for the other shard's QPNs, and nothing steered found no socket.
    for out in [&s.stdout, &c.stdout] {
        for k in 0..2 {
            let l = shard_line(out, k);
            assert!(l.contains(&format!("rx/tx queue {k} only")), "{l}");
            assert!(counter(l, "rx_packets") > 0, "{l}");
            assert_eq!(counter(l, "mis_steered"), 0, "{l}");
            assert_eq!(counter(l, "steer_no_socket"), 0, "{l}");
        }
    }
}

#[test]
fn write_bw_more_qps_than_queues_is_refused() {
    if !need_root("write_bw_more_qps_than_queues_is_refused") {
        return;
    }
    let tb = pair();
    for mode in ["xdp", "udp"] {
        let out = tb
            .command("h1", BIN)
            .expect("command")
            .args(["-d", &ifname(&tb, "h1"), "--datapath", mode, "-q", "2"])
            .output()
            .expect("write_bw runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{mode}: {err}");
        let want = match mode {
            "xdp" => "has 1 rx queue(s) in use, no queue 1",
            _ => "the UDP datapath binds port 4791 once per interface",
        };
        assert!(err.contains(want), "{mode}: {err}");
    }
}
