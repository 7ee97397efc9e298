//! The exchange both `ibv_*_pingpong` examples run once their QPs are set up (`rc_pingpong`,
//! `ud_pingpong`): the client posts the first SEND; each side posts its next SEND only when
//! its previous SEND and the RECV it waited for have both completed, and tops the receive
//! queue up when at most one RECV is left, as rdma-core's `ibv_rc_pingpong` and
//! `ibv_ud_pingpong` do. What differs between the two (how a SEND is addressed, the receive
//! buffer, the latency record) comes in as closures, so the rule lives here once.

use anyhow::{Context as _, Result, bail};
use rdmacm_shim::oob;
use rocev2::{Cq, Device, DeviceConfig, WcStatus};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Work request id of every RECV.
pub const RECV_WRID: u64 = 1;
/// Work request id of every SEND.
pub const SEND_WRID: u64 = 2;

/// The options both pingpongs take as rdma-core's do (`-p`, `-d`, `-i`, `-r`, `-n`, `-l`, `-e`,
/// `-g`, the server's name), plus ours ([`crate::DeviceArgs`]: `--datapath`, the wait
/// options, `--attach`…); each tool adds its own `-s` and the rest.
#[derive(clap::Args, Debug)]
pub struct PingPongArgs {
    /// Listen on / connect to TCP port.
    #[arg(short = 'p', long = "port", default_value_t = oob::DEFAULT_PORT)]
    pub port: u16,
    /// Ethernet interface (rdma-core: IB device); default: the first one that opens.
    #[arg(short = 'd', long = "ib-dev")]
    pub dev: Option<String>,
    /// Port of the device (ignored: one port per interface).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u32,
    /// Number of receives to post at a time.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    pub rx_depth: u32,
    /// Number of exchanges.
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    pub iters: u32,
    /// Service level (ignored).
    #[arg(short = 'l', long = "sl", default_value_t = 0)]
    pub sl: u32,
    /// Sleep on CQ events (accepted; the CQ is polled).
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// Local port GID index, in rdma_rxe's order: 0 the link-local default GID, 1 the first
    /// IPv4-mapped address (docs/datapath.md, "GID table").
    #[arg(short = 'g', long = "gid-idx")]
    pub gid_idx: Option<usize>,
    /// The datapath, in-process or attached, and the wait mode.
    #[command(flatten)]
    pub device: crate::DeviceArgs,
    /// Server to connect to; none: be the server.
    pub servername: Option<String>,
}

impl PingPongArgs {
    /// Opens `-d` (or the first interface that opens) with the datapath and wait options.
    ///
    /// # Errors
    /// No interface opens.
    pub fn open(&self) -> Result<Device> {
        self.device
            .open_or_first(self.dev.as_deref(), DeviceConfig::default())
    }

    /// The TCP stream of the out-of-band exchange: the first connection to `-p` on the
    /// server, the connection to the server's `-p` on the client.
    ///
    /// # Errors
    /// The port cannot be bound, the name not resolved, or the server not reached.
    pub fn exchange_stream(&self) -> Result<TcpStream> {
        let port = self.port;
        match &self.servername {
            None => Ok(crate::listen(port)?.accept()?.0),
            Some(host) => {
                let addrs: Vec<_> = (host.as_str(), port)
                    .to_socket_addrs()
                    .with_context(|| format!("resolving {host}"))?
                    .collect();
                TcpStream::connect(&addrs[..])
                    .with_context(|| format!("couldn't connect to {host}:{port}"))
            }
        }
    }
}

/// A side without a completion for this long gives up (rdma-core would wait forever).
const WAIT: Duration = Duration::from_secs(30);

/// One side's ping-pong loop over `cq`.
pub struct PingPong<'a> {
    /// The device the QP lives on.
    pub dev: &'a Device,
    /// The CQ of both the QP's queues.
    pub cq: Cq,
    /// SENDs and RECVs each side completes.
    pub iters: u32,
    /// RECVs kept posted (`-r`).
    pub rx_depth: u32,
    /// Completions taken per wait.
    pub batch: usize,
    /// Said when no completion came within the wait.
    pub wait_context: &'static str,
}

impl PingPong<'_> {
    /// Runs the loop to `iters` SENDs and RECVs. `client` sends first; `routs` RECVs are
    /// already posted; `post_recvs(n)` posts `n` more and returns how many; `on_recv` runs at
    /// each RECV completion.
    ///
    /// # Errors
    /// A completion in error (rdma-core's `Failed status` line), an unknown work request id,
    /// no completion within 30 s, or a refused post.
    pub fn run(
        &self,
        client: bool,
        mut routs: u32,
        mut post_send: impl FnMut() -> Result<()>,
        mut post_recvs: impl FnMut(u32) -> Result<u32>,
        mut on_recv: impl FnMut(),
    ) -> Result<()> {
        let mut pending = RECV_WRID;
        if client {
            post_send()?;
            pending |= SEND_WRID;
        }
        let (mut rcnt, mut scnt) = (0u32, 0u32);
        let mut wcs = Vec::new();
        while rcnt < self.iters || scnt < self.iters {
            wcs.clear();
            self.dev
                .wait_cq(self.cq, &mut wcs, self.batch, WAIT)
                .context(self.wait_context)?;
            for wc in &wcs {
                if wc.status != WcStatus::Success {
                    bail!(
                        "Failed status {:?} ({}) for wr_id {}",
                        wc.status,
                        wc.status as u32,
                        wc.wr_id
                    );
                }
                match wc.wr_id {
                    SEND_WRID => scnt += 1,
                    RECV_WRID => {
                        routs -= 1;
                        if routs <= 1 {
                            routs += post_recvs(self.rx_depth - routs)?;
                        }
                        rcnt += 1;
                        on_recv();
                    }
                    other => bail!("Completion for unknown wr_id {other}"),
                }
                pending &= !wc.wr_id;
                if scnt < self.iters && pending == 0 {
                    post_send()?;
                    pending = RECV_WRID | SEND_WRID;
                }
            }
        }
        Ok(())
    }
}
