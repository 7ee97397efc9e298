//! [`Engine`]: one RoCEv2 engine per opened device and process, moved by the application's own
//! calls and by a progress thread.
//!
//! Verbs programs expect the HCA to answer their peers whatever they do: the passive side of
//! `ib_read_bw` or `ib_atomic_bw` makes no call at all while its peer reads its memory. So a
//! thread drives the [`Driver`] whenever frames arrive or a timer is due: the host side's one
//! progress thread ([`ProgressThread`]), waiting as the driver's adaptive mode does (busy
//! polling for [`rocev2_datapath::WaitMode::DEFAULT_SPIN`] after activity, then sleeping), so
//! a passive side answers a stream without a wake-up per batch. The application's calls drive
//! it too, under the same lock: an `ibv_poll_cq` that finds its CQ empty runs one pass, so a
//! busy-polling program gets the busy-polled round trip without a thread hand-off. A post only
//! queues its requests (no system call): the next pass sends them, the application's next poll
//! or, when the thread sleeps, the thread the post wakes. While the application polls like
//! that, the thread backs off as it does for every host side ([`ProgressThread::drove`]: from
//! 100 µs up to 5 ms while the polls go on), and `ibv_get_cq_event` hands the engine back to it
//! before sleeping.
//!
//! Completion events: a CQ armed by `ibv_req_notify_cq` is checked after every pass; when it
//! holds a completion its channel gets one event (an `EFD_SEMAPHORE` eventfd, the channel's
//! `fd`, plus a queue naming the CQ) and the CQ is disarmed.
//!
//! Deviations: `solicited_only` arms for every completion, a superset of what verbs promises.

use crate::memory::CallerMemory;
use rocev2_core::Endpoint;
use rocev2_core::qp::CqId;
use rocev2_datapath::auto::{self, Mode, Options};
use rocev2_datapath::host::{self, ProgressThread};
use rocev2_datapath::{Datapath, Driver, DriverConfig, Interface, Progress, WaitPlan};
use std::collections::{HashMap, VecDeque};
use std::ops::ControlFlow;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Where `ROCEV2_DATAPATH` picks the datapath: `xdp`, `packet`, `udp` or `auto` (default).
pub const DATAPATH_ENV: &str = "ROCEV2_DATAPATH";

/// A completion channel's shared part: the eventfd and the CQs with an event pending.
#[derive(Debug)]
pub struct ChannelInner {
    /// The channel's `fd`: readable while an event is pending (semaphore semantics: one count
    /// per queued event).
    pub fd: OwnedFd,
    /// The `ibv_cq` pointers of pending events, oldest first.
    pub events: Mutex<VecDeque<usize>>,
}

impl ChannelInner {
    /// A channel with a fresh eventfd.
    ///
    /// # Errors
    /// `eventfd` failures.
    pub fn new() -> std::io::Result<ChannelInner> {
        Ok(ChannelInner {
            fd: eventfd(libc::EFD_SEMAPHORE)?,
            events: Mutex::new(VecDeque::new()),
        })
    }

    /// Queues an event for the CQ at `cq` and makes the fd readable.
    fn signal(&self, cq: usize) {
        lock(&self.events).push_back(cq);
        write_eventfd(self.fd.as_raw_fd());
    }
}

/// A CQ armed for one completion event.
#[derive(Debug)]
struct Armed {
    cq_ptr: usize,
    channel: Arc<ChannelInner>,
}

/// The engine and what the library keeps beside it, behind [`Engine::lock`].
pub struct State {
    /// The engine, the caller's memory and the datapath.
    pub driver: Driver<Box<dyn Datapath + Send>, CallerMemory>,
    /// The interface, as read when the device was opened.
    pub iface: Interface,
    armed: HashMap<CqId, Armed>,
}

impl State {
    /// One pass of the driver, then the completion events it made due. A datapath failure is
    /// reported once per kind on stderr; the pass is retried on the next call.
    /// Returns what the pass did.
    pub fn progress(&mut self) -> Progress {
        let p = match self.driver.poll() {
            Ok(p) => p,
            Err(e) => {
                report_once(&e.to_string());
                Progress::default()
            }
        };
        self.fire_events();
        p
    }

    /// Arms `cq` (whose `ibv_cq` is at `cq_ptr`) to signal `channel` on its next completion,
    /// at once when it already holds one.
    pub fn arm(&mut self, cq: CqId, cq_ptr: usize, channel: Arc<ChannelInner>) {
        self.armed.insert(cq, Armed { cq_ptr, channel });
        self.fire_events();
    }

    /// Forgets `cq`'s arming (it is being destroyed).
    pub fn disarm(&mut self, cq: CqId) {
        self.armed.remove(&cq);
    }

    fn fire_events(&mut self) {
        let ep = &self.driver.ep;
        self.armed.retain(|id, a| {
            let due = ep.cq(*id).is_some_and(|c| !c.is_empty());
            if due {
                a.channel.signal(a.cq_ptr);
            }
            !due
        });
    }

    /// Drives the engine until nothing is left to send and no timer is pending (the last
    /// ACKs have left), or `limit` passes.
    pub fn drain(&mut self, limit: Duration) {
        let end = Instant::now() + limit;
        loop {
            self.progress();
            let d = &self.driver;
            if d.tx_pending() == 0 && d.ep.is_idle(d.now()) || Instant::now() >= end {
                return;
            }
            if let Err(e) = self.driver.wait(&[]) {
                report_once(&e.to_string());
                return;
            }
        }
    }
}

impl host::Engine for State {
    /// The progress thread's pass; a datapath failure is reported and the thread goes on.
    fn pass(&mut self, woken: bool) -> ControlFlow<()> {
        if woken {
            self.driver.note_activity();
        }
        self.progress();
        ControlFlow::Continue(())
    }

    fn wait_plan(&self) -> WaitPlan {
        self.driver.wait_plan()
    }
}

/// One device's engine and its progress thread; see the module docs.
pub struct Engine {
    progress: ProgressThread<State>,
    /// Which datapath was chosen and why (for `ROCEV2_VERBOSE`).
    pub reason: String,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("reason", &self.reason)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// Opens interface `name` with the datapath `ROCEV2_DATAPATH` asks for and starts the
    /// progress thread.
    ///
    /// # Errors
    /// A bad `ROCEV2_DATAPATH`, no such interface, or the datapath's failure to open; as text.
    pub fn open(name: &str) -> Result<Engine, String> {
        let mode: Mode = match std::env::var(DATAPATH_ENV) {
            Ok(s) => s.parse().map_err(|e| format!("{DATAPATH_ENV}={s}: {e}"))?,
            Err(_) => Mode::Auto,
        };
        // The daemon's steering program takes the interface's frames: an engine here would
        // lose them to it, and the peer would retry until it gives up.
        if let Some(socket) = rocev2_ipc::serving(name) {
            return Err(format!(
                "{name} is served by rocev2d (control socket {}): stop the daemon or use another interface",
                socket.display()
            ));
        }
        let iface = Interface::by_name(name).map_err(|e| e.to_string())?;
        let opened = auto::open(&iface, mode, &Options::default()).map_err(|e| e.to_string())?;
        let seed = rocev2_datapath::entropy::os_seed().map_err(|e| e.to_string())?;
        let dp_fd = opened
            .datapath
            .fd()
            .try_clone_to_owned()
            .map_err(|e| e.to_string())?;
        let driver = Driver::new(
            Endpoint::new(seed),
            CallerMemory::default(),
            opened.datapath,
            DriverConfig::default(),
        );
        let state = State {
            driver,
            iface,
            armed: HashMap::new(),
        };
        let progress = ProgressThread::start(state, dp_fd, Some(format!("rocev2-{name}")))
            .map_err(|e| e.to_string())?;
        if std::env::var_os("ROCEV2_VERBOSE").is_some() {
            eprintln!("rocev2_ibverbs: {name}: {}", opened.reason);
        }
        Ok(Engine {
            progress,
            reason: opened.reason,
        })
    }

    /// The engine, for a verb.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.progress.lock()
    }

    /// The engine, for a poll of a CQ: the application drives it, so the progress thread backs
    /// off ([`ProgressThread::drove`]).
    pub fn lock_polling(&self) -> MutexGuard<'_, State> {
        self.progress.drove();
        self.progress.lock()
    }

    /// The application is about to sleep (in `ibv_get_cq_event`): the progress thread takes
    /// the datapath back at once.
    pub fn app_sleeps(&self) {
        self.progress.hand_back();
    }

    /// After a post: wakes the progress thread to send it if it sleeps; while it backs off,
    /// the application's next poll sends it (then a post costs no system call at all).
    pub fn nudge(&self) {
        self.progress.kick();
    }
}

/// Locks a mutex, taking over the data of one a panicking holder left (every extern fn
/// catches panics, so the state stays usable).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A new close-on-exec eventfd with `flags`.
fn eventfd(flags: libc::c_int) -> std::io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers; a non-negative result is a new descriptor we own.
    let fd = unsafe { libc::eventfd(0, flags | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds 1 to an eventfd's counter.
fn write_eventfd(fd: RawFd) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a live local buffer.
    unsafe { libc::write(fd, one.as_ptr().cast(), 8) };
}

/// Takes an eventfd's counter (one count with `EFD_SEMAPHORE`); false when it was zero on a
/// non-blocking descriptor, or on an error.
pub fn read_eventfd(fd: RawFd) -> bool {
    let mut buf = [0u8; 8];
    // SAFETY: reads at most 8 bytes into a live local buffer.
    unsafe { libc::read(fd, buf.as_mut_ptr().cast(), 8) == 8 }
}

/// Prints a datapath failure the first time it is seen (a verbs program has nowhere else to
/// see it).
fn report_once(msg: &str) {
    static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut seen = lock(&SEEN);
    if !seen.iter().any(|m| m == msg) && seen.len() < 16 {
        eprintln!("rocev2_ibverbs: {msg}");
        seen.push(msg.to_string());
    }
}
