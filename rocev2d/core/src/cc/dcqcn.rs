//! DCQCN reaction point (sender) and notification point (receiver), as seed 002 §II-B
//! describes them (equations (1)–(10)), with the parameter presets of its Table I.
//!
//! ```text
//!  CNP ──> cut: R_T = R_C (1); R_C = R_C (1 − α/2) (2); R_C = max(R_C, R_min) (3);
//!               α = (1 − g) α + g (4); timer, byte counter and their states reset
//!  every K without a CNP: T += 1 ─┐
//!  every B bytes sent:   BC += 1 ─┴─> max(T, BC) < F : fast recovery  R_C = (R_T + R_C)/2 (5)
//!                                      min(T, BC) > F : hyper increase R_T += i·R_HAI (8), (9)
//!                                      otherwise      : additive       R_T += R_AI (6), (7)
//!  every K_α without a CNP: α = (1 − g) α (10)
//! ```
//!
//! Deviations: seed 002 gives no R_min; we use 100 Mbit/s, the default of the DCQCN authors'
//! ns-3 model. α starts at 1, as in that model. Recovery stops once both rates are back at
//! line rate, since further increases would be clamped anyway.

use super::{CcSnapshot, CnpInfo, CongestionController};
use crate::time::{Duration, Instant, Rate};

/// DCQCN parameters (seed 002 Table I).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DcqcnParams {
    /// Line rate R_l: where flows start and the ceiling of every increase.
    pub line_rate: Rate,
    /// g, the α gain of equations (4) and (10).
    pub g: f64,
    /// R_AI, the additive increase step (6).
    pub r_ai: Rate,
    /// R_HAI, the hyper increase step (8).
    pub r_hai: Rate,
    /// K, the rate increase timer.
    pub k: Duration,
    /// K_α, the α decay timer (seed 004: "K_α = K").
    pub k_alpha: Duration,
    /// B, the byte counter.
    pub byte_counter: u64,
    /// F, the number of fast recovery rounds.
    pub f: u32,
    /// R_min of equation (3).
    pub r_min: Rate,
    /// CX4's `rate_reduce_monitor_period`: CNPs closer than this to the last cut are ignored.
    pub rate_reduce_monitor: Duration,
    /// N, the notification point's minimum interval between CNPs per flow.
    pub cnp_interval: Duration,
}

impl DcqcnParams {
    /// The values of the DCQCN paper (seed 002 Table I, right column).
    pub fn paper(line_rate: Rate) -> DcqcnParams {
        DcqcnParams {
            line_rate,
            g: 1.0 / 256.0,
            r_ai: Rate::from_bps(40_000_000),
            r_hai: Rate::from_bps(100_000_000),
            k: Duration::from_micros(55),
            k_alpha: Duration::from_micros(55),
            byte_counter: 10_000_000,
            f: 5,
            r_min: Rate::from_bps(100_000_000),
            rate_reduce_monitor: Duration::ZERO,
            cnp_interval: Duration::from_micros(50),
        }
    }

    /// Mellanox ConnectX-4 firmware defaults (seed 002 Table I, left column).
    pub fn cx4(line_rate: Rate) -> DcqcnParams {
        DcqcnParams {
            r_ai: Rate::from_bps(5_000_000),
            r_hai: Rate::from_bps(40_000_000),
            k: Duration::from_micros(300),
            k_alpha: Duration::from_micros(300),
            byte_counter: 2_000_000,
            rate_reduce_monitor: Duration::from_micros(4),
            cnp_interval: Duration::ZERO,
            ..DcqcnParams::paper(line_rate)
        }
    }
}

/// The DCQCN reaction point of one QP.
#[derive(Debug, Clone, PartialEq)]
pub struct Dcqcn {
    p: DcqcnParams,
    /// R_C, the current rate (bit/s).
    pub r_c: f64,
    /// R_T, the target rate (bit/s).
    pub r_t: f64,
    /// α, the reduction factor.
    pub alpha: f64,
    /// T, the timer state: rate timer expiries since the last cut.
    pub t: u32,
    /// BC, the byte state: byte counter expiries since the last cut.
    pub bc: u32,
    bytes: u64,
    rate_timer: Option<Instant>,
    /// Start of the current run of K_α periods (the last cut); α decays lazily from here.
    alpha_epoch: Option<Instant>,
    last_cut: Option<Instant>,
    /// CNPs that cut the rate.
    pub cuts: u64,
}

impl Dcqcn {
    /// A flow starting at line rate (seed 002 §II-B 4, "line-rate strategy").
    pub fn new(p: DcqcnParams) -> Dcqcn {
        let line = p.line_rate.as_bps() as f64;
        Dcqcn {
            p,
            r_c: line,
            r_t: line,
            alpha: 1.0,
            t: 0,
            bc: 0,
            bytes: 0,
            rate_timer: None,
            alpha_epoch: None,
            last_cut: None,
            cuts: 0,
        }
    }

    /// The parameters.
    pub fn params(&self) -> &DcqcnParams {
        &self.p
    }

    /// The allowed rate.
    pub fn rate(&self) -> Rate {
        Rate::from_bps(self.r_c as u64)
    }

    /// A CNP arrived: equations (1)–(4).
    pub fn on_cnp(&mut self, now: Instant) {
        if self
            .last_cut
            .is_some_and(|t| now - t < self.p.rate_reduce_monitor)
        {
            return;
        }
        self.last_cut = Some(now);
        self.cuts += 1;
        self.alpha = self.alpha_at(now);
        // seed 002 §II-B eq. (1): R_T = R_C
        self.r_t = self.r_c;
        // eq. (2): R_C = R_C (1 − α/2)
        self.r_c *= 1.0 - self.alpha / 2.0;
        // eq. (3): R_C = max(R_C, R_min)
        self.r_c = self.r_c.max(self.p.r_min.as_bps() as f64);
        // eq. (4): α = (1 − g) α + g
        self.alpha = (1.0 - self.p.g) * self.alpha + self.p.g;
        self.t = 0;
        self.bc = 0;
        self.bytes = 0;
        self.rate_timer = Some(now + self.p.k);
        self.alpha_epoch = Some(now);
    }

    /// `bytes` were sent: the byte counter (seed 002 §II-B 3).
    pub fn on_sent(&mut self, bytes: u64) {
        if self.rate_timer.is_none() {
            return;
        }
        self.bytes += bytes;
        while self.p.byte_counter > 0 && self.bytes >= self.p.byte_counter {
            self.bytes -= self.p.byte_counter;
            self.bc += 1;
            self.increase();
        }
    }

    /// α at `now`: eq. (10), α = (1 − g) α, applied once per whole K_α since the last cut.
    /// Computed when needed rather than by a periodic timer, which would keep an idle flow's
    /// timer running forever; the values are those the timer would produce.
    pub fn alpha_at(&self, now: Instant) -> f64 {
        super::decayed_alpha(self.alpha, self.p.g, self.alpha_epoch, self.p.k_alpha, now)
    }

    /// The earliest timer.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.rate_timer
    }

    /// Runs the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.rate_timer.is_some_and(|t| t <= now) {
            self.t += 1;
            self.rate_timer = Some(now + self.p.k);
            self.increase();
        }
    }

    /// One recovery round, chosen by the timer and byte states.
    fn increase(&mut self) {
        let f = self.p.f;
        if self.t.max(self.bc) < f {
            // eq. (5): fast recovery, R_C = (R_T + R_C) / 2
        } else if self.t.min(self.bc) > f {
            // eq. (8): hyper increase, R_T += i·R_HAI with i = min(T, BC) − F
            let i = (self.t.min(self.bc) - f) as f64;
            self.r_t += i * self.p.r_hai.as_bps() as f64;
        } else {
            // eq. (6): additive increase, R_T += R_AI
            self.r_t += self.p.r_ai.as_bps() as f64;
        }
        let line = self.p.line_rate.as_bps() as f64;
        self.r_t = self.r_t.min(line);
        // eqs. (5), (7), (9): R_C = (R_T + R_C) / 2
        self.r_c = ((self.r_t + self.r_c) / 2.0).min(line);
        if self.r_c >= line && self.r_t >= line {
            self.rate_timer = None;
            self.r_c = line;
        }
    }
}

/// The DCQCN notification point of one QP: at most one CNP per interval N for CE-marked
/// packets (seed 002 §II-B 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DcqcnNp {
    last_cnp: Option<Instant>,
}

impl DcqcnNp {
    /// A CE-marked packet arrived at `now`; true if a CNP must go out.
    pub fn on_ce(&mut self, now: Instant, interval: Duration) -> bool {
        if self.last_cnp.is_some_and(|t| now - t < interval) {
            return false;
        }
        self.last_cnp = Some(now);
        true
    }
}

impl CongestionController for Dcqcn {
    fn rate(&self) -> Rate {
        Dcqcn::rate(self)
    }
    fn on_packet_sent(&mut self, _now: Instant, bytes: u64) {
        self.on_sent(bytes);
    }
    fn on_cnp(&mut self, now: Instant, _cnp: &CnpInfo) {
        Dcqcn::on_cnp(self, now);
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Dcqcn::poll_timeout(self)
    }
    fn handle_timeout(&mut self, now: Instant) {
        Dcqcn::handle_timeout(self, now);
    }
    fn snapshot(&self, now: Instant) -> CcSnapshot {
        CcSnapshot {
            rate: Dcqcn::rate(self),
            target: Some(Rate::from_bps(self.r_t as u64)),
            alpha: Some(self.alpha_at(now)),
            n: None,
            cnps: self.cuts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G10: Rate = Rate::from_gbps(10);

    fn t(us: u64) -> Instant {
        Instant::from_nanos(us * 1000)
    }

    #[test]
    fn dcqcn_eq1_to_eq4_first_cut_halves_from_line_rate() {
        // α starts at 1: R_C = 10G · (1 − 1/2) = 5G, R_T = 10G, α = (1 − 1/256)·1 + 1/256 = 1.
        let mut d = Dcqcn::new(DcqcnParams::paper(G10));
        d.on_cnp(t(0));
        assert_eq!(d.r_t, 10e9);
        assert_eq!(d.r_c, 5e9);
        assert_eq!(d.alpha, 1.0);
        // A second cut: R_T = 5G, R_C = 2.5G.
        d.on_cnp(t(1));
        assert_eq!((d.r_t, d.r_c), (5e9, 2.5e9));
    }

    #[test]
    fn dcqcn_eq3_rate_never_below_r_min() {
        let mut d = Dcqcn::new(DcqcnParams::paper(G10));
        for i in 0..100 {
            d.on_cnp(t(i));
        }
        assert_eq!(d.r_c, 100e6);
    }

    #[test]
    fn dcqcn_eq10_alpha_decays_per_k_alpha() {
        let mut d = Dcqcn::new(DcqcnParams::paper(G10));
        d.on_cnp(t(0));
        assert_eq!(d.alpha_at(t(54)), 1.0);
        // One K_α: α = 1 · (1 − 1/256); three: (255/256)^3.
        assert!((d.alpha_at(t(55)) - 255.0 / 256.0).abs() < 1e-12);
        assert!((d.alpha_at(t(170)) - (255.0f64 / 256.0).powi(3)).abs() < 1e-12);
        // A cut applies eq. (4) to the decayed α: (1 − g)·(255/256) + g.
        d.on_cnp(t(56));
        let want = (255.0 / 256.0) * (255.0 / 256.0) + 1.0 / 256.0;
        assert!((d.alpha - want).abs() < 1e-12);
    }

    #[test]
    fn dcqcn_eq5_fast_recovery_bisects_toward_target() {
        let mut d = Dcqcn::new(DcqcnParams::paper(G10));
        d.on_cnp(t(0)); // R_T = 10G, R_C = 5G
        d.handle_timeout(t(55)); // T = 1 < F: R_C = (10 + 5)/2 = 7.5G
        assert_eq!(d.r_c, 7.5e9);
        assert_eq!(d.r_t, 10e9);
        assert_eq!(d.t, 1);
    }

    #[test]
    fn dcqcn_eq6_eq7_additive_then_eq8_eq9_hyper() {
        let mut p = DcqcnParams::paper(G10);
        p.byte_counter = 1000;
        let mut d = Dcqcn::new(p);
        d.on_cnp(t(0));
        d.on_cnp(t(1)); // R_T = 5G, R_C = 2.5G
        d.t = 5; // as if five timer rounds passed
        d.bc = 0;
        let (rt, rc) = (d.r_t, d.r_c);
        d.on_sent(1000); // BC = 1: max(T, BC) = 5 = F, not < F, min = 1 ≤ F: additive increase
        assert_eq!(d.r_t, rt + 40e6);
        assert_eq!(d.r_c, (rt + 40e6 + rc) / 2.0);
        d.t = 7;
        d.bc = 6;
        let (rt, rc) = (d.r_t, d.r_c);
        d.on_sent(1000); // BC = 7, T = 7: both > F, i = 7 − 5 = 2: R_T += 2 · 100M
        assert_eq!(d.r_t, rt + 200e6);
        assert_eq!(d.r_c, (rt + 200e6 + rc) / 2.0);
    }

    #[test]
    fn dcqcn_recovers_to_line_rate_and_stops_its_timer() {
        let mut d = Dcqcn::new(DcqcnParams::paper(G10));
        d.on_cnp(t(0));
        let mut now = t(0);
        while let Some(next) = d.poll_timeout() {
            now = next;
            d.handle_timeout(now);
            if d.rate_timer.is_none() {
                break;
            }
        }
        assert_eq!(d.rate(), G10);
        assert!(now < t(100_000), "recovered within 100 ms, at {now}");
    }

    #[test]
    fn dcqcn_cx4_monitor_period_ignores_close_cnps() {
        let mut d = Dcqcn::new(DcqcnParams::cx4(G10));
        d.on_cnp(t(0));
        d.on_cnp(t(2)); // within rate_reduce_monitor_period = 4 us
        assert_eq!(d.cuts, 1);
        d.on_cnp(t(5));
        assert_eq!(d.cuts, 2);
    }

    #[test]
    fn dcqcn_np_one_cnp_per_interval() {
        let mut np = DcqcnNp::default();
        let n = Duration::from_micros(50);
        assert!(np.on_ce(t(0), n));
        assert!(!np.on_ce(t(49), n));
        assert!(np.on_ce(t(50), n));
        // CX4's N = 0: every marked packet gets a CNP.
        assert!(np.on_ce(t(50), Duration::ZERO));
    }
}
