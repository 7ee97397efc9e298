//! The 40-byte GRH area at the head of a UD receive buffer, as libibverbs delivers it on RoCEv2.
//!
//! Source: IBA Vol. 1 §11.4.1.2 (a UD receive buffer starts with room for a GRH, which is
//! written when the packet had one) and Annex A17.4 (on RoCEv2 the IP header takes the place of
//! the GRH). What lands in the area follows Linux rdma_rxe (`rxe_resp.c`, `union
//! rdma_network_hdr`) and `ibv_ud_pingpong`: an IPv6 packet's 40-byte header as received; an
//! IPv4 packet's 20-byte header as received at offset 20, after 20 zero bytes.
//!
//! Deviations: none.

use super::{Error, Header};
use core::net::{Ipv4Addr, Ipv6Addr};

/// Bytes of the GRH area at the head of every UD receive buffer.
pub const GRH_LEN: usize = 40;

/// Where an IPv4 header lies in the GRH area.
const IPV4_AT: usize = 20;
const IPV4_LEN: usize = 20;

/// The GRH area for a packet that arrived with the IP header `ip`: 20 bytes (IPv4 without
/// options) or 40 (IPv6). Any other length is not a header a RoCEv2 frame can carry here.
pub fn area(ip: &[u8]) -> Result<[u8; GRH_LEN], Error> {
    let mut out = [0u8; GRH_LEN];
    match ip.len() {
        IPV4_LEN => out[IPV4_AT..].copy_from_slice(ip),
        GRH_LEN => out.copy_from_slice(ip),
        n if n < IPV4_LEN => return Err(Error::Truncated(Header::Ipv4)),
        _ => return Err(Error::IpOptions),
    }
    Ok(out)
}

/// True when the area holds an IPv4 header: 20 zero bytes, then a version-4 header.
fn is_ipv4(area: &[u8; GRH_LEN]) -> bool {
    area[..IPV4_AT].iter().all(|b| *b == 0) && area[IPV4_AT] >> 4 == 4
}

/// The address at IPv4 header offset `v4` or IPv6 header offset `v6`, IPv4 mapped into
/// `::ffff:0:0/96`.
fn address(area: &[u8; GRH_LEN], v4: usize, v6: usize) -> Ipv6Addr {
    if is_ipv4(area) {
        let s = &area[IPV4_AT + v4..IPV4_AT + v4 + 4];
        Ipv4Addr::new(s[0], s[1], s[2], s[3]).to_ipv6_mapped()
    } else {
        let mut s = [0u8; 16];
        s.copy_from_slice(&area[v6..v6 + 16]);
        Ipv6Addr::from(s)
    }
}

/// The sender's GID written in a GRH area: the IPv6 source address, or the IPv4 source mapped
/// into `::ffff:0:0/96` when the first 20 bytes are zero and an IPv4 header follows.
pub fn source_gid(area: &[u8; GRH_LEN]) -> Ipv6Addr {
    address(area, 12, 8)
}

/// The receiver's GID written in a GRH area (the destination address), as [`source_gid`].
pub fn dest_gid(area: &[u8; GRH_LEN]) -> Ipv6Addr {
    address(area, 16, 24)
}

/// The packet's traffic class: the IPv4 TOS byte or the IPv6 Traffic Class (DSCP and ECN).
pub fn traffic_class(area: &[u8; GRH_LEN]) -> u8 {
    if is_ipv4(area) {
        area[IPV4_AT + 1]
    } else {
        (area[0] << 4) | (area[1] >> 4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // ../shared/captures/ud_pingpong.pcap frame 1, bytes 14..34: the IPv4 header of a UD SEND
    // Only from 192.168.77.11 to 192.168.77.10 (ID 0x8175, DF, TTL 64, checksum 0x9bdd).
    static V4: [u8; 20] = [
        0x45, 0x00, 0x02, 0x34, 0x81, 0x75, 0x40, 0x00, 0x40, 0x11, 0x9b, 0xdd, 0xc0, 0xa8, 0x4d,
        0x0b, 0xc0, 0xa8, 0x4d, 0x0a,
    ];

    #[test]
    fn grh_ipv4_header_at_offset_20() {
        let a = area(&V4).unwrap();
        assert_eq!(a[..20], [0u8; 20]);
        assert_eq!(a[20..], V4);
        assert_eq!(
            source_gid(&a),
            Ipv4Addr::new(192, 168, 77, 11).to_ipv6_mapped()
        );
        assert_eq!(
            dest_gid(&a),
            Ipv4Addr::new(192, 168, 77, 10).to_ipv6_mapped()
        );
        assert_eq!(traffic_class(&a), 0);
    }

    #[test]
    fn grh_ipv6_header_whole() {
        let mut v6 = [0u8; 40];
        // Version 6, traffic class 0x6a (DSCP 26, ECT(0)).
        v6[0] = 0x66;
        v6[1] = 0xa0;
        v6[6] = 17;
        v6[7] = 64;
        let src: Ipv6Addr = "fd00::11".parse().unwrap();
        v6[8..24].copy_from_slice(&src.octets());
        let dst: Ipv6Addr = "fd00::22".parse().unwrap();
        v6[24..40].copy_from_slice(&dst.octets());
        let a = area(&v6).unwrap();
        assert_eq!(a, v6);
        assert_eq!(source_gid(&a), src);
        assert_eq!(dest_gid(&a), dst);
        assert_eq!(traffic_class(&a), 0x6a);
    }

    #[test]
    fn grh_other_lengths_rejected() {
        assert_eq!(area(&V4[..19]), Err(Error::Truncated(Header::Ipv4)));
        assert_eq!(area(&[0x46; 24]), Err(Error::IpOptions));
        assert_eq!(area(&[0x60; 41]), Err(Error::IpOptions));
    }
}
