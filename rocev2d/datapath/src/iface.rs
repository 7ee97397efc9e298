//! What an interface offers a RoCE device: index, MAC address, MTU, and its IP addresses as
//! GIDs (IPv4 as IPv4-mapped IPv6 `::ffff:a.b.c.d`, IPv6 as themselves), read over rtnetlink in
//! the calling thread's network namespace (so a thread that entered a namespace with `setns`
//! sees that namespace; `/sys/class/net` would show the namespace sysfs was mounted in).
//!
//! Source: RoCEv2 Annex A17.3.1 (a GID is the IPv6 address, or the IPv4-mapped IPv6 address,
//! of the port); the GID table order mirrors rdma_rxe's: one entry per address, IPv6 link-local
//! included.
//!
//! Deviations: no GID indices per VLAN or per RoCE version (rxe lists each address twice, for
//! RoCEv1 and v2); rocev2 only speaks v2.

use crate::Error;
use crate::netlink::Rtnl;
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::address::{AddressAttribute, AddressMessage, AddressScope};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkLayerType, LinkMessage};
pub use rocev2_core::wire::gid::{gid, gid_to_ip};
use std::net::{IpAddr, Ipv6Addr};

/// One interface as rocev2 uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Name.
    pub name: String,
    /// Kernel index.
    pub index: u32,
    /// MAC address.
    pub mac: [u8; 6],
    /// IP MTU in bytes.
    pub mtu: u32,
    /// Whether the link is administratively up and has carrier.
    pub up: bool,
    /// Addresses, IPv4 first, in the kernel's order.
    pub addrs: Vec<IfAddr>,
    /// Receive queues the device was created with (`IFLA_NUM_RX_QUEUES`, at least 1); the
    /// number in use can be lower (`ethtool -L`).
    pub rx_queues: u32,
}

/// One address of an [`Interface`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IfAddr {
    /// The address.
    pub ip: IpAddr,
    /// Prefix length.
    pub prefix_len: u8,
    /// True for IPv6 link-local (`fe80::/10`) and other non-global scopes.
    pub link_local: bool,
}

impl IfAddr {
    /// The RoCEv2 GID: IPv6 as is, IPv4 mapped into `::ffff:0:0/96`.
    pub fn gid(&self) -> Ipv6Addr {
        gid(self.ip)
    }
}

/// The link-local GID every RoCE device has at index 0: `fe80::/64` with the interface
/// identifier made from the MAC (modified EUI-64: `ff:fe` in the middle, the universal/local
/// bit flipped; RFC 4291 Appendix A).
pub fn default_gid(mac: [u8; 6]) -> Ipv6Addr {
    let [a, b, c, d, e, f] = mac;
    Ipv6Addr::from([
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        a ^ 0x02,
        b,
        c,
        0xff,
        0xfe,
        d,
        e,
        f,
    ])
}

/// The node GUID of a device on the interface with this MAC: the modified EUI-64 of
/// [`default_gid`]'s low half, as RoCE NICs derive it (Linux uses it as the CM's CA GUID).
pub fn node_guid(mac: [u8; 6]) -> u64 {
    let o = default_gid(mac).octets();
    u64::from_be_bytes([o[8], o[9], o[10], o[11], o[12], o[13], o[14], o[15]])
}

impl Interface {
    /// The names of every link of the current network namespace, in index order.
    ///
    /// # Errors
    /// Netlink failures.
    pub fn names() -> Result<Vec<String>, Error> {
        let links = Rtnl::new()?.dump(RouteNetlinkMessage::GetLink(LinkMessage::default()))?;
        let mut named: Vec<(u32, String)> = links
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => {
                    let name = l.attributes.into_iter().find_map(|a| match a {
                        LinkAttribute::IfName(n) => Some(n),
                        _ => None,
                    });
                    name.map(|n| (l.header.index, n))
                }
                _ => None,
            })
            .collect();
        named.sort();
        Ok(named.into_iter().map(|(_, n)| n).collect())
    }

    /// Reads interface `name` of the current network namespace.
    ///
    /// # Errors
    /// [`Error::NoSuchInterface`], [`Error::BadInterface`] for a non-Ethernet link or one whose
    /// MTU does not fit [`crate::MAX_FRAME`], or netlink failures.
    pub fn by_name(name: &str) -> Result<Interface, Error> {
        let mut nl = Rtnl::new()?;
        let links = nl.dump(RouteNetlinkMessage::GetLink(LinkMessage::default()))?;
        let link = links
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => Some(l),
                _ => None,
            })
            .find(|l| {
                l.attributes
                    .iter()
                    .any(|a| matches!(a, LinkAttribute::IfName(n) if n == name))
            })
            .ok_or_else(|| Error::NoSuchInterface(name.to_string()))?;
        let bad = |why| Error::BadInterface {
            name: name.to_string(),
            why,
        };
        if link.header.link_layer_type != LinkLayerType::Ether {
            return Err(bad("not an Ethernet link"));
        }
        let mut mac = None;
        let mut mtu = None;
        let mut rx_queues = 1;
        for a in &link.attributes {
            match a {
                LinkAttribute::Address(b) => mac = <[u8; 6]>::try_from(b.as_slice()).ok(),
                LinkAttribute::Mtu(m) => mtu = Some(*m),
                LinkAttribute::NumRxQueues(n) => rx_queues = (*n).max(1),
                _ => {}
            }
        }
        let mac = mac.ok_or(bad("no 6-byte MAC address"))?;
        let mtu = mtu.ok_or(bad("no MTU"))?;
        if mtu as usize + 18 > crate::MAX_FRAME {
            return Err(bad("MTU above 9000"));
        }
        let flags = link.header.flags;
        let up = flags.contains(LinkFlags::Up) && flags.contains(LinkFlags::LowerUp);
        let index = link.header.index;
        let mut addrs = Vec::new();
        for m in nl.dump(RouteNetlinkMessage::GetAddress(AddressMessage::default()))? {
            let RouteNetlinkMessage::NewAddress(a) = m else {
                continue;
            };
            if a.header.index != index {
                continue;
            }
            // IFA_LOCAL is the local address on point-to-point links, IFA_ADDRESS otherwise.
            let local = a.attributes.iter().find_map(|x| match x {
                AddressAttribute::Local(ip) => Some(*ip),
                _ => None,
            });
            let address = a.attributes.iter().find_map(|x| match x {
                AddressAttribute::Address(ip) => Some(*ip),
                _ => None,
            });
            if let Some(ip) = local.or(address) {
                addrs.push(IfAddr {
                    ip,
                    prefix_len: a.header.prefix_len,
                    link_local: a.header.scope != AddressScope::Universe,
                });
            }
        }
        addrs.sort_by_key(|a| a.ip.is_ipv6());
        Ok(Interface {
            name: name.to_string(),
            index,
            mac,
            mtu,
            up,
            addrs,
            rx_queues,
        })
    }

    /// The GID table, in rdma_rxe's order so that `-g N` means the same GID as with
    /// rdma-core's tools on Linux soft-RoCE (docs/datapath.md, "GID table"):
    /// 0 is the default GID, `fe80::` plus the MAC's modified EUI-64 (RFC 4291 App. A, as the
    /// kernel's `make_default_gid` builds it); then every IPv4 address, IPv4-mapped; then every
    /// IPv6 address except one equal to the default GID.
    pub fn gids(&self) -> Vec<Ipv6Addr> {
        let default = default_gid(self.mac);
        let v4 = self.addrs.iter().filter(|a| a.ip.is_ipv4());
        let v6 = self.addrs.iter().filter(|a| a.ip.is_ipv6());
        core::iter::once(default)
            .chain(v4.chain(v6).map(IfAddr::gid).filter(|g| *g != default))
            .collect()
    }

    /// The first global address of the given family (IPv4 when `v6` is false).
    pub fn source_ip(&self, v6: bool) -> Option<IpAddr> {
        self.addrs
            .iter()
            .find(|a| a.ip.is_ipv6() == v6 && !a.link_local)
            .map(|a| a.ip)
    }

    /// The address vector of RC QP `qpn` towards `dst_ip` through next hop `dst_mac`: our MAC
    /// and first global address of the peer's family, ECT(0), and a UDP source port per QP in
    /// the dynamic range, as rxe and ConnectX use it for ECMP entropy. `None` when the
    /// interface has no global address of that family. The one path builder of the in-process
    /// API and the daemon.
    pub fn path_to(
        &self,
        qpn: rocev2_core::wire::Qpn,
        dst_ip: IpAddr,
        dst_mac: [u8; 6],
        dscp: u8,
    ) -> Option<rocev2_core::qp::Path> {
        Some(rocev2_core::qp::Path {
            src_mac: self.mac,
            dst_mac,
            vlan: None,
            src_ip: self.source_ip(dst_ip.is_ipv6())?,
            dst_ip,
            dscp,
            ecn: rocev2_core::wire::frame::Ecn::Ect0,
            hop_limit: 64,
            udp_src_port: 49152 | (qpn.value() as u16 & 0x3fff),
            flow_label: 0,
        })
    }

    /// The largest IBA path MTU whose packets fit this interface's IP MTU
    /// ([`rocev2_core::qp::Mtu::largest_within`]).
    pub fn path_mtu(&self, v6: bool) -> Option<rocev2_core::qp::Mtu> {
        rocev2_core::qp::Mtu::largest_within(self.mtu, v6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_guid_is_the_mac_eui64() {
        assert_eq!(
            node_guid([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]),
            0x5054_00ff_fe12_3456
        );
    }
    use rocev2_core::qp::Mtu;

    /// rxe-vm's server (MAC 52:54:00:77:00:0a, 192.168.77.10) shows this table in
    /// `ibv_devinfo -v`: index 0 the EUI-64 link-local GID, index 1 the IPv4-mapped one.
    #[test]
    fn gids_in_rxe_order() {
        let mut i = Interface {
            name: "x".into(),
            index: 1,
            mac: [0x52, 0x54, 0x00, 0x77, 0x00, 0x0a],
            mtu: 1500,
            up: true,
            addrs: vec![],
            rx_queues: 1,
        };
        let addr = |ip: &str, link_local| IfAddr {
            ip: ip.parse().unwrap(),
            prefix_len: 64,
            link_local,
        };
        // The kernel lists IPv6 first on a veth; the table still puts IPv4 at index 1.
        i.addrs = vec![
            addr("fe80::5054:ff:fe77:a", true),
            addr("fd00::10", false),
            addr("192.168.77.10", false),
        ];
        let g: Vec<String> = i.gids().iter().map(|g| g.to_string()).collect();
        assert_eq!(
            g,
            ["fe80::5054:ff:fe77:a", "::ffff:192.168.77.10", "fd00::10"]
        );
        // Without any address the default GID is still there.
        i.addrs.clear();
        assert_eq!(i.gids().len(), 1);
    }

    #[test]
    fn path_mtu_fits_ip_mtu() {
        let mut i = Interface {
            name: "x".into(),
            index: 1,
            mac: [0; 6],
            mtu: 1500,
            up: true,
            addrs: vec![],
            rx_queues: 1,
        };
        assert_eq!(i.path_mtu(false), Some(Mtu::Mtu1024));
        i.mtu = 9000;
        assert_eq!(i.path_mtu(true), Some(Mtu::Mtu4096));
        i.mtu = 4096 + 75;
        assert_eq!(
            i.path_mtu(false),
            Some(Mtu::Mtu4096),
            "4096 + 75 bytes of headers"
        );
        assert_eq!(i.path_mtu(true), Some(Mtu::Mtu2048));
        i.mtu = 200;
        assert_eq!(i.path_mtu(false), None);
    }

    #[test]
    fn loopback_is_refused_as_not_ethernet() {
        match Interface::by_name("lo") {
            Err(Error::BadInterface { why, .. }) => assert_eq!(why, "not an Ethernet link"),
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(
            Interface::by_name("rocev2-nonexistent"),
            Err(Error::NoSuchInterface(_))
        ));
    }
}
