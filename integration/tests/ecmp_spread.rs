//! Scenario: on a leaf-spine, the UDP source port chooses the spine. Between two hosts on
//! different leaves, 64 source ports use every spine (IPv4 and IPv6), while one source port
//! keeps to one spine, twice in a row. Paths are read from the transmit counters of the
//! source leaf's uplinks (`/sys/class/net/*/statistics` inside its namespace).

mod common;

use common::{echo_on, need_root, ping_from, targets};
use rocev2_testbed::{IfCounters, LinkParams, PortSelection, Role, SwitchPort, Testbed, Topology};

/// Echo requests per source port.
const COUNT: u64 = 2;
/// Source ports tried: 64, as the issue asks.
const PORTS: (u16, u16) = (40000, 40063);
/// Packets an idle uplink may still send meanwhile (ARP/ND toward its spine).
const NOISE: u64 = 4;

fn snapshot(uplinks: &[SwitchPort]) -> Vec<IfCounters> {
    uplinks.iter().map(|p| p.counters().unwrap()).collect()
}

/// Transmitted packets per uplink since `before`.
fn sent_since(uplinks: &[SwitchPort], before: &[IfCounters]) -> Vec<u64> {
    snapshot(uplinks)
        .iter()
        .zip(before)
        .map(|(now, then)| now.since(then).tx_packets)
        .collect()
}

fn args(target: std::net::SocketAddr, ports: &str, count: u64) -> Vec<String> {
    [
        "--target",
        &target.to_string(),
        "--src-ports",
        ports,
        "--count",
        &count.to_string(),
    ]
    .map(str::to_owned)
    .to_vec()
}

#[test]
fn leaf_spine_source_port_picks_spine() {
    if !need_root("leaf_spine_source_port_picks_spine") {
        return;
    }
    let spines = 4;
    let tb = Testbed::up_topology(&Topology::LeafSpine {
        leaves: 2,
        spines,
        hosts_per_leaf: 1,
        link: LinkParams::default(),
        fabric: None,
    })
    .unwrap();
    let uplinks = tb.switch_ports(&PortSelection::all().on("l0").toward_role(Role::Router));
    assert_eq!(uplinks.len(), spines);
    let _echo = echo_on(&tb, "l1h0", &[4791]);
    let [v4, v6] = targets(tb.node("l1h0").unwrap(), 4791);
    let range = format!("{}-{}", PORTS.0, PORTS.1);
    let flows = u64::from(PORTS.1 - PORTS.0 + 1);

    for target in [v4, v6] {
        let before = snapshot(&uplinks);
        let report = ping_from(&tb, "l0h0", &args(target, &range, COUNT));
        assert_eq!(report.results.len() as u64, flows);
        assert_eq!(report.lossy().count(), 0, "{report:?}");
        let sent = sent_since(&uplinks, &before);
        eprintln!("{target}: requests per spine over {flows} source ports: {sent:?}");
        assert!(sent.iter().sum::<u64>() >= flows * COUNT, "{sent:?}");
        for (port, n) in uplinks.iter().zip(&sent) {
            // At least one flow (COUNT requests) on every spine.
            assert!(
                *n >= COUNT,
                "spine {} unused over {flows} source ports: {sent:?}",
                port.peer
            );
        }
    }

    // One source port: all its packets on one spine, the same one each time.
    let mut chosen = Vec::new();
    for _ in 0..2 {
        let before = snapshot(&uplinks);
        let report = ping_from(&tb, "l0h0", &args(v4, "40100", 20));
        assert_eq!(report.lossy().count(), 0, "{report:?}");
        let sent = sent_since(&uplinks, &before);
        let busy: Vec<usize> = (0..spines).filter(|&i| sent[i] >= 20).collect();
        assert_eq!(
            busy.len(),
            1,
            "one flow spread over several spines: {sent:?}"
        );
        assert!(
            sent.iter()
                .enumerate()
                .all(|(i, &n)| i == busy[0] || n <= NOISE),
            "{sent:?}"
        );
        chosen.push(busy[0]);
    }
    assert_eq!(chosen[0], chosen[1], "the same source port changed spine");
}
