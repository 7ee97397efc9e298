//! Bulk RDMA WRITE over a real veth pair in each datapath, in 4 MiB messages, verified by CRC-32
//! of the receiver's buffer against the sender's: 1 GiB over AF_XDP (the fastest datapath; about
//! 15 s in a debug build on the 2-core CI machine), 64 MiB over AF_PACKET and UDP sockets;
//! `ROCEV2_WIRE_BULK_MIB` overrides both.

mod common;
use common::*;
use std::time::Duration;

fn bulk(test: &str, mode: &str, default_mib: u64) {
    if !need_root(test) {
        return;
    }
    let tb = pair();
    let mib = bulk_mib(default_mib);
    let mib_arg = mib.to_string();
    let args = ["--datapath", mode, "--bulk-mib", &mib_arg];
    let r = run(
        &tb,
        false,
        &args,
        &[&args[..], &["--workload", "bulk"]].concat(),
        Duration::from_secs(300),
    );
    assert_eq!(r["bytes"], mib << 20, "{r}");
    // The CRC comparison itself happens in the client (it fails on a mismatch); the numbers
    // are printed for the record.
    eprintln!(
        "{test}: {} MiB in {:.3} s = {:.3} Gbit/s, {} retransmits (debug build)",
        mib,
        r["secs"].as_f64().unwrap_or(0.0),
        r["gbit_per_s"].as_f64().unwrap_or(0.0),
        r["retransmits"]
    );
    assert_eq!(drop_count(&r, "icrc_error"), 0, "{r}");
}

#[test]
fn wire_bulk_write_udp() {
    bulk("wire_bulk_write_udp", "udp", 64);
}

#[test]
fn wire_bulk_write_packet() {
    bulk("wire_bulk_write_packet", "packet", 64);
}

#[test]
fn wire_bulk_write_xdp() {
    bulk("wire_bulk_write_xdp", "xdp", 1024);
}
