//! ECMP spreads many flows evenly over equal-cost paths: chi-square over a leaf's uplinks.

use crate::common;

use rocev2_sim::Sim;
use rocev2_sim::topology::TopologySpec;
use rocev2_sim::workload::WorkloadSpec;

#[test]
fn ecmp_spreads_flows_evenly_over_spines() {
    let spines = 4u32;
    let mut flows = Vec::new();
    // 400 one-packet flows from leaf 0's hosts (0..8) to leaf 1's hosts (8..16).
    for i in 0..400u32 {
        flows.push((i % 8, 8 + (i / 8) % 8, 512, i as u64 * 200));
    }
    let s = common::scenario(
        TopologySpec::LeafSpine {
            leaves: 2,
            spines,
            hosts_per_leaf: 8,
            rate_gbps: 10.0,
            uplink_gbps: None,
            oversubscription: None,
            delay_ns: 500,
        },
        vec![WorkloadSpec::Flows { flows }],
        200_000,
    );
    let mut sim = Sim::new(&s).unwrap();
    sim.run();
    assert!(sim.flows().iter().all(|f| f.finish_ns.is_some()));
    // Leaf 0 is node 16; its uplink ports are those whose peer is a spine (nodes 18..22).
    let ports = sim.ports();
    let counts: Vec<u64> = ports
        .iter()
        .filter(|p| p.node == 16 && ports[p.peer as usize].node >= 18)
        .map(|p| p.stats.tx_packets)
        .collect();
    assert_eq!(counts.len(), spines as usize);
    // Each flow is one data packet up (ACKs come back down through the other leaf).
    let total: u64 = counts.iter().sum();
    assert_eq!(total, 400);
    let mean = total as f64 / spines as f64;
    let chi2: f64 = counts
        .iter()
        .map(|&c| (c as f64 - mean).powi(2) / mean)
        .sum();
    eprintln!("per-spine packets {counts:?}, chi2 {chi2:.2}");
    // 3 degrees of freedom: P(chi2 > 16.27) = 0.001.
    assert!(chi2 < 16.27, "uneven: {counts:?}");
    let max = *counts.iter().max().unwrap() as f64;
    assert!(max / mean < 1.3, "max/mean {:.2}", max / mean);
}
