//! Framing: a QP's transport packet becomes a whole Ethernet frame for its path.
//!
//! Source: RoCEv2 Annex A17.4 (IP/UDP encapsulation, destination port 4791, UDP source port as
//! ECMP entropy), RFC 3168 (ECN: only data packets are ECN-capable, seed 002 §II-B), and
//! docs/wire.md ("ICRC in each datapath mode") for the IPv4 identification and DF bit.
//!
//! A path's Ethernet/IP/UDP headers are the same for every frame but a few fields, so they are
//! built once into a [`PathHead`] when the path is set (a QP's INIT→RTR, a UD address handle)
//! and every frame is built from it ([`HeaderTemplate`]): the engine sends no frame any other
//! way.
//!
//! Deviations: none.

use super::Path;
use crate::wire::frame::Ecn;
use crate::wire::{EthRepr, FrameBuf, HeaderTemplate, IpRepr, ROCEV2_UDP_PORT, RoceRepr, UdpRepr};
use core::net::IpAddr;

/// A path's frame headers, built once: what every frame the QP (or address handle) sends
/// starts with, and the ECN codepoint of its data packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PathHead {
    head: HeaderTemplate,
    /// ECN of data packets; the others are Not-ECT.
    ecn: Ecn,
}

impl PathHead {
    /// The head for `path`; `None` when the path cannot be framed (mixed IP families or a field
    /// out of range, which [`Path::check`] refuses first).
    pub(crate) fn new(path: &Path) -> Option<PathHead> {
        let ip = match (path.src_ip, path.dst_ip) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => IpRepr::V4 {
                src,
                dst,
                dscp: path.dscp,
                ecn: path.ecn,
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
                ecn: path.ecn,
                flow_label: path.flow_label,
                hop_limit: path.hop_limit,
            },
            _ => return None,
        };
        let eth = EthRepr {
            src: path.src_mac,
            dst: path.dst_mac,
            vlan: path.vlan,
        };
        let udp = UdpRepr {
            src_port: path.udp_src_port,
            dst_port: ROCEV2_UDP_PORT,
            checksum: path.dst_ip.is_ipv6(),
        };
        Some(PathHead {
            head: HeaderTemplate::new(&eth, &ip, &udp).ok()?,
            ecn: path.ecn,
        })
    }

    /// This head with another UDP source port: a multipath virtual path (seed 001 §3.1).
    pub(crate) fn with_src_port(mut self, port: u16) -> PathHead {
        self.head.set_src_port(port);
        self
    }
}

/// Frames a transport packet for this head's path and lets `fill` write its payload.
pub(crate) fn emit(
    head: &PathHead,
    roce: &RoceRepr,
    payload_len: usize,
    buf: &mut dyn FrameBuf,
    fill: impl FnOnce(&mut [u8]),
) -> Option<usize> {
    // Only data packets are ECN-capable: switches mark data, and the notification point
    // reacts to marked data only (seed 002 §II-B).
    let carries_data = roce.bth.opcode.layout().is_ok_and(|l| l.payload);
    let ecn = if carries_data { head.ecn } else { Ecn::NotEct };
    // The transport repr is borrowed, here and by the caller: copying it per packet (272
    // bytes with a REXT, and reading it back right after) showed in `engine_no_copy`'s
    // profile.
    head.head.emit_into(roce, ecn, buf, payload_len, fill).ok()
}
