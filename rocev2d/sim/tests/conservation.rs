//! Bytes are neither created nor lost by the model: per flow, sent = delivered + dropped + in
//! flight; per switch, received = sent + dropped + held. Checked in the middle of a lossy,
//! congested run (so every term is non-zero somewhere) and at its end.

use crate::common;

use rocev2_sim::Sim;
use rocev2_sim::workload::WorkloadSpec;

#[test]
fn bytes_balance_per_flow_and_per_switch() {
    // 6:1 incast through a small tail-drop buffer, plus cross traffic.
    let mut s = common::scenario(
        common::dumbbell(6, 2, 10.0, 10.0, 1000),
        vec![
            WorkloadSpec::Incast {
                receiver: 6,
                senders: Some(vec![0, 1, 2, 3, 4, 5]),
                degree: None,
                size_bytes: 200_000,
                jitter_ns: 2_000,
                rounds: None,
                period_ns: 0,
                start_ns: 0,
                lookahead: true,
            },
            WorkloadSpec::Flows {
                flows: vec![(7, 0, 100_000, 0)],
            },
        ],
        3_000_000,
    );
    s.switch.buffer_bytes = 40_000;
    s.switch.red = None;
    s.host.timeout = 3; // 33 µs
    let mut sim = Sim::new(&s).unwrap();
    let mut checked_in_flight = false;
    for t in (50_000..=3_000_000).step_by(20_000) {
        sim.run_until(t);
        let (flows, switches) = sim.conservation();
        for (i, f) in flows.iter().enumerate() {
            assert_eq!(
                f.sent,
                f.delivered + f.dropped + f.in_flight,
                "flow {i} at {t} ns: {f:?}"
            );
        }
        checked_in_flight |=
            flows.iter().any(|f| f.in_flight > 0) && flows.iter().any(|f| f.dropped > 0);
        for (i, b) in switches.iter().enumerate() {
            assert_eq!(
                b.rx,
                b.tx + b.dropped + b.held,
                "switch {i} at {t} ns: {b:?}"
            );
        }
    }
    assert!(
        checked_in_flight,
        "the run never had drops and packets in flight at once"
    );
    let dropped: u64 = sim.conservation().0.iter().map(|f| f.dropped).sum();
    assert!(dropped > 0, "the buffer should have overflowed");
    // Without congestion control or PFC, go-back-N under tail drop may exhaust retries
    // (RETRY_EXC_ERR); either way every flow must have reached a final state.
    assert!(
        sim.flows()
            .iter()
            .all(|f| f.finish_ns.is_some() || f.failed.is_some()),
        "a flow is stuck"
    );
    assert!(sim.flows().iter().any(|f| f.finish_ns.is_some()));
    assert_eq!(sim.stats().unattributed, 0);
}
