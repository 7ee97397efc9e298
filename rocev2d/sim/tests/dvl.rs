//! DVL in the model (seed 003): on a lossless dumbbell, a flow into a slow port is isolated
//! there and, through the notification, on the upstream switch's uplink; a victim flow through
//! the same switches to another port keeps its throughput, which PFC's head-of-line blocking
//! takes from it without DVL; neither flow is reordered.

use crate::common;

use rocev2_core::time::Rate;
use rocev2_sim::Sim;
use rocev2_sim::scenario::Scenario;
use rocev2_sim::switch_node::{DvlSpec, PfcSpec};
use rocev2_sim::workload::WorkloadSpec;

/// Hosts 0, 1 on the left switch (node 4), 2, 3 on the right one (node 5).
const LEFT: u32 = 4;
const RIGHT: u32 = 5;
/// The victim is measured over this window, ns (after the congestion built up).
const FROM: u64 = 1_000_000;
const TO: u64 = 3_000_000;

fn scenario(pairs: Vec<(u32, u32)>, dvl: bool) -> Scenario {
    let mut s = common::scenario(
        common::dumbbell(2, 2, 10.0, 40.0, 1000),
        vec![WorkloadSpec::LongLived { pairs, start_ns: 0 }],
        TO,
    );
    s.switch.buffer_bytes = 1_000_000;
    s.switch.red = None;
    s.switch.pfc = PfcSpec {
        enabled: true,
        ..PfcSpec::default()
    };
    if dvl {
        s.switch.dvl = Some(DvlSpec {
            threshold_bytes: 30_000,
            hold_ns: 100_000,
        });
    }
    s
}

struct Run {
    sim: Sim,
    /// Victim throughput over the window, Gbit/s (its last hop's frame bytes).
    victim_gbps: f64,
}

/// Runs `pairs` with host 2's port slowed to 2 Gbit/s; the victim sends 1 → 3.
fn run(pairs: Vec<(u32, u32)>, dvl: bool) -> Run {
    let mut sim = Sim::new(&scenario(pairs, dvl)).unwrap();
    let (to2, _) = sim.link_ports(RIGHT, 2).unwrap();
    let (to3, _) = sim.link_ports(RIGHT, 3).unwrap();
    sim.set_port_rate(to2, Rate::from_gbps(2));
    sim.run_until(FROM);
    let before = sim.ports()[to3 as usize].stats.tx_bytes;
    sim.run_until(TO);
    let bytes = sim.ports()[to3 as usize].stats.tx_bytes - before;
    Run {
        victim_gbps: bytes as f64 * 8.0 / (TO - FROM) as f64,
        sim,
    }
}

#[test]
fn dvl_isolates_congested_flow_upstream_and_spares_victim() {
    let alone = run(vec![(1, 3)], true);
    let plain = run(vec![(0, 2), (1, 3)], false);
    let dvl = run(vec![(0, 2), (1, 3)], true);
    let sim = &dvl.sim;
    let (to2, _) = sim.link_ports(RIGHT, 2).unwrap();
    let (up, _) = sim.link_ports(LEFT, RIGHT).unwrap();
    let (to3, _) = sim.link_ports(RIGHT, 3).unwrap();
    let (p2, pu) = (
        sim.ports()[to2 as usize].stats,
        sim.ports()[up as usize].stats,
    );
    eprintln!(
        "victim {:.3} Gbit/s alone, {:.3} without DVL ({:.1}%), {:.3} with DVL ({:.1}%); \
         right→2: isolated {} congested {} notify_sent {}; uplink: notify_received {} \
         congested {} isolated {}; PAUSE sent by the right switch {} (DVL) / {} (plain)",
        alone.victim_gbps,
        plain.victim_gbps,
        100.0 * plain.victim_gbps / alone.victim_gbps,
        dvl.victim_gbps,
        100.0 * dvl.victim_gbps / alone.victim_gbps,
        p2.dvl_isolated,
        p2.dvl_congested,
        p2.dvl_notify_sent,
        pu.dvl_notify_received,
        pu.dvl_congested,
        pu.dvl_isolated,
        pause_sent(sim, RIGHT),
        pause_sent(&plain.sim, RIGHT),
    );
    // Isolated where it is congested, by detection, and upstream by the notification only.
    assert!(p2.dvl_isolated >= 1 && p2.dvl_notify_sent >= 1);
    assert_eq!(p2.dvl_table_full, 0);
    assert!(pu.dvl_notify_received >= 1 && pu.dvl_congested > 0);
    assert_eq!(pu.dvl_isolated, 0, "the uplink detected congestion itself");
    for port in [to2, up] {
        let (_, cft) = sim.ports()[port as usize].dvl.as_deref().unwrap();
        assert_eq!(
            cft.len(),
            1,
            "port {port}: only the congested flow is isolated"
        );
    }
    let (_, cft) = sim.ports()[to3 as usize].dvl.as_deref().unwrap();
    assert!(cft.is_empty());
    // The congested flow is flow 0, the victim flow 1.
    assert!(sim.flows()[0].cfq_packets > 0);
    assert_eq!(sim.flows()[1].cfq_packets, 0, "the victim was isolated");
    // The victim keeps its throughput with DVL, and measurably less without.
    assert!(
        dvl.victim_gbps >= 0.9 * alone.victim_gbps,
        "victim {:.3} of {:.3} Gbit/s with DVL",
        dvl.victim_gbps,
        alone.victim_gbps
    );
    assert!(
        plain.victim_gbps < 0.8 * alone.victim_gbps,
        "victim {:.3} of {:.3} Gbit/s without DVL: no head-of-line blocking to remove",
        plain.victim_gbps,
        alone.victim_gbps
    );
    // No reordering within either flow (the responders count PSN gaps), and nothing lost.
    for f in 0..2 {
        let c = sim.qp_counters(f, false).unwrap();
        assert_eq!((c.out_of_sequence, c.naks_sent), (0, 0), "flow {f}");
        assert_eq!(sim.flows()[f as usize].dropped_bytes, 0, "flow {f}");
    }
    assert!(sim.flows()[0].sent_bytes > 0);
}

fn pause_sent(sim: &Sim, node: u32) -> u64 {
    sim.ports()
        .iter()
        .filter(|p| p.node == node)
        .map(|p| p.stats.pause_sent)
        .sum()
}
