//! A RoCEv2 packet as a UDP socket sees it: the UDP payload (BTH … ICRC) and the IP and UDP
//! fields the kernel reports beside it, for datapaths where the kernel writes and strips the
//! Ethernet, IP and UDP headers.
//!
//! Source: RoCEv2 Annex A17.4 (UDP encapsulation) and A17.8 (the ICRC covers the IP and UDP
//! headers with their variant fields masked), and `docs/wire.md`, "ICRC in each datapath mode".
//! The ICRC is computed over the headers a rocev2 sender's kernel writes for an unconnected
//! socket with `IP_PMTUDISC_DO`: IPv4 with Identification 0, DF and no options; IPv6 with no
//! extension headers (its flow label is masked); UDP with its lengths from the payload (the
//! checksum is masked). Every other covered field is in [`DatagramMeta`].
//!
//! Deviations: the IPv4 Identification is not in the metadata (a socket cannot report it), so
//! an IPv4 packet whose sender wrote another one fails [`DatagramMeta::verify_icrc`]; the UDP
//! datapath's `accept_unverified_icrc` exists for that.

use super::frame::Ecn;
use super::{Error, Header, grh, icrc};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use core::ops::Range;

const ETH_LEN: usize = 14;
const VLAN_LEN: usize = 4;
const UDP_LEN: usize = 8;

/// The IP and UDP fields of one datagram that the ICRC, the engine and the socket calls need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatagramMeta {
    /// IP source address and UDP source port (the ECMP entropy).
    pub src: SocketAddr,
    /// IP destination address and UDP destination port (4791).
    pub dst: SocketAddr,
    /// DSCP (6 bits).
    pub dscp: u8,
    /// ECN.
    pub ecn: Ecn,
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
    /// The interface it arrived on or should leave by; 0: unknown, or let the route decide.
    pub ifindex: u32,
}

impl DatagramMeta {
    /// The IPv4 TOS byte or IPv6 traffic class: DSCP and ECN.
    pub const fn tos(&self) -> u8 {
        (self.dscp << 2) | self.ecn.bits()
    }

    /// Length of the untagged Ethernet frame that carries a UDP payload of `payload_len` bytes
    /// (what counters and the engine's byte accounting see for every datapath alike).
    pub const fn frame_len(&self, payload_len: usize) -> usize {
        let ip = if self.src.is_ipv6() { 40 } else { 20 };
        ETH_LEN + ip + UDP_LEN + payload_len
    }

    /// The IP and UDP headers the sender's kernel wrote (see the module docs), as the ICRC sees
    /// them: `(ip header buffer, its length, UDP header)`.
    fn headers(&self, payload_len: usize) -> Result<([u8; 40], usize, [u8; UDP_LEN]), Error> {
        let udp_len = u16::try_from(UDP_LEN + payload_len).map_err(|_| Error::BadRepr)?;
        let mut ip = [0u8; 40];
        let ip_len = match (self.src.ip(), self.dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let total =
                    u16::try_from(20 + UDP_LEN + payload_len).map_err(|_| Error::BadRepr)?;
                ip[0] = 0x45;
                ip[1] = self.tos();
                ip[2..4].copy_from_slice(&total.to_be_bytes());
                // Identification 0 (bytes 4..6), DF, fragment offset 0.
                ip[6] = 0x40;
                ip[8] = self.ttl;
                ip[9] = 17;
                // The header checksum (10..12) is masked by the ICRC and left 0.
                ip[12..16].copy_from_slice(&s.octets());
                ip[16..20].copy_from_slice(&d.octets());
                20
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let tc = self.tos();
                ip[0] = 0x60 | (tc >> 4);
                ip[1] = tc << 4; // flow label 0: masked by the ICRC
                ip[4..6].copy_from_slice(&udp_len.to_be_bytes());
                ip[6] = 17;
                ip[7] = self.ttl;
                ip[8..24].copy_from_slice(&s.octets());
                ip[24..40].copy_from_slice(&d.octets());
                40
            }
            _ => return Err(Error::BadRepr),
        };
        let mut udp = [0u8; UDP_LEN];
        udp[0..2].copy_from_slice(&self.src.port().to_be_bytes());
        udp[2..4].copy_from_slice(&self.dst.port().to_be_bytes());
        udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
        Ok((ip, ip_len, udp))
    }

    /// The GRH area ([`super::grh`]) of a UD packet that arrived as the UDP payload `transport`:
    /// the IP header the sender's kernel wrote (see the module docs), with its IPv4 header
    /// checksum filled in, since the application reads the header as it arrived.
    pub fn grh_area(&self, transport_len: usize) -> Result<[u8; grh::GRH_LEN], Error> {
        let (mut ip, ip_len, _) = self.headers(transport_len)?;
        if ip_len == 20 {
            let sum = ip[..20]
                .chunks_exact(2)
                .fold(0u32, |s, w| s + u32::from(u16::from_be_bytes([w[0], w[1]])));
            let folded = (sum & 0xffff) + (sum >> 16);
            let folded = (folded & 0xffff) + (folded >> 16);
            ip[10..12].copy_from_slice(&(!(folded as u16)).to_be_bytes());
        }
        grh::area(&ip[..ip_len])
    }

    /// Checks the ICRC in the last four bytes of the UDP payload `transport` (Annex A17.8).
    pub fn verify_icrc(&self, transport: &[u8]) -> Result<(), Error> {
        let (ip, ip_len, udp) = self.headers(transport.len())?;
        icrc::verify(&ip[..ip_len], &udp, transport)
    }

    /// Computes the ICRC of the UDP payload `transport` and stores it in its last four bytes:
    /// for a sender that changes a covered field (the UDP source port) after the engine built
    /// the packet, or a receiver that chooses to accept what it cannot verify.
    pub fn write_icrc(&self, transport: &mut [u8]) -> Result<(), Error> {
        let n = transport.len();
        if n < 12 + 4 {
            return Err(Error::Truncated(Header::Icrc));
        }
        let (ip, ip_len, udp) = self.headers(n)?;
        let crc = icrc::compute(&ip[..ip_len], &udp, &transport[..n - 4])?;
        transport[n - 4..].copy_from_slice(&crc.to_le_bytes());
        Ok(())
    }

    /// Reads the IP and UDP fields of a frame the engine built (Ethernet, one optional 802.1Q
    /// tag, IPv4 without options or IPv6 without extension headers, UDP) and where its UDP
    /// payload lies. Only lengths and protocols are checked: this takes apart outgoing frames,
    /// whose transport may be anything, not received ones ([`super::frame::Frame`] checks those).
    pub fn split_frame(frame: &[u8]) -> Result<(DatagramMeta, Range<usize>), Error> {
        let be16 = |at: usize, h: Header| {
            frame
                .get(at..at + 2)
                .map(|b| u16::from_be_bytes([b[0], b[1]]))
                .ok_or(Error::Truncated(h))
        };
        let mut at = ETH_LEN;
        let mut ether_type = be16(12, Header::Ethernet)?;
        if ether_type == 0x8100 {
            ether_type = be16(16, Header::Vlan)?;
            at += VLAN_LEN;
        }
        let (src, dst, tos, ttl, udp_at) = match ether_type {
            0x0800 => {
                let h = frame
                    .get(at..at + 20)
                    .ok_or(Error::Truncated(Header::Ipv4))?;
                if h[0] != 0x45 {
                    return Err(Error::IpOptions);
                }
                if h[9] != 17 {
                    return Err(Error::NotUdp);
                }
                let s = Ipv4Addr::new(h[12], h[13], h[14], h[15]);
                let d = Ipv4Addr::new(h[16], h[17], h[18], h[19]);
                (IpAddr::V4(s), IpAddr::V4(d), h[1], h[8], at + 20)
            }
            0x86dd => {
                let h = frame
                    .get(at..at + 40)
                    .ok_or(Error::Truncated(Header::Ipv6))?;
                if h[0] >> 4 != 6 {
                    return Err(Error::Malformed(Header::Ipv6));
                }
                if h[6] != 17 {
                    return Err(Error::NotUdp);
                }
                let tc = (h[0] << 4) | (h[1] >> 4);
                let mut s = [0u8; 16];
                s.copy_from_slice(&h[8..24]);
                let mut d = [0u8; 16];
                d.copy_from_slice(&h[24..40]);
                (
                    IpAddr::V6(Ipv6Addr::from(s)),
                    IpAddr::V6(Ipv6Addr::from(d)),
                    tc,
                    h[7],
                    at + 40,
                )
            }
            _ => return Err(Error::NotIp),
        };
        let sport = be16(udp_at, Header::Udp)?;
        let dport = be16(udp_at + 2, Header::Udp)?;
        let ulen = usize::from(be16(udp_at + 4, Header::Udp)?);
        if ulen < UDP_LEN || udp_at + ulen > frame.len() {
            return Err(Error::Malformed(Header::Udp));
        }
        let meta = DatagramMeta {
            src: SocketAddr::new(src, sport),
            dst: SocketAddr::new(dst, dport),
            dscp: tos >> 2,
            ecn: Ecn::from_bits(tos),
            ttl,
            ifindex: 0,
        };
        Ok((meta, udp_at + UDP_LEN..udp_at + ulen))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::frame::{EthRepr, FrameRepr, IpRepr, ROCEV2_UDP_PORT, UdpRepr};
    use crate::wire::{
        AethRepr, BthRepr, Credits, Msn, Opcode, Operation, Psn, Qpn, RoceRepr, Syndrome,
    };
    use alloc::vec;
    use alloc::vec::Vec;

    /// An RC ACK from UDP port 49152 as the engine emits it.
    fn ack(ip: IpRepr) -> Vec<u8> {
        let bth = BthRepr::new(
            Opcode::rc(Operation::Acknowledge),
            0xffff,
            Qpn::new(0x11),
            Psn::new(0x7d2ab1),
        );
        let repr = FrameRepr {
            eth: EthRepr {
                src: [2, 0, 0, 0, 0, 1],
                dst: [2, 0, 0, 0, 0, 2],
                vlan: None,
            },
            ip,
            udp: UdpRepr {
                src_port: 49152,
                dst_port: ROCEV2_UDP_PORT,
                checksum: matches!(ip, IpRepr::V6 { .. }),
            },
            roce: RoceRepr {
                aeth: Some(AethRepr {
                    syndrome: Syndrome::Ack(Credits::from_code(31)),
                    msn: Msn::new(5),
                }),
                ..RoceRepr::new(bth)
            },
        };
        let mut buf = vec![0; repr.buffer_len(0).unwrap()];
        repr.emit(&mut buf, &[]).unwrap();
        buf
    }

    fn v4(identification: u16) -> IpRepr {
        IpRepr::V4 {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
            dscp: 26,
            ecn: Ecn::Ce,
            identification,
            dont_fragment: true,
            ttl: 63,
        }
    }

    #[test]
    fn datagram_split_reads_what_the_kernel_needs() {
        let f = ack(v4(0));
        let (m, payload) = DatagramMeta::split_frame(&f).unwrap();
        assert_eq!(m.src, "10.0.0.1:49152".parse().unwrap());
        assert_eq!(m.dst, "10.0.0.2:4791".parse().unwrap());
        assert_eq!(m.tos(), (26 << 2) | 3, "DSCP and ECN go into IP_TOS");
        assert_eq!(m.ttl, 63);
        assert_eq!(payload, 42..f.len());
        assert_eq!(m.frame_len(payload.len()), f.len());
    }

    /// The ICRC over the headers the metadata stands for equals the one the engine computed
    /// over the real headers: IPv4 with ID 0 and DF; IPv6 whatever its flow label.
    #[test]
    fn datagram_icrc_matches_the_frame() {
        let v6 = IpRepr::V6 {
            src: "fd00::1".parse().unwrap(),
            dst: "fd00::2".parse().unwrap(),
            dscp: 10,
            ecn: Ecn::Ect0,
            flow_label: 0x12345,
            hop_limit: 9,
        };
        for ip in [v4(0), v6] {
            let f = ack(ip);
            let (m, payload) = DatagramMeta::split_frame(&f).unwrap();
            assert_eq!(m.verify_icrc(&f[payload.clone()]), Ok(()), "{ip:?}");
            let mut t = f[payload].to_vec();
            let before = t.clone();
            m.write_icrc(&mut t).unwrap();
            assert_eq!(t, before, "rewriting a valid ICRC changes nothing");
        }
    }

    #[test]
    fn datagram_nonzero_ip_id_fails_icrc_until_rewritten() {
        // An rxe-like sender: Identification 0x1234, which the ICRC covers and a socket cannot
        // report.
        let f = ack(v4(0x1234));
        let (m, payload) = DatagramMeta::split_frame(&f).unwrap();
        let mut t = f[payload].to_vec();
        assert_eq!(m.verify_icrc(&t), Err(Error::BadIcrc));
        m.write_icrc(&mut t).unwrap();
        assert_eq!(m.verify_icrc(&t), Ok(()));
        assert_eq!(
            m.write_icrc(&mut [0u8; 15]),
            Err(Error::Truncated(Header::Icrc))
        );
    }

    /// A new source port (the UDP datapath's fallback to 4791) with a rewritten ICRC is what
    /// the engine would have built with that port.
    #[test]
    fn datagram_new_source_port_keeps_icrc_valid() {
        let f = ack(v4(0));
        let (mut m, payload) = DatagramMeta::split_frame(&f).unwrap();
        let mut t = f[payload].to_vec();
        m.src.set_port(ROCEV2_UDP_PORT);
        assert_eq!(m.verify_icrc(&t), Err(Error::BadIcrc));
        m.write_icrc(&mut t).unwrap();
        let mut g = f.clone();
        g[34..36].copy_from_slice(&ROCEV2_UDP_PORT.to_be_bytes());
        g[42..].copy_from_slice(&t);
        let (repr, _) = FrameRepr::parse(&g).unwrap();
        assert_eq!(repr.udp.src_port, ROCEV2_UDP_PORT);
    }

    /// The GRH area rebuilt from the metadata equals the one a frame's real header gives when
    /// the sender wrote Identification 0 (the IPv4 checksum is recomputed, not left zero).
    #[test]
    fn datagram_grh_area_matches_the_frame() {
        let f = ack(v4(0));
        let (m, payload) = DatagramMeta::split_frame(&f).unwrap();
        let want = grh::area(&f[14..34]).unwrap();
        assert_eq!(m.grh_area(payload.len()), Ok(want));
        assert_ne!(want[30..32], [0, 0], "checksum present");
    }

    #[test]
    fn datagram_split_rejects_non_udp_and_bad_lengths() {
        let f = ack(v4(0));
        let mut tcp = f.clone();
        tcp[14 + 9] = 6;
        assert_eq!(DatagramMeta::split_frame(&tcp), Err(Error::NotUdp));
        let mut long = f.clone();
        long[14 + 20 + 4..14 + 20 + 6].copy_from_slice(&1000u16.to_be_bytes());
        assert_eq!(
            DatagramMeta::split_frame(&long),
            Err(Error::Malformed(Header::Udp))
        );
        assert!(DatagramMeta::split_frame(&f[..30]).is_err());
        assert!(DatagramMeta::split_frame(&[]).is_err());
    }

    #[test]
    fn datagram_headers_refuse_mixed_families_and_overflow() {
        let m = DatagramMeta {
            src: "10.0.0.1:1".parse().unwrap(),
            dst: "[fd00::1]:4791".parse().unwrap(),
            dscp: 0,
            ecn: Ecn::NotEct,
            ttl: 1,
            ifindex: 0,
        };
        assert_eq!(m.verify_icrc(&[0; 16]), Err(Error::BadRepr));
        let m = DatagramMeta {
            dst: "10.0.0.2:4791".parse().unwrap(),
            ..m
        };
        assert_eq!(m.write_icrc(&mut vec![0; 70_000]), Err(Error::BadRepr));
    }
}
