//! Framing: a QP's transport packet becomes a whole Ethernet frame for its path.
//!
//! Source: RoCEv2 Annex A17.4 (IP/UDP encapsulation, destination port 4791, UDP source port as
//! ECMP entropy), RFC 3168 (ECN: only data packets are ECN-capable, seed 002 §II-B), and
//! docs/wire.md ("ICRC in each datapath mode") for the IPv4 identification and DF bit.
//!
//! Deviations: none.

use super::Path;
use crate::wire::frame::Ecn;
use crate::wire::{EthRepr, FrameBuf, FrameHeaders, IpRepr, ROCEV2_UDP_PORT, RoceRepr, UdpRepr};
use core::net::IpAddr;

/// Frames a transport packet for this QP's path and lets `fill` write its payload.
pub(crate) fn emit(
    path: &Path,
    roce: &RoceRepr,
    payload_len: usize,
    buf: &mut dyn FrameBuf,
    fill: impl FnOnce(&mut [u8]),
) -> Option<usize> {
    // Only data packets are ECN-capable: switches mark data, and the notification point
    // reacts to marked data only (seed 002 §II-B).
    let carries_data = roce.bth.opcode.layout().is_ok_and(|l| l.payload);
    let ecn = if carries_data { path.ecn } else { Ecn::NotEct };
    let ip = match (path.src_ip, path.dst_ip) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => IpRepr::V4 {
            src,
            dst,
            dscp: path.dscp,
            ecn,
            // Identification 0 with DF, as a UDP socket's kernel would write it, so all
            // datapaths produce the same ICRC (docs/wire.md, "ICRC in each datapath mode").
            identification: 0,
            dont_fragment: true,
            ttl: path.hop_limit,
        },
        (IpAddr::V6(src), IpAddr::V6(dst)) => IpRepr::V6 {
            src,
            dst,
            dscp: path.dscp,
            ecn,
            flow_label: path.flow_label,
            hop_limit: path.hop_limit,
        },
        // Mixed families are refused at modify time.
        _ => return None,
    };
    // The transport repr is borrowed, here and by the caller, not moved into a `FrameRepr`
    // or this function: copying it per packet (272 bytes with a REXT, and reading it back
    // right after) showed in `engine_no_copy`'s profile.
    let frame = FrameHeaders {
        eth: EthRepr {
            src: path.src_mac,
            dst: path.dst_mac,
            vlan: path.vlan,
        },
        ip,
        udp: UdpRepr {
            src_port: path.udp_src_port,
            dst_port: ROCEV2_UDP_PORT,
            checksum: path.dst_ip.is_ipv6(),
        },
        roce,
    };
    frame.emit_into(buf, payload_len, fill).ok()
}
