//! `dp_pingpong`: the datapath's own round trip, without the engine: the floor under
//! `rc_pingpong --busy-poll`.
//!
//! Both sides open the datapath (`--datapath xdp|packet|udp`) as the engine would, build one
//! UD SEND Only frame of `size` payload bytes to the other once, then bounce it `iters` times,
//! each side busy-polling its datapath as `--poll spin` does (`recv_with` back to back, a
//! `sched_yield` after each empty poll: `rocev2_datapath::driver` says why) and sending its
//! frame as soon as one arrives. No QP, no PSN, no ICRC check, no completion: what
//! is left is the kernel's path (the `sendto` kick, veth, the steering program, the copy into
//! the UMEM in copy mode) and the datapath's rings. `rc_pingpong`'s busy-polled round trip
//! minus this one is what the stack adds (BENCHMARKS.md, `deploy/bench/pingpong-vs-tcp.sh`).
//!
//! `--acks` adds RC's other two frames: an RC responder acknowledges each message, and
//! `rc_pingpong` (as rdma-core's) posts its next SEND only once its previous one is acknowledged
//! and the peer's has arrived. With `first`, each side sends a small frame (the ACK) as soon as
//! the peer's message arrives, then its own message when it may (the engine's order today: the
//! ACK leaves in the pass that received, before the application posts the answer); with `last`,
//! the answer leaves first and the ACK right behind it in the same `send`, and an ACK whose
//! answer must wait leaves at once. In copy mode the sender's `sendto` carries each frame through
//! veth and the peer's steering program, so the order decides what waits for what.
//!
//! The server listens on TCP port `-p` (default 18517) for the client's connection, which
//! says the datapath is open and gives each side the other's address; MACs come from the
//! neighbour table (resolved if missing). Prints the same round-trip and CPU lines as the
//! ping-pongs (`rocev2_examples::print_round_trips`, `print_cpu`).
//!
//! Deviations: none (not modelled on an existing tool).

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use rocev2_core::wire::{
    BthRepr, DethRepr, EthRepr, FrameRepr, IpRepr, Opcode, Operation, Psn, Qpn, ROCEV2_UDP_PORT,
    RoceRepr, Transport, UdpRepr, frame::Ecn,
};
use rocev2_datapath::auto::{self, Mode, Options};
use rocev2_datapath::{Datapath, Interface, RxBatch, TxBatch, neigh};
use std::io::Read;
use std::net::{IpAddr, TcpStream};
use std::time::{Duration, Instant};

/// Ping-pong one raw RoCEv2 frame through a rocev2 datapath, without the engine.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Interface to open.
    #[arg(short = 'd', long = "ib-dev")]
    iface: String,
    /// Datapath: xdp (AF_XDP, root), packet (AF_PACKET) or udp.
    #[arg(long = "datapath", default_value = "xdp")]
    datapath: Mode,
    /// Payload bytes of the frame (a UD SEND Only: BTH and DETH before it).
    #[arg(short = 's', long = "size", default_value_t = 64)]
    size: usize,
    /// Round trips.
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    iters: u32,
    /// RC's acknowledgements: none, first (before the answer) or last (after it).
    #[arg(long = "acks", value_enum, default_value_t = Acks::None)]
    acks: Acks,
    /// TCP port of the set-up connection.
    #[arg(short = 'p', long = "port", default_value_t = 18517)]
    port: u16,
    /// Server to connect to; none: be the server.
    servername: Option<IpAddr>,
}

/// Where each side's acknowledgement of the peer's message goes; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Acks {
    /// Two frames per round trip, no acknowledgements.
    None,
    /// Acknowledge on arrival, answer when allowed.
    First,
    /// Answer, then acknowledge, when the answer may leave at once.
    Last,
}

/// The UD QP number both frames name; nothing receives on it but this tool.
const QPN: Qpn = Qpn::new(0x00ab_cdef);
/// How long the client waits for an answer before sending its frame again (a lost frame).
const RESEND: Duration = Duration::from_millis(200);

fn main() -> Result<()> {
    let a = Args::parse();
    let iface = Interface::by_name(&a.iface).with_context(|| format!("interface {}", a.iface))?;
    let opened = auto::open(&iface, a.datapath, &Options::default())
        .with_context(|| format!("opening the {} datapath on {}", a.datapath, a.iface))?;
    eprintln!("dp_pingpong: {}", opened.reason);
    let mut dp = opened.datapath;
    // The set-up connection: the client's arrival says the server's datapath is open; its
    // addresses are the two ends' IPs. It stays open until the client is done.
    let mut ctl = match a.servername {
        None => rocev2_examples::listen(a.port)?.accept()?.0,
        Some(ip) => TcpStream::connect((ip, a.port))
            .with_context(|| format!("connecting to {ip}:{}", a.port))?,
    };
    let local = ctl.local_addr()?.ip().to_canonical();
    let peer = ctl.peer_addr()?.ip().to_canonical();
    let peer_mac = neigh::resolve(&iface, peer, Duration::from_secs(3))
        .with_context(|| format!("the MAC of {peer}"))?;
    if a.acks != Acks::None && a.size == 0 {
        bail!("--acks needs -s 1 or more: an acknowledgement is told from a message by its length");
    }
    let message = frame(iface.mac, peer_mac, local, peer, a.size)?;
    let ack = frame(iface.mac, peer_mac, local, peer, 0)?;
    // What arrives: the frame, or (datagram datapaths) its UDP payload, BTH onwards.
    let kind = |len: usize| {
        let is = |f: &[u8]| len == f.len() || len == f.len() - headers_len(local);
        (is(&message), is(&ack))
    };
    let mut rx = RxBatch::new(64);
    let mut tx = TxBatch::new(2);
    let mut rtts = Vec::with_capacity(a.iters as usize);
    let (mut resent, mut wrong) = (0u64, 0u64);
    let client = a.servername.is_some();
    // `acked`: our last message was acknowledged (or needs no acknowledgement); `answer`: the
    // peer's message is not answered yet; `owed`: nor acknowledged.
    let (mut acked, mut answer, mut owed) = (true, false, false);
    let start = Instant::now();
    let cpu_start = rocev2_examples::cpu_time();
    if client {
        send(&mut *dp, &mut tx, &[&message])?;
        acked = a.acks == Acks::None;
    }
    let mut t = Instant::now();
    // The client stops at its last answer; the server once it has answered every message
    // (its last answer may have to wait for the acknowledgement of the one before).
    let (n, mut answered) = (a.iters as usize, 0);
    while (client && rtts.len() < n) || (!client && answered < n) {
        let (mut messages, mut acks) = (0, 0);
        dp.recv_with(&mut rx, &mut |bytes, _| match kind(bytes.len()) {
            (true, _) => messages += 1,
            (_, true) => acks += 1,
            _ => wrong += 1,
        })?;
        if messages > 0 {
            let now = Instant::now();
            rtts.push(now - t);
            t = now;
            answer = true;
            owed = a.acks != Acks::None;
        }
        acked |= acks > 0;
        if client && rtts.len() == n {
            break;
        }
        if owed && (a.acks == Acks::First || !(answer && acked)) {
            send(&mut *dp, &mut tx, &[&ack])?;
            owed = false;
        }
        if answer && acked {
            if owed {
                send(&mut *dp, &mut tx, &[&message, &ack])?;
            } else {
                send(&mut *dp, &mut tx, &[&message])?;
            }
            (answer, owed, acked) = (false, false, a.acks == Acks::None);
            answered += 1;
        } else if messages + acks > 0 {
            continue;
        } else if client && t.elapsed() > RESEND {
            resent += 1;
            t = Instant::now();
            send(&mut *dp, &mut tx, &[&message])?;
        } else if !client && rtts.is_empty() && t.elapsed() > Duration::from_secs(10) {
            bail!("no frame from {peer} in 10 s");
        } else {
            std::thread::yield_now();
        }
    }
    let cpu = rocev2_examples::cpu_time().saturating_sub(cpu_start);
    rocev2_examples::print_summary(a.size as u64, a.iters, start.elapsed());
    rocev2_examples::print_round_trips(&rtts, !client);
    rocev2_examples::print_cpu(cpu, a.iters);
    println!("frames resent {resent}, other frames {wrong}");
    if !client {
        // Until the client hangs up: its last frame may still be on its way when we stop.
        let _ = ctl.read(&mut [0u8; 1]);
    }
    Ok(())
}

/// Sends `frames` in order, in one batch (the datapath kicks the kernel once in `send`).
fn send(dp: &mut dyn Datapath, tx: &mut TxBatch, frames: &[&[u8]]) -> Result<()> {
    for f in frames {
        tx.push(f);
    }
    while !tx.is_empty() {
        let n = dp.send(tx)?;
        if n == 0 {
            bail!("the datapath took no frame");
        }
        tx.consume(n);
    }
    Ok(())
}

/// Ethernet, IP and UDP header bytes before the BTH.
fn headers_len(ip: IpAddr) -> usize {
    14 + if ip.is_ipv4() { 20 } else { 40 } + 8
}

/// A UD SEND Only of `size` payload bytes from `src` to `dst`, ICRC and all.
fn frame(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: IpAddr,
    dst: IpAddr,
    size: usize,
) -> Result<Vec<u8>> {
    let ip = match (src, dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => IpRepr::V4 {
            src,
            dst,
            dscp: 0,
            ecn: Ecn::Ect0,
            identification: 0,
            dont_fragment: true,
            ttl: 64,
        },
        (IpAddr::V6(src), IpAddr::V6(dst)) => IpRepr::V6 {
            src,
            dst,
            dscp: 0,
            ecn: Ecn::Ect0,
            flow_label: 0,
            hop_limit: 64,
        },
        _ => bail!("{src} and {dst} are not of one IP version"),
    };
    let repr = FrameRepr {
        eth: EthRepr {
            src: src_mac,
            dst: dst_mac,
            vlan: None,
        },
        ip,
        udp: UdpRepr {
            src_port: 0xc000,
            dst_port: ROCEV2_UDP_PORT,
            checksum: false,
        },
        roce: RoceRepr {
            deth: Some(DethRepr {
                q_key: 0x1111_1111,
                src_qp: QPN,
            }),
            ..RoceRepr::new(BthRepr::new(
                Opcode::new(Transport::Ud, Operation::SendOnly),
                0xffff,
                QPN,
                Psn::new(0),
            ))
        },
    };
    let payload = vec![0x5a; size];
    let mut buf = vec![0; repr.buffer_len(size)?];
    repr.emit(&mut buf, &payload)?;
    Ok(buf)
}
