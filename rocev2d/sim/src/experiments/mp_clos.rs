//! Seed 001 §5.3 "Large-scale simulation on throughput" (Fig. 12(b)): MP-RDMA against
//! single-path DCQCN hashed by ECMP, permutation traffic on the paper's leaf-spine: 4 spines,
//! 32 leaves, 10 servers under each, 40 Gbit/s access links and 100 Gbit/s leaf–spine links
//! (full bisection), base RTT 16 µs (2 µs per link, 8 link crossings per round trip). The
//! paper: MP-RDMA's average per-server goodput 34.78% above DCQCN's, its slowest connection
//! 32.95 Gbit/s, DCQCN's unluckiest below 15.
//!
//! Half of the servers send, each to one server of the other half under another leaf (§5.3,
//! 160 connections). The text does not say which half; we take the servers under leaves
//! 0–15 as senders and give each a receiver under leaves 16–31 by a seeded random
//! permutation, so every leaf's uplinks and downlinks are offered their full 400 Gbit/s and an
//! ECMP collision costs goodput (with five senders per leaf a collision of two on a
//! 100 Gbit/s uplink would cost nothing).
//!
//! Switch marking per scheme, as §5.3: MP-RDMA's ECN threshold 60 KB (a step: K_min = K_max,
//! P_max 100%); DCQCN with its authors' RED (K_min 5 KB, K_max 200 KB, P_max 1%, seed 002
//! §II-B). Hosts as in `tests/multipath.rs` (1 KB MTU, 4 KB WRITEs 128 deep, L = 64, Δ = 32),
//! MP-RDMA's initial window one BDP (§3.2: 16 µs at 40 Gbit/s, 78 packets).
//!
//! Deviations: the paper's run length is not given and ours is milliseconds (the model's
//! speed, issue 21); the buffer (12 MB shared per switch) and PFC (off) are the model's
//! defaults, not the paper's (unstated); the 320-server fabric is built as given.

use crate::Sim;
use crate::dist;
use crate::host::{HostCc, HostSpec, MpSpec};
use crate::scenario::{OutputSpec, SamplePorts, Scenario};
use crate::switch_node::{MarkAt, RedSpec, SwitchSpec};
use crate::topology::TopologySpec;
use crate::workload::WorkloadSpec;
use rocev2_core::cc::CcScheme;

/// An endless flow.
const LONG: u64 = 1 << 40;
/// Access link rate, Gbit/s (§5.3).
const HOST_GBPS: f64 = 40.0;
/// Servers under each leaf (§5.3).
const HOSTS_PER_LEAF: u32 = 10;
/// Per-link propagation delay: 16 µs base RTT over 8 link crossings.
const DELAY_NS: u64 = 2_000;

/// One run: a scheme on the fabric with one seed's permutation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MpClos {
    /// MP-RDMA (true) or single-path DCQCN over ECMP.
    pub mp: bool,
    /// Leaves (the paper: 32; half of them send).
    pub leaves: u32,
    /// Simulated time.
    pub duration_ns: u64,
    /// Goodput is measured over `[warmup_ns, duration_ns)`.
    pub warmup_ns: u64,
    /// Seed of the permutation, of ECMP's hash salt and of MP-RDMA's virtual paths.
    pub seed: u64,
}

impl MpClos {
    /// The paper's 320-server fabric; goodput over 0.5–2 ms.
    pub fn paper(mp: bool, seed: u64) -> MpClos {
        MpClos {
            mp,
            leaves: 32,
            duration_ns: 2_000_000,
            warmup_ns: 500_000,
            seed,
        }
    }

    /// The CI fabric: the same leaves and spines, 4 leaves (40 servers, 20 connections);
    /// goodput over 0.1–0.4 ms.
    pub fn ci(mp: bool, seed: u64) -> MpClos {
        MpClos {
            leaves: 4,
            duration_ns: 400_000,
            warmup_ns: 100_000,
            ..MpClos::paper(mp, seed)
        }
    }

    /// The scheme's name in outputs.
    pub fn scheme(&self) -> &'static str {
        if self.mp { "mp_rdma" } else { "dcqcn" }
    }

    /// The connections: (sender, receiver), senders under the first half of the leaves in
    /// order, receivers a seeded permutation of the servers under the other half.
    pub fn pairs(&self) -> Vec<(u32, u32)> {
        let half = self.leaves / 2 * HOSTS_PER_LEAF;
        let mut rx: Vec<u32> = (half..2 * half).collect();
        let mut rng = dist::rng(self.seed, 11);
        // Fisher–Yates.
        for i in (1..rx.len()).rev() {
            let j = dist::below(&mut rng, i as u64 + 1) as usize;
            rx.swap(i, j);
        }
        (0..half).zip(rx).collect()
    }

    /// The scenario this run is.
    pub fn scenario(&self) -> Scenario {
        let red = if self.mp {
            RedSpec {
                kmin_bytes: 60_000,
                kmax_bytes: 60_000,
                pmax_percent: 100.0,
                drop_non_ect: false,
                mark_at: MarkAt::Enqueue,
            }
        } else {
            RedSpec {
                kmin_bytes: 5_000,
                kmax_bytes: 200_000,
                pmax_percent: 1.0,
                drop_non_ect: false,
                mark_at: MarkAt::Enqueue,
            }
        };
        let host = HostSpec {
            cc: if self.mp {
                HostCc::MpRdma
            } else {
                HostCc::Rate(CcScheme::Dcqcn)
            },
            mtu: 1024,
            wr_bytes: 4 << 10,
            wr_depth: 128,
            mp: MpSpec {
                iw: 78,
                ..MpSpec::default()
            },
            ..HostSpec::default()
        };
        let flows = self
            .pairs()
            .into_iter()
            .map(|(s, d)| (s, d, LONG, 0))
            .collect();
        Scenario {
            name: format!(
                "mp_clos_{}_{}leaves_seed{}",
                self.scheme(),
                self.leaves,
                self.seed
            ),
            seed: self.seed,
            duration_ns: self.duration_ns,
            topology: TopologySpec::LeafSpine {
                leaves: self.leaves,
                spines: 4,
                hosts_per_leaf: HOSTS_PER_LEAF,
                rate_gbps: HOST_GBPS,
                uplink_gbps: Some(100.0),
                oversubscription: None,
                delay_ns: DELAY_NS,
            },
            switch: SwitchSpec {
                red: Some(red),
                ..SwitchSpec::default()
            },
            host,
            workload: vec![WorkloadSpec::Flows { flows }],
            output: OutputSpec {
                sample_interval_ns: 0,
                sample_ports: SamplePorts::None,
                rate_bin_ns: self.duration_ns.max(1),
                trace_flows: 0,
                plots: false,
            },
            faults: None,
            sweep: None,
        }
    }

    /// Runs it.
    pub fn run(&self) -> MpClosResult {
        let s = self.scenario();
        let mut sim = Sim::new(&s).expect("the experiment's scenario is valid");
        sim.run_until(self.warmup_ns);
        let start: Vec<u64> = sim.flows().iter().map(|f| f.acked).collect();
        sim.run_until(self.duration_ns);
        let span = (self.duration_ns - self.warmup_ns) as f64;
        let per_flow: Vec<(u32, u32, f64)> = sim
            .flows()
            .iter()
            .zip(start)
            .map(|(f, a)| (f.spec.src, f.spec.dst, (f.acked - a) as f64 * 8.0 / span))
            .collect();
        let total: f64 = per_flow.iter().map(|f| f.2).sum();
        MpClosResult {
            mean_gbps: total / per_flow.len().max(1) as f64,
            min_gbps: per_flow.iter().map(|f| f.2).fold(f64::MAX, f64::min),
            per_flow,
        }
    }
}

/// What [`MpClos::run`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct MpClosResult {
    /// Mean goodput of the connections (bytes whose WRITE completed), Gbit/s: the paper's
    /// "average throughput of all servers".
    pub mean_gbps: f64,
    /// The slowest connection's.
    pub min_gbps: f64,
    /// Each connection's (sender, receiver, goodput in Gbit/s).
    pub per_flow: Vec<(u32, u32, f64)>,
}
