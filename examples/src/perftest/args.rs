//! perftest's command line (`perftest_parameters.c`: `usage`, `parser`, `force_dependecies`),
//! the part rocev2 implements, and the settings derived from it.

use super::{Kind, Test, Verb};
use anyhow::{Result, bail};

/// `MAX_SIZE`: the largest message, and the buffer of `-a`.
pub const MAX_SIZE: u64 = 8 << 20;
/// `MIN_ITER`: a latency report needs a few samples beyond the two dropped.
const MIN_ITER: u64 = 5;
/// `MSG_SIZE_CQ_MOD_LIMIT`: above it CQ moderation is off unless asked for.
const MSG_SIZE_CQ_MOD_LIMIT: u64 = 8192;
/// Outstanding READs our responder accepts (the engine's maximum).
pub const MAX_OUT_READS: u16 = 16;

/// perftest's flags, as `ib_write_bw --help` lists them; the ones rocev2 cannot honour are
/// parsed so they can be refused by name.
#[derive(clap::Parser, Debug)]
#[command(disable_version_flag = true)]
pub struct Args {
    /// Listen on / connect to port.
    #[arg(short = 'p', long = "port", default_value_t = rdmacm_shim::perftest::DEFAULT_PORT)]
    pub port: u16,
    /// Ethernet interface (perftest: IB device).
    #[arg(short = 'd', long = "ib-dev")]
    pub dev: String,
    /// Port of the device (only 1: one port per interface).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// MTU size: 256 - 4096 (default: the interface's).
    #[arg(short = 'm', long = "mtu")]
    pub mtu: Option<u32>,
    /// Size of message to exchange (default 65536 for bw, 2 for lat).
    #[arg(short = 's', long = "size")]
    pub size: Option<u64>,
    /// Number of exchanges (at least 5; default 5000 for write bw, else 1000).
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<u64>,
    /// Size of tx queue (default 128 for bw, 1 for lat).
    #[arg(short = 't', long = "tx-depth")]
    pub tx_depth: Option<u32>,
    /// Rx queue size of the send tests (default 512).
    #[arg(short = 'r', long = "rx-depth")]
    pub rx_depth: Option<u32>,
    /// Test uses GID with this index: the interface's GID table, laid out as rdma_rxe's
    /// (0 link-local, 1 the first IPv4-mapped address); default: the first IPv4 address.
    #[arg(short = 'x', long = "gid-index")]
    pub gid_index: Option<usize>,
    /// Run sizes from 2 till 2^23.
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Do not fail even if cpufreq_ondemand module is loaded (accepted; no effect).
    #[arg(short = 'F', long = "CPU-freq")]
    pub cpu_freq: bool,
    /// Connection type RC (only RC).
    #[arg(short = 'c', long = "connection", default_value = "RC")]
    pub connection: String,
    /// Num of qp's (only 1).
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub qps: u32,
    /// Generate a completion every N messages (bw tests; default 100).
    #[arg(short = 'Q', long = "cq-mod")]
    pub cq_mod: Option<u32>,
    /// Number of outstanding reads (read tests; default and maximum 16).
    #[arg(short = 'o', long = "outs")]
    pub outs: Option<u16>,
    /// Max size of message to be sent in inline (accepted; rocev2 copies every payload).
    #[arg(short = 'I', long = "inline_size")]
    pub inline_size: Option<u32>,
    /// Sleep on CQ events (accepted; the CQ is polled).
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// Cancel peak-bw calculation.
    #[arg(short = 'N', long = "noPeak")]
    pub no_peak: bool,
    /// Report throughput in Gb/s instead of MB/s.
    #[arg(long = "report_gbits")]
    pub report_gbits: bool,
    /// Run test for a customized period of seconds (NOT IMPLEMENTED).
    #[arg(short = 'D', long = "duration")]
    pub duration: Option<u32>,
    /// Connect QPs with rdma_cm (NOT IMPLEMENTED: the QPs connect through perftest's TCP exchange).
    #[arg(short = 'R', long = "rdma_cm")]
    pub rdma_cm: bool,
    /// Bidirectional test (NOT IMPLEMENTED).
    #[arg(short = 'b', long = "bidirectional")]
    pub bidirectional: bool,
    /// Display version number.
    #[arg(short = 'V', long = "version")]
    pub version: bool,
    /// The datapath, in-process or attached, and the wait mode. Ours.
    #[command(flatten)]
    pub device: crate::DeviceArgs,
    /// Check the data the bw tests moved (both sides must be rocev2's, started with it).
    #[arg(long = "check", hide = true)]
    pub check: bool,
    /// Server to connect to; none: be the server.
    pub servername: Option<String>,
}

/// The settings of one run, after perftest's defaults and `force_dependecies`.
#[derive(Debug, Clone)]
pub struct Params {
    /// Message sizes, one run each (one, or 2..2^23 with `-a`).
    pub sizes: Vec<u64>,
    /// Messages per size.
    pub iters: u64,
    /// Send queue depth.
    pub tx_depth: u32,
    /// Receives kept posted (send tests).
    pub rx_depth: u32,
    /// A signaled send every `cq_mod` (bw tests).
    pub cq_mod: u32,
    /// Outstanding READs we accept as responder (read tests), else 1 as perftest sends.
    pub out_reads: u16,
}

impl Args {
    /// Refuses what rocev2 does not implement and derives the run's settings.
    ///
    /// # Errors
    /// A sentence naming the flag.
    pub fn params(&self, t: Test) -> Result<Params> {
        if self.rdma_cm {
            bail!(
                "-R/--rdma_cm: not implemented (the QPs connect through perftest's TCP exchange; \
                 rdma_cm itself works: rping, ucmatose)"
            );
        }
        if self.duration.is_some() {
            bail!("-D/--duration: not implemented (iterations only, -n)");
        }
        if self.bidirectional {
            bail!("-b/--bidirectional: not implemented");
        }
        if self.qps != 1 {
            bail!("-q {}: only one QP is implemented", self.qps);
        }
        if !self.connection.eq_ignore_ascii_case("RC") {
            bail!("-c {}: only RC is implemented", self.connection);
        }
        if self.ib_port != 1 {
            bail!("-i {}: an interface has one port, 1", self.ib_port);
        }
        let size = self.size.unwrap_or(match t.kind {
            Kind::Bw => 65536,
            Kind::Lat => 2,
        });
        if size == 0 || size > MAX_SIZE {
            bail!("-s {size}: 1 to {MAX_SIZE}");
        }
        let iters = self.iters.unwrap_or(match (t.kind, t.verb) {
            (Kind::Bw, Verb::Write) => 5000,
            _ => 1000,
        });
        if iters < MIN_ITER {
            bail!("-n {iters}: at least {MIN_ITER}");
        }
        let sizes = if self.all {
            (1..24).map(|i| 1u64 << i).collect()
        } else {
            vec![size]
        };
        let tx_depth = self
            .tx_depth
            .unwrap_or(match t.kind {
                Kind::Bw => 128,
                Kind::Lat => 1,
            })
            .max(1);
        let tx_depth = u64::from(tx_depth).min(iters) as u32;
        let rx_depth = u64::from(self.rx_depth.unwrap_or(512).max(1)).min(iters) as u32;
        // force_dependecies: no CQ moderation for large messages unless asked, never above
        // the tx depth.
        let cq_mod = match self.cq_mod {
            Some(q) => q.max(1),
            None if size > MSG_SIZE_CQ_MOD_LIMIT && !self.all => 1,
            None => 100,
        }
        .min(tx_depth);
        let out_reads = match t.verb {
            Verb::Read => self.outs.unwrap_or(MAX_OUT_READS).clamp(1, MAX_OUT_READS),
            _ => 1,
        };
        Ok(Params {
            sizes,
            iters,
            tx_depth,
            rx_depth,
            cq_mod,
            out_reads,
        })
    }
}
