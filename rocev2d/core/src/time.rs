//! Time as the sans-IO core sees it: a number of nanoseconds handed in by the caller.
//!
//! The core owns its time types (as s2n-quic does) instead of using `std::time`, because the
//! network model starts its clock at zero and needs exact integer nanoseconds, and because the
//! core must not be able to read a clock at all. The daemon converts `CLOCK_MONOTONIC` into an
//! [`Instant`]; the model advances one by its event queue.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};

/// A point in time, in nanoseconds since an arbitrary origin chosen by the caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    /// The origin of time.
    pub const ZERO: Instant = Instant(0);
    /// A time later than any the caller will ever pass; used for "no deadline".
    pub const FAR_FUTURE: Instant = Instant(u64::MAX);

    /// An instant `ns` nanoseconds after the origin.
    pub const fn from_nanos(ns: u64) -> Self {
        Instant(ns)
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time elapsed from `earlier` to `self`, or zero if `earlier` is later.
    pub const fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    /// Saturates at [`Instant::FAR_FUTURE`] instead of wrapping, so an enormous timeout means
    /// "never" rather than "long ago".
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d.0))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturates at zero: asking how long ago a future instant was gives zero, not a panic.
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Duration(self.0))
    }
}

/// A span of time in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(u64);

impl Duration {
    /// No time at all.
    pub const ZERO: Duration = Duration(0);
    /// Longer than anything that will ever elapse.
    pub const MAX: Duration = Duration(u64::MAX);

    /// `ns` nanoseconds.
    pub const fn from_nanos(ns: u64) -> Self {
        Duration(ns)
    }
    /// `us` microseconds, saturating.
    pub const fn from_micros(us: u64) -> Self {
        Duration(us.saturating_mul(1_000))
    }
    /// `ms` milliseconds, saturating.
    pub const fn from_millis(ms: u64) -> Self {
        Duration(ms.saturating_mul(1_000_000))
    }
    /// `s` seconds, saturating.
    pub const fn from_secs(s: u64) -> Self {
        Duration(s.saturating_mul(1_000_000_000))
    }
    /// Length in nanoseconds.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// `self * n`, saturating.
    pub const fn saturating_mul(self, n: u64) -> Duration {
        Duration(self.0.saturating_mul(n))
    }
    /// `self + other`, saturating.
    pub const fn saturating_add(self, other: Duration) -> Duration {
        Duration(self.0.saturating_add(other.0))
    }
}

impl Add for Duration {
    type Output = Duration;
    fn add(self, other: Duration) -> Duration {
        self.saturating_add(other)
    }
}

/// For tools and tests that hand a core duration (e.g. the datapath's CPU clock) to `std`.
impl From<Duration> for core::time::Duration {
    fn from(d: Duration) -> Self {
        core::time::Duration::from_nanos(d.0)
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0;
        if ns >= 1_000_000_000 {
            write!(
                f,
                "{}.{:06}s",
                ns / 1_000_000_000,
                (ns % 1_000_000_000) / 1_000
            )
        } else if ns >= 1_000_000 {
            write!(f, "{}.{:03}ms", ns / 1_000_000, (ns % 1_000_000) / 1_000)
        } else if ns >= 1_000 {
            write!(f, "{}.{:03}us", ns / 1_000, ns % 1_000)
        } else {
            write!(f, "{ns}ns")
        }
    }
}

/// A data rate in bits per second.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rate(u64);

impl Rate {
    /// `bps` bits per second.
    pub const fn from_bps(bps: u64) -> Self {
        Rate(bps)
    }
    /// `gbps` gigabits per second (10^9 bit/s), saturating.
    pub const fn from_gbps(gbps: u64) -> Self {
        Rate(gbps.saturating_mul(1_000_000_000))
    }
    /// Bits per second.
    pub const fn as_bps(self) -> u64 {
        self.0
    }
    /// How long `bytes` take to serialize at this rate, rounded up; [`Duration::MAX`] at rate 0.
    pub const fn transmit_time(self, bytes: u64) -> Duration {
        if self.0 == 0 {
            return Duration::MAX;
        }
        // u128 keeps `bytes * 8 * 1e9` exact for any realistic size.
        let ns = ((bytes as u128) * 8 * 1_000_000_000).div_ceil(self.0 as u128);
        if ns > u64::MAX as u128 {
            Duration::MAX
        } else {
            Duration(ns as u64)
        }
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b >= 1_000_000_000 {
            write!(
                f,
                "{}.{:03}Gbit/s",
                b / 1_000_000_000,
                (b % 1_000_000_000) / 1_000_000
            )
        } else if b >= 1_000_000 {
            write!(f, "{}.{:03}Mbit/s", b / 1_000_000, (b % 1_000_000) / 1_000)
        } else {
            write!(f, "{b}bit/s")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instant_sub_saturates_instead_of_panicking() {
        let a = Instant::from_nanos(5);
        let b = Instant::from_nanos(9);
        assert_eq!(b - a, Duration::from_nanos(4));
        assert_eq!(a - b, Duration::ZERO);
        assert_eq!(
            Instant::FAR_FUTURE + Duration::from_secs(1),
            Instant::FAR_FUTURE
        );
    }

    #[test]
    fn rate_transmit_time_rounds_up() {
        // 1500 B at 10 Gbit/s = 12000 bit / 1e10 bit/s = 1.2 us.
        assert_eq!(
            Rate::from_gbps(10).transmit_time(1500),
            Duration::from_nanos(1200)
        );
        // 1 B at 3 bit/s = 8/3 s = 2.666..s, rounded up to the next ns.
        assert_eq!(
            Rate::from_bps(3).transmit_time(1),
            Duration::from_nanos(2_666_666_667)
        );
        assert_eq!(Rate::from_bps(0).transmit_time(1), Duration::MAX);
    }

    #[test]
    fn duration_display_picks_unit() {
        use alloc::string::ToString;
        assert_eq!(Duration::from_nanos(999).to_string(), "999ns");
        assert_eq!(Duration::from_nanos(4_096).to_string(), "4.096us");
        assert_eq!(Duration::from_millis(655).to_string(), "655.000ms");
        assert_eq!(Rate::from_gbps(40).to_string(), "40.000Gbit/s");
    }
}
