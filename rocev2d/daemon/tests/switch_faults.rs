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
