//! GIDs and IP addresses (RoCEv2, IBA Vol. 1 Annex A17.3.1): on RoCEv2 a GID *is* an IPv6
//! address, and an IPv4 address travels as the IPv4-mapped GID `::ffff:a.b.c.d`. One home for
//! the mapping the tools' exchanges, the GID table and the switch's flow keys all use.
//!
//! Deviations: none.

use core::net::{IpAddr, Ipv6Addr};

/// The GID of an IP address: IPv6 as is, IPv4 mapped into `::ffff:0:0/96`.
pub fn gid(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// The IP address a GID stands for: IPv4-mapped GIDs become IPv4.
pub fn gid_to_ip(gid: Ipv6Addr) -> IpAddr {
    match gid.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(gid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    #[test]
    fn ipv4_maps_and_comes_back() {
        let v4 = IpAddr::V4(Ipv4Addr::new(192, 168, 77, 10));
        let g = gid(v4);
        // ../shared/captures/rc_pingpong.tool-output.txt: GID ::ffff:192.168.77.10.
        assert_eq!(g.octets()[10..], [0xff, 0xff, 192, 168, 77, 10]);
        assert_eq!(gid_to_ip(g), v4);
        let v6: Ipv6Addr = "fd00::2".parse().unwrap();
        assert_eq!(gid(IpAddr::V6(v6)), v6);
        assert_eq!(gid_to_ip(v6), IpAddr::V6(v6));
    }
}
