//! `flood` and `rxe`: frames the server must drop, built like the QP's own (same MACs,
//! addresses and ports) and sent through the same datapath ([`crate::tap`]); the server's drop
//! counters, in the result's `"server"`, must account for them.
//!
//! * `flood`: [`FLOOD_PER_KIND`] frames of each kind, spread over a `bulk` transfer: valid
//!   frames for a QP that does not exist (`unknown_qp`); frames for the real QP with one
//!   payload bit flipped after the ICRC was computed (`icrc_error`); random bytes as the UDP
//!   payload, a BTH with random opcode, TVer, … (any reason).
//! * `rxe`: [`RXE_FRAMES`] valid frames for a QP that does not exist whose IPv4
//!   Identification is not 0, as rdma_rxe writes them, covered by their ICRC (docs/wire.md,
//!   "ICRC in each datapath mode").
//!
//! Deviations: none.

use super::bulk;
use crate::peer::{Peer, pattern};
use anyhow::{bail, ensure};
use rocev2_core::qp::Path;
use rocev2_core::wire::ip::ipv4_header_checksum;
use rocev2_core::wire::{
    BthRepr, EthRepr, FrameRepr, IpRepr, Opcode, Operation, Psn, Qpn, ROCEV2_UDP_PORT, RoceRepr,
    UdpRepr,
};
use rocev2_datapath::{Datapath, TxBatch};
use serde_json::{Value, json};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Frames of each kind `flood` sends.
const FLOOD_PER_KIND: usize = 2000;
/// Frames `rxe` sends.
const RXE_FRAMES: usize = 500;

/// `bulk` of `bytes` in `msg`-byte messages while garbage goes to the server.
///
/// # Errors
/// As `bulk`; or a garbage frame the datapath did not send.
pub fn flood(peer: &mut Peer, bytes: u64, msg: u64) -> anyhow::Result<Value> {
    let frames = garbage(peer, FLOOD_PER_KIND)?;
    let injected = json!({
        "unknown_qp": FLOOD_PER_KIND,
        "icrc_error": FLOOD_PER_KIND,
        "random": FLOOD_PER_KIND,
    });
    inject(peer, frames, injected, Some((bytes, msg)))
}

/// rdma_rxe-shaped frames to a missing QP, nothing else.
///
/// # Errors
/// An IPv6 QP (IPv6 has no Identification), or a frame the datapath did not send.
pub fn rxe(peer: &mut Peer) -> anyhow::Result<Value> {
    let ip = ip_repr(&peer.conn.path)?;
    ensure!(
        matches!(ip, IpRepr::V4 { .. }),
        "IPv6 has no Identification"
    );
    let frames = (0..RXE_FRAMES)
        .map(|i| {
            frame(
                &peer.conn.path,
                ip,
                0xab_cdee,
                &pattern(i as u64, 64),
                0x1000 + i as u16,
            )
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    inject(peer, frames, json!({ "rxe_ip_id": RXE_FRAMES }), None)
}

/// Queues `frames` on the tap, runs `bulk` if asked, sends what is left, and gives the server
/// a moment to count the tail.
fn inject(
    peer: &mut Peer,
    frames: Vec<Vec<u8>>,
    injected: Value,
    bulk: Option<(u64, u64)>,
) -> anyhow::Result<Value> {
    let total = frames.len() as u64;
    peer.host.d.datapath_mut().inject.extend(frames);
    let bulk = match bulk {
        Some((bytes, msg)) => bulk::run(peer, bytes, msg, false)?,
        None => Value::Null,
    };
    // Whatever is still queued goes out now.
    while !peer.host.d.datapath().inject.is_empty() {
        peer.check_deadline()?;
        peer.host.d.poll()?;
        // An empty batch still lets the tap send its frames.
        let mut empty = TxBatch::new(1);
        peer.host.d.datapath_mut().send(&mut empty)?;
    }
    ensure!(
        peer.host.d.datapath().injected == total,
        "not every flood frame was sent"
    );
    // Let the server count the tail.
    let settle = Instant::now() + Duration::from_millis(200);
    while Instant::now() < settle {
        peer.turn()?;
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(json!({"bulk": bulk, "injected": injected}))
}

/// The IP header of the QP's frames, Identification 0.
fn ip_repr(p: &Path) -> anyhow::Result<IpRepr> {
    Ok(match (p.src_ip, p.dst_ip) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => IpRepr::V4 {
            src,
            dst,
            dscp: p.dscp,
            ecn: p.ecn,
            identification: 0,
            dont_fragment: true,
            ttl: p.hop_limit,
        },
        (IpAddr::V6(src), IpAddr::V6(dst)) => IpRepr::V6 {
            src,
            dst,
            dscp: p.dscp,
            ecn: p.ecn,
            flow_label: 0,
            hop_limit: p.hop_limit,
        },
        _ => bail!("mixed address families"),
    })
}

/// A well-formed SEND Only to `qpn` along `p`, with IPv4 Identification `id` (ignored for
/// IPv6), its ICRC computed over it.
fn frame(p: &Path, mut ip: IpRepr, qpn: u32, payload: &[u8], id: u16) -> anyhow::Result<Vec<u8>> {
    if let IpRepr::V4 { identification, .. } = &mut ip {
        *identification = id;
    }
    let repr = FrameRepr {
        eth: EthRepr {
            src: p.src_mac,
            dst: p.dst_mac,
            vlan: None,
        },
        ip,
        udp: UdpRepr {
            src_port: p.udp_src_port,
            dst_port: ROCEV2_UDP_PORT,
            checksum: false,
        },
        roce: RoceRepr::new(BthRepr::new(
            Opcode::rc(Operation::SendOnly),
            0xffff,
            Qpn::new(qpn),
            Psn::new(0x12_3456),
        )),
    };
    let mut buf = vec![0; repr.buffer_len(payload.len())?];
    repr.emit(&mut buf, payload)?;
    Ok(buf)
}

/// `per_kind` frames of each `flood` kind, interleaved so each is spread over the transfer.
fn garbage(peer: &Peer, per_kind: usize) -> anyhow::Result<Vec<Vec<u8>>> {
    let p = &peer.conn.path;
    let ip = ip_repr(p)?;
    let v4 = matches!(ip, IpRepr::V4 { .. });
    let l2l3 = 14 + if v4 { 20 } else { 40 };
    let mut out = Vec::new();
    let mut rng = 0x5eed_u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for i in 0..per_kind {
        // Valid frame for a QP that does not exist: unknown_qp.
        out.push(frame(p, ip, 0xab_cdef, &pattern(i as u64, 64), 0)?);
        // The real QP, one payload bit flipped after the ICRC was computed: icrc_error.
        let mut f = frame(
            p,
            ip,
            peer.conn.remote.qpn.value(),
            &pattern(i as u64, 64),
            0,
        )?;
        let at = l2l3 + 8 + 12 + 3;
        f[at] ^= 0x10;
        out.push(f);
        // Random bytes as the UDP payload: any reason. The lengths and the IPv4 header
        // checksum are rewritten so only the RoCEv2 part is garbage.
        let mut f = frame(p, ip, peer.conn.remote.qpn.value(), &[], 0)?;
        let n = 1 + (next() % 120) as usize;
        f.truncate(l2l3 + 8);
        f.extend((0..n).map(|_| next() as u8));
        let ulen = (8 + n) as u16;
        f[l2l3 + 4..l2l3 + 6].copy_from_slice(&ulen.to_be_bytes());
        if v4 {
            let total = (20 + 8 + n) as u16;
            f[16..18].copy_from_slice(&total.to_be_bytes());
            f[24..26].fill(0);
            let sum = ipv4_header_checksum(&f[14..34]);
            f[24..26].copy_from_slice(&sum.to_be_bytes());
        } else {
            f[18..20].copy_from_slice(&ulen.to_be_bytes());
        }
        out.push(f);
    }
    Ok(out)
}
