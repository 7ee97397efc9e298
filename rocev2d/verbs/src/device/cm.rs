//! The connection manager of a device: the `cm_*` calls and CM events handed to whoever waits
//! for them.
//!
//! In-process, QP1 and the engine's CM ([`rocev2_core::Endpoint::enable_cm`]) are opened on the
//! device's interface and the calls run under the device's lock; the progress thread (or,
//! caller-driven, the waiter's own passes) moves the engine's CM events into a queue of the
//! device and wakes the waiters. Attached, the daemon runs the CM for every application
//! (docs/daemon.md): the calls are control requests, service IDs and connections are this
//! application's alone, and the daemon signals the attachment's CM eventfd when it queues an
//! event; a waiter woken by it fetches what was queued and wakes the others. Either way
//! [`Device::next_cm_event`] (blocking) and [`Device::next_cm_event_async`] run one look-or-sleep
//! loop (`CmWait`) that takes the first event its filter picks, so a listener and connecting
//! IDs of one device each take their own, and each waiter sleeps on a wake-up of its own
//! ([`CmWaiters`](crate::cm_wait::CmWaiters)). rdmacm-shim builds the rdma_cm-style API on these calls.
//!
//! Deviations: events nobody picks stay queued until the device closes, but for
//! [`Event::TimeWaitExit`]: the queue keeps the latest 64 (rdmacm-shim never takes them).

use super::Device;
use crate::cm_wait::{Look, Sleep};
use crate::error::{Error, Result};
use crate::qp::Qp;
use crate::wakeup::{Waitable, readable, wait_any, yield_now};
use rocev2_core::cm::ServiceId;
use rocev2_core::cm::{
    AcceptParams, ConnId, ConnectParams, Event, RejectReason, SidrId, SidrParams, SidrReplyParams,
};
use rocev2_core::wire::gid::gid_to_ip;
use rocev2_ipc::notify::EventFd;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Device {
    /// Opens QP1 with a connection manager behind it, once: CM MADs to this interface's QP1
    /// are answered from now on. Calling it again keeps the CM and its connections. Attached,
    /// the daemon's CM answers QP1 always; this asks it for this application's events.
    ///
    /// # Errors
    /// Attached: the daemon's ([`Error::DaemonGone`], [`Error::Refused`]).
    pub fn enable_cm(&self) -> Result<()> {
        self.ops().cm_enable()
    }

    /// Accepts REQs for `service_id` (rdma_cm: [`ServiceId::rdma_cm`]); they arrive as
    /// [`Event::ConnectRequest`] from [`Self::next_cm_event`]. Enables the CM first.
    ///
    /// On an engine shard ([`crate::DeviceConfig::queue`]) the service ID is also this shard's
    /// among the interface's shards: REQs for it that reach another shard are forwarded here.
    ///
    /// Attached, the service ID is this application's until it unlistens or detaches.
    ///
    /// # Errors
    /// [`Error::Verb`] if someone listens on it already, on this device or (a shard) on another
    /// shard of the interface (attached: [`Error::Refused`] with
    /// [`ErrorKind::InUse`](rocev2_ipc::proto::ErrorKind::InUse), also when another application does).
    pub fn cm_listen(&self, service_id: ServiceId) -> Result<()> {
        self.enable_cm()?;
        self.ops().cm_listen(service_id)
    }

    /// Stops accepting REQs for `service_id`; returns whether anyone listened.
    ///
    /// Attached, only this application's listens count.
    ///
    /// # Errors
    /// [`Error::Verb`] if the CM is not enabled; attached, the daemon's.
    pub fn cm_unlisten(&self, service_id: ServiceId) -> Result<bool> {
        self.ops().cm_unlisten(service_id)
    }

    /// Sends a REQ for `qp` (in INIT) with `params` (their `local_qpn` is set to `qp`'s, their
    /// path MTU lowered to the interface's). The peer's MAC is resolved through the neighbour
    /// table (a [`Device::pair`] end knows the other's), waiting up to `resolve_timeout`.
    /// Enables the CM first. The connection is up when [`Event::Established`] for the
    /// returned ID comes out of [`Self::next_cm_event`].
    ///
    /// Attached, the daemon resolves the peer and sends the REQ.
    ///
    /// # Errors
    /// [`Error::Datapath`] when the peer cannot be resolved (attached: [`Error::Refused`] with
    /// [`ErrorKind::Path`](rocev2_ipc::proto::ErrorKind::Path)); [`Error::MtuTooSmall`]; [`Error::Verb`] (attached:
    /// [`Error::Refused`]) when the engine refuses (QP not in INIT, parameters the REQ cannot
    /// carry).
    pub fn cm_connect(
        &self,
        qp: Qp,
        mut params: ConnectParams,
        resolve_timeout: Duration,
    ) -> Result<ConnId> {
        self.own(qp.1, "QP")?;
        self.enable_cm()?;
        let iface = self.interface();
        let peer = gid_to_ip(params.peer_gid);
        // The engine's CM proposes the path MTU the link carries (or the caller's smaller one).
        if iface.path_mtu(peer.is_ipv6()).is_none() {
            return Err(Error::MtuTooSmall(iface.name.clone()));
        }
        params.local_qpn = qp.0;
        self.ops().cm_connect(params, resolve_timeout)
    }

    /// Accepts an [`Event::ConnectRequest`] with `params` (their `local_qpn`: a QP of this
    /// device in INIT). The QP moves to RTR at once and to RTS on [`Event::Established`].
    ///
    /// # Errors
    /// [`Error::Verb`] when the engine refuses; attached, [`Error::Refused`] also for a
    /// connection or QP that is not this application's.
    pub fn cm_accept(&self, conn: ConnId, params: AcceptParams) -> Result<()> {
        self.ops().cm_accept(conn, params)
    }

    /// Refuses an [`Event::ConnectRequest`] with a REJ.
    ///
    /// # Errors
    /// [`Error::Verb`] when the engine refuses; attached, [`Error::Refused`] also for a
    /// connection that is not this application's.
    pub fn cm_reject(&self, conn: ConnId, reason: RejectReason, private_data: &[u8]) -> Result<()> {
        self.ops().cm_reject(conn, reason, private_data)
    }

    /// Answers an [`Event::ConnectRequest`] with an MRA (IBA §12.6.6) instead of accepting it
    /// now: the peer holds its REQ for `service_timeout` (4.096 µs × 2^n) rather than resending
    /// it; [`Self::cm_accept`] or [`Self::cm_reject`] follows.
    ///
    /// # Errors
    /// [`Error::Verb`] when the engine refuses (the request is already answered); attached,
    /// [`Error::Refused`] also for a connection that is not this application's.
    pub fn cm_send_mra(&self, conn: ConnId, service_timeout: u8) -> Result<()> {
        self.ops().cm_send_mra(conn, service_timeout)
    }

    /// Moves the connection's QP to ERROR and sends a DREQ; [`Event::Disconnected`] follows.
    ///
    /// # Errors
    /// [`Error::Verb`] when the engine refuses; attached, [`Error::Refused`] also for a
    /// connection that is not this application's.
    pub fn cm_disconnect(&self, conn: ConnId, private_data: &[u8]) -> Result<()> {
        self.ops().cm_disconnect(conn, private_data)
    }

    /// Asks the peer at `params.peer_gid` for the QPN and Q_Key of the UD service
    /// `params.service_id` with a SIDR_REQ (IBA §12.11; rdma_cm's `RDMA_PS_UDP` resolution).
    /// The peer's MAC is resolved through the neighbour table, waiting up to
    /// `resolve_timeout`. Enables the CM first. [`Event::SidrReply`] (with the QPN and Q_Key to
    /// build an address handle for) or [`Event::SidrTimedOut`] for the returned ID follows from
    /// [`Self::next_cm_event`]. No QP is involved.
    ///
    /// # Errors
    /// [`Error::Datapath`] when the peer cannot be resolved; [`Error::Verb`] for parameters the
    /// SIDR_REQ cannot carry. Attached, the daemon resolves the peer and sends the SIDR_REQ
    /// ([`Error::Refused`] for what it refuses).
    pub fn cm_sidr_request(&self, params: SidrParams, resolve_timeout: Duration) -> Result<SidrId> {
        self.enable_cm()?;
        self.ops().cm_sidr_request(params, resolve_timeout)
    }

    /// Answers an [`Event::SidrRequest`] (for a service ID of [`Self::cm_listen`]) with a
    /// SIDR_REP: the status, and on success the UD QP and Q_Key the requester sends to.
    ///
    /// # Errors
    /// [`Error::Verb`] when the engine refuses (unknown or answered request, private data over
    /// 136 bytes); attached, [`Error::Refused`] also for a request that is not this
    /// application's.
    pub fn cm_sidr_reply(&self, id: SidrId, params: SidrReplyParams) -> Result<()> {
        self.ops().cm_sidr_reply(id, params)
    }

    /// Takes the first CM event `pick` accepts, sleeping until one comes or `timeout` passes.
    /// Events it does not pick stay for other waiters.
    ///
    /// # Errors
    /// [`Error::Timeout`]; [`Error::ProgressStopped`]; [`Error::Datapath`] (caller-driven);
    /// attached, [`Error::DaemonGone`] as soon as the daemon dies.
    pub fn next_cm_event(
        &self,
        pick: impl FnMut(&Event) -> bool,
        timeout: Duration,
    ) -> Result<Event> {
        let deadline = Instant::now() + timeout;
        let mut w = CmWait::new(self, pick)?;
        loop {
            let sleep = match w.look()? {
                Look::Found(ev) => return Ok(ev),
                Look::Sleep(s) => s,
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout);
            }
            w.sleep(sleep, left)?;
        }
    }

    /// [`Device::next_cm_event`] as a future, without a timeout (wrap it in
    /// `tokio::time::timeout` for one).
    ///
    /// With a progress thread, or attached, and awaited on a tokio runtime (feature `tokio`,
    /// default), it sleeps on its own CM wake-up through tokio's reactor (no busy polling);
    /// attached, it also wakes when the control socket does, so a dead daemon ends it with
    /// [`Error::DaemonGone`]. Caller-driven, or on another executor, it busy-polls (driving
    /// the engine and yielding to the executor), as `next_completion` does.
    ///
    /// Cancel-safe: an event leaves the queue only in the poll that returns it, so dropping
    /// the future loses none. Blocking and async waiters on one device each sleep on a
    /// wake-up of their own, signalled whenever CM events are queued, so none takes
    /// another's.
    ///
    /// # Errors
    /// [`Error::ProgressStopped`]; [`Error::Datapath`] (caller-driven); attached,
    /// [`Error::DaemonGone`].
    pub async fn next_cm_event_async(&self, pick: impl FnMut(&Event) -> bool) -> Result<Event> {
        let mut w = CmWait::new(self, pick)?;
        loop {
            match w.look()? {
                Look::Found(ev) => return Ok(ev),
                Look::Sleep(s) => w.sleep_async(s).await?,
            }
        }
    }
}

/// One waiter for a CM event, blocking or async: the one dispatch between the backends.
struct CmWait<'d, P> {
    dev: &'d Device,
    pick: P,
    /// This waiter's wake-up, in the device's [`CmWaiters`](crate::cm_wait::CmWaiters) once the CM is enabled.
    own: Arc<Waitable<EventFd>>,
    registered: bool,
}

impl<'d, P: FnMut(&Event) -> bool> CmWait<'d, P> {
    fn new(dev: &'d Device, pick: P) -> Result<Self> {
        Ok(CmWait {
            dev,
            pick,
            own: Arc::new(Waitable::new(EventFd::new().map_err(Error::Io)?)),
            registered: false,
        })
    }

    /// Takes the first event `pick` accepts, else says what to sleep on. Registers first and
    /// clears the own wake-up under the lock events are queued under, after moving them into
    /// the queue: an event queued after this look signals it.
    fn look(&mut self) -> Result<Look> {
        self.dev
            .ops()
            .cm_look(&self.own, &mut self.registered, &mut self.pick)
    }

    /// Sleeps (blocking) as `s` says, for at most `timeout`.
    fn sleep(&self, s: Sleep, timeout: Duration) -> Result<()> {
        match s {
            Sleep::Drive => self.dev.ops().drive_wait(),
            Sleep::Own => wait_any(&[self.own.get().as_fd()], timeout).map(drop),
            Sleep::Daemon { daemon, watch } => {
                let fds = [
                    self.own.get().as_fd(),
                    daemon.get().as_fd(),
                    watch.get().as_fd(),
                ];
                let ready = wait_any(&fds, timeout)?;
                if ready.get(2) == Some(&true) {
                    self.check_alive()?;
                }
                Ok(())
            }
        }
    }

    /// [`Self::sleep`] awaited, without a timeout.
    async fn sleep_async(&self, s: Sleep) -> Result<()> {
        let slept = match s {
            Sleep::Drive => false,
            Sleep::Own => readable(&[&*self.own]).await?,
            Sleep::Daemon { daemon, watch } => {
                let slept = readable(&[&*self.own, &*daemon, &*watch]).await;
                self.check_alive()?;
                slept?
            }
        };
        if !slept {
            yield_now().await;
        }
        Ok(())
    }

    /// Attached: [`Error::DaemonGone`] if the daemon died; the other waiters wake to see it.
    fn check_alive(&self) -> Result<()> {
        self.dev.ops().cm_check_alive()
    }
}
