//! IOFD on a router: leaf `l0` of a 2-leaf, 2-spine fabric has the switch program on both
//! uplinks, each naming the other as its alternate. A UDP flood congests one uplink (the one
//! ECMP gives its 5-tuple); short RoCEv2 WRITE messages (4 packets, 4 tokens, RETH length
//! 4096) from 16 source ports follow ECMP too. Those on the congested uplink must leave by the
//! other one whole (every packet of a message with one token spent, in PSN order), the
//! deflecting port's count must equal the alternate's received count, and messages on the
//! quiet uplink must not be deflected.
//!
//! The messages are crafted by a small Python sender (no ICRC check happens on the way: the
//! switch reads BTH, RETH and Resv6a only) and read back by a Python receiver on `l1h0`, which
//! sees each packet's tokens and PSN.
//!
//! The second test runs real `rocev2-wiretest` QPs through the same fabric: short WRITEs with
//! tokens are deflected and complete byte-checked, a long message with tokens is refused and
//! stays in line, and the receiver counts fewer CE marks per byte than the same WRITEs without
//! IOFD.

mod common;
use common::{BIN, need_root, run_between};
use rocev2_testbed::topology::{LinkParams, Topology};
use rocev2_testbed::{Process, Testbed, exec};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

const RECEIVER: &str = r#"
import json, socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
s.bind(("0.0.0.0", 4791))
s.settimeout(3.0)
print("READY", flush=True)
out = []
try:
    while True:
        d, (addr, sport) = s.recvfrom(65536)
        out.append([sport, d[0], d[4] & 0x3f, int.from_bytes(d[9:12], "big"), d[-8]])
except socket.timeout:
    pass
print(json.dumps(out), flush=True)
"#;

const SENDER: &str = r#"
import socket, sys, time
dst = sys.argv[1]
for sport in range(41000, 41016):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", sport))
    psn = 0
    for msg in range(20):
        for i, op in enumerate([0x06, 0x07, 0x07, 0x08]):
            bth = bytes([op, 0, 0xff, 0xff, 4, 0, 0, 0x42]) + psn.to_bytes(4, "big")
            reth = bytes(12) + (4096).to_bytes(4, "big") if op == 0x06 else b""
            s.sendto(bth + reth + bytes(1000) + bytes([msg]) + bytes(3) + bytes(4), (dst, 4791))
            psn += 1
        time.sleep(0.002)
    s.close()
"#;

#[test]
fn switch_iofd_deflects_whole_short_messages_off_a_congested_uplink() {
    if !need_root("switch_iofd_deflects_whole_short_messages_off_a_congested_uplink") {
        return;
    }
    let tb = leaf_spine();
    let up = attach_uplinks(&tb, true);
    let dst = host_v4(&tb, "l1h0");
    // The flood: 80 Mbit/s of UDP into 50 Mbit/s uplinks; ECMP puts it on one of them.
    let (_srv, flood) = flood(&tb, "80M", 5);

    let mut rx = tb.command("l1h0", "python3").expect("command");
    rx.args(["-c", RECEIVER]);
    let mut rx = Process::spawn(&mut rx).expect("receiver");
    rx.wait_for_line(|l| l == "READY", T)
        .expect("receiver ready");
    std::thread::sleep(Duration::from_millis(1500));
    let mut tx = tb.command("l0h0", "python3").expect("command");
    tx.args(["-c", SENDER, &dst]);
    exec::run(&mut tx, T).expect("sender");
    let got = rx.wait(T).expect("receiver done");
    let _ = flood.wait(T);

    let stats: Vec<Value> = up.iter().map(|p| port_counters(&tb, p)).collect();
    let n = |i: usize, k: &str| stats[i][k].as_u64().expect(k);
    for (i, p) in up.iter().enumerate() {
        eprintln!("{p}: {}", stats[i]["counters"]);
    }
    // The congested uplink is the one that dropped flood traffic.
    let (hot, cold) = if n(0, "drop_buffer") > n(1, "drop_buffer") {
        (0, 1)
    } else {
        (1, 0)
    };
    assert!(n(hot, "drop_buffer") > 0, "no uplink was congested");
    assert!(
        n(hot, "iofd_deflected") > 0,
        "nothing deflected: {}",
        stats[hot]
    );
    assert_eq!(n(hot, "iofd_deflected"), n(cold, "iofd_received"));
    assert_eq!(n(cold, "iofd_deflected"), 0, "the quiet uplink deflected");
    assert_eq!(
        n(cold, "duplicates"),
        0,
        "deflected arrivals are not duplicates"
    );
    assert_eq!(n(hot, "iofd_deflected") % 4, 0, "whole messages only");

    // At the receiver: [sport, opcode, tokens, psn, msg] per packet.
    let line = got.stdout.lines().last().expect("receiver output");
    let pkts: Vec<[u64; 5]> = serde_json::from_str(line).expect("receiver JSON");
    let mut messages: BTreeMap<(u64, u64), Vec<[u64; 5]>> = BTreeMap::new();
    for p in pkts {
        messages.entry((p[0], p[4])).or_default().push(p);
    }
    let mut deflected = 0u64;
    for ((sport, msg), ps) in &messages {
        let tokens: Vec<u64> = ps.iter().map(|p| p[2]).collect();
        // A message is deflected whole or not at all.
        assert!(
            tokens.iter().all(|&t| t == tokens[0]),
            "sport {sport} msg {msg}: tokens {tokens:?}"
        );
        if tokens[0] == 3 {
            deflected += ps.len() as u64;
            // Deflected messages arrive whole and in PSN order.
            let psns: Vec<u64> = ps.iter().map(|p| p[3]).collect();
            assert_eq!(ps.len(), 4, "sport {sport} msg {msg}: {psns:?}");
            assert!(
                psns.windows(2).all(|w| w[1] == w[0] + 1),
                "sport {sport} msg {msg}: {psns:?}"
            );
        } else {
            assert_eq!(tokens[0], 4);
        }
    }
    assert_eq!(
        deflected,
        n(hot, "iofd_deflected"),
        "deflected packets all arrived"
    );
    detach(&tb, &up);
    tb.down().expect("down");
}

/// Two leaves, two spines, one host per leaf.
fn leaf_spine() -> Testbed {
    Testbed::up_topology(&Topology::LeafSpine {
        leaves: 2,
        spines: 2,
        hosts_per_leaf: 1,
        link: LinkParams::new().mtu(1500),
        fabric: None,
    })
    .expect("leaf-spine")
}

fn host_v4(tb: &Testbed, host: &str) -> String {
    tb.node(host).expect("host").ipv4().expect("v4").to_string()
}

/// `rate` of 1400-byte UDP datagrams from `l0h0` to `l1h0` for `secs`: the iperf3 server
/// (one test) and client.
fn flood(tb: &Testbed, rate: &str, secs: u32) -> (Process, Process) {
    let mut srv = tb.command("l1h0", "iperf3").expect("command");
    srv.args(["-s", "-1", "-p", "5201"]);
    let srv = Process::spawn(&mut srv).expect("iperf3 -s");
    let netns = &tb.node("l1h0").expect("l1h0").netns;
    exec::wait_for_port(netns, exec::Proto::Tcp, 5201, T).expect("iperf3 listening");
    let mut c = tb.command("l0h0", "iperf3").expect("command");
    c.args(["-c", &host_v4(tb, "l1h0"), "-p", "5201", "-u", "-b", rate])
        .args(["-l", "1400", "-t", &secs.to_string()]);
    (srv, Process::spawn(&mut c).expect("flood"))
}

/// Both uplinks of `l0` as switch ports (50 Mbit/s, RED), with IOFD naming each other when
/// `iofd`; returns their names.
fn attach_uplinks(tb: &Testbed, iofd: bool) -> Vec<String> {
    let l0 = tb.node("l0").expect("l0");
    let up: Vec<String> = ["s0", "s1"]
        .iter()
        .map(|s| l0.port_toward(s).expect("uplink").ifname.clone())
        .collect();
    for (me, other) in [(&up[0], &up[1]), (&up[1], &up[0])] {
        let mut cmd = tb.command("l0", BIN).expect("command");
        cmd.args([
            "switch", "attach", "--iface", me, "--rate", "50mbit", "--buffer", "256kb",
        ])
        .args(["--red", "kmin=32kb,kmax=128kb,pmax=0.1"]);
        if iofd {
            cmd.args(["--iofd", &format!("threshold=15kb,max-msg=8kb,alt={other}")]);
        }
        exec::run(&mut cmd, T).expect("rocev2d switch attach");
    }
    up
}

/// `switch stats --json` counters of `l0`'s `port`.
fn port_counters(tb: &Testbed, port: &str) -> Value {
    let mut cmd = tb.command("l0", BIN).expect("command");
    cmd.args(["switch", "stats", "--iface", port, "--json"]);
    let v: Value = exec::run(&mut cmd, T)
        .expect("rocev2d switch stats")
        .json()
        .expect("stats JSON");
    v["counters"].clone()
}

fn detach(tb: &Testbed, ports: &[String]) {
    for p in ports {
        let mut cmd = tb.command("l0", BIN).expect("command");
        cmd.args(["switch", "detach", "--iface", p]);
        exec::run(&mut cmd, T).expect("rocev2d switch detach");
    }
}

/// The server QP's counter `name` in a client result.
fn server_qp(r: &Value, name: &str) -> u64 {
    let qps = r["server"]["snapshot"]["qps"].as_object().expect("qps");
    let qp = qps.values().next().expect("server QP");
    qp["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no {name} in {qp}"))
}

#[test]
fn switch_iofd_deflects_real_short_writes_not_long_ones_and_saves_marks() {
    const NAME: &str = "switch_iofd_deflects_real_short_writes_not_long_ones_and_saves_marks";
    if !need_root(NAME) {
        return;
    }
    let tb = leaf_spine();
    // Hash on addresses only, so the flood and every QP from l0h0 to l1h0 share one uplink.
    let mut sysctl = tb.command("l0", "sysctl").expect("command");
    sysctl.args(["-qw", "net.ipv4.fib_multipath_hash_policy=0"]);
    exec::run(&mut sysctl, T).expect("sysctl");
    // 60 Mbit/s of UDP into a 50 Mbit/s uplink keeps its modelled queue at the buffer, far
    // above the deflection threshold and K_max, for every phase below.
    let (_srv, mut flood) = flood(&tb, "60M", 120);
    std::thread::sleep(Duration::from_millis(1500));

    let hosts = ("l0h0", "l1h0");
    let limit = Duration::from_secs(120);
    // 4 KiB WRITEs: 4 packets of 1024 bytes, each with 4 tokens. The phases that stay in the
    // flooded queue go back N at a few hundred kbit/s: they move 128 KiB, not 1 MiB.
    let short = ["--msg-bytes", "4096", "--bulk-mib", "1"];
    let short_crawl = ["--msg-bytes", "4096", "--bulk-kib", "128"];
    let tokens = ["--iofd-tokens", "4"];
    let short_tokens = [&short[..], &tokens].concat();
    let short_client = [&short_tokens[..], &["--workload", "bulk"]].concat();

    let up = attach_uplinks(&tb, true);
    let r_iofd = run_between(&tb, hosts, false, &short_tokens, &short_client, limit);
    let c1: Vec<Value> = up.iter().map(|p| port_counters(&tb, p)).collect();
    // 16 KiB WRITEs carrying tokens (the sender's own limit raised): long for the switch.
    let long = [
        "--msg-bytes",
        "16384",
        "--bulk-kib",
        "128",
        "--iofd-tokens",
        "4",
        "--iofd-max-msg",
        "1048576",
    ];
    let long_client = [&long[..], &["--workload", "bulk"]].concat();
    let r_long = run_between(&tb, hosts, false, &long, &long_client, limit);
    let c2: Vec<Value> = up.iter().map(|p| port_counters(&tb, p)).collect();
    detach(&tb, &up);

    let up = attach_uplinks(&tb, false);
    let short_plain = [&short_crawl[..], &["--workload", "bulk"]].concat();
    let r_plain = run_between(&tb, hosts, false, &short_crawl, &short_plain, limit);
    let c3: Vec<Value> = up.iter().map(|p| port_counters(&tb, p)).collect();
    detach(&tb, &up);
    flood.kill();

    let n = |c: &Value, k: &str| c[k].as_u64().unwrap_or_else(|| panic!("no {k} in {c}"));
    for (phase, c) in [
        ("short, IOFD", &c1),
        ("+ long, IOFD", &c2),
        ("short, no IOFD", &c3),
    ] {
        for (p, c) in up.iter().zip(c) {
            eprintln!("{phase}: {p}: {c}");
        }
    }
    let hot = if n(&c1[0], "drop_buffer") > n(&c1[1], "drop_buffer") {
        0
    } else {
        1
    };
    let cold = 1 - hot;
    assert!(n(&c1[hot], "drop_buffer") > 0, "no uplink was congested");

    // Short messages: deflected whole onto the quiet uplink, and every byte arrived.
    let deflected = n(&c1[hot], "iofd_deflected");
    assert!(deflected > 0, "nothing deflected: {}", c1[hot]);
    assert_eq!(deflected % 4, 0, "whole 4-packet messages only");
    assert_eq!(n(&c1[cold], "iofd_received"), deflected);
    assert_eq!(
        n(&c1[cold], "iofd_deflected"),
        0,
        "the quiet uplink deflected"
    );
    assert_eq!(r_iofd["bytes"], 1 << 20, "{r_iofd}");
    assert_eq!(common::drop_count(&r_iofd, "icrc_error"), 0, "{r_iofd}");

    // The long message carried tokens but was refused: nothing more was deflected.
    assert_eq!(r_long["bytes"], 128 << 10, "{r_long}");
    assert!(
        n(&c2[hot], "iofd_long") > n(&c1[hot], "iofd_long"),
        "long messages not refused: {}",
        c2[hot]
    );
    assert_eq!(
        n(&c2[hot], "iofd_deflected"),
        deflected,
        "a long message was deflected"
    );

    // Deflected packets skip the marking queue: per byte moved, fewer than half the marks.
    assert_eq!(r_plain["bytes"], 128 << 10, "{r_plain}");
    let (ce_iofd, ce_plain) = (
        server_qp(&r_iofd, "ce_received"),
        server_qp(&r_plain, "ce_received"),
    );
    let mbit = |r: &Value| r["gbit_per_s"].as_f64().unwrap_or(0.0) * 1e3;
    eprintln!(
        "short WRITEs: {deflected} packets deflected; CE at the receiver {ce_iofd} in 1 MiB \
         with IOFD, {ce_plain} in 128 KiB without; {:.1} vs {:.1} Mbit/s (long WRITEs {:.1}); \
         receiver out-of-sequence {} vs {}",
        mbit(&r_iofd),
        mbit(&r_plain),
        mbit(&r_long),
        server_qp(&r_iofd, "out_of_sequence"),
        server_qp(&r_plain, "out_of_sequence"),
    );
    assert!(ce_plain > 0, "no CE marks without IOFD: {r_plain}");
    assert!(
        ce_iofd * 2 < ce_plain * 8,
        "IOFD {ce_iofd} CE marks in 1 MiB vs plain {ce_plain} in 128 KiB"
    );
    tb.down().expect("down");
}
