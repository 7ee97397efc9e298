//! Virtual paths: which UDP source port each packet takes, multipath ACK clocking, burst
//! control, new-path probing and the per-VP counters.
//!
//! Source: seed 001 §3.1 ("we use a UDP source port to identify a network path, which is
//! termed as a Virtual Path (VP)"), §3.2 ("the sender randomly spreads initial window (IW) wise
//! of packets to IW initial VPs. Then, when an ACK arrives … if packets are allowed, they are
//! sent along the VP carried in the ACK"), §3.4 "New path probing" ("every RTT, with a
//! probability p, the sender sends a packet to a new random VP, instead of the VP of the ACK")
//! and "Burst control" ("one ACK can clock out at most two data packets … If no subsequent
//! ACKs return, these packets will be clocked out by a burst timer to random VPs").
//!
//! The clock is a queue of VP tokens: an ACK that may clock out `n` packets pushes its VP `n`
//! times; each data packet takes one token, or, where the paper sends to random VPs (the
//! initial window, the burst timer), one of the `free` sends.
//!
//! Deviations: VPs are drawn uniformly from a configured port range (IANA's dynamic range by
//! default); the per-VP counters are for stats and traces and play no part in the algorithm,
//! which keeps no per-path state (§3.2).

use crate::time::{Duration, Instant};
use alloc::collections::{BTreeMap, VecDeque};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// What happened on one VP, for stats and model traces.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VpCounters {
    /// Data packets sent on this VP (sender) or received on it (receiver).
    pub packets: u64,
    /// ECN: ACKs with ECE (sender) or CE-marked data packets (receiver).
    pub ecn_marks: u64,
    /// Out-of-order: ACKs below `snd_ool` that pruned the VP (sender, §3.3) or packets that
    /// arrived more than Δ after `rcv_nxt` (receiver).
    pub ood: u64,
}

/// The most packets one ACK clocks out (seed 001 §3.4, burst control).
pub const MAX_PER_ACK: u32 = 2;

/// VP choice and the ACK clock of one MP-RDMA sender.
#[derive(Debug, Clone)]
pub struct PathSelector {
    rng: ChaCha8Rng,
    /// First VP (UDP source port) and number of VPs to draw from.
    base: u16,
    count: u16,
    /// VPs clocked by ACKs, one entry per packet allowed.
    tokens: VecDeque<u16>,
    /// Packets that may go to random VPs (initial window, burst timer).
    free: u32,
    /// Probability p of §3.4, as a fraction of 2^32.
    probe_q32: u64,
    /// Start of the current probing round (one per RTT).
    round_start: Instant,
    /// The next token is replaced by a random VP.
    probe_pending: bool,
    counters: BTreeMap<u16, VpCounters>,
    /// Packets sent to random VPs (free sends and probes).
    random_sends: u64,
}

impl PathSelector {
    /// A selector drawing VPs from `base..base + count` with probing probability `probe_p`,
    /// its generator seeded with `seed`.
    pub fn new(seed: u64, base: u16, count: u16, probe_p: f64) -> PathSelector {
        PathSelector {
            rng: ChaCha8Rng::seed_from_u64(seed),
            base,
            count: count.max(1),
            tokens: VecDeque::new(),
            free: 0,
            probe_q32: (probe_p.clamp(0.0, 1.0) * 4_294_967_296.0) as u64,
            round_start: Instant::ZERO,
            probe_pending: false,
            counters: BTreeMap::new(),
            random_sends: 0,
        }
    }

    /// Packets sent to random VPs so far: the initial window, burst-timer sends and probes.
    pub fn random_sends(&self) -> u64 {
        self.random_sends
    }

    /// A VP drawn uniformly at random.
    pub fn random_vp(&mut self) -> u16 {
        self.random_sends += 1;
        let off = (self.rng.next_u32() % self.count as u32) as u16;
        self.base.wrapping_add(off)
    }

    /// Packets already clocked out and not yet sent.
    pub fn queued(&self) -> u32 {
        self.tokens.len() as u32 + self.free
    }

    /// An ACK on `vp` clocks out `n` packets (at most [`MAX_PER_ACK`]), and once per `rtt`,
    /// with probability p, one of them goes to a new random VP (§3.4, new path probing).
    pub fn clock(&mut self, now: Instant, rtt: Duration, vp: u16, n: u32) {
        if now.saturating_duration_since(self.round_start) >= rtt {
            self.round_start = now;
            self.probe_pending = (self.rng.next_u32() as u64) < self.probe_q32;
        }
        for _ in 0..n.min(MAX_PER_ACK) {
            self.tokens.push_back(vp);
        }
    }

    /// Lets `n` packets go to random VPs: the initial window (§3.2) or the burst timer (§3.4).
    pub fn release_free(&mut self, n: u32) {
        self.free = self.free.max(n);
    }

    /// True when a packet may leave now.
    pub fn has_clock(&self) -> bool {
        !self.tokens.is_empty() || self.free > 0
    }

    /// The VP of the next packet, spending a token or a free send.
    pub fn take(&mut self) -> Option<u16> {
        let vp = if let Some(vp) = self.tokens.pop_front() {
            vp
        } else if self.free > 0 {
            self.free -= 1;
            return Some(self.random_vp());
        } else {
            return None;
        };
        if self.probe_pending {
            self.probe_pending = false;
            return Some(self.random_vp());
        }
        Some(vp)
    }

    /// Forgets every pending send (the window closed under them).
    pub fn clear(&mut self) {
        self.tokens.clear();
        self.free = 0;
    }

    /// The counters of `vp`, created on first use.
    pub fn counters_mut(&mut self, vp: u16) -> &mut VpCounters {
        self.counters.entry(vp).or_default()
    }

    /// Every VP used so far with its counters, by port.
    pub fn counters(&self) -> impl Iterator<Item = (u16, &VpCounters)> {
        self.counters.iter().map(|(k, v)| (*k, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // §3.4: one ACK clocks out at most two packets, both on its VP.
    #[test]
    fn path_s3_4_two_per_ack_on_its_vp() {
        let mut p = PathSelector::new(1, 49152, 16384, 0.0);
        p.clock(Instant::ZERO, Duration::from_micros(10), 50_000, 5);
        assert_eq!(p.queued(), 2);
        assert_eq!(p.take(), Some(50_000));
        assert_eq!(p.take(), Some(50_000));
        assert_eq!(p.take(), None);
    }

    // §3.2: free sends go to random VPs in range, spread over many of them.
    #[test]
    fn path_s3_2_initial_window_spread_over_random_vps() {
        let mut p = PathSelector::new(7, 49152, 16384, 0.0);
        p.release_free(16);
        let vps: alloc::collections::BTreeSet<u16> = core::iter::from_fn(|| p.take()).collect();
        assert!(vps.len() >= 15, "{vps:?}");
        assert!(vps.iter().all(|v| *v >= 49152));
    }

    // §3.4: with p = 1 the first token of every RTT round goes to a random VP instead.
    #[test]
    fn path_s3_4_probe_replaces_one_token_per_round() {
        let mut p = PathSelector::new(3, 49152, 16384, 1.0);
        let rtt = Duration::from_micros(10);
        p.clock(Instant::from_nanos(20_000), rtt, 1, 2);
        let first = p.take().unwrap();
        assert_ne!(first, 1);
        assert_eq!(p.take(), Some(1));
        p.clock(Instant::from_nanos(25_000), rtt, 1, 1);
        assert_eq!(p.take(), Some(1), "same round: no probe");
    }
}
