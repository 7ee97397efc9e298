//! The Communication Manager (IBA Vol. 1 chapter 12): connects and disconnects RC QPs by
//! exchanging CM MADs (REQ, MRA, REJ, REP, RTU, DREQ, DREP; wire formats in
//! [`crate::wire::mad`]) with a peer's QP1, and resolves UD services' QPN and Q_Key (SIDR_REQ,
//! SIDR_REP: [`sidr`]), sans IO.
//!
//! [`Cm`] owns every connection, keyed by its local Communication ID ([`ConnId`]). It is driven
//! like quinn-proto's `Endpoint`:
//!
//! * received MADs go in through [`Cm::handle_mad`] (UD payloads from QP1, with the GIDs of the
//!   frame they came in);
//! * MADs to send come out of [`Cm::poll_transmit`], each for the peer's QP1 (Q_Key
//!   [`GSI_Q_KEY`](crate::wire::GSI_Q_KEY), default P_Key);
//! * timers: [`Cm::poll_timeout`] names the earliest deadline, [`Cm::handle_timeout`] runs what
//!   is due;
//! * the application calls [`Cm::listen`], [`Cm::connect`], [`Cm::accept`], [`Cm::reject`],
//!   [`Cm::send_mra`], [`Cm::disconnect`], [`Cm::sidr_request`] and [`Cm::sidr_reply`], and
//!   reads [`Event`]s from [`Cm::poll_event`].
//!
//! The CM never touches a QP: [`Event::Established`] carries what the application needs to move
//! its QP through INIT → RTR → RTS ([`QpParams`]: the peer's QPN, both start PSNs, the path);
//! [`Event::ConnectRequest`] carries the REQ, for the passive side to pick its QP before it
//! accepts. Drain [`Cm::poll_event`] before [`Cm::poll_transmit`]: the RTU that
//! follows a REP, and the DREP that answers a DREQ, are queued with the event that announces
//! them, and should reach the wire only once the QP has been moved.
//!
//! Communication IDs and transaction IDs come from a ChaCha12 generator seeded by the caller;
//! time comes in as [`Instant`]. The same seed and inputs give the same bytes.
//!
//! # Engine shards
//!
//! An endpoint that is one engine shard of several on an interface (QPN block k,
//! [`crate::Endpoint::with_qpn_block`]) runs its own CM, whose local Communication IDs carry the
//! block in their top six bits ([`Cm::with_comm_id_block`], [`comm_id_block`]), and so do the
//! Request IDs of its SIDR requests. Every MAD but a REQ and a SIDR_REQ names its receiver's
//! Communication ID in its Remote Communication ID (a SIDR_REP: its Request ID), so [`route`]
//! can say which shard's CM a received MAD is for before any CM sees it: the datapath hands MRA,
//! REJ, REP, RTU, DREQ, DREP and SIDR_REP to the shard of that block, a REQ or SIDR_REQ to the
//! shard that listens on its Service ID, everything else to the shard it reached
//! (`docs/datapath.md`, "Several queues").
//!
//! Bad input (a MAD that does not parse, an unknown Communication ID, a message the state does
//! not expect) is counted in [`CmStats`] and dropped or answered as Linux's CM does; it never
//! panics. See `docs/cm.md` for the state machine and what is interoperable.
//!
//! Deviations: those of the state machine, listed in `cm/conn.rs` and `docs/cm.md`.

mod conn;
mod event;
pub mod service;
pub mod sidr;

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::vec::Vec;
use core::net::Ipv6Addr;

use rand_chacha::ChaCha12Rng;
use rand_core::{RngCore, SeedableRng};

use crate::time::{Duration, Instant};
use crate::wire::Qpn;
use crate::wire::mad::class_port_info::ClassPortInfoRepr;
use crate::wire::mad::cm_connect::{RejRepr, ReqRepr};
use crate::wire::mad::cm_disconnect::DrepRepr;
pub use crate::wire::mad::cm_sidr::SidrStatus;
use crate::wire::mad::{CmAttribute, CmRepr, MAD_LEN, array, method};
use conn::Conn;
pub use conn::State;
pub use event::{AcceptParams, ConnectParams, ConnectRequest, Event, QpParams};
pub use service::{CmaAddrs, CmaError, CmaHeader, PortSpace, RDMA_UDP_Q_KEY, ServiceId};
pub use sidr::{SidrId, SidrParams, SidrReplyParams, SidrRequest};

/// What a Get(ClassPortInfo) is answered with (IBA §13.4.8.1): MAD base version 1, CM class
/// version 2, no optional capability (no traps, notices or redirection), and a response time
/// of 2^20 · 4.096 µs (4.3 s), the CM response timeout our REQs announce.
const CLASS_PORT_INFO: ClassPortInfoRepr = ClassPortInfoRepr {
    base_version: crate::wire::mad::BASE_VERSION,
    class_version: crate::wire::mad::CM_CLASS_VERSION,
    capability_mask: 0,
    capability_mask2: 0,
    resp_time_value: 20,
    redirect_gid: Ipv6Addr::UNSPECIFIED,
    redirect_tc: 0,
    redirect_sl: 0,
    redirect_fl: 0,
    redirect_lid: 0,
    redirect_p_key: 0,
    redirect_qp: Qpn::new(0),
    redirect_q_key: 0,
    trap_gid: Ipv6Addr::UNSPECIFIED,
    trap_tc: 0,
    trap_sl: 0,
    trap_fl: 0,
    trap_lid: 0,
    trap_p_key: 0,
    trap_hl: 0,
    trap_qp: Qpn::new(0),
    trap_q_key: 0,
};

/// log2 of the Communication IDs of one shard's block: a local Communication ID's top six bits
/// (32 − 26) are its CM's block when it has one ([`Cm::with_comm_id_block`]), as a QPN's top six
/// are its endpoint's ([`crate::endpoint::QPN_BLOCK_SHIFT`]); both count
/// [`crate::qpn_block::QPN_BLOCKS`] blocks.
pub const COMM_ID_BLOCK_SHIFT: u32 = 26;

/// The block a local Communication ID was allocated in by a CM with a block: its top six bits.
pub const fn comm_id_block(comm_id: u32) -> u32 {
    comm_id >> COMM_ID_BLOCK_SHIFT
}

/// Which CM a MAD received on QP1 is for, read by [`route`] without touching any CM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MadRoute {
    /// A REQ or SIDR_REQ: for the CM that listens on `service_id`.
    Req {
        /// The REQ's or SIDR_REQ's Service ID.
        service_id: ServiceId,
    },
    /// An MRA, REJ, REP, RTU, DREQ, DREP or SIDR_REP: for the CM that allocated `comm_id`, its
    /// Remote Communication ID or Request ID (nonzero), whose block is
    /// [`comm_id_block`]`(comm_id)`.
    Ours(u32),
    /// Anything else (ClassPortInfo, another method or class, bytes that are no CM MAD, a REJ
    /// that names no Communication ID of ours): for the CM it reached, which answers or counts
    /// it as it does today.
    Any,
}

/// Where a MAD received on QP1 (`mad`: the UD payload, trailing bytes ignored) belongs; see
/// [`MadRoute`]. Pure, and never panics: bytes that do not parse as a CM MAD of method Send are
/// [`MadRoute::Any`].
pub fn route(mad: &[u8]) -> MadRoute {
    let Ok(m) = CmRepr::parse_bytes(mad) else {
        return MadRoute::Any;
    };
    if m.method != method::SEND {
        return MadRoute::Any;
    }
    let ours = match &m.attribute {
        CmAttribute::Req(req) => {
            return MadRoute::Req {
                service_id: ServiceId(req.service_id),
            };
        }
        CmAttribute::SidrReq(req) => {
            return MadRoute::Req {
                service_id: ServiceId(req.service_id),
            };
        }
        CmAttribute::ClassPortInfo(_) => return MadRoute::Any,
        CmAttribute::SidrRep(x) => x.request_id,
        CmAttribute::Mra(x) => x.remote_comm_id,
        CmAttribute::Rej(x) => x.remote_comm_id,
        CmAttribute::Rep(x) => x.remote_comm_id,
        CmAttribute::Rtu(x) => x.remote_comm_id,
        CmAttribute::Dreq(x) => x.remote_comm_id,
        CmAttribute::Drep(x) => x.remote_comm_id,
    };
    // 0 is never a local Communication ID: a REJ "Timeout" from an active side that gave up
    // before any REP (`Cm::find` identifies its REQ by the ARI instead).
    match ours {
        0 => MadRoute::Any,
        id => MadRoute::Ours(id),
    }
}

/// A connection's handle: its local Communication ID, never 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(u32);

impl ConnId {
    /// The local Communication ID the MADs carry.
    pub const fn comm_id(self) -> u32 {
        self.0
    }

    /// The handle of the connection whose local Communication ID is `comm_id`, as a process
    /// that does not run the CM itself names it (an application attached to `rocev2d`); the
    /// CM refuses an ID it does not hold ([`CmError::UnknownConn`]).
    pub const fn from_comm_id(comm_id: u32) -> ConnId {
        ConnId(comm_id)
    }
}

/// IBA's CM timeout encoding (§12.6.5, Table 106: "4.096 µs · 2^value"), for 5-bit values.
pub const fn cm_timeout(exponent: u8) -> Duration {
    Duration::from_nanos(4096u64 << (exponent & 0x1f))
}

/// A REJ's Reason (IBA §12.6.7.2; Linux `enum ib_cm_rej_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RejectReason(pub u16);

impl RejectReason {
    /// No QP available.
    pub const NO_QP: RejectReason = RejectReason(1);
    /// No resources.
    pub const NO_RESOURCES: RejectReason = RejectReason(3);
    /// The sender gave up waiting (its retries ran out); the ARI holds its CA GUID.
    pub const TIMEOUT: RejectReason = RejectReason(4);
    /// A REP for a Communication ID the receiver does not know.
    pub const INVALID_COMM_ID: RejectReason = RejectReason(6);
    /// Nobody listens on the REQ's Service ID (rdma_cm: "connection refused").
    pub const INVALID_SERVICE_ID: RejectReason = RejectReason(8);
    /// The REQ asks for a transport other than RC.
    pub const INVALID_TRANSPORT_TYPE: RejectReason = RejectReason(9);
    /// The consumer said no ([`Cm::reject`]; rdma_cm's `rdma_reject`).
    pub const CONSUMER: RejectReason = RejectReason(28);
}

/// What [`Cm`] needs to know about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmConfig {
    /// The local CA GUID REQs and REPs carry (Linux: the node GUID). The passive side keys
    /// duplicate REQs by the sender's (Linux `cm_insert_remote_id`).
    pub local_ca_guid: u64,
}

/// A MAD to send to a peer's QP1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Our GID: the frame's source address.
    pub local_gid: Ipv6Addr,
    /// The peer's GID: the frame's destination address.
    pub peer_gid: Ipv6Addr,
    /// The whole MAD, the UD payload.
    pub mad: [u8; MAD_LEN],
}

/// Why an application call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    /// No such connection (never was, or past its time-wait), or no such SIDR request waiting
    /// for an answer.
    #[error("unknown connection")]
    UnknownConn,
    /// The connection's state does not allow the call.
    #[error("the call is not allowed in the connection's state {0:?}")]
    WrongState(State),
    /// More private data than the message holds.
    #[error("private data longer than the {max} bytes the message holds")]
    PrivateDataTooLong {
        /// What the message holds.
        max: usize,
    },
    /// A parameter is out of its field's range.
    #[error("a connection parameter is out of range")]
    InvalidParams,
    /// Someone already listens on the service ID.
    #[error("service ID already listened on")]
    AlreadyListening,
}

/// CM counters, named as `rocev2d stats` keys are (the daemon does not print them yet: it does
/// not enable the CM yet).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CmStats {
    /// MADs given to [`Cm::handle_mad`].
    pub mads_received: u64,
    /// MADs queued for [`Cm::poll_transmit`].
    pub mads_sent: u64,
    /// Received bytes that are not a CM MAD this CM understands (`wire::Error`).
    pub malformed: u64,
    /// CM MADs with a method other than Send, but for Get(ClassPortInfo): not answered.
    pub unsupported: u64,
    /// Messages for a Communication ID (SIDR_REPs: a Request ID) we do not have (with that
    /// peer).
    pub unknown_comm_id: u64,
    /// Messages the connection's state does not expect.
    pub wrong_state: u64,
    /// Copies of a message already handled (answered again where IBA says so), SIDR_REQs
    /// included.
    pub duplicate: u64,
    /// REQs and SIDR_REQs for a service nobody listens on (answered with REJ reason 8, or
    /// SIDR_REP status 1).
    pub no_listener: u64,
    /// REQ, REP, DREQ and SIDR_REQ resends after a timeout.
    pub retransmitted: u64,
    /// Connections and SIDR requests given up after Max CM Retries.
    pub timed_out: u64,
}

/// Outputs shared by the connections: separate from the connection table so a connection can
/// borrow both.
#[derive(Debug, Default)]
struct Io {
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
    stats: CmStats,
}

impl Io {
    fn send(&mut self, local_gid: Ipv6Addr, peer_gid: Ipv6Addr, mad: [u8; MAD_LEN]) {
        self.stats.mads_sent += 1;
        self.transmits.push_back(Transmit {
            local_gid,
            peer_gid,
            mad,
        });
    }
}

/// Serializes a CM message: method Send, status 0, as every CM message in `rping_cm.pcap`.
fn build_mad(transaction_id: u64, attribute: CmAttribute) -> [u8; MAD_LEN] {
    emit_mad(method::SEND, transaction_id, attribute)
}

/// Serializes a CM MAD with `method`, status 0.
fn emit_mad(method: u8, transaction_id: u64, attribute: CmAttribute) -> [u8; MAD_LEN] {
    let repr = CmRepr {
        method,
        status: 0,
        class_specific: 0,
        transaction_id,
        attribute_modifier: 0,
        attribute,
    };
    let mut mad = [0u8; MAD_LEN];
    repr.emit(&mut crate::wire::MadPacket::new_unchecked(&mut mad[..]));
    mad
}

/// Private data zero-padded to a message's field, or refused if longer.
fn padded<const N: usize>(data: &[u8]) -> Result<[u8; N], CmError> {
    let mut out = [0u8; N];
    out.get_mut(..data.len())
        .ok_or(CmError::PrivateDataTooLong { max: N })?
        .copy_from_slice(data);
    Ok(out)
}

/// A fresh local Communication ID or SIDR Request ID: nonzero (0 means "unknown" in REJ, IBA
/// §12.6.7), held by no connection (time-wait included) nor SIDR request, and in `block` if
/// there is one.
fn fresh_id(
    rng: &mut ChaCha12Rng,
    block: Option<u32>,
    conns: &BTreeMap<ConnId, Conn>,
    sidr: &sidr::Sidr,
) -> u32 {
    const LOW: u32 = (1 << COMM_ID_BLOCK_SHIFT) - 1;
    loop {
        let r = rng.next_u32();
        let id = match block {
            Some(b) => (b << COMM_ID_BLOCK_SHIFT) | (r & LOW),
            None => r,
        };
        if id != 0 && !conns.contains_key(&ConnId(id)) && !sidr.holds(id) {
            return id;
        }
    }
}

/// The Communication Manager of one port: listeners, connections, and the MADs between them
/// and their peers. See the module doc for how to drive it.
#[derive(Debug)]
pub struct Cm {
    config: CmConfig,
    rng: ChaCha12Rng,
    /// The block in the top six bits of every local Communication ID, if any.
    block: Option<u32>,
    listeners: BTreeSet<ServiceId>,
    conns: BTreeMap<ConnId, Conn>,
    sidr: sidr::Sidr,
    io: Io,
}

impl Cm {
    /// A CM whose Communication and transaction IDs come from a ChaCha12 generator seeded with
    /// `seed` (production: a seed from the OS; tests: a fixed one).
    pub fn new(config: CmConfig, seed: u64) -> Self {
        Cm {
            config,
            rng: ChaCha12Rng::seed_from_u64(seed),
            block: None,
            listeners: BTreeSet::new(),
            conns: BTreeMap::new(),
            sidr: sidr::Sidr::default(),
            io: Io::default(),
        }
    }

    /// Makes every local Communication ID this CM allocates from now on carry `block` (taken
    /// modulo [`crate::qpn_block::QPN_BLOCKS`]) in its top six bits, the rest random: the CM of
    /// engine shard `block` ([`crate::Endpoint::enable_cm`] on an endpoint with a QPN block does
    /// this), so that [`route`] finds it from any shard.
    pub fn with_comm_id_block(mut self, block: u32) -> Self {
        self.block = Some(block % crate::qpn_block::QPN_BLOCKS);
        self
    }

    /// The block of this CM's Communication IDs ([`Self::with_comm_id_block`]).
    pub fn comm_id_block(&self) -> Option<u32> {
        self.block
    }

    /// Counters.
    pub fn stats(&self) -> &CmStats {
        &self.io.stats
    }

    /// A connection's state, or `None` if it does not exist (any more).
    pub fn state(&self, conn: ConnId) -> Option<State> {
        self.conns.get(&conn).map(Conn::state)
    }

    /// Accepts REQs for `service_id` from now on.
    ///
    /// # Errors
    ///
    /// [`CmError::AlreadyListening`].
    pub fn listen(&mut self, service_id: ServiceId) -> Result<(), CmError> {
        if self.listeners.insert(service_id) {
            Ok(())
        } else {
            Err(CmError::AlreadyListening)
        }
    }

    /// Stops accepting REQs for `service_id` (connections already made stay); returns whether
    /// anyone listened.
    pub fn unlisten(&mut self, service_id: ServiceId) -> bool {
        self.listeners.remove(&service_id)
    }

    /// A fresh local Communication ID: see [`fresh_id`].
    fn new_conn_id(&mut self) -> ConnId {
        ConnId(fresh_id(&mut self.rng, self.block, &self.conns, &self.sidr))
    }

    /// Active side: sends a REQ and returns the new connection; [`Event::Established`],
    /// [`Event::Rejected`] or [`Event::TimedOut`] follows.
    ///
    /// # Errors
    ///
    /// [`CmError::InvalidParams`] or [`CmError::PrivateDataTooLong`] (92 bytes).
    pub fn connect(&mut self, now: Instant, params: ConnectParams) -> Result<ConnId, CmError> {
        let id = self.new_conn_id();
        let req = params.req(id.0, self.config.local_ca_guid)?;
        let tid = self.rng.next_u64();
        let c = Conn::connect(now, id, tid, self.config.local_ca_guid, req, &mut self.io);
        self.conns.insert(id, c);
        Ok(id)
    }

    /// Passive side: answers a [`Event::ConnectRequest`] with a REP; [`Event::Established`]
    /// follows when the RTU arrives.
    ///
    /// # Errors
    ///
    /// [`CmError::UnknownConn`], [`CmError::WrongState`] (not an unanswered request),
    /// [`CmError::PrivateDataTooLong`] (196 bytes), [`CmError::InvalidParams`].
    pub fn accept(
        &mut self,
        now: Instant,
        conn: ConnId,
        params: AcceptParams,
    ) -> Result<(), CmError> {
        let c = self.conns.get_mut(&conn).ok_or(CmError::UnknownConn)?;
        c.accept(now, &params, &mut self.io)
    }

    /// Passive side: refuses a [`Event::ConnectRequest`] with a REJ (`reason` is usually
    /// [`RejectReason::CONSUMER`]).
    ///
    /// # Errors
    ///
    /// [`CmError::UnknownConn`], [`CmError::WrongState`], [`CmError::PrivateDataTooLong`]
    /// (148 bytes).
    pub fn reject(
        &mut self,
        now: Instant,
        conn: ConnId,
        reason: RejectReason,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let c = self.conns.get_mut(&conn).ok_or(CmError::UnknownConn)?;
        c.reject(now, reason, private_data, &mut self.io)
    }

    /// Passive side: tells the active side, with an MRA, that the answer to its REQ will take up
    /// to `service_timeout` (an exponent, [`cm_timeout`]), so it waits instead of resending.
    ///
    /// # Errors
    ///
    /// [`CmError::UnknownConn`], [`CmError::WrongState`], [`CmError::InvalidParams`]
    /// (`service_timeout` above 31).
    pub fn send_mra(&mut self, conn: ConnId, service_timeout: u8) -> Result<(), CmError> {
        let c = self.conns.get_mut(&conn).ok_or(CmError::UnknownConn)?;
        c.send_mra(service_timeout, &mut self.io)
    }

    /// Either side of an established connection: sends a DREQ; [`Event::Disconnected`]
    /// follows when the DREP arrives or the retries run out.
    ///
    /// # Errors
    ///
    /// [`CmError::UnknownConn`], [`CmError::WrongState`], [`CmError::PrivateDataTooLong`]
    /// (220 bytes).
    pub fn disconnect(
        &mut self,
        now: Instant,
        conn: ConnId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let c = self.conns.get_mut(&conn).ok_or(CmError::UnknownConn)?;
        c.disconnect(now, private_data, &mut self.io)
    }

    /// Requester: sends a SIDR_REQ asking `params.peer_gid` for the QPN and Q_Key of
    /// `params.service_id`; [`Event::SidrReply`] or [`Event::SidrTimedOut`] follows.
    ///
    /// # Errors
    ///
    /// [`CmError::InvalidParams`] or [`CmError::PrivateDataTooLong`] (216 bytes).
    pub fn sidr_request(&mut self, now: Instant, params: &SidrParams) -> Result<SidrId, CmError> {
        let id = SidrId(fresh_id(&mut self.rng, self.block, &self.conns, &self.sidr));
        let tid = self.rng.next_u64();
        self.sidr.request(now, id, tid, params, &mut self.io)?;
        Ok(id)
    }

    /// Responder: answers an [`Event::SidrRequest`] with a SIDR_REP.
    ///
    /// # Errors
    ///
    /// [`CmError::UnknownConn`] (no such request waiting, answered already included),
    /// [`CmError::PrivateDataTooLong`] (136 bytes).
    pub fn sidr_reply(&mut self, id: SidrId, params: &SidrReplyParams) -> Result<(), CmError> {
        self.sidr.reply(id, params, &mut self.io)
    }

    /// Takes in a MAD received on QP1: `mad` is the UD payload, `local_gid` and `peer_gid` the
    /// frame's destination and source addresses. Never fails: bad input is counted.
    pub fn handle_mad(
        &mut self,
        now: Instant,
        local_gid: Ipv6Addr,
        peer_gid: Ipv6Addr,
        mad: &[u8],
    ) {
        self.io.stats.mads_received += 1;
        let m = match CmRepr::parse_bytes(mad) {
            Ok(m) => m,
            Err(_) => {
                self.io.stats.malformed += 1;
                return;
            }
        };
        if m.method == method::GET && matches!(m.attribute, CmAttribute::ClassPortInfo(_)) {
            let mad = emit_mad(
                method::GET_RESP,
                m.transaction_id,
                CmAttribute::ClassPortInfo(CLASS_PORT_INFO),
            );
            return self.io.send(local_gid, peer_gid, mad);
        }
        if m.method != method::SEND {
            self.io.stats.unsupported += 1;
            return;
        }
        let tid = m.transaction_id;
        // Every message but a REQ names our Communication ID in its Remote Communication ID,
        // and the sender's in its Local Communication ID.
        let (ours, theirs) = match &m.attribute {
            CmAttribute::Req(req) => return self.handle_req(local_gid, peer_gid, tid, req),
            CmAttribute::SidrReq(req) => {
                let listened = self.listeners.contains(&ServiceId(req.service_id));
                let (rng, block, conns) = (&mut self.rng, self.block, &self.conns);
                let new_id = |s: &sidr::Sidr| SidrId(fresh_id(rng, block, conns, s));
                let gids = (local_gid, peer_gid);
                let new_id = listened.then_some(new_id);
                return self.sidr.on_req(gids, tid, req, new_id, &mut self.io);
            }
            CmAttribute::SidrRep(rep) => return self.sidr.on_rep(peer_gid, rep, &mut self.io),
            CmAttribute::ClassPortInfo(_) => {
                self.io.stats.unsupported += 1;
                return;
            }
            CmAttribute::Mra(x) => (x.remote_comm_id, x.local_comm_id),
            CmAttribute::Rej(x) => (x.remote_comm_id, x.local_comm_id),
            CmAttribute::Rep(x) => (x.remote_comm_id, x.local_comm_id),
            CmAttribute::Rtu(x) => (x.remote_comm_id, x.local_comm_id),
            CmAttribute::Dreq(x) => (x.remote_comm_id, x.local_comm_id),
            CmAttribute::Drep(x) => (x.remote_comm_id, x.local_comm_id),
        };
        let Some(c) = self
            .find(peer_gid, ours, theirs, &m.attribute)
            .and_then(|id| self.conns.get_mut(&id))
        else {
            self.io.stats.unknown_comm_id += 1;
            return self.answer_stray(local_gid, peer_gid, tid, &m.attribute);
        };
        match &m.attribute {
            CmAttribute::Mra(x) => c.on_mra(now, x, &mut self.io),
            CmAttribute::Rej(x) => c.on_rej(now, x, &mut self.io),
            CmAttribute::Rep(x) => c.on_rep(x, &mut self.io),
            CmAttribute::Rtu(x) => c.on_rtu(x, &mut self.io),
            CmAttribute::Dreq(x) => c.on_dreq(now, tid, x, &mut self.io),
            CmAttribute::Drep(x) => c.on_drep(now, x, &mut self.io),
            CmAttribute::Req(_)
            | CmAttribute::ClassPortInfo(_)
            | CmAttribute::SidrReq(_)
            | CmAttribute::SidrRep(_) => {}
        }
    }

    /// The connection a message (other than a REQ) is for: the one its Remote Communication ID
    /// names, with that peer.
    fn find(
        &self,
        peer_gid: Ipv6Addr,
        ours: u32,
        theirs: u32,
        attribute: &CmAttribute,
    ) -> Option<ConnId> {
        let named = self
            .conns
            .get(&ConnId(ours))
            .filter(|c| c.peer_gid() == peer_gid && c.knows_peer_id(theirs));
        if named.is_some() {
            return Some(ConnId(ours));
        }
        // An active side that gives up before any REP knows no ID of ours: its REJ "Timeout"
        // names its CA GUID in the ARI (IBA §12.6.7.2), which with its own
        // Communication ID identifies the REQ (Linux `cm_acquire_rejected_id`).
        let CmAttribute::Rej(rej) = attribute else {
            return None;
        };
        if ours != 0 || rej.reason != RejectReason::TIMEOUT.0 {
            return None;
        }
        let guid = u64::from_be_bytes(array(&rej.ari));
        self.conns
            .iter()
            .find(|(_, c)| c.is_from_req(peer_gid, guid, rej.local_comm_id))
            .map(|(&id, _)| id)
    }

    /// Answers messages for connections we do not have, as Linux's CM does: a REP gets a REJ
    /// "invalid Communication ID" (so a passive side whose active side gave up stops resending),
    /// a DREQ gets its DREP (the peer may have missed ours and must be able to finish; Linux
    /// `cm_issue_drep`). Everything else is dropped.
    fn answer_stray(
        &mut self,
        local_gid: Ipv6Addr,
        peer_gid: Ipv6Addr,
        tid: u64,
        attribute: &CmAttribute,
    ) {
        let answer = match attribute {
            CmAttribute::Rep(rep) => CmAttribute::Rej(RejRepr {
                local_comm_id: rep.remote_comm_id,
                remote_comm_id: rep.local_comm_id,
                message_rejected: conn::MSG_REP,
                reject_info_length: 0,
                reason: RejectReason::INVALID_COMM_ID.0,
                ari: [0; 72],
                private_data: [0; 148],
            }),
            CmAttribute::Dreq(dreq) => CmAttribute::Drep(DrepRepr {
                local_comm_id: dreq.remote_comm_id,
                remote_comm_id: dreq.local_comm_id,
                private_data: [0; 224],
            }),
            _ => return,
        };
        self.io.send(local_gid, peer_gid, build_mad(tid, answer));
    }

    fn handle_req(&mut self, local_gid: Ipv6Addr, peer_gid: Ipv6Addr, tid: u64, req: &ReqRepr) {
        // A REQ whose (CA GUID, Communication ID) we already hold is a resend (Linux
        // `cm_insert_remote_id`).
        if let Some(c) = self
            .conns
            .values_mut()
            .find(|c| c.is_from_req(peer_gid, req.local_ca_guid, req.local_comm_id))
        {
            return c.on_duplicate_req(&mut self.io);
        }
        let reason = if !self.listeners.contains(&ServiceId(req.service_id)) {
            self.io.stats.no_listener += 1;
            Some(RejectReason::INVALID_SERVICE_ID)
        } else if req.transport_service_type != 0 || req.extended_transport_type != 0 {
            Some(RejectReason::INVALID_TRANSPORT_TYPE)
        } else {
            None
        };
        if let Some(reason) = reason {
            // No connection is made: the REJ names only the REQ's sender (local ID 0).
            let rej = RejRepr {
                local_comm_id: 0,
                remote_comm_id: req.local_comm_id,
                message_rejected: conn::MSG_REQ,
                reject_info_length: 0,
                reason: reason.0,
                ari: [0; 72],
                private_data: [0; 148],
            };
            let mad = build_mad(tid, CmAttribute::Rej(rej));
            return self.io.send(local_gid, peer_gid, mad);
        }
        // NOT IMPLEMENTED (Linux `cm_insert_remote_qpn`): REJ "stale connection" for a REQ naming a QPN
        // that an established connection with the same peer already uses.
        let id = self.new_conn_id();
        let c = Conn::from_req(
            id,
            tid,
            self.config.local_ca_guid,
            local_gid,
            peer_gid,
            *req,
        );
        let cma = ServiceId(req.service_id)
            .rdma_cm_parts()
            .and_then(|_| CmaHeader::parse(&req.private_data).ok());
        self.conns.insert(id, c);
        self.io
            .events
            .push_back(Event::ConnectRequest(Box::new(ConnectRequest {
                conn: id,
                peer_gid,
                req: *req,
                cma,
            })));
    }

    /// Passive side: the QP received the peer's first packet while the connection waited for
    /// its RTU, so the RTU was lost or is late and the peer is connected: [`Event::Established`]
    /// follows as if the RTU had come (IBA's "communication established" event; Linux
    /// `ib_cm_notify`). A later RTU counts as a duplicate.
    ///
    /// # Errors
    ///
    /// [`CmError::UnknownConn`]; [`CmError::WrongState`] unless the connection waits for an RTU.
    pub fn established(&mut self, conn: ConnId) -> Result<(), CmError> {
        let c = self.conns.get_mut(&conn).ok_or(CmError::UnknownConn)?;
        if c.on_comm_established(&mut self.io) {
            Ok(())
        } else {
            Err(CmError::WrongState(c.state()))
        }
    }

    /// What the connection's QP needs for RTR and RTS, once its REP is sent ([`Self::accept`])
    /// or received: the passive side moves its QP to RTR with it when it accepts, before the
    /// RTU, so the peer's first packets are not lost.
    pub fn qp_params(&self, conn: ConnId) -> Option<QpParams> {
        self.conns.get(&conn).and_then(Conn::qp_params)
    }

    /// The next MAD to send, if any.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.io.transmits.pop_front()
    }

    /// The next event for the application, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.io.events.pop_front()
    }

    /// The earliest deadline of any connection or SIDR request: call [`Self::handle_timeout`]
    /// then.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let conns = self.conns.values().filter_map(Conn::deadline);
        conns.chain(self.sidr.deadline()).min()
    }

    /// Runs every timer due at `now`: resends, gives up, ends time-waits. Calling it early is
    /// harmless.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.sidr.on_timeout(now, &mut self.io);
        let due: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline().is_some_and(|d| d <= now))
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            if c.on_timeout(now, &mut self.io) {
                self.conns.remove(&id);
                self.io.events.push_back(Event::TimeWaitExit { conn: id });
            }
        }
    }
}

#[cfg(test)]
mod tests;
