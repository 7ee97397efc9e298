//! The UDP-socket datapath: RoCEv2 over ordinary UDP sockets on port 4791, without any
//! privilege. The kernel writes and strips Ethernet, IP and UDP; this module turns the core's
//! whole frames into `sendmmsg` calls and received datagrams back into whole frames.
//!
//! Source: RoCEv2 Annex A17.4 and A17.8, and `docs/wire.md`, "ICRC in each datapath mode",
//! which derives from Linux's `ip_select_ident_segs()` why the ICRC the core computes (over an
//! IPv4 header with Identification 0 and DF) is what goes on the wire:
//!
//! * **Send.** Each frame's IP and UDP fields become socket arguments: destination address and
//!   port in `msg_name`; source address in an `IP_PKTINFO`/`IPV6_PKTINFO` control message; DSCP
//!   and ECN in `IP_TOS`/`IPV6_TCLASS`; TTL in `IP_TTL`/`IPV6_HOPLIMIT`. The UDP source port is
//!   the port the sending socket is bound to, so there is one socket per source port in use
//!   (created on first use). Every socket is **unconnected** and has
//!   `IP_MTU_DISCOVER = IP_PMTUDISC_DO`, which makes Linux write DF and Identification 0,
//!   exactly the header the core's ICRC covers. No UDP GSO (it numbers segments 0, 1, 2, …).
//! * **Receive.** `recvmmsg` on the port-4791 sockets with `IP_PKTINFO`, `IP_RECVTOS` and
//!   `IP_RECVTTL` (IPv6: `IPV6_RECVPKTINFO`, `IPV6_RECVTCLASS`, `IPV6_RECVHOPLIMIT`) gives the
//!   addresses, ECN and TTL; the datagram lands in its slot after room for the headers, which
//!   are then written in front of it: Ethernet (destination = our MAC, source = all zeros,
//!   which the core never reads), IPv4 with Identification 0, DF and a valid header checksum
//!   (or IPv6 with flow label 0), and UDP with checksum 0. The frame is then handed to the core
//!   like any other, and the core checks the ICRC.
//!
//! Consequences, measured by the namespace tests: frames from rocev2 in any mode verify
//! completely; IPv6 frames from anyone verify; IPv4 frames from a sender using non-zero
//! Identifications (rdma_rxe: `__ip_select_ident()` per packet) fail the ICRC here and are
//! counted by the core as `icrc_error`. [`UdpConfig::accept_unverified_icrc`] accepts them
//! instead (`docs/wire.md`, option 2): the datapath checks the ICRC against the rebuilt header
//! itself and, on a mismatch, writes the matching value so the core accepts the frame, counting
//! it as `icrc_unverifiable`. Such frames are protected only by the UDP checksum, if the sender
//! set one. The option changes nothing for IPv6 (always verifiable) and nothing in the core.
//!
//! Deviations: the IPv6 flow label is neither sent (the kernel picks one) nor received (0 in the
//! rebuilt header); both are masked by the ICRC. 802.1Q tags in the core's frames are ignored:
//! the route decides the VLAN. The source MAC of received frames is unknown (zeros).

use crate::sys::{self, Cmsg, Epoll};
use crate::{Datapath, DatapathStats, Error, Interface, MAX_FRAME, RxBatch, RxMeta, TxBatch};
use rocev2_core::wire::frame::{Ecn, ROCEV2_UDP_PORT};
use rocev2_core::wire::{icrc, ip};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

/// Frames per `recvmmsg`/`sendmmsg` call.
const BATCH: usize = 64;
const ETH_LEN: usize = 14;
const UDP_LEN: usize = 8;
/// Bytes in front of an IPv4 datagram in its slot: Ethernet, IPv4, UDP.
pub const HDR_V4: usize = ETH_LEN + 20 + UDP_LEN;
/// Bytes in front of an IPv6 datagram in its slot.
pub const HDR_V6: usize = ETH_LEN + 40 + UDP_LEN;

/// Options of the UDP datapath.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpConfig {
    /// Accept IPv4 frames whose ICRC does not verify against the rebuilt header (Identification
    /// 0, DF), counting them as `icrc_unverifiable`, instead of letting the core drop them as
    /// `icrc_error`. Needed to talk to rdma_rxe over UDP sockets; off by default because it
    /// gives up the ICRC's protection for exactly those frames.
    pub accept_unverified_icrc: bool,
    /// Receive buffer of each port-4791 socket (root may exceed `net.core.rmem_max`).
    pub rcvbuf_bytes: usize,
    /// Send buffer of each socket.
    pub sndbuf_bytes: usize,
    /// Most sockets bound to distinct UDP source ports; past it, frames leave from port 4791
    /// with their ICRC recomputed (`tx_sport_fallback`).
    pub max_source_ports: usize,
}

impl Default for UdpConfig {
    fn default() -> Self {
        UdpConfig {
            accept_unverified_icrc: false,
            rcvbuf_bytes: 8 << 20,
            sndbuf_bytes: 4 << 20,
            max_source_ports: 4096,
        }
    }
}

/// The socket a source port maps to.
#[derive(Debug)]
enum TxSock {
    Bound(Socket),
    /// Binding failed: send from the port-4791 socket.
    Fallback,
}

/// RoCEv2 over UDP sockets; see the module docs.
#[derive(Debug)]
pub struct UdpDatapath {
    mac: [u8; 6],
    rx4: Option<Socket>,
    rx6: Option<Socket>,
    /// Both receive sockets, when there are two.
    epoll: Option<Epoll>,
    tx: HashMap<(bool, u16), TxSock>,
    iface: String,
    cfg: UdpConfig,
    stats: DatapathStats,
}

fn set_int(
    s: &Socket,
    level: libc::c_int,
    name: libc::c_int,
    op: &'static str,
) -> Result<(), Error> {
    sys::setsockopt_int(s.as_fd(), level, name, 1).map_err(|e| Error::io(op, e))
}

/// Sets a buffer size with the `*FORCE` option when privileged, else the capped one.
fn set_buf(s: &Socket, rcv: bool, bytes: usize) {
    let (force, plain) = if rcv {
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF)
    } else {
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)
    };
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    if sys::setsockopt_int(s.as_fd(), libc::SOL_SOCKET, force, v).is_err() {
        let _ = sys::setsockopt_int(s.as_fd(), libc::SOL_SOCKET, plain, v);
    }
}

/// A UDP socket of the family, bound to `port` on the wildcard address and to `iface`, with
/// DF/ID-0 sending; `rx` adds the receive-side control messages.
fn open_socket(
    v6: bool,
    port: u16,
    iface: &str,
    rx: bool,
    cfg: &UdpConfig,
) -> Result<Socket, Error> {
    let domain = if v6 { Domain::IPV6 } else { Domain::IPV4 };
    let s = Socket::new(domain, Type::DGRAM.cloexec(), Some(Protocol::UDP))
        .map_err(|e| Error::io("udp socket", e))?;
    s.set_nonblocking(true)
        .map_err(|e| Error::io("udp nonblocking", e))?;
    if let Err(e) = s.bind_device(Some(iface.as_bytes())) {
        // Needs CAP_NET_RAW before Linux 5.7; unbound, the socket serves every interface.
        tracing::warn!(iface, error = %e, "SO_BINDTODEVICE failed; the UDP socket is not tied to the interface");
    }
    if v6 {
        s.set_only_v6(true)
            .map_err(|e| Error::io("udp IPV6_V6ONLY", e))?;
        sys::setsockopt_int(
            s.as_fd(),
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_DO,
        )
        .map_err(|e| Error::io("udp IPV6_MTU_DISCOVER", e))?;
    } else {
        // DF on every packet and `ignore_df` false: Linux then writes Identification 0 for an
        // unconnected socket (docs/wire.md, "ICRC in each datapath mode").
        sys::setsockopt_int(
            s.as_fd(),
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )
        .map_err(|e| Error::io("udp IP_MTU_DISCOVER", e))?;
    }
    set_buf(&s, false, cfg.sndbuf_bytes);
    if rx {
        set_buf(&s, true, cfg.rcvbuf_bytes);
        if v6 {
            set_int(
                &s,
                libc::IPPROTO_IPV6,
                libc::IPV6_RECVPKTINFO,
                "udp IPV6_RECVPKTINFO",
            )?;
            set_int(
                &s,
                libc::IPPROTO_IPV6,
                libc::IPV6_RECVTCLASS,
                "udp IPV6_RECVTCLASS",
            )?;
            set_int(
                &s,
                libc::IPPROTO_IPV6,
                libc::IPV6_RECVHOPLIMIT,
                "udp IPV6_RECVHOPLIMIT",
            )?;
        } else {
            set_int(&s, libc::IPPROTO_IP, libc::IP_PKTINFO, "udp IP_PKTINFO")?;
            set_int(&s, libc::IPPROTO_IP, libc::IP_RECVTOS, "udp IP_RECVTOS")?;
            set_int(&s, libc::IPPROTO_IP, libc::IP_RECVTTL, "udp IP_RECVTTL")?;
        }
    } else {
        // Nothing is ever read from a source-port socket; keep what strays there small.
        let _ = sys::setsockopt_int(s.as_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, 1);
    }
    let addr: SocketAddr = if v6 {
        (Ipv6Addr::UNSPECIFIED, port).into()
    } else {
        (Ipv4Addr::UNSPECIFIED, port).into()
    };
    s.bind(&addr.into()).map_err(|e| Error::io("udp bind", e))?;
    Ok(s)
}

impl UdpDatapath {
    /// Opens port-4791 sockets for each IP family `iface` has an address of.
    ///
    /// # Errors
    /// [`Error::BadInterface`] without any address; socket errors (port 4791 already taken, for
    /// instance by the rdma_rxe module in the same namespace).
    pub fn open(iface: &Interface, cfg: UdpConfig) -> Result<UdpDatapath, Error> {
        let has = |v6: bool| iface.addrs.iter().any(|a| a.ip.is_ipv6() == v6);
        if !has(false) && !has(true) {
            return Err(Error::BadInterface {
                name: iface.name.clone(),
                why: "no IP address",
            });
        }
        let rx4 = has(false)
            .then(|| open_socket(false, ROCEV2_UDP_PORT, &iface.name, true, &cfg))
            .transpose()?;
        let rx6 = has(true)
            .then(|| open_socket(true, ROCEV2_UDP_PORT, &iface.name, true, &cfg))
            .transpose()?;
        let epoll = match (&rx4, &rx6) {
            (Some(a), Some(b)) => {
                let ep = Epoll::new().map_err(|e| Error::io("epoll_create1", e))?;
                ep.add_readable(a.as_raw_fd())
                    .map_err(|e| Error::io("epoll_ctl", e))?;
                ep.add_readable(b.as_raw_fd())
                    .map_err(|e| Error::io("epoll_ctl", e))?;
                Some(ep)
            }
            _ => None,
        };
        Ok(UdpDatapath {
            mac: iface.mac,
            rx4,
            rx6,
            epoll,
            tx: HashMap::new(),
            iface: iface.name.clone(),
            cfg,
            stats: DatapathStats::default(),
        })
    }

    fn rx_socket(&self, v6: bool) -> Option<&Socket> {
        if v6 {
            self.rx6.as_ref()
        } else {
            self.rx4.as_ref()
        }
    }

    /// Receives into `slots`, compacting good frames to the front; returns how many.
    fn recv_family(
        &mut self,
        v6: bool,
        slots: &mut [Vec<u8>],
        meta: &mut [RxMeta],
    ) -> Result<usize, Error> {
        let Some(sock) = self.rx_socket(v6) else {
            return Ok(0);
        };
        let fd = sock.as_raw_fd();
        let hdr = if v6 { HDR_V6 } else { HDR_V4 };
        let n = slots.len().min(meta.len()).min(BATCH);
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: these are plain C structs for which all-zero bytes are a valid value (null
        // pointers, zero lengths).
        let mut names: [libc::sockaddr_storage; BATCH] = unsafe { std::mem::zeroed() };
        let mut ctrl = [Cmsg::default(); BATCH];
        // SAFETY: as above.
        let mut iovs: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for i in 0..n {
            let slot = &mut slots[i];
            slot.resize(MAX_FRAME, 0);
            iovs[i] = libc::iovec {
                iov_base: slot[hdr..].as_mut_ptr().cast(),
                iov_len: MAX_FRAME - hdr,
            };
            let h = &mut msgs[i].msg_hdr;
            h.msg_name = (&mut names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = ctrl[i].0.as_mut_ptr().cast();
            h.msg_controllen = ctrl[i].0.len();
        }
        // SAFETY: `msgs[..n]` point into `names`, `iovs`, `ctrl` and the slots, all alive and
        // unmoved until the call returns; each iovec covers writable memory inside its slot.
        let r = unsafe {
            libc::recvmmsg(
                fd,
                msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if sys::would_block(&e) {
                Ok(0)
            } else {
                Err(Error::io("recvmmsg", e))
            };
        }
        let got = r as usize;
        let mut out = 0;
        for i in 0..got.min(n) {
            let m = &msgs[i];
            let len = m.msg_len as usize;
            if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || hdr + len > MAX_FRAME {
                self.stats.rx_truncated += 1;
                continue;
            }
            let Some(src) = sockaddr_to_std(&names[i]) else {
                continue;
            };
            let info = parse_rx_cmsgs(&ctrl[i].0, m.msg_hdr.msg_controllen, v6);
            let Some(dst) = info.dst else {
                continue;
            };
            let rebuilt = Rebuild {
                src,
                dst,
                dst_port: ROCEV2_UDP_PORT,
                tos: info.tos,
                ttl: info.ttl,
                dst_mac: self.mac,
                payload_len: len,
            };
            let Some(flen) = write_headers(&mut slots[i], &rebuilt) else {
                continue;
            };
            if self.cfg.accept_unverified_icrc
                && !v6
                && accept_unverified(&mut slots[i][..flen], hdr)
            {
                self.stats.icrc_unverifiable += 1;
            }
            meta[i] = RxMeta {
                len: flen,
                ecn: Ecn::from_bits(info.tos),
            };
            if out != i {
                slots.swap(out, i);
                meta.swap(out, i);
            }
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += flen as u64;
            out += 1;
        }
        Ok(out)
    }

    /// The socket sending from UDP source port `sport`, created on first use; `None` means the
    /// port-4791 socket with a recomputed ICRC.
    fn tx_fd(&mut self, v6: bool, sport: u16) -> Option<i32> {
        if sport == ROCEV2_UDP_PORT {
            return self.rx_socket(v6).map(|s| s.as_raw_fd());
        }
        if !self.tx.contains_key(&(v6, sport)) {
            let entry = if self.tx.len() >= self.cfg.max_source_ports {
                TxSock::Fallback
            } else {
                match open_socket(v6, sport, &self.iface, false, &self.cfg) {
                    Ok(s) => TxSock::Bound(s),
                    Err(e) => {
                        tracing::warn!(sport, error = %e, "cannot bind the UDP source port; sending from 4791");
                        TxSock::Fallback
                    }
                }
            };
            self.tx.insert((v6, sport), entry);
        }
        match self.tx.get(&(v6, sport))? {
            TxSock::Bound(s) => Some(s.as_raw_fd()),
            TxSock::Fallback => None,
        }
    }
}

/// What the receive control messages said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RxInfo {
    dst: Option<IpAddr>,
    tos: u8,
    ttl: u8,
}

fn parse_rx_cmsgs(buf: &[u8], len: usize, v6: bool) -> RxInfo {
    let mut info = RxInfo {
        dst: None,
        tos: 0,
        ttl: 64,
    };
    let int = |d: &[u8]| {
        d.get(..4)
            .and_then(|b| b.try_into().ok())
            .map(i32::from_ne_bytes)
    };
    for c in sys::cmsgs(buf, len) {
        match (c.level, c.kind) {
            // struct in_pktinfo { int ipi_ifindex; in_addr ipi_spec_dst; in_addr ipi_addr; }:
            // ipi_addr is the header's destination address.
            (libc::IPPROTO_IP, libc::IP_PKTINFO) if !v6 => {
                if let Some(b) = c.data.get(8..12) {
                    info.dst = Some(IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])));
                }
            }
            (libc::IPPROTO_IP, libc::IP_TOS) => {
                if let Some(&t) = c.data.first() {
                    info.tos = t;
                }
            }
            (libc::IPPROTO_IP, libc::IP_TTL) => {
                if let Some(t) = int(c.data) {
                    info.ttl = t.clamp(0, 255) as u8;
                }
            }
            // struct in6_pktinfo { in6_addr ipi6_addr; int ipi6_ifindex; }
            (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) if v6 => {
                if let Some(b) = c.data.get(..16).and_then(|b| <[u8; 16]>::try_from(b).ok()) {
                    info.dst = Some(IpAddr::V6(Ipv6Addr::from(b)));
                }
            }
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                if let Some(t) = int(c.data) {
                    info.tos = t.clamp(0, 255) as u8;
                }
            }
            (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT) => {
                if let Some(t) = int(c.data) {
                    info.ttl = t.clamp(0, 255) as u8;
                }
            }
            _ => {}
        }
    }
    info
}

fn sockaddr_to_std(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(s.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in; sockaddr_storage is
            // large enough and suitably aligned for it.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr))),
                u16::from_be(a.sin_port),
            ))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::new(
                IpAddr::V6(Ipv6Addr::from(a.sin6_addr.s6_addr)),
                u16::from_be(a.sin6_port),
            ))
        }
        _ => None,
    }
}

/// The headers a received datagram is given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rebuild {
    /// Sender's address and UDP source port.
    pub src: SocketAddr,
    /// The datagram's destination address (from `IP_PKTINFO`).
    pub dst: IpAddr,
    /// UDP destination port.
    pub dst_port: u16,
    /// IPv4 TOS or IPv6 traffic class: DSCP and ECN.
    pub tos: u8,
    /// TTL or hop limit.
    pub ttl: u8,
    /// Ethernet destination (our MAC).
    pub dst_mac: [u8; 6],
    /// UDP payload bytes, already in the slot after the headers.
    pub payload_len: usize,
}

/// Writes Ethernet, IP and UDP headers in front of a UDP payload that already sits at
/// [`HDR_V4`] (or [`HDR_V6`]) in `buf`, as a rocev2 sender's kernel wrote them: IPv4 with
/// Identification 0, DF, no options and a correct header checksum; IPv6 with flow label 0; UDP
/// checksum 0. Returns the frame length, or `None` when the addresses mix families or the
/// lengths do not fit.
pub fn write_headers(buf: &mut [u8], r: &Rebuild) -> Option<usize> {
    let v6 = r.src.is_ipv6();
    if v6 != r.dst.is_ipv6() {
        return None;
    }
    let hdr = if v6 { HDR_V6 } else { HDR_V4 };
    let udp_len = u16::try_from(UDP_LEN + r.payload_len).ok()?;
    let total = hdr.checked_add(r.payload_len)?;
    let frame = buf.get_mut(..total)?;
    frame[0..6].copy_from_slice(&r.dst_mac);
    frame[6..12].fill(0);
    match (r.src.ip(), r.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            let ip_total = u16::try_from(20 + UDP_LEN + r.payload_len).ok()?;
            let h = &mut frame[ETH_LEN..ETH_LEN + 20];
            h[0] = 0x45;
            h[1] = r.tos;
            h[2..4].copy_from_slice(&ip_total.to_be_bytes());
            h[4..6].fill(0); // Identification 0
            h[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // DF, offset 0
            h[8] = r.ttl;
            h[9] = 17;
            h[10..12].fill(0);
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
            let sum = ip::ipv4_header_checksum(h);
            h[10..12].copy_from_slice(&sum.to_be_bytes());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            frame[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
            let ip = &mut frame[ETH_LEN..ETH_LEN + 40];
            ip[0] = 0x60 | (r.tos >> 4);
            ip[1] = r.tos << 4; // flow label 0
            ip[2..4].fill(0);
            ip[4..6].copy_from_slice(&udp_len.to_be_bytes());
            ip[6] = 17;
            ip[7] = r.ttl;
            ip[8..24].copy_from_slice(&s.octets());
            ip[24..40].copy_from_slice(&d.octets());
        }
        _ => return None,
    }
    let u = &mut frame[hdr - UDP_LEN..hdr];
    u[0..2].copy_from_slice(&r.src.port().to_be_bytes());
    u[2..4].copy_from_slice(&r.dst_port.to_be_bytes());
    u[4..6].copy_from_slice(&udp_len.to_be_bytes());
    u[6..8].fill(0);
    Some(total)
}

/// With `accept_unverified_icrc`: if the ICRC does not verify against the rebuilt IPv4 header,
/// overwrite it with the value that does. Returns whether it was rewritten.
fn accept_unverified(frame: &mut [u8], hdr: usize) -> bool {
    let n = frame.len();
    if n < hdr + 12 + 4 {
        return false; // the core will count it as truncated
    }
    let (head, transport) = frame.split_at_mut(hdr);
    let ip = &head[ETH_LEN..hdr - UDP_LEN];
    let udp = &head[hdr - UDP_LEN..];
    if icrc::verify(ip, udp, transport).is_ok() {
        return false;
    }
    let body_len = transport.len() - 4;
    match icrc::compute(ip, udp, &transport[..body_len]) {
        Ok(crc) => {
            transport[body_len..].copy_from_slice(&crc.to_le_bytes());
            true
        }
        Err(_) => false,
    }
}

/// A core frame taken apart for `sendmsg`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TxParts {
    src: IpAddr,
    dst: SocketAddr,
    sport: u16,
    tos: u8,
    ttl: u8,
    /// The UDP header's offset in the frame, then the payload after it.
    udp_at: usize,
    payload: std::ops::Range<usize>,
}

/// Splits a frame the core produced (Ethernet [802.1Q] / IPv4 without options or IPv6 / UDP).
fn split_frame(f: &[u8]) -> Option<TxParts> {
    let be16 = |at: usize| f.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    let mut at = ETH_LEN;
    let mut et = be16(12)?;
    if et == 0x8100 {
        et = be16(16)?;
        at += 4;
    }
    let (src, dst, tos, ttl, udp_at) = match et {
        0x0800 => {
            let h = f.get(at..at + 20)?;
            if h[0] != 0x45 || h[9] != 17 {
                return None;
            }
            let s = Ipv4Addr::new(h[12], h[13], h[14], h[15]);
            let d = Ipv4Addr::new(h[16], h[17], h[18], h[19]);
            (IpAddr::V4(s), IpAddr::V4(d), h[1], h[8], at + 20)
        }
        0x86dd => {
            let h = f.get(at..at + 40)?;
            if h[0] >> 4 != 6 || h[6] != 17 {
                return None;
            }
            let tc = (h[0] << 4) | (h[1] >> 4);
            let s = Ipv6Addr::from(<[u8; 16]>::try_from(&h[8..24]).ok()?);
            let d = Ipv6Addr::from(<[u8; 16]>::try_from(&h[24..40]).ok()?);
            (IpAddr::V6(s), IpAddr::V6(d), tc, h[7], at + 40)
        }
        _ => return None,
    };
    let sport = be16(udp_at)?;
    let dport = be16(udp_at + 2)?;
    let ulen = usize::from(be16(udp_at + 4)?);
    if ulen < UDP_LEN || udp_at + ulen > f.len() {
        return None;
    }
    Some(TxParts {
        src,
        dst: SocketAddr::new(dst, dport),
        sport,
        tos,
        ttl,
        udp_at,
        payload: udp_at + UDP_LEN..udp_at + ulen,
    })
}

/// Rewrites the UDP source port of a frame to 4791 and recomputes its ICRC (source-port
/// fallback; the peer only sees a different port).
fn rewrite_sport(frame: &mut [u8], p: &TxParts) -> bool {
    let Some(udp) = frame.get_mut(p.udp_at..p.udp_at + 2) else {
        return false;
    };
    udp.copy_from_slice(&ROCEV2_UDP_PORT.to_be_bytes());
    let ip_at = if p.src.is_ipv6() {
        p.udp_at - 40
    } else {
        p.udp_at - 20
    };
    let (head, rest) = frame.split_at_mut(p.udp_at + UDP_LEN);
    let transport = &mut rest[..p.payload.len()];
    if transport.len() < 16 {
        return false;
    }
    let body = transport.len() - 4;
    match icrc::compute(
        &head[ip_at..p.udp_at],
        &head[p.udp_at..],
        &transport[..body],
    ) {
        Ok(crc) => {
            transport[body..].copy_from_slice(&crc.to_le_bytes());
            true
        }
        Err(_) => false,
    }
}

/// The control messages that carry one frame's source address, TOS and TTL.
fn tx_cmsgs(p: &TxParts, buf: &mut [u8]) -> usize {
    let mut at = 0;
    let ttl = libc::c_int::from(p.ttl);
    match p.src {
        IpAddr::V4(s) => {
            // struct in_pktinfo: ipi_ifindex 0 (the route decides), ipi_spec_dst = source.
            let mut pi = [0u8; 12];
            pi[4..8].copy_from_slice(&s.octets());
            sys::push_cmsg(buf, &mut at, libc::IPPROTO_IP, libc::IP_PKTINFO, &pi);
            sys::push_cmsg(
                buf,
                &mut at,
                libc::IPPROTO_IP,
                libc::IP_TOS,
                &libc::c_int::from(p.tos).to_ne_bytes(),
            );
            if ttl > 0 {
                sys::push_cmsg(
                    buf,
                    &mut at,
                    libc::IPPROTO_IP,
                    libc::IP_TTL,
                    &ttl.to_ne_bytes(),
                );
            }
        }
        IpAddr::V6(s) => {
            let mut pi = [0u8; 20];
            pi[..16].copy_from_slice(&s.octets());
            sys::push_cmsg(buf, &mut at, libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, &pi);
            sys::push_cmsg(
                buf,
                &mut at,
                libc::IPPROTO_IPV6,
                libc::IPV6_TCLASS,
                &libc::c_int::from(p.tos).to_ne_bytes(),
            );
            if ttl > 0 {
                sys::push_cmsg(
                    buf,
                    &mut at,
                    libc::IPPROTO_IPV6,
                    libc::IPV6_HOPLIMIT,
                    &ttl.to_ne_bytes(),
                );
            }
        }
    }
    at
}

impl Datapath for UdpDatapath {
    fn name(&self) -> &'static str {
        "udp"
    }

    fn recv(&mut self, batch: &mut RxBatch) -> Result<usize, Error> {
        let (slots, meta) = batch.parts_mut();
        let mut n = 0;
        // Alternate families by filling what is left after IPv4 with IPv6.
        for v6 in [false, true] {
            while n < slots.len() {
                let got = self.recv_family(v6, &mut slots[n..], &mut meta[n..])?;
                n += got;
                if got == 0 {
                    break;
                }
            }
        }
        batch.set_len(n);
        Ok(n)
    }

    fn send(&mut self, batch: &mut TxBatch) -> Result<usize, Error> {
        let mut consumed = 0;
        while !batch.is_empty() {
            // Take a run of frames that leave from the same socket.
            let mut parts: Vec<TxParts> = Vec::with_capacity(BATCH);
            let mut key = None;
            let mut bad = false;
            for f in batch.frames().take(BATCH) {
                match split_frame(f) {
                    Some(p) => {
                        let k = (p.src.is_ipv6(), p.sport);
                        if key.is_some_and(|x| x != k) {
                            break;
                        }
                        key = Some(k);
                        parts.push(p);
                    }
                    None => {
                        bad = parts.is_empty();
                        break;
                    }
                }
            }
            if bad {
                self.stats.tx_malformed += 1;
                batch.consume(1);
                consumed += 1;
                continue;
            }
            let Some((v6, sport)) = key else {
                break;
            };
            let fd = match self.tx_fd(v6, sport) {
                Some(fd) => fd,
                None => {
                    for (i, p) in parts.iter().enumerate() {
                        if let Some(f) = batch.frame_mut(i) {
                            rewrite_sport(f, p);
                        }
                    }
                    self.stats.tx_sport_fallback += parts.len() as u64;
                    match self.rx_socket(v6) {
                        Some(s) => s.as_raw_fd(),
                        None => {
                            self.stats.tx_errors += parts.len() as u64;
                            batch.consume(parts.len());
                            consumed += parts.len();
                            continue;
                        }
                    }
                }
            };
            let n = parts.len();
            let mut names = Vec::with_capacity(n);
            let mut ctrl = vec![Cmsg::default(); n];
            let mut ctrl_len = Vec::with_capacity(n);
            for (i, p) in parts.iter().enumerate() {
                names.push(SockAddr::from(p.dst));
                ctrl_len.push(tx_cmsgs(p, &mut ctrl[i].0));
            }
            // SAFETY: all-zero is a valid iovec/mmsghdr (null pointers, zero lengths).
            let mut iovs: Vec<libc::iovec> =
                (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
            // SAFETY: as above.
            let mut msgs: Vec<libc::mmsghdr> =
                (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
            let mut bytes = Vec::with_capacity(n);
            for (i, f) in batch.frames().take(n).enumerate() {
                let p = &parts[i];
                let payload = &f[p.payload.clone()];
                bytes.push(f.len());
                iovs[i] = libc::iovec {
                    iov_base: payload.as_ptr() as *mut libc::c_void,
                    iov_len: payload.len(),
                };
                let h = &mut msgs[i].msg_hdr;
                // The kernel only reads the address of a send.
                h.msg_name = names[i].as_ptr() as *mut libc::c_void;
                h.msg_namelen = names[i].len();
                h.msg_iov = &mut iovs[i];
                h.msg_iovlen = 1;
                h.msg_control = ctrl[i].0.as_mut_ptr().cast();
                h.msg_controllen = ctrl_len[i];
            }
            // SAFETY: every pointer in `msgs` refers to `names`, `iovs`, `ctrl` or a frame of
            // `batch`, none of which moves or is freed before the call returns; the kernel only
            // reads the payloads.
            let r = unsafe {
                libc::sendmmsg(fd, msgs.as_mut_ptr(), n as libc::c_uint, libc::MSG_DONTWAIT)
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                if sys::would_block(&e) {
                    self.stats.tx_blocked += 1;
                    break;
                }
                // This frame can never go (EMSGSIZE above the path MTU, EINVAL for a source
                // address that is not ours, unreachable): drop it, the core retransmits or fails.
                tracing::debug!(error = %e, dst = %parts[0].dst, "sendmmsg refused a frame");
                self.stats.tx_errors += 1;
                batch.consume(1);
                consumed += 1;
                continue;
            }
            let sent = (r as usize).min(n);
            self.stats.tx_packets += sent as u64;
            self.stats.tx_bytes += bytes[..sent].iter().map(|&b| b as u64).sum::<u64>();
            batch.consume(sent);
            consumed += sent;
        }
        Ok(consumed)
    }

    fn fd(&self) -> BorrowedFd<'_> {
        match (&self.epoll, &self.rx4, &self.rx6) {
            (Some(ep), _, _) => ep.fd(),
            (None, Some(s), _) | (None, None, Some(s)) => s.as_fd(),
            // open() refuses an interface without addresses, so one socket always exists.
            (None, None, None) => {
                debug_assert!(false, "UDP datapath without sockets");
                // SAFETY: fd 0 is never closed by us; polling it is harmless.
                unsafe { BorrowedFd::borrow_raw(0) }
            }
        }
    }

    fn stats(&self) -> DatapathStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocev2_core::wire::frame::{Frame, FrameRepr, IpRepr};

    fn ack_frame(ip: IpRepr) -> Vec<u8> {
        crate::test_frames::ack(ip, 49152)
    }

    fn v4(identification: u16) -> IpRepr {
        IpRepr::V4 {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
            dscp: 26,
            ecn: Ecn::Ce,
            identification,
            dont_fragment: true,
            ttl: 63,
        }
    }

    /// What the UDP datapath does to a frame end to end, without sockets: strip to the UDP
    /// payload as `sendmsg` would, put the payload in a slot, rebuild from what `recvmsg` reports.
    fn through_udp(frame: &[u8], mac: [u8; 6]) -> (TxParts, Vec<u8>) {
        let p = split_frame(frame).unwrap();
        let hdr = if p.src.is_ipv6() { HDR_V6 } else { HDR_V4 };
        let mut slot = vec![0u8; MAX_FRAME];
        let payload = &frame[p.payload.clone()];
        slot[hdr..hdr + payload.len()].copy_from_slice(payload);
        let r = Rebuild {
            src: SocketAddr::new(p.src, p.sport),
            dst: p.dst.ip(),
            dst_port: p.dst.port(),
            tos: p.tos,
            ttl: p.ttl,
            dst_mac: mac,
            payload_len: payload.len(),
        };
        let n = write_headers(&mut slot, &r).unwrap();
        slot.truncate(n);
        (p, slot)
    }

    #[test]
    fn udp_rebuild_ipv4_equals_core_frame_except_macs() {
        let orig = ack_frame(v4(0));
        let (p, rebuilt) = through_udp(&orig, [2, 0, 0, 0, 0, 2]);
        assert_eq!(p.sport, 49152);
        assert_eq!(p.tos, (26 << 2) | 3, "DSCP and ECN go into IP_TOS");
        assert_eq!(p.ttl, 63);
        assert_eq!(rebuilt.len(), orig.len());
        // Everything from the IP header on is byte-identical: ID 0, DF, checksum, UDP (the
        // core leaves the IPv4 UDP checksum 0), transport and ICRC.
        assert_eq!(rebuilt[14..], orig[14..]);
        assert_eq!(rebuilt[..6], orig[..6]);
        assert_eq!(rebuilt[6..12], [0; 6], "source MAC unknown in UDP mode");
        let (repr, _) = FrameRepr::parse(&rebuilt).expect("the core accepts the rebuilt frame");
        assert_eq!(repr.ip.ecn(), Ecn::Ce);
    }

    #[test]
    fn udp_rebuild_ipv6_verifies_with_zero_udp_checksum() {
        let ip = IpRepr::V6 {
            src: "fd00::1".parse().unwrap(),
            dst: "fd00::2".parse().unwrap(),
            dscp: 10,
            ecn: Ecn::Ect0,
            flow_label: 0x12345,
            hop_limit: 9,
        };
        let orig = ack_frame(ip);
        let (_, rebuilt) = through_udp(&orig, [2, 0, 0, 0, 0, 2]);
        let (repr, _) = FrameRepr::parse(&rebuilt).expect("ICRC masks flow label and checksum");
        match repr.ip {
            IpRepr::V6 {
                dscp,
                ecn,
                hop_limit,
                flow_label,
                ..
            } => assert_eq!((dscp, ecn, hop_limit, flow_label), (10, Ecn::Ect0, 9, 0)),
            other => panic!("{other:?}"),
        }
        assert!(!repr.udp.checksum, "rebuilt with checksum 0");
    }

    #[test]
    fn udp_rebuild_nonzero_ip_id_fails_icrc_unless_accepted() {
        // An rxe-like sender: Identification 0x1234. Its ICRC covers that ID, which recvmsg
        // cannot report, so the rebuilt frame (ID 0) fails the ICRC.
        let orig = ack_frame(v4(0x1234));
        let (_, mut rebuilt) = through_udp(&orig, [0; 6]);
        assert_eq!(
            FrameRepr::parse(&rebuilt).err(),
            Some(rocev2_core::wire::Error::BadIcrc)
        );
        assert!(accept_unverified(&mut rebuilt, HDR_V4), "rewritten");
        assert!(FrameRepr::parse(&rebuilt).is_ok());
        assert!(
            !accept_unverified(&mut rebuilt, HDR_V4),
            "now verifies: left alone"
        );
        let good = through_udp(&ack_frame(v4(0)), [0; 6]).1;
        let mut g = good.clone();
        assert!(!accept_unverified(&mut g, HDR_V4));
        assert_eq!(g, good);
    }

    #[test]
    fn udp_rebuild_refuses_mixed_families_and_short_slots() {
        let mut slot = vec![0u8; 100];
        let r = Rebuild {
            src: "10.0.0.1:1".parse().unwrap(),
            dst: "fd00::1".parse().unwrap(),
            dst_port: 4791,
            tos: 0,
            ttl: 1,
            dst_mac: [0; 6],
            payload_len: 10,
        };
        assert_eq!(write_headers(&mut slot, &r), None);
        let r = Rebuild {
            dst: "10.0.0.2".parse().unwrap(),
            payload_len: 100,
            ..r
        };
        assert_eq!(write_headers(&mut slot, &r), None, "slot too short");
        let r = Rebuild {
            payload_len: 70_000,
            ..r
        };
        assert_eq!(
            write_headers(&mut vec![0; 80_000], &r),
            None,
            "UDP length overflow"
        );
    }

    #[test]
    fn udp_split_rejects_non_udp_and_bad_lengths() {
        let f = ack_frame(v4(0));
        let mut tcp = f.clone();
        tcp[14 + 9] = 6;
        assert_eq!(split_frame(&tcp), None);
        let mut long = f.clone();
        long[14 + 20 + 4..14 + 20 + 6].copy_from_slice(&1000u16.to_be_bytes());
        assert_eq!(split_frame(&long), None);
        assert_eq!(split_frame(&f[..30]), None);
        assert_eq!(split_frame(&[]), None);
    }

    #[test]
    fn udp_sport_fallback_keeps_icrc_valid() {
        let mut f = ack_frame(v4(0));
        let p = split_frame(&f).unwrap();
        assert!(rewrite_sport(&mut f, &p));
        let (repr, _) = FrameRepr::parse(&f).unwrap();
        assert_eq!(repr.udp.src_port, ROCEV2_UDP_PORT);
        let fr = Frame::new_checked(&f).unwrap();
        assert!(fr.verify_icrc().is_ok());
    }

    #[test]
    fn udp_tx_cmsgs_carry_source_tos_ttl() {
        let p = split_frame(&ack_frame(v4(0))).unwrap();
        let mut buf = [0u8; 128];
        let n = tx_cmsgs(&p, &mut buf);
        let c: Vec<_> = sys::cmsgs(&buf, n)
            .map(|c| (c.kind, c.data.to_vec()))
            .collect();
        assert_eq!(c[0].0, libc::IP_PKTINFO);
        assert_eq!(c[0].1[4..8], [10, 0, 0, 1]);
        assert_eq!(
            c[1],
            (
                libc::IP_TOS,
                i32::from((26u8 << 2) | 3).to_ne_bytes().to_vec()
            )
        );
        assert_eq!(c[2], (libc::IP_TTL, 63i32.to_ne_bytes().to_vec()));
        // And the receive side reads the same kinds of messages back.
        let mut rx = [0u8; 128];
        let mut at = 0;
        let mut pi = [0u8; 12];
        pi[8..12].copy_from_slice(&[10, 0, 0, 2]);
        sys::push_cmsg(&mut rx, &mut at, libc::IPPROTO_IP, libc::IP_PKTINFO, &pi);
        sys::push_cmsg(&mut rx, &mut at, libc::IPPROTO_IP, libc::IP_TOS, &[0x6b]);
        sys::push_cmsg(
            &mut rx,
            &mut at,
            libc::IPPROTO_IP,
            libc::IP_TTL,
            &63i32.to_ne_bytes(),
        );
        assert_eq!(
            parse_rx_cmsgs(&rx, at, false),
            RxInfo {
                dst: Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))),
                tos: 0x6b,
                ttl: 63
            }
        );
    }
}
