//! [`Engine`]: one RoCEv2 engine per opened device and process, moved by the application's own
//! calls and by a progress thread.
//!
//! Verbs programs expect the HCA to answer their peers whatever they do: the passive side of
//! `ib_read_bw` or `ib_atomic_bw` makes no call at all while its peer reads its memory. So a
//! thread drives the [`Driver`] whenever frames arrive or a timer is due, sleeping in `ppoll`
//! on the datapath's descriptor and an eventfd otherwise. The application's calls drive it too,
//! under the same lock: an `ibv_poll_cq` that finds its CQ empty runs one pass, so a
//! busy-polling program gets the busy-polled round trip without a thread hand-off. A post only
//! queues its requests (no system call): the next pass sends them, the application's next poll
//! or, when the application is not polling, the progress thread the post wakes. While the application polls like that, the thread stays out of its way: it
//! only watches timers, and returns to the datapath's descriptor [`APP_ACTIVE`] after the last
//! call. Otherwise it waits as the driver's adaptive mode does (busy polling for
//! [`WaitMode::DEFAULT_SPIN`] after activity, then sleeping), so a passive side answers a
//! stream without a wake-up per batch.
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
use rocev2_datapath::{Datapath, Driver, DriverConfig, Interface, Progress, WaitMode};
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long after the application's last driving call the progress thread leaves the datapath
/// to it (and only wakes for timers and posts).
pub const APP_ACTIVE: Duration = Duration::from_millis(2);

/// The longest the progress thread sleeps without looking at the stop flag.
const MAX_SLEEP: Duration = Duration::from_millis(100);

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

/// What the progress thread and the application share.
struct Shared {
    state: Mutex<State>,
    /// Written to wake the progress thread (a post, stop).
    wake: OwnedFd,
    /// The datapath's descriptor, valid as long as `state` is.
    dp_fd: RawFd,
    stop: AtomicBool,
    /// When the application last drove the engine, in ns since `epoch`.
    app_drove: AtomicU64,
    epoch: Instant,
}

/// One device's engine and its progress thread; see the module docs.
pub struct Engine {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
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
        let iface = Interface::by_name(name).map_err(|e| e.to_string())?;
        let opened = auto::open(&iface, mode, &Options::default()).map_err(|e| e.to_string())?;
        let seed = rocev2_datapath::entropy::os_seed().map_err(|e| e.to_string())?;
        let dp_fd = opened.datapath.fd().as_raw_fd();
        let driver = Driver::new(
            Endpoint::new(seed),
            CallerMemory::default(),
            opened.datapath,
            DriverConfig::default(),
        );
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                driver,
                iface,
                armed: HashMap::new(),
            }),
            wake: eventfd(0).map_err(|e| e.to_string())?,
            dp_fd,
            stop: AtomicBool::new(false),
            app_drove: AtomicU64::new(0),
            epoch: Instant::now(),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("rocev2-{name}"))
            .spawn(move || run(&s))
            .map_err(|e| e.to_string())?;
        if std::env::var_os("ROCEV2_VERBOSE").is_some() {
            eprintln!("rocev2_ibverbs: {name}: {}", opened.reason);
        }
        Ok(Engine {
            shared,
            thread: Some(thread),
            reason: opened.reason,
        })
    }

    /// The engine, for a verb.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.shared.state)
    }

    /// The engine, for a poll of a CQ: marks the application as driving it, so the progress
    /// thread leaves the datapath to it for [`APP_ACTIVE`].
    pub fn lock_polling(&self) -> MutexGuard<'_, State> {
        let s = &self.shared;
        let now = u64::try_from(s.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        s.app_drove.store(now, Ordering::Relaxed);
        lock(&s.state)
    }

    /// The application is about to sleep (in `ibv_get_cq_event`): the progress thread takes
    /// the datapath back at once.
    pub fn app_sleeps(&self) {
        self.shared.app_drove.store(0, Ordering::Relaxed);
        self.wake();
    }

    /// Wakes the progress thread.
    pub fn wake(&self) {
        write_eventfd(self.shared.wake.as_raw_fd());
    }

    /// After a post: wakes the progress thread to send it, unless the application is polling
    /// and will drive the engine itself (then a post costs no system call at all).
    pub fn nudge(&self) {
        let s = &self.shared;
        let since_app = s
            .epoch
            .elapsed()
            .saturating_sub(Duration::from_nanos(s.app_drove.load(Ordering::Relaxed)));
        if since_app >= APP_ACTIVE {
            self.wake();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The progress thread.
fn run(s: &Shared) {
    let mut last_activity = None;
    while !s.stop.load(Ordering::Relaxed) {
        let (timeout, watch_dp, pollout) = {
            let mut st = lock(&s.state);
            let p = st.progress();
            let d = &st.driver;
            if p.rx > 0 || p.tx > 0 || p.timers {
                last_activity = Some(d.now());
            }
            let now = d.now();
            let since_app = s
                .epoch
                .elapsed()
                .saturating_sub(Duration::from_nanos(s.app_drove.load(Ordering::Relaxed)));
            let app_active = since_app < APP_ACTIVE;
            // As the driver's adaptive wait: keep polling for a while after activity, so a
            // passive side answers a stream without a wake-up per batch; not while the
            // application polls, which drives the engine itself.
            let more = p.more || (!app_active && WaitMode::default().spins(now, last_activity));
            let mut t =
                d.ep.poll_timeout()
                    .map_or(MAX_SLEEP, |at| {
                        Duration::from_nanos(at.saturating_duration_since(now).as_nanos())
                    })
                    .min(MAX_SLEEP);
            let pending = d.tx_pending() > 0;
            if more {
                t = Duration::ZERO;
            } else if pending {
                t = t.min(Duration::from_micros(200));
            }
            if app_active {
                t = t.min(APP_ACTIVE - since_app);
            }
            (t, !app_active, pending)
        };
        let mut fds = [
            libc::pollfd {
                fd: s.wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: s.dp_fd,
                events: libc::POLLIN | if pollout { libc::POLLOUT } else { 0 },
                revents: 0,
            },
        ];
        let n = if watch_dp { 2 } else { 1 };
        if timeout.is_zero() {
            // Busy polling: let the application (or the peer, on a shared core) run.
            std::thread::yield_now();
        }
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
        };
        // SAFETY: `fds[..n]` is a valid array of pollfd for the call's duration; both
        // descriptors stay open while `s` lives (the datapath's lives in `s.state`).
        unsafe { libc::ppoll(fds.as_mut_ptr(), n as libc::nfds_t, &ts, std::ptr::null()) };
        if fds[0].revents & libc::POLLIN != 0 {
            read_eventfd(s.wake.as_raw_fd());
        }
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
