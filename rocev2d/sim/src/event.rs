//! The discrete-event core: events keyed by (time, sequence number), earliest first.
//!
//! Two events at the same nanosecond run in the order they were scheduled, because the
//! sequence number breaks the tie. That, plus seeded generators and no hash-map iteration,
//! is what makes a run bit-identical for a given seed. The key is one `u128`
//! (`time << 64 | seq`) so a comparison is a single integer one.
//!
//! The queue is a timing wheel of one-nanosecond slots over the next [`WHEEL_NS`] ns, beside a
//! binary heap for everything later. Almost every event a packet makes (its arrival, its
//! `TxDone`) is a serialisation time plus a propagation delay ahead, a few µs at most, so it
//! joins its slot's list in O(1), and the slots are drained in time order by a scan of an
//! occupancy bitmap; the heap keeps the rare far events (retransmission timers, flow starts,
//! samples).
//! Within a slot, events sit in the order they were pushed, i.e. by sequence number, and the
//! front of the wheel is compared with the heap's by the whole key, so the order is exactly the
//! heap's: `tests::wheel_pops_in_the_reference_heap_order` checks it against a plain binary
//! heap, the reference implementation, on a random schedule.
//!
//! Events are small (ids only); packets live in the model's slab and ports in its port table.
//!
//! Deviations: none.

use core::cmp::Ordering;
use std::collections::BinaryHeap;

/// Index of a port in the model's flat port table (every node's ports, hosts first).
pub type PortId = u32;
/// Index of a packet in the model's packet slab.
pub type PktId = u32;

/// Something that happens at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The last bit of packet `pkt` reached ingress port `port` (store and forward).
    Arrive {
        /// Ingress port at the receiving node.
        port: PortId,
        /// The packet.
        pkt: PktId,
    },
    /// Egress port `port` finished serialising its current packet.
    TxDone {
        /// The port.
        port: PortId,
    },
    /// A PFC frame reached `port`: pause (or resume) its egress for priority `prio`.
    Pfc {
        /// The port whose egress is paused.
        port: PortId,
        /// Priority.
        prio: u8,
        /// Pause (`true`) or resume.
        pause: bool,
    },
    /// A host's engine deadline (retransmission timer, pacer): run its timers and transmit.
    HostWake {
        /// Host index.
        host: u32,
    },
    /// The next workload flow starts.
    FlowStart {
        /// Flow index.
        flow: u32,
    },
    /// Periodic sampling of queues and rates.
    Sample,
    /// A DVL congestion notification (seed 003 slide 10 #5) reached the switch of egress
    /// `port`, for the flow (`src`, `dst`, `sport`) that port sends toward the congestion.
    DvlNotify {
        /// The upstream switch's egress port toward the notifying switch.
        port: PortId,
        /// IPv4 source of the flow.
        src: u32,
        /// IPv4 destination.
        dst: u32,
        /// UDP source port.
        sport: u16,
    },
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    key: u128,
    event: Event,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    /// Reversed, so the max-heap pops the earliest (time, seq) first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.key.cmp(&self.key)
    }
}

/// Width of the timing wheel, ns: a power of two above a full-size frame's serialisation at
/// 10 Gbit/s (4 KiB MTU: 3.3 µs) plus a µs of propagation, so packet events go to a slot.
pub const WHEEL_NS: u64 = 1 << 13;
const SLOT_MASK: u64 = WHEEL_NS - 1;
/// End of a slot's list, or of the free list.
const NIL: u32 = u32::MAX;

/// An event in the wheel: its time is its slot's, and `next` links the slot's events (or the
/// free nodes). Nodes live in one vector and are reused most recently freed first, so the
/// wheel's working set stays a few hundred KB instead of a buffer per slot.
#[derive(Debug, Clone, Copy)]
struct Node {
    seq: u64,
    event: Event,
    next: u32,
}

/// The event queue.
#[derive(Debug)]
pub struct EventQueue {
    /// `wheel[t & SLOT_MASK]` is the (first, last) node of the events at time `t`, for `t` in
    /// `[cursor, cursor + WHEEL_NS)`, in the order they were pushed; `NIL` when empty.
    wheel: Vec<(u32, u32)>,
    /// Bit `i` is set while `wheel[i]` is not empty.
    occupied: Vec<u64>,
    nodes: Vec<Node>,
    /// First free node.
    free: u32,
    /// Events in the wheel.
    near: usize,
    /// No event in the wheel is earlier than this; it only moves forward.
    cursor: u64,
    /// Events outside the wheel's window.
    far: BinaryHeap<Entry>,
    seq: u64,
    popped: u64,
}

impl Default for EventQueue {
    fn default() -> Self {
        EventQueue {
            wheel: vec![(NIL, NIL); WHEEL_NS as usize],
            occupied: vec![0; WHEEL_NS as usize / 64],
            nodes: Vec::new(),
            free: NIL,
            near: 0,
            cursor: 0,
            far: BinaryHeap::new(),
            seq: 0,
            popped: 0,
        }
    }
}

impl EventQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Schedules `event` at `time_ns`.
    pub fn push(&mut self, time_ns: u64, event: Event) {
        let seq = self.seq;
        self.seq += 1;
        // An event before the cursor (possible only after a peek moved it) waits in the heap.
        match time_ns.checked_sub(self.cursor) {
            Some(d) if d < WHEEL_NS => {
                let node = Node {
                    seq,
                    event,
                    next: NIL,
                };
                let id = if self.free == NIL {
                    self.nodes.push(node);
                    self.nodes.len() as u32 - 1
                } else {
                    let id = self.free;
                    self.free = self.nodes[id as usize].next;
                    self.nodes[id as usize] = node;
                    id
                };
                let slot = (time_ns & SLOT_MASK) as usize;
                let (first, last) = &mut self.wheel[slot];
                if *first == NIL {
                    *first = id;
                    self.occupied[slot / 64] |= 1 << (slot % 64);
                } else {
                    self.nodes[*last as usize].next = id;
                }
                *last = id;
                self.near += 1;
            }
            _ => self.far.push(Entry {
                key: ((time_ns as u128) << 64) | seq as u128,
                event,
            }),
        }
    }

    /// The earliest event and its time, if any.
    pub fn pop(&mut self) -> Option<(u64, Event)> {
        let near = self.near_front();
        let e = match (near, self.far.peek()) {
            (None, None) => return None,
            (Some(n), Some(f)) if f.key < n.key => self.far.pop()?,
            (Some(n), _) => {
                self.take_near();
                n
            }
            (None, Some(_)) => self.far.pop()?,
        };
        self.popped += 1;
        Some(((e.key >> 64) as u64, e.event))
    }

    /// Time of the earliest event.
    pub fn peek_time(&mut self) -> Option<u64> {
        let near = self.near_front().map(|e| e.key);
        let far = self.far.peek().map(|e| e.key);
        let key = match (near, far) {
            (Some(n), Some(f)) => n.min(f),
            (n, f) => n.or(f)?,
        };
        Some((key >> 64) as u64)
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.near + self.far.len()
    }

    /// True when nothing is scheduled.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Events popped so far.
    pub fn popped(&self) -> u64 {
        self.popped
    }

    /// The wheel's earliest event, moving the cursor to its slot.
    fn near_front(&mut self) -> Option<Entry> {
        if self.near == 0 {
            return None;
        }
        let mut slot = (self.cursor & SLOT_MASK) as usize;
        if self.wheel[slot].0 == NIL {
            self.cursor += self.next_occupied(slot);
            slot = (self.cursor & SLOT_MASK) as usize;
        }
        let n = self.nodes[self.wheel[slot].0 as usize];
        Some(Entry {
            key: ((self.cursor as u128) << 64) | n.seq as u128,
            event: n.event,
        })
    }

    /// Slots from `slot` to the next occupied one, going round the wheel (one exists).
    fn next_occupied(&self, slot: usize) -> u64 {
        let words = self.occupied.len();
        let (w0, b0) = (slot / 64, slot % 64);
        // The first word's bits at and above `b0`, then whole words, then its bits below `b0`.
        let first = self.occupied[w0] & (u64::MAX << b0);
        let found = if first != 0 {
            w0 * 64 + first.trailing_zeros() as usize
        } else {
            (1..=words)
                .map(|i| (w0 + i) % words)
                .find(|&w| self.occupied[w] != 0)
                .map_or(slot, |w| {
                    w * 64 + self.occupied[w].trailing_zeros() as usize
                })
        };
        (found as u64).wrapping_sub(slot as u64) & SLOT_MASK
    }

    /// Removes the event [`EventQueue::near_front`] returned, freeing its node.
    fn take_near(&mut self) {
        let slot = (self.cursor & SLOT_MASK) as usize;
        let id = self.wheel[slot].0;
        let next = self.nodes[id as usize].next;
        self.wheel[slot].0 = next;
        if next == NIL {
            self.wheel[slot].1 = NIL;
            self.occupied[slot / 64] &= !(1 << (slot % 64));
        }
        self.nodes[id as usize].next = self.free;
        self.free = id;
        self.near -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist;
    use rand_core::RngCore;

    /// The reference implementation: one binary heap of (time, seq) keys, as the model's queue
    /// was before the wheel.
    #[derive(Default)]
    struct HeapQueue {
        heap: BinaryHeap<Entry>,
        seq: u64,
    }

    impl HeapQueue {
        fn push(&mut self, time_ns: u64, event: Event) {
            let key = ((time_ns as u128) << 64) | self.seq as u128;
            self.seq += 1;
            self.heap.push(Entry { key, event });
        }

        fn pop(&mut self) -> Option<(u64, Event)> {
            let e = self.heap.pop()?;
            Some(((e.key >> 64) as u64, e.event))
        }
    }

    #[test]
    fn event_queue_orders_by_time_then_insertion() {
        let mut q = EventQueue::new();
        q.push(5, Event::Sample);
        q.push(3, Event::TxDone { port: 1 });
        q.push(5, Event::TxDone { port: 2 });
        q.push(3, Event::TxDone { port: 3 });
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            order,
            vec![
                (3, Event::TxDone { port: 1 }),
                (3, Event::TxDone { port: 3 }),
                (5, Event::Sample),
                (5, Event::TxDone { port: 2 }),
            ]
        );
    }

    /// A schedule like the model's: events at the current time, a few µs ahead (in the wheel),
    /// beyond the wheel (in the heap), ties at one instant from both sides, peeks that move the
    /// cursor past the clock, then pushes behind it; popped in exactly the heap's order.
    #[test]
    fn wheel_pops_in_the_reference_heap_order() {
        let seed = 21;
        eprintln!("seed {seed}");
        let mut rng = dist::rng(seed, 0);
        let (mut wheel, mut heap) = (EventQueue::new(), HeapQueue::default());
        let mut now = 0u64;
        let mut popped = 0;
        for i in 0..200_000u32 {
            let r = rng.next_u32();
            if r % 8 < 3 {
                let ahead = match r % 5 {
                    0 => 0,
                    1 => (r >> 8) as u64 % 64,
                    2 => (r >> 8) as u64 % (WHEEL_NS + 100),
                    3 => WHEEL_NS - 1 + (r >> 8) as u64 % 3,
                    _ => (r >> 8) as u64 % (50 * WHEEL_NS),
                };
                let ev = Event::TxDone { port: i };
                wheel.push(now + ahead, ev);
                heap.push(now + ahead, ev);
            } else if r % 8 == 3 {
                // run_until's peek past its end, after which the clock stops short of the event.
                if let Some(t) = wheel.peek_time() {
                    now = now.max(t.saturating_sub((r >> 8) as u64 % 100));
                }
            } else {
                let got = wheel.pop();
                assert_eq!(got, heap.pop(), "pop {popped}");
                if let Some((t, _)) = got {
                    now = t;
                    popped += 1;
                }
            }
            assert_eq!(wheel.len(), heap.heap.len());
        }
        while let Some(e) = heap.pop() {
            assert_eq!(wheel.pop(), Some(e));
        }
        assert!(wheel.is_empty() && wheel.pop().is_none());
        assert!(popped > 50_000, "{popped}");
    }
}
