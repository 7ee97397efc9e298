//! The in-process backend: an engine, its memory and datapath behind one lock, and the
//! progress thread that drives them.
//!
//! With [`ProgressMode::Thread`] (default) a thread per device runs the driver's passes, so the
//! QPs answer their peers (ACKs, READ responses, atomics) whatever the application does, as an
//! RDMA NIC would. How it waits between passes is the driver's [`WaitMode`]:
//!
//! | [`WaitMode`] | the progress thread | idle CPU | a frame or a post costs |
//! |---|---|---|---|
//! | [`WaitMode::Spin`] (busy-poll) | passes back to back | one core | nothing |
//! | [`WaitMode::Adaptive`] (default) | busy-polls for the spin window after activity, then sleeps as `Sleep`; backs off while a waiter drives in its window | none | a wake-up after a pause |
//! | [`WaitMode::Sleep`] (interrupt) | sleeps in `poll(2)` on the datapath and a wake eventfd | none | a wake-up (eventfd write by the poster) |
//!
//! Busy-polling both ways would give each device two busy pollers (the application spinning
//! on its CQ and the thread), and the application's polls would queue for the lock behind the
//! thread's passes. So with [`WaitMode::Spin`] an application thread inside
//! [`crate::Device::wait_cq`] or [`crate::Device::next_completion`] drives the engine itself,
//! as caller-driven, and the thread backs off meanwhile, as every host side's progress thread
//! does ([`rocev2_datapath::host::ProgressThread`]: from 100 µs up to 5 ms while waiters keep
//! driving; BENCHMARKS.md, "The progress thread backs off longer"). The price: a post made
//! outside a wait and not followed by one, or a frame that arrives between two waits, waits for
//! the back-off under way (a post inside a wait, or followed by one, leaves with the waiter's
//! next pass).
//! [`WaitMode::Adaptive`] does the same for the first spin window of each wait; a wait still
//! empty then hands the engine back (waking the thread, which resumes its own adaptive
//! passes) and sleeps on its CQ's eventfd. Otherwise every completion would cross threads: the
//! thread receives, signals the eventfd, and the waiter must be scheduled before it can post
//! the answer, a wake-up per message that a loaded machine makes costly (a 64 B ping-pong over
//! AF_XDP took 33 µs adaptive against 8.3 µs spinning, BENCHMARKS.md).
//!
//! Measured (BENCHMARKS.md, `deploy/bench/api-async.sh`, a 2-vCPU VM): an idle device and a
//! task awaiting its CQ cost no measurable CPU (< 0.2% of a core); with the back-off, a
//! busy-polled 64 B ping-pong takes 0.94–1.12x the caller-driven round trip (1.5–1.8x before
//! it, with two busy pollers per device for two shared vCPUs).
//!
//! Completions reach waiters through per-CQ eventfds: a waiter arms its CQ (under the lock,
//! after finding it empty), and the first pass that leaves completions in an armed CQ signals
//! its eventfd, as the daemon does for attached CQs.
//!
//! With [`ProgressMode::Caller`] there is no thread: the engine moves only inside the
//! application's calls ([`crate::Device::poll`], [`crate::Device::wait_cq`], …), as a
//! busy-polling verbs application drives its CQ.
//!
//! The thread stops when the device's last handle is dropped.

use crate::cm::CmWaiters;
use crate::error::{Error, Result};
use crate::wakeup::{Waitable, wait_any};
use rocev2_core::cm::Event;
use rocev2_core::mr::VecMemory;
use rocev2_core::qp::CqId;
use rocev2_datapath::host::{self, AhTable, ProgressThread, RegionAddresses};
use rocev2_datapath::{Datapath, Driver, Progress, WaitMode, WaitPlan};
use rocev2_ipc::notify::EventFd;
use std::collections::{BTreeMap, VecDeque};
use std::ops::ControlFlow;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, MutexGuard};

/// Who drives an in-process device's engine; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ProgressMode {
    /// A thread per device, waiting between passes as [`crate::DriverConfig::wait`] says.
    #[default]
    Thread,
    /// Only the application's calls (no thread): the peer's READs and atomics are answered
    /// only while this side is inside one of them.
    Caller,
}

/// The in-process driver type.
pub type LocalDriver = Driver<Box<dyn Datapath + Send>, VecMemory>;

/// Everything the lock protects.
pub(crate) struct State {
    pub(crate) driver: LocalDriver,
    /// Region addresses ([`crate::Device::register`]).
    pub(crate) addresses: RegionAddresses,
    /// Each CQ's wake-up, signalled when armed and completions arrive.
    pub(crate) cqs: BTreeMap<CqId, Arc<CqEvent>>,
    /// Why the progress thread stopped early (a datapath failure).
    pub(crate) failed: Option<String>,
    /// Passes that received, sent or ran timers, so far.
    pub(crate) activity_gen: u64,
    /// CM events taken from the engine, until a waiter picks them ([`crate::cm`]).
    pub(crate) cm_events: VecDeque<Event>,
    /// Address handles ([`crate::Device::create_ah`]).
    pub(crate) ahs: AhTable,
    /// [`Local::activity`].
    activity: Arc<CqEvent>,
    /// [`Local::cm`].
    cm: Arc<CmWaiters>,
}

/// A CQ's (or the device's) wake-up: an eventfd signalled when armed.
#[derive(Debug)]
pub(crate) struct CqEvent {
    pub(crate) event: Waitable<EventFd>,
    armed: AtomicBool,
}

impl CqEvent {
    pub(crate) fn new() -> Result<CqEvent> {
        Ok(CqEvent {
            event: Waitable::new(EventFd::new().map_err(Error::Io)?),
            armed: AtomicBool::new(false),
        })
    }

    /// Asks for the next signal. Call under the lock, then look at the CQ again before sleeping.
    pub(crate) fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
        self.event.get().clear();
    }

    /// Signals if armed (called under the lock).
    pub(crate) fn fire(&self) {
        if self.armed.swap(false, Ordering::SeqCst) {
            self.event.get().signal();
        }
    }
}

/// The in-process backend; see the module docs.
pub(crate) struct Local {
    progress: ProgressThread<State>,
    /// Signalled, when armed, after a pass that received, sent or ran timers.
    pub(crate) activity: Arc<CqEvent>,
    /// Signalled when the engine reports a CM event.
    pub(crate) cm: Arc<CmWaiters>,
    pub(crate) mode: ProgressMode,
    pub(crate) wait: WaitMode,
    /// [`State::activity_gen`] at the application's last [`crate::Device::poll`], so
    /// [`crate::Device::wait`] returns at once for activity it has not looked at.
    pub(crate) seen: AtomicU64,
}

impl Local {
    pub(crate) fn new(
        driver: LocalDriver,
        first_addr: u64,
        mode: ProgressMode,
        wait: WaitMode,
    ) -> Result<Local> {
        let dp_fd = driver
            .datapath()
            .fd()
            .try_clone_to_owned()
            .map_err(Error::Io)?;
        let activity = Arc::new(CqEvent::new()?);
        let cm = Arc::new(CmWaiters::default());
        let state = State {
            driver,
            addresses: RegionAddresses::new(first_addr),
            cqs: BTreeMap::new(),
            failed: None,
            activity_gen: 0,
            cm_events: VecDeque::new(),
            ahs: AhTable::default(),
            activity: Arc::clone(&activity),
            cm: Arc::clone(&cm),
        };
        let name = (mode == ProgressMode::Thread).then(|| "rocev2-progress".to_string());
        Ok(Local {
            progress: ProgressThread::start(state, dp_fd, name).map_err(Error::Io)?,
            activity,
            cm,
            mode,
            wait,
            seen: AtomicU64::new(0),
        })
    }

    /// The state, locked ([`ProgressThread::lock`]).
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.progress.lock()
    }

    /// True when a progress thread drives the engine.
    pub(crate) fn has_thread(&self) -> bool {
        self.progress.has_thread()
    }

    /// How long an application's wait busy-polls, driving the engine while the progress thread
    /// backs off, before it sleeps on its CQ's eventfd: the thread's spin window
    /// ([`WaitMode::Spin`]: for ever; [`WaitMode::Sleep`], or no thread: not at all).
    pub(crate) fn drive_window(&self) -> std::time::Duration {
        match (self.has_thread(), self.wait) {
            (false, _) | (true, WaitMode::Sleep) => std::time::Duration::ZERO,
            (true, WaitMode::Adaptive { spin }) => std::time::Duration::from_nanos(spin.as_nanos()),
            (true, WaitMode::Spin) => std::time::Duration::MAX,
        }
    }

    /// Marks the calling thread as driving the engine until the guard drops.
    pub(crate) fn driving(&self) -> Driving<'_> {
        self.progress.driving()
    }

    /// Tells a sleeping progress thread that work was posted.
    pub(crate) fn kick(&self) {
        self.progress.kick();
    }

    /// The progress thread's passes so far.
    #[cfg(test)]
    pub(crate) fn passes(&self) -> u64 {
        self.progress.passes()
    }
}

/// An application thread driving the engine in a wait ([`Local::driving`]).
pub(crate) type Driving<'a> = host::Driving<'a, State>;

impl State {
    /// One pass of the driver on an application thread's behalf, then the wake-ups it earned.
    pub(crate) fn drive(&mut self) -> Result<Progress> {
        if let Some(why) = &self.failed {
            return Err(Error::ProgressStopped(why.clone()));
        }
        let p = self.driver.poll()?;
        self.fire(p);
        Ok(p)
    }

    /// Moves the engine's CM events to [`State::cm_events`]; true if there were any.
    pub(crate) fn take_cm_events(&mut self) -> bool {
        let mut any = false;
        while let Some(ev) = self.driver.ep.poll_cm_event() {
            queue_cm_event(&mut self.cm_events, ev);
            any = true;
        }
        any
    }

    fn fire(&mut self, p: Progress) {
        for (id, ev) in &self.cqs {
            if self.driver.ep.cq(*id).is_some_and(|c| !c.is_empty()) {
                ev.fire();
            }
        }
        if p.rx > 0 || p.tx > 0 || p.timers {
            self.activity_gen += 1;
            self.activity.fire();
        }
    }
}

impl host::Engine for State {
    /// The progress thread's pass. A datapath failure stops the thread and wakes every waiter:
    /// their next look reports it.
    fn pass(&mut self, woken: bool) -> ControlFlow<()> {
        if woken {
            self.driver.note_activity();
        }
        match self.driver.poll() {
            Ok(p) => {
                self.fire(p);
                if self.take_cm_events() {
                    self.cm.fire();
                }
                ControlFlow::Continue(())
            }
            Err(e) => {
                self.failed = Some(e.to_string());
                for ev in self.cqs.values() {
                    ev.event.get().signal();
                }
                self.activity.event.get().signal();
                self.cm.fire();
                ControlFlow::Break(())
            }
        }
    }

    fn wait_plan(&self) -> WaitPlan {
        self.driver.wait_plan()
    }
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

/// Waits, without the lock, until `ev` fires or `timeout` passes.
pub(crate) fn sleep_on(ev: &CqEvent, timeout: std::time::Duration) -> Result<()> {
    wait_any(&[ev.event.get().as_fd()], timeout).map(|_| ())
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
