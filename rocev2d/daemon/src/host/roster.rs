//! The attachments of every engine shard of a daemon (`docs/daemon.md`, "Several queues"):
//! their ids and users, so that an id names one attachment host-wide and `[limits]
//! max_apps_per_user` bounds a user's attachments on the host, not on each shard.
//!
//! A daemon of one shard has one roster, its host's own; the shards of a sharded daemon share
//! one ([`super::Host::sharing`]). It is touched only when an application attaches or detaches.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Live attachments of the host, by id, with their users.
#[derive(Debug)]
pub struct Roster(Mutex<Inner>);

#[derive(Debug)]
struct Inner {
    next: u32,
    live: BTreeMap<u32, u32>,
}

impl Default for Roster {
    fn default() -> Self {
        Roster(Mutex::new(Inner {
            next: 1,
            live: BTreeMap::new(),
        }))
    }
}

impl Roster {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Inserts and removals only: a panic cannot leave the map half-changed.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new attachment id for user `uid`, or `Err(held)` when the user holds `max` already.
    /// Ids wrap after 2^32 attachments and skip those still live, so none is given twice.
    pub fn enter(&self, uid: u32, max: u32) -> Result<u32, usize> {
        let mut g = self.lock();
        let held = g.live.values().filter(|u| **u == uid).count();
        if held >= max as usize {
            return Err(held);
        }
        while g.live.contains_key(&g.next) {
            g.next = g.next.wrapping_add(1).max(1);
        }
        let id = g.next;
        g.next = g.next.wrapping_add(1).max(1);
        g.live.insert(id, uid);
        Ok(id)
    }

    /// Attachment `id` closed.
    pub fn leave(&self, id: u32) {
        self.lock().live.remove(&id);
    }

    /// The next id [`Roster::enter`] tries (tests make it wrap).
    #[cfg(test)]
    pub(crate) fn set_next(&self, next: u32) {
        self.lock().next = next;
    }
}
