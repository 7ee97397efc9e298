//! `rocev2d run` on a real interface: it serves, counts garbage by drop reason, answers
//! `rocev2d stats` (text and JSON) on its unix socket, and stops cleanly on SIGTERM, removing
//! the socket.

mod common;
use common::*;
use rocev2_testbed::{Process, exec};
use std::time::Duration;

#[test]
fn wire_daemon_run_stats_and_sigterm() {
    if !need_root("wire_daemon_run_stats_and_sigterm") {
        return;
    }
    let tb = pair();
    let sock = format!("/tmp/rocev2d-test-{}.sock", std::process::id());
    let mut cmd = tb.command("h1", BIN).expect("command");
    cmd.args([
        "run",
        "--iface",
        &ifname(&tb, "h1"),
        "--datapath",
        "udp",
        "--stats-socket",
        &sock,
    ]);
    let mut d = Process::spawn(&mut cmd).expect("spawn daemon");
    d.wait_for_line(|l| l.starts_with("rocev2d: serving"), SETUP)
        .expect("daemon serving");
    // Three datagrams to port 4791 from h0: too short for a BTH.
    let h1 = tb.node("h1").expect("h1").ipv4().expect("v4");
    let mut send = tb.command("h0", "bash").expect("command");
    send.args([
        "-c",
        &format!("for i in 1 2 3; do printf 'xyz' > /dev/udp/{h1}/4791; done"),
    ]);
    exec::run(&mut send, SETUP).expect("send garbage");
    let mut snap = serde_json::Value::Null;
    for _ in 0..100 {
        let out = exec::run(
            std::process::Command::new(BIN).args(["stats", "--json", "--socket", &sock]),
            SETUP,
        )
        .expect("stats");
        assert!(out.status.success(), "{}", out.stderr);
        snap = serde_json::from_str(&out.stdout).expect("stats JSON");
        if snap["drops"]["truncated"] == 3 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(snap["drops"]["truncated"], 3, "{snap}");
    assert_eq!(snap["packets"]["rx_packets"], 3);
    assert_eq!(snap["datapath"], "udp");
    let text = exec::run(
        std::process::Command::new(BIN).args(["stats", "--socket", &sock]),
        SETUP,
    )
    .expect("stats text");
    assert!(text.stdout.contains("  truncated 3\n"), "{}", text.stdout);
    exec::run(
        std::process::Command::new("kill").args(["-TERM", &d.id().to_string()]),
        SETUP,
    )
    .expect("kill -TERM");
    let out = d.wait(SETUP).expect("daemon exits");
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("rocev2d: stopped"), "{}", out.stdout);
    assert!(!std::path::Path::new(&sock).exists(), "socket removed");
}
