//! `write_bw --verify` moves 64 MiB by RDMA WRITE between two namespaces over each datapath;
//! the CRC-32 of what landed in the server's memory equals the client's.

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
