//! Engine shards of one interface hand each other the frames that reached the wrong one.
//!
//! A shard (`docs/datapath.md`, "Several queues") is a datapath serving one receive queue and an
//! endpoint owning QPN block k ([`rocev2_core::Endpoint::with_qpn_block`]: `qpn >> 18 == k`). On
//! a veth a frame arrives on the queue its sender transmitted on, so shard k of one host and shard
//! k of the other talk over queue k. On a NIC, RSS hashes the flow's addresses and UDP source
//! port: a QP's frames land on whatever queue the hash picks, and the shard that gets them does
//! not own their QP. [`Shard`] wraps a shard's datapath and fixes that before the core sees a
//! frame: it reads the destination QPN ([`crate::filter`]'s UDP offset, then the BTH field) and
//!
//! - hands a frame of its own block, of a block no live shard of the interface owns (the core
//!   counts it `mis_steered`), or of QP0 to the core as before;
//! - finds the owner of a frame for QP1, a CM MAD, with [`rocev2_core::cm::route`] on its UD
//!   payload ([`crate::filter`] locates it after the BTH and DETH): an MRA, REJ, REP, RTU, DREQ
//!   or DREP belongs to the shard whose block its Remote Communication ID carries (a shard's CM
//!   allocates its Communication IDs in its block, [`rocev2_core::cm::Cm::with_comm_id_block`]),
//!   a REQ to the shard whose CM listens on its Service ID (the interface's **listen registry**,
//!   which each shard's device fills through [`Listens`]); such a frame goes where a data frame
//!   of that block would (`rx_cm_forwarded` counts the MADs among `rx_forwarded`). A MAD with
//!   no live owner (ClassPortInfo, a stray, a REQ nobody listens on) stays with the core that
//!   got it, which answers or rejects it as an unsharded CM does: over AF_PACKET, where every
//!   shard sees it, only the live shard of the lowest block does, so it is answered once;
//! - over AF_XDP (and any datapath that delivers each frame once), copies a frame of another live
//!   shard's block into that shard's **inbox** and wakes it (`rx_forwarded`); a full inbox drops
//!   the frame (`rx_handoff_full`: the sender retransmits), never blocking the receive pass;
//! - over AF_PACKET, where every shard's socket sees every frame of the interface, drops another
//!   live shard's frame quietly (`rx_other_shard`): its owner has its own copy; except a frame
//!   from the interface's own MAC, which this shard looped back ([`crate::loopback`]) and only
//!   it has: that one is forwarded.
//!
//! The receiving shard takes the frames of its inbox in its next receive pass, after its own
//! socket's, as if they had arrived there (`rx_from_shards`). Its [`Datapath::fd`] is an epoll
//! set holding the wrapped datapath's descriptor and the inbox's eventfd, so a sleeping shard
//! wakes for a forwarded frame. The sender signals the eventfd once per receive pass that
//! forwarded anything, and only when the receiver has not yet seen the previous signal.
//!
//! An inbox is a bounded `std::sync::mpsc::sync_channel` ([`INBOX_FRAMES`] frames): many senders,
//! one receiver, `try_send`/`try_recv` never block (std's bounded channel is an array queue whose
//! `try_` operations take no lock). Buffers travel back to the shard that filled them through a second channel, so a
//! steady stream of forwarded frames allocates nothing. Frames from one shard to another keep
//! their order.
//!
//! Shards find each other in a registry by network namespace and interface index, the key the
//! steering program's registry (`crate::steering`) uses: a shard joins at open and leaves at
//! close (both under the registry's lock, bumping the interface's generation); a shard reads the
//! generation with one atomic load per receive pass and refreshes its view of the others only
//! when it changed. A second shard of a block already live on the interface is refused.
//!
//! Deviations: the epoll set reports readability only, so a send the kernel pushed back is retried
//! on the driver's short timeout (`Driver::wait_plan`, 200 µs) rather than on writability, as for
//! a multi-queue AF_XDP datapath. A frame forwarded while its receiver is closing is lost (the
//! sender's transport retransmits it). A shard reads the listen registry at the start of a
//! receive pass, so a REQ received in the pass during which another shard's `cm_listen`
//! registered its Service ID is still rejected there (the peer sees "invalid Service ID", as
//! if it had connected a moment earlier).

use crate::sys::Epoll;
use crate::{Datapath, DatapathStats, Error, Interface, MAX_FRAME, RxBatch, RxMeta, TxBatch};
use rocev2_core::cm::{MadRoute, ServiceId, comm_id_block, route};
use rocev2_core::endpoint::{QPN_BLOCK_SHIFT, QPN_BLOCKS};
use rocev2_core::wire::FrameBuf;
use rocev2_ipc::notify::EventFd;
use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

/// Frames an inbox holds: sixteen receive batches of the driver (64 frames each), so a burst
/// that RSS sends to the wrong queue survives the receiving shard's scheduling delay.
pub const INBOX_FRAMES: usize = 1024;

/// An interface: the inode of its network namespace and its index there (indexes repeat across
/// namespaces, and one process may open interfaces of several).
pub(crate) type Key = (u64, u32);

/// The calling thread's network namespace, by inode.
pub(crate) fn netns() -> Result<u64, Error> {
    std::fs::metadata("/proc/thread-self/ns/net")
        .map(|m| m.ino())
        .map_err(|e| Error::io("stat /proc/thread-self/ns/net", e))
}

/// The shard groups of this process, by interface.
static GROUPS: Mutex<BTreeMap<Key, Weak<Group>>> = Mutex::new(BTreeMap::new());

fn groups() -> MutexGuard<'static, BTreeMap<Key, Weak<Group>>> {
    // A panic while holding the registry leaves a map of weak handles: still consistent.
    GROUPS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A frame in an inbox, with the block of the shard that forwarded it (whose buffer it is).
struct Forwarded {
    frame: Vec<u8>,
    meta: RxMeta,
    from: u32,
}

/// What another shard needs to reach a live shard: its inbox, its wake-up and the channel
/// through which its forwarded buffers come back.
#[derive(Clone)]
struct Member {
    inbox: SyncSender<Forwarded>,
    wake: Arc<Wake>,
    spares: SyncSender<Vec<u8>>,
}

/// A shard's eventfd, signalled at most once until the shard has looked.
struct Wake {
    fd: EventFd,
    signalled: AtomicBool,
}

impl Wake {
    /// Called by a sender after its frames are in the inbox.
    fn signal(&self) {
        if !self.signalled.swap(true, Ordering::SeqCst) {
            self.fd.signal();
        }
    }

    /// Called by the receiver before it drains the inbox: a frame sent after this is either
    /// drained now or signals again.
    fn clear(&self) {
        if self.signalled.swap(false, Ordering::SeqCst) {
            let _ = self.fd.clear();
        }
    }
}

/// The live shards of one interface and the Service IDs their CMs listen on.
#[derive(Default)]
struct Members {
    /// By block.
    shards: BTreeMap<u32, Member>,
    /// Service ID → the block of the shard listening on it.
    listens: BTreeMap<u64, u32>,
}

/// One interface's shards: their members, and a generation bumped at every change.
struct Group {
    members: Mutex<Members>,
    generation: AtomicU64,
}

impl Group {
    fn lock(&self) -> MutexGuard<'_, Members> {
        // Inserts and removals only: a panic cannot leave the map half-changed.
        self.members.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Frames of another shard's block: forward them (each frame reaches one shard) or drop them
/// (every shard sees every frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    Forward,
    Drop,
}

/// Counters of a [`Shard`], added to the wrapped datapath's.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    forwarded: u64,
    handoff_full: u64,
    other_shard: u64,
    from_shards: u64,
    cm_forwarded: u64,
}

/// A shard's datapath wrapped so that frames of another live shard's QPN block go to that
/// shard; see the module docs.
pub struct Shard<D> {
    inner: D,
    router: Router,
    key: Key,
    group: Arc<Group>,
    seen: u64,
    epoll: Epoll,
}

/// The data-path half of a [`Shard`]: where each frame goes, and the inbox.
struct Router {
    block: u32,
    policy: Policy,
    /// The interface's MAC: a frame from it was looped back by this shard ([`crate::loopback`];
    /// AF_PACKET does not return our own transmissions), so no other shard has a copy.
    mac: [u8; 6],
    /// The other members as of [`Shard::seen`] (index: block; this shard's own is `None`).
    view: Vec<Option<Member>>,
    /// The listen registry as of [`Shard::seen`].
    listens: BTreeMap<u64, u32>,
    /// Whether this shard's core takes the MADs no live shard owns: always when frames are
    /// forwarded (each reaches one shard), else only the live shard of the lowest block.
    takes_unowned_mads: bool,
    inbox: Receiver<Forwarded>,
    wake: Arc<Wake>,
    /// Buffers of frames this shard forwarded, given back by their receivers.
    spares: Receiver<Vec<u8>>,
    spares_tx: SyncSender<Vec<u8>>,
    /// Bit b: frames were forwarded to block b in this pass.
    to_wake: u64,
    counters: Counters,
}

impl<D: Datapath> std::fmt::Debug for Shard<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard")
            .field("describe", &self.describe())
            .field("counters", &self.router.counters)
            .finish_non_exhaustive()
    }
}

impl<D: Datapath> Shard<D> {
    /// Makes `inner`, a datapath of `iface`, the shard of QPN `block` (taken modulo
    /// [`QPN_BLOCKS`], as the endpoint does) and registers it with the interface's other shards
    /// in this process. An AF_PACKET datapath (`name() == "packet"`) sees every frame and drops
    /// the other shards' instead of forwarding them.
    ///
    /// # Errors
    /// [`Error::ShardTaken`] when a live shard of this process already owns `block` on `iface`;
    /// [`Error::Io`] when the eventfd or epoll set cannot be made.
    pub fn join(iface: &Interface, block: u32, inner: D) -> Result<Shard<D>, Error> {
        let block = block % QPN_BLOCKS;
        let key = (netns()?, iface.index);
        let policy = match inner.name() {
            "packet" => Policy::Drop,
            _ => Policy::Forward,
        };
        let wake = Arc::new(Wake {
            fd: EventFd::new().map_err(|e| Error::io("eventfd", e))?,
            signalled: AtomicBool::new(false),
        });
        let epoll = Epoll::new().map_err(|e| Error::io("epoll_create1", e))?;
        epoll
            .add_readable(inner.fd().as_raw_fd())
            .map_err(|e| Error::io("epoll_ctl", e))?;
        epoll
            .add_readable(wake.fd.as_fd().as_raw_fd())
            .map_err(|e| Error::io("epoll_ctl", e))?;
        let (inbox_tx, inbox) = sync_channel(INBOX_FRAMES);
        let (spares_tx, spares) = sync_channel(INBOX_FRAMES);
        let mut reg = groups();
        let group = match reg.get(&key).and_then(Weak::upgrade) {
            Some(g) => g,
            None => {
                let g = Arc::new(Group {
                    members: Mutex::new(Members::default()),
                    generation: AtomicU64::new(0),
                });
                reg.retain(|_, w| w.strong_count() > 0);
                reg.insert(key, Arc::downgrade(&g));
                g
            }
        };
        {
            let mut members = group.lock();
            if members.shards.contains_key(&block) {
                return Err(Error::ShardTaken {
                    name: iface.name.clone(),
                    block,
                });
            }
            members.shards.insert(
                block,
                Member {
                    inbox: inbox_tx,
                    wake: Arc::clone(&wake),
                    spares: spares_tx.clone(),
                },
            );
            group.generation.fetch_add(1, Ordering::SeqCst);
        }
        drop(reg);
        let mut s = Shard {
            inner,
            router: Router {
                block,
                policy,
                mac: iface.mac,
                view: Vec::new(),
                listens: BTreeMap::new(),
                takes_unowned_mads: true,
                inbox,
                wake,
                spares,
                spares_tx,
                to_wake: 0,
                counters: Counters::default(),
            },
            key,
            group,
            seen: 0,
            epoll,
        };
        s.refresh();
        Ok(s)
    }

    /// The QPN block this shard owns.
    pub fn block(&self) -> u32 {
        self.router.block
    }

    /// The handle through which this shard's device registers the Service IDs its CM listens
    /// on, so that REQs for them reach this shard from any other.
    pub fn listens(&self) -> Listens {
        Listens {
            group: Arc::downgrade(&self.group),
            block: self.router.block,
        }
    }

    /// The wrapped datapath.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// One phrase for logs and the device's reason: which block, and what becomes of frames of
    /// the other shards' blocks.
    pub fn describe(&self) -> String {
        let others = match self.router.policy {
            Policy::Forward => "forwarded to their shard",
            Policy::Drop => "dropped (their shard sees them too)",
        };
        format!(
            "engine shard of QPN block {}, frames for another shard's QPs or CM {others}",
            self.router.block
        )
    }

    /// Reloads the other members when the group changed since the last look: one atomic load
    /// otherwise.
    fn refresh(&mut self) {
        let generation = self.group.generation.load(Ordering::SeqCst);
        if generation == self.seen && !self.router.view.is_empty() {
            return;
        }
        let members = self.group.lock();
        let own = self.router.block;
        self.router.view = (0..QPN_BLOCKS)
            .map(|b| match b == own {
                true => None,
                false => members.shards.get(&b).cloned(),
            })
            .collect();
        self.router.listens = members.listens.clone();
        self.router.takes_unowned_mads =
            self.router.policy == Policy::Forward || members.shards.range(..own).next().is_none();
        self.seen = self.group.generation.load(Ordering::SeqCst);
    }
}

impl Router {
    /// Routes one received frame (see the module docs); true when it is this shard's to handle.
    fn keep(&mut self, bytes: &[u8], meta: RxMeta) -> bool {
        let (b, mad) = match (meta.datagram, crate::filter::dest_qpn(bytes)) {
            (None, Some(1)) => match self.mad_owner(bytes) {
                Some(b) => (b, true),
                None => return self.unowned_mad(),
            },
            // QP0 is every endpoint's own.
            (None, Some(qpn)) if qpn > 1 => (qpn >> QPN_BLOCK_SHIFT, false),
            _ => return true,
        };
        let Some(Some(m)) = self.view.get(b as usize) else {
            // Ours, or no live shard's: the core decides (`mis_steered` for the latter; an
            // unowned MAD is answered as a stray).
            return b == self.block || !mad || self.unowned_mad();
        };
        if self.policy == Policy::Drop && bytes.get(6..12) != Some(&self.mac[..]) {
            self.counters.other_shard += 1;
            return false;
        }
        let mut frame = self
            .spares
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(MAX_FRAME));
        frame.clear();
        frame.extend_from_slice(bytes);
        let f = Forwarded {
            frame,
            meta: RxMeta {
                len: bytes.len(),
                ..meta
            },
            from: self.block,
        };
        match m.inbox.try_send(f) {
            Ok(()) => {
                self.counters.forwarded += 1;
                self.counters.cm_forwarded += u64::from(mad);
                self.to_wake |= 1 << b;
                false
            }
            Err(TrySendError::Full(f)) => {
                self.counters.handoff_full += 1;
                let _ = self.spares_tx.try_send(f.frame);
                false
            }
            // The shard left since the view was taken: no owner, the core counts it.
            Err(TrySendError::Disconnected(_)) => true,
        }
    }

    /// Whether to keep a MAD no live shard owns; over AF_PACKET, the shards but the lowest drop
    /// it as the other shards' frames (`rx_other_shard`).
    fn unowned_mad(&mut self) -> bool {
        if !self.takes_unowned_mads {
            self.counters.other_shard += 1;
        }
        self.takes_unowned_mads
    }

    /// The block of the shard whose CM a frame for QP1 is for: the block of the Communication
    /// ID it names, or of the shard listening on its REQ's Service ID; `None` when it names
    /// neither (or is no UD SEND).
    fn mad_owner(&self, bytes: &[u8]) -> Option<u32> {
        match route(crate::filter::ud_send_payload(bytes)?) {
            MadRoute::Ours(id) => Some(comm_id_block(id)),
            MadRoute::Req { service_id } => self.listens.get(&service_id.0).copied(),
            MadRoute::Any => None,
        }
    }

    /// Wakes the shards frames were forwarded to in this pass.
    fn wake_receivers(&mut self) {
        let to_wake = std::mem::take(&mut self.to_wake);
        for (b, m) in self.view.iter().enumerate() {
            if let Some(m) = m.as_ref().filter(|_| to_wake & (1 << b) != 0) {
                m.wake.signal();
            }
        }
    }

    /// Takes up to `room` frames from the inbox and hands them to `handle`, giving each buffer
    /// back to the shard that filled it.
    fn drain(&mut self, room: usize, handle: &mut dyn FnMut(&[u8], RxMeta)) -> usize {
        self.wake.clear();
        let mut n = 0;
        while n < room {
            let Ok(f) = self.inbox.try_recv() else { break };
            handle(f.frame.get(..f.meta.len).unwrap_or(&f.frame), f.meta);
            n += 1;
            if let Some(Some(m)) = self.view.get(f.from as usize) {
                let _ = m.spares.try_send(f.frame);
            }
        }
        self.counters.from_shards += n as u64;
        n
    }
}

impl<D> Drop for Shard<D> {
    fn drop(&mut self) {
        let mut reg = groups();
        {
            let own = self.router.block;
            let mut members = self.group.lock();
            members.shards.remove(&own);
            members.listens.retain(|_, b| *b != own);
        }
        self.group.generation.fetch_add(1, Ordering::SeqCst);
        // The registry's entry goes with its last shard, under the registry's lock, so a shard
        // joining meanwhile finds either the live group or none.
        if Arc::strong_count(&self.group) == 1 {
            reg.remove(&self.key);
        }
    }
}

impl<D: Datapath> Datapath for Shard<D> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn carries_datagrams(&self) -> bool {
        self.inner.carries_datagrams()
    }

    /// Receives into `batch`, keeping the frames that are this shard's (moved to the front),
    /// then fills the remaining slots from the inbox.
    fn recv(&mut self, batch: &mut RxBatch) -> Result<usize, Error> {
        let n = self.inner.recv(batch)?;
        self.refresh();
        let (slots, meta) = batch.parts_mut();
        let mut out = 0usize;
        for i in 0..n.min(slots.len()).min(meta.len()) {
            let m = meta[i];
            let keep = match slots[i].get(..m.len) {
                Some(bytes) => self.router.keep(bytes, m),
                None => true,
            };
            if keep {
                slots.swap(out, i);
                meta[out] = m;
                out += 1;
            }
        }
        batch.set_len(out);
        self.router.wake_receivers();
        let room = batch.capacity().saturating_sub(out);
        self.router.drain(room, &mut |bytes, m| {
            batch.push(bytes, m);
        });
        Ok(batch.len())
    }

    /// Receives from the wrapped datapath, routing each frame (see the module docs), then takes
    /// up to a batch of frames from the inbox. Returns the frames handed to `handle`, at most
    /// twice `batch.capacity()`.
    fn recv_with(
        &mut self,
        batch: &mut RxBatch,
        handle: &mut dyn FnMut(&[u8], RxMeta),
    ) -> Result<usize, Error> {
        self.refresh();
        let Shard { inner, router, .. } = self;
        let mut here = 0usize;
        inner.recv_with(batch, &mut |bytes, meta| {
            if router.keep(bytes, meta) {
                here += 1;
                handle(bytes, meta);
            }
        })?;
        router.wake_receivers();
        Ok(here + router.drain(batch.capacity(), handle))
    }

    fn transmit_with(
        &mut self,
        batch: &mut TxBatch,
        fill: &mut dyn FnMut(&mut dyn FrameBuf) -> Option<usize>,
    ) -> Result<usize, Error> {
        self.inner.transmit_with(batch, fill)
    }

    fn send(&mut self, batch: &mut TxBatch) -> Result<usize, Error> {
        self.inner.send(batch)
    }

    fn rx_waiting(&self) -> bool {
        self.inner.rx_waiting()
    }

    /// An epoll set of the wrapped datapath's descriptor and the inbox's eventfd (readability
    /// only; see the module's deviations).
    fn fd(&self) -> BorrowedFd<'_> {
        self.epoll.fd()
    }

    fn stats(&self) -> DatapathStats {
        let c = self.router.counters;
        DatapathStats {
            rx_forwarded: c.forwarded,
            rx_handoff_full: c.handoff_full,
            rx_other_shard: c.other_shard,
            rx_from_shards: c.from_shards,
            rx_cm_forwarded: c.cm_forwarded,
            ..self.inner.stats()
        }
    }
}

/// A shard's entries in its interface's listen registry (from [`Shard::listens`]): its device
/// registers here each Service ID its CM listens on, so that a REQ for it reaches this shard
/// whichever shard receives it. The entries go with the shard when it closes.
#[derive(Debug, Clone)]
pub struct Listens {
    group: Weak<Group>,
    block: u32,
}

impl Listens {
    /// Registers `service_id` for this shard; `false` (and nothing changes) when another live
    /// shard of the interface listens on it. Registering it again is harmless.
    pub fn listen(&self, service_id: ServiceId) -> bool {
        let Some(group) = self.group.upgrade() else {
            // The shard is gone: nothing can route to it.
            return true;
        };
        let mut members = group.lock();
        match members.listens.get(&service_id.0) {
            Some(&b) => b == self.block,
            None => {
                members.listens.insert(service_id.0, self.block);
                group.generation.fetch_add(1, Ordering::SeqCst);
                true
            }
        }
    }

    /// Removes `service_id` from the registry if this shard registered it.
    pub fn unlisten(&self, service_id: ServiceId) {
        let Some(group) = self.group.upgrade() else {
            return;
        };
        let mut members = group.lock();
        if members.listens.get(&service_id.0) == Some(&self.block) {
            members.listens.remove(&service_id.0);
            group.generation.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocev2_core::wire::frame::Ecn;
    use std::collections::VecDeque;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixDatagram;

    /// A datapath that delivers queued frames; its descriptor is a socket so it fits an epoll set.
    struct Fake {
        name: &'static str,
        inbox: VecDeque<Vec<u8>>,
        sock: UnixDatagram,
    }

    impl Datapath for Fake {
        fn name(&self) -> &'static str {
            self.name
        }
        fn recv(&mut self, batch: &mut RxBatch) -> Result<usize, Error> {
            let (slots, meta) = batch.parts_mut();
            let mut n = 0;
            while n < slots.len() {
                let Some(f) = self.inbox.pop_front() else {
                    break;
                };
                slots[n][..f.len()].copy_from_slice(&f);
                meta[n] = RxMeta {
                    len: f.len(),
                    ecn: Ecn::Ect1,
                    datagram: None,
                };
                n += 1;
            }
            batch.set_len(n);
            Ok(n)
        }
        fn send(&mut self, batch: &mut TxBatch) -> Result<usize, Error> {
            let n = batch.pending();
            batch.consume(n);
            Ok(n)
        }
        fn fd(&self) -> BorrowedFd<'_> {
            self.sock.as_fd()
        }
        fn stats(&self) -> DatapathStats {
            DatapathStats::default()
        }
    }

    fn fake(name: &'static str) -> Fake {
        Fake {
            name,
            inbox: VecDeque::new(),
            sock: UnixDatagram::pair().unwrap().0,
        }
    }

    /// An interface of its own per test (the registry is per process, tests run in parallel).
    fn iface(index: u32) -> Interface {
        Interface {
            name: format!("test{index}"),
            index: 0x7000_0000 + index,
            mac: [0; 6],
            mtu: 1500,
            up: true,
            addrs: Vec::new(),
            rx_queues: 64,
        }
    }

    /// An RC ACK for `qpn` whose PSN is `seq`: enough for routing (the core is not involved).
    fn frame(qpn: u32, seq: u32) -> Vec<u8> {
        let ip = crate::test_frames::v4(0, Ecn::NotEct);
        let mut f = crate::test_frames::ack(ip, 1000);
        let bth = crate::filter::udp_at(&f).unwrap() + 8;
        f[bth + 5..bth + 8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        f[bth + 9..bth + 12].copy_from_slice(&seq.to_be_bytes()[1..]);
        f
    }

    /// Receives one pass with `recv_with`, returning the frames handed on.
    fn pass<D: Datapath>(s: &mut Shard<D>) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        let mut batch = RxBatch::new(64);
        let n = s
            .recv_with(&mut batch, &mut |b, m| {
                assert_eq!(m.len, b.len());
                assert_eq!(m.ecn, Ecn::Ect1, "metadata travels with the frame");
                got.push(b.to_vec());
            })
            .unwrap();
        assert_eq!(n, got.len());
        got
    }

    fn readable(fd: BorrowedFd<'_>) -> bool {
        let mut p = [libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        crate::sys::ppoll(&mut p, Some(rocev2_core::time::Duration::ZERO)).unwrap();
        p[0].revents & libc::POLLIN != 0
    }

    const B1: u32 = 1 << QPN_BLOCK_SHIFT;

    #[test]
    fn handoff_forwards_other_live_blocks_in_order_and_wakes() {
        let ifc = iface(1);
        let mut a = Shard::join(&ifc, 0, fake("xdp")).unwrap();
        let mut b = Shard::join(&ifc, 1, fake("xdp")).unwrap();
        let mine = frame(5, 0);
        let nobody = frame(7 << QPN_BLOCK_SHIFT, 0);
        let qp1 = frame(1, 0);
        a.inner.inbox.push_back(mine.clone());
        let theirs: Vec<Vec<u8>> = (0..10).map(|i| frame(B1 + 3, i)).collect();
        for (i, f) in theirs.iter().enumerate() {
            a.inner.inbox.push_back(f.clone());
            if i == 4 {
                a.inner.inbox.push_back(nobody.clone());
                a.inner.inbox.push_back(qp1.clone());
            }
        }
        assert!(!readable(b.fd()), "nothing forwarded yet");
        assert_eq!(pass(&mut a), vec![mine, nobody, qp1]);
        assert!(readable(b.fd()), "a forward wakes the receiver");
        assert_eq!(pass(&mut b), theirs, "every frame, in order");
        assert!(!readable(b.fd()), "drained: asleep again");
        let (sa, sb) = (a.stats(), b.stats());
        assert_eq!((sa.rx_forwarded, sa.rx_from_shards), (10, 0));
        assert_eq!((sb.rx_forwarded, sb.rx_from_shards), (0, 10));
        assert_eq!(sa.rx_handoff_full + sa.rx_other_shard, 0);
        // The buffers came back to A: its next forwards reuse them.
        assert_eq!(a.router.spares.try_iter().count(), 10);
        // Once B has left, its block has no shard: A hands its frames to its core (which
        // counts them `mis_steered`).
        drop(b);
        let late = frame(B1 + 3, 99);
        a.inner.inbox.push_back(late.clone());
        assert_eq!(pass(&mut a), vec![late]);
        assert_eq!(a.stats().rx_forwarded, 10);
    }

    #[test]
    fn handoff_over_af_packet_forwards_frames_this_host_looped_back() {
        // A frame from the interface's own MAC was looped back by the shard that sent it
        // (`crate::loopback`): no other shard's socket saw it, so it is forwarded, not dropped.
        let own = frame(B1 + 3, 0);
        let mut ifc = iface(11);
        ifc.mac = own[6..12].try_into().unwrap();
        let mut a = Shard::join(&ifc, 0, fake("packet")).unwrap();
        let mut b = Shard::join(&ifc, 1, fake("packet")).unwrap();
        let mut wire = frame(B1 + 3, 1);
        wire[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
        a.inner.inbox.push_back(wire);
        a.inner.inbox.push_back(own.clone());
        assert_eq!(pass(&mut a), Vec::<Vec<u8>>::new());
        assert_eq!(pass(&mut b), vec![own]);
        let s = a.stats();
        assert_eq!((s.rx_other_shard, s.rx_forwarded), (1, 1));
    }

    const SID: ServiceId = ServiceId::rdma_cm(rocev2_core::cm::PortSpace::TCP, 7174);

    /// The MADs of a CM connection between a peer (block 0) and `server` (block 1, listening on
    /// [`SID`]): the peer's REQ and RTU and the server's REP, each as a QP1 frame.
    fn cm_frames() -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        use rocev2_core::cm::{AcceptParams, Cm, CmConfig, ConnectParams, Event};
        use rocev2_core::time::Instant;
        use rocev2_core::wire::{Psn, Qpn};
        let now = Instant::ZERO;
        let (pg, sg) = (
            "::ffff:10.0.0.1".parse().unwrap(),
            "::ffff:10.0.0.2".parse().unwrap(),
        );
        let mut peer = Cm::new(CmConfig { local_ca_guid: 1 }, 1).with_comm_id_block(0);
        let mut server = Cm::new(CmConfig { local_ca_guid: 2 }, 2).with_comm_id_block(1);
        server.listen(SID).unwrap();
        let p = ConnectParams::new(SID, pg, sg, Qpn::new(0x11), Psn::new(1));
        peer.connect(now, p).unwrap();
        let req = peer.poll_transmit().unwrap().mad;
        server.handle_mad(now, sg, pg, &req);
        let Some(Event::ConnectRequest(r)) = server.poll_event() else {
            panic!("no request")
        };
        let qpn = Qpn::new(B1 + 0x11);
        server
            .accept(now, r.conn, AcceptParams::new(qpn, Psn::new(2)))
            .unwrap();
        let rep = server.poll_transmit().unwrap().mad;
        peer.handle_mad(now, pg, sg, &rep);
        while peer.poll_event().is_some() {}
        let rtu = peer.poll_transmit().unwrap().mad;
        let f = |m: &[u8]| crate::test_frames::mad(crate::test_frames::v4(0, Ecn::NotEct), m);
        (f(&req), f(&rep), f(&rtu))
    }

    #[test]
    fn handoff_cm_mads_reach_the_shard_of_their_connection_or_listener() {
        let ifc = iface(7);
        let mut a = Shard::join(&ifc, 0, fake("xdp")).unwrap();
        let mut b = Shard::join(&ifc, 1, fake("xdp")).unwrap();
        let (req, rep, rtu) = cm_frames();
        // Nobody listens yet: the REQ stays where it arrived (its core rejects it).
        a.inner.inbox.push_back(req.clone());
        assert_eq!(pass(&mut a), vec![req.clone()]);
        assert!(b.listens().listen(SID));
        assert!(b.listens().listen(SID), "again: harmless");
        assert!(!a.listens().listen(SID), "another shard listens on it");
        // The REQ goes to the listener, the RTU (naming the server's block-1 Communication ID)
        // to the server, the REP (naming the peer's block-0 one: no live shard here but A)
        // stays, as does a MAD of another class.
        let mut other_class = rtu.clone();
        let mad = crate::filter::ud_send_payload(&other_class)
            .unwrap()
            .as_ptr() as usize
            - other_class.as_ptr() as usize;
        other_class[mad + 1] = 0x04;
        a.inner
            .inbox
            .extend([req.clone(), rep.clone(), rtu.clone(), other_class.clone()]);
        assert_eq!(pass(&mut a), vec![rep.clone(), other_class]);
        assert_eq!(pass(&mut b), vec![req.clone(), rtu.clone()]);
        let s = a.stats();
        assert_eq!((s.rx_forwarded, s.rx_cm_forwarded), (2, 2));
        assert_eq!(b.stats().rx_from_shards, 2);
        // Unlistened (or its shard gone), a REQ stays local again.
        a.listens().unlisten(SID);
        a.inner.inbox.push_back(req.clone());
        assert!(pass(&mut a).is_empty(), "only its owner unlistens it");
        b.listens().unlisten(SID);
        a.inner.inbox.push_back(req.clone());
        assert_eq!(pass(&mut a), vec![req.clone()]);
        assert!(b.listens().listen(SID));
        drop(b);
        a.inner.inbox.extend([req.clone(), rtu.clone()]);
        assert_eq!(
            pass(&mut a),
            vec![req, rtu],
            "no live owner: the core answers"
        );
        assert!(
            a.listens().listen(SID),
            "the registry forgot the closed shard"
        );
        assert_eq!(a.stats().rx_cm_forwarded, 3);
    }

    #[test]
    fn handoff_packet_shards_take_each_mad_once() {
        let ifc = iface(8);
        let mut a = Shard::join(&ifc, 0, fake("packet")).unwrap();
        let mut b = Shard::join(&ifc, 1, fake("packet")).unwrap();
        let (req, rep, rtu) = cm_frames();
        assert!(b.listens().listen(SID));
        // Both sockets see every MAD: B takes the REQ and the RTU, A (the lowest live block)
        // the REP, which no live shard owns.
        let all = [req.clone(), rep.clone(), rtu.clone()];
        a.inner.inbox.extend(all.iter().cloned());
        b.inner.inbox.extend(all.iter().cloned());
        assert_eq!(pass(&mut a), vec![rep]);
        assert_eq!(pass(&mut b), vec![req, rtu]);
        assert_eq!((a.stats().rx_other_shard, b.stats().rx_other_shard), (2, 1));
    }

    #[test]
    fn handoff_full_inbox_counts_drops_and_keeps_order() {
        let ifc = iface(2);
        let mut a = Shard::join(&ifc, 0, fake("xdp")).unwrap();
        let mut b = Shard::join(&ifc, 1, fake("xdp")).unwrap();
        let extra = 3;
        let sent: Vec<Vec<u8>> = (0..(INBOX_FRAMES + extra) as u32)
            .map(|i| frame(B1 + 9, i))
            .collect();
        a.inner.inbox.extend(sent.iter().cloned());
        while !a.inner.inbox.is_empty() {
            assert!(pass(&mut a).is_empty());
        }
        let s = a.stats();
        assert_eq!(s.rx_forwarded, INBOX_FRAMES as u64);
        assert_eq!(
            s.rx_handoff_full, extra as u64,
            "a full inbox drops, never blocks"
        );
        let mut got = Vec::new();
        loop {
            let p = pass(&mut b);
            if p.is_empty() {
                break;
            }
            got.extend(p);
        }
        assert_eq!(got, sent[..INBOX_FRAMES], "the first ones, in order");
        assert_eq!(b.stats().rx_from_shards, INBOX_FRAMES as u64);
    }

    #[test]
    fn handoff_packet_shards_drop_other_shards_frames_quietly() {
        let ifc = iface(3);
        let mut a = Shard::join(&ifc, 0, fake("packet")).unwrap();
        let mut b = Shard::join(&ifc, 1, fake("packet")).unwrap();
        // Every AF_PACKET socket sees every frame.
        let both = [frame(4, 0), frame(B1 + 4, 0)];
        a.inner.inbox.extend(both.iter().cloned());
        b.inner.inbox.extend(both.iter().cloned());
        assert_eq!(pass(&mut a), vec![both[0].clone()]);
        assert_eq!(pass(&mut b), vec![both[1].clone()]);
        for s in [a.stats(), b.stats()] {
            assert_eq!(
                (s.rx_other_shard, s.rx_forwarded, s.rx_from_shards),
                (1, 0, 0)
            );
        }
        assert!(a.describe().contains("dropped"), "{}", a.describe());
    }

    #[test]
    fn handoff_batch_recv_keeps_own_frames_then_forwarded_ones() {
        let ifc = iface(4);
        let mut a = Shard::join(&ifc, 0, fake("xdp")).unwrap();
        let mut b = Shard::join(&ifc, 1, fake("xdp")).unwrap();
        let (x, y, z) = (frame(B1 + 2, 1), frame(6, 2), frame(B1 + 2, 3));
        a.inner.inbox.extend([x.clone(), y.clone(), z.clone()]);
        b.inner.inbox.push_back(frame(B1 + 2, 0));
        let mut batch = RxBatch::new(8);
        assert_eq!(a.recv(&mut batch).unwrap(), 1);
        assert_eq!(
            batch.iter().map(|(f, _)| f.to_vec()).collect::<Vec<_>>(),
            vec![y]
        );
        assert_eq!(b.recv(&mut batch).unwrap(), 3);
        let got: Vec<_> = batch.iter().map(|(f, _)| f.to_vec()).collect();
        assert_eq!(
            got,
            vec![frame(B1 + 2, 0), x, z],
            "its own first, then the inbox"
        );
    }

    #[test]
    fn handoff_second_shard_of_a_block_refused_until_the_first_leaves() {
        let ifc = iface(5);
        let a = Shard::join(&ifc, 2, fake("xdp")).unwrap();
        assert_eq!(a.block(), 2);
        let e = Shard::join(&ifc, 2 + QPN_BLOCKS, fake("xdp")).unwrap_err();
        assert!(matches!(e, Error::ShardTaken { block: 2, .. }), "{e}");
        // Another interface (or namespace) is another group.
        let other = Shard::join(&iface(6), 2, fake("xdp")).unwrap();
        drop(a);
        let again = Shard::join(&ifc, 2, fake("xdp")).unwrap();
        assert!(again.describe().contains("block 2"), "{}", again.describe());
        drop((other, again));
        assert!(
            groups().get(&(netns().unwrap(), iface(5).index)).is_none(),
            "the last one left"
        );
    }
}
