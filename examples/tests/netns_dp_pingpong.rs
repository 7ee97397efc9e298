//! `dp_pingpong` (the datapath's round trip without the engine, the floor the bench compares
//! `rc_pingpong --busy-poll` with) bounces its frame the asked number of times over each
//! datapath, between two namespaces, and both sides print the ping-pongs' round-trip lines.

mod common;
use common::*;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_dp_pingpong");

fn bounces(test: &str, datapath: &str) {
    if !need_root(test) {
        return;
    }
    let tb = pair();
    let port = PORT.to_string();
    let args = ["--datapath", datapath, "-s", "64", "-n", "300", "-p", &port];
    let (s, c) = run_pair(&tb, BIN, &args, Duration::from_secs(60));
    // The server's first round trip includes waiting for the client: it reports one fewer.
    for (out, samples) in [(&c.stdout, 300), (&s.stdout, 299)] {
        let rt = out
            .lines()
            .find(|l| l.starts_with("round trip: median "))
            .unwrap_or_else(|| panic!("no round-trip line in\n{out}"));
        assert!(rt.contains(&format!(", {samples} samples, ")), "{out}");
        assert!(out.lines().any(|l| l.starts_with("300 iters in ")), "{out}");
        assert!(out.lines().any(|l| l.starts_with("cpu: ")), "{out}");
    }
}

#[test]
fn dp_pingpong_xdp_bounces() {
    bounces("dp_pingpong_xdp_bounces", "xdp");
}

#[test]
fn dp_pingpong_packet_bounces() {
    bounces("dp_pingpong_packet_bounces", "packet");
}

#[test]
fn dp_pingpong_udp_bounces() {
    bounces("dp_pingpong_udp_bounces", "udp");
}
