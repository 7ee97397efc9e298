//! The in-process engine: what the in-process backend keeps behind its lock ([`State`]: the
//! engine, its memory and datapath joined by a driver, region addresses, address handles, the
//! wake-ups of CQs, SRQ limits and CM waiters), who drives it ([`ProgressMode`]) and the application's view
//! of it ([`EngineGuard`]).
//!
//! With [`ProgressMode::Thread`] (default) a thread per device runs the driver's passes, so the
//! QPs answer their peers (ACKs, READ responses, atomics) whatever the application does, as an
//! RDMA NIC would. How it waits between passes is the driver's [`WaitMode`](crate::WaitMode):
//!
//! | [`WaitMode`](crate::WaitMode) | the progress thread | idle CPU | a frame or a post costs |
//! |---|---|---|---|
//! | [`WaitMode::Spin`](crate::WaitMode::Spin) (busy-poll) | passes back to back | one core | nothing |
//! | [`WaitMode::Adaptive`](crate::WaitMode::Adaptive) (default) | busy-polls for the spin window after activity, then sleeps as `Sleep`; backs off while a waiter drives in its window | none | a wake-up after a pause |
//! | [`WaitMode::Sleep`](crate::WaitMode::Sleep) (interrupt) | sleeps in `poll(2)` on the datapath and a wake eventfd | none | a wake-up (eventfd write by the poster) |
//!
//! Busy-polling both ways would give each device two busy pollers (the application spinning
//! on its CQ and the thread), and the application's polls would queue for the lock behind the
//! thread's passes. So with [`WaitMode::Spin`](crate::WaitMode::Spin) an application thread inside
//! [`crate::Device::wait_cq`] or [`crate::Device::next_completion`] drives the engine itself,
//! as caller-driven, and the thread backs off meanwhile, as every host side's progress thread
//! does ([`rocev2_datapath::host::ProgressThread`]: from 100 µs up to 5 ms while waiters keep
//! driving; BENCHMARKS.md, "The progress thread backs off longer"). The price: a post made
//! outside a wait and not followed by one, or a frame that arrives between two waits, waits for
//! the back-off under way and one more (a wait that ended counts as driving until a whole
//! back-off passes with none ending; a post inside a wait, or followed by one, leaves with the
//! waiter's next pass).
//! [`WaitMode::Adaptive`](crate::WaitMode::Adaptive) does the same for the first spin window of each wait; a wait still
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

use crate::cm_wait::{CmWaiters, queue_cm_event};
use crate::error::{Error, Result};
use crate::wakeup::Waitable;
use rocev2_core::Endpoint;
use rocev2_core::cm::Event;
use rocev2_core::qp::CqId;
use rocev2_core::srq::SrqId;
use rocev2_datapath::host::{self, AhTable, HostMemory, RegionAddresses};
use rocev2_datapath::{Datapath, Driver, Progress, WaitPlan};
use rocev2_ipc::notify::EventFd;
use std::collections::{BTreeMap, VecDeque};
use std::ops::{ControlFlow, Deref};
use std::sync::atomic::{AtomicBool, Ordering};
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
pub type LocalDriver = Driver<Box<dyn Datapath + Send>, HostMemory>;

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
    /// CM events taken from the engine, until a waiter picks them ([`crate::cm_wait`]).
    pub(crate) cm_events: VecDeque<Event>,
    /// Address handles ([`crate::Device::create_ah`]).
    pub(crate) ahs: AhTable,
    /// Each shared receive queue's wake-up, signalled when its limit is reached.
    pub(crate) srqs: BTreeMap<SrqId, EventFd>,
    /// The in-process backend's `activity`.
    activity: Arc<CqEvent>,
    /// The in-process backend's `cm`.
    cm: Arc<CmWaiters>,
}

impl State {
    /// The state of a new device: `driver`, regions from `first_addr` up, and the device's
    /// wake-ups for activity and CM events.
    pub(crate) fn new(
        driver: LocalDriver,
        first_addr: u64,
        activity: Arc<CqEvent>,
        cm: Arc<CmWaiters>,
    ) -> State {
        State {
            driver,
            addresses: RegionAddresses::new(first_addr),
            cqs: BTreeMap::new(),
            failed: None,
            activity_gen: 0,
            cm_events: VecDeque::new(),
            ahs: AhTable::default(),
            srqs: BTreeMap::new(),
            activity,
            cm,
        }
    }
}

/// A CQ's (or the device's) wake-up: an eventfd signalled when armed.
#[derive(Debug)]
pub(crate) struct CqEvent {
    pub(crate) event: Arc<Waitable<EventFd>>,
    armed: AtomicBool,
}

impl CqEvent {
    pub(crate) fn new() -> Result<CqEvent> {
        Ok(CqEvent {
            event: Arc::new(Waitable::new(EventFd::new().map_err(Error::Io)?)),
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

/// An application thread driving the engine in a wait (the in-process backend's `driving`).
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
        while let Some(id) = self.driver.ep.poll_srq_limit() {
            if let Some(ev) = self.srqs.get(&id) {
                ev.signal();
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

/// The in-process engine and driver, locked ([`Device::engine`](crate::Device::engine)); derefs to the engine.
pub struct EngineGuard<'a>(pub(crate) MutexGuard<'a, State>);

impl EngineGuard<'_> {
    /// The driver (datapath counters, pending frames).
    pub fn driver(&self) -> &LocalDriver {
        &self.0.driver
    }
}

impl Deref for EngineGuard<'_> {
    type Target = Endpoint;
    fn deref(&self) -> &Endpoint {
        &self.0.driver.ep
    }
}
