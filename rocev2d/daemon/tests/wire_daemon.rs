//! `rocev2d run` on a real interface: it serves, counts garbage by drop reason, answers
//! `rocev2d stats` (text, JSON and Prometheus) on its unix socket, serves the same counters
//! over HTTP for Prometheus, and stops cleanly on SIGTERM, removing
//! the socket. With `--datapath xdp`: the steering counters in `rocev2d stats`, non-RoCE
//! traffic still reaching the kernel, and no XDP program or qdisc left after SIGTERM or SIGKILL.

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
        "--metrics",
        "127.0.0.1:9464",
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
    // The same counters in the Prometheus text format: from `rocev2d stats --prometheus`, and
    // scraped over HTTP from the daemon's metrics endpoint inside h1.
    let prom = exec::run(
        std::process::Command::new(BIN).args(["stats", "--prometheus", "--socket", &sock]),
        SETUP,
    )
    .expect("stats --prometheus");
    let mut scrape = tb.command("h1", "bash").expect("command");
    scrape.args([
        "-c",
        "exec 3<>/dev/tcp/127.0.0.1/9464; printf 'GET /metrics HTTP/1.1\\r\\nHost: h1\\r\\n\\r\\n' >&3; cat <&3",
    ]);
    let http = exec::run(&mut scrape, SETUP).expect("scrape /metrics");
    assert!(
        http.stdout.starts_with("HTTP/1.1 200 OK\r\n"),
        "{}",
        http.stdout
    );
    let body = http.stdout.split("\r\n\r\n").nth(1).expect("body");
    for text in [prom.stdout.as_str(), body] {
        let parsed = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
            .expect("Prometheus text format");
        let truncated = parsed
            .samples
            .iter()
            .find(|s| {
                s.metric == "rocev2_drops_total" && s.labels.get("reason") == Some("truncated")
            })
            .unwrap_or_else(|| panic!("no truncated drops in\n{text}"));
        assert!(
            matches!(truncated.value, prometheus_parse::Value::Counter(v) if v == 3.0),
            "{truncated:?}"
        );
    }
    // Live rates: two snapshots 0.2 s apart, one block per interval, until killed.
    let mut watch = Process::spawn(
        std::process::Command::new(BIN).args(["stats", "--watch", "0.2", "--socket", &sock]),
    )
    .expect("spawn stats --watch");
    watch
        .wait_for_line(|l| l.contains("(udp): rx ") && l.contains(" pkt/s "), SETUP)
        .expect("a --watch block");
    watch.kill();
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

/// `ip link show` and `tc qdisc show` of `dev` in `host`: what an XDP attachment changes.
fn link_and_qdisc(tb: &rocev2_testbed::Testbed, host: &str, dev: &str) -> (String, String) {
    let mut out = Vec::new();
    for args in [
        ["ip", "link", "show", "dev", dev],
        ["tc", "qdisc", "show", "dev", dev],
    ] {
        let mut c = tb.command(host, args[0]).expect("command");
        c.args(&args[1..]);
        let r = exec::run(&mut c, SETUP).expect(args[0]);
        assert!(r.status.success(), "{}", r.stderr);
        out.push(r.stdout);
    }
    (out.remove(0), out.remove(0))
}

/// `rocev2d run --datapath xdp`: the steering program is attached while it serves, its counters
/// and the core's drop reasons show in `rocev2d stats`, and nothing is left on the interface
/// after SIGTERM (clean shutdown drops the BPF link) nor after SIGKILL (the kernel releases the
/// link with the dead process's descriptors).
#[test]
fn wire_daemon_xdp_stats_and_detach_on_sigterm_and_sigkill() {
    let test = "wire_daemon_xdp_stats_and_detach_on_sigterm_and_sigkill";
    if !need_root(test) {
        return;
    }
    let tb = pair();
    let dev = ifname(&tb, "h1");
    let (link0, qdisc0) = link_and_qdisc(&tb, "h1", &dev);
    assert!(!link0.contains(" xdp"), "{link0}");
    let h1 = tb.node("h1").expect("h1").ipv4().expect("v4");
    for (round, signal) in ["TERM", "KILL"].into_iter().enumerate() {
        let sock = format!("/tmp/rocev2d-test-{}-{round}.sock", std::process::id());
        let mut cmd = tb.command("h1", BIN).expect("command");
        cmd.args([
            "run",
            "--iface",
            &dev,
            "--datapath",
            "xdp",
            "--stats-socket",
            &sock,
        ]);
        let mut d = Process::spawn(&mut cmd).expect("spawn daemon");
        d.wait_for_line(|l| l.starts_with("rocev2d: serving"), SETUP)
            .expect("daemon serving");
        let (link, _) = link_and_qdisc(&tb, "h1", &dev);
        assert!(link.contains(" xdp"), "steering program attached: {link}");
        // Other traffic still reaches h1's kernel through the program: a TCP connection to a
        // closed port is refused (RST) at once, not left to time out.
        let mut tcp = tb.command("h0", "bash").expect("command");
        tcp.args(["-c", &format!("exec 3<>/dev/tcp/{h1}/9")]);
        let refused = match exec::run(&mut tcp, SETUP) {
            Ok(r) => r.stderr,
            Err(e) => format!("{e:?}"),
        };
        assert!(
            refused.contains("refused"),
            "TCP through the XDP program: {refused}"
        );
        // Three datagrams to port 4791 from h0, too short for a BTH: the program redirects
        // them, the core counts them as truncated.
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
        assert_eq!(snap["datapath"], "xdp", "{snap}");
        assert_eq!(snap["drops"]["truncated"], 3, "{snap}");
        let c = &snap["datapath_counters"];
        assert_eq!(c["steer_redirected"], 3, "{snap}");
        assert_eq!(c["steer_no_socket"], 0, "{snap}");
        // The TCP segments (and any ARP) went to the kernel.
        assert!(c["steer_not_roce"].as_u64() > Some(0), "{snap}");
        // The kernel's UDP stack left the checksums of these local datagrams for offload.
        assert_eq!(c["rx_csum_unfinished"], 3, "{snap}");
        exec::run(
            std::process::Command::new("kill").args([&format!("-{signal}"), &d.id().to_string()]),
            SETUP,
        )
        .expect("kill");
        let out = d.wait(SETUP).expect("daemon exits");
        if signal == "TERM" {
            assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
            assert!(out.stdout.contains("rocev2d: stopped"), "{}", out.stdout);
        } else {
            let _ = std::fs::remove_file(&sock);
        }
        // The kernel may release a dead process's link a moment after it is reaped.
        let mut after = link_and_qdisc(&tb, "h1", &dev);
        for _ in 0..100 {
            if !after.0.contains(" xdp") {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
            after = link_and_qdisc(&tb, "h1", &dev);
        }
        assert!(
            !after.0.contains(" xdp"),
            "SIG{signal}: still attached: {}",
            after.0
        );
        assert_eq!(after.1, qdisc0, "SIG{signal}: qdiscs changed");
    }
}
