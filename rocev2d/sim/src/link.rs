//! Ports and links: serialisation at line rate, propagation delay, per-priority egress queues.
//!
//! Every node's port is the egress side of one direction of a full-duplex link; its `peer` is
//! the port at the other end (where its packets arrive). A packet occupies the link for its
//! serialisation time `wire_bytes · 8 / rate` and arrives `delay_ns` after its last bit left
//! (store and forward: a switch starts forwarding only after the whole packet arrived).
//!
//! **Wire bytes.** The engine's frames are Ethernet frames without the FCS. On the wire each one
//! also takes the 4-byte FCS, the 8-byte preamble + SFD and the 12-byte inter-frame gap, and is
//! padded to the 60-byte minimum first: `wire = max(len, 60) + 24`. Queues and buffers count
//! frame bytes (`len`); links count wire bytes.
//!
//! Deviations: no bit errors (optional random loss per link stands in for them); PFC frames are
//! not serialised on the link (they take 84 wire bytes of time and the propagation delay, but do
//! not delay the data frame behind them).

use crate::event::{PktId, PortId};
use crate::topology::LinkSpec;
use rocev2_ebpf_common::dvl::{ArrayCft, DvlConfig};
use rocev2_ebpf_common::iofd::{ArrayDft, IofdConfig};
use std::collections::VecDeque;

/// Bytes a frame of `len` bytes (without FCS) occupies on the wire.
pub const fn wire_bytes(len: u32) -> u32 {
    (if len < 60 { 60 } else { len }) + WIRE_OVERHEAD
}

/// FCS (4) + preamble and SFD (8) + inter-frame gap (12).
pub const WIRE_OVERHEAD: u32 = 24;

/// Priorities per port: 0 carries ACK/NAK/CNP (strict priority, seed 000 §VI-A: "high-priority
/// queues only for ACKs"), 1 carries data, 2 is DVL's congested-flow queue (seed 003 slide 10),
/// served only when the data queue is empty.
pub const NPRIO: usize = 3;
/// Priority of ACK, NAK, atomic ACK and CNP packets.
pub const PRIO_CTRL: u8 = 0;
/// Priority of everything else.
pub const PRIO_DATA: u8 = 1;
/// DVL's congested-flow queue (CFQ): a lane of its own, with its own PFC (enhanced DVL).
pub const PRIO_CFQ: u8 = 2;

/// A packet in an egress queue, with what taking it out needs: a packet that waited in a deep
/// queue has usually left the cache, and reading its slot back cost a miss per hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queued {
    /// The packet.
    pub pkt: PktId,
    /// Its frame length without FCS.
    pub len: u32,
    /// Ingress port it entered the switch by (`PortId::MAX` at a host: no buffer to release).
    pub ingress: PortId,
    /// Priority (lane) it arrived in there, for that ingress's PFC counts.
    pub ingress_prio: u8,
    /// Held in that ingress's PFC headroom rather than the shared pool.
    pub in_headroom: bool,
}

impl Queued {
    /// A frame a host's NIC queues: it entered no switch buffer.
    pub fn at_host(pkt: PktId, len: u32) -> Queued {
        Queued {
            pkt,
            len,
            ingress: PortId::MAX,
            ingress_prio: 0,
            in_headroom: false,
        }
    }
}

/// An egress queue whose front entry sits inline in its [`Port`], the rest in a ring: a port
/// that sends the one packet it holds reads the entry from the port it touches anyway, not
/// from a ring slot written a serialisation time earlier (that read was most of
/// `switch_start`'s samples).
#[derive(Debug, Clone, Default)]
pub struct Fifo {
    /// The oldest entry; `None` only when the queue is empty.
    front: Option<Queued>,
    rest: VecDeque<Queued>,
}

impl Fifo {
    /// Appends `q`.
    pub fn push_back(&mut self, q: Queued) {
        if self.front.is_none() {
            self.front = Some(q);
        } else {
            self.rest.push_back(q);
        }
    }

    /// Takes the oldest entry.
    pub fn pop_front(&mut self) -> Option<Queued> {
        let q = self.front.take()?;
        self.front = self.rest.pop_front();
        Some(q)
    }

    /// No entry waiting.
    pub fn is_empty(&self) -> bool {
        self.front.is_none()
    }
}

/// Counters of one port, named as the CSV columns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Packets sent.
    pub tx_packets: u64,
    /// Frame bytes sent.
    pub tx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Frame bytes received.
    pub rx_bytes: u64,
    /// Packets dropped at this egress queue (buffer full, headroom exhausted, RED).
    pub drops: u64,
    /// Their bytes.
    pub drop_bytes: u64,
    /// Packets lost on the incoming link (fault injection).
    pub lost: u64,
    /// Packets this egress queue marked CE.
    pub ecn_marks: u64,
    /// PAUSE frames sent upstream from this ingress.
    pub pause_sent: u64,
    /// RESUME (XON) frames sent upstream from this ingress.
    pub resume_sent: u64,
    /// PAUSE frames received (this egress was paused).
    pub pause_received: u64,
    /// Nanoseconds this egress spent paused (any priority).
    pub paused_ns: u64,
    /// Largest queue seen, bytes.
    pub max_queue_bytes: u64,
    /// IOFD: packets this port's table sent to an alternate port instead (seed 000 §IV-A).
    pub iofd_deflected: u64,
    /// IOFD: start packets above the threshold refused because the table was full.
    pub iofd_table_full: u64,
    /// IOFD: start packets above the threshold refused as long (or of unknown length).
    pub iofd_long: u64,
    /// IOFD: start packets above the threshold refused for want of tokens.
    pub iofd_no_tokens: u64,
    /// DVL: flows isolated by this port's own detection (seed 003 slide 10 #1).
    pub dvl_isolated: u64,
    /// DVL: flows released (slide 12).
    pub dvl_released: u64,
    /// DVL: packets queued in the congested-flow queue.
    pub dvl_congested: u64,
    /// DVL: flows that should have been isolated but the table was full.
    pub dvl_table_full: u64,
    /// DVL: notifications this port's switch sent upstream for flows on this port.
    pub dvl_notify_sent: u64,
    /// DVL: notifications received for flows on this port (isolated or refreshed by them).
    pub dvl_notify_received: u64,
}

/// Generates the CSV header, the CSV row and the field-wise sum of [`PortStats`] from one
/// list of its fields, so the three cannot disagree.
macro_rules! port_stats_csv {
    ($($f:ident),* ; max: $m:ident) => {
        impl PortStats {
            /// The CSV column names, in [`PortStats::csv`] order.
            pub const CSV_HEADER: &'static str =
                concat!($(stringify!($f), ",",)* stringify!($m));
            /// The counters as one CSV row fragment.
            pub fn csv(&self) -> String {
                let v = [$(self.$f,)* self.$m];
                v.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
            }
            /// Field-wise sum (the largest of `max_queue_bytes`), for per-switch totals.
            pub fn sum(&self, o: &PortStats) -> PortStats {
                PortStats {
                    $($f: self.$f + o.$f,)*
                    $m: self.$m.max(o.$m),
                }
            }
        }
    };
}
port_stats_csv!(
    tx_packets, tx_bytes, rx_packets, rx_bytes, drops, drop_bytes, lost, ecn_marks, pause_sent,
    resume_sent, pause_received, paused_ns, iofd_deflected, iofd_table_full, iofd_long,
    iofd_no_tokens, dvl_isolated, dvl_released, dvl_congested, dvl_table_full, dvl_notify_sent,
    dvl_notify_received; max: max_queue_bytes
);

/// One port.
#[derive(Debug, Clone)]
pub struct Port {
    /// Node the port belongs to.
    pub node: u32,
    /// The port at the other end of the link.
    pub peer: u32,
    /// Rate and delay of the link.
    pub link: LinkSpec,
    /// Loss probability of packets arriving on this port, Q32 (0 = none).
    pub loss_q32: u64,
    /// Packets arriving on this port whose IPv4 identification is 0 modulo this are lost (seed
    /// 001 §5.1.1's switch rule, "ID mod 100 == 0"); 0 = none.
    pub drop_ip_id_mod: u16,
    /// This egress queue's own switch policy (its own RED curve), instead of its switch's.
    pub policy: Option<crate::switch_node::SwitchPolicy>,
    /// IOFD on this egress port, and its deflected-flow table (one per port, as the eBPF
    /// program's). Boxed, as `dvl`: inline, the two tables made a port ~1.8 KB and spread its
    /// per-packet fields over cache lines that every hop missed.
    pub iofd: Option<Box<(IofdConfig, ArrayDft)>>,
    /// DVL on this egress port, and its congested-flow table.
    pub dvl: Option<Box<(DvlConfig, ArrayCft)>>,
    /// The current packet's last bit leaves at this time, ns (free when `<= now`).
    pub busy_until: u64,
    /// A `TxDone` event is scheduled for this port. Switch ports schedule one only when a
    /// packet is waiting behind the one on the wire, which saves an event per hop at an idle
    /// port; host ports always do, to pull the engine's next frame.
    pub txdone_pending: bool,
    /// Egress paused by the peer's PFC, per priority.
    pub paused: [bool; NPRIO],
    /// When the current pause began (for `paused_ns`).
    pub paused_since: u64,
    /// Egress queues per priority.
    pub queues: [Fifo; NPRIO],
    /// Frame bytes in each queue.
    pub queue_bytes: [u64; NPRIO],
    /// Frame bytes in this node's buffer that entered through this port, per priority.
    pub ingress_bytes: [u64; NPRIO],
    /// Of those, bytes held in this ingress's PFC headroom.
    pub headroom_bytes: [u64; NPRIO],
    /// A PAUSE is in force upstream for this ingress priority.
    pub pause_sent: [bool; NPRIO],
    /// Counters.
    pub stats: PortStats,
}

impl Port {
    /// An idle port of `node` whose packets arrive at `peer`.
    pub fn new(node: u32, peer: u32, link: LinkSpec) -> Port {
        Port {
            node,
            peer,
            link,
            loss_q32: 0,
            drop_ip_id_mod: 0,
            policy: None,
            iofd: None,
            dvl: None,
            busy_until: 0,
            txdone_pending: false,
            paused: [false; NPRIO],
            paused_since: 0,
            queues: Default::default(),
            queue_bytes: [0; NPRIO],
            ingress_bytes: [0; NPRIO],
            headroom_bytes: [0; NPRIO],
            pause_sent: [false; NPRIO],
            stats: PortStats::default(),
        }
    }

    /// Time a control frame sent from this port (PFC, a DVL notification) takes to reach the
    /// peer: the propagation delay plus a minimum frame's serialisation, not queued behind the
    /// frame in progress.
    pub fn control_delay_ns(&self) -> u64 {
        self.link.delay_ns
            + self
                .link
                .rate
                .transmit_time(wire_bytes(60) as u64)
                .as_nanos()
    }

    /// A PFC frame for `prio` reached this egress at `now`: pauses or resumes it and keeps the
    /// pause counters. Returns whether the port as a whole (any priority) changed between
    /// running and paused.
    pub fn pfc_received(&mut self, prio: usize, pause: bool, now: u64) -> bool {
        let was_paused = self.paused.iter().any(|&p| p);
        self.paused[prio] = pause;
        let is_paused = self.paused.iter().any(|&p| p);
        if pause {
            self.stats.pause_received += 1;
        }
        if !was_paused && is_paused {
            self.paused_since = now;
        } else if was_paused && !is_paused {
            self.stats.paused_ns += now - self.paused_since;
        }
        was_paused != is_paused
    }

    /// This ingress sends PAUSE (or RESUME) for `prio` upstream.
    pub fn pfc_sent(&mut self, prio: usize, pause: bool) {
        self.pause_sent[prio] = pause;
        if pause {
            self.stats.pause_sent += 1;
        } else {
            self.stats.resume_sent += 1;
        }
    }

    /// `len` bytes entered the node through this ingress in `prio`, held in its PFC headroom
    /// or the shared pool.
    pub fn ingress_add(&mut self, prio: usize, len: u64, in_headroom: bool) {
        self.ingress_bytes[prio] += len;
        if in_headroom {
            self.headroom_bytes[prio] += len;
        }
    }

    /// Those bytes left the node.
    pub fn ingress_remove(&mut self, prio: usize, len: u64, in_headroom: bool) {
        self.ingress_bytes[prio] -= len;
        if in_headroom {
            self.headroom_bytes[prio] -= len;
        }
    }

    /// Queues `q` for sending in `prio`.
    pub fn enqueue(&mut self, prio: usize, q: Queued) {
        self.queues[prio].push_back(q);
        self.queue_bytes[prio] += q.len as u64;
    }

    /// Takes the first packet of queue `prio`.
    pub fn dequeue(&mut self, prio: usize) -> Option<Queued> {
        let q = self.queues[prio].pop_front()?;
        self.queue_bytes[prio] -= q.len as u64;
        Some(q)
    }

    /// Bytes queued over all priorities.
    pub fn queued_bytes(&self) -> u64 {
        self.queue_bytes.iter().sum()
    }

    /// The next priority allowed to send, highest first. The CFQ waits while the data queue
    /// holds anything, even paused: an isolated flow's earlier packets may be there, and the CFQ
    /// must not overtake them (seed 003 slide 12's markings, which this strict order replaces).
    pub fn next_prio(&self) -> Option<usize> {
        (0..NPRIO).find(|&p| {
            !self.paused[p]
                && !self.queues[p].is_empty()
                && (p != PRIO_CFQ as usize || self.queues[PRIO_DATA as usize].is_empty())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_pops_in_a_plain_ring_order() {
        // Fill and drain in uneven bursts so the front is refilled from the ring, from an
        // empty ring, and after the queue ran dry; a plain ring is the reference.
        let (mut f, mut reference) = (Fifo::default(), VecDeque::new());
        let mut next = 0;
        for (push, pop) in [(1, 2), (3, 1), (0, 1), (2, 0), (5, 3), (1, 9)] {
            for _ in 0..push {
                f.push_back(Queued::at_host(next, 64 + next));
                reference.push_back(Queued::at_host(next, 64 + next));
                next += 1;
            }
            for _ in 0..pop {
                assert_eq!(f.pop_front(), reference.pop_front());
                assert_eq!(f.is_empty(), reference.is_empty());
            }
        }
        assert!(f.is_empty() && next == 12);
    }

    #[test]
    fn wire_bytes_pads_and_adds_overhead() {
        assert_eq!(wire_bytes(58), 84, "a 58-byte ACK frame is padded to 60");
        assert_eq!(wire_bytes(1000), 1024);
    }
}
