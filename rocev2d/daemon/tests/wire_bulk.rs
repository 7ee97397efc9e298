//! Bulk RDMA WRITE over a real veth pair in each datapath: `ROCEV2_WIRE_BULK_MIB` MiB (64 by
//! default) in 4 MiB messages, verified by CRC-32 of the receiver's buffer against the sender's.

mod common;
use common::*;
use std::time::Duration;

fn bulk(test: &str, mode: &str) {
    if !need_root(test) {
        return;
    }
    let tb = pair();
    let mib = bulk_mib().to_string();
    let args = ["--datapath", mode, "--bulk-mib", &mib];
    let r = run(
        &tb,
        false,
        &args,
        &[&args[..], &["--workload", "bulk"]].concat(),
        Duration::from_secs(300),
    );
    assert_eq!(r["bytes"], bulk_mib() << 20, "{r}");
    // The CRC comparison itself happens in the client (it fails on a mismatch); the numbers
    // are printed for the record.
    eprintln!(
        "{test}: {} MiB in {:.3} s = {:.3} Gbit/s, {} retransmits (debug build)",
        bulk_mib(),
        r["secs"].as_f64().unwrap_or(0.0),
        r["gbit_per_s"].as_f64().unwrap_or(0.0),
        r["retransmits"]
    );
    assert_eq!(drop_count(&r, "icrc_error"), 0, "{r}");
}

#[test]
fn wire_bulk_write_udp() {
    bulk("wire_bulk_write_udp", "udp");
}

#[test]
fn wire_bulk_write_packet() {
    bulk("wire_bulk_write_packet", "packet");
}

#[test]
fn wire_bulk_write_xdp() {
    bulk("wire_bulk_write_xdp", "xdp");
}
