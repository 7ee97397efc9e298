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
//! [`MpClosFct`] is §5.3's "Large-scale simulation on FCT" (Fig. 13) on the same fabric:
//! web-search flow sizes (DCTCP's CDF, `workload::SizeDist::WebSearch`), Poisson arrivals at
//! every server to a uniformly random other server, at a given load of the access links; the
//! paper: average FCT 6.0–17.7% lower under MP-RDMA. Arrivals stop early and the run goes on
//! so most flows finish; a mean over flows unfinished under either scheme would compare
//! different sets, so the mean is over the flows both schemes finished (the workload is the
//! same: it depends on the seed only).
//!
//! Deviations: the paper's run length is not given and ours is milliseconds (the model's
//! speed); the buffer (12 MB shared per switch) and PFC (off) are the model's
//! defaults, not the paper's (unstated); the 320-server fabric is built as given.

use crate::Sim;
use crate::dist;
use crate::host::{HostCc, HostSpec, MpSpec};
use crate::scenario::{OutputSpec, SamplePorts, Scenario};
use crate::switch_node::{MarkAt, RedSpec, SwitchSpec};
use crate::topology::TopologySpec;
use crate::workload::{self, Capacity, LoadReference, SizeDist, WorkloadSpec};
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
    /// The paper's 320-server fabric; goodput over 5–10 ms. DCQCN is still converging early
    /// on: over 0.5–2 ms its mean was 21.7 Gbit/s (seed 1), over 5–10 ms 24.1.
    pub fn paper(mp: bool, seed: u64) -> MpClos {
        MpClos {
            mp,
            leaves: 32,
            duration_ns: 10_000_000,
            warmup_ns: 5_000_000,
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
        scheme(self.mp)
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
        let flows = self
            .pairs()
            .into_iter()
            .map(|(s, d)| (s, d, LONG, 0))
            .collect();
        fabric(
            self.mp,
            self.leaves,
            self.seed,
            self.duration_ns,
            flows,
            format!(
                "mp_clos_{}_{}leaves_seed{}",
                self.scheme(),
                self.leaves,
                self.seed
            ),
        )
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

fn scheme(mp: bool) -> &'static str {
    if mp { "mp_rdma" } else { "dcqcn" }
}

/// The §5.3 leaf-spine with `leaves` leaves, the scheme's hosts and marking, and `flows`.
fn fabric(
    mp: bool,
    leaves: u32,
    seed: u64,
    duration_ns: u64,
    flows: Vec<(u32, u32, u64, u64)>,
    name: String,
) -> Scenario {
    let red = if mp {
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
        cc: if mp {
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
    Scenario {
        name,
        seed,
        duration_ns,
        topology: TopologySpec::LeafSpine {
            leaves,
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
            rate_bin_ns: duration_ns.max(1),
            trace_flows: 0,
            plots: false,
        },
        faults: None,
        sweep: None,
    }
}

/// One FCT run: a scheme on the fabric at a load (seed 001 §5.3, Fig. 13).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MpClosFct {
    /// MP-RDMA (true) or single-path DCQCN over ECMP.
    pub mp: bool,
    /// Leaves (the paper: 32).
    pub leaves: u32,
    /// Offered load per server, fraction of its 40 Gbit/s link.
    pub load: f64,
    /// Flows arrive in `[0, arrive_ns)`.
    pub arrive_ns: u64,
    /// Flows arriving before this are not counted (the fabric fills up).
    pub warmup_ns: u64,
    /// Simulated time (arrivals stop at `arrive_ns`, the rest drains).
    pub duration_ns: u64,
    /// Seed of the arrivals, sizes and pairs.
    pub seed: u64,
}

impl MpClosFct {
    /// The paper's fabric: arrivals over 4 ms, counted from 0.5 ms, drained to 12 ms (a 30 MB
    /// flow, the CDF's largest, takes 6 ms alone on a 40 Gbit/s link).
    pub fn paper(mp: bool, load: f64) -> MpClosFct {
        MpClosFct {
            mp,
            leaves: 32,
            load,
            arrive_ns: 4_000_000,
            warmup_ns: 500_000,
            duration_ns: 12_000_000,
            seed: 1,
        }
    }

    /// The CI fabric (4 leaves): arrivals over 1 ms, counted from 0.1 ms, drained to 8 ms.
    pub fn ci(mp: bool, load: f64) -> MpClosFct {
        MpClosFct {
            leaves: 4,
            arrive_ns: 1_000_000,
            warmup_ns: 100_000,
            duration_ns: 8_000_000,
            ..MpClosFct::paper(mp, load)
        }
    }

    /// The scheme's name in outputs.
    pub fn scheme(&self) -> &'static str {
        scheme(self.mp)
    }

    /// The workload: (src, dst, bytes, start) of every flow, the same for both schemes.
    pub fn flows(&self) -> Vec<(u32, u32, u64, u64)> {
        let cap = Capacity {
            hosts: self.leaves * HOSTS_PER_LEAF,
            host_bps: HOST_GBPS * 1e9,
            oversubscription: 1.0,
        };
        let spec = WorkloadSpec::Poisson {
            load: self.load,
            sizes: SizeDist::WebSearch,
            load_reference: LoadReference::Access,
        };
        workload::generate(&[spec], cap, self.arrive_ns, self.seed)
            .expect("a load in (0, 1.5] and a valid distribution")
            .into_iter()
            .map(|f| (f.src, f.dst, f.size, f.start_ns))
            .collect()
    }

    /// Runs it.
    pub fn run(&self) -> MpClosFctResult {
        let s = fabric(
            self.mp,
            self.leaves,
            self.seed,
            self.duration_ns,
            self.flows(),
            format!(
                "mp_clos_fct_{}_{}leaves_load{:.0}",
                self.scheme(),
                self.leaves,
                self.load * 100.0
            ),
        );
        let mut sim = Sim::new(&s).expect("the experiment's scenario is valid");
        sim.run();
        let flows = sim
            .flows()
            .iter()
            .filter(|f| f.spec.start_ns >= self.warmup_ns)
            .map(|f| (f.spec.size, f.finish_ns.map(|t| t - f.spec.start_ns)))
            .collect();
        MpClosFctResult { flows }
    }
}

/// What [`MpClosFct::run`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct MpClosFctResult {
    /// Every counted flow (arrived after the warm-up) in start order: its size and its FCT,
    /// none if unfinished at the end.
    pub flows: Vec<(u64, Option<u64>)>,
}

impl MpClosFctResult {
    /// Mean FCT (ns) and count of the flows with sizes in `sizes` that both `self` and `other`
    /// finished (the same workload under two schemes).
    pub fn mean_fct_both_finished(
        &self,
        other: &MpClosFctResult,
        sizes: std::ops::Range<u64>,
    ) -> (f64, usize) {
        let fcts: Vec<u64> = self
            .flows
            .iter()
            .zip(&other.flows)
            .filter(|((size, _), _)| sizes.contains(size))
            .filter_map(|((_, a), (_, b))| b.and(*a))
            .collect();
        let n = fcts.len();
        (fcts.iter().sum::<u64>() as f64 / n.max(1) as f64, n)
    }

    /// Flows unfinished at the end.
    pub fn unfinished(&self) -> usize {
        self.flows.iter().filter(|f| f.1.is_none()).count()
    }
}
