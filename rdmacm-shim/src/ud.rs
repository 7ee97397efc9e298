//! rdma_cm's UD resolution (`RDMA_PS_UDP`) over Service ID Resolution on QP1 (IBA §12.11): the
//! active side asks an address and port for the QPN and Q_Key of its UD QP ([`resolve`], what
//! librdmacm's `rdma_resolve_route` + `rdma_connect` do for a UD ID, reported as an
//! ESTABLISHED event with the UD parameters); the passive side listens on the port
//! ([`UdListener::bind`]) and answers each request with its QP ([`UdRequest::accept`]) or
//! refuses it ([`UdRequest::reject`]). The SIDR_REQ is what librdmacm sends: service ID
//! `RDMA_PS_UDP << 16 | port`, private data a CMA header then the application's bytes; the
//! SIDR_REP carries rdma_cm's Q_Key ([`RDMA_UDP_Q_KEY`]) unless the passive side names another.
//!
//! ```no_run
//! use rdmacm_shim::ud::{UdListener, resolve};
//! use rocev2::{AhAttr, DatapathKind, Device, RDMA_UDP_Q_KEY, UdAddress};
//! use std::time::Duration;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dev = Device::open("eth0", DatapathKind::Udp)?;
//! let pd = dev.alloc_pd()?;
//! let cq = dev.create_cq(16)?;
//! let qp = dev.create_ud_qp(pd, cq, cq, RDMA_UDP_Q_KEY)?;
//! // Passive side:
//! let listener = UdListener::bind(&dev, "10.0.0.2:7174".parse()?)?;
//! listener.get_request(Duration::from_secs(30))?.accept(qp, b"")?;
//! // Active side, on another host:
//! let peer = resolve(&dev, "10.0.0.2:7174".parse()?, b"", Duration::from_secs(10))?;
//! let ah = dev.create_ah(pd, &AhAttr::new(peer.addr.ip()))?;
//! let to = UdAddress { ah, qpn: peer.qpn, q_key: peer.q_key };
//! # let _ = to; Ok(()) }
//! ```
//!
//! Works on in-process and attached devices alike.
//!
//! Deviations from librdmacm: the wait is bounded by the caller's timeout as well as the CM's
//! retries (4.3 s per try, 15 resends); a redirecting answer is reported as refused.

use crate::cm::{CmApiError, cma_private_data, cma_source, source};
use rocev2::{Device, Qp, gid};
use rocev2_core::cm::{
    CmaHeader, Event, PortSpace, RDMA_UDP_Q_KEY, ServiceId, SidrParams, SidrReplyParams,
    SidrRequest, SidrStatus,
};
use rocev2_core::wire::Qpn;
use std::net::SocketAddr;
use std::time::Duration;

/// User bytes a SIDR_REQ carries after the CMA header: 216 − 36.
pub const MAX_SIDR_USER_DATA: usize = 216 - CmaHeader::LEN;

/// How long the neighbour resolution of [`resolve`] may take.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(3);

/// What the active side learns: where to send datagrams (build an address handle for `addr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdPeer {
    /// The address resolved.
    pub addr: SocketAddr,
    /// The peer's UD QP.
    pub qpn: Qpn,
    /// The Q_Key its datagrams must carry.
    pub q_key: u32,
    /// The SIDR_REP's private data (136 bytes, zero-padded).
    pub private_data: Vec<u8>,
}

/// Asks the UD service at `addr` (its port in `RDMA_PS_UDP`) for its QPN and Q_Key, sending
/// `private_data` (up to [`MAX_SIDR_USER_DATA`] bytes) after the CMA header.
///
/// # Errors
/// [`CmApiError::SidrRefused`] (status 1: nobody listens on the port),
/// [`CmApiError::TimedOut`], [`CmApiError::PrivateDataTooLong`], [`CmApiError::NoAddress`],
/// [`rocev2::Error::Timeout`] when `timeout` passes first, the device's.
pub fn resolve(
    dev: &Device,
    addr: SocketAddr,
    private_data: &[u8],
    timeout: Duration,
) -> Result<UdPeer, CmApiError> {
    let src = source(dev, addr)?;
    let mut params = SidrParams::new(
        ServiceId::rdma_cm(PortSpace::UDP, addr.port()),
        gid(src.ip()),
        gid(addr.ip()),
    );
    params.private_data = cma_private_data(src, addr, private_data, MAX_SIDR_USER_DATA)?;
    let id = dev.cm_sidr_request(params, RESOLVE_TIMEOUT)?;
    match dev.next_cm_event(|e| e.sidr() == Some(id), timeout)? {
        Event::SidrReply {
            status: SidrStatus::SUCCESS,
            qpn,
            q_key,
            private_data,
            ..
        } => Ok(UdPeer {
            addr,
            qpn,
            q_key,
            private_data,
        }),
        Event::SidrReply {
            status,
            private_data,
            ..
        } => Err(CmApiError::SidrRefused {
            peer: addr,
            status,
            private_data,
        }),
        _ => Err(CmApiError::TimedOut(addr)),
    }
}

/// A passive `RDMA_PS_UDP` ID: answers SIDR requests for an address's port. Dropping it stops
/// listening (later requests are answered "not supported").
#[derive(Debug)]
pub struct UdListener {
    dev: Device,
    addr: SocketAddr,
    service: ServiceId,
}

impl UdListener {
    /// Listens for UD resolutions of `addr`'s port (`RDMA_PS_UDP`) on `dev`.
    ///
    /// # Errors
    /// [`rocev2::Error::Verb`] if the port is taken (attached: [`rocev2::Error::Refused`]).
    pub fn bind(dev: &Device, addr: SocketAddr) -> Result<UdListener, CmApiError> {
        let service = ServiceId::rdma_cm(PortSpace::UDP, addr.port());
        dev.cm_listen(service)?;
        Ok(UdListener {
            dev: dev.clone(),
            addr,
            service,
        })
    }

    /// The address given to [`Self::bind`].
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits for the next resolution request. A request without a valid CMA header is
    /// answered "rejected" and skipped.
    ///
    /// # Errors
    /// [`rocev2::Error::Timeout`] and the device's.
    pub fn get_request(&self, timeout: Duration) -> Result<UdRequest, CmApiError> {
        let deadline = std::time::Instant::now() + timeout;
        let service = self.service.0;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let ev = self.dev.next_cm_event(
                move |e| matches!(e, Event::SidrRequest(r) if r.req.service_id == service),
                left,
            )?;
            let Event::SidrRequest(req) = ev else {
                continue;
            };
            match cma_source(&req.req.private_data) {
                Ok(peer) => {
                    return Ok(UdRequest {
                        dev: self.dev.clone(),
                        peer,
                        req,
                    });
                }
                Err(_) => answer(&self.dev, &req, SidrStatus::REJECT, Qpn::new(0), &[])?,
            }
        }
    }
}

impl Drop for UdListener {
    fn drop(&mut self) {
        // The device may be failing; nothing left to stop then.
        let _ = self.dev.cm_unlisten(self.service);
    }
}

/// A resolution request waiting for an answer; dropped unanswered, the peer times out.
#[derive(Debug)]
pub struct UdRequest {
    dev: Device,
    peer: SocketAddr,
    req: Box<SidrRequest>,
}

impl UdRequest {
    /// The active side's address, from the CMA header: where its UD QP is.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The application's private data (after the CMA header, zero-padded to 180 bytes).
    pub fn private_data(&self) -> &[u8] {
        self.req.user_data()
    }

    /// Answers with `qp` (a UD QP whose Q_Key is [`RDMA_UDP_Q_KEY`]) and `private_data` (up to
    /// 136 bytes).
    ///
    /// # Errors
    /// The device's ([`rocev2::Error::Verb`] for private data too long).
    pub fn accept(self, qp: Qp, private_data: &[u8]) -> Result<(), CmApiError> {
        answer(
            &self.dev,
            &self.req,
            SidrStatus::SUCCESS,
            qp.qpn(),
            private_data,
        )
    }

    /// Refuses (status "rejected") with `private_data`.
    ///
    /// # Errors
    /// The device's.
    pub fn reject(self, private_data: &[u8]) -> Result<(), CmApiError> {
        answer(
            &self.dev,
            &self.req,
            SidrStatus::REJECT,
            Qpn::new(0),
            private_data,
        )
    }
}

/// Sends the SIDR_REP for `req`.
fn answer(
    dev: &Device,
    req: &SidrRequest,
    status: SidrStatus,
    qpn: Qpn,
    private_data: &[u8],
) -> Result<(), CmApiError> {
    let params = SidrReplyParams {
        status,
        qpn,
        q_key: RDMA_UDP_Q_KEY,
        private_data: private_data.to_vec(),
    };
    Ok(dev.cm_sidr_reply(req.id, params)?)
}
