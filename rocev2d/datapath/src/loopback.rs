//! Frames a host sends to itself: handed back to its own receive side, as a NIC or rdma_rxe
//! loops them, instead of leaving on a link that would carry them away.
//!
//! A path to one of the interface's own addresses resolves to the interface's own MAC
//! ([`crate::neigh::resolve`]), so every frame the core builds for it carries that MAC as its
//! destination. Over AF_XDP or AF_PACKET such a frame would leave on the link (a veth hands it
//! to its peer, which drops it), so [`Loopback`] takes it out of the transmit stream and queues
//! a copy, which the next receive returns as if it had arrived. Within one engine that is the
//! whole story; between the engine shards of one interface, the frame is then routed as any
//! received frame is ([`crate::handoff`]): the shard that sent it forwards it to the shard owning
//! its QPN block.
//!
//! The UDP datapath needs none of this: the kernel delivers a datagram to a local address
//! itself.
//!
//! The queue holds [`LOOP_FRAMES`] frames. While it is full, transmitting stops before the core
//! builds the next frame (so nothing is lost: the core keeps what it has not handed out), and
//! [`Datapath::rx_waiting`] tells the driver to receive again before it sleeps.
//!
//! Deviations: frames to the interface's own MAC skip the kernel, so a tc or XDP program on the
//! interface (an ECN-marking switch port) does not see them; neither would a NIC's.

use crate::{Datapath, DatapathStats, Error, RxBatch, RxMeta, TxBatch};
use rocev2_core::wire::FrameBuf;
use rocev2_core::wire::frame::{Ecn, Frame};
use std::collections::VecDeque;
use std::os::fd::BorrowedFd;

/// Frames waiting to be received again: four receive batches of the driver.
pub const LOOP_FRAMES: usize = 256;

/// A frame datapath that hands frames for its own MAC back to its receive side; see the
/// module docs.
pub struct Loopback<D> {
    inner: D,
    mac: [u8; 6],
    queue: VecDeque<Vec<u8>>,
    /// Buffers of frames already received again, for the next ones.
    spares: Vec<Vec<u8>>,
    looped: u64,
}

impl<D: Datapath> Loopback<D> {
    /// Wraps `inner`, a datapath of the interface whose MAC is `mac`.
    pub fn new(mac: [u8; 6], inner: D) -> Loopback<D> {
        Loopback {
            inner,
            mac,
            queue: VecDeque::new(),
            spares: Vec::new(),
            looped: 0,
        }
    }

    /// The next looped frame and what the receive side reports with it.
    fn next_looped(&mut self) -> Option<(Vec<u8>, RxMeta)> {
        let frame = self.queue.pop_front()?;
        // The core built it, so it parses; the ECN it carries is read as a receiver would.
        let ecn = Frame::new_checked(&frame).map_or(Ecn::NotEct, |f| f.ip_repr().ecn());
        let meta = RxMeta {
            len: frame.len(),
            ecn,
            datagram: None,
        };
        Some((frame, meta))
    }
}

impl<D: Datapath> Datapath for Loopback<D> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn carries_datagrams(&self) -> bool {
        self.inner.carries_datagrams()
    }

    /// Looped frames first, as a batch of their own; the wrapped datapath's when none wait.
    fn recv(&mut self, batch: &mut RxBatch) -> Result<usize, Error> {
        if self.queue.is_empty() {
            return self.inner.recv(batch);
        }
        batch.set_len(0);
        while batch.len() < batch.capacity() {
            let Some((frame, meta)) = self.next_looped() else {
                break;
            };
            batch.push(&frame, meta);
            self.spares.push(frame);
        }
        Ok(batch.len())
    }

    /// Hands up to a batch of looped frames to `handle`, then receives from the wrapped
    /// datapath.
    fn recv_with(
        &mut self,
        batch: &mut RxBatch,
        handle: &mut dyn FnMut(&[u8], RxMeta),
    ) -> Result<usize, Error> {
        let mut n = 0;
        while n < batch.capacity() {
            let Some((frame, meta)) = self.next_looped() else {
                break;
            };
            handle(&frame, meta);
            self.spares.push(frame);
            n += 1;
        }
        Ok(n + self.inner.recv_with(batch, handle)?)
    }

    /// Lets `fill` build frames into the wrapped datapath's buffers; a frame for this
    /// interface's own MAC is copied into the queue and its buffer reused for the next.
    fn transmit_with(
        &mut self,
        batch: &mut TxBatch,
        fill: &mut dyn FnMut(&mut dyn FrameBuf) -> Option<usize>,
    ) -> Result<usize, Error> {
        let Loopback {
            inner,
            mac,
            queue,
            spares,
            looped,
        } = self;
        inner.transmit_with(batch, &mut |buf| {
            loop {
                if queue.len() >= LOOP_FRAMES {
                    return None;
                }
                let n = fill(buf)?;
                let frame = buf.frame(n);
                if frame.get(..6) != Some(&mac[..]) {
                    return Some(n);
                }
                let mut copy = spares.pop().unwrap_or_default();
                copy.clear();
                copy.extend_from_slice(frame);
                queue.push_back(copy);
                *looped += 1;
            }
        })
    }

    fn send(&mut self, batch: &mut TxBatch) -> Result<usize, Error> {
        self.inner.send(batch)
    }

    fn rx_waiting(&self) -> bool {
        !self.queue.is_empty() || self.inner.rx_waiting()
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.inner.fd()
    }

    fn stats(&self) -> DatapathStats {
        DatapathStats {
            tx_looped: self.looped,
            ..self.inner.stats()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pair::{MemoryDatapath, pair};
    use crate::test_frames::{ack, v4};

    const OWN: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const PEER: [u8; 6] = [2, 0, 0, 0, 0, 2];

    /// An ACK to `dst` carrying `ecn`, numbered by its UDP source port.
    fn frame(dst: [u8; 6], ecn: Ecn, n: u16) -> Vec<u8> {
        let mut f = ack(v4(0, ecn), n);
        f[..6].copy_from_slice(&dst);
        f
    }

    /// Transmits `frames` through `dp` until they are all taken or it stops taking them;
    /// returns how many it took.
    fn transmit(dp: &mut impl Datapath, frames: &mut VecDeque<Vec<u8>>) -> usize {
        let before = frames.len();
        let mut batch = TxBatch::new(64);
        dp.transmit_with(&mut batch, &mut |buf| {
            let f = frames.pop_front()?;
            buf.frame_mut(f.len()).copy_from_slice(&f);
            Some(f.len())
        })
        .unwrap();
        before - frames.len()
    }

    fn received(dp: &mut impl Datapath) -> Vec<(Vec<u8>, Ecn)> {
        let mut got = Vec::new();
        let mut batch = RxBatch::new(64);
        dp.recv_with(&mut batch, &mut |b, m| {
            assert_eq!(m.len, b.len());
            got.push((b.to_vec(), m.ecn));
        })
        .unwrap();
        got
    }

    fn ends() -> (Loopback<MemoryDatapath>, MemoryDatapath) {
        let (a, b) = pair().unwrap();
        (Loopback::new(OWN, a), b)
    }

    #[test]
    fn loopback_returns_frames_for_its_own_mac_and_sends_the_rest() {
        let (mut a, mut b) = ends();
        let own = [
            frame(OWN, Ecn::Ect0, 1),
            frame(OWN, Ecn::Ce, 2),
            frame(OWN, Ecn::NotEct, 3),
        ];
        let away = [frame(PEER, Ecn::Ect0, 4), frame(PEER, Ecn::Ect0, 5)];
        let mut out: VecDeque<Vec<u8>> = [&own[0], &away[0], &own[1], &own[2], &away[1]]
            .into_iter()
            .cloned()
            .collect();
        assert!(!a.rx_waiting());
        assert_eq!(transmit(&mut a, &mut out), 5);
        assert!(
            a.rx_waiting(),
            "looped frames wait without the descriptor saying so"
        );
        let got = received(&mut a);
        let want: Vec<_> = own
            .iter()
            .cloned()
            .zip([Ecn::Ect0, Ecn::Ce, Ecn::NotEct])
            .collect();
        assert_eq!(got, want, "in order, with the ECN they carry");
        assert!(!a.rx_waiting());
        let peer: Vec<_> = received(&mut b).into_iter().map(|(f, _)| f).collect();
        assert_eq!(peer, away, "only frames for another MAC leave");
        let s = a.stats();
        assert_eq!((s.tx_looped, s.tx_packets), (3, 2));
        assert_eq!(b.stats().rx_packets, 2);
    }

    #[test]
    fn loopback_stops_transmitting_while_full_and_loses_nothing() {
        let (mut a, _b) = ends();
        let mut out: VecDeque<Vec<u8>> = (0..LOOP_FRAMES as u16 + 10)
            .map(|n| frame(OWN, Ecn::Ect0, n))
            .collect();
        let mut taken = 0;
        while transmit(&mut a, &mut out) > 0 {
            taken = a.stats().tx_looped;
        }
        assert_eq!(
            taken, LOOP_FRAMES as u64,
            "the core keeps what does not fit"
        );
        assert_eq!(out.len(), 10);
        // `recv` empties the queue a batch at a time; then the rest go.
        let mut batch = RxBatch::new(64);
        let mut back = 0;
        while a.rx_waiting() {
            back += a.recv(&mut batch).unwrap();
        }
        assert_eq!(back, LOOP_FRAMES);
        assert_eq!(transmit(&mut a, &mut out), 10);
        let got = received(&mut a);
        let ports: Vec<u16> = got
            .iter()
            .map(|(f, _)| u16::from_be_bytes([f[34], f[35]]))
            .collect();
        assert_eq!(
            ports,
            (LOOP_FRAMES as u16..LOOP_FRAMES as u16 + 10).collect::<Vec<_>>()
        );
    }
}
