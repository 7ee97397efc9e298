//! PFC: an 8:1 incast through a small buffer loses nothing with PAUSE enabled and drops
//! (counted) without it.

use crate::common;

use rocev2_sim::Sim;
use rocev2_sim::workload::WorkloadSpec;

fn incast(pfc: bool) -> Sim {
    let mut s = common::scenario(
        common::star(9, 40.0, 1000),
        vec![WorkloadSpec::Incast {
            receiver: 0,
            senders: None,
            degree: Some(8),
            size_bytes: 256 * 1024,
            jitter_ns: 0,
            rounds: None,
            period_ns: 0,
            start_ns: 0,
            lookahead: true,
        }],
        2_000_000,
    );
    s.switch.buffer_bytes = 200_000;
    s.switch.red = None;
    s.switch.pfc.enabled = pfc;
    s.host.timeout = 4; // 65 µs, so the lossy run recovers inside the window
    let mut sim = Sim::new(&s).unwrap();
    sim.run();
    sim
}

fn drops(sim: &Sim) -> u64 {
    sim.ports().iter().map(|p| p.stats.drops).sum()
}

#[test]
fn pfc_incast_8_to_1_is_lossless() {
    let sim = incast(true);
    let pauses: u64 = sim.ports().iter().map(|p| p.stats.pause_sent).sum();
    let paused: u64 = sim.ports().iter().map(|p| p.stats.paused_ns).sum();
    eprintln!("pauses {pauses}, paused {paused} ns, drops {}", drops(&sim));
    assert!(pauses > 0, "the incast must trigger PAUSE");
    assert_eq!(drops(&sim), 0);
    assert!(
        sim.flows()
            .iter()
            .all(|f| f.finish_ns.is_some() && f.retransmits == 0)
    );
}

#[test]
fn no_pfc_incast_8_to_1_drops_and_counts() {
    let sim = incast(false);
    let d = drops(&sim);
    eprintln!("drops {d}");
    assert!(d > 0);
    let per_flow: u64 = sim.flows().iter().map(|f| f.dropped_bytes).sum();
    let per_port: u64 = sim.ports().iter().map(|p| p.stats.drop_bytes).sum();
    assert_eq!(per_flow, per_port, "every drop is attributed to its flow");
    assert!(sim.flows().iter().any(|f| f.retransmits > 0));
}
