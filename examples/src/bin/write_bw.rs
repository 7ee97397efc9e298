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
//! The QPs connect in one call ([`rocev2::connect`]: the endpoints, the server's region and
//! the multipath offer cross the TCP connection in rocev2's endpoint form), then the same
//! connection carries the client's `DONE <crc hex or -> <bytes>` and the server's `OK <crc hex
//! or ->` or `MISMATCH <crc hex>`.
//!
//! Deviations from `ib_write_bw`: a single QP, rocev2's exchange (not perftest's, so it does
//! not pair with perftest; rocev2's `ib_write_bw` does), no peak BW column (only the average
//! over the run), every WRITE signaled.

use anyhow::{Context, Result, bail};
use clap::Parser;
use rocev2::connect::{self, ConnectConfig};
use rocev2::{
    AccessFlags, ConnectOptions, DatapathKind, Device, DeviceConfig, ExtCaps, MpConfig, Mtu,
    QpConfig, QpMode, SendOp, SendWr, WcStatus,
};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
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
    /// WRITEs to post.
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    iters: u32,
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
    /// Datapath: auto (best available), xdp (AF_XDP, root), packet (AF_PACKET, needs
    /// CAP_NET_RAW) or udp.
    #[arg(long = "datapath", default_value = "auto")]
    datapath: DatapathKind,
    #[command(flatten)]
    poll: rocev2_examples::PollArgs,
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
    let dev = a.poll.open(&a.dev, a.datapath, DeviceConfig::default())?;
    let server = a.servername.is_none();
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
    let conn = match &a.servername {
        None => {
            let l = TcpListener::bind(("::", a.port))
                .or_else(|_| TcpListener::bind(("0.0.0.0", a.port)))
                .with_context(|| format!("listening on TCP port {}", a.port))?;
            println!(
                "waiting for a client on TCP port {} ({})",
                a.port,
                dev.datapath_name()
            );
            connect::accept(&dev, qp, &l, &exchange)?
        }
        Some(host) => connect::connect(&dev, qp, (host.as_str(), a.port), &exchange)
            .with_context(|| format!("connecting to {host}:{}", a.port))?,
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

    if server {
        // Serve WRITEs (the engine places them and ACKs) until the client reports.
        let done = loop {
            dev.poll()?;
            let ready = dev.wait(&[r.get_ref().as_fd()])?;
            if ready[0] || !r.buffer().is_empty() {
                break read_line(&mut r)?;
            }
        };
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
            return Ok(());
        }
        let got = crc32fast::hash(&dev.mr_guard(&mr)?);
        let want = u32::from_str_radix(f[1], 16)?;
        println!("received {bytes} bytes by RDMA WRITE, crc32 {got:08x}, client's {want:08x}");
        if got == want {
            println!("verify: OK");
            w.write_all(format!("OK {got:08x}\n").as_bytes())?;
            return Ok(());
        }
        println!("verify: MISMATCH");
        w.write_all(format!("MISMATCH {got:08x}\n").as_bytes())?;
        std::process::exit(1);
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
    let start = Instant::now();
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
    let secs = start.elapsed().as_secs_f64();
    let bytes = size * u64::from(a.iters);
    let mbs = bytes as f64 / secs / f64::from(1u32 << 20);
    let rule = "-".repeat(87);
    println!("{rule}");
    println!(
        " RDMA_Write BW Test ({} datapath, 1 QP, tx depth {}{})",
        dev.datapath_name(),
        a.tx_depth,
        if multipath { ", multipath" } else { "" }
    );
    println!("{rule}");
    println!(" #bytes     #iterations    BW average[MB/sec]   BW average[Gb/sec]   MsgRate[Mpps]");
    println!(
        " {:<10} {:<14} {:<20.2} {:<20.3} {:.6}",
        a.size,
        a.iters,
        mbs,
        bytes as f64 * 8.0 / secs / 1e9,
        f64::from(a.iters) / secs / 1e6
    );
    println!("{rule}");
    if multipath {
        print_vps(&dev, qp, "sent");
    }
    let crc = if a.verify {
        format!("{:08x}", crc32fast::hash(&dev.mr_guard(&mr)?))
    } else {
        "-".into()
    };
    w.write_all(format!("DONE {crc} {bytes}\n").as_bytes())?;
    let verdict = read_line(&mut r)?;
    dev.drain(Duration::from_secs(2)).ok();
    if a.verify {
        if verdict == format!("OK {crc}") {
            println!("verify: OK (crc32 {crc} over {bytes} bytes)");
        } else {
            println!("verify: MISMATCH (ours {crc}, server: {verdict})");
            std::process::exit(1);
        }
    }
    Ok(())
}
