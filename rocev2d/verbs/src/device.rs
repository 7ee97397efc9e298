//! [`Device`]: one interface, with one of two backends behind the same methods.
//!
//! - In-process ([`Device::open`]): a RoCEv2 engine ([`rocev2_core::Endpoint`]) of its own, the
//!   memory it serves ([`VecMemory`], filled with buffers the application handed over) and a
//!   datapath, joined by a [`rocev2_datapath::Driver`]. Nothing runs in the background: the
//!   engine moves only while the application calls [`Device::wait_cq`], [`Device::poll`],
//!   [`Device::drain`] or awaits [`Device::next_completion`], as a busy-polling verbs
//!   application drives its CQ. A peer therefore sees ACKs and READ responses only while this
//!   side is in one of those calls; call [`Device::drain`] before exiting so the last ACKs
//!   leave.
//! - Attached ([`Device::attach`]): the `rocev2d` serving the interface runs the engine for
//!   every application of the host ([`crate::attached`]); the device's QPs answer their peers
//!   whatever the application does, and several applications share the interface.
//!
//! Deviations from verbs: see [`crate`]'s docs (owned buffers, RC only, the async API
//! busy-polls).

use crate::attached::Attached;
use crate::error::{Error, Result};
use crate::mr::{Mr, Pd};
use crate::qp::{ConnectOptions, Cq, Qp, RemoteQp};
use rocev2_core::Endpoint;
use rocev2_core::cq::WorkCompletion;
use rocev2_core::mr::{AccessFlags, VecMemory};
use rocev2_core::qp::{ConnectAttr, QpAttr, QpConfig, QpMode, QpState, RecvWr, SendWr};
use rocev2_core::time::Duration as CoreDuration;
use rocev2_datapath::auto::{self, Options};
use rocev2_datapath::{Datapath, Driver, DriverConfig, Interface, Mode, Progress, WaitMode, neigh};
use rocev2_ipc::proto::ConnectSpec;
use std::future::Future;
use std::net::{IpAddr, Ipv6Addr};
use std::os::fd::BorrowedFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

/// Settings of [`Device::open_with`].
#[derive(Debug, Clone, Copy, Default)]
pub struct DeviceConfig {
    /// Batching and waiting of the driver (default: busy polling for a while after activity,
    /// then sleeping in `ppoll`; see [`crate::WaitMode`]).
    pub driver: DriverConfig,
    /// Settings of the datapaths.
    pub datapath: Options,
    /// Seed of the key generator; `None` draws one from the OS.
    pub seed: Option<u64>,
}

/// First virtual address handed to a region (as the core's test pair uses).
const FIRST_ADDR: u64 = 0x1000_0000;

static NEXT_DEVICE: AtomicU64 = AtomicU64::new(1);

/// A RoCEv2 device on one interface; see the module docs.
pub struct Device {
    backend: Backend,
    id: u64,
}

/// Where the verbs are carried out.
enum Backend {
    Local(Box<Local>),
    Attached(Box<Attached>),
}

/// The in-process engine, its memory and datapath.
struct Local {
    driver: Driver<Box<dyn Datapath + Send>, VecMemory>,
    iface: Interface,
    reason: String,
    next_addr: u64,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("iface", &self.interface().name)
            .field("datapath", &self.datapath_name())
            .field("attached", &matches!(self.backend, Backend::Attached(_)))
            .finish_non_exhaustive()
    }
}

/// 64 random bits from the OS ([`rocev2_datapath::entropy::os_seed`]), or from std's
/// per-process hash keys if that cannot be read.
pub fn random_u64() -> u64 {
    rocev2_datapath::entropy::os_seed().unwrap_or_else(|_| {
        use std::hash::{BuildHasher, RandomState};
        RandomState::new().hash_one(std::process::id())
    })
}

/// A random 24-bit initial PSN, as `ibv_rc_pingpong` draws with `lrand48() & 0xffffff`.
pub fn random_psn() -> u32 {
    (random_u64() & 0xff_ffff) as u32
}

impl Device {
    /// Opens interface `iface` with datapath `kind` and default settings, with an engine in
    /// this process.
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
    /// As [`Device::open`].
    pub fn open_with(iface: &str, kind: Mode, cfg: DeviceConfig) -> Result<Device> {
        let iface = Interface::by_name(iface)?;
        let opened = auto::open(&iface, kind, &cfg.datapath)?;
        let ep = Endpoint::new(cfg.seed.unwrap_or_else(random_u64));
        Ok(Device::new(Backend::Local(Box::new(Local {
            driver: Driver::new(ep, VecMemory::new(), opened.datapath, cfg.driver),
            iface,
            reason: opened.reason,
            next_addr: FIRST_ADDR,
        }))))
    }

    /// Attaches to the `rocev2d` serving interface `iface` (its control socket,
    /// `/run/rocev2d/IFACE.sock`): the daemon runs the engine, this process's regions are
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

    /// Attaches to the daemon listening on `path`; `wait` says how [`Device::wait_cq`] waits
    /// for completions: spinning on the ring ([`WaitMode::Spin`]), for a while first
    /// ([`WaitMode::Adaptive`]'s window), or sleeping on the CQ's eventfd at once.
    ///
    /// # Errors
    /// As [`Device::attach`].
    pub fn attach_socket_with(path: &std::path::Path, wait: WaitMode) -> Result<Device> {
        let spin = match wait {
            WaitMode::Sleep => Duration::ZERO,
            WaitMode::Adaptive { spin } => Duration::from_nanos(spin.as_nanos()),
            WaitMode::Spin => Duration::MAX,
        };
        Ok(Device::new(Backend::Attached(Box::new(Attached::open(
            path, spin,
        )?))))
    }

    fn new(backend: Backend) -> Device {
        Device {
            backend,
            id: NEXT_DEVICE.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// True when the device is attached to a daemon.
    pub fn is_attached(&self) -> bool {
        matches!(self.backend, Backend::Attached(_))
    }

    /// The interface, as read when the device was opened.
    pub fn interface(&self) -> &Interface {
        match &self.backend {
            Backend::Local(l) => &l.iface,
            Backend::Attached(a) => &a.iface,
        }
    }

    /// The datapath's name: `"xdp"`, `"packet"` or `"udp"`.
    pub fn datapath_name(&self) -> &str {
        match &self.backend {
            Backend::Local(l) => l.driver.datapath().name(),
            Backend::Attached(a) => &a.datapath,
        }
    }

    /// Why this datapath was chosen (one sentence).
    pub fn datapath_reason(&self) -> &str {
        match &self.backend {
            Backend::Local(l) => &l.reason,
            Backend::Attached(a) => &a.reason,
        }
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

    /// The in-process engine, for its statistics and QP counters; `None` when attached (ask
    /// the daemon: `rocev2d stats`).
    pub fn endpoint(&self) -> Option<&Endpoint> {
        match &self.backend {
            Backend::Local(l) => Some(&l.driver.ep),
            Backend::Attached(_) => None,
        }
    }

    /// The in-process driver (datapath counters, pending frames); `None` when attached.
    pub fn driver(&self) -> Option<&Driver<Box<dyn Datapath + Send>, VecMemory>> {
        match &self.backend {
            Backend::Local(l) => Some(&l.driver),
            Backend::Attached(_) => None,
        }
    }

    /// Allocates a protection domain (`ibv_alloc_pd`).
    ///
    /// # Errors
    /// Attached: the daemon's ([`Error::DaemonGone`], [`Error::Timeout`]).
    pub fn alloc_pd(&mut self) -> Result<Pd> {
        match &mut self.backend {
            Backend::Local(l) => Ok(Pd(l.driver.ep.alloc_pd())),
            Backend::Attached(a) => Ok(Pd(a.alloc_pd()?)),
        }
    }

    /// Registers a buffer the device takes ownership of (`ibv_reg_mr`); the bytes stay
    /// reachable through [`Device::mr_bytes`] and come back with [`Device::deregister`].
    /// Attached, they move into shared memory the daemon reads and writes in place.
    ///
    /// # Errors
    /// [`Error::Verb`] when the engine refuses (unknown PD, bad rights); attached, also
    /// [`Error::Refused`] (the daemon's per-application memory limit).
    pub fn register(&mut self, pd: Pd, buf: impl Into<Vec<u8>>, access: AccessFlags) -> Result<Mr> {
        let buf = buf.into();
        let info = match &mut self.backend {
            Backend::Local(l) => {
                let len = buf.len() as u64;
                let info = l.driver.ep.register_mr(pd.0, l.next_addr, len, access)?;
                // Page-aligned, non-overlapping addresses, so a stray address never hits
                // another region.
                l.next_addr = (l.next_addr + len.max(1)).next_multiple_of(4096);
                l.driver.mem.insert(info.id, buf);
                info
            }
            Backend::Attached(a) => a.register(pd.0, &buf, access)?,
        };
        Ok(Mr {
            info,
            device: self.id,
        })
    }

    /// Deregisters a region (`ibv_dereg_mr`) and returns its bytes; its keys stop working at
    /// once.
    ///
    /// # Errors
    /// [`Error::UnknownMr`] for a handle of another device or one already deregistered.
    pub fn deregister(&mut self, mr: Mr) -> Result<Vec<u8>> {
        if mr.device != self.id {
            return Err(Error::UnknownMr);
        }
        match &mut self.backend {
            Backend::Local(l) => {
                if l.driver.mem.get(mr.info.id).is_none() {
                    return Err(Error::UnknownMr);
                }
                l.driver.ep.deregister_mr(mr.info.id)?;
                l.driver.mem.remove(mr.info.id).ok_or(Error::UnknownMr)
            }
            Backend::Attached(a) => a.deregister(mr.info.id),
        }
    }

    /// The region's bytes, as the engine left them (after a completion, everything the
    /// completed requests placed is there).
    ///
    /// # Errors
    /// [`Error::UnknownMr`].
    pub fn mr_bytes(&self, mr: &Mr) -> Result<&[u8]> {
        if mr.device != self.id {
            return Err(Error::UnknownMr);
        }
        match &self.backend {
            Backend::Local(l) => l.driver.mem.get(mr.info.id),
            Backend::Attached(a) => a.mr_bytes(mr.info.id, mr.info.len),
        }
        .ok_or(Error::UnknownMr)
    }

    /// The region's bytes, to fill before posting. Writing bytes a posted, not yet completed
    /// request sends makes what it sends unspecified, as with verbs (but never unsound).
    ///
    /// # Errors
    /// [`Error::UnknownMr`].
    pub fn mr_bytes_mut(&mut self, mr: &Mr) -> Result<&mut [u8]> {
        if mr.device != self.id {
            return Err(Error::UnknownMr);
        }
        match &mut self.backend {
            Backend::Local(l) => l.driver.mem.get_mut(mr.info.id),
            Backend::Attached(a) => a.mr_bytes_mut(mr.info.id, mr.info.len),
        }
        .ok_or(Error::UnknownMr)
    }

    /// Creates a completion queue holding `capacity` completions (`ibv_create_cq`).
    ///
    /// # Errors
    /// Attached: the daemon's (limits, [`Error::DaemonGone`]).
    pub fn create_cq(&mut self, capacity: usize) -> Result<Cq> {
        match &mut self.backend {
            Backend::Local(l) => Ok(Cq(l.driver.ep.create_cq(capacity))),
            Backend::Attached(a) => Ok(Cq(a.create_cq(capacity)?)),
        }
    }

    /// Creates an RC QP with `ibv_rc_pingpong`-like sizes (see [`QpConfig::new`]) and moves it
    /// to INIT granting every remote right.
    ///
    /// # Errors
    /// [`Error::Verb`].
    pub fn create_rc_qp(&mut self, pd: Pd, send_cq: Cq, recv_cq: Cq) -> Result<Qp> {
        self.create_qp(QpConfig::new(pd.0, send_cq.0, recv_cq.0))
    }

    /// Creates an RC QP from a full configuration (`ibv_create_qp`) and moves it to INIT
    /// granting every remote right (local write, remote write, read, atomic). Attached, the
    /// daemon's congestion control replaces `cfg.cc`.
    ///
    /// # Errors
    /// [`Error::Verb`]; attached, [`Error::Refused`] (limits, sizes the rings cannot carry).
    pub fn create_qp(&mut self, cfg: QpConfig) -> Result<Qp> {
        match &mut self.backend {
            Backend::Local(l) => {
                let now = l.driver.now();
                let Driver { ep, mem, .. } = &mut l.driver;
                let qpn = ep.create_qp(cfg)?;
                ep.modify_qp(qpn, QpState::Init, &QpAttr::init_all_access(), now, mem)?;
                Ok(Qp(qpn))
            }
            Backend::Attached(a) => Ok(Qp(a.create_qp(&cfg)?)),
        }
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
    pub fn connect(&mut self, qp: Qp, remote: &RemoteQp, opts: &ConnectOptions) -> Result<()> {
        let l = match &mut self.backend {
            Backend::Local(l) => l,
            Backend::Attached(a) => {
                let spec = ConnectSpec {
                    dest_qpn: remote.qpn.value(),
                    remote_psn: remote.psn,
                    ip: remote.ip,
                    mac: remote.mac,
                    local_psn: opts.local_psn,
                    mtu: opts.mtu.bytes(),
                    timeout: opts.timeout,
                    retry_cnt: opts.retry_cnt,
                    rnr_retry: opts.rnr_retry,
                    min_rnr_timer: opts.min_rnr_timer,
                    rd_atomic: opts.rd_atomic,
                    dscp: opts.dscp,
                    resolve_timeout_ms: u32::try_from(opts.resolve_timeout.as_millis())
                        .unwrap_or(u32::MAX),
                    peer_ext: opts.peer_ext.to_word(),
                };
                return a.connect(qp.0, spec);
            }
        };
        let v6 = remote.ip.is_ipv6();
        let no_address = || Error::NoAddress {
            iface: l.iface.name.clone(),
            family: if v6 { "IPv6" } else { "IPv4" },
        };
        l.iface.source_ip(v6).ok_or_else(no_address)?;
        let mtu = l
            .iface
            .path_mtu(v6)
            .ok_or_else(|| Error::MtuTooSmall(l.iface.name.clone()))?
            .min(opts.mtu);
        let dst_mac = match remote.mac {
            Some(m) => m,
            None => neigh::resolve(&l.iface, remote.ip, opts.resolve_timeout)?,
        };
        let path = l
            .iface
            .path_to(qp.0, remote.ip, dst_mac, opts.dscp)
            .ok_or_else(no_address)?;
        let now = l.driver.now();
        let attr = ConnectAttr {
            path,
            mtu,
            dest_qpn: remote.qpn,
            rq_psn: remote.psn & 0xff_ffff,
            sq_psn: opts.local_psn & 0xff_ffff,
            rd_atomic: opts.rd_atomic,
            min_rnr_timer: opts.min_rnr_timer,
            timeout: opts.timeout,
            retry_cnt: opts.retry_cnt,
            rnr_retry: opts.rnr_retry,
            peer_ext: opts.peer_ext,
        };
        let Driver { ep, mem, .. } = &mut l.driver;
        ep.connect_qp(qp.0, &attr, now, mem)?;
        neigh::announce(l.driver.datapath_mut(), &attr.path);
        Ok(())
    }

    /// The QP's transport mode: [`QpMode::MultiPath`] when it offered MP-RDMA and the peer
    /// announced it at [`Self::connect`], else [`QpMode::Rc`].
    pub fn qp_mode(&mut self, qp: Qp) -> Option<QpMode> {
        match &mut self.backend {
            Backend::Local(l) => l.driver.ep.qp(qp.0).map(|q| q.mode()),
            Backend::Attached(a) => a.query(qp.0).map(|(_, m)| m),
        }
    }

    /// A multipath QP's window, RTT, per-VP counters and receiver statistics
    /// ([`crate::MpSnapshot`]); `None` for an RC QP, an unknown one, or when attached.
    pub fn mp_snapshot(&self, qp: Qp) -> Option<crate::MpSnapshot> {
        self.endpoint()?.qp(qp.0).and_then(|q| q.mp_snapshot())
    }

    /// The QP's state.
    pub fn qp_state(&mut self, qp: Qp) -> Option<QpState> {
        match &mut self.backend {
            Backend::Local(l) => l.driver.ep.qp(qp.0).map(|q| q.state()),
            Backend::Attached(a) => a.query(qp.0).map(|(s, _)| s),
        }
    }

    /// Moves `qp` to ERROR, flushing its outstanding requests into their CQs.
    ///
    /// # Errors
    /// [`Error::Verb`].
    pub fn reset_to_error(&mut self, qp: Qp) -> Result<()> {
        match &mut self.backend {
            Backend::Local(l) => {
                let now = l.driver.now();
                let Driver { ep, mem, .. } = &mut l.driver;
                ep.modify_qp(qp.0, QpState::Error, &QpAttr::default(), now, mem)?;
                Ok(())
            }
            Backend::Attached(a) => a.reset_to_error(qp.0),
        }
    }

    /// Destroys a QP.
    ///
    /// # Errors
    /// [`Error::Verb`].
    pub fn destroy_qp(&mut self, qp: Qp) -> Result<()> {
        match &mut self.backend {
            Backend::Local(l) => Ok(l.driver.ep.destroy_qp(qp.0)?),
            Backend::Attached(a) => a.destroy_qp(qp.0),
        }
    }

    /// Posts a send work request (`ibv_post_send`). In-process, nothing leaves until the
    /// device is driven; attached, the daemon takes it at once.
    ///
    /// # Errors
    /// [`Error::Verb`] (wrong state, queue full, too many SGEs, bad inline data); attached,
    /// only queue full and [`Error::DaemonGone`]: the others complete with an error status.
    pub fn post_send(&mut self, qp: Qp, wr: SendWr) -> Result<()> {
        match &mut self.backend {
            Backend::Local(l) => Ok(l.driver.ep.post_send(qp.0, wr)?),
            Backend::Attached(a) => a.post_send(qp.0, &wr),
        }
    }

    /// Posts a receive work request (`ibv_post_recv`).
    ///
    /// # Errors
    /// [`Error::Verb`]; attached, as [`Device::post_send`].
    pub fn post_recv(&mut self, qp: Qp, wr: RecvWr) -> Result<()> {
        match &mut self.backend {
            Backend::Local(l) => Ok(l.driver.ep.post_recv(qp.0, wr)?),
            Backend::Attached(a) => a.post_recv(qp.0, &wr),
        }
    }

    /// Moves up to `max` completions of `cq` into `out` without driving the engine
    /// (`ibv_poll_cq`); returns how many.
    pub fn poll_cq(&mut self, cq: Cq, out: &mut Vec<WorkCompletion>, max: usize) -> usize {
        match &mut self.backend {
            Backend::Local(l) => l.driver.ep.poll_cq(cq.0, out, max),
            Backend::Attached(a) => a.poll_cq(cq.0, out, max),
        }
    }

    /// One pass of the engine: receive, timers, transmit. Attached, the daemon drives the
    /// engine: this only checks that it is still there.
    ///
    /// # Errors
    /// [`Error::Datapath`] on socket failures; [`Error::DaemonGone`].
    pub fn poll(&mut self) -> Result<Progress> {
        match &mut self.backend {
            Backend::Local(l) => Ok(l.driver.poll()?),
            Backend::Attached(a) => a.check_alive().map(|()| Progress::default()),
        }
    }

    /// Sleeps (or spins, per [`DriverConfig::wait`]) until frames arrive, a timer is due, or
    /// one of `extra` becomes readable; returns which of `extra` did. Call [`Device::poll`]
    /// after it. Attached: sleeps until one of `extra` is readable, a completion arrives, or
    /// 100 ms pass.
    ///
    /// # Errors
    /// [`Error::Datapath`] on `ppoll` failures; [`Error::DaemonGone`].
    pub fn wait(&mut self, extra: &[BorrowedFd<'_>]) -> Result<Vec<bool>> {
        match &mut self.backend {
            Backend::Local(l) => Ok(l.driver.wait(extra)?),
            Backend::Attached(a) => a.wait(extra),
        }
    }

    /// Drives the engine until `cq` has a completion, then moves up to `max` of them into `out`
    /// and returns how many (at least one). Attached: spins on the CQ's ring for the wait
    /// mode's window, then sleeps on its eventfd.
    ///
    /// # Errors
    /// [`Error::Timeout`] when none arrived within `timeout`; [`Error::Datapath`];
    /// [`Error::DaemonGone`].
    pub fn wait_cq(
        &mut self,
        cq: Cq,
        out: &mut Vec<WorkCompletion>,
        max: usize,
        timeout: Duration,
    ) -> Result<usize> {
        let l = match &mut self.backend {
            Backend::Local(l) => l,
            Backend::Attached(a) => return a.wait_cq(cq.0, out, max, timeout),
        };
        let n = l.driver.ep.poll_cq(cq.0, out, max);
        if n > 0 {
            return Ok(n);
        }
        let mut got = 0;
        l.driver.run_until(core_duration(timeout), |d| {
            got = d.ep.poll_cq(cq.0, out, max);
            got > 0
        })?;
        if got == 0 {
            return Err(Error::Timeout);
        }
        Ok(got)
    }

    /// Waits until the device has nothing left to send and no timer pending (every request
    /// acknowledged, every ACK sent), so the process may exit without leaving the peer waiting
    /// for an ACK. Attached, only this application's QPs count.
    ///
    /// # Errors
    /// [`Error::Timeout`]; [`Error::Datapath`]; [`Error::DaemonGone`].
    pub fn drain(&mut self, timeout: Duration) -> Result<()> {
        let l = match &mut self.backend {
            Backend::Local(l) => l,
            Backend::Attached(a) => return a.drain(timeout),
        };
        let done = l.driver.run_until(core_duration(timeout), |d| {
            d.tx_pending() == 0 && d.ep.is_idle(d.now())
        })?;
        if done { Ok(()) } else { Err(Error::Timeout) }
    }

    /// The next completion of `cq`, as a future.
    ///
    /// In-process, it drives the engine on every poll and wakes itself at once when nothing
    /// completed: it busy-polls, like a verbs application spinning on `ibv_poll_cq`. Attached
    /// and polled on a tokio runtime (feature `tokio`, default), it sleeps on the CQ's eventfd
    /// through tokio's reactor and wakes when the daemon delivers a completion or dies; with
    /// [`WaitMode::Spin`], or on another executor, it busy-polls. Cancel-safe: dropping it
    /// loses no completion (they stay in the CQ).
    pub fn next_completion(&mut self, cq: Cq) -> NextCompletion<'_> {
        NextCompletion {
            dev: self,
            cq,
            buf: Vec::with_capacity(1),
        }
    }
}

fn core_duration(d: Duration) -> CoreDuration {
    CoreDuration::from_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The future of [`Device::next_completion`].
#[derive(Debug)]
pub struct NextCompletion<'a> {
    dev: &'a mut Device,
    cq: Cq,
    buf: Vec<WorkCompletion>,
}

impl Future for NextCompletion<'_> {
    type Output = Result<WorkCompletion>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Backend::Attached(a) = &mut this.dev.backend {
            return a.poll_completion(this.cq.0, cx);
        }
        if this.dev.poll_cq(this.cq, &mut this.buf, 1) == 0 {
            if let Err(e) = this.dev.poll() {
                return Poll::Ready(Err(e));
            }
            this.dev.poll_cq(this.cq, &mut this.buf, 1);
        }
        match this.buf.pop() {
            Some(wc) => Poll::Ready(Ok(wc)),
            None => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }
}
