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
//! as caller-driven, and the thread backs off meanwhile: it sleeps on its wake eventfd for
//! [`BACKOFF`], then twice as long each time it finds a waiter still driving, up to
//! [`BACKOFF_MAX`], until no application thread waits. Each wake-up of the thread takes a vCPU
//! from a busy-polling waiter for a scheduler round trip and a timer set-up (~15 µs on a 2-vCPU
//! VM); at one every 100 µs they made the round trip's p99 (BENCHMARKS.md, "The progress thread
//! backs off longer"). The price: a post made outside a wait and not followed by one, or a frame
//! that arrives between two waits, waits for the back-off under way, [`BACKOFF`] after a short
//! drive and up to [`BACKOFF_MAX`] after a long one (a post inside a wait, or followed by one,
//! leaves with the waiter's next pass).
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
//! The thread sleeps without holding the lock: it reads the driver's [`WaitPlan`] under the
//! lock, says it sleeps, and waits on a duplicate of the datapath's descriptor and its wake
//! eventfd. A post made after that sees the flag and signals the eventfd; a post made before
//! is sent by the pass that precedes the sleep (both happen under the lock).
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
//!
//! [`WaitPlan`]: rocev2_datapath::WaitPlan

use crate::error::{Error, Result};
use crate::wakeup::{Waitable, wait_any};
use rocev2_core::cm::Event;
use rocev2_core::mr::VecMemory;
use rocev2_core::qp::{AddressHandle, CqId};
use rocev2_datapath::{Datapath, Driver, Progress, WaitMode};
use rocev2_ipc::notify::EventFd;
use std::collections::{BTreeMap, VecDeque};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

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
    /// Next virtual address handed to a region.
    pub(crate) next_addr: u64,
    /// Each CQ's wake-up, signalled when armed and completions arrive.
    pub(crate) cqs: BTreeMap<CqId, Arc<CqEvent>>,
    /// Why the progress thread stopped early (a datapath failure).
    pub(crate) failed: Option<String>,
    /// Passes that received, sent or ran timers, so far.
    pub(crate) activity_gen: u64,
    /// CM events taken from the engine, until a waiter picks them ([`crate::cm`]).
    pub(crate) cm_events: VecDeque<Event>,
    /// Address handles by number ([`crate::Device::create_ah`]).
    pub(crate) ahs: BTreeMap<u32, AddressHandle>,
    /// Number of the next address handle (never 0).
    pub(crate) next_ah: u32,
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

/// The shared part: state, and how to reach the progress thread.
pub(crate) struct Shared {
    state: Mutex<State>,
    /// Kicks the progress thread out of its sleep.
    wake: EventFd,
    /// The progress thread sleeps (set under the lock before it releases it to sleep).
    sleeping: AtomicBool,
    stop: AtomicBool,
    /// Application threads inside a busy-polling wait, driving the engine themselves.
    driving: AtomicUsize,
    /// The thread's passes (tests of its back-off).
    #[cfg(test)]
    pub(crate) passes: AtomicU64,
    /// Signalled, when armed, after a pass that received, sent or ran timers.
    pub(crate) activity: CqEvent,
    /// Signalled when the engine reports a CM event.
    pub(crate) cm: crate::cm::CmWaiters,
    pub(crate) mode: ProgressMode,
    pub(crate) wait: WaitMode,
}

/// The in-process backend; see the module docs.
pub(crate) struct Local {
    pub(crate) shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
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
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                driver,
                next_addr: first_addr,
                cqs: BTreeMap::new(),
                failed: None,
                activity_gen: 0,
                cm_events: VecDeque::new(),
                ahs: BTreeMap::new(),
                next_ah: 1,
            }),
            wake: EventFd::new().map_err(Error::Io)?,
            sleeping: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            driving: AtomicUsize::new(0),
            #[cfg(test)]
            passes: AtomicU64::new(0),
            activity: CqEvent::new()?,
            cm: crate::cm::CmWaiters::default(),
            mode,
            wait,
        });
        let thread = match mode {
            ProgressMode::Thread => {
                let s = Arc::clone(&shared);
                Some(
                    std::thread::Builder::new()
                        .name("rocev2-progress".into())
                        .spawn(move || progress(&s, &dp_fd))
                        .map_err(Error::Io)?,
                )
            }
            ProgressMode::Caller => None,
        };
        Ok(Local {
            shared,
            thread,
            seen: AtomicU64::new(0),
        })
    }

    /// The state, locked. A panic elsewhere while holding it leaves consistent engine state
    /// (the engine never panics mid-update on input), so poisoning is ignored.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// True when a progress thread drives the engine.
    pub(crate) fn has_thread(&self) -> bool {
        self.thread.is_some()
    }

    /// How long an application's wait busy-polls, driving the engine while the progress thread
    /// backs off, before it sleeps on its CQ's eventfd: the thread's spin window
    /// ([`WaitMode::Spin`]: for ever; [`WaitMode::Sleep`], or no thread: not at all).
    pub(crate) fn drive_window(&self) -> std::time::Duration {
        match (self.has_thread(), self.shared.wait) {
            (false, _) | (true, WaitMode::Sleep) => std::time::Duration::ZERO,
            (true, WaitMode::Adaptive { spin }) => std::time::Duration::from_nanos(spin.as_nanos()),
            (true, WaitMode::Spin) => std::time::Duration::MAX,
        }
    }

    /// Marks the calling thread as driving the engine until the guard drops.
    pub(crate) fn driving(&self) -> Driving<'_> {
        self.shared.driving.fetch_add(1, Ordering::SeqCst);
        Driving(&self.shared)
    }

    /// Tells a sleeping progress thread that work was posted.
    pub(crate) fn kick(&self) {
        if self.shared.sleeping.load(Ordering::SeqCst) {
            self.shared.wake.signal();
        }
    }
}

/// An application thread driving the engine in a wait ([`Local::driving`]).
pub(crate) struct Driving<'a>(&'a Shared);

impl Driving<'_> {
    /// Ends a drive whose window ran out (the waiter is about to sleep): the progress thread,
    /// if no other waiter drives, resumes at once instead of at the end of its back-off.
    pub(crate) fn hand_back(self) {
        let s = self.0;
        drop(self);
        if s.driving.load(Ordering::SeqCst) == 0 {
            s.wake.signal();
        }
    }
}

impl Drop for Driving<'_> {
    /// A thread that was asleep in `poll(2)` when the drive began (an adaptive wait can start
    /// while the thread sleeps) planned that sleep before the waiter's passes and does not know
    /// the timers they armed. Waking it makes it pass and plan again; a thread backing off
    /// passes when its back-off ends anyway (at most [`BACKOFF_MAX`]).
    fn drop(&mut self) {
        if self.0.driving.fetch_sub(1, Ordering::SeqCst) == 1
            && self.0.sleeping.load(Ordering::SeqCst)
        {
            self.0.wake.signal();
        }
    }
}

/// How long the progress thread first sleeps while an application thread drives the engine.
pub(crate) const BACKOFF: std::time::Duration = std::time::Duration::from_micros(100);
/// The longest it sleeps: its back-off doubles from [`BACKOFF`] while waiters keep driving. A
/// 64 B busy-polled ping-pong's p99 fell from 46–50 to 17–21 µs with 5 ms (2 ms: 25–39 µs),
/// BENCHMARKS.md "The progress thread backs off longer".
pub(crate) const BACKOFF_MAX: std::time::Duration = std::time::Duration::from_millis(5);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl State {
    /// One pass of the driver, then the wake-ups it earned.
    pub(crate) fn pass(&mut self, activity: &CqEvent) -> Result<Progress> {
        if let Some(why) = &self.failed {
            return Err(Error::ProgressStopped(why.clone()));
        }
        let p = self.driver.poll()?;
        self.fire(p, activity);
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

    fn fire(&mut self, p: Progress, activity: &CqEvent) {
        for (id, ev) in &self.cqs {
            if self.driver.ep.cq(*id).is_some_and(|c| !c.is_empty()) {
                ev.fire();
            }
        }
        if p.rx > 0 || p.tx > 0 || p.timers {
            self.activity_gen += 1;
            activity.fire();
        }
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

impl Drop for Local {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake.signal();
        if let Some(t) = self.thread.take() {
            // A panicked thread has nothing left to report.
            let _ = t.join();
        }
    }
}

/// The progress thread's loop; see the module docs.
fn progress(s: &Shared, dp_fd: &OwnedFd) {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let mut woken = false;
    let mut backoff = BACKOFF;
    while !s.stop.load(Ordering::SeqCst) {
        if s.driving.load(Ordering::SeqCst) > 0 {
            let mut fds = [PollFd::new(&s.wake, PollFlags::IN)];
            let ts = Timespec {
                tv_sec: i64::try_from(backoff.as_secs()).unwrap_or(0),
                tv_nsec: i64::from(backoff.subsec_nanos()),
            };
            let _ = rustix::event::poll(&mut fds, Some(&ts));
            woken |= s.wake.clear();
            backoff = (backoff * 2).min(BACKOFF_MAX);
            continue;
        }
        backoff = BACKOFF;
        #[cfg(test)]
        s.passes.fetch_add(1, Ordering::Relaxed);
        let plan = {
            let mut st = s.lock();
            if std::mem::take(&mut woken) {
                st.driver.note_activity();
            }
            match st.driver.poll() {
                Ok(p) => {
                    st.fire(p, &s.activity);
                    if st.take_cm_events() {
                        s.cm.fire();
                    }
                }
                Err(e) => {
                    st.failed = Some(e.to_string());
                    // Wake every waiter: their next look reports the failure.
                    for ev in st.cqs.values() {
                        ev.event.get().signal();
                    }
                    s.activity.event.get().signal();
                    s.cm.fire();
                    return;
                }
            }
            let plan = st.driver.wait_plan();
            if !plan.spin {
                s.sleeping.store(true, Ordering::SeqCst);
            }
            plan
        };
        if plan.spin {
            std::thread::yield_now();
            continue;
        }
        let mut dp = PollFlags::IN;
        if plan.writable {
            dp |= PollFlags::OUT;
        }
        let mut fds = [PollFd::new(dp_fd, dp), PollFd::new(&s.wake, PollFlags::IN)];
        let ts = Timespec {
            tv_sec: i64::try_from(plan.timeout.as_nanos() / 1_000_000_000).unwrap_or(i64::MAX),
            tv_nsec: i64::try_from(plan.timeout.as_nanos() % 1_000_000_000).unwrap_or(0),
        };
        // EINTR and other failures: pass again (the datapath reports its own on the pass).
        let _ = rustix::event::poll(&mut fds, Some(&ts));
        s.sleeping.store(false, Ordering::SeqCst);
        woken = s.wake.clear();
    }
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
