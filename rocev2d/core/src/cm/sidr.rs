//! Service ID Resolution (IBA Vol. 1 §12.11): how a UD requester learns the QPN and Q_Key of a
//! service, one SIDR_REQ answered by one SIDR_REP, with no connection and no state machine
//! beyond "waiting for the answer".
//!
//! * Requester ([`Cm::sidr_request`](super::Cm::sidr_request)): the SIDR_REQ is resent every
//!   [`SidrParams::timeout`] until a SIDR_REP with its Request ID comes from the peer
//!   ([`Event::SidrReply`]) or [`SidrParams::max_cm_retries`] resends
//!   went unanswered ([`Event::SidrTimedOut`]). A SIDR_REP naming
//!   no request of ours is counted (`unknown_comm_id`) and dropped.
//! * Responder: a SIDR_REQ for a listened Service ID becomes
//!   [`Event::SidrRequest`], answered by
//!   [`Cm::sidr_reply`](super::Cm::sidr_reply); one for any other Service ID is answered at once
//!   with status [`SidrStatus::UNSUPPORTED`] (counted `no_listener`). A resend of a request
//!   still unanswered is counted `duplicate` and dropped; a resend of one answered lately
//!   (the last [`ANSWERED_KEPT`]) gets the same SIDR_REP again.
//!
//! rdma_cm (`RDMA_PS_UDP`) puts its CMA header first in the SIDR_REQ's private data, as in a
//! REQ, answers with Q_Key [`RDMA_UDP_Q_KEY`](super::service::RDMA_UDP_Q_KEY), and gives the
//! SIDR_REP's private data to the consumer whole; it waits 4096 ms per try, 15 resends (Linux
//! `cma.c`: `1 << (CMA_CM_RESPONSE_TIMEOUT - 8)` ms, `CMA_MAX_CM_RETRIES`).
//!
//! Deviations: a redirecting SIDR_REP (status [`SidrStatus::REDIRECT`]) is reported, not
//! followed; at most [`PENDING_MAX`] received requests wait for an answer, later ones are
//! dropped (counted `wrong_state`) until the application answers some.

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;
use core::net::Ipv6Addr;

use super::{CmError, CmaHeader, Event, Io, ServiceId, build_mad, cm_timeout, padded};
use crate::time::Instant;
use crate::wire::Qpn;
use crate::wire::mad::cm_sidr::{SidrRepRepr, SidrReqRepr, SidrStatus};
use crate::wire::mad::{CmAttribute, MAD_LEN};

/// How many answered requests are remembered, so a resent SIDR_REQ whose SIDR_REP was lost
/// gets it again instead of a second event.
pub const ANSWERED_KEPT: usize = 64;
/// How many received requests may wait for the application's answer at once.
pub const PENDING_MAX: usize = 256;

/// A SIDR request's handle: on the requester, its Request ID (nonzero, from the CM's
/// Communication ID space and block, so [`route`](super::route) finds its CM from a SIDR_REP);
/// on the responder, a local number for the request to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SidrId(pub(super) u32);

impl SidrId {
    /// The number behind the handle.
    pub const fn value(self) -> u32 {
        self.0
    }
    /// The handle numbered `v`, as a process that does not run the CM names it (an attached
    /// application); the CM refuses one it does not hold.
    pub const fn from_value(v: u32) -> SidrId {
        SidrId(v)
    }
}

/// What the requester chooses ([`Cm::sidr_request`](super::Cm::sidr_request)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrParams {
    /// The service asked for.
    pub service_id: ServiceId,
    /// Our GID (the MADs' source).
    pub local_gid: Ipv6Addr,
    /// The responder's GID.
    pub peer_gid: Ipv6Addr,
    /// The partition of our UD QP. Default 0xFFFF.
    pub p_key: u16,
    /// Up to 216 bytes for the responder (rdma_cm: [`CmaHeader::private_data`]).
    pub private_data: Vec<u8>,
    /// How long to wait for the SIDR_REP before resending, as an exponent ([`cm_timeout`]).
    /// Default 20 (4.3 s, about rdma_cm's 4096 ms).
    pub timeout: u8,
    /// Resends before giving up (0–15). Default 15, rdma_cm's.
    pub max_cm_retries: u8,
}

impl SidrParams {
    /// Parameters with rdma_cm's defaults for everything but the endpoints.
    pub fn new(service_id: ServiceId, local_gid: Ipv6Addr, peer_gid: Ipv6Addr) -> Self {
        SidrParams {
            service_id,
            local_gid,
            peer_gid,
            p_key: 0xffff,
            private_data: Vec::new(),
            timeout: 20,
            max_cm_retries: 15,
        }
    }
}

/// The responder's answer ([`Cm::sidr_reply`](super::Cm::sidr_reply)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrReplyParams {
    /// [`SidrStatus::SUCCESS`] or why not.
    pub status: SidrStatus,
    /// The service's UD QP (meaningful on success).
    pub qpn: Qpn,
    /// The Q_Key its datagrams must carry (rdma_cm: `RDMA_UDP_Q_KEY`).
    pub q_key: u32,
    /// Up to 136 bytes for the requester.
    pub private_data: Vec<u8>,
}

/// A SIDR_REQ for a service we listen on: answer it with
/// [`Cm::sidr_reply`](super::Cm::sidr_reply).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrRequest {
    /// The handle to answer with.
    pub id: SidrId,
    /// The GID it was sent to (ours).
    pub local_gid: Ipv6Addr,
    /// The GID it came from: where the requester's UD QP is.
    pub peer_gid: Ipv6Addr,
    /// The SIDR_REQ itself: Service ID, P_Key, private data.
    pub req: SidrReqRepr,
    /// The CMA header, when the service ID is rdma_cm's and the private data starts with one.
    pub cma: Option<CmaHeader>,
}

impl SidrRequest {
    /// The consumer's private data: after the CMA header if there is one, else all 216 bytes.
    pub fn user_data(&self) -> &[u8] {
        let skip = if self.cma.is_some() {
            CmaHeader::LEN
        } else {
            0
        };
        &self.req.private_data[skip..]
    }
}

/// A request of ours waiting for its SIDR_REP.
#[derive(Debug)]
struct Outgoing {
    local_gid: Ipv6Addr,
    peer_gid: Ipv6Addr,
    mad: [u8; MAD_LEN],
    wait: crate::time::Duration,
    retries_left: u8,
    deadline: Instant,
}

/// A received request the application has not answered yet.
#[derive(Debug)]
struct Incoming {
    local_gid: Ipv6Addr,
    peer_gid: Ipv6Addr,
    tid: u64,
    request_id: u32,
    service_id: u64,
}

/// Both sides' SIDR state in one CM.
#[derive(Debug, Default)]
pub(super) struct Sidr {
    outgoing: BTreeMap<SidrId, Outgoing>,
    incoming: BTreeMap<SidrId, Incoming>,
    /// (peer GID, Request ID, the SIDR_REP sent) of the latest answers.
    answered: VecDeque<(Ipv6Addr, u32, [u8; MAD_LEN])>,
}

impl Sidr {
    /// Whether `id` is held by either side (so the CM's ID allocator skips it).
    pub(super) fn holds(&self, id: u32) -> bool {
        self.outgoing.contains_key(&SidrId(id)) || self.incoming.contains_key(&SidrId(id))
    }

    /// Sends a SIDR_REQ with Request ID `id`.
    pub(super) fn request(
        &mut self,
        now: Instant,
        id: SidrId,
        tid: u64,
        params: &SidrParams,
        io: &mut Io,
    ) -> Result<(), CmError> {
        if params.timeout > 31 || params.max_cm_retries > 15 {
            return Err(CmError::InvalidParams);
        }
        let req = SidrReqRepr {
            request_id: id.0,
            partition_key: params.p_key,
            service_id: params.service_id.0,
            private_data: padded(&params.private_data)?,
        };
        let mad = build_mad(tid, CmAttribute::SidrReq(req));
        let wait = cm_timeout(params.timeout);
        io.send(params.local_gid, params.peer_gid, mad);
        self.outgoing.insert(
            id,
            Outgoing {
                local_gid: params.local_gid,
                peer_gid: params.peer_gid,
                mad,
                wait,
                retries_left: params.max_cm_retries,
                deadline: now + wait,
            },
        );
        Ok(())
    }

    /// A SIDR_REP from `peer_gid`: ends the request it names.
    pub(super) fn on_rep(&mut self, peer_gid: Ipv6Addr, rep: &SidrRepRepr, io: &mut Io) {
        let id = SidrId(rep.request_id);
        if self
            .outgoing
            .get(&id)
            .is_none_or(|o| o.peer_gid != peer_gid)
        {
            io.stats.unknown_comm_id += 1;
            return;
        }
        self.outgoing.remove(&id);
        io.events.push_back(Event::SidrReply {
            id,
            status: rep.status,
            qpn: rep.qpn,
            q_key: rep.q_key,
            private_data: rep.private_data.to_vec(),
        });
    }

    /// A SIDR_REQ; `new_id` gives the handle of a new request when someone listens on its
    /// Service ID, and is `None` when nobody does.
    pub(super) fn on_req(
        &mut self,
        (local_gid, peer_gid): (Ipv6Addr, Ipv6Addr),
        tid: u64,
        req: &SidrReqRepr,
        new_id: Option<impl FnOnce(&Self) -> SidrId>,
        io: &mut Io,
    ) {
        if let Some((_, _, mad)) = self
            .answered
            .iter()
            .find(|(g, r, _)| *g == peer_gid && *r == req.request_id)
        {
            io.stats.duplicate += 1;
            let mad = *mad;
            return io.send(local_gid, peer_gid, mad);
        }
        let waiting = self
            .incoming
            .values()
            .any(|i| i.peer_gid == peer_gid && i.request_id == req.request_id);
        if waiting {
            io.stats.duplicate += 1;
            return;
        }
        let Some(new_id) = new_id else {
            io.stats.no_listener += 1;
            let rep = rep_for(req.request_id, req.service_id, &unsupported(), [0; 136]);
            return io.send(
                local_gid,
                peer_gid,
                build_mad(tid, CmAttribute::SidrRep(rep)),
            );
        };
        if self.incoming.len() >= PENDING_MAX {
            io.stats.wrong_state += 1;
            return;
        }
        let id = new_id(self);
        self.incoming.insert(
            id,
            Incoming {
                local_gid,
                peer_gid,
                tid,
                request_id: req.request_id,
                service_id: req.service_id,
            },
        );
        let cma = ServiceId(req.service_id)
            .rdma_cm_parts()
            .and_then(|_| CmaHeader::parse(&req.private_data).ok());
        io.events
            .push_back(Event::SidrRequest(Box::new(SidrRequest {
                id,
                local_gid,
                peer_gid,
                req: *req,
                cma,
            })));
    }

    /// Answers request `id` with a SIDR_REP.
    pub(super) fn reply(
        &mut self,
        id: SidrId,
        params: &SidrReplyParams,
        io: &mut Io,
    ) -> Result<(), CmError> {
        let private_data = padded(&params.private_data)?;
        let inc = self.incoming.remove(&id).ok_or(CmError::UnknownConn)?;
        let rep = rep_for(inc.request_id, inc.service_id, params, private_data);
        let mad = build_mad(inc.tid, CmAttribute::SidrRep(rep));
        io.send(inc.local_gid, inc.peer_gid, mad);
        if self.answered.len() == ANSWERED_KEPT {
            self.answered.pop_front();
        }
        self.answered.push_back((inc.peer_gid, inc.request_id, mad));
        Ok(())
    }

    /// The earliest resend or give-up.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.outgoing.values().map(|o| o.deadline).min()
    }

    /// Resends what is due, gives up what has no retries left.
    pub(super) fn on_timeout(&mut self, now: Instant, io: &mut Io) {
        let mut gone = Vec::new();
        for (&id, o) in self.outgoing.iter_mut().filter(|(_, o)| o.deadline <= now) {
            if o.retries_left == 0 {
                gone.push(id);
                continue;
            }
            o.retries_left -= 1;
            o.deadline = now + o.wait;
            io.stats.retransmitted += 1;
            io.send(o.local_gid, o.peer_gid, o.mad);
        }
        for id in gone {
            self.outgoing.remove(&id);
            io.stats.timed_out += 1;
            io.events.push_back(Event::SidrTimedOut { id });
        }
    }
}

/// The answer to a Service ID nobody listens on.
fn unsupported() -> SidrReplyParams {
    SidrReplyParams {
        status: SidrStatus::UNSUPPORTED,
        qpn: Qpn::new(0),
        q_key: 0,
        private_data: Vec::new(),
    }
}

/// A SIDR_REP for request `request_id` of `service_id` (`params.private_data` already padded
/// into `private_data`).
fn rep_for(
    request_id: u32,
    service_id: u64,
    params: &SidrReplyParams,
    private_data: [u8; 136],
) -> SidrRepRepr {
    SidrRepRepr {
        request_id,
        status: params.status,
        additional_info_length: 0,
        qpn: params.qpn,
        service_id,
        q_key: params.q_key,
        additional_info: [0; 72],
        private_data,
    }
}
