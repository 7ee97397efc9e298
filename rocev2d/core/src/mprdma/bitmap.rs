//! The receiver's tracking bitmap: which of the next L PSNs have arrived, and where messages
//! end.
//!
//! Source: seed 001 §3.3 and Fig. 6: "a cyclic array … the head of the array refers to the
//! packet with PSN = rcv_nxt. Each slot contains two bits": Empty, Received, Tail, Tail with
//! completion; "if an out-of-order packet holds a PSN larger than (rcv_nxt + L), the receiver
//! has to drop this packet".
//!
//! Deviations: the head advances packet by packet over received slots rather than by whole
//! messages, so that a message longer than L packets can still be received; a message still
//! completes only when its tail slot leaves the head, in message order, as the paper requires.
//! A slot is stored in a byte, not 2 bits (the memory argument is the NIC's, not ours).

use crate::wire::Psn;
use alloc::vec;
use alloc::vec::Vec;

/// A slot's state (seed 001 Fig. 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// The packet has not arrived.
    Empty,
    /// Arrived, and is not the last packet of its message.
    Received,
    /// The last packet of a message that needs no completion (a WRITE).
    Tail,
    /// The last packet of a message that completes a receive WQE (a SEND, a WRITE with
    /// immediate).
    TailWithCompletion,
}

/// What [`TrackingBitmap::mark`] did with a PSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// The slot was empty and is now set.
    Accepted,
    /// Already received (below the head, or its slot is set).
    Duplicate,
    /// At or beyond `rcv_nxt + L`: the packet must be dropped.
    Beyond,
}

/// A cyclic array of L slots whose head is `rcv_nxt` (seed 001 Fig. 6).
#[derive(Debug, Clone)]
pub struct TrackingBitmap {
    slots: Vec<Slot>,
    /// Index in `slots` of the head.
    start: usize,
    /// rcv_nxt: the PSN of the head slot.
    head: Psn,
}

impl TrackingBitmap {
    /// An empty bitmap of `len` slots (at least 1) whose head is `rcv_nxt`.
    pub fn new(len: u16, rcv_nxt: Psn) -> TrackingBitmap {
        TrackingBitmap {
            slots: vec![Slot::Empty; (len as usize).max(1)],
            start: 0,
            head: rcv_nxt,
        }
    }

    /// L, the number of slots.
    pub fn len(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Never true: a bitmap has at least one slot.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// rcv_nxt: every PSN before it has arrived.
    pub fn head(&self) -> Psn {
        self.head
    }

    /// Offset of `psn` from the head, or what [`Self::mark`] would answer without a slot.
    fn offset(&self, psn: Psn) -> Result<usize, Mark> {
        let d = psn.distance(self.head);
        if d < 0 {
            Err(Mark::Duplicate)
        } else if d as u32 >= self.len() {
            Err(Mark::Beyond)
        } else {
            Ok(d as usize)
        }
    }

    /// Where `psn` would go: `Accepted` when its slot is free.
    pub fn check(&self, psn: Psn) -> Mark {
        match self.offset(psn) {
            Ok(d) if self.slots[(self.start + d) % self.slots.len()] == Slot::Empty => {
                Mark::Accepted
            }
            Ok(_) => Mark::Duplicate,
            Err(m) => m,
        }
    }

    /// Records the arrival of `psn` as `slot` (not [`Slot::Empty`]) if it is free.
    pub fn mark(&mut self, psn: Psn, slot: Slot) -> Mark {
        let m = self.check(psn);
        if let (Mark::Accepted, Ok(d)) = (m, self.offset(psn)) {
            let n = self.slots.len();
            self.slots[(self.start + d) % n] = slot;
        }
        m
    }

    /// Takes the head slot if its packet arrived, clearing it and moving `rcv_nxt` on.
    pub fn pop(&mut self) -> Option<Slot> {
        let s = self.slots[self.start];
        if s == Slot::Empty {
            return None;
        }
        self.slots[self.start] = Slot::Empty;
        self.start = (self.start + 1) % self.slots.len();
        self.head = self.head.next();
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Fig. 6: packets 1 and 2 of a 3-packet message arrive before packet 0; the head moves only
    // when 0 arrives, and the message ends at its tail.
    #[test]
    fn bitmap_fig6_head_waits_for_the_hole() {
        let mut b = TrackingBitmap::new(4, Psn::new(100));
        assert_eq!(
            b.mark(Psn::new(102), Slot::TailWithCompletion),
            Mark::Accepted
        );
        assert_eq!(b.mark(Psn::new(101), Slot::Received), Mark::Accepted);
        assert_eq!(b.pop(), None);
        assert_eq!(b.mark(Psn::new(101), Slot::Received), Mark::Duplicate);
        assert_eq!(b.mark(Psn::new(100), Slot::Received), Mark::Accepted);
        let popped: Vec<_> = core::iter::from_fn(|| b.pop()).collect();
        assert_eq!(
            popped,
            [Slot::Received, Slot::Received, Slot::TailWithCompletion]
        );
        assert_eq!(b.head(), Psn::new(103));
        assert_eq!(b.mark(Psn::new(102), Slot::Tail), Mark::Duplicate);
    }

    // §3.3: a PSN at or past rcv_nxt + L is beyond the bitmap; the slots are cyclic.
    #[test]
    fn bitmap_s3_3_beyond_l_refused_and_slots_wrap() {
        let mut b = TrackingBitmap::new(4, Psn::new(0xff_fffe));
        assert_eq!(b.mark(Psn::new(2), Slot::Tail), Mark::Beyond);
        assert_eq!(b.mark(Psn::new(1), Slot::Tail), Mark::Accepted);
        for p in [0xff_fffe, 0xff_ffff, 0] {
            assert_eq!(b.mark(Psn::new(p), Slot::Received), Mark::Accepted);
        }
        assert_eq!(core::iter::from_fn(|| b.pop()).count(), 4);
        assert_eq!(b.head(), Psn::new(2));
        assert_eq!(b.mark(Psn::new(5), Slot::Tail), Mark::Accepted);
        assert_eq!(b.check(Psn::new(6)), Mark::Beyond);
    }
}
