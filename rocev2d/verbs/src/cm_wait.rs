//! What CM waiters share with the backends: the queue of a device's CM events
//! ([`queue_cm_event`]), what a look at it finds ([`Look`], [`Sleep`]) and the waiters'
//! wake-ups ([`CmWaiters`]). The calls and the look-or-sleep loop are the device's.

use crate::wakeup::Waitable;
use rocev2_core::cm::Event;
use rocev2_ipc::notify::EventFd;
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// The wake-ups of a device's CM waiters: each waiter (a [`Device::next_cm_event`](crate::Device::next_cm_event) call or a
/// [`Device::next_cm_event_async`](crate::Device::next_cm_event_async) future) registers an eventfd of its own, and whoever queues
/// CM events for the device signals them all. So no waiter can take another's wake-up by
/// clearing a shared descriptor (as one eventfd cleared by every waiter before it slept did:
/// a blocking waiter clearing it between the signal and tokio's look at its reactor left an
/// async waiter asleep until the next event).
#[derive(Debug, Default)]
pub(crate) struct CmWaiters(Mutex<Vec<Weak<Waitable<EventFd>>>>);

impl CmWaiters {
    /// Adds `w` (forgetting waiters that are gone).
    pub(crate) fn register(&self, w: &Arc<Waitable<EventFd>>) {
        let mut v = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        v.retain(|x| x.strong_count() > 0);
        v.push(Arc::downgrade(w));
    }

    /// Signals every waiter: each looks at the queue again. Called after queueing events (and
    /// when the device fails, so each sees why).
    pub(crate) fn fire(&self) {
        let mut v = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        v.retain(|x| match x.upgrade() {
            Some(w) => {
                w.get().signal();
                true
            }
            None => false,
        });
    }
}

/// What a look at the queue found (a backend's `cm_look`).
pub(crate) enum Look {
    Found(Event),
    Sleep(Sleep),
}

/// What to sleep on before the next look.
pub(crate) enum Sleep {
    /// Caller-driven: drive the engine (blocking) or yield (async).
    Drive,
    /// The waiter's own eventfd, signalled by the progress thread or a CM call.
    Own,
    /// The own eventfd, the daemon's CM eventfd (whoever wakes fetches and signals the
    /// others) and the control socket (the daemon died).
    Daemon {
        daemon: Arc<Waitable<EventFd>>,
        watch: Arc<Waitable<OwnedFd>>,
    },
}

/// How many [`Event::TimeWaitExit`]s the device's CM queue keeps. rdmacm-shim never takes them
/// (its calls return at `Disconnected`, seconds before the time-wait ends), so without a bound
/// every connection a long-running listener served would leave one queued until the device
/// closes; an application that wants them takes them within this many newer ones.
const TIME_WAIT_EXITS_KEPT: usize = 64;

/// Queues `ev` for [`crate::Device::next_cm_event`], in-process or fetched from the daemon:
/// see [`push_bounded`].
pub(crate) fn queue_cm_event(q: &mut VecDeque<Event>, ev: Event) {
    push_bounded(
        q,
        ev,
        |e| matches!(e, Event::TimeWaitExit { .. }),
        TIME_WAIT_EXITS_KEPT,
    );
}

/// Appends `item`; when `bounded` holds for it and `kept` queued items already satisfy
/// `bounded`, the oldest of those goes first. Other items are never dropped.
fn push_bounded<T>(q: &mut VecDeque<T>, item: T, bounded: impl Fn(&T) -> bool, kept: usize) {
    if bounded(&item)
        && q.iter().filter(|e| bounded(e)).count() >= kept
        && let Some(i) = q.iter().position(&bounded)
    {
        q.remove(i);
    }
    q.push_back(item);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Odd numbers stand for `TimeWaitExit`s: beyond two queued, the oldest odd one goes, and
    /// even ones, however many, stay in order.
    #[test]
    fn push_bounded_drops_only_the_oldest_bounded_item() {
        let odd = |n: &u32| n % 2 == 1;
        let mut q = VecDeque::new();
        for n in [2, 1, 4, 3, 6, 8] {
            push_bounded(&mut q, n, odd, 2);
        }
        assert_eq!(q, [2, 1, 4, 3, 6, 8]);
        push_bounded(&mut q, 5, odd, 2);
        assert_eq!(q, [2, 4, 3, 6, 8, 5]);
        push_bounded(&mut q, 10, odd, 2);
        push_bounded(&mut q, 7, odd, 2);
        assert_eq!(q, [2, 4, 6, 8, 5, 10, 7]);
    }
}
