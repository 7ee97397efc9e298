//! Output-queued switches with a shared buffer, RED/ECN marking and optional PFC.
//!
//! A packet that has fully arrived is routed (ECMP, `routing.rs`), admitted to the shared
//! buffer, offered to the switch policy, and queued at its egress port in its priority. Egress
//! ports serve priorities strictly (control before data) and skip paused ones.
//!
//! **Buffer.** One shared pool of `buffer_bytes` for all ports. Lossy mode drops a packet that
//! does not fit (tail drop). Lossless mode (PFC, IEEE 802.1Qbb) counts, per ingress port and
//! priority, the bytes that entered there and are still held; above `xoff_bytes` it sends PAUSE
//! upstream, at or below `xon_bytes` RESUME. Packets still arriving from a paused upstream (sent
//! before the PAUSE reached it) land in that ingress's `headroom_bytes` once the shared pool is
//! full; only a headroom overflow drops in lossless mode, which proper sizing prevents. The fill
//! order follows seed 003 slide 9 ("shared pool → PG headroom"); the static per-port space and
//! global headroom of that slide are not modelled.
//!
//! **Policy.** [`SwitchPolicy`] is the per-packet marking decision: RED/ECN on the egress
//! queue's bytes (seed 002 §II-B.1, Fig. 1), whose decision is `rocev2_ebpf_common::red::decide`,
//! the same code the XDP switch programs run. IOFD and DVL also run the shared code:
//!
//! * **IOFD** (`[switch.iofd]`, seed 000 §IV): a data packet consults the deflected-flow table
//!   of the egress port ECMP chose (`iofd::decide` on an `iofd::ArrayDft` per port, as the eBPF
//!   program keeps one per port). A deflected packet leaves by an alternate drawn at random
//!   among the *other* equal-cost next hops toward its destination, so a leaf never deflects
//!   down toward a host (its down port is the only next hop), and loses one token from BTH
//!   byte 4 (bits 5–0). The ICRC masks that byte and the model's IPv4 senders leave the UDP
//!   checksum at 0, so the frame stays valid for the receiver's checks.
//! * **DVL** (`[switch.dvl]`, seed 003): each egress port has a congested-flow queue, priority
//!   `PRIO_CFQ`, served only when the normal data queue is empty. `dvl::decide` on the port's
//!   `dvl::ArrayCft` picks the queue; a flow isolated by detection is notified upstream: a
//!   notification reaches the previous hop's switch after the link's propagation delay plus a
//!   minimum frame's serialisation, and isolates the flow in that switch's port toward this one
//!   (slide 10 #5). The CFQ is a lane of its own: its packets arrive downstream in priority
//!   `PRIO_CFQ`, whose PFC pauses only the upstream CFQ (enhanced DVL), so a paused congested
//!   flow no longer blocks the normal queue (the HoL blocking DVL removes). While a flow's
//!   packets keep joining a CFQ at or above the threshold and its entry is older than half the
//!   hold time, the switch refreshes its own entry and notifies upstream again (the ingress CFQ
//!   growing, slide 10 #4–#5), so the isolation holds hop by hop while the congestion does.
//!
//! **Control priority.** ACK, NAK and CNP frames travel in their own strict-priority class and
//! are admitted even when the shared pool is full: switches keep reserved space for that class
//! (seed 002 §VI-D: "Priority should be supported to transport control signals such as CNPs"),
//! so congestion feedback is never dropped behind the data it reports on. The class is tiny, so
//! its use of the pool past `buffer_bytes` is bounded by a few frames per port.
//!
//! Deviations: PFC is XOFF/XON state, not pause quanta; PFC frames take the propagation delay
//! plus an 84-byte serialisation but do not wait for the frame in progress; the buffer counts
//! frame bytes, not cells. IOFD as in `iofd.rs` (one table per port; a multi-packet SEND counts
//! as long; virtual-lane deadlock avoidance not modelled). DVL as in `dvl.rs` (release only with
//! the CFQ empty; no markings, the strict order replaces them; no ingress CFQ: the output-queued
//! model has no ingress queues, so the notification goes upstream when the egress isolates).

use rocev2_ebpf_common::dvl::DvlConfig;
use rocev2_ebpf_common::iofd::IofdConfig;
use rocev2_ebpf_common::red::{self, RedConfig, Verdict};
use serde::{Deserialize, Serialize};

/// The decision hook of a switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwitchPolicy {
    /// Forward everything unmarked (only buffer admission drops).
    Forward,
    /// RED/ECN on egress queue bytes.
    RedEcn(RedConfig),
}

impl SwitchPolicy {
    /// The verdict for a packet about to join an egress queue holding `queue_bytes`.
    pub fn on_enqueue(&self, queue_bytes: u64, ect: bool, rand: u32) -> Verdict {
        match self {
            SwitchPolicy::Forward => Verdict::Pass,
            SwitchPolicy::RedEcn(cfg) => red::decide(
                cfg,
                u32::try_from(queue_bytes).unwrap_or(u32::MAX),
                ect,
                rand,
            ),
        }
    }
}

/// `[switch.red]`: RED/ECN marking thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedSpec {
    /// `K_min`, bytes.
    pub kmin_bytes: u32,
    /// `K_max`, bytes.
    pub kmax_bytes: u32,
    /// `P_max`, percent.
    pub pmax_percent: f64,
    /// Drop Not-ECT packets instead of marking (default false).
    #[serde(default)]
    pub drop_non_ect: bool,
    /// When the queue is judged: as the packet joins it (default) or as it leaves.
    #[serde(default)]
    pub mark_at: MarkAt,
}

/// When RED/ECN looks at the egress queue.
///
/// Marking at enqueue sends the congestion signal behind the whole queue: the receiver sees the
/// mark one queueing delay later (3.3 ms for 4 MB at 10 Gbit/s). Marking at dequeue judges the
/// queue the packet leaves behind and delivers the signal at once. The DCQCN authors' ns-3 model
/// (`bobzhuyb/ns3-rdma`, `QbbNetDevice::DequeueAndTransmit`), on which seed 002 ran DCQCN and
/// DCQCN+ (§III-A, ref. \[9\]), marks at dequeue; the experiments that reproduce seed 002 do too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkAt {
    /// On the queue a packet joins (counting the packets ahead of it).
    #[default]
    Enqueue,
    /// On the queue a packet leaves behind; only marking applies (`drop_non_ect` needs enqueue).
    Dequeue,
}

impl RedSpec {
    /// The fixed-point configuration.
    pub fn config(&self) -> RedConfig {
        RedConfig {
            kmin_bytes: self.kmin_bytes,
            kmax_bytes: self.kmax_bytes,
            pmax: (self.pmax_percent.clamp(0.0, 100.0) / 100.0 * red::PROB_ONE as f64).round()
                as u32,
            drop_non_ect: self.drop_non_ect,
        }
    }
}

/// `[switch.pfc]`: lossless mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PfcSpec {
    /// PFC on (lossless) or off (lossy, tail drop).
    pub enabled: bool,
    /// PAUSE threshold per ingress port and priority; default `buffer_bytes / (2 · ports)`, so
    /// that every ingress can reach it before the shared pool is full.
    #[serde(default)]
    pub xoff_bytes: Option<u64>,
    /// RESUME threshold; default `xoff_bytes / 2`.
    #[serde(default)]
    pub xon_bytes: Option<u64>,
    /// Headroom per ingress port and priority; default 2 · (rate · delay) + 2 maximum frames:
    /// what is in flight towards us when the PAUSE arrives upstream, plus the frame upstream is
    /// sending then and the one we were receiving.
    #[serde(default)]
    pub headroom_bytes: Option<u64>,
}

/// `[switch]`: every switch of the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchSpec {
    /// Shared buffer, bytes.
    pub buffer_bytes: u64,
    /// RED/ECN; none = no marking.
    #[serde(default)]
    pub red: Option<RedSpec>,
    /// PFC.
    #[serde(default)]
    pub pfc: PfcSpec,
    /// IOFD deflection on every switch port with equal-cost alternates; none = off.
    #[serde(default)]
    pub iofd: Option<IofdSpec>,
    /// DVL congestion isolation on every switch port; none = off.
    #[serde(default)]
    pub dvl: Option<DvlSpec>,
}

/// `[switch.iofd]`: in-order flow deflection (seed 000 §IV; the paper: 15 KB threshold under a
/// 22.5 KB ECN threshold, short flows up to 8 KB).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IofdSpec {
    /// Deflect only while the chosen port's data queue holds more than this, bytes.
    pub threshold_bytes: u64,
    /// Messages up to this many bytes may be deflected.
    pub max_message_bytes: u64,
}

impl IofdSpec {
    /// The shared crate's configuration.
    pub fn config(&self) -> IofdConfig {
        IofdConfig {
            threshold_bytes: self.threshold_bytes,
            max_message_bytes: self.max_message_bytes,
        }
    }
}

/// `[switch.dvl]`: dynamic virtual lanes (seed 003).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DvlSpec {
    /// Congestion detection threshold on a port's normal data queue, bytes.
    pub threshold_bytes: u64,
    /// Least time a flow stays isolated after its isolation or last notification, ns
    /// (default 100 µs, tens of round trips in the model's fabrics).
    #[serde(default = "default_hold_ns")]
    pub hold_ns: u64,
}

fn default_hold_ns() -> u64 {
    100_000
}

impl DvlSpec {
    /// The shared crate's configuration.
    pub fn config(&self) -> DvlConfig {
        DvlConfig {
            threshold_bytes: self.threshold_bytes,
            hold_ns: self.hold_ns,
        }
    }
}

impl Default for SwitchSpec {
    /// 12 MB shared buffer (a Trident/Tomahawk-class ToR), RED at seed 002 §IV's 20 KB / 200 KB
    /// with 1% `P_max`, PFC off.
    fn default() -> Self {
        SwitchSpec {
            buffer_bytes: 12_000_000,
            red: Some(RedSpec {
                kmin_bytes: 20_000,
                kmax_bytes: 200_000,
                pmax_percent: 1.0,
                drop_non_ect: false,
                mark_at: MarkAt::Enqueue,
            }),
            pfc: PfcSpec::default(),
            iofd: None,
            dvl: None,
        }
    }
}

/// Counters of one switch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SwitchStats {
    /// Frame bytes received.
    pub rx_bytes: u64,
    /// Frame bytes sent.
    pub tx_bytes: u64,
    /// Frame bytes dropped.
    pub drop_bytes: u64,
    /// Packets dropped for lack of a route.
    pub no_route: u64,
    /// Largest shared-buffer occupancy, bytes.
    pub max_buffer_bytes: u64,
}

/// One switch's state (its ports live in the model's port table).
#[derive(Debug, Clone)]
pub struct Switch {
    /// Node id.
    pub node: u32,
    /// First port id; the switch's ports are `first_port..first_port + ports`.
    pub first_port: u32,
    /// Number of ports.
    pub ports: u32,
    /// ECMP hash salt.
    pub salt: u64,
    /// The policy hook.
    pub policy: SwitchPolicy,
    /// When the policy judges the queue.
    pub mark_at: MarkAt,
    /// Shared pool size.
    pub buffer_bytes: u64,
    /// Shared pool in use.
    pub buffer_used: u64,
    /// Lossless mode.
    pub pfc: bool,
    /// XOFF per ingress priority.
    pub xoff: u64,
    /// XON per ingress priority.
    pub xon: u64,
    /// Counters.
    pub stats: SwitchStats,
}

impl Switch {
    /// Whether `len` more bytes fit in the shared pool.
    pub fn pool_fits(&self, len: u64) -> bool {
        self.buffer_used + len <= self.buffer_bytes
    }

    /// Takes `len` bytes into the shared pool (the control class may go past its size).
    pub fn pool_take(&mut self, len: u64) {
        self.buffer_used += len;
        self.stats.max_buffer_bytes = self.stats.max_buffer_bytes.max(self.buffer_used);
    }

    /// Returns `len` bytes to the shared pool.
    pub fn pool_release(&mut self, len: u64) {
        self.buffer_used -= len;
    }
}
