//! The sender's view of what it sent: selective ACKs, loss recovery, early retransmission, and
//! the round-trip time.
//!
//! Source: seed 001 §3.4 "Loss recovery" and Fig. 7: "Upon a NACK, MP-RDMA enters recovery
//! mode … we store the current snd_nxt value into a variable called recovery and set snd_retx
//! to the NACKed PSN. In the recovery mode, an incoming ACK clocks out a retransmission packet
//! indicated by snd_retx, instead of a new packet. If snd_una moves beyond recovery, the loss
//! recovery mode ends." Early retransmission follows FUSO as §3.4 cites it: "early retransmits
//! unacknowledged packets as new data if there is no new data to transmit and awnd allows". On
//! an RTO "the sender will start to retransmit all unacknowledged packets".
//!
//! Deviations:
//! * the sender remembers which PSNs were selectively acknowledged (one flag per PSN in flight)
//!   and `snd_retx` skips them, so recovery resends only what the receiver lacks (the paper's
//!   NIC keeps no per-packet state and resends everything from `snd_retx`);
//! * a NACK for a synchronise packet that arrived too early (§3.4) re-enters or extends recovery
//!   for that one PSN, instead of the whole window: it was not lost, only early;
//! * early retransmission resends only packets sent at least a given age ago (2 smoothed RTTs
//!   by default, `MpConfig::early_retx_rtts`): §3.4 names no threshold, and resending every
//!   packet still in flight whenever the window has room and nothing new is queued sent a
//!   ping-pong's every packet twice and a lone 1 MiB WRITE 1070 packets for 1024;
//! * the RTT is measured from the send time kept per PSN (a smoothed average, 1/8 gain, of
//!   samples from ACKs of packets sent once), which the paper needs for the burst timer, the
//!   synchronise delay and probing but does not say how to obtain.

use crate::time::{Duration, Instant};
use crate::wire::Psn;
use alloc::collections::VecDeque;

#[derive(Debug, Clone, Copy)]
struct Sent {
    sacked: bool,
    retransmitted: bool,
    at: Instant,
}

/// Per-PSN send state from `snd_una` to `snd_nxt`, and the recovery variables of Fig. 7.
#[derive(Debug, Clone)]
pub struct Scoreboard {
    /// snd_una: the oldest PSN not cumulatively acknowledged.
    una: Psn,
    /// One entry per PSN in `[snd_una, snd_nxt)`.
    sent: VecDeque<Sent>,
    /// recovery: recovery mode lasts until `snd_una` passes it (Fig. 7).
    recovery: Option<Psn>,
    /// snd_retx: the next PSN recovery may resend (Fig. 7).
    snd_retx: Psn,
    /// The next PSN early retransmission may resend.
    early: Psn,
    /// Smoothed RTT.
    srtt: Duration,
}

impl Scoreboard {
    /// Nothing in flight; `snd_una = snd_nxt = psn`; the RTT starts at `rtt`.
    pub fn new(psn: Psn, rtt: Duration) -> Scoreboard {
        Scoreboard {
            una: psn,
            sent: VecDeque::new(),
            recovery: None,
            snd_retx: psn,
            early: psn,
            srtt: rtt,
        }
    }

    /// snd_una.
    pub fn una(&self) -> Psn {
        self.una
    }
    /// snd_nxt: one past the highest PSN sent.
    pub fn nxt(&self) -> Psn {
        self.una.add(self.sent.len() as u32)
    }
    /// snd_nxt − snd_una.
    pub fn in_flight(&self) -> u32 {
        self.sent.len() as u32
    }
    /// The smoothed round-trip time.
    pub fn rtt(&self) -> Duration {
        self.srtt
    }
    /// True in recovery mode.
    pub fn in_recovery(&self) -> bool {
        self.recovery.is_some()
    }

    fn at(&self, psn: Psn) -> Option<usize> {
        let d = psn.distance(self.una);
        (d >= 0 && (d as usize) < self.sent.len()).then_some(d as usize)
    }

    /// True when `psn` was sent and is not acknowledged in any way.
    pub fn is_unacked(&self, psn: Psn) -> bool {
        self.at(psn).is_some_and(|i| !self.sent[i].sacked)
    }

    /// A new PSN (`snd_nxt`) left at `now`.
    pub fn on_send_new(&mut self, now: Instant) {
        self.sent.push_back(Sent {
            sacked: false,
            retransmitted: false,
            at: now,
        });
    }

    /// An ACK selectively acknowledged `psn` at `now`; its RTT feeds the average unless the
    /// packet was retransmitted (whose ACK is ambiguous, as Karn's rule).
    pub fn on_sack(&mut self, psn: Psn, now: Instant) {
        let Some(i) = self.at(psn) else { return };
        let s = &mut self.sent[i];
        if !s.sacked && !s.retransmitted {
            let sample = now.saturating_duration_since(s.at).as_nanos();
            let srtt = self.srtt.as_nanos();
            self.srtt = Duration::from_nanos(srtt - srtt / 8 + sample / 8);
        }
        s.sacked = true;
    }

    /// The cumulative ACK reached `aack`; returns by how many PSNs `snd_una` moved. Recovery
    /// ends once `snd_una` passes `recovery` (Fig. 7).
    pub fn on_aack(&mut self, aack: Psn) -> u32 {
        let d = aack.distance(self.una);
        if d <= 0 || d as usize > self.sent.len() {
            return 0;
        }
        self.sent.drain(..d as usize);
        self.una = aack;
        if self.recovery.is_some_and(|r| r.distance(aack) <= 0) {
            self.recovery = None;
        }
        d as u32
    }

    /// A NACK for `from` (seed 001 §3.4): enter recovery, or extend it, so that the unacked
    /// PSNs in `[from, until)` are resent ahead of new data. A loss NACK passes
    /// `until = snd_nxt` (Fig. 7's `recovery = snd_nxt`); a synchronise NACK `from + 1`.
    pub fn enter_recovery(&mut self, from: Psn, until: Psn) {
        if self.at(from).is_none() {
            return;
        }
        match self.recovery {
            Some(r) => {
                if from.distance(self.snd_retx) < 0 {
                    self.snd_retx = from;
                }
                if until.distance(r) > 0 {
                    self.recovery = Some(until);
                }
            }
            None => {
                self.recovery = Some(until);
                self.snd_retx = from;
            }
        }
    }

    /// Whether a loss NACK for `missing`, answering the overflowing packet `cause`, reports a
    /// loss recovery has not acted on yet: outside recovery or beyond it, always (§3.4 "upon a
    /// NACK, MP-RDMA enters recovery mode"); inside it, only when `missing` was resent and
    /// `cause` left after that retransmission, which therefore was lost as well. NACKs for
    /// packets sent earlier merely repeat the news, and would resend the hole once per
    /// overflowing packet.
    pub fn is_new_loss(&self, missing: Psn, cause: Psn) -> bool {
        let Some(recovery) = self.recovery else {
            return true;
        };
        if missing.distance(recovery) >= 0 {
            return true;
        }
        match (self.at(missing), self.at(cause)) {
            (Some(m), Some(c)) => {
                let (m, c) = (&self.sent[m], &self.sent[c]);
                m.retransmitted && c.at > m.at
            }
            _ => false,
        }
    }

    /// The retransmission timer fired: resend everything unacknowledged (§3.4).
    pub fn on_timeout(&mut self) {
        let (una, nxt) = (self.una, self.nxt());
        self.recovery = None;
        self.enter_recovery(una, nxt);
        self.early = una;
    }

    /// The first unacknowledged PSN in `[from, until)`.
    fn first_unacked(&self, from: Psn, until: Psn) -> Option<Psn> {
        let from = if from.distance(self.una) < 0 {
            self.una
        } else {
            from
        };
        let start = from.distance(self.una) as usize;
        let end = (until.distance(self.una).max(0) as usize).min(self.sent.len());
        (start..end)
            .find(|&i| !self.sent[i].sacked)
            .map(|i| self.una.add(i as u32))
    }

    /// In recovery, the PSN the next ACK clocks out instead of new data (Fig. 7): the first
    /// unacknowledged one from `snd_retx`.
    pub fn peek_retransmission(&self) -> Option<Psn> {
        self.first_unacked(self.snd_retx, self.recovery?)
    }

    /// With no new data to send, the unacknowledged PSN to resend early (FUSO, §3.4): the first
    /// one after the early cursor, if it was sent at least `after` before `now`. Each PSN at
    /// most once until the next timeout.
    pub fn peek_early(&self, now: Instant, after: Duration) -> Option<Psn> {
        let psn = self.first_unacked(self.early, self.nxt())?;
        let due = self.sent[self.at(psn)?].at + after;
        (due <= now).then_some(psn)
    }

    /// When [`Scoreboard::peek_early`] will next have a PSN for `after`, if anything is left to
    /// resend early.
    pub fn early_due(&self, after: Duration) -> Option<Instant> {
        let psn = self.first_unacked(self.early, self.nxt())?;
        Some(self.sent[self.at(psn)?].at + after)
    }

    /// How many unacknowledged PSNs after the early cursor are due by `now` (at most `max`).
    pub fn early_due_count(&self, now: Instant, after: Duration, max: u32) -> u32 {
        let from = if self.early.distance(self.una) < 0 {
            self.una
        } else {
            self.early
        };
        let start = (from.distance(self.una) as usize).min(self.sent.len());
        self.sent
            .range(start..)
            .filter(|s| !s.sacked && s.at + after <= now)
            .take(max as usize)
            .count() as u32
    }

    /// `psn` was sent again at `now`, by recovery or (`early`) as early retransmission; the
    /// matching cursor moves past it.
    pub fn on_retransmit(&mut self, psn: Psn, now: Instant, early: bool) {
        let Some(i) = self.at(psn) else { return };
        self.sent[i].retransmitted = true;
        self.sent[i].at = now;
        let cursor = if early {
            &mut self.early
        } else {
            &mut self.snd_retx
        };
        if psn.distance(*cursor) >= 0 {
            *cursor = psn.next();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn board(n: u32) -> Scoreboard {
        let mut b = Scoreboard::new(Psn::new(100), Duration::from_micros(10));
        for _ in 0..n {
            b.on_send_new(Instant::ZERO);
        }
        b
    }

    // Fig. 7: a NACK for 102 with snd_nxt = 110 sets recovery = 110, snd_retx = 102; ACKs clock
    // out 102.. skipping the SACKed 104; recovery ends when snd_una passes 110.
    #[test]
    fn recovery_fig7_resends_unacked_from_snd_retx() {
        let mut b = board(10);
        b.on_sack(Psn::new(104), Instant::from_nanos(5_000));
        b.enter_recovery(Psn::new(102), b.nxt());
        assert!(b.in_recovery());
        let resent: alloc::vec::Vec<u32> = core::iter::from_fn(|| {
            let p = b.peek_retransmission()?;
            b.on_retransmit(p, Instant::ZERO, false);
            Some(p.value())
        })
        .collect();
        assert_eq!(resent, [102, 103, 105, 106, 107, 108, 109]);
        assert_eq!(b.on_aack(Psn::new(109)), 9);
        assert!(b.in_recovery());
        b.on_send_new(Instant::ZERO);
        assert_eq!(b.on_aack(Psn::new(111)), 2);
        assert!(!b.in_recovery());
    }

    // §3.4: a NACK re-triggers recovery for a PSN already resent only when the packet that
    // overflowed the bitmap left after the retransmission (which was then lost as well).
    #[test]
    fn recovery_lost_retransmission_retriggered_by_later_overflow() {
        let mut b = board(4);
        assert!(b.is_new_loss(Psn::new(100), Psn::new(103)));
        b.enter_recovery(Psn::new(100), b.nxt());
        assert!(
            !b.is_new_loss(Psn::new(100), Psn::new(103)),
            "not resent yet"
        );
        b.on_retransmit(Psn::new(100), Instant::from_nanos(1_000), false);
        for p in 101..104 {
            b.on_retransmit(Psn::new(p), Instant::from_nanos(1_000), false);
        }
        assert_eq!(b.peek_retransmission(), None);
        assert!(!b.is_new_loss(Psn::new(100), Psn::new(102)), "sent with it");
        b.on_send_new(Instant::from_nanos(2_000));
        assert!(b.is_new_loss(Psn::new(100), Psn::new(104)), "sent after it");
        b.enter_recovery(Psn::new(100), b.nxt());
        assert_eq!(b.peek_retransmission(), Some(Psn::new(100)));
        b.on_aack(Psn::new(105));
        assert!(!b.in_recovery());
        b.on_send_new(Instant::from_nanos(3_000));
        assert!(
            b.is_new_loss(Psn::new(105), Psn::new(105)),
            "outside recovery"
        );
    }

    // §3.4: a synchronise NACK resends only its PSN.
    #[test]
    fn recovery_sync_nack_resends_one_psn() {
        let mut b = board(10);
        b.enter_recovery(Psn::new(105), Psn::new(106));
        assert_eq!(b.peek_retransmission(), Some(Psn::new(105)));
        b.on_retransmit(Psn::new(105), Instant::ZERO, false);
        assert_eq!(b.peek_retransmission(), None);
        // A second one while recovering widens the range downwards.
        b.enter_recovery(Psn::new(103), Psn::new(104));
        assert_eq!(b.peek_retransmission(), Some(Psn::new(103)));
    }

    #[test]
    fn recovery_early_retransmit_each_once_until_timeout() {
        let mut b = board(3);
        let (now, after) = (Instant::from_nanos(20_000), Duration::from_micros(20));
        b.on_sack(Psn::new(101), Instant::ZERO);
        for p in [100, 102] {
            assert_eq!(b.peek_early(now, after), Some(Psn::new(p)));
            b.on_retransmit(Psn::new(p), Instant::ZERO, true);
        }
        assert_eq!(b.peek_early(now, after), None);
        b.on_timeout();
        assert_eq!(b.peek_early(now, after), Some(Psn::new(100)));
        assert_eq!(b.peek_retransmission(), Some(Psn::new(100)));
    }

    // §3.4 (our threshold): a packet in flight for less than `after` is not resent early; it
    // becomes due `after` past its send time, and only the due ones count.
    #[test]
    fn recovery_early_retransmit_waits_for_overdue_packets() {
        let mut b = Scoreboard::new(Psn::new(100), Duration::from_micros(10));
        b.on_send_new(Instant::from_nanos(0));
        b.on_send_new(Instant::from_nanos(5_000));
        let after = Duration::from_micros(20);
        assert_eq!(b.peek_early(Instant::from_nanos(19_999), after), None);
        assert_eq!(b.early_due(after), Some(Instant::from_nanos(20_000)));
        let now = Instant::from_nanos(20_000);
        assert_eq!(b.peek_early(now, after), Some(Psn::new(100)));
        assert_eq!(b.early_due_count(now, after, 8), 1);
        assert_eq!(b.early_due_count(Instant::from_nanos(25_000), after, 8), 2);
        b.on_retransmit(Psn::new(100), now, true);
        assert_eq!(b.early_due(after), Some(Instant::from_nanos(25_000)));
    }

    #[test]
    fn recovery_rtt_smoothed_from_clean_samples() {
        let mut b = board(2);
        b.on_sack(Psn::new(100), Instant::from_nanos(18_000));
        // 10 µs · 7/8 + 18 µs / 8 = 11 µs
        assert_eq!(b.rtt(), Duration::from_nanos(11_000));
        b.on_retransmit(Psn::new(101), Instant::from_nanos(1_000), false);
        b.on_sack(Psn::new(101), Instant::from_nanos(900_000));
        assert_eq!(b.rtt(), Duration::from_nanos(11_000), "Karn: no sample");
    }
}
