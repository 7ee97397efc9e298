//! Whole RoCEv2 frames: Ethernet II (+ 802.1Q), IPv4 or IPv6, UDP 4791, transport, ICRC.
//!
//! Source: RoCEv2 Annex A17.4 (encapsulation: UDP destination port 4791, the UDP source port is
//! free for ECMP entropy), A17.8 (ICRC). The L2–L4 headers are read and written with
//! `etherparse`; this module only adds the RoCEv2 rules and maps every failure onto our
//! [`Error`], so nothing above it sees etherparse's types.
//!
//! Parsing checks, in order: Ethernet type (one optional 802.1Q tag), IP version and lengths,
//! IPv4 header checksum, no IPv4 options or IPv6 extension headers, no fragments, UDP, UDP
//! length, destination port 4791, UDP checksum when non-zero, the transport headers, and last the
//! ICRC. Each failure is a distinct [`Error`], so the endpoint can count drops by reason.
//!
//! Deviations: IPv4 options, IPv6 extension headers and double-tagged (QinQ) frames are refused
//! ([`Error::IpOptions`], [`Error::NotIp`]); no RoCEv2 implementation sends them.

use super::packet::ICRC_LEN;
use super::{Error, Header, RocePacket, RoceRepr, icrc};
use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr};
use core::ops::Range;
use etherparse::{
    EtherType, Ethernet2Header, Ethernet2HeaderSlice, IpNumber, Ipv4HeaderSlice, Ipv6FlowLabel,
    Ipv6Header, Ipv6HeaderSlice, SingleVlanHeader, SingleVlanHeaderSlice, UdpHeader,
    UdpHeaderSlice, VlanId, VlanPcp,
};

/// The IANA-assigned RoCEv2 UDP destination port.
pub const ROCEV2_UDP_PORT: u16 = 4791;

const ETH_LEN: usize = 14;
const VLAN_LEN: usize = 4;
const UDP_LEN: usize = 8;

/// The two-bit ECN field of the IP header (RFC 3168).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Ecn {
    /// `00`: the sender does not support ECN; routers drop instead of marking.
    #[default]
    NotEct,
    /// `01`: ECN-capable transport (1).
    Ect1,
    /// `10`: ECN-capable transport (0); what RoCEv2 senders use so switches can mark.
    Ect0,
    /// `11`: congestion experienced; the receiver's notification point reacts with a CNP.
    Ce,
}

impl Ecn {
    /// The field's value from its two bits.
    pub const fn from_bits(b: u8) -> Ecn {
        match b & 3 {
            0 => Ecn::NotEct,
            1 => Ecn::Ect1,
            2 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }
    /// The two bits.
    pub const fn bits(self) -> u8 {
        match self {
            Ecn::NotEct => 0,
            Ecn::Ect1 => 1,
            Ecn::Ect0 => 2,
            Ecn::Ce => 3,
        }
    }
}

/// An 802.1Q tag; its PCP selects the PFC priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanRepr {
    /// Priority code point (3 bits).
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN id (12 bits).
    pub vid: u16,
}

/// Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthRepr {
    /// Source MAC.
    pub src: [u8; 6],
    /// Destination MAC.
    pub dst: [u8; 6],
    /// Optional 802.1Q tag.
    pub vlan: Option<VlanRepr>,
}

/// The IP header fields a RoCEv2 frame carries (lengths and checksums are derived).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpRepr {
    /// IPv4 without options.
    V4 {
        /// Source address.
        src: Ipv4Addr,
        /// Destination address.
        dst: Ipv4Addr,
        /// DSCP (6 bits).
        dscp: u8,
        /// ECN.
        ecn: Ecn,
        /// Identification; covered by the ICRC.
        identification: u16,
        /// Don't Fragment (set by every RoCEv2 sender we know).
        dont_fragment: bool,
        /// Time to live.
        ttl: u8,
    },
    /// IPv6 without extension headers.
    V6 {
        /// Source address.
        src: Ipv6Addr,
        /// Destination address.
        dst: Ipv6Addr,
        /// DSCP (upper 6 bits of the traffic class).
        dscp: u8,
        /// ECN (lower 2 bits of the traffic class).
        ecn: Ecn,
        /// Flow label (20 bits).
        flow_label: u32,
        /// Hop limit.
        hop_limit: u8,
    },
}

impl IpRepr {
    /// The ECN codepoint.
    pub const fn ecn(&self) -> Ecn {
        match self {
            IpRepr::V4 { ecn, .. } | IpRepr::V6 { ecn, .. } => *ecn,
        }
    }
    const fn header_len(&self) -> usize {
        match self {
            IpRepr::V4 { .. } => 20,
            IpRepr::V6 { .. } => 40,
        }
    }
}

/// UDP header fields (length derived).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpRepr {
    /// Source port: per-QP (or per virtual path) entropy for ECMP.
    pub src_port: u16,
    /// Destination port, 4791 for RoCEv2.
    pub dst_port: u16,
    /// Whether a UDP checksum is computed. Linux rxe sends zero over IPv4; IPv6 senders should
    /// compute one.
    pub checksum: bool,
}

/// A whole frame's headers; the payload is passed beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRepr {
    /// Link layer.
    pub eth: EthRepr,
    /// Network layer.
    pub ip: IpRepr,
    /// UDP.
    pub udp: UdpRepr,
    /// The transport headers, BTH onwards.
    pub roce: RoceRepr,
}

/// A checked view of a frame: where each layer lies, and the transport packet.
///
/// Holds only positions and the transport view: the Ethernet, IP and UDP reprs are read from
/// the checked bytes when asked for. A larger value returned through a `Result` for every
/// received frame was moved with a `memmove` (6% of the receive path's samples when it held
/// the Ethernet and UDP reprs), and an IP repr built while checking was written field by field
/// and read back in wider words by that move, a wait on store forwarding (a quarter of the
/// receive path's own samples outside the CRC).
#[derive(Debug, Clone)]
pub struct Frame<'a> {
    bytes: &'a [u8],
    /// Where the IP header starts; the UDP header follows it.
    l3: usize,
    /// The IP header's length: 20 (IPv4 without options) or 40 (IPv6).
    ip_len: usize,
    transport: RocePacket<&'a [u8]>,
}

fn short_or(slice_len: usize, min: usize, header: Header) -> Error {
    if slice_len < min {
        Error::Truncated(header)
    } else {
        Error::Malformed(header)
    }
}

impl<'a> Frame<'a> {
    /// Locates every layer and checks everything but the ICRC (see [`Self::verify_icrc`]).
    ///
    /// Always inlined: out of line, the `Frame` went back through memory, its IP repr's fields
    /// written byte by byte and read back in wider words when the caller moved it, a wait on
    /// store forwarding (a quarter of the receive path's own samples outside the CRC).
    #[inline(always)]
    pub fn new_checked(bytes: &'a [u8]) -> Result<Frame<'a>, Error> {
        let eth = Ethernet2HeaderSlice::from_slice(bytes)
            .map_err(|_| Error::Truncated(Header::Ethernet))?;
        let mut at = ETH_LEN;
        let mut ether_type = eth.ether_type();
        if ether_type == EtherType::VLAN_TAGGED_FRAME {
            let vlan = SingleVlanHeaderSlice::from_slice(&bytes[at..])
                .map_err(|_| Error::Truncated(Header::Vlan))?;
            ether_type = vlan.ether_type();
            at += VLAN_LEN;
        }
        let rest = &bytes[at..];
        let (ip_len, payload_len) = match ether_type {
            EtherType::IPV4 => {
                let h = Ipv4HeaderSlice::from_slice(rest)
                    .map_err(|_| short_or(rest.len(), 20, Header::Ipv4))?;
                let hl = h.slice().len();
                if hl != 20 {
                    return Err(Error::IpOptions);
                }
                let total = h.total_len() as usize;
                if total < hl {
                    return Err(Error::Malformed(Header::Ipv4));
                }
                if rest.len() < total {
                    return Err(Error::Truncated(Header::Ipv4));
                }
                if h.more_fragments() || h.fragments_offset().value() != 0 {
                    return Err(Error::NotUdp);
                }
                if h.protocol() != IpNumber::UDP {
                    return Err(Error::NotUdp);
                }
                if super::ip::ipv4_header_checksum(h.slice()) != 0 {
                    return Err(Error::BadIpChecksum);
                }
                (hl, total - hl)
            }
            EtherType::IPV6 => {
                let h = Ipv6HeaderSlice::from_slice(rest)
                    .map_err(|_| short_or(rest.len(), 40, Header::Ipv6))?;
                let next = h.next_header();
                if next != IpNumber::UDP {
                    return Err(if Ipv6Header::is_skippable_header_extension(next) {
                        Error::IpOptions
                    } else {
                        Error::NotUdp
                    });
                }
                let payload = h.payload_length() as usize;
                if rest.len() < 40 + payload {
                    return Err(Error::Truncated(Header::Ipv6));
                }
                (40, payload)
            }
            _ => return Err(Error::NotIp),
        };
        let ip = at..at + ip_len;
        at += ip_len;
        let ip_payload = &bytes[at..at + payload_len];
        let udp_h =
            UdpHeaderSlice::from_slice(ip_payload).map_err(|_| Error::Truncated(Header::Udp))?;
        if udp_h.length() as usize != payload_len {
            return Err(Error::Malformed(Header::Udp));
        }
        if udp_h.destination_port() != ROCEV2_UDP_PORT {
            return Err(Error::NotRoce(udp_h.destination_port()));
        }
        let transport_bytes = &ip_payload[UDP_LEN..];
        if udp_h.checksum() != 0 {
            let h = udp_h.to_header();
            let want = match ether_type {
                EtherType::IPV4 => h.calc_checksum_ipv4_raw(
                    bytes[ip.start + 12..ip.start + 16]
                        .try_into()
                        .unwrap_or_default(),
                    bytes[ip.start + 16..ip.start + 20]
                        .try_into()
                        .unwrap_or_default(),
                    transport_bytes,
                ),
                _ => h.calc_checksum_ipv6_raw(
                    bytes[ip.start + 8..ip.start + 24]
                        .try_into()
                        .unwrap_or_default(),
                    bytes[ip.start + 24..ip.start + 40]
                        .try_into()
                        .unwrap_or_default(),
                    transport_bytes,
                ),
            };
            if want != Ok(udp_h.checksum()) {
                return Err(Error::BadUdpChecksum);
            }
        }
        let transport = RocePacket::new_checked(transport_bytes)?;
        Ok(Frame {
            bytes,
            l3: ip.start,
            ip_len,
            transport,
        })
    }

    /// Where the IP header lies.
    fn ip(&self) -> Range<usize> {
        self.l3..self.l3 + self.ip_len
    }

    /// Checks the ICRC (RoCEv2 Annex A17.8).
    pub fn verify_icrc(&self) -> Result<(), Error> {
        // From the eight bytes before the IP header (the LRH stand-in; an Ethernet header is
        // longer) to the end of the ICRC: one pass over the frame where it lies.
        let ip = self.ip();
        let end = ip.end + UDP_LEN + self.transport.icrc_covered().len() + ICRC_LEN;
        icrc::verify_frame(&self.bytes[ip.start - 8..end], ip.len())
    }
    /// The IP header bytes.
    pub fn ip_header(&self) -> &'a [u8] {
        &self.bytes[self.ip()]
    }
    /// The UDP header bytes.
    pub fn udp_header(&self) -> &'a [u8] {
        let at = self.ip().end;
        &self.bytes[at..at + UDP_LEN]
    }
    /// The Ethernet header's fields (and the 802.1Q tag's, when there is one).
    #[inline]
    pub fn eth_repr(&self) -> EthRepr {
        let b = self.bytes;
        let mac = |at: usize| -> [u8; 6] { b[at..at + 6].try_into().unwrap_or_default() };
        // `new_checked` found the IP header right after the Ethernet header or after one tag.
        let vlan = (self.l3 == ETH_LEN + VLAN_LEN).then(|| {
            let tci = u16::from_be_bytes([b[ETH_LEN], b[ETH_LEN + 1]]);
            VlanRepr {
                pcp: (tci >> 13) as u8,
                dei: tci & 0x1000 != 0,
                vid: tci & 0x0fff,
            }
        });
        EthRepr {
            dst: mac(0),
            src: mac(6),
            vlan,
        }
    }
    /// The IP header's fields.
    #[inline]
    pub fn ip_repr(&self) -> IpRepr {
        let h = self.ip_header();
        let addr4 = |at: usize| -> [u8; 4] { h[at..at + 4].try_into().unwrap_or_default() };
        let addr6 = |at: usize| -> [u8; 16] { h[at..at + 16].try_into().unwrap_or_default() };
        // `new_checked` accepted only these two lengths.
        if self.ip_len == 40 {
            let class = (h[0] << 4) | (h[1] >> 4);
            IpRepr::V6 {
                src: Ipv6Addr::from(addr6(8)),
                dst: Ipv6Addr::from(addr6(24)),
                dscp: class >> 2,
                ecn: Ecn::from_bits(class),
                flow_label: u32::from_be_bytes([0, h[1] & 0x0f, h[2], h[3]]),
                hop_limit: h[7],
            }
        } else {
            IpRepr::V4 {
                src: Ipv4Addr::from(addr4(12)),
                dst: Ipv4Addr::from(addr4(16)),
                dscp: h[1] >> 2,
                ecn: Ecn::from_bits(h[1]),
                identification: u16::from_be_bytes([h[4], h[5]]),
                dont_fragment: h[6] & 0x40 != 0,
                ttl: h[8],
            }
        }
    }
    /// The UDP header's fields.
    #[inline]
    pub fn udp_repr(&self) -> UdpRepr {
        let u = self.udp_header();
        UdpRepr {
            src_port: u16::from_be_bytes([u[0], u[1]]),
            dst_port: u16::from_be_bytes([u[2], u[3]]),
            checksum: u[6] != 0 || u[7] != 0,
        }
    }
    /// The transport packet (BTH … ICRC).
    pub fn transport(&self) -> &RocePacket<&'a [u8]> {
        &self.transport
    }
    /// The message payload carried by this packet (pad excluded).
    pub fn payload(&self) -> &'a [u8] {
        self.transport.payload_slice()
    }
}

impl FrameRepr {
    /// Checks a frame completely (ICRC included) and returns its meaning and payload.
    ///
    /// Always inlined: out of line, the 300-byte repr was assembled in a local and copied into
    /// the result, and the copy waited on the narrow stores that had just built it.
    #[inline(always)]
    pub fn parse(bytes: &[u8]) -> Result<(FrameRepr, &[u8]), Error> {
        let frame = Frame::new_checked(bytes)?;
        frame.verify_icrc()?;
        Ok((Self::parse_frame(&frame)?, frame.payload()))
    }

    /// The meaning of a checked frame (whose ICRC the caller verified or chose not to).
    #[inline(always)]
    pub fn parse_frame(frame: &Frame<'_>) -> Result<FrameRepr, Error> {
        Ok(FrameRepr {
            eth: frame.eth_repr(),
            ip: frame.ip_repr(),
            udp: frame.udp_repr(),
            roce: RoceRepr::parse(frame.transport())?,
        })
    }

    /// Bytes a frame with a payload of `payload_len` takes, ICRC included (no Ethernet FCS).
    pub fn buffer_len(&self, payload_len: usize) -> Result<usize, Error> {
        Ok(head_len(self.eth.vlan.is_some(), &self.ip) + self.roce.buffer_len(payload_len)?)
    }

    /// The template of this frame's Ethernet, 802.1Q, IP and UDP headers: what a sender keeps
    /// per path to build every frame from ([`HeaderTemplate`]).
    pub fn template(&self) -> Result<HeaderTemplate, Error> {
        HeaderTemplate::new(&self.eth, &self.ip, &self.udp)
    }

    /// Writes headers into `buf` (exactly [`Self::buffer_len`] long), lets `fill` write the
    /// payload in place, then computes pad, ICRC, and the IP and UDP checksums. This builds
    /// the [`HeaderTemplate`] for this one frame and emits through it, the code the engine
    /// runs for every frame with the template it keeps per path.
    pub fn emit_with(
        &self,
        buf: &mut [u8],
        payload_len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), Error> {
        self.template()?
            .emit_with(&self.roce, self.ip.ecn(), buf, payload_len, fill)
    }

    /// Writes the whole frame with `payload`; see [`Self::emit_with`].
    pub fn emit(&self, buf: &mut [u8], payload: &[u8]) -> Result<(), Error> {
        self.emit_with(buf, payload.len(), |dst| dst.copy_from_slice(payload))
    }
}

/// Where the engine writes a frame it sends ([`crate::Endpoint::poll_transmit`]): a growable
/// `Vec<u8>`, or a datapath's own transmit buffer (an AF_XDP UMEM chunk, so the frame is built
/// where the NIC reads it) that falls back to a spare buffer for a frame it cannot hold.
pub trait FrameBuf {
    /// A buffer of exactly `len` bytes for the next frame. Its contents are unspecified: the
    /// emitter writes every byte ([`HeaderTemplate::emit_with`]).
    fn frame_mut(&mut self, len: usize) -> &mut [u8];
    /// The first `len` bytes of the buffer [`Self::frame_mut`] last handed out: the frame as
    /// written, for a datapath that looks at it before sending it.
    fn frame(&self, len: usize) -> &[u8];
}

impl FrameBuf for alloc::vec::Vec<u8> {
    fn frame_mut(&mut self, len: usize) -> &mut [u8] {
        self.resize(len, 0);
        self
    }
    fn frame(&self, len: usize) -> &[u8] {
        &self[..len.min(self.len())]
    }
}

/// The longest L2–L4 head: Ethernet, one 802.1Q tag, IPv6, UDP.
const MAX_HEAD_LEN: usize = ETH_LEN + VLAN_LEN + 40 + UDP_LEN;

/// Bytes before the transport headers: Ethernet (and its tag), IP, UDP.
const fn head_len(vlan: bool, ip: &IpRepr) -> usize {
    ETH_LEN + if vlan { VLAN_LEN } else { 0 } + ip.header_len() + UDP_LEN
}

/// The Ethernet, 802.1Q, IP and UDP headers every frame of one path starts with, written once.
///
/// A sender's frames to one peer differ in these headers only by a few fields, so a path's
/// template is built when the path is set (a QP's INIT→RTR, a UD address handle) and every
/// frame copies its bytes and fills in what changes:
/// - the ECN codepoint, which the caller passes per frame (only data packets are ECN-capable,
///   seed 002 §II-B); the [`IpRepr`]'s own is not part of the template;
/// - the IPv4 total length and header checksum (RFC 791 §3.1), or the IPv6 payload length;
/// - the UDP length, and the UDP checksum when the template computes one.
///
/// Everything else (MACs, tag, DSCP, identification, DF, TTL or hop limit, flow label,
/// addresses, ports) is fixed here; [`Self::set_src_port`] changes the UDP source port (a
/// multipath virtual path, seed 001 §3.1). The transport headers, payload, pad and ICRC are
/// written per frame as before ([`RoceRepr`], [`icrc::compute_frame`]).
///
/// The IPv4 header checksum is not summed again per frame. The template keeps the ones'
/// complement sum of the eight 16-bit words that never change (RFC 1071 §2(B): the sum may be
/// taken in parts, in any order), and a frame adds the two that do (version/IHL/TOS, total
/// length), folds and complements. A folded sum of words not all zero is the one value in
/// 1..=0xffff congruent to their sum modulo 0xffff whatever the grouping (the first word is
/// never zero here), so the result equals [`super::ip::ipv4_header_checksum`] over the whole
/// header, which the receive path checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderTemplate {
    /// The head's bytes with every per-frame field zero.
    bytes: [u8; MAX_HEAD_LEN],
    /// Where the IP header starts: right after the Ethernet header or after its tag.
    l3: u8,
    /// IPv6 (a 40-byte header), else IPv4 without options (20 bytes).
    v6: bool,
    /// Whether each frame's UDP checksum is computed.
    udp_checksum: bool,
    /// IPv4: the folded ones' complement sum of the header's last eight 16-bit words (the
    /// checksum field counted as zero).
    fixed_sum: u16,
}

impl HeaderTemplate {
    /// The template for frames from `eth`, `ip` (its ECN aside) and `udp`; an error when a
    /// field does not fit its header (DSCP, 802.1Q tag, flow label).
    pub fn new(eth: &EthRepr, ip: &IpRepr, udp: &UdpRepr) -> Result<HeaderTemplate, Error> {
        let mut bytes = [0u8; MAX_HEAD_LEN];
        let l3 = ETH_LEN + eth.vlan.map_or(0, |_| VLAN_LEN);
        let ether_type = match ip {
            IpRepr::V4 { .. } => EtherType::IPV4,
            IpRepr::V6 { .. } => EtherType::IPV6,
        };
        let e = Ethernet2Header {
            source: eth.src,
            destination: eth.dst,
            ether_type: if eth.vlan.is_some() {
                EtherType::VLAN_TAGGED_FRAME
            } else {
                ether_type
            },
        };
        bytes[..ETH_LEN].copy_from_slice(&e.to_bytes());
        if let Some(v) = eth.vlan {
            let tag = SingleVlanHeader {
                pcp: VlanPcp::try_new(v.pcp).map_err(|_| Error::BadRepr)?,
                drop_eligible_indicator: v.dei,
                vlan_id: VlanId::try_new(v.vid).map_err(|_| Error::BadRepr)?,
                ether_type,
            };
            bytes[ETH_LEN..l3].copy_from_slice(&tag.to_bytes());
        }
        let mut fixed_sum = 0;
        let ip_len = match *ip {
            IpRepr::V4 {
                src,
                dst,
                dscp,
                identification,
                dont_fragment,
                ttl,
                ..
            } => {
                if dscp > 63 {
                    return Err(Error::BadRepr);
                }
                // RFC 791 §3.1 without options; total length and checksum are per frame.
                let [i0, i1] = identification.to_be_bytes();
                let [s0, s1, s2, s3] = src.octets();
                let [d0, d1, d2, d3] = dst.octets();
                let df = if dont_fragment { 0x40 } else { 0 };
                let h = [
                    0x45, // version 4, IHL 5
                    dscp << 2,
                    0, // total length
                    0,
                    i0,
                    i1,
                    df,
                    0, // fragment offset 0
                    ttl,
                    IpNumber::UDP.0,
                    0, // header checksum
                    0,
                    s0,
                    s1,
                    s2,
                    s3,
                    d0,
                    d1,
                    d2,
                    d3,
                ];
                // `wire::ip`'s checksum (the one IPv4 header checksum in the tree) over the
                // fixed words is the complement of their folded sum.
                fixed_sum = !super::ip::ipv4_header_checksum(&h[4..]);
                bytes[l3..l3 + 20].copy_from_slice(&h);
                20
            }
            IpRepr::V6 {
                src,
                dst,
                dscp,
                flow_label,
                hop_limit,
                ..
            } => {
                if dscp > 63 {
                    return Err(Error::BadRepr);
                }
                let h = Ipv6Header {
                    traffic_class: dscp << 2,
                    flow_label: Ipv6FlowLabel::try_new(flow_label).map_err(|_| Error::BadRepr)?,
                    payload_length: 0,
                    next_header: IpNumber::UDP,
                    hop_limit,
                    source: src.octets(),
                    destination: dst.octets(),
                };
                bytes[l3..l3 + 40].copy_from_slice(&h.to_bytes());
                40
            }
        };
        let u = UdpHeader {
            source_port: udp.src_port,
            destination_port: udp.dst_port,
            length: 0,
            checksum: 0,
        };
        bytes[l3 + ip_len..l3 + ip_len + UDP_LEN].copy_from_slice(&u.to_bytes());
        Ok(HeaderTemplate {
            bytes,
            // At most 18.
            l3: l3 as u8,
            v6: matches!(ip, IpRepr::V6 { .. }),
            udp_checksum: udp.checksum,
            fixed_sum,
        })
    }

    /// Sets the UDP source port of the frames built from this template.
    pub fn set_src_port(&mut self, port: u16) {
        let at = self.udp_at();
        self.bytes[at..at + 2].copy_from_slice(&port.to_be_bytes());
    }

    fn ip_len(&self) -> usize {
        if self.v6 { 40 } else { 20 }
    }

    fn udp_at(&self) -> usize {
        usize::from(self.l3) + self.ip_len()
    }

    /// Bytes a frame with `roce`'s headers and a payload of `payload_len` takes, ICRC included
    /// (no Ethernet FCS).
    pub fn buffer_len(&self, roce: &RoceRepr, payload_len: usize) -> Result<usize, Error> {
        Ok(self.udp_at() + UDP_LEN + roce.buffer_len(payload_len)?)
    }

    /// Writes a frame into `buf` (exactly [`Self::buffer_len`] long): this template's headers
    /// with `ecn` and the lengths filled in, then `roce`'s, then lets `fill` write the payload
    /// in place and computes pad, ICRC and the checksums. This is the zero-copy path: the
    /// engine copies from registered memory straight into the frame.
    pub fn emit_with(
        &self,
        roce: &RoceRepr,
        ecn: Ecn,
        buf: &mut [u8],
        payload_len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), Error> {
        // Validated once here; the transport headers are then written without repeating it.
        let transport_len = roce.buffer_len(payload_len)?;
        if buf.len() != self.udp_at() + UDP_LEN + transport_len {
            return Err(Error::BadRepr);
        }
        self.emit_sized(roce, ecn, buf, payload_len, transport_len, fill)
    }

    /// [`Self::emit_with`] into a buffer of the right length taken from `buf`; returns that
    /// length. This is how the engine sends: the transport layout is validated once per frame,
    /// not once to size the buffer and again to write it.
    pub fn emit_into(
        &self,
        roce: &RoceRepr,
        ecn: Ecn,
        buf: &mut dyn FrameBuf,
        payload_len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<usize, Error> {
        let transport_len = roce.buffer_len(payload_len)?;
        let len = self.udp_at() + UDP_LEN + transport_len;
        // No need to zero: every byte is written (headers, payload via `fill`, pad, ICRC).
        self.emit_sized(
            roce,
            ecn,
            buf.frame_mut(len),
            payload_len,
            transport_len,
            fill,
        )?;
        Ok(len)
    }

    /// Writes the frame into `buf`, whose length the caller checked against `transport_len`
    /// (the transport repr's validated `buffer_len`).
    fn emit_sized(
        &self,
        roce: &RoceRepr,
        ecn: Ecn,
        buf: &mut [u8],
        payload_len: usize,
        transport_len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), Error> {
        let l3 = usize::from(self.l3);
        let ip_len = self.ip_len();
        let udp_at = l3 + ip_len;
        let head_len = udp_at + UDP_LEN;
        let udp_len = u16::try_from(UDP_LEN + transport_len).map_err(|_| Error::BadRepr)?;
        let head = &mut buf[..head_len];
        head.copy_from_slice(&self.bytes[..head_len]);
        if self.v6 {
            // Traffic class: DSCP in the first byte's low nibble and the second's high one, ECN
            // in bits 5–4 of the second.
            head[l3 + 1] |= ecn.bits() << 4;
            head[l3 + 4..l3 + 6].copy_from_slice(&udp_len.to_be_bytes());
        } else {
            let total = u16::try_from(ip_len + usize::from(udp_len)).map_err(|_| Error::BadRepr)?;
            let tos = head[l3 + 1] | ecn.bits();
            head[l3 + 1] = tos;
            head[l3 + 2..l3 + 4].copy_from_slice(&total.to_be_bytes());
            let mut sum = u32::from(self.fixed_sum)
                + u32::from(u16::from_be_bytes([0x45, tos]))
                + u32::from(total);
            sum = (sum & 0xffff) + (sum >> 16);
            sum = (sum & 0xffff) + (sum >> 16);
            head[l3 + 10..l3 + 12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        }
        head[udp_at + 4..udp_at + 6].copy_from_slice(&udp_len.to_be_bytes());
        let transport = &mut buf[head_len..];
        let payload = roce.emit_sized(transport, payload_len, transport_len)?;
        fill(&mut transport[payload]);
        // ICRC first: it masks the UDP checksum, which in turn covers the ICRC. One CRC pass
        // over the frame where it lies, from the eight bytes before the IP header (the LRH
        // stand-in) up to the ICRC, right after `fill` wrote the payload.
        let icrc_at = buf.len() - ICRC_LEN;
        let crc = icrc::compute_frame(&buf[l3 - 8..icrc_at], ip_len)?;
        buf[icrc_at..].copy_from_slice(&crc.to_le_bytes());
        if self.udp_checksum {
            let (head, transport) = buf.split_at_mut(head_len);
            let u = &head[udp_at..];
            let udp = UdpHeader {
                source_port: u16::from_be_bytes([u[0], u[1]]),
                destination_port: u16::from_be_bytes([u[2], u[3]]),
                length: udp_len,
                checksum: 0,
            };
            let addr = |at: usize| &head[l3 + at..];
            let sum = if self.v6 {
                udp.calc_checksum_ipv6_raw(
                    addr(8)[..16].try_into().unwrap_or_default(),
                    addr(24)[..16].try_into().unwrap_or_default(),
                    transport,
                )
            } else {
                udp.calc_checksum_ipv4_raw(
                    addr(12)[..4].try_into().unwrap_or_default(),
                    addr(16)[..4].try_into().unwrap_or_default(),
                    transport,
                )
            }
            .map_err(|_| Error::BadRepr)?;
            head[udp_at + 6..head_len].copy_from_slice(&sum.to_be_bytes());
        }
        Ok(())
    }
}

impl fmt::Display for FrameRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ip {
            IpRepr::V4 {
                src,
                dst,
                dscp,
                ecn,
                ttl,
                ..
            } => write!(f, "IPv4 {src} > {dst} dscp={dscp} ecn={ecn:?} ttl={ttl}")?,
            IpRepr::V6 {
                src,
                dst,
                dscp,
                ecn,
                hop_limit,
                ..
            } => write!(
                f,
                "IPv6 {src} > {dst} dscp={dscp} ecn={ecn:?} hlim={hop_limit}"
            )?,
        }
        if let Some(v) = self.eth.vlan {
            write!(f, " vlan={} pcp={}", v.vid, v.pcp)?;
        }
        write!(
            f,
            " | UDP {} > {} | {}",
            self.udp.src_port, self.udp.dst_port, self.roce
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_view_stays_small() {
        // Returned through a `Result` per received frame: above 128 bytes the move becomes a
        // `memmove` call (see `Frame`'s docs).
        assert!(
            core::mem::size_of::<Result<Frame<'_>, Error>>() <= 128,
            "{} bytes",
            core::mem::size_of::<Result<Frame<'_>, Error>>()
        );
    }
}
