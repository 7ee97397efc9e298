//! The IPv4 Identification on the wire and the ICRC in UDP mode (`docs/wire.md`, "ICRC in each
//! datapath mode").
//!
//! * A UDP-mode sender's frames, captured by an AF_PACKET server (which sees the bytes the
//!   sender's kernel wrote): every IPv4 header has Identification 0 and DF, and every ICRC
//!   verifies.
//! * Frames shaped as rdma_rxe writes them (non-zero Identification, ICRC over it), injected by
//!   an AF_PACKET client at a QP number that does not exist: a UDP-mode server cannot verify
//!   them (`icrc_error`), accepts them with `--accept-unverified-icrc` (`icrc_unverifiable`,
//!   then `unknown_qp`), and an AF_PACKET server verifies them (`unknown_qp`).

mod common;
use common::*;
use std::time::Duration;

#[test]
fn wire_udp_mode_writes_ip_id_0_and_df() {
    if !need_root("wire_udp_mode_writes_ip_id_0_and_df") {
        return;
    }
    let tb = pair();
    let r = run(
        &tb,
        false,
        &["--datapath", "packet"],
        &["--datapath", "udp", "--workload", "verbs"],
        Duration::from_secs(60),
    );
    let cap = r["server"]["capture"].as_array().expect("capture");
    assert!(cap.len() >= 10, "captured {} frames", cap.len());
    for c in cap {
        assert_eq!(
            (c["id"].as_u64(), c["df"].as_bool()),
            (Some(0), Some(true)),
            "{c}"
        );
    }
    assert_eq!(drop_count(&r, "icrc_error"), 0, "{r}");
    eprintln!(
        "captured {} IPv4 headers from the UDP-mode sender, all ID 0 + DF; {} had their UDP \
         checksum left to offload",
        cap.len(),
        r["server"]["snapshot"]["datapath_counters"]["rx_csum_unfinished"]
    );
}

fn rxe(server: &[&str]) -> serde_json::Value {
    let tb = pair();
    run(
        &tb,
        false,
        server,
        &["--datapath", "packet", "--workload", "rxe"],
        Duration::from_secs(60),
    )
}

#[test]
fn wire_rxe_ip_ids_fail_icrc_in_udp_mode() {
    if !need_root("wire_rxe_ip_ids_fail_icrc_in_udp_mode") {
        return;
    }
    let r = rxe(&["--datapath", "udp"]);
    assert_eq!(drop_count(&r, "icrc_error"), 500, "{r}");
    assert_eq!(drop_count(&r, "unknown_qp"), 0, "{r}");
    assert_eq!(r["server"]["snapshot"]["icrc_unverifiable"], 0);
}

#[test]
fn wire_rxe_ip_ids_accepted_unverified_in_udp_mode() {
    if !need_root("wire_rxe_ip_ids_accepted_unverified_in_udp_mode") {
        return;
    }
    let r = rxe(&["--datapath", "udp", "--accept-unverified-icrc"]);
    assert_eq!(drop_count(&r, "icrc_error"), 0, "{r}");
    assert_eq!(drop_count(&r, "unknown_qp"), 500, "{r}");
    assert_eq!(r["server"]["snapshot"]["icrc_unverifiable"], 500);
}

#[test]
fn wire_rxe_ip_ids_verify_in_packet_mode() {
    if !need_root("wire_rxe_ip_ids_verify_in_packet_mode") {
        return;
    }
    let r = rxe(&["--datapath", "packet"]);
    assert_eq!(drop_count(&r, "icrc_error"), 0, "{r}");
    assert_eq!(drop_count(&r, "unknown_qp"), 500, "{r}");
    let ids: Vec<u64> = r["server"]["capture"]
        .as_array()
        .expect("capture")
        .iter()
        .filter_map(|c| c["id"].as_u64())
        .collect();
    assert!(
        ids.iter().any(|&i| i >= 0x1000),
        "the capture shows the injected IDs"
    );
}
