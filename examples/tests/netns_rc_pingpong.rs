//! `rc_pingpong` server in one namespace, client in the other, over each datapath: both print
//! ibv_rc_pingpong's address lines and completion lines with the right byte and iteration
//! counts, and each side's remote QPN/PSN is the other's local one.

mod common;
use common::*;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_rc_pingpong");

/// `(qpn, psn)` of a `  local address:` / `  remote address:` line.
fn qpn_psn(out: &str, which: &str) -> String {
    let l = out
        .lines()
        .find(|l| l.starts_with(which))
        .unwrap_or_else(|| panic!("no {which:?} line in\n{out}"));
    assert!(l.contains("LID 0x0000, QPN 0x"), "{l}");
    assert!(l.contains(", GID ::ffff:10.0.0."), "{l}");
    let s = l.find("QPN").unwrap();
    l[s..l.find(", GID").unwrap()].to_string()
}

fn pingpong(test: &str, mode: &str) {
    if !need_root(test) {
        return;
    }
    let tb = pair();
    let (s, c) = run_pair(
        &tb,
        BIN,
        &["--datapath", mode, "-s", "4096", "-n", "1000"],
        Duration::from_secs(120),
    );
    for out in [&s.stdout, &c.stdout] {
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 4, "{out}");
        assert!(
            lines[2].starts_with("8192000 bytes in ") && lines[2].ends_with(" Mbit/sec"),
            "{out}"
        );
        assert!(
            lines[3].starts_with("1000 iters in ") && lines[3].ends_with(" usec/iter"),
            "{out}"
        );
    }
    assert_eq!(
        qpn_psn(&s.stdout, "  local address:  "),
        qpn_psn(&c.stdout, "  remote address: ")
    );
    assert_eq!(
        qpn_psn(&c.stdout, "  local address:  "),
        qpn_psn(&s.stdout, "  remote address: ")
    );
}

#[test]
fn rc_pingpong_udp_completes() {
    pingpong("rc_pingpong_udp_completes", "udp");
}

#[test]
fn rc_pingpong_packet_completes() {
    pingpong("rc_pingpong_packet_completes", "packet");
}

#[test]
fn rc_pingpong_xdp_completes() {
    pingpong("rc_pingpong_xdp_completes", "xdp");
}

/// `-c` as rdma-core's `ibv_rc_pingpong` means it: the client zeroes the first byte of each
/// page it sends once, and the server checks, after the loop, that every page it received
/// starts with 0 (buffers start as 0x7b). A client without `-c` sends 0x7b there, so the
/// server reports both pages of an 8 KiB message; with `-c` on both sides it reports none.
/// Both sides pass `-g 1`, which is the IPv4-mapped GID as on rdma_rxe (0 is link-local).
#[test]
fn rc_pingpong_chk_validates_like_rdma_core() {
    if !need_root("rc_pingpong_chk_validates_like_rdma_core") {
        return;
    }
    let tb = pair();
    let args = ["--datapath", "udp", "-s", "8192", "-n", "20", "-g", "1"];
    let chk: Vec<&str> = args.iter().copied().chain(["-c"]).collect();
    let (s, c) = run_pair_args(&tb, BIN, &chk, &chk, Duration::from_secs(60));
    for out in [&s.stdout, &c.stdout] {
        // Asserts the IPv4-mapped GID on both address lines.
        qpn_psn(out, "  local address:  ");
        qpn_psn(out, "  remote address: ");
    }
    assert!(!s.stdout.contains("invalid data"), "{}", s.stdout);
    assert_eq!(s.stdout.lines().count(), 4, "{}", s.stdout);

    let (s, c) = run_pair_args(&tb, BIN, &chk, &args, Duration::from_secs(60));
    let invalid: Vec<&str> = s
        .stdout
        .lines()
        .filter(|l| l.starts_with("invalid data in page"))
        .collect();
    assert_eq!(
        invalid,
        ["invalid data in page 0", "invalid data in page 1"],
        "{}",
        s.stdout
    );
    // Only the server validates, as in rdma-core.
    assert!(!c.stdout.contains("invalid data"), "{}", c.stdout);
}
