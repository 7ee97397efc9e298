//! The QP's timers: a fixed table of deadlines indexed by kind (as quinn-proto's `TimerTable`).
//!
//! A QP has few timers, so a table with one slot per kind is cheaper than a heap and makes a
//! spurious expiry harmless: [`TimerTable::expired`] only reports slots whose deadline passed.
//!
//! The table remembers whether any deadline moved since [`TimerTable::take_changed`] last
//! asked, so the endpoint's deadline index re-reads a QP's deadline only when it can have moved
//! (re-reading it after every call cost ~4% of the engine's time per packet).
//!
//! Deviations: none.

use crate::time::Instant;

/// The kinds of QP timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// Requester: no ACK within the local ACK timeout (IBA §9.7.6.1.3).
    Retransmit = 0,
    /// Requester: waiting out an RNR NAK's timer before retrying (IBA §9.7.5.2.8).
    Rnr = 1,
    /// Multipath sender: packets the window allows but no ACK clocked out go to random VPs
    /// after ½ RTT (seed 001 §3.4, burst control).
    MpBurst = 2,
    /// Multipath sender with no new data: the oldest unacknowledged packet becomes due for
    /// early retransmission (seed 001 §3.4; the age threshold is ours, `MpConfig::early_retx_rtts`).
    MpEarly = 3,
}

const COUNT: usize = 4;

/// Which timers [`TimerTable::expired`] found due, indexed by [`Timer`].
pub(crate) type Fired = [bool; COUNT];

/// One optional deadline per [`Timer`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct TimerTable {
    deadlines: [Option<Instant>; COUNT],
    /// A deadline was set to another value, stopped or expired since the last
    /// [`TimerTable::take_changed`].
    changed: bool,
}

impl Default for TimerTable {
    /// No timer set. A new table counts as changed: it may replace one whose deadlines someone
    /// recorded (a QP entering Error or Reset).
    fn default() -> TimerTable {
        TimerTable {
            deadlines: [None; COUNT],
            changed: true,
        }
    }
}

impl TimerTable {
    pub(crate) fn set(&mut self, t: Timer, at: Instant) {
        let slot = &mut self.deadlines[t as usize];
        self.changed |= *slot != Some(at);
        *slot = Some(at);
    }
    pub(crate) fn stop(&mut self, t: Timer) {
        self.changed |= self.deadlines[t as usize].take().is_some();
    }
    pub(crate) fn is_set(&self, t: Timer) -> bool {
        self.deadlines[t as usize].is_some()
    }
    /// The earliest deadline.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.deadlines.iter().flatten().min().copied()
    }
    /// Clears and returns the timers whose deadline is at or before `now`.
    pub(crate) fn expired(&mut self, now: Instant) -> Fired {
        let mut out = [false; COUNT];
        for (slot, fired) in self.deadlines.iter_mut().zip(out.iter_mut()) {
            if slot.is_some_and(|d| d <= now) {
                *slot = None;
                *fired = true;
                self.changed = true;
            }
        }
        out
    }
    /// True when a deadline changed since the last call (or since the table was made).
    pub(crate) fn take_changed(&mut self) -> bool {
        core::mem::take(&mut self.changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_table_reports_only_passed_deadlines() {
        let mut t = TimerTable::default();
        assert_eq!(t.next(), None);
        t.set(Timer::Retransmit, Instant::from_nanos(50));
        t.set(Timer::Rnr, Instant::from_nanos(20));
        assert_eq!(t.next(), Some(Instant::from_nanos(20)));
        assert_eq!(t.expired(Instant::from_nanos(10)), [false; COUNT]);
        assert_eq!(
            t.expired(Instant::from_nanos(30)),
            [false, true, false, false]
        );
        assert!(!t.is_set(Timer::Rnr) && t.is_set(Timer::Retransmit));
        t.stop(Timer::Retransmit);
        assert_eq!(t.next(), None);
    }

    #[test]
    fn timer_table_changed_only_when_a_deadline_moves() {
        let mut t = TimerTable::default();
        assert!(t.take_changed(), "a new table may replace a recorded one");
        assert!(!t.take_changed());
        t.stop(Timer::Rnr);
        assert!(!t.take_changed(), "stopping a stopped timer moves nothing");
        t.set(Timer::Retransmit, Instant::from_nanos(50));
        assert!(t.take_changed());
        t.set(Timer::Retransmit, Instant::from_nanos(50));
        assert!(
            !t.take_changed(),
            "re-arming at the same deadline moves nothing"
        );
        t.set(Timer::Retransmit, Instant::from_nanos(60));
        assert!(t.take_changed());
        assert_eq!(t.expired(Instant::from_nanos(59)), [false; COUNT]);
        assert!(!t.take_changed());
        t.expired(Instant::from_nanos(60));
        assert!(t.take_changed());
        t.set(Timer::Rnr, Instant::from_nanos(70));
        t.take_changed();
        t.stop(Timer::Rnr);
        assert!(t.take_changed());
    }
}
