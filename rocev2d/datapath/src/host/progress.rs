//! [`ProgressThread`]: the thread that drives a host-side engine so its QPs answer their peers
//! (ACKs, READ responses, atomics) whatever the application does, as an RDMA NIC would.
//!
//! Between passes the thread waits as the driver's [`WaitPlan`] says: at once while it spins,
//! else in `poll(2)` on a duplicate of the datapath's descriptor and a wake eventfd. It sleeps
//! without holding the engine's lock: it reads the plan under the lock and says it sleeps; a
//! post made after that sees the flag ([`ProgressThread::kick`]) and signals the eventfd, a post
//! made before is sent by the pass that precedes the sleep (both happen under the lock).
//!
//! An application thread can drive the engine itself (a busy-polling wait, a verbs program
//! polling its CQ), so each completion does not cross threads. The thread then stays out of its
//! way, or each of its wake-ups would take a vCPU from the busy-polling application for a
//! scheduler round trip and a timer set-up (~15 µs on a 2-vCPU VM; at one every 100 µs they
//! made a 64 B ping-pong's p99, BENCHMARKS.md "The progress thread backs off longer"). The one
//! back-off policy: while an application thread drives ([`ProgressThread::driving`]), or drove
//! since the thread last looked ([`ProgressThread::drove`], or a drive that ended), the thread
//! makes no pass and sleeps on its wake eventfd for [`BACKOFF`], then twice as long each time
//! it finds the application still driving, up to [`BACKOFF_MAX`]: it passes only after a whole
//! back-off in which no drive ended. A driver about to sleep hands the engine back
//! ([`ProgressThread::hand_back`]), and the thread resumes at once. The price: a post made
//! while the application drives and not followed by another driving call, or a frame that
//! arrives after the last one, waits for the back-off under way and one more, from twice
//! [`BACKOFF`] after a short drive up to twice [`BACKOFF_MAX`] after a long one.
//!
//! Without a thread ([`ProgressThread::start`] with no name) the engine moves only inside the
//! application's calls.
//!
//! The thread stops when the [`ProgressThread`] is dropped.

use crate::WaitPlan;
use rocev2_ipc::notify::EventFd;
use std::ops::ControlFlow;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the progress thread first sleeps while an application thread drives the engine.
pub const BACKOFF: Duration = Duration::from_micros(100);

/// The longest it sleeps: its back-off doubles from [`BACKOFF`] while the application keeps
/// driving. A 64 B busy-polled ping-pong's p99 fell from 46–50 to 17–21 µs with 5 ms (2 ms:
/// 25–39 µs), BENCHMARKS.md "The progress thread backs off longer".
pub const BACKOFF_MAX: Duration = Duration::from_millis(5);

/// The engine a [`ProgressThread`] drives: a driver and what its owner keeps beside it.
pub trait Engine: Send + 'static {
    /// One pass of the driver, then the wake-ups it earned (CQ eventfds, waiters). `woken`:
    /// the thread's eventfd was signalled since the last pass (a post), which counts as
    /// activity ([`crate::Driver::note_activity`]). [`ControlFlow::Break`] stops the thread (the
    /// engine has told its waiters why).
    fn pass(&mut self, woken: bool) -> ControlFlow<()>;

    /// How to wait for the next pass ([`crate::Driver::wait_plan`]).
    fn wait_plan(&self) -> WaitPlan;
}

/// What the thread and the application share.
struct Shared<S> {
    state: Mutex<S>,
    /// Kicks the thread out of its sleep or back-off.
    wake: EventFd,
    /// The thread sleeps in `poll(2)` (set under the lock before it releases it to sleep).
    sleeping: AtomicBool,
    stop: AtomicBool,
    /// Application threads driving the engine now.
    driving: AtomicUsize,
    /// An application call drove the engine since the thread last looked.
    drove: AtomicBool,
    /// The thread's passes.
    passes: AtomicU64,
}

impl<S> Shared<S> {
    fn lock(&self) -> MutexGuard<'_, S> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// An engine behind a lock and the thread that drives it; see the module docs.
pub struct ProgressThread<S> {
    shared: Arc<Shared<S>>,
    thread: Option<JoinHandle<()>>,
}

impl<S> std::fmt::Debug for ProgressThread<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressThread")
            .field("thread", &self.thread.is_some())
            .finish_non_exhaustive()
    }
}

impl<S: Engine> ProgressThread<S> {
    /// Puts `engine` behind the lock and, given a `name`, starts a thread of that name driving
    /// it; `dp_fd` is a duplicate of the datapath's descriptor, which the thread sleeps on.
    ///
    /// # Errors
    /// `eventfd` or thread creation failures.
    pub fn start(engine: S, dp_fd: OwnedFd, name: Option<String>) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(engine),
            wake: EventFd::new()?,
            sleeping: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            driving: AtomicUsize::new(0),
            drove: AtomicBool::new(false),
            passes: AtomicU64::new(0),
        });
        let thread = match name {
            Some(name) => {
                let s = Arc::clone(&shared);
                Some(
                    std::thread::Builder::new()
                        .name(name)
                        .spawn(move || run(&s, &dp_fd))?,
                )
            }
            None => None,
        };
        Ok(ProgressThread { shared, thread })
    }
}

impl<S> ProgressThread<S> {
    /// The engine, locked. A panic elsewhere while holding it leaves consistent engine state
    /// (the engine never panics mid-update on input), so poisoning is ignored.
    pub fn lock(&self) -> MutexGuard<'_, S> {
        self.shared.lock()
    }

    /// True when a thread drives the engine.
    pub fn has_thread(&self) -> bool {
        self.thread.is_some()
    }

    /// Marks the calling thread as driving the engine until the guard drops or is handed back.
    pub fn driving(&self) -> Driving<'_, S> {
        self.shared.driving.fetch_add(1, Ordering::SeqCst);
        Driving(&self.shared)
    }

    /// Says an application call just drove the engine (a verbs program's poll of its CQ, one
    /// call among many): the thread backs off as while a [`Driving`] guard lives, until a
    /// back-off passes without such a call.
    pub fn drove(&self) {
        self.shared.drove.store(true, Ordering::Relaxed);
    }

    /// The application stops driving (it is about to sleep): the thread, unless another
    /// application thread drives, resumes at once instead of at the end of its back-off.
    pub fn hand_back(&self) {
        hand_back(&self.shared);
    }

    /// Tells a sleeping thread that work was posted.
    pub fn kick(&self) {
        if self.shared.sleeping.load(Ordering::SeqCst) {
            self.shared.wake.signal();
        }
    }

    /// The thread's passes so far (how tests see its back-off).
    pub fn passes(&self) -> u64 {
        self.shared.passes.load(Ordering::Relaxed)
    }
}

fn hand_back<S>(s: &Shared<S>) {
    s.drove.store(false, Ordering::Relaxed);
    if s.driving.load(Ordering::SeqCst) == 0 {
        s.wake.signal();
    }
}

/// An application thread driving the engine ([`ProgressThread::driving`]).
pub struct Driving<'a, S>(&'a Shared<S>);

impl<S> Driving<'_, S> {
    /// Ends a drive whose window ran out (the waiter is about to sleep):
    /// [`ProgressThread::hand_back`].
    pub fn hand_back(self) {
        let s = self.0;
        drop(self);
        hand_back(s);
    }
}

impl<S> Drop for Driving<'_, S> {
    /// A drive that ends without handing back (the waiter got what it waited for and goes on)
    /// is one that drove since the thread last looked ([`ProgressThread::drove`]): the thread
    /// passes only after a whole back-off in which no drive ended. Between two waits of a
    /// busy-polling application it keeps backing off, instead of taking a vCPU for a pass and
    /// starting over from [`BACKOFF`] whenever its back-off ended in the gap (one wake-up per
    /// ~100 µs for as long as the application ran).
    ///
    /// A thread asleep in `poll(2)` planned that sleep before the drive's passes and does not
    /// know the timers they armed: it is woken, backs off once, then passes and plans again.
    fn drop(&mut self) {
        self.0.drove.store(true, Ordering::Relaxed);
        if self.0.driving.fetch_sub(1, Ordering::SeqCst) == 1
            && self.0.sleeping.load(Ordering::SeqCst)
        {
            self.0.wake.signal();
        }
    }
}

impl<S> Drop for ProgressThread<S> {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake.signal();
        if let Some(t) = self.thread.take() {
            // A panicked thread has nothing left to report.
            let _ = t.join();
        }
    }
}

/// The thread's loop; see the module docs.
fn run<S: Engine>(s: &Shared<S>, dp_fd: &OwnedFd) {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let timespec = |d: Duration| Timespec {
        tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(d.subsec_nanos()),
    };
    let mut woken = false;
    let mut backoff = BACKOFF;
    while !s.stop.load(Ordering::SeqCst) {
        if s.driving.load(Ordering::SeqCst) > 0 || s.drove.swap(false, Ordering::Relaxed) {
            let mut fds = [PollFd::new(&s.wake, PollFlags::IN)];
            let _ = rustix::event::poll(&mut fds, Some(&timespec(backoff)));
            woken |= s.wake.clear();
            backoff = (backoff * 2).min(BACKOFF_MAX);
            continue;
        }
        backoff = BACKOFF;
        s.passes.fetch_add(1, Ordering::Relaxed);
        let plan = {
            let mut st = s.lock();
            if st.pass(std::mem::take(&mut woken)).is_break() {
                return;
            }
            let plan = st.wait_plan();
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
        let timeout = Duration::from_nanos(plan.timeout.as_nanos());
        // EINTR and other failures: pass again (the datapath reports its own on the pass).
        let _ = rustix::event::poll(&mut fds, Some(&timespec(timeout)));
        s.sleeping.store(false, Ordering::SeqCst);
        woken = s.wake.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// An engine with nothing to do: each pass sleeps until woken.
    struct Idle;

    impl Engine for Idle {
        fn pass(&mut self, _woken: bool) -> ControlFlow<()> {
            ControlFlow::Continue(())
        }

        fn wait_plan(&self) -> WaitPlan {
            WaitPlan {
                spin: false,
                timeout: rocev2_core::time::Duration::from_secs(10),
                writable: false,
            }
        }
    }

    /// A busy-polling application waits, works a little, and waits again: the thread passes
    /// only in a gap between two drives that outlasts a back-off, however its back-offs fall
    /// (a pass whenever its back-off ended in a gap restarted it from [`BACKOFF`]: one wake-up
    /// per ~100 µs for as long as the application ran). Handed back, it resumes at once.
    #[test]
    fn drives_with_short_gaps_keep_the_thread_backing_off() {
        let dp = EventFd::new().unwrap();
        let pt = ProgressThread::start(Idle, dp.share().unwrap(), Some("test".into())).unwrap();
        // The drives begin while the thread sleeps in poll(2) after its first pass.
        while pt.passes() == 0 || !pt.shared.sleeping.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let before = pt.passes();
        let mut long_gaps = 0;
        let start = Instant::now();
        let mut drive = pt.driving();
        while start.elapsed() < Duration::from_millis(300) {
            let busy = Instant::now();
            while busy.elapsed() < Duration::from_micros(300) {
                std::hint::spin_loop();
            }
            // The application's own work between two waits; measured from before the drop to
            // after the next drive began, so never shorter than the gap the thread saw.
            let gap = Instant::now();
            drop(drive);
            while gap.elapsed() < Duration::from_micros(50) {
                std::hint::spin_loop();
            }
            drive = pt.driving();
            if gap.elapsed() >= BACKOFF {
                long_gaps += 1;
            }
        }
        let passes = pt.passes() - before;
        drive.hand_back();
        // Two more for a wake signal that lands just after the thread, woken from poll(2) by a
        // drop, cleared its eventfd: it cuts the next back-off short (before: 15-66 passes).
        assert!(
            passes <= long_gaps + 2,
            "{passes} passes with {long_gaps} gaps longer than a back-off"
        );
        let t = Instant::now();
        while pt.passes() - before == passes {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "no pass after hand_back"
            );
            std::thread::yield_now();
        }
    }
}
