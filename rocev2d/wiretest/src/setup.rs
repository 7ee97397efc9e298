//! Bring-up: [`open`] the host (interface, datapath, the endpoint with its receiver-side
//! congestion control, the driver); per connection ([`add_qp`]) register a buffer, create the
//! QP, exchange [`rocev2::Endpoint`]s over the TCP connection ([`rocev2::connect::exchange`],
//! the form `write_bw` and every rocev2 program use), resolve the other side's MAC, connect the
//! QP, print `READY`. The client ([`client`]) does both once; the server ([`crate::serve`])
//! opens once and adds a QP per accepted connection, all in the one endpoint.
//!
//! The QPs' congestion control comes from the `[cc]` section of a `rocev2d run` configuration
//! file (`--config`), and how the driver waits from its `[datapath]` `wait` and `spin_us` keys
//! (default adaptive; `--busy-poll` means spin), read by the daemon's own parser so both
//! programs accept the same keys.
//!
//! Deviations: none.

use crate::args::Args;
use crate::oob::Oob;
use crate::peer::{BASE_VA, BULK_OFF, Conn, Host, Peer, RECV_N, RECV_OFF, RECV_SLOT};
use crate::tap::Tap;
use crate::workload::Workload;
use anyhow::{Context as _, anyhow, bail};
use rocev2_core::Endpoint;
use rocev2_core::mprdma::MpConfig;
use rocev2_core::mr::{AccessFlags, VecMemory};
use rocev2_core::qp::state::MAX_RD_ATOMIC;
use rocev2_core::qp::{
    ConnectAttr, ExtCaps, IofdTokens, Path, QpAttr, QpConfig, QpMode, QpState, RecvWr, Sge,
};
use rocev2_core::wire::frame::Ecn;
use rocev2_datapath::entropy::os_seed;
use rocev2_datapath::{Driver, DriverConfig, Interface, WaitMode, auto, neigh};
use rocev2d::config::Config;
use rocev2d::stats::Identity;
use serde_json::json;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Access to every buffer: both sides' workloads use every verb.
const ALL: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

/// Opens the host: interface, datapath, an endpoint with the `[cc]` section's receiver side,
/// and the driver, with no QP yet.
///
/// # Errors
/// Interface, datapath or configuration failures.
pub fn open(a: &Args) -> anyhow::Result<Host> {
    let end = Instant::now() + Duration::from_secs(a.deadline_secs);
    let iface = Interface::by_name(&a.iface)?;
    let src_ip = iface.source_ip(a.ipv6).ok_or_else(|| {
        anyhow!(
            "{} has no {} address",
            a.iface,
            if a.ipv6 { "IPv6" } else { "IPv4" }
        )
    })?;
    let mtu = iface
        .path_mtu(a.ipv6)
        .ok_or_else(|| anyhow!("{}'s MTU {} is too small for RoCEv2", a.iface, iface.mtu))?;
    let mut opts = auto::Options::default();
    opts.udp.accept_unverified_icrc = a.accept_unverified_icrc;
    opts.udp.gso = a.udp_gso || !a.no_udp_gso;
    opts.udp.gro = !a.no_udp_gro;
    let opened = auto::open(&iface, a.datapath, &opts)?;
    let id = Identity {
        iface: a.iface.clone(),
        datapath: opened.datapath.name().to_string(),
        reason: opened.reason.clone(),
        started: Instant::now(),
    };
    let file = match &a.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    let mut ep = Endpoint::new(os_seed().context("reading /dev/urandom")?);
    ep.set_receiver_cc(file.cc.receiver());
    let cfg = DriverConfig {
        wait: if a.busy_poll {
            WaitMode::Spin
        } else {
            file.wait
        },
        ..DriverConfig::default()
    };
    let d = Driver::new(ep, VecMemory::new(), Tap::new(opened.datapath), cfg);
    Ok(Host {
        d,
        iface,
        id,
        end,
        src_ip,
        mtu,
        cc: file.cc,
    })
}

/// Connects to the server and brings the client's one QP up.
///
/// # Errors
/// As [`open`] and [`add_qp`], or the TCP connection.
pub fn client(a: &Args) -> anyhow::Result<Peer> {
    let mut host = open(a)?;
    let Some(addr) = a.connect else {
        bail!("--listen or --connect is required");
    };
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .with_context(|| format!("connecting to {addr}"))?;
    let conn = add_qp(&mut host, a, stream)?;
    Ok(Peer { host, conn })
}

/// Brings one QP up over `stream` (the server's after accepting it, the client's after
/// connecting): its buffer (`--bulk-mib` or `--bulk-kib`), CQ and QP in the host's endpoint, the exchange,
/// the server's receive buffers, neighbour resolution, RTR/RTS; prints `READY`.
///
/// # Errors
/// Any setup failure: side channel, neighbour resolution, QP attributes, or `--workload verbs`
/// on a multipath QP.
pub fn add_qp(host: &mut Host, a: &Args, mut stream: TcpStream) -> anyhow::Result<Conn> {
    let ep = &mut host.d.ep;
    let len = BULK_OFF + a.bulk_bytes();
    let pd = ep.alloc_pd();
    let mr = ep.register_mr(pd, BASE_VA, len, ALL)?;
    host.d.mem.insert(mr.id, vec![0; usize::try_from(len)?]);
    let ep = &mut host.d.ep;
    let cq = ep.create_cq(1 << 16);
    let cc = host.cc;
    let mut qp_cfg = QpConfig::new(pd, cq, cq);
    qp_cfg.cc = cc.qp_config();
    qp_cfg.iofd_tokens = a.iofd_tokens.map(|tokens| IofdTokens {
        tokens,
        max_message_bytes: a.iofd_max_msg,
    });
    if a.multipath {
        qp_cfg = qp_cfg.with_multipath(MpConfig {
            vp_count: a.vps,
            seed: os_seed()?,
            ..MpConfig::paper()
        });
    }
    let qpn = ep.create_qp(qp_cfg)?;
    let now = rocev2_datapath::clock::now();
    ep.modify_qp(
        qpn,
        QpState::Init,
        &QpAttr {
            p_key: Some(0xffff),
            access: Some(ALL),
            ..QpAttr::default()
        },
        now,
        &mut host.d.mem,
    )?;
    let psn = (os_seed()? & 0xff_ffff) as u32;
    // The extensions our congestion control uses, and multipath when offered.
    let offer = ExtCaps {
        multipath: a.multipath,
        ..cc.scheme.peer_ext()
    };
    let me = rocev2::Endpoint {
        qpn,
        psn,
        ip: host.src_ip,
        mac: Some(host.iface.mac),
        mtu: host.mtu,
        ext: offer,
        mrs: vec![rocev2::RemoteMr {
            addr: mr.addr,
            len,
            rkey: mr.rkey,
        }],
    };

    // Out-of-band exchange.
    let remote = rocev2::connect::exchange(&mut stream, &me, Duration::from_secs(10))?;
    let remote_mr = *remote
        .mrs
        .first()
        .ok_or_else(|| anyhow!("the other side offered no buffer"))?;
    let oob = Oob::new(stream)?;

    // Server: receive buffers before the client can send.
    if a.listen.is_some() {
        for i in 0..RECV_N {
            ep.post_recv(
                qpn,
                RecvWr {
                    wr_id: i,
                    sg_list: vec![Sge {
                        addr: mr.addr + RECV_OFF + i * RECV_SLOT,
                        length: RECV_SLOT as u32,
                        lkey: mr.lkey,
                    }],
                },
            )?;
        }
    }

    let iface = &host.iface;
    let dst_mac = neigh::resolve(iface, remote.ip, Duration::from_secs(3))?;
    let path = Path {
        src_mac: iface.mac,
        dst_mac,
        vlan: None,
        src_ip: host.src_ip,
        dst_ip: remote.ip,
        dscp: 26,
        ecn: Ecn::Ect0,
        hop_limit: 64,
        udp_src_port: 49152 | (qpn.value() as u16 & 0x3fff),
        flow_label: 0,
    };
    let attr = ConnectAttr {
        path,
        mtu: host.mtu.min(remote.mtu),
        dest_qpn: remote.qpn,
        rq_psn: remote.psn,
        sq_psn: psn,
        rd_atomic: MAX_RD_ATOMIC,
        min_rnr_timer: 1,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: 7,
        peer_ext: remote.ext,
    };
    let now = rocev2_datapath::clock::now();
    ep.connect_qp(qpn, &attr, now, &mut host.d.mem)?;
    let multipath = ep.qp(qpn).map(|q| q.mode()) == Some(QpMode::MultiPath);
    if multipath && a.listen.is_none() && a.workload == Workload::Verbs {
        bail!("a multipath QP refuses READ and atomics: use --workload bulk, flood or outlive");
    }
    println!(
        "READY {}",
        json!({"datapath": host.id.datapath, "reason": host.id.reason, "qpn": qpn.value(), "mtu": attr.mtu.bytes(), "peer": remote.ip, "dst_mac": rocev2d::mac(dst_mac), "mode": if multipath { "multipath" } else { "rc" }})
    );
    Ok(Conn {
        qpn,
        cq,
        mr,
        remote,
        remote_mr,
        path,
        oob,
        completions: Vec::new(),
        dasr_n_max: None,
    })
}
