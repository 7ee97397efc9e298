//! The papers' congestion-control experiments, runnable at full size (`rocev2-sim experiments`)
//! and at CI size (`tests/cc_validation.rs`), with the same code.
//!
//! | experiment | reproduces |
//! |---|---|
//! | [`ManyFlows`] | seed 002 Fig. 2 topology, Fig. 4 and Fig. 6: N long flows from 8 senders into one receiver, queue and throughput |
//! | [`DartIncast`] | seed 000 §V-B (Fig. 10) and §VI-B: 16-way 8 KB incasts over background long flows, short-flow p50/p99 FCT |
//! | [`Fairness`] | seed 002 Fig. 13(a), §VI-C: 8 long flows on one bottleneck, Jain's index |
//! | [`GridCell`] | [`ManyFlows`] with DCQCN+ over the parameters seed 002 leaves open (RED P_max, K_min/K_max, eq. (19)'s step, δ) |
//! | [`DartClos`] | seed 000 §VI-A/B (Fig. 11(a), Fig. 12, Table I): the 1024-host Clos, short-flow p50/p99 FCT and ECN marks across loads; with [`ClosSize`] and its other fields, the sensitivity sweep over what §VI leaves open (run length, load reference, mix, buffer, PFC) and whether each run reached a steady state |
//! | [`MpClos`] | seed 001 §5.3 (Fig. 12(b)): permutation on the 320-server leaf-spine, MP-RDMA vs ECMP DCQCN goodput |
//!
//! Each function builds a scenario, runs it, samples what the paper plots and returns it; the CLI
//! writes the samples as CSV and SVG.

mod dart_clos;
mod dcqcn_plus_grid;
mod mp_clos;

pub use dart_clos::{ClosSize, DartClos, DartClosResult};
pub use dcqcn_plus_grid::{GridCell, PAPER_QUEUE_BYTES, PAPER_THROUGHPUT, Plane, meets_paper};
pub use mp_clos::{MpClos, MpClosFct, MpClosFctResult, MpClosResult};

use crate::Sim;
use crate::dist;
use crate::scenario::{OutputSpec, SamplePorts, Scenario};
use crate::switch_node::{MarkAt, PfcSpec, RedSpec, SwitchSpec};
use crate::topology::TopologySpec;
use crate::workload::WorkloadSpec;
use rocev2_core::cc::CcScheme;

/// An endless flow.
const LONG: u64 = 1 << 40;

/// Seed 002 §V-A: `senders` hosts start `flows` long flows in total (the same number each) into
/// one receiver through one switch, at uniformly random times in `[0, spread_ns)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ManyFlows {
    /// Congestion control.
    pub cc: CcScheme,
    /// Total flows N.
    pub flows: u32,
    /// Sending hosts (seed 002 Fig. 2: 8).
    pub senders: u32,
    /// Link rate, Gbit/s.
    pub gbps: f64,
    /// Flows start uniformly in `[0, spread_ns)` (seed 002: 0.1 s).
    pub spread_ns: u64,
    /// Simulated time.
    pub duration_ns: u64,
    /// Sampling period of queue and throughput.
    pub sample_ns: u64,
    /// The converged state is averaged over `[duration − tail_ns, duration)`.
    pub tail_ns: u64,
    /// PFC on (seed 002 §IV-B.1: "PFC is necessary").
    pub pfc: bool,
    /// Switch marking (K_min, K_max, P_max, enqueue or dequeue).
    pub red: RedSpec,
    /// DCQCN+'s eq. (19) step scale (`[host] dcqcn_plus_ai_scale`; none = as written).
    pub dcqcn_plus_ai_scale: Option<f64>,
    /// DCQCN+'s δ, ns (`[host] dcqcn_plus_delta_ns`; none = 1 µs).
    pub dcqcn_plus_delta_ns: Option<u64>,
    /// Seed.
    pub seed: u64,
}

impl ManyFlows {
    /// Seed 002 §V-A's set-up at `gbps` with `flows` flows: 8 senders, starts spread over
    /// 0.1 s, PFC on, RED 20 KB / 200 KB / 1%, the converged state measured over the last
    /// 0.1 s of 0.4 s: §V-A has the queue pressed down about 0.1 s after the last start and
    /// the throughput loss over within 0.1 s more, so convergence is due by 0.3 s.
    pub fn paper(cc: CcScheme, flows: u32, gbps: f64) -> ManyFlows {
        ManyFlows {
            cc,
            flows,
            senders: 8,
            gbps,
            spread_ns: 100_000_000,
            duration_ns: 400_000_000,
            sample_ns: 100_000,
            tail_ns: 100_000_000,
            pfc: true,
            red: RedSpec {
                kmin_bytes: 20_000,
                kmax_bytes: 200_000,
                pmax_percent: 1.0,
                drop_non_ect: false,
                mark_at: MarkAt::Dequeue,
            },
            dcqcn_plus_ai_scale: None,
            dcqcn_plus_delta_ns: None,
            seed: 1,
        }
    }

    /// The scenario this experiment runs.
    pub fn scenario(&self) -> Scenario {
        let mut rng = dist::rng(self.seed, 7);
        let receiver = self.senders;
        let mut flows: Vec<(u32, u32, u64, u64)> = (0..self.flows)
            .map(|i| {
                let start = dist::below(&mut rng, self.spread_ns.max(1));
                (i % self.senders, receiver, LONG, start)
            })
            .collect();
        flows.sort_by_key(|f| f.3);
        let mut host = crate::host::HostSpec {
            cc: self.cc.into(),
            mtu: 1024,
            dcqcn_plus_ai_scale: self.dcqcn_plus_ai_scale,
            dcqcn_plus_delta_ns: self.dcqcn_plus_delta_ns,
            ..Default::default()
        };
        host.ack_req_every = 16;
        Scenario {
            name: format!("many_flows_{:?}_{}_{}g", self.cc, self.flows, self.gbps).to_lowercase(),
            seed: self.seed,
            duration_ns: self.duration_ns,
            topology: TopologySpec::Star {
                hosts: self.senders + 1,
                rate_gbps: self.gbps,
                delay_ns: 1000,
            },
            switch: SwitchSpec {
                buffer_bytes: 12_000_000,
                red: Some(self.red),
                pfc: PfcSpec {
                    enabled: self.pfc,
                    ..Default::default()
                },
                iofd: None,
                dvl: None,
            },
            host,
            workload: vec![WorkloadSpec::Flows { flows }],
            output: OutputSpec {
                sample_interval_ns: 0,
                sample_ports: SamplePorts::None,
                rate_bin_ns: 1_000_000,
                trace_flows: 0,
                plots: false,
            },
            faults: None,
            sweep: None,
        }
    }

    /// Runs it.
    pub fn run(&self) -> ManyFlowsResult {
        let s = self.scenario();
        let mut sim = Sim::new(&s).expect("the experiment's scenario is valid");
        let receiver = self.senders;
        let egress = bottleneck_port(&sim, receiver);
        let mut samples = Vec::new();
        let mut t = 0;
        let mut last_tx = 0;
        let mut last_sent = 0;
        let tail_from = self.duration_ns.saturating_sub(self.tail_ns);
        let mut tail_start: Option<Vec<u64>> = None;
        while t < self.duration_ns {
            if t >= tail_from && tail_start.is_none() {
                tail_start = Some(sim.flows().iter().map(|f| f.delivered_bytes).collect());
            }
            t += self.sample_ns;
            sim.run_until(t);
            let p = &sim.ports()[egress as usize];
            let tx = wire_tx(p);
            let sent: u64 = (0..self.senders)
                .map(|h| wire_tx(&sim.ports()[h as usize]))
                .sum();
            samples.push(Sample {
                time_ns: t,
                queue_bytes: p.queued_bytes(),
                rx_gbps: (tx - last_tx) as f64 * 8.0 / self.sample_ns as f64,
                sent_gbps: (sent - last_sent) as f64 * 8.0 / self.sample_ns as f64,
            });
            last_tx = tx;
            last_sent = sent;
        }
        let tail: Vec<&Sample> = samples.iter().filter(|s| s.time_ns > tail_from).collect();
        let tail_bytes: Vec<f64> = sim
            .flows()
            .iter()
            .zip(tail_start.unwrap_or_default())
            .map(|(f, b)| (f.delivered_bytes - b) as f64)
            .collect();
        let n = tail.len().max(1) as f64;
        let cnps: u64 = sim
            .flows()
            .iter()
            .enumerate()
            .filter_map(|(i, _)| sim.cc_snapshot(i as u32))
            .map(|c| c.cnps)
            .sum();
        let rates: Vec<f64> = (0..sim.flows().len() as u32)
            .filter_map(|i| sim.cc_snapshot(i))
            .map(|c| c.rate.as_bps() as f64)
            .collect();
        ManyFlowsResult {
            queue_mean_bytes: tail.iter().map(|s| s.queue_bytes as f64).sum::<f64>() / n,
            queue_max_tail_bytes: tail.iter().map(|s| s.queue_bytes).max().unwrap_or(0),
            throughput: tail.iter().map(|s| s.rx_gbps).sum::<f64>() / n / self.gbps,
            pause_ns: (0..self.senders)
                .map(|h| sim.ports()[h as usize].stats.paused_ns)
                .sum(),
            cnps,
            tail_jain: jain(&tail_bytes),
            mean_rate_bps: rates.iter().sum::<f64>() / rates.len().max(1) as f64,
            min_rate_bps: rates.iter().copied().fold(f64::MAX, f64::min),
            max_rate_bps: rates.iter().copied().fold(0.0, f64::max),
            samples,
        }
    }
}

/// One sample of the bottleneck.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Time, ns.
    pub time_ns: u64,
    /// Bytes queued at the switch port towards the receiver.
    pub queue_bytes: u64,
    /// Throughput of that port over the last sampling period, Gbit/s (wire bytes).
    pub rx_gbps: f64,
    /// What all senders' NICs sent over the last sampling period, Gbit/s in wire bytes (seed
    /// 002's "total sending rate"; ACKs are a few of those bytes).
    pub sent_gbps: f64,
}

/// What [`ManyFlows::run`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct ManyFlowsResult {
    /// Mean queue in the tail window, bytes.
    pub queue_mean_bytes: f64,
    /// Largest sampled queue in the tail window.
    pub queue_max_tail_bytes: u64,
    /// Mean bottleneck throughput in the tail window, fraction of the link.
    pub throughput: f64,
    /// Time the senders' NIC ports spent paused by PFC, summed.
    pub pause_ns: u64,
    /// CNPs the flows' controllers received.
    pub cnps: u64,
    /// Jain's index of the bytes each flow delivered in the tail window: whether the link is
    /// shared, not only busy (seed 002 §VI-C claims equal shares at one congestion point).
    pub tail_jain: f64,
    /// Mean allowed rate at the end.
    pub mean_rate_bps: f64,
    /// Smallest allowed rate at the end.
    pub min_rate_bps: f64,
    /// Largest allowed rate at the end.
    pub max_rate_bps: f64,
    /// The samples.
    pub samples: Vec<Sample>,
}

/// Bytes a port has put on the wire (frames plus FCS, preamble and gap; data frames are never
/// padded).
fn wire_tx(p: &crate::link::Port) -> u64 {
    p.stats.tx_bytes + p.stats.tx_packets * crate::link::WIRE_OVERHEAD as u64
}

/// The switch port that sends to host `h` (the bottleneck of an incast into `h`).
pub fn bottleneck_port(sim: &Sim, h: u32) -> u32 {
    // Host h's port is h; its peer is the switch port that sends to it.
    sim.ports()[h as usize].peer
}

/// Seed 000 §V-B and §VI-B: 16-way incasts of short messages into a receiver that also takes
/// background long flows, repeated in rounds; the short flows' p99 FCT is the figure of merit
/// (Dart: 2.5x lower than InfiniBand's CC on the testbed, 4.8x lower than DCQCN at scale).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DartIncast {
    /// Congestion control.
    pub cc: CcScheme,
    /// Incast degree (seed 000: 16).
    pub degree: u32,
    /// Bytes per short message (seed 000 §VI-B: 8 KB).
    pub short_bytes: u64,
    /// Background long flows into the same receiver, one per extra host.
    pub long_flows: u32,
    /// Link rate, Gbit/s.
    pub gbps: f64,
    /// Incast rounds.
    pub rounds: u32,
    /// Time between rounds.
    pub period_ns: u64,
    /// Start jitter of the senders of one round (seed 000 §V-B: 0–100 µs per 100 ms round).
    pub jitter_ns: u64,
    /// The first round starts here, once the long flows have settled.
    pub warmup_ns: u64,
    /// Switch marking.
    pub red: RedSpec,
    /// Seed.
    pub seed: u64,
}

impl DartIncast {
    /// 16 × 8 KB incasts every 5 ms (0–10 µs jitter) over 2 background long flows at `gbps`,
    /// 1 µs links, PFC on, DCQCN's recommended RED (K_min 5 KB, K_max 200 KB, P_max 1%, seed 002
    /// §II-B) marking at dequeue. Seed 000 §VI-A's step threshold at 22.5 KB gives DCQCN a queue
    /// too short for DASR to beat (see docs/congestion.md for the numbers).
    pub fn paper(cc: CcScheme, gbps: f64, rounds: u32) -> DartIncast {
        DartIncast {
            cc,
            degree: 16,
            short_bytes: 8192,
            long_flows: 2,
            gbps,
            rounds,
            period_ns: 5_000_000,
            jitter_ns: 10_000,
            warmup_ns: 1_000_000,
            red: RedSpec {
                kmin_bytes: 5_000,
                kmax_bytes: 200_000,
                pmax_percent: 1.0,
                drop_non_ect: false,
                mark_at: MarkAt::Dequeue,
            },
            seed: 1,
        }
    }

    /// The scenario: hosts `0..degree` send the incasts, the next `long_flows` hosts the
    /// background flows, the last host receives.
    pub fn scenario(&self) -> Scenario {
        let receiver = self.degree + self.long_flows;
        let host = crate::host::HostSpec {
            cc: self.cc.into(),
            mtu: 1024,
            ack_req_every: 4,
            ..Default::default()
        };
        Scenario {
            name: format!("dart_incast_{:?}_{}g", self.cc, self.gbps).to_lowercase(),
            seed: self.seed,
            duration_ns: self.warmup_ns + self.rounds as u64 * self.period_ns,
            topology: TopologySpec::Star {
                hosts: receiver + 1,
                rate_gbps: self.gbps,
                delay_ns: 1000,
            },
            switch: SwitchSpec {
                buffer_bytes: 12_000_000,
                red: Some(self.red),
                pfc: PfcSpec {
                    enabled: true,
                    ..Default::default()
                },
                iofd: None,
                dvl: None,
            },
            host,
            workload: vec![
                WorkloadSpec::Incast {
                    receiver,
                    senders: Some((0..self.degree).collect()),
                    degree: None,
                    size_bytes: self.short_bytes,
                    jitter_ns: self.jitter_ns,
                    rounds: Some(self.rounds),
                    period_ns: self.period_ns,
                    start_ns: self.warmup_ns,
                    lookahead: true,
                },
                WorkloadSpec::LongLived {
                    pairs: (self.degree..receiver).map(|h| (h, receiver)).collect(),
                    start_ns: 0,
                },
            ],
            output: OutputSpec {
                sample_interval_ns: 0,
                sample_ports: SamplePorts::None,
                rate_bin_ns: 10_000,
                trace_flows: 0,
                plots: false,
            },
            faults: None,
            sweep: None,
        }
    }

    /// Runs it.
    pub fn run(&self) -> DartIncastResult {
        let s = self.scenario();
        let mut sim = Sim::new(&s).expect("the experiment's scenario is valid");
        let receiver = self.degree + self.long_flows;
        let egress = bottleneck_port(&sim, receiver);
        sim.run_until(self.warmup_ns);
        let tx0 = wire_tx(&sim.ports()[egress as usize]);
        let long0: u64 = long_delivered(&sim);
        sim.run();
        let span = (s.duration_ns - self.warmup_ns) as f64;
        let mut fcts: Vec<u64> = sim
            .flows()
            .iter()
            .filter(|f| f.spec.class == 0)
            .filter_map(|f| f.finish_ns.map(|t| t - f.spec.start_ns))
            .collect();
        fcts.sort_unstable();
        let unfinished = sim
            .flows()
            .iter()
            .filter(|f| f.spec.class == 0 && f.finish_ns.is_none())
            .count();
        DartIncastResult {
            p50_ns: crate::output::percentile(&fcts, 50.0).unwrap_or(0),
            p99_ns: crate::output::percentile(&fcts, 99.0).unwrap_or(0),
            unfinished,
            utilisation: (wire_tx(&sim.ports()[egress as usize]) - tx0) as f64 * 8.0
                / span
                / self.gbps,
            long_gbps: (long_delivered(&sim) - long0) as f64 * 8.0 / span,
            fcts_ns: fcts,
        }
    }
}

fn long_delivered(sim: &Sim) -> u64 {
    sim.flows()
        .iter()
        .filter(|f| f.spec.class == 1)
        .map(|f| f.delivered_bytes)
        .sum()
}

/// What [`DartIncast::run`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct DartIncastResult {
    /// Median short-flow FCT.
    pub p50_ns: u64,
    /// 99th-percentile short-flow FCT.
    pub p99_ns: u64,
    /// Short flows that did not finish.
    pub unfinished: usize,
    /// Bottleneck utilisation after the warm-up (wire bytes).
    pub utilisation: f64,
    /// Frame bytes of the long flows delivered after the warm-up, as Gbit/s (both directions).
    pub long_gbps: f64,
    /// Every short FCT, sorted.
    pub fcts_ns: Vec<u64>,
}

/// Seed 002 §VI-C (Fig. 13(a)): `flows` long flows from as many hosts share one receiver link;
/// Jain's index of their delivered bytes over a window after convergence.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fairness {
    /// Congestion control.
    pub cc: CcScheme,
    /// Flows (seed 002: 8).
    pub flows: u32,
    /// Link rate, Gbit/s.
    pub gbps: f64,
    /// Measurement starts here.
    pub from_ns: u64,
    /// And ends here.
    pub to_ns: u64,
    /// Seed.
    pub seed: u64,
}

impl Fairness {
    /// 8 flows, all starting at 0 (seed 002: "starts precisely at the same time"), measured
    /// over `[from_ns, to_ns)`; switches as in [`ManyFlows::paper`].
    pub fn paper(cc: CcScheme, gbps: f64, from_ns: u64, to_ns: u64) -> Fairness {
        Fairness {
            cc,
            flows: 8,
            gbps,
            from_ns,
            to_ns,
            seed: 1,
        }
    }

    /// Runs it.
    pub fn run(&self) -> FairnessResult {
        let mut s = ManyFlows {
            flows: self.flows,
            senders: self.flows,
            spread_ns: 1,
            duration_ns: self.to_ns,
            seed: self.seed,
            ..ManyFlows::paper(self.cc, self.flows, self.gbps)
        }
        .scenario();
        s.name = format!("fairness_{:?}_{}g", self.cc, self.gbps).to_lowercase();
        s.host.ack_req_every = 4;
        let mut sim = Sim::new(&s).expect("the experiment's scenario is valid");
        sim.run_until(self.from_ns);
        let start: Vec<u64> = sim.flows().iter().map(|f| f.delivered_bytes).collect();
        sim.run_until(self.to_ns);
        let span = (self.to_ns - self.from_ns) as f64;
        let gbps: Vec<f64> = sim
            .flows()
            .iter()
            .zip(&start)
            .map(|(f, s0)| (f.delivered_bytes - s0) as f64 * 8.0 / span)
            .collect();
        FairnessResult {
            jain: jain(&gbps),
            total_gbps: gbps.iter().sum(),
            per_flow_gbps: gbps,
        }
    }
}

/// What [`Fairness::run`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct FairnessResult {
    /// Jain's index of the per-flow throughputs.
    pub jain: f64,
    /// Their sum, Gbit/s (frame bytes, ACKs included).
    pub total_gbps: f64,
    /// Each flow's throughput, Gbit/s.
    pub per_flow_gbps: Vec<f64>,
}

/// Jain's fairness index (Σx)² / (n·Σx²): 1 when all are equal, 1/n when one takes all.
pub fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let q: f64 = x.iter().map(|v| v * v).sum();
    if q == 0.0 {
        return 0.0;
    }
    s * s / (x.len() as f64 * q)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_index_bounds() {
        assert_eq!(jain(&[1.0; 8]), 1.0);
        // One of four takes everything: 1/4.
        assert_eq!(jain(&[4.0, 0.0, 0.0, 0.0]), 0.25);
    }
}
