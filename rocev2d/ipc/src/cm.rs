//! The connection manager's messages between an attached application and the daemon, which
//! runs the CM on QP1 for every application (docs/daemon.md, "Connection manager").
//!
//! They mirror the core's [`ConnectParams`], [`AcceptParams`] and [`Event`] field for field but
//! are a format of their own, as [`crate::record`]'s are: the two programs may be built at
//! different times. A connect request carries the REQ as the 232 data bytes of its MAD (IBA
//! Vol. 1 §12.6.5, Table 106), written and read by the core's own `ReqRepr`, so nothing of it is
//! lost or encoded twice. Decoding is total: bytes that do not make an event are an error.
//!
//! Deviations: none.

use crate::record::RecordError;
use rocev2_core::cm::{
    AcceptParams, CmaHeader, ConnId, ConnectParams, ConnectRequest, Event, QpParams, RejectReason,
    ServiceId, SidrId, SidrParams, SidrReplyParams, SidrRequest, SidrStatus,
};
use rocev2_core::wire::mad::DATA_LEN;
use rocev2_core::wire::mad::cm_connect::{ReqPacket, ReqRepr};
use rocev2_core::wire::mad::cm_sidr::{SidrReqPacket, SidrReqRepr};
use rocev2_core::wire::{Psn, Qpn};
use serde::{Deserialize, Serialize};
use std::net::Ipv6Addr;

/// [`ConnectParams`] as [`crate::proto::Request::CmConnect`] carries them (its QPN is the
/// request's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct ConnectSpec {
    pub service_id: u64,
    pub local_gid: Ipv6Addr,
    pub peer_gid: Ipv6Addr,
    pub start_psn: u32,
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub remote_cm_response_timeout: u8,
    pub local_cm_response_timeout: u8,
    pub max_cm_retries: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub path_mtu: u8,
    pub p_key: u16,
    pub local_ack_timeout: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
    pub moves_qp: bool,
}

impl From<&ConnectParams> for ConnectSpec {
    fn from(p: &ConnectParams) -> ConnectSpec {
        ConnectSpec {
            service_id: p.service_id.0,
            local_gid: p.local_gid,
            peer_gid: p.peer_gid,
            start_psn: p.start_psn.value(),
            private_data: p.private_data.clone(),
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            remote_cm_response_timeout: p.remote_cm_response_timeout,
            local_cm_response_timeout: p.local_cm_response_timeout,
            max_cm_retries: p.max_cm_retries,
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            path_mtu: p.path_mtu,
            p_key: p.p_key,
            local_ack_timeout: p.local_ack_timeout,
            hop_limit: p.hop_limit,
            traffic_class: p.traffic_class,
            flow_label: p.flow_label,
            moves_qp: p.moves_qp,
        }
    }
}

impl ConnectSpec {
    /// The core's parameters for QP `local_qpn`; the CM checks their ranges when it builds the
    /// REQ.
    pub fn params(self, local_qpn: Qpn) -> ConnectParams {
        ConnectParams {
            service_id: ServiceId(self.service_id),
            local_gid: self.local_gid,
            peer_gid: self.peer_gid,
            local_qpn,
            start_psn: Psn::new(self.start_psn),
            private_data: self.private_data,
            responder_resources: self.responder_resources,
            initiator_depth: self.initiator_depth,
            remote_cm_response_timeout: self.remote_cm_response_timeout,
            local_cm_response_timeout: self.local_cm_response_timeout,
            max_cm_retries: self.max_cm_retries,
            retry_count: self.retry_count,
            rnr_retry_count: self.rnr_retry_count,
            path_mtu: self.path_mtu,
            p_key: self.p_key,
            local_ack_timeout: self.local_ack_timeout,
            hop_limit: self.hop_limit,
            traffic_class: self.traffic_class,
            flow_label: self.flow_label,
            moves_qp: self.moves_qp,
        }
    }
}

/// [`AcceptParams`] as [`crate::proto::Request::CmAccept`] carries them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct AcceptSpec {
    pub local_qpn: u32,
    pub start_psn: u32,
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub rnr_retry_count: u8,
    pub target_ack_delay: u8,
    pub moves_qp: bool,
}

impl From<&AcceptParams> for AcceptSpec {
    fn from(p: &AcceptParams) -> AcceptSpec {
        AcceptSpec {
            local_qpn: p.local_qpn.value(),
            start_psn: p.start_psn.value(),
            private_data: p.private_data.clone(),
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            rnr_retry_count: p.rnr_retry_count,
            target_ack_delay: p.target_ack_delay,
            moves_qp: p.moves_qp,
        }
    }
}

impl From<AcceptSpec> for AcceptParams {
    fn from(s: AcceptSpec) -> AcceptParams {
        AcceptParams {
            local_qpn: Qpn::new(s.local_qpn & 0xff_ffff),
            start_psn: Psn::new(s.start_psn),
            private_data: s.private_data,
            responder_resources: s.responder_resources,
            initiator_depth: s.initiator_depth,
            rnr_retry_count: s.rnr_retry_count,
            target_ack_delay: s.target_ack_delay,
            moves_qp: s.moves_qp,
        }
    }
}

/// [`QpParams`], field for field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct QpRecord {
    pub local_qpn: u32,
    pub peer_qpn: u32,
    pub sq_psn: u32,
    pub rq_psn: u32,
    pub local_gid: Ipv6Addr,
    pub peer_gid: Ipv6Addr,
    pub path_mtu: u8,
    pub local_ack_timeout: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub p_key: u16,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
}

/// [`SidrParams`] as a control request carries them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct SidrSpec {
    pub service_id: u64,
    pub local_gid: Ipv6Addr,
    pub peer_gid: Ipv6Addr,
    pub p_key: u16,
    pub private_data: Vec<u8>,
    pub timeout: u8,
    pub max_cm_retries: u8,
}

impl From<&SidrParams> for SidrSpec {
    fn from(p: &SidrParams) -> SidrSpec {
        SidrSpec {
            service_id: p.service_id.0,
            local_gid: p.local_gid,
            peer_gid: p.peer_gid,
            p_key: p.p_key,
            private_data: p.private_data.clone(),
            timeout: p.timeout,
            max_cm_retries: p.max_cm_retries,
        }
    }
}

impl From<SidrSpec> for SidrParams {
    fn from(s: SidrSpec) -> SidrParams {
        SidrParams {
            service_id: ServiceId(s.service_id),
            local_gid: s.local_gid,
            peer_gid: s.peer_gid,
            p_key: s.p_key,
            private_data: s.private_data,
            timeout: s.timeout,
            max_cm_retries: s.max_cm_retries,
        }
    }
}

/// [`SidrReplyParams`] as a control request carries them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct SidrReplySpec {
    pub status: u8,
    pub qpn: u32,
    pub q_key: u32,
    pub private_data: Vec<u8>,
}

impl From<&SidrReplyParams> for SidrReplySpec {
    fn from(p: &SidrReplyParams) -> SidrReplySpec {
        SidrReplySpec {
            status: p.status.0,
            qpn: p.qpn.value(),
            q_key: p.q_key,
            private_data: p.private_data.clone(),
        }
    }
}

impl TryFrom<SidrReplySpec> for SidrReplyParams {
    type Error = RecordError;
    fn try_from(s: SidrReplySpec) -> Result<SidrReplyParams, RecordError> {
        Ok(SidrReplyParams {
            status: SidrStatus(s.status),
            qpn: qpn(s.qpn, "qpn")?,
            q_key: s.q_key,
            private_data: s.private_data,
        })
    }
}

/// A CM event of one of the application's connections or SIDR requests ([`Event`]),
/// connections named by their local Communication ID, SIDR requests by their number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum EventRecord {
    /// The REQ as its MAD's 232 data bytes.
    ConnectRequest {
        comm_id: u32,
        peer_gid: Ipv6Addr,
        req: Vec<u8>,
    },
    Established {
        comm_id: u32,
        qp: QpRecord,
        private_data: Vec<u8>,
    },
    Rejected {
        comm_id: u32,
        reason: u16,
        private_data: Vec<u8>,
    },
    TimedOut {
        comm_id: u32,
    },
    Disconnected {
        comm_id: u32,
        private_data: Vec<u8>,
    },
    TimeWaitExit {
        comm_id: u32,
    },
    /// The SIDR_REQ as its MAD's 232 data bytes.
    SidrRequest {
        id: u32,
        local_gid: Ipv6Addr,
        peer_gid: Ipv6Addr,
        req: Vec<u8>,
    },
    SidrReply {
        id: u32,
        status: u8,
        qpn: u32,
        q_key: u32,
        private_data: Vec<u8>,
    },
    SidrTimedOut {
        id: u32,
    },
}

impl From<&Event> for EventRecord {
    fn from(ev: &Event) -> EventRecord {
        let comm_id = ev.conn().map_or(0, ConnId::comm_id);
        match ev {
            Event::ConnectRequest(r) => {
                let mut req = vec![0; DATA_LEN];
                r.req.emit(&mut ReqPacket::new_unchecked(&mut req[..]));
                EventRecord::ConnectRequest {
                    comm_id,
                    peer_gid: r.peer_gid,
                    req,
                }
            }
            Event::Established {
                qp, private_data, ..
            } => EventRecord::Established {
                comm_id,
                qp: QpRecord {
                    local_qpn: qp.local_qpn.value(),
                    peer_qpn: qp.peer_qpn.value(),
                    sq_psn: qp.sq_psn.value(),
                    rq_psn: qp.rq_psn.value(),
                    local_gid: qp.local_gid,
                    peer_gid: qp.peer_gid,
                    path_mtu: qp.path_mtu,
                    local_ack_timeout: qp.local_ack_timeout,
                    retry_count: qp.retry_count,
                    rnr_retry_count: qp.rnr_retry_count,
                    max_rd_atomic: qp.max_rd_atomic,
                    max_dest_rd_atomic: qp.max_dest_rd_atomic,
                    p_key: qp.p_key,
                    hop_limit: qp.hop_limit,
                    traffic_class: qp.traffic_class,
                    flow_label: qp.flow_label,
                },
                private_data: private_data.clone(),
            },
            Event::Rejected {
                reason,
                private_data,
                ..
            } => EventRecord::Rejected {
                comm_id,
                reason: reason.0,
                private_data: private_data.clone(),
            },
            Event::TimedOut { .. } => EventRecord::TimedOut { comm_id },
            Event::Disconnected { private_data, .. } => EventRecord::Disconnected {
                comm_id,
                private_data: private_data.clone(),
            },
            Event::TimeWaitExit { .. } => EventRecord::TimeWaitExit { comm_id },
            Event::SidrRequest(r) => {
                let mut req = vec![0; DATA_LEN];
                r.req.emit(&mut SidrReqPacket::new_unchecked(&mut req[..]));
                EventRecord::SidrRequest {
                    id: r.id.value(),
                    local_gid: r.local_gid,
                    peer_gid: r.peer_gid,
                    req,
                }
            }
            Event::SidrReply {
                id,
                status,
                qpn,
                q_key,
                private_data,
            } => EventRecord::SidrReply {
                id: id.value(),
                status: status.0,
                qpn: qpn.value(),
                q_key: *q_key,
                private_data: private_data.clone(),
            },
            Event::SidrTimedOut { id } => EventRecord::SidrTimedOut { id: id.value() },
        }
    }
}

fn qpn(v: u32, field: &'static str) -> Result<Qpn, RecordError> {
    if v >> 24 == 0 {
        Ok(Qpn::new(v))
    } else {
        Err(RecordError::Range(field))
    }
}

impl TryFrom<EventRecord> for Event {
    type Error = RecordError;

    fn try_from(r: EventRecord) -> Result<Event, RecordError> {
        let conn = ConnId::from_comm_id;
        Ok(match r {
            EventRecord::ConnectRequest {
                comm_id,
                peer_gid,
                req,
            } => {
                let p = ReqPacket::new_checked(&req[..]).map_err(|_| RecordError::Malformed)?;
                let req = ReqRepr::parse(&p).map_err(|_| RecordError::Malformed)?;
                // As the CM reads it (cm/mod.rs): a CMA header only on an rdma_cm service ID.
                let cma = ServiceId(req.service_id)
                    .rdma_cm_parts()
                    .and_then(|_| CmaHeader::parse(&req.private_data).ok());
                Event::ConnectRequest(Box::new(ConnectRequest {
                    conn: conn(comm_id),
                    peer_gid,
                    req,
                    cma,
                }))
            }
            EventRecord::Established {
                comm_id,
                qp: q,
                private_data,
            } => Event::Established {
                conn: conn(comm_id),
                qp: QpParams {
                    local_qpn: qpn(q.local_qpn, "local_qpn")?,
                    peer_qpn: qpn(q.peer_qpn, "peer_qpn")?,
                    sq_psn: Psn::new(q.sq_psn),
                    rq_psn: Psn::new(q.rq_psn),
                    local_gid: q.local_gid,
                    peer_gid: q.peer_gid,
                    path_mtu: q.path_mtu,
                    local_ack_timeout: q.local_ack_timeout,
                    retry_count: q.retry_count,
                    rnr_retry_count: q.rnr_retry_count,
                    max_rd_atomic: q.max_rd_atomic,
                    max_dest_rd_atomic: q.max_dest_rd_atomic,
                    p_key: q.p_key,
                    hop_limit: q.hop_limit,
                    traffic_class: q.traffic_class,
                    flow_label: q.flow_label,
                },
                private_data,
            },
            EventRecord::Rejected {
                comm_id,
                reason,
                private_data,
            } => Event::Rejected {
                conn: conn(comm_id),
                reason: RejectReason(reason),
                private_data,
            },
            EventRecord::TimedOut { comm_id } => Event::TimedOut {
                conn: conn(comm_id),
            },
            EventRecord::Disconnected {
                comm_id,
                private_data,
            } => Event::Disconnected {
                conn: conn(comm_id),
                private_data,
            },
            EventRecord::TimeWaitExit { comm_id } => Event::TimeWaitExit {
                conn: conn(comm_id),
            },
            EventRecord::SidrRequest {
                id,
                local_gid,
                peer_gid,
                req,
            } => {
                let p = SidrReqPacket::new_checked(&req[..]).map_err(|_| RecordError::Malformed)?;
                let req = SidrReqRepr::parse(&p).map_err(|_| RecordError::Malformed)?;
                let cma = ServiceId(req.service_id)
                    .rdma_cm_parts()
                    .and_then(|_| CmaHeader::parse(&req.private_data).ok());
                Event::SidrRequest(Box::new(SidrRequest {
                    id: SidrId::from_value(id),
                    local_gid,
                    peer_gid,
                    req,
                    cma,
                }))
            }
            EventRecord::SidrReply {
                id,
                status,
                qpn: q,
                q_key,
                private_data,
            } => Event::SidrReply {
                id: SidrId::from_value(id),
                status: SidrStatus(status),
                qpn: qpn(q, "qpn")?,
                q_key,
                private_data,
            },
            EventRecord::SidrTimedOut { id } => Event::SidrTimedOut {
                id: SidrId::from_value(id),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocev2_core::cm::{CmaAddrs, PortSpace};

    fn req() -> ReqRepr {
        let service = ServiceId::rdma_cm(PortSpace::TCP, 7174);
        let h = CmaHeader {
            src_port: 50000,
            addrs: CmaAddrs::V4 {
                src: [10, 0, 0, 1].into(),
                dst: [10, 0, 0, 2].into(),
            },
        };
        let mut p = ConnectParams::new(
            service,
            "::ffff:10.0.0.1".parse().unwrap(),
            "::ffff:10.0.0.2".parse().unwrap(),
            Qpn::new(0x11),
            Psn::new(0x123456),
        );
        p.private_data = h.private_data(b"hello");
        // The REQ the CM builds from these parameters, as the passive side receives it.
        let mut cm = rocev2_core::cm::Cm::new(rocev2_core::cm::CmConfig { local_ca_guid: 7 }, 1);
        cm.connect(rocev2_core::time::Instant::ZERO, p).unwrap();
        let t = cm.poll_transmit().unwrap();
        let m = rocev2_core::wire::CmRepr::parse_bytes(&t.mad).unwrap();
        let rocev2_core::wire::CmAttribute::Req(r) = m.attribute else {
            panic!("not a REQ: {m:?}")
        };
        r
    }

    #[test]
    fn every_event_round_trips() {
        let r = req();
        let cma = CmaHeader::parse(&r.private_data).ok();
        assert!(cma.is_some());
        let conn = ConnId::from_comm_id(0xdead_beef);
        let events = [
            Event::ConnectRequest(Box::new(ConnectRequest {
                conn,
                peer_gid: "::ffff:10.0.0.1".parse().unwrap(),
                req: r,
                cma,
            })),
            Event::Established {
                conn,
                qp: QpParams {
                    local_qpn: Qpn::new(0x12),
                    peer_qpn: Qpn::new(0x34),
                    sq_psn: Psn::new(1),
                    rq_psn: Psn::new(2),
                    local_gid: Ipv6Addr::LOCALHOST,
                    peer_gid: Ipv6Addr::UNSPECIFIED,
                    path_mtu: 3,
                    local_ack_timeout: 19,
                    retry_count: 7,
                    rnr_retry_count: 6,
                    max_rd_atomic: 1,
                    max_dest_rd_atomic: 2,
                    p_key: 0xffff,
                    hop_limit: 64,
                    traffic_class: 8,
                    flow_label: 5,
                },
                private_data: vec![1, 2],
            },
            Event::Rejected {
                conn,
                reason: RejectReason::INVALID_SERVICE_ID,
                private_data: vec![3],
            },
            Event::TimedOut { conn },
            Event::Disconnected {
                conn,
                private_data: vec![],
            },
            Event::TimeWaitExit { conn },
            Event::SidrRequest(Box::new(SidrRequest {
                id: SidrId::from_value(9),
                local_gid: Ipv6Addr::LOCALHOST,
                peer_gid: "::ffff:10.0.0.1".parse().unwrap(),
                req: SidrReqRepr {
                    request_id: 0x1234,
                    partition_key: 0xffff,
                    service_id: ServiceId::rdma_cm(PortSpace::UDP, 7174).0,
                    private_data: {
                        let mut d = [0u8; 216];
                        d[..41].copy_from_slice(&r.private_data[..41]);
                        d
                    },
                },
                cma,
            })),
            Event::SidrReply {
                id: SidrId::from_value(9),
                status: SidrStatus::SUCCESS,
                qpn: Qpn::new(0x45),
                q_key: rocev2_core::cm::RDMA_UDP_Q_KEY,
                private_data: vec![4; 136],
            },
            Event::SidrTimedOut {
                id: SidrId::from_value(9),
            },
        ];
        for ev in events {
            let bytes = crate::record::encode(&EventRecord::from(&ev));
            let rec: EventRecord = crate::record::decode(&bytes).unwrap();
            assert_eq!(Event::try_from(rec).unwrap(), ev);
        }
    }

    #[test]
    fn connect_and_accept_parameters_round_trip() {
        let mut p = ConnectParams::new(
            ServiceId(0x0106_1c06),
            Ipv6Addr::LOCALHOST,
            Ipv6Addr::UNSPECIFIED,
            Qpn::new(9),
            Psn::new(77),
        );
        p.private_data = vec![9; 40];
        p.flow_label = 3;
        assert_eq!(ConnectSpec::from(&p).params(Qpn::new(9)), p);
        let a = AcceptParams {
            private_data: vec![4; 10],
            ..AcceptParams::new(Qpn::new(5), Psn::new(6))
        };
        assert_eq!(AcceptParams::from(AcceptSpec::from(&a)), a);
    }

    #[test]
    fn a_short_req_or_a_wide_qpn_is_an_error() {
        let short = EventRecord::ConnectRequest {
            comm_id: 1,
            peer_gid: Ipv6Addr::LOCALHOST,
            req: vec![0; 100],
        };
        assert_eq!(Event::try_from(short), Err(RecordError::Malformed));
        let wide = EventRecord::Established {
            comm_id: 1,
            qp: QpRecord {
                local_qpn: 1 << 24,
                peer_qpn: 1,
                sq_psn: 0,
                rq_psn: 0,
                local_gid: Ipv6Addr::LOCALHOST,
                peer_gid: Ipv6Addr::LOCALHOST,
                path_mtu: 3,
                local_ack_timeout: 0,
                retry_count: 0,
                rnr_retry_count: 0,
                max_rd_atomic: 0,
                max_dest_rd_atomic: 0,
                p_key: 0,
                hop_limit: 0,
                traffic_class: 0,
                flow_label: 0,
            },
            private_data: vec![],
        };
        assert_eq!(Event::try_from(wide), Err(RecordError::Range("local_qpn")));
    }
}
