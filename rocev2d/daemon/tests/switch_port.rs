//! `rocev2d switch` on a router port: RED/ECN marking measured on live traffic against the
//! configured curve, tail drops beyond the buffer counted and matched against the interface,
//! and `detach` (or deleting the namespace) leaving no program, filter or qdisc behind.
//!
//! Topology: `tx0 — sw — rx`, `sw` a router namespace or a Linux bridge; the switch port is
//! `sw`'s veth toward `rx`. iperf3 offers ECT(0) UDP above the port rate, so the modelled queue fills and stays
//! near the buffer, where thousands of packets sample the marking curve.

mod common;
use common::{BIN, need_root};
use rocev2_ebpf_loader::switch_port::program_loaded;
use rocev2_testbed::topology::{LinkParams, Topology};
use rocev2_testbed::{Process, SwitchKind, Testbed, exec};
use serde_json::Value;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(30);

fn star() -> Testbed {
    star_of(SwitchKind::Router)
}

fn star_of(switch: SwitchKind) -> Testbed {
    Testbed::up_topology(&Topology::Star {
        senders: 1,
        switch,
        link: LinkParams::new().mtu(1500),
    })
    .expect("star testbed")
}

fn port(tb: &Testbed) -> String {
    tb.node("sw")
        .expect("sw")
        .port_toward("rx")
        .expect("port")
        .ifname
        .clone()
}

fn sw(tb: &Testbed, args: &[&str]) -> exec::Captured {
    let mut cmd = tb.command("sw", BIN).expect("command");
    cmd.args(args);
    exec::run(&mut cmd, T).expect("rocev2d switch")
}

fn stats(tb: &Testbed, iface: &str) -> Value {
    sw(tb, &["switch", "stats", "--iface", iface, "--json"])
        .json()
        .expect("stats JSON")
}

fn tc(tb: &Testbed, args: &[&str]) -> String {
    let mut cmd = tb.command("sw", "tc").expect("command");
    cmd.args(args);
    exec::run(&mut cmd, T).expect("tc").stdout
}

/// The RED probability (as configured: K in bytes, P_max) over a histogram bucket.
fn curve(q: f64, kmin: f64, kmax: f64, pmax: f64) -> f64 {
    if q <= kmin {
        0.0
    } else if q > kmax {
        1.0
    } else {
        pmax * (q - kmin) / (kmax - kmin)
    }
}

/// Offers `rate` of ECT(0) UDP from tx0 to rx for `secs`.
fn offer(tb: &Testbed, rate: &str, secs: u32) {
    let rx = tb.node("rx").expect("rx").ipv4().expect("v4").to_string();
    let mut srv = tb.command("rx", "iperf3").expect("command");
    srv.args(["-s", "-1", "-p", "5201"]);
    let srv = Process::spawn(&mut srv).expect("iperf3 server");
    exec::wait_for_port(&tb.node("rx").expect("rx").netns, exec::Proto::Tcp, 5201, T)
        .expect("iperf3 listening");
    let mut cli = tb.command("tx0", "iperf3").expect("command");
    cli.args([
        "-c", &rx, "-p", "5201", "-u", "-b", rate, "-l", "1400", "-S", "2",
    ])
    .args(["-t", &secs.to_string()]);
    exec::run(&mut cli, T).expect("iperf3 client");
    let _ = srv.wait(T);
}

#[test]
fn switch_red_marking_and_buffer_drops_on_live_traffic() {
    if !need_root("switch_red_marking_and_buffer_drops_on_live_traffic") {
        return;
    }
    red_marking_and_buffer_drops(SwitchKind::Router);
}

#[test]
fn switch_red_marking_and_buffer_drops_on_a_bridge_port() {
    if !need_root("switch_red_marking_and_buffer_drops_on_a_bridge_port") {
        return;
    }
    red_marking_and_buffer_drops(SwitchKind::Bridge);
}

/// The two live RED tests run one at a time: on two cores, two 110 Mbit/s floods at once
/// starve the shapers and the counters stop adding up (seen in CI).
static LIVE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn red_marking_and_buffer_drops(kind: SwitchKind) {
    let _one_at_a_time = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    let tb = star_of(kind);
    let p = port(&tb);
    // K_max beyond the buffer: every queue the traffic visits is on the linear ramp.
    let (kmin, kmax, pmax) = (128.0 * 1024.0, 1024.0 * 1024.0, 0.5);
    let out = sw(
        &tb,
        &[
            "switch",
            "attach",
            "--iface",
            &p,
            "--rate",
            "100mbit",
            "--buffer",
            "512kb",
            "--red",
            "kmin=128kb,kmax=1mb,pmax=0.5",
            "--hist-bucket",
            "16kb",
        ],
    );
    assert!(out.stdout.starts_with("attached "), "{}", out.stdout);
    let before = tb.counters("sw", "rx").expect("counters");
    offer(&tb, "110M", 4);
    // Let the shaper drain what is still queued (at most its 1 MB limit: 84 ms at 100 Mbit/s).
    std::thread::sleep(Duration::from_millis(300));
    let after = tb.counters("sw", "rx").expect("counters");
    let s = stats(&tb, &p);
    let c = &s["counters"];
    let n = |k: &str| c[k].as_u64().unwrap_or_else(|| panic!("{k} in {s}"));
    eprintln!("{}", serde_json::to_string(&s).unwrap_or_default());

    // Drops beyond the buffer: counted, and every packet the program passed either left the
    // port or was dropped by the shaper's own queue (limit: twice the buffer). That queue
    // drops only when the real HTB falls behind the nominal rate the model drains at: on
    // this VM it sometimes delivers 82–92% of 100 Mbit/s for seconds (the same test passed
    // with no shaper drop in earlier CI runs), so its drops are counted and reported, not
    // forbidden (docs/switch.md, "Queue model accuracy").
    assert!(n("drop_buffer") > 100, "offered 10% above the rate: {s}");
    let sent = after.since(&before).tx_packets;
    let passed = n("packets") - n("drop_buffer");
    assert!(s["queue_max_bytes"].as_u64().expect("max") <= 512 * 1024);
    let qdisc = tc(&tb, &["-s", "qdisc", "show", "dev", &p]);
    let shaper_drops: u64 = qdisc
        .split("qdisc ")
        .filter(|q| q.starts_with("bfifo"))
        .filter_map(|q| {
            q.split("dropped ")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    eprintln!(
        "program passed {passed}, interface sent {sent}, shaper dropped {shaper_drops} \
         (HTB delivered {:.1}% of what the model drained)",
        100.0 * sent as f64 / passed as f64
    );
    // (Up to a few background packets, IPv6 neighbour discovery say, may fall between the
    // attach and the first counter read.)
    assert!(
        passed.abs_diff(sent + shaper_drops) <= 5,
        "passed {passed}, interface sent {sent}, shaper dropped {shaper_drops}:\n{qdisc}\n{s}"
    );

    // Marking per histogram bucket against the curve over that bucket.
    let hist = &s["hist"];
    let w = hist["bucket_bytes"].as_f64().expect("bucket");
    let mut checked = 0;
    let mut biggest = 0;
    for b in 0..32usize {
        let ect = hist["ect_queued"][b].as_u64().expect("ect") as f64;
        let marked = hist["ce_marked"][b].as_u64().expect("marked") as f64;
        if ect < 500.0 {
            continue;
        }
        // The last bucket is open-ended; the buffer bounds it here (32 · 16 kB = 512 kB).
        let top = ((b + 1) as f64 * w).min(512.0 * 1024.0);
        let (lo, hi) = (
            curve(b as f64 * w, kmin, kmax, pmax),
            curve(top, kmin, kmax, pmax),
        );
        let sigma = (hi * (1.0 - hi) / ect).sqrt();
        let m = marked / ect;
        eprintln!(
            "bucket {b:2} ({:6.0} B): {ect:6} ECT, marked {m:.4}, curve {lo:.4}..{hi:.4}",
            b as f64 * w
        );
        assert!(
            m >= lo - 5.0 * sigma && m <= hi + 5.0 * sigma,
            "bucket {b}: marked {m}, curve {lo}..{hi} (σ {sigma})"
        );
        checked += 1;
        biggest = biggest.max(ect as u64);
    }
    assert!(checked >= 1 && biggest >= 2000, "too few samples: {s}");
    assert_eq!(
        n("ce_marked"),
        hist["ce_marked"]
            .as_array()
            .expect("arr")
            .iter()
            .map(|v| v.as_u64().unwrap_or(0))
            .sum::<u64>()
    );

    // Detach: program released, our filter, clsact and shaper gone.
    let id = s["prog_id"].as_u64().expect("id") as u32;
    assert!(program_loaded(id).expect("query"));
    let out = sw(&tb, &["switch", "detach", "--iface", &p]);
    assert!(out.stdout.starts_with("detached "), "{}", out.stdout);
    assert!(
        !program_loaded(id).expect("query"),
        "program {id} still loaded"
    );
    let qdiscs = tc(&tb, &["qdisc", "show", "dev", &p]);
    assert!(
        !qdiscs.contains("htb") && !qdiscs.contains("clsact"),
        "{qdiscs}"
    );
    let mut again = tb.command("sw", BIN).expect("command");
    again.args(["switch", "stats", "--iface", &p]);
    assert!(
        exec::run(&mut again, T).is_err(),
        "stats after detach must fail"
    );
    tb.down().expect("down");
}

#[test]
fn switch_attach_outlives_cli_until_netns_goes() {
    if !need_root("switch_attach_outlives_cli_until_netns_goes") {
        return;
    }
    let tb = star();
    let p = port(&tb);
    sw(
        &tb,
        &[
            "switch", "attach", "--iface", &p, "--rate", "1gbit", "--buffer", "1mb", "--shaper",
            "tbf",
        ],
    );
    // The attaching process has exited; a second process finds the port…
    let s = stats(&tb, &p);
    let id = s["prog_id"].as_u64().expect("id") as u32;
    assert!(tc(&tb, &["qdisc", "show", "dev", &p]).contains("tbf"));
    // …a second attach is refused…
    let mut dup = tb.command("sw", BIN).expect("command");
    dup.args([
        "switch", "attach", "--iface", &p, "--rate", "1gbit", "--buffer", "1mb",
    ]);
    assert!(exec::run(&mut dup, T).is_err(), "double attach must fail");
    // The port toward tx0 with DVL accepting notifications: a second program, on ingress.
    let up = tb
        .node("sw")
        .expect("sw")
        .port_toward("tx0")
        .expect("port")
        .ifname
        .clone();
    sw(
        &tb,
        &[
            "switch",
            "attach",
            "--iface",
            &up,
            "--rate",
            "1gbit",
            "--buffer",
            "1mb",
            "--dvl",
            "30kb,accept",
        ],
    );
    let s = stats(&tb, &up);
    let ids = [
        id,
        s["prog_id"].as_u64().expect("id") as u32,
        s["accept_prog_id"].as_u64().expect("accept id") as u32,
    ];
    assert!(tc(&tb, &["filter", "show", "dev", &up, "ingress"]).contains("rocev2_dvl_rx"));
    // …and deleting the namespace releases the programs.
    tb.down().expect("down");
    let deadline = Instant::now() + Duration::from_secs(10);
    for id in ids {
        while program_loaded(id).expect("query") {
            assert!(
                Instant::now() < deadline,
                "program {id} outlived its namespace"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
