//! The marking frequency a switch applies follows the configured RED curve (seed 002 Fig. 1),
//! within binomial tolerance, across the ramp between K_min and K_max.

use crate::common;

use rocev2_sim::Sim;
use rocev2_sim::switch_node::{MarkAt, RedSpec};
use rocev2_sim::topology::TopologySpec;
use rocev2_sim::workload::WorkloadSpec;

#[test]
fn red_marking_frequency_matches_curve() {
    check_curve(MarkAt::Enqueue);
}

/// Marking as packets leave (the DCQCN authors' ns-3 model) follows the same curve, judged on
/// the queue left behind.
#[test]
fn red_dequeue_marking_frequency_matches_curve() {
    check_curve(MarkAt::Dequeue);
}

fn check_curve(mark_at: MarkAt) {
    let (kmin, kmax, pmax) = (10_000u64, 60_000u64, 0.5f64);
    // Rounds of a 4:1 incast (4 × 32 KB at 40 Gbit/s into a 10 Gbit/s port) build the egress
    // queue from empty to about 96 KB and let it drain again, so every round sweeps the whole
    // ramp and beyond. The buffer is large enough that nothing is dropped.
    let mut s = common::scenario(
        TopologySpec::Star {
            hosts: 5,
            rate_gbps: 40.0,
            delay_ns: 500,
        },
        vec![WorkloadSpec::Incast {
            receiver: 0,
            senders: None,
            degree: Some(4),
            size_bytes: 32 * 1024,
            jitter_ns: 0,
            rounds: Some(12),
            period_ns: 40_000,
            start_ns: 0,
            lookahead: true,
        }],
        500_000,
    );
    s.host.mtu = 256;
    s.switch.buffer_bytes = 1_000_000;
    s.switch.red = Some(RedSpec {
        kmin_bytes: kmin as u32,
        kmax_bytes: kmax as u32,
        pmax_percent: pmax * 100.0,
        drop_non_ect: false,
        mark_at,
    });
    let mut sim = Sim::new(&s).unwrap();
    sim.record_marks();
    sim.run();
    let log = sim.marks();
    let expected = |q: u64| {
        if q <= kmin {
            0.0
        } else if q > kmax {
            1.0
        } else {
            pmax * (q - kmin) as f64 / (kmax - kmin) as f64
        }
    };
    // Bins of 5 KB over [0, 80 KB).
    let mut checked = 0;
    for lo in (0..80_000).step_by(5_000) {
        let hi = lo + 5_000;
        let in_bin: Vec<_> = log.iter().filter(|(q, _)| (lo..hi).contains(q)).collect();
        let n = in_bin.len() as f64;
        if n < 200.0 {
            continue;
        }
        let marked = in_bin.iter().filter(|(_, m)| *m).count() as f64;
        let p: f64 = in_bin.iter().map(|(q, _)| expected(*q)).sum::<f64>() / n;
        let sigma = (p * (1.0 - p) / n).sqrt().max(1e-9);
        let got = marked / n;
        eprintln!("[{lo},{hi}): n={n} expected {p:.4} got {got:.4}");
        assert!(
            (got - p).abs() <= 4.0 * sigma + 1.0 / 65536.0,
            "bin [{lo}, {hi}): expected {p:.4}, got {got:.4} (n = {n})"
        );
        checked += 1;
    }
    assert!(checked >= 12, "only {checked} bins had enough samples");
}
