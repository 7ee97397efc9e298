//! rdma_cm's connection API over the IB CM on QP1: [`CmListener::bind`] → [`CmListener::accept`]
//! (or [`CmListener::get_request`] → [`ConnRequest::accept`] / [`ConnRequest::reject`]) on the
//! passive side, [`CmId::connect`] on the active side, [`CmId::disconnect`] on either; each
//! returns once the QP is connected (RTS) or refused. A standard librdmacm peer sees what it
//! would see from another librdmacm host: service ID `RDMA_PS_TCP << 16 | port`, the REQ's
//! private data a CMA header (addresses and ports) followed by the application's bytes.
//!
//! ```no_run
//! use rdmacm_shim::cm::{CmId, CmListener};
//! use rocev2::{DatapathKind, Device};
//! use std::time::Duration;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dev = Device::open("eth0", DatapathKind::Udp)?;
//! let pd = dev.alloc_pd()?;
//! let cq = dev.create_cq(16)?;
//! let qp = dev.create_rc_qp(pd, cq, cq)?;
//! // Passive side:
//! let listener = CmListener::bind(&dev, "10.0.0.2:7174".parse()?)?;
//! let (conn, hello) = listener.accept(qp, b"welcome", Duration::from_secs(30))?;
//! // Active side, on another host: CmId::connect(&dev, qp, "10.0.0.2:7174".parse()?, b"hi",
//! // Duration::from_secs(10))?
//! conn.disconnect(Duration::from_secs(5))?;
//! # let _ = hello; Ok(()) }
//! ```
//!
//! Blocking calls, and on tokio their `_async` futures (`accept_async`, `connect_async`,
//! `disconnect_async`, …); the waits sleep on the device's CM wake-up
//! ([`Device::next_cm_event`], [`Device::next_cm_event_async`]).
//!
//! Works on in-process and attached devices alike (attached, the daemon's CM serves QP1 and a
//! port is one application's at a time).
//!
//! Deviations from librdmacm: the QP is created
//! by the application before it connects or accepts (as with `rdma_create_qp` on the ID);
//! RDMA_PS_TCP only; the passive side receives the REQ's whole user area (56 bytes after the
//! CMA header, zero-padded), as librdmacm reports it.

use rocev2::{Device, Psn, Qp, gid};
use rocev2_core::cm::{AcceptParams, ConnId, ConnectParams, ConnectRequest, Event, RejectReason};
use rocev2_core::cm::{CmaAddrs, CmaError, CmaHeader, PortSpace, ServiceId};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// User bytes a REQ carries after the CMA header: 92 − 36.
pub const MAX_REQ_USER_DATA: usize = 92 - CmaHeader::LEN;

/// How long the neighbour resolution of [`CmId::connect`] may take.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(3);

/// Why a connection call failed.
#[derive(Debug, thiserror::Error)]
pub enum CmApiError {
    /// The device refused or failed (see [`rocev2::Error`]).
    #[error(transparent)]
    Device(#[from] rocev2::Error),
    /// The peer answered the REQ with a REJ.
    #[error("{peer}: connection rejected (REJ reason {reason}{}", reject_hint(*reason))]
    Rejected {
        /// The address connected to.
        peer: SocketAddr,
        /// The REJ's reason (IBA §12.6.7.2).
        reason: u16,
        /// The REJ's private data.
        private_data: Vec<u8>,
    },
    /// The UD service answered a SIDR_REQ with another status than success (IBA §12.11.2:
    /// 1 nobody serves the port, 2 refused, 3 no QP, 4 redirect, 5 unsupported version).
    #[error("{peer}: UD service resolution refused ({status})")]
    SidrRefused {
        /// The address resolved.
        peer: SocketAddr,
        /// The SIDR_REP's status.
        status: rocev2_core::cm::SidrStatus,
        /// The SIDR_REP's private data.
        private_data: Vec<u8>,
    },
    /// The peer never answered (the CM's retries ran out).
    #[error("{0}: no answer from the peer's connection manager (is it up and reachable?)")]
    TimedOut(SocketAddr),
    /// The peer disconnected before the connection was established.
    #[error("{0}: disconnected before the connection was established")]
    Disconnected(SocketAddr),
    /// More private data than the message holds.
    #[error("{len} bytes of private data; the message carries at most {max} after the CMA header")]
    PrivateDataTooLong {
        /// Bytes given.
        len: usize,
        /// Bytes allowed.
        max: usize,
    },
    /// The device has no address of the peer's family.
    #[error("no local {0} address to connect from")]
    NoAddress(&'static str),
}

/// Words for the REJ reasons a connecting application usually meets.
fn reject_hint(reason: u16) -> &'static str {
    match RejectReason(reason) {
        RejectReason::INVALID_SERVICE_ID => ": nobody listens on that port)",
        RejectReason::CONSUMER => ": the application refused)",
        RejectReason::TIMEOUT => ": the peer gave up waiting)",
        _ => ")",
    }
}

/// The REQ private data rdma_cm sends from `src` to `dst`: the CMA header, then `user`.
///
/// # Errors
/// [`CmApiError::PrivateDataTooLong`]; [`CmApiError::NoAddress`] when the families differ.
pub fn req_private_data(
    src: SocketAddr,
    dst: SocketAddr,
    user: &[u8],
) -> Result<Vec<u8>, CmApiError> {
    cma_private_data(src, dst, user, MAX_REQ_USER_DATA)
}

/// A CMA header from `src` to `dst`, then `user`, of at most `max` bytes (a REQ's or a
/// SIDR_REQ's room after the header).
pub(crate) fn cma_private_data(
    src: SocketAddr,
    dst: SocketAddr,
    user: &[u8],
    max: usize,
) -> Result<Vec<u8>, CmApiError> {
    if user.len() > max {
        return Err(CmApiError::PrivateDataTooLong {
            len: user.len(),
            max,
        });
    }
    let addrs = match (src.ip(), dst.ip()) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => CmaAddrs::V4 { src, dst },
        (IpAddr::V6(src), IpAddr::V6(dst)) => CmaAddrs::V6 { src, dst },
        (_, IpAddr::V4(_)) => return Err(CmApiError::NoAddress("IPv4")),
        (_, IpAddr::V6(_)) => return Err(CmApiError::NoAddress("IPv6")),
    };
    let h = CmaHeader {
        src_port: src.port(),
        addrs,
    };
    Ok(h.private_data(user))
}

/// The active side's address, from the CMA header at the start of a REQ's private data.
///
/// # Errors
/// Why the private data does not start with a CMA header.
pub fn cma_source(private_data: &[u8]) -> Result<SocketAddr, CmaError> {
    let h = CmaHeader::parse(private_data)?;
    Ok(SocketAddr::new(h.src_ip(), h.src_port))
}

/// Picks `conn`'s outcome after a REQ or REP.
fn outcome_of(conn: ConnId) -> impl Fn(&Event) -> bool {
    move |ev: &Event| ev.conn() == Some(conn) && !matches!(ev, Event::TimeWaitExit { .. })
}

/// Waits for `conn`'s outcome after a REQ or REP: established (the peer's private data) or
/// why not.
fn established(
    dev: &Device,
    conn: ConnId,
    peer: SocketAddr,
    timeout: Duration,
) -> Result<Vec<u8>, CmApiError> {
    outcome(dev.next_cm_event(outcome_of(conn), timeout)?, peer)
}

/// [`established`] awaited ([`Device::next_cm_event_async`]).
async fn established_async(
    dev: &Device,
    conn: ConnId,
    peer: SocketAddr,
) -> Result<Vec<u8>, CmApiError> {
    outcome(dev.next_cm_event_async(outcome_of(conn)).await?, peer)
}

/// What an outcome event (picked by [`outcome_of`]) means for the caller.
fn outcome(ev: Event, peer: SocketAddr) -> Result<Vec<u8>, CmApiError> {
    match ev {
        Event::Established { private_data, .. } => Ok(private_data),
        Event::Rejected {
            reason,
            private_data,
            ..
        } => Err(CmApiError::Rejected {
            peer,
            reason: reason.0,
            private_data,
        }),
        Event::TimedOut { .. } => Err(CmApiError::TimedOut(peer)),
        // Never picked: `outcome_of` takes only `conn`'s events.
        Event::Disconnected { .. }
        | Event::ConnectRequest(_)
        | Event::TimeWaitExit { .. }
        | Event::SidrRequest(_)
        | Event::SidrReply { .. }
        | Event::SidrTimedOut { .. } => Err(CmApiError::Disconnected(peer)),
    }
}

/// A 24-bit start PSN from the OS's randomness, as the kernel's CM picks one.
fn start_psn() -> Psn {
    Psn::new(rocev2::random_psn())
}

/// A passive rdma_cm ID: listens on an address's port (`rdma_bind_addr` + `rdma_listen`).
/// Dropping it stops listening.
#[derive(Debug)]
pub struct CmListener {
    dev: Device,
    addr: SocketAddr,
    service: ServiceId,
    bad_requests: AtomicU64,
}

impl CmListener {
    /// Listens for rdma_cm connections to `addr`'s port (RDMA_PS_TCP) on `dev`; the address
    /// itself only names the family and is reported back.
    ///
    /// # Errors
    /// [`rocev2::Error::Verb`] if the port is taken (attached: [`rocev2::Error::Refused`] with
    /// kind `InUse`, also when another application holds it).
    pub fn bind(dev: &Device, addr: SocketAddr) -> Result<CmListener, CmApiError> {
        let service = ServiceId::rdma_cm(PortSpace::TCP, addr.port());
        dev.cm_listen(service)?;
        Ok(CmListener {
            dev: dev.clone(),
            addr,
            service,
            bad_requests: AtomicU64::new(0),
        })
    }

    /// The address given to [`Self::bind`].
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// REQs refused because their private data had no valid CMA header.
    pub fn bad_requests(&self) -> u64 {
        self.bad_requests.load(Ordering::Relaxed)
    }

    /// Waits for the next connection request (`rdma_get_cm_event` → CONNECT_REQUEST). A REQ
    /// without a valid CMA header is rejected, counted ([`Self::bad_requests`]) and skipped.
    ///
    /// # Errors
    /// [`rocev2::Error::Timeout`] and the device's errors.
    pub fn get_request(&self, timeout: Duration) -> Result<ConnRequest, CmApiError> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let ev = self.dev.next_cm_event(self.requests(), left)?;
            if let Some(req) = self.request(ev)? {
                return Ok(req);
            }
        }
    }

    /// [`Self::get_request`] as a future, without a timeout (wrap it in
    /// `tokio::time::timeout` for one): on a tokio runtime it sleeps on the device's CM
    /// eventfd through the reactor ([`Device::next_cm_event_async`]).
    ///
    /// Cancel-safe: dropped, it leaves the next request queued.
    ///
    /// # Errors
    /// The device's.
    pub async fn get_request_async(&self) -> Result<ConnRequest, CmApiError> {
        loop {
            let ev = self.dev.next_cm_event_async(self.requests()).await?;
            if let Some(req) = self.request(ev)? {
                return Ok(req);
            }
        }
    }

    /// Picks this listener's connection requests.
    fn requests(&self) -> impl Fn(&Event) -> bool + use<> {
        let service = self.service.0;
        move |ev: &Event| matches!(ev, Event::ConnectRequest(r) if r.req.service_id == service)
    }

    /// The request a picked event carries; `None` for a REQ without a valid CMA header,
    /// which is rejected and counted.
    fn request(&self, ev: Event) -> Result<Option<ConnRequest>, CmApiError> {
        let Event::ConnectRequest(r) = ev else {
            return Ok(None);
        };
        match cma_source(&r.req.private_data) {
            Ok(peer) => Ok(Some(ConnRequest {
                dev: self.dev.clone(),
                peer,
                req: r,
            })),
            Err(_) => {
                self.bad_requests.fetch_add(1, Ordering::Relaxed);
                self.dev.cm_reject(r.conn, RejectReason::CONSUMER, &[])?;
                Ok(None)
            }
        }
    }

    /// Waits for a request and accepts it with `qp` (in INIT) and `private_data` for the
    /// peer; returns the connection and the peer's private data.
    ///
    /// # Errors
    /// As [`Self::get_request`] and [`ConnRequest::accept`].
    pub fn accept(
        &self,
        qp: Qp,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<(CmId, Vec<u8>), CmApiError> {
        let req = self.get_request(timeout)?;
        let data = req.private_data().to_vec();
        Ok((req.accept(qp, private_data, timeout)?, data))
    }

    /// [`Self::accept`] as a future, without a timeout (wrap it in `tokio::time::timeout`
    /// for one).
    ///
    /// Cancel-safe while it waits for a request; dropped after one came, that request is
    /// left accepted but not established, and the peer times out.
    ///
    /// # Errors
    /// As [`Self::get_request_async`] and [`ConnRequest::accept_async`].
    pub async fn accept_async(
        &self,
        qp: Qp,
        private_data: &[u8],
    ) -> Result<(CmId, Vec<u8>), CmApiError> {
        let req = self.get_request_async().await?;
        let data = req.private_data().to_vec();
        Ok((req.accept_async(qp, private_data).await?, data))
    }
}

impl Drop for CmListener {
    fn drop(&mut self) {
        // The device may be failing; nothing left to stop then.
        let _ = self.dev.cm_unlisten(self.service);
    }
}

/// A connection request waiting for an answer. Dropping it leaves the peer to time out; answer
/// with [`Self::accept`] or [`Self::reject`].
#[derive(Debug)]
pub struct ConnRequest {
    dev: Device,
    peer: SocketAddr,
    req: Box<ConnectRequest>,
}

impl ConnRequest {
    /// The active side's address, from the CMA header.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The application's private data (after the CMA header).
    pub fn private_data(&self) -> &[u8] {
        self.req.user_data()
    }

    /// Accepts with `qp` (in INIT), sending `private_data` (up to 196 bytes) in the REP;
    /// returns once the RTU (or the peer's first packet) came and the QP is in RTS.
    ///
    /// # Errors
    /// The device's ([`rocev2::Error::Verb`] for a QP not in INIT), [`CmApiError::TimedOut`]
    /// when no RTU came, [`rocev2::Error::Timeout`].
    pub fn accept(
        self,
        qp: Qp,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<CmId, CmApiError> {
        self.send_rep(qp, private_data)?;
        let peer_data = established(&self.dev, self.req.conn, self.peer, timeout)?;
        Ok(self.connected(peer_data))
    }

    /// [`Self::accept`] as a future, without a timeout: the CM ends it with
    /// [`CmApiError::TimedOut`] when no RTU comes.
    ///
    /// # Errors
    /// As [`Self::accept`].
    pub async fn accept_async(self, qp: Qp, private_data: &[u8]) -> Result<CmId, CmApiError> {
        self.send_rep(qp, private_data)?;
        let peer_data = established_async(&self.dev, self.req.conn, self.peer).await?;
        Ok(self.connected(peer_data))
    }

    /// Accepts the REQ with `qp`: the REP leaves, the QP goes to RTR.
    fn send_rep(&self, qp: Qp, private_data: &[u8]) -> Result<(), CmApiError> {
        let params = AcceptParams {
            private_data: private_data.to_vec(),
            ..AcceptParams::new(qp.qpn(), start_psn())
        };
        Ok(self.dev.cm_accept(self.req.conn, params)?)
    }

    /// The connected ID, once established.
    fn connected(self, peer_data: Vec<u8>) -> CmId {
        CmId::established(self.dev, self.req.conn, self.peer, peer_data)
    }

    /// Refuses with a REJ (reason: consumer) carrying `private_data`.
    ///
    /// # Errors
    /// The device's.
    pub fn reject(self, private_data: &[u8]) -> Result<(), CmApiError> {
        self.dev
            .cm_reject(self.req.conn, RejectReason::CONSUMER, private_data)?;
        Ok(())
    }
}

/// A connected rdma_cm ID: its QP is in RTS.
#[derive(Debug)]
pub struct CmId {
    dev: Device,
    conn: ConnId,
    peer: SocketAddr,
    peer_data: Vec<u8>,
    /// A wait took the connection's `Disconnected` already.
    disconnected: AtomicBool,
}

impl CmId {
    /// The ID of an established connection `conn` to `peer`, who sent `peer_data`.
    fn established(dev: Device, conn: ConnId, peer: SocketAddr, peer_data: Vec<u8>) -> CmId {
        CmId {
            dev,
            conn,
            peer,
            peer_data,
            disconnected: AtomicBool::new(false),
        }
    }

    /// Connects `qp` (in INIT) of `dev` to the rdma_cm listener at `addr`, sending
    /// `private_data` (up to [`MAX_REQ_USER_DATA`] bytes) after the CMA header; returns once
    /// the REP came and the QP is in RTS.
    ///
    /// # Errors
    /// [`CmApiError::Rejected`] (reason 8: nobody listens on the port),
    /// [`CmApiError::TimedOut`], [`CmApiError::PrivateDataTooLong`], [`CmApiError::NoAddress`],
    /// the device's.
    pub fn connect(
        dev: &Device,
        qp: Qp,
        addr: SocketAddr,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<CmId, CmApiError> {
        let conn = send_req(dev, qp, addr, private_data)?;
        let peer_data = established(dev, conn, addr, timeout)?;
        Ok(CmId::established(dev.clone(), conn, addr, peer_data))
    }

    /// [`Self::connect`] as a future, without a timeout: the CM ends it with
    /// [`CmApiError::TimedOut`] when its retries run out. On a tokio runtime it sleeps on the
    /// device's CM eventfd through the reactor ([`Device::next_cm_event_async`]).
    ///
    /// Dropped before it returns, the REQ stays sent and the connection half-made (as a
    /// librdmacm ID destroyed mid-connect).
    ///
    /// # Errors
    /// As [`Self::connect`].
    pub async fn connect_async(
        dev: &Device,
        qp: Qp,
        addr: SocketAddr,
        private_data: &[u8],
    ) -> Result<CmId, CmApiError> {
        let conn = send_req(dev, qp, addr, private_data)?;
        let peer_data = established_async(dev, conn, addr).await?;
        Ok(CmId::established(dev.clone(), conn, addr, peer_data))
    }

    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The private data the peer sent with its REP (active side) or RTU (passive side).
    pub fn peer_private_data(&self) -> &[u8] {
        &self.peer_data
    }

    /// Picks this connection's [`Event::Disconnected`].
    fn disconnected(&self) -> impl Fn(&Event) -> bool + use<> {
        let conn = self.conn;
        move |ev: &Event| matches!(ev, Event::Disconnected { conn: c, .. } if *c == conn)
    }

    /// The private data of a picked [`Event::Disconnected`].
    fn dreq_data(&self, ev: Event) -> Result<Vec<u8>, CmApiError> {
        match ev {
            Event::Disconnected { private_data, .. } => {
                self.disconnected.store(true, Ordering::Relaxed);
                Ok(private_data)
            }
            _ => Err(CmApiError::Disconnected(self.peer)),
        }
    }

    /// Waits until the peer disconnects (`RDMA_CM_EVENT_DISCONNECTED`); returns its DREQ's
    /// private data. The QP is in ERROR then.
    ///
    /// # Errors
    /// [`rocev2::Error::Timeout`] and the device's.
    pub fn wait_disconnect(&self, timeout: Duration) -> Result<Vec<u8>, CmApiError> {
        self.dreq_data(self.dev.next_cm_event(self.disconnected(), timeout)?)
    }

    /// [`Self::wait_disconnect`] as a future, without a timeout (wrap it in
    /// `tokio::time::timeout` for one): on a tokio runtime it sleeps on the device's CM
    /// wake-up through the reactor ([`Device::next_cm_event_async`]).
    ///
    /// Cancel-safe: dropped, it leaves the disconnection queued for the next wait.
    ///
    /// # Errors
    /// The device's.
    pub async fn wait_disconnect_async(&self) -> Result<Vec<u8>, CmApiError> {
        self.dreq_data(self.dev.next_cm_event_async(self.disconnected()).await?)
    }

    /// Disconnects (`rdma_disconnect`): the QP goes to ERROR (outstanding work completes
    /// flushed), a DREQ leaves, and this returns once the peer answered or the CM gave up. If
    /// the peer disconnected first (whether or not [`Self::wait_disconnect`] saw it), returns
    /// at once.
    ///
    /// # Errors
    /// [`rocev2::Error::Timeout`] and the device's.
    pub fn disconnect(self, timeout: Duration) -> Result<(), CmApiError> {
        if self.send_dreq()? {
            self.wait_disconnect(timeout)?;
        }
        Ok(())
    }

    /// [`Self::disconnect`] as a future, without a timeout: the CM ends the wait when the
    /// peer answers the DREQ or the DREQ's retries run out.
    ///
    /// Dropped before it returns, the DREQ stays sent and the CM finishes the disconnection
    /// (as `rdma_disconnect` followed by `rdma_destroy_id`).
    ///
    /// # Errors
    /// The device's.
    pub async fn disconnect_async(self) -> Result<(), CmApiError> {
        if self.send_dreq()? {
            self.wait_disconnect_async().await?;
        }
        Ok(())
    }

    /// Sends the DREQ unless the peer disconnected first (its event is taken then, if a wait
    /// has not taken it); true if it left.
    fn send_dreq(&self) -> Result<bool, CmApiError> {
        if self.disconnected.load(Ordering::Relaxed) || self.wait_disconnect(Duration::ZERO).is_ok()
        {
            return Ok(false);
        }
        self.dev.cm_disconnect(self.conn, &[])?;
        Ok(true)
    }
}

/// The active side's address towards `addr`: the device's address of its family and an
/// ephemeral port, as the kernel's rdma_cm binds one.
pub(crate) fn source(dev: &Device, addr: SocketAddr) -> Result<SocketAddr, CmApiError> {
    let family = if addr.is_ipv6() { "IPv6" } else { "IPv4" };
    let src_ip = dev
        .source_ip(addr.is_ipv6())
        .map_err(|_| CmApiError::NoAddress(family))?;
    let src_port = 49152 + (rocev2::random_u64() % 16384) as u16;
    Ok(SocketAddr::new(src_ip, src_port))
}

/// Sends the REQ of [`CmId::connect`]: from the device's address of `addr`'s family and an
/// ephemeral port, the CMA header then `private_data`.
fn send_req(
    dev: &Device,
    qp: Qp,
    addr: SocketAddr,
    private_data: &[u8],
) -> Result<ConnId, CmApiError> {
    let src = source(dev, addr)?;
    let src_ip = src.ip();
    let data = req_private_data(src, addr, private_data)?;
    let service = ServiceId::rdma_cm(PortSpace::TCP, addr.port());
    let params = ConnectParams {
        private_data: data,
        ..ConnectParams::new(service, gid(src_ip), gid(addr.ip()), qp.qpn(), start_psn())
    };
    Ok(dev.cm_connect(qp, params, RESOLVE_TIMEOUT)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv4_header_then_user_data() {
        let (src, dst) = (addr("10.0.0.1:50000"), addr("10.0.0.2:7174"));
        let pd = req_private_data(src, dst, b"hello").unwrap();
        assert_eq!(pd.len(), CmaHeader::LEN + 5);
        // Version 0, IP version 4 in the high nibble, the source port big-endian, IPv4
        // addresses in the last 4 bytes of each 16-byte field.
        assert_eq!(pd[..4], [0, 0x40, 0xc3, 0x50]);
        assert_eq!(pd[4..16], [0; 12]);
        assert_eq!(pd[16..20], [10, 0, 0, 1]);
        assert_eq!(pd[32..36], [10, 0, 0, 2]);
        assert_eq!(&pd[36..], b"hello");
        assert_eq!(cma_source(&pd), Ok(src));
    }

    #[test]
    fn ipv6_round_trips() {
        let (src, dst) = (addr("[fd00::1]:50001"), addr("[fd00::2]:7174"));
        let pd = req_private_data(src, dst, &[]).unwrap();
        assert_eq!(pd[1], 0x60);
        assert_eq!(cma_source(&pd), Ok(src));
    }

    #[test]
    fn user_data_limit_is_56_bytes() {
        let (src, dst) = (addr("10.0.0.1:50000"), addr("10.0.0.2:7174"));
        assert!(req_private_data(src, dst, &[7; MAX_REQ_USER_DATA]).is_ok());
        let e = req_private_data(src, dst, &[7; MAX_REQ_USER_DATA + 1]).unwrap_err();
        assert!(matches!(
            e,
            CmApiError::PrivateDataTooLong { len: 57, max: 56 }
        ));
    }

    #[test]
    fn families_must_match() {
        let e = req_private_data(addr("[fd00::1]:1"), addr("10.0.0.2:7174"), &[]).unwrap_err();
        assert!(matches!(e, CmApiError::NoAddress("IPv4")));
    }

    #[test]
    fn bad_headers_are_refused() {
        let mut pd = req_private_data(addr("10.0.0.1:1"), addr("10.0.0.2:2"), &[]).unwrap();
        assert_eq!(cma_source(&pd[..35]), Err(CmaError::Truncated));
        pd[1] = 0x50;
        assert_eq!(cma_source(&pd), Err(CmaError::IpVersion(5)));
        pd[0] = 1;
        assert_eq!(cma_source(&pd), Err(CmaError::Version(1)));
    }

    #[test]
    fn rejection_says_why() {
        let e = CmApiError::Rejected {
            peer: addr("10.0.0.2:7174"),
            reason: RejectReason::INVALID_SERVICE_ID.0,
            private_data: Vec::new(),
        };
        assert_eq!(
            e.to_string(),
            "10.0.0.2:7174: connection rejected (REJ reason 8: nobody listens on that port)"
        );
    }
}
