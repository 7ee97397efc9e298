//! The event loop that joins a sans-IO [`Endpoint`], the [`Memory`] its regions live in, and a
//! [`Datapath`]: quinn's thin driver around quinn-proto, for RoCE.
//!
//! One [`Driver::poll`] pass:
//!
//! 1. receive up to a few batches ([`Datapath::recv_with`]: in place where the datapath lends
//!    its buffers) and hand every frame to [`Endpoint::handle_frame`], or every UDP payload to
//!    [`Endpoint::handle_datagram`] (drops are counted there by reason);
//! 2. run the QP timers that are due ([`Endpoint::poll_timeout`] / [`Endpoint::handle_timeout`]);
//! 3. let [`Endpoint::poll_transmit`] write frames straight into the datapath's buffers
//!    ([`Datapath::transmit_with`]: UMEM chunks for AF_XDP, the transmit batch otherwise), or
//!    pull UDP payloads with [`Endpoint::poll_transmit_datagram`] into the transmit batch when
//!    the datapath [`Datapath::carries_datagrams`], and send them,
//!    until the core has nothing left, the kernel pushes back, or the per-pass budget is spent
//!    (so a long transfer never starves the receive side).
//!
//! Frames the kernel did not take stay in the batch and go first on the next pass; the core is
//! not polled for more until they are gone, so nothing it produced is ever dropped here.
//!
//! [`Driver::wait`] then either returns at once, after a non-blocking `ppoll` that still reports
//! the caller's descriptors (busy polling), or sleeps in `ppoll` on the datapath's descriptor
//! (readable; writable too while frames wait), on the caller's extra descriptors (signals, a
//! control socket), and until the core's next deadline, with nanosecond resolution. Which one is
//! the [`WaitMode`]'s choice:
//!
//! | mode | waits by | idle CPU | an event costs |
//! |---|---|---|---|
//! | [`WaitMode::Sleep`] | always `ppoll` | none | a wake-up (tens of µs on a loaded VM) |
//! | [`WaitMode::Adaptive`] (default) | busy polling for `spin` after the last activity, then `ppoll` | none | nothing while traffic flows; a wake-up after a pause longer than `spin` |
//! | [`WaitMode::Spin`] | always busy polling | one core at 100% | nothing |
//!
//! Activity, for [`WaitMode::Adaptive`], is a pass that received or sent a frame or ran a timer
//! (completions only arise from those), or an extra descriptor found readable. The decision is
//! [`WaitMode::spins`], a pure function of the current time and the last activity.
//!
//! Each busy-polling wait ends with `sched_yield`. The kernel queues a task woken by a socket on
//! its waker's CPU (a sync wake-up assumes the waker is about to sleep), so a process that keeps
//! polling after it sent holds the woken peer off its own CPU until it sleeps or is preempted.
//! Without the yield, an adaptive ping-pong on the 2-vCPU VM settled at a round trip of twice the
//! spin window (each message waited for its sender's window to end) and a spinning one had a p99
//! of 4 ms; with it, both poll at the busy-polled round trip (BENCHMARKS.md). When nothing else
//! is runnable the yield returns at once.
//!
//! Deviations: none.

use crate::clock::Clock;
use crate::{Datapath, DatapathStats, Error, RxBatch, TxBatch};
use rocev2_core::Endpoint;
use rocev2_core::mr::Memory;
use rocev2_core::time::{Duration, Instant};
use std::os::fd::{AsRawFd, BorrowedFd};

/// How [`Driver::wait`] waits; see the module docs for what each costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitMode {
    /// Sleep in `ppoll` until there is something to do.
    Sleep,
    /// Poll again at once while less than `spin` has passed since the last activity, then
    /// sleep as [`WaitMode::Sleep`] does.
    Adaptive {
        /// How long to keep busy polling after the last activity.
        spin: Duration,
    },
    /// Never sleep: poll again at once (busy polling).
    Spin,
}

impl Default for WaitMode {
    /// [`WaitMode::Adaptive`] with [`WaitMode::DEFAULT_SPIN`].
    fn default() -> Self {
        WaitMode::Adaptive {
            spin: WaitMode::DEFAULT_SPIN,
        }
    }
}

impl WaitMode {
    /// The default spin window of [`WaitMode::Adaptive`]: a few times the p99 of a busy-polled
    /// 4 KiB ping-pong round trip on a veth pair (20–45 µs median, 30–65 µs p99 on a shared
    /// 2-vCPU VM, BENCHMARKS.md), so the answer to a request arrives while its sender still polls
    /// even after a scheduling hiccup. 50 µs let more replies miss the window (p99 65 µs against
    /// 32–37 µs at 100 and 200 µs); past a burst it costs at most this much CPU.
    pub const DEFAULT_SPIN: Duration = Duration::from_micros(200);

    /// The name used on command lines and in configuration files.
    pub const fn name(self) -> &'static str {
        match self {
            WaitMode::Sleep => "sleep",
            WaitMode::Adaptive { .. } => "adaptive",
            WaitMode::Spin => "spin",
        }
    }

    /// `self` with the spin window `spin`.
    ///
    /// # Errors
    /// When `self` is not [`WaitMode::Adaptive`] (the only mode with a window).
    pub fn with_spin(self, spin: Duration) -> Result<WaitMode, &'static str> {
        match self {
            WaitMode::Adaptive { .. } => Ok(WaitMode::Adaptive { spin }),
            _ => Err("a spin window applies to the adaptive mode only"),
        }
    }

    /// Whether [`Driver::wait`] should poll again without sleeping at `now`, given the last
    /// activity (`None`: none yet). Adaptive: while `now` is less than `spin` after it (a clock
    /// read before the activity's counts as no time passed).
    pub fn spins(self, now: Instant, last_activity: Option<Instant>) -> bool {
        match self {
            WaitMode::Sleep => false,
            WaitMode::Spin => true,
            WaitMode::Adaptive { spin } => {
                last_activity.is_some_and(|t| now.saturating_duration_since(t) < spin)
            }
        }
    }
}

impl std::str::FromStr for WaitMode {
    type Err = &'static str;
    /// `sleep`, `adaptive` (with [`WaitMode::DEFAULT_SPIN`]) or `spin`.
    fn from_str(s: &str) -> Result<WaitMode, Self::Err> {
        match s {
            "sleep" => Ok(WaitMode::Sleep),
            "adaptive" => Ok(WaitMode::default()),
            "spin" => Ok(WaitMode::Spin),
            _ => Err("one of sleep, adaptive, spin"),
        }
    }
}

impl std::fmt::Display for WaitMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitMode::Adaptive { spin } => write!(f, "adaptive (spin {spin})"),
            other => f.write_str(other.name()),
        }
    }
}

/// Batch sizes and waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverConfig {
    /// Frames per receive call.
    pub rx_batch: usize,
    /// Frames per send call.
    pub tx_batch: usize,
    /// Receive calls per pass at most.
    pub rx_batches_per_pass: usize,
    /// Frames sent per pass at most.
    pub tx_frames_per_pass: usize,
    /// Sleeping, busy polling, or busy polling for a while after activity.
    pub wait: WaitMode,
    /// Longest single sleep, so callers regain control (to check a stop flag) even when idle.
    pub max_sleep: Duration,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            rx_batch: 64,
            tx_batch: 64,
            rx_batches_per_pass: 4,
            tx_frames_per_pass: 256,
            wait: WaitMode::default(),
            max_sleep: Duration::from_millis(100),
        }
    }
}

/// What one [`Driver::poll`] pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Progress {
    /// Frames received (and handed to the core).
    pub rx: usize,
    /// Frames the kernel took.
    pub tx: usize,
    /// Whether timers ran.
    pub timers: bool,
    /// Whether work is left that should not wait for an event (budget spent, kernel full).
    pub more: bool,
}

/// How to wait for the next pass ([`Driver::wait_plan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPlan {
    /// Poll again at once (then yield the CPU) instead of sleeping.
    pub spin: bool,
    /// Longest sleep: until the core's next deadline, bounded by
    /// [`DriverConfig::max_sleep`]; zero when spinning.
    pub timeout: Duration,
    /// Frames wait for room: wake when the datapath's descriptor becomes writable too.
    pub writable: bool,
}

/// An endpoint, its memory and a datapath, driven together; see the module docs.
#[derive(Debug)]
pub struct Driver<D, M> {
    /// The RoCE device.
    pub ep: Endpoint,
    /// Its registered memory.
    pub mem: M,
    dp: D,
    rx: RxBatch,
    tx: TxBatch,
    cfg: DriverConfig,
    clock: Clock,
    more: bool,
    /// When a pass last received, sent or ran a timer, or an extra descriptor was readable.
    last_activity: Option<Instant>,
}

impl<D: Datapath, M: Memory> Driver<D, M> {
    /// Joins the three.
    pub fn new(ep: Endpoint, mem: M, dp: D, cfg: DriverConfig) -> Self {
        Driver {
            ep,
            mem,
            rx: RxBatch::new(cfg.rx_batch),
            tx: TxBatch::new(cfg.tx_batch),
            dp,
            cfg,
            clock: Clock,
            more: false,
            last_activity: None,
        }
    }

    /// The datapath.
    pub fn datapath(&self) -> &D {
        &self.dp
    }

    /// The datapath, mutably (for wrappers that inject or record frames).
    pub fn datapath_mut(&mut self) -> &mut D {
        &mut self.dp
    }

    /// The datapath's counters.
    pub fn datapath_stats(&self) -> DatapathStats {
        self.dp.stats()
    }

    /// The current time, from [`crate::clock`].
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Frames produced by the core and not yet taken by the kernel.
    pub fn tx_pending(&self) -> usize {
        self.tx.pending()
    }

    /// One pass: receive, timers, transmit. See the module docs.
    ///
    /// # Errors
    /// Socket failures of the datapath (never a bad frame).
    pub fn poll(&mut self) -> Result<Progress, Error> {
        let mut p = Progress::default();
        let Driver {
            ep,
            mem,
            dp,
            rx,
            tx,
            cfg,
            clock,
            ..
        } = self;
        // One clock read for a pass that finds nothing (a busy-polled wait makes millions of
        // them; each read is ~30 ns on a VM, BENCHMARKS.md "What the stack adds to a
        // busy-polled round trip"); another after frames were handled or sent, so timers and
        // transmissions see the time they took.
        let mut now = clock.now();
        for batch in 0..cfg.rx_batches_per_pass.max(1) {
            if batch > 0 {
                now = clock.now();
            }
            let n = dp.recv_with(rx, &mut |bytes, meta| {
                // A drop is counted by the endpoint under its reason; nothing to do here.
                let _ = match &meta.datagram {
                    Some(d) => ep.handle_datagram(now, d, bytes, mem),
                    None => ep.handle_frame(now, bytes, mem),
                };
            })?;
            p.rx += n;
            if n < rx.capacity() {
                break;
            }
            p.more = true;
        }
        if p.rx > 0 {
            now = clock.now();
        }
        if ep.poll_timeout().is_some_and(|t| t <= now) {
            ep.handle_timeout(now, mem);
            p.timers = true;
        }
        if !tx.is_empty() {
            p.tx += dp.send(tx)?;
            now = clock.now();
        }
        let datagrams = dp.carries_datagrams();
        while tx.is_empty() && p.tx < cfg.tx_frames_per_pass {
            let sent = if datagrams {
                let mut pull = |buf: &mut Vec<u8>| {
                    ep.poll_transmit_datagram(now, mem, buf)
                        .map(|(m, n)| (Some(m), n))
                };
                while !tx.is_full() && tx.push_datagram_with(&mut pull) {}
                match tx.is_empty() {
                    true => 0,
                    false => dp.send(tx)?,
                }
            } else {
                dp.transmit_with(tx, &mut |buf| ep.poll_transmit(now, mem, buf))?
            };
            if sent == 0 && tx.is_empty() {
                // The core had nothing to send.
                break;
            }
            p.tx += sent;
        }
        // Frames still waiting mean the kernel pushed back or the budget ran out; either way
        // the next pass should not wait for a packet or a timer to arrive first.
        p.more |= !tx.is_empty() || p.tx >= cfg.tx_frames_per_pass || dp.rx_waiting();
        self.more = p.more;
        if p.rx > 0 || p.tx > 0 || p.timers {
            self.last_activity = Some(now);
        }
        Ok(p)
    }

    /// How [`Driver::wait`] would wait now: at once (busy polling) or for how long, and on
    /// which readiness of the datapath's descriptor. A caller that waits elsewhere (a progress
    /// thread sleeping without holding the driver's lock) reads this, waits on a duplicate of
    /// [`Datapath::fd`] itself, and reports readable descriptors of its own with
    /// [`Driver::note_activity`].
    pub fn wait_plan(&self) -> WaitPlan {
        let now = self.clock.now();
        let spin =
            self.cfg.wait.spins(now, self.last_activity) || (self.more && self.tx.is_empty());
        let mut timeout = match self.ep.poll_timeout() {
            Some(t) => (t - now).min(self.cfg.max_sleep),
            None => self.cfg.max_sleep,
        };
        if spin {
            timeout = Duration::ZERO;
        } else if !self.tx.is_empty() {
            // Not every datapath can say when it becomes writable (several UDP sockets behind
            // one descriptor): retry soon regardless.
            timeout = timeout.min(Duration::from_micros(200));
        }
        WaitPlan {
            spin,
            timeout,
            writable: !self.tx.is_empty(),
        }
    }

    /// Counts as activity for [`WaitMode::Adaptive`]: something outside the datapath (a
    /// caller's descriptor, a posted request) gave the driver work.
    pub fn note_activity(&mut self) {
        self.last_activity = Some(self.clock.now());
    }

    /// Waits for something to do; see the module docs. Returns, for each of `extra`, whether it
    /// became readable. Returns at once after a pass that left work ([`Progress::more`]).
    ///
    /// # Errors
    /// `ppoll` failures other than `EINTR`.
    pub fn wait(&mut self, extra: &[BorrowedFd<'_>]) -> Result<Vec<bool>, Error> {
        let plan = self.wait_plan();
        let mut events = libc::POLLIN;
        if plan.writable {
            events |= libc::POLLOUT;
        }
        let mut fds = Vec::with_capacity(1 + extra.len());
        fds.push(libc::pollfd {
            fd: self.dp.fd().as_raw_fd(),
            events,
            revents: 0,
        });
        fds.extend(extra.iter().map(|f| libc::pollfd {
            fd: f.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }));
        crate::sys::ppoll(&mut fds, Some(plan.timeout)).map_err(|e| Error::io("ppoll", e))?;
        if plan.spin {
            // sched_yield on Linux.
            std::thread::yield_now();
        }
        let ready: Vec<bool> = fds[1..]
            .iter()
            .map(|f| f.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0)
            .collect();
        if ready.contains(&true) {
            self.note_activity();
        }
        Ok(ready)
    }

    /// Polls and waits until `done` returns true (then `Ok(true)`) or `timeout` passes
    /// (`Ok(false)`). For tools and tests; the daemon has its own loop around
    /// [`Driver::poll`] and [`Driver::wait`].
    ///
    /// # Errors
    /// Datapath failures.
    pub fn run_until(
        &mut self,
        timeout: Duration,
        mut done: impl FnMut(&mut Self) -> bool,
    ) -> Result<bool, Error> {
        let end = self.clock.now() + timeout;
        loop {
            self.poll()?;
            if done(self) {
                return Ok(true);
            }
            if self.clock.now() >= end {
                return Ok(false);
            }
            self.wait(&[])?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RxMeta;
    use rocev2_core::mr::VecMemory;
    use rocev2_core::wire::DatagramMeta;
    use std::collections::VecDeque;
    use std::os::fd::AsFd;

    /// An entry as it travels: a frame, or a UDP payload with its metadata.
    type Entry = (Option<DatagramMeta>, Vec<u8>);

    /// A datapath that delivers queued entries and records sent ones; `room` limits how many
    /// each send takes, to play a kernel that pushes back; `datagrams` plays the UDP datapath.
    struct Fake {
        inbox: VecDeque<Entry>,
        sent: Vec<Entry>,
        room: usize,
        datagrams: bool,
        file: std::fs::File,
    }

    impl Datapath for Fake {
        fn name(&self) -> &'static str {
            "fake"
        }
        fn carries_datagrams(&self) -> bool {
            self.datagrams
        }
        fn recv(&mut self, batch: &mut RxBatch) -> Result<usize, Error> {
            let (slots, meta) = batch.parts_mut();
            let mut n = 0;
            while n < slots.len() {
                let Some((datagram, f)) = self.inbox.pop_front() else {
                    break;
                };
                slots[n][..f.len()].copy_from_slice(&f);
                meta[n] = RxMeta {
                    len: f.len(),
                    datagram,
                    ..RxMeta::default()
                };
                n += 1;
            }
            batch.set_len(n);
            Ok(n)
        }
        fn send(&mut self, batch: &mut TxBatch) -> Result<usize, Error> {
            let n = batch.pending().min(self.room);
            let sent = batch.frames().take(n).enumerate();
            self.sent
                .extend(sent.map(|(i, f)| (batch.datagram(i), f.to_vec())));
            batch.consume(n);
            Ok(n)
        }
        fn fd(&self) -> BorrowedFd<'_> {
            self.file.as_fd()
        }
        fn stats(&self) -> DatapathStats {
            DatapathStats::default()
        }
    }

    fn fake(room: usize, datagrams: bool) -> Fake {
        Fake {
            inbox: VecDeque::new(),
            sent: Vec::new(),
            room,
            datagrams,
            file: std::fs::File::open("/dev/null").unwrap(),
        }
    }

    fn at_us(us: u64) -> Instant {
        Instant::from_nanos(1_000_000_000 + us * 1_000)
    }

    #[test]
    fn wait_mode_adaptive_spins_within_window_only() {
        let m = WaitMode::Adaptive {
            spin: Duration::from_micros(100),
        };
        let last = Some(at_us(0));
        assert!(m.spins(at_us(0), last), "right after activity");
        assert!(m.spins(at_us(99), last), "inside the window");
        let edge = Instant::from_nanos(at_us(100).as_nanos() - 1);
        assert!(m.spins(edge, last), "one ns before its end");
        assert!(!m.spins(at_us(100), last), "the window is half-open");
        assert!(!m.spins(at_us(5_000), last), "long after");
        assert!(!m.spins(at_us(0), None), "no activity yet: sleep");
        // A `now` read before the activity's (never with one monotonic clock) counts as no time.
        assert!(m.spins(at_us(0), Some(at_us(50))));
        let zero = WaitMode::Adaptive {
            spin: Duration::ZERO,
        };
        assert!(!zero.spins(at_us(0), last), "a zero window is Sleep");
    }

    #[test]
    fn wait_mode_sleep_never_spins_and_spin_always_does() {
        for last in [None, Some(at_us(0))] {
            assert!(!WaitMode::Sleep.spins(at_us(0), last));
            assert!(WaitMode::Spin.spins(at_us(1_000_000), last));
        }
    }

    #[test]
    fn wait_mode_names_parse_and_default_is_adaptive() {
        for m in [WaitMode::Sleep, WaitMode::default(), WaitMode::Spin] {
            assert_eq!(m.name().parse::<WaitMode>(), Ok(m));
        }
        assert_eq!(
            WaitMode::default(),
            WaitMode::Adaptive {
                spin: WaitMode::DEFAULT_SPIN
            }
        );
        assert_eq!(DriverConfig::default().wait, WaitMode::default());
        assert!("busy".parse::<WaitMode>().unwrap_err().contains("adaptive"));
        let d = Duration::from_micros(7);
        assert_eq!(
            WaitMode::default().with_spin(d),
            Ok(WaitMode::Adaptive { spin: d })
        );
        assert!(WaitMode::Sleep.with_spin(d).is_err());
        assert!(WaitMode::Spin.with_spin(d).is_err());
        assert_eq!(
            WaitMode::Adaptive { spin: d }.to_string(),
            "adaptive (spin 7.000us)"
        );
    }

    /// Activity is what moves the adaptive window: a pass that received, sent or ran a timer,
    /// or a readable extra descriptor; an idle pass is not.
    #[test]
    fn driver_records_activity_not_idle_passes() {
        let mut d = Driver::new(
            Endpoint::new(1),
            VecMemory::new(),
            fake(64, false),
            DriverConfig::default(),
        );
        d.poll().unwrap();
        assert_eq!(d.last_activity, None, "an idle pass");
        d.dp.inbox.push_back((None, vec![0xab; 60]));
        d.poll().unwrap();
        let rx = d.last_activity.expect("a pass that received");
        d.poll().unwrap();
        assert_eq!(d.last_activity, Some(rx), "an idle pass leaves it");
        // /dev/null is always readable: the extra descriptor's readiness is activity too.
        let null = std::fs::File::open("/dev/null").unwrap();
        assert_eq!(d.wait(&[null.as_fd()]).unwrap(), vec![true]);
        assert!(d.last_activity.unwrap() >= rx);
    }

    #[test]
    fn driver_counts_garbage_and_stays_idle() {
        let mut d = Driver::new(
            Endpoint::new(1),
            VecMemory::new(),
            fake(64, false),
            DriverConfig::default(),
        );
        d.dp.inbox.push_back((None, vec![0xab; 60]));
        let ack = crate::test_frames::ack(
            crate::test_frames::v4(0, rocev2_core::wire::frame::Ecn::NotEct),
            1,
        );
        d.dp.inbox.push_back((None, ack));
        let p = d.poll().unwrap();
        assert_eq!((p.rx, p.tx, p.more), (2, 0, false));
        let s = d.ep.stats();
        assert_eq!(s.rx_frames, 2);
        assert_eq!(s.drops(rocev2_core::DropReason::NotIp), 1);
        assert_eq!(s.drops(rocev2_core::DropReason::UnknownQp), 1);
    }

    /// Two drivers over fake datapaths joined by hand: a WRITE larger than one pass's budget
    /// completes, and a datapath that takes one frame per call never loses a frame; with frames
    /// and with UDP payloads plus metadata alike.
    #[test]
    fn driver_write_completes_through_pushback() {
        for datagrams in [false, true] {
            write_through_pushback(datagrams);
        }
    }

    fn write_through_pushback(datagrams: bool) {
        use rocev2_core::cq::WcStatus;
        use rocev2_core::qp::{SendOp, SendWr, Sge};
        use rocev2_core::testing::{ConnectOptions, Pair};
        // Let the in-memory Pair set both QPs up, then move its endpoints into drivers.
        let mut pair = Pair::new(Default::default(), Default::default());
        let c = pair
            .connect(ConnectOptions {
                mr_len: 1 << 20,
                // Real time passes in this test: keep the ACK timeout (4.096 us * 2^18 = 1.07 s)
                // far above how long a debug build takes.
                timeout: 18,
                ..ConnectOptions::default()
            })
            .unwrap();
        let data: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 + 3) as u8).collect();
        pair.a
            .mem
            .get_mut(c.mr_a.id)
            .unwrap()
            .copy_from_slice(&data);
        let wr = SendWr::new(
            1,
            SendOp::Write {
                remote_addr: c.mr_b.addr,
                rkey: c.mr_b.rkey,
            },
        )
        .sge(Sge {
            addr: c.mr_a.addr,
            length: 1 << 20,
            lkey: c.mr_a.lkey,
        });
        pair.a.ep.post_send(c.qa, wr).unwrap();
        let cfg = DriverConfig {
            wait: WaitMode::Spin,
            ..DriverConfig::default()
        };
        let mut a = Driver::new(pair.a.ep, pair.a.mem, fake(1, datagrams), cfg);
        let mut b = Driver::new(pair.b.ep, pair.b.mem, fake(64, datagrams), cfg);
        let mut done = false;
        for _ in 0..100_000 {
            a.poll().unwrap();
            b.poll().unwrap();
            let ab: Vec<_> = a.dp.sent.drain(..).collect();
            assert!(ab.iter().all(|(m, _)| m.is_some() == datagrams));
            b.dp.inbox.extend(ab);
            let ba: Vec<_> = b.dp.sent.drain(..).collect();
            a.dp.inbox.extend(ba);
            let mut wcs = Vec::new();
            a.ep.poll_cq(c.cq_a, &mut wcs, 16);
            if let Some(wc) = wcs.first() {
                assert_eq!(wc.status, WcStatus::Success);
                done = true;
                break;
            }
        }
        assert!(done, "the WRITE completed");
        assert_eq!(b.mem.get(c.mr_b.id).unwrap(), &data[..]);
        // A lost frame would show at B as a PSN gap (sequence NAK) and at A as a retransmit.
        let qb = b.ep.qp(c.qb).unwrap().counters();
        assert_eq!((qb.naks_sent, qb.out_of_sequence), (0, 0));
        assert_eq!(a.ep.qp(c.qa).unwrap().counters().retransmits, 0);
    }
}
