//! The event loop that joins a sans-IO [`Endpoint`], the [`Memory`] its regions live in, and a
//! [`Datapath`]: quinn's thin driver around quinn-proto, for RoCE.
//!
//! One [`Driver::poll`] pass:
//!
//! 1. receive up to a few batches and hand every frame to [`Endpoint::handle_frame`], or every
//!    UDP payload to [`Endpoint::handle_datagram`] (drops are counted there by reason);
//! 2. run the QP timers that are due ([`Endpoint::poll_timeout`] / [`Endpoint::handle_timeout`]);
//! 3. pull frames with [`Endpoint::poll_transmit`] (UDP payloads with
//!    [`Endpoint::poll_transmit_datagram`] when the datapath [`Datapath::carries_datagrams`])
//!    straight into the transmit batch and send it,
//!    until the core has nothing left, the kernel pushes back, or the per-pass budget is spent
//!    (so a long transfer never starves the receive side).
//!
//! Frames the kernel did not take stay in the batch and go first on the next pass; the core is
//! not polled for more until they are gone, so nothing it produced is ever dropped here.
//!
//! [`Driver::wait`] then either returns at once ([`WaitMode::Spin`], busy polling, lowest
//! latency, one core at 100%) or sleeps in `ppoll` ([`WaitMode::Sleep`]) on the datapath's
//! descriptor (readable; writable too while frames wait), on the caller's extra descriptors
//! (signals, a control socket), and until the core's next deadline, with nanosecond resolution.
//!
//! Deviations: none.

use crate::clock::Clock;
use crate::{Datapath, DatapathStats, Error, RxBatch, TxBatch};
use rocev2_core::Endpoint;
use rocev2_core::mr::Memory;
use rocev2_core::time::{Duration, Instant};
use std::os::fd::{AsRawFd, BorrowedFd};

/// How [`Driver::wait`] waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WaitMode {
    /// Sleep in `ppoll` until there is something to do.
    #[default]
    Sleep,
    /// Never sleep: poll again at once (busy polling).
    Spin,
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
    /// Busy polling or sleeping.
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
            wait: WaitMode::Sleep,
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
        for _ in 0..cfg.rx_batches_per_pass.max(1) {
            let n = dp.recv(rx)?;
            let now = clock.now();
            for (bytes, meta) in rx.iter() {
                // A drop is counted by the endpoint under its reason; nothing to do here.
                let _ = match &meta.datagram {
                    Some(d) => ep.handle_datagram(now, d, bytes, mem),
                    None => ep.handle_frame(now, bytes, mem),
                };
            }
            p.rx += n;
            if n < rx.capacity() {
                break;
            }
            p.more = true;
        }
        let now = clock.now();
        if ep.poll_timeout().is_some_and(|t| t <= now) {
            ep.handle_timeout(now, mem);
            p.timers = true;
        }
        if !tx.is_empty() {
            p.tx += dp.send(tx)?;
        }
        let now = clock.now();
        let datagrams = dp.carries_datagrams();
        let mut pull = |tx: &mut TxBatch| {
            if datagrams {
                tx.push_datagram_with(|buf| {
                    ep.poll_transmit_datagram(now, mem, buf)
                        .map(|(m, n)| (Some(m), n))
                })
            } else {
                tx.push_with(|buf| ep.poll_transmit(now, mem, buf))
            }
        };
        while tx.is_empty() && p.tx < cfg.tx_frames_per_pass {
            while !tx.is_full() && pull(tx) {}
            if tx.is_empty() {
                break;
            }
            p.tx += dp.send(tx)?;
        }
        // Frames still waiting mean the kernel pushed back or the budget ran out; either way
        // the next pass should not wait for a packet or a timer to arrive first.
        p.more |= !tx.is_empty() || p.tx >= cfg.tx_frames_per_pass;
        self.more = p.more;
        Ok(p)
    }

    /// Waits for something to do; see the module docs. Returns, for each of `extra`, whether it
    /// became readable. Returns at once after a pass that left work ([`Progress::more`]).
    ///
    /// # Errors
    /// `ppoll` failures other than `EINTR`.
    pub fn wait(&mut self, extra: &[BorrowedFd<'_>]) -> Result<Vec<bool>, Error> {
        let spin = self.cfg.wait == WaitMode::Spin || (self.more && self.tx.is_empty());
        let now = self.clock.now();
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
        let mut events = libc::POLLIN;
        if !self.tx.is_empty() {
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
        crate::sys::ppoll(&mut fds, Some(timeout)).map_err(|e| Error::io("ppoll", e))?;
        Ok(fds[1..]
            .iter()
            .map(|f| f.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0)
            .collect())
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
            rocev2_core::wire::IpRepr::V4 {
                src: "10.0.0.1".parse().unwrap(),
                dst: "10.0.0.2".parse().unwrap(),
                dscp: 0,
                ecn: rocev2_core::wire::frame::Ecn::NotEct,
                identification: 0,
                dont_fragment: true,
                ttl: 64,
            },
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
