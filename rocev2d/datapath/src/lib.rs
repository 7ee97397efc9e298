//! Real wires for the sans-IO core: how whole RoCEv2 Ethernet frames get from
//! [`rocev2_core::Endpoint`] onto an interface and back.
//!
//! The core consumes and produces whole frames (Ethernet, IPv4 or IPv6, UDP 4791, BTH … ICRC),
//! or UDP payloads with a [`DatagramMeta`] for a datapath whose kernel writes the headers; a
//! [`Datapath`] moves them in batches:
//!
//! | mode | module | privileges | what the kernel does |
//! |---|---|---|---|
//! | AF_PACKET | [`af_packet`] | `CAP_NET_RAW` | nothing: we read and write every byte of every frame |
//! | UDP sockets | [`udp`] | none | writes/strips Ethernet, IP and UDP; we move UDP payloads and their metadata |
//! | AF_XDP | `xdp` (cargo feature `xdp`, default on) | root (`CAP_BPF`, `CAP_NET_ADMIN`, `CAP_NET_RAW`) | runs our XDP program, which hands RoCEv2 frames to our sockets' rings and everything else to the kernel |
//!
//! [`auto`] picks the best mode available and says why. [`iface`] reads an interface's MAC, MTU,
//! index and addresses (the GIDs) over rtnetlink, [`neigh`] resolves a peer's next-hop MAC from
//! the kernel's neighbour table, [`clock`] is the only place that reads `CLOCK_MONOTONIC`,
//! [`entropy`] the only one that reads the OS's randomness, and [`Driver`] is the event loop
//! joining an endpoint, its memory and a datapath. [`host`] holds what every owner of a driver
//! keeps beside it (the in-process API, the daemon, the C ABI): address handles, region
//! addresses, the path builder and the progress thread.
//!
//! Source: RoCEv2 Annex A17.4 (UDP encapsulation) and `docs/wire.md`, "ICRC in each datapath
//! mode", for what the UDP datapath must do so that the ICRC the core computed stays valid.
//!
//! Deviations: 802.1Q tags are not handled by any datapath yet (the AF_PACKET and AF_XDP
//! datapaths accept untagged frames only; the UDP datapath never sees tags); see each module.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::todo,
        clippy::unimplemented
    )
)]

pub mod af_packet;
pub mod auto;
pub mod clock;
pub mod driver;
pub mod entropy;
pub mod filter;
pub mod handoff;
pub mod host;
pub mod iface;
pub mod loopback;
pub mod neigh;
mod netlink;
pub mod pair;

#[cfg(feature = "xdp")]
mod steering;
mod sys;
pub mod udp;
#[cfg(feature = "xdp")]
pub mod xdp;

pub use auto::{Mode, open};
pub use driver::{Driver, DriverConfig, Progress, WaitMode, WaitPlan};
pub use iface::Interface;

use std::io;
use std::os::fd::BorrowedFd;

use rocev2_core::wire::frame::Ecn;
use rocev2_core::wire::{DatagramMeta, FrameBuf};

/// Largest frame a batch slot holds: a 9000-byte jumbo IP packet plus Ethernet and one 802.1Q
/// tag. Interfaces with a larger MTU are refused at open time.
pub const MAX_FRAME: usize = 9000 + 14 + 4;

/// Errors opening or running a datapath: setup failures and socket errors, each naming what
/// was being done. Per-frame problems are never errors; they are counted in [`DatapathStats`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call failed. The OS error is part of the message (not a separate
    /// [`std::error::Error::source`]), so logs that print the message alone keep it and a
    /// chain printed whole shows it once.
    #[error("{op}: {os}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The OS error.
        os: io::Error,
    },
    /// This build lacks what was asked for (a Cargo feature); no setting fixes it.
    #[error("{0}")]
    Unsupported(&'static str),
    /// No interface of that name in this network namespace.
    #[error("no interface named {0:?}")]
    NoSuchInterface(String),
    /// The interface cannot carry RoCEv2 frames as this crate builds them.
    #[error("interface {name:?} unusable: {why}")]
    BadInterface {
        /// The interface.
        name: String,
        /// Why.
        why: &'static str,
    },
    /// A netlink reply could not be decoded.
    #[error("netlink: {0}")]
    Netlink(String),
    /// The AF_XDP steering program could not be loaded, attached or given a socket (what the
    /// loader reported: verifier, privileges, another XDP program on the interface).
    #[error("XDP steering program: {0}")]
    Xdp(String),
    /// The AF_XDP datapath was asked for a receive queue the interface does not have.
    #[error(
        "interface {name:?} has {queues} rx queue(s) in use, no queue {queue} \
         (a veth gets more with `ip link add … numrxqueues N numtxqueues N`)"
    )]
    NoSuchQueue {
        /// The interface.
        name: String,
        /// The queue asked for.
        queue: u32,
        /// Receive queues in use on the interface.
        queues: u32,
    },
    /// Another engine shard of this process already owns the QPN block on the interface
    /// ([`handoff::Shard::join`]).
    #[error("interface {name:?}: QPN block {block} already has an engine shard in this process")]
    ShardTaken {
        /// The interface.
        name: String,
        /// The block.
        block: u32,
    },
    /// The next hop's MAC address did not appear in the neighbour table in time.
    #[error("no neighbour entry for {0} (ARP/ND got no answer)")]
    Unresolved(std::net::IpAddr),
}

impl Error {
    /// Wraps the calling thread's last OS error.
    pub(crate) fn last(op: &'static str) -> Error {
        Error::Io {
            op,
            os: io::Error::last_os_error(),
        }
    }
    /// Wraps `os`.
    pub(crate) fn io(op: &'static str, os: io::Error) -> Error {
        Error::Io { op, os }
    }
    /// True for `EPERM`/`EACCES`: the caller lacks a capability.
    pub fn is_permission(&self) -> bool {
        matches!(self, Error::Io { os, .. }
            if os.kind() == io::ErrorKind::PermissionDenied
                || os.raw_os_error() == Some(libc::EPERM))
    }
}

/// What the datapath knows about one received frame besides its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RxMeta {
    /// Length in bytes, from the start of the slot.
    pub len: usize,
    /// The IP ECN codepoint as received (also inside the frame's IP header; here so a datapath
    /// that reads it from ancillary data need not be trusted to have written it back).
    pub ecn: Ecn,
    /// Set when the slot holds a UDP payload (BTH … ICRC) rather than a frame: the IP and UDP
    /// fields the kernel reported, for [`rocev2_core::Endpoint::handle_datagram`].
    pub datagram: Option<DatagramMeta>,
}

/// A batch of receive slots the caller owns and reuses; a datapath fills the first
/// [`RxBatch::len`] of them.
#[derive(Debug)]
pub struct RxBatch {
    slots: Vec<Vec<u8>>,
    meta: Vec<RxMeta>,
    filled: usize,
}

impl RxBatch {
    /// `n` slots of [`MAX_FRAME`] bytes each.
    pub fn new(n: usize) -> RxBatch {
        RxBatch {
            slots: (0..n.max(1)).map(|_| vec![0; MAX_FRAME]).collect(),
            meta: vec![RxMeta::default(); n.max(1)],
            filled: 0,
        }
    }
    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }
    /// Frames received by the last [`Datapath::recv`].
    pub fn len(&self) -> usize {
        self.filled
    }
    /// True when the last receive got nothing.
    pub fn is_empty(&self) -> bool {
        self.filled == 0
    }
    /// The `i`-th received frame and its metadata.
    pub fn get(&self, i: usize) -> Option<(&[u8], RxMeta)> {
        if i >= self.filled {
            return None;
        }
        let m = *self.meta.get(i)?;
        Some((self.slots.get(i)?.get(..m.len)?, m))
    }
    /// The received frames in order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], RxMeta)> {
        (0..self.filled).filter_map(|i| self.get(i))
    }
    /// Slots and metadata for a datapath to fill; it then calls [`Self::set_len`].
    pub(crate) fn parts_mut(&mut self) -> (&mut [Vec<u8>], &mut [RxMeta]) {
        self.filled = 0;
        (&mut self.slots, &mut self.meta)
    }
    pub(crate) fn set_len(&mut self, n: usize) {
        self.filled = n.min(self.slots.len());
    }
    /// Copies `frame` into the slot after the last filled one, with `meta` (its `len` set to
    /// the frame's): for a datapath that hands its frames on from its own buffers. False when
    /// every slot is full or the frame is longer than a slot.
    pub(crate) fn push(&mut self, frame: &[u8], meta: RxMeta) -> bool {
        let (Some(slot), Some(m)) = (
            self.slots.get_mut(self.filled),
            self.meta.get_mut(self.filled),
        ) else {
            return false;
        };
        slot.resize(MAX_FRAME, 0);
        let Some(dst) = slot.get_mut(..frame.len()) else {
            return false;
        };
        rocev2_ipc::shm::copy_slice(dst, frame);
        *m = RxMeta {
            len: frame.len(),
            ..meta
        };
        self.filled += 1;
        true
    }
}

/// A batch of frames to send: filled by the caller (the [`Driver`] lets the core write straight
/// into the slots), drained by [`Datapath::send`], which may take only a prefix when the kernel
/// pushes back.
#[derive(Debug, Default)]
pub struct TxBatch {
    frames: Vec<Vec<u8>>,
    /// Per slot: `Some` when it holds a UDP payload rather than a frame.
    datagrams: Vec<Option<DatagramMeta>>,
    /// Frames `head..len` are waiting.
    head: usize,
    len: usize,
}

impl TxBatch {
    /// Room for `n` frames before the caller must flush.
    pub fn new(n: usize) -> TxBatch {
        TxBatch {
            frames: (0..n.max(1))
                .map(|_| Vec::with_capacity(MAX_FRAME))
                .collect(),
            datagrams: vec![None; n.max(1)],
            head: 0,
            len: 0,
        }
    }
    /// Frames waiting to be sent.
    pub fn pending(&self) -> usize {
        self.len - self.head
    }
    /// True when no frame is waiting.
    pub fn is_empty(&self) -> bool {
        self.pending() == 0
    }
    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.frames.len()
    }
    /// True when no slot is free.
    pub fn is_full(&self) -> bool {
        self.len == self.frames.len()
    }
    /// Appends a copy of `frame`; `false` when the batch is full.
    pub fn push(&mut self, frame: &[u8]) -> bool {
        self.push_with(|buf| {
            buf.clear();
            buf.extend_from_slice(frame);
            Some(frame.len())
        })
    }
    /// Lets `fill` write the next frame into a reusable buffer and return its length (`None`
    /// leaves the batch unchanged). Returns whether a frame was added.
    pub fn push_with(&mut self, fill: impl FnOnce(&mut Vec<u8>) -> Option<usize>) -> bool {
        self.push_datagram_with(|buf| fill(buf).map(|n| (None, n)))
    }
    /// As [`Self::push_with`] for a datapath that [`Datapath::carries_datagrams`]: `fill`
    /// writes a UDP payload and returns its metadata with its length
    /// ([`rocev2_core::Endpoint::poll_transmit_datagram`] fits).
    pub fn push_datagram_with(
        &mut self,
        fill: impl FnOnce(&mut Vec<u8>) -> Option<(Option<DatagramMeta>, usize)>,
    ) -> bool {
        if self.head == self.len {
            self.head = 0;
            self.len = 0;
        }
        let Some(buf) = self.frames.get_mut(self.len) else {
            return false;
        };
        match fill(buf) {
            Some((meta, n)) => {
                buf.truncate(n);
                if let Some(d) = self.datagrams.get_mut(self.len) {
                    *d = meta;
                }
                self.len += 1;
                true
            }
            None => false,
        }
    }
    /// The `i`-th waiting frame, for a datapath that must patch it before sending.
    pub(crate) fn frame_mut(&mut self, i: usize) -> Option<&mut Vec<u8>> {
        let at = self.head.checked_add(i)?;
        if at >= self.len {
            return None;
        }
        self.frames.get_mut(at)
    }
    /// The metadata of the `i`-th waiting entry when it is a UDP payload, `None` for a frame.
    pub(crate) fn datagram(&self, i: usize) -> Option<DatagramMeta> {
        let at = self.head.checked_add(i)?;
        if at >= self.len {
            return None;
        }
        *self.datagrams.get(at)?
    }
    /// The waiting frames (or UDP payloads), oldest first.
    pub fn frames(&self) -> impl Iterator<Item = &[u8]> {
        self.frames[self.head..self.len].iter().map(Vec::as_slice)
    }
    /// Marks the oldest `n` waiting frames as sent (or given up).
    pub fn consume(&mut self, n: usize) {
        self.head = (self.head + n).min(self.len);
        if self.head == self.len {
            self.head = 0;
            self.len = 0;
        }
    }
}

/// Counters every datapath keeps; names are the keys `rocev2d stats` prints. A datapath leaves
/// the ones that cannot happen in its mode at zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DatapathStats {
    /// Frames handed to the caller.
    pub rx_packets: u64,
    /// Their bytes.
    pub rx_bytes: u64,
    /// Frames the kernel accepted for sending.
    pub tx_packets: u64,
    /// Their bytes.
    pub tx_bytes: u64,
    /// Frames the userspace filter discarded as not RoCEv2 (AF_PACKET: frames that raced the
    /// socket filter, or all traffic where the filter could not be attached).
    pub rx_filtered: u64,
    /// Datagrams or frames longer than a slot, discarded.
    pub rx_truncated: u64,
    /// Frames the kernel dropped before we read them (AF_PACKET `tp_drops`).
    pub rx_kernel_drops: u64,
    /// UDP mode: packets whose ICRC did not verify against the IPv4 header (ID 0, DF) and
    /// were accepted anyway because `accept_unverified_icrc` is on (`docs/wire.md`, option 2).
    pub icrc_unverifiable: u64,
    /// AF_PACKET: frames whose UDP checksum the kernel had left unfinished (checksum offload on
    /// a local veth), zeroed before handing them on.
    pub rx_csum_unfinished: u64,
    /// Frames the kernel refused for good (too big for the path MTU, no route, …), dropped.
    pub tx_errors: u64,
    /// Frames that were not well-formed RoCEv2 frames from the core, dropped (a bug).
    pub tx_malformed: u64,
    /// Send calls that found the kernel's queue full; the frames waited.
    pub tx_blocked: u64,
    /// UDP mode: frames sent from port 4791 with a recomputed ICRC because no socket could be
    /// bound to the QP's UDP source port.
    pub tx_sport_fallback: u64,
    /// AF_XDP: RoCEv2 frames the steering program redirected to our sockets (all CPUs).
    pub steer_redirected: u64,
    /// AF_XDP: RoCEv2 frames that arrived on a queue without a socket, passed to the kernel.
    pub steer_no_socket: u64,
    /// AF_XDP: frames that are not RoCEv2, passed to the kernel.
    pub steer_not_roce: u64,
    /// AF_XDP: frames too short for the headers they announce, passed to the kernel.
    pub steer_truncated: u64,
    /// UDP mode: receive buffers the kernel coalesced from several datagrams (`UDP_GRO`).
    pub rx_gro_buffers: u64,
    /// UDP mode: datagrams split out of those buffers (each also counts in `rx_packets`).
    pub rx_gro_segments: u64,
    /// UDP mode: send entries carrying several datagrams with `UDP_SEGMENT` (GSO).
    pub tx_gso_sends: u64,
    /// UDP mode: datagrams sent in those entries (each also counts in `tx_packets`).
    pub tx_gso_segments: u64,
    /// AF_XDP: received frames handed to the core inside their UMEM chunk, without a copy
    /// ([`Datapath::recv_with`]); the rest of `rx_packets` were copied out first.
    pub rx_in_place: u64,
    /// AF_XDP: frames the core built straight into the UMEM ([`Datapath::transmit_with`]), one
    /// chunk or several adjacent ones; the rest of `tx_packets` were copied into the UMEM from a
    /// [`TxBatch`].
    pub tx_in_place: u64,
    /// AF_PACKET: frames cut out of GSO buffers a local UDP-mode peer's `UDP_SEGMENT` sends
    /// left whole (`PACKET_VNET_HDR`; each also counts in `rx_packets`).
    pub rx_gso_split: u64,
    /// Engine shard ([`handoff::Shard`]): frames for another live shard's QPN block, copied
    /// into its inbox instead of being handed to this shard's core (they count in this shard's
    /// `rx_packets`: its socket received them).
    pub rx_forwarded: u64,
    /// Engine shard: frames for another shard dropped because its inbox was full.
    pub rx_handoff_full: u64,
    /// Engine shard over AF_PACKET: frames for another live shard, which sees them too, dropped.
    pub rx_other_shard: u64,
    /// Engine shard: frames other shards forwarded here, handed to the core.
    pub rx_from_shards: u64,
    /// Engine shard: CM MADs (to QP1) forwarded to the shard whose CM owns their connection or
    /// listens on their REQ's Service ID (each also counts in `rx_forwarded`).
    pub rx_cm_forwarded: u64,
    /// Frames for the interface's own MAC, handed back to its receive side without leaving
    /// the host ([`loopback`]); they count in neither `tx_packets` nor `rx_packets`.
    pub tx_looped: u64,
}

impl DatapathStats {
    /// Every counter with its name, in declaration order.
    pub fn named(&self) -> [(&'static str, u64); 30] {
        [
            ("rx_packets", self.rx_packets),
            ("rx_bytes", self.rx_bytes),
            ("tx_packets", self.tx_packets),
            ("tx_bytes", self.tx_bytes),
            ("rx_filtered", self.rx_filtered),
            ("rx_truncated", self.rx_truncated),
            ("rx_kernel_drops", self.rx_kernel_drops),
            ("icrc_unverifiable", self.icrc_unverifiable),
            ("rx_csum_unfinished", self.rx_csum_unfinished),
            ("tx_errors", self.tx_errors),
            ("tx_malformed", self.tx_malformed),
            ("tx_blocked", self.tx_blocked),
            ("tx_sport_fallback", self.tx_sport_fallback),
            ("steer_redirected", self.steer_redirected),
            ("steer_no_socket", self.steer_no_socket),
            ("steer_not_roce", self.steer_not_roce),
            ("steer_truncated", self.steer_truncated),
            ("rx_gro_buffers", self.rx_gro_buffers),
            ("rx_gro_segments", self.rx_gro_segments),
            ("tx_gso_sends", self.tx_gso_sends),
            ("tx_gso_segments", self.tx_gso_segments),
            ("rx_in_place", self.rx_in_place),
            ("tx_in_place", self.tx_in_place),
            ("rx_gso_split", self.rx_gso_split),
            ("rx_forwarded", self.rx_forwarded),
            ("rx_handoff_full", self.rx_handoff_full),
            ("rx_other_shard", self.rx_other_shard),
            ("rx_from_shards", self.rx_from_shards),
            ("rx_cm_forwarded", self.rx_cm_forwarded),
            ("tx_looped", self.tx_looped),
        ]
    }
}

/// A way of moving whole RoCEv2 Ethernet frames between the core and an interface.
///
/// Every call is non-blocking; the event loop waits on [`Datapath::fd`] (readable: frames to
/// receive; writable: room to send) and on the core's next deadline.
pub trait Datapath {
    /// Short mode name for logs and stats: `"packet"`, `"udp"`, `"xdp"`.
    fn name(&self) -> &'static str;

    /// True when the datapath would rather send UDP payloads with their [`DatagramMeta`]
    /// ([`TxBatch::push_datagram_with`]) than whole frames, because its kernel writes the
    /// headers. It must still accept whole frames, which it takes apart.
    fn carries_datagrams(&self) -> bool {
        false
    }

    /// Receives up to `batch.capacity()` frames into the batch's slots and returns how many
    /// (0 when nothing is waiting). Frames that are not RoCEv2 may be filtered out and counted.
    ///
    /// # Errors
    /// Only socket failures; a bad frame is never an error.
    fn recv(&mut self, batch: &mut RxBatch) -> Result<usize, Error>;

    /// Receives as [`Datapath::recv`] does and hands each frame with its metadata to `handle`;
    /// returns how many (at most `batch.capacity()`). A datapath that can lend its own receive
    /// buffers (AF_XDP's UMEM chunks) hands frames in place and reuses the buffers once `handle`
    /// returns, saving the copy into `batch`; by default frames are received into `batch`.
    ///
    /// # Errors
    /// As [`Datapath::recv`].
    fn recv_with(
        &mut self,
        batch: &mut RxBatch,
        handle: &mut dyn FnMut(&[u8], RxMeta),
    ) -> Result<usize, Error> {
        let n = self.recv(batch)?;
        for (bytes, meta) in batch.iter() {
            handle(bytes, meta);
        }
        Ok(n)
    }

    /// Lets `fill` write new frames ([`rocev2_core::Endpoint::poll_transmit`] fits: it writes
    /// one into the buffer and returns its length, `None` when it has nothing more) and sends
    /// them; returns how many frames were consumed, as [`Datapath::send`] does. Produces at most
    /// `batch.capacity()` frames. A datapath that can lend its own transmit buffers (AF_XDP's
    /// UMEM chunks) lets `fill` write into them; by default frames go through `batch`. Frames
    /// the kernel pushed back wait in `batch`; send them with [`Datapath::send`] first, since a
    /// call with frames waiting only tries those.
    ///
    /// # Errors
    /// As [`Datapath::send`].
    fn transmit_with(
        &mut self,
        batch: &mut TxBatch,
        fill: &mut dyn FnMut(&mut dyn FrameBuf) -> Option<usize>,
    ) -> Result<usize, Error> {
        if batch.is_empty() {
            while !batch.is_full() && batch.push_with(|buf| fill(buf)) {}
        }
        match batch.is_empty() {
            true => Ok(0),
            false => self.send(batch),
        }
    }

    /// Sends the waiting frames of `batch` in order, consuming those the kernel took or refused
    /// for good, and returns how many were consumed. When the kernel's queue is full the rest
    /// stay in the batch; wait for [`Datapath::fd`] to become writable and call again.
    ///
    /// # Errors
    /// Only socket failures that will not go away by retrying.
    fn send(&mut self, batch: &mut TxBatch) -> Result<usize, Error>;

    /// True when frames wait that [`Datapath::fd`] does not signal (frames a [`loopback`]
    /// took out of the transmit stream): the driver receives again before it sleeps.
    fn rx_waiting(&self) -> bool {
        false
    }

    /// A descriptor that polls readable when frames wait and writable when sends may proceed.
    fn fd(&self) -> BorrowedFd<'_>;

    /// Counters.
    fn stats(&self) -> DatapathStats;
}

impl<D: Datapath + ?Sized> Datapath for Box<D> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn carries_datagrams(&self) -> bool {
        (**self).carries_datagrams()
    }
    fn recv(&mut self, batch: &mut RxBatch) -> Result<usize, Error> {
        (**self).recv(batch)
    }
    fn recv_with(
        &mut self,
        batch: &mut RxBatch,
        handle: &mut dyn FnMut(&[u8], RxMeta),
    ) -> Result<usize, Error> {
        (**self).recv_with(batch, handle)
    }
    fn transmit_with(
        &mut self,
        batch: &mut TxBatch,
        fill: &mut dyn FnMut(&mut dyn FrameBuf) -> Option<usize>,
    ) -> Result<usize, Error> {
        (**self).transmit_with(batch, fill)
    }
    fn send(&mut self, batch: &mut TxBatch) -> Result<usize, Error> {
        (**self).send(batch)
    }
    fn rx_waiting(&self) -> bool {
        (**self).rx_waiting()
    }
    fn fd(&self) -> BorrowedFd<'_> {
        (**self).fd()
    }
    fn stats(&self) -> DatapathStats {
        (**self).stats()
    }
}

/// Frames for unit tests, built by the core.
#[cfg(test)]
pub(crate) mod test_frames {
    use rocev2_core::wire::aeth::{Credits, Syndrome};
    use rocev2_core::wire::frame::{Ecn, EthRepr, FrameRepr, IpRepr, ROCEV2_UDP_PORT, UdpRepr};
    use rocev2_core::wire::{AethRepr, BthRepr, Msn, Opcode, Operation, Psn, Qpn, RoceRepr};

    /// The test frames' IPv4 header: 10.0.0.1 to 10.0.0.2, don't fragment, TTL 64.
    pub(crate) fn v4(dscp: u8, ecn: Ecn) -> IpRepr {
        IpRepr::V4 {
            src: [10, 0, 0, 1].into(),
            dst: [10, 0, 0, 2].into(),
            dscp,
            ecn,
            identification: 0,
            dont_fragment: true,
            ttl: 64,
        }
    }

    /// The test frames' IPv6 header: fd00::1 to fd00::2, hop limit 64.
    pub(crate) fn v6(dscp: u8, ecn: Ecn, flow_label: u32) -> IpRepr {
        IpRepr::V6 {
            src: [0xfd00, 0, 0, 0, 0, 0, 0, 1].into(),
            dst: [0xfd00, 0, 0, 0, 0, 0, 0, 2].into(),
            dscp,
            ecn,
            flow_label,
            hop_limit: 64,
        }
    }

    /// An RC ACK (QP 0x11, MSN 5) from UDP port `sport`, as the core emits it.
    pub(crate) fn ack(ip: IpRepr, sport: u16) -> Vec<u8> {
        let bth = BthRepr::new(
            Opcode::rc(Operation::Acknowledge),
            0xffff,
            Qpn::new(0x11),
            Psn::new(0x7d2ab1),
        );
        let aeth = AethRepr {
            syndrome: Syndrome::Ack(Credits::from_code(31)),
            msn: Msn::new(5),
        };
        frame(
            ip,
            sport,
            RoceRepr {
                aeth: Some(aeth),
                ..RoceRepr::new(bth)
            },
            &[],
        )
    }

    /// A MAD to QP1 (UD SEND Only with its DETH), as the core's GSI emits it.
    pub(crate) fn mad(ip: IpRepr, mad: &[u8]) -> Vec<u8> {
        use rocev2_core::wire::{DethRepr, GSI_Q_KEY, Transport};
        let bth = BthRepr::new(
            Opcode::new(Transport::Ud, Operation::SendOnly),
            0xffff,
            Qpn::GSI,
            Psn::new(0),
        );
        let deth = DethRepr {
            q_key: GSI_Q_KEY,
            src_qp: Qpn::GSI,
        };
        frame(
            ip,
            0xd872,
            RoceRepr {
                deth: Some(deth),
                ..RoceRepr::new(bth)
            },
            mad,
        )
    }

    /// An RC SEND Middle (QP 0x11) with PSN `psn` carrying `payload`, as the core emits it.
    pub(crate) fn send_middle(ip: IpRepr, sport: u16, psn: u32, payload: &[u8]) -> Vec<u8> {
        let bth = BthRepr::new(
            Opcode::rc(Operation::SendMiddle),
            0xffff,
            Qpn::new(0x11),
            Psn::new(psn),
        );
        frame(ip, sport, RoceRepr::new(bth), payload)
    }

    fn frame(ip: IpRepr, sport: u16, roce: RoceRepr, payload: &[u8]) -> Vec<u8> {
        let repr = FrameRepr {
            eth: EthRepr {
                src: [2, 0, 0, 0, 0, 1],
                dst: [2, 0, 0, 0, 0, 2],
                vlan: None,
            },
            ip,
            udp: UdpRepr {
                src_port: sport,
                dst_port: ROCEV2_UDP_PORT,
                checksum: matches!(ip, IpRepr::V6 { .. }),
            },
            roce,
        };
        let mut buf = vec![0; repr.buffer_len(payload.len()).expect("frame fits")];
        repr.emit(&mut buf, payload).expect("frame emits");
        buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tx_batch_push_consume_reuses_slots() {
        let mut b = TxBatch::new(2);
        assert!(b.push(&[1, 2, 3]));
        assert!(b.push(&[4]));
        assert!(!b.push(&[5]), "full");
        assert_eq!(b.frames().collect::<Vec<_>>(), vec![&[1, 2, 3][..], &[4]]);
        b.consume(1);
        assert_eq!(b.pending(), 1);
        assert!(!b.push(&[6]), "slots free only once all are sent");
        b.consume(1);
        assert!(b.is_empty());
        assert!(b.push(&[7, 8]));
        assert_eq!(b.frames().next(), Some(&[7, 8][..]));
        assert!(
            !b.push_with(|_| None),
            "a fill that writes nothing adds nothing"
        );
        assert_eq!(b.pending(), 1);
    }

    #[test]
    fn rx_batch_get_stays_in_bounds() {
        let mut b = RxBatch::new(2);
        let (slots, meta) = b.parts_mut();
        slots[0][..3].copy_from_slice(&[9, 8, 7]);
        meta[0] = RxMeta {
            len: 3,
            ecn: Ecn::Ce,
            datagram: None,
        };
        meta[1] = RxMeta {
            len: MAX_FRAME + 1,
            ecn: Ecn::NotEct,
            datagram: None,
        };
        b.set_len(5);
        assert_eq!(b.len(), 2);
        assert_eq!(
            b.get(0),
            Some((
                &[9, 8, 7][..],
                RxMeta {
                    len: 3,
                    ecn: Ecn::Ce,
                    datagram: None,
                }
            ))
        );
        assert_eq!(b.get(1), None, "a bad length is not a panic");
        assert_eq!(b.iter().count(), 1);
    }
}
