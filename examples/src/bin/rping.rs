//! `rping`: rdma-core's RDMA ping over rocev2, connected through the rdma_cm API of
//! `rdmacm_shim::cm` (IB CM MADs on QP1, so a librdmacm `rping` can be the peer).
//!
//! What each ping does, as rdma-core's: the client fills its "start" buffer with
//! `rdma-ping-N: ` and a rotating run of letters and SENDs its address, R_Key and size (the
//! 16-byte big-endian `struct rping_rdma_info`); the server RDMA READs it into its own buffer
//! and SENDs back; the client advertises its "rdma" buffer the same way; the server RDMA
//! WRITEs what it read there and SENDs again; the client compares both buffers (`-V`) and
//! prints the data (`-v`). After `-C` pings the client disconnects; the server then exits, or
//! with `-P` (persistent) waits for the next client, serving each on a QP and thread of its own.
//!
//! Options as rdma-core's (`-s`/`-c`, `-a`, `-p`, `-C`, `-S`, `-v`, `-V`, `-d`, `-P`), plus ours:
//! `--iface` (default: the interface holding `-a` on the server, the route's on the client),
//! `--datapath` and the wait options of the other tools.

use anyhow::{Context, Result, bail};
use clap::Parser;
use rdmacm_shim::cm::{CmId, CmListener};
use rocev2::{AccessFlags, Cq, Device, Mr, Pd, Qp, RecvWr, Rkey, SendOp, SendWr, WorkCompletion};
use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// rping's default port.
const PORT: u16 = 7174;
/// `struct rping_rdma_info`: buf (be64), rkey (be32), size (be32).
const INFO_LEN: usize = 16;
/// rping's smallest buffer: room for `rdma-ping-%d: ` with the largest count.
const MIN_SIZE: u32 = 26;
/// How long a connection step or a completion may take.
const TIMEOUT: Duration = Duration::from_secs(30);

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
const RDMA_WRID: u64 = 3;

#[derive(Parser, Debug)]
#[command(about = "RDMA ping (rdma-core's rping) over rocev2")]
struct Args {
    /// Server side.
    #[arg(short = 's', conflicts_with = "client")]
    server: bool,
    /// Client side.
    #[arg(short = 'c')]
    client: bool,
    /// Address: the server's to listen on, the client's to connect to.
    #[arg(short = 'a')]
    addr: IpAddr,
    /// Port.
    #[arg(short = 'p', default_value_t = PORT)]
    port: u16,
    /// Ping count (default: until interrupted).
    #[arg(short = 'C')]
    count: Option<u32>,
    /// Ping data size in bytes.
    #[arg(short = 'S', default_value_t = 64)]
    size: u32,
    /// Print the ping data.
    #[arg(short = 'v')]
    verbose: bool,
    /// Validate the ping data (client).
    #[arg(short = 'V')]
    validate: bool,
    /// Debug output (on stderr).
    #[arg(short = 'd')]
    debug: bool,
    /// Persistent server: serve connections until killed, each on its own QP and thread, as
    /// rdma-core's `rping -P` (server only).
    #[arg(short = 'P', requires = "server")]
    persistent: bool,
    #[command(flatten)]
    dev: rocev2_examples::CmDeviceArgs,
}

/// A buffer's advertisement, as rping's `struct rping_rdma_info` (big-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RdmaInfo {
    addr: u64,
    rkey: u32,
    size: u32,
}

impl RdmaInfo {
    fn of(mr: &Mr, size: u32) -> RdmaInfo {
        RdmaInfo {
            addr: mr.addr(),
            rkey: mr.rkey().value(),
            size,
        }
    }

    fn to_bytes(self) -> [u8; INFO_LEN] {
        let mut b = [0u8; INFO_LEN];
        b[..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..].copy_from_slice(&self.size.to_be_bytes());
        b
    }

    fn parse(b: &[u8]) -> Result<RdmaInfo> {
        let b: &[u8; INFO_LEN] = b
            .get(..INFO_LEN)
            .and_then(|b| b.try_into().ok())
            .context("short rping_rdma_info")?;
        let word = |r: std::ops::Range<usize>| -> [u8; 4] { b[r].try_into().unwrap_or([0; 4]) };
        Ok(RdmaInfo {
            addr: u64::from_be_bytes(b[..8].try_into().unwrap_or([0; 8])),
            rkey: u32::from_be_bytes(word(8..12)),
            size: u32::from_be_bytes(word(12..16)),
        })
    }
}

/// Ping `ping`'s data, as rping fills its start buffer: `rdma-ping-N: `, then letters from
/// `start` upwards through 'z', wrapping to 'A', and a final NUL.
fn ping_data(ping: u32, start: u8, size: usize) -> Vec<u8> {
    let mut b = format!("rdma-ping-{ping}: ").into_bytes();
    b.truncate(size);
    let mut c = start;
    while b.len() < size {
        b.push(c);
        c = if c >= b'z' { b'A' } else { c + 1 };
    }
    if let Some(last) = b.last_mut() {
        *last = 0;
    }
    b
}

/// The bytes before the first NUL, as C prints a string.
fn c_str(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// The device's objects rping uses.
struct Rping {
    dev: Device,
    pd: Pd,
    qp: Qp,
    cq: Cq,
    recv: Mr,
    send: Mr,
    debug: bool,
    /// Completions taken from the CQ while waiting for another one: the peer's next SEND can
    /// complete in the same pass as the ACK of ours (ACK and answer leave together), and
    /// rdma-core's rping handles every completion as it comes rather than dropping it.
    early: RefCell<Vec<WorkCompletion>>,
}

impl Rping {
    /// Waits for the completion of `wr_id`, keeping the others that arrive first for their own
    /// waits; a failed one is an error.
    fn wait(&self, wr_id: u64) -> Result<WorkCompletion> {
        let mut early = self.early.borrow_mut();
        if let Some(i) = early.iter().position(|wc| wc.wr_id == wr_id) {
            return Ok(early.remove(i));
        }
        let mut wcs = Vec::new();
        loop {
            wcs.clear();
            self.dev.wait_cq(self.cq, &mut wcs, 1, TIMEOUT)?;
            for wc in wcs.drain(..) {
                let wc = rocev2::check(wc)?;
                if self.debug {
                    eprintln!("cq completion: wr_id {} opcode {:?}", wc.wr_id, wc.opcode);
                }
                if wc.wr_id == wr_id {
                    return Ok(wc);
                }
                early.push(wc);
            }
        }
    }

    fn post_recv(&self) -> Result<()> {
        let sge = self.recv.sge(0, INFO_LEN as u32)?;
        self.dev.post_recv(
            self.qp,
            RecvWr {
                wr_id: RECV_WRID,
                sg_list: vec![sge],
            },
        )?;
        Ok(())
    }

    /// Receives the peer's advertisement (and reposts the receive).
    fn recv_info(&self) -> Result<RdmaInfo> {
        self.wait(RECV_WRID)?;
        let info = RdmaInfo::parse(&self.dev.mr_guard(&self.recv)?)?;
        self.post_recv()?;
        if self.debug {
            eprintln!(
                "Received rkey {:x} addr {:x} len {} from peer",
                info.rkey, info.addr, info.size
            );
        }
        Ok(info)
    }

    /// SENDs `info` and waits for its completion.
    fn send_info(&self, info: RdmaInfo) -> Result<()> {
        self.dev.mr_guard(&self.send)?[..INFO_LEN].copy_from_slice(&info.to_bytes());
        let wr = SendWr::new(SEND_WRID, SendOp::Send).sge(self.send.sge(0, INFO_LEN as u32)?);
        self.dev.post_send(self.qp, wr)?;
        self.wait(SEND_WRID)?;
        Ok(())
    }

    /// RDMA READ (or WRITE) `len` bytes between `local` and the peer's advertised buffer.
    fn rdma(&self, read: bool, local: &Mr, peer: RdmaInfo, len: u32) -> Result<()> {
        let (remote_addr, rkey) = (peer.addr, Rkey::new(peer.rkey));
        let op = if read {
            SendOp::Read { remote_addr, rkey }
        } else {
            SendOp::Write { remote_addr, rkey }
        };
        let wr = SendWr::new(RDMA_WRID, op).sge(local.sge(0, len)?);
        self.dev.post_send(self.qp, wr)?;
        self.wait(RDMA_WRID)?;
        Ok(())
    }
}

/// Opens the device and makes the QP and the advertisement buffers.
fn setup(a: &Args) -> Result<Rping> {
    let (iface, dev) = a.dev.open(a.addr, a.server)?;
    if a.debug {
        eprintln!("created cm_id on {iface} ({})", dev.datapath_name());
    }
    objects(dev, a.debug)
}

/// A connection's objects on `dev`: PD, CQ, QP and the advertisement buffers, a receive posted.
fn objects(dev: Device, debug: bool) -> Result<Rping> {
    let pd = dev.alloc_pd()?;
    let cq = dev.create_cq(16)?;
    let qp = dev.create_rc_qp(pd, cq, cq)?;
    let recv = dev.register(pd, vec![0u8; INFO_LEN], AccessFlags::LOCAL_WRITE)?;
    let send = dev.register(pd, vec![0u8; INFO_LEN], AccessFlags::empty())?;
    let r = Rping {
        dev,
        pd,
        qp,
        cq,
        recv,
        send,
        debug,
        early: RefCell::new(Vec::new()),
    };
    r.post_recv()?;
    Ok(r)
}

fn server(a: &Args) -> Result<()> {
    let r = setup(a)?;
    let listener = CmListener::bind(&r.dev, SocketAddr::new(a.addr, a.port))?;
    if a.debug {
        eprintln!("rdma_bind_addr successful");
        eprintln!("rdma_listen");
    }
    let dev = r.dev.clone();
    let mut next = Some(r);
    loop {
        let req = loop {
            // With -d, the engine's drop and CM counters every 10 s while nobody connects.
            let wait = if a.debug { 10 } else { 24 * 3600 };
            match listener.get_request(Duration::from_secs(wait)) {
                Err(rdmacm_shim::cm::CmApiError::Device(rocev2::Error::Timeout)) => {
                    if let Some(e) = dev.engine() {
                        eprintln!("waiting: {:?}", e.stats());
                        eprintln!("waiting: {:?}", e.cm().map(|c| c.stats()));
                    }
                }
                other => break other?,
            }
        };
        if a.debug {
            eprintln!("connect request from {}", req.peer());
        }
        let r = match next.take() {
            Some(r) => r,
            None => objects(dev.clone(), a.debug)?,
        };
        let cm = req.accept(r.qp, &[], TIMEOUT)?;
        if a.debug {
            eprintln!("ESTABLISHED");
        }
        if !a.persistent {
            return serve_conn(&r, cm, a.size, a.verbose, a.debug);
        }
        // rping -P: each connection on its own thread; one that fails ends alone.
        let (size, verbose, debug) = (a.size, a.verbose, a.debug);
        std::thread::spawn(move || {
            if let Err(e) = serve_conn(&r, cm, size, verbose, debug) {
                eprintln!("connection ended: {e:#}");
            }
        });
    }
}

/// Serves one connection until the client disconnects.
fn serve_conn(r: &Rping, cm: CmId, size: u32, verbose: bool, debug: bool) -> Result<()> {
    let rdma = r
        .dev
        .register(r.pd, vec![0u8; size as usize], AccessFlags::LOCAL_WRITE)?;
    loop {
        // The client's start buffer; its disconnect flushes this receive and ends the loop.
        let start = match r.recv_info() {
            Ok(i) => i,
            Err(e) => {
                // What rdma-core's server prints when the client's disconnect ends its wait.
                eprintln!("server DISCONNECT EVENT...");
                eprintln!("wait for RDMA_READ_ADV state 10");
                if debug {
                    eprintln!("server loop ends: {e:#}");
                }
                break;
            }
        };
        let len = start.size.min(size);
        r.rdma(true, &rdma, start, len)?;
        if verbose {
            println!(
                "server ping data: {}",
                c_str(&r.dev.mr_guard(&rdma)?[..len as usize])
            );
        }
        r.send_info(RdmaInfo::of(&rdma, size))?;
        let sink = r.recv_info()?;
        r.rdma(false, &rdma, sink, len.min(sink.size))?;
        r.send_info(RdmaInfo::of(&rdma, size))?;
    }
    // The client disconnected; answer its DREQ if it has not been answered yet.
    let _ = cm.disconnect(TIMEOUT);
    Ok(())
}

fn client(a: &Args) -> Result<()> {
    let r = setup(a)?;
    let size = a.size as usize;
    let start = r
        .dev
        .register(r.pd, vec![0u8; size], AccessFlags::REMOTE_READ)?;
    let rdma = r.dev.register(
        r.pd,
        vec![0u8; size],
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    )?;
    let cm = CmId::connect(&r.dev, r.qp, SocketAddr::new(a.addr, a.port), &[], TIMEOUT)?;
    if a.debug {
        eprintln!("ESTABLISHED");
    }
    let mut letter = b'A';
    let mut ping = 0u32;
    while a.count.is_none_or(|c| ping < c) {
        let data = ping_data(ping, letter, size);
        letter = if letter >= b'z' { b'A' } else { letter + 1 };
        r.dev.mr_guard(&start)?.copy_from_slice(&data);
        r.send_info(RdmaInfo::of(&start, a.size))?;
        // The server read the start buffer.
        r.recv_info()?;
        r.send_info(RdmaInfo::of(&rdma, a.size))?;
        // The server wrote the rdma buffer.
        r.recv_info()?;
        let got = r.dev.mr_guard(&rdma)?.to_vec();
        if a.validate && got != data {
            bail!("data mismatch!");
        }
        if a.verbose {
            println!("ping data: {}", c_str(&got));
        }
        ping += 1;
    }
    cm.disconnect(TIMEOUT)?;
    if a.debug {
        eprintln!("rping client done");
    }
    Ok(())
}

fn main() -> Result<()> {
    let a = Args::parse();
    if a.server == a.client {
        bail!("give -s (server) or -c (client)");
    }
    if a.size < MIN_SIZE {
        bail!("-S {}: at least {MIN_SIZE} bytes", a.size);
    }
    if a.server { server(&a) } else { client(&a) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_data_as_rping_fills_it() {
        let d = ping_data(3, b'y', 20);
        assert_eq!(&d, b"rdma-ping-3: yzABCD\0");
        assert_eq!(c_str(&d), "rdma-ping-3: yzABCD");
    }

    #[test]
    fn rdma_info_is_big_endian() {
        let i = RdmaInfo {
            addr: 0x0102_0304_0506_0708,
            rkey: 0x0a0b_0c0d,
            size: 64,
        };
        let b = i.to_bytes();
        assert_eq!(b[..8], [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(b[8..], [0x0a, 0x0b, 0x0c, 0x0d, 0, 0, 0, 64]);
        assert_eq!(RdmaInfo::parse(&b).unwrap(), i);
        assert!(RdmaInfo::parse(&b[..15]).is_err());
    }
}
