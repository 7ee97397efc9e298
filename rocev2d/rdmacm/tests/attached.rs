//! Preloaded Debian programs attached to `rocev2d` (`ROCEV2_DATAPATH=attach`, one daemon per
//! namespace of a pair, UDP datapath): `rping`, whose 20 pings come back validated and printed
//! as rping prints them, `rping -q` (the programs move their own QPs), `udaddy` (UD IDs through
//! SIDR), and `qperf -cm1`'s RC tests. qperf's
//! server forks a process per test, and each opens the device: in-process, each would open the
//! interface anew while the last one may still hold it; attached, the daemon owns the interface
//! and each process attaches.
//!
//! The daemon binary must be built beside the tests (`cargo build -p rocev2d`). Needs root
//! (namespaces); skipped loudly otherwise.

mod common;
use common::*;
use rocev2_testbed::{Process, need_root};

/// A `rocev2d run` over UDP in each host, serving.
fn daemons(tb: &rocev2_testbed::Testbed) -> [Process; 2] {
    ["h0", "h1"].map(|host| {
        let iface = device(tb, host).trim_start_matches("rocev2_").to_string();
        tb.daemon(host, &iface, "udp", TIMEOUT)
            .expect("daemon serving")
    })
}

#[test]
fn rping_attached_to_rocev2d() {
    if !need_root("rping_attached_to_rocev2d") {
        return;
    }
    let tb = pair();
    let mut daemons = daemons(&tb);
    let (s, c) = rping_pair(&tb, |host| preloaded(&tb, host, "attach", "rping"), 20);
    for d in &mut daemons {
        d.kill();
    }
    for out in [&s, &c] {
        assert!(out.stderr.contains("attached to rocev2d"), "{}", show(out));
    }
}

/// `rping -q` attached: the programs' own QPs, moved with `rdma_init_qp_attr`'s attributes,
/// connected through both daemons' CMs with only their numbers announced.
#[test]
fn rping_with_qps_the_programs_move_attached() {
    if !need_root("rping_with_qps_the_programs_move_attached") {
        return;
    }
    let tb = pair();
    let mut daemons = daemons(&tb);
    rping_pair(
        &tb,
        |host| {
            let mut c = preloaded(&tb, host, "attach", "rping");
            c.arg("-q");
            c
        },
        10,
    );
    for d in &mut daemons {
        d.kill();
    }
}

/// `udaddy` attached: the SIDR_REQ reaches the server's daemon, which hands it to the
/// application listening on its service; the answer goes back through the client's daemon to
/// the application that asked. 10 datagrams each way.
#[test]
fn udaddy_attached_to_rocev2d() {
    if !need_root("udaddy_attached_to_rocev2d") {
        return;
    }
    let tb = pair();
    let mut daemons = daemons(&tb);
    let mut s = preloaded(&tb, "h1", "attach", "udaddy");
    s.args(["-C", "10"]);
    let mut c = preloaded(&tb, "h0", "attach", "udaddy");
    c.args(["-s", &ip(&tb, "h1"), "-C", "10"]);
    let (s, c) = run_pair(s, c);
    for d in &mut daemons {
        d.kill();
    }
    for out in [&s, &c] {
        assert!(out.stderr.contains("attached to rocev2d"), "{}", show(out));
        assert!(
            out.stdout.contains("data transfers complete"),
            "{}",
            show(out)
        );
        assert!(out.stdout.contains("return status 0"), "{}", show(out));
    }
}

/// qperf's RC tests with their connections made through rdma_cm (`-cm1`), attached: its server in h1
/// (a daemon on TCP port 19765 that serves each test the client asks for), the client in h0;
/// each test reports a figure above zero. qperf checks no data.
#[test]
fn qperf_rc_tests_attached_to_rocev2d() {
    if !need_root("qperf_rc_tests_attached_to_rocev2d") {
        return;
    }
    let tb = pair();
    let mut daemons = daemons(&tb);
    let mut server = Process::spawn(&mut preloaded(&tb, "h1", "attach", "qperf")).expect("qperf");
    let netns = tb.node("h1").unwrap().netns.clone();
    rocev2_testbed::exec::wait_for_port(&netns, rocev2_testbed::exec::Proto::Tcp, 19765, TIMEOUT)
        .expect("qperf server listening");
    let mut c = preloaded(&tb, "h0", "attach", "qperf");
    c.args(["-cm1", "-t", "1", &ip(&tb, "h1")])
        .args(["rc_bw", "rc_lat", "rc_rdma_write_bw"]);
    let out = Process::spawn(&mut c)
        .expect("qperf client")
        .wait(TIMEOUT)
        .expect("qperf client");
    let srv = server.kill();
    for d in &mut daemons {
        d.kill();
    }
    assert!(
        out.status.success(),
        "{}\nserver {}",
        show(&out),
        show(&srv)
    );
    // "rc_bw:" then "    bw  =  130 MB/sec"; "rc_lat:" then "    latency  =  199 us".
    let figures: Vec<(&str, f64)> = out
        .stdout
        .lines()
        .filter_map(|l| {
            let (what, rest) = l.trim().split_once('=')?;
            Some((what.trim(), rest.split_whitespace().next()?.parse().ok()?))
        })
        .collect();
    let names: Vec<&str> = figures.iter().map(|f| f.0).collect();
    assert_eq!(names, ["bw", "latency", "bw"], "{}", show(&out));
    assert!(figures.iter().all(|f| f.1 > 0.0), "{}", show(&out));
}
