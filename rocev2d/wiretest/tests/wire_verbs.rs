//! Every verb over a real veth pair, each datapath, IPv4 and IPv6: SEND (one and several
//! packets), SEND with immediate, RDMA WRITE, WRITE with immediate, RDMA READ, FetchAdd and
//! CmpSwap, every byte and completion checked by the client peer against the server's memory.
//! Also `--datapath auto` on both sides, the server without privileges: it must fall back to UDP
//! sockets (and say why) and still interoperate with the root client, which picks AF_XDP.

mod common;
use common::*;
use std::time::Duration;

fn verbs(test: &str, mode: &str, ipv6: bool) {
    if !need_root(test) {
        return;
    }
    let tb = pair();
    let dp = ["--datapath", mode];
    let r = run(
        &tb,
        ipv6,
        &dp,
        &[&dp[..], &["--workload", "verbs"]].concat(),
        Duration::from_secs(60),
    );
    assert_eq!(r["final"], 42, "{r}");
    assert_eq!(r["server"]["snapshot"]["datapath"], mode);
    assert_eq!(drop_count(&r, "icrc_error"), 0, "{r}");
    let qp = r["server"]["snapshot"]["qps"]
        .as_object()
        .and_then(|q| q.values().next())
        .cloned()
        .expect("server QP");
    assert_eq!(qp["state"], "rts");
    assert_eq!(qp["counters"]["naks_sent"], 0, "{qp}");
}

#[test]
fn wire_verbs_udp_ipv4() {
    verbs("wire_verbs_udp_ipv4", "udp", false);
}

#[test]
fn wire_verbs_packet_ipv4() {
    verbs("wire_verbs_packet_ipv4", "packet", false);
}

#[test]
fn wire_verbs_xdp_ipv4() {
    verbs("wire_verbs_xdp_ipv4", "xdp", false);
}

#[test]
fn wire_verbs_udp_ipv6() {
    verbs("wire_verbs_udp_ipv6", "udp", true);
}

#[test]
fn wire_verbs_packet_ipv6() {
    verbs("wire_verbs_packet_ipv6", "packet", true);
}

#[test]
fn wire_verbs_xdp_ipv6() {
    verbs("wire_verbs_xdp_ipv6", "xdp", true);
}

#[test]
fn wire_auto_without_cap_net_raw_falls_back_to_udp() {
    let test = "wire_auto_without_cap_net_raw_falls_back_to_udp";
    if !need_root(test) {
        return;
    }
    if !can_run_as_nobody(test, &wiretest()) {
        return;
    }
    let tb = pair();
    let nobody = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ];
    let srv = server_via(&tb, &nobody, &["--datapath", "auto"]);
    let cli = client(&tb, false, &["--datapath", "auto", "--workload", "verbs"]);
    let out = cli.wait(Duration::from_secs(60)).expect("client finished");
    let ready = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("READY "))
        .expect("client READY line");
    let ready: serde_json::Value = serde_json::from_str(ready).expect("READY is JSON");
    assert_eq!(
        ready["datapath"], "xdp",
        "auto prefers AF_XDP as root: {ready}"
    );
    let r = result(&out);
    let snap = &r["server"]["snapshot"];
    assert_eq!(snap["datapath"], "udp", "{snap}");
    assert!(
        snap["datapath_reason"].as_str().is_some_and(
            |s| s.contains("AF_XDP unavailable") && s.contains("AF_PACKET not permitted")
        ),
        "{snap}"
    );
    assert_eq!(r["final"], 42);
    let s = srv.wait(SETUP).expect("server exits");
    assert!(s.status.success(), "{}", s.stderr);
}
