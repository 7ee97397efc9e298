//! CM connection establishment (IBA Vol. 1 §12.6.5–§12.6.9): REQ, MRA, REJ, REP, RTU, and the
//! path record a REQ carries twice.
//!
//! Each message is a view over the 232 data bytes of a CM MAD (see [`super`]); offsets are the
//! IBA tables' (byte 0 = first data byte, bit 0 = most significant):
//!
//! ```text
//! REQ (Table 106): 0 LocalCommID | 4 Rsvd | 5 VendorID(24) | 8 ServiceID(64) | 16 LocalCAGUID(64)
//!   24 Rsvd | 28 LocalQ_Key | 32 LocalQPN(24) 35 ResponderResources | 36 LocalEECN(24) 39 InitiatorDepth
//!   40 RemoteEECN(24) 43 RemoteCMResponseTimeout(5) TransportServiceType(2) E2EFlowControl(1)
//!   44 StartingPSN(24) 47 LocalCMResponseTimeout(5) RetryCount(3) | 48 P_Key(16)
//!   50 PathMTU(4) RDCExists(1) RNRRetryCount(3) | 51 MaxCMRetries(4) SRQ(1) ExtTransportType(3)
//!   52 primary path (44) | 96 alternate path (44; its byte 43 bit 5 is SAP Supported) | 140 PrivateData (92)
//! path: 0 LocalLID | 2 RemoteLID | 4 LocalGID | 20 RemoteGID | 36 FlowLabel(20) Rsvd(6) 39 PacketRate(6)
//!   40 TrafficClass | 41 HopLimit | 42 SL(4) SubnetLocal(1) Rsvd(3) | 43 LocalACKTimeout(5) Rsvd(3)
//! MRA (Table 107): 0 LocalCommID | 4 RemoteCommID | 8 MessageMRAed(2) | 9 ServiceTimeout(5) | 10 PrivateData (222)
//! REJ (Table 108): 0 LocalCommID | 4 RemoteCommID | 8 MessageRejected(2) | 9 RejectInfoLength(7)
//!   10 Reason(16) | 12 ARI (72) | 84 PrivateData (148)
//! REP (Table 110): 0 LocalCommID | 4 RemoteCommID | 8 LocalQ_Key | 12 LocalQPN(24) 15 VendorID[23:16]
//!   16 LocalEEContext(24) 19 VendorID[15:8] | 20 StartingPSN(24) 23 VendorID[7:0]
//!   24 ResponderResources | 25 InitiatorDepth | 26 TargetACKDelay(5) FailoverAccepted(2) E2EFlowControl(1)
//!   27 RNRRetryCount(3) SRQ(1) Rsvd(4) | 28 LocalCAGUID(64) | 36 PrivateData (196)
//! RTU (Table 111): 0 LocalCommID | 4 RemoteCommID | 8 PrivateData (224)
//! ```
//!
//! Timeouts are IBA's 5-bit exponents (4.096 µs · 2^value); nothing here converts them.
//! Reserved bits are ignored on receipt and written as zero.
//!
//! Deviations: none.

use super::{DATA_LEN, array, gid};
use crate::wire::{Error, Psn, Qpn};
use core::fmt;
use core::net::Ipv6Addr;

/// Offset of the primary path in a REQ.
const PRIMARY_PATH: usize = 52;
/// Offset of the alternate path in a REQ.
const ALTERNATE_PATH: usize = 96;
/// Length of a path in a REQ.
const PATH_LEN: usize = 44;

// ---------------------------------------------------------------------------------------------
// Path

mad_view!(
    PathPacket,
    PATH_LEN,
    "A read/write view of one path in a REQ (primary: bytes 52–95, alternate: 96–139)."
);

mad_fields!(PathPacket {
    /// Local Port LID (bytes 0–1): 0xFFFF (permissive) on RoCE, which has no LIDs.
    local_port_lid, set_local_port_lid: u16 = (0, 0, 16);
    /// Remote Port LID (bytes 2–3).
    remote_port_lid, set_remote_port_lid: u16 = (2, 0, 16);
    /// Flow Label (byte 36, bits 0–19): the GRH flow label (IPv6 flow label on RoCEv2).
    flow_label, set_flow_label: u32 = (36, 0, 20);
    /// Packet Rate (byte 39, bits 2–7): the IBA static rate code.
    packet_rate, set_packet_rate: u8 = (39, 2, 6);
    /// Traffic Class (byte 40): the GRH traffic class (DSCP and ECN on RoCEv2).
    traffic_class, set_traffic_class: u8 = (40, 0, 8);
    /// Hop Limit (byte 41).
    hop_limit, set_hop_limit: u8 = (41, 0, 8);
    /// SL (byte 42, bits 0–3): service level.
    sl, set_sl: u8 = (42, 0, 4);
    /// Subnet Local (byte 42, bit 4): 1 when the path stays in the subnet (no GRH needed).
    subnet_local, set_subnet_local: bool = (42, 4, 1);
    /// Local ACK Timeout (byte 43, bits 0–4): 4.096 µs · 2^value.
    local_ack_timeout, set_local_ack_timeout: u8 = (43, 0, 5);
});

impl<T: AsRef<[u8]>> PathPacket<T> {
    /// Local Port GID (bytes 4–19): the sender's GID (`::ffff:a.b.c.d` for IPv4).
    pub fn local_port_gid(&self) -> Ipv6Addr {
        gid(&self.buffer.as_ref()[4..20])
    }
    /// Remote Port GID (bytes 20–35).
    pub fn remote_port_gid(&self) -> Ipv6Addr {
        gid(&self.buffer.as_ref()[20..36])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> PathPacket<T> {
    /// Sets [`Self::local_port_gid`].
    pub fn set_local_port_gid(&mut self, v: Ipv6Addr) {
        self.buffer.as_mut()[4..20].copy_from_slice(&v.octets());
    }
    /// Sets [`Self::remote_port_gid`].
    pub fn set_remote_port_gid(&mut self, v: Ipv6Addr) {
        self.buffer.as_mut()[20..36].copy_from_slice(&v.octets());
    }
}

/// The meaning of a path in a REQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct PathRepr {
    pub local_port_lid: u16,
    pub remote_port_lid: u16,
    pub local_port_gid: Ipv6Addr,
    pub remote_port_gid: Ipv6Addr,
    pub flow_label: u32,
    pub packet_rate: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
    pub sl: u8,
    pub subnet_local: bool,
    pub local_ack_timeout: u8,
}

impl PathRepr {
    /// An all-zero path: a REQ's alternate path when there is none.
    pub const NONE: PathRepr = PathRepr {
        local_port_lid: 0,
        remote_port_lid: 0,
        local_port_gid: Ipv6Addr::UNSPECIFIED,
        remote_port_gid: Ipv6Addr::UNSPECIFIED,
        flow_label: 0,
        packet_rate: 0,
        traffic_class: 0,
        hop_limit: 0,
        sl: 0,
        subnet_local: false,
        local_ack_timeout: 0,
    };

    /// Reads a path.
    pub fn parse<T: AsRef<[u8]>>(p: &PathPacket<T>) -> Self {
        PathRepr {
            local_port_lid: p.local_port_lid(),
            remote_port_lid: p.remote_port_lid(),
            local_port_gid: p.local_port_gid(),
            remote_port_gid: p.remote_port_gid(),
            flow_label: p.flow_label(),
            packet_rate: p.packet_rate(),
            traffic_class: p.traffic_class(),
            hop_limit: p.hop_limit(),
            sl: p.sl(),
            subnet_local: p.subnet_local(),
            local_ack_timeout: p.local_ack_timeout(),
        }
    }
    /// Writes a path over zeroed bytes (reserved bits are left as found).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut PathPacket<T>) {
        p.set_local_port_lid(self.local_port_lid);
        p.set_remote_port_lid(self.remote_port_lid);
        p.set_local_port_gid(self.local_port_gid);
        p.set_remote_port_gid(self.remote_port_gid);
        p.set_flow_label(self.flow_label);
        p.set_packet_rate(self.packet_rate);
        p.set_traffic_class(self.traffic_class);
        p.set_hop_limit(self.hop_limit);
        p.set_sl(self.sl);
        p.set_subnet_local(self.subnet_local);
        p.set_local_ack_timeout(self.local_ack_timeout);
    }
}

// ---------------------------------------------------------------------------------------------
// REQ

mad_view!(
    ReqPacket,
    DATA_LEN,
    "A read/write view of a ConnectRequest (REQ, §12.6.5, Table 106)."
);

mad_fields!(ReqPacket {
    /// Local Communication ID (bytes 0–3): the active side's handle for this connection.
    local_comm_id, set_local_comm_id: u32 = (0, 0, 32);
    /// VendorID (bytes 5–7): the sender's OUI for vendor extensions; 0 from Linux.
    vendor_id, set_vendor_id: u32 = (5, 0, 24);
    /// Local Q_Key (bytes 28–31): only meaningful for RD; 0 for RC.
    local_q_key, set_local_q_key: u32 = (28, 0, 32);
    /// Local QPN (bytes 32–34): the active side's QP.
    local_qpn, set_local_qpn: Qpn = (32, 0, 24);
    /// Responder Resources (byte 35): RDMA READ/atomic requests the sender accepts in flight.
    responder_resources, set_responder_resources: u8 = (35, 0, 8);
    /// Local EECN (bytes 36–38): RD only.
    local_eecn, set_local_eecn: u32 = (36, 0, 24);
    /// Initiator Depth (byte 39): RDMA READ/atomic requests the sender issues in flight.
    initiator_depth, set_initiator_depth: u8 = (39, 0, 8);
    /// Remote EECN (bytes 40–42): RD only.
    remote_eecn, set_remote_eecn: u32 = (40, 0, 24);
    /// Remote CM Response Timeout (byte 43, bits 0–4): how long the passive side may take to
    /// answer, 4.096 µs · 2^value.
    remote_cm_response_timeout, set_remote_cm_response_timeout: u8 = (43, 0, 5);
    /// Transport Service Type (byte 43, bits 5–6): 0 RC, 1 UC, 2 RD, 3 reserved.
    transport_service_type, set_transport_service_type: u8 = (43, 5, 2);
    /// End-to-End Flow Control (byte 43, bit 7).
    end_to_end_flow_control, set_end_to_end_flow_control: bool = (43, 7, 1);
    /// Starting PSN (bytes 44–46): where the active side's receive queue starts, so the first
    /// PSN the *passive* side sends (Linux `cm.c`: the active side's rq_psn, the passive
    /// side's sq_psn; `rping_cm.pcap` agrees: the server's first request carries it).
    starting_psn, set_starting_psn: Psn = (44, 0, 24);
    /// Local CM Response Timeout (byte 47, bits 0–4).
    local_cm_response_timeout, set_local_cm_response_timeout: u8 = (47, 0, 5);
    /// Retry Count (byte 47, bits 5–7): transport retries after a local ACK timeout.
    retry_count, set_retry_count: u8 = (47, 5, 3);
    /// Partition Key (bytes 48–49): the connection's P_Key.
    partition_key, set_partition_key: u16 = (48, 0, 16);
    /// Path Packet Payload MTU (byte 50, bits 0–3): 1 = 256 … 5 = 4096 bytes.
    path_packet_payload_mtu, set_path_packet_payload_mtu: u8 = (50, 0, 4);
    /// RDC Exists (byte 50, bit 4): RD only.
    rdc_exists, set_rdc_exists: bool = (50, 4, 1);
    /// RNR Retry Count (byte 50, bits 5–7): 7 means retry forever.
    rnr_retry_count, set_rnr_retry_count: u8 = (50, 5, 3);
    /// Max CM Retries (byte 51, bits 0–3): how often the CM resends this REQ.
    max_cm_retries, set_max_cm_retries: u8 = (51, 0, 4);
    /// SRQ (byte 51, bit 4): the active side's QP uses a shared receive queue.
    srq, set_srq: bool = (51, 4, 1);
    /// Extended Transport Type (byte 51, bits 5–7): 0 none, 3 XRC.
    extended_transport_type, set_extended_transport_type: u8 = (51, 5, 3);
    /// SAP Supported (byte 139, bit 5: the alternate path's reserved bits).
    sap_supported, set_sap_supported: bool = (139, 5, 1);
});

mad_bytes!(ReqPacket {
    /// ServiceID (bytes 8–15): what the passive side listens on. rdma_cm's IP services are
    /// `0x0000_0000_01PP_pppp` (PP = port space, 0x06 = RDMA_PS_TCP; pppp = port).
    service_id, set_service_id: u64 = 8;
    /// Local CA GUID (bytes 16–23): the sender's channel adapter.
    local_ca_guid, set_local_ca_guid: u64 = 16;
} {
    /// PrivateData (bytes 140–231): 92 bytes for the consumer (rdma_cm's IP header first).
    private_data, set_private_data: [u8; 92] = 140;
});

impl<T: AsRef<[u8]>> ReqPacket<T> {
    /// The primary path (bytes 52–95).
    pub fn primary_path(&self) -> PathPacket<&[u8]> {
        PathPacket::new_unchecked(&self.buffer.as_ref()[PRIMARY_PATH..PRIMARY_PATH + PATH_LEN])
    }
    /// The alternate path (bytes 96–139), all zero when there is none.
    pub fn alternate_path(&self) -> PathPacket<&[u8]> {
        PathPacket::new_unchecked(&self.buffer.as_ref()[ALTERNATE_PATH..ALTERNATE_PATH + PATH_LEN])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ReqPacket<T> {
    /// The primary path, writable.
    pub fn primary_path_mut(&mut self) -> PathPacket<&mut [u8]> {
        PathPacket::new_unchecked(&mut self.buffer.as_mut()[PRIMARY_PATH..PRIMARY_PATH + PATH_LEN])
    }
    /// The alternate path, writable.
    pub fn alternate_path_mut(&mut self) -> PathPacket<&mut [u8]> {
        PathPacket::new_unchecked(
            &mut self.buffer.as_mut()[ALTERNATE_PATH..ALTERNATE_PATH + PATH_LEN],
        )
    }
}

/// The meaning of a REQ. Field meanings are on [`ReqPacket`]'s getters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct ReqRepr {
    pub local_comm_id: u32,
    pub vendor_id: u32,
    pub service_id: u64,
    pub local_ca_guid: u64,
    pub local_q_key: u32,
    pub local_qpn: Qpn,
    pub responder_resources: u8,
    pub local_eecn: u32,
    pub initiator_depth: u8,
    pub remote_eecn: u32,
    pub remote_cm_response_timeout: u8,
    pub transport_service_type: u8,
    pub end_to_end_flow_control: bool,
    pub starting_psn: Psn,
    pub local_cm_response_timeout: u8,
    pub retry_count: u8,
    pub partition_key: u16,
    pub path_packet_payload_mtu: u8,
    pub rdc_exists: bool,
    pub rnr_retry_count: u8,
    pub max_cm_retries: u8,
    pub srq: bool,
    pub extended_transport_type: u8,
    pub primary_path: PathRepr,
    pub alternate_path: PathRepr,
    pub sap_supported: bool,
    pub private_data: [u8; 92],
}

impl ReqRepr {
    /// Reads a REQ; every bit pattern is a valid REQ (code points are kept as numbers).
    pub fn parse<T: AsRef<[u8]>>(p: &ReqPacket<T>) -> Result<Self, Error> {
        Ok(ReqRepr {
            local_comm_id: p.local_comm_id(),
            vendor_id: p.vendor_id(),
            service_id: p.service_id(),
            local_ca_guid: p.local_ca_guid(),
            local_q_key: p.local_q_key(),
            local_qpn: p.local_qpn(),
            responder_resources: p.responder_resources(),
            local_eecn: p.local_eecn(),
            initiator_depth: p.initiator_depth(),
            remote_eecn: p.remote_eecn(),
            remote_cm_response_timeout: p.remote_cm_response_timeout(),
            transport_service_type: p.transport_service_type(),
            end_to_end_flow_control: p.end_to_end_flow_control(),
            starting_psn: p.starting_psn(),
            local_cm_response_timeout: p.local_cm_response_timeout(),
            retry_count: p.retry_count(),
            partition_key: p.partition_key(),
            path_packet_payload_mtu: p.path_packet_payload_mtu(),
            rdc_exists: p.rdc_exists(),
            rnr_retry_count: p.rnr_retry_count(),
            max_cm_retries: p.max_cm_retries(),
            srq: p.srq(),
            extended_transport_type: p.extended_transport_type(),
            primary_path: PathRepr::parse(&p.primary_path()),
            alternate_path: PathRepr::parse(&p.alternate_path()),
            sap_supported: p.sap_supported(),
            private_data: array(p.private_data()),
        })
    }
    /// Bytes [`Self::emit`] writes (the whole data area).
    pub const fn buffer_len(&self) -> usize {
        DATA_LEN
    }
    /// Writes a REQ over zeroed bytes (as [`super::CmRepr::emit`] provides).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut ReqPacket<T>) {
        p.set_local_comm_id(self.local_comm_id);
        p.set_vendor_id(self.vendor_id);
        p.set_service_id(self.service_id);
        p.set_local_ca_guid(self.local_ca_guid);
        p.set_local_q_key(self.local_q_key);
        p.set_local_qpn(self.local_qpn);
        p.set_responder_resources(self.responder_resources);
        p.set_local_eecn(self.local_eecn);
        p.set_initiator_depth(self.initiator_depth);
        p.set_remote_eecn(self.remote_eecn);
        p.set_remote_cm_response_timeout(self.remote_cm_response_timeout);
        p.set_transport_service_type(self.transport_service_type);
        p.set_end_to_end_flow_control(self.end_to_end_flow_control);
        p.set_starting_psn(self.starting_psn);
        p.set_local_cm_response_timeout(self.local_cm_response_timeout);
        p.set_retry_count(self.retry_count);
        p.set_partition_key(self.partition_key);
        p.set_path_packet_payload_mtu(self.path_packet_payload_mtu);
        p.set_rdc_exists(self.rdc_exists);
        p.set_rnr_retry_count(self.rnr_retry_count);
        p.set_max_cm_retries(self.max_cm_retries);
        p.set_srq(self.srq);
        p.set_extended_transport_type(self.extended_transport_type);
        self.primary_path.emit(&mut p.primary_path_mut());
        self.alternate_path.emit(&mut p.alternate_path_mut());
        p.set_sap_supported(self.sap_supported);
        p.set_private_data(&self.private_data);
    }
}

impl fmt::Display for ReqRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CM REQ lcid={:#010x} sid={:#018x} qpn={} psn={} pkey={:#06x} {} -> {}",
            self.local_comm_id,
            self.service_id,
            self.local_qpn,
            self.starting_psn,
            self.partition_key,
            self.primary_path.local_port_gid,
            self.primary_path.remote_port_gid
        )
    }
}

// ---------------------------------------------------------------------------------------------
// MRA

mad_view!(
    MraPacket,
    DATA_LEN,
    "A read/write view of a MsgRcptAck (MRA, §12.6.6, Table 107)."
);

mad_fields!(MraPacket {
    /// Local Communication ID (bytes 0–3): the sender's.
    local_comm_id, set_local_comm_id: u32 = (0, 0, 32);
    /// Remote Communication ID (bytes 4–7): the receiver's.
    remote_comm_id, set_remote_comm_id: u32 = (4, 0, 32);
    /// Message MRAed (byte 8, bits 0–1): 0 REQ, 1 REP, 2 LAP, 3 reserved.
    message_mraed, set_message_mraed: u8 = (8, 0, 2);
    /// Service Timeout (byte 9, bits 0–4): how much longer the sender needs,
    /// 4.096 µs · 2^value.
    service_timeout, set_service_timeout: u8 = (9, 0, 5);
});

mad_bytes!(MraPacket {} {
    /// PrivateData (bytes 10–231): 222 bytes.
    private_data, set_private_data: [u8; 222] = 10;
});

/// The meaning of an MRA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct MraRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub message_mraed: u8,
    pub service_timeout: u8,
    pub private_data: [u8; 222],
}

impl MraRepr {
    /// Reads an MRA.
    pub fn parse<T: AsRef<[u8]>>(p: &MraPacket<T>) -> Result<Self, Error> {
        Ok(MraRepr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            message_mraed: p.message_mraed(),
            service_timeout: p.service_timeout(),
            private_data: array(p.private_data()),
        })
    }
    /// Bytes [`Self::emit`] writes (the whole data area).
    pub const fn buffer_len(&self) -> usize {
        DATA_LEN
    }
    /// Writes an MRA over zeroed bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut MraPacket<T>) {
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_message_mraed(self.message_mraed);
        p.set_service_timeout(self.service_timeout);
        p.set_private_data(&self.private_data);
    }
}

impl fmt::Display for MraRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CM MRA lcid={:#010x} rcid={:#010x} msg={} timeout={}",
            self.local_comm_id, self.remote_comm_id, self.message_mraed, self.service_timeout
        )
    }
}

// ---------------------------------------------------------------------------------------------
// REJ

mad_view!(
    RejPacket,
    DATA_LEN,
    "A read/write view of a ConnectReject (REJ, §12.6.7, Table 108)."
);

mad_fields!(RejPacket {
    /// Local Communication ID (bytes 0–3): the sender's.
    local_comm_id, set_local_comm_id: u32 = (0, 0, 32);
    /// Remote Communication ID (bytes 4–7): the receiver's, 0 if unknown.
    remote_comm_id, set_remote_comm_id: u32 = (4, 0, 32);
    /// Message REJected (byte 8, bits 0–1): 0 REQ, 1 REP, 2 no message / other.
    message_rejected, set_message_rejected: u8 = (8, 0, 2);
    /// Reject Info Length (byte 9, bits 0–6): valid bytes in the ARI (kept as sent, even
    /// above 72).
    reject_info_length, set_reject_info_length: u8 = (9, 0, 7);
    /// Reason (bytes 10–11): see [`crate::cm::RejectReason`].
    reason, set_reason: u16 = (10, 0, 16);
});

mad_bytes!(RejPacket {} {
    /// Additional Reject Information (bytes 12–83): 72 bytes, meaning set by the reason.
    ari, set_ari: [u8; 72] = 12;
    /// PrivateData (bytes 84–231): 148 bytes.
    private_data, set_private_data: [u8; 148] = 84;
});

/// The meaning of a REJ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct RejRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub message_rejected: u8,
    pub reject_info_length: u8,
    pub reason: u16,
    pub ari: [u8; 72],
    pub private_data: [u8; 148],
}

impl RejRepr {
    /// Reads a REJ.
    pub fn parse<T: AsRef<[u8]>>(p: &RejPacket<T>) -> Result<Self, Error> {
        Ok(RejRepr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            message_rejected: p.message_rejected(),
            reject_info_length: p.reject_info_length(),
            reason: p.reason(),
            ari: array(p.ari()),
            private_data: array(p.private_data()),
        })
    }
    /// Bytes [`Self::emit`] writes (the whole data area).
    pub const fn buffer_len(&self) -> usize {
        DATA_LEN
    }
    /// Writes a REJ over zeroed bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut RejPacket<T>) {
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_message_rejected(self.message_rejected);
        p.set_reject_info_length(self.reject_info_length);
        p.set_reason(self.reason);
        p.set_ari(&self.ari);
        p.set_private_data(&self.private_data);
    }
}

impl fmt::Display for RejRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CM REJ lcid={:#010x} rcid={:#010x} msg={} reason={}",
            self.local_comm_id, self.remote_comm_id, self.message_rejected, self.reason
        )
    }
}

// ---------------------------------------------------------------------------------------------
// REP

mad_view!(
    RepPacket,
    DATA_LEN,
    "A read/write view of a ConnectReply (REP, §12.6.8, Table 110)."
);

mad_fields!(RepPacket {
    /// Local Communication ID (bytes 0–3): the passive side's.
    local_comm_id, set_local_comm_id: u32 = (0, 0, 32);
    /// Remote Communication ID (bytes 4–7): the REQ's Local Communication ID.
    remote_comm_id, set_remote_comm_id: u32 = (4, 0, 32);
    /// Local Q_Key (bytes 8–11): RD only.
    local_q_key, set_local_q_key: u32 = (8, 0, 32);
    /// Local QPN (bytes 12–14): the passive side's QP.
    local_qpn, set_local_qpn: Qpn = (12, 0, 24);
    /// VendorID bits 23–16 (byte 15).
    vendor_id_h, set_vendor_id_h: u8 = (15, 0, 8);
    /// Local EE Context Number (bytes 16–18): RD only.
    local_ee_context_number, set_local_ee_context_number: u32 = (16, 0, 24);
    /// VendorID bits 15–8 (byte 19).
    vendor_id_m, set_vendor_id_m: u8 = (19, 0, 8);
    /// Starting PSN (bytes 20–22): where the passive side's receive queue starts, so the first
    /// PSN the *active* side sends.
    starting_psn, set_starting_psn: Psn = (20, 0, 24);
    /// VendorID bits 7–0 (byte 23).
    vendor_id_l, set_vendor_id_l: u8 = (23, 0, 8);
    /// Responder Resources (byte 24).
    responder_resources, set_responder_resources: u8 = (24, 0, 8);
    /// Initiator Depth (byte 25).
    initiator_depth, set_initiator_depth: u8 = (25, 0, 8);
    /// Target ACK Delay (byte 26, bits 0–4): the responder's ACK turnaround,
    /// 4.096 µs · 2^value.
    target_ack_delay, set_target_ack_delay: u8 = (26, 0, 5);
    /// Failover Accepted (byte 26, bits 5–6): 0 accepted, 1 not supported, 2 rejected.
    failover_accepted, set_failover_accepted: u8 = (26, 5, 2);
    /// End-to-End Flow Control (byte 26, bit 7).
    end_to_end_flow_control, set_end_to_end_flow_control: bool = (26, 7, 1);
    /// RNR Retry Count (byte 27, bits 0–2).
    rnr_retry_count, set_rnr_retry_count: u8 = (27, 0, 3);
    /// SRQ (byte 27, bit 3).
    srq, set_srq: bool = (27, 3, 1);
});

mad_bytes!(RepPacket {
    /// Local CA GUID (bytes 28–35).
    local_ca_guid, set_local_ca_guid: u64 = 28;
} {
    /// PrivateData (bytes 36–231): 196 bytes.
    private_data, set_private_data: [u8; 196] = 36;
});

/// The meaning of a REP. `vendor_id` joins the three VendorID bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct RepRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub local_q_key: u32,
    pub local_qpn: Qpn,
    pub local_ee_context_number: u32,
    pub vendor_id: u32,
    pub starting_psn: Psn,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub target_ack_delay: u8,
    pub failover_accepted: u8,
    pub end_to_end_flow_control: bool,
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub local_ca_guid: u64,
    pub private_data: [u8; 196],
}

impl RepRepr {
    /// Reads a REP.
    pub fn parse<T: AsRef<[u8]>>(p: &RepPacket<T>) -> Result<Self, Error> {
        Ok(RepRepr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            local_q_key: p.local_q_key(),
            local_qpn: p.local_qpn(),
            local_ee_context_number: p.local_ee_context_number(),
            vendor_id: u32::from_be_bytes([0, p.vendor_id_h(), p.vendor_id_m(), p.vendor_id_l()]),
            starting_psn: p.starting_psn(),
            responder_resources: p.responder_resources(),
            initiator_depth: p.initiator_depth(),
            target_ack_delay: p.target_ack_delay(),
            failover_accepted: p.failover_accepted(),
            end_to_end_flow_control: p.end_to_end_flow_control(),
            rnr_retry_count: p.rnr_retry_count(),
            srq: p.srq(),
            local_ca_guid: p.local_ca_guid(),
            private_data: array(p.private_data()),
        })
    }
    /// Bytes [`Self::emit`] writes (the whole data area).
    pub const fn buffer_len(&self) -> usize {
        DATA_LEN
    }
    /// Writes a REP over zeroed bytes; VendorID bits above 23 are dropped.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut RepPacket<T>) {
        let [_, h, m, l] = self.vendor_id.to_be_bytes();
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_local_q_key(self.local_q_key);
        p.set_local_qpn(self.local_qpn);
        p.set_vendor_id_h(h);
        p.set_local_ee_context_number(self.local_ee_context_number);
        p.set_vendor_id_m(m);
        p.set_starting_psn(self.starting_psn);
        p.set_vendor_id_l(l);
        p.set_responder_resources(self.responder_resources);
        p.set_initiator_depth(self.initiator_depth);
        p.set_target_ack_delay(self.target_ack_delay);
        p.set_failover_accepted(self.failover_accepted);
        p.set_end_to_end_flow_control(self.end_to_end_flow_control);
        p.set_rnr_retry_count(self.rnr_retry_count);
        p.set_srq(self.srq);
        p.set_local_ca_guid(self.local_ca_guid);
        p.set_private_data(&self.private_data);
    }
}

impl fmt::Display for RepRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CM REP lcid={:#010x} rcid={:#010x} qpn={} psn={}",
            self.local_comm_id, self.remote_comm_id, self.local_qpn, self.starting_psn
        )
    }
}

// ---------------------------------------------------------------------------------------------
// RTU

mad_view!(
    RtuPacket,
    DATA_LEN,
    "A read/write view of a ReadyToUse (RTU, §12.6.9, Table 111)."
);

mad_fields!(RtuPacket {
    /// Local Communication ID (bytes 0–3): the active side's.
    local_comm_id, set_local_comm_id: u32 = (0, 0, 32);
    /// Remote Communication ID (bytes 4–7): the passive side's.
    remote_comm_id, set_remote_comm_id: u32 = (4, 0, 32);
});

mad_bytes!(RtuPacket {} {
    /// PrivateData (bytes 8–231): 224 bytes.
    private_data, set_private_data: [u8; 224] = 8;
});

/// The meaning of an RTU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct RtuRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: [u8; 224],
}

impl RtuRepr {
    /// Reads an RTU.
    pub fn parse<T: AsRef<[u8]>>(p: &RtuPacket<T>) -> Result<Self, Error> {
        Ok(RtuRepr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            private_data: array(p.private_data()),
        })
    }
    /// Bytes [`Self::emit`] writes (the whole data area).
    pub const fn buffer_len(&self) -> usize {
        DATA_LEN
    }
    /// Writes an RTU.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut RtuPacket<T>) {
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_private_data(&self.private_data);
    }
}

impl fmt::Display for RtuRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CM RTU lcid={:#010x} rcid={:#010x}",
            self.local_comm_id, self.remote_comm_id
        )
    }
}

#[cfg(test)]
mod tests;
