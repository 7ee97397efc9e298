//! The one place in rocev2 that reads a clock (STYLE.md §4.4): `CLOCK_MONOTONIC`, converted to
//! the core's [`Instant`] (nanoseconds since an arbitrary origin), and the process's CPU time
//! (`CLOCK_PROCESS_CPUTIME_ID`, [`cpu_time`]) with which tools report what a wait mode costs.
//!
//! The origin is the kernel's (boot, less suspended time), not the process start, so instants
//! from different processes on one host compare directly, as kernel timestamps do.
//!
//! Deviations: none.

use rocev2_core::time::{Duration, Instant};

/// Reads `CLOCK_MONOTONIC`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Clock;

impl Clock {
    /// The current time.
    pub fn now(&self) -> Instant {
        now()
    }
}

/// The current `CLOCK_MONOTONIC` time as an [`Instant`].
pub fn now() -> Instant {
    Instant::from_nanos(read(libc::CLOCK_MONOTONIC))
}

/// Nanoseconds of clock `id`.
fn read(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; both clocks read here always exist on Linux,
    // so the call cannot fail (and on failure `ts` stays zero, which is merely an early time).
    unsafe { libc::clock_gettime(id, &mut ts) };
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// The CPU time (user + system) all threads of this process used so far,
/// `CLOCK_PROCESS_CPUTIME_ID`, with nanosecond resolution (not the 10 ms ticks of
/// `/proc/PID/stat`).
pub fn cpu_time() -> Duration {
    Duration::from_nanos(read(libc::CLOCK_PROCESS_CPUTIME_ID))
}

/// `d` as a `timespec` for `ppoll`, saturating at `i64::MAX` seconds.
pub(crate) fn timespec(d: Duration) -> libc::timespec {
    let ns = d.as_nanos();
    libc::timespec {
        tv_sec: i64::try_from(ns / 1_000_000_000).unwrap_or(i64::MAX),
        tv_nsec: (ns % 1_000_000_000) as i64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_monotonic_never_goes_back() {
        let a = now();
        let b = now();
        assert!(b >= a);
        assert!(a > Instant::ZERO);
    }

    #[test]
    fn cpu_time_grows_while_working() {
        let a = cpu_time();
        // About a millisecond of work; the clock has nanosecond resolution.
        let mut x = 1u64;
        for _ in 0..1_000_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        assert!(cpu_time() > a, "{a} then {}", cpu_time());
    }

    #[test]
    fn timespec_splits_seconds() {
        let t = timespec(Duration::from_nanos(2_500_000_001));
        assert_eq!((t.tv_sec, t.tv_nsec), (2, 500_000_001));
    }
}
