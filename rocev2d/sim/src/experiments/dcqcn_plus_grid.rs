//! The DCQCN+ sensitivity grid: [`ManyFlows`] (seed 002 §V-A, Fig. 6) over the
//! parameters seed 002 leaves open, with eqs. (11)–(23) and the fair-share floor of
//! `cc/dcqcn_plus.rs` unchanged.
//!
//! Two planes through the paper's point (RED 20/200 KB, P_max 1%, eq. (19) unscaled, δ = 1 µs):
//!
//! - **marking**: RED P_max {1, 10, 100}% × K_min/K_max {5/200, 20/200, 40/1000} KB. Seed 002
//!   gives K_min/K_max 20/200 KB (§V-A) and no P_max; 5/200 KB with 1% is DCQCN's
//!   recommendation (seed 002 §II-B), 40/1000 KB with 100% the DCQCN authors' ns-3
//!   configuration (`mix/config.txt`, on which seed 002 built its simulator).
//! - **recovery**: eq. (19)'s step scaled {0.5, 1, 2} (`DcqcnPlusParams::ai_scale`; 0.5 is
//!   §V-D's testbed reading R_AI = R_l/(10·l)) × δ {1, 2, 5} µs, the notification point's tick
//!   (seed 004: a NIC makes a CNP every 1–5 µs), which sets τ = l·δ (11) and K = λ·τ (17): the
//!   granularity of the senders' recovery timers.
//!
//! Each cell runs at 64, 512 and 2000 flows on 10 and 40 Gbit/s, as long as [`ManyFlows::paper`]
//! (flows start within 0.1 s, the last 0.1 s of 0.4 s averaged, after seed 002 §V-A's
//! convergence), and reports the converged queue, throughput and Jain's index, and whether it
//! meets the paper's numbers (throughput ≥ 90%, converged queue under 200 KB).

use super::ManyFlows;
use crate::switch_node::RedSpec;
use rocev2_core::cc::CcScheme;

/// The paper's converged throughput, fraction of the link (seed 002 §V-A: "about 95%", §I: ≥ 90%).
pub const PAPER_THROUGHPUT: f64 = 0.9;
/// The paper's converged queue bound, bytes (seed 002 §V-A: "bounded by about 200KB").
pub const PAPER_QUEUE_BYTES: f64 = 200_000.0;

/// RED P_max values of the marking plane, percent.
pub const PMAX_PERCENT: [f64; 3] = [1.0, 10.0, 100.0];
/// K_min/K_max pairs of the marking plane, bytes.
pub const KMIN_KMAX_BYTES: [(u32, u32); 3] =
    [(5_000, 200_000), (20_000, 200_000), (40_000, 1_000_000)];
/// Eq. (19) step scales of the recovery plane.
pub const AI_SCALE: [f64; 3] = [0.5, 1.0, 2.0];
/// δ of the recovery plane, ns.
pub const DELTA_NS: [u64; 3] = [1_000, 2_000, 5_000];

/// Which two parameters a cell varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plane {
    /// P_max (x) × K_min/K_max (y), recovery at the paper's values.
    Marking,
    /// Eq. (19)'s scale (x) × δ (y), marking at the paper's values.
    Recovery,
}

impl Plane {
    /// Both, in output order.
    pub const ALL: [Plane; 2] = [Plane::Marking, Plane::Recovery];

    /// Name in file names and CSV.
    pub fn name(self) -> &'static str {
        match self {
            Plane::Marking => "marking",
            Plane::Recovery => "recovery",
        }
    }

    /// The labels of the x and y values, and the axis names.
    pub fn axes(self) -> (Vec<String>, Vec<String>, &'static str, &'static str) {
        match self {
            Plane::Marking => (
                PMAX_PERCENT.iter().map(|p| format!("{p}%")).collect(),
                KMIN_KMAX_BYTES
                    .iter()
                    .map(|(a, b)| format!("{}/{} KB", a / 1000, b / 1000))
                    .collect(),
                "RED P_max",
                "K_min/K_max",
            ),
            Plane::Recovery => (
                AI_SCALE.iter().map(|a| format!("{a}x")).collect(),
                DELTA_NS
                    .iter()
                    .map(|d| format!("{} us", d / 1000))
                    .collect(),
                "eq. (19) step scale",
                "delta (CNP tick)",
            ),
        }
    }

    /// The cells, x fastest.
    pub fn cells(self) -> Vec<GridCell> {
        let paper = GridCell::paper();
        let mut v = Vec::new();
        for y in 0..3 {
            for x in 0..3 {
                v.push(match self {
                    Plane::Marking => GridCell {
                        pmax_percent: PMAX_PERCENT[x],
                        kmin_bytes: KMIN_KMAX_BYTES[y].0,
                        kmax_bytes: KMIN_KMAX_BYTES[y].1,
                        ..paper
                    },
                    Plane::Recovery => GridCell {
                        ai_scale: AI_SCALE[x],
                        delta_ns: DELTA_NS[y],
                        ..paper
                    },
                });
            }
        }
        v
    }
}

/// One setting of the open parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GridCell {
    /// RED P_max, percent.
    pub pmax_percent: f64,
    /// RED K_min, bytes.
    pub kmin_bytes: u32,
    /// RED K_max, bytes.
    pub kmax_bytes: u32,
    /// Eq. (19)'s step scale.
    pub ai_scale: f64,
    /// δ, ns.
    pub delta_ns: u64,
}

impl GridCell {
    /// The values [`ManyFlows::paper`] runs: 20/200 KB, P_max 1%, eq. (19) as written, δ = 1 µs.
    pub fn paper() -> GridCell {
        GridCell {
            pmax_percent: 1.0,
            kmin_bytes: 20_000,
            kmax_bytes: 200_000,
            ai_scale: 1.0,
            delta_ns: 1_000,
        }
    }

    /// [`ManyFlows::paper`] for DCQCN+ with `flows` flows at `gbps`, in this cell, at the
    /// paper's length.
    pub fn many_flows(&self, flows: u32, gbps: f64) -> ManyFlows {
        let paper = ManyFlows::paper(CcScheme::DcqcnPlus, flows, gbps);
        ManyFlows {
            red: RedSpec {
                kmin_bytes: self.kmin_bytes,
                kmax_bytes: self.kmax_bytes,
                pmax_percent: self.pmax_percent,
                ..paper.red
            },
            dcqcn_plus_ai_scale: Some(self.ai_scale),
            dcqcn_plus_delta_ns: Some(self.delta_ns),
            ..paper
        }
    }
}

/// Whether a run meets the paper's converged numbers (throughput and queue).
pub fn meets_paper(throughput: f64, queue_mean_bytes: f64) -> bool {
    throughput >= PAPER_THROUGHPUT && queue_mean_bytes < PAPER_QUEUE_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_planes_cross_at_the_paper_point() {
        for plane in Plane::ALL {
            let cells = plane.cells();
            assert_eq!(cells.len(), 9);
            // Each plane holds the paper's setting once.
            assert_eq!(cells.iter().filter(|c| **c == GridCell::paper()).count(), 1);
        }
        let e = GridCell::paper().many_flows(64, 10.0);
        let p = ManyFlows::paper(CcScheme::DcqcnPlus, 64, 10.0);
        assert_eq!(e.red, p.red);
        // As long as many_flows, averaged after §V-A's convergence (0.3 s): 512 and 2000 flows
        // are still starting up at 60 ms.
        assert_eq!(
            (e.spread_ns, e.duration_ns, e.tail_ns),
            (p.spread_ns, p.duration_ns, p.tail_ns)
        );
        assert!(e.duration_ns - e.tail_ns >= 300_000_000);
        assert_eq!(e.scenario().host.cc_tuning(), {
            let mut t = p.scenario().host.cc_tuning();
            t.dcqcn_plus_ai_scale = Some(1.0);
            t.dcqcn_plus_delta = Some(rocev2_core::time::Duration::from_micros(1));
            t
        });
    }
}
