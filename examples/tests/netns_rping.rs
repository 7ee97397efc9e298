//! `rping` server in one namespace, client in the other, connected through the CM on QP1:
//! ten validated pings whose data both sides print as rdma-core's rping does, and a connect to
//! a port nobody listens on, refused by the peer's CM with a REJ.

mod common;
use common::*;
use rocev2_testbed::{Process, Testbed};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_rping");
const TIMEOUT: Duration = Duration::from_secs(120);

/// What rping prints for ping `n` of 64 bytes: `rdma-ping-N: ` then letters from the N-th
/// after 'A' (wrapping after 'z' to 'A'), 63 characters before the NUL.
fn ping_text(n: u32) -> String {
    let mut s = format!("rdma-ping-{n}: ");
    let mut c = b'A' + (n % 58) as u8;
    while s.len() < 63 {
        s.push(c as char);
        c = if c >= b'z' { b'A' } else { c + 1 };
    }
    s
}

/// Starts `rping -s` in `h1` on `port` and waits until it listens.
fn server(tb: &Testbed, datapath: &str, port: &str, extra: &[&str]) -> Process {
    let h1 = tb.node("h1").expect("h1").ipv4().expect("v4").to_string();
    let mut cmd = tb.command("h1", BIN).expect("command");
    cmd.args(["-s", "-d", "-a", &h1, "-p", port, "--datapath", datapath])
        .args(["--iface", &ifname(tb, "h1")])
        .args(extra);
    let mut p = Process::spawn(&mut cmd).expect("spawn server");
    p.wait_for_line(|l| l.contains("rdma_listen"), Duration::from_secs(30))
        .expect("server listening");
    p
}

fn client(tb: &Testbed, datapath: &str, port: &str, extra: &[&str]) -> rocev2_testbed::Captured {
    let h1 = tb.node("h1").expect("h1").ipv4().expect("v4").to_string();
    let mut cmd = tb.command("h0", BIN).expect("command");
    cmd.args(["-c", "-a", &h1, "-p", port, "--datapath", datapath])
        .args(["--iface", &ifname(tb, "h0")])
        .args(extra);
    Process::spawn(&mut cmd)
        .expect("spawn client")
        .wait(TIMEOUT)
        .expect("client exits")
}

fn pings(test: &str, datapath: &str) {
    if !need_root(test) {
        return;
    }
    let tb = pair();
    let s = server(&tb, datapath, "7174", &["-v", "-C", "10"]);
    let c = client(&tb, datapath, "7174", &["-v", "-V", "-C", "10"]);
    let s = s.wait(TIMEOUT).expect("server exits");
    let show = |c: &rocev2_testbed::Captured| {
        format!("{} ({}):\n{}\n{}", c.cmd, c.status, c.stdout, c.stderr)
    };
    assert!(
        s.status.success() && c.status.success(),
        "server {}\nclient {}",
        show(&s),
        show(&c)
    );
    let want = |prefix: &str| -> Vec<String> {
        (0..10)
            .map(|n| format!("{prefix}{}", ping_text(n)))
            .collect()
    };
    let lines = |out: &str| -> Vec<String> { out.lines().map(str::to_owned).collect() };
    assert_eq!(lines(&c.stdout), want("ping data: "), "{}", show(&c));
    assert_eq!(lines(&s.stdout), want("server ping data: "), "{}", show(&s));
}

#[test]
fn rping_udp_ten_validated_pings() {
    pings("rping_udp_ten_validated_pings", "udp");
}

#[test]
fn rping_packet_ten_validated_pings() {
    pings("rping_packet_ten_validated_pings", "packet");
}

/// The peer's CM answers a REQ for a port nobody listens on with REJ reason 8 (invalid
/// service ID); the client says so and fails.
#[test]
fn rping_unknown_port_is_rejected() {
    if !need_root("rping_unknown_port_is_rejected") {
        return;
    }
    let tb = pair();
    let mut s = server(&tb, "udp", "7174", &[]);
    let c = client(&tb, "udp", "7999", &["-C", "1"]);
    s.kill();
    assert!(!c.status.success(), "{}\n{}", c.stdout, c.stderr);
    assert!(
        c.stderr
            .contains(":7999: connection rejected (REJ reason 8: nobody listens on that port)"),
        "{}",
        c.stderr
    );
}

/// `rping -s -P` serves one client after another, each on its own QP (and thread), until it is
/// killed: every client's pings come back validated. (Two clients at once would need two
/// client hosts: in-process devices on one host cannot share the UDP port.)
#[test]
fn rping_persistent_server_serves_clients_in_turn() {
    if !need_root("rping_persistent_server_serves_clients_in_turn") {
        return;
    }
    let tb = pair();
    let mut s = server(&tb, "udp", "7175", &["-P"]);
    let spawn = || {
        let h1 = tb.node("h1").expect("h1").ipv4().expect("v4").to_string();
        let mut cmd = tb.command("h0", BIN).expect("command");
        cmd.args([
            "-c",
            "-a",
            &h1,
            "-p",
            "7175",
            "--datapath",
            "udp",
            "-v",
            "-V",
            "-C",
            "5",
        ])
        .args(["--iface", &ifname(&tb, "h0")]);
        Process::spawn(&mut cmd).expect("spawn client")
    };
    let clients: Vec<_> = (0..3)
        .map(|_| spawn().wait(TIMEOUT).expect("client exits"))
        .collect();
    s.kill();
    for c in &clients {
        assert!(
            c.status.success(),
            "{} ({}):\n{}\n{}",
            c.cmd,
            c.status,
            c.stdout,
            c.stderr
        );
        let want: Vec<String> = (0..5)
            .map(|n| format!("ping data: {}", ping_text(n)))
            .collect();
        assert_eq!(c.stdout.lines().collect::<Vec<_>>(), want, "{}", c.stderr);
    }
}
