//! DASR, Dart's direct apportioning of sending rates (seed 000 §III): the receiver counts the
//! senders that are actively sending to it, piggybacks that count N on every ACK, and each
//! sender caps itself at line_rate/N, converging in one RTT instead of DCQCN's many.
//!
//! Receiver state machine (seed 000 §III-C, Fig. 5), evaluated once per measurement interval:
//!
//! ```text
//!                 ECN marks, receive throughput at line rate
//!   ┌────────────┐ ───────────────────────────────────────> ┌───────────────────────┐
//!   │    No      │                                           │ Receiver congestion   │
//!   │ congestion │ <───────────── no ECN marks ───────────── │ N = |AUSS|, CNPs held │
//!   └────────────┘                                           └───────────────────────┘
//!        │ ^   ECN marks, throughput                            │ ^ throughput back at
//!        │ │   below line rate        no ECN marks              v │ line rate (+ ECN)
//!        v │ <──────────────────────────────────────────── ┌───────────────────────┐
//!        └──────────────────────────────────────────────────>│ Non-receiver          │
//!                                                            │ congestion: N = 1,    │
//!                                                            │ CNPs (DCQCN) flow     │
//!                                                            └───────────────────────┘
//! ```
//!
//! The Active Unique Sender Set (§III-B) is kept per tenant (P_Key): a sender enters on the
//! first packet of a message, counts its messages in flight, leaves when the count returns to
//! zero or after `idle_timeout` (2 s) without a packet. Look-ahead (§III-D) pre-populates the set
//! with an incast group's announced members (and counts unlisted ones anonymously) within the
//! announcing tenant only, so one tenant can never throttle another. Every member's first message
//! carries the same announcement, and a flow counts "as if it begins when the look-ahead
//! notification first arrives": the receiver keeps the group open until each of its members has
//! announced it (or for `idle_timeout`), and the copies do not count anyone again, not even a
//! member whose message has already ended. A member announcing the same group a second time
//! starts a new instance of it (the next round of a static group).
//!
//! Deviations: senders are identified by a 16-bit id, the low 16 bits of their IP address (the
//! paper's example uses 2-byte sender ids). "Receive throughput at line rate" means at least
//! `line_fraction` (95%) of the line rate over the last measurement interval. With N ≥ 2 the
//! sender's share is line·w/N·η with η = [`DASR_UTILISATION`] (95%), not line·w/N: shares that
//! add up to exactly the line rate (more, on the wire, since the pacer counts frame bytes
//! without preamble, gap and FCS) leave any queue built before N arrived standing for ever,
//! because receiver congestion holds the CNPs that would drain it. η = 95% drains such a queue
//! at about 3% of the line; seed 000 gives no mechanism of its own (docs/congestion.md).

use crate::time::{Duration, Instant, Rate};
use alloc::collections::BTreeMap;

/// DASR receiver parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DasrParams {
    /// The receiver's line rate.
    pub line_rate: Rate,
    /// How often throughput and ECN are evaluated (about one RTT).
    pub measure_interval: Duration,
    /// Receive throughput at or above this fraction of line rate counts as "at line rate".
    pub line_fraction: f64,
    /// Soft-state timeout of an AUSS entry (seed 000 §III-B: 2 s).
    pub idle_timeout: Duration,
    /// Whether look-ahead notifications are honoured (§III-D; can be turned off).
    pub lookahead: bool,
}

impl DasrParams {
    /// Seed 000's values: 2 s soft state, look-ahead on; a 10 µs interval and 95% threshold
    /// are ours (the paper gives none).
    pub fn paper(line_rate: Rate) -> DasrParams {
        DasrParams {
            line_rate,
            measure_interval: Duration::from_micros(10),
            line_fraction: 0.95,
            idle_timeout: Duration::from_secs(2),
            lookahead: true,
        }
    }
}

/// The receiver's congestion state (seed 000 Fig. 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DartState {
    /// No ECN marks.
    #[default]
    NoCongestion,
    /// ECN marks while receiving at line rate: DASR apportions; CNPs are suppressed.
    ReceiverCongestion,
    /// ECN marks below line rate: N = 1 and DCQCN reacts to CNPs.
    NonReceiverCongestion,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sender {
    in_flight: u32,
    last_seen: Instant,
    /// Announced by look-ahead and not yet seen sending.
    announced: bool,
}

/// One tenant's Active Unique Sender Set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Auss {
    senders: BTreeMap<u16, Sender>,
    /// Announced group members that were not listed by id: (count, when announced).
    anonymous: Option<(u16, Instant)>,
    /// Announced groups some of whose members have not announced them yet.
    open: alloc::vec::Vec<OpenGroup>,
}

/// An incast group announced by look-ahead whose copies are still due (§III-D).
#[derive(Debug, Clone, PartialEq, Eq)]
struct OpenGroup {
    size: u16,
    /// Listed member ids, sorted.
    members: alloc::vec::Vec<u16>,
    /// Senders whose copy of the announcement arrived.
    heard: alloc::vec::Vec<u16>,
    at: Instant,
}

impl Auss {
    fn n(&self) -> u16 {
        let listed = self.senders.len().min(u16::MAX as usize) as u16;
        listed.saturating_add(self.anonymous.map_or(0, |(c, _)| c))
    }
}

/// A data packet as the receiver-side controllers see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DataArrival {
    /// The tenant (P_Key of the BTH).
    pub p_key: u16,
    /// The sender's 16-bit id (low bits of its IP address).
    pub sender: u16,
    /// First or Only packet of its message.
    pub starts: bool,
    /// Last or Only packet of its message.
    pub ends: bool,
    /// Frame bytes, for the throughput measurement.
    pub bytes: u64,
    /// The IP ECN field was CE.
    pub ce: bool,
}

/// DASR at a receiver: AUSS per tenant, throughput and ECN measurement, the Fig. 5 states.
#[derive(Debug, Clone, PartialEq)]
pub struct DasrReceiver {
    p: DasrParams,
    tenants: BTreeMap<u16, Auss>,
    state: DartState,
    window_start: Instant,
    window_bytes: u64,
    window_marks: u64,
    /// Last interval's receive throughput.
    pub throughput: Rate,
}

impl DasrReceiver {
    /// An empty receiver.
    pub fn new(p: DasrParams) -> DasrReceiver {
        DasrReceiver {
            p,
            tenants: BTreeMap::new(),
            state: DartState::default(),
            window_start: Instant::ZERO,
            window_bytes: 0,
            window_marks: 0,
            throughput: Rate::from_bps(0),
        }
    }

    /// The parameters.
    pub fn params(&self) -> &DasrParams {
        &self.p
    }
    /// The current state.
    pub fn state(&self) -> DartState {
        self.state
    }

    /// A data packet arrived.
    pub fn on_data(&mut self, now: Instant, d: &DataArrival) {
        self.roll_window(now);
        self.window_bytes += d.bytes;
        self.window_marks += d.ce as u64;
        let auss = self.tenants.entry(d.p_key & 0x7fff).or_default();
        let s = auss.senders.entry(d.sender).or_insert(Sender {
            in_flight: 0,
            last_seen: now,
            announced: false,
        });
        s.last_seen = now;
        if d.starts {
            // A message announced by look-ahead begins: it was already counted (§III-D).
            if s.announced {
                s.announced = false;
            } else {
                s.in_flight += 1;
            }
        }
        if d.ends {
            s.in_flight = s.in_flight.saturating_sub(1);
            if s.in_flight == 0 && !s.announced {
                auss.senders.remove(&d.sender);
            }
        }
    }

    /// A look-ahead notification from `sender` in tenant `p_key`: `group_size` senders,
    /// `members` listed. A copy of a group still open (another member's announcement of it)
    /// changes nothing (see the module doc).
    pub fn on_lookahead(
        &mut self,
        now: Instant,
        p_key: u16,
        sender: u16,
        group_size: u16,
        members: &[u16],
    ) {
        if !self.p.lookahead {
            return;
        }
        let idle = self.p.idle_timeout;
        let auss = self.tenants.entry(p_key & 0x7fff).or_default();
        auss.open.retain(|g| now - g.at < idle);
        let mut sorted = members.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        if let Some(i) = auss
            .open
            .iter()
            .position(|g| g.size == group_size && g.members == sorted && !g.heard.contains(&sender))
        {
            let g = &mut auss.open[i];
            g.heard.push(sender);
            if g.heard.len() >= usize::from(g.size) {
                auss.open.swap_remove(i);
            }
            return;
        }
        if group_size > 1 {
            auss.open.push(OpenGroup {
                size: group_size,
                members: sorted,
                heard: alloc::vec![sender],
                at: now,
            });
        }
        for id in members {
            auss.senders.entry(*id).or_insert(Sender {
                in_flight: 1,
                last_seen: now,
                announced: true,
            });
        }
        let unlisted = group_size.saturating_sub(members.len() as u16);
        if unlisted > 0 {
            auss.anonymous = Some((unlisted, now));
        }
    }

    /// N to piggyback on an ACK to `sender` in tenant `p_key` (seed 000 §III-A); 1 in
    /// non-receiver congestion (§III-C). The ACK's recipient is counted even between two of its
    /// messages (the set drops a sender the moment its last message ends, while its next one
    /// may already be on the wire), so a long flow made of back-to-back messages never sees its
    /// own share jump to line rate.
    pub fn n(&mut self, now: Instant, p_key: u16, sender: u16) -> u16 {
        if self.state == DartState::NonReceiverCongestion {
            return 1;
        }
        let idle = self.p.idle_timeout;
        let Some(auss) = self.tenants.get_mut(&(p_key & 0x7fff)) else {
            return 1;
        };
        // Soft state (§III-B): senders silent for `idle_timeout` are presumed dead.
        auss.senders.retain(|_, s| now - s.last_seen < idle);
        if auss.anonymous.is_some_and(|(_, t)| now - t >= idle) {
            auss.anonymous = None;
        }
        let absent = !auss.senders.contains_key(&sender) as u16;
        auss.n().saturating_add(absent).max(1)
    }

    /// Whether the notification point may send CNPs: not in receiver congestion, where DASR
    /// alone reacts (§III-C).
    pub fn allow_cnp(&self) -> bool {
        self.state != DartState::ReceiverCongestion
    }

    /// Closes measurement intervals up to `now` and moves through Fig. 5.
    fn roll_window(&mut self, now: Instant) {
        let iv = self.p.measure_interval;
        if now - self.window_start < iv {
            return;
        }
        let elapsed = (now - self.window_start).as_nanos().max(1);
        let bps = (self.window_bytes as u128 * 8 * 1_000_000_000 / elapsed as u128) as u64;
        self.throughput = Rate::from_bps(bps);
        let at_line = bps as f64 >= self.p.line_fraction * self.p.line_rate.as_bps() as f64;
        self.state = match (self.window_marks > 0, at_line) {
            (false, _) => DartState::NoCongestion,
            (true, true) => DartState::ReceiverCongestion,
            (true, false) => DartState::NonReceiverCongestion,
        };
        self.window_start = now;
        self.window_bytes = 0;
        self.window_marks = 0;
    }
}

/// η: the fraction of the line rate DASR hands out when N ≥ 2 senders share the receiver
/// (a deviation, see the module doc; HPCC's η is the same 95%).
pub const DASR_UTILISATION: f64 = 0.95;

/// The sender's side of DASR: the rate cap line_rate·w/N·η from the latest N.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DasrSender {
    line_rate: Rate,
    weight: f64,
    /// The latest N received.
    pub n: u16,
}

impl DasrSender {
    /// A sender with weight 1 (fair share) on a link of `line_rate`.
    pub fn new(line_rate: Rate) -> DasrSender {
        DasrSender {
            line_rate,
            weight: 1.0,
            n: 1,
        }
    }
    /// A weighted share (seed 000 §III: "extended easily to weighted fair shares").
    pub fn with_weight(mut self, weight: f64) -> DasrSender {
        self.weight = weight;
        self
    }
    /// An ACK carried N (0 means "no information" and is ignored).
    pub fn on_n(&mut self, n: u16) {
        if n > 0 {
            self.n = n;
        }
    }
    /// The cap: line_rate · w / N (· η when N ≥ 2), never above line rate.
    pub fn cap(&self) -> Rate {
        let eta = if self.n >= 2 { DASR_UTILISATION } else { 1.0 };
        let bps = self.line_rate.as_bps() as f64 * self.weight * eta / self.n.max(1) as f64;
        Rate::from_bps(bps.min(self.line_rate.as_bps() as f64) as u64)
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
    fn dasr_auss_counts_unique_senders_once() {
        let mut r = DasrReceiver::new(DasrParams::paper(G10));
        // Sender 1 has two messages in flight, sender 2 one: N = 2, not 3 (seed 000 §III-B).
        r.on_data(
            t(0),
            &DataArrival {
                p_key: 0xffff,
                sender: 1,
                starts: true,
                ends: false,
                bytes: 1000,
                ce: false,
            },
        );
        r.on_data(
            t(0),
            &DataArrival {
                p_key: 0xffff,
                sender: 1,
                starts: true,
                ends: false,
                bytes: 1000,
                ce: false,
            },
        );
        r.on_data(
            t(0),
            &DataArrival {
                p_key: 0xffff,
                sender: 2,
                starts: true,
                ends: false,
                bytes: 1000,
                ce: false,
            },
        );
        assert_eq!(r.n(t(0), 0xffff, 1), 2);
        r.on_data(
            t(1),
            &DataArrival {
                p_key: 0xffff,
                sender: 1,
                starts: false,
                ends: true,
                bytes: 1000,
                ce: false,
            },
        );
        assert_eq!(r.n(t(1), 0xffff, 1), 2, "sender 1 still has a message");
        r.on_data(
            t(1),
            &DataArrival {
                p_key: 0xffff,
                sender: 1,
                starts: false,
                ends: true,
                bytes: 1000,
                ce: false,
            },
        );
        assert_eq!(r.n(t(1), 0xffff, 2), 1);
        assert_eq!(
            r.n(t(1), 0xffff, 1),
            2,
            "the ACK's recipient is active: it is sending"
        );
    }

    #[test]
    fn dasr_soft_state_expires_after_two_seconds() {
        let mut r = DasrReceiver::new(DasrParams::paper(G10));
        r.on_data(
            t(0),
            &DataArrival {
                p_key: 0xffff,
                sender: 1,
                starts: true,
                ends: false,
                bytes: 1000,
                ce: false,
            },
        );
        r.on_data(
            t(0),
            &DataArrival {
                p_key: 0xffff,
                sender: 2,
                starts: true,
                ends: false,
                bytes: 1000,
                ce: false,
            },
        );
        assert_eq!(r.n(t(1_999_999), 0xffff, 1), 2);
        assert_eq!(r.n(t(2_000_000), 0xffff, 1), 1, "both presumed dead");
    }

    #[test]
    fn dasr_lookahead_prepopulates_only_its_tenant() {
        let mut r = DasrReceiver::new(DasrParams::paper(G10));
        r.on_data(
            t(0),
            &DataArrival {
                p_key: 0x8001,
                sender: 9,
                starts: true,
                ends: false,
                bytes: 1000,
                ce: false,
            },
        );
        // Tenant 0x8002 announces a 20-sender incast listing 3 ids.
        r.on_lookahead(t(0), 0x8002, 1, 20, &[1, 2, 3]);
        assert_eq!(r.n(t(0), 0x8002, 1), 20);
        assert_eq!(r.n(t(0), 0x8001, 9), 1, "another tenant is not throttled");
        // A listed member's message starts and ends: counted once, then gone.
        r.on_data(
            t(1),
            &DataArrival {
                p_key: 0x8002,
                sender: 2,
                starts: true,
                ends: false,
                bytes: 1000,
                ce: false,
            },
        );
        assert_eq!(r.n(t(1), 0x8002, 2), 20);
        r.on_data(
            t(2),
            &DataArrival {
                p_key: 0x8002,
                sender: 2,
                starts: false,
                ends: true,
                bytes: 1000,
                ce: false,
            },
        );
        assert_eq!(r.n(t(2), 0x8002, 1), 19);
        let mut off = DasrReceiver::new(DasrParams {
            lookahead: false,
            ..DasrParams::paper(G10)
        });
        off.on_lookahead(t(0), 0x8002, 1, 20, &[1, 2, 3]);
        assert_eq!(off.n(t(0), 0x8002, 1), 1);
    }

    /// One message of sender `s`, first and last packet at once.
    fn only(s: u16) -> DataArrival {
        DataArrival {
            p_key: 0xffff,
            sender: s,
            starts: true,
            ends: true,
            bytes: 1000,
            ce: false,
        }
    }

    #[test]
    fn dasr_lookahead_counts_a_group_once_however_many_members_announce_it() {
        let mut r = DasrReceiver::new(DasrParams::paper(G10));
        // Members 1, 2, 3 each send one single-packet message carrying the group (§III-D).
        r.on_lookahead(t(0), 0xffff, 1, 3, &[1, 2, 3]);
        r.on_data(t(0), &only(1));
        assert_eq!(r.n(t(0), 0xffff, 9), 3, "2 and 3 announced, not yet seen");
        // Member 2's copy arrives after member 1's message ended: 1 is not counted again.
        r.on_lookahead(t(1), 0xffff, 2, 3, &[3, 2, 1]);
        r.on_data(t(1), &only(2));
        assert_eq!(
            r.n(t(1), 0xffff, 9),
            2,
            "only 3 is left, plus the ACK's recipient"
        );
        r.on_lookahead(t(2), 0xffff, 3, 3, &[1, 2, 3]);
        r.on_data(t(2), &only(3));
        assert_eq!(r.n(t(2), 0xffff, 9), 1, "the group is done");
        // The next round of the same static group is a new instance.
        r.on_lookahead(t(5), 0xffff, 2, 3, &[1, 2, 3]);
        assert_eq!(r.n(t(5), 0xffff, 9), 4);
        // A member announcing twice opens a further instance rather than closing this one.
        r.on_lookahead(t(6), 0xffff, 2, 3, &[1, 2, 3]);
        r.on_data(t(6), &only(2));
        r.on_lookahead(t(7), 0xffff, 1, 3, &[1, 2, 3]);
        r.on_data(t(7), &only(1));
        assert_eq!(r.n(t(7), 0xffff, 9), 2, "3 is still announced");
    }

    #[test]
    fn dart_fig5_states_follow_throughput_and_marks() {
        let mut r = DasrReceiver::new(DasrParams::paper(G10));
        // 10 µs at 10 Gbit/s = 12500 bytes; deliver 13 packets of 1000 B with marks.
        for _ in 0..13 {
            r.on_data(
                t(0),
                &DataArrival {
                    p_key: 0xffff,
                    sender: 1,
                    starts: false,
                    ends: false,
                    bytes: 1000,
                    ce: true,
                },
            );
        }
        r.on_data(
            t(10),
            &DataArrival {
                p_key: 0xffff,
                sender: 1,
                starts: false,
                ends: false,
                bytes: 0,
                ce: false,
            },
        );
        assert_eq!(r.state(), DartState::ReceiverCongestion);
        assert!(!r.allow_cnp());
        // Next interval: marks but only 3000 bytes: non-receiver congestion, N forced to 1.
        r.on_data(
            t(10),
            &DataArrival {
                p_key: 0xffff,
                sender: 2,
                starts: true,
                ends: false,
                bytes: 0,
                ce: false,
            },
        );
        for i in 11..14 {
            r.on_data(
                t(i),
                &DataArrival {
                    p_key: 0xffff,
                    sender: 1,
                    starts: false,
                    ends: false,
                    bytes: 1000,
                    ce: true,
                },
            );
        }
        r.on_data(
            t(20),
            &DataArrival {
                p_key: 0xffff,
                sender: 1,
                starts: false,
                ends: false,
                bytes: 0,
                ce: false,
            },
        );
        assert_eq!(r.state(), DartState::NonReceiverCongestion);
        assert!(r.allow_cnp());
        assert_eq!(r.n(t(20), 0xffff, 1), 1);
        // Then no marks: back to no congestion, N = |AUSS| = 2.
        r.on_data(
            t(30),
            &DataArrival {
                p_key: 0xffff,
                sender: 1,
                starts: false,
                ends: false,
                bytes: 1000,
                ce: false,
            },
        );
        assert_eq!(r.state(), DartState::NoCongestion);
        assert_eq!(r.n(t(30), 0xffff, 1), 2);
    }

    #[test]
    fn dasr_sender_cap_is_line_over_n() {
        let mut s = DasrSender::new(G10);
        assert_eq!(s.cap(), G10, "alone: the whole line");
        s.on_n(4);
        // 10 Gbit/s · 0.95 / 4 = 2.375 Gbit/s.
        assert_eq!(s.cap(), Rate::from_bps(2_375_000_000));
        s.on_n(0);
        assert_eq!(s.n, 4, "0 carries no information");
        assert_eq!(
            DasrSender::new(G10).with_weight(2.0).cap(),
            G10,
            "never above line rate"
        );
    }
}
