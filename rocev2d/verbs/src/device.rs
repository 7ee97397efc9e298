//! [`Device`]: one interface, one in-process RoCEv2 engine ([`rocev2_core::Endpoint`]), the
//! memory it serves ([`VecMemory`], filled with buffers the application handed over) and a
//! datapath, joined by a [`rocev2_datapath::Driver`].
//!
//! Nothing runs in the background: the engine moves only while the application calls
//! [`Device::wait_cq`], [`Device::poll`], [`Device::drain`] or awaits
//! [`Device::next_completion`], as a busy-polling verbs application drives its CQ. A peer
//! therefore sees ACKs and READ responses only while this side is in one of those calls; call
//! [`Device::drain`] before exiting so the last ACKs leave.
//!
//! Deviations from verbs: see [`crate`]'s docs (owned buffers, RC only, engine driven by the
//! caller, the async API busy-polls).

use crate::error::{Error, Result};
use crate::mr::{Mr, Pd};
use crate::qp::{ConnectOptions, Cq, Qp, RemoteQp};
use rocev2_core::Endpoint;
use rocev2_core::cq::WorkCompletion;
use rocev2_core::mr::{AccessFlags, VecMemory};
use rocev2_core::qp::{ConnectAttr, Path, QpAttr, QpConfig, QpMode, QpState, RecvWr, SendWr};
use rocev2_core::time::Duration as CoreDuration;
use rocev2_core::wire::frame::Ecn;
use rocev2_datapath::auto::{self, Options};
use rocev2_datapath::{Datapath, Driver, DriverConfig, Interface, Mode, Progress, TxBatch, neigh};
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

/// Every remote right: what [`Device::create_qp`] grants at INIT.
const ALL_REMOTE: AccessFlags = AccessFlags::from_bits(
    AccessFlags::LOCAL_WRITE.bits()
        | AccessFlags::REMOTE_WRITE.bits()
        | AccessFlags::REMOTE_READ.bits()
        | AccessFlags::REMOTE_ATOMIC.bits(),
);

/// First virtual address handed to a region (as the core's test pair uses).
const FIRST_ADDR: u64 = 0x1000_0000;

static NEXT_DEVICE: AtomicU64 = AtomicU64::new(1);

/// A RoCEv2 device on one interface; see the module docs.
pub struct Device {
    driver: Driver<Box<dyn Datapath + Send>, VecMemory>,
    iface: Interface,
    reason: String,
    id: u64,
    next_addr: u64,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("iface", &self.iface.name)
            .field("datapath", &self.driver.datapath().name())
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
    /// Opens interface `iface` with datapath `kind` and default settings.
    ///
    /// # Errors
    /// [`Error::Datapath`]: no such interface, not Ethernet, or the datapath could not be
    /// opened (AF_PACKET needs `CAP_NET_RAW`).
    pub fn open(iface: &str, kind: Mode) -> Result<Device> {
        Device::open_with(iface, kind, DeviceConfig::default())
    }

    /// Opens interface `iface` with datapath `kind` and these settings.
    ///
    /// # Errors
    /// As [`Device::open`].
    pub fn open_with(iface: &str, kind: Mode, cfg: DeviceConfig) -> Result<Device> {
        let iface = Interface::by_name(iface)?;
        let opened = auto::open(&iface, kind, &cfg.datapath)?;
        let ep = Endpoint::new(cfg.seed.unwrap_or_else(random_u64));
        Ok(Device {
            driver: Driver::new(ep, VecMemory::new(), opened.datapath, cfg.driver),
            iface,
            reason: opened.reason,
            id: NEXT_DEVICE.fetch_add(1, Ordering::Relaxed),
            next_addr: FIRST_ADDR,
        })
    }

    /// The interface, as read when the device was opened.
    pub fn interface(&self) -> &Interface {
        &self.iface
    }

    /// The datapath's name: `"xdp"`, `"packet"` or `"udp"`.
    pub fn datapath_name(&self) -> &'static str {
        self.driver.datapath().name()
    }

    /// Why this datapath was chosen (one sentence).
    pub fn datapath_reason(&self) -> &str {
        &self.reason
    }

    /// The GID table, laid out as rdma_rxe's: 0 the link-local default GID, then the IPv4
    /// (mapped) addresses, then the IPv6 ones ([`rocev2_datapath::Interface::gids`]).
    pub fn gids(&self) -> Vec<Ipv6Addr> {
        self.iface.gids()
    }

    /// The first global address of the family (IPv6 when `v6`), the GID a QP sends from.
    ///
    /// # Errors
    /// [`Error::NoAddress`].
    pub fn source_ip(&self, v6: bool) -> Result<IpAddr> {
        self.iface.source_ip(v6).ok_or_else(|| Error::NoAddress {
            iface: self.iface.name.clone(),
            family: if v6 { "IPv6" } else { "IPv4" },
        })
    }

    /// The engine, for its statistics and QP counters.
    pub fn endpoint(&self) -> &Endpoint {
        &self.driver.ep
    }

    /// The driver (datapath counters, pending frames).
    pub fn driver(&self) -> &Driver<Box<dyn Datapath + Send>, VecMemory> {
        &self.driver
    }

    /// Allocates a protection domain (`ibv_alloc_pd`).
    pub fn alloc_pd(&mut self) -> Pd {
        Pd(self.driver.ep.alloc_pd())
    }

    /// Registers a buffer the device takes ownership of (`ibv_reg_mr`); the bytes stay
    /// reachable through [`Device::mr_bytes`] and come back with [`Device::deregister`].
    ///
    /// # Errors
    /// [`Error::Verb`] when the engine refuses (unknown PD, zero length).
    pub fn register(&mut self, pd: Pd, buf: impl Into<Vec<u8>>, access: AccessFlags) -> Result<Mr> {
        let buf = buf.into();
        let len = buf.len() as u64;
        let info = self
            .driver
            .ep
            .register_mr(pd.0, self.next_addr, len, access)?;
        // Page-aligned, non-overlapping addresses, so a stray address never hits another region.
        self.next_addr = (self.next_addr + len.max(1)).next_multiple_of(4096);
        self.driver.mem.insert(info.id, buf);
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
        self.check(&mr)?;
        self.driver.ep.deregister_mr(mr.info.id)?;
        self.driver.mem.remove(mr.info.id).ok_or(Error::UnknownMr)
    }

    fn check(&self, mr: &Mr) -> Result<()> {
        if mr.device == self.id && self.driver.mem.get(mr.info.id).is_some() {
            Ok(())
        } else {
            Err(Error::UnknownMr)
        }
    }

    /// The region's bytes, as the engine left them (after a completion, everything the
    /// completed requests placed is there).
    ///
    /// # Errors
    /// [`Error::UnknownMr`].
    pub fn mr_bytes(&self, mr: &Mr) -> Result<&[u8]> {
        self.check(mr)?;
        self.driver.mem.get(mr.info.id).ok_or(Error::UnknownMr)
    }

    /// The region's bytes, to fill before posting. Writing bytes a posted, not yet completed
    /// request sends makes what it sends unspecified, as with verbs (but never unsound).
    ///
    /// # Errors
    /// [`Error::UnknownMr`].
    pub fn mr_bytes_mut(&mut self, mr: &Mr) -> Result<&mut [u8]> {
        self.check(mr)?;
        self.driver.mem.get_mut(mr.info.id).ok_or(Error::UnknownMr)
    }

    /// Creates a completion queue holding `capacity` completions (`ibv_create_cq`).
    pub fn create_cq(&mut self, capacity: usize) -> Cq {
        Cq(self.driver.ep.create_cq(capacity))
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
    /// granting every remote right (local write, remote write, read, atomic).
    ///
    /// # Errors
    /// [`Error::Verb`].
    pub fn create_qp(&mut self, cfg: QpConfig) -> Result<Qp> {
        let now = self.driver.now();
        let ep = &mut self.driver.ep;
        let qpn = ep.create_qp(cfg)?;
        let init = QpAttr {
            p_key: Some(0xffff),
            access: Some(ALL_REMOTE),
            ..QpAttr::default()
        };
        ep.modify_qp(qpn, QpState::Init, &init, now, &mut self.driver.mem)?;
        Ok(Qp(qpn))
    }

    /// Connects `qp` to the peer: INIT→RTR→RTS with a path built from the interface (our
    /// MAC and the first global address of the peer's family) and the neighbour table (the
    /// next hop's MAC, unless `remote.mac` gives it), the MTU lowered to what the interface
    /// carries, then `opts`.
    ///
    /// # Errors
    /// [`Error::NoAddress`], [`Error::MtuTooSmall`], [`Error::Datapath`] when the peer's MAC
    /// cannot be resolved, [`Error::Verb`] when the engine refuses an attribute.
    pub fn connect(&mut self, qp: Qp, remote: &RemoteQp, opts: &ConnectOptions) -> Result<()> {
        let v6 = remote.ip.is_ipv6();
        let src_ip = self.source_ip(v6)?;
        let mtu = self
            .iface
            .path_mtu(v6)
            .ok_or_else(|| Error::MtuTooSmall(self.iface.name.clone()))?
            .min(opts.mtu);
        let dst_mac = match remote.mac {
            Some(m) => m,
            None => neigh::resolve(&self.iface, remote.ip, opts.resolve_timeout)?,
        };
        let path = Path {
            src_mac: self.iface.mac,
            dst_mac,
            vlan: None,
            src_ip,
            dst_ip: remote.ip,
            dscp: opts.dscp,
            ecn: Ecn::Ect0,
            hop_limit: 64,
            // ECMP entropy per QP, in the dynamic port range as rxe and ConnectX use it.
            udp_src_port: 49152 | (qp.0.value() as u16 & 0x3fff),
            flow_label: 0,
        };
        let now = self.driver.now();
        let Driver { ep, mem, .. } = &mut self.driver;
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
        ep.connect_qp(qp.0, &attr, now, mem)?;
        // A raw datapath sees only frames sent to this interface's MAC: announce it to the peer,
        // which may have cached another interface's answer to its ARP (docs/datapath.md,
        // "Neighbours"). Best effort: if it is lost, the peer's kernel corrects itself later.
        if !self.driver.datapath().carries_datagrams() {
            let frame = neigh::announcement(self.iface.mac, src_ip, dst_mac);
            let mut batch = TxBatch::new(1);
            if batch.push(&frame) {
                let _ = self.driver.datapath_mut().send(&mut batch);
            }
        }
        Ok(())
    }

    /// The QP's transport mode: [`QpMode::MultiPath`] when it offered MP-RDMA and the peer
    /// announced it at [`Self::connect`], else [`QpMode::Rc`].
    pub fn qp_mode(&self, qp: Qp) -> Option<QpMode> {
        self.driver.ep.qp(qp.0).map(|q| q.mode())
    }

    /// A multipath QP's window, RTT, per-VP counters and receiver statistics
    /// ([`crate::MpSnapshot`]); `None` for an RC QP or an unknown one.
    pub fn mp_snapshot(&self, qp: Qp) -> Option<crate::MpSnapshot> {
        self.driver.ep.qp(qp.0).and_then(|q| q.mp_snapshot())
    }

    /// The QP's state.
    pub fn qp_state(&self, qp: Qp) -> Option<QpState> {
        self.driver.ep.qp(qp.0).map(|q| q.state())
    }

    /// Moves `qp` to ERROR, flushing its outstanding requests into their CQs.
    ///
    /// # Errors
    /// [`Error::Verb`].
    pub fn reset_to_error(&mut self, qp: Qp) -> Result<()> {
        let now = self.driver.now();
        let Driver { ep, mem, .. } = &mut self.driver;
        ep.modify_qp(qp.0, QpState::Error, &QpAttr::default(), now, mem)?;
        Ok(())
    }

    /// Destroys a QP.
    ///
    /// # Errors
    /// [`Error::Verb`].
    pub fn destroy_qp(&mut self, qp: Qp) -> Result<()> {
        Ok(self.driver.ep.destroy_qp(qp.0)?)
    }

    /// Posts a send work request (`ibv_post_send`). Nothing leaves until the device is driven.
    ///
    /// # Errors
    /// [`Error::Verb`] (wrong state, queue full, too many SGEs, bad inline data).
    pub fn post_send(&mut self, qp: Qp, wr: SendWr) -> Result<()> {
        Ok(self.driver.ep.post_send(qp.0, wr)?)
    }

    /// Posts a receive work request (`ibv_post_recv`).
    ///
    /// # Errors
    /// [`Error::Verb`].
    pub fn post_recv(&mut self, qp: Qp, wr: RecvWr) -> Result<()> {
        Ok(self.driver.ep.post_recv(qp.0, wr)?)
    }

    /// Moves up to `max` completions of `cq` into `out` without driving the engine
    /// (`ibv_poll_cq`); returns how many.
    pub fn poll_cq(&mut self, cq: Cq, out: &mut Vec<WorkCompletion>, max: usize) -> usize {
        self.driver.ep.poll_cq(cq.0, out, max)
    }

    /// One pass of the engine: receive, timers, transmit.
    ///
    /// # Errors
    /// [`Error::Datapath`] on socket failures.
    pub fn poll(&mut self) -> Result<Progress> {
        Ok(self.driver.poll()?)
    }

    /// Sleeps (or spins, per [`DriverConfig::wait`]) until frames arrive, a timer is due, or
    /// one of `extra` becomes readable; returns which of `extra` did. Call [`Device::poll`]
    /// after it.
    ///
    /// # Errors
    /// [`Error::Datapath`] on `ppoll` failures.
    pub fn wait(&mut self, extra: &[BorrowedFd<'_>]) -> Result<Vec<bool>> {
        Ok(self.driver.wait(extra)?)
    }

    /// Drives the engine until `cq` has a completion, then moves up to `max` of them into `out`
    /// and returns how many (at least one).
    ///
    /// # Errors
    /// [`Error::Timeout`] when none arrived within `timeout`; [`Error::Datapath`].
    pub fn wait_cq(
        &mut self,
        cq: Cq,
        out: &mut Vec<WorkCompletion>,
        max: usize,
        timeout: Duration,
    ) -> Result<usize> {
        let n = self.driver.ep.poll_cq(cq.0, out, max);
        if n > 0 {
            return Ok(n);
        }
        let mut got = 0;
        self.driver.run_until(core_duration(timeout), |d| {
            got = d.ep.poll_cq(cq.0, out, max);
            got > 0
        })?;
        if got == 0 {
            return Err(Error::Timeout);
        }
        Ok(got)
    }

    /// Drives the engine until it has nothing left to send and no timer pending (every
    /// request acknowledged, every ACK sent), so the process may exit without leaving the
    /// peer waiting for an ACK.
    ///
    /// # Errors
    /// [`Error::Timeout`]; [`Error::Datapath`].
    pub fn drain(&mut self, timeout: Duration) -> Result<()> {
        let done = self.driver.run_until(core_duration(timeout), |d| {
            d.tx_pending() == 0 && d.ep.is_idle(d.now())
        })?;
        if done { Ok(()) } else { Err(Error::Timeout) }
    }

    /// The next completion of `cq`, as a future. It drives the engine on every poll and, with
    /// no reactor to register with, wakes itself at once when nothing completed: it
    /// busy-polls, like a verbs application spinning on `ibv_poll_cq`. Works on any executor.
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
