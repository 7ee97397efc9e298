//! DVL (seed 003) on live traffic: a congested flow is isolated and a victim flow sharing the
//! upstream switch's egress keeps its throughput.
//!
//! Topology: a dumbbell of routers, `a0, a1 — swa — swb — b0, b1`. The uplink `swa → swb` is a
//! 100 Mbit/s switch port, `swb → b0` a 20 Mbit/s one (the congested port). The congested flow
//! offers 150 Mbit/s of UDP a0 → b0 over IPv6; the victim 50 Mbit/s a1 → b1 over IPv4. Without DVL both share the
//! uplink's one queue (tail drop): the victim loses the share the congested flow takes. With
//! DVL, `swb`'s b0 port isolates the congested flow (its own detection) and sends congestion
//! notifications back toward a0 (seed 003 slide 10 #5); they reach `swa`'s uplink, attached
//! with `--dvl …,accept`, whose ingress program isolates the flow there too, and the uplink
//! serves the victim's normal queue before the congested-flow queue. Nothing in the test relays
//! anything: the notification travels as a frame.
//!
//! The uplink's detection threshold is set above its buffer so that it never isolates by
//! itself: its rule isolates whichever flow's packet crosses the threshold, which here may be
//! the victim's (docs/switch.md). Reordering is read from the iperf3 receivers' `out_of_order`.

mod common;
use common::{BIN, need_root};
use rocev2_ebpf_loader::switch_port::program_loaded;
use rocev2_testbed::topology::{LinkParams, Topology};
use rocev2_testbed::{Process, SwitchKind, Testbed, exec};
use serde_json::Value;
use std::time::Duration;

const T: Duration = Duration::from_secs(40);
const VICTIM_SECS: u64 = 3;
const FLOOD: &str = "150M";

fn port(tb: &Testbed, node: &str, peer: &str) -> String {
    tb.node(node)
        .expect("node")
        .port_toward(peer)
        .expect("port")
        .ifname
        .clone()
}

fn sw(tb: &Testbed, node: &str, args: &[&str]) -> exec::Captured {
    let mut cmd = tb.command(node, BIN).expect("command");
    cmd.arg("switch").args(args);
    exec::run(&mut cmd, T).expect("rocev2d switch")
}

fn addr(tb: &Testbed, host: &str) -> String {
    tb.node(host).expect("host").ipv4().expect("v4").to_string()
}

/// The congested flow runs over IPv6 (the notification's v6 path), the victim over IPv4.
fn addr6(tb: &Testbed, host: &str) -> String {
    tb.node(host).expect("host").ipv6().expect("v6").to_string()
}

/// An iperf3 server on `host`, one test, JSON on exit.
fn server(tb: &Testbed, host: &str, port: u16) -> Process {
    let mut srv = tb.command(host, "iperf3").expect("command");
    srv.args(["-s", "-1", "-J", "-p", &port.to_string()]);
    let srv = Process::spawn(&mut srv).expect("iperf3 -s");
    exec::wait_for_port(
        &tb.node(host).expect("host").netns,
        exec::Proto::Tcp,
        port,
        T,
    )
    .expect("iperf3 listening");
    srv
}

fn client(tb: &Testbed, from: &str, to: &str, port: u16, rate: &str, secs: u64) -> Process {
    let mut cli = tb.command(from, "iperf3").expect("command");
    cli.args(["-c", to, "-p", &port.to_string(), "-u", "-b", rate])
        .args(["-l", "1400", "-t", &secs.to_string()]);
    Process::spawn(&mut cli).expect("iperf3 -c")
}

/// The receiver's summary: (bits/s received, out-of-order packets if reported).
fn received(srv: Process) -> (f64, Option<u64>) {
    let out = srv.wait(T).expect("iperf3 server");
    let v: Value = out.json().expect("iperf3 JSON");
    // iperf3 3.12's receiver: bytes in `sum_received`, reordering per stream.
    let sum = &v["end"]["sum_received"];
    let bytes = sum["bytes"].as_f64().unwrap_or(0.0);
    let secs = sum["seconds"].as_f64().unwrap_or(1.0).max(0.001);
    (
        bytes * 8.0 / secs,
        v["end"]["streams"][0]["udp"]["out_of_order"].as_u64(),
    )
}

/// Makes every veth of the testbed deliver in the order it was sent: its received packets go to
/// CPU 0's backlog (RPS). A veth hands a packet to the backlog of the CPU that transmits it, so
/// two packets of one flow sent from different CPUs (the sender migrated, or the shaper's
/// dequeue ran on the other CPU) are processed out of order when one CPU's softirq work is
/// deferred to a busy ksoftirqd. That reorders flows with or without DVL — a testbed artefact,
/// not a switch's (docs/switch.md: 3 out-of-order packets in 9 loaded runs without RPS, 0 in 9
/// with it, on a plain veth router path).
fn fifo_links(tb: &Testbed) {
    for node in ["a0", "a1", "swa", "swb", "b0", "b1"] {
        for p in &tb.node(node).expect("node").ports {
            let mut cmd = tb.command(node, "sh").expect("command");
            cmd.args([
                "-c",
                &format!(
                    "for q in /sys/class/net/{}/queues/rx-*; do echo 1 > $q/rps_cpus; done",
                    p.ifname
                ),
            ]);
            exec::run(&mut cmd, T).expect("rps_cpus");
        }
    }
}

/// One run with the congested flow: the receivers' results and the two ports' stats.
struct Run {
    /// Victim throughput, bit/s.
    victim_bps: f64,
    victim_ooo: Option<u64>,
    congested_ooo: Option<u64>,
    /// `swa`'s uplink and `swb`'s port toward b0, `stats --json` at the end of the victim.
    up: Value,
    down: Value,
}

/// Victim throughput while the congested flow runs, with DVL or without. Detaches both ports
/// and checks that nothing of them is left: the programs (the uplink's ingress one too), its
/// filters and qdiscs.
fn run(tb: &Testbed, dvl: bool) -> Run {
    let up = port(tb, "swa", "swb");
    let down = port(tb, "swb", "b0");
    let mut a = vec![
        "attach", "--iface", &up, "--rate", "100mbit", "--buffer", "256kb",
    ];
    if dvl {
        a.extend(["--dvl", "1mb,accept"]);
    }
    sw(tb, "swa", &a);
    let mut b = vec![
        "attach", "--iface", &down, "--rate", "20mbit", "--buffer", "256kb",
    ];
    if dvl {
        b.extend(["--dvl", "30kb"]);
    }
    sw(tb, "swb", &b);

    let congested_srv = server(tb, "b0", 5301);
    let congested = client(tb, "a0", &addr6(tb, "b0"), 5301, FLOOD, VICTIM_SECS + 3);
    std::thread::sleep(Duration::from_millis(1800));
    let victim_srv = server(tb, "b1", 5302);
    let victim = client(tb, "a1", &addr(tb, "b1"), 5302, "50M", VICTIM_SECS);
    let _ = victim.wait(T);
    let (victim_bps, victim_ooo) = received(victim_srv);
    let stats = |node: &str, iface: &str| -> Value {
        sw(tb, node, &["stats", "--iface", iface, "--json"])
            .json()
            .expect("stats")
    };
    let (up_stats, down_stats) = (stats("swa", &up), stats("swb", &down));
    let _ = congested.wait(T);
    let (_, congested_ooo) = received(congested_srv);
    sw(tb, "swa", &["detach", "--iface", &up]);
    sw(tb, "swb", &["detach", "--iface", &down]);
    let ids = [&up_stats["prog_id"], &up_stats["accept_prog_id"]];
    assert_eq!(
        ids[1].is_u64(),
        dvl,
        "ingress program iff accept: {up_stats}"
    );
    for id in ids.iter().filter_map(|v| v.as_u64()) {
        assert!(
            !program_loaded(id as u32).expect("query"),
            "program {id} left"
        );
    }
    let tc = |args: &[&str]| {
        let mut cmd = tb.command("swa", "tc").expect("command");
        cmd.args(args);
        exec::run(&mut cmd, T).expect("tc").stdout
    };
    assert!(
        tc(&["filter", "show", "dev", &up, "ingress"])
            .trim()
            .is_empty(),
        "ingress filter left on {up}"
    );
    let qdiscs = tc(&["qdisc", "show", "dev", &up]);
    assert!(
        !qdiscs.contains("clsact") && !qdiscs.contains("htb"),
        "{qdiscs}"
    );
    Run {
        victim_bps,
        victim_ooo,
        congested_ooo,
        up: up_stats,
        down: down_stats,
    }
}

#[test]
fn switch_dvl_victim_keeps_throughput() {
    if !need_root("switch_dvl_victim_keeps_throughput") {
        return;
    }
    let tb = Testbed::up_topology(&Topology::Dumbbell {
        left: 2,
        right: 2,
        switch: SwitchKind::Router,
        link: LinkParams::new().mtu(1500),
        bottleneck: None,
    })
    .expect("dumbbell");
    fifo_links(&tb);

    // The victim alone through the same shaped ports: its uncongested throughput.
    let up = port(&tb, "swa", "swb");
    sw(
        &tb,
        "swa",
        &[
            "attach", "--iface", &up, "--rate", "100mbit", "--buffer", "256kb",
        ],
    );
    let srv = server(&tb, "b1", 5302);
    let _ = client(&tb, "a1", &addr(&tb, "b1"), 5302, "50M", VICTIM_SECS).wait(T);
    let (alone, alone_ooo) = received(srv);
    sw(&tb, "swa", &["detach", "--iface", &up]);

    let plain = run(&tb, false);
    let dvl = run(&tb, true);
    let (without, with) = (plain.victim_bps, dvl.victim_bps);
    let (up, down) = (&dvl.up, &dvl.down);
    eprintln!(
        "victim alone {:.2} Mbit/s; with the congested flow: no DVL {:.2} Mbit/s ({:.1}%), \
         DVL {:.2} Mbit/s ({:.1}%); out of order with DVL: victim {:?}, congested {:?}; \
         alone {alone_ooo:?}, without DVL victim {:?} congested {:?}\nuplink without DVL: {}\n\
         uplink with DVL: {up}\ncongested port with DVL: {}",
        alone / 1e6,
        without / 1e6,
        100.0 * without / alone,
        with / 1e6,
        100.0 * with / alone,
        dvl.victim_ooo,
        dvl.congested_ooo,
        plain.victim_ooo,
        plain.congested_ooo,
        plain.up["counters"],
        down["counters"],
    );
    assert!(alone > 45e6, "the victim alone gets its 50 Mbit/s: {alone}");
    let n = |v: &Value, k: &str| v["counters"][k].as_u64().unwrap_or(0);
    // The notification on the wire: sent by the congested port, accepted by the uplink, which
    // never detected anything itself.
    assert!(n(down, "dvl_isolated") >= 1, "{down}");
    assert!(n(down, "dvl_notify_sent") >= 1, "{down}");
    assert!(n(up, "dvl_notify_accepted") >= 1, "{up}");
    assert_eq!(n(up, "dvl_notify_malformed"), 0, "{up}");
    assert_eq!(
        n(up, "dvl_isolated"),
        0,
        "the uplink detected nothing: {up}"
    );
    assert!(
        n(up, "dvl_congested") > 1000,
        "the uplink queued the congested flow in the CFQ: {up}"
    );
    let isolated = up["dvl"]["isolated"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        isolated.len(),
        1,
        "only the congested flow is isolated on the uplink: {up}"
    );
    assert_eq!(isolated[0]["src"].as_str(), Some(addr6(&tb, "a0").as_str()));
    assert_eq!(isolated[0]["dst"].as_str(), Some(addr6(&tb, "b0").as_str()));
    assert_eq!(isolated[0]["dst_port"].as_u64(), Some(5301));
    assert!(
        with >= 0.9 * alone,
        "victim with DVL {with} < 90% of {alone} (without DVL {without})"
    );
    // Reordering within a flow: iperf3 counts every packet older than the newest seen, so one
    // CFQ packet overtaking the flow's packets still in the normal queue at isolation counts
    // about as many as that queue held (19–40 with the first, HTB-class mapping, whose CFQ
    // class sent its first frame at once). The victim never enters a CFQ (the uplink's table is
    // checked above), so its bound is about the links, made FIFO by `fifo_links`; the isolated
    // flow counted 4 in one CI run under full build load (before `fifo_links`), not understood.
    // docs/switch.md has the counts seen.
    assert!(
        dvl.victim_ooo.is_some_and(|n| n <= 2),
        "victim reordered: {:?}",
        dvl.victim_ooo
    );
    assert!(
        dvl.congested_ooo.is_some_and(|n| n <= 8),
        "congested flow reordered: {:?}",
        dvl.congested_ooo
    );
}
