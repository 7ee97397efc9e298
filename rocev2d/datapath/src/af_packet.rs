//! The AF_PACKET datapath: whole Ethernet frames on a raw packet socket bound to one
//! interface, batched with `recvmmsg`/`sendmmsg`. Needs `CAP_NET_RAW`.
//!
//! The core writes every byte of every frame (IPv4 Identification 0 with DF, as in every mode,
//! `docs/wire.md`), and every received byte reaches the core, so the ICRC is verified completely
//! whatever Identification the sender chose: this is the mode that interoperates with rdma_rxe
//! with full integrity.
//!
//! Set-up, in this order, so that no stray frame is queued: the socket is created with protocol
//! 0 (it receives nothing), gets the [`crate::filter::ROCE_FILTER`] socket filter,
//! `PACKET_IGNORE_OUTGOING` (our own transmissions are not looped back to us),
//! `PACKET_VNET_HDR` (a `virtio_net_hdr` before each frame, below), buffer sizes, and only then
//! is bound to the interface with `ETH_P_ALL`. Received frames pass
//! [`crate::filter::is_roce`] as well, and frames the kernel addressed to another host
//! (`PACKET_OTHERHOST`) are discarded.
//!
//! The kernel's own UDP stack also sees these frames; with nothing bound to port 4791 it would
//! answer each with ICMP port unreachable. The datapath therefore binds "guard" UDP sockets on
//! port 4791 with a drop-all socket filter: the kernel delivers into them and silently discards,
//! as with rdma_rxe's kernel socket. If the port is taken (another stack is running), a warning
//! is logged and nothing else changes.
//!
//! The virtio-net header (Linux `include/uapi/linux/virtio_net.h`, `struct virtio_net_hdr`,
//! 10 bytes in host byte order; `Documentation/networking/packet_mmap.rst`) tells two things
//! about each received frame, and is sent as ten zero bytes ("no offload") before each frame we
//! transmit, since the option applies to both directions of the socket:
//!
//! * **Checksum offload** (`VIRTIO_NET_HDR_F_NEEDS_CSUM`, set exactly when the kernel's
//!   `TP_STATUS_CSUMNOTREADY` would be): a frame sent over a local veth by the kernel's UDP
//!   stack (a peer in UDP mode) may arrive with its UDP checksum left unfinished; the core would
//!   count it as `bad_udp_checksum`, so its checksum field is zeroed first (IPv4 and IPv6
//!   RoCEv2 receivers accept zero; the ICRC masks the field) and `rx_csum_unfinished` counts it.
//! * **Segmentation offload** (`gso_type` `VIRTIO_NET_HDR_GSO_UDP_L4`, `gso_size`): a UDP-mode
//!   peer sending with `UDP_SEGMENT` over a veth hands the unsegmented buffer across whole, and
//!   it reaches this socket as one frame of up to 64 KiB. It is cut here as the kernel's software
//!   segmentation (`__udp_gso_segment()`, `inet_gso_segment()`/`ipv6_gso_segment()`) would cut
//!   it: each segment gets a copy of the Ethernet, IP and UDP headers and the next `gso_size`
//!   payload bytes (the last may be shorter); its IPv6 payload length or IPv4 total length, its
//!   UDP length, and for IPv4 its Identification (the buffer's plus the segment's index) and
//!   header checksum are rewritten. The UDP checksum of a GSO buffer is always left to the
//!   segmenter, so each segment's is zeroed as above. The segments are delivered in order, each
//!   as its own frame with the buffer's ECN, and counted in `rx_gso_split`; those that do not
//!   fit the caller's batch wait for the next receive. A segment longer than a slot, or a GSO
//!   type other than UDP, drops the buffer as `rx_truncated`.
//!
//! Deviations: no TPACKET_V3 ring yet (one copy per frame in each direction, two for a GSO
//! segment); 802.1Q tags stripped by the kernel are not reinserted (see [`crate::filter`]).

use crate::sys;
use crate::{Datapath, DatapathStats, Error, Interface, MAX_FRAME, RxBatch, RxMeta, TxBatch};
use rocev2_core::wire::ip::ipv4_header_checksum;
use rocev2_ipc::shm::copy_slice;
use socket2::{Domain, Protocol, Socket, Type};
use std::cell::Cell;
use std::collections::VecDeque;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::ops::Range;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

const BATCH: usize = 64;

/// `sizeof(struct virtio_net_hdr)`: flags, gso_type (one byte each), hdr_len, gso_size,
/// csum_start, csum_offset (16 bits each).
const VNET_HDR_LEN: usize = 10;
/// `virtio_net_hdr.flags`: the L4 checksum is left to whoever finishes the packet.
const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;
/// `virtio_net_hdr.gso_type`: not a GSO buffer.
const VIRTIO_NET_HDR_GSO_NONE: u8 = 0;
/// `virtio_net_hdr.gso_type`: UDP segmentation (`SKB_GSO_UDP_L4`, `UDP_SEGMENT`).
const VIRTIO_NET_HDR_GSO_UDP_L4: u8 = 5;
/// `virtio_net_hdr.gso_type` bit: TCP ECN (CWR) handling; never set for UDP, ignored.
const VIRTIO_NET_HDR_GSO_ECN: u8 = 0x80;

/// The longest frame a GSO buffer can make: Ethernet, one 802.1Q tag, an IPv6 header and the
/// most its 16-bit payload length can announce (an IPv4 buffer is shorter).
const MAX_GSO_FRAME: usize = 14 + 4 + 40 + u16::MAX as usize;
/// Bytes of a received frame past its slot's [`MAX_FRAME`]: they land in a per-entry overflow
/// area, so an ordinary frame still goes straight into its slot.
const OVERFLOW: usize = MAX_GSO_FRAME - MAX_FRAME;

/// The ten zero bytes sent before each frame: no checksum or segmentation offload.
static TX_VNET_HDR: [u8; VNET_HDR_LEN] = [0; VNET_HDR_LEN];

/// Options of the AF_PACKET datapath.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketConfig {
    /// Receive buffer (`SO_RCVBUFFORCE`).
    pub rcvbuf_bytes: usize,
    /// Send buffer (`SO_SNDBUFFORCE`).
    pub sndbuf_bytes: usize,
    /// Bind drop-all UDP sockets on port 4791 so the kernel stays quiet (see module docs).
    pub guard_udp_port: bool,
}

impl Default for PacketConfig {
    fn default() -> Self {
        PacketConfig {
            rcvbuf_bytes: 8 << 20,
            sndbuf_bytes: 4 << 20,
            guard_udp_port: true,
        }
    }
}

/// RoCEv2 frames on an AF_PACKET socket; see the module docs.
#[derive(Debug)]
pub struct PacketDatapath {
    sock: OwnedFd,
    _guards: Vec<Socket>,
    stats: DatapathStats,
    kernel_drops: Cell<u64>,
    /// [`BATCH`] areas of [`OVERFLOW`] bytes, one per `recvmmsg` entry, for the tail of a GSO
    /// buffer.
    overflow: Vec<u8>,
    /// Frames received but not yet handed over, oldest first, each a [`MAX_FRAME`]-long buffer
    /// and the frame's length: GSO segments, and the frames that arrived after them in the
    /// same `recvmmsg` batch (kept behind them, in order).
    pending: VecDeque<(Vec<u8>, usize)>,
    /// Buffers to build segments in, recycled from the slots pending frames were swapped into.
    /// Every buffer stays [`MAX_FRAME`] long, so a slot never needs zeroing again.
    spare: Vec<Vec<u8>>,
}

fn opt(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
    op: &'static str,
) -> Result<(), Error> {
    sys::setsockopt_int(fd, level, name, v).map_err(|e| Error::io(op, e))
}

/// A UDP socket on port 4791 that the kernel delivers into and a filter empties.
fn guard(v6: bool, iface: &str) -> io::Result<Socket> {
    let domain = if v6 { Domain::IPV6 } else { Domain::IPV4 };
    let s = Socket::new(domain, Type::DGRAM.cloexec(), Some(Protocol::UDP))?;
    sys::attach_filter(s.as_fd(), &crate::filter::DROP_ALL)?;
    let _ = s.bind_device(Some(iface.as_bytes()));
    let addr: SocketAddr = if v6 {
        s.set_only_v6(true)?;
        (Ipv6Addr::UNSPECIFIED, 4791).into()
    } else {
        (Ipv4Addr::UNSPECIFIED, 4791).into()
    };
    s.bind(&addr.into())?;
    Ok(s)
}

impl PacketDatapath {
    /// Opens a packet socket on `iface`; see the module docs for the order of set-up.
    ///
    /// # Errors
    /// [`Error::Io`] from `socket` (`EPERM` without `CAP_NET_RAW`: [`Error::is_permission`]),
    /// from the socket options or from `bind`.
    pub fn open(iface: &Interface, cfg: PacketConfig) -> Result<PacketDatapath, Error> {
        // SAFETY: plain system call; on success it returns a new descriptor we own.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if raw < 0 {
            return Err(Error::last("AF_PACKET socket"));
        }
        // SAFETY: `raw` was just returned by socket() and nothing else owns it.
        let sock = unsafe { OwnedFd::from_raw_fd(raw) };
        let fd = sock.as_fd();
        sys::attach_filter(fd, &crate::filter::ROCE_FILTER)
            .map_err(|e| Error::io("SO_ATTACH_FILTER", e))?;
        opt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            1,
            "PACKET_IGNORE_OUTGOING",
        )?;
        opt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_VNET_HDR,
            1,
            "PACKET_VNET_HDR",
        )?;
        for (force, plain, bytes) in [
            (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, cfg.rcvbuf_bytes),
            (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, cfg.sndbuf_bytes),
        ] {
            let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
            if sys::setsockopt_int(fd, libc::SOL_SOCKET, force, v).is_err() {
                let _ = sys::setsockopt_int(fd, libc::SOL_SOCKET, plain, v);
            }
        }
        // SAFETY: all-zero is a valid sockaddr_ll.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = i32::try_from(iface.index).map_err(|_| Error::BadInterface {
            name: iface.name.clone(),
            why: "interface index out of range",
        })?;
        // SAFETY: `sll` is a valid sockaddr_ll and the length passed is its size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(Error::last("AF_PACKET bind"));
        }
        let mut guards = Vec::new();
        if cfg.guard_udp_port {
            for v6 in [false, true] {
                if !iface.addrs.iter().any(|a| a.ip.is_ipv6() == v6) {
                    continue;
                }
                match guard(v6, &iface.name) {
                    Ok(s) => guards.push(s),
                    Err(e) => tracing::warn!(
                        error = %e, v6,
                        "cannot guard UDP port 4791; the kernel may answer RoCEv2 frames with ICMP"
                    ),
                }
            }
        }
        Ok(PacketDatapath {
            sock,
            _guards: guards,
            stats: DatapathStats::default(),
            kernel_drops: Cell::new(0),
            overflow: vec![0; BATCH * OVERFLOW],
            pending: VecDeque::new(),
            spare: Vec::new(),
        })
    }

    /// Hands pending frames over into `slots`, oldest first; returns how many.
    fn drain(&mut self, slots: &mut [Vec<u8>], meta: &mut [RxMeta]) -> usize {
        let mut out = 0;
        while out < slots.len().min(meta.len()) {
            let Some((mut f, len)) = self.pending.pop_front() else {
                break;
            };
            std::mem::swap(&mut slots[out], &mut f);
            self.spare.push(f);
            meta[out] = RxMeta {
                len,
                ecn: crate::filter::frame_ecn(slots[out].get(..len).unwrap_or_default()),
                datagram: None,
            };
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += len as u64;
            out += 1;
        }
        out
    }

    /// One `recvmmsg` into `slots` (each entry: the virtio-net header, the slot, the entry's
    /// overflow area); ordinary frames stay in their slots, GSO buffers are split into
    /// `pending` (module docs), and as much of `pending` as fits follows them. Returns how many
    /// slots were filled.
    fn receive(&mut self, slots: &mut [Vec<u8>], meta: &mut [RxMeta]) -> Result<usize, Error> {
        let n = slots.len().min(meta.len()).min(BATCH);
        let mut vnet = [[0u8; VNET_HDR_LEN]; BATCH];
        // SAFETY: all-zero is a valid value of these C structs (null pointers, zero lengths).
        let mut names: [libc::sockaddr_ll; BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut iovs: [[libc::iovec; 3]; BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for (i, over) in self.overflow.chunks_exact_mut(OVERFLOW).take(n).enumerate() {
            slots[i].resize(MAX_FRAME, 0);
            iovs[i] = [
                libc::iovec {
                    iov_base: vnet[i].as_mut_ptr().cast(),
                    iov_len: VNET_HDR_LEN,
                },
                libc::iovec {
                    iov_base: slots[i].as_mut_ptr().cast(),
                    iov_len: MAX_FRAME,
                },
                libc::iovec {
                    iov_base: over.as_mut_ptr().cast(),
                    iov_len: OVERFLOW,
                },
            ];
            let h = &mut msgs[i].msg_hdr;
            h.msg_name = (&mut names[i] as *mut libc::sockaddr_ll).cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            h.msg_iov = iovs[i].as_mut_ptr();
            h.msg_iovlen = 3;
        }
        // SAFETY: every pointer in `msgs[..n]` refers to `names`, `iovs`, `vnet`, a slot or a
        // disjoint area of `overflow`, all alive and unmoved until the call returns; each
        // iovec's length is that of the memory it points at.
        let got = unsafe { sys::recvmmsg(self.sock.as_raw_fd(), &mut msgs[..n], libc::MSG_TRUNC)? };
        let mut out = 0;
        for i in 0..got {
            // With MSG_TRUNC the length is the whole packet's, virtio-net header included.
            let len = (msgs[i].msg_len as usize).saturating_sub(VNET_HDR_LEN);
            if msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || len > MAX_GSO_FRAME {
                self.stats.rx_truncated += 1;
                continue;
            }
            let head_len = len.min(MAX_FRAME);
            if names[i].sll_pkttype == libc::PACKET_OTHERHOST
                || !crate::filter::is_roce(&slots[i][..head_len])
            {
                self.stats.rx_filtered += 1;
                continue;
            }
            let [flags, gso_type, _, _, gso_lo, gso_hi, ..] = vnet[i];
            let needs_csum = flags & VIRTIO_NET_HDR_F_NEEDS_CSUM != 0;
            match gso_type & !VIRTIO_NET_HDR_GSO_ECN {
                VIRTIO_NET_HDR_GSO_NONE if len <= MAX_FRAME => {
                    let frame = &mut slots[i][..len];
                    if needs_csum && crate::filter::zero_udp_checksum(frame) {
                        self.stats.rx_csum_unfinished += 1;
                    }
                    if self.pending.is_empty() {
                        meta[out] = RxMeta {
                            len,
                            ecn: crate::filter::frame_ecn(frame),
                            datagram: None,
                        };
                        slots.swap(out, i);
                        self.stats.rx_packets += 1;
                        self.stats.rx_bytes += len as u64;
                        out += 1;
                    } else {
                        let spare = self.spare.pop().unwrap_or_default();
                        let frame = std::mem::replace(&mut slots[i], spare);
                        self.pending.push_back((frame, len));
                    }
                }
                VIRTIO_NET_HDR_GSO_UDP_L4 => {
                    let tail = &self.overflow[i * OVERFLOW..][..len - head_len];
                    let gso_size = usize::from(u16::from_ne_bytes([gso_lo, gso_hi]));
                    match split_gso(
                        [&slots[i][..head_len], tail],
                        gso_size,
                        &mut self.spare,
                        &mut self.pending,
                    ) {
                        Some(k) => {
                            self.stats.rx_gso_split += k as u64;
                            if needs_csum {
                                self.stats.rx_csum_unfinished += k as u64;
                            }
                        }
                        None => self.stats.rx_truncated += 1,
                    }
                }
                _ => self.stats.rx_truncated += 1,
            }
        }
        // Every slot from `out` on is free: its frame was dropped, moved before `out`, or
        // queued behind a GSO buffer's segments.
        out += self.drain(&mut slots[out..n], &mut meta[out..n]);
        Ok(out)
    }
}

/// Cuts the GSO buffer `parts[0] ++ parts[1]` (one frame, its headers within `parts[0]`) into
/// segments of `gso_size` payload bytes as the kernel's software segmentation does (module
/// docs), appending each to `out` in a [`MAX_FRAME`]-long buffer taken from `spare` (or new),
/// with its length. Returns how many, or `None`
/// with nothing appended when the buffer is not an untagged IPv4/IPv6 UDP frame with a payload,
/// or a segment would be longer than a slot.
fn split_gso(
    parts: [&[u8]; 2],
    gso_size: usize,
    spare: &mut Vec<Vec<u8>>,
    out: &mut VecDeque<(Vec<u8>, usize)>,
) -> Option<usize> {
    let udp = crate::filter::udp_at(parts[0])?;
    let hdr_len = udp + 8;
    let headers = parts[0].get(..hdr_len)?;
    let total = parts[0].len() + parts[1].len();
    if gso_size == 0 || total <= hdr_len || hdr_len + gso_size > MAX_FRAME {
        return None;
    }
    let v4 = headers.get(12..14) == Some(&[0x08, 0x00]);
    let id = headers
        .get(18..20)
        .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
    let mut count = 0;
    let mut at = hdr_len;
    while at < total {
        let end = total.min(at + gso_size);
        let seg_len = hdr_len + (end - at);
        let mut buf = spare.pop().unwrap_or_default();
        buf.resize(MAX_FRAME, 0);
        let f = &mut buf[..seg_len];
        f[..hdr_len].copy_from_slice(headers);
        copy_from_parts(&mut f[hdr_len..], parts, at..end);
        if v4 {
            // RFC 791 §3.1: Total Length, Identification (`inet_gso_segment()` numbers UDP
            // segments id, id + 1, …), Header Checksum over the rewritten header.
            put_be16(f, 16, seg_len - 14);
            put_be16(f, 18, usize::from(id.wrapping_add(count as u16)));
            put_be16(f, 24, 0);
            let c = f.get(14..udp).map_or(0, ipv4_header_checksum);
            put_be16(f, 24, usize::from(c));
        } else {
            // RFC 8200 §3: Payload Length, everything after the fixed header.
            put_be16(f, 18, seg_len - udp);
        }
        // RFC 768: Length; the checksum is left to the segmenter in a GSO buffer, zero is
        // "none" (module docs).
        put_be16(f, udp + 4, seg_len - udp);
        put_be16(f, udp + 6, 0);
        out.push_back((buf, seg_len));
        count += 1;
        at = end;
    }
    Some(count)
}

/// Copies the bytes at `range` of the concatenation of `parts` to the start of `dst`.
fn copy_from_parts(dst: &mut [u8], [head, tail]: [&[u8]; 2], range: Range<usize>) {
    let split = head.len();
    let a = head
        .get(range.start.min(split)..range.end.min(split))
        .unwrap_or_default();
    let b = tail
        .get(range.start.max(split) - split..range.end.max(split) - split)
        .unwrap_or_default();
    if let Some(d) = dst.get_mut(..a.len()) {
        copy_slice(d, a);
    }
    if let Some(d) = dst.get_mut(a.len()..a.len() + b.len()) {
        copy_slice(d, b);
    }
}

/// Writes the low 16 bits of `v` big-endian at `at`, if the frame is that long.
fn put_be16(f: &mut [u8], at: usize, v: usize) {
    if let Some(b) = f.get_mut(at..at + 2) {
        b.copy_from_slice(&(v as u16).to_be_bytes());
    }
}

impl Datapath for PacketDatapath {
    fn name(&self) -> &'static str {
        "packet"
    }

    fn recv(&mut self, batch: &mut RxBatch) -> Result<usize, Error> {
        let (slots, meta) = batch.parts_mut();
        // Segments waiting from the last call go first; only with none left does the socket
        // get read, so the order of frames is the order they arrived in.
        let mut n = self.drain(slots, meta);
        if n == 0 {
            n = self.receive(slots, meta)?;
        }
        batch.set_len(n);
        Ok(n)
    }

    fn send(&mut self, batch: &mut TxBatch) -> Result<usize, Error> {
        let mut consumed = 0;
        while !batch.is_empty() {
            // SAFETY: all-zero is a valid iovec/mmsghdr (null pointers, zero lengths).
            let mut iovs: [[libc::iovec; 2]; BATCH] = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
            let mut bytes = [0usize; BATCH];
            let mut n = 0;
            for f in batch.frames().take(BATCH) {
                iovs[n] = [
                    libc::iovec {
                        iov_base: TX_VNET_HDR.as_ptr() as *mut libc::c_void,
                        iov_len: VNET_HDR_LEN,
                    },
                    libc::iovec {
                        iov_base: f.as_ptr() as *mut libc::c_void,
                        iov_len: f.len(),
                    },
                ];
                msgs[n].msg_hdr.msg_iov = iovs[n].as_mut_ptr();
                msgs[n].msg_hdr.msg_iovlen = 2;
                bytes[n] = f.len();
                n += 1;
            }
            // SAFETY: `msgs[..n]` point at `iovs`, which point at the static header and at
            // frames of `batch`; none moves before the call returns, and the kernel only reads
            // them. No address: the
            // socket's binding names the interface and protocol.
            let r = unsafe {
                libc::sendmmsg(
                    self.sock.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    n as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            match sys::settle_sendmmsg(r, &bytes[..n], batch, &mut self.stats) {
                Some(sent) => consumed += sent,
                None => break,
            }
        }
        Ok(consumed)
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    fn stats(&self) -> DatapathStats {
        // PACKET_STATISTICS resets the kernel's counters on each read, so accumulate.
        if let Ok(s) = sys::getsockopt(
            self.sock.as_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            libc::tpacket_stats {
                tp_packets: 0,
                tp_drops: 0,
            },
        ) {
            self.kernel_drops
                .set(self.kernel_drops.get() + u64::from(s.tp_drops));
        }
        DatapathStats {
            rx_kernel_drops: self.kernel_drops.get(),
            ..self.stats
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_frames::send_middle;
    use rocev2_core::wire::frame::{Ecn, FrameRepr, IpRepr};

    const SIZES: [usize; 4] = [1024, 1024, 1024, 500];

    /// Four SEND Middle frames of one QP (PSNs 10…13, payloads of `SIZES`) as the core builds
    /// them, and the GSO buffer a `UDP_SEGMENT` send of their UDP payloads would make: the
    /// first frame's headers, lengths covering everything, the UDP checksum left partial.
    fn gso_buffer(ip: IpRepr) -> (Vec<Vec<u8>>, Vec<u8>, usize) {
        let frames: Vec<Vec<u8>> = SIZES
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let payload: Vec<u8> = (0..n).map(|b| (b * 7 + i) as u8).collect();
                send_middle(ip, 49152, 10 + i as u32, &payload)
            })
            .collect();
        let udp = crate::filter::udp_at(&frames[0]).expect("UDP frame");
        let gso_size = frames[0].len() - udp - 8;
        let mut buf = frames[0][..udp + 8].to_vec();
        for f in &frames {
            buf.extend_from_slice(&f[udp + 8..]);
        }
        let total = buf.len();
        put_be16(&mut buf, udp + 4, total - udp);
        put_be16(&mut buf, udp + 6, 0x1234);
        if udp == 14 + 40 {
            put_be16(&mut buf, 18, total - udp);
        } else {
            put_be16(&mut buf, 16, total - 14);
        }
        (frames, buf, gso_size)
    }

    fn split(buf: &[u8], at: usize, gso_size: usize) -> Option<Vec<Vec<u8>>> {
        let (head, tail) = buf.split_at(at);
        let mut out = VecDeque::new();
        let mut spare = vec![vec![0xee; 3], Vec::new()];
        let n = split_gso([head, tail], gso_size, &mut spare, &mut out)?;
        assert_eq!(n, out.len());
        assert!(out.iter().all(|(f, _)| f.len() == MAX_FRAME));
        Some(out.into_iter().map(|(f, len)| f[..len].to_vec()).collect())
    }

    #[test]
    fn split_gso_ipv6_gives_the_frames_the_core_built() {
        let ip = crate::test_frames::v6(26, Ecn::Ect0, 0x12345);
        let (frames, buf, gso_size) = gso_buffer(ip);
        // Headers and payload wholly in the slot, and split across slot and overflow area
        // in the middle of the second segment.
        for at in [buf.len(), 54 + 8 + gso_size + 100] {
            let segs = split(&buf, at, gso_size).expect("a GSO buffer");
            assert_eq!(segs.len(), frames.len(), "split at {at}");
            for (i, (seg, orig)) in segs.iter().zip(&frames).enumerate() {
                // The core's frame with its UDP checksum zeroed: lengths rewritten, payload
                // and ICRC untouched.
                let mut want = orig.clone();
                assert!(crate::filter::zero_udp_checksum(&mut want));
                assert_eq!(seg, &want, "segment {i}, split at {at}");
                let (repr, payload) = FrameRepr::parse(seg).expect("ICRC verifies");
                assert_eq!(payload.len(), SIZES[i]);
                assert_eq!(repr.roce.bth.psn.value(), 10 + i as u32);
                assert_eq!(crate::filter::frame_ecn(seg), Ecn::Ect0);
            }
        }
    }

    #[test]
    fn split_gso_ipv4_numbers_identification_like_the_kernel() {
        let ip = crate::test_frames::v4(0, Ecn::NotEct);
        let (frames, buf, gso_size) = gso_buffer(ip);
        let segs = split(&buf, 700, gso_size).expect("a GSO buffer");
        assert_eq!(segs.len(), frames.len());
        for (i, (seg, orig)) in segs.iter().zip(&frames).enumerate() {
            assert_eq!(seg.len(), orig.len(), "segment {i}");
            assert_eq!(seg[16..18], orig[16..18], "total length of {i}");
            assert_eq!(
                seg[18..20],
                (i as u16).to_be_bytes(),
                "identification of {i}"
            );
            assert_eq!(
                ipv4_header_checksum(&seg[14..34]),
                0,
                "header checksum of {i}"
            );
            assert_eq!(seg[34..], orig[34..], "UDP header and payload of {i}");
        }
        // Segment 0 keeps the core's ID 0 and verifies; the others carry the IDs the kernel
        // writes, which the ICRC covers: why IPv4 GSO is never used (`udp.rs`).
        assert!(FrameRepr::parse(&segs[0]).is_ok());
        assert_eq!(
            FrameRepr::parse(&segs[1]).err(),
            Some(rocev2_core::wire::Error::BadIcrc)
        );
    }

    #[test]
    fn split_gso_rejects_what_it_cannot_cut() {
        let ip = crate::test_frames::v6(0, Ecn::NotEct, 0);
        let (_, buf, gso_size) = gso_buffer(ip);
        assert!(split(&buf, buf.len(), 0).is_none(), "segment size 0");
        assert!(
            split(&buf, buf.len(), MAX_FRAME).is_none(),
            "segments longer than a slot"
        );
        assert!(split(&buf[..62], 62, gso_size).is_none(), "no payload");
        assert!(
            split(&buf, 40, gso_size).is_none(),
            "headers not in the slot"
        );
        let mut arp = buf.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert!(split(&arp, arp.len(), gso_size).is_none(), "not IP");
        // The one-byte tail of a payload that does not divide evenly is its own segment.
        let segs = split(&buf[..62 + 2 * gso_size + 1], 100, gso_size).expect("GSO");
        assert_eq!(
            segs.iter().map(Vec::len).collect::<Vec<_>>(),
            [62 + gso_size, 62 + gso_size, 63]
        );
    }
}
