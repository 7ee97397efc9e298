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
//! On a host of several engine shards (docs/daemon.md, "Several queues: engine shards") each
//! shard's receiver sees the packets of its own QPs, while §III-B counts a source "exactly once"
//! at the receiving NIC and §III-C compares the NIC's receive throughput with the line rate. So
//! at the end of each interval a shard exports a [`DasrSummary`] (its AUSS members, bytes and
//! marks) and takes the others' latest ([`DasrReceiver::set_peers`]): N is the size of the
//! union of the shards' sets, the throughput and the marks are the sums, so the host computes
//! what one receiver of all the packets would, one interval late for what the other shards saw.
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
use alloc::collections::btree_map::Entry;
use alloc::vec::Vec;

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
    /// The members the host's other engine shards published last, with their last packet.
    peers: BTreeMap<u16, Instant>,
    /// The largest unlisted count the other shards published (a group announced to two shards
    /// is the same group, so the counts are not added).
    peer_anonymous: Option<(u16, Instant)>,
    /// How many of `senders` are in `peers` too: a source is counted once (§III-B).
    both: usize,
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
        let listed = self.senders.len() + self.peers.len() - self.both;
        let listed = listed.min(u16::MAX as usize) as u16;
        let anonymous = self.anonymous.max(self.peer_anonymous);
        listed.saturating_add(anonymous.map_or(0, |(c, _)| c))
    }

    /// `id`'s entry, made from `fresh` if it has none.
    fn member(&mut self, id: u16, fresh: Sender) -> &mut Sender {
        match self.senders.entry(id) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                self.both += self.peers.contains_key(&id) as usize;
                e.insert(fresh)
            }
        }
    }

    fn remove(&mut self, id: u16) {
        if self.senders.remove(&id).is_some() {
            self.both -= self.peers.contains_key(&id) as usize;
        }
    }

    /// Forgets the members, own and the other shards', silent for `idle` (§III-B soft state).
    fn expire(&mut self, now: Instant, idle: Duration) {
        let Auss {
            senders,
            peers,
            both,
            anonymous,
            peer_anonymous,
            ..
        } = self;
        senders.retain(|id, s| {
            let keep = now - s.last_seen < idle;
            *both -= (!keep && peers.contains_key(id)) as usize;
            keep
        });
        peers.retain(|id, seen| {
            let keep = now - *seen < idle;
            *both -= (!keep && senders.contains_key(id)) as usize;
            keep
        });
        for a in [anonymous, peer_anonymous] {
            if a.is_some_and(|(_, t)| now - t >= idle) {
                *a = None;
            }
        }
    }

    /// The other shards' members and unlisted count, replacing the previous ones.
    fn set_peers(&mut self, peers: BTreeMap<u16, Instant>, anonymous: Option<(u16, Instant)>) {
        self.both = self
            .senders
            .keys()
            .filter(|id| peers.contains_key(id))
            .count();
        self.peers = peers;
        self.peer_anonymous = anonymous;
    }

    fn is_empty(&self) -> bool {
        self.senders.is_empty()
            && self.peers.is_empty()
            && self.anonymous.is_none()
            && self.peer_anonymous.is_none()
            && self.open.is_empty()
    }
}

/// What one engine shard's DASR receiver tells the host's other shards when it closes an
/// interval: its share of what one receiver of all the host's packets would count.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DasrSummary {
    /// Receive throughput of the shard over the interval.
    pub throughput: Rate,
    /// CE-marked packets the shard received in the interval.
    pub marks: u64,
    /// The shard's own AUSS members, not silent for the soft-state timeout: (tenant, sender,
    /// last packet), in that order.
    pub senders: Vec<(u16, u16, Instant)>,
    /// The shard's own look-ahead count of unlisted members: (tenant, count, when announced).
    pub anonymous: Vec<(u16, u16, Instant)>,
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
    /// Whether anything arrived since the interval began.
    window_events: bool,
    /// This receiver's throughput and marks over its last interval.
    own: (Rate, u64),
    /// The other engine shards' throughput and marks over their last intervals.
    peers: (Rate, u64),
    /// An interval closed since [`DasrReceiver::take_closed`] last asked.
    closed: bool,
    /// Last interval's receive throughput: this receiver's, plus the other shards' when it is
    /// one engine shard of several.
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
            window_events: false,
            own: (Rate::from_bps(0), 0),
            peers: (Rate::from_bps(0), 0),
            closed: false,
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
        self.window_events = true;
        let auss = self.tenants.entry(d.p_key & 0x7fff).or_default();
        let s = auss.member(
            d.sender,
            Sender {
                in_flight: 0,
                last_seen: now,
                announced: false,
            },
        );
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
                auss.remove(d.sender);
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
        self.window_events = true;
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
            auss.member(
                *id,
                Sender {
                    in_flight: 1,
                    last_seen: now,
                    announced: true,
                },
            );
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
        auss.expire(now, idle);
        let absent = !(auss.senders.contains_key(&sender) || auss.peers.contains_key(&sender));
        let absent = absent as u16;
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
        self.own = (Rate::from_bps(bps), self.window_marks);
        self.evaluate();
        self.window_start = now;
        self.window_bytes = 0;
        self.window_marks = 0;
        self.window_events = false;
        self.closed = true;
    }

    /// Fig. 5 from the last intervals' throughput and marks, this receiver's and the other
    /// shards' (§III-C: the receiving NIC's throughput, ECN marks anywhere on it).
    fn evaluate(&mut self) {
        let bps = self.own.0.as_bps().saturating_add(self.peers.0.as_bps());
        self.throughput = Rate::from_bps(bps);
        let at_line = bps as f64 >= self.p.line_fraction * self.p.line_rate.as_bps() as f64;
        self.state = match (self.own.1 + self.peers.1 > 0, at_line) {
            (false, _) => DartState::NoCongestion,
            (true, true) => DartState::ReceiverCongestion,
            (true, false) => DartState::NonReceiverCongestion,
        };
    }

    /// When the current interval ends, if the other shards need to hear of it: something
    /// arrived in it, or the last one's throughput or marks were not zero (the others must
    /// learn they fell to zero). An idle shard thus publishes once more and then sleeps.
    pub fn next_roll(&self) -> Option<Instant> {
        let quiet = !self.window_events && self.own.0.as_bps() == 0 && self.own.1 == 0;
        (!quiet).then(|| self.window_start + self.p.measure_interval)
    }

    /// Closes the interval if it is over at `now` (a timer's call: packets close it too).
    pub fn tick(&mut self, now: Instant) {
        self.roll_window(now);
    }

    /// Whether an interval closed since the last call.
    pub(super) fn take_closed(&mut self) -> bool {
        core::mem::take(&mut self.closed)
    }

    /// This receiver's part of the host's state at `now`: its last interval and its own AUSS
    /// members (not the other shards', which they publish themselves).
    pub fn summary(&self, now: Instant) -> DasrSummary {
        let idle = self.p.idle_timeout;
        let mut out = DasrSummary {
            throughput: self.own.0,
            marks: self.own.1,
            ..DasrSummary::default()
        };
        for (&t, a) in &self.tenants {
            out.senders.extend(
                a.senders
                    .iter()
                    .filter(|(_, s)| now - s.last_seen < idle)
                    .map(|(&id, s)| (t, id, s.last_seen)),
            );
            if let Some((c, at)) = a.anonymous.filter(|(_, at)| now - *at < idle) {
                out.anonymous.push((t, c, at));
            }
        }
        out
    }

    /// The host's other engine shards' latest summaries, replacing those given before: N counts
    /// their members too (each source once), Fig. 5 adds their throughput and marks.
    pub fn set_peers<'a>(&mut self, peers: impl IntoIterator<Item = &'a DasrSummary>) {
        type Members = (BTreeMap<u16, Instant>, Option<(u16, Instant)>);
        let mut by_tenant: BTreeMap<u16, Members> = BTreeMap::new();
        let (mut bps, mut marks) = (0u64, 0u64);
        for s in peers {
            bps = bps.saturating_add(s.throughput.as_bps());
            marks = marks.saturating_add(s.marks);
            for &(t, id, seen) in &s.senders {
                let seen_at = by_tenant.entry(t).or_default().0.entry(id).or_insert(seen);
                *seen_at = (*seen_at).max(seen);
            }
            for &(t, c, at) in &s.anonymous {
                let a = &mut by_tenant.entry(t).or_default().1;
                *a = (*a).max(Some((c, at)));
            }
        }
        for (t, auss) in &mut self.tenants {
            let (ids, anonymous) = by_tenant.remove(t).unwrap_or_default();
            auss.set_peers(ids, anonymous);
        }
        for (t, (ids, anonymous)) in by_tenant {
            self.tenants.entry(t).or_default().set_peers(ids, anonymous);
        }
        self.tenants.retain(|_, a| !a.is_empty());
        self.peers = (Rate::from_bps(bps), marks);
        self.evaluate();
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
