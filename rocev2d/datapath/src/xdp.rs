//! The AF_XDP datapath: whole Ethernet frames through AF_XDP sockets, one per receive queue of
//! the interface, with the steering XDP program (`rocev2-ebpf`, `steer`) handing them RoCEv2
//! frames and passing everything else (ARP, ND, other traffic) to the kernel. Needs
//! `CAP_NET_ADMIN`, `CAP_BPF`/`CAP_SYS_ADMIN` and `CAP_NET_RAW` (in practice: root).
//!
//! Source: Linux `Documentation/networking/af_xdp.rst` (rings, `XDP_USE_SG`, `need_wakeup`,
//! copy and zero-copy binds) and `docs/datapath.md`, "AF_XDP details".
//!
//! Per receive queue in use (`/sys/class/net/IF/queues/rx-*`; without that sysfs, every queue
//! netlink's `IFLA_NUM_RX_QUEUES` counts that `bind` accepts) the datapath makes one UMEM of
//! [`XdpConfig::rx_frames`] + [`XdpConfig::tx_frames`] page-sized chunks (an anonymous mapping)
//! and one socket with its fill, completion, rx and tx rings (via the `xdpilone` crate), binds
//! it to the queue — first asking for **zero-copy**, then, if the driver refuses, in **copy
//! mode** (veth always copies; the refusal is logged and named by [`XdpDatapath::describe`]) —
//! and registers it in the program's `XSKMAP` at that queue's index. The receive chunks are lent
//! to the kernel through the fill ring; the others, in slots of three adjacent chunks, are our
//! transmit pool. The program is attached in driver (native) mode, or in generic (skb) mode if
//! the driver has no XDP; both choices are logged and kept in [`XdpDatapath::describe`].
//!
//! Frames larger than a chunk (jumbo frames: a 4096-byte IBA MTU needs about 4.2 kB) travel as
//! several descriptors chained by `XDP_PKT_CONTD` (multi-buffer AF_XDP, `XDP_USE_SG`; the program
//! is loaded with `xdp.frags`).
//!
//! Receiving ([`Datapath::recv_with`], what the [`crate::Driver`] calls) hands a frame that fits
//! one chunk to the core **inside its UMEM chunk**, so the core's placement into the memory
//! region is the only copy in user space, and returns the chunks to the fill ring once the core
//! has handled the whole batch; a frame of several chunks is gathered into one buffer first (a
//! second copy, see below). Sending ([`Datapath::transmit_with`]) lets the core build each frame
//! **straight into a free slot** of the transmit pool (the slot is its [`FrameBuf`]; building
//! it is the only copy, MR → UMEM). A slot is three adjacent chunks (room for [`MAX_FRAME`]), so
//! a frame longer than a chunk (a data frame at a 4096-byte IBA MTU) is built contiguously all
//! the same and then described by one descriptor per chunk it covers: in aligned mode a
//! descriptor may not cross a chunk, but nothing asks a frame's chunks to be apart. A slot is
//! free again when the completion ring has returned all of its frame's descriptors. The
//! descriptors are queued on the tx ring in one batch and, when the kernel asks for it
//! (`need_wakeup`; always in copy mode), the kernel is kicked with `sendto`, repeated while it
//! reports it stopped at its per-call budget. Completed slots come back through the completion
//! ring before the next send. So every frame the core sends pays one copy in user space, and a
//! received frame of one chunk one; copy mode adds the kernel's copy between the UMEM and an skb
//! on each side, and no system call is made per batch on receive. [`Datapath::recv`] and
//! [`Datapath::send`], the batch API, copy between the UMEM and the caller's [`RxBatch`] or
//! [`TxBatch`] as before. `rx_in_place` and `tx_in_place` count the one-copy frames.
//!
//! Receiving has no such way out: the kernel writes each part of a frame at the start of a fill
//! ring chunk after `XDP_PACKET_HEADROOM` (256 bytes), so at a 4096-byte IBA MTU a data frame
//! arrives as 3840 bytes in one chunk and the rest in another, never adjacent in memory. Lending
//! only the first chunk of three-chunk receive slots and moving the ~330-byte rest behind the
//! first part was tried (BENCHMARKS.md, "Jumbo frames without a second copy"): it halved the
//! receiver's time in `memcpy` but not its CPU time, because what the gather paid for was
//! mostly the first touch of a frame another CPU wrote, which moved to the ICRC pass, and it
//! tripled the receive UMEM; so the gather stays.
//!
//! Opened on every queue (the default), the datapath transmits on the first queue's socket only,
//! so frames leave in the order the core produced them. Opened on one queue
//! ([`XdpConfig::queue`]) it binds, receives and transmits on that queue alone: one engine shard
//! of several on the interface, each with its own thread, endpoint and socket
//! (`docs/datapath.md`, "Several queues"). The shards of a process share the interface's one
//! steering program (`crate::steering`), each registering its socket at its queue's index. On a
//! veth, a copy-mode transmit on queue q reaches the peer's receive queue q (`__dev_direct_xmit`
//! keeps the queue, `veth_xmit` uses the same index on the peer), so shard q of one host and
//! shard q of the other talk over queue q both ways; on a NIC, RSS picks the receive queue from
//! the flow's hash, so a QP's frames may land on another shard's queue: a shard's datapath is
//! wrapped in [`crate::handoff::Shard`], which forwards such frames to the shard owning their
//! QPN before any core parses them (`rx_forwarded`).
//!
//! The kernel's UDP stack never sees a RoCEv2 frame the program redirected, so it sends no ICMP
//! port unreachable and no guard socket is needed (unlike [`crate::af_packet`]).
//!
//! A frame the kernel's UDP stack of a local peer sent (a UDP-mode peer over a veth) may carry
//! an unfinished checksum (the pseudo-header sum, left for offload): XDP gets no checksum status,
//! so such a checksum is recognised by value, zeroed and counted as `rx_csum_unfinished`, as
//! AF_PACKET does from `TP_STATUS_CSUMNOTREADY`.
//!
//! Deviations: with several queues the datapath's descriptor is an epoll set that reports only
//! readability, so a send that found the transmit pool exhausted is retried on the next wake-up
//! (at most [`crate::DriverConfig::max_sleep`] later) instead of on writability; 802.1Q-tagged
//! frames are redirected by the program but refused here (`rx_filtered`), as in AF_PACKET mode.
//! A received frame larger than a chunk keeps a second copy in user space (one copy would be
//! better; see above for why not): the core reads frames as one contiguous slice, and chunks large
//! enough for such a frame are refused by the kernel (see `CHUNK`).

use crate::steering::SharedSteering;
use crate::sys::{self, Epoll};
use crate::{Datapath, DatapathStats, Error, Interface, MAX_FRAME, RxBatch, RxMeta, TxBatch};
use rocev2_core::wire::FrameBuf;
use rocev2_ebpf_loader::steer::{Counter, MAX_QUEUES};
use std::io;
use std::num::NonZeroU32;
use std::os::fd::{BorrowedFd, RawFd};
use std::ptr::NonNull;
use std::sync::Arc;
use xdpilone::xdp::XdpDesc;
use xdpilone::{
    BufIdx, CompletionQueue, FillQueue, IfInfo, RingRx, RingTx, Socket, SocketConfig, Umem,
    UmemConfig,
};

/// Bytes per UMEM chunk: one page, the largest the kernel accepts. Linux 6.18 refuses any
/// larger `chunk_size` (`EINVAL` from `XDP_UMEM_REG`) even for a UMEM of huge pages, so a frame
/// of a 4096-byte IBA MTU cannot be one chunk (`deploy/bench/umem-chunk-probe.sh`; BENCHMARKS.md,
/// "One chunk per jumbo frame").
const CHUNK: u32 = 4096;
/// `XDP_USE_SG` bind flag: frames larger than a chunk arrive and leave as several descriptors.
const XDP_USE_SG: u16 = 1 << 4;
/// `XDP_PKT_CONTD` descriptor option: more descriptors of this frame follow.
const XDP_PKT_CONTD: u32 = 1;
/// `SOL_XDP` socket option `XDP_MAX_TX_SKB_BUDGET` (Linux 6.17): frames a copy-mode `sendto`
/// may transmit at once (32 by default). Raised to the tx ring size where the kernel has it.
const XDP_MAX_TX_SKB_BUDGET: libc::c_int = 9;
const SOL_XDP: libc::c_int = 283;
/// `sendto` kicks per [`Datapath::send`] at most.
const MAX_KICKS: usize = 64;
/// Chunks the largest frame ([`MAX_FRAME`]) takes: the adjacent chunks of one transmit slot,
/// and the ring slots [`Queue::transmit_with`] keeps free before it lets the core write a frame
/// whose length it learns only afterwards.
const MAX_FRAME_CHUNKS: usize = MAX_FRAME.div_ceil(CHUNK as usize);
/// Bytes of a transmit slot: [`MAX_FRAME_CHUNKS`] adjacent chunks, one contiguous buffer that
/// holds any frame.
const SLOT: usize = MAX_FRAME_CHUNKS * CHUNK as usize;

/// Options of the AF_XDP datapath. Ring sizes are rounded up to a power of two (64 at least);
/// a queue's UMEM is about `(rx_frames + tx_frames) × 4 KiB`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XdpConfig {
    /// Receive chunks per queue, all lent to the kernel; also the fill and rx ring sizes. Bounds
    /// the burst a queue absorbs while we are busy (frames beyond it are `rx_kernel_drops`):
    /// 8192, as many small frames as AF_PACKET's 8 MiB socket buffer holds.
    pub rx_frames: u32,
    /// Transmit chunks per queue; also the tx and completion ring sizes: 2048. They are grouped
    /// into slots of three adjacent chunks (room for [`MAX_FRAME`]), one frame each, so 682
    /// frames can be in flight: several driver passes (256 frames) of room.
    pub tx_frames: u32,
    /// Ask the driver for zero-copy first (copy mode is the fallback either way).
    pub zero_copy: bool,
    /// The one receive queue to serve, receiving and transmitting on it alone: one engine shard
    /// of several on the interface (`docs/datapath.md`, "Several queues"). `None` (default):
    /// every receive queue, transmitting on the first.
    pub queue: Option<u32>,
}

impl Default for XdpConfig {
    fn default() -> Self {
        XdpConfig {
            rx_frames: 8192,
            tx_frames: 2048,
            zero_copy: true,
            queue: None,
        }
    }
}

/// An anonymous, page-aligned mapping holding one queue's UMEM; unmapped when dropped.
struct Area {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by this value alone; moving it to another thread moves that
// ownership (the kernel's pins do not depend on the thread).
unsafe impl Send for Area {}

impl Area {
    fn new(len: usize) -> Result<Area, Error> {
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing; no
        // existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::last("mmap (UMEM)"));
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or(Error::Io {
            op: "mmap (UMEM)",
            os: io::Error::from_raw_os_error(libc::ENOMEM),
        })?;
        Ok(Area { ptr, len })
    }

    fn as_slice_ptr(&self) -> NonNull<[u8]> {
        NonNull::slice_from_raw_parts(self.ptr, self.len)
    }

    /// Copies `len` bytes at UMEM offset `addr` into `dst`; `false` if out of bounds.
    fn read(&self, addr: u64, dst: &mut [u8]) -> bool {
        let Ok(at) = usize::try_from(addr) else {
            return false;
        };
        if at.checked_add(dst.len()).is_none_or(|end| end > self.len) {
            return false;
        }
        // SAFETY: `at..at + dst.len()` lies inside the mapping (checked above); the chunk came
        // from the rx ring, so the kernel has finished writing it and will not touch it until we
        // give it back through the fill ring. `dst` is ours and does not overlap the mapping.
        unsafe {
            rocev2_ipc::shm::copy(self.ptr.as_ptr().add(at), dst.as_mut_ptr(), dst.len());
        }
        true
    }

    /// The `len` bytes at UMEM offset `addr`, to read or write in place; `None` if out of
    /// bounds. As for [`Self::read`] and [`Self::write`], the caller owns those bytes: a chunk
    /// taken off the rx ring and not yet given back through the fill ring, or a chunk of the
    /// free transmit pool not yet queued on the tx ring.
    fn chunk_mut(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        let at = usize::try_from(addr).ok()?;
        if at.checked_add(len).is_none_or(|end| end > self.len) {
            return None;
        }
        // SAFETY: `at..at + len` lies inside the mapping (checked above), which lives as long as
        // `self`; the `&mut self` borrow makes the slice the only access from this process while
        // it lives, and the kernel does not touch a chunk we own (see above) until we hand it
        // back, which needs `self` again.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(at), len) })
    }

    /// Copies `src` to UMEM offset `addr`; `false` if out of bounds.
    fn write(&mut self, addr: u64, src: &[u8]) -> bool {
        let Ok(at) = usize::try_from(addr) else {
            return false;
        };
        if at.checked_add(src.len()).is_none_or(|end| end > self.len) {
            return false;
        }
        // SAFETY: inside the mapping (checked above); the chunk is in our free transmit pool, so
        // the kernel neither reads nor writes it until we queue its descriptor.
        unsafe {
            rocev2_ipc::shm::copy(src.as_ptr(), self.ptr.as_ptr().add(at), src.len());
        }
        true
    }
}

impl Drop for Area {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned; every socket using the mapping was
        // closed before (field order of `Queue`).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// One receive queue: its socket's four rings and its UMEM. Fields drop in order: the rings
/// (and with the last of them the socket) before the memory they point into.
struct Queue {
    id: u32,
    rx: RingRx,
    tx: RingTx,
    /// Descriptors the tx ring holds (its size).
    tx_slots: u32,
    fill: FillQueue,
    comp: CompletionQueue,
    /// Statistics only (`XDP_STATISTICS`); shares the socket.
    dq_stats: xdpilone::User,
    zero_copy: bool,
    /// Offsets of the transmit slots free for a frame (each [`SLOT`] bytes of adjacent chunks).
    free_tx: Vec<u64>,
    /// UMEM offset of the first transmit slot.
    tx_base: u64,
    /// Per transmit slot: its frame's descriptors not yet back from the completion ring; the
    /// slot is free again when the last one is.
    tx_outstanding: Vec<u8>,
    /// Chunk offsets received and handed on, to go back to the fill ring.
    recycle: Vec<u64>,
    /// A received frame of several chunks, gathered; also the scratch buffer a frame longer
    /// than a transmit slot (a bug upstream, dropped) is written to.
    spill: Vec<u8>,
    /// Descriptors of one send, queued on the tx ring together ([`queue_descs`]).
    tx_descs: Vec<XdpDesc>,
    /// Frames this queue handed to the caller.
    rx_packets: u64,
    /// Descriptors taken off the rx ring by one receive.
    descs: Vec<XdpDesc>,
    area: Area,
}

fn xerr(op: &'static str) -> impl FnOnce(xdpilone::Errno) -> Error {
    move |e| Error::io(op, io::Error::from_raw_os_error(e.get_raw().abs()))
}

/// What an AF_XDP socket can do on an interface's first queue, found by binding one there
/// and closing it at once (`rocev2d devices`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpSupport {
    /// The driver accepts a zero-copy bind.
    ZeroCopy,
    /// Copy mode only (the driver refused zero-copy).
    Copy,
}

/// Binds an AF_XDP socket to `iface`'s queue 0, zero-copy first, then copy, and says which
/// worked. Needs `CAP_NET_RAW` (and `CAP_BPF`/`CAP_IPC_LOCK` on some kernels); a queue
/// another socket holds (a serving `rocev2d`) fails with `EBUSY`.
///
/// # Errors
/// [`Error`] of the copy-mode bind, which says why AF_XDP cannot be used here.
pub fn probe(iface: &Interface) -> Result<XdpSupport, Error> {
    let cfg = XdpConfig {
        rx_frames: 64,
        tx_frames: 64,
        ..XdpConfig::default()
    };
    if Queue::open(iface.index, 0, &cfg, true).is_ok() {
        return Ok(XdpSupport::ZeroCopy);
    }
    Queue::open(iface.index, 0, &cfg, false).map(|_| XdpSupport::Copy)
}

impl Queue {
    fn open(ifindex: u32, id: u32, cfg: &XdpConfig, zero_copy: bool) -> Result<Queue, Error> {
        let ring = |n: u32| n.max(64).next_power_of_two();
        let (rx_n, tx_n) = (ring(cfg.rx_frames), ring(cfg.tx_frames));
        // Whole slots only, so a slot's frame never reaches past the area, and at most `tx_n`
        // descriptors are ever out: the completion ring always has room for them.
        let slots = tx_n / MAX_FRAME_CHUNKS as u32;
        let frames = rx_n + slots * MAX_FRAME_CHUNKS as u32;
        let area = Area::new(frames as usize * CHUNK as usize)?;
        let cfg = UmemConfig {
            fill_size: rx_n,
            complete_size: tx_n,
            frame_size: CHUNK,
            headroom: 0,
            flags: 0,
        };
        // SAFETY: the area is page-aligned (mmap), `frames` chunks long, and outlives every
        // socket of this queue (it is the last field of `Queue`).
        let umem = unsafe { Umem::new(cfg, area.as_slice_ptr()) }.map_err(xerr("XDP_UMEM_REG"))?;
        let mut info = IfInfo::invalid();
        info.from_ifindex(ifindex)
            .map_err(xerr("if_indextoname (AF_XDP)"))?;
        info.set_queue(id);
        let sock = Socket::with_shared(&info, &umem).map_err(xerr("AF_XDP socket"))?;
        let device = umem
            .fq_cq(&sock)
            .map_err(xerr("AF_XDP fill/completion rings"))?;
        let mode = if zero_copy {
            SocketConfig::XDP_BIND_ZEROCOPY
        } else {
            SocketConfig::XDP_BIND_COPY
        };
        let user = umem
            .rx_tx(
                &sock,
                &SocketConfig {
                    rx_size: NonZeroU32::new(rx_n),
                    tx_size: NonZeroU32::new(tx_n),
                    bind_flags: mode | SocketConfig::XDP_BIND_NEED_WAKEUP | XDP_USE_SG,
                },
            )
            .map_err(xerr("AF_XDP rx/tx rings"))?;
        let rx = user.map_rx().map_err(xerr("mmap AF_XDP rx ring"))?;
        let tx = user.map_tx().map_err(xerr("mmap AF_XDP tx ring"))?;
        umem.bind(&user).map_err(xerr("AF_XDP bind"))?;
        // Best effort: older kernels lack the option and keep their budget of 32.
        let fd = user.as_raw_fd();
        // SAFETY: `fd` is the live socket held by `user`; the borrow ends before it can close.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let _ = sys::setsockopt_int(
            borrowed,
            SOL_XDP,
            XDP_MAX_TX_SKB_BUDGET,
            libc::c_int::try_from(tx_n).unwrap_or(libc::c_int::MAX),
        );
        let (mut fill, comp) = device.into_parts();
        let chunk = |i: u32| umem.frame(BufIdx(i)).map(|c| c.offset);
        let rx_chunks: Vec<u64> = (0..rx_n).filter_map(chunk).collect();
        let free_tx: Vec<u64> = (0..slots)
            .filter_map(|s| chunk(rx_n + s * MAX_FRAME_CHUNKS as u32))
            .collect();
        let tx_base = chunk(rx_n).unwrap_or(u64::MAX);
        let mut w = fill.fill(rx_n);
        let lent = w.insert(rx_chunks.iter().copied());
        w.commit();
        drop(w);
        if lent != rx_n {
            return Err(Error::Io {
                op: "AF_XDP fill ring",
                os: io::Error::from_raw_os_error(libc::ENOBUFS),
            });
        }
        Ok(Queue {
            id,
            rx,
            tx,
            tx_slots: tx_n,
            fill,
            comp,
            dq_stats: user,
            zero_copy,
            tx_outstanding: vec![0; free_tx.len()],
            free_tx,
            tx_base,
            recycle: Vec::with_capacity(rx_n as usize),
            spill: Vec::with_capacity(MAX_FRAME),
            tx_descs: Vec::with_capacity(tx_n as usize),
            descs: Vec::with_capacity(rx_n as usize),
            rx_packets: 0,
            area,
        })
    }

    fn fd(&self) -> RawFd {
        self.rx.as_raw_fd()
    }

    /// Takes the descriptors of up to `frames` whole frames off the rx ring into `self.descs`.
    ///
    /// The ring is released once, after reading: xdpilone's `ReadRx::release` is only correct
    /// as the last call on a reader. A frame whose last descriptor is not visible yet stays in
    /// the ring (the kernel publishes a frame's descriptors together, so this is not expected).
    fn take(&mut self, frames: usize) {
        self.descs.clear();
        let mut whole = 0usize;
        let mut taken = 0usize;
        let mut r = self.rx.receive(u32::MAX);
        while taken < frames {
            let Some(d) = r.read() else { break };
            self.descs.push(d);
            if d.options & XDP_PKT_CONTD == 0 {
                whole = self.descs.len();
                taken += 1;
            }
        }
        if whole == self.descs.len() {
            r.release();
            return;
        }
        // Give back the incomplete tail: cancel everything, then consume exactly `whole`.
        drop(r);
        self.descs.truncate(whole);
        if whole > 0 {
            let mut r = self.rx.receive(whole as u32);
            for _ in 0..whole {
                let _ = r.read();
            }
            r.release();
        }
    }

    /// Takes up to `room` frames off the rx ring and hands each to `handle` with its metadata:
    /// a one-chunk frame inside its UMEM chunk, a larger one gathered into `spill` first. The
    /// chunks go back to the fill ring once every frame has been handled. Returns the frames
    /// handed on and how many of them were in place.
    fn recv_with(
        &mut self,
        room: usize,
        st: &mut DatapathStats,
        handle: &mut dyn FnMut(&[u8], RxMeta),
    ) -> (usize, usize) {
        if room == 0 {
            return (0, 0);
        }
        self.take(room);
        let Queue {
            descs,
            fill,
            recycle,
            area,
            spill,
            rx_packets,
            ..
        } = self;
        let (mut handed, mut in_place) = (0usize, 0usize);
        for parts in descs.split_inclusive(|d| d.options & XDP_PKT_CONTD == 0) {
            recycle.extend(parts.iter().map(|d| d.addr));
            let frame = match parts {
                [d] => area.chunk_mut(d.addr, d.len as usize),
                _ => gather(area, parts, spill),
            };
            let Some(frame) = frame else {
                st.rx_truncated += 1;
                continue;
            };
            if !crate::filter::is_roce(frame) {
                st.rx_filtered += 1;
                continue;
            }
            if crate::filter::udp_checksum_unfinished(frame)
                && crate::filter::zero_udp_checksum(frame)
            {
                st.rx_csum_unfinished += 1;
            }
            let len = frame.len();
            handle(
                frame,
                RxMeta {
                    len,
                    ecn: crate::filter::frame_ecn(frame),
                    datagram: None,
                },
            );
            st.rx_packets += 1;
            st.rx_bytes += len as u64;
            *rx_packets += 1;
            handed += 1;
            in_place += usize::from(parts.len() == 1);
        }
        if !recycle.is_empty() {
            // The fill ring has room for every receive chunk, so this always takes them all.
            let mut w = fill.fill(recycle.len() as u32);
            let n = w.insert(recycle.iter().copied()) as usize;
            w.commit();
            drop(w);
            recycle.drain(..n);
        }
        if fill.needs_wakeup() {
            fill.wake();
        }
        (handed, in_place)
    }

    /// Takes back the slots whose frames the kernel finished sending: a slot is free once the
    /// last of its frame's descriptors completed.
    fn reap(&mut self) {
        let mut c = self.comp.complete(u32::MAX);
        while let Some(addr) = c.read() {
            // Aligned mode: any address inside a chunk names it, and its slot.
            let Some(slot) = addr
                .checked_sub(self.tx_base)
                .and_then(|off| usize::try_from(off / SLOT as u64).ok())
            else {
                continue;
            };
            if let Some(n) = self.tx_outstanding.get_mut(slot) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.free_tx.push(self.tx_base + slot as u64 * SLOT as u64);
                }
            }
        }
        c.release();
    }

    /// Queues as many frames of `batch` as the pool and the ring allow, copying each into
    /// chunks, kicks the kernel, and returns how many frames were consumed.
    fn send(&mut self, batch: &mut TxBatch, st: &mut DatapathStats) -> usize {
        self.reap();
        let mut consumed = 0usize;
        let mut queued = 0usize;
        {
            let Queue {
                tx,
                tx_slots,
                free_tx,
                tx_base,
                tx_outstanding,
                area,
                tx_descs,
                ..
            } = self;
            let mut room = tx_slots.saturating_sub(tx.pending()) as usize;
            tx_descs.clear();
            for f in batch.frames() {
                if f.is_empty() || f.len() > MAX_FRAME {
                    // A bug upstream; drop it rather than wedge the queue.
                    st.tx_malformed += 1;
                    consumed += 1;
                    continue;
                }
                let need = f.len().div_ceil(CHUNK as usize);
                if need > room {
                    st.tx_blocked += 1;
                    break;
                }
                let Some(addr) = free_tx.pop() else {
                    st.tx_blocked += 1;
                    break;
                };
                let _ = area.write(addr, f);
                describe(addr, f.len(), *tx_base, tx_outstanding, tx_descs);
                room -= need;
                consumed += 1;
                queued += 1;
                st.tx_packets += 1;
                st.tx_bytes += f.len() as u64;
            }
            queue_descs(tx, tx_descs);
        }
        batch.consume(consumed);
        if queued > 0 || self.tx.pending() > 0 {
            self.kick(st);
        }
        consumed
    }

    /// Lets `fill` (the core) write up to `max` frames straight into free slots of the transmit
    /// pool, queues them and kicks the kernel. A slot is [`MAX_FRAME_CHUNKS`] adjacent chunks,
    /// so a frame longer than a chunk is written contiguously all the same and described as one
    /// descriptor per chunk it covers: no frame is copied. A slot and ring room for the largest
    /// frame are reserved before `fill` runs, as the length is known only afterwards; when they
    /// run out while the core may still have frames, the next frame goes into `batch` and waits
    /// there ([`Self::send`]), so the driver waits for room. Returns the frames consumed.
    fn transmit_with(
        &mut self,
        batch: &mut TxBatch,
        max: usize,
        st: &mut DatapathStats,
        fill: &mut dyn FnMut(&mut dyn FrameBuf) -> Option<usize>,
    ) -> usize {
        self.reap();
        let mut produced = 0usize;
        let mut exhausted = false;
        {
            let Queue {
                tx,
                tx_slots,
                free_tx,
                tx_base,
                tx_outstanding,
                area,
                spill,
                tx_descs,
                ..
            } = self;
            let mut room = tx_slots.saturating_sub(tx.pending()) as usize;
            tx_descs.clear();
            while produced < max {
                if room < MAX_FRAME_CHUNKS || free_tx.is_empty() {
                    exhausted = true;
                    break;
                }
                let Some(addr) = free_tx.pop() else { break };
                let Some(slot) = area.chunk_mut(addr, SLOT) else {
                    free_tx.push(addr);
                    break;
                };
                let mut buf = SlotBuf {
                    slot,
                    spill,
                    oversize: false,
                };
                let Some(n) = fill(&mut buf) else {
                    free_tx.push(addr);
                    break;
                };
                produced += 1;
                if n == 0 || n > SLOT || buf.oversize {
                    // A bug upstream (a length other than the buffer it asked for, or a frame
                    // larger than any RoCE frame); drop it rather than wedge the queue.
                    st.tx_malformed += 1;
                    free_tx.push(addr);
                    continue;
                }
                describe(addr, n, *tx_base, tx_outstanding, tx_descs);
                st.tx_in_place += 1;
                room -= n.div_ceil(CHUNK as usize);
                st.tx_packets += 1;
                st.tx_bytes += n as u64;
            }
            queue_descs(tx, tx_descs);
        }
        let mut consumed = produced;
        if exhausted && produced < max && batch.push_with(|buf| fill(buf)) {
            consumed += self.send(batch, st);
        } else if produced > 0 || self.tx.pending() > 0 {
            self.kick(st);
        }
        consumed
    }

    /// Tells the kernel about queued descriptors: needed in copy mode (the `sendto` does the
    /// transmitting, a budget's worth per call) and in zero-copy mode when the driver asks.
    fn kick(&mut self, st: &mut DatapathStats) {
        for _ in 0..MAX_KICKS {
            if !self.tx.needs_wakeup() || self.tx.pending() == 0 {
                return;
            }
            let before = self.tx.pending();
            // SAFETY: a zero-length `sendto` with no address on our own AF_XDP socket; the
            // kernel reads nothing from user memory.
            let rc = unsafe {
                libc::sendto(
                    self.tx.as_raw_fd(),
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                )
            };
            if rc < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    // EAGAIN: stopped at the budget, call again; EBUSY/ENOBUFS: the completion
                    // ring or the device is full, retry on a later send.
                    Some(libc::EAGAIN) if self.tx.pending() < before => continue,
                    Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS) => {
                        st.tx_blocked += 1;
                        return;
                    }
                    _ => {
                        tracing::debug!(error = %e, queue = self.id, "AF_XDP tx kick failed");
                        st.tx_errors += 1;
                        return;
                    }
                }
            }
            self.reap();
        }
    }

    /// Frames the kernel dropped for want of room in our rings or fill buffers.
    fn kernel_drops(&self) -> u64 {
        self.dq_stats
            .statistics_v2()
            .map_or(0, |s| s.rx_dropped + s.rx_ring_full)
    }
}

/// Copies the chunks of a frame of several descriptors into `spill`; `None` when it is larger
/// than [`MAX_FRAME`] or a descriptor lies outside the UMEM.
fn gather<'a>(area: &Area, parts: &[XdpDesc], spill: &'a mut Vec<u8>) -> Option<&'a mut [u8]> {
    spill.resize(MAX_FRAME, 0);
    let mut len = 0usize;
    for d in parts {
        let end = len
            .checked_add(d.len as usize)
            .filter(|&e| e <= MAX_FRAME)?;
        if !area.read(d.addr, spill.get_mut(len..end)?) {
            return None;
        }
        len = end;
    }
    spill.get_mut(..len)
}

/// Appends the descriptors of a frame of `len` bytes (at most [`SLOT`]) written at the start
/// of the transmit slot at `addr` to `descs`: one per chunk it covers (a descriptor may not
/// cross a chunk in aligned mode), chained by `XDP_PKT_CONTD`, and counts them as the slot's
/// outstanding descriptors ([`Queue::reap`]). The chunks are adjacent, so the frame needs no
/// copying however many it covers.
fn describe(addr: u64, len: usize, tx_base: u64, outstanding: &mut [u8], descs: &mut Vec<XdpDesc>) {
    let parts = len.div_ceil(CHUNK as usize);
    for i in 0..parts {
        let at = i * CHUNK as usize;
        descs.push(XdpDesc {
            addr: addr + at as u64,
            len: (len - at).min(CHUNK as usize) as u32,
            options: if i + 1 < parts { XDP_PKT_CONTD } else { 0 },
        });
    }
    let slot = addr.saturating_sub(tx_base) / SLOT as u64;
    if let Some(n) = usize::try_from(slot)
        .ok()
        .and_then(|s| outstanding.get_mut(s))
    {
        *n = parts as u8;
    }
}

/// Queues `descs` on the tx ring, which has room for all of them (the caller counted it from
/// the ring's shared indices).
///
/// A frame of several chunks may straddle two reservations of the ring: `xdpilone` refreshes
/// its view of the kernel's consumer only once its cached free count is zero, so a stale
/// remainder of one slot would otherwise refuse every two-chunk frame forever (an odd number of
/// one-chunk frames, an ACK or an ARP announcement among 4 KiB frames, was enough). A used-up
/// reservation is therefore committed and renewed in the middle of a frame; the kernel reads the
/// ring only at the kick (copy mode) or takes whole packets only (zero-copy), so it never sees
/// half a frame.
fn queue_descs(tx: &mut RingTx, descs: &[XdpDesc]) {
    let mut w = tx.transmit(u32::MAX);
    let mut reserved = w.capacity();
    for &d in descs {
        if reserved == 0 {
            w.commit();
            drop(w);
            w = tx.transmit(u32::MAX);
            reserved = w.capacity();
        }
        let _ = w.insert_once(d);
        reserved = reserved.saturating_sub(1);
    }
    w.commit();
}

/// The core's view of a free transmit slot ([`FrameBuf`]): the frame is written at its start,
/// across as many of its adjacent chunks as it needs.
struct SlotBuf<'a> {
    slot: &'a mut [u8],
    /// Where a frame longer than the slot goes, to be dropped: no RoCE frame is (a 4096-byte
    /// IBA MTU frame is ~4.2 kB, a slot holds [`MAX_FRAME`]), but [`FrameBuf::frame_mut`] must
    /// return the length asked for.
    spill: &'a mut Vec<u8>,
    /// The last frame went to `spill`.
    oversize: bool,
}

impl FrameBuf for SlotBuf<'_> {
    fn frame_mut(&mut self, len: usize) -> &mut [u8] {
        self.oversize = len > self.slot.len();
        if self.oversize {
            self.spill.resize(len, 0);
            &mut self.spill[..]
        } else {
            &mut self.slot[..len]
        }
    }
    fn frame(&self, len: usize) -> &[u8] {
        let from: &[u8] = if self.oversize { self.spill } else { self.slot };
        &from[..len.min(from.len())]
    }
}

/// RoCEv2 frames through AF_XDP sockets on every receive queue, or on one; see the module docs.
pub struct XdpDatapath {
    /// The interface's program, shared with the other datapaths of this process on it; `None`
    /// only inside [`Drop::drop`], which releases the queues' map entries before the sockets
    /// close and then the handle.
    steering: Option<Arc<SharedSteering>>,
    queues: Vec<Queue>,
    /// [`XdpConfig::queue`].
    only: Option<u32>,
    /// Why a queue is in copy mode: zero-copy not asked for, impossible with the program in
    /// skb mode, or the driver's refusal of the first queue that asked (the fallback names its
    /// reason in the log and in [`XdpDatapath::describe`]).
    copy_why: Option<String>,
    epoll: Option<Epoll>,
    next_rx: usize,
    stats: DatapathStats,
}

impl std::fmt::Debug for XdpDatapath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpDatapath")
            .field("describe", &self.describe())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Receive queues in use on `iface` from `/sys/class/net/IF/queues/rx-*`, if that sysfs is the
/// caller's namespace's (`ip netns exec` mounts it; a thread that only `setns`ed sees another):
/// checked by the interface index it reports.
fn sysfs_rx_queues(iface: &Interface) -> Option<u32> {
    let dir = format!("/sys/class/net/{}", iface.name);
    let index: u32 = std::fs::read_to_string(format!("{dir}/ifindex"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    if index != iface.index {
        return None;
    }
    let n = std::fs::read_dir(format!("{dir}/queues"))
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
        .count();
    u32::try_from(n).ok().filter(|&n| n > 0)
}

/// True for `EINVAL` from `bind`: the queue does not exist (beyond the number in use).
fn no_such_queue(e: &Error) -> bool {
    matches!(e, Error::Io { op: "AF_XDP bind", os } if os.raw_os_error() == Some(libc::EINVAL))
}

impl XdpDatapath {
    /// Attaches the steering program to `iface` (or shares the attachment of another datapath
    /// of this process there) and binds one AF_XDP socket per receive queue, or to
    /// [`XdpConfig::queue`] alone.
    ///
    /// # Errors
    /// [`Error::Xdp`] when the program cannot be loaded or attached (no privileges, another XDP
    /// program on the interface, a kernel without BTF) or a queue is served by another datapath
    /// of this process; [`Error::Io`] from the sockets; [`Error::NoSuchQueue`] for a
    /// [`XdpConfig::queue`] the interface does not have; [`Error::BadInterface`] with more
    /// queues than the program's map holds or an MTU a [`MAX_FRAME`] slot cannot carry.
    pub fn open(iface: &Interface, cfg: XdpConfig) -> Result<XdpDatapath, Error> {
        if iface.mtu as usize + 18 > MAX_FRAME {
            return Err(Error::BadInterface {
                name: iface.name.clone(),
                why: "MTU larger than 9000",
            });
        }
        // Every receive queue in use: sysfs says how many; without it, netlink's count of
        // queues the device has is the bound and the first queue `bind` refuses ends the list.
        let (nq, exact) = match sysfs_rx_queues(iface) {
            Some(n) => (n, true),
            None => (iface.rx_queues, false),
        };
        let ids = match cfg.queue {
            Some(q) if q >= nq => {
                return Err(Error::NoSuchQueue {
                    name: iface.name.clone(),
                    queue: q,
                    queues: nq,
                });
            }
            Some(q) => q..q + 1,
            None if nq > MAX_QUEUES => {
                return Err(Error::BadInterface {
                    name: iface.name.clone(),
                    why: "more rx queues than the steering program's XSKMAP holds (64)",
                });
            }
            None => 0..nq,
        };
        // The datapath holds the only handle this call takes, so that a failure below closes it
        // as a datapath closes (`Drop`): queues released, the program detached if it was the last.
        let mut dp = XdpDatapath {
            steering: Some(SharedSteering::get(iface)?),
            queues: Vec::with_capacity(ids.len()),
            only: cfg.queue,
            copy_why: None,
            epoll: None,
            next_rx: 0,
            stats: DatapathStats::default(),
        };
        let native = dp
            .steering
            .as_ref()
            .is_some_and(|s| s.mode() == rocev2_ebpf_loader::steer::AttachMode::Driver);
        dp.copy_why = match (cfg.zero_copy, native) {
            (false, _) => Some("zero-copy not asked for".to_string()),
            (true, false) => Some("zero-copy needs the program in driver mode".to_string()),
            (true, true) => None,
        };
        for id in ids {
            let Some(steering) = dp.steering.as_deref() else {
                break;
            };
            steering.claim(id)?;
            let opened = match cfg.zero_copy && native {
                true => Queue::open(iface.index, id, &cfg, true).or_else(|zc| {
                    tracing::info!(iface = %iface.name, queue = id, error = %zc, "zero-copy refused; copy mode");
                    dp.copy_why
                        .get_or_insert_with(|| format!("zero-copy refused: {zc}"));
                    Queue::open(iface.index, id, &cfg, false)
                }),
                false => Queue::open(iface.index, id, &cfg, false),
            };
            let q = match opened {
                Ok(q) => q,
                Err(e) => {
                    steering.release(id);
                    if !exact && id > 0 && cfg.queue.is_none() && no_such_queue(&e) {
                        break;
                    }
                    return Err(e);
                }
            };
            // Pushed first, so that a failure below releases this queue too (`Drop`).
            let fd = q.fd();
            dp.queues.push(q);
            steering.register(id, fd)?;
        }
        if dp.queues.len() > 1 {
            let ep = Epoll::new().map_err(|e| Error::io("epoll_create1", e))?;
            for q in &dp.queues {
                ep.add_readable(q.fd())
                    .map_err(|e| Error::io("epoll_ctl", e))?;
            }
            dp.epoll = Some(ep);
        }
        tracing::info!(iface = %iface.name, setup = %dp.describe(), "AF_XDP datapath ready");
        Ok(dp)
    }

    /// One phrase for logs and the `auto` reason: queues, copy or zero-copy (and why a queue
    /// copies), program mode. A datapath of one queue says which (`rx/tx queue 1 only`).
    pub fn describe(&self) -> String {
        let zc = self.queues.iter().filter(|q| q.zero_copy).count();
        let copy = match (zc, self.queues.len()) {
            (0, _) => "copy mode".to_string(),
            (z, n) if z == n => "zero-copy".to_string(),
            (z, n) => format!("zero-copy on {z} of {n} queues"),
        };
        let copy = match &self.copy_why {
            Some(why) if zc < self.queues.len() => format!("{copy} ({why})"),
            _ => copy,
        };
        let queues = match self.queue() {
            Some(q) => format!("rx/tx queue {q} only"),
            None => format!("{} rx queue(s)", self.queues.len()),
        };
        let mode = self
            .steering
            .as_ref()
            .map_or("detached", |s| s.mode().name());
        format!("{queues}, {copy}, steering program in {mode} mode")
    }

    /// The queue served when the datapath was opened on one ([`XdpConfig::queue`]).
    pub fn queue(&self) -> Option<u32> {
        self.only
    }

    /// Receives up to `room` frames from the queues in turn and hands each to `handle`; returns
    /// the frames handed on and how many of them were in place.
    fn each_queue(&mut self, room: usize, handle: &mut dyn FnMut(&[u8], RxMeta)) -> (usize, usize) {
        let (mut n, mut in_place) = (0usize, 0usize);
        let nq = self.queues.len();
        // Start at a different queue each call so a busy queue cannot starve the others.
        for k in 0..nq {
            let i = (self.next_rx + k) % nq;
            if let Some(q) = self.queues.get_mut(i) {
                let (got, placed) = q.recv_with(room.saturating_sub(n), &mut self.stats, handle);
                n += got;
                in_place += placed;
            }
        }
        self.next_rx = (self.next_rx + 1) % nq.max(1);
        (n, in_place)
    }

    /// Number of receive queues served (one socket each).
    pub fn queues(&self) -> usize {
        self.queues.len()
    }

    /// Frames received so far on each queue served, as `(queue, frames)` in queue order.
    pub fn rx_packets_per_queue(&self) -> Vec<(u32, u64)> {
        self.queues.iter().map(|q| (q.id, q.rx_packets)).collect()
    }

    /// The steering program's counters (summed over CPUs), named as in `rocev2d stats`: the
    /// interface's, whichever of its queues the frames arrived on.
    pub fn steering_counters(&self) -> Option<[(Counter, u64); Counter::ALL.len()]> {
        self.steering.as_ref()?.counters()
    }
}

impl Drop for XdpDatapath {
    fn drop(&mut self) {
        if let Some(s) = self.steering.take() {
            for q in &self.queues {
                s.release(q.id);
            }
            SharedSteering::close(s);
        }
    }
}

impl Datapath for XdpDatapath {
    fn name(&self) -> &'static str {
        "xdp"
    }

    fn recv(&mut self, batch: &mut RxBatch) -> Result<usize, Error> {
        batch.set_len(0);
        let room = batch.capacity();
        self.each_queue(room, &mut |bytes, m| {
            batch.push(bytes, m);
        });
        Ok(batch.len())
    }

    /// Hands one-chunk frames to `handle` inside their UMEM chunk (counted as `rx_in_place`)
    /// and gathers larger ones into one buffer first.
    fn recv_with(
        &mut self,
        batch: &mut RxBatch,
        handle: &mut dyn FnMut(&[u8], RxMeta),
    ) -> Result<usize, Error> {
        let (n, in_place) = self.each_queue(batch.capacity(), handle);
        self.stats.rx_in_place += in_place as u64;
        Ok(n)
    }

    fn send(&mut self, batch: &mut TxBatch) -> Result<usize, Error> {
        match self.queues.first_mut() {
            Some(q) => Ok(q.send(batch, &mut self.stats)),
            None => Ok(0),
        }
    }

    /// Lets the core build each frame straight into a transmit slot of the UMEM (counted as
    /// `tx_in_place`), whatever its length; see `Queue::transmit_with`.
    fn transmit_with(
        &mut self,
        batch: &mut TxBatch,
        fill: &mut dyn FnMut(&mut dyn FrameBuf) -> Option<usize>,
    ) -> Result<usize, Error> {
        let Some(q) = self.queues.first_mut() else {
            return Ok(0);
        };
        if !batch.is_empty() {
            return Ok(q.send(batch, &mut self.stats));
        }
        Ok(q.transmit_with(batch, batch.capacity(), &mut self.stats, fill))
    }

    fn fd(&self) -> BorrowedFd<'_> {
        let raw = match (&self.epoll, self.queues.first()) {
            (Some(ep), _) => return ep.fd(),
            (None, Some(q)) => q.fd(),
            // open() always binds at least one queue.
            (None, None) => 0,
        };
        // SAFETY: the descriptor belongs to a socket owned by `self.queues`, which lives as long
        // as the returned borrow of `self`.
        unsafe { BorrowedFd::borrow_raw(raw) }
    }

    fn stats(&self) -> DatapathStats {
        let mut s = DatapathStats {
            rx_kernel_drops: self.queues.iter().map(Queue::kernel_drops).sum(),
            ..self.stats
        };
        if let Some(c) = self.steering_counters() {
            for (counter, v) in c {
                match counter {
                    Counter::Redirected => s.steer_redirected = v,
                    Counter::NoSocket => s.steer_no_socket = v,
                    Counter::NotRoce => s.steer_not_roce = v,
                    Counter::Truncated => s.steer_truncated = v,
                }
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_frames::send_middle;
    use rocev2_core::wire::frame::{Ecn, FrameRepr, IpRepr};

    /// `XDP_PACKET_HEADROOM`: where the kernel writes a received part into its chunk.
    const HEADROOM: u64 = 256;

    /// A frame of every length up to a slot is described by consecutive descriptors that cover
    /// exactly its bytes, none crossing a chunk, chained up to the last; the slot then waits for
    /// that many completions.
    #[test]
    fn describe_covers_a_frame_with_one_descriptor_per_chunk() {
        let base = 5 * SLOT as u64;
        let mut outstanding = [0u8; 8];
        let mut descs = Vec::new();
        for len in 1..=SLOT {
            descs.clear();
            describe(
                base + 2 * SLOT as u64,
                len,
                base,
                &mut outstanding,
                &mut descs,
            );
            let mut at = base + 2 * SLOT as u64;
            for (i, d) in descs.iter().enumerate() {
                assert_eq!(d.addr, at, "len {len}");
                assert!(
                    d.len > 0 && d.addr % u64::from(CHUNK) + u64::from(d.len) <= u64::from(CHUNK)
                );
                let last = i + 1 == descs.len();
                assert_eq!(d.options == XDP_PKT_CONTD, !last, "len {len}");
                at += u64::from(d.len);
            }
            assert_eq!(at - (base + 2 * SLOT as u64), len as u64, "len {len}");
            assert_eq!(usize::from(outstanding[2]), descs.len(), "len {len}");
        }
    }

    /// Every way the kernel can cut a data frame of a 4096-byte IBA MTU into two receive chunks
    /// (each holds 3840 bytes after the headroom), for IPv4 and IPv6: gathered, the bytes are
    /// the frame the core built, and the core parses it and verifies its ICRC.
    #[test]
    fn gather_gives_back_the_frame_at_every_split_point() {
        let room = CHUNK as usize - HEADROOM as usize;
        let payload: Vec<u8> = (0..4096u32).map(|i| (i * 31 + 7) as u8).collect();
        let mut area = Area::new(2 * CHUNK as usize).unwrap();
        let mut spill = Vec::new();
        let v4 = IpRepr::V4 {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
            dscp: 26,
            ecn: Ecn::Ect0,
            identification: 7,
            dont_fragment: true,
            ttl: 64,
        };
        let v6 = crate::test_frames::v6(26, Ecn::Ect0, 0x12345);
        for ip in [v4, v6] {
            let frame = send_middle(ip, 49152, 10, &payload);
            assert!(frame.len() > room, "{} bytes take two chunks", frame.len());
            for at in frame.len() - room..=room {
                let parts = [
                    XdpDesc {
                        addr: u64::from(CHUNK) + HEADROOM,
                        len: at as u32,
                        options: XDP_PKT_CONTD,
                    },
                    XdpDesc {
                        addr: HEADROOM,
                        len: (frame.len() - at) as u32,
                        options: 0,
                    },
                ];
                assert!(area.write(parts[0].addr, &frame[..at]));
                assert!(area.write(parts[1].addr, &frame[at..]));
                let got = gather(&area, &parts, &mut spill).expect("inside the UMEM");
                assert!(got == &frame[..], "split at {at}");
                let (_, p) = FrameRepr::parse(got).expect("the core accepts it");
                assert_eq!(p, &payload[..], "split at {at}");
            }
        }
        // A part outside the UMEM, and a frame longer than MAX_FRAME, are refused.
        let outside = XdpDesc {
            addr: 2 * u64::from(CHUNK),
            len: 100,
            options: 0,
        };
        assert!(gather(&area, &[outside], &mut spill).is_none());
        let full = XdpDesc {
            addr: 0,
            len: CHUNK,
            options: XDP_PKT_CONTD,
        };
        assert!(gather(&area, &[full, full, full], &mut spill).is_none());
    }
}
