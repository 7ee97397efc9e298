//! The host's RoCE device, shared by the applications attached to the daemon.
//!
//! [`Host`] keeps what each attachment owns (PDs, regions, CQs, QPs and the shared rings of the
//! last two) and carries out its requests on one engine: the interface's, or one engine
//! shard's (`rocev2d run --queues`, [`Host::sharing`]: then the shards' hosts share the
//! attachments' ids and users, the interface's listen registry and the receiver-side
//! congestion state, [`CcBoard`]). It is driven from its
//! datapath thread without any IO of its own but the shared memory:
//! - [`Host::request`] answers one control request ([`rocev2_ipc::proto`]): one line of
//!   dispatch each, to one handler in the module of what it touches (`objects`: PDs,
//!   regions, CQs, shared receive queues; `qps`: RC QPs; `ud`: UD QPs and address handles; `cm`: the CM);
//!   Hello, Stats and Drain are the event loop's;
//! - [`Host::service`] moves work requests from the QPs' rings into the engine and completions
//!   from the engine's CQs into the CQ rings (`rings`), signals the eventfds of CQs whose
//!   application sleeps, and on a shard exchanges its engine's congestion summaries;
//! - [`Host::detach`] destroys everything an attachment owned when its connection closes,
//!   however the application ended.
//!
//! The connection manager (QP1, [`rocev2_core::Endpoint::enable_cm`]) is the engine's, one for
//! the interface or one per shard; the host shares it out: a service ID belongs to the application that listens
//! on it (a second claim is refused, [`ErrorKind::InUse`]), a connection to the application
//! that started or was offered it, and each CM event goes to its connection's application
//! only, queued until it asks ([`Request::CmPoll`]) and announced on its CM eventfd. An
//! application connects, accepts, rejects and disconnects only its own connections and QPs.
//! When it goes, its listens end and its connections are torn down as IBA §12.9 has a consumer
//! do it: a DREQ for an established one, a REJ (Consumer) for a request it had not answered;
//! one it was still setting up gets its DREQ when the handshake completes (the daemon answers
//! an event of an orphaned connection that way).
//!
//! An attachment names only its own objects: a handle it does not own is refused as unknown,
//! so nothing of another application can be reached, and the engine checks every key against
//! the QP's PD, so another application's lkey or rkey fails as a protection error. Whatever an
//! application writes into its rings is validated: a malformed record or a corrupted ring
//! closes the attachment; a well-formed request the engine refuses completes with an error.
//!
//! Deviations: congestion control is the daemon's (`[cc]` of its configuration), for every
//! QP of every application; a send queue holds `max_send_wr` requests in its ring plus as many
//! in the engine, so "queue full" comes later than on an HCA.

mod cc_board;
mod cm;
mod objects;
mod qps;
mod rings;
mod roster;
mod ud;

pub use cc_board::CcBoard;
pub use roster::Roster;

use rocev2_core::Endpoint;
use rocev2_core::cc::{CcConfig, ShardSummary};
use rocev2_core::cm::{
    AcceptParams, ConnId, Event as CmEvent, RejectReason, ServiceId, SidrId, SidrStatus,
};
use rocev2_core::cq::{WcStatus, WorkCompletion};
use rocev2_core::mprdma::MpConfig;
use rocev2_core::mr::{AccessFlags, MrId, PdId};
use rocev2_core::qp::{
    AddressHandle, ConnectAttr, CqId, Path, PostError, QpAttr, QpConfig, QpMode, QpState, RecvWr,
    SendWr, UdDest,
};
use rocev2_core::srq::SrqId;
use rocev2_core::time::{Duration, Instant};
use rocev2_core::wire::Qpn;
use rocev2_core::{EndpointError, cq};
use rocev2_datapath::Interface;
use rocev2_datapath::handoff::Listens;
use rocev2_datapath::host::{
    self, AhTable, Backing, HostMemory, NextHop, PathError, ProcessMemory, RegionAddresses,
};
use rocev2_ipc::cm::EventRecord;
use rocev2_ipc::notify::EventFd;
use rocev2_ipc::proto::{
    ConnectSpec, Destination, ErrorKind, IfaceInfo, InPlace, MpState, MrSpec, QpSpec, Request,
    Response,
};
use rocev2_ipc::record::{self, CompletionRecord, RecvRecord, SendRecord};
use rocev2_ipc::ring::{End, Ring};
use rocev2_ipc::shm::Region;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

/// What one application may hold (`[limits]` of the configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// QPs (RC and UD); also bounds the shared receive queues, separately.
    pub max_qps: u32,
    /// CQs.
    pub max_cqs: u32,
    /// UD address handles.
    pub max_ahs: u32,
    /// Memory regions, zero-length ones included (each may hold a descriptor and a mapping).
    pub max_mrs: u32,
    /// CM service IDs listened on.
    pub max_listens: u32,
    /// Attachments of one user at once: every other limit is per attachment, so this bounds
    /// what one user holds in all.
    pub max_apps_per_user: u32,
    /// Bytes of registered memory.
    pub max_mr_bytes: u64,
    /// Bytes of the shared rings of its QPs and CQs (each up to 16 MiB, made by the daemon;
    /// their pages are the host's as soon as either side touches them).
    pub max_ring_bytes: u64,
}

impl Default for Limits {
    /// 1024 QPs (RC and UD), 1024 CQs, 4096 address handles, 4096 regions, 64 listens,
    /// 16 GiB registered, 1 GiB of rings, 64 attachments per user.
    fn default() -> Self {
        Limits {
            max_qps: 1024,
            max_cqs: 1024,
            max_ahs: 4096,
            max_mrs: 4096,
            max_listens: 64,
            max_apps_per_user: 64,
            max_mr_bytes: 16 << 30,
            max_ring_bytes: 1 << 30,
        }
    }
}

/// Largest queue or CQ an application may ask for (the rings are `slots × 256` bytes).
const MAX_DEPTH: u32 = 1 << 16;
/// Largest SGE count, bounded by what fits a ring slot.
const MAX_SGE: u32 = 16;
/// Largest inline payload, bounded by what fits a ring slot.
const MAX_INLINE: u32 = 200;
/// Work requests taken from one ring per pass, so one busy QP cannot starve the others.
const BUDGET: usize = 64;
/// CM events queued for one application at most; past it the oldest are dropped (counted as
/// `cm_events_dropped`), so an application that never asks cannot grow the daemon.
const MAX_CM_EVENTS: usize = 1024;
/// First virtual address handed to a region: live regions of all applications get distinct,
/// page-aligned ranges, so a stray address never lands in another region; a deregistered
/// region's range is given out again ([`RegionAddresses`]), so the addresses never run out.
const FIRST_ADDR: u64 = 0x1000_0000;

/// Who is on the other end of a connection (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Creds {
    /// Process id.
    pub pid: u32,
    /// User id.
    pub uid: u32,
}

/// The host's counters of attachments and of what they got wrong.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostCounters {
    /// Attachments opened.
    pub attached: u64,
    /// Attachments closed (any reason).
    pub detached: u64,
    /// Control requests refused (unknown handles, limits, invalid arguments, engine refusals).
    pub refused_requests: u64,
    /// Work requests the engine refused, completed with an error.
    pub refused_work_requests: u64,
    /// Attachments closed for a malformed record or a corrupted ring.
    pub closed_corrupt: u64,
    /// Accesses to an application's own memory that failed (it unmapped a registered
    /// buffer): its QPs were moved to ERROR.
    pub memory_faults: u64,
    /// Control connections of users that may not attach, refused before anything was read.
    pub refused_users: u64,
    /// Control connections refused because too many others had not said hello yet.
    pub refused_busy: u64,
    /// Control connections closed for not saying hello in time.
    pub hello_timeouts: u64,
    /// CM events delivered to applications' queues.
    pub cm_events: u64,
    /// CM events dropped: the application's queue was full.
    pub cm_events_dropped: u64,
    /// Connections of applications that had gone, torn down by the daemon (DREQ or REJ).
    pub cm_orphans_closed: u64,
}

impl HostCounters {
    /// Adds another engine shard's counters (`rocev2d stats` shows the host's sum).
    pub fn add(&mut self, o: &HostCounters) {
        let HostCounters {
            attached,
            detached,
            refused_requests,
            refused_work_requests,
            closed_corrupt,
            memory_faults,
            refused_users,
            refused_busy,
            hello_timeouts,
            cm_events,
            cm_events_dropped,
            cm_orphans_closed,
        } = o;
        self.attached += attached;
        self.detached += detached;
        self.refused_requests += refused_requests;
        self.refused_work_requests += refused_work_requests;
        self.closed_corrupt += closed_corrupt;
        self.memory_faults += memory_faults;
        self.refused_users += refused_users;
        self.refused_busy += refused_busy;
        self.hello_timeouts += hello_timeouts;
        self.cm_events += cm_events;
        self.cm_events_dropped += cm_events_dropped;
        self.cm_orphans_closed += cm_orphans_closed;
    }
}

/// One application as `rocev2d stats` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppSnapshot {
    /// Attachment id.
    pub id: u32,
    /// Its process.
    pub pid: u32,
    /// Its user.
    pub uid: u32,
    /// The engine shard serving it (`docs/daemon.md`, "Several queues"; 0 with one).
    #[serde(default)]
    pub shard: u32,
    /// Its QPs, QPN in hex (their counters are under the snapshot's `qps`).
    pub qps: Vec<String>,
    /// CQs.
    pub cqs: usize,
    /// Registered regions.
    pub mrs: usize,
    /// Bytes registered.
    pub mr_bytes: u64,
    /// Of those, bytes the daemon maps (memfd regions, and the pages of an in-place region
    /// the application moved onto memfds); the rest it reaches through `/proc/PID/mem`.
    #[serde(default)]
    pub mr_mapped_bytes: u64,
    /// Bytes of its QPs' and CQs' rings.
    pub ring_bytes: u64,
    /// Work requests taken from its rings.
    pub posted: u64,
    /// Completions delivered to its rings.
    pub completed: u64,
}

/// A CQ as shared with its application.
#[derive(Debug)]
struct CqShare {
    ring: Ring,
    event: EventFd,
    /// Completions the daemon made itself (refused work requests), delivered first; at most
    /// the ring's slots (see `take`).
    made: VecDeque<WorkCompletion>,
}

/// A QP's rings, and a request the engine had no room for yet.
#[derive(Debug)]
struct QpShare {
    sq: Ring,
    rq: Ring,
    send_cq: CqId,
    recv_cq: CqId,
    send_wait: Option<SendWr>,
    recv_wait: Option<RecvWr>,
}

/// A shared receive queue's limit eventfd and receive ring, and a request the engine had no
/// room for yet.
#[derive(Debug)]
struct SrqShare {
    event: EventFd,
    ring: Ring,
    waiting: Option<RecvWr>,
}

/// One attachment.
#[derive(Debug)]
struct App {
    creds: Creds,
    /// The doorbell (an eventfd: it cannot carry descriptors, [`rocev2_ipc::notify`]).
    bell: EventFd,
    /// A duplicate of the control connection, shut down to close a misbehaving attachment.
    conn: OwnedFd,
    pds: BTreeSet<PdId>,
    /// Each region's length and its bytes the daemon maps.
    mrs: BTreeMap<MrId, (u64, u64)>,
    cqs: BTreeMap<CqId, CqShare>,
    qps: BTreeMap<Qpn, QpShare>,
    mr_bytes: u64,
    mr_mapped_bytes: u64,
    /// Bytes of the rings in `cqs` and `qps`.
    ring_bytes: u64,
    posted: u64,
    completed: u64,
    corrupt: bool,
    /// The CM eventfd, once the application asked for its events ([`Request::CmEnable`]).
    cm_event: Option<EventFd>,
    /// CM events of its listens and connections, oldest first.
    cm_events: VecDeque<CmEvent>,
    /// Its UD address handles, built by the daemon ([`Request::CreateAh`]).
    ahs: AhTable,
    /// Its shared receive queues, each with the eventfd its limit event signals.
    srqs: BTreeMap<SrqId, SrqShare>,
}

/// An answer, the descriptors that go with it, and the path to announce after a connect.
#[derive(Debug)]
pub struct Reply {
    /// The response.
    pub response: Response,
    /// Descriptors sent with it.
    pub fds: Vec<OwnedFd>,
    /// A QP was connected on this path: announce our address to its next hop
    /// ([`rocev2_datapath::neigh::announce`]).
    pub announce: Option<Path>,
}

impl Reply {
    fn ok(response: Response) -> Reply {
        Reply {
            response,
            fds: Vec::new(),
            announce: None,
        }
    }
}

/// A refused request.
/// A refused request or attachment: its kind and the daemon's words.
#[derive(Debug)]
pub struct Refusal(pub ErrorKind, pub String);

impl From<EndpointError> for Refusal {
    fn from(e: EndpointError) -> Refusal {
        Refusal(ErrorKind::Verb, e.to_string())
    }
}

/// Attachment `app`, whose request is being carried out.
fn app_of(apps: &mut BTreeMap<u32, App>, app: u32) -> Result<&mut App, Refusal> {
    apps.get_mut(&app).ok_or_else(|| unknown("attachment"))
}

fn unknown(what: &str) -> Refusal {
    Refusal(
        ErrorKind::UnknownHandle,
        format!("no {what} of this application by that id"),
    )
}

fn dup(fd: BorrowedFd<'_>) -> Result<OwnedFd, Refusal> {
    fd.try_clone_to_owned()
        .map_err(|e| Refusal(ErrorKind::Invalid, format!("dup: {e}")))
}

/// The attached applications of one interface; see the module docs.
#[derive(Debug)]
pub struct Host {
    iface: Interface,
    limits: Limits,
    cc: Option<CcConfig>,
    apps: BTreeMap<u32, App>,
    /// The host's attachments, of this shard and the others: ids and users.
    roster: Arc<Roster>,
    /// The interface's listen registry, when this host is one engine shard of several: a
    /// Service ID is listened on by one shard of the interface, and REQs for it reach it.
    listens: Option<Listens>,
    /// The shards' receiver-side congestion summaries, when this host is one shard of several:
    /// the board, the generation last read, the summaries read.
    cc_board: Option<(Arc<CcBoard>, u64, Vec<Arc<ShardSummary>>)>,
    /// Addresses of the regions whose memfd the daemon maps (a freed range is given out
    /// again: the keys, drawn at random, are what a peer must know).
    addresses: RegionAddresses,
    counters: HostCounters,
    scratch: Vec<u8>,
    wcs: Vec<WorkCompletion>,
    /// Service IDs listened on, and by which attachment.
    listeners: BTreeMap<ServiceId, u32>,
    /// Connections of attachments, and whose.
    conns: BTreeMap<ConnId, u32>,
    /// SIDR requests of attachments, sent or to answer, and whose.
    sidrs: BTreeMap<SidrId, u32>,
}

/// What a request's handler gets besides the request's own fields: the engine, the memory, the
/// clock, the attachment and the descriptors that came with the request.
pub(super) struct Call<'a> {
    ep: &'a mut Endpoint,
    mem: &'a mut HostMemory,
    now: Instant,
    app: u32,
    fds: Vec<OwnedFd>,
}

impl Host {
    /// A host serving `iface`, giving every QP the controller `cc`.
    pub fn new(iface: Interface, limits: Limits, cc: Option<CcConfig>) -> Host {
        Host {
            iface,
            limits,
            cc,
            apps: BTreeMap::new(),
            roster: Arc::default(),
            listens: None,
            cc_board: None,
            addresses: RegionAddresses::new(FIRST_ADDR),
            counters: HostCounters::default(),
            scratch: Vec::new(),
            wcs: Vec::new(),
            listeners: BTreeMap::new(),
            conns: BTreeMap::new(),
            sidrs: BTreeMap::new(),
        }
    }

    /// Makes this host one engine shard of several: it shares the attachments' ids and users
    /// with the others (`roster`), registers the Service IDs its applications listen on in
    /// the interface's listen registry (`listens`, its datapath shard's) and exchanges its
    /// engine's receiver-side congestion summaries with theirs (`cc`; the engine's
    /// [`rocev2_core::cc::ReceiverCc::with_shard`] makes them).
    pub fn sharing(mut self, roster: Arc<Roster>, listens: Listens, cc: Arc<CcBoard>) -> Host {
        self.roster = roster;
        self.listens = Some(listens);
        self.cc_board = Some((cc, 0, Vec::new()));
        self
    }

    /// The interface as an application learns it at attach time.
    pub fn iface_info(&self) -> IfaceInfo {
        IfaceInfo {
            name: self.iface.name.clone(),
            index: self.iface.index,
            mac: self.iface.mac,
            mtu: self.iface.mtu,
            up: self.iface.up,
            addrs: self
                .iface
                .addrs
                .iter()
                .map(|a| (a.ip, a.prefix_len, a.link_local))
                .collect(),
        }
    }

    /// Opens an attachment for `creds` on connection `conn` (a duplicate the host may shut
    /// down); returns its id and the application's end of the doorbell.
    ///
    /// # Errors
    /// The refusal to send: the user's attachments at `[limits] max_apps_per_user`, or no
    /// eventfd.
    pub fn attach(&mut self, creds: Creds, conn: OwnedFd) -> Result<(u32, OwnedFd), Refusal> {
        let io = |e: std::io::Error| {
            Refusal(
                ErrorKind::Invalid,
                format!("the daemon could not make the doorbell: {e}"),
            )
        };
        let bell = EventFd::new().map_err(io)?;
        let theirs = bell.share().map_err(io)?;
        let id = match self.roster.enter(creds.uid, self.limits.max_apps_per_user) {
            Ok(id) => id,
            Err(held) => {
                self.counters.refused_requests += 1;
                return Err(Refusal(
                    ErrorKind::Limit,
                    format!(
                        "user {} holds {held} attachments already, its limit ([limits] max_apps_per_user)",
                        creds.uid
                    ),
                ));
            }
        };
        self.apps.insert(
            id,
            App {
                creds,
                bell,
                conn,
                pds: BTreeSet::new(),
                mrs: BTreeMap::new(),
                cqs: BTreeMap::new(),
                qps: BTreeMap::new(),
                mr_bytes: 0,
                mr_mapped_bytes: 0,
                ring_bytes: 0,
                posted: 0,
                completed: 0,
                corrupt: false,
                cm_event: None,
                cm_events: VecDeque::new(),
                ahs: AhTable::default(),
                srqs: BTreeMap::new(),
            },
        );
        self.counters.attached += 1;
        Ok((id, theirs))
    }

    /// Closes attachment `app`: ends its listens, tears its connections down (DREQ, or REJ for
    /// a request it had not answered), destroys its QPs (their peers stop hearing from them, as
    /// from a destroyed QP on an HCA), CQs, regions (unmapped) and PDs. Unknown ids are ignored.
    pub fn detach(&mut self, ep: &mut Endpoint, mem: &mut HostMemory, now: Instant, app: u32) {
        let Some(a) = self.apps.remove(&app) else {
            return;
        };
        self.roster.leave(app);
        let listens = &self.listens;
        self.listeners.retain(|service, owner| {
            if *owner == app {
                let _ = ep.cm_unlisten(*service);
                if let Some(l) = listens {
                    l.unlisten(*service);
                }
            }
            *owner != app
        });
        let conns: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, owner)| **owner == app)
            .map(|(c, _)| *c)
            .collect();
        for conn in conns {
            self.conns.remove(&conn);
            self.close_orphan(ep, mem, now, conn);
        }
        self.sidrs.retain(|id, owner| {
            if *owner == app {
                // Requests it was to answer get "rejected"; its own end with nobody told.
                let _ = ep.cm_sidr_reply(*id, &cm::sidr_answer(SidrStatus::REJECT));
            }
            *owner != app
        });
        for qpn in a.qps.keys() {
            let _ = ep.destroy_qp(*qpn);
        }
        for srq in a.srqs.keys() {
            let _ = ep.destroy_srq(*srq);
        }
        for cq in a.cqs.keys() {
            let _ = ep.destroy_cq(*cq);
        }
        for mr in a.mrs.keys() {
            release(ep, mem, &mut self.addresses, *mr);
        }
        for pd in &a.pds {
            let _ = ep.dealloc_pd(*pd);
        }
        let _ = rustix::net::shutdown(&a.conn, rustix::net::Shutdown::Both);
        self.counters.detached += 1;
        tracing::info!(app, pid = a.creds.pid, "application detached");
    }

    /// Answers one request of attachment `app`, with the descriptors that came with it.
    pub fn request(
        &mut self,
        ep: &mut Endpoint,
        mem: &mut HostMemory,
        now: Instant,
        app: u32,
        req: Request,
        fds: Vec<OwnedFd>,
    ) -> Reply {
        match self.try_request(ep, mem, now, app, req, fds) {
            Ok(r) => r,
            Err(Refusal(kind, message)) => {
                self.counters.refused_requests += 1;
                tracing::debug!(app, ?kind, %message, "request refused");
                Reply::ok(Response::Error { kind, message })
            }
        }
    }

    /// Carries out one request: one line per request, each handled by one method of the
    /// module of what it touches (`objects`, `qps`, `ud`, `cm`).
    fn try_request(
        &mut self,
        ep: &mut Endpoint,
        mem: &mut HostMemory,
        now: Instant,
        app: u32,
        req: Request,
        fds: Vec<OwnedFd>,
    ) -> Result<Reply, Refusal> {
        if !self.apps.contains_key(&app) {
            return Err(unknown("attachment"));
        }
        let c = Call {
            ep,
            mem,
            now,
            app,
            fds,
        };
        match req {
            Request::AllocPd => self.alloc_pd(c),
            Request::DeallocPd { pd } => self.dealloc_pd(c, pd),
            Request::RegMr {
                pd,
                len,
                access,
                at,
            } => self.reg_mr(c, pd, len, access, at),
            Request::DeregMr { mr } => self.dereg_mr(c, mr),
            Request::CreateCq { capacity } => self.create_cq(c, capacity),
            Request::DestroyCq { cq } => self.destroy_cq(c, cq),
            Request::CreateQp(spec) => self.create_qp(c, spec),
            Request::CreateUdQp {
                spec,
                q_key,
                sq_psn,
            } => self.create_ud_qp(c, spec, q_key, sq_psn),
            Request::CreateAh {
                ip,
                mac,
                dscp,
                resolve_timeout_ms: _,
            } => self.create_ah(c, ip, mac, dscp),
            Request::DestroyAh { ah } => self.destroy_ah(c, ah),
            Request::Connect { qpn, spec } => self.connect(c, qpn, spec),
            Request::ModifyQp { qpn, spec } => self.modify_qp(c, qpn, spec),
            Request::ModifyToError { qpn } => self.modify_to_error(c, qpn),
            Request::DestroyQp { qpn } => self.destroy_qp(c, qpn),
            Request::QueryQp { qpn } => self.query_qp(c, qpn),
            Request::MpSnapshot { qpn } => self.mp_snapshot(c, qpn),
            Request::CreateSrq {
                pd,
                max_wr,
                max_sge,
            } => self.create_srq(c, pd, max_wr, max_sge),
            Request::ModifySrq { srq, max_wr, limit } => self.modify_srq(c, srq, max_wr, limit),
            Request::QuerySrq { srq } => self.query_srq(c, srq),
            Request::DestroySrq { srq } => self.destroy_srq(c, srq),
            Request::CmEnable => self.cm_enable(c),
            Request::CmListen { service_id } => self.cm_listen(c, service_id),
            Request::CmUnlisten { service_id } => self.cm_unlisten(c, service_id),
            Request::CmConnect {
                qpn,
                spec,
                mac,
                resolve_timeout_ms: _,
            } => self.cm_connect(c, qpn, spec, mac),
            Request::CmAccept { comm_id, spec } => self.cm_accept(c, comm_id, spec),
            Request::CmReject {
                comm_id,
                reason,
                private_data,
            } => self.cm_reject(c, comm_id, reason, private_data),
            Request::CmSendMra {
                comm_id,
                service_timeout,
            } => self.cm_send_mra(c, comm_id, service_timeout),
            Request::CmDisconnect {
                comm_id,
                private_data,
            } => self.cm_disconnect(c, comm_id, private_data),
            Request::CmSidrRequest {
                spec,
                mac,
                resolve_timeout_ms: _,
            } => self.cm_sidr_request(c, spec, mac),
            Request::CmSidrReply { id, spec } => self.cm_sidr_reply(c, id, spec),
            Request::CmPoll { max } => self.cm_poll(c, max),
            // Answered by the event loop (Hello, Stats, Drain), never here.
            Request::Hello { .. } | Request::Stats | Request::Drain { .. } => Err(Refusal(
                ErrorKind::Invalid,
                "not a request the device answers".into(),
            )),
        }
    }

    /// Whether every QP of attachment `app` has nothing to send, nothing unacknowledged and no
    /// work request waiting in its rings; `None` for an unknown attachment.
    pub fn is_idle(&self, ep: &Endpoint, app: u32, now: Instant) -> Option<bool> {
        let a = self.apps.get(&app)?;
        Some(a.qps.iter().all(|(qpn, q)| {
            q.send_wait.is_none()
                && q.sq.is_empty().unwrap_or(true)
                && ep.qp(*qpn).is_none_or(|qp| qp.is_idle(now))
        }))
    }

    /// One pass over every attachment's rings; see the module docs. Returns whether anything
    /// moved. Attachments found corrupt are closed.
    pub fn service(&mut self, ep: &mut Endpoint, mem: &mut HostMemory, now: Instant) -> bool {
        self.exchange_cc(ep);
        let mut moved = self.route_cm_events(ep, mem, now);
        moved |= self.fail_faulted(ep, mem, now);
        moved |= self.signal_srq_limits(ep);
        let mut corrupt = Vec::new();
        for (id, a) in &mut self.apps {
            moved |= rings::take_work(ep, a, &mut self.scratch, &mut self.counters);
            moved |= rings::deliver(ep, a, &mut self.wcs, &mut self.scratch);
            if a.corrupt {
                corrupt.push(*id);
            }
        }
        for id in corrupt {
            tracing::warn!(app = id, "closing an attachment that corrupted its rings");
            self.counters.closed_corrupt += 1;
            self.detach(ep, mem, now, id);
        }
        moved
    }

    /// On a shard: publishes the engine's summary of a period that ended, and gives the engine
    /// the shards' latest when there is news ([`CcBoard`]).
    fn exchange_cc(&mut self, ep: &mut Endpoint) {
        let Some((board, seen, peers)) = &mut self.cc_board else {
            return;
        };
        let rx = ep.receiver_cc_mut();
        if let Some(s) = rx.take_summary() {
            board.publish(s);
        }
        if board.newer(seen, peers) {
            rx.set_peers(peers.iter().map(|s| &**s));
        }
    }

    /// Signals the limit eventfd of every SRQ whose limit was reached. Returns whether there
    /// were any.
    fn signal_srq_limits(&self, ep: &mut Endpoint) -> bool {
        let mut any = false;
        while let Some(srq) = ep.poll_srq_limit() {
            if let Some(ev) = self
                .apps
                .values()
                .find_map(|a| Some(&a.srqs.get(&srq)?.event))
            {
                ev.signal();
            }
            any = true;
        }
        any
    }

    /// Moves to ERROR every QP of an application whose own memory could not be reached (it
    /// unmapped a registered buffer): as an HCA fails a QP on a protection fault, so its work
    /// requests complete in error instead of moving zeros. Returns whether there were any.
    fn fail_faulted(&mut self, ep: &mut Endpoint, mem: &mut HostMemory, now: Instant) -> bool {
        let faults = mem.take_faults();
        for mr in &faults {
            let Some((id, a)) = self.apps.iter().find(|(_, a)| a.mrs.contains_key(mr)) else {
                continue;
            };
            tracing::warn!(
                app = id,
                pid = a.creds.pid,
                mr = mr.value(),
                "a registered buffer is no longer mapped: moving the application's QPs to ERROR"
            );
            self.counters.memory_faults += 1;
            for qpn in a.qps.keys() {
                let _ = ep.modify_qp(*qpn, QpState::Error, &QpAttr::default(), now, mem);
            }
        }
        !faults.is_empty()
    }

    /// The doorbells of every attachment, for the datapath's wait set.
    pub fn doorbells(&self) -> Vec<BorrowedFd<'_>> {
        self.apps.values().map(|a| a.bell.as_fd()).collect()
    }

    /// Takes the rings off every doorbell (after a wait found one readable).
    pub fn clear_doorbells(&self) {
        for a in self.apps.values() {
            a.bell.clear();
        }
    }

    /// Tells every application whether the daemon is about to sleep (so a post must ring the
    /// doorbell) or awake (so it need not), as [`Ring::set_asleep`] describes. Returns, after
    /// saying it sleeps, whether a request the engine has room for arrived meanwhile: then it
    /// must not sleep. (Requests waiting for room in a full queue wait for the engine's
    /// progress, which wakes the daemon anyway.)
    pub fn set_asleep(&self, asleep: bool) -> bool {
        let mut waiting = false;
        let qps = self.apps.values().flat_map(|a| a.qps.values());
        let srqs = self.apps.values().flat_map(|a| a.srqs.values());
        let rings = qps
            .flat_map(|q| {
                [
                    (&q.sq, q.send_wait.is_some()),
                    (&q.rq, q.recv_wait.is_some()),
                ]
            })
            .chain(srqs.map(|s| (&s.ring, s.waiting.is_some())));
        for (ring, blocked) in rings {
            ring.set_asleep(asleep);
            waiting |= asleep && !blocked && ring.is_empty() != Ok(true);
        }
        waiting
    }

    /// Attachments open.
    pub fn len(&self) -> usize {
        self.apps.len()
    }

    /// True without attachments.
    pub fn is_empty(&self) -> bool {
        self.apps.is_empty()
    }

    /// Counters.
    pub fn counters(&self) -> HostCounters {
        self.counters
    }

    /// Every attachment, for `rocev2d stats`.
    pub fn snapshot(&self) -> Vec<AppSnapshot> {
        self.apps
            .iter()
            .map(|(id, a)| AppSnapshot {
                id: *id,
                shard: 0,
                pid: a.creds.pid,
                uid: a.creds.uid,
                qps: a.qps.keys().map(|q| format!("{:#x}", q.value())).collect(),
                cqs: a.cqs.len(),
                mrs: a.mrs.len(),
                mr_bytes: a.mr_bytes,
                mr_mapped_bytes: a.mr_mapped_bytes,
                ring_bytes: a.ring_bytes,
                posted: a.posted,
                completed: a.completed,
            })
            .collect()
    }
}

/// Deregisters region `mr`, unmaps or forgets its bytes, and gives back the address of one the
/// daemon placed.
fn release(ep: &mut Endpoint, mem: &mut HostMemory, addresses: &mut RegionAddresses, mr: MrId) {
    let info = ep.deregister_mr(mr);
    if let (Ok(info), Some(Backing::Shared(_))) = (info, mem.remove(mr)) {
        addresses.free(info.addr, info.len);
    }
}

/// A controlled Q_Key (its top bit set, IBA §10.2.4: the GSI's 0x80010000 among them) is for
/// privileged consumers only: refused to anyone but root.
fn controlled_qkey(q_key: u32, uid: u32) -> Result<(), Refusal> {
    if q_key & 0x8000_0000 != 0 && uid != 0 {
        return Err(Refusal(
            ErrorKind::Invalid,
            format!("Q_Key {q_key:#010x} is a controlled one: only root may use it"),
        ));
    }
    Ok(())
}

fn limit(what: &str, max: u32, key: &str) -> Refusal {
    Refusal(
        ErrorKind::Limit,
        format!("this application holds {max} {what} already, its limit ([limits] {key})"),
    )
}

/// The bytes of rings of `slots` each, when `a` may hold them besides its others.
fn ring_room(a: &App, limits: &Limits, slots: &[u32]) -> Result<u64, Refusal> {
    let bytes: u64 = slots
        .iter()
        .map(|&n| Ring::region_len(n.max(1), rocev2_ipc::proto::SLOT_SIZE) as u64)
        .sum();
    if a.ring_bytes.saturating_add(bytes) > limits.max_ring_bytes {
        return Err(Refusal(
            ErrorKind::Limit,
            format!(
                "this application's rings would pass {} bytes ([limits] max_ring_bytes)",
                limits.max_ring_bytes
            ),
        ));
    }
    Ok(bytes)
}

fn depth(n: u32, what: &str) -> Result<u32, Refusal> {
    if (1..=MAX_DEPTH).contains(&n) {
        Ok(n)
    } else {
        Err(Refusal(
            ErrorKind::Invalid,
            format!("{what} {n} outside 1..={MAX_DEPTH}"),
        ))
    }
}

fn owned_qp(a: &App, qpn: u32) -> Result<Qpn, Refusal> {
    let qpn = Qpn::new(qpn & 0xff_ffff);
    if a.qps.contains_key(&qpn) {
        Ok(qpn)
    } else {
        Err(unknown("QP"))
    }
}

/// The engine's configuration of a QP an application asks for, its handles checked.
fn qp_config(spec: &QpSpec, a: &App, cc: Option<CcConfig>) -> Result<QpConfig, Refusal> {
    let pd = PdId::new(spec.pd);
    if !a.pds.contains(&pd) {
        return Err(unknown("PD"));
    }
    let (scq, rcq) = (CqId(spec.send_cq), CqId(spec.recv_cq));
    if !a.cqs.contains_key(&scq) || !a.cqs.contains_key(&rcq) {
        return Err(unknown("CQ"));
    }
    if spec.max_send_sge > MAX_SGE || spec.max_recv_sge > MAX_SGE {
        return Err(Refusal(
            ErrorKind::Invalid,
            format!("at most {MAX_SGE} SGEs per request"),
        ));
    }
    if spec.srq.is_some_and(|s| !a.srqs.contains_key(&SrqId(s))) {
        return Err(unknown("SRQ"));
    }
    if spec.max_inline_data > MAX_INLINE {
        return Err(Refusal(
            ErrorKind::Invalid,
            format!("at most {MAX_INLINE} bytes of inline data"),
        ));
    }
    let mut cfg = QpConfig::new(pd, scq, rcq);
    cfg.max_send_wr = depth(spec.max_send_wr, "send queue depth")?;
    cfg.max_recv_wr = depth(spec.max_recv_wr, "receive queue depth")?;
    cfg.max_send_sge = spec.max_send_sge;
    cfg.max_recv_sge = spec.max_recv_sge;
    cfg.max_inline_data = spec.max_inline_data;
    cfg.ack_req_every = spec.ack_req_every.max(1);
    cfg.max_inflight_psns = spec.max_inflight_psns.clamp(1, 1 << 22);
    cfg.cc = cc;
    cfg.srq = spec.srq.map(SrqId);
    if let Some(m) = spec.multipath {
        if m.vp_count == 0 || m.bitmap_len == 0 || m.delta > m.bitmap_len {
            return Err(Refusal(
                ErrorKind::Invalid,
                "bad multipath parameters".into(),
            ));
        }
        cfg = cfg.with_multipath(MpConfig {
            iw: m.iw.max(1),
            bitmap_len: m.bitmap_len,
            delta: m.delta,
            sync_alpha: m.sync_alpha,
            probe_p: m.probe_p,
            initial_rtt: Duration::from_nanos(m.initial_rtt_ns),
            idle_restart_rtts: m.idle_restart_rtts,
            early_retx_rtts: m.early_retx_rtts,
            vp_base: m.vp_base,
            vp_count: m.vp_count,
            seed: m.seed,
        });
    }
    Ok(cfg)
}

/// A QP's send and receive rings, when `a` has room for them, and the descriptors that go to
/// the application.
fn qp_rings(
    cfg: &QpConfig,
    a: &App,
    limits: &Limits,
) -> Result<(Ring, Ring, Vec<OwnedFd>), Refusal> {
    ring_room(a, limits, &[cfg.max_send_wr, cfg.max_recv_wr])?;
    let (sq, rq) = (work_ring(cfg.max_send_wr)?, work_ring(cfg.max_recv_wr)?);
    let fds = vec![dup(sq.region().fd())?, dup(rq.region().fd())?];
    Ok((sq, rq, fds))
}

/// A ring of `slots` work requests the application produces (a QP's queue, an SRQ).
fn work_ring(slots: u32) -> Result<Ring, Refusal> {
    Ring::create(
        "rocev2d-wq",
        slots,
        rocev2_ipc::proto::SLOT_SIZE,
        End::Consumer,
    )
    .map_err(|e| Refusal(ErrorKind::Invalid, e.to_string()))
}

impl App {
    /// Keeps a QP's rings, counting their bytes.
    fn insert_qp(&mut self, qpn: Qpn, share: QpShare) {
        self.ring_bytes += (share.sq.region().len() + share.rq.region().len()) as u64;
        self.qps.insert(qpn, share);
    }
    /// Drops a QP's rings.
    fn remove_qp(&mut self, qpn: Qpn) {
        if let Some(s) = self.qps.remove(&qpn) {
            self.ring_bytes -= (s.sq.region().len() + s.rq.region().len()) as u64;
        }
    }
    /// Keeps a CQ's ring, counting its bytes.
    fn insert_cq(&mut self, cq: CqId, share: CqShare) {
        self.ring_bytes += share.ring.region().len() as u64;
        self.cqs.insert(cq, share);
    }
    /// Keeps an SRQ's ring, counting its bytes.
    fn insert_srq(&mut self, srq: SrqId, share: SrqShare) {
        self.ring_bytes += share.ring.region().len() as u64;
        self.srqs.insert(srq, share);
    }
    /// Drops an SRQ's ring.
    fn remove_srq(&mut self, srq: SrqId) {
        if let Some(s) = self.srqs.remove(&srq) {
            self.ring_bytes -= s.ring.region().len() as u64;
        }
    }
    /// Drops a CQ's ring.
    fn remove_cq(&mut self, cq: CqId) {
        if let Some(s) = self.cqs.remove(&cq) {
            self.ring_bytes -= s.ring.region().len() as u64;
        }
    }
}

impl QpShare {
    fn new(sq: Ring, rq: Ring, cfg: &QpConfig) -> QpShare {
        QpShare {
            sq,
            rq,
            send_cq: cfg.send_cq,
            recv_cq: cfg.recv_cq,
            send_wait: None,
            recv_wait: None,
        }
    }
}

/// The next hop towards `ip`: the MAC the control plane resolved (paths go from the daemon's
/// interface, its MAC and address, never the application's say).
fn next_hop(ip: std::net::IpAddr, mac: Option<[u8; 6]>) -> Result<NextHop, Refusal> {
    mac.map(NextHop::Mac)
        .ok_or_else(|| Refusal(ErrorKind::Path, format!("no neighbour entry for {ip}")))
}

/// A path or handle the interface cannot make, as a refusal.
fn path_refusal(e: PathError) -> Refusal {
    let kind = match e {
        PathError::Invalid(_) | PathError::NotAnMtu(_) => ErrorKind::Invalid,
        PathError::NoAddress { .. } | PathError::Neighbour { .. } | PathError::MtuTooSmall(_) => {
            ErrorKind::Path
        }
    };
    Refusal(kind, e.to_string())
}

/// An address handle to `ip` (UDP source port as QPN 0's, as the API's in-process handles).
fn address_handle(
    iface: &Interface,
    ip: std::net::IpAddr,
    mac: Option<[u8; 6]>,
    dscp: u8,
) -> Result<AddressHandle, Refusal> {
    host::address_handle(iface, ip, next_hop(ip, mac)?, dscp).map_err(path_refusal)
}

/// INIT→RTR→RTS attributes towards the peer of `spec` (its next hop's MAC already resolved by
/// the control plane).
fn connect_attr(iface: &Interface, qpn: Qpn, spec: &ConnectSpec) -> Result<ConnectAttr, Refusal> {
    host::connect_attr(iface, qpn, spec, next_hop(spec.ip, spec.mac)?).map_err(path_refusal)
}

#[cfg(test)]
mod tests;
