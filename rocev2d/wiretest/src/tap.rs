//! A datapath wrapper that records the first received frames' IPv4 Identification and DF bit
//! (the wire capture the UDP-mode test reads from an AF_PACKET server) and sends queued frames
//! alongside the QP's own (the `flood` and `rxe` workloads' garbage).
//!
//! Everything else is the wrapped datapath's: every [`Datapath`] method is forwarded, including
//! the provided ones (a UDP datapath must still say it [`Datapath::carries_datagrams`]).
//!
//! Deviations: none.

use rocev2_datapath::{Datapath, DatapathStats, Error, RxBatch, TxBatch};
use std::collections::VecDeque;
use std::os::fd::BorrowedFd;

/// Frames captured at most.
const CAPTURE_MAX: usize = 256;
/// Queued frames sent with each real batch: the flood is spread over the whole transfer
/// without overrunning the receiver.
const INJECT_PER_SEND: usize = 8;

/// The wrapper.
pub struct Tap<D> {
    inner: D,
    /// IPv4 Identification and DF of the first received IPv4 frames (whole frames only).
    pub capture: Vec<(u16, bool)>,
    /// Frames waiting to be sent.
    pub inject: VecDeque<Vec<u8>>,
    /// Queued frames the kernel took.
    pub injected: u64,
    scratch: TxBatch,
}

impl<D> Tap<D> {
    /// Wraps `inner`, capturing and injecting nothing yet.
    pub fn new(inner: D) -> Tap<D> {
        Tap {
            inner,
            capture: Vec::new(),
            inject: VecDeque::new(),
            injected: 0,
            scratch: TxBatch::new(16),
        }
    }
}

impl<D: Datapath> Datapath for Tap<D> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn carries_datagrams(&self) -> bool {
        self.inner.carries_datagrams()
    }
    fn recv(&mut self, batch: &mut RxBatch) -> Result<usize, Error> {
        let n = self.inner.recv(batch)?;
        for (f, meta) in batch.iter() {
            if self.capture.len() >= CAPTURE_MAX {
                break;
            }
            // A UDP payload from a datagram datapath has no IP header to read.
            if meta.datagram.is_none() && f.get(12..14) == Some(&[0x08, 0x00]) && f.len() >= 34 {
                let id = u16::from_be_bytes([f[18], f[19]]);
                self.capture.push((id, f[20] & 0x40 != 0));
            }
        }
        Ok(n)
    }
    fn send(&mut self, batch: &mut TxBatch) -> Result<usize, Error> {
        for _ in 0..INJECT_PER_SEND {
            let Some(f) = self.inject.pop_front() else {
                break;
            };
            self.scratch.push(&f);
        }
        while !self.scratch.is_empty() {
            let before = self.scratch.pending();
            self.inner.send(&mut self.scratch)?;
            self.injected += (before - self.scratch.pending()) as u64;
            if self.scratch.pending() == before {
                break;
            }
        }
        self.inner.send(batch)
    }
    fn fd(&self) -> BorrowedFd<'_> {
        self.inner.fd()
    }
    fn stats(&self) -> DatapathStats {
        self.inner.stats()
    }
}
