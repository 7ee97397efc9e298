//! Shared receive queues (IBA §10.2.9.4, verbs `ibv_create_srq`): one queue of receive work
//! requests that several QPs of a protection domain take from, so a server with many
//! connections posts buffers once instead of per QP (UCX's RC transport needs them).
//!
//! A QP created with [`crate::qp::QpConfig::srq`] takes the receive request an incoming SEND
//! or WRITE with immediate consumes from its SRQ instead of its own receive queue (posting to
//! that is refused), in the order the SRQ's requests were posted; an empty SRQ makes the
//! responder answer with an RNR NAK, as an empty receive queue does. A QP that enters ERROR
//! flushes only the request it was filling: the SRQ's others stay for the other QPs (§10.3.1).
//!
//! The limit (`srq_limit`, §11.2.3.3): once armed by [`SrqTable::modify`], the first time the
//! queue holds fewer requests than the limit an event is queued
//! ([`crate::Endpoint::poll_srq_limit`], verbs' `IBV_EVENT_SRQ_LIMIT_REACHED`) and the limit
//! disarms.
//!
//! Deviations: none.

use crate::mr::PdId;
use crate::qp::{PostError, RecvWr};
use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;

/// A shared receive queue's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SrqId(pub u32);

/// What `ibv_query_srq` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqAttr {
    /// Its protection domain.
    pub pd: PdId,
    /// Capacity in receive requests.
    pub max_wr: u32,
    /// SGEs per request.
    pub max_sge: u32,
    /// The armed limit, 0 when disarmed.
    pub limit: u32,
    /// Requests queued now.
    pub len: u32,
}

/// Why an SRQ call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SrqError {
    /// No such SRQ.
    #[error("unknown shared receive queue")]
    Unknown,
    /// A capacity below the requests it holds, or a limit above its capacity.
    #[error("{0}")]
    Invalid(&'static str),
}

#[derive(Debug)]
struct Srq {
    attr: SrqAttr,
    queue: VecDeque<RecvWr>,
}

/// Every SRQ of an endpoint, and the limit events not yet taken.
#[derive(Debug, Default)]
pub struct SrqTable {
    srqs: BTreeMap<SrqId, Srq>,
    next: u32,
    limit_events: VecDeque<SrqId>,
}

impl SrqTable {
    /// A new SRQ in `pd` of `max_wr` requests of `max_sge` SGEs each (at least one of each).
    pub fn create(&mut self, pd: PdId, max_wr: u32, max_sge: u32) -> SrqId {
        self.next = self.next.wrapping_add(1);
        while self.srqs.contains_key(&SrqId(self.next)) {
            self.next = self.next.wrapping_add(1);
        }
        let id = SrqId(self.next);
        let attr = SrqAttr {
            pd,
            max_wr: max_wr.max(1),
            max_sge: max_sge.max(1),
            limit: 0,
            len: 0,
        };
        self.srqs.insert(
            id,
            Srq {
                attr,
                queue: VecDeque::new(),
            },
        );
        id
    }

    /// Its attributes; `None` for an unknown SRQ.
    pub fn query(&self, id: SrqId) -> Option<SrqAttr> {
        let s = self.srqs.get(&id)?;
        Some(SrqAttr {
            len: s.queue.len() as u32,
            ..s.attr
        })
    }

    /// `ibv_modify_srq`: a new capacity (not below what it holds) and/or an armed limit (not
    /// above its capacity; 0 disarms).
    ///
    /// # Errors
    /// [`SrqError`].
    pub fn modify(
        &mut self,
        id: SrqId,
        max_wr: Option<u32>,
        limit: Option<u32>,
    ) -> Result<(), SrqError> {
        let s = self.srqs.get_mut(&id).ok_or(SrqError::Unknown)?;
        let cap = max_wr.unwrap_or(s.attr.max_wr);
        if (cap as usize) < s.queue.len() || cap == 0 {
            return Err(SrqError::Invalid(
                "max_wr is below the requests the SRQ holds",
            ));
        }
        if limit.is_some_and(|l| l > cap) {
            return Err(SrqError::Invalid("srq_limit is above max_wr"));
        }
        s.attr.max_wr = cap;
        if let Some(l) = limit {
            s.attr.limit = l;
        }
        Ok(())
    }

    /// `ibv_post_srq_recv`.
    ///
    /// # Errors
    /// [`PostError::QueueFull`], [`PostError::TooManySge`]; [`SrqError::Unknown`] as
    /// `Err(None)`.
    pub fn post(&mut self, id: SrqId, wr: RecvWr) -> Result<(), Option<PostError>> {
        let s = self.srqs.get_mut(&id).ok_or(None)?;
        if s.queue.len() >= s.attr.max_wr as usize {
            return Err(Some(PostError::QueueFull));
        }
        if wr.sg_list.len() > s.attr.max_sge as usize {
            return Err(Some(PostError::TooManySge));
        }
        s.queue.push_back(wr);
        Ok(())
    }

    /// The next request for a QP of SRQ `id`, raising the limit event when the queue drops
    /// below an armed limit.
    pub(crate) fn take(&mut self, id: SrqId) -> Option<RecvWr> {
        let s = self.srqs.get_mut(&id)?;
        let wr = s.queue.pop_front()?;
        if s.attr.limit > 0 && s.queue.len() < s.attr.limit as usize {
            s.attr.limit = 0;
            self.limit_events.push_back(id);
        }
        Some(wr)
    }

    /// Puts back a request [`SrqTable::take`] gave out but that was not used (a UD message
    /// dropped before placing), at the head so the order stays the posting order.
    pub(crate) fn untake(&mut self, id: SrqId, wr: RecvWr) {
        if let Some(s) = self.srqs.get_mut(&id) {
            s.queue.push_front(wr);
        }
    }

    /// The PD of SRQ `id`, if it exists.
    pub(crate) fn pd(&self, id: SrqId) -> Option<PdId> {
        self.srqs.get(&id).map(|s| s.attr.pd)
    }

    /// Removes SRQ `id`; returns the requests it held (never completed: verbs destroys them
    /// with the SRQ).
    pub(crate) fn destroy(&mut self, id: SrqId) -> Option<Vec<RecvWr>> {
        self.limit_events.retain(|e| *e != id);
        self.srqs.remove(&id).map(|s| s.queue.into())
    }

    /// The next SRQ whose limit was reached.
    pub(crate) fn pop_limit_event(&mut self) -> Option<SrqId> {
        self.limit_events.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wr(id: u64) -> RecvWr {
        RecvWr {
            wr_id: id,
            sg_list: Vec::new(),
        }
    }

    #[test]
    fn requests_leave_in_order_and_the_limit_fires_once() {
        let mut t = SrqTable::default();
        let id = t.create(PdId::new(1), 4, 1);
        for i in 0..4 {
            t.post(id, wr(i)).unwrap();
        }
        assert_eq!(t.post(id, wr(9)), Err(Some(PostError::QueueFull)));
        assert!(t.modify(id, None, Some(5)).is_err(), "limit above capacity");
        assert!(
            t.modify(id, Some(3), None).is_err(),
            "capacity below what it holds"
        );
        t.modify(id, None, Some(3)).unwrap();
        assert_eq!(t.take(id).unwrap().wr_id, 0);
        assert_eq!(t.pop_limit_event(), None, "3 left: not below the limit");
        assert_eq!(t.take(id).unwrap().wr_id, 1);
        assert_eq!(t.pop_limit_event(), Some(id));
        assert_eq!(t.query(id).unwrap().limit, 0, "disarmed");
        let w = t.take(id).unwrap();
        t.untake(id, w);
        assert_eq!(t.take(id).unwrap().wr_id, 2);
        assert_eq!(t.pop_limit_event(), None, "fires once per arming");
        assert_eq!(t.query(id).unwrap().len, 1);
        assert_eq!(t.destroy(id).map(|q| q.len()), Some(1));
        assert_eq!(t.post(id, wr(1)), Err(None));
    }
}
