//! The attached backend: the verbs carried out by the `rocev2d` serving the interface
//! ([`Backend`] for the locked attachment).
//!
//! Set-up verbs are requests on the daemon's control socket ([`rocev2_ipc::proto`]). Memory
//! regions are sealed memfds this process maps and hands to the daemon, which reads and writes
//! them in place. Work requests go into the QP's send and receive rings, followed by a ring of
//! the doorbell when the daemon sleeps; completions come out of the CQ's ring, and a CQ's
//! eventfd wakes a sleeping [`crate::Device::wait_cq`] or [`crate::Device::next_completion`]
//! ([`crate::wakeup`]). So while both sides are busy, posting
//! and polling cost no system call at all.
//!
//! The connection manager is the daemon's ([`crate::Device::cm_listen`] and the other `cm_*`
//! calls are control requests on this application's own service IDs, connections and QPs); the
//! daemon queues this application's CM events and signals a CM eventfd, and
//! [`crate::Device::next_cm_event`] fetches them ([`Request::CmPoll`]) and sleeps on it.
//!
//! Every call that waits also watches the control socket: when the daemon dies the kernel
//! closes it, and the call returns [`Error::DaemonGone`] at once; a daemon that stops
//! answering makes a control request fail with [`Error::Timeout`] after [`CALL_TIMEOUT`].
//!
//! UD QPs use the same rings; their send records name an address handle the daemon built
//! from its own interface ([`crate::Device::create_ah`]), so the application never chooses the
//! source addresses of its frames.
//!
//! Deviations: work requests the engine refuses (wrong QP state, too many SGEs) complete with
//! an error status instead of failing the post; the QP's congestion control is the daemon's.

use crate::backend::{Backend, Drive, RegionBytes, Step};
use crate::cm_wait::{CmWaiters, Look, Sleep as CmSleep, queue_cm_event};
use crate::engine::{EngineGuard, ProgressMode};
use crate::error::{Error, Result};
use crate::qp::{ConnectOptions, RemoteQp};
use crate::random::random_psn;
use crate::ud::{AhAttr, UdAddress, check_ud_send};
use crate::wakeup::{Waitable, wait_any};
use rocev2_core::EndpointError;
use rocev2_core::cc::CcScheme;
use rocev2_core::cm::{
    AcceptParams, ConnId, ConnectParams, Event, RejectReason, ServiceId, SidrId, SidrParams,
    SidrReplyParams,
};
use rocev2_core::cq::WorkCompletion;
use rocev2_core::mr::{AccessFlags, Lkey, MrId, MrInfo, PdId, Rkey};
use rocev2_core::qp::{
    CqId, ErrorCause, MpSnapshot, Mtu, PostError, QpConfig, QpMode, QpState, RecvWr, SendWr,
};
use rocev2_core::srq::{SrqAttr, SrqId};
use rocev2_core::wire::Qpn;
use rocev2_datapath::Interface;
use rocev2_datapath::Progress;
use rocev2_datapath::host::{CallerRange, ProcessMemory, SharedPages};
use rocev2_datapath::iface::IfAddr;
use rocev2_ipc::cm::AcceptSpec;
use rocev2_ipc::frame::{self, Decoder};
use rocev2_ipc::notify::EventFd;
use rocev2_ipc::proto::{
    self, ConnectSpec, ErrorKind, InPlace, ModifySpec, MpSpec, QpSpec, Request, Response,
};
use rocev2_ipc::record::{self, CompletionRecord, RecvRecord, SendRecord, UdRecord};
use rocev2_ipc::ring::{End, Ring, RingError};
use rocev2_ipc::shm::Region;
use std::collections::{BTreeMap, VecDeque};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Longest a control request waits for the daemon's answer.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct CqView {
    ring: Ring,
    event: Arc<Waitable<EventFd>>,
    /// Waiters sleeping on the eventfd: the ring says "asleep" while there is one, so a waiter
    /// that wakes does not take the signal away from another.
    sleepers: usize,
    /// Armed for a completion event ([`Attached::arm_notify`]), which counts as one sleeper.
    notify: bool,
}

impl CqView {
    /// Counts a sleeper and says so in the ring; true when a completion is there already.
    fn arm(&mut self) -> bool {
        self.event.get().clear();
        self.sleepers += 1;
        self.ring.set_asleep(true);
        self.ring.is_empty() != Ok(true)
    }

    /// A sleeper woke; the ring stops saying "asleep" when none is left.
    fn disarm(&mut self) {
        self.sleepers = self.sleepers.saturating_sub(1);
        if self.sleepers == 0 {
            self.ring.set_asleep(false);
        }
    }
}

/// The CM side of an attachment: the eventfd the daemon signals when it queues an event of
/// this application, the events fetched but not yet picked, and the waiters to wake when a
/// fetch brings some.
#[derive(Debug)]
struct CmView {
    event: Arc<Waitable<EventFd>>,
    events: VecDeque<Event>,
    waiters: CmWaiters,
}

/// Events fetched per [`Request::CmPoll`].
const CM_POLL_MAX: u32 = 64;

#[derive(Debug)]
struct QpView {
    sq: Ring,
    rq: Ring,
    /// A UD QP's MTU; `None` for RC.
    ud_mtu: Option<Mtu>,
    /// It takes its receive requests from a shared receive queue, so refuses its own.
    uses_srq: bool,
}

/// A shared receive queue: the daemon's limit eventfd, and the ring `ibv_post_srq_recv` pushes
/// into (the daemon moves its records into the engine's SRQ, as a QP's receive ring's).
#[derive(Debug)]
struct SrqView {
    event: EventFd,
    ring: Ring,
    /// SGEs per request: more are refused here, as the engine's SRQ would (a refused record
    /// would have no CQ to complete on).
    max_sge: u32,
}

/// What the application keeps of a region it registered.
#[derive(Debug)]
enum Held {
    /// The memfd it shares with the daemon.
    Region(Region),
    /// Its own memory in place ([`Attached::register_caller`]), with the pages it moved,
    /// held until the region is deregistered.
    InPlace { _moved: SharedPages },
}

/// An attachment to the daemon; see the module docs.
#[derive(Debug)]
pub(crate) struct Attached {
    sock: UnixStream,
    dec: Decoder,
    bell: EventFd,
    pub(crate) iface: Interface,
    pub(crate) datapath: String,
    pub(crate) reason: String,
    /// The daemon's congestion-control scheme (its `[cc] scheme`).
    pub(crate) cc: CcScheme,
    /// Regions by id.
    mrs: BTreeMap<MrId, Held>,
    cqs: BTreeMap<CqId, CqView>,
    qps: BTreeMap<Qpn, QpView>,
    /// How long a wait spins on the ring before sleeping on the eventfd.
    pub(crate) spin: Duration,
    /// A duplicate of the control socket, which waiters watch without the device's lock: the
    /// kernel makes it readable when the daemon dies.
    pub(crate) watch: Arc<Waitable<OwnedFd>>,
    cm: Option<CmView>,
    /// Shared receive queues, each with the eventfd the daemon signals when its limit is
    /// reached.
    srqs: BTreeMap<SrqId, SrqView>,
    buf: Vec<u8>,
    /// Empty [`Backend::poll_cq_driving`] calls, to check on the daemon now and then.
    empty_polls: u32,
}

fn protocol(what: impl Into<String>) -> Error {
    Error::Protocol(what.into())
}

fn refused(kind: ErrorKind, message: String) -> Error {
    match kind {
        ErrorKind::Timeout => Error::Timeout,
        kind => Error::Refused { kind, message },
    }
}

fn one<const N: usize>(fds: Vec<OwnedFd>) -> Result<[OwnedFd; N]> {
    <[OwnedFd; N]>::try_from(fds).map_err(|_| protocol("answer without its descriptors"))
}

impl Attached {
    /// Attaches to the daemon listening on `path`.
    pub(crate) fn open(path: &Path, spin: Duration) -> Result<Attached> {
        let sock = rocev2_ipc::connect(path).map_err(|source| Error::Attach {
            path: path.to_path_buf(),
            source,
        })?;
        let mut dec = Decoder::default();
        let ns = rocev2_ipc::netns().map_err(Error::Io)?;
        let (welcome, fds) = call(
            &sock,
            &mut dec,
            &Request::Hello {
                version: proto::VERSION,
            },
            &[ns.as_fd()],
            CALL_TIMEOUT,
        )?;
        let (iface, datapath, reason, cc) = match welcome {
            Response::Welcome {
                iface,
                datapath,
                reason,
                cc,
                ..
            } => (iface, datapath, reason, cc),
            // Another user, another network namespace, another protocol version.
            Response::Error { kind, message } => return Err(refused(kind, message)),
            other => return Err(unexpected(other)),
        };
        let [bell] = one(fds)?;
        // The same protocol version has the same scheme table: an unknown name is a broken
        // daemon, not a newer one.
        let cc = CcScheme::from_name(&cc)
            .ok_or_else(|| protocol(format!("the daemon runs an unknown scheme {cc:?}")))?;
        let watch = Arc::new(Waitable::new(
            sock.as_fd().try_clone_to_owned().map_err(Error::Io)?,
        ));
        let iface = Interface {
            name: iface.name,
            index: iface.index,
            mac: iface.mac,
            mtu: iface.mtu,
            up: iface.up,
            addrs: iface
                .addrs
                .into_iter()
                .map(|(ip, prefix_len, link_local)| IfAddr {
                    ip,
                    prefix_len,
                    link_local,
                })
                .collect(),
            rx_queues: 1,
        };
        Ok(Attached {
            sock,
            dec,
            bell: EventFd::from_fd(bell),
            iface,
            datapath,
            reason,
            cc,
            mrs: BTreeMap::new(),
            cqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            spin,
            watch,
            cm: None,
            srqs: BTreeMap::new(),
            buf: Vec::new(),
            empty_polls: 0,
        })
    }

    fn call(&mut self, req: &Request, fds: &[BorrowedFd<'_>]) -> Result<(Response, Vec<OwnedFd>)> {
        self.call_for(req, fds, CALL_TIMEOUT)
    }

    fn call_for(
        &mut self,
        req: &Request,
        fds: &[BorrowedFd<'_>],
        timeout: Duration,
    ) -> Result<(Response, Vec<OwnedFd>)> {
        match call(&self.sock, &mut self.dec, req, fds, timeout)? {
            (Response::Error { kind, message }, _) => Err(refused(kind, message)),
            ok => Ok(ok),
        }
    }

    fn done(&mut self, req: &Request) -> Result<()> {
        match self.call(req, &[])?.0 {
            Response::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    pub(crate) fn alloc_pd(&mut self) -> Result<PdId> {
        match self.call(&Request::AllocPd, &[])?.0 {
            Response::Pd(id) => Ok(PdId::new(id)),
            other => Err(unexpected(other)),
        }
    }

    pub(crate) fn register(&mut self, pd: PdId, buf: &[u8], access: AccessFlags) -> Result<MrInfo> {
        let region = Region::create("rocev2-mr", buf.len()).map_err(|e| protocol(e.to_string()))?;
        region.write(0, buf);
        let info = self.reg_mr(pd, buf.len() as u64, access, None, &[region.fd()])?;
        self.mrs.insert(info.id, Held::Region(region));
        Ok(info)
    }

    /// Registers the caller's own bytes in place: their whole pages moved onto memfds
    /// (`host::SharedPages`) are mapped by the daemon, which reaches the rest through this
    /// process's `/proc/self/mem` (`host::ProcessMemory`); all are sent with the request.
    pub(crate) fn register_caller(
        &mut self,
        pd: PdId,
        range: &CallerRange,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrInfo> {
        let mem = ProcessMemory::open_own().map_err(Error::Io)?;
        let shared = SharedPages::share(range, proto::MAX_PAGE_PIECES);
        let (pages, moved): (Vec<_>, Vec<_>) = shared.pieces().unzip();
        let fds: Vec<_> = std::iter::once(mem.as_fd()).chain(moved).collect();
        let at = Some(InPlace {
            addr: range.addr() as u64,
            iova,
            pages,
        });
        let info = self.reg_mr(pd, range.len() as u64, access, at, &fds);
        drop(fds);
        let info = info?;
        self.mrs.insert(info.id, Held::InPlace { _moved: shared });
        Ok(info)
    }

    fn reg_mr(
        &mut self,
        pd: PdId,
        len: u64,
        access: AccessFlags,
        at: Option<InPlace>,
        fds: &[BorrowedFd<'_>],
    ) -> Result<MrInfo> {
        let req = Request::RegMr {
            pd: pd.value(),
            len,
            access: access.bits(),
            at,
        };
        let Response::Mr(m) = self.call(&req, fds)?.0 else {
            return Err(protocol("RegMr answered without a region"));
        };
        Ok(MrInfo {
            id: MrId::new(m.id),
            lkey: Lkey::new(m.lkey),
            rkey: Rkey::new(m.rkey),
            addr: m.addr,
            len: m.len,
            access: AccessFlags::from_bits_retain(m.access),
            pd: PdId::new(m.pd),
        })
    }

    pub(crate) fn deregister(&mut self, mr: MrId) -> Result<Vec<u8>> {
        if !self.mrs.contains_key(&mr) {
            return Err(Error::UnknownMr);
        }
        self.done(&Request::DeregMr { mr: mr.value() })?;
        // The daemon has forgotten the region: moved pages may now go back (`SharedPages`'s
        // drop), and the caller's own bytes stay the caller's.
        match self.mrs.remove(&mr).ok_or(Error::UnknownMr)? {
            Held::Region(r) => Ok(r.bytes().to_vec()),
            Held::InPlace { .. } => Ok(Vec::new()),
        }
    }

    pub(crate) fn mr_bytes(&self, mr: MrId, len: u64) -> Option<&[u8]> {
        let Held::Region(r) = self.mrs.get(&mr)? else {
            return None;
        };
        r.bytes().get(..usize::try_from(len).ok()?)
    }

    pub(crate) fn mr_bytes_mut(&mut self, mr: MrId, len: u64) -> Option<&mut [u8]> {
        let Held::Region(r) = self.mrs.get_mut(&mr)? else {
            return None;
        };
        r.bytes_mut().get_mut(..usize::try_from(len).ok()?)
    }

    pub(crate) fn dealloc_pd(&mut self, pd: PdId) -> Result<()> {
        self.done(&Request::DeallocPd { pd: pd.value() })
    }

    pub(crate) fn destroy_cq(&mut self, cq: CqId) -> Result<()> {
        if !self.cqs.contains_key(&cq) {
            return Err(EndpointError::UnknownCq.into());
        }
        self.done(&Request::DestroyCq { cq: cq.0 })?;
        self.cqs.remove(&cq);
        Ok(())
    }

    /// `ibv_req_notify_cq`: the ring says "asleep" until the event is taken
    /// ([`Attached::ack_notify`]); a completion already there signals at once.
    pub(crate) fn arm_notify(&mut self, cq: CqId) -> Result<()> {
        let v = self.cqs.get_mut(&cq).ok_or(EndpointError::UnknownCq)?;
        let arrived = if v.notify {
            v.ring.is_empty() != Ok(true)
        } else {
            v.notify = true;
            v.arm()
        };
        if arrived {
            v.event.get().signal();
        }
        Ok(())
    }

    /// Takes a completion event: clears the eventfd and ends the arming.
    pub(crate) fn ack_notify(&mut self, cq: CqId) {
        if let Some(v) = self.cqs.get_mut(&cq) {
            v.event.get().clear();
            if std::mem::take(&mut v.notify) {
                v.disarm();
            }
        }
    }

    pub(crate) fn cq_event_fd(&self, cq: CqId) -> Result<OwnedFd> {
        let v = self.cqs.get(&cq).ok_or(EndpointError::UnknownCq)?;
        v.event
            .get()
            .as_fd()
            .try_clone_to_owned()
            .map_err(Error::Io)
    }

    pub(crate) fn modify_qp(&mut self, qpn: Qpn, spec: ModifySpec) -> Result<QpState> {
        let req = Request::ModifyQp {
            qpn: qpn.value(),
            spec,
        };
        match self.call(&req, &[])?.0 {
            Response::QpStatus { state, .. } => {
                QpState::from_ibv(state).ok_or_else(|| protocol("not a QP state"))
            }
            other => Err(unexpected(other)),
        }
    }

    pub(crate) fn create_cq(&mut self, capacity: usize) -> Result<CqId> {
        let capacity = u32::try_from(capacity).unwrap_or(u32::MAX);
        let (r, fds) = self.call(&Request::CreateCq { capacity }, &[])?;
        let Response::Cq { id, slots } = r else {
            return Err(unexpected(r));
        };
        let [ring, event] = one(fds)?;
        let ring = open_ring(ring, slots, End::Consumer)?;
        self.cqs.insert(
            CqId(id),
            CqView {
                ring,
                event: Arc::new(Waitable::new(EventFd::from_fd(event))),
                sleepers: 0,
                notify: false,
            },
        );
        Ok(CqId(id))
    }

    pub(crate) fn create_qp(&mut self, cfg: &QpConfig) -> Result<Qpn> {
        let (r, fds) = self.call(&Request::CreateQp(qp_spec(cfg)), &[])?;
        let Response::Qp {
            qpn,
            sq_slots,
            rq_slots,
        } = r
        else {
            return Err(unexpected(r));
        };
        self.map_qp(qpn, fds, (sq_slots, rq_slots), None, cfg.srq.is_some())
    }

    /// Maps a new QP's rings (the answer's descriptors) and keeps its view.
    fn map_qp(
        &mut self,
        qpn: u32,
        fds: Vec<OwnedFd>,
        (sq_slots, rq_slots): (u32, u32),
        ud_mtu: Option<Mtu>,
        uses_srq: bool,
    ) -> Result<Qpn> {
        let [sq, rq] = one(fds)?;
        let view = QpView {
            sq: open_ring(sq, sq_slots, End::Producer)?,
            rq: open_ring(rq, rq_slots, End::Producer)?,
            ud_mtu,
            uses_srq,
        };
        let qpn = Qpn::new(qpn & 0xff_ffff);
        self.qps.insert(qpn, view);
        Ok(qpn)
    }

    pub(crate) fn connect(&mut self, qpn: Qpn, spec: ConnectSpec) -> Result<()> {
        // Resolution happens in the daemon and may take the whole resolve timeout.
        let wait = CALL_TIMEOUT + Duration::from_millis(u64::from(spec.resolve_timeout_ms));
        match self
            .call_for(
                &Request::Connect {
                    qpn: qpn.value(),
                    spec,
                },
                &[],
                wait,
            )?
            .0
        {
            Response::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// The QP's state, mode and why it entered ERROR, as the daemon knows them.
    pub(crate) fn query(&mut self, qpn: Qpn) -> Option<(QpState, QpMode, Option<ErrorCause>)> {
        match self
            .call(&Request::QueryQp { qpn: qpn.value() }, &[])
            .ok()?
            .0
        {
            Response::QpStatus {
                state,
                multipath,
                error,
            } => {
                let mode = if multipath {
                    QpMode::MultiPath
                } else {
                    QpMode::Rc
                };
                let cause = error.and_then(|(k, v)| ErrorCause::from_parts(k, v));
                Some((QpState::from_ibv(state)?, mode, cause))
            }
            _ => None,
        }
    }

    /// The QP's MP-RDMA state as the daemon's engine holds it; `None` for an RC QP, one not
    /// of this application, or a failed call (as [`Self::query`]).
    pub(crate) fn mp_snapshot(&mut self, qpn: Qpn) -> Option<MpSnapshot> {
        match self
            .call(&Request::MpSnapshot { qpn: qpn.value() }, &[])
            .ok()?
            .0
        {
            Response::MpState(state) => state.map(MpSnapshot::from),
            _ => None,
        }
    }

    pub(crate) fn reset_to_error(&mut self, qpn: Qpn) -> Result<()> {
        self.done(&Request::ModifyToError { qpn: qpn.value() })
    }

    pub(crate) fn destroy_qp(&mut self, qpn: Qpn) -> Result<()> {
        self.done(&Request::DestroyQp { qpn: qpn.value() })?;
        self.qps.remove(&qpn);
        Ok(())
    }

    pub(crate) fn post_send(&mut self, qpn: Qpn, wr: &SendWr) -> Result<()> {
        let q = self.qps.get_mut(&qpn).ok_or(EndpointError::UnknownQp)?;
        if wr.ud.is_some() {
            // A path cannot cross: UD sends name the daemon's address handle (post_send_to).
            return Err(EndpointError::Post(PostError::Unsupported).into());
        }
        record::encode_into(&SendRecord::from(wr), &mut self.buf);
        push(&mut q.sq, &self.buf, &self.bell)?;
        Ok(())
    }

    /// Creates a UD QP in the daemon, brought to RTS there, and maps its rings.
    pub(crate) fn create_ud_qp(&mut self, cfg: &QpConfig, q_key: u32) -> Result<Qpn> {
        let req = Request::CreateUdQp {
            spec: qp_spec(cfg),
            q_key,
            sq_psn: random_psn(),
        };
        let (r, fds) = self.call(&req, &[])?;
        let Response::UdQp {
            qpn,
            sq_slots,
            rq_slots,
            mtu,
        } = r
        else {
            return Err(unexpected(r));
        };
        let mtu = Mtu::from_bytes(mtu).ok_or_else(|| protocol(format!("UD MTU {mtu}")))?;
        self.map_qp(qpn, fds, (sq_slots, rq_slots), Some(mtu), cfg.srq.is_some())
    }

    /// A UD QP's MTU; `None` for an RC QP or an unknown one.
    pub(crate) fn ud_mtu(&self, qpn: Qpn) -> Option<Mtu> {
        self.qps.get(&qpn)?.ud_mtu
    }

    /// Asks the daemon for an address handle to `attr.ip` (it resolves the MAC when `attr`
    /// does not give it, and builds the path from its interface).
    pub(crate) fn create_ah(&mut self, attr: &AhAttr) -> Result<u32> {
        let resolve_timeout_ms =
            u32::try_from(attr.resolve_timeout.as_millis()).unwrap_or(u32::MAX);
        let req = Request::CreateAh {
            ip: attr.ip,
            mac: attr.mac,
            dscp: attr.dscp,
            resolve_timeout_ms,
        };
        let wait = CALL_TIMEOUT + Duration::from_millis(u64::from(resolve_timeout_ms));
        match self.call_for(&req, &[], wait)?.0 {
            Response::Ah(id) => Ok(id),
            other => Err(unexpected(other)),
        }
    }

    pub(crate) fn destroy_ah(&mut self, ah: u32) -> Result<()> {
        match self.done(&Request::DestroyAh { ah }) {
            Err(Error::Refused {
                kind: ErrorKind::UnknownHandle,
                ..
            }) => Err(Error::UnknownAh),
            other => other,
        }
    }

    /// Posts a UD send to `to` (checked by the caller): the record names the address handle,
    /// which the daemon looks up.
    pub(crate) fn post_send_to(&mut self, qpn: Qpn, to: UdAddress, wr: &SendWr) -> Result<()> {
        let q = self.qps.get_mut(&qpn).ok_or(EndpointError::UnknownQp)?;
        let ud = UdRecord {
            ah: to.ah.id(),
            remote_qpn: to.qpn.value(),
            remote_qkey: to.q_key,
        };
        record::encode_into(&SendRecord::from(wr).with_ud(ud), &mut self.buf);
        push(&mut q.sq, &self.buf, &self.bell)?;
        Ok(())
    }

    /// Asks the daemon for a shared receive queue, with its limit eventfd and receive ring.
    pub(crate) fn create_srq(&mut self, pd: PdId, max_wr: u32, max_sge: u32) -> Result<SrqId> {
        let req = Request::CreateSrq {
            pd: pd.value(),
            max_wr,
            max_sge,
        };
        let (r, fds) = self.call(&req, &[])?;
        let Response::Srq { id, slots } = r else {
            return Err(unexpected(r));
        };
        let [event, ring] = one(fds)?;
        let view = SrqView {
            event: EventFd::from_fd(event),
            ring: open_ring(ring, slots, End::Producer)?,
            max_sge,
        };
        self.srqs.insert(SrqId(id), view);
        Ok(SrqId(id))
    }

    /// The limit eventfd of one of this application's SRQs.
    fn srq_event(&self, srq: SrqId) -> Result<&EventFd> {
        Ok(&self.srqs.get(&srq).ok_or(EndpointError::UnknownSrq)?.event)
    }

    /// `ibv_post_srq_recv`: the request into the SRQ's ring, the doorbell rung if the daemon
    /// sleeps.
    pub(crate) fn post_srq_recv(&mut self, srq: SrqId, wr: &RecvWr) -> Result<()> {
        let s = self.srqs.get_mut(&srq).ok_or(EndpointError::UnknownSrq)?;
        if wr.sg_list.len() > s.max_sge as usize {
            return Err(EndpointError::Post(PostError::TooManySge).into());
        }
        record::encode_into(&RecvRecord::from(wr), &mut self.buf);
        push(&mut s.ring, &self.buf, &self.bell)?;
        Ok(())
    }

    /// A request of one of this application's SRQs, carried out by the daemon.
    fn srq_call(&mut self, srq: SrqId, req: &Request) -> Result<Response> {
        self.srq_event(srq)?;
        Ok(self.call(req, &[])?.0)
    }

    pub(crate) fn destroy_srq(&mut self, srq: SrqId) -> Result<()> {
        match self.srq_call(srq, &Request::DestroySrq { srq: srq.0 })? {
            Response::Done => {
                self.srqs.remove(&srq);
                Ok(())
            }
            other => Err(unexpected(other)),
        }
    }

    pub(crate) fn post_recv(&mut self, qpn: Qpn, wr: &RecvWr) -> Result<()> {
        let q = self.qps.get_mut(&qpn).ok_or(EndpointError::UnknownQp)?;
        if q.uses_srq {
            return Err(EndpointError::Post(PostError::UsesSrq).into());
        }
        record::encode_into(&RecvRecord::from(wr), &mut self.buf);
        push(&mut q.rq, &self.buf, &self.bell)?;
        Ok(())
    }

    pub(crate) fn poll_cq(&mut self, cq: CqId, out: &mut Vec<WorkCompletion>, max: usize) -> usize {
        let Some(v) = self.cqs.get_mut(&cq) else {
            return 0;
        };
        let mut n = 0;
        while n < max && v.ring.pop(&mut self.buf) == Ok(true) {
            let wc = record::decode::<CompletionRecord>(&self.buf)
                .ok()
                .and_then(|r| WorkCompletion::try_from(r).ok());
            if let Some(wc) = wc {
                out.push(wc);
                n += 1;
            }
        }
        n
    }

    /// Fails with [`Error::DaemonGone`] if the daemon closed the connection. Call with the
    /// device's lock held, so no control request's answer is in flight: the daemon never
    /// speaks unasked, so a readable socket means a closed one.
    pub(crate) fn check_alive(&self) -> Result<()> {
        match wait_any(&[self.sock.as_fd()], Duration::ZERO)?.first() {
            Some(true) => Err(Error::DaemonGone),
            _ => Ok(()),
        }
    }

    /// Prepares to sleep until `cq` gets a completion (the ring's wake-up protocol: say we
    /// sleep, then look again): `None` when it has one already, else the eventfd to sleep on.
    /// Call [`Attached::disarm`] after waking.
    pub(crate) fn arm(&mut self, cq: CqId) -> Result<Option<Arc<Waitable<EventFd>>>> {
        let v = self.cqs.get_mut(&cq).ok_or(EndpointError::UnknownCq)?;
        if v.arm() {
            v.disarm();
            return Ok(None);
        }
        Ok(Some(Arc::clone(&v.event)))
    }

    /// Ends a sleep prepared by [`Attached::arm`].
    pub(crate) fn disarm(&mut self, cq: CqId) {
        if let Some(v) = self.cqs.get_mut(&cq) {
            v.disarm();
        }
    }

    /// [`Attached::arm`] for every CQ: whether one has a completion already, and the eventfds.
    pub(crate) fn arm_all(&mut self) -> (bool, Vec<Arc<Waitable<EventFd>>>) {
        let mut arrived = false;
        let events = self
            .cqs
            .values_mut()
            .map(|v| {
                arrived |= v.arm();
                Arc::clone(&v.event)
            })
            .collect();
        (arrived, events)
    }

    /// Ends a sleep prepared by [`Attached::arm_all`].
    pub(crate) fn disarm_all(&mut self) {
        for v in self.cqs.values_mut() {
            v.disarm();
        }
    }

    /// Asks the daemon for this application's CM events, once.
    pub(crate) fn cm_enable(&mut self) -> Result<()> {
        if self.cm.is_some() {
            return Ok(());
        }
        let (r, fds) = self.call(&Request::CmEnable, &[])?;
        let Response::CmEnabled = r else {
            return Err(unexpected(r));
        };
        let [event] = one(fds)?;
        self.cm = Some(CmView {
            event: Arc::new(Waitable::new(EventFd::from_fd(event))),
            events: VecDeque::new(),
            waiters: CmWaiters::default(),
        });
        Ok(())
    }

    pub(crate) fn cm_listen(&mut self, service: ServiceId) -> Result<()> {
        self.done(&Request::CmListen {
            service_id: service.0,
        })
    }

    pub(crate) fn cm_unlisten(&mut self, service: ServiceId) -> Result<bool> {
        let req = Request::CmUnlisten {
            service_id: service.0,
        };
        match self.call(&req, &[])?.0 {
            Response::Listened(was) => Ok(was),
            other => Err(unexpected(other)),
        }
    }

    pub(crate) fn cm_connect(
        &mut self,
        params: ConnectParams,
        resolve_timeout: Duration,
    ) -> Result<ConnId> {
        let ms = u32::try_from(resolve_timeout.as_millis()).unwrap_or(u32::MAX);
        let req = Request::CmConnect {
            qpn: params.local_qpn.value(),
            spec: (&params).into(),
            mac: None,
            resolve_timeout_ms: ms,
        };
        // Resolution happens in the daemon and may take the whole resolve timeout.
        match self.call_for(&req, &[], CALL_TIMEOUT + resolve_timeout)?.0 {
            Response::CmConn(id) => Ok(ConnId::from_comm_id(id)),
            other => Err(unexpected(other)),
        }
    }

    pub(crate) fn cm_sidr_request(
        &mut self,
        params: &SidrParams,
        resolve_timeout: Duration,
    ) -> Result<SidrId> {
        let ms = u32::try_from(resolve_timeout.as_millis()).unwrap_or(u32::MAX);
        let req = Request::CmSidrRequest {
            spec: params.into(),
            mac: None,
            resolve_timeout_ms: ms,
        };
        // Resolution happens in the daemon and may take the whole resolve timeout.
        match self.call_for(&req, &[], CALL_TIMEOUT + resolve_timeout)?.0 {
            Response::CmSidr(id) => Ok(SidrId::from_value(id)),
            other => Err(unexpected(other)),
        }
    }

    pub(crate) fn cm_sidr_reply(&mut self, id: SidrId, params: &SidrReplyParams) -> Result<()> {
        self.done(&Request::CmSidrReply {
            id: id.value(),
            spec: params.into(),
        })
    }

    pub(crate) fn cm_accept(&mut self, conn: ConnId, params: &AcceptParams) -> Result<()> {
        self.done(&Request::CmAccept {
            comm_id: conn.comm_id(),
            spec: AcceptSpec::from(params),
        })
    }

    pub(crate) fn cm_send_mra(&mut self, conn: ConnId, service_timeout: u8) -> Result<()> {
        self.done(&Request::CmSendMra {
            comm_id: conn.comm_id(),
            service_timeout,
        })
    }

    pub(crate) fn cm_reject(
        &mut self,
        conn: ConnId,
        reason: RejectReason,
        private_data: &[u8],
    ) -> Result<()> {
        self.done(&Request::CmReject {
            comm_id: conn.comm_id(),
            reason: reason.0,
            private_data: private_data.to_vec(),
        })
    }

    pub(crate) fn cm_disconnect(&mut self, conn: ConnId, private_data: &[u8]) -> Result<()> {
        self.done(&Request::CmDisconnect {
            comm_id: conn.comm_id(),
            private_data: private_data.to_vec(),
        })
    }

    /// The CM waiters of this attachment (enabling CM events first).
    pub(crate) fn cm_waiters(&mut self) -> Result<&CmWaiters> {
        self.cm_enable()?;
        match &self.cm {
            Some(cm) => Ok(&cm.waiters),
            None => Err(protocol("CM events not enabled")),
        }
    }

    /// Moves the events the daemon queued for this application into the device's queue
    /// (enabling them first) and wakes the waiters if there were any; returns the eventfd to
    /// sleep on. The eventfd is cleared before asking, so an event queued after the answer
    /// signals it again.
    pub(crate) fn cm_fetch(&mut self) -> Result<Arc<Waitable<EventFd>>> {
        self.cm_enable()?;
        let event = match &self.cm {
            Some(cm) => Arc::clone(&cm.event),
            None => return Err(protocol("CM events not enabled")),
        };
        event.get().clear();
        loop {
            let (r, _) = self.call(&Request::CmPoll { max: CM_POLL_MAX }, &[])?;
            let Response::CmEvents(records) = r else {
                return Err(unexpected(r));
            };
            let n = records.len();
            let mut fetched = Vec::with_capacity(n);
            for rec in records {
                fetched.push(Event::try_from(rec).map_err(|e| protocol(format!("CM event: {e}")))?);
            }
            if let Some(cm) = &mut self.cm {
                let any = !fetched.is_empty();
                for ev in fetched {
                    queue_cm_event(&mut cm.events, ev);
                }
                if any {
                    cm.waiters.fire();
                }
            }
            if n < CM_POLL_MAX as usize {
                return Ok(event);
            }
        }
    }

    /// Takes the first fetched event `pick` accepts.
    pub(crate) fn cm_take(&mut self, pick: impl FnMut(&Event) -> bool) -> Option<Event> {
        let cm = self.cm.as_mut()?;
        let i = cm.events.iter().position(pick)?;
        cm.events.remove(i)
    }

    pub(crate) fn drain(&mut self, timeout: Duration) -> Result<()> {
        let ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
        match self
            .call_for(
                &Request::Drain { timeout_ms: ms },
                &[],
                timeout + CALL_TIMEOUT,
            )?
            .0
        {
            Response::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}

/// The control protocol's form of a QP configuration (congestion control is the daemon's).
fn qp_spec(cfg: &QpConfig) -> QpSpec {
    QpSpec {
        pd: cfg.pd.value(),
        send_cq: cfg.send_cq.0,
        recv_cq: cfg.recv_cq.0,
        max_send_wr: cfg.max_send_wr,
        max_recv_wr: cfg.max_recv_wr,
        max_send_sge: cfg.max_send_sge,
        max_recv_sge: cfg.max_recv_sge,
        max_inline_data: cfg.max_inline_data,
        ack_req_every: cfg.ack_req_every,
        max_inflight_psns: cfg.max_inflight_psns,
        srq: cfg.srq.map(|s| s.0),
        multipath: cfg.multipath.map(|m| MpSpec {
            iw: m.iw,
            bitmap_len: m.bitmap_len,
            delta: m.delta,
            sync_alpha: m.sync_alpha,
            probe_p: m.probe_p,
            initial_rtt_ns: m.initial_rtt.as_nanos(),
            idle_restart_rtts: m.idle_restart_rtts,
            early_retx_rtts: m.early_retx_rtts,
            vp_base: m.vp_base,
            vp_count: m.vp_count,
            seed: m.seed,
        }),
    }
}

fn unexpected(r: Response) -> Error {
    protocol(format!("unexpected answer {r:?}"))
}

fn open_ring(fd: OwnedFd, slots: u32, end: End) -> Result<Ring> {
    let len = Ring::region_len(slots, proto::SLOT_SIZE) as u64;
    Region::from_fd(fd, len)
        .and_then(|r| Ring::open(r, slots, proto::SLOT_SIZE, end))
        .map_err(|e| protocol(e.to_string()))
}

/// Pushes record `rec` into a work ring, ringing the daemon's doorbell `bell` if it sleeps.
fn push(ring: &mut Ring, rec: &[u8], bell: &EventFd) -> Result<()> {
    match ring.push(rec) {
        Ok(true) => {
            if ring.consumer_asleep() {
                bell.signal();
            }
            Ok(())
        }
        Ok(false) => Err(EndpointError::Post(PostError::QueueFull).into()),
        Err(RingError::TooLarge(_)) => Err(EndpointError::Post(PostError::BadInline).into()),
        Err(RingError::Corrupt) => Err(Error::DaemonGone),
    }
}

/// One request and its answer on a blocking control socket.
fn call(
    sock: &UnixStream,
    dec: &mut Decoder,
    req: &Request,
    fds: &[BorrowedFd<'_>],
    timeout: Duration,
) -> Result<(Response, Vec<OwnedFd>)> {
    let gone = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Error::Timeout,
        _ => Error::DaemonGone,
    };
    sock.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
        .map_err(Error::Io)?;
    // A daemon that refuses a connection answers and closes before reading the request, so a
    // send that failed (broken pipe) may still leave its answer to read.
    let sent = frame::send_all(sock, &frame::encode(req, fds.len()), fds);
    loop {
        match dec.next_frame::<Response>() {
            Ok(Some(r)) => return Ok(r),
            Ok(None) => {}
            Err(e) => return Err(protocol(e.to_string())),
        }
        match frame::recv(sock, dec) {
            Ok(0) => return Err(sent.err().map_or(Error::DaemonGone, gone)),
            Ok(_) => {}
            Err(e) => return Err(gone(sent.err().unwrap_or(e))),
        }
    }
}

/// A region's bytes with the attachment locked ([`Backend::region`]).
struct RegionGuard<'a> {
    g: MutexGuard<'a, Attached>,
    id: MrId,
    len: u64,
}

impl std::ops::Deref for RegionGuard<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // The region was checked when the guard was made and cannot go while it is locked.
        self.g.mr_bytes(self.id, self.len).unwrap_or(&[])
    }
}

impl std::ops::DerefMut for RegionGuard<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.g.mr_bytes_mut(self.id, self.len).unwrap_or(&mut [])
    }
}

/// The locked attachment (poisoning ignored: a panic elsewhere leaves the rings consistent).
pub(crate) fn lock_attached(a: &Mutex<Attached>) -> MutexGuard<'_, Attached> {
    a.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Backend for Mutex<Attached> {
    fn alloc_pd(&self) -> Result<PdId> {
        lock_attached(self).alloc_pd()
    }

    /// The daemon page-aligns regions: an alignment beyond that is refused.
    fn register(&self, pd: PdId, buf: Vec<u8>, align: u64, access: AccessFlags) -> Result<MrInfo> {
        let mut g = lock_attached(self);
        let info = g.register(pd, &buf, access)?;
        if info.addr % align.max(1) != 0 {
            let _ = g.deregister(info.id);
            return Err(Error::Refused {
                kind: ErrorKind::Invalid,
                message: format!("region address {:#x} is not {align}-aligned", info.addr),
            });
        }
        Ok(info)
    }

    fn deregister(&self, mr: &MrInfo) -> Result<Vec<u8>> {
        lock_attached(self).deregister(mr.id)
    }

    fn register_caller(
        &self,
        pd: PdId,
        range: CallerRange,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrInfo> {
        lock_attached(self).register_caller(pd, &range, iova, access)
    }

    fn dealloc_pd(&self, pd: PdId) -> Result<()> {
        lock_attached(self).dealloc_pd(pd)
    }

    fn create_cq(&self, capacity: usize) -> Result<CqId> {
        lock_attached(self).create_cq(capacity)
    }

    fn destroy_cq(&self, cq: CqId) -> Result<()> {
        lock_attached(self).destroy_cq(cq)
    }

    fn arm_cq(&self, cq: CqId) -> Result<()> {
        lock_attached(self).arm_notify(cq)
    }

    fn ack_cq_event(&self, cq: CqId) {
        lock_attached(self).ack_notify(cq);
    }

    fn cq_event_fd(&self, cq: CqId) -> Result<OwnedFd> {
        lock_attached(self).cq_event_fd(cq)
    }

    /// The daemon drives.
    fn hand_back(&self) {}

    /// The daemon drives: a poll only reads the ring, and an empty one yields the CPU, as a
    /// wait's busy-polling look does: a program polling in a loop on every core would
    /// otherwise keep the daemon from running until the scheduler preempts it (milliseconds).
    /// Every 4096th empty poll checks that the daemon lives (one `poll(2)`), so a
    /// busy-polling program learns of its death.
    fn poll_cq_driving(
        &self,
        cq: CqId,
        out: &mut Vec<WorkCompletion>,
        max: usize,
    ) -> Result<usize> {
        let mut g = lock_attached(self);
        let n = g.poll_cq(cq, out, max);
        if n == 0 {
            g.empty_polls = g.empty_polls.wrapping_add(1);
            if g.empty_polls.is_multiple_of(4096) {
                g.check_alive()?;
            }
            drop(g);
            std::thread::yield_now();
        }
        Ok(n)
    }

    fn create_qp(&self, cfg: QpConfig) -> Result<Qpn> {
        lock_attached(self).create_qp(&cfg)
    }

    fn connect(&self, qp: Qpn, remote: &RemoteQp, opts: &ConnectOptions) -> Result<()> {
        lock_attached(self).connect(qp, opts.spec(remote))
    }

    fn modify_qp(&self, qp: Qpn, spec: &ModifySpec) -> Result<QpState> {
        lock_attached(self).modify_qp(qp, spec.clone())
    }

    fn qp_mode(&self, qp: Qpn) -> Option<QpMode> {
        lock_attached(self).query(qp).map(|(_, m, _)| m)
    }

    fn mp_snapshot(&self, qp: Qpn) -> Option<MpSnapshot> {
        lock_attached(self).mp_snapshot(qp)
    }

    fn qp_state(&self, qp: Qpn) -> Option<QpState> {
        lock_attached(self).query(qp).map(|(s, _, _)| s)
    }

    fn qp_error(&self, qp: Qpn) -> Option<ErrorCause> {
        lock_attached(self).query(qp).and_then(|(_, _, e)| e)
    }

    fn reset_to_error(&self, qp: Qpn) -> Result<()> {
        lock_attached(self).reset_to_error(qp)
    }

    fn destroy_qp(&self, qp: Qpn) -> Result<()> {
        lock_attached(self).destroy_qp(qp)
    }

    fn post_send(&self, qp: Qpn, wr: SendWr) -> Result<()> {
        let mut g = lock_attached(self);
        if g.ud_mtu(qp).is_some() {
            return Err(crate::ud::needs_address());
        }
        g.post_send(qp, &wr)
    }

    fn post_recv(&self, qp: Qpn, wr: RecvWr) -> Result<()> {
        lock_attached(self).post_recv(qp, &wr)
    }

    fn poll_cq(&self, cq: CqId, out: &mut Vec<WorkCompletion>, max: usize) -> usize {
        lock_attached(self).poll_cq(cq, out, max)
    }

    fn create_ud_qp(&self, cfg: QpConfig, q_key: u32) -> Result<Qpn> {
        lock_attached(self).create_ud_qp(&cfg, q_key)
    }

    fn ud_mtu(&self, qp: Qpn) -> Option<Mtu> {
        lock_attached(self).ud_mtu(qp)
    }

    fn create_ah(&self, attr: &AhAttr) -> Result<u32> {
        lock_attached(self).create_ah(attr)
    }

    fn destroy_ah(&self, ah: u32) -> Result<()> {
        lock_attached(self).destroy_ah(ah)
    }

    fn create_srq(&self, pd: PdId, max_wr: u32, max_sge: u32) -> Result<SrqId> {
        lock_attached(self).create_srq(pd, max_wr, max_sge)
    }

    fn post_srq_recv(&self, srq: SrqId, wr: RecvWr) -> Result<()> {
        lock_attached(self).post_srq_recv(srq, &wr)
    }

    fn modify_srq(&self, srq: SrqId, max_wr: Option<u32>, limit: Option<u32>) -> Result<()> {
        let req = Request::ModifySrq {
            srq: srq.0,
            max_wr,
            limit,
        };
        match lock_attached(self).srq_call(srq, &req)? {
            Response::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    fn query_srq(&self, srq: SrqId) -> Result<SrqAttr> {
        let mut g = lock_attached(self);
        match g.srq_call(srq, &Request::QuerySrq { srq: srq.0 })? {
            Response::SrqAttr {
                pd,
                max_wr,
                max_sge,
                limit,
                len,
            } => Ok(SrqAttr {
                pd: PdId::new(pd),
                max_wr,
                max_sge,
                limit,
                len,
            }),
            other => Err(unexpected(other)),
        }
    }

    fn destroy_srq(&self, srq: SrqId) -> Result<()> {
        lock_attached(self).destroy_srq(srq)
    }

    fn srq_event_fd(&self, srq: SrqId) -> Result<OwnedFd> {
        lock_attached(self)
            .srq_event(srq)?
            .share()
            .map_err(Error::Io)
    }

    fn take_srq_limit(&self, srq: SrqId) -> Result<bool> {
        Ok(lock_attached(self).srq_event(srq)?.clear())
    }

    fn post_send_to(&self, qp: Qpn, to: UdAddress, wr: SendWr) -> Result<()> {
        let mut g = lock_attached(self);
        let mtu = g.ud_mtu(qp).ok_or_else(crate::ud::not_ud)?;
        check_ud_send(&wr, mtu)?;
        g.post_send_to(qp, to, &wr)
    }

    fn cm_enable(&self) -> Result<()> {
        lock_attached(self).cm_enable()
    }

    fn cm_listen(&self, service: ServiceId) -> Result<()> {
        lock_attached(self).cm_listen(service)
    }

    fn cm_unlisten(&self, service: ServiceId) -> Result<bool> {
        lock_attached(self).cm_unlisten(service)
    }

    fn cm_connect(&self, params: ConnectParams, resolve_timeout: Duration) -> Result<ConnId> {
        lock_attached(self).cm_connect(params, resolve_timeout)
    }

    fn cm_accept(&self, conn: ConnId, params: AcceptParams) -> Result<()> {
        lock_attached(self).cm_accept(conn, &params)
    }

    fn cm_reject(&self, conn: ConnId, reason: RejectReason, private_data: &[u8]) -> Result<()> {
        lock_attached(self).cm_reject(conn, reason, private_data)
    }

    fn cm_send_mra(&self, conn: ConnId, service_timeout: u8) -> Result<()> {
        lock_attached(self).cm_send_mra(conn, service_timeout)
    }

    fn cm_sidr_request(&self, params: SidrParams, resolve_timeout: Duration) -> Result<SidrId> {
        lock_attached(self).cm_sidr_request(&params, resolve_timeout)
    }

    fn cm_sidr_reply(&self, id: SidrId, params: SidrReplyParams) -> Result<()> {
        lock_attached(self).cm_sidr_reply(id, &params)
    }

    fn cm_disconnect(&self, conn: ConnId, private_data: &[u8]) -> Result<()> {
        lock_attached(self).cm_disconnect(conn, private_data)
    }

    fn cm_look(
        &self,
        own: &Arc<Waitable<EventFd>>,
        registered: &mut bool,
        pick: &mut dyn FnMut(&Event) -> bool,
    ) -> Result<Look> {
        let mut g = lock_attached(self);
        if !*registered {
            g.cm_waiters()?.register(own);
            *registered = true;
        }
        let daemon = g.cm_fetch()?;
        own.get().clear();
        if let Some(ev) = g.cm_take(pick) {
            return Ok(Look::Found(ev));
        }
        let watch = Arc::clone(&g.watch);
        Ok(Look::Sleep(CmSleep::Daemon { daemon, watch }))
    }

    /// The daemon drives its engine: nothing to do.
    fn drive_wait(&self) -> Result<()> {
        Ok(())
    }

    fn cm_check_alive(&self) -> Result<()> {
        let mut g = lock_attached(self);
        if let Err(e) = g.check_alive() {
            if let Ok(w) = g.cm_waiters() {
                w.fire();
            }
            return Err(e);
        }
        Ok(())
    }

    /// The daemon drives the engine.
    fn progress_mode(&self) -> Option<ProgressMode> {
        None
    }

    /// The engine is the daemon's (`rocev2d stats`).
    fn engine(&self) -> Option<EngineGuard<'_>> {
        None
    }

    fn region(&self, mr: &MrInfo) -> Result<RegionBytes<'_>> {
        let g = lock_attached(self);
        g.mr_bytes(mr.id, mr.len).ok_or(Error::UnknownMr)?;
        Ok(Box::new(RegionGuard {
            g,
            id: mr.id,
            len: mr.len,
        }))
    }

    fn poll(&self) -> Result<Progress> {
        lock_attached(self)
            .check_alive()
            .map(|()| Progress::default())
    }

    fn wait(&self, extra: &[BorrowedFd<'_>]) -> Result<Vec<bool>> {
        let (arrived, events, watch) = {
            let mut g = lock_attached(self);
            let (arrived, events) = g.arm_all();
            (arrived, events, Arc::clone(&g.watch))
        };
        let mut fds = extra.to_vec();
        fds.push(watch.get().as_fd());
        fds.extend(events.iter().map(|e| e.get().as_fd()));
        let bound = if arrived {
            Duration::ZERO
        } else {
            Duration::from_millis(100)
        };
        let ready = wait_any(&fds, bound);
        let mut g = lock_attached(self);
        g.disarm_all();
        let mut ready = ready?;
        if ready.get(extra.len()) == Some(&true) {
            g.check_alive()?;
        }
        ready.truncate(extra.len());
        Ok(ready)
    }

    fn step(
        &self,
        cq: CqId,
        out: &mut Vec<WorkCompletion>,
        max: usize,
        spin: bool,
    ) -> Result<Step> {
        let mut g = lock_attached(self);
        let n = g.poll_cq(cq, out, max);
        if n > 0 {
            return Ok(Step::Done(n));
        }
        if spin {
            g.check_alive()?;
            return Ok(Step::Yield);
        }
        Ok(match g.arm(cq)? {
            None => Step::Again,
            Some(event) => Step::Sleep {
                event,
                watch: Some(Arc::clone(&g.watch)),
            },
        })
    }

    fn alive(&self) -> Result<()> {
        lock_attached(self).check_alive()
    }

    fn disarm(&self, cq: CqId) {
        lock_attached(self).disarm(cq);
    }

    /// The daemon drives the engine: waits spin on the ring, they do not drive.
    fn driving(&self) -> Option<Box<dyn Drive + Send + '_>> {
        None
    }

    fn spin_window(&self) -> Duration {
        lock_attached(self).spin
    }

    fn drain(&self, timeout: Duration) -> Result<()> {
        lock_attached(self).drain(timeout)
    }

    #[cfg(test)]
    fn passes(&self) -> Option<u64> {
        None
    }
}
