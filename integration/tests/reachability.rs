//! Scenario: every topology comes up, and every host reaches every other host by UDP on port
//! 4791 and on 5001, over IPv4 and IPv6 (echo servers on all hosts, pings from all hosts).
//! Covers the three deploy/testbeds files and the shapes they do not: a bridged star, bridged
//! and routed dumbbells.

mod common;

use common::{PORTS, all_pairs_reachable, echo_on_every_host, need_root, topology_file};
use rocev2_testbed::{LinkParams, SwitchKind, Testbed, Topology};
use std::time::Instant;

fn check(what: &str, topology: &Topology, hosts: usize) {
    if !need_root(what) {
        return;
    }
    let start = Instant::now();
    let tb = Testbed::up_topology(topology).unwrap();
    let up = start.elapsed();
    assert_eq!(tb.hosts().count(), hosts);
    let _echo = echo_on_every_host(&tb, &PORTS);
    let checked = all_pairs_reachable(&tb, &PORTS);
    // Every ordered pair, two ports, two address families.
    assert_eq!(checked, hosts * (hosts - 1) * PORTS.len() * 2);
    eprintln!(
        "{what}: up in {up:?}, {checked} host/address/port pairs reachable, {:?} total",
        start.elapsed()
    );
}

#[test]
fn pair_file_all_pairs_reachable() {
    check("pair.toml", &topology_file("pair.toml").topology, 2);
}

#[test]
fn incast8_file_all_pairs_reachable() {
    check("incast8.toml", &topology_file("incast8.toml").topology, 9);
}

#[test]
fn leafspine_2x4_file_all_pairs_reachable() {
    check(
        "leafspine-2x4.toml",
        &topology_file("leafspine-2x4.toml").topology,
        8,
    );
}

#[test]
fn bridged_star_all_pairs_reachable() {
    let t = Topology::Star {
        senders: 3,
        switch: SwitchKind::Bridge,
        link: LinkParams::new().rate(1_000_000_000, 65_536),
    };
    check("bridged star", &t, 4);
}

#[test]
fn bridged_dumbbell_all_pairs_reachable() {
    let t = Topology::Dumbbell {
        left: 2,
        right: 2,
        switch: SwitchKind::Bridge,
        link: LinkParams::new().mtu(1500),
        bottleneck: None,
    };
    check("bridged dumbbell", &t, 4);
}

#[test]
fn routed_dumbbell_all_pairs_reachable() {
    let t = Topology::Dumbbell {
        left: 2,
        right: 1,
        switch: SwitchKind::Router,
        link: LinkParams::default(),
        bottleneck: Some(LinkParams::new().rate(100_000_000, 65_536)),
    };
    check("routed dumbbell", &t, 3);
}
