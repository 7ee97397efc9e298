//! Mixed: Debian's `ibv_rc_pingpong` with `librocev2_ibverbs.so` preloaded against rocev2's own
//! `rc_pingpong`, in both roles, over the UDP datapath, `-g 1` (the IPv4-mapped GID) on both
//! sides. Each side's remote QPN/PSN is the other's local one, and the server's `-c` check sees
//! the client's bytes in its own buffer: with `-c` on both sides it reports nothing, with a
//! client that does not zero its pages it reports both pages of an 8 KiB message (rdma-core's
//! check, which our `rc_pingpong` mirrors).

mod common;
use common::*;
use rocev2_testbed::exec::run_server_client;
use rocev2_testbed::{Captured, Testbed};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_rc_pingpong");
const TIMEOUT: Duration = Duration::from_secs(120);

/// The preloaded library, built as a dev-dependency into `target/<profile>/deps/` (the copy
/// one level up is only refreshed by `cargo build`, so it may be stale).
fn library() -> PathBuf {
    let dir = PathBuf::from(BIN)
        .parent()
        .expect("target dir")
        .to_path_buf();
    [
        dir.join("deps/librocev2_ibverbs.so"),
        dir.join("librocev2_ibverbs.so"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .expect("librocev2_ibverbs.so built (dev-dependency rocev2-ibverbs)")
}

/// Debian's `ibv_rc_pingpong` in `host`, preloaded, `args` after the device and GID.
fn debian(tb: &Testbed, host: &str, args: &[&str]) -> Command {
    let mut cmd = tb.command(host, "env").expect("command");
    cmd.arg(format!("LD_PRELOAD={}", library().display()))
        .arg("ROCEV2_DATAPATH=udp")
        .arg("ibv_rc_pingpong")
        .args(["-d", &format!("rocev2_{}", ifname(tb, host)), "-g", "1"])
        .args(args);
    cmd
}

/// rocev2's `rc_pingpong` in `host`, `args` after the interface, datapath and GID.
fn ours(tb: &Testbed, host: &str, args: &[&str]) -> Command {
    let mut cmd = tb.command(host, BIN).expect("command");
    cmd.args(["-d", &ifname(tb, host), "--datapath", "udp", "-g", "1"])
        .args(args);
    cmd
}

fn show(c: &Captured) -> String {
    format!("{} ({}):\n{}\n{}", c.cmd, c.status, c.stdout, c.stderr)
}

/// Server in h1, client in h0 (given h1's address); both must succeed.
fn run(tb: &Testbed, mut server: Command, mut client: Command) -> (Captured, Captured) {
    let h1 = tb.node("h1").unwrap();
    client.arg(h1.ipv4().unwrap().to_string());
    run_server_client(&mut server, &h1.netns, PORT, &mut client, TIMEOUT)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The `QPN 0x…, PSN 0x…` part of an address line.
fn qpn_psn(out: &str, which: &str) -> String {
    let l = out
        .lines()
        .find(|l| l.starts_with(which))
        .unwrap_or_else(|| panic!("no {which:?} line in\n{out}"));
    let s = l.find("QPN").unwrap();
    l[s..l.find(", GID").unwrap()].to_string()
}

fn check_pair(s: &Captured, c: &Captured) {
    assert_eq!(
        qpn_psn(&s.stdout, "  local address:  "),
        qpn_psn(&c.stdout, "  remote address: ")
    );
    assert_eq!(
        qpn_psn(&c.stdout, "  local address:  "),
        qpn_psn(&s.stdout, "  remote address: ")
    );
    for out in [s, c] {
        assert!(out.stdout.contains("8192000 bytes in "), "{}", show(out));
        assert!(out.stdout.contains("1000 iters in "), "{}", show(out));
    }
}

#[test]
fn preloaded_ibv_rc_pingpong_against_rocev2_rc_pingpong() {
    if !need_root("preloaded_ibv_rc_pingpong_against_rocev2_rc_pingpong") {
        return;
    }
    let tb = pair();
    let args = ["-s", "4096", "-n", "1000", "-c"];
    // Debian's server, our client; then ours as server and Debian's as client.
    let (s, c) = run(&tb, debian(&tb, "h1", &args), ours(&tb, "h0", &args));
    check_pair(&s, &c);
    assert!(!s.stdout.contains("invalid data"), "{}", show(&s));
    let (s, c) = run(&tb, ours(&tb, "h1", &args), debian(&tb, "h0", &args));
    check_pair(&s, &c);
    assert!(!s.stdout.contains("invalid data"), "{}", show(&s));

    // A client that leaves its pages at 0x7b: the preloaded server's check finds them.
    let (s, _) = run(
        &tb,
        debian(&tb, "h1", &["-s", "8192", "-n", "20", "-c"]),
        ours(&tb, "h0", &["-s", "8192", "-n", "20"]),
    );
    let invalid: Vec<&str> = s
        .stdout
        .lines()
        .chain(s.stderr.lines())
        .filter(|l| l.starts_with("invalid data in page"))
        .collect();
    assert_eq!(
        invalid,
        ["invalid data in page 0", "invalid data in page 1"],
        "{}",
        show(&s)
    );
}
