//! `rocev2-wiretest --multipath` over a real veth pair: both peers offer MP-RDMA in their JSON
//! exchange, the QP runs multipath, a bulk WRITE arrives intact (CRC-32 checked by the client)
//! and both sides report per-VP counters; a server offering it to a plain client runs RC.
//! (Spreading over real paths is examples/tests/netns_multipath.rs, on a leaf-spine.)

mod common;
use common::*;
use serde_json::Value;
use std::time::Duration;

/// Sum of `packets` over the per-VP rows of an `"mp"` object, and the number of VPs.
fn vp_totals(mp: &Value) -> (u64, usize) {
    let vps = mp["vps"]
        .as_array()
        .unwrap_or_else(|| panic!("no vps in {mp}"));
    let total = vps.iter().map(|v| v["packets"].as_u64().unwrap()).sum();
    (total, vps.len())
}

#[test]
fn wire_multipath_bulk_negotiated_and_counted_per_vp() {
    if !need_root("wire_multipath_bulk_negotiated_and_counted_per_vp") {
        return;
    }
    let tb = pair();
    let args = [
        "--datapath",
        "packet",
        "--bulk-mib",
        "16",
        "--multipath",
        "--vps",
        "8",
    ];
    let r = run(
        &tb,
        false,
        &args,
        &[&args[..], &["--workload", "bulk"]].concat(),
        Duration::from_secs(120),
    );
    assert_eq!(r["bytes"], 16 << 20, "{r}");
    let (sent, tx_vps) = vp_totals(&r["mp"]);
    let (received, rx_vps) = vp_totals(&r["server"]["mp"]);
    eprintln!(
        "16 MiB multipath bulk: {:.3} Gbit/s, {sent} packets sent on {tx_vps} VPs, {received} received on {rx_vps}",
        r["gbit_per_s"].as_f64().unwrap_or(0.0)
    );
    // 16 MiB in packets of at most 4096 bytes, on more than one of the 8 VPs.
    assert!(sent >= 4096 && received >= 4096, "{r}");
    assert!(tx_vps > 1 && tx_vps <= 8, "{r}");
    assert!(rx_vps > 1 && rx_vps <= 8, "{r}");
    for v in r["mp"]["vps"].as_array().unwrap() {
        let port = v["vp"].as_u64().unwrap();
        assert!((49152..49160).contains(&port), "{v}");
    }
}

#[test]
fn wire_multipath_offered_to_plain_peer_runs_rc() {
    if !need_root("wire_multipath_offered_to_plain_peer_runs_rc") {
        return;
    }
    let tb = pair();
    let base = ["--datapath", "packet", "--bulk-mib", "4"];
    let r = run(
        &tb,
        false,
        &[&base[..], &["--multipath"]].concat(),
        &[&base[..], &["--workload", "bulk"]].concat(),
        Duration::from_secs(120),
    );
    assert_eq!(r["bytes"], 4 << 20, "{r}");
    assert!(r["mp"].is_null(), "{r}");
    assert!(r["server"]["mp"].is_null(), "{r}");
}
