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
//! `PACKET_AUXDATA` (checksum status), buffer sizes, and only then is bound to the interface
//! with `ETH_P_ALL`. Received frames pass [`crate::filter::is_roce`] as well, and frames the
//! kernel addressed to another host (`PACKET_OTHERHOST`) are discarded.
//!
//! The kernel's own UDP stack also sees these frames; with nothing bound to port 4791 it would
//! answer each with ICMP port unreachable. The datapath therefore binds "guard" UDP sockets on
//! port 4791 with a drop-all socket filter: the kernel delivers into them and silently discards,
//! as with rdma_rxe's kernel socket. If the port is taken (another stack is running), a warning
//! is logged and nothing else changes.
//!
//! Checksum offload: a frame sent over a local veth by the kernel's UDP stack (a peer in UDP
//! mode) may arrive with its UDP checksum left unfinished (`TP_STATUS_CSUMNOTREADY`); the core
//! would count it as `bad_udp_checksum`, so its checksum field is zeroed first (IPv4 and IPv6
//! RoCEv2 receivers accept zero; the ICRC masks the field) and `rx_csum_unfinished` counts it.
//!
//! Deviations: no TPACKET_V3 ring yet (one copy per frame in each direction); 802.1Q tags
//! stripped by the kernel are not reinserted (see [`crate::filter`]).

use crate::sys::{self, Cmsg};
use crate::{Datapath, DatapathStats, Error, Interface, MAX_FRAME, RxBatch, RxMeta, TxBatch};
use socket2::{Domain, Protocol, Socket, Type};
use std::cell::Cell;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

const BATCH: usize = 64;

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
            libc::PACKET_AUXDATA,
            1,
            "PACKET_AUXDATA",
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
        })
    }
}

impl Datapath for PacketDatapath {
    fn name(&self) -> &'static str {
        "packet"
    }

    fn recv(&mut self, batch: &mut RxBatch) -> Result<usize, Error> {
        let (slots, meta) = batch.parts_mut();
        let n = slots.len().min(meta.len()).min(BATCH);
        // SAFETY: all-zero is a valid value of these C structs (null pointers, zero lengths).
        let mut names: [libc::sockaddr_ll; BATCH] = unsafe { std::mem::zeroed() };
        let mut ctrl = [Cmsg::default(); BATCH];
        // SAFETY: as above.
        let mut iovs: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for i in 0..n {
            slots[i].resize(MAX_FRAME, 0);
            iovs[i] = libc::iovec {
                iov_base: slots[i].as_mut_ptr().cast(),
                iov_len: MAX_FRAME,
            };
            let h = &mut msgs[i].msg_hdr;
            h.msg_name = (&mut names[i] as *mut libc::sockaddr_ll).cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            h.msg_iov = &mut iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = ctrl[i].0.as_mut_ptr().cast();
            h.msg_controllen = ctrl[i].0.len();
        }
        // SAFETY: every pointer in `msgs[..n]` refers to `names`, `iovs`, `ctrl` or a slot, all
        // alive and unmoved until the call returns; each iovec covers one whole slot.
        let r = unsafe {
            libc::recvmmsg(
                self.sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            batch.set_len(0);
            return if sys::would_block(&e) {
                Ok(0)
            } else {
                Err(Error::io("recvmmsg", e))
            };
        }
        let mut out = 0;
        for i in 0..(r as usize).min(n) {
            let len = msgs[i].msg_len as usize;
            if msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || len > MAX_FRAME {
                self.stats.rx_truncated += 1;
                continue;
            }
            let frame = &mut slots[i][..len];
            if names[i].sll_pkttype == libc::PACKET_OTHERHOST || !crate::filter::is_roce(frame) {
                self.stats.rx_filtered += 1;
                continue;
            }
            let status = sys::cmsgs(&ctrl[i].0, msgs[i].msg_hdr.msg_controllen)
                .find(|c| c.level == libc::SOL_PACKET && c.kind == libc::PACKET_AUXDATA)
                .and_then(|c| c.data.get(..4).and_then(|b| b.try_into().ok()))
                .map_or(0, u32::from_ne_bytes);
            if status & libc::TP_STATUS_CSUMNOTREADY != 0 && crate::filter::zero_udp_checksum(frame)
            {
                self.stats.rx_csum_unfinished += 1;
            }
            meta[i] = RxMeta {
                len,
                ecn: crate::filter::frame_ecn(frame),
                datagram: None,
            };
            if out != i {
                slots.swap(out, i);
                meta.swap(out, i);
            }
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += len as u64;
            out += 1;
        }
        batch.set_len(out);
        Ok(out)
    }

    fn send(&mut self, batch: &mut TxBatch) -> Result<usize, Error> {
        let mut consumed = 0;
        while !batch.is_empty() {
            // SAFETY: all-zero is a valid iovec/mmsghdr (null pointers, zero lengths).
            let mut iovs: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
            let mut bytes = [0usize; BATCH];
            let mut n = 0;
            for f in batch.frames().take(BATCH) {
                iovs[n] = libc::iovec {
                    iov_base: f.as_ptr() as *mut libc::c_void,
                    iov_len: f.len(),
                };
                msgs[n].msg_hdr.msg_iov = &mut iovs[n];
                msgs[n].msg_hdr.msg_iovlen = 1;
                bytes[n] = f.len();
                n += 1;
            }
            // SAFETY: `msgs[..n]` point at `iovs`, which point at frames of `batch`; neither
            // moves before the call returns, and the kernel only reads them. No address: the
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
