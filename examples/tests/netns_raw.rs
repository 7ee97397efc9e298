//! The raw-frame tools (`rocev2_examples::raw`) between two namespaces: `dp_pingpong` (the
//! datapath's round trip without the engine, the floor the bench compares `rc_pingpong
//! --busy-poll` with) bounces its frame the asked number of times over each datapath, with and
//! without RC's acknowledgement frames, and both sides print the ping-pongs' round-trip lines;
//! `dp_stream` (the ceiling over `write_bw`) reports what it sent and what arrived.

mod common;
use common::*;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_dp_pingpong");
const STREAM: &str = env!("CARGO_BIN_EXE_dp_stream");

fn bounces(test: &str, datapath: &str, acks: &str) {
    if !need_root(test) {
        return;
    }
    let tb = pair();
    let port = PORT.to_string();
    let args = [
        "--datapath",
        datapath,
        "--acks",
        acks,
        "-s",
        "64",
        "-n",
        "300",
        "-p",
        &port,
    ];
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
        // Every frame was a message or an acknowledgement of the expected length.
        assert!(out.contains(", other frames 0"), "{out}");
    }
}

#[test]
fn dp_pingpong_xdp_bounces() {
    bounces("dp_pingpong_xdp_bounces", "xdp", "none");
}

#[test]
fn dp_pingpong_packet_bounces() {
    bounces("dp_pingpong_packet_bounces", "packet", "none");
}

#[test]
fn dp_pingpong_udp_bounces() {
    bounces("dp_pingpong_udp_bounces", "udp", "none");
}

/// RC's four frames per round trip, in both orders: each side waits for the acknowledgement of
/// its message before it sends the next, so a lost or misread acknowledgement stalls the run.
#[test]
fn dp_pingpong_xdp_bounces_with_acks_first_and_last() {
    bounces("dp_pingpong_xdp_bounces_with_acks_first", "xdp", "first");
    bounces("dp_pingpong_xdp_bounces_with_acks_last", "xdp", "last");
}

/// The server counts every frame as the client's (none of another length) and hears how many
/// were sent, and both print a goodput.
#[test]
fn dp_stream_xdp_counts_what_arrived() {
    if !need_root("dp_stream_xdp_counts_what_arrived") {
        return;
    }
    let tb = pair();
    let port = PORT.to_string();
    let args = ["--datapath", "xdp", "-n", "4000", "-p", &port];
    let (s, c) = run_pair(&tb, STREAM, &args, Duration::from_secs(60));
    assert!(
        c.stdout.contains("sent 4000 frames of 4096 bytes in "),
        "{}",
        c.stdout
    );
    let counts = s
        .stdout
        .lines()
        .find(|l| l.starts_with("frames sent "))
        .unwrap_or_else(|| panic!("no count line in\n{}", s.stdout));
    assert!(
        counts.starts_with("frames sent 4000, received "),
        "{counts}"
    );
    assert!(counts.ends_with(", other frames 0"), "{counts}");
    for out in [&s.stdout, &c.stdout] {
        assert!(out.lines().any(|l| l.starts_with("goodput: ")), "{out}");
    }
}
