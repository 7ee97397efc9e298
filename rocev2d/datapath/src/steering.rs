//! The steering program of one interface, shared by every AF_XDP datapath of this process on it.
//!
//! XDP redirects a frame only to an AF_XDP socket bound to the queue it arrived on, and the
//! steering program (`rocev2-ebpf`, `steer`) puts it into `XSKMAP[rx_queue_index]`. An interface
//! carries one XDP program: a second attach would fail (or replace the first). So when several
//! datapaths of one process serve one interface, one per receive queue ([`crate::xdp::XdpConfig::queue`],
//! the engine shards of `docs/datapath.md`, "Several queues"), they share one attachment: the
//! first to open attaches the program and registers it here, by network namespace and interface
//! index; the others take a handle to the same one; each claims the queues it binds and puts its
//! sockets into the map at their index; a datapath that closes takes its sockets out of the map
//! and gives its queues back, and the last one detaches the program.
//!
//! The engine shards' registry (`crate::handoff`, where shards find each other to forward
//! frames RSS delivered to the wrong queue) uses the same key.
//!
//! The registry is touched only when a datapath opens or closes, and the handle's lock only then
//! and when counters are read: nothing on the data path.
//!
//! Deviations: none.

use crate::handoff::{Key, netns};
use crate::{Error, Interface};
use rocev2_ebpf_loader::steer::{AttachMode, Counter, MAX_QUEUES, Steering};
use std::collections::BTreeMap;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

/// The attached programs of this process, by interface.
static ATTACHED: Mutex<BTreeMap<Key, Weak<SharedSteering>>> = Mutex::new(BTreeMap::new());

fn attached() -> MutexGuard<'static, BTreeMap<Key, Weak<SharedSteering>>> {
    // A panic while holding the registry leaves a map of weak handles: still consistent.
    ATTACHED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The steering program of one interface and the queues whose sockets it redirects to.
pub(crate) struct SharedSteering {
    key: Key,
    mode: AttachMode,
    inner: Mutex<Inner>,
}

struct Inner {
    steering: Steering,
    /// Bit `q`: rx queue `q` has a socket of one of this process's datapaths.
    claimed: u64,
}

impl SharedSteering {
    /// The program attached to `iface` by this process, attaching it (in driver mode, else in
    /// generic mode, logged) if no datapath of this process holds it.
    ///
    /// # Errors
    /// [`Error::Xdp`] when the program cannot be loaded or attached in either mode.
    pub(crate) fn get(iface: &Interface) -> Result<Arc<SharedSteering>, Error> {
        let key = (netns()?, iface.index);
        let mut reg = attached();
        if let Some(s) = reg.get(&key).and_then(Weak::upgrade) {
            return Ok(s);
        }
        let (steering, mode) = match Steering::attach(iface.index, AttachMode::Driver) {
            Ok(s) => (s, AttachMode::Driver),
            Err(native) => match Steering::attach(iface.index, AttachMode::Skb) {
                Ok(s) => {
                    tracing::info!(iface = %iface.name, error = %native, "native XDP refused; generic (skb) mode");
                    (s, AttachMode::Skb)
                }
                Err(_) => return Err(Error::Xdp(native.to_string())),
            },
        };
        let s = Arc::new(SharedSteering {
            key,
            mode,
            inner: Mutex::new(Inner {
                steering,
                claimed: 0,
            }),
        });
        reg.retain(|_, w| w.strong_count() > 0);
        reg.insert(key, Arc::downgrade(&s));
        Ok(s)
    }

    /// Driver (native) or generic (skb) mode.
    pub(crate) fn mode(&self) -> AttachMode {
        self.mode
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The map and the claims change together under the lock, and neither call panics.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reserves rx `queue` for the caller, before it binds a socket to it.
    ///
    /// # Errors
    /// [`Error::Xdp`] when `queue` is beyond the program's map or another datapath of this
    /// process serves it.
    pub(crate) fn claim(&self, queue: u32) -> Result<(), Error> {
        if queue >= MAX_QUEUES {
            return Err(Error::Xdp(format!(
                "rx queue {queue}: the steering program's XSKMAP holds {MAX_QUEUES} queues"
            )));
        }
        let mut g = self.lock();
        if g.claimed & (1 << queue) != 0 {
            return Err(Error::Xdp(format!(
                "rx queue {queue} is already served by another AF_XDP datapath of this process"
            )));
        }
        g.claimed |= 1 << queue;
        Ok(())
    }

    /// Redirects RoCEv2 frames arriving on rx `queue` (claimed) to `socket`.
    ///
    /// # Errors
    /// [`Error::Xdp`] when the kernel refuses the map update.
    pub(crate) fn register(&self, queue: u32, socket: RawFd) -> Result<(), Error> {
        self.lock()
            .steering
            .register(queue, &Raw(socket))
            .map_err(|e| Error::Xdp(e.to_string()))
    }

    /// Takes rx `queue`'s socket out of the map and gives the queue back. Call before closing
    /// the socket.
    pub(crate) fn release(&self, queue: u32) {
        let mut g = self.lock();
        if let Err(e) = g.steering.unregister(queue) {
            // The kernel also forgets a socket when it closes: nothing is left behind.
            tracing::debug!(queue, error = %e, "XSKMAP entry not removed");
        }
        g.claimed &= !(1u64 << (queue % MAX_QUEUES));
    }

    /// The program's counters, summed over CPUs (every queue of the interface).
    pub(crate) fn counters(&self) -> Option<[(Counter, u64); Counter::ALL.len()]> {
        self.lock().steering.counters().ok()
    }

    /// Drops a handle the way a datapath closes: under the registry's lock, so that if it is
    /// the last one the program is detached before another datapath can look the interface up
    /// (and fail to attach a second program).
    pub(crate) fn close(this: Arc<SharedSteering>) {
        let mut reg = attached();
        let key = this.key;
        drop(this);
        if reg.get(&key).is_some_and(|w| w.strong_count() == 0) {
            reg.remove(&key);
        }
    }
}

/// A raw descriptor for [`Steering::register`], which only reads its number.
struct Raw(RawFd);

impl std::os::fd::AsRawFd for Raw {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}
