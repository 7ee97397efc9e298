//! The UDP-socket datapath: RoCEv2 over ordinary UDP sockets on port 4791, without any
//! privilege. The kernel writes and strips Ethernet, IP and UDP; this module moves UDP payloads
//! (BTH … ICRC) and their [`DatagramMeta`] between `sendmmsg`/`recvmmsg` and the core's datagram
//! entry points ([`rocev2_core::Endpoint::poll_transmit_datagram`],
//! [`rocev2_core::Endpoint::handle_datagram`]).
//!
//! Source: RoCEv2 Annex A17.4 and A17.8, and `docs/wire.md`, "ICRC in each datapath mode",
//! which derives from Linux's `ip_select_ident_segs()` why the ICRC the core computes (over an
//! IPv4 header with Identification 0 and DF) is what goes on the wire:
//!
//! * **Send.** Each payload's metadata becomes socket arguments: destination address and
//!   port in `msg_name`; source address in an `IP_PKTINFO`/`IPV6_PKTINFO` control message; DSCP
//!   and ECN in `IP_TOS`/`IPV6_TCLASS`; TTL in `IP_TTL`/`IPV6_HOPLIMIT`. The UDP source port is
//!   the port the sending socket is bound to, so there is one socket per source port in use
//!   (created on first use). Every socket is **unconnected** and has
//!   `IP_MTU_DISCOVER = IP_PMTUDISC_DO`, which makes Linux write DF and Identification 0,
//!   exactly the header the core's ICRC covers. A whole frame in the batch (a wrapper injecting
//!   frames) is taken apart with [`DatagramMeta::split_frame`] and sent the same way.
//! * **Send offload (GSO, [`UdpConfig::gso`], IPv6 only, on by default).** Consecutive
//!   payloads of a batch with identical metadata (addresses, ports, DSCP/ECN, hop limit) and
//!   equal size, the last possibly shorter, go as one `sendmmsg` entry with a `UDP_SEGMENT`
//!   control message (at most 64 datagrams, 65527 bytes); the kernel or the NIC cuts it at
//!   that size with the same headers, so each segment is the datagram the core built, ICRC
//!   included. **Never for IPv4**: `ip_select_ident_segs()` gives the unsegmented packet ID 0,
//!   and `inet_gso_segment()` then writes `id++` into each segment for UDP (only TCP has a
//!   fixed-ID GSO type), so segment *i* carries ID *i* and every segment but the first would
//!   fail the ICRC the core computed over ID 0. Computing each segment's ICRC for its ID
//!   instead would be verified by AF_XDP, AF_PACKET and rdma_rxe receivers but not by a
//!   UDP-mode receiver, which cannot see the ID and assumes 0, so two rocev2 peers in UDP mode
//!   would lose the ICRC's protection. Over a veth the kernel hands the unsegmented buffer to
//!   the peer namespace (veth offers `NETIF_F_GSO_UDP_L4`): a UDP-mode, rdma_rxe or AF_XDP
//!   receiver gets proper datagrams (the UDP stack segments for a socket without `UDP_GRO`;
//!   measured: AF_XDP receives each segment as a frame), and an AF_PACKET receiver gets the
//!   buffer whole with its segment size and cuts it itself (`af_packet.rs`; before it did, it
//!   dropped the oversized frame and the WRITE retried until `RetryExcErr`). Across a real
//!   link every receiver sees ordinary frames. A send the kernel
//!   refuses (`EIO` without checksum offload before Linux 6.11; later kernels segment in
//!   software) turns GSO off with a logged reason and is retried.
//! * **Receive offload (GRO, [`UdpConfig::gro`], on by default).** With `UDP_GRO` on the
//!   port-4791 sockets the kernel may return several datagrams in one buffer (GSO buffers that
//!   arrived whole, or datagrams the interface's GRO merged) with a `UDP_GRO` control message
//!   giving the segment size; the buffer is split at that size and every piece delivered with
//!   the buffer's metadata. That metadata is exact for each piece: `udp_gro_receive_segment()`
//!   merges only datagrams of the same ports, of the segment size except a shorter last one,
//!   with a non-zero checksum, and `inet_gro_receive()`/`ipv6_gro_receive()` flush on any
//!   difference in addresses, TOS/traffic class (so DSCP and ECN: a CE mark starts a new
//!   buffer), TTL/hop limit or DF. The IPv4 Identification may differ between pieces (incrementing
//!   IDs merge), but a UDP socket never reports it anyway (below). Receive buffers are 64 KiB
//!   per `recvmmsg` entry (an IP packet's length field bounds a coalesced buffer); datagrams
//!   that do not fit the caller's batch wait for the next receive.
//! * **Receive.** `recvmmsg` on the port-4791 sockets with `IP_PKTINFO`, `IP_RECVTOS` and
//!   `IP_RECVTTL` (IPv6: `IPV6_RECVPKTINFO`, `IPV6_RECVTCLASS`, `IPV6_RECVHOPLIMIT`) gives the
//!   addresses, ECN, TTL and interface; the datagram lands in a receive buffer with that
//!   metadata beside it, and the core checks the ICRC over the headers the metadata stands for:
//!   IPv4 with Identification 0 and DF, IPv6 (flow label masked), UDP. The core reads each
//!   datagram where `recvmmsg` left it in the receive buffers ([`Datapath::recv_with`]);
//!   [`Datapath::recv`] copies it into the caller's slot.
//!
//! Consequences, measured by the namespace tests: frames from rocev2 in any mode verify
//! completely; IPv6 frames from anyone verify; IPv4 frames from a sender using non-zero
//! Identifications (rdma_rxe: `__ip_select_ident()` per packet) fail the ICRC here and are
//! counted by the core as `icrc_error`. [`UdpConfig::accept_unverified_icrc`] accepts them
//! instead (`docs/wire.md`, option 2): the datapath checks the ICRC against the metadata itself
//! and, on a mismatch, writes the matching value so the core accepts the packet, counting it as
//! `icrc_unverifiable`. Such frames are protected only by the UDP checksum, if the sender
//! set one. The option changes nothing for IPv6 (always verifiable) and nothing in the core.
//!
//! Deviations: the IPv6 flow label is neither sent (the kernel picks one) nor received; it is
//! masked by the ICRC. 802.1Q tags in frames given whole are ignored: the route decides the
//! VLAN. MAC addresses are neither known nor needed.

use crate::sys::{self, Cmsg, Epoll};
use crate::{Datapath, DatapathStats, Error, Interface, MAX_FRAME, RxBatch, RxMeta, TxBatch};
use rocev2_core::wire::DatagramMeta;
use rocev2_core::wire::frame::{Ecn, ROCEV2_UDP_PORT};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

/// Frames per `recvmmsg`/`sendmmsg` call.
const BATCH: usize = 64;

/// Receive buffer per `recvmmsg` entry with `UDP_GRO`: a coalesced buffer is one IP packet's
/// payload as far as the kernel is concerned, so its 16-bit length field bounds it.
const GRO_BUF: usize = 1 << 16;

/// Most datagrams in one `UDP_SEGMENT` send: the kernel's `UDP_MAX_SEGMENTS` (64 up to
/// Linux 6.x; later kernels allow more, never fewer).
const GSO_MAX_SEGMENTS: usize = 64;

/// Most payload bytes in one `UDP_SEGMENT` send: the IPv6 payload length is 16 bits and
/// includes the 8-byte UDP header.
const GSO_MAX_BYTES: usize = u16::MAX as usize - 8;

/// Options of the UDP datapath.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpConfig {
    /// Accept IPv4 packets whose ICRC does not verify against the header a rocev2 sender writes
    /// (Identification 0, DF), counting them as `icrc_unverifiable`, instead of letting the core drop them as
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
    /// Take coalesced receive buffers (`UDP_GRO`) and split them; off, or refused by the
    /// kernel, each `recvmmsg` entry is one datagram.
    pub gro: bool,
    /// Send runs of equal-sized IPv6 datagrams to the same peer as one `UDP_SEGMENT` entry
    /// (GSO). Never used for IPv4: the kernel numbers the segments' Identification 0, 1, 2, …,
    /// which the ICRC covers (module docs). On by default: every receiver takes the
    /// unsegmented buffers a veth passes to the peer namespace (an AF_PACKET peer cuts them
    /// itself, `af_packet.rs`), and across a real link the kernel or the NIC segments.
    pub gso: bool,
}

impl Default for UdpConfig {
    fn default() -> Self {
        UdpConfig {
            accept_unverified_icrc: false,
            rcvbuf_bytes: 8 << 20,
            sndbuf_bytes: 4 << 20,
            max_source_ports: 4096,
            gro: true,
            gso: true,
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
    rx4: Option<Socket>,
    rx6: Option<Socket>,
    /// Both receive sockets, when there are two.
    epoll: Option<Epoll>,
    tx: HashMap<(bool, u16), TxSock>,
    iface: String,
    cfg: UdpConfig,
    rx: RxBuffers,
    /// `UDP_GRO` is on for every receive socket.
    gro: bool,
    /// IPv6 sends use `UDP_SEGMENT`.
    gso: bool,
    /// Why GRO or GSO is off although asked for (the kernel refused), for [`Self::describe`].
    refused: Vec<String>,
    stats: DatapathStats,
}

/// Where `recvmmsg` writes: [`BATCH`] entries of `entry` bytes, and the datagrams received
/// there that the caller has not taken yet.
#[derive(Debug)]
struct RxBuffers {
    buf: Vec<u8>,
    entry: usize,
    pending: std::collections::VecDeque<Pending>,
}

impl RxBuffers {
    /// Queues the datagrams of the `len` bytes `recvmmsg` wrote into entry `entry_index`: all of
    /// it, or its `UDP_GRO` segments, each with the buffer's metadata; a datagram longer than
    /// `room` is counted as truncated instead.
    fn queue(
        &mut self,
        entry_index: usize,
        len: usize,
        gro_segment: Option<usize>,
        meta: DatagramMeta,
        room: usize,
        stats: &mut DatapathStats,
    ) {
        let segs = gro_segments(len, gro_segment);
        let count = segs.clone().count();
        if count > 1 {
            stats.rx_gro_buffers += 1;
            stats.rx_gro_segments += count as u64;
        }
        for seg in segs {
            if seg.len() > room {
                stats.rx_truncated += 1;
                continue;
            }
            self.pending.push_back(Pending {
                at: entry_index * self.entry + seg.start,
                len: seg.len(),
                meta,
            });
        }
    }

    /// Hands up to `max` pending datagrams to `handle` where they lie in the buffers, oldest
    /// first, and returns how many; the rest wait for the next call. With `accept`
    /// (`accept_unverified_icrc`), an IPv4 ICRC that does not verify is rewritten
    /// (`icrc_unverifiable`).
    fn drain_with(
        &mut self,
        max: usize,
        accept: bool,
        stats: &mut DatapathStats,
        handle: &mut dyn FnMut(&[u8], RxMeta),
    ) -> usize {
        let mut out = 0;
        while out < max {
            let Some(p) = self.pending.pop_front() else {
                break;
            };
            let Some(dgram) = self.buf.get_mut(p.at..p.at + p.len) else {
                continue;
            };
            let dm = p.meta;
            if accept && dm.src.is_ipv4() && accept_unverified(&dm, dgram) {
                stats.icrc_unverifiable += 1;
            }
            stats.rx_packets += 1;
            stats.rx_bytes += dm.frame_len(p.len) as u64;
            handle(
                dgram,
                RxMeta {
                    len: p.len,
                    ecn: dm.ecn,
                    datagram: Some(dm),
                },
            );
            out += 1;
        }
        out
    }
}

/// One received datagram waiting in [`RxBuffers::buf`].
#[derive(Debug, Clone, Copy)]
struct Pending {
    at: usize,
    len: usize,
    meta: DatagramMeta,
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

/// Turns `UDP_GRO` on for every receive socket; on a refusal turns it back off on the others
/// (so every `recvmmsg` entry is one datagram) and records why.
fn enable_gro(socks: [&Option<Socket>; 2], refused: &mut Vec<String>) -> bool {
    let socks: Vec<&Socket> = socks.into_iter().flatten().collect();
    for (i, s) in socks.iter().enumerate() {
        if let Err(e) = sys::setsockopt_int(s.as_fd(), libc::SOL_UDP, sys::UDP_GRO, 1) {
            tracing::warn!(error = %e, "UDP_GRO refused; receiving one datagram per entry");
            refused.push(format!("UDP_GRO refused: {e}"));
            for t in &socks[..i] {
                let _ = sys::setsockopt_int(t.as_fd(), libc::SOL_UDP, sys::UDP_GRO, 0);
            }
            return false;
        }
    }
    true
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
        let mut refused = Vec::new();
        let gro = cfg.gro && enable_gro([&rx4, &rx6], &mut refused);
        // GSO matters for IPv6 only; `UDP_SEGMENT` 0 (no default segmentation) probes support.
        let gso = cfg.gso
            && rx6.as_ref().is_some_and(|s| {
                sys::setsockopt_int(s.as_fd(), libc::SOL_UDP, sys::UDP_SEGMENT, 0)
                    .map_err(|e| {
                        tracing::warn!(error = %e, "UDP_SEGMENT refused; sending one datagram per entry");
                        refused.push(format!("UDP_SEGMENT refused: {e}"));
                    })
                    .is_ok()
            });
        let entry = if gro { GRO_BUF } else { MAX_FRAME };
        let dp = UdpDatapath {
            rx4,
            rx6,
            epoll,
            tx: HashMap::new(),
            iface: iface.name.clone(),
            cfg,
            rx: RxBuffers {
                buf: vec![0; BATCH * entry],
                entry,
                pending: Default::default(),
            },
            gro,
            gso,
            refused,
            stats: DatapathStats::default(),
        };
        tracing::info!(iface = %iface.name, offloads = %dp.describe(), "UDP datapath open");
        Ok(dp)
    }

    /// The offloads in use, for logs and the datapath's reason line: `UDP_GRO on|off`,
    /// `UDP_SEGMENT IPv6 on|off` (IPv4 never; module docs), and why one asked for is off.
    pub fn describe(&self) -> String {
        let on = |b: bool| if b { "on" } else { "off" };
        let mut d = format!(
            "UDP_GRO {}, UDP_SEGMENT IPv6 {} (IPv4 never: per-segment IP IDs)",
            on(self.gro),
            on(self.gso)
        );
        for r in &self.refused {
            d.push_str("; ");
            d.push_str(r);
        }
        d
    }

    fn rx_socket(&self, v6: bool) -> Option<&Socket> {
        if v6 {
            self.rx6.as_ref()
        } else {
            self.rx4.as_ref()
        }
    }

    /// Receives one `recvmmsg` batch of the family into the receive buffers and queues its
    /// datagrams (a `UDP_GRO` buffer split at its segment size) as pending; returns how many
    /// buffers arrived. Only called with nothing pending: the queue points into the buffers.
    fn fill(&mut self, v6: bool, want: usize) -> Result<usize, Error> {
        debug_assert!(self.rx.pending.is_empty());
        let Some(sock) = self.rx_socket(v6) else {
            return Ok(0);
        };
        let fd = sock.as_raw_fd();
        let n = want.min(BATCH);
        if n == 0 {
            return Ok(0);
        }
        let entry = self.rx.entry;
        // SAFETY: these are plain C structs for which all-zero bytes are a valid value (null
        // pointers, zero lengths).
        let mut names: [libc::sockaddr_storage; BATCH] = unsafe { std::mem::zeroed() };
        let mut ctrl = [Cmsg::default(); BATCH];
        // SAFETY: as above.
        let mut iovs: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for (i, chunk) in self.rx.buf.chunks_exact_mut(entry).take(n).enumerate() {
            iovs[i] = libc::iovec {
                iov_base: chunk.as_mut_ptr().cast(),
                iov_len: entry,
            };
            let h = &mut msgs[i].msg_hdr;
            h.msg_name = (&mut names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = ctrl[i].0.as_mut_ptr().cast();
            h.msg_controllen = ctrl[i].0.len();
        }
        // SAFETY: `msgs[..n]` point into `names`, `iovs`, `ctrl` and `n` disjoint chunks of
        // the receive buffer, all alive and unmoved until the call returns.
        let got = unsafe { sys::recvmmsg(fd, &mut msgs[..n], 0)? };
        // A datagram fits when the frame that carried it would fit a slot, as in other modes.
        let room = MAX_FRAME - frame_headers(v6);
        for i in 0..got {
            let m = &msgs[i];
            let len = m.msg_len as usize;
            if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || len > entry {
                self.stats.rx_truncated += 1;
                continue;
            }
            let Some(src) = sockaddr_to_std(&names[i]) else {
                continue;
            };
            let info = parse_rx_cmsgs(&ctrl[i].0, m.msg_hdr.msg_controllen, v6);
            let Some(meta) = rx_meta(src, &info) else {
                continue;
            };
            self.rx
                .queue(i, len, info.gro_segment, meta, room, &mut self.stats);
        }
        Ok(got)
    }

    /// Hands up to `max` datagrams to `handle` in place: those still pending first, then
    /// fresh `recvmmsg` batches, alternating families by filling what is left after IPv4 with
    /// IPv6; what does not fit waits in `pending` for the next call. Returns how many.
    fn receive(
        &mut self,
        max: usize,
        handle: &mut dyn FnMut(&[u8], RxMeta),
    ) -> Result<usize, Error> {
        let accept = self.cfg.accept_unverified_icrc;
        let mut n = self.rx.drain_with(max, accept, &mut self.stats, handle);
        for v6 in [false, true] {
            while n < max && self.rx.pending.is_empty() {
                if self.fill(v6, max - n)? == 0 {
                    break;
                }
                n += self.rx.drain_with(max - n, accept, &mut self.stats, handle);
            }
        }
        Ok(n)
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
    ifindex: u32,
    /// `UDP_GRO`: the buffer holds datagrams of this size (the last may be shorter).
    gro_segment: Option<usize>,
}

fn parse_rx_cmsgs(buf: &[u8], len: usize, v6: bool) -> RxInfo {
    let mut info = RxInfo {
        dst: None,
        tos: 0,
        ttl: 64,
        ifindex: 0,
        gro_segment: None,
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
                info.ifindex = int(c.data).map_or(0, |i| i as u32);
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
                info.ifindex = c.data.get(16..).and_then(int).map_or(0, |i| i as u32);
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
            // The segment size of a coalesced buffer (an int).
            (libc::SOL_UDP, sys::UDP_GRO) => {
                info.gro_segment = int(c.data).and_then(|g| usize::try_from(g).ok());
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

/// The datagrams of a received buffer of `len` bytes: all of it, or with `UDP_GRO` consecutive
/// pieces of the segment size, the last possibly shorter (how the kernel coalesces them).
fn gro_segments(
    len: usize,
    segment: Option<usize>,
) -> impl Iterator<Item = std::ops::Range<usize>> + Clone {
    let seg = segment.filter(|&g| g > 0 && g < len).unwrap_or(len.max(1));
    // An empty datagram is still one (the core counts it as truncated).
    (0..len.max(1))
        .step_by(seg)
        .map(move |at| at..(at + seg).min(len))
}

/// Ethernet, IP and UDP header bytes of the untagged frame a datagram of the family stands for.
fn frame_headers(v6: bool) -> usize {
    let any = if v6 {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    };
    DatagramMeta {
        src: SocketAddr::new(any, 0),
        dst: SocketAddr::new(any, 0),
        dscp: 0,
        ecn: Ecn::NotEct,
        ttl: 0,
        ifindex: 0,
    }
    .frame_len(0)
}

/// The metadata of a datagram from `src`, from what its control messages said; `None` without
/// a destination address or with mixed families.
fn rx_meta(src: SocketAddr, info: &RxInfo) -> Option<DatagramMeta> {
    let dst = info.dst?;
    if src.is_ipv6() != dst.is_ipv6() {
        return None;
    }
    Some(DatagramMeta {
        src,
        dst: SocketAddr::new(dst, ROCEV2_UDP_PORT),
        dscp: info.tos >> 2,
        ecn: Ecn::from_bits(info.tos),
        ttl: info.ttl,
        ifindex: info.ifindex,
    })
}

/// With `accept_unverified_icrc`: if the ICRC does not verify against the metadata, overwrite
/// it with the value that does. Returns whether it was rewritten (a payload too short for an
/// ICRC is left for the core to count as truncated).
fn accept_unverified(meta: &DatagramMeta, transport: &mut [u8]) -> bool {
    meta.verify_icrc(transport).is_err() && meta.write_icrc(transport).is_ok()
}

/// One waiting entry of a [`TxBatch`], ready for `sendmsg`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TxParts {
    meta: DatagramMeta,
    /// Where the UDP payload lies in the entry (all of it unless it is a whole frame).
    payload: std::ops::Range<usize>,
    /// The frame's length, for `tx_bytes`: the same in every mode.
    frame_len: usize,
}

impl TxParts {
    /// The `i`-th waiting entry `bytes`: a UDP payload with its metadata, or a whole frame
    /// taken apart.
    fn of(batch: &TxBatch, i: usize, bytes: &[u8]) -> Option<TxParts> {
        match batch.datagram(i) {
            Some(meta) => Some(TxParts {
                meta,
                payload: 0..bytes.len(),
                frame_len: meta.frame_len(bytes.len()),
            }),
            None => DatagramMeta::split_frame(bytes)
                .ok()
                .map(|(meta, payload)| TxParts {
                    meta,
                    payload,
                    frame_len: bytes.len(),
                }),
        }
    }

    /// Source-port fallback: the entry leaves from port 4791, so its ICRC is recomputed for
    /// that port (the peer only sees a different port).
    fn fall_back_to_4791(&mut self, entry: &mut [u8]) -> bool {
        self.meta.src.set_port(ROCEV2_UDP_PORT);
        entry
            .get_mut(self.payload.clone())
            .is_some_and(|t| self.meta.write_icrc(t).is_ok())
    }
}

/// How `parts` (all from one socket) go out: lengths of consecutive runs sent as one entry.
/// With `gso`, IPv6 datagrams with identical metadata (addresses, ports, DSCP, ECN, hop
/// limit) and equal size, the last possibly shorter, share an entry with `UDP_SEGMENT`, up to
/// the kernel's limits; everything else, and all IPv4, goes one datagram per entry.
fn gso_groups(parts: &[TxParts], gso: bool) -> Vec<usize> {
    let mut groups = Vec::with_capacity(parts.len());
    let mut i = 0;
    while i < parts.len() {
        let first = &parts[i];
        let seg = first.payload.len();
        let mut len = 1;
        let mut total = seg;
        if gso && first.meta.src.is_ipv6() {
            for p in &parts[i + 1..] {
                let l = p.payload.len();
                if p.meta != first.meta
                    || l > seg
                    || l == 0
                    || len == GSO_MAX_SEGMENTS
                    || total + l > GSO_MAX_BYTES
                {
                    break;
                }
                len += 1;
                total += l;
                if l < seg {
                    break;
                }
            }
        }
        groups.push(len);
        i += len;
    }
    groups
}

/// The control messages that carry one datagram's source address, TOS and TTL.
fn tx_cmsgs(p: &TxParts, buf: &mut [u8]) -> usize {
    let mut at = 0;
    let m = &p.meta;
    let ttl = libc::c_int::from(m.ttl);
    let ifindex = libc::c_int::try_from(m.ifindex).unwrap_or(0).to_ne_bytes();
    match m.src.ip() {
        IpAddr::V4(s) => {
            // struct in_pktinfo: ipi_ifindex (0: the route decides), ipi_spec_dst = source.
            let mut pi = [0u8; 12];
            pi[..4].copy_from_slice(&ifindex);
            pi[4..8].copy_from_slice(&s.octets());
            sys::push_cmsg(buf, &mut at, libc::IPPROTO_IP, libc::IP_PKTINFO, &pi);
            sys::push_cmsg(
                buf,
                &mut at,
                libc::IPPROTO_IP,
                libc::IP_TOS,
                &libc::c_int::from(m.tos()).to_ne_bytes(),
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
            // struct in6_pktinfo: source, then ipi6_ifindex.
            let mut pi = [0u8; 20];
            pi[..16].copy_from_slice(&s.octets());
            pi[16..].copy_from_slice(&ifindex);
            sys::push_cmsg(buf, &mut at, libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, &pi);
            sys::push_cmsg(
                buf,
                &mut at,
                libc::IPPROTO_IPV6,
                libc::IPV6_TCLASS,
                &libc::c_int::from(m.tos()).to_ne_bytes(),
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

    fn carries_datagrams(&self) -> bool {
        true
    }

    fn recv(&mut self, batch: &mut RxBatch) -> Result<usize, Error> {
        batch.set_len(0);
        let room = batch.capacity();
        self.receive(room, &mut |dgram, m| {
            batch.push(dgram, m);
        })?;
        Ok(batch.len())
    }

    /// Hands each datagram to `handle` where `recvmmsg` left it (alone or split out of a
    /// `UDP_GRO` buffer), saving [`Datapath::recv`]'s copy into the batch.
    fn recv_with(
        &mut self,
        batch: &mut RxBatch,
        handle: &mut dyn FnMut(&[u8], RxMeta),
    ) -> Result<usize, Error> {
        self.receive(batch.capacity(), handle)
    }

    fn send(&mut self, batch: &mut TxBatch) -> Result<usize, Error> {
        let mut consumed = 0;
        while !batch.is_empty() {
            // Take a run of entries that leave from the same socket.
            let mut parts: Vec<TxParts> = Vec::with_capacity(BATCH);
            let mut key = None;
            let mut bad = false;
            for (i, f) in batch.frames().take(BATCH).enumerate() {
                match TxParts::of(batch, i, f) {
                    Some(p) => {
                        let k = (p.meta.src.is_ipv6(), p.meta.src.port());
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
                    for (i, p) in parts.iter_mut().enumerate() {
                        if let Some(f) = batch.frame_mut(i) {
                            p.fall_back_to_4791(f);
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
            // Runs of datagrams that leave as one entry (GSO), in order.
            let groups = gso_groups(&parts, self.gso);
            let n = parts.len();
            let g = groups.len();
            let mut names = Vec::with_capacity(g);
            let mut ctrl = vec![Cmsg::default(); g];
            let mut ctrl_len = Vec::with_capacity(g);
            let mut first = 0;
            for (k, &len) in groups.iter().enumerate() {
                let p = &parts[first];
                names.push(SockAddr::from(p.meta.dst));
                let mut at = tx_cmsgs(p, &mut ctrl[k].0);
                if len > 1 {
                    let seg = u16::try_from(p.payload.len()).unwrap_or(u16::MAX);
                    sys::push_cmsg(
                        &mut ctrl[k].0,
                        &mut at,
                        libc::SOL_UDP,
                        sys::UDP_SEGMENT,
                        &seg.to_ne_bytes(),
                    );
                }
                ctrl_len.push(at);
                first += len;
            }
            // SAFETY: all-zero is a valid iovec/mmsghdr (null pointers, zero lengths).
            let mut iovs: Vec<libc::iovec> =
                (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
            // SAFETY: as above.
            let mut msgs: Vec<libc::mmsghdr> =
                (0..g).map(|_| unsafe { std::mem::zeroed() }).collect();
            let mut bytes = Vec::with_capacity(n);
            for (i, f) in batch.frames().take(n).enumerate() {
                let p = &parts[i];
                let payload = &f[p.payload.clone()];
                bytes.push(p.frame_len);
                iovs[i] = libc::iovec {
                    iov_base: payload.as_ptr() as *mut libc::c_void,
                    iov_len: payload.len(),
                };
            }
            let mut first = 0;
            for (k, &len) in groups.iter().enumerate() {
                let h = &mut msgs[k].msg_hdr;
                // The kernel only reads the address of a send.
                h.msg_name = names[k].as_ptr() as *mut libc::c_void;
                h.msg_namelen = names[k].len();
                h.msg_iov = iovs[first..].as_mut_ptr();
                h.msg_iovlen = len;
                h.msg_control = ctrl[k].0.as_mut_ptr().cast();
                h.msg_controllen = ctrl_len[k];
                first += len;
            }
            // SAFETY: every pointer in `msgs` refers to `names`, `iovs` (each entry's run of
            // `msg_iovlen` iovecs lies inside it), `ctrl` or a frame of `batch`, none of which
            // moves or is freed before the call returns; the kernel only reads the payloads.
            let r = unsafe {
                libc::sendmmsg(fd, msgs.as_mut_ptr(), g as libc::c_uint, libc::MSG_DONTWAIT)
            };
            if r < 0 && groups[0] > 1 {
                let e = io::Error::last_os_error();
                if !sys::would_block(&e) {
                    // EIO without checksum offload, EINVAL on a kernel without UDP_SEGMENT:
                    // send one datagram per entry from now on and retry.
                    tracing::warn!(error = %e, "UDP_SEGMENT send refused; GSO off");
                    self.refused.push(format!("UDP_SEGMENT send refused: {e}"));
                    self.gso = false;
                    continue;
                }
            }
            // Entries taken → datagrams taken.
            let entries = usize::try_from(r).unwrap_or(0).min(g);
            for &len in groups[..entries].iter().filter(|&&l| l > 1) {
                self.stats.tx_gso_sends += 1;
                self.stats.tx_gso_segments += len as u64;
            }
            let sent = if r < 0 {
                r
            } else {
                groups[..entries].iter().sum::<usize>() as libc::c_int
            };
            match sys::settle_sendmmsg(sent, &bytes, batch, &mut self.stats) {
                Some(sent) => consumed += sent,
                None => break,
            }
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
    use rocev2_core::wire::frame::IpRepr;
    use rocev2_core::wire::{Error as WireError, RocePacket, RoceRepr};

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

    /// Sends the frame whole through a one-entry batch, as `send` takes it apart.
    fn parts(frame: &[u8]) -> TxParts {
        let mut b = TxBatch::new(1);
        assert!(b.push(frame));
        TxParts::of(&b, 0, frame).unwrap()
    }

    /// What the UDP datapath does to a frame end to end, without sockets: the payload `sendmsg`
    /// would get, and the metadata `recvmsg` would report for it.
    fn through_udp(frame: &[u8]) -> (TxParts, DatagramMeta, Vec<u8>) {
        let p = parts(frame);
        let info = RxInfo {
            dst: Some(p.meta.dst.ip()),
            tos: p.meta.tos(),
            ttl: p.meta.ttl,
            ifindex: 7,
            gro_segment: None,
        };
        let m = rx_meta(p.meta.src, &info).unwrap();
        (p.clone(), m, frame[p.payload].to_vec())
    }

    /// What the core does with a received datagram up to the demux.
    fn core_accepts(m: &DatagramMeta, payload: &[u8]) -> Result<RoceRepr, WireError> {
        let packet = RocePacket::new_checked(payload)?;
        m.verify_icrc(payload)?;
        RoceRepr::parse(&packet)
    }

    #[test]
    fn udp_datagram_ipv4_verifies_like_the_core_frame() {
        let orig = ack_frame(v4(0));
        let (p, m, payload) = through_udp(&orig);
        assert_eq!(p.meta.src.port(), 49152);
        assert_eq!(p.meta.tos(), (26 << 2) | 3, "DSCP and ECN go into IP_TOS");
        assert_eq!(p.meta.ttl, 63);
        assert_eq!(p.frame_len, orig.len());
        assert_eq!(m.frame_len(payload.len()), orig.len());
        assert_eq!(
            payload,
            orig[42..],
            "the payload is the frame's UDP payload"
        );
        assert!(core_accepts(&m, &payload).is_ok(), "the core accepts it");
        assert_eq!((m.ecn, m.ifindex), (Ecn::Ce, 7));
    }

    #[test]
    fn udp_datagram_ipv6_verifies_without_flow_label() {
        let ip = IpRepr::V6 {
            src: "fd00::1".parse().unwrap(),
            dst: "fd00::2".parse().unwrap(),
            dscp: 10,
            ecn: Ecn::Ect0,
            flow_label: 0x12345,
            hop_limit: 9,
        };
        let (_, m, payload) = through_udp(&ack_frame(ip));
        assert!(
            core_accepts(&m, &payload).is_ok(),
            "ICRC masks flow label and checksum"
        );
        assert_eq!((m.dscp, m.ecn, m.ttl), (10, Ecn::Ect0, 9));
    }

    #[test]
    fn udp_nonzero_ip_id_fails_icrc_unless_accepted() {
        // An rxe-like sender: Identification 0x1234. Its ICRC covers that ID, which recvmsg
        // cannot report, so the datagram fails the ICRC.
        let (_, m, mut payload) = through_udp(&ack_frame(v4(0x1234)));
        assert_eq!(core_accepts(&m, &payload).err(), Some(WireError::BadIcrc));
        assert!(accept_unverified(&m, &mut payload), "rewritten");
        assert!(core_accepts(&m, &payload).is_ok());
        assert!(
            !accept_unverified(&m, &mut payload),
            "now verifies: left alone"
        );
        let (_, m, good) = through_udp(&ack_frame(v4(0)));
        let mut g = good.clone();
        assert!(!accept_unverified(&m, &mut g));
        assert_eq!(g, good);
        assert!(
            !accept_unverified(&m, &mut [0; 15]),
            "too short: the core's"
        );
    }

    #[test]
    fn udp_rx_meta_refuses_mixed_families_and_no_destination() {
        let info = RxInfo {
            dst: Some("fd00::1".parse().unwrap()),
            tos: 0,
            ttl: 1,
            ifindex: 0,
            gro_segment: None,
        };
        assert_eq!(rx_meta("10.0.0.1:1".parse().unwrap(), &info), None);
        let info = RxInfo { dst: None, ..info };
        assert_eq!(rx_meta("[fd00::2]:1".parse().unwrap(), &info), None);
    }

    #[test]
    fn udp_batch_entries_are_payloads_or_frames() {
        let f = ack_frame(v4(0));
        let (meta, payload) = DatagramMeta::split_frame(&f).unwrap();
        let mut b = TxBatch::new(2);
        assert!(b.push_datagram_with(|buf| {
            buf.clear();
            buf.extend_from_slice(&f[payload.clone()]);
            Some((Some(meta), payload.len()))
        }));
        assert!(b.push(&f));
        let entries: Vec<_> = b.frames().map(<[u8]>::to_vec).collect();
        let (d, w) = (
            TxParts::of(&b, 0, &entries[0]).unwrap(),
            TxParts::of(&b, 1, &entries[1]).unwrap(),
        );
        assert_eq!((d.meta, d.frame_len), (w.meta, w.frame_len));
        assert_eq!(entries[0][d.payload], entries[1][w.payload]);
        assert!(
            TxParts::of(&TxBatch::new(1), 0, &f[..30]).is_none(),
            "a frame too short to take apart is malformed"
        );
    }

    fn v6() -> IpRepr {
        crate::test_frames::v6(10, Ecn::Ect0, 0)
    }

    /// The UDP payloads of SEND Middle frames with the given payload sizes, PSN 1, 2, ….
    fn payloads(ip: IpRepr, sizes: &[usize]) -> Vec<Vec<u8>> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let body: Vec<u8> = (0..n).map(|b| (b * 7 + i) as u8).collect();
                let f = crate::test_frames::send_middle(ip, 49152, i as u32 + 1, &body);
                f[parts(&f).payload].to_vec()
            })
            .collect()
    }

    #[test]
    fn udp_gro_buffer_splits_into_verified_datagrams() {
        // What recvmsg returns for three coalesced datagrams: their payloads back to back, and
        // a UDP_GRO message giving the first one's size (the last is shorter).
        let dgrams = payloads(v6(), &[1024, 1024, 100]);
        let buf: Vec<u8> = dgrams.concat();
        let mut ctrl = [0u8; 128];
        let mut at = 0;
        let mut pi = [0u8; 20];
        pi[..16].copy_from_slice(&"fd00::2".parse::<Ipv6Addr>().unwrap().octets());
        sys::push_cmsg(
            &mut ctrl,
            &mut at,
            libc::IPPROTO_IPV6,
            libc::IPV6_PKTINFO,
            &pi,
        );
        sys::push_cmsg(
            &mut ctrl,
            &mut at,
            libc::IPPROTO_IPV6,
            libc::IPV6_TCLASS,
            &i32::from((10u8 << 2) | 2).to_ne_bytes(),
        );
        let seg = dgrams[0].len() as i32;
        sys::push_cmsg(
            &mut ctrl,
            &mut at,
            libc::SOL_UDP,
            sys::UDP_GRO,
            &seg.to_ne_bytes(),
        );
        let info = parse_rx_cmsgs(&ctrl, at, true);
        assert_eq!(info.gro_segment, Some(dgrams[0].len()));
        let m = rx_meta("[fd00::1]:49152".parse().unwrap(), &info).unwrap();
        let got: Vec<&[u8]> = gro_segments(buf.len(), info.gro_segment)
            .map(|r| &buf[r])
            .collect();
        assert_eq!(got.len(), 3);
        for (i, d) in got.iter().enumerate() {
            assert_eq!(*d, &dgrams[i][..], "datagram {i} comes back whole");
            let r = core_accepts(&m, d).expect("each datagram verifies with the buffer's metadata");
            assert_eq!(r.bth.psn.value(), i as u32 + 1);
        }
        // A buffer without the message, or of one segment, is one datagram.
        assert_eq!(gro_segments(500, None).collect::<Vec<_>>(), vec![0..500]);
        assert_eq!(
            gro_segments(500, Some(500)).collect::<Vec<_>>(),
            vec![0..500]
        );
        assert_eq!(gro_segments(500, Some(0)).collect::<Vec<_>>(), vec![0..500]);
        assert_eq!(gro_segments(0, Some(8)).collect::<Vec<_>>(), vec![0..0]);
        // Cut at the wrong size, the datagrams fail the ICRC: the split is what makes them verify.
        let wrong = &buf[..dgrams[0].len() - 4];
        assert!(core_accepts(&m, wrong).is_err());
    }

    /// The pending datagrams copied into `slots`, as [`Datapath::recv`] does.
    fn drain(
        rx: &mut RxBuffers,
        slots: &mut [Vec<u8>],
        meta: &mut [RxMeta],
        st: &mut DatapathStats,
    ) -> usize {
        let mut n = 0;
        rx.drain_with(slots.len(), false, st, &mut |d, m| {
            slots[n] = d.to_vec();
            meta[n] = m;
            n += 1;
        })
    }

    #[test]
    fn udp_gro_buffer_larger_than_the_batch_waits_for_the_next_receive() {
        // Entry 1 of the receive buffers holds three coalesced datagrams; the caller has two
        // slots, then two more.
        let dgrams = payloads(v6(), &[1024, 1024, 100]);
        let entry = 4096;
        let mut rx = RxBuffers {
            buf: vec![0; 2 * entry],
            entry,
            pending: Default::default(),
        };
        let coalesced = dgrams.concat();
        rx.buf[entry..entry + coalesced.len()].copy_from_slice(&coalesced);
        let m = DatagramMeta::split_frame(&crate::test_frames::send_middle(v6(), 49152, 1, &[]))
            .unwrap()
            .0;
        let mut st = DatapathStats::default();
        rx.queue(1, coalesced.len(), Some(dgrams[0].len()), m, 9000, &mut st);
        assert_eq!((st.rx_gro_buffers, st.rx_gro_segments), (1, 3));
        let mut slots = vec![Vec::new(); 2];
        let mut meta = vec![RxMeta::default(); 2];
        assert_eq!(drain(&mut rx, &mut slots, &mut meta, &mut st), 2);
        assert_eq!(rx.pending.len(), 1, "the third waits");
        let mut got: Vec<Vec<u8>> = (0..2).map(|i| slots[i][..meta[i].len].to_vec()).collect();
        assert_eq!(drain(&mut rx, &mut slots, &mut meta, &mut st), 1);
        got.push(slots[0][..meta[0].len].to_vec());
        assert_eq!(got, dgrams, "in order and whole");
        for (i, d) in got.iter().enumerate() {
            assert_eq!(meta[0].datagram, Some(m));
            let r = core_accepts(&m, d).expect("verifies");
            assert_eq!(r.bth.psn.value(), i as u32 + 1);
        }
        assert_eq!(st.rx_packets, 3);
        assert_eq!(drain(&mut rx, &mut slots, &mut meta, &mut st), 0);
        // A segment longer than a slot's room is counted, not delivered.
        rx.queue(1, coalesced.len(), Some(dgrams[0].len()), m, 1000, &mut st);
        assert_eq!(st.rx_truncated, 2);
        assert_eq!(rx.pending.len(), 1);
    }

    /// Parts for payload sizes with the given metadata changes applied per entry.
    fn tx_parts(ip: IpRepr, sizes: &[usize]) -> Vec<TxParts> {
        sizes
            .iter()
            .map(|&n| {
                let f = crate::test_frames::send_middle(ip, 49152, 1, &vec![0; n]);
                parts(&f)
            })
            .collect()
    }

    #[test]
    fn udp_gso_groups_equal_ipv6_runs_only() {
        let six = tx_parts(v6(), &[1024, 1024, 1024, 100, 1024, 1024]);
        // A shorter datagram ends its run; the next starts a new one.
        assert_eq!(gso_groups(&six, true), vec![4, 2]);
        assert_eq!(gso_groups(&six, false), vec![1; 6], "off: one per entry");
        // A larger datagram cannot follow a run (segments are cut at the first one's size).
        let grow = tx_parts(v6(), &[100, 1024, 1024]);
        assert_eq!(gso_groups(&grow, true), vec![1, 2]);
        // Any metadata difference (here ECN: a CE-marked copy) splits the run.
        let mut ce = tx_parts(v6(), &[1024, 1024, 1024]);
        ce[1].meta.ecn = Ecn::Ce;
        assert_eq!(gso_groups(&ce, true), vec![1, 1, 1]);
        let mut other = tx_parts(v6(), &[1024, 1024]);
        other[1].meta.dst.set_ip("fd00::3".parse().unwrap());
        assert_eq!(gso_groups(&other, true), vec![1, 1]);
        // IPv4 never: the kernel would number the segments' IP IDs 0, 1, 2, ….
        assert_eq!(
            gso_groups(&tx_parts(v4(0), &[1024; 3]), true),
            vec![1, 1, 1]
        );
        // The kernel's limits: 64 segments, 65527 payload bytes.
        assert_eq!(gso_groups(&tx_parts(v6(), &[256; 70]), true), vec![64, 6]);
        let big = tx_parts(v6(), &[4096; 20]);
        let seg = big[0].payload.len();
        let per = GSO_MAX_BYTES / seg;
        assert_eq!(gso_groups(&big, true), vec![per, 20 - per]);
    }

    #[test]
    fn udp_sport_fallback_keeps_icrc_valid() {
        let mut f = ack_frame(v4(0));
        let mut p = parts(&f);
        assert!(p.fall_back_to_4791(&mut f));
        assert_eq!(p.meta.src.port(), ROCEV2_UDP_PORT);
        assert!(core_accepts(&p.meta, &f[p.payload.clone()]).is_ok());
    }

    #[test]
    fn udp_tx_cmsgs_carry_source_tos_ttl() {
        let p = parts(&ack_frame(v4(0)));
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
                ttl: 63,
                ifindex: 0,
                gro_segment: None,
            }
        );
    }
}
