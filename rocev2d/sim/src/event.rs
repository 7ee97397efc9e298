//! The discrete-event core: a binary heap of events keyed by (time, sequence number).
//!
//! Two events at the same nanosecond run in the order they were scheduled, because the
//! sequence number breaks the tie. That, plus seeded generators and no hash-map iteration,
//! is what makes a run bit-identical for a given seed. The key is one `u128`
//! (`time << 64 | seq`) so the heap compares a single integer.
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

/// The event queue.
#[derive(Debug, Default)]
pub struct EventQueue {
    heap: BinaryHeap<Entry>,
    seq: u64,
    popped: u64,
}

impl EventQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Schedules `event` at `time_ns`.
    pub fn push(&mut self, time_ns: u64, event: Event) {
        let key = ((time_ns as u128) << 64) | self.seq as u128;
        self.seq += 1;
        self.heap.push(Entry { key, event });
    }

    /// The earliest event and its time, if any.
    pub fn pop(&mut self) -> Option<(u64, Event)> {
        let e = self.heap.pop()?;
        self.popped += 1;
        Some(((e.key >> 64) as u64, e.event))
    }

    /// Time of the earliest event.
    pub fn peek_time(&self) -> Option<u64> {
        self.heap.peek().map(|e| (e.key >> 64) as u64)
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when nothing is scheduled.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Events popped so far.
    pub fn popped(&self) -> u64 {
        self.popped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
