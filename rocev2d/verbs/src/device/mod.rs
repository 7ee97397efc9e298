//! [`Device`]: one interface, with one of two backends behind the same methods, chosen once
//! when the device opens ([`crate::backend`]): each public method checks its handles and
//! delegates.
//!
//! - In-process ([`Device::open`]): a RoCEv2 engine ([`rocev2_core::Endpoint`]) of its own, the
//!   memory it serves and a datapath, joined by a [`rocev2_datapath::Driver`] behind one lock,
//!   and (by default) a progress thread that drives them ([`crate::local`]), so the device's
//!   QPs answer their peers (ACKs, READ responses, atomics) whatever the application does.
//!   With [`ProgressMode::Caller`] the engine moves only while the application calls
//!   [`Device::wait_cq`], [`Device::poll`], [`Device::drain`] or awaits
//!   [`Device::next_completion`]; call [`Device::drain`] before exiting so the last ACKs leave.
//! - Attached ([`Device::attach`]): the `rocev2d` serving the interface runs the engine for
//!   every application of the host ([`crate::attached`]); the device's QPs answer their peers
//!   whatever the application does, and several applications share the interface.
//!
//! A [`Device`] is a cheap handle (an `Arc`): clone it into threads and tasks; every method
//! takes `&self`, so one task can post while another reaps. Verbs lock the backend for a short
//! critical section; the waits ([`Device::wait_cq`], [`Device::next_completion`]) sleep
//! without holding it.
//!
//! Deviations from verbs: see [`crate`]'s docs (owned buffers, RC and UD, no UC).

use crate::attached::Attached;
use crate::backend::{Backend as Verbs, Drive, RegionBytes, Step};
use crate::engine::{EngineGuard, ProgressMode};
use crate::error::{Error, Result};
use crate::local::Local;
use crate::mr::{Mr, Pd};
use crate::qp::{ConnectOptions, Cq, Qp, RemoteQp};
use crate::random::random_u64;
use crate::wakeup::{readable, wait_any, yield_now};
use rocev2_core::Endpoint;
use rocev2_core::cc::{CcScheme, CcSettings};
use rocev2_core::cq::WorkCompletion;
use rocev2_core::mr::AccessFlags;
use rocev2_core::qp::{ErrorCause, ExtCaps, QpConfig, QpMode, QpState, RecvWr, SendWr};
use rocev2_datapath::auto::{self, Options};
use rocev2_datapath::host::HostMemory;
use rocev2_datapath::{Driver, DriverConfig, Interface, Mode, Progress, WaitMode};
use std::future::Future;
use std::net::{IpAddr, Ipv6Addr};
use std::ops::{Deref, DerefMut};
use std::os::fd::{AsFd, BorrowedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

mod cm;
mod srq;
mod stepwise;
mod ud;

/// Settings of [`Device::open_with`].
#[derive(Debug, Clone, Copy, Default)]
pub struct DeviceConfig {
    /// Batching and waiting of the driver (default: busy polling for a while after activity,
    /// then sleeping in `ppoll`; see [`crate::WaitMode`]). With a progress thread, its wait
    /// mode is the thread's: [`WaitMode::Spin`] busy-polls (and backs off while an application
    /// thread's wait drives the engine; [`WaitMode::Adaptive`]'s waits drive it for their first
    /// spin window), [`WaitMode::Sleep`] sleeps until a frame, a timer or a post (interrupt mode).
    pub driver: DriverConfig,
    /// Settings of the datapaths.
    pub datapath: Options,
    /// Seed of the key generator; `None` draws one from the OS.
    pub seed: Option<u64>,
    /// Who drives the engine: a progress thread (default) or the application's calls.
    pub progress: ProgressMode,
    /// Makes the device one engine shard of several on the interface, serving receive queue
    /// `queue` (below 64 and the interface's queue count): open one device per queue, each
    /// with its progress thread, and connect QP k through device k on both hosts
    /// (`docs/datapath.md`, "Several queues"). The AF_XDP datapath binds, receives and
    /// transmits on that queue alone (`rocev2_datapath::xdp::XdpConfig::queue`; AF_PACKET
    /// and UDP see the whole interface); the device's QP numbers are those of block `queue`
    /// ([`rocev2_core::Endpoint::with_qpn_block`]), so no two shards share one. A frame the
    /// NIC's RSS (or the peer) delivers to the wrong shard is forwarded to the shard of its
    /// QPN (`rx_forwarded`; AF_PACKET, where every shard sees every frame, drops it there as
    /// `rx_other_shard`); one for a block no shard of this process owns counts as
    /// `mis_steered` ([`rocev2_datapath::handoff`]). CM MADs go to the shard whose CM owns
    /// them (its connection's, or for a REQ the one whose [`Device::cm_listen`] took its Service
    /// ID; `rx_cm_forwarded`), so the shards' `cm_*` calls work whatever queue a MAD reaches. An explicit
    /// `datapath.xdp.queue` takes precedence for the queue the socket binds (the QPN block
    /// stays `queue`): steering deliberately crossed, for tests and benchmarks of the
    /// forwarding. `None` (default): the whole interface.
    pub queue: Option<u32>,
    /// The congestion control of the device's QPs, as the daemon's `[cc]` section sets it for
    /// attached ones (docs/congestion.md): a QP whose [`QpConfig::cc`] names no controller
    /// gets the scheme's, the engine the scheme's receiver side (notification point, DASR),
    /// and [`crate::connect`] offers peers the REXT fields the scheme uses
    /// ([`Device::cc_scheme`]). Default: none. Each shard of several ([`DeviceConfig::queue`])
    /// is a receiver of its own: DASR counts the senders whose packets reach that shard, as
    /// the daemon's shards would without their exchange (docs/daemon.md, "Several queues").
    pub cc: CcSettings,
}

/// First virtual address handed to a region (as the core's test pair uses).
const FIRST_ADDR: u64 = 0x1000_0000;

/// Completions [`Completions`] takes from the CQ at once.
const BATCH: usize = 32;

static NEXT_DEVICE: AtomicU64 = AtomicU64::new(1);

/// A RoCEv2 device on one interface; see the module docs. Cloning makes another handle to the
/// same device; the device closes when the last handle is dropped.
#[derive(Clone)]
pub struct Device {
    inner: Arc<Inner>,
}

struct Inner {
    id: u64,
    iface: Interface,
    datapath: String,
    reason: String,
    /// The congestion-control scheme of the device's QPs.
    cc: CcScheme,
    backend: Box<dyn Verbs>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("iface", &self.interface().name)
            .field("datapath", &self.datapath_name())
            .field("attached", &self.is_attached())
            .finish_non_exhaustive()
    }
}

/// How many busy-polling looks of [`Device::wait_cq`] share one clock read. A look (a pass of
/// the engine, then `sched_yield`) takes ~0.7 µs on a 2-vCPU VM and a read ~30 ns, a tenth of
/// what a look that finds nothing adds to a busy-polled round trip (BENCHMARKS.md, "What the
/// stack adds to a busy-polled round trip"); the spin window and the timeout end at most this
/// many looks late.
const CLOCK_EVERY: u32 = 16;

impl Device {
    /// Opens interface `iface` with datapath `kind` and default settings, with an engine in
    /// this process and its progress thread; when a `rocev2d` serves `iface` in this network
    /// namespace (on its default control socket), attaches to it instead ([`Device::attach`]).
    ///
    /// # Errors
    /// [`Error::Datapath`]: no such interface, not Ethernet, or the datapath could not be
    /// opened (AF_PACKET needs `CAP_NET_RAW`).
    pub fn open(iface: &str, kind: Mode) -> Result<Device> {
        Device::open_with(iface, kind, DeviceConfig::default())
    }

    /// Opens interface `iface` with datapath `kind` and these settings, with an engine in this
    /// process.
    ///
    /// # Errors
    /// As [`Device::open`]; [`Error::Io`] when the progress thread cannot be started;
    /// [`Error::Datapath`] with [`rocev2_datapath::Error::NoSuchQueue`] for a
    /// [`DeviceConfig::queue`] the interface lacks; [`Error::Served`] for a
    /// [`DeviceConfig::queue`] on an interface a `rocev2d` serves; as [`Device::attach`] when
    /// one serves it.
    pub fn open_with(iface: &str, kind: Mode, cfg: DeviceConfig) -> Result<Device> {
        // A daemon serving the interface takes its frames with its steering program: an engine
        // here would compete for them, so the device attaches to the daemon instead (one shard
        // of several cannot: a daemon's shards are its own, `rocev2d run --queues`).
        if let Some(socket) = rocev2_ipc::serving(iface) {
            if cfg.queue.is_some() {
                return Err(Error::Served {
                    iface: iface.to_string(),
                    socket,
                });
            }
            return Device::attach_socket_with(&socket, cfg.driver.wait);
        }
        let iface = Interface::by_name(iface)?;
        if let Some(queue) = cfg.queue {
            let queues = iface.rx_queues.min(rocev2_core::endpoint::QPN_BLOCKS);
            if queue >= queues {
                return Err(Error::Datapath(rocev2_datapath::Error::NoSuchQueue {
                    name: iface.name,
                    queue,
                    queues,
                }));
            }
        }
        #[cfg(feature = "xdp")]
        let cfg = DeviceConfig {
            datapath: Options {
                xdp: rocev2_datapath::xdp::XdpConfig {
                    queue: cfg.datapath.xdp.queue.or(cfg.queue),
                    ..cfg.datapath.xdp
                },
                ..cfg.datapath
            },
            ..cfg
        };
        let opened = auto::open(&iface, kind, &cfg.datapath)?;
        Device::in_process(iface, opened.datapath, opened.reason, Vec::new(), cfg)
    }

    /// An in-process device of `iface` over `datapath`: the one constructor behind
    /// [`Device::open_with`] and [`Device::pair_with`]; `neighbours` answer before the kernel's
    /// neighbour table.
    pub(crate) fn in_process(
        iface: Interface,
        datapath: Box<dyn rocev2_datapath::Datapath + Send>,
        reason: String,
        neighbours: Vec<(IpAddr, [u8; 6])>,
        cfg: DeviceConfig,
    ) -> Result<Device> {
        let seed = cfg.seed.unwrap_or_else(random_u64);
        let mut ep = match cfg.queue {
            Some(queue) => Endpoint::with_qpn_block(seed, queue),
            None => Endpoint::new(seed),
        };
        ep.set_receiver_cc(cfg.cc.receiver());
        let name = datapath.name().to_string();
        // A shard over AF_XDP or AF_PACKET routes frames of the other shards' QPNs and CMs to
        // them (or, AF_PACKET, leaves them to them) before its core sees them.
        let mut listens = None;
        let (datapath, reason): (Box<dyn rocev2_datapath::Datapath + Send>, String) =
            match cfg.queue {
                Some(queue) if name == "xdp" || name == "packet" => {
                    let shard = rocev2_datapath::handoff::Shard::join(&iface, queue, datapath)?;
                    let reason = format!("{reason}; {}", shard.describe());
                    listens = Some(shard.listens());
                    (Box::new(shard), reason)
                }
                _ => (datapath, reason),
            };
        let driver = Driver::new(ep, HostMemory::default(), datapath, cfg.driver);
        let local = Local::new(
            driver,
            iface.clone(),
            neighbours,
            listens,
            FIRST_ADDR,
            cfg.progress,
            cfg.driver.wait,
            cfg.cc.qp_config(),
        )?;
        Ok(Device::new(
            iface,
            name,
            reason,
            cfg.cc.scheme,
            Box::new(local),
        ))
    }

    /// Attaches to the `rocev2d` serving interface `iface` in this network namespace (its
    /// control socket, the abstract socket `@rocev2d/IFACE`): the daemon runs the engine, this process's regions are
    /// shared with it, and work requests and completions cross in shared memory.
    ///
    /// # Errors
    /// [`Error::Attach`] when no daemon serves the interface (start `rocev2d run --iface
    /// IFACE`), [`Error::Refused`] when it refuses this user.
    pub fn attach(iface: &str) -> Result<Device> {
        Device::attach_socket(&rocev2_ipc::default_socket(iface))
    }

    /// Attaches to the daemon listening on control socket `path`; see [`Device::attach`].
    ///
    /// # Errors
    /// As [`Device::attach`].
    pub fn attach_socket(path: &std::path::Path) -> Result<Device> {
        Device::attach_socket_with(path, WaitMode::default())
    }

    /// Attaches to the daemon listening on `path`; `wait` says how [`Device::wait_cq`] and
    /// [`Device::next_completion`] wait for completions: spinning on the ring
    /// ([`WaitMode::Spin`]), for a while first ([`WaitMode::Adaptive`]'s window), or sleeping
    /// on the CQ's eventfd at once.
    ///
    /// # Errors
    /// As [`Device::attach`].
    pub fn attach_socket_with(path: &std::path::Path, wait: WaitMode) -> Result<Device> {
        let spin = match wait {
            WaitMode::Sleep => Duration::ZERO,
            WaitMode::Adaptive { spin } => Duration::from_nanos(spin.as_nanos()),
            WaitMode::Spin => Duration::MAX,
        };
        let a = Attached::open(path, spin)?;
        Ok(Device::new(
            a.iface.clone(),
            a.datapath.clone(),
            a.reason.clone(),
            a.cc,
            Box::new(Mutex::new(a)),
        ))
    }

    fn new(
        iface: Interface,
        datapath: String,
        reason: String,
        cc: CcScheme,
        backend: Box<dyn Verbs>,
    ) -> Device {
        Device {
            inner: Arc::new(Inner {
                id: NEXT_DEVICE.fetch_add(1, Ordering::Relaxed),
                iface,
                datapath,
                reason,
                cc,
                backend,
            }),
        }
    }

    /// Refuses a handle of another device.
    pub(crate) fn own(&self, device: u64, what: &'static str) -> Result<()> {
        if device == self.inner.id {
            Ok(())
        } else {
            Err(Error::WrongDevice(what))
        }
    }

    /// The device's number, which its handles carry.
    pub(crate) fn id(&self) -> u64 {
        self.inner.id
    }

    /// The congestion-control scheme the device's QPs run: in-process [`DeviceConfig::cc`]'s,
    /// attached the daemon's `[cc] scheme`, as its answer to the attachment names it.
    pub fn cc_scheme(&self) -> CcScheme {
        self.inner.cc
    }

    /// The rocev2 extensions the device's QPs offer a peer: those its congestion-control
    /// scheme uses (DASR's N and the look-ahead for Dart, τ for DCQCN+; [`CcScheme::peer_ext`]).
    /// [`crate::connect`] sends them with every endpoint; a program with an exchange of its
    /// own sends [`ExtCaps::to_word`] and passes the peer's word to [`Device::connect`] in
    /// [`ConnectOptions::peer_ext`].
    pub fn ext_offer(&self) -> ExtCaps {
        self.inner.cc.peer_ext()
    }

    /// True when the device is attached to a daemon.
    pub fn is_attached(&self) -> bool {
        self.ops().progress_mode().is_none()
    }

    /// Who drives the engine: `Some` mode in-process, `None` when attached (the daemon does).
    pub fn progress_mode(&self) -> Option<ProgressMode> {
        self.ops().progress_mode()
    }

    /// The interface, as read when the device was opened.
    pub fn interface(&self) -> &Interface {
        &self.inner.iface
    }

    /// The datapath's name: `"xdp"`, `"packet"` or `"udp"`.
    pub fn datapath_name(&self) -> &str {
        &self.inner.datapath
    }

    /// Why this datapath was chosen (one sentence).
    pub fn datapath_reason(&self) -> &str {
        &self.inner.reason
    }

    /// The GID table, laid out as rdma_rxe's: 0 the link-local default GID, then the IPv4
    /// (mapped) addresses, then the IPv6 ones ([`rocev2_datapath::Interface::gids`]).
    pub fn gids(&self) -> Vec<Ipv6Addr> {
        self.interface().gids()
    }

    /// The first global address of the family (IPv6 when `v6`), the GID a QP sends from.
    ///
    /// # Errors
    /// [`Error::NoAddress`].
    pub fn source_ip(&self, v6: bool) -> Result<IpAddr> {
        let iface = self.interface();
        iface.source_ip(v6).ok_or_else(|| Error::NoAddress {
            iface: iface.name.clone(),
            family: if v6 { "IPv6" } else { "IPv4" },
        })
    }

    /// The in-process engine and driver, locked (for statistics, QP counters and datapath
    /// counters); `None` when attached (ask the daemon: `rocev2d stats`). The progress thread
    /// waits while the guard lives: keep it short, and call no other method of the device
    /// while holding it (as [`Device::mr_guard`]).
    pub fn engine(&self) -> Option<EngineGuard<'_>> {
        self.ops().engine()
    }

    /// The backend's verbs ([`crate::backend`]).
    pub(crate) fn ops(&self) -> &dyn Verbs {
        &*self.inner.backend
    }

    /// Allocates a protection domain (`ibv_alloc_pd`).
    ///
    /// # Errors
    /// Attached: the daemon's ([`Error::DaemonGone`], [`Error::Timeout`]).
    pub fn alloc_pd(&self) -> Result<Pd> {
        Ok(Pd(self.ops().alloc_pd()?, self.inner.id))
    }

    /// Registers a buffer the device takes ownership of (`ibv_reg_mr`): a `Vec<u8>`, a
    /// `Box<[u8]>`, a `bytes::BytesMut` (which converts without copying when it owns its whole
    /// allocation) or anything else that becomes a `Vec<u8>`. The bytes stay reachable through [`Device::mr_guard`] and come back with
    /// [`Device::deregister`]. The region's address (what the peer's READ/WRITE/atomics name)
    /// is page-aligned whatever the buffer's alignment, so 8-byte atomics on aligned offsets
    /// always qualify. Attached, the bytes move into shared memory the daemon reads and writes
    /// in place.
    ///
    /// # Errors
    /// [`Error::Verb`] when the engine refuses (unknown PD, bad rights); [`Error::WrongDevice`];
    /// attached, also [`Error::Refused`] (the daemon's per-application memory limit).
    pub fn register(&self, pd: Pd, buf: impl Into<Vec<u8>>, access: AccessFlags) -> Result<Mr> {
        self.register_aligned(pd, buf.into(), 1, access)
    }

    /// Registers a zeroed region of `layout.size()` bytes whose address (what the peer's
    /// READ/WRITE/atomics name, and [`Mr::addr`]) is a multiple of `layout.align()`, as a
    /// `posix_memalign`ed buffer registered with `ibv_reg_mr` would be. The bytes are reached
    /// through [`Device::mr_guard`] like any region's.
    ///
    /// # Errors
    /// As [`Device::register`]; attached, [`Error::Refused`] when the daemon's address is not
    /// so aligned (it page-aligns regions, so alignments up to 4096 always qualify).
    pub fn register_layout(
        &self,
        pd: Pd,
        layout: std::alloc::Layout,
        access: AccessFlags,
    ) -> Result<Mr> {
        self.register_aligned(pd, vec![0; layout.size()], layout.align() as u64, access)
    }

    fn register_aligned(
        &self,
        pd: Pd,
        buf: Vec<u8>,
        align: u64,
        access: AccessFlags,
    ) -> Result<Mr> {
        self.own(pd.1, "protection domain")?;
        Ok(Mr {
            info: self.ops().register(pd.0, buf, align, access)?,
            device: self.inner.id,
        })
    }

    /// Deregisters a region (`ibv_dereg_mr`) and returns its bytes; its keys stop working at
    /// once.
    ///
    /// # Errors
    /// [`Error::UnknownMr`] for a handle of another device or one already deregistered.
    pub fn deregister(&self, mr: Mr) -> Result<Vec<u8>> {
        if mr.device != self.inner.id {
            return Err(Error::UnknownMr);
        }
        self.ops().deregister(&mr.info)
    }

    /// The region's bytes behind a guard that derefs to `[u8]` (mutably too): read what
    /// completed requests placed, fill what the next requests send. The guard holds the
    /// device's lock, so the engine (and other threads' verbs) wait while it lives: copy and
    /// drop it, and call no other method of the device while holding it (the lock is not
    /// reentrant: that call would wait forever). Writing bytes a posted, not yet completed request sends makes what it sends
    /// unspecified, as with verbs (but never unsound).
    ///
    /// # Errors
    /// [`Error::UnknownMr`].
    pub fn mr_guard(&self, mr: &Mr) -> Result<MrGuard<'_>> {
        if mr.device != self.inner.id {
            return Err(Error::UnknownMr);
        }
        Ok(MrGuard {
            bytes: self.ops().region(&mr.info)?,
        })
    }

    /// The 8 bytes at `offset` of the region as a `u64` in host byte order: how an atomic's
    /// target or its returned original value (placed by a Fetch&Add / Compare&Swap
    /// completion) reads. Memory holds host order; the wire carries big-endian, and the engine
    /// converts both ways, as an HCA does.
    ///
    /// # Errors
    /// [`Error::UnknownMr`], [`Error::OutOfRange`].
    pub fn read_u64(&self, mr: &Mr, offset: u64) -> Result<u64> {
        mr.check_range(offset, 8)?;
        let g = self.mr_guard(mr)?;
        let at = usize::try_from(offset).map_err(|_| Error::UnknownMr)?;
        let bytes: [u8; 8] = g
            .get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .ok_or(Error::UnknownMr)?;
        Ok(u64::from_ne_bytes(bytes))
    }

    /// Stores `value` in host byte order at `offset` of the region (an atomic's target as the
    /// peer's Fetch&Add / Compare&Swap will see it); see [`Device::read_u64`].
    ///
    /// # Errors
    /// [`Error::UnknownMr`], [`Error::OutOfRange`].
    pub fn write_u64(&self, mr: &Mr, offset: u64, value: u64) -> Result<()> {
        mr.check_range(offset, 8)?;
        let mut g = self.mr_guard(mr)?;
        let at = usize::try_from(offset).map_err(|_| Error::UnknownMr)?;
        g.get_mut(at..at + 8)
            .ok_or(Error::UnknownMr)?
            .copy_from_slice(&value.to_ne_bytes());
        Ok(())
    }

    /// Creates a completion queue holding `capacity` completions (`ibv_create_cq`), with the
    /// eventfd that wakes its waiters.
    ///
    /// # Errors
    /// [`Error::Io`] (no eventfd); attached: the daemon's (limits, [`Error::DaemonGone`]).
    pub fn create_cq(&self, capacity: usize) -> Result<Cq> {
        Ok(Cq(self.ops().create_cq(capacity)?, self.inner.id))
    }

    /// Creates an RC QP with `ibv_rc_pingpong`-like sizes (see [`QpConfig::new`]) and moves it
    /// to INIT granting every remote right.
    ///
    /// # Errors
    /// [`Error::Verb`]; [`Error::WrongDevice`].
    pub fn create_rc_qp(&self, pd: Pd, send_cq: Cq, recv_cq: Cq) -> Result<Qp> {
        self.own(pd.1, "protection domain")?;
        self.own(send_cq.1, "CQ")?;
        self.own(recv_cq.1, "CQ")?;
        self.create_qp(QpConfig::new(pd.0, send_cq.0, recv_cq.0))
    }

    /// Creates an RC QP from a full configuration (`ibv_create_qp`) and moves it to INIT
    /// granting every remote right (local write, remote write, read, atomic). Attached, the
    /// daemon's congestion control replaces `cfg.cc`. The configuration names the engine's
    /// ids ([`Pd::id`], [`Cq::id`]), which this device checks only against its own objects.
    ///
    /// # Errors
    /// [`Error::Verb`]; attached, [`Error::Refused`] (limits, sizes the rings cannot carry).
    pub fn create_qp(&self, cfg: QpConfig) -> Result<Qp> {
        Ok(Qp(self.ops().create_qp(cfg)?, self.inner.id))
    }

    /// Connects `qp` to the peer: INIT→RTR→RTS with a path built from the interface (our
    /// MAC and the first global address of the peer's family) and the neighbour table (the
    /// next hop's MAC, unless `remote.mac` gives it), the MTU lowered to what the interface
    /// carries, then `opts`.
    ///
    /// # Errors
    /// [`Error::NoAddress`], [`Error::MtuTooSmall`], [`Error::Datapath`] when the peer's MAC
    /// cannot be resolved, [`Error::Verb`] when the engine refuses an attribute; attached,
    /// [`Error::Refused`] for any of these as the daemon reports it.
    pub fn connect(&self, qp: Qp, remote: &RemoteQp, opts: &ConnectOptions) -> Result<()> {
        self.own(qp.1, "QP")?;
        if self.ud_mtu(qp).is_some() {
            return Err(Error::WrongQpType(
                "a UD QP is not connected: send to an address",
            ));
        }
        self.ops().connect(qp.0, remote, opts)
    }

    /// The QP's transport mode: [`QpMode::MultiPath`] when it offered MP-RDMA and the peer
    /// announced it at [`Self::connect`], else [`QpMode::Rc`]. `None` for an unknown QP.
    pub fn qp_mode(&self, qp: Qp) -> Option<QpMode> {
        self.own(qp.1, "QP").ok()?;
        self.ops().qp_mode(qp.0)
    }

    /// A multipath QP's window, RTT, per-VP counters and receiver statistics
    /// ([`crate::MpSnapshot`]); `None` for an RC QP or an unknown one. Attached, the daemon's
    /// engine answers for this application's own QPs only.
    pub fn mp_snapshot(&self, qp: Qp) -> Option<crate::MpSnapshot> {
        self.own(qp.1, "QP").ok()?;
        self.ops().mp_snapshot(qp.0)
    }

    /// The QP's state, RC or UD; `None` for an unknown QP.
    pub fn qp_state(&self, qp: Qp) -> Option<QpState> {
        self.own(qp.1, "QP").ok()?;
        self.ops().qp_state(qp.0)
    }

    /// Why RC QP `qp` entered ERROR, until it is reset ([`ErrorCause`]): the status of the
    /// request that failed, or, on the passive side of an RDMA access the QP refused (a bad
    /// rkey, bounds or rights), the NAK its responder sent; [`ErrorCause::ibv_event`] names the
    /// affiliated asynchronous event an HCA would raise. `None` while the QP is not in ERROR
    /// (or for a UD QP or an unknown one).
    pub fn qp_error(&self, qp: Qp) -> Option<ErrorCause> {
        self.own(qp.1, "QP").ok()?;
        self.ops().qp_error(qp.0)
    }

    /// A line for a log: where the device runs (in-process, or attached to `rocev2d`), its
    /// datapath and why that one.
    pub fn describe(&self) -> String {
        let how = if self.is_attached() {
            "attached to rocev2d"
        } else {
            "in-process"
        };
        format!(
            "{how}, {}: {}",
            self.datapath_name(),
            self.datapath_reason()
        )
    }

    /// Moves `qp` to ERROR, flushing its outstanding requests into their CQs.
    ///
    /// # Errors
    /// [`Error::Verb`]; [`Error::WrongDevice`].
    pub fn reset_to_error(&self, qp: Qp) -> Result<()> {
        self.own(qp.1, "QP")?;
        self.ops().reset_to_error(qp.0)
    }

    /// Destroys a QP.
    ///
    /// # Errors
    /// [`Error::Verb`]; [`Error::WrongDevice`].
    pub fn destroy_qp(&self, qp: Qp) -> Result<()> {
        self.own(qp.1, "QP")?;
        self.ops().destroy_qp(qp.0)
    }

    /// Posts a send work request (`ibv_post_send`). In-process, the progress thread sends it
    /// (woken if it sleeps); caller-driven, nothing leaves until the device is driven;
    /// attached, the daemon takes it at once.
    ///
    /// # Errors
    /// [`Error::Verb`] (wrong state, queue full, too many SGEs, bad inline data);
    /// [`Error::WrongQpType`] on a UD QP (use [`Device::post_send_to`]);
    /// [`Error::WrongDevice`]; attached, only queue full and [`Error::DaemonGone`]: the others
    /// complete with an error status.
    pub fn post_send(&self, qp: Qp, wr: SendWr) -> Result<()> {
        self.own(qp.1, "QP")?;
        self.ops().post_send(qp.0, wr)
    }

    /// Posts a receive work request (`ibv_post_recv`).
    ///
    /// # Errors
    /// [`Error::Verb`]; attached, as [`Device::post_send`].
    pub fn post_recv(&self, qp: Qp, wr: RecvWr) -> Result<()> {
        self.own(qp.1, "QP")?;
        self.ops().post_recv(qp.0, wr)
    }

    /// Moves up to `max` completions of `cq` into `out` without driving the engine
    /// (`ibv_poll_cq`); returns how many (0 for a CQ of another device).
    pub fn poll_cq(&self, cq: Cq, out: &mut Vec<WorkCompletion>, max: usize) -> usize {
        if self.own(cq.1, "CQ").is_err() {
            return 0;
        }
        self.ops().poll_cq(cq.0, out, max)
    }

    /// One pass of the engine: receive, timers, transmit (with a progress thread too: a pass
    /// more does no harm). Attached, the daemon drives the engine: this only checks that it is
    /// still there.
    ///
    /// # Errors
    /// [`Error::Datapath`] on socket failures; [`Error::ProgressStopped`];
    /// [`Error::DaemonGone`].
    pub fn poll(&self) -> Result<Progress> {
        self.ops().poll()
    }

    /// Sleeps until something happened since the last [`Device::poll`] (frames, a timer, a
    /// post: in-process, by the driver's [`DriverConfig::wait`]), or one of `extra` becomes
    /// readable; returns which of `extra` did. Call [`Device::poll`] after it. Attached:
    /// sleeps until one of `extra` is readable, a completion arrives, or 100 ms pass.
    ///
    /// Only a device without a progress thread ([`ProgressMode::Caller`]) needs this loop to
    /// make progress; with a thread or the daemon driving, a program that waits for a socket
    /// alone can block on the socket (with the thread, every frame counts as something that
    /// happened, so this loop would turn once per frame).
    ///
    /// # Errors
    /// [`Error::Datapath`] on `ppoll` failures; [`Error::DaemonGone`].
    pub fn wait(&self, extra: &[BorrowedFd<'_>]) -> Result<Vec<bool>> {
        self.ops().wait(extra)
    }

    /// One look at `cq` for a wait: takes up to `max` completions, or says how to wait.
    /// `spin`: still inside the attached spin window.
    fn step(&self, cq: Cq, out: &mut Vec<WorkCompletion>, max: usize, spin: bool) -> Result<Step> {
        self.own(cq.1, "CQ")?;
        self.ops().step(cq.0, out, max, spin)
    }

    /// After an attached sleep: reports the daemon's death.
    fn alive(&self) -> Result<()> {
        self.ops().alive()
    }

    /// Marks a busy-polling wait that drives the engine while the progress thread backs off
    /// ([`crate::local`]), until the guard drops or is handed back.
    fn driving(&self) -> Option<Box<dyn Drive + Send + '_>> {
        self.ops().driving()
    }

    /// How long a wait busy-polls before sleeping: in-process, driving the engine
    /// ([`crate::local`]); attached, spinning on the CQ's ring.
    fn spin_window(&self) -> Duration {
        self.ops().spin_window()
    }

    /// Waits until `cq` has a completion, then moves up to `max` of them into `out` and
    /// returns how many (at least one). With a progress thread it drives the engine and polls
    /// the CQ while the thread backs off, for the wait mode's window ([`WaitMode::Spin`]: the
    /// whole wait; [`WaitMode::Sleep`]: none), then sleeps on the CQ's eventfd;
    /// caller-driven, it drives the engine meanwhile;
    /// attached, it spins on the CQ's ring for the wait mode's window, then sleeps on its
    /// eventfd.
    ///
    /// # Errors
    /// [`Error::Timeout`] when none arrived within `timeout`; [`Error::Datapath`];
    /// [`Error::ProgressStopped`]; [`Error::DaemonGone`]; [`Error::WrongDevice`].
    pub fn wait_cq(
        &self,
        cq: Cq,
        out: &mut Vec<WorkCompletion>,
        max: usize,
        timeout: Duration,
    ) -> Result<usize> {
        let start = Instant::now();
        let mut driving = self.driving();
        let spin = self.spin_window();
        let mut waited = Duration::ZERO;
        // Busy-polling looks since the clock was last read: see [`CLOCK_EVERY`].
        let mut unclocked = 0;
        loop {
            if unclocked == 0 {
                waited = start.elapsed();
            }
            if waited >= spin
                && let Some(d) = driving.take()
            {
                d.hand_back();
            }
            let step = self.step(cq, out, max, waited < spin)?;
            if let Step::Done(n) = step {
                return Ok(n);
            }
            if waited >= timeout {
                return Err(Error::Timeout);
            }
            let bound = (timeout - waited).min(Duration::from_millis(100));
            let looked = unclocked + 1;
            unclocked = 0;
            match step {
                Step::Done(_) | Step::Again => {}
                Step::Yield => {
                    std::thread::yield_now();
                    unclocked = looked % CLOCK_EVERY;
                }
                Step::Drive => self.ops().drive_wait()?,
                Step::Sleep { event, watch } => {
                    let mut fds = vec![event.get().as_fd()];
                    fds.extend(watch.as_ref().map(|w| w.get().as_fd()));
                    let slept = wait_any(&fds, bound);
                    drop(Sleeping(self, cq));
                    self.alive()?;
                    slept?;
                }
            }
        }
    }

    /// Takes up to `max` completions of `cq` into `out`, waiting asynchronously for the first.
    async fn next_batch(&self, cq: Cq, out: &mut Vec<WorkCompletion>, max: usize) -> Result<usize> {
        let start = Instant::now();
        let mut driving = self.driving();
        let spin = self.spin_window();
        loop {
            let spinning = start.elapsed() < spin;
            if !spinning && let Some(d) = driving.take() {
                d.hand_back();
            }
            let step = self.step(cq, out, max, spinning)?;
            let slept = match step {
                Step::Done(n) => return Ok(n),
                Step::Again => continue,
                Step::Yield | Step::Drive => {
                    // Busy polling: let the progress thread (or the peer) have the CPU, as the
                    // driver's busy-polling waits do (rocev2_datapath::driver's docs).
                    std::thread::yield_now();
                    false
                }
                Step::Sleep { event, watch } => {
                    // Dropped mid-sleep (a cancelled future), the guard still ends the sleep.
                    let guard = Sleeping(self, cq);
                    let slept = match &watch {
                        Some(w) => readable(&[&*event, &**w]).await,
                        None => readable(&[&*event]).await,
                    };
                    drop(guard);
                    self.alive()?;
                    slept?
                }
            };
            if !slept {
                yield_now().await;
            }
        }
    }

    /// The next completion of `cq`.
    ///
    /// With a progress thread, or attached, and awaited on a tokio runtime (feature `tokio`,
    /// default), it sleeps on the CQ's eventfd through tokio's reactor (no busy polling) and
    /// wakes when a completion arrives (or the daemon dies). It busy-polls (yielding to the
    /// executor) with [`WaitMode::Spin`], for [`WaitMode::Adaptive`]'s window first (in-process
    /// it drives the engine meanwhile, as [`Device::wait_cq`] does), caller-driven (it drives
    /// the engine on each poll), or on another executor.
    ///
    /// Cancel-safe: a completion is taken from the CQ only in the poll that returns it, so
    /// dropping the future loses none. Several tasks may await the same CQ; each completion
    /// goes to one of them.
    ///
    /// # Errors
    /// As [`Device::wait_cq`], without the timeout (wrap it in `tokio::time::timeout`).
    pub async fn next_completion(&self, cq: Cq) -> Result<WorkCompletion> {
        let mut out = Vec::with_capacity(1);
        self.next_batch(cq, &mut out, 1).await?;
        out.pop().ok_or(Error::Timeout)
    }

    /// A stream of `cq`'s completions (a `futures_core::Stream`, or [`Completions::next`]),
    /// waiting as [`Device::next_completion`] does and taking completions from the CQ in
    /// batches.
    pub fn completions(&self, cq: Cq) -> Completions {
        Completions {
            dev: self.clone(),
            cq,
            buf: std::collections::VecDeque::new(),
            pending: None,
        }
    }

    /// Waits until the device has nothing left to send and no timer pending (every request
    /// acknowledged, every ACK sent), so the process may exit without leaving the peer waiting
    /// for an ACK. Attached, only this application's QPs count.
    ///
    /// # Errors
    /// [`Error::Timeout`]; [`Error::Datapath`]; [`Error::DaemonGone`].
    pub fn drain(&self, timeout: Duration) -> Result<()> {
        self.ops().drain(timeout)
    }
}

/// A batch of completions being awaited ([`Completions`]).
type Batch = Pin<Box<dyn Future<Output = Result<Vec<WorkCompletion>>> + Send>>;

/// The completions of one CQ, in order ([`Device::completions`]): a [`futures_core::Stream`]
/// that never ends, and an async [`Completions::next`].
pub struct Completions {
    dev: Device,
    cq: Cq,
    buf: std::collections::VecDeque<WorkCompletion>,
    /// The wait in progress, kept across polls (and across a dropped `next`).
    pending: Option<Batch>,
}

impl std::fmt::Debug for Completions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completions")
            .field("cq", &self.cq)
            .field("buffered", &self.buf.len())
            .finish_non_exhaustive()
    }
}

impl Completions {
    /// The next completion; see [`Device::next_completion`]. Cancel-safe: completions taken
    /// from the CQ stay in this stream until returned.
    ///
    /// # Errors
    /// As [`Device::next_completion`].
    pub async fn next(&mut self) -> Result<WorkCompletion> {
        use futures_core::Stream as _;
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx))
            .await
            .unwrap_or(Err(Error::Timeout))
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.dev
    }
}

impl futures_core::Stream for Completions {
    type Item = Result<WorkCompletion>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(wc) = this.buf.pop_front() {
                return Poll::Ready(Some(Ok(wc)));
            }
            let (dev, cq) = (&this.dev, this.cq);
            let batch = this.pending.get_or_insert_with(|| {
                let dev = dev.clone();
                Box::pin(async move {
                    let mut out = Vec::with_capacity(BATCH);
                    dev.next_batch(cq, &mut out, BATCH).await.map(|_| out)
                })
            });
            let got = std::task::ready!(batch.as_mut().poll(cx));
            this.pending = None;
            match got {
                Ok(wcs) => this.buf.extend(wcs),
                Err(e) => return Poll::Ready(Some(Err(e))),
            }
        }
    }
}

/// A sleep on a CQ in progress, ended when dropped (after waking, or with a cancelled future):
/// [`Verbs::disarm`].
struct Sleeping<'a>(&'a Device, Cq);

impl Drop for Sleeping<'_> {
    fn drop(&mut self) {
        self.0.ops().disarm(self.1.0);
    }
}

/// A region's bytes, with the device locked ([`Device::mr_guard`]); derefs to `[u8]`.
pub struct MrGuard<'a> {
    bytes: RegionBytes<'a>,
}

impl Deref for MrGuard<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl DerefMut for MrGuard<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_and_futures_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>(_: &T) {}
        send_sync::<Device>();
        fn send_only<T: Send>() {}
        send_only::<Completions>();
        // The futures may be spawned on a multi-thread runtime.
        let f = |d: Device, cq: Cq| async move { d.next_completion(cq).await };
        let _ = |d: Device, cq: Cq| send(&f(d, cq));
    }

    fn waiting(wait: WaitMode) -> DeviceConfig {
        DeviceConfig {
            driver: DriverConfig {
                wait,
                ..DriverConfig::default()
            },
            ..DeviceConfig::default()
        }
    }

    /// Spinning for ever, or adaptive within its window (here longer than the wait), the
    /// waiter's own passes drive the engine and the progress thread backs off.
    #[test]
    fn a_busy_polling_wait_drives_the_engine_and_the_thread_backs_off() {
        let long = rocev2_core::time::Duration::from_secs(10);
        for wait in [WaitMode::Spin, WaitMode::Adaptive { spin: long }] {
            let (a, _b) = Device::pair_with(waiting(wait)).unwrap();
            let cq = a.create_cq(4).unwrap();
            let passes = || a.ops().passes().expect("a pair is in-process");
            let wait = Duration::from_millis(200);
            let before = passes();
            let t = Instant::now();
            let e = a.wait_cq(cq, &mut Vec::new(), 1, wait).unwrap_err();
            let waited = t.elapsed();
            assert!(matches!(e, Error::Timeout), "{e}");
            let passes = passes() - before;
            // At most one pass per back-off sleep, plus the one under way when the wait began
            // (a spinning thread makes a pass every few microseconds).
            let bound = waited.as_micros() / rocev2_datapath::host::BACKOFF.as_micros() + 2;
            assert!(u128::from(passes) <= bound, "{passes} passes in {waited:?}");
        }
    }

    /// An adaptive wait whose window ran out hands the engine back to the progress thread
    /// before it sleeps: a READ posted afterwards (from another thread) still leaves, and its
    /// response completes the wait. (Were the waiter to keep its claim, the thread would back
    /// off for ever and the wait would time out.)
    #[test]
    fn an_adaptive_wait_past_its_window_leaves_the_engine_to_the_thread() {
        use crate::connect::{self, ConnectConfig};
        use rocev2_core::qp::SendOp;
        let short = rocev2_core::time::Duration::from_micros(500);
        let (dev, server) = Device::pair_with(waiting(WaitMode::Adaptive { spin: short })).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let srv = std::thread::spawn(move || {
            let pd = server.alloc_pd().unwrap();
            let mr = server
                .register(pd, vec![9u8; 64], AccessFlags::REMOTE_READ)
                .unwrap();
            let cq = server.create_cq(4).unwrap();
            let qp = server.create_rc_qp(pd, cq, cq).unwrap();
            let cfg = ConnectConfig::default().mr(&mr);
            connect::accept(&server, qp, &listener, &cfg).unwrap();
            server
        });
        let pd = dev.alloc_pd().unwrap();
        let mr = dev
            .register(pd, vec![0u8; 64], AccessFlags::LOCAL_WRITE)
            .unwrap();
        let cq = dev.create_cq(4).unwrap();
        let qp = dev.create_rc_qp(pd, cq, cq).unwrap();
        let c = connect::connect(&dev, qp, addr, &ConnectConfig::default()).unwrap();
        let _server = srv.join().unwrap();
        let target = c.peer.mrs[0];
        let poster = {
            let (dev, sge) = (dev.clone(), mr.sge(0, 64).unwrap());
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                let read = SendOp::Read {
                    remote_addr: target.addr,
                    rkey: target.rkey,
                };
                dev.post_send(qp, SendWr::new(5, read).sge(sge)).unwrap();
            })
        };
        let mut wcs = Vec::new();
        let n = dev
            .wait_cq(cq, &mut wcs, 1, Duration::from_secs(5))
            .unwrap();
        poster.join().unwrap();
        assert_eq!((n, wcs[0].wr_id), (1, 5));
        assert_eq!(wcs[0].status, rocev2_core::cq::WcStatus::Success);
        assert_eq!(&dev.mr_guard(&mr).unwrap()[..], &[9u8; 64][..]);
    }

    /// After the last busy-polling wait ends, the progress thread resumes once its back-off
    /// ends (at most `BACKOFF_MAX`): a SEND posted outside any wait (nobody waits on the sender
    /// afterwards) still leaves, and the peer receives it. (A thread that kept backing off
    /// would leave it unsent and the peer's wait would time out.)
    #[test]
    fn a_post_after_the_last_busy_polling_wait_leaves_when_the_thread_resumes() {
        use crate::connect::{self, ConnectConfig};
        use rocev2_core::qp::{RecvWr, SendOp};
        let (dev, server) = Device::pair_with(waiting(WaitMode::Spin)).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let srv = std::thread::spawn(move || {
            let pd = server.alloc_pd().unwrap();
            let mr = server
                .register(pd, vec![0u8; 64], AccessFlags::LOCAL_WRITE)
                .unwrap();
            let cq = server.create_cq(4).unwrap();
            let qp = server.create_rc_qp(pd, cq, cq).unwrap();
            server
                .post_recv(
                    qp,
                    RecvWr {
                        wr_id: 7,
                        sg_list: vec![mr.sge(0, 64).unwrap()],
                    },
                )
                .unwrap();
            connect::accept(&server, qp, &listener, &ConnectConfig::default()).unwrap();
            let mut wcs = Vec::new();
            let n = server.wait_cq(cq, &mut wcs, 1, Duration::from_secs(5));
            (
                n.map(|n| (n, wcs.first().map(|w| w.wr_id))),
                server.mr_guard(&mr).unwrap()[..5].to_vec(),
            )
        });
        let pd = dev.alloc_pd().unwrap();
        let mr = dev
            .register(pd, b"hello".to_vec(), AccessFlags::empty())
            .unwrap();
        let cq = dev.create_cq(4).unwrap();
        let qp = dev.create_rc_qp(pd, cq, cq).unwrap();
        connect::connect(&dev, qp, addr, &ConnectConfig::default()).unwrap();
        // A busy-polling wait drives the engine while the thread backs off; it ends empty.
        let e = dev.wait_cq(cq, &mut Vec::new(), 1, Duration::from_millis(30));
        assert!(matches!(e, Err(Error::Timeout)), "{e:?}");
        let send = SendWr::new(1, SendOp::Send).sge(mr.sge(0, 5).unwrap());
        dev.post_send(qp, send).unwrap();
        let (got, data) = srv.join().unwrap();
        assert_eq!(got.unwrap(), (1, Some(7)));
        assert_eq!(data, b"hello");
    }
}
