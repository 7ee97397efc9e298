//! Completion-queue and queue-pair handles, and what [`crate::Device::connect`] needs to know
//! about the peer.
//!
//! Deviations from verbs: RC and UD QPs ([`crate::Device::create_ud_qp`]), no UC; one call,
//! [`crate::Device::connect`], does INIT→RTR→RTS.

use rocev2_core::qp::{CqId, ExtCaps, Mtu};
use rocev2_core::srq::SrqId;
use rocev2_core::wire::Qpn;
use rocev2_ipc::proto::ConnectSpec;
use std::net::IpAddr;

/// A completion queue (`ibv_cq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cq(pub(crate) CqId, pub(crate) u64);

impl Cq {
    /// The engine's id.
    pub fn id(&self) -> CqId {
        self.0
    }
}

/// A queue pair (`ibv_qp`): RC, in INIT once created ([`crate::Device::create_rc_qp`]), or
/// UD, in RTS once created ([`crate::Device::create_ud_qp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Qp(pub(crate) Qpn, pub(crate) u64);

impl Qp {
    /// The QP number the peer sends to.
    pub fn qpn(&self) -> Qpn {
        self.0
    }
}

/// A shared receive queue (`ibv_srq`, [`crate::Device::create_srq`]): receive requests that
/// the QPs created with it ([`QpConfig::srq`](rocev2_core::qp::QpConfig::srq) set to
/// [`Srq::id`]) take, in posting order, when a SEND or WRITE with immediate arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Srq(pub(crate) SrqId, pub(crate) u64);

impl Srq {
    /// The engine's id, which a QP's configuration names.
    pub fn id(&self) -> SrqId {
        self.0
    }
}

/// The peer's QP as learned out of band (`ibv_rc_pingpong`'s `LID:QPN:PSN:GID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteQp {
    /// Its QP number.
    pub qpn: Qpn,
    /// The first PSN it sends (our expected PSN), 24 bits.
    pub psn: u32,
    /// Its address (the GID, IPv4-mapped GIDs as IPv4).
    pub ip: IpAddr,
    /// The next hop's MAC address; `None` resolves it through the kernel's route and neighbour
    /// tables (ARP/ND), waiting up to [`ConnectOptions::resolve_timeout`].
    pub mac: Option<[u8; 6]>,
}

/// Settings of [`crate::Device::connect`]; defaults as `ibv_rc_pingpong` sets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectOptions {
    /// First PSN we send (the peer's expected PSN), 24 bits.
    pub local_psn: u32,
    /// Path MTU; lowered to what the interface carries. `ibv_rc_pingpong`: 1024.
    pub mtu: Mtu,
    /// Local ACK timeout code, 4.096 µs · 2^timeout (`ibv_rc_pingpong`: 14, about 67 ms).
    pub timeout: u8,
    /// Retries after a timeout or sequence NAK (`ibv_rc_pingpong`: 7).
    pub retry_cnt: u8,
    /// Retries after an RNR NAK, 7 = infinite (`ibv_rc_pingpong`: 7).
    pub rnr_retry: u8,
    /// RNR NAK timer code we advertise (`ibv_rc_pingpong`: 12, 0.64 ms).
    pub min_rnr_timer: u8,
    /// Outstanding READ/atomics in each direction (`ibv_rc_pingpong`: 1; 16 here, the
    /// device maximum, since READ-heavy users want it).
    pub rd_atomic: u8,
    /// DSCP of every packet (26: the usual RoCE class).
    pub dscp: u8,
    /// Neighbour resolution bound when [`RemoteQp::mac`] is `None`.
    pub resolve_timeout: std::time::Duration,
    /// rocev2 extensions the peer announced out of band (docs/wire.md, "Negotiation"); none by
    /// default, as a standard peer announces. A QP created with
    /// [`crate::QpConfig::with_multipath`] runs MP-RDMA ([`crate::QpMode::MultiPath`]) only if
    /// this has `multipath` set.
    pub peer_ext: ExtCaps,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            local_psn: 0,
            mtu: Mtu::Mtu1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            rd_atomic: 16,
            dscp: 26,
            resolve_timeout: std::time::Duration::from_secs(3),
            peer_ext: ExtCaps::default(),
        }
    }
}

impl ConnectOptions {
    /// What a connect to `remote` with these options asks for, as either backend carries it
    /// out ([`rocev2_datapath::host::connect_attr`] in-process, the daemon's when attached).
    pub(crate) fn spec(&self, remote: &RemoteQp) -> ConnectSpec {
        ConnectSpec {
            dest_qpn: remote.qpn.value(),
            remote_psn: remote.psn,
            ip: remote.ip,
            mac: remote.mac,
            local_psn: self.local_psn,
            mtu: self.mtu.bytes(),
            timeout: self.timeout,
            retry_cnt: self.retry_cnt,
            rnr_retry: self.rnr_retry,
            min_rnr_timer: self.min_rnr_timer,
            rd_atomic: self.rd_atomic,
            dscp: self.dscp,
            resolve_timeout_ms: u32::try_from(self.resolve_timeout.as_millis()).unwrap_or(u32::MAX),
            peer_ext: self.peer_ext.to_word(),
        }
    }
}
