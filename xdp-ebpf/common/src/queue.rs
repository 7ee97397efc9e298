//! A byte-accurate model of a switch port's egress queue, drained at the port's rate.
//!
//! A real switch marks and drops on the bytes waiting in its egress queue. The eBPF switch
//! program runs in the tc egress hook, *before* the shaper (HTB/TBF) that plays the port, and
//! cannot read that qdisc's backlog; so it keeps its own copy of the queue: every admitted packet
//! adds its length, and the queue drains at the configured rate between packets, by the
//! packets' timestamps (`bpf_ktime_get_ns()` in the program, virtual time in tests and the
//! model). While the shaper is backlogged it sends at exactly that rate, so the two agree up to
//! the shaper's token-bucket burst (docs/switch.md measures the difference).
//!
//! The backlog is kept in *nanobits* (bits · 10^9): draining `elapsed_ns · rate_bps` nanobits
//! is exact integer arithmetic for every rate, with no rounding that could accumulate over
//! millions of packets. A `u64` holds 2.3 GB of backlog this way, far above any port buffer.
//!
//! Deviations: the queue is one FIFO per port (no priorities); bytes are what tc counts
//! (`skb->len`: Ethernet header, no preamble, FCS or inter-frame gap).

/// Nanobits in one byte: the backlog unit.
pub const NANOBITS_PER_BYTE: u64 = 8 * 1_000_000_000;

/// The modelled queue of one port, as stored in the switch program's queue map.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueState {
    /// Bits waiting, times 10^9.
    pub backlog_nbit: u64,
    /// Time of the last update, ns (`CLOCK_MONOTONIC`, as `bpf_ktime_get_ns()`).
    pub last_ns: u64,
    /// Largest queue, bytes, as left by a packet joining it.
    pub max_bytes: u64,
}

impl QueueState {
    /// Drains the queue at `rate_bps` from the last update to `now_ns` and returns the bytes
    /// still queued (rounded up: a partly sent packet still occupies the buffer).
    ///
    /// A `now_ns` older than the last update (another CPU stamped a later packet first) drains
    /// nothing. A rate of 0 never drains.
    pub fn drain(&mut self, rate_bps: u64, now_ns: u64) -> u64 {
        if now_ns > self.last_ns {
            let elapsed_ns = now_ns - self.last_ns;
            // elapsed · rate ≥ backlog exactly when elapsed > ⌊backlog / rate⌋; otherwise
            // elapsed · rate ≤ backlog, so the product cannot overflow.
            match self.backlog_nbit.checked_div(rate_bps) {
                None => {}
                Some(full) if elapsed_ns > full => self.backlog_nbit = 0,
                Some(_) => self.backlog_nbit -= elapsed_ns * rate_bps,
            }
            self.last_ns = now_ns;
        }
        self.bytes()
    }

    /// Bytes queued at the last update, rounded up.
    pub const fn bytes(&self) -> u64 {
        self.backlog_nbit.div_ceil(NANOBITS_PER_BYTE)
    }

    /// Adds a packet of `len_bytes` to the queue (call [`QueueState::drain`] first).
    pub fn enqueue(&mut self, len_bytes: u64) {
        // Not `saturating_mul`: LLVM lowers the overflow check to a 128-bit multiply, which
        // BPF cannot call. Lengths above 2.3 GB saturate.
        let added = if len_bytes > u64::MAX / NANOBITS_PER_BYTE {
            u64::MAX
        } else {
            len_bytes * NANOBITS_PER_BYTE
        };
        self.backlog_nbit = self.backlog_nbit.saturating_add(added);
        let queued = self.bytes();
        if queued > self.max_bytes {
            self.max_bytes = queued;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GBIT: u64 = 1_000_000_000;

    #[test]
    fn queue_drains_at_rate_exactly() {
        let mut q = QueueState::default();
        q.drain(10 * GBIT, 1_000);
        q.enqueue(1500);
        assert_eq!(q.bytes(), 1500);
        // 10 Gbit/s = 1.25 bytes/ns: after 400 ns 500 bytes are gone.
        assert_eq!(q.drain(10 * GBIT, 1_400), 1000);
        // 1 ns more: 1.25 bytes, so 998.75 remain, rounded up to 999.
        assert_eq!(q.drain(10 * GBIT, 1_401), 999);
        // 799 ns after that: 998.75 − 998.75 = 0 exactly.
        assert_eq!(q.drain(10 * GBIT, 2_200), 0);
        assert_eq!(q.backlog_nbit, 0);
    }

    #[test]
    fn queue_no_drift_over_many_packets() {
        // 3 Gbit/s (0.375 bytes/ns) fed at exactly that rate: 1000 bytes every 2666.67 ns,
        // i.e. 3 packets per 8000 ns, for 3·10^6 packets: no rounding may build a queue.
        let mut q = QueueState::default();
        let mut now = 0;
        for i in 0..3_000_000u64 {
            now = i / 3 * 8_000 + [0, 2_667, 5_334][(i % 3) as usize];
            q.drain(3 * GBIT, now);
            q.enqueue(1000);
        }
        // Gaps of 2667, 2667 and 2666 ns drain 1000.125, 1000.125 and 999.75 bytes: every
        // packet finds at most 0.25 bytes and the last one leaves 1000.
        assert_eq!(q.drain(3 * GBIT, now), 1000);
        // 1000.25 rounded up.
        assert_eq!(q.max_bytes, 1001);
    }

    #[test]
    fn queue_long_idle_empties_without_overflow() {
        let mut q = QueueState::default();
        q.enqueue(2_000_000);
        assert_eq!(q.drain(400 * GBIT, u64::MAX), 0);
        q.enqueue(100);
        // Time going backwards drains nothing.
        assert_eq!(q.drain(400 * GBIT, 5), 100);
    }

    #[test]
    fn queue_zero_rate_never_drains() {
        let mut q = QueueState::default();
        q.enqueue(64);
        assert_eq!(q.drain(0, 1_000_000_000), 64);
    }
}
