//! TIMELY: RTT-gradient rate control (Mittal et al., "TIMELY: RTT-based Congestion Control for
//! the Datacenter", SIGCOMM 2015), the baseline seed 000 §VI-A runs beside DCQCN. There is no
//! seed copy of the TIMELY paper: the section and algorithm numbers below are cited from our
//! knowledge of the published paper, not from a file in the seeds.
//!
//! ```text
//!  RTT sample ──> new_rtt_diff = new_rtt − prev_rtt; prev_rtt = new_rtt          (Alg. 1)
//!                 rtt_diff = (1 − α)·rtt_diff + α·new_rtt_diff                    (EWMA)
//!                 gradient = rtt_diff / minRTT                                    (normalised)
//!   new_rtt < T_low  : rate += δ                                                  (additive)
//!   new_rtt > T_high : rate ·= 1 − β·(1 − T_high/new_rtt)                         (multiplicative)
//!   gradient ≤ 0     : rate += N·δ, N = 5 after 5 such samples in a row, else 1  (HAI)
//!   gradient > 0     : rate ·= 1 − β·gradient                                     (gradient decrease)
//! ```
//!
//! TIMELY §4.1 measures the RTT per completion event of a segment as t_completion − t_send −
//! seg.size/NIC line rate; the engine stamps the packet that asks for the ACK when it leaves,
//! so its sample has no serialisation term to remove. §5.2's Algorithm 1 is the rate
//! computation above; §5.3 and §6 give the parameter values of [`TimelyParams::paper`].
//!
//! Deviations: one rate update per ACK (a completion event), not per 16–64 KB segment; seed
//! 000 §VI-A uses 1460-byte segments as well. Seed 000 ran a window-based TIMELY; this one
//! paces at the rate, like every other scheme here. The rate is clamped to [R_min, line rate],
//! R_min 100 Mbit/s as DCQCN's (TIMELY gives none). Flows start at line rate, as seed 000 §VI-A
//! starts every scheme.

use super::{AckInfo, CcSnapshot, CongestionController};
use crate::time::{Duration, Instant, Rate};

/// TIMELY's parameters (TIMELY §5.3, §6).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimelyParams {
    /// Line rate: where flows start and the ceiling of every increase.
    pub line_rate: Rate,
    /// α, the EWMA weight of a new RTT difference.
    pub alpha: f64,
    /// β, the multiplicative decrease factor.
    pub beta: f64,
    /// δ, the additive increase step.
    pub delta: Rate,
    /// T_low: below it the rate always grows by δ.
    pub t_low: Duration,
    /// T_high: above it the rate always falls, in proportion to how far above.
    pub t_high: Duration,
    /// minRTT, the fabric's base RTT that normalises the gradient.
    pub min_rtt: Duration,
    /// Samples in a row with gradient ≤ 0 before hyperactive increase (N = 5).
    pub hai_after: u32,
    /// The floor of the rate.
    pub r_min: Rate,
}

impl TimelyParams {
    /// The TIMELY paper's values (§6, 10 Gbit/s): α 0.875, β 0.8, δ 10 Mbit/s, T_low 50 µs,
    /// T_high 500 µs, minRTT 20 µs, HAI after 5 samples.
    pub fn paper(line_rate: Rate) -> TimelyParams {
        TimelyParams {
            line_rate,
            alpha: 0.875,
            beta: 0.8,
            delta: Rate::from_bps(10_000_000),
            t_low: Duration::from_micros(50),
            t_high: Duration::from_micros(500),
            min_rtt: Duration::from_micros(20),
            hai_after: 5,
            r_min: Rate::from_bps(100_000_000),
        }
    }
}

/// The TIMELY sender of one QP.
#[derive(Debug, Clone, PartialEq)]
pub struct Timely {
    p: TimelyParams,
    /// The rate (bit/s).
    pub rate: f64,
    /// The previous RTT sample, ns.
    prev_rtt: Option<f64>,
    /// The smoothed RTT difference, ns.
    pub rtt_diff: f64,
    /// Samples in a row with a gradient ≤ 0.
    pub negative_run: u32,
    /// Samples that cut the rate.
    pub cuts: u64,
}

impl Timely {
    /// A flow at line rate.
    pub fn new(p: TimelyParams) -> Timely {
        Timely {
            p,
            rate: p.line_rate.as_bps() as f64,
            prev_rtt: None,
            rtt_diff: 0.0,
            negative_run: 0,
            cuts: 0,
        }
    }

    /// The parameters.
    pub fn params(&self) -> &TimelyParams {
        &self.p
    }

    /// One RTT sample: TIMELY §5.2, Algorithm 1.
    pub fn on_rtt(&mut self, rtt: Duration) {
        let new_rtt = rtt.as_nanos() as f64;
        // Alg. 1: new_rtt_diff = new_rtt − prev_rtt; the first sample has no difference.
        let new_rtt_diff = self.prev_rtt.map_or(0.0, |prev| new_rtt - prev);
        self.prev_rtt = Some(new_rtt);
        // Alg. 1: rtt_diff = (1 − α)·rtt_diff + α·new_rtt_diff
        self.rtt_diff = (1.0 - self.p.alpha) * self.rtt_diff + self.p.alpha * new_rtt_diff;
        // Alg. 1: normalized_gradient = rtt_diff / minRTT
        let gradient = self.rtt_diff / self.p.min_rtt.as_nanos().max(1) as f64;
        let delta = self.p.delta.as_bps() as f64;
        let t_high = self.p.t_high.as_nanos() as f64;
        if new_rtt < self.p.t_low.as_nanos() as f64 {
            // Alg. 1: rate ← rate + δ
            self.negative_run = 0;
            self.rate += delta;
        } else if new_rtt > t_high {
            // Alg. 1: rate ← rate·(1 − β·(1 − T_high/new_rtt))
            self.negative_run = 0;
            self.rate *= 1.0 - self.p.beta * (1.0 - t_high / new_rtt);
            self.cuts += 1;
        } else if gradient <= 0.0 {
            // Alg. 1: rate ← rate + N·δ, N = 5 once the gradient stayed ≤ 0 for 5 samples (HAI)
            self.negative_run += 1;
            let n = if self.negative_run >= self.p.hai_after {
                5.0
            } else {
                1.0
            };
            self.rate += n * delta;
        } else {
            // Alg. 1: rate ← rate·(1 − β·normalized_gradient)
            self.negative_run = 0;
            self.rate *= 1.0 - self.p.beta * gradient;
            self.cuts += 1;
        }
        self.rate = self.rate.clamp(
            self.p.r_min.as_bps() as f64,
            self.p.line_rate.as_bps() as f64,
        );
    }
}

impl CongestionController for Timely {
    fn rate(&self) -> Rate {
        Rate::from_bps(self.rate as u64)
    }
    fn wants_rtt(&self) -> bool {
        true
    }
    fn on_ack(&mut self, _now: Instant, ack: &AckInfo) {
        if let Some(rtt) = ack.rtt {
            self.on_rtt(rtt);
        }
    }
    fn snapshot(&self, _now: Instant) -> CcSnapshot {
        CcSnapshot {
            rate: Rate::from_bps(self.rate as u64),
            cnps: self.cuts,
            ..CcSnapshot::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G10: Rate = Rate::from_gbps(10);

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// A flow cut to `rate` bit/s whose previous sample was `prev` µs.
    fn at(rate: f64, prev: u64) -> Timely {
        let mut t = Timely::new(TimelyParams::paper(G10));
        t.rate = rate;
        t.prev_rtt = Some((prev * 1000) as f64);
        t
    }

    #[test]
    fn timely_alg1_rtt_diff_is_an_ewma_of_new_differences() {
        // prev 100 µs, new 120 µs: new_rtt_diff = 20 µs, rtt_diff = 0.125·0 + 0.875·20 = 17.5 µs.
        let mut t = at(5e9, 100);
        t.on_rtt(us(120));
        assert_eq!(t.rtt_diff, 17_500.0);
        // Then 110 µs: new diff −10 µs, rtt_diff = 0.125·17.5 + 0.875·(−10) = −6.5625 µs.
        t.on_rtt(us(110));
        assert_eq!(t.rtt_diff, -6_562.5);
        // The first sample of a flow has no difference.
        let mut f = Timely::new(TimelyParams::paper(G10));
        f.on_rtt(us(100));
        assert_eq!(f.rtt_diff, 0.0);
    }

    #[test]
    fn timely_alg1_below_t_low_adds_delta_whatever_the_gradient() {
        // 40 µs < T_low = 50 µs, even though the RTT rose by 30 µs: rate + 10 Mbit/s.
        let mut t = at(5e9, 10);
        t.on_rtt(us(40));
        assert_eq!(t.rate, 5e9 + 10e6);
        assert_eq!(t.cuts, 0);
    }

    #[test]
    fn timely_alg1_above_t_high_cuts_in_proportion_to_the_excess() {
        // 1000 µs > T_high = 500 µs: rate·(1 − 0.8·(1 − 500/1000)) = rate·0.6, gradient ignored
        // (the RTT fell).
        let mut t = at(5e9, 2000);
        t.on_rtt(us(1000));
        assert_eq!(t.rate, 5e9 * 0.6);
        assert_eq!(t.cuts, 1);
    }

    #[test]
    fn timely_alg1_positive_gradient_cuts_by_beta_times_gradient() {
        // prev 100, new 102 µs: rtt_diff = 0.875·2 µs = 1.75 µs, gradient = 1.75/20 = 0.0875,
        // rate·(1 − 0.8·0.0875) = rate·0.93.
        let mut t = at(5e9, 100);
        t.on_rtt(us(102));
        assert!(
            (t.rate - 5e9 * (1.0 - 0.8 * 0.0875)).abs() < 1e-3,
            "{}",
            t.rate
        );
        assert_eq!(t.cuts, 1);
    }

    #[test]
    fn timely_alg1_non_positive_gradient_adds_delta_then_five_delta_in_hai() {
        // A flat RTT of 100 µs between T_low and T_high: gradient 0, so rate + δ for four
        // samples, then + 5δ from the fifth on (hyperactive increase).
        let mut t = at(5e9, 100);
        for _ in 0..4 {
            t.on_rtt(us(100));
        }
        assert_eq!(t.rate, 5e9 + 4.0 * 10e6);
        t.on_rtt(us(100));
        assert_eq!(t.rate, 5e9 + 4.0 * 10e6 + 50e6);
        // A rise ends the run: the next flat sample is back to + δ.
        t.on_rtt(us(110));
        t.on_rtt(us(101));
        assert_eq!(t.negative_run, 1);
    }

    #[test]
    fn timely_rate_stays_between_r_min_and_line_rate() {
        let mut t = at(200e6, 100);
        t.on_rtt(us(5000)); // ·(1 − 0.8·0.9) = ·0.28 → 56 Mbit/s, floored at 100 Mbit/s
        assert_eq!(t.rate, 100e6);
        let mut t = Timely::new(TimelyParams::paper(G10));
        t.on_rtt(us(10));
        assert_eq!(t.rate, 10e9, "no increase above line rate");
    }

    #[test]
    fn timely_reacts_to_acks_with_an_rtt_and_ignores_others() {
        let mut t = Timely::new(TimelyParams::paper(G10));
        let now = Instant::from_nanos(0);
        t.on_ack(now, &AckInfo::new(None));
        assert_eq!(t.prev_rtt, None);
        t.on_ack(now, &AckInfo::new(None).with_rtt(us(600)));
        assert_eq!(t.prev_rtt, Some(600_000.0));
        assert!(t.rate() < G10);
    }
}
