//! Dynamic virtual lanes (DVL): the congested-flow table and the per-packet isolation decision.
//!
//! Source: seed 003 (DVL slides, SIGCOMM 2019 NEAT workshop), slides 10 and 12. A port has a
//! normal queue (nCFQ) and a congested-flow queue (CFQ). "Congestion detected when nCFQ
//! reaches a threshold"; the flow of the packet being enqueued then enters the congested-flow
//! table (CFT) and its packets are stored in the CFQ; congestion information is sent upstream
//! so that the upstream switch isolates the flow as well. "Deallocation if occupancy of
//! CFQ+nCFQ < congestion detection threshold", with markings as synchronisation points between
//! the two queues so that no packet of a flow overtakes an earlier one.
//!
//! On Linux the two queues are bands of the strict-priority pfifo_fast below the port's HTB
//! class (docs/switch.md): band 1 (normal) is always served before band 2 (the CFQ). That gives
//! in-order isolation without markings: a packet moved to the CFQ cannot leave while the nCFQ
//! holds anything, so it cannot overtake its flow's earlier packets still in the nCFQ.
//!
//! The table is behind the [`Cft`] trait: the eBPF program uses a BPF hash map of
//! [`CFT_ENTRIES`] entries per port (insert-if-absent and delete are atomic in the kernel, so
//! CPUs racing on one flow agree), the model and the tests use [`ArrayCft`]. [`decide`] is the
//! policy both run; [`drain`] is the two-queue model (strict priority at the port rate).
//!
//! Deviations:
//! - Release is stricter than the paper's: the entry is removed when CFQ+nCFQ is below the
//!   threshold *and* the CFQ is empty (in the model). Releasing with packets still in the CFQ
//!   would let the flow's next packet, in the strictly preferred nCFQ, overtake them; the
//!   paper's release marking would hold the nCFQ instead, which a Linux qdisc cannot do.
//! - A flow stays isolated at least [`DvlConfig::hold_ns`] after its isolation or its last
//!   notification.
//! - No markings (the strict priority replaces them for isolation, the stricter release for
//!   deallocation). Because the release decision reads the *model* and the real shaper may lag
//!   it by about one token-bucket burst (docs/switch.md), a release may still reorder a packet
//!   or two against the shaper's real CFQ; the live tests count reordering.
//! - The CFQ is of lower strict priority, not a separate lane with its own flow control: there
//!   is no PFC in the testbed, so the CFQ is not paused by downstream switches (enhanced DVL);
//!   a starved CFQ fills and tail-drops.
//! - Each queue tail-drops at the port buffer on its own (the program's admission): with a
//!   shared buffer and no PFC, a backlogged CFQ took the normal queue's room.
//! - The congestion notification (slide 10 #5; the network model sends its own, see
//!   `rocev2d/sim/src/switch.rs`) is the isolating packet itself, re-addressed to
//!   the previous hop under [`NOTIFY_ETHERTYPE`] ([`notify_due`] says when; docs/switch.md has
//!   the frame): the paper does not specify a format. It is sent again every
//!   [`NOTIFY_PERIOD_NS`] while the flow stays isolated, so the upstream port's hold
//!   ([`HOLD_NS`]) does not lapse while the downstream port is still congested.
//! - NOT IMPLEMENTED (seed 003 slide 10, #4): the ingress CFQ.

use crate::queue::QueueState;

/// Entries of one port's congested-flow table.
pub const CFT_ENTRIES: u32 = 16;

/// The eBPF program's [`DvlConfig::hold_ns`]: a flow stays isolated at least this long after
/// its isolation (or its last notification), ns. Deviation: the paper has no hold time; here it
/// keeps a notified flow isolated between notifications (docs/switch.md), where the CFQ may
/// drain empty without the queue being uncongested.
pub const HOLD_NS: u64 = 100_000_000;

/// EtherType of a congestion notification: IEEE 802 "local experimental" 1. A frame of this
/// type is the isolated flow's IP packet unchanged behind an Ethernet header to the previous
/// hop. A kernel without the accepting program drops it as an unknown protocol, so a
/// notification is never routed on as data, whoever receives it.
pub const NOTIFY_ETHERTYPE: u16 = 0x88b5;

/// While a flow stays isolated its port notifies upstream again at most this often, ns: four
/// notifications per [`HOLD_NS`], so the upstream port keeps the flow isolated through three
/// lost ones.
pub const NOTIFY_PERIOD_NS: u64 = HOLD_NS / 4;

/// Seed 003 slide 10 #5: whether the packet just classified by [`decide`] (`class`, `event`)
/// sends a congestion notification upstream, its flow's last one sent at `last_ns` (`None`:
/// never). On isolation always; while isolated, once every [`NOTIFY_PERIOD_NS`].
pub fn notify_due(class: Class, event: Event, last_ns: Option<u64>, now_ns: u64) -> bool {
    match (class, event, last_ns) {
        (Class::Congested, Event::Isolated, _) | (Class::Congested, _, None) => true,
        (Class::Congested, _, Some(last)) => now_ns.saturating_sub(last) >= NOTIFY_PERIOD_NS,
        (Class::Normal, ..) => false,
    }
}

/// A flow: its 5-tuple (IPv4 as v4-mapped IPv6; ports 0 for protocols without them) and the
/// output port it is queued on (the port's interface index), as the CFT is keyed.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    /// Source address, 16 bytes.
    pub src: [u8; 16],
    /// Destination address, 16 bytes.
    pub dst: [u8; 16],
    /// Output port (interface index).
    pub port: u32,
    /// Transport source port, host order.
    pub src_port: u16,
    /// Transport destination port, host order.
    pub dst_port: u16,
    /// IP protocol (next header), widened so the record has no padding.
    pub protocol: u32,
}

/// A port's congested-flow table.
pub trait Cft {
    /// When `key` was isolated (or last notified), ns; `None` if it is not isolated.
    fn since(&self, key: &FlowKey) -> Option<u64>;
    /// Inserts `key` (isolated since `now_ns`) unless present; false when the table is full.
    fn insert(&mut self, key: &FlowKey, now_ns: u64) -> bool;
    /// Releases `key`.
    fn remove(&mut self, key: &FlowKey);
}

/// DVL settings of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DvlConfig {
    /// Congestion detection threshold on the normal queue, bytes.
    pub threshold_bytes: u64,
    /// Least time a flow stays isolated after its isolation or last notification, ns: the
    /// program uses [`HOLD_NS`] (its notifications come every 50 ms), the model a hold matched
    /// to its notification refresh (microseconds).
    pub hold_ns: u64,
}

/// The queue a packet joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// The normal queue (nCFQ).
    Normal,
    /// The congested-flow queue (CFQ).
    Congested,
}

/// What [`decide`] did to the table besides choosing a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Nothing.
    None,
    /// The flow was isolated by this packet.
    Isolated,
    /// The flow was released by this packet.
    Released,
    /// The flow should have been isolated but the table is full.
    TableFull,
}

/// Seed 003 slides 10 and 12: the queue for a packet of `key` arriving at a port whose
/// modelled normal queue holds `normal_bytes` and congested-flow queue `congested_bytes`.
pub fn decide<T: Cft>(
    cft: &mut T,
    cfg: &DvlConfig,
    key: &FlowKey,
    normal_bytes: u64,
    congested_bytes: u64,
    now_ns: u64,
) -> (Class, Event) {
    if let Some(since) = cft.since(key) {
        // Slide 12: "Deallocation if occupancy of CFQ+nCFQ < Congestion detection threshold";
        // here also only once the CFQ is empty, so the flow's next packet, in the preferred
        // normal queue, has nothing of its own left to overtake, and not within the hold time
        // of the isolation (module doc).
        if congested_bytes == 0
            && normal_bytes < cfg.threshold_bytes
            && now_ns.saturating_sub(since) >= cfg.hold_ns
        {
            cft.remove(key);
            return (Class::Normal, Event::Released);
        }
        return (Class::Congested, Event::None);
    }
    // Slide 10 #1–#3: congestion detected when the nCFQ reaches the threshold; the packet being
    // enqueued is the congested flow's.
    if normal_bytes >= cfg.threshold_bytes {
        if cft.insert(key, now_ns) {
            return (Class::Congested, Event::Isolated);
        }
        // Another CPU may have inserted the same flow meanwhile.
        if cft.since(key).is_some() {
            return (Class::Congested, Event::None);
        }
        return (Class::Normal, Event::TableFull);
    }
    (Class::Normal, Event::None)
}

/// Drains the port's two queues at `rate_bps` to `now_ns` with strict priority (the normal
/// queue first, the CFQ with what is left) and returns the bytes each still holds. The normal
/// queue's `last_ns` is the pair's clock; the CFQ's is kept equal to it.
pub fn drain(
    normal: &mut QueueState,
    congested: &mut QueueState,
    rate_bps: u64,
    now_ns: u64,
) -> (u64, u64) {
    if now_ns > normal.last_ns {
        let elapsed_ns = now_ns - normal.last_ns;
        let total = normal.backlog_nbit.saturating_add(congested.backlog_nbit);
        // As in `QueueState::drain`: the product is only formed when it is at most the
        // backlog, so it cannot overflow.
        match total.checked_div(rate_bps) {
            None => {}
            Some(full) if elapsed_ns > full => {
                normal.backlog_nbit = 0;
                congested.backlog_nbit = 0;
            }
            Some(_) => {
                let sent = elapsed_ns * rate_bps;
                if sent <= normal.backlog_nbit {
                    normal.backlog_nbit -= sent;
                } else {
                    let rest = sent - normal.backlog_nbit;
                    normal.backlog_nbit = 0;
                    congested.backlog_nbit = congested.backlog_nbit.saturating_sub(rest);
                }
            }
        }
        normal.last_ns = now_ns;
    }
    congested.last_ns = normal.last_ns;
    (normal.bytes(), congested.bytes())
}

/// A fixed-size table for the model and the tests.
#[derive(Debug, Clone, Copy, Default)]
pub struct ArrayCft {
    entries: [Option<(FlowKey, u64)>; CFT_ENTRIES as usize],
}

impl ArrayCft {
    /// Isolated flows.
    pub fn len(&self) -> usize {
        self.entries.iter().filter(|e| e.is_some()).count()
    }

    /// Whether no flow is isolated.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Cft for ArrayCft {
    fn since(&self, key: &FlowKey) -> Option<u64> {
        self.entries.iter().find_map(|e| match e {
            Some((k, t)) if k == key => Some(*t),
            _ => None,
        })
    }

    fn insert(&mut self, key: &FlowKey, now_ns: u64) -> bool {
        if self.since(key).is_some() {
            return false;
        }
        for e in &mut self.entries {
            if e.is_none() {
                *e = Some((*key, now_ns));
                return true;
            }
        }
        false
    }

    fn remove(&mut self, key: &FlowKey) {
        for e in &mut self.entries {
            if matches!(e, Some((k, _)) if k == key) {
                *e = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::NANOBITS_PER_BYTE;

    const CFG: DvlConfig = DvlConfig {
        threshold_bytes: 20_000,
        hold_ns: HOLD_NS,
    };

    fn flow(n: u16) -> FlowKey {
        FlowKey {
            src_port: n,
            dst_port: 4791,
            protocol: 17,
            port: 3,
            ..FlowKey::default()
        }
    }

    #[test]
    fn dvl_below_threshold_stays_normal() {
        let mut cft = ArrayCft::default();
        assert_eq!(
            decide(&mut cft, &CFG, &flow(1), 19_999, 0, 0),
            (Class::Normal, Event::None)
        );
        assert!(cft.is_empty());
    }

    #[test]
    fn dvl_slide10_isolates_flow_at_threshold() {
        let mut cft = ArrayCft::default();
        assert_eq!(
            decide(&mut cft, &CFG, &flow(1), 20_000, 0, 5),
            (Class::Congested, Event::Isolated)
        );
        // Its later packets follow it even with the normal queue empty (CFQ not empty).
        assert_eq!(
            decide(&mut cft, &CFG, &flow(1), 0, 1500, 6),
            (Class::Congested, Event::None)
        );
        // Another flow below the threshold is not touched.
        assert_eq!(
            decide(&mut cft, &CFG, &flow(2), 19_000, 1500, 7),
            (Class::Normal, Event::None)
        );
        assert_eq!(cft.len(), 1);
    }

    #[test]
    fn dvl_slide12_releases_only_below_threshold_with_cfq_empty() {
        let mut cft = ArrayCft::default();
        decide(&mut cft, &CFG, &flow(1), 30_000, 0, 0);
        // CFQ+nCFQ below the threshold, but the CFQ still holds packets: kept (order).
        assert_eq!(
            decide(&mut cft, &CFG, &flow(1), 1000, 1, 1),
            (Class::Congested, Event::None)
        );
        // CFQ empty, nCFQ at the threshold: kept.
        assert_eq!(
            decide(&mut cft, &CFG, &flow(1), 20_000, 0, 2),
            (Class::Congested, Event::None)
        );
        // Both below, CFQ empty, but within the hold time: kept.
        assert_eq!(
            decide(&mut cft, &CFG, &flow(1), 19_999, 0, HOLD_NS - 1),
            (Class::Congested, Event::None)
        );
        assert_eq!(
            decide(&mut cft, &CFG, &flow(1), 19_999, 0, HOLD_NS),
            (Class::Normal, Event::Released)
        );
        assert!(cft.is_empty());
    }

    #[test]
    fn dvl_full_table_leaves_flow_normal() {
        let mut cft = ArrayCft::default();
        for n in 0..CFT_ENTRIES as u16 {
            assert_eq!(
                decide(&mut cft, &CFG, &flow(n), 50_000, 0, 0).1,
                Event::Isolated
            );
        }
        assert_eq!(
            decide(&mut cft, &CFG, &flow(999), 50_000, 0, 0),
            (Class::Normal, Event::TableFull)
        );
    }

    #[test]
    fn dvl_slide10_notifies_on_isolation_then_periodically() {
        use Class::*;
        assert!(notify_due(Congested, Event::Isolated, Some(5), 5));
        assert!(notify_due(Congested, Event::None, None, 0));
        assert!(!notify_due(
            Congested,
            Event::None,
            Some(10),
            10 + NOTIFY_PERIOD_NS - 1
        ));
        assert!(notify_due(
            Congested,
            Event::None,
            Some(10),
            10 + NOTIFY_PERIOD_NS
        ));
        // A clock going back never notifies early.
        assert!(!notify_due(Congested, Event::None, Some(10), 9));
        assert!(!notify_due(Normal, Event::Released, Some(0), u64::MAX));
        assert!(!notify_due(Normal, Event::TableFull, None, 0));
        assert!(!notify_due(Normal, Event::None, None, 0));
    }

    #[test]
    fn dvl_drain_serves_normal_queue_first() {
        let (mut n, mut c) = (QueueState::default(), QueueState::default());
        n.enqueue(1000);
        c.enqueue(1000);
        // 8 Gbit/s = 1 byte/ns: after 600 ns only the normal queue has shrunk.
        assert_eq!(drain(&mut n, &mut c, 8_000_000_000, 600), (400, 1000));
        // 600 ns more: the normal queue empties after 400, the CFQ gets the other 200.
        assert_eq!(drain(&mut n, &mut c, 8_000_000_000, 1200), (0, 800));
        assert_eq!(c.last_ns, 1200);
        // A long idle empties both without overflow; time going back drains nothing.
        c.enqueue(5);
        assert_eq!(drain(&mut n, &mut c, 400_000_000_000, u64::MAX), (0, 0));
        n.enqueue(7);
        assert_eq!(drain(&mut n, &mut c, 1, 3), (7, 0));
        assert_eq!(n.backlog_nbit, 7 * NANOBITS_PER_BYTE);
    }
}
