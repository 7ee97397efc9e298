//! Connect in one call: [`connect`] and [`accept`] exchange [`Endpoint`]s over TCP and bring
//! both QPs to RTS, as the `ibverbs` crate's `handshake` or async-rdma's `connect`/`listen`
//! do; [`tokio`] has the same two calls for tokio programs (feature `tokio`).
//!
//! The protocol, on a fresh TCP connection, the same from both sides: each sends its
//! [`Endpoint`]'s byte form and reads the peer's; each connects its QP
//! ([`Device::connect`]: path MTU the smaller of both, the peer's extension offer, the next
//! hop resolved through the neighbour table) and sends one status: `0`, or `1`, a 16-bit
//! length and a UTF-8 reason when its bring-up failed. A call returns once both QPs are in
//! RTS, so the first work request finds the peer ready; the TCP connection stays open in the
//! [`Connection`] for the program's own messages.
//!
//! Our GID is the address the TCP connection leaves from, so both sides use the same family
//! and a reachable address; when the interface lacks it (TCP over another network, or
//! loopback to a [`Device::pair`]), the interface's own address. Our endpoint offers the REXT
//! fields of the device's congestion-control scheme ([`Device::ext_offer`]: DASR's N and the
//! look-ahead for Dart, τ for DCQCN+), so two rocev2 hosts running the scheme carry them
//! without a line of the program's; a QP offering another extension (a
//! [`crate::QpConfig::with_multipath`] QP) says so in [`ConnectConfig::offer`]; it runs it only
//! when the peer offers it too.
//!
//! ```
//! use rocev2::connect::{self, ConnectConfig};
//! use rocev2::{AccessFlags, Device, SendOp, SendWr};
//! use std::time::Duration;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Two devices joined in memory; with `Device::open` each would be on its own host.
//! let (dev, server) = Device::pair()?;
//! let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
//! let addr = listener.local_addr()?;
//!
//! // The server offers a region and then makes no more calls.
//! let srv = std::thread::spawn(move || -> Result<_, Box<dyn std::error::Error + Send + Sync>> {
//!     let pd = server.alloc_pd()?;
//!     let mr = server.register(pd, vec![0u8; 4096], AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
//!     let cq = server.create_cq(16)?;
//!     let qp = server.create_rc_qp(pd, cq, cq)?;
//!     let c = connect::accept(&server, qp, &listener, &ConnectConfig::default().mr(&mr))?;
//!     Ok((server, mr, c))
//! });
//!
//! let pd = dev.alloc_pd()?;
//! let mr = dev.register(pd, b"hello".to_vec(), AccessFlags::LOCAL_WRITE)?;
//! let cq = dev.create_cq(16)?;
//! let qp = dev.create_rc_qp(pd, cq, cq)?;
//! let c = connect::connect(&dev, qp, addr, &ConnectConfig::default())?;
//! let target = c.peer.mrs.first().ok_or("the server offered no region")?;
//! let write = SendOp::Write { remote_addr: target.addr, rkey: target.rkey };
//! dev.post_send(qp, SendWr::new(1, write).sge(mr.sge(0, 5)?))?;
//! let mut wcs = Vec::new();
//! dev.wait_cq(cq, &mut wcs, 1, Duration::from_secs(5))?;
//! assert!(wcs[0].status.is_success());
//!
//! let (server, smr, _c) = srv.join().unwrap().map_err(|e| e.to_string())?;
//! assert_eq!(&server.mr_guard(&smr)?[..5], b"hello");
//! # Ok(()) }
//! ```
//!
//! Connecting by IP address and port through RDMA CM, as librdmacm's `rdma_connect` does, is
//! the CM's ([`crate::Device::cm_connect`], rdmacm-shim); this exchange pairs rocev2 programs
//! with each other.
//!
//! Deviations: none from the `ibverbs` crate's handshake beyond the extra status round, which
//! it leaves to the application.

use crate::device::Device;
use crate::endpoint::{Endpoint, EndpointFormatError, RemoteMr};
use crate::mr::Mr;
use crate::qp::{ConnectOptions, Qp, RemoteQp};
use crate::random::random_psn;
use rocev2_core::qp::ExtCaps;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// What [`connect`] and [`accept`] tell the peer and how they bring the QP up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectConfig {
    /// The regions the peer may access, sent in our [`Endpoint::mrs`] (add with
    /// [`ConnectConfig::mr`]).
    pub mrs: Vec<RemoteMr>,
    /// The extensions our QP offers besides those of the device's congestion-control scheme,
    /// which every endpoint carries ([`Device::ext_offer`]): `multipath` for a QP created with
    /// [`crate::QpConfig::with_multipath`]; none by default.
    pub offer: ExtCaps,
    /// Transport settings. The exchange fills in [`ConnectOptions::local_psn`] (a random PSN)
    /// and [`ConnectOptions::peer_ext`] (the peer's offer), and sends [`ConnectOptions::mtu`]
    /// lowered to the interface's as our MTU.
    pub qp: ConnectOptions,
    /// Bound on the whole call once the TCP connection exists (and on establishing it, for
    /// [`connect`]); [`accept`] waits for a client as long as it takes.
    pub timeout: Duration,
}

impl Default for ConnectConfig {
    fn default() -> Self {
        ConnectConfig {
            mrs: Vec::new(),
            offer: ExtCaps::default(),
            qp: ConnectOptions::default(),
            timeout: Duration::from_secs(10),
        }
    }
}

impl ConnectConfig {
    /// Lets the peer access `mr` (it needs the matching remote rights).
    pub fn mr(mut self, mr: &Mr) -> ConnectConfig {
        self.mrs.push(mr.into());
        self
    }
}

/// A connected QP's two endpoints and the TCP connection they crossed, left open for the
/// program's own messages.
#[derive(Debug)]
pub struct Connection<S = TcpStream> {
    /// What we sent.
    pub local: Endpoint,
    /// What the peer sent: its regions are [`Endpoint::mrs`].
    pub peer: Endpoint,
    /// The TCP connection.
    pub stream: S,
}

/// Why [`connect`], [`accept`] or [`exchange`] failed, naming the step.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// A socket call failed (the reason is the [`std::error::Error::source`]; connecting, it
    /// names the address).
    #[error("{step}")]
    Io {
        /// What the call was doing.
        step: &'static str,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The step did not finish within [`ConnectConfig::timeout`] (is the peer running the
    /// same exchange?).
    #[error("{step}: no progress within {timeout:?} (is the peer running rocev2's exchange?)")]
    Timeout {
        /// What the call was waiting for.
        step: &'static str,
        /// The bound.
        timeout: Duration,
    },
    /// The peer closed the connection.
    #[error("{step}: the peer closed the connection")]
    Closed {
        /// What the call was waiting for.
        step: &'static str,
    },
    /// The peer's endpoint is malformed or of a version this build cannot read (the
    /// [`std::error::Error::source`] says how).
    #[error("the peer's endpoint cannot be read")]
    Format(#[from] EndpointFormatError),
    /// Our endpoint has no byte form: more regions than [`Endpoint::MAX_MRS`].
    #[error("our endpoint: {0}")]
    Ours(EndpointFormatError),
    /// Our side could not bring its QP up (no address, MTU, neighbour, engine refusal); the
    /// peer was told.
    #[error("connecting our QP")]
    Local(#[source] crate::Error),
    /// The peer could not bring its QP up, for the reason it sent. Our QP is in RTS toward
    /// a QP that is not: destroy it.
    #[error("the peer could not connect its QP: {0}")]
    Peer(String),
    /// The peer sent a status byte that is neither ready (0) nor failed (1).
    #[error("the peer sent status byte {0}, neither ready (0) nor failed (1)")]
    Status(u8),
}

/// Status byte of a side whose QP reached RTS.
const READY: u8 = 0;
/// Status byte of a side whose bring-up failed, followed by a 16-bit length and the reason.
const FAILED: u8 = 1;

const SEND_ENDPOINT: &str = "sending our endpoint";
const RECV_ENDPOINT: &str = "receiving the peer's endpoint";
const SEND_STATUS: &str = "telling the peer our QP's state";
const RECV_STATUS: &str = "waiting for the peer's QP to reach RTS";

/// Connects `qp` to the QP of the program that [`accept`]s at `addr`: exchanges endpoints
/// and brings both QPs to RTS.
///
/// # Errors
/// [`ConnectError`], naming the step that failed.
pub fn connect(
    dev: &Device,
    qp: Qp,
    addr: impl ToSocketAddrs,
    cfg: &ConnectConfig,
) -> Result<Connection, ConnectError> {
    let end = Instant::now() + cfg.timeout;
    let step = "connecting over TCP";
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|source| ConnectError::Io { step, source })?
        .collect();
    let mut last = io::Error::new(io::ErrorKind::InvalidInput, "no address to connect to");
    for a in addrs {
        let left = remaining(end, step, cfg.timeout)?;
        match TcpStream::connect_timeout(&a, left) {
            Ok(s) => return handshake(dev, qp, s, cfg, end),
            Err(e) => last = at(a, e),
        }
    }
    Err(io_error(step, last, cfg.timeout))
}

/// Takes the next client of `listener` and connects `qp` to the QP of its [`connect`].
///
/// # Errors
/// As [`connect`].
pub fn accept(
    dev: &Device,
    qp: Qp,
    listener: &TcpListener,
    cfg: &ConnectConfig,
) -> Result<Connection, ConnectError> {
    let (s, _) = listener.accept().map_err(|source| ConnectError::Io {
        step: "accepting a client",
        source,
    })?;
    handshake(dev, qp, s, cfg, Instant::now() + cfg.timeout)
}

/// Sends `local` and returns the peer's endpoint, without touching a QP: the exchange of
/// programs that bring their QPs up themselves (`rocev2-wiretest` drives the engine
/// directly).
///
/// # Errors
/// [`ConnectError::Io`], [`ConnectError::Timeout`], [`ConnectError::Closed`],
/// [`ConnectError::Format`], [`ConnectError::Ours`].
pub fn exchange(
    stream: &mut TcpStream,
    local: &Endpoint,
    timeout: Duration,
) -> Result<Endpoint, ConnectError> {
    let end = Instant::now() + timeout;
    let bytes = local.to_bytes().map_err(ConnectError::Ours)?;
    write_all(stream, &bytes, SEND_ENDPOINT, end, timeout)?;
    let mut header = [0; Endpoint::HEADER_LEN];
    read_exact(stream, &mut header, RECV_ENDPOINT, end, timeout)?;
    let mut all = vec![0; Endpoint::HEADER_LEN + Endpoint::body_len(&header)?];
    all[..Endpoint::HEADER_LEN].copy_from_slice(&header);
    read_exact(
        stream,
        &mut all[Endpoint::HEADER_LEN..],
        RECV_ENDPOINT,
        end,
        timeout,
    )?;
    Ok(Endpoint::parse(&all)?)
}

fn handshake(
    dev: &Device,
    qp: Qp,
    mut stream: TcpStream,
    cfg: &ConnectConfig,
    end: Instant,
) -> Result<Connection, ConnectError> {
    let step = "preparing the TCP connection";
    let io = |source| ConnectError::Io { step, source };
    stream.set_nodelay(true).map_err(io)?;
    let local = local_endpoint(dev, qp, stream.local_addr().map_err(io)?.ip(), cfg)?;
    let left = remaining(end, RECV_ENDPOINT, cfg.timeout)?;
    let peer = exchange(&mut stream, &local, left)?;
    let up = bring_up(dev, qp, &local, &peer, cfg);
    let told = write_all(&mut stream, &status(&up), SEND_STATUS, end, cfg.timeout);
    // Our failure is the news, whether or not the peer could still be told.
    up.map_err(ConnectError::Local)?;
    told?;
    let mut s = [0u8; 1];
    read_exact(&mut stream, &mut s, RECV_STATUS, end, cfg.timeout)?;
    if s[0] != READY {
        check_failed(s[0])?;
        let mut len = [0u8; 2];
        read_exact(&mut stream, &mut len, RECV_STATUS, end, cfg.timeout)?;
        let mut why = vec![0; usize::from(u16::from_be_bytes(len))];
        read_exact(&mut stream, &mut why, RECV_STATUS, end, cfg.timeout)?;
        return Err(ConnectError::Peer(
            String::from_utf8_lossy(&why).into_owned(),
        ));
    }
    stream
        .set_read_timeout(None)
        .and_then(|()| stream.set_write_timeout(None))
        .map_err(io)?;
    Ok(Connection {
        local,
        peer,
        stream,
    })
}

/// Our endpoint: the QP, a random first PSN, the TCP connection's local address as GID (an
/// IPv4-mapped IPv6 address as IPv4) when the interface has it, the interface's MAC, the MTU asked for lowered to the
/// interface's, the device's offer and the configuration's, and the regions.
fn local_endpoint(
    dev: &Device,
    qp: Qp,
    ip: IpAddr,
    cfg: &ConnectConfig,
) -> Result<Endpoint, ConnectError> {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    let iface = dev.interface();
    // TCP may leave from an address the RoCE interface lacks (another interface, loopback
    // to a [`Device::pair`]): then our GID is the interface's own address, of that family
    // if it has one.
    let ip = if iface.addrs.iter().any(|a| a.ip == ip) {
        ip
    } else {
        iface
            .source_ip(ip.is_ipv6())
            .or_else(|| iface.source_ip(!ip.is_ipv6()))
            .unwrap_or(ip)
    };
    let mtu = iface
        .path_mtu(ip.is_ipv6())
        .ok_or_else(|| ConnectError::Local(crate::Error::MtuTooSmall(iface.name.clone())))?
        .min(cfg.qp.mtu);
    Ok(Endpoint {
        qpn: qp.qpn(),
        psn: random_psn(),
        ip,
        mac: Some(iface.mac),
        mtu,
        ext: dev.ext_offer().union(cfg.offer),
        mrs: cfg.mrs.clone(),
    })
}

/// INIT→RTR→RTS toward the peer's endpoint.
fn bring_up(
    dev: &Device,
    qp: Qp,
    local: &Endpoint,
    peer: &Endpoint,
    cfg: &ConnectConfig,
) -> crate::Result<()> {
    let remote = RemoteQp {
        qpn: peer.qpn,
        psn: peer.psn,
        ip: peer.ip,
        // The peer's MAC is its interface's; the next hop may be a router.
        mac: None,
    };
    let opts = ConnectOptions {
        local_psn: local.psn,
        mtu: local.mtu.min(peer.mtu),
        peer_ext: peer.ext,
        ..cfg.qp
    };
    dev.connect(qp, &remote, &opts)
}

/// The status a side sends after its bring-up.
fn status(up: &crate::Result<()>) -> Vec<u8> {
    match up {
        Ok(()) => vec![READY],
        Err(e) => {
            // The whole chain: the peer has no other way to learn the cause.
            let why = crate::report(e);
            let why = &why.as_bytes()[..why.len().min(usize::from(u16::MAX))];
            let mut b = vec![FAILED];
            b.extend_from_slice(&(why.len() as u16).to_be_bytes());
            b.extend_from_slice(why);
            b
        }
    }
}

/// Ok for the status of a failed peer (a reason follows), else the error of a byte that is
/// no status.
fn check_failed(status: u8) -> Result<(), ConnectError> {
    if status == FAILED {
        Ok(())
    } else {
        Err(ConnectError::Status(status))
    }
}

/// What is left of the bound, or the timeout error of `step`.
fn remaining(
    end: Instant,
    step: &'static str,
    timeout: Duration,
) -> Result<Duration, ConnectError> {
    end.checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or(ConnectError::Timeout { step, timeout })
}

/// `e`, naming the address it happened with.
fn at(addr: SocketAddr, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{addr}: {e}"))
}

/// A socket error of `step`, timeouts and closes told apart.
fn io_error(step: &'static str, source: io::Error, timeout: Duration) -> ConnectError {
    match source.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            ConnectError::Timeout { step, timeout }
        }
        io::ErrorKind::UnexpectedEof
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::BrokenPipe => ConnectError::Closed { step },
        _ => ConnectError::Io { step, source },
    }
}

fn write_all(
    s: &mut TcpStream,
    b: &[u8],
    step: &'static str,
    end: Instant,
    timeout: Duration,
) -> Result<(), ConnectError> {
    let left = remaining(end, step, timeout)?;
    s.set_write_timeout(Some(left))
        .and_then(|()| s.write_all(b))
        .map_err(|e| io_error(step, e, timeout))
}

fn read_exact(
    s: &mut TcpStream,
    b: &mut [u8],
    step: &'static str,
    end: Instant,
    timeout: Duration,
) -> Result<(), ConnectError> {
    let left = remaining(end, step, timeout)?;
    s.set_read_timeout(Some(left))
        .and_then(|()| s.read_exact(b))
        .map_err(|e| io_error(step, e, timeout))
}

/// [`connect`] and [`accept`] on tokio's TCP: the same
/// exchange, each step bounded by `tokio::time::timeout` (the runtime needs its time driver:
/// `#[tokio::main]` and `Runtime::new` enable it). The QP bring-up itself does not block.
///
/// ```
/// use rocev2::connect::{self, ConnectConfig};
/// use rocev2::{AccessFlags, Device, SendOp, SendWr};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let (dev, server) = Device::pair()?; // two devices joined in memory
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// let addr = listener.local_addr()?;
/// let spd = server.alloc_pd()?;
/// let smr = server.register(spd, vec![0u8; 64], AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
/// let scq = server.create_cq(4)?;
/// let sqp = server.create_rc_qp(spd, scq, scq)?;
/// let accepting = tokio::spawn(async move {
///     connect::tokio::accept(&server, sqp, &listener, &ConnectConfig::default().mr(&smr)).await?;
///     Ok::<_, connect::ConnectError>(server)
/// });
///
/// let pd = dev.alloc_pd()?;
/// let mr = dev.register(pd, b"async".to_vec(), AccessFlags::LOCAL_WRITE)?;
/// let cq = dev.create_cq(4)?;
/// let qp = dev.create_rc_qp(pd, cq, cq)?;
/// let c = connect::tokio::connect(&dev, qp, addr, &ConnectConfig::default()).await?;
/// let target = c.peer.mrs[0];
/// let write = SendOp::Write { remote_addr: target.addr, rkey: target.rkey };
/// dev.post_send(qp, SendWr::new(1, write).sge(mr.sge(0, 5)?))?;
/// rocev2::check(dev.next_completion(cq).await?)?;
/// let server = accepting.await??;
/// assert_eq!(&server.mr_guard(&smr)?[..5], b"async");
/// # Ok(()) })
/// # }
/// ```
#[cfg(feature = "tokio")]
pub mod tokio {
    use super::{
        ConnectConfig, ConnectError, Connection, READY, RECV_ENDPOINT, RECV_STATUS, SEND_ENDPOINT,
        SEND_STATUS, bring_up, check_failed, io_error, local_endpoint, remaining, status,
    };
    use crate::device::Device;
    use crate::endpoint::Endpoint;
    use crate::qp::Qp;
    use ::tokio::io::{AsyncReadExt, AsyncWriteExt};
    use ::tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
    use std::future::Future;
    use std::time::Instant;

    /// Connects `qp` to the QP of the program that accepts at `addr`; see
    /// [`super::connect`].
    ///
    /// # Errors
    /// As [`super::connect`].
    pub async fn connect(
        dev: &Device,
        qp: Qp,
        addr: impl ToSocketAddrs,
        cfg: &ConnectConfig,
    ) -> Result<Connection<TcpStream>, ConnectError> {
        let end = Instant::now() + cfg.timeout;
        let tcp = "connecting over TCP";
        let addrs = step(end, cfg, tcp, ::tokio::net::lookup_host(addr)).await?;
        let mut last =
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "no address to connect to");
        for a in addrs {
            match step(end, cfg, tcp, TcpStream::connect(a)).await {
                Ok(s) => return handshake(dev, qp, s, cfg, end).await,
                Err(ConnectError::Io { source, .. }) => last = super::at(a, source),
                Err(e) => return Err(e),
            }
        }
        Err(super::io_error(tcp, last, cfg.timeout))
    }

    /// Takes the next client of `listener` and connects `qp` to its QP; see
    /// [`super::accept`]. Cancel-safe until a client arrives.
    ///
    /// # Errors
    /// As [`super::connect`].
    pub async fn accept(
        dev: &Device,
        qp: Qp,
        listener: &TcpListener,
        cfg: &ConnectConfig,
    ) -> Result<Connection<TcpStream>, ConnectError> {
        let (s, _) = listener.accept().await.map_err(|source| ConnectError::Io {
            step: "accepting a client",
            source,
        })?;
        handshake(dev, qp, s, cfg, Instant::now() + cfg.timeout).await
    }

    /// One IO step within what is left of the bound.
    async fn step<T>(
        end: Instant,
        cfg: &ConnectConfig,
        step: &'static str,
        f: impl Future<Output = std::io::Result<T>>,
    ) -> Result<T, ConnectError> {
        let left = remaining(end, step, cfg.timeout)?;
        match ::tokio::time::timeout(left, f).await {
            Ok(r) => r.map_err(|e| io_error(step, e, cfg.timeout)),
            Err(_) => Err(ConnectError::Timeout {
                step,
                timeout: cfg.timeout,
            }),
        }
    }

    async fn handshake(
        dev: &Device,
        qp: Qp,
        mut s: TcpStream,
        cfg: &ConnectConfig,
        end: Instant,
    ) -> Result<Connection<TcpStream>, ConnectError> {
        let prep = "preparing the TCP connection";
        let io = |source| ConnectError::Io { step: prep, source };
        s.set_nodelay(true).map_err(io)?;
        let local = local_endpoint(dev, qp, s.local_addr().map_err(io)?.ip(), cfg)?;
        let bytes = local.to_bytes().map_err(ConnectError::Ours)?;
        step(end, cfg, SEND_ENDPOINT, s.write_all(&bytes)).await?;
        let mut header = [0; Endpoint::HEADER_LEN];
        step(end, cfg, RECV_ENDPOINT, s.read_exact(&mut header)).await?;
        let mut all = vec![0; Endpoint::HEADER_LEN + Endpoint::body_len(&header)?];
        all[..Endpoint::HEADER_LEN].copy_from_slice(&header);
        let body = &mut all[Endpoint::HEADER_LEN..];
        step(end, cfg, RECV_ENDPOINT, s.read_exact(body)).await?;
        let peer = Endpoint::parse(&all)?;
        let up = bring_up(dev, qp, &local, &peer, cfg);
        let told = step(end, cfg, SEND_STATUS, s.write_all(&status(&up))).await;
        up.map_err(ConnectError::Local)?;
        told?;
        let st = step(end, cfg, RECV_STATUS, s.read_u8()).await?;
        if st != READY {
            check_failed(st)?;
            let len = step(end, cfg, RECV_STATUS, s.read_u16()).await?;
            let mut why = vec![0; usize::from(len)];
            step(end, cfg, RECV_STATUS, s.read_exact(&mut why)).await?;
            return Err(ConnectError::Peer(
                String::from_utf8_lossy(&why).into_owned(),
            ));
        }
        Ok(Connection {
            local,
            peer,
            stream: s,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocev2_core::mr::Rkey;
    use rocev2_core::qp::Mtu;
    use rocev2_core::wire::Qpn;

    fn endpoint(qpn: u32) -> Endpoint {
        Endpoint {
            qpn: Qpn::new(qpn),
            psn: 0x123456,
            ip: "127.0.0.1".parse().unwrap(),
            mac: None,
            mtu: Mtu::Mtu1024,
            ext: ExtCaps::default(),
            mrs: vec![RemoteMr {
                addr: 0x1000_0000,
                len: 4096,
                rkey: Rkey::new(qpn),
            }],
        }
    }

    /// A connected loopback pair.
    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        (a, l.accept().unwrap().0)
    }

    #[test]
    fn exchange_swaps_endpoints() {
        let (mut a, mut b) = pair();
        let t = std::thread::spawn(move || exchange(&mut b, &endpoint(2), Duration::from_secs(5)));
        let got = exchange(&mut a, &endpoint(1), Duration::from_secs(5)).unwrap();
        assert_eq!(got, endpoint(2));
        assert_eq!(t.join().unwrap().unwrap(), endpoint(1));
    }

    #[test]
    fn exchange_names_what_went_wrong() {
        // Garbage from the peer.
        let (mut a, mut b) = pair();
        b.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        let e = exchange(&mut a, &endpoint(1), Duration::from_secs(5)).unwrap_err();
        assert!(
            matches!(e, ConnectError::Format(EndpointFormatError::Version(b'G'))),
            "{e}"
        );
        // A peer that closes after half an endpoint.
        let (mut a, mut b) = pair();
        b.write_all(&endpoint(2).to_bytes().unwrap()[..10]).unwrap();
        drop(b);
        let e = exchange(&mut a, &endpoint(1), Duration::from_secs(5)).unwrap_err();
        assert!(
            matches!(
                e,
                ConnectError::Closed {
                    step: RECV_ENDPOINT
                }
            ),
            "{e}"
        );
        // A silent peer.
        let (mut a, _b) = pair();
        let e = exchange(&mut a, &endpoint(1), Duration::from_millis(100)).unwrap_err();
        assert!(
            matches!(
                e,
                ConnectError::Timeout {
                    step: RECV_ENDPOINT,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("rocev2's exchange"), "{e}");
        // Our own endpoint too large: refused before anything is sent.
        let (mut a, _b) = pair();
        let mut big = endpoint(1);
        big.mrs = vec![big.mrs[0]; Endpoint::MAX_MRS + 1];
        let e = exchange(&mut a, &big, Duration::from_millis(100)).unwrap_err();
        assert!(matches!(e, ConnectError::Ours(_)), "{e}");
        assert!(e.to_string().starts_with("our endpoint"), "{e}");
    }

    #[test]
    fn a_refused_tcp_connect_names_the_address_once() {
        let (dev, _peer) = crate::Device::pair().unwrap();
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(4).unwrap();
        let qp = dev.create_rc_qp(pd, cq, cq).unwrap();
        // A port nothing listens on: the listener is dropped before the connect.
        let addr = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let e = connect(&dev, qp, addr, &ConnectConfig::default()).unwrap_err();
        let why = std::error::Error::source(&e).unwrap().to_string();
        assert_eq!(e.to_string(), "connecting over TCP");
        assert!(why.starts_with(&addr.to_string()), "{why}");
    }

    /// Two devices running Dart offer its extensions through the exchange without being asked:
    /// the sender's look-ahead reaches the receiver, whose ACKs carry N back (seed 000 §III-D),
    /// so the sender's controller holds the N the look-ahead announced.
    #[test]
    fn dart_devices_offer_n_and_the_look_ahead_by_default() {
        use crate::{AccessFlags, CcScheme, CcSettings, SendOp, SendWr};
        let cfg = crate::DeviceConfig {
            cc: CcSettings::new(CcScheme::Dart),
            ..crate::DeviceConfig::default()
        };
        let (dev, server) = crate::Device::pair_with(cfg).unwrap();
        assert_eq!(dev.ext_offer(), CcScheme::Dart.peer_ext());
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        const LEN: usize = 64 * 1024;
        let srv = std::thread::spawn(move || {
            let pd = server.alloc_pd().unwrap();
            let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
            let mr = server.register(pd, vec![0u8; LEN], access).unwrap();
            let cq = server.create_cq(4).unwrap();
            let qp = server.create_rc_qp(pd, cq, cq).unwrap();
            let c = accept(&server, qp, &listener, &ConnectConfig::default().mr(&mr)).unwrap();
            (server, c)
        });
        let pd = dev.alloc_pd().unwrap();
        let mr = dev
            .register(pd, vec![7u8; LEN], AccessFlags::LOCAL_WRITE)
            .unwrap();
        let cq = dev.create_cq(4).unwrap();
        let qp = dev.create_rc_qp(pd, cq, cq).unwrap();
        let c = connect(&dev, qp, addr, &ConnectConfig::default()).unwrap();
        let (_server, s) = srv.join().unwrap();
        let dart = CcScheme::Dart.peer_ext();
        assert_eq!((c.peer.ext, s.peer.ext), (dart, dart));

        // The receiver knows us by our address's last 16 bits; we announce an incast of 4
        // senders listing ourselves and two others, so its ACKs say N = 4.
        let me = match c.local.ip {
            IpAddr::V4(a) => u16::from_be_bytes([a.octets()[2], a.octets()[3]]),
            IpAddr::V6(a) => u16::from_be_bytes([a.octets()[14], a.octets()[15]]),
        };
        let target = c.peer.mrs[0];
        let write = SendOp::Write {
            remote_addr: target.addr,
            rkey: target.rkey,
        };
        let wr = SendWr::new(1, write)
            .sge(mr.sge(0, LEN as u32).unwrap())
            .lookahead(4, &[me, me.wrapping_add(1), me.wrapping_add(2)]);
        dev.post_send(qp, wr).unwrap();
        let mut wcs = Vec::new();
        dev.wait_cq(cq, &mut wcs, 1, Duration::from_secs(10))
            .unwrap();
        assert!(wcs[0].status.is_success(), "{:?}", wcs[0]);
        let engine = dev.engine().unwrap();
        let now = engine.driver().now();
        let snap = engine.qp(qp.qpn()).unwrap().cc_snapshot(now);
        assert_eq!(snap.and_then(|s| s.n), Some(4), "{snap:?}");
    }

    #[test]
    fn statuses_are_ready_or_a_reason() {
        assert_eq!(status(&Ok(())), [READY]);
        let failed = status(&Err(crate::Error::Timeout));
        let why = crate::report(&crate::Error::Timeout);
        assert_eq!(failed[0], FAILED);
        assert_eq!(
            usize::from(u16::from_be_bytes([failed[1], failed[2]])),
            why.len()
        );
        assert_eq!(&failed[3..], why.as_bytes());
        assert!(check_failed(FAILED).is_ok());
        assert!(matches!(check_failed(7), Err(ConnectError::Status(7))));
    }
}
