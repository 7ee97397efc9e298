//! MP-RDMA: multipath RDMA transport (seed 001 §3).
//!
//! A queue pair in [`crate::qp::QpMode::MultiPath`] spreads its packets over many *virtual
//! paths* (UDP source ports that ECMP maps onto physical paths) with one congestion window
//! and no per-path state, keeps the reordering within a small receive bitmap, and orders
//! memory updates only where the application asks for it. The algorithms live here, one file
//! per mechanism, as plain state machines with no packets in them; `qp/multipath.rs` drives
//! them from the RC engine's send queue, placement and completion code.
//!
//! | paper | file |
//! |---|---|
//! | §3.1 VPs, per-packet ACK, placement | [`path`], `qp/multipath.rs`, [`crate::wire::ext`] |
//! | §3.2 congestion control, multipath ACK clocking, awnd | [`window`], [`path`] |
//! | §3.3 tracking bitmap, OOO-aware path selection | [`bitmap`], `qp/multipath.rs` |
//! | §3.4 synchronise | [`sync`] |
//! | §3.4 loss recovery, probing, burst control, window reduction, restart | [`recovery`], [`path`], [`window`] |
//!
//! Deviations are listed in each file and in `docs/multipath.md`. Not implemented here:
//! READ and atomic operations over multipath (a multipath QP refuses them at post time).

pub mod bitmap;
pub mod path;
pub mod recovery;
pub mod sync;
pub mod window;

use crate::time::Duration;
pub use path::VpCounters;

/// MP-RDMA parameters of a QP (seed 001 §3, §5.1 for the testbed values).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MpConfig {
    /// IW: initial window in packets, spread over IW random VPs (§3.2; §5.1 uses one BDP).
    pub iw: u32,
    /// L: slots in the receiver's tracking bitmap (§3.3; §5.1: 64).
    pub bitmap_len: u16,
    /// Δ: the out-of-order level the sender allows, Δ ≤ L (§3.3; §5.1: 32).
    pub delta: u16,
    /// α of the synchronise delay Δt = α·Δ/(cwnd/RTT) (§3.4; the paper gives no value).
    pub sync_alpha: f64,
    /// p: probability per RTT of sending to a new random VP (§3.4: 1%).
    pub probe_p: f64,
    /// RTT assumed until the first measurement.
    pub initial_rtt: Duration,
    /// Idle time, in RTTs, after which a sender restarts from IW (§3.4: 3).
    pub idle_restart_rtts: u32,
    /// Age, in smoothed RTTs, after which an unacknowledged packet is resent by early
    /// retransmission when there is no new data (§3.4 cites FUSO without a threshold; 2 is
    /// ours: younger packets are still in flight, not lost).
    pub early_retx_rtts: u32,
    /// First UDP source port used as a VP.
    pub vp_base: u16,
    /// Number of VPs (ports from `vp_base`).
    pub vp_count: u16,
    /// Seed of the VP generator (mixed with the QP number).
    pub seed: u64,
}

impl MpConfig {
    /// The paper's values: L = 64, Δ = 32 (§5.1), p = 1% (§3.4), 3 idle RTTs (§3.4), with an
    /// IW of 16 packets, α = 2, a 10 µs first RTT guess, early retransmission after 2 RTTs and VPs over the whole dynamic port
    /// range 49152–65535.
    pub fn paper() -> MpConfig {
        MpConfig {
            iw: 16,
            bitmap_len: 64,
            delta: 32,
            sync_alpha: 2.0,
            probe_p: 0.01,
            initial_rtt: Duration::from_micros(10),
            idle_restart_rtts: 3,
            early_retx_rtts: 2,
            vp_base: 49152,
            vp_count: 16384,
            seed: 0,
        }
    }
}

impl Default for MpConfig {
    fn default() -> Self {
        MpConfig::paper()
    }
}

/// Receiver-side MP-RDMA statistics of a QP.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MpRxStats {
    /// `ood_hist[d]`: data packets that arrived `d` PSNs after `rcv_nxt` (the last bucket
    /// counts `d ≥ L`, the ones dropped beyond the bitmap). Seed 001 Fig. 1 / §5.2.1's
    /// out-of-order degree.
    pub ood_hist: alloc::vec::Vec<u64>,
    /// Packets dropped because they fell beyond `rcv_nxt + L` (§3.3).
    pub bitmap_drops: u64,
    /// NACKs sent for a missing `rcv_nxt` after an overflow (§3.4 loss recovery).
    pub loss_nacks: u64,
    /// Synchronise packets dropped and NACKed because earlier messages were incomplete (§3.4).
    pub sync_nacks: u64,
    /// SEND packets dropped, and RNR-NAKed, because their receive WQE was not posted.
    pub rnr_drops: u64,
}

impl MpRxStats {
    /// The smallest out-of-order degree at or above which lies at most `1 − q` of the packets
    /// (q = 0.999 for the 99.9th percentile).
    pub fn ood_percentile(&self, q: f64) -> usize {
        let total: u64 = self.ood_hist.iter().sum();
        let mut seen = 0u64;
        for (d, n) in self.ood_hist.iter().enumerate() {
            seen += n;
            if seen as f64 >= q * total as f64 {
                return d;
            }
        }
        self.ood_hist.len().saturating_sub(1)
    }
}
