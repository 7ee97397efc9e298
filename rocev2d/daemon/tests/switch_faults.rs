//! Fault injection by `rocev2d switch` on live rocev2 traffic: a bulk RDMA WRITE crosses a
//! port that loses, corrupts and duplicates RoCEv2 frames with a seed. The transfer must still
//! complete byte for byte (the client compares CRC-32s), every corrupted frame must be dropped
//! by the receiver as an ICRC error, and the injected rates must match the configuration.
//!
//! The port is the sending host's own veth (`h0` → `h1`): fault injection needs no queue, so
//! the program runs there with `--shaper none` and a rate and buffer no traffic can fill.

mod common;
use common::*;
use rocev2_testbed::exec;
use serde_json::Value;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

fn switch(tb: &rocev2_testbed::Testbed, args: &[&str]) -> exec::Captured {
    let mut cmd = tb.command("h0", BIN).expect("command");
    cmd.arg("switch").args(args);
    exec::run(&mut cmd, T).expect("rocev2d switch")
}

/// `k` of `n` against probability `p`: within 5 binomial standard deviations (+1 packet).
fn within(k: u64, n: u64, p: f64) -> bool {
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    (k as f64 - n as f64 * p).abs() <= 5.0 * sd + 1.0
}

#[test]
fn switch_faults_recovered_and_counted_as_icrc_errors() {
    if !need_root("switch_faults_recovered_and_counted_as_icrc_errors") {
        return;
    }
    let tb = pair();
    let port = ifname(&tb, "h0");
    let out = switch(
        &tb,
        &[
            "attach",
            "--iface",
            &port,
            "--shaper",
            "none",
            "--rate",
            "400gbit",
            "--buffer",
            "1gb",
            "--loss",
            "0.005",
            "--corrupt",
            "0.01",
            "--dup",
            "0.005",
            "--seed",
            "42",
        ],
    );
    assert!(out.stdout.contains("seed 42"), "{}", out.stdout);
    let args = ["--datapath", "packet", "--bulk-mib", "16"];
    let r = run(
        &tb,
        false,
        &args,
        &[&args[..], &["--workload", "bulk"]].concat(),
        Duration::from_secs(300),
    );
    let s: Value = switch(&tb, &["stats", "--iface", &port, "--json"])
        .json()
        .expect("stats JSON");
    let c = |k: &str| {
        s["counters"][k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k}: {s}"))
    };
    eprintln!("switch: {}", s["counters"]);
    eprintln!(
        "peer: bytes {} retransmits {} icrc_error {}",
        r["bytes"],
        r["retransmits"],
        drop_count(&r, "icrc_error")
    );
    // The data arrived intact (the client checked the CRC) despite the faults.
    assert_eq!(r["bytes"], 16u64 << 20, "{r}");
    let roce = c("roce");
    assert!(roce > 2000, "{s}");
    assert!(
        within(c("fault_loss"), roce, 0.005),
        "loss {} of {roce}",
        c("fault_loss")
    );
    // Corruption and duplication are drawn for frames not lost.
    let kept = roce - c("fault_loss");
    assert!(
        within(c("fault_corrupt"), kept, 0.01),
        "corrupt {} of {kept}",
        c("fault_corrupt")
    );
    assert!(
        within(c("fault_duplicate"), kept, 0.005),
        "dup {} of {kept}",
        c("fault_duplicate")
    );
    assert_eq!(c("helper_error"), 0);
    assert_eq!(
        c("duplicates"),
        c("fault_duplicate"),
        "every copy came through once"
    );
    // Every corrupted frame (and a copy of one, if it was duplicated too) failed the ICRC at
    // the receiver, and nothing else did. The receiver's counters are read when the workload
    // completes; go-back-N may still have a retransmitted (and corrupted) frame or two on the
    // way then, which it never counts: 1 in 5 runs misses one.
    let icrc = drop_count(&r, "icrc_error");
    eprintln!("server drops: {}", r["server"]["snapshot"]["drops"]);
    assert!(
        icrc + 2 >= c("fault_corrupt") && icrc <= c("fault_corrupt") + c("fault_duplicate"),
        "icrc_error {icrc}, corrupted {}",
        c("fault_corrupt")
    );
    assert!(r["retransmits"].as_u64().unwrap_or(0) > 0, "{r}");
    switch(&tb, &["detach", "--iface", &port]);
    tb.down().expect("down");
}

/// MiB of the mixed WRITE/READ transfer per datapath: `ROCEV2_FAULT_MIX_MIB` if set, else 256.
fn mix_mib() -> String {
    std::env::var("ROCEV2_FAULT_MIX_MIB").unwrap_or_else(|_| "256".into())
}

/// Live faults on every datapath: a router between the two hosts loses, corrupts
/// and duplicates 1% of the RoCEv2 frames in each direction (its egress toward the server
/// hits WRITE data and READ requests, toward the client READ responses and ACKs) while the
/// client moves 256 MiB of alternating 64 KiB WRITEs and READs, each half checked by CRC-32.
/// The faults sit on a router, not on the hosts' own veths, because AF_XDP's copy-mode
/// transmit leaves by `dev_direct_xmit`, which no tc egress program sees.
#[test]
fn switch_faults_on_every_datapath_under_a_write_read_mix() {
    let test = "switch_faults_on_every_datapath_under_a_write_read_mix";
    if !need_root(test) {
        return;
    }
    use rocev2_testbed::SwitchKind;
    use rocev2_testbed::topology::{LinkParams, Topology};
    let tb = rocev2_testbed::Testbed::up_topology(&Topology::Star {
        senders: 1,
        switch: SwitchKind::Router,
        link: LinkParams::new().mtu(4200),
    })
    .expect("star testbed");
    let sw_port = |peer: &str| {
        tb.node("sw")
            .expect("sw")
            .port_toward(peer)
            .expect("port")
            .ifname
            .clone()
    };
    let ports = [sw_port("rx"), sw_port("tx0")];
    let sw = |args: &[&str]| {
        let mut cmd = tb.command("sw", BIN).expect("command");
        cmd.arg("switch").args(args);
        exec::run(&mut cmd, T).expect("rocev2d switch")
    };
    for (i, port) in ports.iter().enumerate() {
        let seed = (7 + i).to_string();
        let out = sw(&[
            "attach",
            "--iface",
            port,
            "--shaper",
            "none",
            "--rate",
            "400gbit",
            "--buffer",
            "1gb",
            "--loss",
            "0.01",
            "--corrupt",
            "0.01",
            "--dup",
            "0.01",
            "--seed",
            &seed,
        ]);
        assert!(out.stdout.starts_with("attached "), "{}", out.stdout);
    }
    let mib = mix_mib();
    for datapath in ["packet", "udp", "xdp"] {
        let counters = |port: &str| -> Value {
            sw(&["stats", "--iface", port, "--json"])
                .json::<Value>()
                .expect("stats JSON")["counters"]
                .clone()
        };
        let before: Vec<Value> = ports.iter().map(|p| counters(p)).collect();
        let args = [
            "--datapath",
            datapath,
            "--bulk-mib",
            &mib,
            "--msg-bytes",
            "65536",
        ];
        let r = run_between(
            &tb,
            ("tx0", "rx"),
            false,
            &args,
            &[&args[..], &["--workload", "mix", "--deadline-secs", "400"]].concat(),
            Duration::from_secs(420),
        );
        let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
        let injected: Vec<[u64; 4]> = ports
            .iter()
            .zip(&before)
            .map(|(p, b)| {
                let a = counters(p);
                ["roce", "fault_loss", "fault_corrupt", "fault_duplicate"]
                    .map(|k| n(&a, k) - n(b, k))
            })
            .collect();
        eprintln!(
            "{datapath}: {} Gbit/s, retransmits {}, timeouts {}; per direction [roce, lost, \
             corrupted, duplicated] toward server {:?}, toward client {:?}",
            r["gbit_per_s"], r["retransmits"], r["timeouts"], injected[0], injected[1]
        );
        // Both halves arrived intact (the tool checked the CRCs, or it would have failed).
        let total = mib.parse::<u64>().expect("MiB") << 20;
        assert_eq!(r["bytes"], total, "{r}");
        assert_eq!(r["read_bytes"], total / 2, "{r}");
        // The faults hit both directions at their configured rates.
        for [roce, lost, corrupted, duplicated] in &injected {
            assert!(*roce > 10_000, "{injected:?}");
            assert!(within(*lost, *roce, 0.01), "{injected:?}");
            let kept = roce - lost;
            assert!(within(*corrupted, kept, 0.01), "{injected:?}");
            assert!(within(*duplicated, kept, 0.01), "{injected:?}");
        }
        assert!(n(&r, "retransmits") > 0, "{r}");
    }
    for port in &ports {
        sw(&["detach", "--iface", port]);
    }
    tb.down().expect("down");
}
