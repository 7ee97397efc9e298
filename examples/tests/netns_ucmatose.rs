//! `ucmatose` server in one namespace, client in the other, connected through the CM on QP1:
//! two connections, ten 100-byte messages each way on each, the server's disconnect seen by
//! the client; both print rdma-core's ucmatose progress lines and `return status 0`.

mod common;
use common::*;
use rocev2_testbed::{Captured, Process, Testbed};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_ucmatose");
const TIMEOUT: Duration = Duration::from_secs(120);

const SERVER_LINES: [&str; 9] = [
    "cmatose: starting server",
    "initiating data transfers",
    "completing sends",
    "receiving data transfers",
    "data transfers complete",
    "cmatose: disconnecting",
    "disconnected",
    "test complete",
    "return status 0",
];

const CLIENT_LINES: [&str; 7] = [
    "cmatose: starting client",
    "cmatose: connecting",
    "receiving data transfers",
    "sending replies",
    "data transfers complete",
    "test complete",
    "return status 0",
];

fn show(c: &Captured) -> String {
    format!("{} ({}):\n{}\n{}", c.cmd, c.status, c.stdout, c.stderr)
}

fn run(test: &str, datapath: &str, connections: &str) {
    if !need_root(test) {
        return;
    }
    let tb: Testbed = pair();
    let h1 = tb.node("h1").expect("h1").ipv4().expect("v4").to_string();
    let mut cmd = tb.command("h1", BIN).expect("command");
    cmd.args(["-b", &h1, "-c", connections, "--datapath", datapath])
        .args(["--iface", &ifname(&tb, "h1")]);
    let mut s = Process::spawn(&mut cmd).expect("spawn server");
    s.wait_for_line(|l| l.contains("starting server"), Duration::from_secs(30))
        .expect("server started");
    // The server listens a moment after it says it starts: a REQ before that is refused
    // (REJ reason 8), and the client tries again.
    let mut c;
    let mut tries = 0;
    loop {
        let mut cmd = tb.command("h0", BIN).expect("command");
        cmd.args(["-s", &h1, "-c", connections, "--datapath", datapath])
            .args(["--iface", &ifname(&tb, "h0")]);
        c = Process::spawn(&mut cmd)
            .expect("spawn client")
            .wait(TIMEOUT)
            .expect("client exits");
        tries += 1;
        if c.status.success() || !c.stderr.contains("REJ reason 8") || tries == 20 {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let s = s.wait(TIMEOUT).expect("server exits");
    assert!(
        s.status.success() && c.status.success(),
        "server {}\nclient {}",
        show(&s),
        show(&c)
    );
    let lines = |out: &str| -> Vec<String> { out.lines().map(str::to_owned).collect() };
    assert_eq!(lines(&s.stdout), SERVER_LINES, "{}", show(&s));
    assert_eq!(lines(&c.stdout), CLIENT_LINES, "{}", show(&c));
}

#[test]
fn ucmatose_udp_two_connections() {
    run("ucmatose_udp_two_connections", "udp", "2");
}

#[test]
fn ucmatose_packet_one_connection() {
    run("ucmatose_packet_one_connection", "packet", "1");
}
