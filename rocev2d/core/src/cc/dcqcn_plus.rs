//! DCQCN+ (seed 002 §IV-B): DCQCN with parameters that follow the incast scale, learnt from the
//! CNP period τ the notification point writes into each CNP and from the flow's own rate.
//!
//! Reaction point:
//! ```text
//!  CNP(τ) ──> R_T = R_C (12); R_C = R_C (1 − α/2) (13); α = (1 − g) α + g (14);
//!             R_C = max(R_C, R_min) (15), R_min = R_l / 10000;  S = 0
//!             if τ > 50 µs: K_α = λ_α · max(τ, M/R) (16), K = λ · max(τ, M/R) (17),
//!                           R = max(R_C, R_l·δ/τ)  (deviation, below)
//!  every K: S += 1;  S < F : R_C = (R_T + R_C)/2                                    (18)
//!                    S < 4F: R_T += min(R_C/5, R_l/50) if α > 0.1 else
//!                                   min(R_C/10, R_l/100);        R_C = (R_T + R_C)/2 (19),(20)
//!                    else  : R_T += min(R_C, (S − 4F)/100 · R_l); R_C = (R_T + R_C)/2 (21),(22)
//!  every K_α: α = (1 − g) α                                                         (23)
//!  no byte counter; no recovery while the priority is paused (PFC)
//! ```
//!
//! Notification point: one list of congested flows per receiver, walked one record per CNP
//! generation interval δ; a record with its ECN bit set and no CNP for the minimum interval gets
//! a CNP carrying τ = l·δ (11), l being the list length.
//!
//! The list is the receiving NIC's, one per host: the NIC's CNP generation power is the premise
//! of §IV-B 2). A host of several engine shards (docs/daemon.md, "Several queues: engine
//! shards") keeps each congested flow in the list of the shard that owns its QP, and the shards
//! walk their lists as one: they exchange their lengths once per exchange period
//! ([`DcqcnPlusNp::set_host`]), and time is cut into slots of δ, slot s being the turn of the
//! shard whose part of the concatenated lists (shard order) holds position s mod l. So the host
//! checks one record per δ and every record comes round once per τ = l·δ, l counting every
//! shard's flows, as one list would; a length another shard changed is learnt one exchange
//! late, during which two shards may take the same slot or none take it.
//!
//! Deviations: the paper writes R_min = R_C/10000 "at the bound of 10,000 flows"; we take the
//! starting rate R_l, so R_min does not sink with every cut. M is the path MTU in bytes (the
//! seed's "1000KB" reads as its 1000-byte MTU). K and K_α are recomputed from the last τ and
//! the current R_C whenever the rate timer re-arms, not only at the cut (see `set_timers`).
//! Eqs. (16), (17) take the flow's rate no lower than its fair share R_l/l = R_l·δ/τ, the rate
//! §V-D itself puts there (K = 2·max{540·1 µs, 8000 bit/(10 Gbit/s / 540)} for 540 flows).
//! Taken literally, M/R_C makes every recovery round last λ packets of the flow's own rate, so a
//! flow recovers in relative terms at a speed proportional to its rate: the flows the start-up
//! cut deepest (to R_min, rounds of 16 ms at 10 Gbit/s) never caught up with the others, and in
//! the 8-sender incast of §V-A a handful of flows kept the link (Jain index of the per-flow
//! throughput 0.11, 0.03, 0.26 at 64, 512, 2000 flows, 10 Gbit/s), against the paper's equal
//! shares (§VI-C) and its recovery within 0.1 s (§V-A). With the paper's δ = 1 µs, no slower
//! than one MTU time on the link, the floor makes K = λ·τ whenever τ > 50 µs. The
//! paper does not say when a record leaves the list; here it does 4F·λ·max(τ, M/R_min) after
//! its flow's last mark ([`DcqcnPlusParams::record_lifetime`]), so that l counts the flows of
//! the incast (§V-D configures τ = N·δ for N flows) and not only those marked in the last few
//! walks. τ travels
//! in rocev2's REXT header (not the CNP's reserved bytes, which standard receivers must ignore
//! and senders must zero).

use super::{CcSnapshot, CnpInfo, CongestionController};
use crate::time::{Duration, Instant, Rate};
use alloc::collections::VecDeque;

/// DCQCN+ parameters (seed 002 §IV-B and §V).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DcqcnPlusParams {
    /// R_l, the link capacity: starting rate and the scale of eqs. (19), (21).
    pub line_rate: Rate,
    /// g of eqs. (14), (23).
    pub g: f64,
    /// λ of eq. (17).
    pub lambda: f64,
    /// λ_α of eq. (16).
    pub lambda_alpha: f64,
    /// M of eqs. (16), (17): the MTU in bytes.
    pub mtu_bytes: u32,
    /// F, the fast recovery rounds.
    pub f: u32,
    /// K and K_α while τ ≤ `tau_threshold` (DCQCN's 55 µs).
    pub k_default: Duration,
    /// τ above which the timers follow eqs. (16), (17) (50 µs).
    pub tau_threshold: Duration,
    /// NP: CNP generation interval δ (a NIC makes one CNP per 1–5 µs; seed 004).
    pub delta: Duration,
    /// NP: minimum interval between two CNPs to the same flow (45 µs).
    pub min_cnp_interval: Duration,
    /// Scale of eq. (19)'s additive step: 1 is the equation as written. The paper's other
    /// reading of the step, §V-D's R_AI = R_l/(10·l) for the testbed, is eq. (19)'s second
    /// branch at the fair share, half the first; the sensitivity grid (`dcqcn_plus_grid`) varies it
    /// (docs/congestion.md), the experiments and scenarios keep 1.
    pub ai_scale: f64,
}

impl DcqcnPlusParams {
    /// The values of seed 002 §IV-B: λ = 2, λ_α = 1, F = 5, g = 1/256, 45 µs minimum CNP
    /// interval, δ = 1 µs (the CX4 generation rate, seed 004), eq. (19) unscaled.
    pub fn paper(line_rate: Rate, mtu_bytes: u32) -> DcqcnPlusParams {
        DcqcnPlusParams {
            line_rate,
            g: 1.0 / 256.0,
            lambda: 2.0,
            lambda_alpha: 1.0,
            mtu_bytes,
            f: 5,
            k_default: Duration::from_micros(55),
            tau_threshold: Duration::from_micros(50),
            delta: Duration::from_micros(1),
            min_cnp_interval: Duration::from_micros(45),
            ai_scale: 1.0,
        }
    }

    /// R_min of eq. (15), R_l / 10000.
    pub fn r_min_bps(&self) -> f64 {
        self.line_rate.as_bps() as f64 / 10_000.0
    }

    /// How long a notification point record outlives its flow's last ECN mark, with `l` flows
    /// in the list: 4F rounds of λ·max(τ, M/R_min) with τ = l·δ (11), the longest a sender cut
    /// to R_min would spend in fast recovery and additive increase under eq. (17) read
    /// literally (without the fair-share floor of [`DcqcnPlus`]'s timers). The point is a life
    /// long enough that l counts the incast's flows across congestion episodes. A shorter life
    /// forgets them between two episodes: l and τ shrink, and the first CNPs of the next
    /// episode carry τ ≤ 50 µs, whose 55 µs timers reach hyper increase within about a
    /// millisecond (a 1 ms life, or four walks of the list, did that at 64 and 2000 flows;
    /// docs/congestion.md).
    pub fn record_lifetime(&self, l: usize) -> Duration {
        let tau = self.delta.saturating_mul(l as u64).as_nanos() as f64;
        // M / R_min in ns: one MTU at the slowest rate a flow can be cut to.
        let slowest = self.mtu_bytes as f64 * 8.0 * 1e9 / self.r_min_bps();
        let rounds = 4.0 * self.f as f64;
        Duration::from_nanos((rounds * self.lambda * tau.max(slowest)) as u64)
    }
}

/// The DCQCN+ reaction point of one QP.
#[derive(Debug, Clone, PartialEq)]
pub struct DcqcnPlus {
    p: DcqcnPlusParams,
    /// R_C (bit/s).
    pub r_c: f64,
    /// R_T (bit/s).
    pub r_t: f64,
    /// α.
    pub alpha: f64,
    /// S, the recovery state counter.
    pub s: u32,
    /// K in force.
    pub k: Duration,
    /// K_α in force.
    pub k_alpha: Duration,
    /// The last τ received.
    pub tau: Option<Duration>,
    rate_timer: Option<Instant>,
    /// Start of the current run of K_α periods (the last cut); α decays lazily from here.
    alpha_epoch: Option<Instant>,
    paused: bool,
    /// CNPs received.
    pub cuts: u64,
}

impl DcqcnPlus {
    /// A flow at line rate.
    pub fn new(p: DcqcnPlusParams) -> DcqcnPlus {
        let line = p.line_rate.as_bps() as f64;
        DcqcnPlus {
            p,
            r_c: line,
            r_t: line,
            alpha: 1.0,
            s: 0,
            k: p.k_default,
            k_alpha: p.k_default,
            tau: None,
            rate_timer: None,
            alpha_epoch: None,
            paused: false,
            cuts: 0,
        }
    }

    /// The parameters.
    pub fn params(&self) -> &DcqcnPlusParams {
        &self.p
    }
    /// The allowed rate.
    pub fn rate(&self) -> Rate {
        Rate::from_bps(self.r_c as u64)
    }
    /// PFC paused (or resumed) this flow's priority: no recovery while paused (§IV-B).
    pub fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
    }

    /// A CNP carrying period `tau` arrived: eqs. (12)–(17).
    pub fn on_cnp(&mut self, now: Instant, tau: Option<Duration>) {
        self.cuts += 1;
        self.alpha = self.alpha_at(now);
        // seed 002 §IV-B eq. (12): R_T = R_C
        self.r_t = self.r_c;
        // eq. (13): R_C = R_C (1 − α/2)
        self.r_c *= 1.0 - self.alpha / 2.0;
        // eq. (14): α = (1 − g) α + g
        self.alpha = (1.0 - self.p.g) * self.alpha + self.p.g;
        // eq. (15): R_C = max(R_C, R_min), R_min = R_l / 10000
        self.r_c = self.r_c.max(self.p.r_min_bps());
        self.s = 0;
        self.tau = tau;
        self.set_timers();
        self.rate_timer = Some(now + self.k);
        self.alpha_epoch = Some(now);
    }

    /// Sets K and K_α from the last τ and the current R_C: eqs. (16), (17) when τ > 50 µs,
    /// DCQCN's 55 µs otherwise. Called at every cut and every time the rate timer is re-armed,
    /// so that K follows R_C as it recovers rather than keeping the value of the last cut.
    fn set_timers(&mut self) {
        match self.tau {
            Some(tau) if tau > self.p.tau_threshold => {
                // M / R: one MTU at the current rate, R_C, but never at less than the fair
                // share R_l/l = R_l·δ/τ of the l flows the notification point walks (11), the
                // rate §V-D puts into eq. (17). Literal M/R_C made a slow flow's rounds longer
                // the slower it was, so flows cut deep never caught up (module docs).
                let fair_share = self.p.line_rate.as_bps() as f64 * self.p.delta.as_nanos() as f64
                    / tau.as_nanos() as f64;
                let mtu_time = self.p.mtu_bytes as f64 * 8.0 * 1e9 / self.r_c.max(fair_share);
                let base = (tau.as_nanos() as f64).max(mtu_time);
                // eq. (16): K_α = λ_α · max(τ, M/R); eq. (17): K = λ · max(τ, M/R)
                self.k_alpha = Duration::from_nanos((self.p.lambda_alpha * base) as u64);
                self.k = Duration::from_nanos((self.p.lambda * base) as u64);
            }
            _ => {
                self.k = self.p.k_default;
                self.k_alpha = self.p.k_default;
            }
        }
    }

    /// Applies the eq. (23) decays of the whole `period`s since the epoch to α and moves the
    /// epoch to the last period boundary, so that a new K_α applies from there on.
    fn fold_alpha(&mut self, now: Instant, period: Duration) {
        if let Some(t) = self.alpha_epoch
            && period.as_nanos() > 0
        {
            let n = (now - t).as_nanos() / period.as_nanos();
            self.alpha = super::decayed_alpha(self.alpha, self.p.g, Some(t), period, now);
            self.alpha_epoch = Some(t + Duration::from_nanos(n * period.as_nanos()));
        }
    }

    /// α at `now`: eq. (23), α = (1 − g) α, applied once per whole K_α since the last cut.
    /// Computed when needed rather than by a periodic timer, which would keep an idle flow's
    /// timer running forever; the values are those the timer would produce.
    pub fn alpha_at(&self, now: Instant) -> f64 {
        super::decayed_alpha(self.alpha, self.p.g, self.alpha_epoch, self.k_alpha, now)
    }

    /// The earliest timer.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.rate_timer
    }

    /// Runs the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.rate_timer.is_some_and(|t| t <= now) {
            if !self.paused {
                self.s += 1;
                self.increase(now);
            }
            if self.rate_timer.is_some() {
                // α has decayed in whole K_α periods so far; fold them in before K_α changes.
                let old_k_alpha = self.k_alpha;
                self.set_timers();
                if self.k_alpha != old_k_alpha {
                    self.fold_alpha(now, old_k_alpha);
                }
                self.rate_timer = Some(now + self.k);
            }
        }
    }

    fn increase(&mut self, now: Instant) {
        let line = self.p.line_rate.as_bps() as f64;
        let f = self.p.f;
        if self.s < f {
            // eq. (18): R_C = (R_T + R_C) / 2
        } else if self.s < 4 * f {
            // eq. (19): the step is a share of the flow's own rate, bounded by the link's
            let step = if self.alpha_at(now) > 0.1 {
                (self.r_c / 5.0).min(line / 50.0)
            } else {
                (self.r_c / 10.0).min(line / 100.0)
            };
            self.r_t += step * self.p.ai_scale;
        } else {
            // eq. (21): R_T += min(R_C, (S − 4F)/100 · R_l)
            let step = (self.r_c).min((self.s - 4 * f) as f64 / 100.0 * line);
            self.r_t += step;
        }
        self.r_t = self.r_t.min(line);
        // eqs. (18), (20), (22): R_C = (R_T + R_C) / 2
        self.r_c = ((self.r_t + self.r_c) / 2.0).min(line);
        if self.r_c >= line && self.r_t >= line {
            self.r_c = line;
            self.rate_timer = None;
        }
    }
}

/// One congested flow in the notification point's list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Record<F> {
    flow: F,
    ecn: bool,
    last_cnp: Option<Instant>,
    last_mark: Instant,
}

/// The DCQCN+ notification point of one receiver, generic over the flow identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DcqcnPlusNp<F> {
    list: VecDeque<Record<F>>,
    cursor: usize,
    next_check: Option<Instant>,
    /// Records in the lists of the host's lower-numbered engine shards (where this list's part
    /// of the host's walk begins) and of all its other shards; zero when alone.
    before: usize,
    others: usize,
}

impl<F> Default for DcqcnPlusNp<F> {
    fn default() -> Self {
        DcqcnPlusNp {
            list: VecDeque::new(),
            cursor: 0,
            next_check: None,
            before: 0,
            others: 0,
        }
    }
}

impl<F: Copy + PartialEq> DcqcnPlusNp<F> {
    /// A CE-marked packet of `flow` arrived: set its record's ECN bit (adding it if new).
    pub fn on_ce(&mut self, now: Instant, flow: F, p: &DcqcnPlusParams) {
        match self.list.iter_mut().find(|r| r.flow == flow) {
            Some(r) => {
                r.ecn = true;
                r.last_mark = now;
            }
            None => self.list.push_back(Record {
                flow,
                ecn: true,
                last_cnp: None,
                last_mark: now,
            }),
        }
        if self.next_check.is_none() {
            self.next_check = Some(now + p.delta);
        }
    }

    /// Flows in the list (l of eq. (11)).
    pub fn len(&self) -> usize {
        self.list.len()
    }
    /// True when no flow is congested.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// When the next record is checked.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_check
    }

    /// The lengths of the host's other engine shards' lists: `before` in those numbered below
    /// this one, `others` in all of them (module docs). Both 0 (the default) when alone.
    pub fn set_host(&mut self, before: usize, others: usize) {
        self.before = before.min(others);
        self.others = others;
    }

    /// Checks one record (every δ, in this list's turns of the host's walk) and returns the
    /// flow to send a CNP to, with τ = l·δ (11), l counting the host's lists.
    pub fn handle_timeout(&mut self, now: Instant, p: &DcqcnPlusParams) -> Option<(F, Duration)> {
        if self.next_check.is_none_or(|t| t > now) {
            return None;
        }
        let life = p.record_lifetime(self.list.len() + self.others);
        self.list.retain(|r| now - r.last_mark < life);
        if self.list.is_empty() {
            self.next_check = None;
            self.cursor = 0;
            return None;
        }
        let l = self.list.len();
        let host_l = l + self.others;
        if self.others > 0 {
            // Slot s of δ is the turn of position s mod l of the host's concatenated lists.
            let delta = p.delta.as_nanos().max(1);
            let slot = now.as_nanos() / delta;
            let (pos, first) = (slot % host_l as u64, self.before as u64);
            if !(first..first + l as u64).contains(&pos) {
                let wait = (first + host_l as u64 - pos) % host_l as u64;
                self.next_check = Some(Instant::from_nanos((slot + wait).saturating_mul(delta)));
                return None;
            }
        }
        self.next_check = Some(now + p.delta);
        self.cursor %= l;
        let tau = p.delta.saturating_mul(host_l as u64);
        let r = &mut self.list[self.cursor];
        self.cursor = (self.cursor + 1) % l;
        let due = r.last_cnp.is_none_or(|t| now - t >= p.min_cnp_interval);
        if r.ecn && due {
            r.ecn = false;
            r.last_cnp = Some(now);
            return Some((r.flow, tau));
        }
        None
    }
}

impl CongestionController for DcqcnPlus {
    fn rate(&self) -> Rate {
        DcqcnPlus::rate(self)
    }
    fn on_cnp(&mut self, now: Instant, cnp: &CnpInfo) {
        DcqcnPlus::on_cnp(self, now, cnp.tau);
    }
    fn set_paused(&mut self, paused: bool) {
        DcqcnPlus::set_paused(self, paused);
    }
    fn poll_timeout(&self) -> Option<Instant> {
        DcqcnPlus::poll_timeout(self)
    }
    fn handle_timeout(&mut self, now: Instant) {
        DcqcnPlus::handle_timeout(self, now);
    }
    fn snapshot(&self, now: Instant) -> CcSnapshot {
        CcSnapshot {
            rate: DcqcnPlus::rate(self),
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
    use alloc::vec;
    use alloc::vec::Vec;

    const G40: Rate = Rate::from_gbps(40);

    fn t(us: u64) -> Instant {
        Instant::from_nanos(us * 1000)
    }

    fn p() -> DcqcnPlusParams {
        DcqcnPlusParams::paper(G40, 1000)
    }

    #[test]
    fn dcqcn_plus_eq12_to_eq15_cut() {
        let mut d = DcqcnPlus::new(p());
        d.on_cnp(t(0), None);
        assert_eq!((d.r_t, d.r_c, d.alpha), (40e9, 20e9, 1.0));
        for i in 1..40 {
            d.on_cnp(t(i), None);
        }
        // eq. (15): R_min = 40G / 10000 = 4 Mbit/s.
        assert_eq!(d.r_c, 4e6);
    }

    #[test]
    fn dcqcn_plus_eq16_eq17_timers_follow_tau() {
        let mut d = DcqcnPlus::new(p());
        d.on_cnp(t(0), Some(Duration::from_micros(30)));
        assert_eq!(
            d.k,
            Duration::from_micros(55),
            "τ ≤ 50 µs keeps the default"
        );
        // τ = 2000 flows · 1 µs = 2 ms; M/R_C = 8000 bit / 20 Gbit/s = 400 ns < τ.
        let mut d = DcqcnPlus::new(p());
        d.on_cnp(t(0), Some(Duration::from_millis(2)));
        assert_eq!(d.k_alpha, Duration::from_millis(2));
        assert_eq!(d.k, Duration::from_millis(4));
        // A slow flow: R_C = 4 Mbit/s, τ = 100 µs, so l = τ/δ = 100 flows share 40 Gbit/s:
        // the fair share is 400 Mbit/s, M/400 Mbit/s = 20 µs < τ, and K = λ·τ = 200 µs
        // (literal M/R_C = 8000/4e6 s = 2 ms would give K = 4 ms).
        let mut d = DcqcnPlus::new(p());
        d.r_c = 8e6;
        d.on_cnp(t(0), Some(Duration::from_micros(100)));
        assert_eq!(d.r_c, 4e6);
        assert_eq!(d.k, Duration::from_micros(200));
        assert_eq!(d.k_alpha, Duration::from_micros(100));
    }

    /// A notification point checking a record every 100 ns (δ < M/R_l = 200 ns), so that the
    /// M/R term of eqs. (16), (17) can exceed τ.
    fn fast_np() -> DcqcnPlusParams {
        DcqcnPlusParams {
            delta: Duration::from_nanos(100),
            ..p()
        }
    }

    #[test]
    fn dcqcn_plus_eq17_rate_floored_at_the_fair_share() {
        // τ = 100 µs with δ = 100 ns: l = 1000 flows, fair share R_l·δ/τ = 40 Mbit/s. A flow
        // cut to 4 Mbit/s times its rounds at 40 Mbit/s: M/R = 8000/40e6 s = 200 µs > τ, so
        // K = λ·200 µs = 400 µs and K_α = 200 µs.
        let mut d = DcqcnPlus::new(fast_np());
        d.r_c = 8e6;
        d.on_cnp(t(0), Some(Duration::from_micros(100)));
        assert_eq!(d.r_c, 4e6);
        assert_eq!(d.k, Duration::from_micros(400));
        assert_eq!(d.k_alpha, Duration::from_micros(200));
        // Above the fair share the flow's own rate counts: cut from 200 to 100 Mbit/s,
        // M/R_C = 80 µs < τ, so K = λ·τ = 200 µs.
        let mut d = DcqcnPlus::new(fast_np());
        d.r_c = 200e6;
        d.on_cnp(t(0), Some(Duration::from_micros(100)));
        assert_eq!((d.r_c, d.k), (100e6, Duration::from_micros(200)));
        // τ = 1 ms (l = 10 000): the fair share is R_min = 4 Mbit/s, M/R = 2 ms > τ, and
        // K = 4 ms, what eq. (17) gives a flow at R_min.
        let mut d = DcqcnPlus::new(fast_np());
        d.r_c = 4e6;
        d.on_cnp(t(0), Some(Duration::from_millis(1)));
        assert_eq!(d.k, Duration::from_millis(4));
    }

    #[test]
    fn dcqcn_plus_eq17_k_follows_r_c_as_it_recovers() {
        // A CNP with τ = 1 ms (fair share 4 Mbit/s with δ = 100 ns) cuts 8 Mbit/s to 4 Mbit/s
        // (α = 1): M/R_C = 8000 bit / 4 Mbit/s = 2 ms > τ, so K = 2 · 2 ms = 4 ms and
        // K_α = 2 ms (eqs. (16), (17)).
        let mut d = DcqcnPlus::new(fast_np());
        d.r_c = 8e6;
        d.on_cnp(t(0), Some(Duration::from_millis(1)));
        assert_eq!((d.r_c, d.k), (4e6, Duration::from_millis(4)));
        // First round (S = 1, eq. (18)): R_C = (8 + 4)/2 = 6 Mbit/s. The re-armed timer uses
        // the new R_C: M/R_C = 8000/6e6 s = 1.333… ms, K = 2.666… ms, K_α = 1.333… ms.
        d.handle_timeout(t(4000));
        assert_eq!(d.r_c, 6e6);
        assert_eq!(d.k, Duration::from_nanos(2_666_666));
        assert_eq!(d.k_alpha, Duration::from_nanos(1_333_333));
        assert_eq!(
            d.poll_timeout(),
            Some(t(4000) + Duration::from_nanos(2_666_666))
        );
        // α decayed once per whole old K_α (2 ms) so far: twice by t = 4 ms (eq. (23)).
        let g = 1.0 / 256.0;
        let want = (1.0 - g) * (1.0 - g);
        assert!((d.alpha_at(t(4000)) - want).abs() < 1e-12);
    }

    #[test]
    fn dcqcn_plus_np_records_outlive_the_senders_recovery() {
        // 40 Gbit/s, 1000-byte MTU: R_min = 4 Mbit/s (eq. (15)), M/R_min = 2 ms. With 64
        // flows τ = 64 µs (eq. (11)), so the longest K of eq. (17) is λ·M/R_min = 4 ms and a
        // record lives 4F = 20 such rounds: 80 ms after its last mark.
        let p = p();
        assert_eq!(p.record_lifetime(64), Duration::from_millis(80));
        // 50 000 flows: τ = 50 ms exceeds M/R_min, K = 100 ms, the life 2 s.
        assert_eq!(p.record_lifetime(50_000), Duration::from_secs(2));
        let mut np = DcqcnPlusNp::default();
        for f in 0..64u32 {
            np.on_ce(t(0), f, &p);
        }
        // A 3 ms lull between two congestion episodes keeps every record, so the next CNPs
        // still carry τ = 64 µs, not the τ of a list refilling from empty.
        np.handle_timeout(t(3_000), &p);
        assert_eq!(np.len(), 64, "a 1 ms expiry would have emptied the list");
        np.handle_timeout(t(79_999), &p);
        assert_eq!(np.len(), 64);
        np.handle_timeout(t(80_001), &p);
        assert!(np.is_empty());
    }

    #[test]
    fn dcqcn_plus_eq18_to_eq22_recovery_phases() {
        let mut d = DcqcnPlus::new(p());
        d.on_cnp(t(0), None); // R_T = 40G, R_C = 20G
        d.handle_timeout(t(55)); // S = 1 < F: eq. (18)
        assert_eq!(d.r_c, 30e9);
        // S = F: eq. (19) with α > 0.1: step = min(R_C/5, R_l/50) = min(6G, 0.8G).
        d.s = 4;
        d.r_t = 30e9;
        let rc = d.r_c;
        d.handle_timeout(t(110));
        assert_eq!(d.s, 5);
        assert_eq!(d.r_t, 30.8e9);
        assert_eq!(d.r_c, (30.8e9 + rc) / 2.0);
        // α ≤ 0.1: step = min(R_C/10, R_l/100).
        d.alpha = 0.05;
        d.alpha_epoch = None;
        d.r_c = 1e9;
        d.r_t = 1e9;
        d.handle_timeout(t(165));
        assert_eq!(d.r_t, 1e9 + 0.1e9);
        // S > 4F: eq. (21), step = min(R_C, (S − 4F)/100 · R_l) with S = 22: 2/100 · 40G.
        d.s = 21;
        d.r_c = 10e9;
        d.r_t = 10e9;
        d.handle_timeout(t(220));
        assert_eq!(d.r_t, 10e9 + 0.8e9);
        assert_eq!(d.r_c, 10.4e9);
    }

    #[test]
    fn dcqcn_plus_eq19_step_scaled_by_ai_scale_only() {
        let mut d = DcqcnPlus::new(DcqcnPlusParams {
            ai_scale: 0.5,
            ..p()
        });
        d.on_cnp(t(0), None);
        // S = F with α > 0.1: eq. (19)'s step min(R_C/5, R_l/50) = 0.8G, halved.
        d.s = 4;
        d.r_c = 30e9;
        d.r_t = 30e9;
        d.handle_timeout(t(55));
        assert_eq!(d.r_t, 30.4e9);
        // Eq. (21) is not scaled: S = 22 adds 2/100 · 40G.
        d.s = 21;
        d.r_c = 10e9;
        d.r_t = 10e9;
        d.handle_timeout(t(110));
        assert_eq!(d.r_t, 10.8e9);
    }

    #[test]
    fn dcqcn_plus_no_recovery_while_paused() {
        let mut d = DcqcnPlus::new(p());
        d.on_cnp(t(0), None);
        d.set_paused(true);
        d.handle_timeout(t(55));
        assert_eq!((d.s, d.r_c), (0, 20e9));
        d.set_paused(false);
        d.handle_timeout(t(110));
        assert_eq!(d.s, 1);
    }

    #[test]
    fn dcqcn_plus_np_round_robin_with_tau_eq11() {
        let p = p();
        let mut np = DcqcnPlusNp::default();
        for f in 0..4u32 {
            np.on_ce(t(0), f, &p);
        }
        // One record per δ = 1 µs; each CNP carries τ = l·δ = 4 µs.
        let mut got = Vec::new();
        for us in 1..=8 {
            if let Some(x) = np.handle_timeout(t(us), &p) {
                got.push(x);
            }
        }
        let d4 = Duration::from_micros(4);
        assert_eq!(
            got,
            vec![(0, d4), (1, d4), (2, d4), (3, d4)],
            "each flow once: ECN bits were cleared"
        );
        // Marked again, flow 0 must wait 45 µs after its last CNP.
        np.on_ce(t(9), 0, &p);
        assert_eq!(
            (10..45)
                .filter_map(|us| np.handle_timeout(t(us), &p))
                .count(),
            0
        );
        let later: Vec<_> = (45..60)
            .filter_map(|us| np.handle_timeout(t(us), &p))
            .collect();
        assert_eq!(later, vec![(0, d4)]);
    }

    #[test]
    fn dcqcn_plus_np_forgets_flows_without_marks() {
        let p = p();
        let mut np = DcqcnPlusNp::default();
        np.on_ce(t(0), 7u32, &p);
        assert_eq!(np.len(), 1);
        np.handle_timeout(t(1), &p);
        // One flow: the life is 4F·λ·M/R_min = 20 · 2 · 2 ms (see above).
        np.handle_timeout(t(79_000), &p);
        assert_eq!(np.len(), 1);
        np.handle_timeout(t(80_001), &p);
        assert!(np.is_empty());
        assert_eq!(np.poll_timeout(), None);
    }
}
