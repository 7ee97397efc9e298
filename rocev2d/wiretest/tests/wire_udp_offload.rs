//! UDP GSO/GRO in the UDP-socket datapath over a real veth pair, data checked by
//! CRC-32 on both sides: 4 MiB of WRITEs and READs (`mix`) and every verb (`verbs`, SENDs of
//! several packets included) between two UDP-mode peers over IPv6 with the default options
//! (both offloads on; `--no-udp-gso` turns GSO off, also tested), where each side sends runs
//! of equal datagrams as one `UDP_SEGMENT` entry and receives the GSO buffers veth passes
//! through whole with `UDP_GRO`; then a GSO sender against an AF_XDP receiver, which sees the
//! segments the kernel cut and verifies every ICRC itself, and against an AF_PACKET receiver,
//! which gets the GSO buffers whole and cuts them itself (`PACKET_VNET_HDR`, `af_packet.rs`;
//! before that it dropped them and the WRITE ended in `RetryExcErr`). The counters prove the
//! offloads ran:
//! a test that passed with them off would prove nothing. IPv4 never uses GSO (`udp.rs`), and a
//! veth did not merge separately sent datagrams even with `gro on` and
//! `rx-udp-gro-forwarding on` (Linux 6.18, tried by hand), so IPv4 GRO has only the unit test.

mod common;
use common::*;
use rocev2_testbed::Testbed;
use serde_json::Value;
use std::time::Duration;

/// A counter of the client's datapath, or of the server's (`side = "server"`).
fn counter(r: &Value, side: &str, name: &str) -> u64 {
    let c = if side == "server" {
        &r["server"]["snapshot"]["datapath_counters"]
    } else {
        &r["datapath"]
    };
    c[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no datapath counter {name} for the {side} in {r}"))
}

/// `workload` with 4 MiB of bulk data from a client started with `client` flags to a server
/// started with `server` flags, over the `pair` testbed `tb`.
fn transfer(tb: &Testbed, server: &[&str], client: &[&str], workload: &str) -> Value {
    let client = [client, &["--workload", workload, "--bulk-mib", "4"]].concat();
    run(tb, true, server, &client, Duration::from_secs(120))
}

fn offload(test: &str, server_mode: &str, workload: &str) -> Value {
    if !need_root(test) {
        return Value::Null;
    }
    let r = transfer(
        &pair(),
        &["--datapath", server_mode],
        &["--datapath", "udp"],
        workload,
    );
    assert_eq!(r["server"]["snapshot"]["datapath"], server_mode, "{r}");
    assert_eq!(drop_count(&r, "icrc_error"), 0, "{r}");
    eprintln!(
        "{test}: client tx_gso_sends {} tx_gso_segments {} rx_gro_segments {}; server rx_gro_segments {} tx_gso_segments {}",
        counter(&r, "client", "tx_gso_sends"),
        counter(&r, "client", "tx_gso_segments"),
        counter(&r, "client", "rx_gro_segments"),
        counter(&r, "server", "rx_gro_segments"),
        counter(&r, "server", "tx_gso_segments"),
    );
    assert!(
        counter(&r, "client", "tx_gso_segments") > 0,
        "client sent no GSO entry: {r}"
    );
    r
}

#[test]
fn wire_udp_gso_gro_ipv6_write_read() {
    let r = offload("wire_udp_gso_gro_ipv6_write_read", "udp", "mix");
    if r.is_null() {
        return;
    }
    assert_eq!(r["bytes"], 4u64 << 20, "{r}");
    // WRITEs: the client's GSO buffers reach the server's socket whole and are split there.
    assert!(counter(&r, "server", "rx_gro_segments") > 0, "{r}");
    // READ responses: the server segments, the client splits.
    assert!(counter(&r, "server", "tx_gso_segments") > 0, "{r}");
    assert!(counter(&r, "client", "rx_gro_segments") > 0, "{r}");
}

#[test]
fn wire_udp_gso_gro_ipv6_verbs() {
    let r = offload("wire_udp_gso_gro_ipv6_verbs", "udp", "verbs");
    if r.is_null() {
        return;
    }
    assert_eq!(r["final"], 42, "{r}");
    assert!(counter(&r, "server", "rx_gro_segments") > 0, "{r}");
}

#[test]
fn wire_udp_gso_to_xdp_receiver_verifies_icrc() {
    let r = offload("wire_udp_gso_to_xdp_receiver_verifies_icrc", "xdp", "mix");
    if r.is_null() {
        return;
    }
    assert_eq!(r["bytes"], 4u64 << 20, "{r}");
    // Every segment reached the AF_XDP socket as its own frame and passed the core's ICRC
    // check (icrc_error is 0 above); nothing was dropped as truncated.
    assert_eq!(counter(&r, "server", "rx_truncated"), 0, "{r}");
    assert!(counter(&r, "server", "rx_packets") > 0, "{r}");
}

#[test]
fn wire_udp_gso_to_packet_receiver_splits_buffers() {
    let r = offload(
        "wire_udp_gso_to_packet_receiver_splits_buffers",
        "packet",
        "mix",
    );
    if r.is_null() {
        return;
    }
    assert_eq!(r["bytes"], 4u64 << 20, "{r}");
    // The WRITEs' GSO buffers reached the packet socket whole and were cut there, every
    // segment passing the core's ICRC check (icrc_error is 0 above); none was dropped as
    // oversized.
    let split = counter(&r, "server", "rx_gso_split");
    eprintln!("server rx_gso_split {split}");
    assert!(split > 0, "{r}");
    assert_eq!(counter(&r, "server", "rx_truncated"), 0, "{r}");
    assert_eq!(drop_count(&r, "bad_udp_checksum"), 0, "{r}");
}

#[test]
fn wire_udp_no_gso_flag_sends_datagrams_one_by_one() {
    let test = "wire_udp_no_gso_flag_sends_datagrams_one_by_one";
    if !need_root(test) {
        return;
    }
    let r = transfer(
        &pair(),
        &["--datapath", "packet"],
        &["--datapath", "udp", "--no-udp-gso"],
        "mix",
    );
    assert_eq!(r["bytes"], 4u64 << 20, "{r}");
    assert_eq!(counter(&r, "client", "tx_gso_segments"), 0, "{r}");
    assert_eq!(counter(&r, "server", "rx_gso_split"), 0, "{r}");
    assert!(counter(&r, "server", "rx_packets") > 0, "{r}");
}

#[test]
fn wire_udp_gso_segmented_in_software_verifies() {
    let test = "wire_udp_gso_segmented_in_software_verifies";
    if !need_root(test) {
        return;
    }
    let tb = pair();
    // Without transmit checksum offload on the client's veth the kernel cuts its GSO buffers
    // into datagrams in software before the link (older kernels refused the send with EIO,
    // which turns GSO off instead): the server receives ordinary datagrams.
    let mut tx_off = tb.command("h0", "ethtool").expect("command");
    tx_off.args(["-K", &ifname(&tb, "h0"), "tx", "off"]);
    let out = rocev2_testbed::exec::run(&mut tx_off, Duration::from_secs(10)).expect("ethtool");
    assert!(out.status.success(), "ethtool -K tx off: {}", out.stderr);
    let r = transfer(
        &tb,
        &["--datapath", "udp", "--udp-gso"],
        &["--datapath", "udp", "--udp-gso"],
        "mix",
    );
    assert_eq!(r["bytes"], 4u64 << 20, "{r}");
    assert_eq!(drop_count(&r, "icrc_error"), 0, "{r}");
    assert_eq!(counter(&r, "client", "tx_errors"), 0, "{r}");
    let sent = counter(&r, "client", "tx_gso_segments");
    eprintln!(
        "{test}: client tx_gso_segments {sent}, server rx_gro_segments {}",
        counter(&r, "server", "rx_gro_segments")
    );
    if sent > 0 {
        // Segmented before the veth: nothing arrives coalesced at the server, and every
        // segment (its checksum finished in software, its ICRC the core's) was accepted.
        assert_eq!(counter(&r, "server", "rx_gro_segments"), 0, "{r}");
    }
}
