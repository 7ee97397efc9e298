//! The connection manager on an in-process device: QP1 and the engine's CM
//! ([`rocev2_core::Endpoint::enable_cm`]) opened on the device's interface, the `cm_*` calls
//! under the device's lock, and CM events handed to whoever waits for them.
//!
//! The progress thread (or, caller-driven, the waiter's own passes) moves the engine's CM
//! events into a queue of the device and signals an eventfd; [`Device::next_cm_event`] sleeps
//! on it and takes the first event its filter picks, so a listener and connecting IDs of one
//! device each take their own. rdmacm-shim builds the rdma_cm-style API on these calls.
//!
//! Deviations: in-process devices only; an attached device refuses every call with
//! [`Error::NotAttachedYet`] (the daemon does not run the CM yet). Events nobody picks stay
//! queued until the device closes, but for [`Event::TimeWaitExit`]: the queue keeps the latest
//! 64 (rdmacm-shim never takes them).

use crate::device::Device;
use crate::error::{Error, Result};
use crate::local::{Local, sleep_on};
use crate::qp::Qp;
use rocev2_core::EndpointError;
use rocev2_core::cm::ServiceId;
use rocev2_core::cm::{AcceptParams, CmConfig, ConnId, ConnectParams, Event, RejectReason};
use rocev2_core::endpoint::GsiConfig;
use rocev2_core::wire::gid::gid_to_ip;
use rocev2_datapath::{Driver, neigh};
use std::time::{Duration, Instant};

/// The longest a waiter sleeps before looking at the queue again: bounds a wake-up lost to
/// another waiter clearing the shared eventfd.
const WAIT_SLICE: Duration = Duration::from_millis(50);

/// The IBA path MTU code of an MTU (256 → 1 … 4096 → 5).
fn mtu_code(bytes: u32) -> u8 {
    (bytes / 256).max(1).ilog2() as u8 + 1
}

impl Device {
    /// The in-process backend, or [`Error::NotAttachedYet`] naming `what`.
    fn cm_local(&self, what: &'static str) -> Result<&Local> {
        self.local().ok_or(Error::NotAttachedYet(what))
    }

    /// Opens QP1 with a connection manager behind it, once: CM MADs to this interface's QP1
    /// are answered from now on. Calling it again keeps the CM and its connections.
    ///
    /// # Errors
    /// [`Error::NotAttachedYet`] on an attached device.
    pub fn enable_cm(&self) -> Result<()> {
        let l = self.cm_local("the connection manager")?;
        let mut st = l.lock();
        if st.driver.ep.cm().is_none() {
            let cfg = GsiConfig {
                mac: self.interface().mac,
                // Linux uses the node GUID; ours is the interface MAC made an EUI-64.
                cm: CmConfig {
                    local_ca_guid: eui64(self.interface().mac),
                },
                seed: crate::random_u64(),
            };
            st.driver.ep.enable_cm(cfg);
        }
        Ok(())
    }

    /// Runs a CM call on the engine with the clock and memory, keeps the events it released,
    /// and wakes the progress thread to send its MADs.
    fn with_cm<R>(
        &self,
        what: &'static str,
        f: impl FnOnce(
            &mut rocev2_core::Endpoint,
            rocev2_core::time::Instant,
            &mut rocev2_core::mr::VecMemory,
        ) -> std::result::Result<R, EndpointError>,
    ) -> Result<R> {
        let l = self.cm_local(what)?;
        let mut st = l.lock();
        let now = st.driver.now();
        let Driver { ep, mem, .. } = &mut st.driver;
        let r = f(ep, now, mem);
        if st.take_cm_events() {
            l.shared.cm.fire();
        }
        drop(st);
        l.kick();
        Ok(r?)
    }

    /// Accepts REQs for `service_id` (rdma_cm: [`ServiceId::rdma_cm`]); they arrive as
    /// [`Event::ConnectRequest`] from [`Self::next_cm_event`]. Enables the CM first.
    ///
    /// # Errors
    /// [`Error::NotAttachedYet`]; [`Error::Verb`] if someone listens on it already.
    pub fn cm_listen(&self, service_id: ServiceId) -> Result<()> {
        self.enable_cm()?;
        self.with_cm("cm_listen", |ep, _, _| ep.cm_listen(service_id))
    }

    /// Stops accepting REQs for `service_id`; returns whether anyone listened.
    ///
    /// # Errors
    /// [`Error::NotAttachedYet`]; [`Error::Verb`] if the CM is not enabled.
    pub fn cm_unlisten(&self, service_id: ServiceId) -> Result<bool> {
        self.with_cm("cm_unlisten", |ep, _, _| ep.cm_unlisten(service_id))
    }

    /// Sends a REQ for `qp` (in INIT) with `params` (their `local_qpn` is set to `qp`'s, their
    /// path MTU lowered to the interface's). The peer's MAC is resolved through the neighbour
    /// table, waiting up to `resolve_timeout`. Enables the CM first. The connection is up when
    /// [`Event::Established`] for the returned ID comes out of [`Self::next_cm_event`].
    ///
    /// # Errors
    /// [`Error::NotAttachedYet`]; [`Error::Datapath`] when the peer cannot be resolved;
    /// [`Error::MtuTooSmall`]; [`Error::Verb`] when the engine refuses (QP not in INIT,
    /// parameters the REQ cannot carry).
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
        let mtu = iface
            .path_mtu(peer.is_ipv6())
            .ok_or_else(|| Error::MtuTooSmall(iface.name.clone()))?;
        params.path_mtu = params.path_mtu.min(mtu_code(mtu.bytes()));
        params.local_qpn = qp.0;
        // Resolution may take the whole timeout: not under the lock.
        let mac = neigh::resolve(iface, peer, resolve_timeout)?;
        self.with_cm("cm_connect", |ep, now, _| ep.cm_connect(now, params, mac))
    }

    /// Accepts an [`Event::ConnectRequest`] with `params` (their `local_qpn`: a QP of this
    /// device in INIT). The QP moves to RTR at once and to RTS on [`Event::Established`].
    ///
    /// # Errors
    /// [`Error::NotAttachedYet`]; [`Error::Verb`] when the engine refuses.
    pub fn cm_accept(&self, conn: ConnId, params: AcceptParams) -> Result<()> {
        self.with_cm("cm_accept", |ep, now, mem| {
            ep.cm_accept(now, conn, params, mem)
        })
    }

    /// Refuses an [`Event::ConnectRequest`] with a REJ.
    ///
    /// # Errors
    /// [`Error::NotAttachedYet`]; [`Error::Verb`] when the engine refuses.
    pub fn cm_reject(&self, conn: ConnId, reason: RejectReason, private_data: &[u8]) -> Result<()> {
        self.with_cm("cm_reject", |ep, now, _| {
            ep.cm_reject(now, conn, reason, private_data)
        })
    }

    /// Moves the connection's QP to ERROR and sends a DREQ; [`Event::Disconnected`] follows.
    ///
    /// # Errors
    /// [`Error::NotAttachedYet`]; [`Error::Verb`] when the engine refuses.
    pub fn cm_disconnect(&self, conn: ConnId, private_data: &[u8]) -> Result<()> {
        self.with_cm("cm_disconnect", |ep, now, mem| {
            ep.cm_disconnect(now, conn, private_data, mem)
        })
    }

    /// Takes the first CM event `pick` accepts, sleeping until one comes or `timeout` passes.
    /// Events it does not pick stay for other waiters.
    ///
    /// # Errors
    /// [`Error::Timeout`]; [`Error::NotAttachedYet`]; [`Error::ProgressStopped`];
    /// [`Error::Datapath`] (caller-driven).
    pub fn next_cm_event(
        &self,
        mut pick: impl FnMut(&Event) -> bool,
        timeout: Duration,
    ) -> Result<Event> {
        let l = self.cm_local("next_cm_event")?;
        let deadline = Instant::now() + timeout;
        loop {
            {
                let mut st = l.lock();
                if let Some(why) = &st.failed {
                    return Err(Error::ProgressStopped(why.clone()));
                }
                if !l.has_thread() {
                    st.pass(&l.shared.activity)?;
                }
                st.take_cm_events();
                if let Some(ev) = st
                    .cm_events
                    .iter()
                    .position(&mut pick)
                    .and_then(|i| st.cm_events.remove(i))
                {
                    return Ok(ev);
                }
                // Looked under the lock the events are queued under: armed now, the next
                // one signals.
                l.shared.cm.arm();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout);
            }
            if l.has_thread() {
                sleep_on(&l.shared.cm, left.min(WAIT_SLICE))?;
            } else {
                l.lock().driver.wait(&[])?;
            }
        }
    }
}

/// A modified EUI-64 from a MAC (RFC 4291 appendix A), as RoCE NICs derive their node GUID.
fn eui64(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([
        mac[0] ^ 2,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_codes() {
        assert_eq!(mtu_code(256), 1);
        assert_eq!(mtu_code(1024), 3);
        assert_eq!(mtu_code(4096), 5);
    }

    #[test]
    fn eui64_of_mac() {
        assert_eq!(
            eui64([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]),
            0x5054_00ff_fe12_3456
        );
    }
}
