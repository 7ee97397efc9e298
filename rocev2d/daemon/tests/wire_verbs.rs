//! Every verb over a real veth pair, each datapath, IPv4 and IPv6: SEND (one and several
//! packets), SEND with immediate, RDMA WRITE, WRITE with immediate, RDMA READ, FetchAdd and
//! CmpSwap, every byte and completion checked by the client peer against the server's memory.

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
fn wire_verbs_udp_ipv6() {
    verbs("wire_verbs_udp_ipv6", "udp", true);
}

#[test]
fn wire_verbs_packet_ipv6() {
    verbs("wire_verbs_packet_ipv6", "packet", true);
}
