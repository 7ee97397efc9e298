//! Token-bucket pacer with nanosecond resolution: the rate a congestion controller allows,
//! enforced packet by packet.
//!
//! Kept as an "earliest next departure" time rather than a token count: sending `b` bytes at
//! rate `R` moves the departure time on by `b·8/R` (rounded up to the next nanosecond by
//! [`Rate::transmit_time`]), and an idle pacer may fall at most `burst` behind the present, which
//! is exactly a token bucket of `burst · R` bytes. Integer nanoseconds keep it deterministic.
//!
//! Deviations: none.

use crate::time::{Duration, Instant, Rate};

/// Paces one QP's data packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pacer {
    rate: Rate,
    burst_bytes: u64,
    /// The earliest time the next packet may leave.
    next: Instant,
}

impl Pacer {
    /// A pacer at `rate` that lets an idle QP send `burst_bytes` back to back.
    pub fn new(rate: Rate, burst_bytes: u64) -> Pacer {
        Pacer {
            rate,
            burst_bytes,
            next: Instant::ZERO,
        }
    }
    /// The enforced rate.
    pub fn rate(&self) -> Rate {
        self.rate
    }
    /// Changes the rate from now on; time already earned is kept.
    pub fn set_rate(&mut self, rate: Rate) {
        self.rate = rate;
    }
    /// Changes the rate at `now`: a wait still running is rescaled so that the bytes it owes
    /// are paid at the new rate (`remaining · old / new`, rounded up).
    pub fn set_rate_at(&mut self, now: Instant, rate: Rate) {
        if rate != self.rate && self.next > now && rate.as_bps() > 0 {
            let left = (self.next - now).as_nanos() as u128;
            let scaled = (left * self.rate.as_bps() as u128).div_ceil(rate.as_bps() as u128);
            self.next = now + Duration::from_nanos(u64::try_from(scaled).unwrap_or(u64::MAX));
        }
        self.rate = rate;
    }
    /// True when a packet may leave at `now`.
    pub fn ready(&self, now: Instant) -> bool {
        now >= self.next
    }
    /// When the next packet may leave.
    pub fn next_send(&self) -> Instant {
        self.next
    }
    fn burst(&self) -> Duration {
        self.rate.transmit_time(self.burst_bytes)
    }
    /// Accounts for a packet of `bytes` sent at `now`.
    pub fn on_send(&mut self, now: Instant, bytes: u64) {
        let earliest = Instant::from_nanos(now.as_nanos().saturating_sub(self.burst().as_nanos()));
        let base = self.next.max(earliest);
        self.next = base + self.rate.transmit_time(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacer_spaces_packets_at_rate() {
        // 1000-byte packets at 8 Gbit/s: one per microsecond, no burst allowance.
        let mut p = Pacer::new(Rate::from_gbps(8), 0);
        let mut now = Instant::from_nanos(1_000_000);
        let mut sent = 0;
        for _ in 0..10_000 {
            if p.ready(now) {
                p.on_send(now, 1000);
                sent += 1;
            }
            now += Duration::from_nanos(10);
        }
        // 100 us of simulated time at 1 packet/us.
        assert!((99..=101).contains(&sent), "{sent}");
    }

    #[test]
    fn pacer_idle_earns_at_most_the_burst() {
        let mut p = Pacer::new(Rate::from_gbps(8), 4000);
        let now = Instant::from_nanos(1_000_000_000);
        let mut n = 0;
        while p.ready(now) {
            p.on_send(now, 1000);
            n += 1;
        }
        // 4000 bytes of burst allow four packets back to back (plus the one that crosses).
        assert_eq!(n, 5);
        assert_eq!(p.next_send(), now + Duration::from_nanos(1000));
    }

    #[test]
    fn pacer_rate_change_rescales_the_running_wait() {
        // 1000 bytes at 1 Mbit/s owe 8 ms; 1 ms later 7 ms are left. The rate rises to
        // 1 Gbit/s: the 875 bytes still owed take 7 µs.
        let mut p = Pacer::new(Rate::from_bps(1_000_000), 0);
        let t = Instant::from_nanos(10_000);
        p.on_send(t, 1000);
        assert_eq!(p.next_send(), t + Duration::from_millis(8));
        let now = t + Duration::from_millis(1);
        p.set_rate_at(now, Rate::from_gbps(1));
        assert_eq!(p.next_send(), now + Duration::from_micros(7));
        // A cut stretches it again: 7 µs at 1 Gbit/s owe 875 bytes, 14 µs at 500 Mbit/s.
        p.set_rate_at(now, Rate::from_bps(500_000_000));
        assert_eq!(p.next_send(), now + Duration::from_micros(14));
        // No wait running: nothing to rescale.
        let later = now + Duration::from_millis(1);
        p.set_rate_at(later, Rate::from_gbps(8));
        assert!(p.ready(later));
    }

    #[test]
    fn pacer_rate_change_applies_to_next_packet() {
        let mut p = Pacer::new(Rate::from_gbps(8), 0);
        let t = Instant::from_nanos(10_000);
        p.on_send(t, 1000);
        assert_eq!(p.next_send(), t + Duration::from_nanos(1000));
        p.set_rate(Rate::from_gbps(1));
        p.on_send(p.next_send(), 1000);
        assert_eq!(p.next_send(), t + Duration::from_nanos(1000 + 8000));
    }
}
