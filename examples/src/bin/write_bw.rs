//! `write_bw`: RDMA WRITE bandwidth between two hosts, after perftest's `ib_write_bw`, over the
//! rocev2 user API.
//!
//! The server (no host argument) registers `size · slots` bytes with remote write rights and
//! waits; the client connects over TCP (default port 18515), learns the server's QP, address
//! and R_Key, then posts `iters` WRITEs of `size` bytes (message `i` to slot `i mod slots`),
//! keeping `tx-depth` outstanding, and prints a perftest-like table. BW is in MB/s with
//! MB = 2^20 bytes, as perftest reports it.
//!
//! `--verify`: one slot per message (so `size · iters` bytes on each side, at most 4 GiB), the
//! client fills its buffer with a seeded pseudo-random stream, and after the last completion
//! sends its CRC-32 over TCP; the server computes the CRC-32 of what landed in its memory and
//! both print `verify: OK` (exit 0) or `verify: MISMATCH` (exit 1).
//!
//! `--multipath [--vps N] [--iw P]`: the QP offers MP-RDMA (seed 001 §3, docs/multipath.md) over `N`
//! virtual paths (UDP source ports 49152 to 49152 + N − 1), starting with an initial window of
//! P packets on P random VPs (default 16). It runs in multipath mode only if
//! the peer offers it too; otherwise it is ordinary single-path RC. At the end each side prints
//! its per-VP counters (client: data packets sent, ECN echoes, out-of-order prunes; server:
//! packets received, CE marks, arrivals more than Δ out of order).
//!
//! `--poll sleep|adaptive|spin` (default adaptive), `--spin-us N` and `--busy-poll` (= `--poll
//! spin`) choose how the engine waits between events (docs/datapath.md, "The event loop").
//!
//! `-q N` / `--qps N` (default 1): N QPs, each on its own engine shard: N devices in this
//! process, device k serving receive queue k of the interface ([`DeviceConfig::queue`]: with
//! AF_XDP, its own socket bound to that queue alone, its own progress thread, QPNs of its own
//! block), QP k connected over TCP port `port + k` to the server's QP k, so connection k uses
//! queue k on both hosts (`docs/datapath.md`, "Several queues"). Each QP moves `iters` WRITEs;
//! the client prints one line per QP (`qp K: …`) and one table row for all of them (bytes of
//! every QP over the time from the first start to the last completion), each side one line
//! per shard (`shard K: …`: its datapath, frames received, frames forwarded to and from the
//! other shards, `mis_steered` drops, steered frames that found no socket), and `--verify`
//! checks every QP's CRC. `--cross-queues` (AF_XDP) makes shard k bind queue (k + 1) mod N
//! instead, so that every frame lands on the wrong shard and is forwarded, as RSS on a NIC
//! would do to some flows. N must not exceed the
//! interface's queues (a veth gets them at creation: `numrxqueues N numtxqueues N`); the UDP
//! datapath takes one device per interface (port 4791), so it refuses N > 1, as does
//! `--attach`.
//!
//! The QPs connect in one call ([`rocev2::connect`]: the endpoints, the server's region and
//! the offers cross the TCP connection in rocev2's endpoint form: the REXT fields of the
//! device's congestion-control scheme, with `--attach` the daemon's `[cc] scheme`, and
//! multipath with `--multipath`), then the same
//! connection carries the client's `DONE <crc hex or -> <bytes>` and the server's `OK <crc hex
//! or ->` or `MISMATCH <crc hex>`.
//!
//! Deviations from `ib_write_bw`: one QP per shard (`-q`), not perftest's `-q` of several QPs
//! on one device; rocev2's exchange (not perftest's, so it does
//! not pair with perftest; rocev2's `ib_write_bw` does), no peak BW column (only the average
//! over the run), every WRITE signaled.

use anyhow::{Context, Result, bail};
use clap::Parser;
use rocev2::connect::{self, ConnectConfig};
use rocev2::{
    AccessFlags, ConnectOptions, DatapathKind, Device, DeviceConfig, ExtCaps, MpConfig, Mtu,
    QpConfig, QpMode, SendOp, SendWr, WcStatus,
};
use rocev2_core::DropReason;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// RDMA WRITE bandwidth, as perftest's ib_write_bw.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Listen on / connect to TCP port.
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    port: u16,
    /// Ethernet interface.
    #[arg(short = 'd', long = "ib-dev")]
    dev: String,
    /// Bytes per WRITE.
    #[arg(short = 's', long = "size", default_value_t = 65536)]
    size: u32,
    /// WRITEs to post (per QP).
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    iters: u32,
    /// QPs, one engine shard (device, thread, rx queue) each, QP k on queue k.
    #[arg(short = 'q', long = "qps", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    qps: u32,
    /// With -q N over AF_XDP: shard k binds queue (k + 1) mod N, so every frame this side
    /// sends and receives arrives on another shard's queue and is forwarded (steering crossed
    /// on purpose, as RSS would; tests and the hop's cost).
    #[arg(long = "cross-queues")]
    cross_queues: bool,
    /// WRITEs outstanding at once.
    #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
    tx_depth: u32,
    /// Path MTU (lowered to what the interface carries).
    #[arg(short = 'm', long = "mtu", default_value_t = 4096)]
    mtu: u32,
    /// Check the data: one slot per message, CRC-32 compared at the server.
    #[arg(long)]
    verify: bool,
    /// Offer MP-RDMA multipath mode; used only if the peer offers it too.
    #[arg(long)]
    multipath: bool,
    /// Virtual paths (UDP source ports from 49152) of a multipath QP.
    #[arg(long = "vps", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=16384))]
    vps: u16,
    /// Initial window of a multipath QP, in packets, sent on that many random VPs (seed 001
    /// §3.2; the paper uses one BDP).
    #[arg(long = "iw", default_value_t = MpConfig::paper().iw)]
    iw: u32,
    /// The datapath, in-process or attached, and the wait mode.
    #[command(flatten)]
    device: rocev2_examples::DeviceArgs,
    /// Server to connect to; none: be the server.
    servername: Option<String>,
}

fn read_line(r: &mut BufReader<TcpStream>) -> Result<String> {
    let mut l = String::new();
    if r.read_line(&mut l)? == 0 {
        bail!("peer closed the exchange connection");
    }
    Ok(l.trim_end().to_string())
}

/// The client's data: xorshift64* from a fixed seed.
fn fill(buf: &mut [u8]) {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for chunk in buf.chunks_mut(8) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let v = x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// Prints a multipath QP's per-VP counters, one row per VP used, ordered by port: on the client
/// (`sent`) data packets sent, ACKs with ECE and out-of-order prunes; on the server
/// (`received`) packets received, CE marks and arrivals more than Δ after rcv_nxt.
fn print_vps(dev: &Device, qp: rocev2::Qp, what: &str) {
    let Some(snap) = dev.mp_snapshot(qp) else {
        return;
    };
    let mut vps = if what == "sent" {
        snap.tx_vps
    } else {
        snap.rx_vps
    };
    vps.sort_by_key(|(port, _)| *port);
    println!(
        "multipath: cwnd {:.1} packets, srtt {} us, random-VP sends {}, bitmap drops {}, loss NACKs {}",
        snap.cwnd,
        snap.rtt.as_nanos() / 1000,
        snap.random_vp_sends,
        snap.rx.bitmap_drops,
        snap.rx.loss_nacks
    );
    println!("vp     packets_{what:<10} ecn_marks  ood");
    for (port, c) in vps {
        println!("{port:<6} {:<18} {:<10} {}", c.packets, c.ecn_marks, c.ood);
    }
}

/// What one QP's run reports.
struct Outcome {
    dev: Device,
    qp: rocev2::Qp,
    multipath: bool,
    /// Client: bytes written and the time they took.
    bytes: u64,
    start: Instant,
    end: Instant,
    /// `--verify`: whether the CRCs matched (client: with the server's verdict).
    verified: Option<bool>,
    /// The client's verify line.
    verdict: String,
}

/// How QP k reaches its peer: the server's listener on `port + k`, or the server's address.
enum Side<'a> {
    Server(TcpListener),
    Client(&'a str, u16),
}

/// One line about shard `k`'s device: its datapath, frames it received, frames it forwarded to
/// another shard, took from other shards, or dropped because another shard's inbox was full or
/// (AF_PACKET) another shard sees them too, frames for a QPN no shard owns (`mis_steered`), and
/// steered frames that found no socket on their queue.
fn shard_line(k: u32, dev: &Device) -> String {
    let Some(g) = dev.engine() else {
        return format!("shard {k}: {}", dev.datapath_reason());
    };
    let d = g.driver();
    let s = d.datapath_stats();
    format!(
        "shard {k}: {}; rx_packets {}, rx_forwarded {}, rx_from_shards {}, rx_handoff_full {}, \
         rx_other_shard {}, mis_steered {}, steer_no_socket {}",
        dev.datapath_reason(),
        s.rx_packets,
        s.rx_forwarded,
        s.rx_from_shards,
        s.rx_handoff_full,
        s.rx_other_shard,
        d.ep.stats().drops(DropReason::MisSteered),
        s.steer_no_socket
    )
}

fn main() -> Result<()> {
    let a = Args::parse();
    let mtu = Mtu::from_bytes(a.mtu).context("-m: one of 256, 512, 1024, 2048, 4096")?;
    if a.size == 0 || a.iters == 0 || a.tx_depth == 0 {
        bail!("size, iters and tx-depth must be positive");
    }
    let slots = if a.verify { a.iters } else { a.iters.min(16) };
    let len = u64::from(a.size) * u64::from(slots);
    if len > 4 << 30 {
        bail!("--verify needs size * iters <= 4 GiB, got {len}");
    }
    if a.qps > 1 && a.device.datapath == DatapathKind::Udp {
        bail!(
            "-q {}: the UDP datapath binds port 4791 once per interface, so it serves one \
             device; use --datapath xdp (one AF_XDP socket per queue) or packet",
            a.qps
        );
    }
    if a.cross_queues && (a.qps < 2 || a.device.datapath != DatapathKind::Xdp) {
        bail!("--cross-queues: needs -q 2 or more and --datapath xdp");
    }
    if a.qps > 1 && a.device.attach {
        bail!(
            "-q {}: an attached device is the daemon's one engine; shards need in-process devices",
            a.qps
        );
    }
    let devs = (0..a.qps)
        .map(|k| {
            let mut cfg = DeviceConfig {
                queue: (a.qps > 1).then_some(k),
                ..DeviceConfig::default()
            };
            if a.cross_queues {
                cfg.datapath.xdp.queue = Some((k + 1) % a.qps);
            }
            a.device
                .open(&a.dev, cfg)
                .with_context(|| format!("-q {}: shard {k} (rx queue {k})", a.qps))
        })
        .collect::<Result<Vec<Device>>>()?;
    let mut sides = Vec::new();
    for k in 0..a.qps {
        let port = u16::try_from(u32::from(a.port) + k).context("-p + -q beyond port 65535")?;
        sides.push(match &a.servername {
            None => Side::Server(rocev2_examples::listen(port)?),
            Some(host) => Side::Client(host.as_str(), port),
        });
    }
    if a.servername.is_none() {
        let ports = match a.qps {
            1 => format!("TCP port {}", a.port),
            n => format!("TCP ports {}..={}", a.port, u32::from(a.port) + n - 1),
        };
        println!(
            "waiting for a client on {ports} ({})",
            devs[0].datapath_name()
        );
    }
    let outcomes = std::thread::scope(|s| {
        let runs: Vec<_> = devs
            .iter()
            .zip(sides)
            .map(|(dev, side)| {
                let a = &a;
                s.spawn(move || run_qp(a, dev.clone(), side, mtu, slots, len))
            })
            .collect();
        runs.into_iter()
            .map(|r| r.join().unwrap_or_else(|_| bail!("a QP's thread panicked")))
            .collect::<Result<Vec<Outcome>>>()
    })?;
    if a.qps > 1 {
        for (k, dev) in (0..).zip(&devs) {
            println!("{}", shard_line(k, dev));
        }
    }
    if a.servername.is_some() {
        report(&a, &outcomes);
    }
    if outcomes.iter().any(|o| o.verified == Some(false)) {
        std::process::exit(1);
    }
    Ok(())
}

/// The client's table: one row for all QPs (and a line per QP when there are several).
fn report(a: &Args, outcomes: &[Outcome]) {
    let (Some(start), Some(end)) = (
        outcomes.iter().map(|o| o.start).min(),
        outcomes.iter().map(|o| o.end).max(),
    ) else {
        return;
    };
    let secs = (end - start).as_secs_f64();
    let bytes: u64 = outcomes.iter().map(|o| o.bytes).sum();
    let iters = u64::from(a.iters) * outcomes.len() as u64;
    let multipath = outcomes.iter().any(|o| o.multipath);
    if outcomes.len() > 1 {
        for (k, o) in outcomes.iter().enumerate() {
            let s = (o.end - o.start).as_secs_f64();
            println!(
                "qp {k}: {} bytes in {s:.3} s, {:.3} Gb/sec",
                o.bytes,
                o.bytes as f64 * 8.0 / s / 1e9
            );
        }
    }
    let mbs = bytes as f64 / secs / f64::from(1u32 << 20);
    let rule = "-".repeat(87);
    println!("{rule}");
    println!(
        " RDMA_Write BW Test ({} datapath, {} QP{}, tx depth {}{})",
        outcomes[0].dev.datapath_name(),
        outcomes.len(),
        if outcomes.len() > 1 { "s" } else { "" },
        a.tx_depth,
        if multipath { ", multipath" } else { "" }
    );
    println!("{rule}");
    println!(" #bytes     #iterations    BW average[MB/sec]   BW average[Gb/sec]   MsgRate[Mpps]");
    println!(
        " {:<10} {:<14} {:<20.2} {:<20.3} {:.6}",
        a.size,
        iters,
        mbs,
        bytes as f64 * 8.0 / secs / 1e9,
        iters as f64 / secs / 1e6
    );
    println!("{rule}");
    for o in outcomes {
        if o.multipath {
            print_vps(&o.dev, o.qp, "sent");
        }
        if !o.verdict.is_empty() {
            println!("{}", o.verdict);
        }
    }
}

/// One QP on its own device: set up, connect, then serve (server) or WRITE `iters` messages
/// (client), and settle the CRCs with `--verify`.
fn run_qp(
    a: &Args,
    dev: Device,
    side: Side<'_>,
    mtu: Mtu,
    slots: u32,
    len: u64,
) -> Result<Outcome> {
    let server = matches!(side, Side::Server(_));
    let pd = dev.alloc_pd()?;
    let access = if server {
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE
    } else {
        AccessFlags::LOCAL_WRITE
    };
    let mut buf = vec![0u8; len as usize];
    if !server && a.verify {
        fill(&mut buf);
    }
    let mr = dev.register(pd, buf, access)?;
    let cq = dev.create_cq(a.tx_depth as usize + 16)?;
    let mut cfg = QpConfig::new(pd.id(), cq.id(), cq.id());
    cfg.max_send_wr = a.tx_depth.max(1);
    cfg.max_recv_wr = 1;
    if a.multipath {
        cfg = cfg.with_multipath(MpConfig {
            vp_count: a.vps,
            iw: a.iw.max(1),
            seed: rocev2::random_u64(),
            ..MpConfig::paper()
        });
    }
    let qp = dev.create_qp(cfg)?;
    let mut exchange = ConnectConfig {
        offer: ExtCaps {
            multipath: a.multipath,
            ..ExtCaps::default()
        },
        qp: ConnectOptions {
            mtu,
            ..ConnectOptions::default()
        },
        ..ConnectConfig::default()
    };
    if server {
        exchange = exchange.mr(&mr);
    }
    let conn = match side {
        Side::Server(l) => connect::accept(&dev, qp, &l, &exchange)?,
        Side::Client(host, port) => connect::connect(&dev, qp, (host, port), &exchange)
            .with_context(|| format!("connecting to {host}:{port}"))?,
    };
    let mut w = conn.stream.try_clone()?;
    let mut r = BufReader::new(conn.stream);
    let multipath = dev.qp_mode(qp) == Some(QpMode::MultiPath);
    if multipath {
        println!("mode: multipath ({} VPs from 49152)", a.vps);
    } else if a.multipath {
        println!("mode: rc (the peer did not offer multipath)");
    } else {
        println!("mode: rc");
    }
    let mut out = Outcome {
        dev: dev.clone(),
        qp,
        multipath,
        bytes: 0,
        start: Instant::now(),
        end: Instant::now(),
        verified: None,
        verdict: String::new(),
    };

    if server {
        // Serve WRITEs (the engine places them and ACKs) until the client reports.
        if r.buffer().is_empty() {
            rocev2_examples::wait_readable(&dev, r.get_ref())?;
        }
        let done = read_line(&mut r)?;
        dev.drain(Duration::from_secs(2)).ok();
        let f: Vec<&str> = done.split_whitespace().collect();
        if f.len() != 3 || f[0] != "DONE" {
            bail!("malformed report {done:?}");
        }
        let bytes: u64 = f[2].parse()?;
        if multipath {
            print_vps(&dev, qp, "received");
        }
        if f[1] == "-" {
            println!("received {bytes} bytes by RDMA WRITE");
            w.write_all(b"OK -\n")?;
            return Ok(out);
        }
        let got = crc32fast::hash(&dev.mr_guard(&mr)?);
        let want = u32::from_str_radix(f[1], 16)?;
        println!("received {bytes} bytes by RDMA WRITE, crc32 {got:08x}, client's {want:08x}");
        let ok = got == want;
        println!("verify: {}", if ok { "OK" } else { "MISMATCH" });
        let word = if ok { "OK" } else { "MISMATCH" };
        w.write_all(format!("{word} {got:08x}\n").as_bytes())?;
        out.verified = Some(ok);
        return Ok(out);
    }

    // Client: keep tx-depth WRITEs outstanding into the server's region.
    let target = *conn
        .peer
        .mrs
        .first()
        .context("the server offered no region to write to")?;
    if target.len < len {
        bail!(
            "the server's region has {} bytes, {len} needed (same -s and -n on both sides?)",
            target.len
        );
    }
    let (mut posted, mut completed) = (0u32, 0u32);
    let mut wcs = Vec::new();
    let size = u64::from(a.size);
    out.start = Instant::now();
    while completed < a.iters {
        while posted < a.iters && posted - completed < a.tx_depth {
            let off = u64::from(posted % slots) * size;
            let wr = SendWr::new(
                u64::from(posted),
                SendOp::Write {
                    remote_addr: target.addr + off,
                    rkey: target.rkey,
                },
            )
            .sge(mr.sge(off, a.size)?);
            dev.post_send(qp, wr)?;
            posted += 1;
        }
        wcs.clear();
        dev.wait_cq(cq, &mut wcs, 64, Duration::from_secs(30))
            .context("waiting for WRITE completions")?;
        for wc in &wcs {
            if wc.status != WcStatus::Success {
                bail!("WRITE {} failed: {:?}", wc.wr_id, wc.status);
            }
            completed += 1;
        }
    }
    out.end = Instant::now();
    out.bytes = size * u64::from(a.iters);
    let crc = if a.verify {
        format!("{:08x}", crc32fast::hash(&dev.mr_guard(&mr)?))
    } else {
        "-".into()
    };
    w.write_all(format!("DONE {crc} {}\n", out.bytes).as_bytes())?;
    let verdict = read_line(&mut r)?;
    dev.drain(Duration::from_secs(2)).ok();
    if a.verify {
        let ok = verdict == format!("OK {crc}");
        out.verified = Some(ok);
        out.verdict = match ok {
            true => format!("verify: OK (crc32 {crc} over {} bytes)", out.bytes),
            false => format!("verify: MISMATCH (ours {crc}, server: {verdict})"),
        };
    }
    Ok(out)
}
