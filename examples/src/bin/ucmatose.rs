//! `ucmatose`: rdma-core's rdma_cm connection test over rocev2, connected through the rdma_cm
//! API of `rdmacm_shim::cm` (IB CM MADs on QP1, so a librdmacm `ucmatose` can be the peer).
//!
//! What it does, as rdma-core's: the server listens (port 7471 unless `-p`) and accepts `-c`
//! connections, each with its own RC QP that has `-C` receives of `-S` bytes posted before the
//! REP leaves, and no private data; once all are established it SENDs `-C` messages on each,
//! waits for their completions, then for the client's `-C` replies, and disconnects every
//! connection. The client connects `-c` QPs to `-s` (receives posted before the REQ, no user
//! private data), waits for the server's messages, SENDs as many back and waits until the
//! server disconnects. Both print the progress lines rdma-core's prints, then `test complete`
//! and `return status 0`.
//!
//! Ours also checks what rdma-core's does not: every receive completes successfully with `-S`
//! bytes. The messages carry a pattern (byte `i` of message `m` is `m + i`), not checked, as
//! rdma-core's sends whatever its buffer holds.
//!
//! Options as rdma-core's `-s`, `-b`, `-c`, `-C`, `-S`, `-p` (RDMA_PS_TCP, IP addresses only:
//! no `-P`, `-f`, `-t`, `-m`), plus ours: `--iface` (default: the interface holding `-b` on
//! the server, the route's to `-s` on the client), `--datapath` and the wait options of the
//! other tools.

use anyhow::{Result, bail};
use clap::Parser;
use rdmacm_shim::cm::{CmId, CmListener};
use rocev2::{AccessFlags, Cq, Device, Mr, Qp, RecvWr, SendOp, SendWr};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// ucmatose's default port.
const PORT: u16 = 7471;
/// How long a connection step or a batch of completions may take.
const TIMEOUT: Duration = Duration::from_secs(30);
/// Work requests a QP of `Device::create_rc_qp` holds per queue.
const MAX_COUNT: u32 = 500;

#[derive(Parser, Debug)]
#[command(about = "rdma_cm connection test (rdma-core's ucmatose) over rocev2")]
struct Args {
    /// Server address: connect to it (client); without it, serve.
    #[arg(short = 's')]
    server: Option<IpAddr>,
    /// Bind address: the server's to listen on (default: any address of `--iface`).
    #[arg(short = 'b')]
    bind: Option<IpAddr>,
    /// Connections.
    #[arg(short = 'c', default_value_t = 1)]
    connections: u32,
    /// Messages each way per connection.
    #[arg(short = 'C', default_value_t = 10)]
    count: u32,
    /// Message size in bytes (0: no messages).
    #[arg(short = 'S', default_value_t = 100)]
    size: u32,
    /// Port.
    #[arg(short = 'p', default_value_t = PORT)]
    port: u16,
    #[command(flatten)]
    dev: rocev2_examples::CmDeviceArgs,
}

impl Args {
    /// Messages per connection: none when they would be empty, as rdma-core's.
    fn messages(&self) -> u32 {
        if self.size == 0 { 0 } else { self.count }
    }
}

/// One connection's QP, CQs and message buffer (rdma-core's `struct cmatest_node`).
struct Node {
    qp: Qp,
    send_cq: Cq,
    recv_cq: Cq,
    mem: Mr,
}

impl Node {
    /// Makes the QP and its buffer and posts the receives, before connecting or accepting.
    fn new(dev: &Device, a: &Args) -> Result<Node> {
        let pd = dev.alloc_pd()?;
        let depth = a.messages().max(1) as usize;
        let send_cq = dev.create_cq(depth)?;
        let recv_cq = dev.create_cq(depth)?;
        let qp = dev.create_rc_qp(pd, send_cq, recv_cq)?;
        let mem = dev.register(
            pd,
            vec![0u8; a.size.max(1) as usize],
            AccessFlags::LOCAL_WRITE,
        )?;
        let n = Node {
            qp,
            send_cq,
            recv_cq,
            mem,
        };
        for m in 0..a.messages() {
            dev.post_recv(
                n.qp,
                RecvWr {
                    wr_id: u64::from(m),
                    sg_list: vec![n.mem.sge(0, a.size)?],
                },
            )?;
        }
        Ok(n)
    }

    /// SENDs `-C` messages of `-S` bytes, each signalled.
    fn post_sends(&self, dev: &Device, a: &Args) -> Result<()> {
        for m in 0..a.messages() {
            {
                let mut b = dev.mr_guard(&self.mem)?;
                for (i, x) in b.iter_mut().enumerate() {
                    *x = (m as usize + i) as u8;
                }
            }
            let wr = SendWr::new(u64::from(m), SendOp::Send).sge(self.mem.sge(0, a.size)?);
            dev.post_send(self.qp, wr)?;
        }
        Ok(())
    }

    /// Waits for `-C` successful completions on `cq`; receives must carry `-S` bytes.
    fn complete(&self, dev: &Device, a: &Args, cq: Cq) -> Result<()> {
        let mut done = 0;
        let mut wcs = Vec::new();
        while done < a.messages() {
            wcs.clear();
            dev.wait_cq(cq, &mut wcs, 8, TIMEOUT)?;
            for wc in wcs.drain(..) {
                let wc = rocev2::check(wc)?;
                if cq == self.recv_cq && wc.byte_len != a.size {
                    bail!("received {} bytes, want {}", wc.byte_len, a.size);
                }
                done += 1;
            }
        }
        Ok(())
    }
}

/// Opens the device on the interface for `addr`.
fn open(a: &Args, addr: IpAddr, local: bool) -> Result<Device> {
    Ok(a.dev.open(addr, local)?.1)
}

fn run_server(a: &Args) -> Result<()> {
    println!("cmatose: starting server");
    let (dev, addr) = match (a.bind, &a.dev.iface) {
        (Some(b), _) => (open(a, b, true)?, b),
        (None, Some(_)) => {
            let dev = open(a, IpAddr::from([0, 0, 0, 0]), true)?;
            let ip = dev.source_ip(false)?;
            (dev, ip)
        }
        (None, None) => bail!("give -b (bind address) or --iface"),
    };
    let listener = CmListener::bind(&dev, SocketAddr::new(addr, a.port))?;
    let mut conns = Vec::new();
    for _ in 0..a.connections {
        let req = listener.get_request(Duration::from_secs(24 * 3600))?;
        let node = Node::new(&dev, a)?;
        let id = req.accept(node.qp, &[], TIMEOUT)?;
        conns.push((node, id));
    }
    if a.messages() > 0 {
        println!("initiating data transfers");
        for (n, _) in &conns {
            n.post_sends(&dev, a)?;
        }
        println!("completing sends");
        for (n, _) in &conns {
            n.complete(&dev, a, n.send_cq)?;
        }
        println!("receiving data transfers");
        for (n, _) in &conns {
            n.complete(&dev, a, n.recv_cq)?;
        }
        println!("data transfers complete");
    }
    println!("cmatose: disconnecting");
    for (_, id) in conns {
        id.disconnect(TIMEOUT)?;
    }
    println!("disconnected");
    Ok(())
}

fn run_client(a: &Args, server: IpAddr) -> Result<()> {
    println!("cmatose: starting client");
    let dev = open(a, server, false)?;
    println!("cmatose: connecting");
    let mut conns = Vec::new();
    for _ in 0..a.connections {
        let node = Node::new(&dev, a)?;
        let id = CmId::connect(&dev, node.qp, SocketAddr::new(server, a.port), &[], TIMEOUT)?;
        conns.push((node, id));
    }
    if a.messages() > 0 {
        println!("receiving data transfers");
        for (n, _) in &conns {
            n.complete(&dev, a, n.recv_cq)?;
        }
        println!("sending replies");
        for (n, _) in &conns {
            n.post_sends(&dev, a)?;
        }
        println!("data transfers complete");
    }
    // The server disconnects once it has every reply.
    for (_, id) in &conns {
        id.wait_disconnect(TIMEOUT)?;
    }
    Ok(())
}

fn main() -> Result<()> {
    let a = Args::parse();
    if a.messages() > MAX_COUNT {
        bail!("-C {}: at most {MAX_COUNT} messages", a.count);
    }
    let r = match a.server {
        Some(s) => run_client(&a, s),
        None => run_server(&a),
    };
    println!("test complete");
    match r {
        Ok(()) => {
            println!("return status 0");
            Ok(())
        }
        Err(e) => {
            println!("return status 1");
            Err(e)
        }
    }
}
