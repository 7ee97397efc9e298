//! The endpoint's QPs by number, with the indexes that keep its scheduler and its timer from
//! scanning every QP: the QPs that may have a packet to send now, those that may from a known
//! time on (waiting for their pacer), and each QP's next deadline.
//!
//! Every change to a QP goes through a [`QpMut`], which brings both indexes up to date when it
//! is dropped, so no caller can forget to. The drop re-reads the QP's deadline only when the QP
//! says it may have moved (`Qp::deadline_update`; re-reading it on every drop made the one-QP
//! engine bench ~4% slower), and moves an index entry only when the gate or deadline did move.
//! With them, [`super::Endpoint::poll_timeout`] reads the first entry of an ordered set and an
//! empty [`super::Endpoint::poll_transmit`] looks at no QP, instead of visiting all of them
//! after every host event (the network model holds 10^4 QPs).
//!
//! A table of one QP keeps no indexes: that QP is its own index, and reading it costs less than
//! keeping sets up to date on every call (the one-QP engine bench was 5–7% slower with them).
//! The indexes are built when a second QP arrives and dropped when one is left.
//!
//! QPs are boxed, so that inserting or removing one moves a pointer through the map's nodes,
//! not a whole QP.
//!
//! Deviations: none (an implementation detail of the endpoint; the scheduling order is the
//! endpoint's QPN round robin, unchanged).

use crate::cq::{WcOpcode, WcStatus, WorkCompletion};
use crate::qp::{CqId, Qp, QpConfig, QpState, UdQp};
use crate::time::Instant;
use crate::wire::Qpn;
use alloc::boxed::Box;
use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec::Vec;
use core::ops::{Bound, Deref, DerefMut};

/// A QP of either type, in the one QPN space the demux looks packets up in.
#[derive(Debug)]
// The whole enum is boxed in its slot, so the few UD QPs' unused bytes cost heap, not map
// nodes; boxing the RC variant instead would add a second indirection to every RC packet.
#[allow(clippy::large_enum_variant)]
pub(super) enum AnyQp {
    Rc(Qp),
    Ud(UdQp),
}

impl AnyQp {
    pub(super) fn wants_to_send(&self, now: Instant) -> bool {
        match self {
            AnyQp::Rc(q) => q.wants_to_send(now),
            AnyQp::Ud(q) => q.wants_to_send(),
        }
    }
    fn poll_timeout(&self) -> Option<Instant> {
        match self {
            AnyQp::Rc(q) => q.poll_timeout(),
            AnyQp::Ud(_) => None,
        }
    }
    /// Its deadline when it may have moved since the last call (see `Qp::deadline_update`).
    fn deadline_update(&mut self) -> Option<Option<Instant>> {
        match self {
            AnyQp::Rc(q) => q.deadline_update(),
            AnyQp::Ud(_) => None,
        }
    }
    /// From when on `wants_to_send` may hold (see `Qp::send_gate`).
    fn send_gate(&self) -> Option<Instant> {
        match self {
            AnyQp::Rc(q) => q.send_gate(),
            AnyQp::Ud(q) => q.wants_to_send().then_some(Instant::ZERO),
        }
    }
    pub(super) fn config(&self) -> &QpConfig {
        match self {
            AnyQp::Rc(q) => q.config(),
            AnyQp::Ud(q) => q.config(),
        }
    }
    /// The completion a request posted to it in ERROR gets at once, and its CQ: flushed, as
    /// IBA §10.3.1 has the Error state complete every request, queued or new, with a flush
    /// error (what programs count on to drain a failed QP). `None` in any other state, or for
    /// a receive a shared receive queue takes (the QP refuses it).
    pub(super) fn flushed(
        &self,
        wr_id: u64,
        opcode: WcOpcode,
        send: bool,
    ) -> Option<(CqId, WorkCompletion)> {
        let (state, qp_num) = match self {
            AnyQp::Rc(q) => (q.state(), q.qpn()),
            AnyQp::Ud(q) => (q.state(), q.qpn()),
        };
        if state != QpState::Error {
            return None;
        }
        let cfg = self.config();
        if !send && cfg.srq.is_some() {
            return None;
        }
        let cq = if send { cfg.send_cq } else { cfg.recv_cq };
        let c = WorkCompletion {
            wr_id,
            status: WcStatus::WrFlushErr,
            opcode,
            byte_len: 0,
            imm_data: None,
            invalidated_rkey: None,
            qp_num,
            src_qp: Qpn::new(0),
            ud: None,
        };
        Some((cq, c))
    }
}

/// A QP and what the indexes last recorded about it.
#[derive(Debug)]
struct Slot {
    qp: Box<AnyQp>,
    /// Its send gate as last recorded: an entry in [`QpTable::gated`], or in
    /// [`QpTable::ready`] when open whatever the time or once the scheduler saw it open.
    gate: Option<Instant>,
    /// Whether the entry is in [`QpTable::ready`] (else in `gated`); `gate` is then what it
    /// was when the QP entered `ready`, not necessarily its gate now.
    open: bool,
    /// Its entry in [`QpTable::deadlines`].
    deadline: Option<Instant>,
}

/// The QPs by number and the indexes over them.
#[derive(Debug, Default)]
pub(super) struct QpTable {
    slots: BTreeMap<Qpn, Slot>,
    /// QPs whose send gate is open whatever the time, or opened at or before the `now` of the
    /// last [`QpTable::next_wanting`].
    ///
    /// A QP's `wants_to_send(now)` changes either through a call that changes the QP (all of
    /// which end by dropping a [`QpMut`], which records the new `Qp::send_gate` of a QP not in
    /// `ready`) or because time passes, and then only by reaching the gate. So every QP that
    /// wants to send at `now` is in `ready` or in `gated` with a gate at or before `now`:
    /// visiting exactly those, in QPN order, finds the same QP as a scan of all QPs would. A QP
    /// in `ready` may have nothing to send any more; the scheduler files it by its gate when it
    /// passes over it.
    ready: BTreeSet<Qpn>,
    /// QPs whose send gate may be in the future, by gate.
    gated: BTreeSet<(Instant, Qpn)>,
    /// Every QP's earliest deadline (`Qp::poll_timeout`, a function of the QP's state alone).
    deadlines: BTreeSet<(Instant, Qpn)>,
    /// Scratch for [`QpTable::take_due`], kept to reuse its allocation.
    due: Vec<Qpn>,
    /// Scratch for [`QpTable::next_wanting`]: the open QPs it passed over.
    passed: Vec<Qpn>,
    /// Whether `ready`, `gated` and `deadlines` are kept: with more than [`SCAN_MAX`] QPs.
    indexed: bool,
}

/// Up to this many QPs the table reads the QPs instead of keeping indexes.
const SCAN_MAX: usize = 1;

impl QpTable {
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }
    pub(super) fn contains(&self, qpn: Qpn) -> bool {
        self.slots.contains_key(&qpn)
    }
    pub(super) fn get(&self, qpn: Qpn) -> Option<&AnyQp> {
        self.slots.get(&qpn).map(|s| &*s.qp)
    }
    /// Every QP in QPN order.
    pub(super) fn values(&self) -> impl Iterator<Item = &AnyQp> {
        self.slots.values().map(|s| &*s.qp)
    }

    /// Adds a new QP.
    pub(super) fn insert(&mut self, qpn: Qpn, qp: AnyQp) {
        let slot = Slot {
            qp: Box::new(qp),
            gate: None,
            open: false,
            deadline: None,
        };
        self.slots.insert(qpn, slot);
        if self.indexed {
            // A new QP is in Reset and wants nothing, but the indexes learn that from the QP.
            drop(self.get_mut(qpn));
        } else if self.slots.len() > SCAN_MAX {
            self.build_indexes();
        }
    }

    /// Files every QP by its gate and deadline, from empty indexes.
    fn build_indexes(&mut self) {
        self.indexed = true;
        for (&qpn, slot) in &mut self.slots {
            (slot.gate, slot.open, slot.deadline) = (None, false, None);
            let gate = slot.qp.send_gate();
            file(qpn, slot, gate, &mut self.ready, &mut self.gated);
            // Reads (and so clears) the QP's record of changed timers before the full read.
            slot.qp.deadline_update();
            slot.deadline = slot.qp.poll_timeout();
            if let Some(t) = slot.deadline {
                self.deadlines.insert((t, qpn));
            }
        }
    }

    /// Removes a QP; `None` when there is none with this number.
    pub(super) fn remove(&mut self, qpn: Qpn) -> Option<()> {
        let slot = self.slots.remove(&qpn)?;
        if !self.indexed {
            return Some(());
        }
        if self.slots.len() <= SCAN_MAX {
            self.indexed = false;
            self.ready.clear();
            self.gated.clear();
            self.deadlines.clear();
            return Some(());
        }
        match (slot.gate, slot.open) {
            (Some(_), true) => {
                self.ready.remove(&qpn);
            }
            (Some(t), false) => {
                self.gated.remove(&(t, qpn));
            }
            (None, _) => {}
        }
        if let Some(t) = slot.deadline {
            self.deadlines.remove(&(t, qpn));
        }
        Some(())
    }

    /// The QP `qpn`, to change: the indexes follow when the guard is dropped.
    pub(super) fn get_mut(&mut self, qpn: Qpn) -> Option<QpMut<'_>> {
        let slot = self.slots.get_mut(&qpn)?;
        Some(QpMut {
            qpn,
            indexed: self.indexed,
            slot,
            ready: &mut self.ready,
            gated: &mut self.gated,
            deadlines: &mut self.deadlines,
        })
    }

    /// The first QP after `cursor` in QPN order, wrapping around to `cursor` itself last, that
    /// wants to send at `now`. Open QPs passed over on the way are filed by their gate again.
    pub(super) fn next_wanting(&mut self, cursor: Qpn, now: Instant) -> Option<Qpn> {
        if !self.indexed {
            // At most one QP: the round robin has nobody else to go to.
            let mut qps = self.slots.iter();
            return qps.find(|(_, s)| s.qp.wants_to_send(now)).map(|(q, _)| *q);
        }
        while let Some(&(t, qpn)) = self.gated.first()
            && t <= now
        {
            self.gated.pop_first();
            self.ready.insert(qpn);
            if let Some(s) = self.slots.get_mut(&qpn) {
                s.open = true;
            }
        }
        let mut passed = core::mem::take(&mut self.passed);
        let after = self
            .ready
            .range((Bound::Excluded(cursor), Bound::Unbounded));
        let found = after.chain(self.ready.range(..=cursor)).find(|q| {
            let wants = self.slots.get(q).is_some_and(|s| s.qp.wants_to_send(now));
            if !wants {
                passed.push(**q);
            }
            wants
        });
        let found = found.copied();
        for qpn in passed.drain(..) {
            if let Some(slot) = self.slots.get_mut(&qpn) {
                let gate = slot.qp.send_gate();
                file(qpn, slot, gate, &mut self.ready, &mut self.gated);
            }
        }
        self.passed = passed;
        found
    }

    /// The earliest deadline of any QP.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        if !self.indexed {
            return self
                .slots
                .values()
                .filter_map(|s| s.qp.poll_timeout())
                .min();
        }
        self.deadlines.first().map(|(t, _)| *t)
    }

    /// The QPs whose deadline is at or before `now`, in QPN order; hand the vector back with
    /// [`QpTable::recycle`].
    pub(super) fn take_due(&mut self, now: Instant) -> Vec<Qpn> {
        let mut due = core::mem::take(&mut self.due);
        due.clear();
        if !self.indexed {
            let due_now = |(_, s): (&Qpn, &Slot)| s.qp.poll_timeout().is_some_and(|t| t <= now);
            due.extend(self.slots.iter().filter(|e| due_now(*e)).map(|(q, _)| *q));
            return due;
        }
        due.extend(
            self.deadlines
                .iter()
                .take_while(|(t, _)| *t <= now)
                .map(|(_, q)| *q),
        );
        due.sort_unstable();
        due
    }

    /// Returns [`QpTable::take_due`]'s vector for reuse.
    pub(super) fn recycle(&mut self, due: Vec<Qpn>) {
        self.due = due;
    }

    /// True when no QP has anything to send at `now` or any deadline pending.
    pub(super) fn is_idle(&self, now: Instant) -> bool {
        if !self.indexed {
            let idle = |s: &Slot| !s.qp.wants_to_send(now) && s.qp.poll_timeout().is_none();
            return self.slots.values().all(idle);
        }
        let gated = self.gated.iter().take_while(|(t, _)| *t <= now);
        self.deadlines.is_empty()
            && self
                .ready
                .iter()
                .chain(gated.map(|(_, q)| q))
                .all(|q| self.slots.get(q).is_none_or(|s| !s.qp.wants_to_send(now)))
    }
}

/// A QP borrowed to be changed; dropping it records what the change did to its send gate and
/// to its deadline.
pub(super) struct QpMut<'a> {
    qpn: Qpn,
    /// Whether the table keeps indexes to update.
    indexed: bool,
    slot: &'a mut Slot,
    ready: &'a mut BTreeSet<Qpn>,
    gated: &'a mut BTreeSet<(Instant, Qpn)>,
    deadlines: &'a mut BTreeSet<(Instant, Qpn)>,
}

impl Deref for QpMut<'_> {
    type Target = AnyQp;
    fn deref(&self) -> &AnyQp {
        &self.slot.qp
    }
}

impl DerefMut for QpMut<'_> {
    fn deref_mut(&mut self) -> &mut AnyQp {
        &mut self.slot.qp
    }
}

impl Drop for QpMut<'_> {
    fn drop(&mut self) {
        if !self.indexed {
            return;
        }
        let slot = &mut *self.slot;
        // An open QP stays in `ready` until the scheduler passes over it (`next_wanting` files
        // it again then), so a QP with more to send costs no gate computation per packet.
        if !slot.open {
            let gate = slot.qp.send_gate();
            if gate != slot.gate {
                file(self.qpn, slot, gate, self.ready, self.gated);
            }
        }
        if let Some(deadline) = slot.qp.deadline_update()
            && deadline != slot.deadline
        {
            if let Some(t) = slot.deadline {
                self.deadlines.remove(&(t, self.qpn));
            }
            if let Some(t) = deadline {
                self.deadlines.insert((t, self.qpn));
            }
            slot.deadline = deadline;
        }
    }
}

/// Moves `slot`'s entry from where its recorded gate put it to where `gate` puts it: `ready`
/// when open whatever the time (`Instant::ZERO`: work not waiting for the pacer), `gated`
/// until a time, or neither.
fn file(
    qpn: Qpn,
    slot: &mut Slot,
    gate: Option<Instant>,
    ready: &mut BTreeSet<Qpn>,
    gated: &mut BTreeSet<(Instant, Qpn)>,
) {
    let open = gate == Some(Instant::ZERO);
    if slot.open && open {
        return;
    }
    match (slot.gate, slot.open) {
        (Some(_), true) => {
            ready.remove(&qpn);
        }
        (Some(t), false) => {
            gated.remove(&(t, qpn));
        }
        (None, _) => {}
    }
    match gate {
        Some(_) if open => {
            ready.insert(qpn);
        }
        Some(t) => {
            gated.insert((t, qpn));
        }
        None => {}
    }
    slot.gate = gate;
    slot.open = open;
}

#[cfg(test)]
impl QpTable {
    /// Panics unless the indexes say what a scan of every QP says at `now`: each QP that
    /// wants to send is in `ready` or gated no later than `now`, a QP out of `ready` is filed
    /// by its current gate, and `deadlines` holds exactly each QP's `poll_timeout`.
    pub(super) fn assert_indexes_match_scan(&self, now: Instant) {
        assert_eq!(self.indexed, self.slots.len() > SCAN_MAX);
        if !self.indexed {
            assert!(self.ready.is_empty() && self.gated.is_empty() && self.deadlines.is_empty());
            return;
        }
        let mut deadlines = BTreeSet::new();
        for (qpn, s) in &self.slots {
            let listed = match (s.gate, s.open) {
                (Some(_), true) => self.ready.contains(qpn),
                (Some(t), false) => self.gated.contains(&(t, *qpn)) && t <= now,
                (None, _) => false,
            };
            assert!(
                !s.qp.wants_to_send(now) || listed,
                "{qpn} wants to send, unlisted"
            );
            if let Some(t) = s.qp.poll_timeout() {
                deadlines.insert((t, *qpn));
            }
            assert_eq!(s.deadline, s.qp.poll_timeout(), "{qpn}'s recorded deadline");
            if !s.open {
                assert_eq!(s.gate, s.qp.send_gate(), "{qpn}'s recorded gate");
            }
        }
        assert_eq!(self.deadlines, deadlines);
        let open = self.slots.values().filter(|s| s.open).count();
        let gated = self.slots.values().filter(|s| !s.open && s.gate.is_some());
        assert_eq!((self.ready.len(), self.gated.len()), (open, gated.count()));
    }
}
