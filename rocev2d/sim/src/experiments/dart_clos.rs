//! Seed 000 §VI at scale: the 1024-host Clos of §VI-A (`deploy/scenarios/dart_clos_1024.toml`,
//! the one description of that set-up) under its mix of background long flows and 16-sender
//! incasts of 2/4/8 KB, at one load per run; the short flows' p50 and p99 FCT (Fig. 11(a),
//! Fig. 12), the network's throughput (Fig. 13) and the ECN marks short-flow packets carry
//! (Table I), for Dart (DASR + IOFD + DCQCN fall-back), DCQCN, DCQCN+ and TIMELY.
//!
//! Dart runs with IOFD as §VI-A has it: 4 deflection tokens on messages up to 8 KB, switches
//! deflecting above 15 KB, under the 22.5 KB ECN step that every scheme shares.
//!
//! The same point also varies what seed 000 leaves open, for the sensitivity sweep
//! (`experiments --only dart_clos_sensitivity`): the run length, what `load` is a fraction of
//! (the access links or the 4:1 core), the short-flow share of the bytes (§VI-B's light, typical
//! and heavy mixes), the switch buffer and PFC, and the fabric's size ([`ClosSize`]: the paper's
//! 1024 hosts, or 256 with the same 4:1 edge, per-host load and incast degree). Each run says
//! whether it reached a steady state: the bytes offered but not yet delivered (host backlog plus
//! network queues) must not grow over the run's second half by more than a tenth of what was
//! offered in it ([`DartClosResult::backlog_growth`]).
//!
//! Deviations: the seed's text lost the link rate, buffer and long-flow size; the scenario
//! file lists the values taken. Runs last milliseconds, not the paper's seconds (the model's
//! speed): short flows are counted when they start between the warm-up and
//! `drain_ns` before the end, and the ones still unfinished at the end are reported apart
//! (their FCT is at least the time left, so p99 is a lower bound when any are).

use crate::Sim;
use crate::host::IofdHostSpec;
use crate::scenario::{OutputSpec, SamplePorts, Scenario};
use crate::switch_node::IofdSpec;
use crate::topology::TopologySpec;
use crate::workload::{LoadReference, WorkloadSpec};
use rocev2_core::cc::CcScheme;

/// The §VI-A set-up.
const SCENARIO: &str = include_str!("../../../../deploy/scenarios/dart_clos_1024.toml");

/// The Clos a point runs on; every size is 4:1 at the edge and 1:1 above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClosSize {
    /// The paper's 1024 hosts: 16 pods × 4 edges × 16 hosts, 4 aggregation switches per pod
    /// with 4 cores each.
    Paper,
    /// 256 hosts: 4 pods of the paper's pod, each aggregation switch with 4 cores. Each host
    /// sees the same edge (16 down, 4 up), load and incast degree; 3/4 of the random
    /// destinations leave the pod instead of 15/16, so the core carries a little less.
    Quarter,
    /// The CI fabric: 2 pods × 2 edges × 8 hosts (32 hosts, 2 aggregation switches per pod,
    /// 2 cores each).
    Ci,
}

impl ClosSize {
    /// Hosts.
    pub fn hosts(self) -> u32 {
        match self {
            ClosSize::Paper => 1024,
            ClosSize::Quarter => 256,
            ClosSize::Ci => 32,
        }
    }
}

/// One point: a scheme at a load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DartClos {
    /// Congestion control; [`CcScheme::Dart`] adds IOFD.
    pub cc: CcScheme,
    /// Offered load per host, fraction of `load_reference` (the scenario's `dart_mix` load).
    pub load: f64,
    /// What `load` is a fraction of: the host link, or its share of the 4:1 core (the
    /// scenario's default).
    pub load_reference: LoadReference,
    /// Fraction of the bytes in short flows; none = the scenario's.
    pub short_fraction: Option<f64>,
    /// Shared buffer per switch, bytes; none = the scenario's.
    pub buffer_bytes: Option<u64>,
    /// PFC on every switch (lossless, the model's default thresholds); off = tail drop.
    pub pfc: bool,
    /// The fabric.
    pub size: ClosSize,
    /// Simulated time.
    pub duration_ns: u64,
    /// Short flows starting before this are not counted (the fabric fills up).
    pub warmup_ns: u64,
    /// Nor those starting in the last `drain_ns`.
    pub drain_ns: u64,
    /// Seed.
    pub seed: u64,
}

impl DartClos {
    /// The paper's fabric: 10 ms per point, short flows counted from 1 ms to 8 ms.
    pub fn paper(cc: CcScheme, load: f64) -> DartClos {
        DartClos {
            cc,
            load,
            load_reference: LoadReference::Bisection,
            short_fraction: None,
            buffer_bytes: None,
            pfc: false,
            size: ClosSize::Paper,
            duration_ns: 10_000_000,
            warmup_ns: 1_000_000,
            drain_ns: 2_000_000,
            seed: 1,
        }
    }

    /// The CI fabric for 3 ms, short flows counted from 0.5 ms to 2 ms.
    pub fn ci(cc: CcScheme, load: f64) -> DartClos {
        DartClos {
            size: ClosSize::Ci,
            duration_ns: 3_000_000,
            warmup_ns: 500_000,
            drain_ns: 1_000_000,
            ..DartClos::paper(cc, load)
        }
    }

    /// The scenario this point runs.
    pub fn scenario(&self) -> Scenario {
        let mut s = Scenario::from_toml(SCENARIO)
            .expect("deploy/scenarios/dart_clos_1024.toml parses")
            .with_load(self.load);
        s.name = format!(
            "dart_clos_{}_load{:.0}_{}",
            self.cc.name(),
            self.load * 100.0,
            self.size.hosts()
        );
        s.seed = self.seed;
        s.duration_ns = self.duration_ns;
        s.host.cc = self.cc.into();
        for w in &mut s.workload {
            if let WorkloadSpec::DartMix {
                load_reference,
                short_fraction,
                ..
            } = w
            {
                *load_reference = self.load_reference;
                if let Some(f) = self.short_fraction {
                    *short_fraction = f;
                }
            }
        }
        if let Some(b) = self.buffer_bytes {
            s.switch.buffer_bytes = b;
        }
        s.switch.pfc.enabled = self.pfc;
        if self.cc == CcScheme::Dart {
            // seed 000 §IV-A, §VI-A: 4 tokens, short flows up to 8 KB, 15 KB deflection
            // threshold under the 22.5 KB ECN threshold.
            s.host.iofd = Some(IofdHostSpec {
                tokens: 4,
                max_message_bytes: 8192,
            });
            s.switch.iofd = Some(IofdSpec {
                threshold_bytes: 15_000,
                max_message_bytes: 8192,
            });
        }
        let shrunk = match self.size {
            ClosSize::Paper => None,
            ClosSize::Quarter => Some((4, 4, 4, 16, 4)),
            ClosSize::Ci => Some((2, 2, 2, 8, 2)),
        };
        if let Some((pods, edges, aggs, hosts, cores)) = shrunk
            && let TopologySpec::Clos {
                rate_gbps,
                fabric_gbps,
                delay_ns,
                ..
            } = s.topology
        {
            s.topology = TopologySpec::Clos {
                k: None,
                pods: Some(pods),
                edges_per_pod: Some(edges),
                aggs_per_pod: Some(aggs),
                hosts_per_edge: Some(hosts),
                cores_per_agg: Some(cores),
                rate_gbps,
                fabric_gbps,
                delay_ns,
            };
        }
        s.output = OutputSpec {
            sample_interval_ns: 0,
            sample_ports: SamplePorts::None,
            rate_bin_ns: self.duration_ns.max(1),
            trace_flows: 0,
            plots: false,
        };
        s
    }

    /// Runs it.
    pub fn run(&self) -> DartClosResult {
        let s = self.scenario();
        let mut sim = Sim::new(&s).expect("the experiment's scenario is valid");
        let half = self.duration_ns / 2;
        sim.run_until(half);
        let backlog_half = backlog(&sim, half);
        sim.run();
        let backlog_end = backlog(&sim, self.duration_ns);
        let offered_second_half: u64 = sim
            .flows()
            .iter()
            .filter(|f| (half..self.duration_ns).contains(&f.spec.start_ns))
            .map(|f| f.spec.size)
            .sum();
        let counted = self.warmup_ns..self.duration_ns.saturating_sub(self.drain_ns);
        let short: Vec<_> = sim
            .flows()
            .iter()
            .filter(|f| f.spec.class == 0 && counted.contains(&f.spec.start_ns))
            .collect();
        let mut fcts: Vec<u64> = short
            .iter()
            .filter_map(|f| f.finish_ns.map(|t| t - f.spec.start_ns))
            .collect();
        fcts.sort_unstable();
        // Fig. 11 and 12 plot the 8 KB flows of the 2/4/8 KB mix.
        let mut fcts_8k: Vec<u64> = short
            .iter()
            .filter(|f| f.spec.size == 8192)
            .filter_map(|f| f.finish_ns.map(|t| t - f.spec.start_ns))
            .collect();
        fcts_8k.sort_unstable();
        let mtu = u64::from(s.host.mtu);
        let class_ce = |class: u8| -> (u64, u64) {
            sim.flows()
                .iter()
                .filter(|f| f.spec.class == class)
                .fold((0, 0), |(ce, pkts), f| {
                    (ce + f.ce_received, pkts + f.delivered_bytes.div_ceil(mtu))
                })
        };
        let (short_ce, short_packets) = class_ce(0);
        let (long_ce, _) = class_ce(1);
        let delivered: u64 = sim.flows().iter().map(|f| f.delivered_bytes).sum();
        let hosts = sim.topology().hosts;
        DartClosResult {
            short_flows: short.len(),
            unfinished: short.len() - fcts.len(),
            p50_ns: crate::output::percentile(&fcts, 50.0).unwrap_or(0),
            p99_ns: crate::output::percentile(&fcts, 99.0).unwrap_or(0),
            p50_8k_ns: crate::output::percentile(&fcts_8k, 50.0).unwrap_or(0),
            p99_8k_ns: crate::output::percentile(&fcts_8k, 99.0).unwrap_or(0),
            backlog_half_bytes: backlog_half,
            backlog_end_bytes: backlog_end,
            offered_second_half_bytes: offered_second_half,
            short_ce,
            short_packets,
            long_ce,
            goodput_per_host_gbps: delivered as f64 * 8.0 / s.duration_ns as f64 / hosts as f64,
            deflected: sim.flows().iter().map(|f| f.deflected).sum(),
            fcts_ns: fcts,
        }
    }
}

/// What [`DartClos::run`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct DartClosResult {
    /// Short flows counted (started in the window).
    pub short_flows: usize,
    /// Of those, unfinished at the end.
    pub unfinished: usize,
    /// Median FCT of the finished counted short flows.
    pub p50_ns: u64,
    /// Their 99th percentile.
    pub p99_ns: u64,
    /// Median FCT of the finished counted 8 KB short flows (what Fig. 11 and 12 plot).
    pub p50_8k_ns: u64,
    /// Their 99th percentile.
    pub p99_8k_ns: u64,
    /// Bytes of the flows started by half time not yet delivered then (sender backlog plus
    /// bytes in the network).
    pub backlog_half_bytes: u64,
    /// The same at the end.
    pub backlog_end_bytes: u64,
    /// Bytes of the flows that started in the second half.
    pub offered_second_half_bytes: u64,
    /// CE-marked packets the short flows delivered over the whole run (Table I).
    pub short_ce: u64,
    /// Packets the short flows delivered over the whole run (delivered bytes over the MTU).
    pub short_packets: u64,
    /// CE-marked packets of the long flows.
    pub long_ce: u64,
    /// Bytes delivered by all flows over the run, Gbit/s per host (Fig. 13's throughput).
    pub goodput_per_host_gbps: f64,
    /// Packets IOFD deflected.
    pub deflected: u64,
    /// The counted short flows' FCTs, sorted.
    pub fcts_ns: Vec<u64>,
}

impl DartClosResult {
    /// How much of the second half's offered bytes piled up instead of being delivered: the
    /// backlog's growth over the second half divided by the bytes offered in it (0 or less in
    /// a steady state; near 1 when the network delivers nothing new).
    pub fn backlog_growth(&self) -> f64 {
        (self.backlog_end_bytes as f64 - self.backlog_half_bytes as f64)
            / self.offered_second_half_bytes.max(1) as f64
    }

    /// The run reached a steady state: its backlog grew by at most a tenth of the second
    /// half's offered bytes.
    pub fn steady(&self) -> bool {
        self.backlog_growth() <= 0.1
    }
}

/// Bytes of the flows started by `now` that have not been delivered.
fn backlog(sim: &Sim, now: u64) -> u64 {
    sim.flows()
        .iter()
        .filter(|f| f.spec.start_ns <= now)
        .map(|f| f.spec.size.saturating_sub(f.delivered_bytes))
        .sum()
}
