//! A flood of malformed and random RoCEv2 frames at the server while a real QP moves 8 MiB:
//! 2000 valid frames to a QP that does not exist, 2000 frames to the real QP with a bit flipped
//! after the ICRC, 2000 with random bytes after the UDP header. The server must count every
//! one of them under some drop reason (and the first two kinds exactly), and the transfer must
//! complete with its CRC intact and no NAK.

mod common;
use common::*;
use std::time::Duration;

fn flood(test: &str, mode: &str) {
    if !need_root(test) {
        return;
    }
    let tb = pair();
    let args = ["--datapath", mode, "--bulk-mib", "8"];
    let r = run(
        &tb,
        false,
        &args,
        &[&args[..], &["--workload", "flood"]].concat(),
        Duration::from_secs(120),
    );
    let snap = &r["server"]["snapshot"];
    let drops: u64 = snap["drops"]
        .as_object()
        .expect("drops")
        .values()
        .filter_map(|v| v.as_u64())
        .sum();
    eprintln!("{test}: server drops {}", snap["drops"]);
    // Nothing is lost on a veth with 8 MiB of socket buffer, so the accounting is exact.
    assert_eq!(
        drops, 6000,
        "every injected frame is counted once: {}\ndatapath: {}",
        snap["drops"], snap["datapath_counters"]
    );
    assert_eq!(drop_count(&r, "unknown_qp"), 2000);
    // Corrupted frames are all icrc_error; a random UDP payload can also reach the ICRC check.
    assert!(drop_count(&r, "icrc_error") >= 2000);
    assert_eq!(snap["icrc_errors"], drop_count(&r, "icrc_error"));
    let qp = snap["qps"]
        .as_object()
        .and_then(|q| q.values().next())
        .expect("QP");
    assert_eq!(qp["state"], "rts");
    assert_eq!(qp["counters"]["naks_sent"], 0, "{qp}");
    assert_eq!(r["bulk"]["bytes"], 8 << 20);
}

#[test]
fn wire_flood_udp_counted_by_reason() {
    flood("wire_flood_udp_counted_by_reason", "udp");
}

#[test]
fn wire_flood_packet_counted_by_reason() {
    flood("wire_flood_packet_counted_by_reason", "packet");
}

#[test]
fn wire_flood_xdp_counted_by_reason() {
    flood("wire_flood_xdp_counted_by_reason", "xdp");
}
