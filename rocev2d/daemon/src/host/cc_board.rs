//! The receiver-side congestion state of every engine shard of a daemon (`docs/daemon.md`,
//! "Several queues: engine shards"): DASR's sender sets, throughput and marks and DCQCN+'s list
//! lengths are one per host, while each shard's engine counts its own packets
//! ([`rocev2_core::cc::shards`]).
//!
//! A shard's host publishes its engine's [`ShardSummary`] when the engine makes one (once per
//! period) and takes the others' when one newer than those it took is there. A pass of the
//! shard's loop costs one atomic load of the board's generation; the lock is taken once per
//! period by the shard that publishes and once by each that reads: nothing per packet.

use rocev2_core::cc::ShardSummary;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The latest summary of each shard, by shard number.
#[derive(Debug, Default)]
pub struct CcBoard {
    /// Bumped by every publication, so a reader knows without the lock whether there is news.
    generation: AtomicU64,
    slots: Mutex<Vec<Option<Arc<ShardSummary>>>>,
}

impl CcBoard {
    fn lock(&self) -> MutexGuard<'_, Vec<Option<Arc<ShardSummary>>>> {
        // Slot stores only: a panic cannot leave the list half-changed.
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Shard `s.shard`'s summary of its last period, replacing its previous one.
    pub fn publish(&self, s: ShardSummary) {
        let k = s.shard;
        let mut slots = self.lock();
        if slots.len() <= k {
            slots.resize(k + 1, None);
        }
        slots[k] = Some(Arc::new(s));
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Every shard's latest summary into `out`, if any was published since generation `seen`
    /// (which moves on); false, without the lock, if none was.
    pub fn newer(&self, seen: &mut u64, out: &mut Vec<Arc<ShardSummary>>) -> bool {
        let generation = self.generation.load(Ordering::Acquire);
        if generation == *seen {
            return false;
        }
        *seen = generation;
        out.clear();
        out.extend(self.lock().iter().flatten().cloned());
        true
    }
}
