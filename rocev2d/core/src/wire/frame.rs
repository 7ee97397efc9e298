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

/// A frame's headers with the transport headers borrowed: what [`FrameRepr`] emits through,
/// and what the engine builds for every frame it sends, so its transport repr (a few hundred
/// bytes with a REXT) is not copied into a [`FrameRepr`] per packet.
#[derive(Debug, Clone, Copy)]
pub struct FrameHeaders<'a> {
    /// Link layer.
    pub eth: EthRepr,
    /// Network layer.
    pub ip: IpRepr,
    /// UDP.
    pub udp: UdpRepr,
    /// The transport headers, BTH onwards.
    pub roce: &'a RoceRepr,
}

/// A checked view of a frame: where each layer lies, and the transport packet.
///
/// Kept small (under 128 bytes), because it is returned through a `Result` for every
/// received frame, and a larger value is moved with a call to `memmove` (6% of the receive
/// path's samples when it also held the Ethernet and UDP reprs): those two are read from the
/// checked bytes when asked for.
#[derive(Debug, Clone)]
pub struct Frame<'a> {
    bytes: &'a [u8],
    /// Where the IP header starts; it is `ip_repr.header_len()` long and the UDP header
    /// follows it.
    l3: usize,
    transport: RocePacket<&'a [u8]>,
    /// The IP header's fields, read once while checking.
    ip_repr: IpRepr,
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
    #[inline]
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
        let (ip_len, payload_len, ip_repr) = match ether_type {
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
                let repr = IpRepr::V4 {
                    src: h.source_addr(),
                    dst: h.destination_addr(),
                    dscp: h.dcp().value(),
                    ecn: Ecn::from_bits(h.ecn().value()),
                    identification: h.identification(),
                    dont_fragment: h.dont_fragment(),
                    ttl: h.ttl(),
                };
                (hl, total - hl, repr)
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
                let repr = IpRepr::V6 {
                    src: h.source_addr(),
                    dst: h.destination_addr(),
                    dscp: h.traffic_class() >> 2,
                    ecn: Ecn::from_bits(h.traffic_class()),
                    flow_label: h.flow_label().value(),
                    hop_limit: h.hop_limit(),
                };
                (40, payload, repr)
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
            transport,
            ip_repr,
        })
    }

    /// Where the IP header lies.
    fn ip(&self) -> Range<usize> {
        self.l3..self.l3 + self.ip_repr.header_len()
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
    pub fn ip_repr(&self) -> &IpRepr {
        &self.ip_repr
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
    #[inline]
    pub fn parse(bytes: &[u8]) -> Result<(FrameRepr, &[u8]), Error> {
        let frame = Frame::new_checked(bytes)?;
        frame.verify_icrc()?;
        Ok((Self::parse_frame(&frame)?, frame.payload()))
    }

    /// The meaning of a checked frame (whose ICRC the caller verified or chose not to).
    #[inline]
    pub fn parse_frame(frame: &Frame<'_>) -> Result<FrameRepr, Error> {
        Ok(FrameRepr {
            eth: frame.eth_repr(),
            ip: frame.ip_repr,
            udp: frame.udp_repr(),
            roce: RoceRepr::parse(frame.transport())?,
        })
    }

    /// The headers to emit, borrowing the transport repr.
    pub fn headers(&self) -> FrameHeaders<'_> {
        FrameHeaders {
            eth: self.eth,
            ip: self.ip,
            udp: self.udp,
            roce: &self.roce,
        }
    }

    /// Bytes a frame with a payload of `payload_len` takes, ICRC included (no Ethernet FCS).
    pub fn buffer_len(&self, payload_len: usize) -> Result<usize, Error> {
        self.headers().buffer_len(payload_len)
    }

    /// Writes headers into `buf` (exactly [`Self::buffer_len`] long), lets `fill` write the
    /// payload in place, then computes pad, ICRC, and the IP and UDP checksums; see
    /// [`FrameHeaders::emit_with`].
    pub fn emit_with(
        &self,
        buf: &mut [u8],
        payload_len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), Error> {
        self.headers().emit_with(buf, payload_len, fill)
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
    /// emitter writes every byte ([`FrameHeaders::emit_with`]).
    fn frame_mut(&mut self, len: usize) -> &mut [u8];
}

impl FrameBuf for alloc::vec::Vec<u8> {
    fn frame_mut(&mut self, len: usize) -> &mut [u8] {
        self.resize(len, 0);
        self
    }
}

impl FrameHeaders<'_> {
    fn l2_len(&self) -> usize {
        ETH_LEN + self.eth.vlan.map_or(0, |_| VLAN_LEN)
    }

    /// Bytes a frame with a payload of `payload_len` takes, ICRC included (no Ethernet FCS).
    pub fn buffer_len(&self, payload_len: usize) -> Result<usize, Error> {
        Ok(self.l2_len() + self.ip.header_len() + UDP_LEN + self.roce.buffer_len(payload_len)?)
    }

    /// Writes headers into `buf` (exactly [`Self::buffer_len`] long), lets `fill` write the
    /// payload in place, then computes pad, ICRC, and the IP and UDP checksums. This is the
    /// zero-copy path: the engine copies from registered memory straight into the frame.
    pub fn emit_with(
        &self,
        buf: &mut [u8],
        payload_len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), Error> {
        // Validated once here; the transport headers are then written without repeating it.
        let transport_len = self.roce.buffer_len(payload_len)?;
        if buf.len() != self.l2_len() + self.ip.header_len() + UDP_LEN + transport_len {
            return Err(Error::BadRepr);
        }
        self.emit_sized(buf, payload_len, transport_len, fill)
    }

    /// [`Self::emit_with`] into a buffer of the right length taken from `buf`; returns that
    /// length. This is how the engine sends: the transport layout is validated once per frame,
    /// not once to size the buffer and again to write it.
    pub fn emit_into(
        &self,
        buf: &mut dyn FrameBuf,
        payload_len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<usize, Error> {
        let transport_len = self.roce.buffer_len(payload_len)?;
        let len = self.l2_len() + self.ip.header_len() + UDP_LEN + transport_len;
        // No need to zero: every byte is written (headers, payload via `fill`, pad, ICRC).
        self.emit_sized(buf.frame_mut(len), payload_len, transport_len, fill)?;
        Ok(len)
    }

    /// Writes the frame into `buf`, whose length the caller checked against `transport_len`
    /// (the transport repr's validated `buffer_len`).
    fn emit_sized(
        &self,
        buf: &mut [u8],
        payload_len: usize,
        transport_len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), Error> {
        let l2 = self.l2_len();
        let ip_len = self.ip.header_len();
        let udp_total = UDP_LEN + transport_len;
        let ether_type = match self.ip {
            IpRepr::V4 { .. } => EtherType::IPV4,
            IpRepr::V6 { .. } => EtherType::IPV6,
        };
        let eth = Ethernet2Header {
            source: self.eth.src,
            destination: self.eth.dst,
            ether_type: if self.eth.vlan.is_some() {
                EtherType::VLAN_TAGGED_FRAME
            } else {
                ether_type
            },
        };
        buf[..ETH_LEN].copy_from_slice(&eth.to_bytes());
        if let Some(v) = self.eth.vlan {
            let tag = SingleVlanHeader {
                pcp: VlanPcp::try_new(v.pcp).map_err(|_| Error::BadRepr)?,
                drop_eligible_indicator: v.dei,
                vlan_id: VlanId::try_new(v.vid).map_err(|_| Error::BadRepr)?,
                ether_type,
            };
            buf[ETH_LEN..l2].copy_from_slice(&tag.to_bytes());
        }
        let ip_range = l2..l2 + ip_len;
        match self.ip {
            IpRepr::V4 {
                src,
                dst,
                dscp,
                ecn,
                identification,
                dont_fragment,
                ttl,
            } => {
                // RFC 791 §3.1, written directly: the header has no options, and this runs for
                // every frame sent, where building etherparse's `Ipv4Header`, summing it and
                // serialising it cost more than the 20 bytes themselves. The checksum is
                // `wire::ip`'s, the one IPv4 header checksum in the tree.
                let total = u16::try_from(ip_len + udp_total).map_err(|_| Error::BadRepr)?;
                if dscp > 63 {
                    return Err(Error::BadRepr);
                }
                // Assembled in a local array and summed there, then stored once: summing the
                // frame's bytes right after writing them stalled on store forwarding.
                let [t0, t1] = total.to_be_bytes();
                let [i0, i1] = identification.to_be_bytes();
                let [s0, s1, s2, s3] = src.octets();
                let [d0, d1, d2, d3] = dst.octets();
                let df = if dont_fragment { 0x40 } else { 0 };
                let mut h = [
                    0x45, // version 4, IHL 5
                    (dscp << 2) | ecn.bits(),
                    t0,
                    t1,
                    i0,
                    i1,
                    df,
                    0, // fragment offset 0
                    ttl,
                    IpNumber::UDP.0,
                    0, // header checksum, below
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
                let [c0, c1] = super::ip::ipv4_header_checksum(&h).to_be_bytes();
                h[10] = c0;
                h[11] = c1;
                buf[ip_range.clone()].copy_from_slice(&h);
            }
            IpRepr::V6 {
                src,
                dst,
                dscp,
                ecn,
                flow_label,
                hop_limit,
            } => {
                if dscp > 63 {
                    return Err(Error::BadRepr);
                }
                let h = Ipv6Header {
                    traffic_class: (dscp << 2) | ecn.bits(),
                    flow_label: Ipv6FlowLabel::try_new(flow_label).map_err(|_| Error::BadRepr)?,
                    payload_length: u16::try_from(udp_total).map_err(|_| Error::BadRepr)?,
                    next_header: IpNumber::UDP,
                    hop_limit,
                    source: src.octets(),
                    destination: dst.octets(),
                };
                buf[ip_range.clone()].copy_from_slice(&h.to_bytes());
            }
        }
        let udp_range = ip_range.end..ip_range.end + UDP_LEN;
        let udp = UdpHeader {
            source_port: self.udp.src_port,
            destination_port: self.udp.dst_port,
            length: u16::try_from(udp_total).map_err(|_| Error::BadRepr)?,
            checksum: 0,
        };
        buf[udp_range.clone()].copy_from_slice(&udp.to_bytes());
        let transport = &mut buf[udp_range.end..];
        let payload = self
            .roce
            .emit_sized(transport, payload_len, transport_len)?;
        fill(&mut transport[payload]);
        // ICRC first: it masks the UDP checksum, which in turn covers the ICRC. One CRC pass
        // over the frame where it lies, from the eight bytes before the IP header (the LRH
        // stand-in) up to the ICRC, right after `fill` wrote the payload.
        let icrc_at = buf.len() - ICRC_LEN;
        let crc = icrc::compute_frame(&buf[ip_range.start - 8..icrc_at], ip_len)?;
        buf[icrc_at..].copy_from_slice(&crc.to_le_bytes());
        let (head, transport) = buf.split_at_mut(udp_range.end);
        if self.udp.checksum {
            let sum = match self.ip {
                IpRepr::V4 { src, dst, .. } => {
                    udp.calc_checksum_ipv4_raw(src.octets(), dst.octets(), transport)
                }
                IpRepr::V6 { src, dst, .. } => {
                    udp.calc_checksum_ipv6_raw(src.octets(), dst.octets(), transport)
                }
            }
            .map_err(|_| Error::BadRepr)?;
            head[udp_range.start + 6..udp_range.end].copy_from_slice(&sum.to_be_bytes());
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
