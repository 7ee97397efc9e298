//! Links: veth pairs created straight into their two namespaces, egress shaping with tc, and
//! interface counters.
//!
//! Shaping is on egress because that is where a switch queues: a port limited to R with a
//! buffer of B bytes sends at most R and drops arrivals that find B bytes queued (tail drop),
//! which is the queue the congestion-control papers model. The kernel here has no netem, RED
//! or fq, so delay, loss and ECN marking are left to the eBPF switch programs.
//!
//! Deviations: none.

use crate::Error;
use crate::exec::{netns_command, run};
use crate::topology::{Shaper, Shaping};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Bytes of Ethernet header tc counts on top of the IP MTU (no FCS, no VLAN tag).
pub const ETHERNET_HEADER_BYTES: u64 = 14;

/// How long one `ip`/`tc`/`cat` invocation may take before we call it hung.
pub(crate) const TOOL_TIMEOUT: Duration = Duration::from_secs(20);

/// The `ip -batch` line that creates a veth pair with one end in each namespace, so no end is
/// ever visible (or able to clash) in the caller's namespace, each end with `queues` transmit
/// and receive queues.
pub(crate) fn veth_add(
    (a_netns, a_if): (&str, &str),
    (b_netns, b_if): (&str, &str),
    mtu: u32,
    queues: u32,
) -> String {
    let q = format!("numtxqueues {queues} numrxqueues {queues}");
    format!(
        "link add name {a_if} mtu {mtu} netns {a_netns} {q} type veth \
         peer name {b_if} mtu {mtu} netns {b_netns} {q}"
    )
}

/// Token-bucket depth: one millisecond at the rate, and at least two full frames. A bucket
/// smaller than a frame would never release it (tbf drops such packets); one much larger than
/// a millisecond lets bursts through that a switch port at that rate would queue instead.
pub fn burst_bytes(shaping: &Shaping, mtu: u32) -> u64 {
    let frame = u64::from(mtu) + ETHERNET_HEADER_BYTES;
    (shaping.rate_bps / 8 / 1000).max(2 * frame)
}

/// The `tc -batch` lines that shape `ifname`'s egress.
pub fn shaping_commands(ifname: &str, shaping: &Shaping, mtu: u32) -> Vec<String> {
    let rate = shaping.rate_bps;
    let burst = burst_bytes(shaping, mtu);
    let limit = shaping.buffer_bytes;
    match shaping.shaper {
        // One class carries everything (`default 1`); the bfifo child is the port buffer. The
        // quantum only matters between classes, but left to r2q it warns at high rates.
        Shaper::Htb => {
            let quantum = u64::from(mtu) + ETHERNET_HEADER_BYTES;
            vec![
                format!("qdisc add dev {ifname} root handle 1: htb default 1"),
                format!(
                    "class add dev {ifname} parent 1: classid 1:1 htb rate {rate}bit \
                     ceil {rate}bit burst {burst} cburst {burst} quantum {quantum}"
                ),
                format!("qdisc add dev {ifname} parent 1:1 handle 10: bfifo limit {limit}"),
            ]
        }
        Shaper::Tbf => vec![format!(
            "qdisc add dev {ifname} root handle 1: tbf rate {rate}bit burst {burst} limit {limit}"
        )],
    }
}

/// An interface's counters as the kernel keeps them (`/sys/class/net/IF/statistics/*`).
/// Bytes include the Ethernet header, as tc's rate does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IfCounters {
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Received packets dropped by the interface.
    pub rx_dropped: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Packets the interface dropped on transmit (qdisc drops are not counted here).
    pub tx_dropped: u64,
}

/// The counter files read, in [`IfCounters`] field order.
const COUNTERS: [&str; 6] = [
    "rx_bytes",
    "rx_packets",
    "rx_dropped",
    "tx_bytes",
    "tx_packets",
    "tx_dropped",
];

impl IfCounters {
    /// Read `ifname`'s counters inside `netns`. `ip netns exec` mounts that namespace's sysfs,
    /// so `/sys/class/net` shows its interfaces.
    ///
    /// # Errors
    /// [`Error::Failed`] when the namespace or interface does not exist; [`Error::Parse`] on
    /// output that is not six numbers.
    pub fn read(netns: &str, ifname: &str) -> Result<Self, Error> {
        let mut cmd = netns_command(netns, "cat");
        for c in COUNTERS {
            cmd.arg(format!("/sys/class/net/{ifname}/statistics/{c}"));
        }
        let out = run(&mut cmd, TOOL_TIMEOUT)?;
        let values: Vec<u64> = out
            .stdout
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|_| Error::Parse {
                cmd: out.cmd.clone(),
                output: out.stdout.clone(),
            })?;
        let [
            rx_bytes,
            rx_packets,
            rx_dropped,
            tx_bytes,
            tx_packets,
            tx_dropped,
        ] = values[..]
        else {
            return Err(Error::Parse {
                cmd: out.cmd,
                output: out.stdout,
            });
        };
        Ok(IfCounters {
            rx_bytes,
            rx_packets,
            rx_dropped,
            tx_bytes,
            tx_packets,
            tx_dropped,
        })
    }

    /// What was counted since `earlier` (saturating, should a counter ever go backwards).
    pub fn since(&self, earlier: &IfCounters) -> IfCounters {
        IfCounters {
            rx_bytes: self.rx_bytes.saturating_sub(earlier.rx_bytes),
            rx_packets: self.rx_packets.saturating_sub(earlier.rx_packets),
            rx_dropped: self.rx_dropped.saturating_sub(earlier.rx_dropped),
            tx_bytes: self.tx_bytes.saturating_sub(earlier.tx_bytes),
            tx_packets: self.tx_packets.saturating_sub(earlier.tx_packets),
            tx_dropped: self.tx_dropped.saturating_sub(earlier.tx_dropped),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn veth_add_gives_both_ends_the_queues() {
        let l = veth_add(("nsa", "va"), ("nsb", "vb"), 4200, 2);
        assert_eq!(
            l,
            "link add name va mtu 4200 netns nsa numtxqueues 2 numrxqueues 2 type veth \
             peer name vb mtu 4200 netns nsb numtxqueues 2 numrxqueues 2"
        );
    }

    fn shaping(shaper: Shaper) -> Shaping {
        Shaping {
            rate_bps: 100_000_000,
            buffer_bytes: 65536,
            shaper,
        }
    }

    #[test]
    fn burst_is_a_millisecond_or_two_frames() {
        // 100 Mbit/s for 1 ms = 12 500 bytes > 2 × 4214.
        assert_eq!(burst_bytes(&shaping(Shaper::Htb), 4200), 12_500);
        let slow = Shaping {
            rate_bps: 1_000_000,
            ..shaping(Shaper::Htb)
        };
        assert_eq!(burst_bytes(&slow, 1500), 2 * 1514);
    }

    #[test]
    fn htb_is_root_class_and_bfifo() {
        let c = shaping_commands("rv2xp0", &shaping(Shaper::Htb), 1500);
        assert_eq!(c.len(), 3);
        assert!(c[1].contains("rate 100000000bit ceil 100000000bit burst 12500"));
        assert!(c[2].ends_with("bfifo limit 65536"));
    }

    #[test]
    fn tbf_limit_is_buffer() {
        let c = shaping_commands("rv2xp0", &shaping(Shaper::Tbf), 1500);
        assert_eq!(
            c,
            ["qdisc add dev rv2xp0 root handle 1: tbf rate 100000000bit burst 12500 limit 65536"]
        );
    }

    #[test]
    fn since_saturates() {
        let a = IfCounters {
            tx_packets: 5,
            ..Default::default()
        };
        let b = IfCounters {
            tx_packets: 3,
            rx_bytes: 7,
            ..Default::default()
        };
        assert_eq!(b.since(&a).tx_packets, 0);
        assert_eq!(b.since(&a).rx_bytes, 7);
    }
}
