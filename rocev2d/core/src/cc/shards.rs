//! One host's receiver-side congestion control over several engine shards (docs/daemon.md,
//! "Several queues: engine shards").
//!
//! Both receiver schemes with host-wide state act per period: Dart's DASR evaluates its
//! receiver once per measurement interval (seed 000 §III-C, Fig. 5) and counts each source once
//! at the receiving NIC (§III-B); DCQCN+'s notification point walks one list of the NIC's
//! congested flows, one record per CNP generation interval δ, so that τ = l·δ (seed 002 §IV-B 2),
//! eq. (11)). A shard's [`ReceiverCc`] keeps its per-packet counting to itself and, once per
//! period, exports a [`ShardSummary`] ([`ReceiverCc::take_summary`]) and takes the other shards'
//! latest ([`ReceiverCc::set_peers`]): nothing is exchanged per packet. The carrying (a board,
//! a channel) is the caller's; the core only says when a summary is due.
//!
//! The periods: a DASR receiver closes an interval (and publishes) at each measurement interval
//! in which something arrived, and at the one after, so the others learn that its throughput
//! fell to zero; a DCQCN+ list publishes its length when it changed, at most once per minimum
//! CNP interval (45 µs), the shortest time between two CNPs to one flow. What a shard learns
//! from the others is therefore at most one such period old (plus the time until its own next
//! period, when it reads them): for DASR one interval, during which a sender that started or
//! ended on another shard is not yet (or still) counted and a change of throughput not yet
//! seen; for DCQCN+ one 45 µs period, during which a list length another shard changed is
//! unknown, so two shards may take the same δ slot or none take it, and τ is off by that
//! change. Members silent for DASR's soft-state timeout expire on the reading side too, so an
//! idle shard's last summary does not count its senders for ever.

use super::{DasrSummary, NpConfig, ReceiverCc};
use crate::time::{Duration, Instant};

/// What one engine shard's receiver tells the host's other shards once per period.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ShardSummary {
    /// The shard's number (its place in DCQCN+'s host-wide walk).
    pub shard: usize,
    /// When the summary was made.
    pub at: Instant,
    /// DASR's part, when the receiver runs DASR.
    pub dasr: Option<DasrSummary>,
    /// Flows in the shard's DCQCN+ list (its part of l in eq. (11)).
    pub congested: usize,
}

/// A shard's side of the exchange.
#[derive(Debug, Clone)]
pub(super) struct Share {
    shard: usize,
    /// The summary made and not yet taken.
    summary: Option<ShardSummary>,
    /// The DCQCN+ list length last published, and when the next may be.
    published: usize,
    next: Instant,
}

impl ReceiverCc {
    /// Makes this receiver engine shard `shard` of a host of several: from now on it makes a
    /// summary per period for the others and counts theirs.
    pub fn with_shard(mut self, shard: usize) -> ReceiverCc {
        self.share = Some(Share {
            shard,
            summary: None,
            published: 0,
            next: Instant::ZERO,
        });
        self
    }

    /// The summary of the period that ended, once, for the host's other shards.
    pub fn take_summary(&mut self) -> Option<ShardSummary> {
        self.share.as_mut().and_then(|s| s.summary.take())
    }

    /// The other shards' latest summaries (this shard's own, if among them, is skipped),
    /// replacing those given before. Does nothing on a receiver that is no shard.
    pub fn set_peers<'a, I>(&mut self, peers: I)
    where
        I: IntoIterator<Item = &'a ShardSummary> + Clone,
    {
        let Some(k) = self.share.as_ref().map(|s| s.shard) else {
            return;
        };
        let others = peers.clone().into_iter().filter(|p| p.shard != k);
        let (before, all) = others.fold((0, 0), |(b, a), p| {
            let b = if p.shard < k { b + p.congested } else { b };
            (b, a + p.congested)
        });
        self.plus.set_host(before, all);
        if let Some(d) = &mut self.dasr {
            d.set_peers(
                peers
                    .into_iter()
                    .filter(|p| p.shard != k)
                    .filter_map(|p| p.dasr.as_ref()),
            );
        }
    }

    /// Flows in the DCQCN+ list, and the period at which its length is published.
    fn congested(&self) -> (usize, Duration) {
        match self.np {
            NpConfig::DcqcnPlus(p) => (self.plus.len(), p.min_cnp_interval),
            _ => (0, Duration::ZERO),
        }
    }

    /// When a summary falls due without a packet: the end of a DASR interval the others must
    /// hear of, or the time a changed list length may be published.
    pub(super) fn share_timeout(&self) -> Option<Instant> {
        let s = self.share.as_ref()?;
        let roll = self.dasr.as_ref().and_then(|d| d.next_roll());
        let list = (self.congested().0 != s.published).then_some(s.next);
        [roll, list].into_iter().flatten().min()
    }

    /// Makes the summary if a period ended (called after every event).
    pub(super) fn share_due(&mut self, now: Instant) {
        if self.share.is_none() {
            return;
        }
        let (l, period) = self.congested();
        let Some(s) = &mut self.share else {
            return;
        };
        let closed = self.dasr.as_mut().is_some_and(|d| d.take_closed());
        if closed || (l != s.published && now >= s.next) {
            s.summary = Some(ShardSummary {
                shard: s.shard,
                at: now,
                dasr: self.dasr.as_ref().map(|d| d.summary(now)),
                congested: l,
            });
            s.published = l;
            s.next = now + period;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::{DartState, DasrParams, DataArrival, DcqcnPlusParams};
    use crate::time::Rate;
    use crate::wire::Qpn;
    use alloc::collections::BTreeMap;
    use alloc::vec::Vec;

    const G10: Rate = Rate::from_gbps(10);
    const PK: u16 = 0xffff;

    fn t(us: u64) -> Instant {
        Instant::from_nanos(us * 1000)
    }

    fn dart() -> ReceiverCc {
        ReceiverCc::new(NpConfig::Off, Some(DasrParams::paper(G10)))
    }

    /// A 1000-byte packet of `sender`, CE-marked, opening a message that stays in flight.
    fn packet(sender: u16, starts: bool) -> DataArrival {
        DataArrival {
            p_key: PK,
            sender,
            starts,
            ends: false,
            bytes: 1000,
            ce: true,
        }
    }

    /// One 10 µs interval of seven packets per shard (14000 bytes: at the line rate of 10
    /// Gbit/s for the host, 56% of it for each shard): senders 1, 2, 3 on shard `a`, 3, 4, 5
    /// on shard `b` (sender 3 has a QP on each), and all of them on `one`.
    fn feed(a: &mut ReceiverCc, b: &mut ReceiverCc, one: &mut ReceiverCc) {
        let q = Qpn::new(0x11);
        let packets = |senders: [u16; 3]| {
            (0..7).map(move |i| (i + 1, packet(senders[i as usize % 3], i < 3)))
        };
        for (at, p) in packets([1, 2, 3]) {
            a.on_data(t(at), q, &p);
            one.on_data(t(at), q, &p);
        }
        for (at, p) in packets([3, 4, 5]) {
            b.on_data(t(at), q, &p);
            one.on_data(t(at), q, &p);
        }
    }

    /// Closes the interval at 10 µs on every receiver.
    fn close(rs: [&mut ReceiverCc; 3]) {
        for r in rs {
            if r.poll_timeout().is_some() {
                assert_eq!(r.poll_timeout(), Some(t(10)), "the interval's end");
                r.handle_timeout(t(10));
            } else {
                r.dasr.as_mut().unwrap().tick(t(10));
            }
        }
    }

    #[test]
    fn dasr_shards_exchanging_summaries_count_as_one_receiver() {
        let (mut a, mut b, mut one) = (dart().with_shard(0), dart().with_shard(1), dart());
        feed(&mut a, &mut b, &mut one);
        close([&mut a, &mut b, &mut one]);
        let sa = a.take_summary().expect("a closed its interval");
        let sb = b.take_summary().expect("b closed its interval");
        assert_eq!(a.take_summary(), None, "one summary per interval");
        a.set_peers([&sa, &sb]);
        b.set_peers([&sb, &sa]);
        let host = one.dasr.as_ref().unwrap();
        assert_eq!(host.state(), DartState::ReceiverCongestion);
        assert_eq!(host.throughput, Rate::from_bps(11_200_000_000));
        for r in [&a, &b] {
            let d = r.dasr.as_ref().unwrap();
            assert_eq!((d.state(), d.throughput), (host.state(), host.throughput));
        }
        // Five unique sources (§III-B: sender 3 once), six for an ACK to a stranger.
        for s in [1, 3, 5, 9] {
            let n = one.dasr_n(t(10), PK, s);
            assert_eq!(n, Some(if s == 9 { 6 } else { 5 }));
            assert_eq!(a.dasr_n(t(10), PK, s), n, "shard 0, ACK to {s}");
            assert_eq!(b.dasr_n(t(10), PK, s), n, "shard 1, ACK to {s}");
        }
    }

    #[test]
    fn dasr_shards_without_the_exchange_undercount() {
        let (mut a, mut b, mut one) = (dart().with_shard(0), dart().with_shard(1), dart());
        feed(&mut a, &mut b, &mut one);
        close([&mut a, &mut b, &mut one]);
        // Each shard alone sees marks below line rate: DCQCN's state, N = 1.
        for r in [&mut a, &mut b] {
            let d = r.dasr.as_ref().unwrap();
            assert_eq!(d.state(), DartState::NonReceiverCongestion);
            assert_eq!(d.throughput, Rate::from_bps(5_600_000_000));
            assert_eq!(r.dasr_n(t(10), PK, 1), Some(1));
        }
        assert_eq!(one.dasr_n(t(10), PK, 1), Some(5));
        // Given only the other shard's (empty) view, the count is the shard's own.
        let quiet = dart().with_shard(1).take_summary();
        assert_eq!(quiet, None, "nothing happened, nothing to say");
    }

    #[test]
    fn dasr_quiet_shard_publishes_once_more_and_its_members_expire() {
        let (mut a, mut b, mut one) = (dart().with_shard(0), dart().with_shard(1), dart());
        feed(&mut a, &mut b, &mut one);
        close([&mut a, &mut b, &mut one]);
        let _ = (a.take_summary().unwrap(), b.take_summary().unwrap());
        // Nothing more arrives: each shard closes one more interval (its throughput fell to
        // zero, the others must hear it) and then sleeps.
        for r in [&mut a, &mut b] {
            assert_eq!(r.poll_timeout(), Some(t(20)));
            r.handle_timeout(t(20));
        }
        let (sa, sb) = (a.take_summary().unwrap(), b.take_summary().unwrap());
        let d = sb.dasr.as_ref().unwrap();
        assert_eq!((d.throughput, d.senders.len()), (Rate::from_bps(0), 3));
        assert_eq!((a.poll_timeout(), b.poll_timeout()), (None, None));
        a.set_peers([&sa, &sb]);
        let d = a.dasr.as_ref().unwrap();
        assert_eq!(
            (d.state(), d.throughput.as_bps()),
            (DartState::NoCongestion, 0)
        );
        assert_eq!(a.dasr_n(t(20), PK, 1), Some(5), "b's senders are in flight");
        // b's members, silent for the soft-state timeout, leave a's count, as a's own do.
        let late = Instant::from_nanos(t(7).as_nanos() + 2_000_000_000);
        assert_eq!(a.dasr_n(late, PK, 9), Some(1));
    }

    /// DCQCN+ over 1 ms of CE marks on four flows, every 1 µs: the CNPs (slot, flow, τ) of one
    /// receiver with all four, or of two shards with two each, exchanging their lists' lengths
    /// (through a board, as the daemon's shards do) or not.
    fn plus_run(shards: Option<bool>) -> Vec<(u64, u32, Duration)> {
        let p = DcqcnPlusParams::paper(Rate::from_gbps(40), 1024);
        let rx = || ReceiverCc::new(NpConfig::DcqcnPlus(p), None);
        let mut rs: Vec<(ReceiverCc, [u32; 4])> = match shards {
            None => alloc::vec![(rx(), [1, 2, 3, 4])],
            Some(_) => alloc::vec![
                (rx().with_shard(0), [1, 2, 0, 0]),
                (rx().with_shard(1), [3, 4, 0, 0]),
            ],
        };
        let exchange = shards == Some(true);
        let mut board: BTreeMap<usize, ShardSummary> = BTreeMap::new();
        let mut cnps = Vec::new();
        for us in 100..1100 {
            let now = t(us);
            for (r, flows) in &mut rs {
                for q in flows.iter().filter(|q| **q != 0) {
                    r.on_data(now, Qpn::new(*q), &packet(1, false));
                }
                if r.poll_timeout().is_some_and(|d| d <= now)
                    && let Some((q, tau)) = r.handle_timeout(now)
                {
                    cnps.push((us, q.value(), tau));
                }
                if let Some(s) = r.take_summary() {
                    board.insert(s.shard, s);
                }
            }
            if exchange {
                for (r, _) in &mut rs {
                    r.set_peers(board.values());
                }
            }
        }
        cnps
    }

    #[test]
    fn dcqcn_plus_shards_walk_the_hosts_list_as_one() {
        let one = plus_run(None);
        let shared = plus_run(Some(true));
        let alone = plus_run(Some(false));
        let per_slot = |c: &[(u64, u32, Duration)], from: u64| {
            let mut m: BTreeMap<u64, usize> = BTreeMap::new();
            for (us, _, _) in c.iter().filter(|x| x.0 >= from) {
                *m.entry(*us).or_default() += 1;
            }
            m.into_values().max().unwrap_or(0)
        };
        let per_flow = |c: &[(u64, u32, Duration)]| {
            let mut m: BTreeMap<u32, usize> = BTreeMap::new();
            for (_, q, _) in c {
                *m.entry(*q).or_default() += 1;
            }
            m
        };
        let taus = |c: &[(u64, u32, Duration)], from: u64| {
            let mut v: Vec<_> = c.iter().filter(|x| x.0 >= from).map(|x| x.2).collect();
            v.dedup();
            v
        };
        // One list (seed 002 eq. (11)): τ = 4 δ, one CNP per δ at most.
        assert_eq!(taus(&one, 0), [Duration::from_micros(4)]);
        assert_eq!(per_slot(&one, 0), 1);
        // Every flow gets a CNP per check after the 45 µs minimum interval: 48 µs, ~20 in 1 ms.
        let flows = per_flow(&one);
        assert!(
            flows.len() == 4 && flows.values().all(|n| *n >= 20),
            "{flows:?}"
        );
        // Shards learn each other's lengths within a 45 µs period, then walk as one.
        assert_eq!(taus(&shared, 150), [Duration::from_micros(4)]);
        assert_eq!(per_slot(&shared, 150), 1, "one CNP per δ for the host");
        assert_eq!(per_flow(&shared), per_flow(&one));
        // Alone, each shard walks its half: τ = 2 δ and two CNPs in a δ.
        assert_eq!(taus(&alone, 0), [Duration::from_micros(2)]);
        assert_eq!(per_slot(&alone, 150), 2);
    }
}
