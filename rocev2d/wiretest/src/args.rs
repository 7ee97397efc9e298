//! Command line of `rocev2-wiretest` (clap derive). Both sides take the same flags; the ones
//! that size buffers (`--bulk-mib`, `--bulk-kib`) or pick the scheme (`--config`) must agree.
//!
//! Deviations: none.

use crate::workload::Workload;
use clap::Parser;
use rocev2_datapath::Mode;
use std::net::SocketAddr;
use std::path::PathBuf;

/// rocev2-wiretest: one RC QP against another rocev2-wiretest, with a self-checking workload on
/// the wire.
#[derive(Debug, Parser)]
#[command(name = "rocev2-wiretest", version, about)]
pub struct Args {
    /// Interface carrying the RoCEv2 traffic.
    #[arg(long)]
    pub iface: String,
    /// Datapath: auto, xdp, packet or udp.
    #[arg(long, default_value = "auto")]
    pub datapath: Mode,
    /// Serve: listen for the client's TCP connection on this port.
    #[arg(long, conflicts_with = "connect", required_unless_present = "connect")]
    pub listen: Option<u16>,
    /// Serve: take this many clients, each a QP in this one endpoint (an incast's receiver);
    /// exit once all have quit.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub qps: u32,
    /// Act: before the workload, wait until all of the server's `--qps` clients have connected
    /// (so the transfers of an incast start together).
    #[arg(long)]
    pub wait_for_all: bool,
    /// Act: connect to the server's TCP address.
    #[arg(long)]
    pub connect: Option<SocketAddr>,
    /// The client's workload.
    #[arg(long, value_enum, default_value = "verbs")]
    pub workload: Workload,
    /// MiB moved by `bulk`, `mix` and `flood` (both sides must agree: it sizes the buffers).
    #[arg(long, default_value_t = 64)]
    pub bulk_mib: u64,
    /// KiB moved by `bulk`, `mix` and `flood`, instead of `--bulk-mib`: a transfer that takes
    /// seconds behind a congested queue moves less than a MiB.
    #[arg(long, conflicts_with = "bulk_mib", value_parser = clap::value_parser!(u64).range(1..=1 << 24))]
    pub bulk_kib: Option<u64>,
    /// Size of each message of `bulk`, `mix` and `flood` (short messages exercise IOFD).
    #[arg(long, default_value_t = 4 << 20, value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    pub msg_bytes: u64,
    /// Use the interface's IPv6 address as GID instead of its IPv4 address.
    #[arg(long)]
    pub ipv6: bool,
    /// Offer MP-RDMA multipath mode; used only if the peer offers it too.
    #[arg(long)]
    pub multipath: bool,
    /// Virtual paths (UDP source ports from 49152) of a multipath QP.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=16384))]
    pub vps: u16,
    /// Local ACK timeout code (4.096 us * 2^code).
    #[arg(long, default_value_t = 14)]
    pub timeout: u8,
    /// Retry count after timeouts and sequence NAKs.
    #[arg(long, default_value_t = 7)]
    pub retry_cnt: u8,
    /// UDP datapath: accept IPv4 frames whose ICRC cannot be verified (see `udp.rs`).
    #[arg(long)]
    pub accept_unverified_icrc: bool,
    /// UDP datapath: send runs of equal IPv6 datagrams as one `UDP_SEGMENT` entry (GSO; the
    /// default, so this only undoes an earlier --no-udp-gso).
    #[arg(long, overrides_with = "no_udp_gso")]
    pub udp_gso: bool,
    /// UDP datapath: send each datagram as its own `sendmmsg` entry (no GSO).
    #[arg(long, overrides_with = "udp_gso")]
    pub no_udp_gso: bool,
    /// UDP datapath: do not take coalesced receive buffers (`UDP_GRO`).
    #[arg(long)]
    pub no_udp_gro: bool,
    /// Busy-poll (one core at 100%) instead of the configuration's wait mode (`[datapath]`
    /// `wait`, default adaptive: busy-poll for a while after activity, then sleep).
    #[arg(long)]
    pub busy_poll: bool,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 120)]
    pub deadline_secs: u64,
    /// A `rocev2d run` configuration file whose `[cc]` section chooses the QP's congestion
    /// control (both peers should use the same scheme) and whose `[datapath]` `wait` and
    /// `spin_us` keys how the driver waits.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Put this many IOFD deflection tokens (1..=63) on the packets of SEND/WRITE messages of
    /// at most `--iofd-max-msg` bytes (seed 000 §IV-A; docs/switch.md). Off by default.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=63))]
    pub iofd_tokens: Option<u8>,
    /// Largest message that gets `--iofd-tokens`.
    #[arg(long, default_value_t = 8192)]
    pub iofd_max_msg: u32,
}

impl Args {
    /// Bytes moved by `bulk`, `mix` and `flood`: `--bulk-kib` or `--bulk-mib`.
    pub fn bulk_bytes(&self) -> u64 {
        self.bulk_kib.map_or(self.bulk_mib << 20, |kib| kib << 10)
    }
}

#[cfg(test)]
mod tests {
    use super::Args;
    use clap::Parser;

    fn parse(extra: &[&str]) -> Result<Args, clap::Error> {
        let base = ["rocev2-wiretest", "--iface", "eth0", "--listen", "18515"];
        Args::try_parse_from(base.iter().chain(extra))
    }

    #[test]
    fn bulk_size_is_mib_or_kib_never_both() {
        assert_eq!(parse(&[]).unwrap().bulk_bytes(), 64 << 20);
        assert_eq!(parse(&["--bulk-mib", "3"]).unwrap().bulk_bytes(), 3 << 20);
        assert_eq!(
            parse(&["--bulk-kib", "128"]).unwrap().bulk_bytes(),
            128 << 10
        );
        assert!(parse(&["--bulk-kib", "128", "--bulk-mib", "1"]).is_err());
        assert!(parse(&["--bulk-kib", "0"]).is_err());
    }
}
