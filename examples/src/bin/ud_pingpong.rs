//! `ud_pingpong`: rdma-core's `ibv_ud_pingpong` over the rocev2 user API (UD QPs and address
//! handles, docs/api.md "Queue pairs").
//!
//! Same command line subset, defaults and out-of-band exchange as the libibverbs example: TCP
//! port 18515 and the `LID:QPN:PSN:GID` messages of `ibv_rc_pingpong` (`rdmacm_shim::oob`, the
//! one exchange both pingpongs use). The server runs without a host argument, the client with
//! the server's name. Each side has one buffer of `size + 40` bytes, filled with 0x7b: receives
//! take all of it (the first 40 bytes are the GRH area, `rocev2::GRH_LEN`), sends carry the
//! `size` bytes after it. Both QPs use Q_Key 0x11111111, as rdma-core's. The server builds its
//! address handle from the client's GID during the exchange, the client from the server's
//! after it; then the client sends first and they bounce `size`-byte SENDs `iters` times. Each
//! side prints rdma-core's lines (the local one has `: GID`, the remote one `, GID`, as there):
//!
//! ```text
//!   local address:  LID 0x0000, QPN 0x000011, PSN 0x7d2a9e: GID ::ffff:192.168.77.10
//!   remote address: LID 0x0000, QPN 0x000011, PSN 0x37cf8a, GID ::ffff:192.168.77.11
//! 4096000 bytes in 0.05 seconds = 655.36 Mbit/sec
//! 1000 iters in 0.05 seconds = 50.00 usec/iter
//! ```
//!
//! A `size` larger than the interface's MTU is refused before the exchange (`Requested size
//! larger than port MTU`), as rdma-core refuses one larger than the port's active MTU.
//! UD is unreliable: a lost datagram stops the ping-pong (rdma-core waits forever; ours gives up
//! after 30 s without a completion).
//!
//! Deviations, as `rc_pingpong`'s: `-d` names an Ethernet interface, `-g` indexes its GID table
//! in rdma_rxe's order (without `-g` the first IPv4 address; rdma-core would send a zero GID and
//! no GRH, which RoCE cannot, and our server refuses a peer that sends a zero GID), `-i`, `-l`
//! are ignored, `-e` is accepted but the CQ is polled. The PSN printed and sent is random as
//! rdma-core's; UD receivers ignore PSNs and our UD QP draws its own send PSN at creation.
//! `--datapath`, `--poll`/`--spin-us`/`--busy-poll`, `--attach` and `--accept-unverified-icrc`
//! are ours.
//!
//! `--rdma-cm` (ours) replaces the TCP exchange with rdma_cm's UD resolution, as librdmacm's
//! `udaddy` finds its peer: the server listens on `-p`'s port in `RDMA_PS_UDP`
//! (`rdmacm_shim::ud::UdListener`, before it prints its address line), the client resolves it
//! with a SIDR_REQ (`rdmacm_shim::ud::resolve`) and learns the server's QPN and Q_Key from the
//! SIDR_REP; its own QPN travels in the SIDR_REQ's private data (4 bytes, big-endian: our
//! convention, udaddy's server answers from the first datagram instead), and the source GID in
//! the CMA header. Both QPs then use rdma_cm's Q_Key 0x01234567, and the PSNs printed are 0
//! (SIDR carries none).

use anyhow::{Context, Result, bail};
use clap::Parser;
use rdmacm_shim::oob::{self, PingpongDest};
use rdmacm_shim::ud::{UdListener, resolve};
use rocev2::{
    AccessFlags, AhAttr, Device, GRH_LEN, Pd, Qp, RDMA_UDP_Q_KEY, RecvWr, SendOp, SendWr, UdAddress,
};
use rocev2_core::wire::Psn;
use rocev2_examples::pingpong::{PingPong, PingPongArgs, RECV_WRID, SEND_WRID};
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;
use std::time::Instant;

/// The Q_Key both sides of `ibv_ud_pingpong` use.
const Q_KEY: u32 = 0x1111_1111;

/// Ping-pong SENDs over a UD QP, as `ibv_ud_pingpong`.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    common: PingPongArgs,
    /// Size of message to exchange (at most the interface's MTU).
    #[arg(short = 's', long = "size", default_value_t = 2048)]
    size: u32,
    /// Find the peer through rdma_cm's UD resolution (SIDR) on `-p`'s port instead of TCP.
    #[arg(long = "rdma-cm")]
    rdma_cm: bool,
}

/// How long `--rdma-cm` waits for the peer's resolution (server) or answer (client).
const RESOLVE_WAIT: Duration = Duration::from_secs(60);

/// `--rdma-cm`: the peer's address line and the Q_Key its datagrams carry, through SIDR; the
/// server's listener is bound before `announce` prints our address line.
fn rdma_cm_exchange(
    a: &Args,
    dev: &Device,
    qp: Qp,
    my_ip: std::net::IpAddr,
    announce: impl FnOnce(),
) -> Result<(PingpongDest, u32)> {
    let dest = |ip: std::net::IpAddr, qpn| PingpongDest {
        lid: 0,
        qpn,
        psn: Psn::new(0),
        gid: rocev2::gid(ip).octets(),
    };
    match &a.common.servername {
        None => {
            let listener = UdListener::bind(dev, SocketAddr::new(my_ip, a.common.port))?;
            announce();
            let req = listener.get_request(RESOLVE_WAIT)?;
            let qpn: [u8; 4] = req.private_data()[..4].try_into()?;
            let remote = dest(req.peer().ip(), rocev2::Qpn::new(u32::from_be_bytes(qpn)));
            req.accept(qp, &[])?;
            Ok((remote, RDMA_UDP_Q_KEY))
        }
        Some(host) => {
            announce();
            let server = (host.as_str(), a.common.port)
                .to_socket_addrs()
                .with_context(|| format!("resolving {host}"))?
                .find(|s| s.is_ipv6() == my_ip.is_ipv6())
                .with_context(|| format!("no address of {host} in our family"))?;
            let peer = resolve(dev, server, &qp.qpn().value().to_be_bytes(), RESOLVE_WAIT)?;
            Ok((dest(server.ip(), peer.qpn), peer.q_key))
        }
    }
}

fn print_dest(which: &str, sep: char, d: &PingpongDest) {
    println!(
        "  {which} LID {:#06x}, QPN {:#08x}, PSN {:#08x}{sep} GID {}",
        d.lid,
        d.qpn.value(),
        d.psn.value(),
        std::net::Ipv6Addr::from(d.gid)
    );
}

/// The address handle to the peer `rem` describes (`ibv_create_ah` from its GID).
fn peer_ah(dev: &Device, pd: Pd, rem: &PingpongDest) -> Result<rocev2::Ah> {
    if rem.gid == [0; 16] {
        bail!("the peer sent no GID (start it with -g: RoCE needs one)");
    }
    dev.create_ah(pd, &AhAttr::new(rem.ip()))
        .with_context(|| format!("address handle to {}", rem.ip()))
}

/// The TCP exchange of `ibv_ud_pingpong`: the peer's address line and an address handle to it.
fn tcp_exchange(
    a: &Args,
    dev: &Device,
    pd: Pd,
    mine: &PingpongDest,
) -> Result<(PingpongDest, rocev2::Ah)> {
    let mut s = a.common.exchange_stream()?;
    match &a.common.servername {
        None => {
            let mut ah = None;
            let rem = oob::server_exchange(&mut s, mine, |rem| {
                ah = Some(peer_ah(dev, pd, rem)?);
                anyhow::Ok(())
            })??;
            Ok((rem, ah.context("no address handle")?))
        }
        Some(_) => {
            let rem = oob::client_exchange(&mut s, mine)?;
            let ah = peer_ah(dev, pd, &rem)?;
            Ok((rem, ah))
        }
    }
}

fn main() -> Result<()> {
    let a = Args::parse();
    if a.size == 0 || a.common.rx_depth < 2 || a.common.iters == 0 {
        bail!("size, iters must be positive and rx-depth at least 2");
    }
    let dev = a.common.open()?;
    let my_ip = rocev2_examples::local_ip(&dev, a.common.gid_idx, "-g")?;

    let size = a.size as usize;
    let pd = dev.alloc_pd()?;
    let mr = dev.register(pd, vec![0x7bu8; size + GRH_LEN], AccessFlags::LOCAL_WRITE)?;
    let cq = dev.create_cq(a.common.rx_depth as usize + 1)?;
    let mut qcfg = rocev2::QpConfig::new(pd.id(), cq.id(), cq.id());
    qcfg.max_send_wr = 1;
    qcfg.max_recv_wr = a.common.rx_depth;
    let q_key = if a.rdma_cm { RDMA_UDP_Q_KEY } else { Q_KEY };
    let qp = dev.create_ud_qp_with(qcfg, q_key)?;
    let mtu = dev.ud_mtu(qp).context("the UD QP's MTU")?.bytes();
    if a.size > mtu {
        bail!("Requested size larger than port MTU ({mtu})");
    }
    let recv_len = a.size + GRH_LEN as u32;
    let post_recvs = |n: u32| -> Result<u32> {
        for _ in 0..n {
            let sg_list = vec![mr.sge(0, recv_len)?];
            dev.post_recv(
                qp,
                RecvWr {
                    wr_id: RECV_WRID,
                    sg_list,
                },
            )?;
        }
        Ok(n)
    };
    let routs = post_recvs(a.common.rx_depth)?;

    let mine = PingpongDest {
        lid: 0,
        qpn: qp.qpn(),
        psn: Psn::new(rocev2::random_psn()),
        gid: rocev2::gid(my_ip).octets(),
    };
    let announce = || print_dest("local address: ", ':', &mine);
    let (remote, ah, peer_q_key) = if a.rdma_cm {
        let (remote, peer_q_key) = rdma_cm_exchange(&a, &dev, qp, my_ip, announce)?;
        let ah = peer_ah(&dev, pd, &remote)?;
        (remote, ah, peer_q_key)
    } else {
        announce();
        let (remote, ah) = tcp_exchange(&a, &dev, pd, &mine)?;
        (remote, ah, Q_KEY)
    };
    print_dest("remote address:", ',', &remote);

    let to = UdAddress {
        ah,
        qpn: remote.qpn,
        q_key: peer_q_key,
    };
    let send = SendWr::new(SEND_WRID, SendOp::Send).sge(mr.sge(GRH_LEN as u64, a.size)?);
    let start = Instant::now();
    let pingpong = PingPong {
        dev: &dev,
        cq,
        iters: a.common.iters,
        rx_depth: a.common.rx_depth,
        batch: 2,
        wait_context: "waiting for completions (UD is unreliable: a datagram may be lost)",
    };
    pingpong.run(
        a.common.servername.is_some(),
        routs,
        || Ok(dev.post_send_to(qp, to, send.clone())?),
        post_recvs,
        || {},
    )?;
    rocev2_examples::print_summary(u64::from(a.size), a.common.iters, start.elapsed());
    Ok(())
}
