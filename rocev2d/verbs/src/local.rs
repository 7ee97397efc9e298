//! The in-process backend ([`Backend`]): an engine, its memory and datapath behind one lock,
//! and the progress thread that drives them. The address handles, region addresses, paths and
//! the progress thread are the host side's own ([`rocev2_datapath::host`]).
//!
//! How the engine progresses (the progress thread, its waits and back-off, or the application
//! driving it) is [`crate::engine`]'s.

use crate::backend::{Backend, Drive, RegionBytes, Step};
use crate::cm_wait::{CmWaiters, Look, Sleep as CmSleep};
use crate::engine::{CqEvent, Driving, EngineGuard, LocalDriver, ProgressMode, State};
use crate::error::{Error, Result};
use crate::qp::{ConnectOptions, RemoteQp};
use crate::random::{random_psn, random_u64};
use crate::ud::{AhAttr, UdAddress, check_ud_send};
use crate::wakeup::{Waitable, wait_any};
use rocev2_core::EndpointError;
use rocev2_core::cc::CcConfig;
use rocev2_core::cm::{
    AcceptParams, CmConfig, CmError, ConnId, ConnectParams, Event, RejectReason, ServiceId, SidrId,
    SidrParams, SidrReplyParams,
};
use rocev2_core::cq::WorkCompletion;
use rocev2_core::endpoint::GsiConfig;
use rocev2_core::mr::{AccessFlags, MrId, MrInfo, PdId};
use rocev2_core::qp::{
    CqId, ErrorCause, Mtu, QpAttr, QpConfig, QpMode, QpState, RecvWr, SendWr, UdDest,
};
use rocev2_core::srq::{SrqAttr, SrqId};
use rocev2_core::wire::Qpn;
use rocev2_core::wire::gid::gid_to_ip;
use rocev2_datapath::handoff::Listens;
use rocev2_datapath::host::{
    self, Backing, CallerRange, HostMemory, NextHop, ProcessMemory, ProgressThread,
};
use rocev2_datapath::iface::node_guid;
use rocev2_datapath::{Datapath, Driver, Interface, Progress, WaitMode, neigh};
use rocev2_ipc::notify::EventFd;
use rocev2_ipc::proto::{Destination, ModifySpec};
use std::net::IpAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};
/// The in-process backend; see the module docs.
pub(crate) struct Local {
    progress: ProgressThread<State>,
    /// The interface, as read when the device was opened.
    iface: Interface,
    /// Neighbours known without asking the kernel (the other end of [`crate::Device::pair`],
    /// whose made-up interface has no neighbour table).
    neighbours: Vec<(IpAddr, [u8; 6])>,
    /// An engine shard's entries in its interface's listen registry, where
    /// [`crate::Device::cm_listen`] registers its Service IDs so that REQs reaching another
    /// shard are forwarded here.
    listens: Option<Listens>,
    /// Signalled, when armed, after a pass that received, sent or ran timers.
    pub(crate) activity: Arc<CqEvent>,
    /// Signalled when the engine reports a CM event.
    pub(crate) cm: Arc<CmWaiters>,
    pub(crate) mode: ProgressMode,
    pub(crate) wait: WaitMode,
    /// The controller of a QP whose configuration names none (the device's scheme).
    cc: Option<CcConfig>,
    /// [`State::activity_gen`] at the application's last [`crate::Device::poll`], so
    /// [`crate::Device::wait`] returns at once for activity it has not looked at.
    pub(crate) seen: AtomicU64,
}

impl Local {
    // The parts of the device's configuration, each apart: this layer may not import it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        driver: LocalDriver,
        iface: Interface,
        neighbours: Vec<(IpAddr, [u8; 6])>,
        listens: Option<Listens>,
        first_addr: u64,
        mode: ProgressMode,
        wait: WaitMode,
        cc: Option<CcConfig>,
    ) -> Result<Local> {
        let dp_fd = driver
            .datapath()
            .fd()
            .try_clone_to_owned()
            .map_err(Error::Io)?;
        let activity = Arc::new(CqEvent::new()?);
        let cm = Arc::new(CmWaiters::default());
        let state = State::new(driver, first_addr, Arc::clone(&activity), Arc::clone(&cm));
        let name = (mode == ProgressMode::Thread).then(|| "rocev2-progress".to_string());
        Ok(Local {
            progress: ProgressThread::start(state, dp_fd, name).map_err(Error::Io)?,
            iface,
            neighbours,
            listens,
            activity,
            cm,
            mode,
            wait,
            cc,
            seen: AtomicU64::new(0),
        })
    }

    /// The state, locked ([`ProgressThread::lock`]).
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.progress.lock()
    }

    /// True when a progress thread drives the engine.
    pub(crate) fn has_thread(&self) -> bool {
        self.progress.has_thread()
    }

    /// How long an application's wait busy-polls, driving the engine while the progress thread
    /// backs off, before it sleeps on its CQ's eventfd: the thread's spin window
    /// ([`WaitMode::Spin`]: for ever; [`WaitMode::Sleep`], or no thread: not at all).
    pub(crate) fn drive_window(&self) -> std::time::Duration {
        match (self.has_thread(), self.wait) {
            (false, _) | (true, WaitMode::Sleep) => Duration::ZERO,
            (true, WaitMode::Adaptive { spin }) => Duration::from_nanos(spin.as_nanos()),
            (true, WaitMode::Spin) => Duration::MAX,
        }
    }

    /// Marks the calling thread as driving the engine until the guard drops.
    pub(crate) fn driving(&self) -> Driving<'_> {
        self.progress.driving()
    }

    /// Tells a sleeping progress thread that work was posted.
    pub(crate) fn kick(&self) {
        self.progress.kick();
    }

    /// Where the next hop's MAC towards `ip` comes from: `mac` when given, else the neighbours
    /// the device knows, else the kernel's neighbour table, waiting up to `wait`.
    pub(crate) fn next_hop(&self, ip: IpAddr, mac: Option<[u8; 6]>, wait: Duration) -> NextHop {
        let known = || {
            let n = self.neighbours.iter().find(|(n, _)| *n == ip);
            n.map(|(_, mac)| *mac)
        };
        NextHop::new(mac.or_else(known), wait)
    }

    /// Runs a CM call on the engine with the clock and memory, keeps the events it released,
    /// and wakes the progress thread to send its MADs.
    fn with_cm<R>(
        &self,
        f: impl FnOnce(
            &mut rocev2_core::Endpoint,
            rocev2_core::time::Instant,
            &mut HostMemory,
        ) -> std::result::Result<R, EndpointError>,
    ) -> Result<R> {
        let mut st = self.lock();
        let now = st.driver.now();
        let Driver { ep, mem, .. } = &mut st.driver;
        let r = f(ep, now, mem);
        if st.take_cm_events() {
            self.cm.fire();
        }
        drop(st);
        self.kick();
        Ok(r?)
    }
}

/// Waits, without the lock, until `ev` fires or `timeout` passes.
fn sleep_on(ev: &CqEvent, timeout: Duration) -> Result<()> {
    wait_any(&[ev.event.get().as_fd()], timeout).map(|_| ())
}

/// A region's bytes with the state locked ([`Backend::region`]).
struct Region<'a> {
    st: MutexGuard<'a, State>,
    id: MrId,
}

impl std::ops::Deref for Region<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // The region was checked when the guard was made and cannot go while it is locked.
        self.st.driver.mem.owned(self.id).unwrap_or(&[])
    }
}

impl std::ops::DerefMut for Region<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.st.driver.mem.owned_mut(self.id).unwrap_or(&mut [])
    }
}

impl Drive for Driving<'_> {
    fn hand_back(self: Box<Self>) {
        host::Driving::hand_back(*self);
    }
}

impl Backend for Local {
    fn alloc_pd(&self) -> Result<PdId> {
        Ok(self.lock().driver.ep.alloc_pd())
    }

    fn register(&self, pd: PdId, buf: Vec<u8>, align: u64, access: AccessFlags) -> Result<MrInfo> {
        let mut st = self.lock();
        let len = buf.len() as u64;
        let addr = st.addresses.alloc(len, align);
        let info = match st.driver.ep.register_mr(pd, addr, len, access) {
            Ok(info) => info,
            Err(e) => {
                st.addresses.free(addr, len);
                return Err(e.into());
            }
        };
        st.driver.mem.insert(info.id, Backing::Owned(buf));
        Ok(info)
    }

    fn deregister(&self, mr: &MrInfo) -> Result<Vec<u8>> {
        let mut st = self.lock();
        if st.driver.mem.get(mr.id).is_none() {
            return Err(Error::UnknownMr);
        }
        st.driver.ep.deregister_mr(mr.id)?;
        match st.driver.mem.remove(mr.id) {
            Some(Backing::Owned(bytes)) => {
                st.addresses.free(mr.addr, mr.len);
                Ok(bytes)
            }
            // The caller's buffer stays the caller's; its address was never ours to give.
            Some(_) => Ok(Vec::new()),
            None => Err(Error::UnknownMr),
        }
    }

    fn register_caller(
        &self,
        pd: PdId,
        range: CallerRange,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrInfo> {
        // The same check the daemon makes of an attached program's range: a buffer this
        // process does not have fails here, not later in a copy.
        let own = ProcessMemory::from_fd(ProcessMemory::open_own().map_err(Error::Io)?);
        own.and_then(|m| m.range(range.addr() as u64, range.len() as u64))
            .map_err(Error::Io)?;
        let mut st = self.lock();
        let info = st
            .driver
            .ep
            .register_mr(pd, iova, range.len() as u64, access)?;
        st.driver.mem.insert(info.id, Backing::Caller(range));
        Ok(info)
    }

    fn dealloc_pd(&self, pd: PdId) -> Result<()> {
        Ok(self.lock().driver.ep.dealloc_pd(pd)?)
    }

    fn create_cq(&self, capacity: usize) -> Result<CqId> {
        let ev = Arc::new(CqEvent::new()?);
        let mut st = self.lock();
        let id = st.driver.ep.create_cq(capacity);
        st.cqs.insert(id, ev);
        Ok(id)
    }

    fn destroy_cq(&self, cq: CqId) -> Result<()> {
        let mut st = self.lock();
        st.driver.ep.destroy_cq(cq)?;
        st.cqs.remove(&cq);
        Ok(())
    }

    fn arm_cq(&self, cq: CqId) -> Result<()> {
        let st = self.lock();
        let ev = st.cqs.get(&cq).ok_or(EndpointError::UnknownCq)?;
        ev.arm();
        if st.driver.ep.cq(cq).is_some_and(|c| !c.is_empty()) {
            ev.fire();
        }
        Ok(())
    }

    fn ack_cq_event(&self, cq: CqId) {
        if let Some(ev) = self.lock().cqs.get(&cq) {
            ev.event.get().clear();
        }
    }

    fn cq_event_fd(&self, cq: CqId) -> Result<OwnedFd> {
        let st = self.lock();
        let ev = st.cqs.get(&cq).ok_or(EndpointError::UnknownCq)?;
        ev.event
            .get()
            .as_fd()
            .try_clone_to_owned()
            .map_err(Error::Io)
    }

    fn hand_back(&self) {
        self.progress.hand_back();
    }

    fn poll_cq_driving(
        &self,
        cq: CqId,
        out: &mut Vec<WorkCompletion>,
        max: usize,
    ) -> Result<usize> {
        self.progress.drove();
        let mut st = self.lock();
        let n = st.driver.ep.poll_cq(cq, out, max);
        if n > 0 {
            return Ok(n);
        }
        st.drive()?;
        Ok(st.driver.ep.poll_cq(cq, out, max))
    }

    fn create_qp(&self, mut cfg: QpConfig) -> Result<Qpn> {
        cfg.cc = cfg.cc.or(self.cc);
        let mut st = self.lock();
        let now = st.driver.now();
        let Driver { ep, mem, .. } = &mut st.driver;
        let qpn = ep.create_qp(cfg)?;
        ep.modify_qp(qpn, QpState::Init, &QpAttr::init_all_access(), now, mem)?;
        Ok(qpn)
    }

    fn connect(&self, qp: Qpn, remote: &RemoteQp, opts: &ConnectOptions) -> Result<()> {
        // Resolution may take the whole timeout: not under the lock.
        let hop = self.next_hop(remote.ip, remote.mac, opts.resolve_timeout);
        let attr = host::connect_attr(&self.iface, qp, &opts.spec(remote), hop)
            .map_err(Error::from_path)?;
        let mut st = self.lock();
        let now = st.driver.now();
        let Driver { ep, mem, .. } = &mut st.driver;
        ep.connect_qp(qp, &attr, now, mem)?;
        neigh::announce(st.driver.datapath_mut(), &attr.path);
        drop(st);
        self.kick();
        Ok(())
    }

    fn modify_qp(&self, qp: Qpn, spec: &ModifySpec) -> Result<QpState> {
        let current = self.qp_state(qp).ok_or(EndpointError::UnknownQp)?;
        // Resolution may take the whole timeout: not under the lock.
        let hop = |d: &Destination| {
            let wait = Duration::from_millis(d.resolve_timeout_ms.into());
            self.next_hop(d.ip, d.mac, wait)
        };
        let (to, attr) =
            host::modify_attr(&self.iface, qp, spec, current, hop).map_err(Error::from_path)?;
        let mut st = self.lock();
        let now = st.driver.now();
        let Driver { ep, mem, .. } = &mut st.driver;
        ep.modify_qp(qp, to, &attr, now, mem)?;
        if let Some(path) = &attr.path {
            neigh::announce(st.driver.datapath_mut(), path);
        }
        drop(st);
        self.kick();
        Ok(to)
    }

    fn qp_mode(&self, qp: Qpn) -> Option<QpMode> {
        self.lock().driver.ep.qp(qp).map(|q| q.mode())
    }

    fn mp_snapshot(&self, qp: Qpn) -> Option<crate::MpSnapshot> {
        self.lock().driver.ep.qp(qp).and_then(|q| q.mp_snapshot())
    }

    fn qp_state(&self, qp: Qpn) -> Option<QpState> {
        let st = self.lock();
        let ep = &st.driver.ep;
        ep.qp(qp)
            .map(|q| q.state())
            .or_else(|| ep.ud_qp(qp).map(|q| q.state()))
    }

    fn qp_error(&self, qp: Qpn) -> Option<ErrorCause> {
        self.lock().driver.ep.qp(qp).and_then(|q| q.error_cause())
    }

    fn reset_to_error(&self, qp: Qpn) -> Result<()> {
        let mut st = self.lock();
        let now = st.driver.now();
        let Driver { ep, mem, .. } = &mut st.driver;
        ep.modify_qp(qp, QpState::Error, &QpAttr::default(), now, mem)?;
        drop(st);
        self.kick();
        Ok(())
    }

    fn destroy_qp(&self, qp: Qpn) -> Result<()> {
        Ok(self.lock().driver.ep.destroy_qp(qp)?)
    }

    fn post_send(&self, qp: Qpn, wr: SendWr) -> Result<()> {
        let mut st = self.lock();
        if st.driver.ep.ud_qp(qp).is_some() {
            return Err(crate::ud::needs_address());
        }
        st.driver.ep.post_send(qp, wr)?;
        drop(st);
        self.kick();
        Ok(())
    }

    fn post_recv(&self, qp: Qpn, wr: RecvWr) -> Result<()> {
        self.lock().driver.ep.post_recv(qp, wr)?;
        // A receive may end an RNR wait the peer is in: let the thread answer.
        self.kick();
        Ok(())
    }

    fn poll_cq(&self, cq: CqId, out: &mut Vec<WorkCompletion>, max: usize) -> usize {
        self.lock().driver.ep.poll_cq(cq, out, max)
    }

    fn create_ud_qp(&self, cfg: QpConfig, q_key: u32) -> Result<Qpn> {
        let iface = &self.iface;
        let mtu = iface
            .path_mtu(false)
            .ok_or_else(|| Error::MtuTooSmall(iface.name.clone()))?;
        let mut st = self.lock();
        let now = st.driver.now();
        let Driver { ep, mem, .. } = &mut st.driver;
        let qpn = ep.create_ud_qp(cfg, mtu)?;
        if let Err(e) = ep.activate_ud_qp(qpn, q_key, random_psn(), now, mem) {
            let _ = ep.destroy_qp(qpn);
            return Err(e.into());
        }
        Ok(qpn)
    }

    fn ud_mtu(&self, qp: Qpn) -> Option<Mtu> {
        self.lock().driver.ep.ud_qp(qp).map(|q| q.mtu())
    }

    fn create_ah(&self, attr: &AhAttr) -> Result<u32> {
        // Resolution may take the whole timeout: not under the lock.
        let hop = self.next_hop(attr.ip, attr.mac, attr.resolve_timeout);
        let ah =
            host::address_handle(&self.iface, attr.ip, hop, attr.dscp).map_err(Error::from_path)?;
        Ok(self.lock().ahs.insert(ah))
    }

    fn destroy_ah(&self, ah: u32) -> Result<()> {
        self.lock()
            .ahs
            .remove(ah)
            .map(|_| ())
            .ok_or(Error::UnknownAh)
    }

    fn post_send_to(&self, qp: Qpn, to: UdAddress, wr: SendWr) -> Result<()> {
        let mut st = self.lock();
        let mtu = st.driver.ep.ud_qp(qp).ok_or_else(crate::ud::not_ud)?.mtu();
        check_ud_send(&wr, mtu)?;
        let ah = *st.ahs.get(to.ah.0).ok_or(Error::UnknownAh)?;
        let wr = wr.ud(UdDest {
            ah,
            remote_qpn: to.qpn,
            remote_qkey: to.q_key,
        });
        st.driver.ep.post_send(qp, wr)?;
        drop(st);
        self.kick();
        Ok(())
    }

    fn create_srq(&self, pd: PdId, max_wr: u32, max_sge: u32) -> Result<SrqId> {
        let ev = EventFd::new().map_err(Error::Io)?;
        let mut st = self.lock();
        let id = st.driver.ep.create_srq(pd, max_wr, max_sge)?;
        st.srqs.insert(id, ev);
        Ok(id)
    }

    fn post_srq_recv(&self, srq: SrqId, wr: RecvWr) -> Result<()> {
        self.lock().driver.ep.post_srq_recv(srq, wr)?;
        // A receive may end an RNR wait a peer is in: let the thread answer.
        self.kick();
        Ok(())
    }

    fn modify_srq(&self, srq: SrqId, max_wr: Option<u32>, limit: Option<u32>) -> Result<()> {
        Ok(self.lock().driver.ep.modify_srq(srq, max_wr, limit)?)
    }

    fn query_srq(&self, srq: SrqId) -> Result<SrqAttr> {
        let st = self.lock();
        Ok(st
            .driver
            .ep
            .query_srq(srq)
            .ok_or(EndpointError::UnknownSrq)?)
    }

    fn destroy_srq(&self, srq: SrqId) -> Result<()> {
        let mut st = self.lock();
        st.driver.ep.destroy_srq(srq)?;
        st.srqs.remove(&srq);
        Ok(())
    }

    fn srq_event_fd(&self, srq: SrqId) -> Result<OwnedFd> {
        let st = self.lock();
        let ev = st.srqs.get(&srq).ok_or(EndpointError::UnknownSrq)?;
        ev.share().map_err(Error::Io)
    }

    fn take_srq_limit(&self, srq: SrqId) -> Result<bool> {
        let st = self.lock();
        Ok(st.srqs.get(&srq).ok_or(EndpointError::UnknownSrq)?.clear())
    }

    fn cm_enable(&self) -> Result<()> {
        let mut st = self.lock();
        if st.driver.ep.cm().is_none() {
            let cfg = GsiConfig {
                mac: self.iface.mac,
                // Linux uses the node GUID; ours is the interface MAC made an EUI-64.
                cm: CmConfig {
                    local_ca_guid: node_guid(self.iface.mac),
                },
                seed: random_u64(),
                link_mtu: self.iface.mtu,
            };
            st.driver.ep.enable_cm(cfg);
        }
        Ok(())
    }

    fn cm_listen(&self, service: ServiceId) -> Result<()> {
        self.with_cm(|ep, _, _| ep.cm_listen(service))?;
        match &self.listens {
            Some(reg) if !reg.listen(service) => {
                self.with_cm(|ep, _, _| ep.cm_unlisten(service))?;
                Err(EndpointError::from(CmError::AlreadyListening).into())
            }
            _ => Ok(()),
        }
    }

    fn cm_unlisten(&self, service: ServiceId) -> Result<bool> {
        let listened = self.with_cm(|ep, _, _| ep.cm_unlisten(service))?;
        if let (true, Some(reg)) = (listened, &self.listens) {
            reg.unlisten(service);
        }
        Ok(listened)
    }

    fn cm_connect(&self, params: ConnectParams, resolve_timeout: Duration) -> Result<ConnId> {
        let peer = gid_to_ip(params.peer_gid);
        // Resolution may take the whole timeout: not under the lock.
        let mac = self
            .next_hop(peer, None, resolve_timeout)
            .mac(&self.iface, peer)
            .map_err(Error::from_path)?;
        self.with_cm(|ep, now, _| ep.cm_connect(now, params, mac))
    }

    fn cm_accept(&self, conn: ConnId, params: AcceptParams) -> Result<()> {
        self.with_cm(|ep, now, mem| ep.cm_accept(now, conn, params, mem))
    }

    fn cm_reject(&self, conn: ConnId, reason: RejectReason, private_data: &[u8]) -> Result<()> {
        self.with_cm(|ep, now, _| ep.cm_reject(now, conn, reason, private_data))
    }

    fn cm_send_mra(&self, conn: ConnId, service_timeout: u8) -> Result<()> {
        self.with_cm(|ep, _, _| ep.cm_send_mra(conn, service_timeout))
    }

    fn cm_disconnect(&self, conn: ConnId, private_data: &[u8]) -> Result<()> {
        self.with_cm(|ep, now, mem| ep.cm_disconnect(now, conn, private_data, mem))
    }

    fn cm_sidr_request(&self, params: SidrParams, resolve_timeout: Duration) -> Result<SidrId> {
        let peer = gid_to_ip(params.peer_gid);
        // Resolution may take the whole timeout: not under the lock.
        let mac = self
            .next_hop(peer, None, resolve_timeout)
            .mac(&self.iface, peer)
            .map_err(Error::from_path)?;
        self.with_cm(|ep, now, _| ep.cm_sidr_request(now, &params, mac))
    }

    fn cm_sidr_reply(&self, id: SidrId, params: SidrReplyParams) -> Result<()> {
        self.with_cm(|ep, _, _| ep.cm_sidr_reply(id, &params))
    }

    fn cm_look(
        &self,
        own: &Arc<Waitable<EventFd>>,
        registered: &mut bool,
        pick: &mut dyn FnMut(&Event) -> bool,
    ) -> Result<Look> {
        let mut st = self.lock();
        if !*registered {
            self.cm.register(own);
            *registered = true;
        }
        if let Some(why) = &st.failed {
            return Err(Error::ProgressStopped(why.clone()));
        }
        if !self.has_thread() {
            st.drive()?;
        }
        if st.take_cm_events() {
            self.cm.fire();
        }
        own.get().clear();
        let i = st.cm_events.iter().position(pick);
        if let Some(ev) = i.and_then(|i| st.cm_events.remove(i)) {
            return Ok(Look::Found(ev));
        }
        Ok(Look::Sleep(if self.has_thread() {
            CmSleep::Own
        } else {
            CmSleep::Drive
        }))
    }

    fn drive_wait(&self) -> Result<()> {
        self.lock().driver.wait(&[]).map(drop).map_err(Error::from)
    }

    fn cm_check_alive(&self) -> Result<()> {
        Ok(())
    }

    fn progress_mode(&self) -> Option<ProgressMode> {
        Some(self.mode)
    }

    fn engine(&self) -> Option<EngineGuard<'_>> {
        Some(EngineGuard(self.lock()))
    }

    fn region(&self, mr: &MrInfo) -> Result<RegionBytes<'_>> {
        let st = self.lock();
        st.driver.mem.owned(mr.id).ok_or(Error::UnknownMr)?;
        Ok(Box::new(Region { st, id: mr.id }))
    }

    fn poll(&self) -> Result<Progress> {
        let mut st = self.lock();
        let p = st.drive()?;
        self.seen.store(st.activity_gen, Ordering::SeqCst);
        Ok(p)
    }

    fn wait(&self, extra: &[BorrowedFd<'_>]) -> Result<Vec<bool>> {
        let mut st = self.lock();
        if !self.has_thread() {
            return Ok(st.driver.wait(extra)?);
        }
        let ev = &self.activity;
        ev.arm();
        let bound = if st.activity_gen != self.seen.load(Ordering::SeqCst) {
            Duration::ZERO
        } else {
            Duration::from_millis(100)
        };
        drop(st);
        let mut fds = extra.to_vec();
        fds.push(ev.event.get().as_fd());
        let mut ready = wait_any(&fds, bound)?;
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
        let mut st = self.lock();
        if let Some(why) = &st.failed {
            return Err(Error::ProgressStopped(why.clone()));
        }
        let n = st.driver.ep.poll_cq(cq, out, max);
        if n > 0 {
            return Ok(Step::Done(n));
        }
        // The CQ's wake-up is cloned only to sleep on it: a busy-polling look would pay two
        // atomic reference-count updates for nothing.
        if !st.cqs.contains_key(&cq) {
            return Err(EndpointError::UnknownCq.into());
        }
        if !self.has_thread() || spin {
            // Caller-driven, or busy-polling while the thread backs off (module docs).
            st.drive()?;
            let n = st.driver.ep.poll_cq(cq, out, max);
            return Ok(match (n, self.has_thread()) {
                (1.., _) => Step::Done(n),
                (0, false) => Step::Drive,
                (0, true) => Step::Yield,
            });
        }
        // Empty, seen under the lock the progress thread fires under: armed now, the next
        // completion signals.
        let ev = st.cqs.get(&cq).ok_or(EndpointError::UnknownCq)?;
        ev.arm();
        Ok(Step::Sleep {
            event: Arc::clone(&ev.event),
            watch: None,
        })
    }

    fn alive(&self) -> Result<()> {
        Ok(())
    }

    /// The progress thread disarms a CQ when it fires it.
    fn disarm(&self, _cq: CqId) {}

    fn driving(&self) -> Option<Box<dyn Drive + Send + '_>> {
        (self.drive_window() > Duration::ZERO)
            .then(|| Box::new(self.driving()) as Box<dyn Drive + Send>)
    }

    fn spin_window(&self) -> Duration {
        self.drive_window()
    }

    fn drain(&self, timeout: Duration) -> Result<()> {
        let idle = |d: &LocalDriver| d.tx_pending() == 0 && d.ep.is_idle(d.now());
        if !self.has_thread() {
            let limit = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
            let done = self
                .lock()
                .driver
                .run_until(rocev2_core::time::Duration::from_nanos(limit), |d| idle(d))?;
            return if done { Ok(()) } else { Err(Error::Timeout) };
        }
        let start = Instant::now();
        loop {
            {
                let st = self.lock();
                if let Some(why) = &st.failed {
                    return Err(Error::ProgressStopped(why.clone()));
                }
                if idle(&st.driver) {
                    return Ok(());
                }
                self.activity.arm();
            }
            let waited = start.elapsed();
            if waited >= timeout {
                return Err(Error::Timeout);
            }
            // Timers expire without activity: look again at least every 10 ms.
            sleep_on(
                &self.activity,
                (timeout - waited).min(Duration::from_millis(10)),
            )?;
        }
    }

    #[cfg(test)]
    fn passes(&self) -> Option<u64> {
        Some(self.progress.passes())
    }
}
