//! A single-producer, single-consumer ring of records in a shared [`Region`].
//!
//! Work requests travel application → daemon on a QP's send and receive rings, completions
//! daemon → application on a CQ's ring: no system call per request, as with an HCA's queues.
//!
//! Layout (all little-endian, offsets in bytes):
//!
//! | offset | what |
//! | --- | --- |
//! | 0 | producer index, `u32`, counts records ever pushed (wrapping) |
//! | 64 | consumer index, `u32`, counts records ever popped |
//! | 128 | consumer asleep, `u32`: 1 while the consumer sleeps and must be woken |
//! | 192 | `slots × slot_size` bytes: slot `i % slots` holds record `i` as `u32` length + bytes |
//!
//! The words sit on their own cache lines so the two sides do not false-share. The producer
//! stores the record, then the producer index with Release; the consumer loads it with Acquire,
//! copies the record out, then stores the consumer index with Release.
//!
//! Wake-ups cost a system call, so the producer makes one only when the consumer says it
//! sleeps, as io_uring's `IORING_SQ_NEED_WAKEUP` does: the consumer sets "asleep", then looks
//! at the ring once more before it sleeps; the producer publishes its record, then reads
//! "asleep". With a full fence after each side's store, at least one of them sees the other's
//! (the store-buffering pattern), so a record is never left unnoticed by a sleeping consumer.
//!
//! Neither side trusts the other's index: each keeps its own in private memory and only
//! publishes it, and an index from the other side that claims more records than the ring holds
//! is [`RingError::Corrupt`] (the daemon then closes the attachment). Records are copied out
//! before they are decoded, so the producer cannot change a record while it is being read.
//!
//! Deviations: none.

use crate::shm::{Region, ShmError};
use std::sync::atomic::Ordering;

const PRODUCER: usize = 0;
const CONSUMER: usize = 64;
const ASLEEP: usize = 128;
const SLOTS: usize = 192;
const LEN: usize = 4;

/// What went wrong with a ring.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RingError {
    /// A record longer than a slot can carry.
    #[error("a record of {0} bytes does not fit a slot")]
    TooLarge(usize),
    /// The other side published an impossible index or record length.
    #[error("the other side corrupted the ring")]
    Corrupt,
}

/// Which end of the ring this process holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Pushes records.
    Producer,
    /// Pops records.
    Consumer,
}

/// One end of a ring; see the module docs.
#[derive(Debug)]
pub struct Ring {
    region: Region,
    slots: u32,
    slot_size: usize,
    end: End,
    /// This end's own index, never read back from shared memory.
    index: u32,
}

impl Ring {
    /// Bytes of shared memory a ring of `slots` slots of `slot_size` bytes needs.
    pub fn region_len(slots: u32, slot_size: usize) -> usize {
        SLOTS + slots as usize * slot_size
    }

    /// A new ring in fresh shared memory (the daemon makes every ring), holding `slots`
    /// records (at least 1) of up to `slot_size - 4` bytes.
    ///
    /// # Errors
    /// Shared memory could not be made.
    pub fn create(name: &str, slots: u32, slot_size: usize, end: End) -> Result<Ring, ShmError> {
        let slots = slots.max(1);
        let region = Region::create(name, Ring::region_len(slots, slot_size))?;
        Ok(Ring {
            region,
            slots,
            slot_size,
            end,
            index: 0,
        })
    }

    /// The other end of a ring created by the other process, from its region.
    ///
    /// # Errors
    /// [`ShmError::WrongSize`] when the region does not match `slots` and `slot_size`.
    pub fn open(region: Region, slots: u32, slot_size: usize, end: End) -> Result<Ring, ShmError> {
        let expected = Ring::region_len(slots, slot_size);
        if slots == 0 || region.len() != expected || slot_size <= LEN {
            return Err(ShmError::WrongSize {
                expected: expected as u64,
                actual: region.len() as u64,
            });
        }
        // Start where the creator is: a ring is handed over before its first record.
        let index = region
            .atomic_u32(if end == End::Producer {
                PRODUCER
            } else {
                CONSUMER
            })
            .map_or(0, |a| a.load(Ordering::Acquire));
        Ok(Ring {
            region,
            slots,
            slot_size,
            end,
            index,
        })
    }

    /// The shared memory, to send to the other process.
    pub fn region(&self) -> &Region {
        &self.region
    }

    /// Slots in the ring.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Bytes a record may have.
    pub fn max_record(&self) -> usize {
        self.slot_size - LEN
    }

    fn other(&self, at: usize) -> u32 {
        self.region
            .atomic_u32(at)
            .map_or(self.index, |a| a.load(Ordering::Acquire))
    }

    fn publish(&self, at: usize) {
        if let Some(a) = self.region.atomic_u32(at) {
            a.store(self.index, Ordering::Release);
        }
    }

    fn slot(&self, index: u32) -> usize {
        SLOTS + (index % self.slots) as usize * self.slot_size
    }

    /// Records waiting, as this end sees them.
    ///
    /// # Errors
    /// [`RingError::Corrupt`].
    pub fn len(&self) -> Result<u32, RingError> {
        let (prod, cons) = match self.end {
            End::Producer => (self.index, self.other(CONSUMER)),
            End::Consumer => (self.other(PRODUCER), self.index),
        };
        let n = prod.wrapping_sub(cons);
        if n > self.slots {
            return Err(RingError::Corrupt);
        }
        Ok(n)
    }

    /// Whether no record waits.
    ///
    /// # Errors
    /// [`RingError::Corrupt`].
    pub fn is_empty(&self) -> Result<bool, RingError> {
        Ok(self.len()? == 0)
    }

    /// Consumer: says whether it is about to sleep (true) or awake (false). After saying true,
    /// look at the ring again ([`Ring::is_empty`]) before sleeping; see the module docs.
    pub fn set_asleep(&self, asleep: bool) {
        if let Some(a) = self.region.atomic_u32(ASLEEP) {
            a.store(u32::from(asleep), Ordering::SeqCst);
        }
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// Producer, after [`Ring::push`]: whether the consumer sleeps and must be woken.
    pub fn consumer_asleep(&self) -> bool {
        std::sync::atomic::fence(Ordering::SeqCst);
        self.region
            .atomic_u32(ASLEEP)
            .is_some_and(|a| a.load(Ordering::SeqCst) != 0)
    }

    /// Producer: appends `record`; `Ok(false)` when the ring is full.
    ///
    /// # Errors
    /// [`RingError::TooLarge`], [`RingError::Corrupt`].
    pub fn push(&mut self, record: &[u8]) -> Result<bool, RingError> {
        debug_assert_eq!(self.end, End::Producer);
        if record.len() > self.max_record() {
            return Err(RingError::TooLarge(record.len()));
        }
        if self.len()? == self.slots {
            return Ok(false);
        }
        let at = self.slot(self.index);
        let len = u32::try_from(record.len()).map_err(|_| RingError::TooLarge(record.len()))?;
        let ok = self.region.write(at, &len.to_le_bytes()) && self.region.write(at + LEN, record);
        if !ok {
            return Err(RingError::Corrupt);
        }
        self.index = self.index.wrapping_add(1);
        self.publish(PRODUCER);
        Ok(true)
    }

    /// Consumer: moves the oldest record into `out` (replacing its contents); `Ok(false)` when
    /// the ring is empty.
    ///
    /// # Errors
    /// [`RingError::Corrupt`].
    pub fn pop(&mut self, out: &mut Vec<u8>) -> Result<bool, RingError> {
        debug_assert_eq!(self.end, End::Consumer);
        if self.len()? == 0 {
            return Ok(false);
        }
        let at = self.slot(self.index);
        let mut len = [0u8; LEN];
        if !self.region.read(at, &mut len) {
            return Err(RingError::Corrupt);
        }
        let len = u32::from_le_bytes(len) as usize;
        if len > self.max_record() {
            return Err(RingError::Corrupt);
        }
        out.resize(len, 0);
        if !self.region.read(at + LEN, out) {
            return Err(RingError::Corrupt);
        }
        self.index = self.index.wrapping_add(1);
        self.publish(CONSUMER);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pair(slots: u32, slot_size: usize) -> (Ring, Ring) {
        let p = Ring::create("t", slots, slot_size, End::Producer).unwrap();
        let fd = p.region().fd().try_clone_to_owned().unwrap();
        let len = Ring::region_len(slots, slot_size) as u64;
        let c = Ring::open(
            Region::from_fd(fd, len).unwrap(),
            slots,
            slot_size,
            End::Consumer,
        );
        (p, c.unwrap())
    }

    #[test]
    fn records_cross_in_order_and_a_full_ring_refuses() {
        let (mut p, mut c) = pair(4, 16);
        for i in 0..4u8 {
            assert_eq!(p.push(&[i; 3]), Ok(true));
        }
        assert_eq!(p.push(b"x"), Ok(false));
        assert_eq!(p.push(&[0; 13]), Err(RingError::TooLarge(13)));
        let mut out = Vec::new();
        for i in 0..4u8 {
            assert_eq!(c.pop(&mut out), Ok(true));
            assert_eq!(out, [i; 3]);
        }
        assert_eq!(c.pop(&mut out), Ok(false));
        assert_eq!(p.push(b"again"), Ok(true));
        assert_eq!(c.pop(&mut out), Ok(true));
        assert_eq!(out, b"again");
    }

    #[test]
    fn the_producer_sees_a_sleeping_consumer() {
        let (mut p, c) = pair(4, 16);
        assert!(!p.consumer_asleep());
        c.set_asleep(true);
        p.push(b"x").unwrap();
        assert!(p.consumer_asleep());
        assert_eq!(
            c.is_empty(),
            Ok(false),
            "the consumer's second look finds the record"
        );
        c.set_asleep(false);
        assert!(!p.consumer_asleep());
    }

    #[test]
    fn a_scribbled_index_or_length_is_corruption_not_a_crash() {
        let (mut p, mut c) = pair(4, 16);
        p.push(b"ok").unwrap();
        // The producer claims 1000 records.
        p.region()
            .atomic_u32(PRODUCER)
            .unwrap()
            .store(1000, Ordering::Release);
        let mut out = Vec::new();
        assert_eq!(c.pop(&mut out), Err(RingError::Corrupt));
        // A sane index but a record length past the slot.
        p.region()
            .atomic_u32(PRODUCER)
            .unwrap()
            .store(1, Ordering::Release);
        p.region().write(SLOTS, &u32::MAX.to_le_bytes());
        assert_eq!(c.pop(&mut out), Err(RingError::Corrupt));
        // A consumer index the producer cannot believe.
        c.region()
            .atomic_u32(CONSUMER)
            .unwrap()
            .store(77, Ordering::Release);
        assert_eq!(p.push(b"x"), Err(RingError::Corrupt));
    }

    proptest! {
        /// Any interleaving of pushes and pops delivers exactly what was pushed, in order,
        /// across many wraps of the 32-bit indexes' low bits.
        #[test]
        fn interleavings_deliver_everything_in_order(ops in proptest::collection::vec(any::<(bool, u8)>(), 1..400)) {
            let (mut p, mut c) = pair(3, 12);
            let mut model = std::collections::VecDeque::new();
            let mut next = 0u32;
            let mut out = Vec::new();
            for (push, n) in ops {
                if push {
                    let rec = vec![next as u8; usize::from(n % 9)];
                    let pushed = p.push(&rec).unwrap();
                    prop_assert_eq!(pushed, model.len() < 3);
                    if pushed { model.push_back(rec); next += 1; }
                } else {
                    let popped = c.pop(&mut out).unwrap();
                    prop_assert_eq!(popped, !model.is_empty());
                    if popped { prop_assert_eq!(&out, &model.pop_front().unwrap()); }
                }
            }
        }
    }
}
