//! Two datapaths joined in memory: what one sends, the other receives, with no interface,
//! no privileges and no network namespace.
//!
//! The link is a Unix datagram socket pair, so each end has a descriptor that polls readable
//! when frames wait and writable when the peer's queue has room, as the event loop expects
//! of every [`Datapath`], and frames keep their boundaries. Whole Ethernet frames cross
//! unchanged (no checksum offload, no loss), which makes the pair the datapath of doctests,
//! examples and API tests that should run anywhere; the kernel datapaths are tested between
//! namespaces.

use crate::{Datapath, DatapathStats, Error, MAX_FRAME, RxBatch, TxBatch};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixDatagram;

/// One end of an in-memory link; see the module docs.
#[derive(Debug)]
pub struct MemoryDatapath {
    sock: UnixDatagram,
    stats: DatapathStats,
}

/// Two datapaths joined to each other.
///
/// # Errors
/// [`Error::Io`] when the socket pair cannot be made (out of descriptors).
pub fn pair() -> Result<(MemoryDatapath, MemoryDatapath), Error> {
    let (a, b) = UnixDatagram::pair().map_err(|e| Error::io("socketpair", e))?;
    let end = |sock: UnixDatagram| -> Result<MemoryDatapath, Error> {
        sock.set_nonblocking(true)
            .map_err(|e| Error::io("set_nonblocking", e))?;
        Ok(MemoryDatapath {
            sock,
            stats: DatapathStats::default(),
        })
    };
    Ok((end(a)?, end(b)?))
}

impl Datapath for MemoryDatapath {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn recv(&mut self, batch: &mut RxBatch) -> Result<usize, Error> {
        let (slots, meta) = batch.parts_mut();
        let mut n = 0;
        for (slot, m) in slots.iter_mut().zip(meta.iter_mut()) {
            slot.resize(MAX_FRAME, 0);
            let len = match self.sock.recv(slot) {
                Ok(len) => len,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    batch.set_len(n);
                    return Err(Error::io("recv", e));
                }
            };
            let frame = slot.get(..len).unwrap_or_default();
            *m = crate::RxMeta {
                len,
                ecn: crate::filter::frame_ecn(frame),
                datagram: None,
            };
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += len as u64;
            n += 1;
        }
        batch.set_len(n);
        Ok(n)
    }

    fn send(&mut self, batch: &mut TxBatch) -> Result<usize, Error> {
        let mut sent = 0;
        let mut failed = None;
        for frame in batch.frames() {
            match self.sock.send(frame) {
                Ok(_) => {
                    self.stats.tx_packets += 1;
                    self.stats.tx_bytes += frame.len() as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.stats.tx_blocked += 1;
                    break;
                }
                // The other end is gone: the frame is lost, as on a cut cable.
                Err(e)
                    if e.kind() == io::ErrorKind::ConnectionRefused
                        || e.kind() == io::ErrorKind::BrokenPipe =>
                {
                    self.stats.tx_errors += 1;
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
            sent += 1;
        }
        batch.consume(sent);
        match failed {
            Some(e) => Err(Error::io("send", e)),
            None => Ok(sent),
        }
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    fn stats(&self) -> DatapathStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_cross_in_order_with_their_boundaries() {
        let (mut a, mut b) = pair().unwrap();
        let mut tx = TxBatch::new(4);
        assert!(tx.push(&[1; 60]));
        assert!(tx.push(&[2; 1500]));
        assert_eq!(a.send(&mut tx).unwrap(), 2);
        let mut rx = RxBatch::new(4);
        assert_eq!(b.recv(&mut rx).unwrap(), 2);
        let got: Vec<Vec<u8>> = rx.iter().map(|(f, _)| f.to_vec()).collect();
        assert_eq!(got, vec![vec![1; 60], vec![2; 1500]]);
        assert_eq!(b.recv(&mut rx).unwrap(), 0);
        assert_eq!(a.stats().tx_packets, 2);
        assert_eq!(b.stats().rx_bytes, 1560);
    }

    #[test]
    fn a_full_queue_keeps_the_rest_waiting() {
        let (mut a, _b) = pair().unwrap();
        let mut sent = 0;
        let mut tx = TxBatch::new(64);
        // The peer never reads: the socket buffer fills, and send stops short of the batch.
        for _ in 0..10_000 {
            while tx.push(&[0; 1500]) {}
            sent += a.send(&mut tx).unwrap();
            if !tx.is_empty() {
                break;
            }
        }
        assert!(
            !tx.is_empty(),
            "the pair never pushed back after {sent} frames"
        );
        assert!(a.stats().tx_blocked > 0);
    }
}
