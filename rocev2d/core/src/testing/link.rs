//! A deterministic one-way link for tests and the network model: frames go in with
//! [`Link::send`] and come out of [`Link::poll_deliver`] after a delay, possibly serialized at a
//! rate, lost, duplicated, reordered or corrupted, every choice drawn from a seeded generator.
//!
//! Source: none (test infrastructure). The fault set is smoltcp's `phy/fault_injector.rs`; the
//! delay/rate model is the usual store-and-forward one: a frame leaves when the wire is free and
//! its last bit is out (`departure = max(now, previous departure) + len·8 / rate`) and arrives
//! `delay` later.
//!
//! # Probabilities without float trouble
//!
//! Each probability `p` is turned once, in [`Link::new`], into an integer threshold
//! `t = ⌊p·2^64⌋` (clamped to [0, 2^64]); an event then happens when a uniform `u64` draw is
//! below `t`. Multiplying by a power of two is exact in binary floating point, so the threshold
//! is the same on every machine, and after construction only integers are compared. `p ≤ 0` or
//! NaN never happens, `p ≥ 1` always does, and a probability of zero draws nothing, so an ideal
//! link never touches its generator.
//!
//! # Order of decisions for one frame
//!
//! 1. serialization (a lost frame still occupied the wire: loss happens in flight);
//! 2. loss;
//! 3. corruption: one uniformly chosen bit of the frame is flipped (empty frames are left alone);
//! 4. duplication: a second, identical copy (corrupted if the first was);
//! 5. reordering, drawn separately for each copy: the copy is held `reorder_delay` longer, so
//!    frames sent after it can overtake it. A duplicate can therefore arrive long after its
//!    original, as a stale retransmission would.
//!
//! Frames with the same arrival time come out in the order they were sent (the queue is keyed
//! by (arrival, sequence number)).
//!
//! Deviations (from a physical link):
//! - Serialization charges `frame.len()` bytes only: no preamble, inter-frame gap or FCS.
//! - The transmit queue is unbounded; congestion loss is the switch model's business.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use crate::time::{Duration, Instant, Rate};
use crate::wire::frame::Ecn;
use crate::wire::ip;

/// Parameters of a [`Link`]. `Default` is an ideal link: no delay, infinite rate, no faults.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkConfig {
    /// Propagation delay added to every frame after serialization.
    pub delay: Duration,
    /// Serialization rate; `None` for infinitely fast (frames never queue).
    pub rate: Option<Rate>,
    /// Probability that a frame is lost.
    pub loss: f64,
    /// Probability that a frame is delivered twice.
    pub duplicate: f64,
    /// Probability that a frame (each copy separately) is held back `reorder_delay`.
    pub reorder: f64,
    /// Extra delay of a reordered frame. Default 10 µs, about eight 1500-byte frames at
    /// 10 Gbit/s, so back-to-back traffic really overtakes it.
    pub reorder_delay: Duration,
    /// Probability that one bit of a frame is flipped.
    pub corrupt: f64,
    /// Probability that an ECN-capable (ECT) IP packet is marked CE, as a congested switch
    /// would; the IPv4 header checksum is fixed, and the ICRC does not cover the ECN bits.
    pub ce_mark: f64,
    /// Seed of the link's generator.
    pub seed: u64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            delay: Duration::ZERO,
            rate: None,
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_micros(10),
            corrupt: 0.0,
            ce_mark: 0.0,
            seed: 0,
        }
    }
}

impl LinkConfig {
    /// Sets [`LinkConfig::delay`].
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
    /// Sets [`LinkConfig::rate`].
    pub fn rate(mut self, rate: Rate) -> Self {
        self.rate = Some(rate);
        self
    }
    /// Sets [`LinkConfig::loss`].
    pub fn loss(mut self, p: f64) -> Self {
        self.loss = p;
        self
    }
    /// Sets [`LinkConfig::duplicate`].
    pub fn duplicate(mut self, p: f64) -> Self {
        self.duplicate = p;
        self
    }
    /// Sets [`LinkConfig::reorder`] and [`LinkConfig::reorder_delay`].
    pub fn reorder(mut self, p: f64, delay: Duration) -> Self {
        self.reorder = p;
        self.reorder_delay = delay;
        self
    }
    /// Sets [`LinkConfig::corrupt`].
    pub fn corrupt(mut self, p: f64) -> Self {
        self.corrupt = p;
        self
    }
    /// Sets [`LinkConfig::ce_mark`].
    pub fn ce_mark(mut self, p: f64) -> Self {
        self.ce_mark = p;
        self
    }
    /// Sets [`LinkConfig::seed`].
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
}

/// What a [`Link`] did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Frames handed to [`Link::send`].
    pub sent: u64,
    /// Frames (copies included) returned by [`Link::poll_deliver`].
    pub delivered: u64,
    /// Frames dropped.
    pub lost: u64,
    /// Frames given a second copy.
    pub duplicated: u64,
    /// Copies held back by `reorder_delay` (whether or not anything overtook them).
    pub reordered: u64,
    /// Frames with a flipped bit.
    pub corrupted: u64,
    /// ECT packets marked CE.
    pub ce_marked: u64,
}

/// What a [`Link`] did to one frame handed to [`Link::send`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fate {
    /// Dropped: no copy arrives.
    pub lost: bool,
    /// A bit was flipped (in every copy: corruption comes before duplication).
    pub corrupted: bool,
    /// Copies on their way (0 when lost, 2 when duplicated).
    pub copies: u8,
    /// Copies held back by the reorder delay.
    pub held_back: u8,
}

impl Fate {
    /// The frame does not arrive intact and in its turn: lost, corrupted, or every copy held
    /// back behind frames sent after it. A duplicate alone does not spoil it.
    pub fn spoiled(self) -> bool {
        self.lost || self.corrupted || (self.copies > 0 && self.held_back == self.copies)
    }
}

/// A probability as a threshold on a uniform `u64` draw, in units of 2^-64 (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Chance(u128);

impl Chance {
    const ALWAYS: u128 = 1 << 64;

    fn new(p: f64) -> Self {
        // Exact scaling by 2^64; `as` saturates (negative → 0, NaN → 0, too large → MAX).
        let t = (p * 18_446_744_073_709_551_616.0) as u128;
        Chance(t.min(Self::ALWAYS))
    }

    fn roll(self, rng: &mut ChaCha8Rng) -> bool {
        self.0 != 0 && u128::from(rng.next_u64()) < self.0
    }
}

fn is_ect(frame: &[u8]) -> bool {
    matches!(ip::ecn(frame), Some(Ecn::Ect0 | Ecn::Ect1))
}

/// A seeded one-way in-memory link carrying opaque frames.
#[derive(Clone, Debug)]
pub struct Link {
    cfg: LinkConfig,
    loss: Chance,
    duplicate: Chance,
    reorder: Chance,
    corrupt: Chance,
    ce_mark: Chance,
    rng: ChaCha8Rng,
    /// Frames in flight by (arrival, send sequence number).
    queue: BTreeMap<(Instant, u64), Vec<u8>>,
    next_seq: u64,
    /// When the last bit of the previous frame leaves (only with a rate).
    busy_until: Instant,
    stats: LinkStats,
}

impl Link {
    /// An empty link behaving as `cfg` says.
    pub fn new(cfg: LinkConfig) -> Self {
        Link {
            loss: Chance::new(cfg.loss),
            duplicate: Chance::new(cfg.duplicate),
            reorder: Chance::new(cfg.reorder),
            corrupt: Chance::new(cfg.corrupt),
            ce_mark: Chance::new(cfg.ce_mark),
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            queue: BTreeMap::new(),
            next_seq: 0,
            busy_until: Instant::ZERO,
            stats: LinkStats::default(),
            cfg,
        }
    }

    /// Changes the CE marking probability from now on (a congestion episode starting or
    /// ending).
    pub fn set_ce_mark(&mut self, p: f64) {
        self.cfg.ce_mark = p;
        self.ce_mark = Chance::new(p);
    }

    /// The configuration the link was built with.
    pub fn config(&self) -> &LinkConfig {
        &self.cfg
    }

    /// Puts `frame` on the link at `now`. It queues behind earlier frames for serialization if
    /// the link has a rate, then suffers the configured faults (module docs give the order),
    /// which the returned [`Fate`] lists.
    pub fn send(&mut self, now: Instant, mut frame: Vec<u8>) -> Fate {
        self.stats.sent += 1;
        let mut fate = Fate::default();
        let departure = match self.cfg.rate {
            Some(rate) => {
                let start = now.max(self.busy_until);
                self.busy_until = start + rate.transmit_time(frame.len() as u64);
                self.busy_until
            }
            None => now,
        };
        if self.loss.roll(&mut self.rng) {
            self.stats.lost += 1;
            fate.lost = true;
            return fate;
        }
        if !frame.is_empty() && self.corrupt.roll(&mut self.rng) {
            let bits = frame.len() as u128 * 8;
            // Uniform in [0, bits): the high half of draw·bits (no modulo bias worth the name).
            let bit = (u128::from(self.rng.next_u64()) * bits) >> 64;
            if let Some(byte) = frame.get_mut((bit / 8) as usize) {
                *byte ^= 1 << (bit % 8);
                self.stats.corrupted += 1;
                fate.corrupted = true;
            }
        }
        if self.ce_mark.0 != 0 && is_ect(&frame) && self.ce_mark.roll(&mut self.rng) {
            ip::mark_ce(&mut frame);
            self.stats.ce_marked += 1;
        }
        let arrival = departure + self.cfg.delay;
        if self.duplicate.roll(&mut self.rng) {
            self.stats.duplicated += 1;
            self.enqueue(arrival, frame.clone(), &mut fate);
        }
        self.enqueue(arrival, frame, &mut fate);
        fate
    }

    fn enqueue(&mut self, mut arrival: Instant, frame: Vec<u8>, fate: &mut Fate) {
        fate.copies += 1;
        if self.reorder.roll(&mut self.rng) {
            self.stats.reordered += 1;
            fate.held_back += 1;
            arrival += self.cfg.reorder_delay;
        }
        self.queue.insert((arrival, self.next_seq), frame);
        self.next_seq += 1;
    }

    /// When the next frame arrives, if any is in flight: the time to advance a virtual clock to.
    pub fn next_delivery(&self) -> Option<Instant> {
        self.queue.first_key_value().map(|(&(at, _), _)| at)
    }

    /// The earliest frame that has arrived by `now`, if any. Call repeatedly until `None`.
    pub fn poll_deliver(&mut self, now: Instant) -> Option<Vec<u8>> {
        let (&(at, _), _) = self.queue.first_key_value()?;
        if at > now {
            return None;
        }
        let (_, frame) = self.queue.pop_first()?;
        self.stats.delivered += 1;
        Some(frame)
    }

    /// Frames (copies included) sent but not yet delivered or lost.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }

    /// The counters.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec;

    use super::*;

    fn t(ns: u64) -> Instant {
        Instant::from_nanos(ns)
    }

    /// Everything the link will deliver, with arrival times, jumping the clock from arrival to
    /// arrival as `Pair::step` will.
    fn drain(link: &mut Link) -> Vec<(Instant, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(at) = link.next_delivery() {
            if let Some(before) = at.as_nanos().checked_sub(1) {
                assert_eq!(
                    link.poll_deliver(Instant::from_nanos(before)),
                    None,
                    "early"
                );
            }
            while let Some(f) = link.poll_deliver(at) {
                out.push((at, f));
            }
        }
        out
    }

    fn numbered(i: u32) -> Vec<u8> {
        i.to_be_bytes().to_vec()
    }

    fn number(f: &[u8]) -> u32 {
        u32::from_be_bytes([f[0], f[1], f[2], f[3]])
    }

    #[test]
    fn link_ideal_delivers_all_in_order_at_now_plus_delay() {
        let mut link = Link::new(LinkConfig::default().delay(Duration::from_micros(2)));
        for i in 0..10 {
            link.send(t(100 * u64::from(i)), numbered(i));
        }
        // Sent at the same instant: still in send order.
        link.send(t(900), numbered(10));
        let got = drain(&mut link);
        assert_eq!(got.len(), 11);
        for (i, (at, f)) in got.iter().enumerate() {
            assert_eq!(number(f), i as u32);
            assert_eq!(*at, t(100 * (i as u64).min(9) + 2_000));
        }
        assert_eq!(link.stats().delivered, 11);
        assert_eq!(link.stats().sent, 11);
        assert_eq!(link.in_flight(), 0);
    }

    #[test]
    fn link_ideal_never_draws_randomness() {
        let mut link = Link::new(LinkConfig::default());
        let before = link.rng.clone();
        link.send(t(0), vec![1, 2, 3]);
        assert_eq!(link.poll_deliver(t(0)), Some(vec![1, 2, 3]));
        assert_eq!(link.rng, before);
    }

    #[test]
    fn link_rate_spaces_back_to_back_frames() {
        // 8 Gbit/s = 1 byte per ns: a 1000-byte frame takes 1 us to serialize.
        let cfg = LinkConfig::default()
            .rate(Rate::from_gbps(8))
            .delay(Duration::from_nanos(500));
        let mut link = Link::new(cfg);
        for i in 0..3 {
            link.send(t(0), vec![i; 1000]);
        }
        // After the wire has gone idle, a new frame does not wait.
        link.send(t(10_000), vec![9; 100]);
        let times: Vec<u64> = drain(&mut link)
            .iter()
            .map(|(at, _)| at.as_nanos())
            .collect();
        assert_eq!(times, [1_500, 2_500, 3_500, 10_600]);
    }

    #[test]
    fn link_same_seed_gives_identical_delivery_sequence() {
        let cfg = LinkConfig::default()
            .delay(Duration::from_micros(1))
            .rate(Rate::from_gbps(10))
            .loss(0.05)
            .duplicate(0.05)
            .reorder(0.1, Duration::from_micros(5))
            .corrupt(0.05)
            .seed(0xdead_beef);
        let run = |cfg: LinkConfig| {
            let mut link = Link::new(cfg);
            for i in 0..2_000u32 {
                link.send(t(u64::from(i) * 700), numbered(i));
            }
            (drain(&mut link), link.stats())
        };
        let (a, sa) = run(cfg.clone());
        let (b, sb) = run(cfg.clone());
        assert_eq!(a, b);
        assert_eq!(sa, sb);
        // Every fault fired, so the comparison covered all of them.
        assert!(sa.lost > 0 && sa.duplicated > 0 && sa.reordered > 0 && sa.corrupted > 0);
        let (c, _) = run(cfg.seed(1));
        assert_ne!(a, c, "another seed, another sequence");
    }

    #[test]
    fn link_loss_rate_matches_configuration() {
        let mut link = Link::new(LinkConfig::default().loss(0.1).seed(3));
        for i in 0..100_000u32 {
            link.send(t(u64::from(i)), numbered(i));
        }
        let s = link.stats();
        // Binomial(100000, 0.1): mean 10000, sd ≈ 95; ±600 is over 6 sd.
        assert!((9_400..=10_600).contains(&s.lost), "lost {}", s.lost);
        assert_eq!(drain(&mut link).len() as u64 + s.lost, 100_000);
    }

    #[test]
    fn link_corrupt_flips_exactly_one_bit() {
        let mut link = Link::new(LinkConfig::default().corrupt(1.0).seed(5));
        let original: Vec<u8> = (0..64).collect();
        for _ in 0..500 {
            link.send(t(0), original.clone());
        }
        let mut positions = alloc::collections::BTreeSet::new();
        for (_, f) in drain(&mut link) {
            let flipped: Vec<(usize, u32)> = f
                .iter()
                .zip(&original)
                .enumerate()
                .map(|(i, (a, b))| (i, (a ^ b).count_ones()))
                .filter(|&(_, n)| n != 0)
                .collect();
            assert_eq!(flipped.len(), 1);
            assert_eq!(flipped[0].1, 1);
            positions.insert((flipped[0].0, f[flipped[0].0] ^ original[flipped[0].0]));
        }
        assert_eq!(link.stats().corrupted, 500);
        // 512 possible bits, 500 draws: a fixed position would give 1.
        assert!(positions.len() > 250, "{} distinct bits", positions.len());
    }

    #[test]
    fn link_corrupt_leaves_empty_frame_alone() {
        let mut link = Link::new(LinkConfig::default().corrupt(1.0));
        link.send(t(0), Vec::new());
        assert_eq!(link.poll_deliver(t(0)), Some(Vec::new()));
        assert_eq!(link.stats().corrupted, 0);
    }

    #[test]
    fn link_reorder_lets_later_frames_overtake() {
        let cfg = LinkConfig::default()
            .delay(Duration::from_micros(1))
            .reorder(0.2, Duration::from_micros(10))
            .seed(11);
        let mut link = Link::new(cfg);
        for i in 0..1_000u32 {
            link.send(t(u64::from(i) * 1_000), numbered(i));
        }
        let order: Vec<u32> = drain(&mut link).iter().map(|(_, f)| number(f)).collect();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            (0..1_000).collect::<Vec<_>>(),
            "nothing lost or added"
        );
        let inversions = order.windows(2).filter(|w| w[0] > w[1]).count();
        assert!(inversions > 100, "{inversions} inversions");
        let r = link.stats().reordered;
        assert!((140..=260).contains(&r), "reordered {r}");
    }

    #[test]
    fn link_duplicate_delivers_two_copies() {
        let mut link = Link::new(LinkConfig::default().duplicate(1.0));
        link.send(t(0), numbered(1));
        link.send(t(0), numbered(2));
        let got: Vec<u32> = drain(&mut link).iter().map(|(_, f)| number(f)).collect();
        assert_eq!(got, [1, 1, 2, 2]);
        assert_eq!(link.stats().duplicated, 2);
        assert_eq!(link.stats().delivered, 4);
    }

    #[test]
    fn link_loss_one_drops_everything_but_still_occupies_the_wire() {
        let cfg = LinkConfig::default().rate(Rate::from_gbps(8)).loss(1.0);
        let mut link = Link::new(cfg);
        link.send(t(0), vec![0; 1000]);
        assert_eq!(link.next_delivery(), None);
        assert_eq!(link.stats().lost, 1);
        // The lost frame's serialization still delays the next one.
        link.cfg.loss = 0.0;
        link.loss = Chance::new(0.0);
        link.send(t(0), vec![0; 1000]);
        assert_eq!(link.next_delivery(), Some(t(2_000)));
    }

    #[test]
    fn chance_thresholds_are_exact_and_clamped() {
        assert_eq!(Chance::new(0.5).0, 1 << 63);
        assert_eq!(Chance::new(0.25).0, 1 << 62);
        assert_eq!(Chance::new(1.0).0, Chance::ALWAYS);
        assert_eq!(Chance::new(7.0).0, Chance::ALWAYS);
        assert_eq!(Chance::new(f64::INFINITY).0, Chance::ALWAYS);
        assert_eq!(Chance::new(0.0).0, 0);
        assert_eq!(Chance::new(-1.0).0, 0);
        assert_eq!(Chance::new(f64::NAN).0, 0);
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        assert!((0..1_000).all(|_| Chance::new(1.0).roll(&mut rng)));
        assert!((0..1_000).all(|_| !Chance::new(0.0).roll(&mut rng)));
    }
}
