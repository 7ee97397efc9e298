//! `rc_pingpong`: rdma-core's `ibv_rc_pingpong` over the rocev2 user API.
//!
//! Same command line, defaults, out-of-band exchange (TCP port 18515, `LID:QPN:PSN:GID`, see
//! `rdmacm_shim::oob`) and output lines as the libibverbs example: the server runs without a
//! host argument, the client with the server's name. Each side posts `rx-depth` receives,
//! then they bounce `size`-byte SENDs `iters` times; each prints
//!
//! ```text
//!   local address:  LID 0x0000, QPN 0x000011, PSN 0x7d2a9e, GID ::ffff:192.168.77.10
//!   remote address: LID 0x0000, QPN 0x000011, PSN 0x37cf8a, GID ::ffff:192.168.77.11
//! 8192000 bytes in 0.05 seconds = 1310.72 Mbit/sec
//! 1000 iters in 0.05 seconds = 50.00 usec/iter
//! ```
//!
//! Deviations: `-d` names an Ethernet interface (default: the first one that opens), not an
//! RDMA device; `-g` indexes this interface's GID table, laid out as rdma_rxe's (0 link-local,
//! 1 the first IPv4-mapped address, then the others: docs/datapath.md, "GID table"), and
//! without `-g` the first IPv4 address is used (rdma-core would send without a GRH, which
//! RoCE cannot); `-i`, `-l`, `-o`, `-t`, `-j` are
//! accepted and ignored; `-e` (completion events) is accepted but the CQ is always polled.
//! `-c` is rdma-core's: one buffer serves receives and sends and starts as 0x7b bytes, the
//! client sets the first byte of each 4 KiB page to 0 once, and the server checks, after the
//! last message, that the first byte of each page of its buffer is 0, printing `invalid data in
//! page N` otherwise (as rdma-core, without changing the exit status). `--datapath` (auto, xdp, packet, udp)
//! `--lat` (round-trip median and p99, and the CPU time this process used per round trip),
//! `--poll sleep|adaptive|spin` with `--spin-us` (how the engine waits, default adaptive:
//! docs/datapath.md, "The event loop"), `--busy-poll` (= `--poll spin`),
//! `--accept-unverified-icrc`, `--rext` and `--multipath` are ours.
//!
//! `--rext`: the exchange carries rocev2's optional capability message after the standard one
//! (`rdmacm_shim::oob`, "extension"), offering the REXT fields of the device's
//! congestion-control scheme (`Device::ext_offer`: DASR's N and the look-ahead for Dart, τ for
//! DCQCN+; attached, the daemon's `[cc] scheme`). A server offers whenever its device's scheme
//! uses any, and still serves a standard client (after waiting `oob::EXT_WAIT` for an
//! extension that does not come) with the standard bytes; a client offers only with `--rext`
//! (or `--multipath`), since a standard server cannot tell the message from its next one, and
//! then needs a rocev2 server that offers too. With `--rext` each side prints `extensions:
//! offered WORD, peer WORD` after the address lines (docs/wire.md's capability words, `none`
//! where no extension message went). `--multipath` implies `--rext`'s offer and adds MP-RDMA
//! (docs/multipath.md) to it: each side prints `mode: multipath` or `mode: rc` after the
//! address lines. The engine runs in this process, so after its last completion each side keeps
//! driving it until its last ACK has left.
//!
//! Interop, by hand with `/work/shared/tools/rxe-vm` (rdma-core's `ibv_rc_pingpong` on rdma_rxe,
//! Linux 6.1, under QEMU TCG), `-s 4096 -n 100`: as client against an rxe server over `packet`
//! and over `udp --accept-unverified-icrc`, and as server for an rxe client over `packet`, all
//! completed with matching output on both sides. As server, the rxe client's first messages
//! were lost for about 5 s (not seen by tcpdump on our interface, yet answered with ICMP port
//! unreachable by our namespace's kernel) before traffic flowed at ~1.2 ms per round trip;
//! one udp client attempt right after the VM booted ended in `RetryExcErr`. Not yet explained.

use anyhow::{Context, Result, bail};
use clap::Parser;
use rdmacm_shim::oob::{self, PingpongDest};
use rocev2::{
    AccessFlags, ConnectOptions, Device, ExtCaps, MpConfig, Mtu, QpConfig, QpMode, RecvWr,
    RemoteQp, SendOp, SendWr,
};
use rocev2_core::wire::Psn;
use rocev2_examples::pingpong::{PingPong, PingPongArgs, RECV_WRID, SEND_WRID};
use std::time::{Duration, Instant};

/// Ping-pong SENDs over an RC QP, as `ibv_rc_pingpong`.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    common: PingPongArgs,
    /// Size of message to exchange.
    #[arg(short = 's', long = "size", default_value_t = 4096)]
    size: u32,
    /// Path MTU (256, 512, 1024, 2048, 4096).
    #[arg(short = 'm', long = "mtu", default_value_t = 1024)]
    mtu: u32,
    /// On-demand paging (ignored).
    #[arg(short = 'o', long = "odp")]
    _odp: bool,
    /// Completion timestamps (ignored).
    #[arg(short = 't', long = "ts")]
    _ts: bool,
    /// Validate received buffers.
    #[arg(short = 'c', long = "chk")]
    chk: bool,
    /// Also print the median and 99th percentile of the round trips (time between successive
    /// received messages) and the CPU time used per round trip, after the usual lines. Ours.
    #[arg(long = "lat")]
    lat: bool,
    /// Offer MP-RDMA multipath mode through rocev2's exchange extension, beside --rext's offer; a
    /// standard client gets ordinary RC. Ours.
    #[arg(long = "multipath")]
    multipath: bool,
    /// Offer rocev2's extensions through the exchange extension: those the device's
    /// congestion-control scheme uses (attached: the daemon's `[cc]` scheme). A client with it
    /// needs a rocev2 server offering too; a server offers whenever its scheme uses any. Ours.
    #[arg(long = "rext")]
    rext: bool,
}

fn print_dest(which: &str, d: &PingpongDest) {
    println!(
        "  {which} LID {:#06x}, QPN {:#08x}, PSN {:#08x}, GID {}",
        d.lid,
        d.qpn.value(),
        d.psn.value(),
        std::net::Ipv6Addr::from(d.gid)
    );
}

fn main() -> Result<()> {
    let a = Args::parse();
    let mtu = Mtu::from_bytes(a.mtu).context("-m: one of 256, 512, 1024, 2048, 4096")?;
    if a.size == 0 || a.common.rx_depth < 2 || a.common.iters == 0 {
        bail!("size, iters must be positive and rx-depth at least 2");
    }
    let mut dev = a.common.open()?;
    let my_ip = rocev2_examples::local_ip(&dev, a.common.gid_idx, "-g")?;

    let size = a.size as usize;
    let pd = dev.alloc_pd()?;
    // One buffer for receives and sends, filled with 0x7b, as rdma-core's: the server sends back
    // what it last received, which `-c` relies on (a page-start byte still 0x7b at the server
    // was not received, and a client's zeroes come back to it).
    let mr = dev.register(pd, vec![0x7bu8; size], AccessFlags::LOCAL_WRITE)?;
    let cq = dev.create_cq(a.common.rx_depth as usize + 16)?;
    let mut cfg = QpConfig::new(pd.id(), cq.id(), cq.id());
    cfg.max_send_wr = 16;
    cfg.max_recv_wr = a.common.rx_depth;
    if a.multipath {
        cfg = cfg.with_multipath(MpConfig {
            seed: rocev2::random_u64(),
            ..MpConfig::paper()
        });
    }
    let qp = dev.create_qp(cfg)?;
    let post_recvs = |dev: &Device, n: u32| -> Result<u32> {
        for _ in 0..n {
            dev.post_recv(
                qp,
                RecvWr {
                    wr_id: RECV_WRID,
                    sg_list: vec![mr.sge(0, a.size)?],
                },
            )?;
        }
        Ok(n)
    };
    let routs = post_recvs(&dev, a.common.rx_depth)?;

    let psn = rocev2::random_psn();
    let mine = PingpongDest {
        lid: 0,
        qpn: qp.qpn(),
        psn: Psn::new(psn),
        gid: rocev2::gid(my_ip).octets(),
    };
    print_dest("local address: ", &mine);
    let offer = dev.ext_offer().union(ExtCaps {
        multipath: a.multipath,
        ..ExtCaps::default()
    });
    // A client's extension message breaks a standard server's exchange: only when asked.
    let asked = a.rext || a.multipath;
    let sends = asked || (a.common.servername.is_none() && offer.any());
    let ext = sends.then(|| offer.to_word());
    let connect = |dev: &mut Device, rem: &PingpongDest, peer_word: Option<u32>| {
        let opts = ConnectOptions {
            local_psn: psn,
            mtu,
            peer_ext: ExtCaps::from_word(peer_word.unwrap_or(0)),
            ..ConnectOptions::default()
        };
        dev.connect(
            qp,
            &RemoteQp {
                qpn: rem.qpn,
                psn: rem.psn.value(),
                ip: rem.ip(),
                mac: None,
            },
            &opts,
        )
    };
    let (remote, peer_word) = match &a.common.servername {
        None => {
            let mut s = a.common.exchange_stream()?;
            oob::server_exchange_ext(&mut s, &mine, ext, |rem, w| connect(&mut dev, rem, w))??
        }
        Some(_) => {
            let mut s = a.common.exchange_stream()?;
            let what = if asked {
                "exchange (with --rext or --multipath the server must be rocev2's, offering extensions)"
            } else {
                "exchange with the server"
            };
            let (rem, w) = oob::client_exchange_ext(&mut s, &mine, ext).context(what)?;
            connect(&mut dev, &rem, w)?;
            (rem, w)
        }
    };
    print_dest("remote address:", &remote);
    if a.rext {
        let word = |w: Option<u32>| w.map_or("none".to_string(), |w| format!("{w:#010x}"));
        println!(
            "extensions: offered {}, peer {}",
            word(ext),
            word(peer_word)
        );
    }
    if a.multipath {
        let mp = dev.qp_mode(qp) == Some(QpMode::MultiPath);
        println!("mode: {}", if mp { "multipath" } else { "rc" });
    }

    // rdma-core's page size (`sysconf(_SC_PAGESIZE)` on x86-64 and most Linux machines).
    let page = 4096usize;
    let send = SendWr::new(SEND_WRID, SendOp::Send).sge(mr.sge(0, a.size)?);
    if a.common.servername.is_some() && a.chk {
        // rdma-core writes `i / page_size % sizeof(char)`, which is 0 for every page.
        let mut b = dev.mr_guard(&mr)?;
        for i in (0..size).step_by(page) {
            b[i] = 0;
        }
    }
    let start = Instant::now();
    let cpu_start = rocev2_examples::cpu_time();
    let mut rtts = Vec::with_capacity(if a.lat { a.common.iters as usize } else { 0 });
    let mut last_rx = start;
    let pingpong = PingPong {
        dev: &dev,
        cq,
        iters: a.common.iters,
        rx_depth: a.common.rx_depth,
        batch: 16,
        wait_context: "waiting for completions",
    };
    pingpong.run(
        a.common.servername.is_some(),
        routs,
        || Ok(dev.post_send(qp, send.clone())?),
        |n| post_recvs(&dev, n),
        || {
            if a.lat {
                let now = Instant::now();
                rtts.push(now - last_rx);
                last_rx = now;
            }
        },
    )?;
    let cpu = rocev2_examples::cpu_time().saturating_sub(cpu_start);
    rocev2_examples::print_summary(u64::from(a.size), a.common.iters, start.elapsed());
    if a.common.servername.is_none() && a.chk {
        let b = dev.mr_guard(&mr)?;
        for i in (0..size).step_by(page).filter(|&i| b[i] != 0) {
            println!("invalid data in page {}", i / page);
        }
    }
    if a.lat {
        rocev2_examples::print_round_trips(&rtts, a.common.servername.is_none());
        rocev2_examples::print_cpu(cpu, a.common.iters);
    }
    // The peer's last message still needs our ACK: keep the engine running until it left.
    if let Err(e) = dev.drain(Duration::from_secs(2)) {
        eprintln!("rc_pingpong: draining the QP: {:#}", anyhow::Error::from(e));
    }
    Ok(())
}
