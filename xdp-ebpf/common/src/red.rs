//! RED with ECN marking on egress queue bytes: the congestion point of DCQCN.
//!
//! Source: seed 002 (DCQCN+) §II-B.1 and Fig. 1, "ECN Marking Probability": at a switch egress
//! queue a packet is marked with probability 0 while the queue is at most `K_min`, with a
//! probability rising linearly from 0 to `P_max` between `K_min` and `K_max`, and with
//! probability 1 above `K_max`:
//!
//! ```text
//!   p(q) = 0                                   q <= K_min
//!        = P_max · (q − K_min) / (K_max − K_min)   K_min < q <= K_max
//!        = 1                                   q > K_max
//! ```
//!
//! The probability is fixed point, [`PROB_ONE`] = 1.0 (Q16), because BPF has no floating point.
//! The caller draws a uniform `u32` (`bpf_get_prandom_u32()` in the XDP program, the seeded
//! generator in the model) and the packet is marked when its top 16 bits are below `p`. Over all
//! 2^16 values of those bits exactly `p` of them mark, so the realised frequency equals the
//! curve up to the Q16 rounding of `p` (below 2^-16), which the tests check exhaustively.
//!
//! A packet that is not ECN-capable (Not-ECT) cannot be marked: by RFC 3168 §5 a RED queue
//! drops it instead, which [`RedConfig::drop_non_ect`] selects; lossless (PFC) deployments leave
//! it off and let such packets pass.
//!
//! Deviations: `q` is the instantaneous queue (DCQCN's switches mark on it; classic RED's
//! EWMA average is not implemented, as in seed 002's set-up).

/// The fixed-point value of probability 1.0 (Q16).
pub const PROB_ONE: u32 = 1 << 16;

/// RED/ECN marking parameters of one egress queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedConfig {
    /// `K_min`: at or below this many queued bytes nothing is marked.
    pub kmin_bytes: u32,
    /// `K_max`: above this many queued bytes every packet is marked.
    pub kmax_bytes: u32,
    /// `P_max`: the marking probability just below `K_max`, Q16 ([`PROB_ONE`] = 1.0).
    pub pmax: u32,
    /// Drop a Not-ECT packet where an ECT one would be marked (RFC 3168 §5), instead of
    /// letting it pass.
    pub drop_non_ect: bool,
}

impl RedConfig {
    /// Seed 002 §IV (DCQCN+ evaluation): `K_min` = 20 KB, `K_max` = 200 KB; `P_max` = 1% as in
    /// the DCQCN paper's recommended setting, which seed 002 §II-B builds on.
    pub const DCQCN_PLUS: RedConfig = RedConfig {
        kmin_bytes: 20_000,
        kmax_bytes: 200_000,
        pmax: PROB_ONE / 100,
        drop_non_ect: false,
    };

    /// A probability in percent as Q16, rounded down (for configuration files).
    pub const fn percent(p: u32) -> u32 {
        if p >= 100 {
            PROB_ONE
        } else {
            // p < 100, so p · 2^16 fits in u32.
            p * PROB_ONE / 100
        }
    }
}

/// What to do with a packet arriving at a RED queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Enqueue unchanged.
    Pass,
    /// Enqueue with the ECN field set to CE.
    Mark,
    /// Drop (only for Not-ECT packets with [`RedConfig::drop_non_ect`]).
    Drop,
}

/// The marking probability, Q16, for a queue holding `queue_bytes` (seed 002 Fig. 1).
///
/// `P_max` above [`PROB_ONE`] is treated as 1. With `K_max <= K_min` the curve is a step from 0
/// to 1 at `K_max`.
pub const fn probability(cfg: &RedConfig, queue_bytes: u32) -> u32 {
    let pmax = if cfg.pmax > PROB_ONE {
        PROB_ONE
    } else {
        cfg.pmax
    };
    if queue_bytes > cfg.kmax_bytes {
        PROB_ONE
    } else if queue_bytes <= cfg.kmin_bytes || cfg.kmax_bytes <= cfg.kmin_bytes {
        0
    } else {
        // Both factors are below 2^32 and 2^17, so the product fits in u64; the span is non-zero.
        let above = (queue_bytes - cfg.kmin_bytes) as u64;
        let span = (cfg.kmax_bytes - cfg.kmin_bytes) as u64;
        (pmax as u64 * above / span) as u32
    }
}

/// The RED decision for one packet: `queue_bytes` is what the queue holds when the packet
/// arrives, `ect` whether its ECN field is ECT(0), ECT(1) or CE, and `rand` a uniform draw.
pub const fn decide(cfg: &RedConfig, queue_bytes: u32, ect: bool, rand: u32) -> Verdict {
    let p = probability(cfg, queue_bytes);
    if (rand >> 16) >= p {
        Verdict::Pass
    } else if ect {
        Verdict::Mark
    } else if cfg.drop_non_ect {
        Verdict::Drop
    } else {
        Verdict::Pass
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: RedConfig = RedConfig {
        kmin_bytes: 10_000,
        kmax_bytes: 50_000,
        pmax: PROB_ONE / 5,
        drop_non_ect: false,
    };

    fn marks_over_all_draws(cfg: &RedConfig, q: u32) -> u32 {
        // Every value of the top 16 bits once; the low bits do not matter.
        (0..PROB_ONE)
            .filter(|&hi| decide(cfg, q, true, (hi << 16) | 0xbeef) == Verdict::Mark)
            .count() as u32
    }

    #[test]
    fn red_fig1_zero_at_and_below_kmin() {
        assert_eq!(probability(&CFG, 0), 0);
        assert_eq!(probability(&CFG, 10_000), 0);
        assert_eq!(marks_over_all_draws(&CFG, 10_000), 0);
    }

    #[test]
    fn red_fig1_linear_between_thresholds() {
        // Half way: 0.2 · 20000 / 40000 = 0.1 → 6553.6 → 6553 in Q16.
        assert_eq!(probability(&CFG, 30_000), 6553);
        // At K_max itself: P_max exactly.
        assert_eq!(probability(&CFG, 50_000), PROB_ONE / 5);
        // One byte above K_min: 0.2 · 1/40000 · 65536 = 0.33 → 0.
        assert_eq!(probability(&CFG, 10_001), 0);
        // Monotone over the ramp.
        let mut last = 0;
        for q in (10_000..=50_000).step_by(97) {
            let p = probability(&CFG, q);
            assert!(p >= last);
            last = p;
        }
    }

    #[test]
    fn red_fig1_one_above_kmax() {
        assert_eq!(probability(&CFG, 50_001), PROB_ONE);
        assert_eq!(marks_over_all_draws(&CFG, 50_001), PROB_ONE);
        assert_eq!(decide(&CFG, u32::MAX, true, u32::MAX), Verdict::Mark);
    }

    #[test]
    fn red_frequency_equals_probability_exactly() {
        for q in [12_345, 30_000, 49_999] {
            assert_eq!(marks_over_all_draws(&CFG, q), probability(&CFG, q));
        }
    }

    #[test]
    fn red_non_ect_passes_or_drops_by_config() {
        assert_eq!(decide(&CFG, 60_000, false, 0), Verdict::Pass);
        let drop = RedConfig {
            drop_non_ect: true,
            ..CFG
        };
        assert_eq!(decide(&drop, 60_000, false, 0), Verdict::Drop);
        assert_eq!(decide(&drop, 0, false, 0), Verdict::Pass);
    }

    #[test]
    fn red_degenerate_thresholds_are_a_step() {
        let step = RedConfig {
            kmin_bytes: 100,
            kmax_bytes: 100,
            pmax: PROB_ONE,
            drop_non_ect: false,
        };
        assert_eq!(probability(&step, 100), 0);
        assert_eq!(probability(&step, 101), PROB_ONE);
        let inverted = RedConfig {
            kmin_bytes: 200,
            ..step
        };
        assert_eq!(probability(&inverted, 100), 0);
        assert_eq!(probability(&inverted, 150), PROB_ONE);
    }

    #[test]
    fn red_pmax_above_one_clamps() {
        let c = RedConfig {
            pmax: 3 * PROB_ONE,
            ..CFG
        };
        assert_eq!(probability(&c, 50_000), PROB_ONE);
        assert_eq!(RedConfig::percent(250), PROB_ONE);
        assert_eq!(RedConfig::percent(50), PROB_ONE / 2);
    }
}
