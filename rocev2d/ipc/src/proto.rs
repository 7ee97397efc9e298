//! The control protocol: what an application asks the daemon over its Unix stream socket, and
//! the answers.
//!
//! A connection is one attachment: the application sends [`Request::Hello`] first, then any
//! requests, each answered by exactly one [`Response`] in order. Every object an attachment
//! creates (PD, MR, CQ, QP) belongs to it: other attachments cannot name it, and closing the
//! connection (or the process dying) destroys them all.
//!
//! UD QPs ([`Request::CreateUdQp`]) share the rings' format with RC QPs; their send records
//! name one of the application's address handles ([`Request::CreateAh`]), which the daemon
//! builds from its own interface, so an application cannot choose the source addresses of
//! its frames.
//!
//! Descriptors travel beside messages (SCM_RIGHTS, [`crate::frame`]): [`Request::RegMr`]
//! carries the region's memfd, or for memory the application keeps at its own address (the C
//! ABI's `ibv_reg_mr`) the application's `/proc/self/mem`; [`Response::Welcome`] the doorbell (an eventfd), [`Response::Cq`]
//! the CQ's ring and eventfd, [`Response::Qp`] the send and receive rings,
//! [`Response::CmEnabled`] the eventfd the daemon signals when a CM event is queued for the
//! application.
//!
//! The connection manager runs in the daemon, on QP1 of the interface, for every application
//! ([`crate::cm`]): an application claims service IDs ([`Request::CmListen`]), connects and
//! accepts with its own QPs only, and fetches the events of its own connections
//! ([`Request::CmPoll`]).
//!
//! [`Request::MpSnapshot`] answers an application's own multipath QP's state ([`MpState`]),
//! so an attached application reads the same `MpSnapshot` as an in-process one.
//!
//! Deviations: none.

use rocev2_core::mprdma::{MpRxStats, VpCounters};
use rocev2_core::qp::MpSnapshot;
use rocev2_core::time::Duration;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// The protocol's version, checked in [`Request::Hello`]: the two sides must agree exactly.
pub const VERSION: u32 = 12;

/// Bytes of a ring slot: a postcard record plus its 4-byte length. A send request with up to
/// 16 scatter/gather elements or 200 bytes of inline data fits, UD destination included.
pub const SLOT_SIZE: usize = 256;

/// What an application asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// First message: the application's protocol version, with one descriptor: the network
    /// namespace of the attaching thread ([`crate::netns`]), which must be the daemon's.
    Hello {
        /// [`VERSION`] of the application's build.
        version: u32,
    },
    /// The daemon's counters as `rocev2d stats` prints them (JSON).
    Stats,
    /// Allocate a protection domain.
    AllocPd,
    /// Free a protection domain without regions or QPs.
    DeallocPd {
        /// Its id.
        pd: u32,
    },
    /// Register `len` bytes with `access` rights (the core's `AccessFlags` bits): the memfd
    /// sent with this message (`at: None`; the daemon picks the region's address), or the
    /// bytes the application keeps at [`InPlace::addr`], whose `/proc/self/mem` comes with
    /// the message, followed by one memfd per [`InPlace::pages`] piece.
    RegMr {
        /// Protection domain.
        pd: u32,
        /// Length of the region (and of the memfd).
        len: u64,
        /// Access bits.
        access: u32,
        /// Where the application keeps the bytes, for memory it registers in place.
        at: Option<InPlace>,
    },
    /// Deregister a region; its keys stop working at once.
    DeregMr {
        /// Its id.
        mr: u32,
    },
    /// Create a completion queue of `capacity` completions.
    CreateCq {
        /// Capacity.
        capacity: u32,
    },
    /// Destroy a completion queue no QP uses.
    DestroyCq {
        /// Its id.
        cq: u32,
    },
    /// Create an RC QP and move it to INIT.
    CreateQp(QpSpec),
    /// Create a UD QP and bring it to RTS with Q_Key `q_key`; answered [`Response::UdQp`].
    /// Of the spec it uses the PD, the CQs and the queue, SGE and inline limits.
    CreateUdQp {
        /// Its PD, CQs and sizes.
        spec: QpSpec,
        /// The Q_Key received messages must carry.
        q_key: u32,
        /// First PSN it sends (24 bits; UD receivers do not check it).
        sq_psn: u32,
    },
    /// Create an address handle: the path to `ip`, built by the daemon from its interface (our
    /// MAC and address) and the neighbour table; answered [`Response::Ah`]. Send requests of UD
    /// QPs name it in their ring records ([`crate::record::UdRecord`]).
    CreateAh {
        /// The peer's address (its GID, IPv4-mapped GIDs as IPv4).
        ip: IpAddr,
        /// Next hop's MAC, or resolve through the kernel.
        mac: Option<[u8; 6]>,
        /// DSCP of the packets sent through it.
        dscp: u8,
        /// Neighbour resolution bound, milliseconds.
        resolve_timeout_ms: u32,
    },
    /// Destroy one of this application's address handles.
    DestroyAh {
        /// Its id.
        ah: u32,
    },
    /// Connect a QP: INIT→RTR→RTS towards the peer.
    Connect {
        /// The QP.
        qpn: u32,
        /// Where and how.
        spec: ConnectSpec,
    },
    /// `ibv_modify_qp`: move a QP through the state machine step by step with the attributes
    /// given (the C ABI; [`Request::Connect`] does INIT→RTR→RTS in one); answered
    /// [`Response::QpStatus`].
    ModifyQp {
        /// The QP.
        qpn: u32,
        /// The attributes the call sets.
        spec: ModifySpec,
    },
    /// Move a QP to ERROR, flushing its requests.
    ModifyToError {
        /// The QP.
        qpn: u32,
    },
    /// Destroy a QP.
    DestroyQp {
        /// The QP.
        qpn: u32,
    },
    /// A QP's state and mode.
    QueryQp {
        /// The QP.
        qpn: u32,
    },
    /// Start receiving this application's CM events: answered [`Response::CmEnabled`] with an
    /// eventfd, signalled whenever an event is queued for [`Request::CmPoll`].
    CmEnable,
    /// Claim a service ID: REQs for it come to this application as connect requests. Refused
    /// ([`ErrorKind::InUse`]) while another application (or this one) holds it.
    CmListen {
        /// The service ID (rdma_cm: `0x0000_0000_01PP_pppp`).
        service_id: u64,
    },
    /// Give a service ID up; answered [`Response::Listened`].
    CmUnlisten {
        /// The service ID.
        service_id: u64,
    },
    /// Send a REQ for QP `qpn` (in INIT); answered [`Response::CmConn`].
    CmConnect {
        /// This application's QP.
        qpn: u32,
        /// The REQ's parameters.
        spec: crate::cm::ConnectSpec,
        /// The peer's next hop, or resolve it (the control plane does, before the request
        /// reaches the engine).
        mac: Option<[u8; 6]>,
        /// Neighbour resolution bound, milliseconds.
        resolve_timeout_ms: u32,
    },
    /// Accept a connect request of this application with one of its QPs (in INIT).
    CmAccept {
        /// The connection's local Communication ID.
        comm_id: u32,
        /// The REP's parameters.
        spec: crate::cm::AcceptSpec,
    },
    /// Refuse a connect request of this application with a REJ.
    CmReject {
        /// The connection.
        comm_id: u32,
        /// The REJ's reason (IBA Table 112).
        reason: u16,
        /// The REJ's private data.
        private_data: Vec<u8>,
    },
    /// Disconnect one of this application's connections (DREQ; its QP goes to ERROR).
    CmDisconnect {
        /// The connection.
        comm_id: u32,
        /// The DREQ's private data.
        private_data: Vec<u8>,
    },
    /// Resolve a UD service with a SIDR_REQ (IBA §12.11); answered [`Response::CmSidr`], and
    /// later a SIDR event for the request among this application's CM events.
    CmSidrRequest {
        /// The SIDR_REQ's parameters.
        spec: crate::cm::SidrSpec,
        /// The peer's next hop, or resolve it (the control plane does).
        mac: Option<[u8; 6]>,
        /// Neighbour resolution bound, milliseconds.
        resolve_timeout_ms: u32,
    },
    /// Answer a SIDR request for a service this application listens on with a SIDR_REP.
    /// Answered [`Response::Done`].
    CmSidrReply {
        /// The request's number (its SIDR event's).
        id: u32,
        /// The SIDR_REP's fields.
        spec: crate::cm::SidrReplySpec,
    },
    /// Take up to `max` queued CM events of this application; answered [`Response::CmEvents`].
    CmPoll {
        /// Most events to return.
        max: u32,
    },
    /// Answer once every QP of this attachment has nothing unacknowledged and nothing to send,
    /// or after `timeout_ms` with [`ErrorKind::Timeout`].
    Drain {
        /// Bound.
        timeout_ms: u32,
    },
    /// Answer a connect request of this application with an MRA (IBA §12.6.6): the peer holds
    /// its REQ for the service timeout instead of resending it. Answered [`Response::Done`].
    CmSendMra {
        /// The connection.
        comm_id: u32,
        /// Service timeout, 4.096 µs × 2^n.
        service_timeout: u8,
    },
    /// A QP's MP-RDMA state (the core's `MpSnapshot`); answered [`Response::MpState`], `None`
    /// for a QP that does not run multipath.
    MpSnapshot {
        /// The QP.
        qpn: u32,
    },
    /// Create a shared receive queue in `pd`; answered [`Response::Srq`] with two descriptors:
    /// an eventfd the daemon signals when the SRQ's armed limit is reached, and the SRQ's
    /// receive ring.
    CreateSrq {
        /// Protection domain.
        pd: u32,
        /// Capacity in receive requests.
        max_wr: u32,
        /// SGEs per request.
        max_sge: u32,
    },
    /// `ibv_modify_srq`: a new capacity and/or a limit to arm (0 disarms).
    ModifySrq {
        /// The SRQ.
        srq: u32,
        /// New capacity.
        max_wr: Option<u32>,
        /// Limit to arm.
        limit: Option<u32>,
    },
    /// `ibv_query_srq`; answered [`Response::SrqAttr`].
    QuerySrq {
        /// The SRQ.
        srq: u32,
    },
    /// Destroy a shared receive queue no QP uses.
    DestroySrq {
        /// The SRQ.
        srq: u32,
    },
}

/// What a QP is created with: the core's `QpConfig` minus what the daemon decides for the
/// host (congestion control comes from its configuration).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QpSpec {
    /// Protection domain.
    pub pd: u32,
    /// CQ of send completions.
    pub send_cq: u32,
    /// CQ of receive completions.
    pub recv_cq: u32,
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send request.
    pub max_send_sge: u32,
    /// SGEs per receive request.
    pub max_recv_sge: u32,
    /// Largest inline payload.
    pub max_inline_data: u32,
    /// AckReq every this many packets.
    pub ack_req_every: u32,
    /// PSNs in flight at most.
    pub max_inflight_psns: u32,
    /// MP-RDMA offer, if any.
    pub multipath: Option<MpSpec>,
    /// The shared receive queue it takes receive requests from, if any.
    pub srq: Option<u32>,
}

/// The core's `MpConfig`, field for field (seed 001 §3).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MpSpec {
    /// Initial window, packets.
    pub iw: u32,
    /// Receiver bitmap slots.
    pub bitmap_len: u16,
    /// Out-of-order level.
    pub delta: u16,
    /// Synchronise delay factor.
    pub sync_alpha: f64,
    /// Probe probability per RTT.
    pub probe_p: f64,
    /// First RTT guess, nanoseconds.
    pub initial_rtt_ns: u64,
    /// Idle restart, RTTs.
    pub idle_restart_rtts: u32,
    /// Early retransmission age, RTTs.
    pub early_retx_rtts: u32,
    /// First VP port.
    pub vp_base: u16,
    /// VP count.
    pub vp_count: u16,
    /// VP generator seed.
    pub seed: u64,
}

/// How to connect a QP (the API's `RemoteQp` and `ConnectOptions`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ConnectSpec {
    /// Peer QPN.
    pub dest_qpn: u32,
    /// Peer's first PSN.
    pub remote_psn: u32,
    /// Peer address.
    pub ip: IpAddr,
    /// Next hop's MAC, or resolve through the kernel.
    pub mac: Option<[u8; 6]>,
    /// Our first PSN.
    pub local_psn: u32,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// ACK timeout code.
    pub timeout: u8,
    /// Retries.
    pub retry_cnt: u8,
    /// RNR retries.
    pub rnr_retry: u8,
    /// RNR timer code.
    pub min_rnr_timer: u8,
    /// Outstanding READ/atomics.
    pub rd_atomic: u8,
    /// DSCP.
    pub dscp: u8,
    /// Neighbour resolution bound, milliseconds.
    pub resolve_timeout_ms: u32,
    /// Extensions the peer announced (`ExtCaps` word).
    pub peer_ext: u32,
}

/// Bytes of a stats document per response: a frame's body with room for the variant and the
/// string's length.
const STATS_PART: usize = crate::frame::MAX_BODY - 16;

/// A stats document as responses that each fit a frame: [`Response::StatsPart`]s, then the
/// rest as [`Response::Stats`], so a daemon with ten thousand QPs answers whole.
pub fn stats_responses(mut json: String) -> Vec<Response> {
    let mut parts = Vec::new();
    while json.len() > STATS_PART {
        let mut at = STATS_PART;
        while !json.is_char_boundary(at) {
            at -= 1;
        }
        let rest = json.split_off(at);
        parts.push(Response::StatsPart(std::mem::replace(&mut json, rest)));
    }
    parts.push(Response::Stats(json));
    parts
}

/// Joins the responses of [`stats_responses`] back into the document.
#[derive(Debug, Default)]
pub struct StatsParts(String);

/// What [`StatsParts::push`] made of a response.
#[derive(Debug, PartialEq)]
pub enum Part {
    /// A part: more are due.
    More,
    /// The last part: the whole document.
    Whole(String),
    /// No part of a stats answer (a refusal): the response, unchanged.
    Other(Response),
}

impl StatsParts {
    /// Takes the next response of a stats answer.
    pub fn push(&mut self, r: Response) -> Part {
        match r {
            Response::StatsPart(p) => {
                self.0.push_str(&p);
                Part::More
            }
            Response::Stats(last) => {
                self.0.push_str(&last);
                Part::Whole(std::mem::take(&mut self.0))
            }
            other => Part::Other(other),
        }
    }
}

/// A region of the application's own memory ([`Request::RegMr`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InPlace {
    /// The bytes' address in the application.
    pub addr: u64,
    /// The address peers and work requests name the region by (`ibv_reg_mr_iova`).
    pub iova: u64,
    /// Pieces of the range on pages the application moved onto memfds, in order of offset,
    /// at most [`MAX_PAGE_PIECES`]; the daemon maps them instead of reaching them through
    /// `/proc/self/mem`.
    pub pages: Vec<PagePiece>,
}

/// Most [`InPlace::pages`] pieces: one descriptor each beside the `/proc/self/mem` one.
pub const MAX_PAGE_PIECES: usize = crate::frame::MAX_FDS - 1;

/// `len` bytes at `offset` into an in-place region that are the bytes at `file_offset` of a
/// memfd of `file_len` bytes ([`InPlace::pages`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PagePiece {
    /// Where the piece starts in the region.
    pub offset: u64,
    /// Its length.
    pub len: u64,
    /// Where it starts in the memfd.
    pub file_offset: u64,
    /// The memfd's length.
    pub file_len: u64,
}

/// The attributes of one `ibv_modify_qp`: each is set when present (its mask bit was).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModifySpec {
    /// The state to move to (`ibv_qp_state` numbering); absent: stay.
    pub state: Option<u8>,
    /// Partition key index (only index 0, the default partition, exists).
    pub pkey_index: Option<u16>,
    /// Remote access rights (the core's `AccessFlags` bits).
    pub access: Option<u32>,
    /// A UD QP's Q_Key.
    pub q_key: Option<u32>,
    /// The peer (RTR of an RC QP): its address, next hop and DSCP.
    pub dest: Option<Destination>,
    /// Path MTU in bytes (clamped to the interface's).
    pub path_mtu: Option<u32>,
    /// Peer QPN.
    pub dest_qpn: Option<u32>,
    /// First PSN expected from the peer.
    pub rq_psn: Option<u32>,
    /// First PSN sent.
    pub sq_psn: Option<u32>,
    /// READs and atomics the peer may have outstanding here.
    pub max_dest_rd_atomic: Option<u8>,
    /// READs and atomics outstanding from here.
    pub max_rd_atomic: Option<u8>,
    /// RNR NAK timer code.
    pub min_rnr_timer: Option<u8>,
    /// ACK timeout code.
    pub timeout: Option<u8>,
    /// Retries.
    pub retry_cnt: Option<u8>,
    /// RNR retries.
    pub rnr_retry: Option<u8>,
}

/// Where a QP's packets go ([`ModifySpec::dest`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Destination {
    /// The peer's address (its GID, IPv4-mapped GIDs as IPv4).
    pub ip: IpAddr,
    /// Next hop's MAC, or resolve through the kernel.
    pub mac: Option<[u8; 6]>,
    /// DSCP.
    pub dscp: u8,
    /// Neighbour resolution bound, milliseconds.
    pub resolve_timeout_ms: u32,
}

/// What the daemon answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Response {
    /// The attachment is open; the doorbell socket comes with it.
    Welcome {
        /// This attachment's id (as `rocev2d stats` lists it).
        app: u32,
        /// The interface the daemon serves.
        iface: IfaceInfo,
        /// The datapath's name.
        datapath: String,
        /// Why it was chosen.
        reason: String,
        /// The congestion-control scheme every QP of the daemon runs (its `[cc] scheme`, a
        /// name of `rocev2_core::cc::SCHEMES`): the application's QPs offer their peers the
        /// extensions it uses (`CcScheme::peer_ext`).
        cc: String,
    },
    /// Success without a value.
    Done,
    /// `rocev2d stats --json`'s document, or its last part ([`stats_responses`]).
    Stats(String),
    /// A part of a stats document too long for one frame; more follow, the last as
    /// [`Response::Stats`] ([`StatsParts`] joins them).
    StatsPart(String),
    /// A protection domain.
    Pd(u32),
    /// A registered region.
    Mr(MrSpec),
    /// A CQ, with its ring and eventfd; ring slots as given.
    Cq {
        /// Its id.
        id: u32,
        /// Slots of its ring.
        slots: u32,
    },
    /// A QP, with its send and receive rings.
    Qp {
        /// Its number.
        qpn: u32,
        /// Slots of the send ring.
        sq_slots: u32,
        /// Slots of the receive ring.
        rq_slots: u32,
    },
    /// A UD QP in RTS, with its send and receive rings.
    UdQp {
        /// Its number.
        qpn: u32,
        /// Slots of the send ring.
        sq_slots: u32,
        /// Slots of the receive ring.
        rq_slots: u32,
        /// Its MTU in bytes: the largest message it sends or accepts.
        mtu: u32,
    },
    /// An address handle's id.
    Ah(u32),
    /// A QP's state and mode.
    QpStatus {
        /// The core's `QpState` as ibverbs numbers it (RESET 0 … ERR 6).
        state: u8,
        /// True in MP-RDMA mode.
        multipath: bool,
        /// Why it entered ERROR, as `ErrorCause::to_parts` writes it (kind, status or NAK code);
        /// `None` while it has not.
        error: Option<(u8, u32)>,
    },
    /// The CM events are on; the eventfd comes with it.
    CmEnabled,
    /// Whether the application held the service ID it gave up.
    Listened(bool),
    /// A connection was started: its local Communication ID.
    CmConn(u32),
    /// A SIDR request was sent: its number (Request ID).
    CmSidr(u32),
    /// Queued CM events of the application, oldest first.
    CmEvents(Vec<crate::cm::EventRecord>),
    /// A QP's MP-RDMA state, `None` when it does not run multipath.
    MpState(Option<MpState>),
    /// A shared receive queue's id, with its limit eventfd and its receive ring of `slots`
    /// (`ibv_post_srq_recv` pushes [`crate::record::RecvRecord`]s into it, as into a QP's).
    Srq {
        /// Its id.
        id: u32,
        /// Slots of its ring.
        slots: u32,
    },
    /// A shared receive queue's attributes (the core's `SrqAttr`).
    SrqAttr {
        /// Its protection domain.
        pd: u32,
        /// Capacity in receive requests.
        max_wr: u32,
        /// SGEs per request.
        max_sge: u32,
        /// The armed limit, 0 when disarmed.
        limit: u32,
        /// Requests queued now.
        len: u32,
    },
    /// The request failed.
    Error {
        /// What kind of failure.
        kind: ErrorKind,
        /// For people.
        message: String,
    },
}

/// A registered region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MrSpec {
    /// Id.
    pub id: u32,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
    /// Virtual address the daemon gave it.
    pub addr: u64,
    /// Length.
    pub len: u64,
    /// Access bits.
    pub access: u32,
    /// Protection domain.
    pub pd: u32,
}

/// The kinds of failure an application tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorKind {
    /// The engine refused the verb (the message says why).
    Verb,
    /// A handle this attachment does not own.
    UnknownHandle,
    /// A per-application limit of the daemon's configuration.
    Limit,
    /// Not a valid request (bad version, bad memory, missing descriptor).
    Invalid,
    /// The interface has no address, MTU or neighbour for the request.
    Path,
    /// A bound ran out.
    Timeout,
    /// Held by another application (a CM service ID), or by this one already.
    InUse,
}

/// The core's `MpSnapshot` (seed 001 §3: window, ACK-clocked VPs, receiver bitmap), field for
/// field, as [`Response::MpState`] carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MpState {
    /// cwnd, packets.
    pub cwnd: f64,
    /// snd_nxt − snd_una.
    pub in_flight: u32,
    /// Smoothed RTT, nanoseconds.
    pub rtt_ns: u64,
    /// Data packets sent to random VPs.
    pub random_vp_sends: u64,
    /// Sender counters by VP: port, packets, ECN marks, out-of-order prunes.
    pub tx_vps: Vec<(u16, u64, u64, u64)>,
    /// Receiver counters by VP: port, packets, CE marks, arrivals more than Δ out of order.
    pub rx_vps: Vec<(u16, u64, u64, u64)>,
    /// Receiver's out-of-order histogram.
    pub ood_hist: Vec<u64>,
    /// Packets dropped beyond the bitmap.
    pub bitmap_drops: u64,
    /// NACKs after a bitmap overflow.
    pub loss_nacks: u64,
    /// Synchronise packets NACKed.
    pub sync_nacks: u64,
    /// SEND packets RNR-NAKed.
    pub rnr_drops: u64,
}

fn vps_out(vps: &[(u16, VpCounters)]) -> Vec<(u16, u64, u64, u64)> {
    vps.iter()
        .map(|(p, c)| (*p, c.packets, c.ecn_marks, c.ood))
        .collect()
}

fn vps_in(vps: Vec<(u16, u64, u64, u64)>) -> Vec<(u16, VpCounters)> {
    vps.into_iter()
        .map(|(p, packets, ecn_marks, ood)| {
            (
                p,
                VpCounters {
                    packets,
                    ecn_marks,
                    ood,
                },
            )
        })
        .collect()
}

impl From<&MpSnapshot> for MpState {
    fn from(s: &MpSnapshot) -> MpState {
        MpState {
            cwnd: s.cwnd,
            in_flight: s.in_flight,
            rtt_ns: s.rtt.as_nanos(),
            random_vp_sends: s.random_vp_sends,
            tx_vps: vps_out(&s.tx_vps),
            rx_vps: vps_out(&s.rx_vps),
            ood_hist: s.rx.ood_hist.clone(),
            bitmap_drops: s.rx.bitmap_drops,
            loss_nacks: s.rx.loss_nacks,
            sync_nacks: s.rx.sync_nacks,
            rnr_drops: s.rx.rnr_drops,
        }
    }
}

impl From<MpState> for MpSnapshot {
    fn from(s: MpState) -> MpSnapshot {
        MpSnapshot {
            cwnd: s.cwnd,
            in_flight: s.in_flight,
            rtt: Duration::from_nanos(s.rtt_ns),
            random_vp_sends: s.random_vp_sends,
            tx_vps: vps_in(s.tx_vps),
            rx_vps: vps_in(s.rx_vps),
            rx: MpRxStats {
                ood_hist: s.ood_hist,
                bitmap_drops: s.bitmap_drops,
                loss_nacks: s.loss_nacks,
                sync_nacks: s.sync_nacks,
                rnr_drops: s.rnr_drops,
            },
        }
    }
}

/// The interface as the application needs to know it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IfaceInfo {
    /// Name.
    pub name: String,
    /// Kernel index.
    pub index: u32,
    /// MAC address.
    pub mac: [u8; 6],
    /// IP MTU.
    pub mtu: u32,
    /// Up with carrier.
    pub up: bool,
    /// Addresses: address, prefix length, link-local.
    pub addrs: Vec<(IpAddr, u8, bool)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame;

    #[test]
    fn every_request_round_trips() {
        let spec = QpSpec {
            pd: 1,
            send_cq: 2,
            recv_cq: 3,
            max_send_wr: 4,
            max_recv_wr: 5,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
            ack_req_every: 16,
            max_inflight_psns: 1024,
            multipath: Some(MpSpec {
                iw: 16,
                bitmap_len: 64,
                delta: 32,
                sync_alpha: 2.0,
                probe_p: 0.01,
                initial_rtt_ns: 10_000,
                idle_restart_rtts: 3,
                early_retx_rtts: 2,
                vp_base: 49152,
                vp_count: 16,
                seed: 9,
            }),
            srq: Some(4),
        };
        for r in [
            Request::Hello { version: VERSION },
            Request::RegMr {
                pd: 1,
                len: 1 << 40,
                access: 0xf,
                at: None,
            },
            Request::RegMr {
                pd: 1,
                len: 4096,
                access: 0x7,
                at: Some(InPlace {
                    addr: 0x7fff_0000_1000,
                    iova: 0x1000,
                    pages: vec![PagePiece {
                        offset: 0,
                        len: 4096,
                        file_offset: 8192,
                        file_len: 65536,
                    }],
                }),
            },
            Request::ModifyQp {
                qpn: 0x12,
                spec: ModifySpec {
                    state: Some(2),
                    dest: Some(Destination {
                        ip: "10.0.0.2".parse().unwrap(),
                        mac: None,
                        dscp: 26,
                        resolve_timeout_ms: 3000,
                    }),
                    path_mtu: Some(1024),
                    rq_psn: Some(0xff_ffff),
                    ..ModifySpec::default()
                },
            },
            Request::CreateQp(spec.clone()),
            Request::CreateUdQp {
                spec,
                q_key: 0x8001_0000,
                sq_psn: 0xff_ffff,
            },
            Request::CreateAh {
                ip: "fd00::1".parse().unwrap(),
                mac: Some([2, 0, 0, 0, 0, 1]),
                dscp: 26,
                resolve_timeout_ms: 3000,
            },
            Request::DestroyAh { ah: 9 },
            Request::Drain { timeout_ms: 5 },
            Request::CmListen {
                service_id: 0x0106_1c06,
            },
            Request::CmReject {
                comm_id: 7,
                reason: 28,
                private_data: vec![1, 2, 3],
            },
            Request::MpSnapshot { qpn: 0xff_ffff },
            Request::ModifySrq {
                srq: 3,
                max_wr: None,
                limit: Some(16),
            },
            Request::CmSendMra {
                comm_id: 0xdead_beef,
                service_timeout: 24,
            },
        ] {
            let bytes = frame::encode(&r, 0);
            let mut d = frame::Decoder::default();
            d.extend(&bytes);
            let (back, fds) = d.next_frame::<Request>().unwrap().unwrap();
            assert_eq!(back, r);
            assert!(fds.is_empty());
        }
    }

    #[test]
    fn a_long_stats_document_crosses_in_frames_and_joins_whole() {
        // Longer than several frames, with multi-byte characters on part boundaries.
        let doc: String = (0..40_000).map(|i| format!("é{i},")).collect();
        let responses = stats_responses(doc.clone());
        assert!(responses.len() > 3);
        let mut parts = StatsParts::default();
        let mut whole = None;
        let mut d = frame::Decoder::default();
        for r in responses {
            d.extend(&frame::encode(&r, 0));
            let (back, _) = d.next_frame::<Response>().unwrap().expect("fits one frame");
            if let Part::Whole(w) = parts.push(back) {
                whole = Some(w);
            }
        }
        assert_eq!(whole.as_deref(), Some(doc.as_str()));
        assert_eq!(
            stats_responses("{}".into()),
            [Response::Stats("{}".into())],
            "a short one is one response"
        );
        assert_eq!(parts.push(Response::Done), Part::Other(Response::Done));
    }

    #[test]
    fn ud_responses_round_trip() {
        for r in [
            Response::UdQp {
                qpn: 0xab_cdef,
                sq_slots: 64,
                rq_slots: 128,
                mtu: 4096,
            },
            Response::Ah(u32::MAX),
        ] {
            let bytes = frame::encode(&r, 0);
            let mut d = frame::Decoder::default();
            d.extend(&bytes);
            let (back, _) = d.next_frame::<Response>().unwrap().unwrap();
            assert_eq!(back, r);
        }
    }

    #[test]
    fn mp_state_round_trips_to_the_same_snapshot() {
        let snap = MpSnapshot {
            cwnd: 17.25,
            in_flight: 9,
            rtt: Duration::from_nanos(12_345),
            random_vp_sends: 4,
            tx_vps: vec![
                (
                    49152,
                    VpCounters {
                        packets: 10,
                        ecn_marks: 2,
                        ood: 1,
                    },
                ),
                (
                    49160,
                    VpCounters {
                        packets: 3,
                        ecn_marks: 0,
                        ood: 0,
                    },
                ),
            ],
            rx_vps: vec![(
                50000,
                VpCounters {
                    packets: 7,
                    ecn_marks: 5,
                    ood: 6,
                },
            )],
            rx: MpRxStats {
                ood_hist: vec![5, 0, 2, 1],
                bitmap_drops: 1,
                loss_nacks: 2,
                sync_nacks: 3,
                rnr_drops: 4,
            },
        };
        for r in [
            Response::MpState(Some(MpState::from(&snap))),
            Response::MpState(None),
        ] {
            let bytes = frame::encode(&r, 0);
            let mut d = frame::Decoder::default();
            d.extend(&bytes);
            let (back, _) = d.next_frame::<Response>().unwrap().unwrap();
            assert_eq!(back, r);
            if let Response::MpState(Some(s)) = back {
                assert_eq!(MpSnapshot::from(s), snap);
            }
        }
    }
}
