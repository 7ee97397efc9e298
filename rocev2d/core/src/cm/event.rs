//! What crosses the CM's boundary with the application: the parameters of
//! [`super::Cm::connect`] and [`super::Cm::accept`] (with rdma_cm's defaults, as
//! `rping_cm.pcap` shows them), and the [`Event`]s that tell the application what to do with its
//! QP.
//!
//! Source: IBA Vol. 1 §12.6.5 (REQ fields), §12.6.8 (REP fields), §12.9 (which message ends in
//! which event); Linux `cm.c` for which REQ/REP field sets which QP attribute.
//!
//! Deviations: none.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::net::Ipv6Addr;

use super::{CmError, CmaHeader, ConnId, RejectReason, ServiceId, SidrId, SidrRequest, padded};
use crate::wire::mad::cm_connect::{PathRepr, ReqRepr};
use crate::wire::mad::cm_sidr::SidrStatus;
use crate::wire::{Psn, Qpn};

/// Everything the active side chooses for a connection ([`Cm::connect`](super::Cm::connect)). [`Self::new`] fills
/// the rest with what rdma_cm over rdma_rxe sent in `rping_cm.pcap` frame 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectParams {
    /// What the passive side listens on.
    pub service_id: ServiceId,
    /// Our GID (the source of the MADs and of the connection's packets).
    pub local_gid: Ipv6Addr,
    /// The passive side's GID.
    pub peer_gid: Ipv6Addr,
    /// Our QP.
    pub local_qpn: Qpn,
    /// Where our receive queue starts: the first PSN the peer will send (REQ Starting PSN).
    pub start_psn: Psn,
    /// Up to 92 bytes for the peer (for rdma_cm: [`CmaHeader::private_data`]).
    pub private_data: Vec<u8>,
    /// RDMA READ/atomic requests we accept in flight. Default 1.
    pub responder_resources: u8,
    /// RDMA READ/atomic requests we issue in flight. Default 1.
    pub initiator_depth: u8,
    /// How long the passive side may take to answer, as an exponent ([`cm_timeout`](super::cm_timeout)); with the
    /// round trip, how long we wait for a REP before resending the REQ. Default 20 (4.3 s).
    pub remote_cm_response_timeout: u8,
    /// How long we take to answer, as an exponent: the passive side waits this (plus the round
    /// trip) for our RTU before resending its REP. Default 20.
    pub local_cm_response_timeout: u8,
    /// How often either side resends the REQ, REP or DREQ before giving up (0–15). Default 15.
    pub max_cm_retries: u8,
    /// Transport retries after a local ACK timeout (0–7), for both QPs. Default 7.
    pub retry_count: u8,
    /// RNR retries (0–7, 7 = forever) for the passive side's QP. Default 7.
    pub rnr_retry_count: u8,
    /// Path MTU code, 1 = 256 … 5 = 4096 bytes: the most the connection may use. Default 5;
    /// the endpoint proposes the smaller of it and what its link carries
    /// ([`GsiConfig::link_mtu`](crate::endpoint::GsiConfig::link_mtu)).
    pub path_mtu: u8,
    /// The partition. Default 0xFFFF.
    pub p_key: u16,
    /// Local ACK Timeout exponent of the path; one less is taken as the packet lifetime, as
    /// Linux does. Default 19.
    pub local_ack_timeout: u8,
    /// IP hop limit / TTL. Default 64.
    pub hop_limit: u8,
    /// IP traffic class (DSCP and ECN). Default 0.
    pub traffic_class: u8,
    /// IPv6 flow label. Default 0.
    pub flow_label: u32,
    /// Whether the endpoint moves `local_qpn` through RTR and RTS (default), or leaves it to
    /// the application, which then only needs the number announced: librdmacm's
    /// `conn_param.qp_num` with no QP on the ID (UCX announces a reserved QPN and connects its
    /// own QPs over what the private data carries).
    pub moves_qp: bool,
}

impl ConnectParams {
    /// Parameters with `rping_cm.pcap`'s defaults for everything but the endpoints and the
    /// path MTU (the most, for the endpoint to lower to its link's).
    pub fn new(
        service_id: ServiceId,
        local_gid: Ipv6Addr,
        peer_gid: Ipv6Addr,
        local_qpn: Qpn,
        start_psn: Psn,
    ) -> Self {
        ConnectParams {
            service_id,
            local_gid,
            peer_gid,
            local_qpn,
            start_psn,
            private_data: Vec::new(),
            responder_resources: 1,
            initiator_depth: 1,
            remote_cm_response_timeout: 20,
            local_cm_response_timeout: 20,
            max_cm_retries: 15,
            retry_count: 7,
            rnr_retry_count: 7,
            path_mtu: 5,
            p_key: 0xffff,
            local_ack_timeout: 19,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            moves_qp: true,
        }
    }

    /// The REQ these parameters make, or why they cannot be sent.
    pub(super) fn req(&self, local_comm_id: u32, local_ca_guid: u64) -> Result<ReqRepr, CmError> {
        let ok = self.remote_cm_response_timeout <= 31
            && self.local_cm_response_timeout <= 31
            && self.local_ack_timeout <= 31
            && self.max_cm_retries <= 15
            && self.retry_count <= 7
            && self.rnr_retry_count <= 7
            && (1..=5).contains(&self.path_mtu)
            && self.flow_label < 1 << 20
            && self.local_qpn.value() > 1;
        if !ok {
            return Err(CmError::InvalidParams);
        }
        Ok(ReqRepr {
            local_comm_id,
            vendor_id: 0,
            service_id: self.service_id.0,
            local_ca_guid,
            local_q_key: 0,
            local_qpn: self.local_qpn,
            responder_resources: self.responder_resources,
            local_eecn: 0,
            initiator_depth: self.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: self.remote_cm_response_timeout,
            transport_service_type: 0,
            end_to_end_flow_control: false,
            starting_psn: self.start_psn,
            local_cm_response_timeout: self.local_cm_response_timeout,
            retry_count: self.retry_count,
            partition_key: self.p_key,
            path_packet_payload_mtu: self.path_mtu,
            rdc_exists: false,
            rnr_retry_count: self.rnr_retry_count,
            max_cm_retries: self.max_cm_retries,
            srq: false,
            extended_transport_type: 0,
            // RoCE has no LIDs: both are the permissive LID, as in rping_cm.pcap.
            primary_path: PathRepr {
                local_port_lid: 0xffff,
                remote_port_lid: 0xffff,
                local_port_gid: self.local_gid,
                remote_port_gid: self.peer_gid,
                flow_label: self.flow_label,
                packet_rate: 0,
                traffic_class: self.traffic_class,
                hop_limit: self.hop_limit,
                sl: 0,
                subnet_local: false,
                local_ack_timeout: self.local_ack_timeout,
            },
            alternate_path: PathRepr::NONE,
            sap_supported: false,
            private_data: padded(&self.private_data)?,
        })
    }
}

/// What the passive side chooses when it accepts ([`Cm::accept`](super::Cm::accept)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptParams {
    /// Our QP.
    pub local_qpn: Qpn,
    /// Where our receive queue starts: the first PSN the active side will send (REP Starting
    /// PSN).
    pub start_psn: Psn,
    /// Up to 196 bytes for the active side.
    pub private_data: Vec<u8>,
    /// RDMA READ/atomic requests we accept in flight; capped at the REQ's Initiator Depth.
    /// Default 1.
    pub responder_resources: u8,
    /// RDMA READ/atomic requests we issue in flight; capped at the REQ's Responder Resources.
    /// Default 1.
    pub initiator_depth: u8,
    /// RNR retries (0–7) for the active side's QP. Default 7.
    pub rnr_retry_count: u8,
    /// Our ACK turnaround, as an exponent. Default 15 (rxe's, `rping_cm.pcap` frame 2).
    pub target_ack_delay: u8,
    /// As [`ConnectParams::moves_qp`]: false leaves `local_qpn` to the application.
    pub moves_qp: bool,
}

impl AcceptParams {
    /// Parameters with `rping_cm.pcap` frame 2's defaults for everything but the QP.
    pub fn new(local_qpn: Qpn, start_psn: Psn) -> Self {
        AcceptParams {
            local_qpn,
            start_psn,
            private_data: Vec::new(),
            responder_resources: 1,
            initiator_depth: 1,
            rnr_retry_count: 7,
            target_ack_delay: 15,
            moves_qp: true,
        }
    }
}

/// What a QP needs to go INIT → RTR → RTS for a connection; both sides get it in
/// [`Event::Established`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpParams {
    /// Our QP.
    pub local_qpn: Qpn,
    /// The peer's QP: the destination QP at RTR.
    pub peer_qpn: Qpn,
    /// The first PSN our QP sends (RTS `sq_psn`): the start PSN the peer announced.
    pub sq_psn: Psn,
    /// The first PSN our QP expects (RTR `rq_psn`): the start PSN we announced.
    pub rq_psn: Psn,
    /// Our GID (the source address of the connection's packets).
    pub local_gid: Ipv6Addr,
    /// The peer's GID (their destination address).
    pub peer_gid: Ipv6Addr,
    /// Path MTU code (1 = 256 … 5 = 4096).
    pub path_mtu: u8,
    /// Local ACK Timeout exponent.
    pub local_ack_timeout: u8,
    /// Transport retries.
    pub retry_count: u8,
    /// RNR retries the peer asked our QP to make.
    pub rnr_retry_count: u8,
    /// RDMA READ/atomic requests we may have in flight (`max_rd_atomic`).
    pub max_rd_atomic: u8,
    /// RDMA READ/atomic requests we accept in flight (`max_dest_rd_atomic`).
    pub max_dest_rd_atomic: u8,
    /// Partition key.
    pub p_key: u16,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label.
    pub flow_label: u32,
}

/// A REQ for a service we listen on; answer with [`Cm::accept`](super::Cm::accept), [`Cm::reject`](super::Cm::reject) or, to buy
/// time, [`Cm::send_mra`](super::Cm::send_mra).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectRequest {
    /// The new connection.
    pub conn: ConnId,
    /// The GID the REQ came from.
    pub peer_gid: Ipv6Addr,
    /// The REQ itself: the peer's QPN (`local_qpn`), the start PSN our QP will send from
    /// (`starting_psn`), the path, the private data.
    pub req: ReqRepr,
    /// The CMA header, when the service ID is rdma_cm's and the private data starts with one.
    pub cma: Option<CmaHeader>,
}

impl ConnectRequest {
    /// The consumer's private data: after the CMA header if there is one, else all 92 bytes.
    pub fn user_data(&self) -> &[u8] {
        let skip = if self.cma.is_some() {
            CmaHeader::LEN
        } else {
            0
        };
        &self.req.private_data[skip..]
    }
}

/// What the application learns from the CM ([`Cm::poll_event`](super::Cm::poll_event)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Passive side: a peer asks to connect (boxed: a REQ is five times any other event).
    ConnectRequest(Box<ConnectRequest>),
    /// The connection is up: move the QP to RTR and RTS with `qp`. `private_data` is the REP's
    /// (active side) or the RTU's (passive side).
    Established {
        /// The connection.
        conn: ConnId,
        /// How to set up the QP.
        qp: QpParams,
        /// The peer's private data.
        private_data: Vec<u8>,
    },
    /// The peer refused (or gave up on) the connection; move the QP to ERROR.
    Rejected {
        /// The connection.
        conn: ConnId,
        /// The REJ's reason.
        reason: RejectReason,
        /// The REJ's private data.
        private_data: Vec<u8>,
    },
    /// Our REQ or REP was resent Max CM Retries times without an answer; a REJ with reason
    /// Timeout has been sent. Move the QP to ERROR.
    TimedOut {
        /// The connection.
        conn: ConnId,
    },
    /// The connection is down: a DREQ came in (then `private_data` is its), or our DREQ was
    /// answered (the DREP's) or never was (empty). Move the QP to ERROR.
    Disconnected {
        /// The connection.
        conn: ConnId,
        /// The peer's private data.
        private_data: Vec<u8>,
    },
    /// The connection's time-wait is over and its ID is forgotten: the QP may be reused.
    TimeWaitExit {
        /// The connection.
        conn: ConnId,
    },
    /// Responder: a SIDR_REQ for a service we listen on; answer with
    /// [`Cm::sidr_reply`](super::Cm::sidr_reply).
    SidrRequest(Box<SidrRequest>),
    /// Requester: the SIDR_REP to our request. On [`SidrStatus::SUCCESS`], datagrams to the
    /// service go to `qpn` at the responder's GID with `q_key`.
    SidrReply {
        /// The request.
        id: SidrId,
        /// The answer.
        status: SidrStatus,
        /// The service's UD QP.
        qpn: Qpn,
        /// The Q_Key its datagrams carry.
        q_key: u32,
        /// The SIDR_REP's private data (136 bytes).
        private_data: Vec<u8>,
    },
    /// Requester: our SIDR_REQ went unanswered Max CM Retries + 1 times.
    SidrTimedOut {
        /// The request.
        id: SidrId,
    },
}

impl Event {
    /// The connection the event is about, unless it is a SIDR event.
    pub fn conn(&self) -> Option<ConnId> {
        match self {
            Event::ConnectRequest(r) => Some(r.conn),
            Event::Established { conn, .. }
            | Event::Rejected { conn, .. }
            | Event::TimedOut { conn }
            | Event::Disconnected { conn, .. }
            | Event::TimeWaitExit { conn } => Some(*conn),
            Event::SidrRequest(_) | Event::SidrReply { .. } | Event::SidrTimedOut { .. } => None,
        }
    }

    /// The SIDR request the event is about, if it is a SIDR event.
    pub fn sidr(&self) -> Option<SidrId> {
        match self {
            Event::SidrRequest(r) => Some(r.id),
            Event::SidrReply { id, .. } | Event::SidrTimedOut { id } => Some(*id),
            _ => None,
        }
    }
}
