//! Command line of `rocev2d` (clap derive).
//!
//! Deviations: none.

use clap::{Args, Parser, Subcommand};
use rocev2_datapath::Mode;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// rocev2d: a userspace RoCEv2 device on a Linux interface.
#[derive(Debug, Parser)]
#[command(name = "rocev2d", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve an interface until SIGINT or SIGTERM.
    Run(RunArgs),
    /// Print a running daemon's counters.
    Stats(StatsArgs),
    /// List this network namespace's interfaces usable as RoCE devices: GID table (the index
    /// `-g`/`-x` take), MTU, queues, AF_XDP support (probed; needs root), served or not.
    Devices(DevicesArgs),
    /// Make an interface an eBPF switch port (queue model, RED/ECN, faults); stats; detach.
    Switch(crate::switch_cmd::SwitchArgs),
}

/// `rocev2d run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Interface to serve (overrides `iface` in the config file).
    #[arg(long)]
    pub iface: Option<String>,
    /// Datapath: auto (best available), xdp (AF_XDP + steering program, root), packet
    /// (AF_PACKET, CAP_NET_RAW) or udp (sockets).
    #[arg(long)]
    pub datapath: Option<Mode>,
    /// TOML configuration file (see `rocev2d/daemon/src/config.rs` for the keys).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Busy-poll (lowest latency, one core at 100%) instead of the configuration's wait mode
    /// (`[datapath]` `wait`, default adaptive: busy-poll for a while after activity, then sleep).
    #[arg(long)]
    pub busy_poll: bool,
    /// Control socket, where applications attach and `rocev2d stats` asks: a path, or @NAME
    /// for an abstract socket (default @rocev2d/IFACE, abstract and so this network
    /// namespace's; `--stats-socket` is its older name).
    #[arg(long = "socket", visible_alias = "stats-socket")]
    pub stats_socket: Option<PathBuf>,
    /// Engine shards, each its own thread, rx queue k, QPN block k and CM (overrides
    /// `[datapath] queues`; default 1, one engine). 0: one per rx queue of the interface.
    /// Applications are placed on the shard with the fewest attachments; frames and CM
    /// messages that reach the wrong shard are handed to their owner (xdp or packet datapath).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub queues: Option<u32>,
    /// Serve Prometheus metrics over HTTP at this address (e.g. 127.0.0.1:9464); overrides
    /// `[stats] metrics`.
    #[arg(long)]
    pub metrics: Option<SocketAddr>,
}

/// `rocev2d stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Print JSON instead of text.
    #[arg(long, conflicts_with = "prometheus")]
    pub json: bool,
    /// Print the Prometheus text format instead of text (e.g. for node_exporter's textfile
    /// collector).
    #[arg(long, conflicts_with = "watch")]
    pub prometheus: bool,
    /// Print live rates every SECONDS (default 1) until interrupted: packets and Gbit/s each
    /// way, drops per second by reason, and per QP its packet rates, controller's rate and (with
    /// several engine shards) its shard.
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "1",
          conflicts_with = "json", value_parser = parse_interval)]
    pub watch: Option<Duration>,
    /// The daemon serving this interface in this network namespace (its socket is
    /// @rocev2d/IFACE).
    #[arg(long)]
    pub iface: Option<String>,
    /// The daemon's control socket (a path, or @NAME); default: the only daemon's in this
    /// network namespace.
    #[arg(long)]
    pub socket: Option<PathBuf>,
}

/// `rocev2d devices`.
#[derive(Debug, Args)]
pub struct DevicesArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `--watch`'s interval: 0.1 to 3600 seconds.
fn parse_interval(s: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.1..=3600.0).contains(&v) => Ok(Duration::from_secs_f64(v)),
        _ => Err(format!("{s:?}: seconds from 0.1 to 3600")),
    }
}
