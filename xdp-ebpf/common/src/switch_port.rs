//! The switch-port program's maps: names, records and counter slots, defined once for the
//! program (`rocev2-ebpf`, bin `switch_port`), its loader (`rocev2-ebpf-loader::switch_port`) and
//! `rocev2d switch`.
//!
//! Per packet on a port's egress the program applies, in order: fault injection to RoCEv2
//! frames ([`crate::fault`]), the queue model's drain ([`crate::queue`]), IOFD deflection when
//! configured ([`crate::iofd`]), then [`admit`] — tail drop beyond the buffer and RED/ECN
//! marking on the modelled queue ([`crate::red`]) — shared with the unit tests and usable by
//! the model.
//!
//! The maps of one attached port are found again by a later process (`rocev2d switch stats`,
//! `detach`) without pinning: [`PortConfig`] records the interface index and network
//! namespace it was attached to, and the loader looks through the loaded programs named
//! [`PROGRAM`] for the one whose config map names the port.
//!
//! Deviations: none.

use crate::red::{self, RedConfig, Verdict};

/// The classifier's name in the object and in the kernel (`bpftool prog` shows it).
pub const PROGRAM: &str = "rocev2_switch";
/// `Array` of one [`PortConfig`].
pub const CONFIG_MAP: &str = "RV2_SW_CONFIG";
/// `Array` of one [`crate::queue::QueueState`]: the modelled queue, shared by all CPUs.
pub const QUEUE_MAP: &str = "RV2_SW_QUEUE";
/// Per-CPU `u64` array of [`Counter`]s.
pub const COUNTERS_MAP: &str = "RV2_SW_COUNTERS";
/// Per-CPU `u64` array of `3 · HIST_BUCKETS`, by the queue a packet found on arrival (bucket
/// `b`): all packets (slot `b`), ECN-capable ones that fit in the buffer (slot
/// `HIST_BUCKETS + b`: those RED decides on), and those this port marked CE (slot
/// `2 · HIST_BUCKETS + b`). Marked / ECN-capable-queued per bucket is the measured marking
/// curve.
pub const HIST_MAP: &str = "RV2_SW_HIST";
/// Buckets of the queue-length histogram; the last one also counts everything above.
pub const HIST_BUCKETS: u32 = 32;

/// `skb->mark` of a duplicate the program made itself: it re-enters the egress hook and must
/// be queued, but not faulted again.
pub const DUPLICATE_MARK: u32 = 0x7276_3264; // "rv2d"

/// [`PortConfig::flags`]: the program acts on packets (set last, once the config is complete).
pub const FLAG_ENABLED: u32 = 1 << 0;
/// [`PortConfig::flags`]: drop Not-ECT packets where ECT ones would be marked.
pub const FLAG_DROP_NON_ECT: u32 = 1 << 1;
/// [`PortConfig::flags`]: drop every RoCEv2 frame.
pub const FLAG_BLACKHOLE: u32 = 1 << 2;
/// [`PortConfig::flags`]: the loader installed the port's root qdisc (detach removes it).
pub const FLAG_OWNS_SHAPER: u32 = 1 << 3;
/// [`PortConfig::flags`]: the loader added the clsact qdisc (detach removes it).
pub const FLAG_OWNS_CLSACT: u32 = 1 << 4;
/// [`PortConfig::flags`]: IOFD deflection on ([`crate::iofd`]).
pub const FLAG_IOFD: u32 = 1 << 5;
/// [`PortConfig::flags`]: loaded for `BPF_PROG_TEST_RUN` only, attached nowhere (so that a
/// search for a port's program never finds it).
pub const FLAG_UNATTACHED: u32 = 1 << 6;

/// [`PortConfig::flags`]: DVL congestion isolation on ([`crate::dvl`]).
pub const FLAG_DVL: u32 = 1 << 7;
/// `Array` of one [`crate::queue::QueueState`]: the modelled congested-flow queue (DVL); the
/// normal queue is [`QUEUE_MAP`].
pub const CFQ_MAP: &str = "RV2_SW_CFQ";
/// `HashMap<FlowKey, u64>` of [`crate::dvl::CFT_ENTRIES`]: the port's congested-flow table,
/// the value the time the flow was isolated (ns).
pub const CFT_MAP: &str = "RV2_SW_CFT";
/// [`PortConfig::flags`]: DVL: accept congestion notifications arriving on this port (the
/// [`ACCEPT_PROGRAM`] on its ingress puts their flows into this port's table).
pub const FLAG_DVL_ACCEPT: u32 = 1 << 8;
/// The ingress classifier that accepts congestion notifications (seed 003 slide 10 #5),
/// loaded from the same object as [`PROGRAM`] so that it shares the port's maps.
pub const ACCEPT_PROGRAM: &str = "rocev2_dvl_rx";
/// `HashMap<FlowKey, u64>` of [`crate::dvl::CFT_ENTRIES`]: when this port last sent a
/// congestion notification for an isolated flow (ns), for [`crate::dvl::notify_due`].
pub const NOTIFIED_MAP: &str = "RV2_SW_NOTIFIED";
/// `skb->priority` of a packet of an isolated flow: `TC_PRIO_FILLER`, which the pfifo_fast
/// below the port's HTB class puts in band 2, its lowest strict priority: the congested-flow
/// queue. (HTB finds no class 0:1 and uses its default class.)
pub const CFQ_PRIORITY: u32 = 1;

/// `skb->mark` of a packet another port of this switch deflected here: queued and marked as
/// usual, never deflected again at this switch.
pub const DEFLECTED_MARK: u32 = 0x7276_3266; // "rv2f"
/// Alternate ports a port may deflect to.
pub const MAX_ALTERNATES: usize = 4;
/// `HashMap<MessageKey, u32>` of [`crate::iofd::DFT_ENTRIES`]: the port's deflected-flow table.
pub const DFT_MAP: &str = "RV2_SW_DFT";

/// One port's configuration, written by the loader before it sets [`FLAG_ENABLED`].
/// Fields are ordered so that the struct has no implicit padding (STYLE.md §1.3).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortConfig {
    /// Interface index of the port, in its namespace.
    pub ifindex: u32,
    /// `FLAG_*` bits.
    pub flags: u32,
    /// Inode of the port's network namespace (`stat -L /proc/self/ns/net`), to tell ports of
    /// equal index in different namespaces apart.
    pub netns_ino: u64,
    /// Port rate, bit/s: the queue drains at this rate; the shaper runs at it.
    pub rate_bps: u64,
    /// Port buffer, bytes: arrivals that would overflow it are dropped.
    pub buffer_bytes: u64,
    /// RED `K_min`, bytes.
    pub kmin_bytes: u32,
    /// RED `K_max`, bytes.
    pub kmax_bytes: u32,
    /// RED `P_max`, Q16.
    pub pmax: u32,
    /// Width of one histogram bucket, bytes (at least 1).
    pub hist_bucket_bytes: u32,
    /// Loss probability, Q32.
    pub loss: u32,
    /// Corruption probability, Q32.
    pub corrupt: u32,
    /// Duplication probability, Q32.
    pub duplicate: u32,
    /// DVL: congestion detection threshold on the normal queue, bytes.
    pub dvl_threshold_bytes: u32,
    /// Seed of the fault draws.
    pub seed: u64,
    /// IOFD: deflect above this queue, bytes.
    pub iofd_threshold_bytes: u32,
    /// IOFD: messages up to this many bytes are short.
    pub iofd_max_message_bytes: u32,
    /// IOFD: interface indexes of the alternate ports (fabric ports, never toward a host);
    /// 0 = unused slot.
    pub iofd_alternates: [u32; MAX_ALTERNATES],
}

impl PortConfig {
    /// The RED thresholds.
    pub const fn red(&self) -> RedConfig {
        RedConfig {
            kmin_bytes: self.kmin_bytes,
            kmax_bytes: self.kmax_bytes,
            pmax: self.pmax,
            drop_non_ect: self.flags & FLAG_DROP_NON_ECT != 0,
        }
    }

    /// The fault settings.
    pub const fn faults(&self) -> crate::fault::FaultConfig {
        crate::fault::FaultConfig {
            loss: self.loss,
            corrupt: self.corrupt,
            duplicate: self.duplicate,
            blackhole: self.flags & FLAG_BLACKHOLE != 0,
            seed: self.seed,
        }
    }

    /// The IOFD settings.
    pub const fn iofd(&self) -> crate::iofd::IofdConfig {
        crate::iofd::IofdConfig {
            threshold_bytes: self.iofd_threshold_bytes as u64,
            max_message_bytes: self.iofd_max_message_bytes as u64,
        }
    }

    /// Alternate number `draw % count` among the configured ones (0 if none).
    pub const fn alternate(&self, draw: u32) -> u32 {
        let mut n = 0;
        while n < MAX_ALTERNATES && self.iofd_alternates[n] != 0 {
            n += 1;
        }
        if n == 0 {
            0
        } else {
            // Selected by comparison, not indexed: the verifier does not bound a modulo, so a
            // computed index into the stack copy of the config would be refused.
            let pick = draw as usize % n;
            let mut out = self.iofd_alternates[0];
            let mut k = 1;
            while k < MAX_ALTERNATES {
                if pick == k {
                    out = self.iofd_alternates[k];
                }
                k += 1;
            }
            out
        }
    }

    /// The DVL settings.
    pub const fn dvl(&self) -> crate::dvl::DvlConfig {
        crate::dvl::DvlConfig {
            threshold_bytes: self.dvl_threshold_bytes as u64,
            hold_ns: crate::dvl::HOLD_NS,
        }
    }

    /// The histogram bucket of a queue of `queue_bytes`.
    pub const fn bucket(&self, queue_bytes: u64) -> u32 {
        let width = if self.hist_bucket_bytes == 0 {
            1
        } else {
            self.hist_bucket_bytes as u64
        };
        let b = queue_bytes / width;
        if b >= HIST_BUCKETS as u64 {
            HIST_BUCKETS - 1
        } else {
            b as u32
        }
    }
}

/// The queue's decision for one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Queue it unchanged.
    Pass,
    /// Queue it with CE set.
    Mark,
    /// Drop: it does not fit in the buffer.
    DropBuffer,
    /// Drop: Not-ECT where an ECT packet would be marked ([`FLAG_DROP_NON_ECT`]).
    DropNonEct,
}

/// Tail drop, then RED/ECN on the queue the packet finds: a packet of `len_bytes` arriving at
/// a queue of `queue_bytes` in a buffer of `buffer_bytes`; `ect` and `rand` as for
/// [`red::decide`].
pub const fn admit(
    red_cfg: &RedConfig,
    buffer_bytes: u64,
    queue_bytes: u64,
    len_bytes: u64,
    ect: bool,
    rand: u32,
) -> Admit {
    if queue_bytes.saturating_add(len_bytes) > buffer_bytes {
        return Admit::DropBuffer;
    }
    let q = if queue_bytes > u32::MAX as u64 {
        u32::MAX
    } else {
        queue_bytes as u32
    };
    match red::decide(red_cfg, q, ect, rand) {
        Verdict::Pass => Admit::Pass,
        Verdict::Mark => Admit::Mark,
        Verdict::Drop => Admit::DropNonEct,
    }
}

/// Slots of the per-CPU counter array; the loader sums them over CPUs.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    /// Packets that reached the port (including dropped and deflected ones, excluding our own
    /// duplicates): `packets − drops − iofd_deflected` left by this port.
    Packets = 0,
    /// Their bytes (`skb->len`).
    Bytes = 1,
    /// RoCEv2 frames among them.
    Roce = 2,
    /// Packets whose ECN field was ECT(0), ECT(1) or CE on arrival.
    EcnCapable = 3,
    /// Packets this port set CE on.
    CeMarked = 4,
    /// Dropped: the modelled queue had no room (beyond the buffer).
    DropBuffer = 5,
    /// Dropped: Not-ECT at a marking queue with drop_non_ect.
    DropNonEct = 6,
    /// Dropped by random loss.
    FaultLoss = 7,
    /// A bit flipped.
    FaultCorrupt = 8,
    /// Sent twice.
    FaultDuplicate = 9,
    /// Dropped by blackhole mode.
    FaultBlackhole = 10,
    /// Packets that are not IPv4/IPv6 (ARP, …): queued, never marked or faulted.
    NotIp = 11,
    /// Frames too short for the headers they announce: queued unchanged.
    Truncated = 12,
    /// A fault or mark could not be applied (helper error): the packet passed unchanged.
    HelperError = 13,
    /// Our own duplicates passing the port (queued, not counted in `packets`).
    Duplicates = 14,
    /// IOFD: packets this port sent out of an alternate port instead.
    IofdDeflected = 15,
    /// IOFD: messages whose start packet this port deflected.
    IofdMessages = 16,
    /// IOFD: start packets above the threshold refused for a full table.
    IofdTableFull = 17,
    /// IOFD: start packets above the threshold refused as long (or of unknown length).
    IofdLong = 18,
    /// IOFD: start packets above the threshold refused for lack of tokens.
    IofdNoTokens = 19,
    /// IOFD: packets another port deflected into this one.
    IofdReceived = 20,
    /// DVL: flows this port isolated (entered the congested-flow table).
    DvlIsolated = 21,
    /// DVL: flows released from the table.
    DvlReleased = 22,
    /// DVL: packets queued in the congested-flow queue.
    DvlCongested = 23,
    /// DVL: flows not isolated for a full table.
    DvlTableFull = 24,
    /// DVL: congestion notifications sent toward the previous hop.
    DvlNotifySent = 25,
    /// DVL: notifications not sent: no route or neighbour back to the source (FIB lookup),
    /// or a helper failed (the packet itself passed unchanged).
    DvlNotifyFailed = 26,
    /// DVL: notifications received on this port and their flow isolated here.
    DvlNotifyAccepted = 27,
    /// DVL: frames of the notification EtherType this port could not read a flow from
    /// (truncated, not IPv4/IPv6): dropped.
    DvlNotifyMalformed = 28,
    /// DVL: notifications received whose flow did not fit in the full table: dropped.
    DvlNotifyTableFull = 29,
}

impl Counter {
    /// Every counter, in slot order.
    pub const ALL: [Counter; 30] = [
        Counter::Packets,
        Counter::Bytes,
        Counter::Roce,
        Counter::EcnCapable,
        Counter::CeMarked,
        Counter::DropBuffer,
        Counter::DropNonEct,
        Counter::FaultLoss,
        Counter::FaultCorrupt,
        Counter::FaultDuplicate,
        Counter::FaultBlackhole,
        Counter::NotIp,
        Counter::Truncated,
        Counter::HelperError,
        Counter::Duplicates,
        Counter::IofdDeflected,
        Counter::IofdMessages,
        Counter::IofdTableFull,
        Counter::IofdLong,
        Counter::IofdNoTokens,
        Counter::IofdReceived,
        Counter::DvlIsolated,
        Counter::DvlReleased,
        Counter::DvlCongested,
        Counter::DvlTableFull,
        Counter::DvlNotifySent,
        Counter::DvlNotifyFailed,
        Counter::DvlNotifyAccepted,
        Counter::DvlNotifyMalformed,
        Counter::DvlNotifyTableFull,
    ];
    /// Number of slots in [`COUNTERS_MAP`].
    pub const COUNT: u32 = Self::ALL.len() as u32;

    /// A stable snake_case name for stats output.
    pub const fn name(self) -> &'static str {
        match self {
            Counter::Packets => "packets",
            Counter::Bytes => "bytes",
            Counter::Roce => "roce",
            Counter::EcnCapable => "ecn_capable",
            Counter::CeMarked => "ce_marked",
            Counter::DropBuffer => "drop_buffer",
            Counter::DropNonEct => "drop_non_ect",
            Counter::FaultLoss => "fault_loss",
            Counter::FaultCorrupt => "fault_corrupt",
            Counter::FaultDuplicate => "fault_duplicate",
            Counter::FaultBlackhole => "fault_blackhole",
            Counter::NotIp => "not_ip",
            Counter::Truncated => "truncated",
            Counter::HelperError => "helper_error",
            Counter::Duplicates => "duplicates",
            Counter::IofdDeflected => "iofd_deflected",
            Counter::IofdMessages => "iofd_messages",
            Counter::IofdTableFull => "iofd_table_full",
            Counter::IofdLong => "iofd_long",
            Counter::IofdNoTokens => "iofd_no_tokens",
            Counter::IofdReceived => "iofd_received",
            Counter::DvlIsolated => "dvl_isolated",
            Counter::DvlReleased => "dvl_released",
            Counter::DvlCongested => "dvl_congested",
            Counter::DvlTableFull => "dvl_table_full",
            Counter::DvlNotifySent => "dvl_notify_sent",
            Counter::DvlNotifyFailed => "dvl_notify_failed",
            Counter::DvlNotifyAccepted => "dvl_notify_accepted",
            Counter::DvlNotifyMalformed => "dvl_notify_malformed",
            Counter::DvlNotifyTableFull => "dvl_notify_table_full",
        }
    }
}

#[cfg(feature = "user")]
mod pod {
    #![allow(unsafe_code)]
    // SAFETY: repr(C), only integer fields, no padding (u32 pairs before each u64 run).
    unsafe impl aya::Pod for super::PortConfig {}
    // SAFETY: repr(C), three u64 fields.
    unsafe impl aya::Pod for crate::queue::QueueState {}
    // SAFETY: repr(C), 32 bytes then a u32: no padding.
    unsafe impl aya::Pod for crate::iofd::MessageKey {}
    // SAFETY: repr(C), 32 bytes, a u32, two u16 and a u32: no padding.
    unsafe impl aya::Pod for crate::dvl::FlowKey {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::red::PROB_ONE;

    const RED: RedConfig = RedConfig {
        kmin_bytes: 10_000,
        kmax_bytes: 50_000,
        pmax: PROB_ONE / 5,
        drop_non_ect: false,
    };

    #[test]
    fn admit_tail_drops_beyond_buffer() {
        assert_eq!(
            admit(&RED, 100_000, 98_500, 1500, true, u32::MAX),
            Admit::Mark
        );
        assert_eq!(
            admit(&RED, 100_000, 98_501, 1500, true, u32::MAX),
            Admit::DropBuffer
        );
        assert_eq!(
            admit(&RED, 100_000, u64::MAX, 1, false, 0),
            Admit::DropBuffer
        );
    }

    #[test]
    fn admit_follows_red_below_buffer() {
        // Below K_min nothing is marked, whatever the draw.
        assert_eq!(admit(&RED, 100_000, 10_000, 1000, true, 0), Admit::Pass);
        // Half way up the ramp p = 0.1: a draw under it marks, one above passes.
        assert_eq!(
            admit(&RED, 100_000, 30_000, 1000, true, 6552 << 16),
            Admit::Mark
        );
        assert_eq!(
            admit(&RED, 100_000, 30_000, 1000, true, 6553 << 16),
            Admit::Pass
        );
        let drop = RedConfig {
            drop_non_ect: true,
            ..RED
        };
        assert_eq!(
            admit(&drop, 100_000, 60_000, 1000, false, 0),
            Admit::DropNonEct
        );
    }

    #[test]
    fn port_config_buckets_clamp() {
        let cfg = PortConfig {
            hist_bucket_bytes: 1000,
            ..PortConfig::default()
        };
        assert_eq!(cfg.bucket(0), 0);
        assert_eq!(cfg.bucket(999), 0);
        assert_eq!(cfg.bucket(1000), 1);
        assert_eq!(cfg.bucket(10_000_000), HIST_BUCKETS - 1);
        assert_eq!(PortConfig::default().bucket(5), 5);
    }

    #[test]
    fn port_config_alternates_by_draw() {
        let mut cfg = PortConfig::default();
        assert_eq!(cfg.alternate(5), 0);
        cfg.iofd_alternates = [7, 9, 0, 11];
        // Only the slots before the first 0 count.
        assert_eq!(
            [cfg.alternate(0), cfg.alternate(1), cfg.alternate(2)],
            [7, 9, 7]
        );
    }

    #[test]
    fn port_config_has_no_padding() {
        assert_eq!(
            core::mem::size_of::<PortConfig>(),
            4 * 2 + 8 * 3 + 4 * 8 + 8 + 4 * 2 + 4 * MAX_ALTERNATES
        );
        assert_eq!(core::mem::size_of::<crate::queue::QueueState>(), 24);
        assert_eq!(
            core::mem::size_of::<crate::dvl::FlowKey>(),
            32 + 4 + 2 + 2 + 4
        );
    }

    #[test]
    fn counter_names_are_unique_and_in_slot_order() {
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
            for d in &Counter::ALL[..i] {
                assert_ne!(c.name(), d.name());
            }
        }
    }
}
