//! Scenario: two testbeds up at once, with the very same addresses, do not interfere. An echo
//! server in one answers only its own testbed's pings, traffic in one leaves the other's
//! counters alone, and taking one down leaves the other working.

mod common;

use common::{echo_on, need_root, ping_from, targets};
use rocev2_testbed::{LinkParams, Testbed, Topology};

fn ping_args(target: std::net::SocketAddr, count: u32) -> Vec<String> {
    let timeout = "200".to_owned();
    vec![
        "--target".into(),
        target.to_string(),
        "--count".into(),
        count.to_string(),
        "--timeout-ms".into(),
        timeout,
    ]
}

#[test]
fn two_testbeds_same_addresses_do_not_interfere() {
    if !need_root("two_testbeds_same_addresses_do_not_interfere") {
        return;
    }
    let pair = Topology::Pair {
        link: LinkParams::default(),
    };
    let a = Testbed::up_topology(&pair).unwrap();
    let b = Testbed::up_topology(&pair).unwrap();
    let (a_h1, b_h1) = (a.node("h1").unwrap(), b.node("h1").unwrap());
    assert_ne!(a_h1.netns, b_h1.netns);
    assert_eq!(a_h1.ipv4(), b_h1.ipv4(), "the point is identical addresses");

    // Echo on 4791 in A only, on 4792 in B only.
    let _echo_a = echo_on(&a, "h1", &[4791]);
    let _echo_b = echo_on(&b, "h1", &[4792]);
    let [a4791, _] = targets(a_h1, 4791);
    let [b4792, _] = targets(b_h1, 4792);

    let b_before = b.counters("h1", "h0").unwrap();
    let report = ping_from(&a, "h0", &ping_args(a4791, 10));
    assert_eq!(report.results[0].received, 10, "{report:?}");
    // A's traffic never reached B: its ten pings would all be counted there. A fresh
    // interface's own link-local chatter (IPv6 router solicitation, MLD) may still arrive
    // while A pings, so the bound is A's count, not zero (one such packet made this flaky).
    let leaked = b.counters("h1", "h0").unwrap().since(&b_before).rx_packets;
    assert!(
        leaked < 10,
        "{leaked} packets reached B while A pinged 10 times"
    );

    let report = ping_from(&b, "h0", &ping_args(a4791, 2));
    assert_eq!(
        report.results[0].received, 0,
        "B's h0 reached A's echo server: {report:?}"
    );
    let report = ping_from(&a, "h0", &ping_args(b4792, 2));
    assert_eq!(
        report.results[0].received, 0,
        "A's h0 reached B's echo server: {report:?}"
    );
    let report = ping_from(&b, "h0", &ping_args(b4792, 3));
    assert_eq!(report.results[0].received, 3, "{report:?}");

    // Down with A; B still works.
    a.down().unwrap();
    let report = ping_from(&b, "h0", &ping_args(b4792, 3));
    assert_eq!(report.results[0].received, 3, "{report:?}");
}
