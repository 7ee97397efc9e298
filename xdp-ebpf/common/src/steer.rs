//! The AF_XDP steering program's maps: names, sizes and counter slots, defined once for the
//! program (`rocev2-ebpf`, `steer`) and its loader (`rocev2-ebpf-loader`).
//!
//! The program redirects RoCEv2 frames (UDP destination port [`ROCEV2_PORT`] over IPv4 or IPv6,
//! optionally behind one or two VLAN tags) to the AF_XDP socket bound to the receiving queue and
//! passes every other frame to the kernel. It fails open: a frame it cannot parse is counted and
//! passed, never dropped.

/// UDP destination port of RoCEv2 (IBTA Annex A17).
pub const ROCEV2_PORT: u16 = 4791;

/// Name of the `XSKMAP` indexed by rx queue: the AF_XDP socket serving each queue.
pub const XSKS_MAP: &str = "ROCEV2_XSKS";
/// Entries of [`XSKS_MAP`]: rx queues served at most.
pub const MAX_QUEUES: u32 = 64;
/// Name of the per-CPU `u64` array of [`Counter`]s.
pub const COUNTERS_MAP: &str = "ROCEV2_STEER_COUNTERS";

/// Slots of the per-CPU counter array; the loader sums them over CPUs.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    /// RoCEv2 frames redirected to an AF_XDP socket.
    Redirected = 0,
    /// RoCEv2 frames on a queue with no socket bound: passed to the kernel.
    NoSocket = 1,
    /// Frames that are not RoCEv2 (other protocols, ports): passed to the kernel.
    NotRoce = 2,
    /// Frames too short for their Ethernet, VLAN or IP headers: passed to the kernel.
    Truncated = 3,
}

impl Counter {
    /// Every counter, in slot order.
    pub const ALL: [Counter; 4] = [
        Counter::Redirected,
        Counter::NoSocket,
        Counter::NotRoce,
        Counter::Truncated,
    ];
    /// Number of slots in [`COUNTERS_MAP`].
    pub const COUNT: u32 = Self::ALL.len() as u32;

    /// A stable snake_case name for stats output.
    pub const fn name(self) -> &'static str {
        match self {
            Counter::Redirected => "redirected",
            Counter::NoSocket => "no_socket",
            Counter::NotRoce => "not_roce",
            Counter::Truncated => "truncated",
        }
    }
}
