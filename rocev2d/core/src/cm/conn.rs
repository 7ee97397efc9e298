//! One connection's CM state machine (IBA Vol. 1 chapter 12: the messages of §12.6.5–§12.6.11
//! and the CM's states). Where a rule is cited by a Linux function, it is what
//! `drivers/infiniband/core/cm.c` does, which `rping_cm.pcap` shows on the wire.
//!
//! Timers (all exponents are [`cm_timeout`]'s 4.096 µs · 2^value):
//!
//! * packet lifetime (PLT): the path's Local ACK Timeout minus one, as Linux derives it on both
//!   sides (the REQ carries no lifetime on RoCE);
//! * REQ sent: the REQ's Remote CM Response Timeout + 2·PLT (§12.6.5), then resend, at most
//!   Max CM Retries times;
//! * REP sent: the REQ's Local CM Response Timeout + 2·PLT, the same retries;
//! * MRA received: its Service Timeout + 2·PLT replaces the running timer (§12.6.6); when it
//!   runs out the message is resent as after any timeout;
//! * DREQ sent: the peer's response timeout + 2·PLT, the same retries (Linux `cm_process_send_error`);
//! * time-wait: the path's Local ACK Timeout (2·PLT, Linux's `cm_enter_timewait`), so stray
//!   copies of the connection's packets die before its ID is forgotten.
//!
//! Deviations and choices:
//!
//! * Retries exhausted on a REQ or REP: a REJ with reason Timeout (ARI: our CA GUID, as Linux)
//!   tells the peer, and the connection enters time-wait, so a late duplicate REQ is answered
//!   with that REJ instead of making a second connection.
//! * The active side answers a REP with its RTU at once (no MRA for a REP): the application
//!   moves the QP while handling [`Event::Established`], before it flushes
//!   [`super::Cm::poll_transmit`].
//! * A DREQ is answered with a DREP at once, with [`Event::Disconnected`].
//! * A rejected or timed-out connection also passes through time-wait; on the passive side
//!   that time-wait is one REQ resend interval longer (see `enter_time_wait`).
//! * A duplicate REQ in RepSent gets the REP again; Linux leaves the REP to its own timer. This
//!   recovers a lost REP one REQ interval sooner and costs one MAD per duplicate.
//! * A lost RTU is also recovered by traffic on the QP standing in for it
//!   ([`super::Cm::established`], Linux `ib_cm_notify`): the endpoint calls it when its QP,
//!   still in RTR, receives the peer's first packet.
//! * NOT IMPLEMENTED (IBA §12.8, §12.11): LAP/APR (alternate paths) and SIDR.

use alloc::vec::Vec;
use core::net::Ipv6Addr;

use super::{
    AcceptParams, CmError, ConnId, Event, Io, QpParams, RejectReason, build_mad, cm_timeout, padded,
};
use crate::time::{Duration, Instant};
use crate::wire::mad::cm_connect::{MraRepr, RejRepr, RepRepr, ReqRepr, RtuRepr};
use crate::wire::mad::cm_disconnect::{DrepRepr, DreqRepr};
use crate::wire::mad::{CmAttribute, MAD_LEN, attribute};
use crate::wire::{MadPacket, Psn, Qpn};

/// REJ "Message REJected" / MRA "Message MRAed" code for a REQ (Tables 107, 108).
pub(super) const MSG_REQ: u8 = 0;
/// … for a REP.
pub(super) const MSG_REP: u8 = 1;
/// REJ "Message REJected": none in particular (a timeout).
const MSG_OTHER: u8 = 2;

/// Where a connection stands (IBA chapter 12's CM states, Linux's `ib_cm_state` names).
///
/// ```text
///  active                                passive
///  connect ─► ReqSent ◄─┐                REQ ─► ReqRcvd ─ send_mra ─► MraReqSent
///    MRA │  ▲ timeout   │ resend            accept │         accept │
///        ▼  │           │                          ▼                ▼
///     MraReqRcvd ───────┘                 RepSent ◄──resend── MraRepRcvd ◄─ MRA
///        │ REP (send RTU)                      │ RTU
///        ▼                                     ▼
///    Established ◄──────────────────────── Established
///        │ disconnect: DREQ            DREQ in: DREP out
///        ▼                                     │
///    DreqSent ── DREP / DREQ / retries out ──► TimeWait ── timer ─► gone (TimeWaitExit)
///  REJ in/out, retries out (REJ Timeout) from any state before Established ─► TimeWait
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Active: REQ sent, waiting for a REP.
    ReqSent,
    /// Active: the passive side asked for more time (MRA); waiting longer.
    MraReqRcvd,
    /// Passive: REQ received, waiting for the application.
    ReqRcvd,
    /// Passive: REQ received and MRA sent, waiting for the application.
    MraReqSent,
    /// Passive: REP sent, waiting for the RTU.
    RepSent,
    /// Passive: the active side asked for more time for its RTU.
    MraRepRcvd,
    /// Connected.
    Established,
    /// DREQ sent, waiting for the DREP.
    DreqSent,
    /// Over; the ID is kept until stray packets have died.
    TimeWait,
}

/// One connection: its IDs, the REQ it was made from, the last message sent (resent as is on a
/// timeout or a duplicate, Linux `cm_dup_req_handler`), and its one timer.
#[derive(Debug)]
pub(super) struct Conn {
    id: ConnId,
    /// The peer's Communication ID; 0 until the REP names it (active side).
    remote_id: u32,
    active: bool,
    state: State,
    /// Transaction ID of every MAD we send for this connection (the active side's choice; the
    /// passive side echoes the REQ's, as in `rping_cm.pcap`).
    tid: u64,
    local_gid: Ipv6Addr,
    peer_gid: Ipv6Addr,
    local_ca_guid: u64,
    /// The REQ, sent or received: the timeouts, retries and path of the connection.
    req: ReqRepr,
    /// Set once the REP is sent (passive) or received (active).
    qp: Option<QpParams>,
    deadline: Option<Instant>,
    retries_left: u8,
    last: [u8; MAD_LEN],
}

impl Conn {
    /// Active side: sends `req` and waits for the answer.
    pub(super) fn connect(
        now: Instant,
        id: ConnId,
        tid: u64,
        local_ca_guid: u64,
        req: ReqRepr,
        io: &mut Io,
    ) -> Self {
        let mut c = Conn {
            id,
            remote_id: 0,
            active: true,
            state: State::ReqSent,
            tid,
            local_gid: req.primary_path.local_port_gid,
            peer_gid: req.primary_path.remote_port_gid,
            local_ca_guid,
            req,
            qp: None,
            deadline: None,
            retries_left: req.max_cm_retries,
            last: [0; MAD_LEN],
        };
        c.send(CmAttribute::Req(req), io);
        c.deadline = Some(now + c.response_wait());
        c
    }

    /// Passive side: a new REQ for a service we listen on; the application answers.
    pub(super) fn from_req(
        id: ConnId,
        tid: u64,
        local_ca_guid: u64,
        local_gid: Ipv6Addr,
        peer_gid: Ipv6Addr,
        req: ReqRepr,
    ) -> Self {
        Conn {
            id,
            remote_id: req.local_comm_id,
            active: false,
            state: State::ReqRcvd,
            tid,
            local_gid,
            peer_gid,
            local_ca_guid,
            req,
            qp: None,
            deadline: None,
            retries_left: req.max_cm_retries,
            last: [0; MAD_LEN],
        }
    }

    pub(super) fn state(&self) -> State {
        self.state
    }

    pub(super) fn peer_gid(&self) -> Ipv6Addr {
        self.peer_gid
    }

    pub(super) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether a message whose Local Communication ID is `theirs` can be for this connection:
    /// before the REP we do not know the peer's ID, and a REJ may carry 0.
    pub(super) fn knows_peer_id(&self, theirs: u32) -> bool {
        self.remote_id == 0 || theirs == 0 || theirs == self.remote_id
    }

    /// Whether this is the passive side of the REQ `(ca_guid, comm_id)` from `peer_gid`.
    pub(super) fn is_from_req(&self, peer_gid: Ipv6Addr, ca_guid: u64, comm_id: u32) -> bool {
        !self.active
            && self.peer_gid == peer_gid
            && self.req.local_ca_guid == ca_guid
            && self.remote_id == comm_id
    }

    // -----------------------------------------------------------------------------------------
    // Timers

    /// 2·PLT, the path's round trip; PLT = Local ACK Timeout − 1 (Linux `cm_req_handler`).
    fn round_trip(&self) -> Duration {
        cm_timeout(self.req.primary_path.local_ack_timeout.saturating_sub(1)).saturating_mul(2)
    }

    /// How long to wait for the peer's answer (§12.6.5): its CM response time plus the round
    /// trip. The active side's peer announced nothing, so the REQ's Remote CM Response Timeout
    /// is our guess of it; the passive side's peer is the REQ's sender.
    fn response_wait(&self) -> Duration {
        let peer = if self.active {
            self.req.remote_cm_response_timeout
        } else {
            self.req.local_cm_response_timeout
        };
        cm_timeout(peer) + self.round_trip()
    }

    fn enter_time_wait(&mut self, now: Instant) {
        let mut wait = cm_timeout(self.req.primary_path.local_ack_timeout);
        // A passive side that never connected may still get resends of the REQ (our REJ was
        // lost): stay one of the active side's REQ intervals longer, so they are answered with
        // that REJ instead of becoming a new request.
        if !self.active && !matches!(self.state, State::Established | State::DreqSent) {
            wait = wait + cm_timeout(self.req.remote_cm_response_timeout) + self.round_trip();
        }
        self.state = State::TimeWait;
        self.deadline = Some(now + wait);
    }

    /// Starts waiting for the answer to what was just sent, with a fresh retry budget.
    fn arm(&mut self, now: Instant) {
        self.retries_left = self.req.max_cm_retries;
        self.deadline = Some(now + self.response_wait());
    }

    /// Runs the timer; returns whether the connection is over and is to be forgotten.
    pub(super) fn on_timeout(&mut self, now: Instant, io: &mut Io) -> bool {
        match self.state {
            State::TimeWait => return true,
            State::ReqSent
            | State::MraReqRcvd
            | State::RepSent
            | State::MraRepRcvd
            | State::DreqSent
                if self.retries_left > 0 =>
            {
                self.retries_left -= 1;
                io.stats.retransmitted += 1;
                self.resend(io);
                self.state = match self.state {
                    State::MraReqRcvd => State::ReqSent,
                    State::MraRepRcvd => State::RepSent,
                    s => s,
                };
                self.deadline = Some(now + self.response_wait());
            }
            // Linux `cm_process_send_error`: a DREQ never answered still ends the connection.
            State::DreqSent => {
                io.events.push_back(Event::Disconnected {
                    conn: self.id,
                    private_data: Vec::new(),
                });
                self.enter_time_wait(now);
            }
            State::ReqSent | State::MraReqRcvd | State::RepSent | State::MraRepRcvd => {
                io.stats.timed_out += 1;
                let mut ari = [0u8; 72];
                ari[..8].copy_from_slice(&self.local_ca_guid.to_be_bytes());
                self.send_rej(RejectReason::TIMEOUT, MSG_OTHER, ari, 8, [0; 148], io);
                io.events.push_back(Event::TimedOut { conn: self.id });
                self.enter_time_wait(now);
            }
            State::ReqRcvd | State::MraReqSent | State::Established => self.deadline = None,
        }
        false
    }

    // -----------------------------------------------------------------------------------------
    // Sending

    fn send(&mut self, attribute: CmAttribute, io: &mut Io) {
        self.last = build_mad(self.tid, attribute);
        io.send(self.local_gid, self.peer_gid, self.last);
    }

    fn resend(&self, io: &mut Io) {
        io.send(self.local_gid, self.peer_gid, self.last);
    }

    fn send_rej(
        &mut self,
        reason: RejectReason,
        message_rejected: u8,
        ari: [u8; 72],
        reject_info_length: u8,
        private_data: [u8; 148],
        io: &mut Io,
    ) {
        let rej = RejRepr {
            local_comm_id: self.id.comm_id(),
            remote_comm_id: self.remote_id,
            message_rejected,
            reject_info_length,
            reason: reason.0,
            ari,
            private_data,
        };
        self.send(CmAttribute::Rej(rej), io);
    }

    /// The QP settings the REQ decides; the caller sets the ends and what the REP negotiated.
    fn qp_params_for(&self, local_qpn: Qpn, peer_qpn: Qpn, sq_psn: Psn, rq_psn: Psn) -> QpParams {
        let (req, path) = (&self.req, &self.req.primary_path);
        QpParams {
            local_qpn,
            peer_qpn,
            sq_psn,
            rq_psn,
            local_gid: self.local_gid,
            peer_gid: self.peer_gid,
            path_mtu: req.path_packet_payload_mtu,
            local_ack_timeout: path.local_ack_timeout,
            retry_count: req.retry_count,
            rnr_retry_count: req.rnr_retry_count,
            max_rd_atomic: req.initiator_depth,
            max_dest_rd_atomic: req.responder_resources,
            p_key: req.partition_key,
            hop_limit: path.hop_limit,
            traffic_class: path.traffic_class,
            flow_label: path.flow_label,
        }
    }

    // -----------------------------------------------------------------------------------------
    // Application calls

    pub(super) fn accept(
        &mut self,
        now: Instant,
        p: &AcceptParams,
        io: &mut Io,
    ) -> Result<(), CmError> {
        if !matches!(self.state, State::ReqRcvd | State::MraReqSent) {
            return Err(CmError::WrongState(self.state));
        }
        if p.rnr_retry_count > 7 || p.target_ack_delay > 31 || p.local_qpn.value() <= 1 {
            return Err(CmError::InvalidParams);
        }
        // §12.6.8: neither side may promise more READ/atomic depth than the other accepts.
        let responder_resources = p.responder_resources.min(self.req.initiator_depth);
        let initiator_depth = p.initiator_depth.min(self.req.responder_resources);
        let rep = RepRepr {
            local_comm_id: self.id.comm_id(),
            remote_comm_id: self.remote_id,
            local_q_key: 0,
            local_qpn: p.local_qpn,
            local_ee_context_number: 0,
            vendor_id: 0,
            starting_psn: p.start_psn,
            responder_resources,
            initiator_depth,
            target_ack_delay: p.target_ack_delay,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: p.rnr_retry_count,
            srq: false,
            local_ca_guid: self.local_ca_guid,
            private_data: padded(&p.private_data)?,
        };
        // REQ Starting PSN is where the active side receives from: our send PSN (§12.6.5).
        self.qp = Some(QpParams {
            max_rd_atomic: initiator_depth,
            max_dest_rd_atomic: responder_resources,
            ..self.qp_params_for(
                p.local_qpn,
                self.req.local_qpn,
                self.req.starting_psn,
                p.start_psn,
            )
        });
        self.send(CmAttribute::Rep(rep), io);
        self.state = State::RepSent;
        self.arm(now);
        Ok(())
    }

    pub(super) fn reject(
        &mut self,
        now: Instant,
        reason: RejectReason,
        private_data: &[u8],
        io: &mut Io,
    ) -> Result<(), CmError> {
        if !matches!(self.state, State::ReqRcvd | State::MraReqSent) {
            return Err(CmError::WrongState(self.state));
        }
        let pd = padded(private_data)?;
        self.send_rej(reason, MSG_REQ, [0; 72], 0, pd, io);
        self.enter_time_wait(now);
        Ok(())
    }

    pub(super) fn send_mra(&mut self, service_timeout: u8, io: &mut Io) -> Result<(), CmError> {
        if !matches!(self.state, State::ReqRcvd | State::MraReqSent) {
            return Err(CmError::WrongState(self.state));
        }
        if service_timeout > 31 {
            return Err(CmError::InvalidParams);
        }
        let mra = MraRepr {
            local_comm_id: self.id.comm_id(),
            remote_comm_id: self.remote_id,
            message_mraed: MSG_REQ,
            service_timeout,
            private_data: [0; 222],
        };
        self.send(CmAttribute::Mra(mra), io);
        self.state = State::MraReqSent;
        Ok(())
    }

    pub(super) fn disconnect(
        &mut self,
        now: Instant,
        private_data: &[u8],
        io: &mut Io,
    ) -> Result<(), CmError> {
        let (State::Established, Some(qp)) = (self.state, self.qp) else {
            return Err(CmError::WrongState(self.state));
        };
        let dreq = DreqRepr {
            local_comm_id: self.id.comm_id(),
            remote_comm_id: self.remote_id,
            remote_qpn: qp.peer_qpn,
            private_data: padded(private_data)?,
        };
        self.send(CmAttribute::Dreq(dreq), io);
        self.state = State::DreqSent;
        self.arm(now);
        Ok(())
    }

    // -----------------------------------------------------------------------------------------
    // Received messages

    fn wrong_state(&self, io: &mut Io) {
        io.stats.wrong_state += 1;
    }

    /// A resent REQ means our answer was lost: send it again (MRA, REP, or the REJ that ended
    /// the connection); while the application decides, or once connected, drop it.
    pub(super) fn on_duplicate_req(&mut self, io: &mut Io) {
        io.stats.duplicate += 1;
        let answered = match self.state {
            State::MraReqSent | State::RepSent | State::MraRepRcvd => true,
            State::TimeWait => {
                MadPacket::new_unchecked(&self.last[..]).attribute_id() == attribute::REJ
            }
            _ => false,
        };
        if answered {
            self.resend(io);
        }
    }

    pub(super) fn on_mra(&mut self, now: Instant, mra: &MraRepr, io: &mut Io) {
        self.state = match (self.state, mra.message_mraed) {
            (State::ReqSent | State::MraReqRcvd, MSG_REQ) => State::MraReqRcvd,
            (State::RepSent | State::MraRepRcvd, MSG_REP) => State::MraRepRcvd,
            _ => return self.wrong_state(io),
        };
        self.deadline = Some(now + cm_timeout(mra.service_timeout) + self.round_trip());
    }

    pub(super) fn on_rej(&mut self, now: Instant, rej: &RejRepr, io: &mut Io) {
        if matches!(self.state, State::DreqSent | State::TimeWait) {
            return self.wrong_state(io);
        }
        io.events.push_back(Event::Rejected {
            conn: self.id,
            reason: RejectReason(rej.reason),
            private_data: rej.private_data.to_vec(),
        });
        self.enter_time_wait(now);
    }

    pub(super) fn on_rep(&mut self, rep: &RepRepr, io: &mut Io) {
        match self.state {
            State::ReqSent | State::MraReqRcvd => {}
            // A resent REP means our RTU was lost (Linux `cm_dup_rep_handler`).
            State::Established if self.active => {
                io.stats.duplicate += 1;
                return self.resend(io);
            }
            _ => return self.wrong_state(io),
        }
        self.remote_id = rep.local_comm_id;
        // REP Starting PSN is where the passive side receives from: our send PSN (§12.6.8).
        let qp = QpParams {
            rnr_retry_count: rep.rnr_retry_count,
            max_rd_atomic: rep.responder_resources,
            max_dest_rd_atomic: rep.initiator_depth,
            ..self.qp_params_for(
                self.req.local_qpn,
                rep.local_qpn,
                rep.starting_psn,
                self.req.starting_psn,
            )
        };
        self.qp = Some(qp);
        io.events.push_back(Event::Established {
            conn: self.id,
            qp,
            private_data: rep.private_data.to_vec(),
        });
        let rtu = RtuRepr {
            local_comm_id: self.id.comm_id(),
            remote_comm_id: self.remote_id,
            private_data: [0; 224],
        };
        self.send(CmAttribute::Rtu(rtu), io);
        self.state = State::Established;
        self.deadline = None;
    }

    pub(super) fn on_rtu(&mut self, rtu: &RtuRepr, io: &mut Io) {
        match (self.state, self.qp) {
            (State::RepSent | State::MraRepRcvd, Some(qp)) => {
                io.events.push_back(Event::Established {
                    conn: self.id,
                    qp,
                    private_data: rtu.private_data.to_vec(),
                });
                self.state = State::Established;
                self.deadline = None;
            }
            (State::Established, _) if !self.active => io.stats.duplicate += 1,
            _ => self.wrong_state(io),
        }
    }

    /// The QP saw the peer's first packet while we waited for its RTU: the peer is connected,
    /// so we are too (IBA's Communication Established event; Linux `ib_cm_notify` with `IB_EVENT_COMM_EST`). Returns
    /// whether the connection was waiting for an RTU.
    pub(super) fn on_comm_established(&mut self, io: &mut Io) -> bool {
        let (State::RepSent | State::MraRepRcvd, Some(qp)) = (self.state, self.qp) else {
            return false;
        };
        io.events.push_back(Event::Established {
            conn: self.id,
            qp,
            private_data: Vec::new(),
        });
        self.state = State::Established;
        self.deadline = None;
        true
    }

    /// What the QP needs, once the REP is sent or received.
    pub(super) fn qp_params(&self) -> Option<QpParams> {
        self.qp
    }

    pub(super) fn on_dreq(&mut self, now: Instant, tid: u64, dreq: &DreqRepr, io: &mut Io) {
        // §12.6.10: the DREQ names our QP; one that does not is not for this connection.
        if self.qp.map(|q| q.local_qpn) != Some(dreq.remote_qpn) {
            io.stats.unknown_comm_id += 1;
            return;
        }
        let fresh = match self.state {
            // RepSent: the active side is connected and our RTU got lost; it is over anyway.
            State::Established | State::RepSent | State::MraRepRcvd | State::DreqSent => true,
            State::TimeWait => false,
            _ => return self.wrong_state(io),
        };
        // The DREP echoes the DREQ's transaction ID (Linux `cm_dreq_handler`).
        let drep = DrepRepr {
            local_comm_id: self.id.comm_id(),
            remote_comm_id: self.remote_id,
            private_data: [0; 224],
        };
        io.send(
            self.local_gid,
            self.peer_gid,
            build_mad(tid, CmAttribute::Drep(drep)),
        );
        if fresh {
            io.events.push_back(Event::Disconnected {
                conn: self.id,
                private_data: dreq.private_data.to_vec(),
            });
            self.enter_time_wait(now);
        } else {
            io.stats.duplicate += 1;
        }
    }

    pub(super) fn on_drep(&mut self, now: Instant, drep: &DrepRepr, io: &mut Io) {
        match self.state {
            State::DreqSent => {
                io.events.push_back(Event::Disconnected {
                    conn: self.id,
                    private_data: drep.private_data.to_vec(),
                });
                self.enter_time_wait(now);
            }
            State::TimeWait => io.stats.duplicate += 1,
            _ => self.wrong_state(io),
        }
    }
}
