//! Destination MAC addresses from the kernel: the route to a peer (`RTM_GETROUTE`, so a peer
//! behind a router resolves to the router's MAC) and the neighbour table (`RTM_GETNEIGH`), with
//! resolution triggered when the entry is missing.
//!
//! rdma_rxe does the same through the kernel's own `dst_entry` (`rxe_find_route`,
//! `rxe_prepare`); a userspace device asks over rtnetlink. A missing entry is created by sending
//! one empty UDP datagram towards the peer's discard port (9) from a socket bound to the
//! interface: the kernel then runs ARP or Neighbour Discovery as for any packet. This needs no
//! privilege (unlike `RTM_NEWNEIGH` with `NTF_USE`), and the peer at worst answers with an ICMP
//! port unreachable. The table is then polled for a bounded time.
//!
//! [`announcement`] builds the frame a raw datapath sends when a QP connects: a gratuitous ARP
//! (RFC 5227 §3 "ARP Announcement") or an unsolicited Neighbor Advertisement with the Override
//! flag (RFC 4861 §7.2.6), sent to the next hop's MAC. It makes the peer's kernel map our address
//! to *this* interface's MAC. Without it a host whose other interfaces also answer ARP for our
//! address (Linux's default `arp_ignore=0`, e.g. a bridge device in the same namespace, as in
//! rxe-vm's) can leave the peer sending to a MAC our interface never sees: an rdma_rxe client
//! then lost its first messages for 5 s, until the kernel's own ARP probe corrected it.
//!
//! Deviations: an entry is read once per resolution; rocev2 does not follow later changes of
//! the neighbour table (a peer whose MAC changes needs its QP's path updated).

use crate::Error;
use crate::netlink::Rtnl;
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant as StdInstant};

/// How a peer is reached: out of which interface, through which next hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// Outgoing interface index.
    pub oif: u32,
    /// The next hop whose MAC frames carry: the gateway, or the peer itself when on-link.
    pub next_hop: IpAddr,
    /// The source address the kernel would pick (`RTA_PREFSRC`), if any.
    pub pref_src: Option<IpAddr>,
}

/// The kernel's route to `dst` (`ip route get dst`).
///
/// # Errors
/// Netlink failures, including `ENETUNREACH` when there is no route.
pub fn route(dst: IpAddr) -> Result<Route, Error> {
    let mut nl = Rtnl::new()?;
    let mut msg = RouteMessage::default();
    msg.header.address_family = family(dst);
    msg.header.destination_prefix_length = if dst.is_ipv4() { 32 } else { 128 };
    msg.attributes
        .push(RouteAttribute::Destination(RouteAddress::from(dst)));
    let replies = nl.get(RouteNetlinkMessage::GetRoute(msg))?;
    let r = replies
        .into_iter()
        .find_map(|m| match m {
            RouteNetlinkMessage::NewRoute(r) => Some(r),
            _ => None,
        })
        .ok_or_else(|| Error::Netlink(format!("no route reply for {dst}")))?;
    let mut oif = None;
    let mut gateway = None;
    let mut pref_src = None;
    for a in &r.attributes {
        match a {
            RouteAttribute::Oif(i) => oif = Some(*i),
            RouteAttribute::Gateway(g) => gateway = route_ip(g),
            RouteAttribute::PrefSource(s) => pref_src = route_ip(s),
            _ => {}
        }
    }
    Ok(Route {
        oif: oif.ok_or_else(|| Error::Netlink(format!("route to {dst} has no interface")))?,
        next_hop: gateway.unwrap_or(dst),
        pref_src,
    })
}

fn route_ip(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

fn family(ip: IpAddr) -> AddressFamily {
    if ip.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    }
}

/// The MAC of `ip` on interface `ifindex` if the neighbour table has a usable entry
/// (reachable, stale, delay, probe, permanent).
///
/// # Errors
/// Netlink failures.
pub fn lookup(ifindex: u32, ip: IpAddr) -> Result<Option<[u8; 6]>, Error> {
    let mut nl = Rtnl::new()?;
    let mut req = NeighbourMessage::default();
    req.header.family = family(ip);
    for m in nl.dump(RouteNetlinkMessage::GetNeighbour(req))? {
        let RouteNetlinkMessage::NewNeighbour(n) = m else {
            continue;
        };
        if n.header.ifindex != ifindex || !usable(n.header.state) {
            continue;
        }
        let dst = n.attributes.iter().find_map(|a| match a {
            NeighbourAttribute::Destination(NeighbourAddress::Inet(v4)) => Some(IpAddr::V4(*v4)),
            NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6)) => Some(IpAddr::V6(*v6)),
            _ => None,
        });
        if dst != Some(ip) {
            continue;
        }
        let mac = n.attributes.iter().find_map(|a| match a {
            NeighbourAttribute::LinkLayerAddress(b) => <[u8; 6]>::try_from(b.as_slice()).ok(),
            _ => None,
        });
        if mac.is_some() {
            return Ok(mac);
        }
    }
    Ok(None)
}

fn usable(s: NeighbourState) -> bool {
    matches!(
        s,
        NeighbourState::Reachable
            | NeighbourState::Stale
            | NeighbourState::Delay
            | NeighbourState::Probe
            | NeighbourState::Permanent
            | NeighbourState::Noarp
    )
}

/// Makes the kernel resolve the next hop towards `dst`: one empty UDP datagram to port 9
/// (discard), sent out of `iface` (bound with `SO_BINDTODEVICE` when permitted).
fn trigger(iface: &str, dst: IpAddr) -> Result<(), Error> {
    use socket2::{Domain, Protocol, Socket, Type};
    let domain = if dst.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))
        .map_err(|e| Error::io("neighbour trigger socket", e))?;
    // Without the binding the route decides the interface, which is the same one in every
    // ordinary setup; the binding only matters with overlapping routes.
    let _ = s.bind_device(Some(iface.as_bytes()));
    s.set_nonblocking(true)
        .map_err(|e| Error::io("neighbour trigger nonblocking", e))?;
    // An error here (unreachable, no buffer) just means no resolution: the poll times out.
    let _ = s.send_to(&[], &SocketAddr::new(dst, 9).into());
    Ok(())
}

/// Announces `path`'s source address and MAC to its next hop when `dp` is a raw datapath (see
/// the module docs), once a QP is connected: a raw datapath sees only frames sent to this
/// interface's MAC, and the peer may have cached another interface's answer to its ARP
/// (docs/datapath.md, "Neighbours"). Best effort: if it is lost, the peer's kernel corrects
/// itself later. A path to this interface itself has no next hop to tell.
pub fn announce<D: crate::Datapath + ?Sized>(dp: &mut D, path: &rocev2_core::qp::Path) {
    if dp.carries_datagrams() || path.dst_mac == path.src_mac {
        return;
    }
    let frame = announcement(path.src_mac, path.src_ip, path.dst_mac);
    let mut batch = crate::TxBatch::new(1);
    if batch.push(&frame) {
        let _ = dp.send(&mut batch);
    }
}

/// The frame that announces `ip` at `mac` to the next hop `to_mac` (see the module docs):
/// a gratuitous ARP request for IPv4, an unsolicited Neighbor Advertisement (Override set, to
/// all nodes, hop limit 255) for IPv6.
pub fn announcement(mac: [u8; 6], ip: IpAddr, to_mac: [u8; 6]) -> Vec<u8> {
    use etherparse::{
        ArpHardwareId, ArpOperation, ArpPacket, EtherType, Icmpv6Type, PacketBuilder,
        icmpv6::NeighborAdvertisementHeader,
    };
    let mut frame = Vec::new();
    let eth = PacketBuilder::ethernet2(mac, to_mac);
    let written = match ip {
        IpAddr::V4(v4) => {
            // RFC 5227 §3: sender and target protocol address both ours, target MAC zero.
            let ip = v4.octets();
            ArpPacket::new(
                ArpHardwareId::ETHERNET,
                EtherType::IPV4,
                ArpOperation::REQUEST,
                &mac,
                &ip,
                &[0; 6],
                &ip,
            )
            .map_err(|_| ())
            .and_then(|arp| eth.arp(arp).write_to_vec(&mut frame).map_err(|_| ()))
        }
        IpAddr::V6(v6) => {
            // RFC 4861 §4.4: the target address, then the Target Link-Layer Address option.
            let mut body = v6.octets().to_vec();
            body.extend_from_slice(&[2, 1]);
            body.extend_from_slice(&mac);
            let all_nodes = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
            let na = Icmpv6Type::NeighborAdvertisement(NeighborAdvertisementHeader {
                router: false,
                solicited: false,
                r#override: true,
            });
            eth.ipv6(v6.octets(), all_nodes, 255)
                .icmpv6(na)
                .write_to_vec(&mut frame, &body)
                .map_err(|_| ())
        }
    };
    // Every length above is fixed and within the builders' limits.
    debug_assert!(written.is_ok());
    frame
}

/// The MAC address frames to `dst` must carry, leaving through interface `iface`: the next
/// hop's from the neighbour table, resolved first if missing, waiting at most `wait`; the
/// interface's own for one of its own addresses (such frames come back to this host:
/// [`crate::loopback`]).
///
/// # Errors
/// [`Error::Unresolved`] when no entry appeared in time, or netlink failures.
pub fn resolve(iface: &crate::Interface, dst: IpAddr, wait: Duration) -> Result<[u8; 6], Error> {
    if iface.addrs.iter().any(|a| a.ip == dst) {
        return Ok(iface.mac);
    }
    let r = route(dst)?;
    if r.oif != iface.index {
        tracing::warn!(
            %dst, oif = r.oif, iface = %iface.name,
            "the kernel routes this peer out of another interface; resolving on {} anyway",
            iface.name
        );
    }
    let hop = r.next_hop;
    if let Some(mac) = lookup(iface.index, hop)? {
        return Ok(mac);
    }
    let start = StdInstant::now();
    let mut next_trigger = start;
    loop {
        let now = StdInstant::now();
        if now >= next_trigger {
            trigger(&iface.name, dst)?;
            // Retrigger every 200 ms: a lost ARP request or a FAILED entry gets a new probe.
            next_trigger = now + Duration::from_millis(200);
        }
        std::thread::sleep(Duration::from_millis(2));
        if let Some(mac) = lookup(iface.index, hop)? {
            tracing::debug!(%dst, %hop, waited_ms = start.elapsed().as_millis() as u64, "resolved");
            return Ok(mac);
        }
        if start.elapsed() >= wait {
            return Err(Error::Unresolved(hop));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// The announcement as tshark and the kernel read it: a gratuitous ARP whose sender and
    /// target IP are ours; an NA with Override, our target and our MAC in the option, and a
    /// checksum that verifies.
    #[test]
    fn announcement_frames_say_our_address_is_at_our_mac() {
        let mac = [0x02, 0, 0, 0, 0, 1];
        let peer = [0x02, 0, 0, 0, 0, 2];
        let f = announcement(mac, "10.0.0.1".parse().unwrap(), peer);
        assert_eq!(f.len(), 42);
        assert_eq!(&f[0..6], &peer);
        assert_eq!(&f[12..14], &[0x08, 0x06]);
        assert_eq!(&f[20..22], &[0, 1], "request");
        assert_eq!(&f[22..28], &mac);
        assert_eq!(&f[28..32], &[10, 0, 0, 1]);
        assert_eq!(
            &f[38..42],
            &[10, 0, 0, 1],
            "gratuitous: target IP = sender IP"
        );

        let v6: std::net::Ipv6Addr = "fd00::1".parse().unwrap();
        let f = announcement(mac, IpAddr::V6(v6), peer);
        let (eth, rest) = etherparse::Ethernet2Header::from_slice(&f).unwrap();
        assert_eq!(eth.destination, peer);
        let (ip6, icmp) = etherparse::Ipv6Header::from_slice(rest).unwrap();
        assert_eq!(ip6.hop_limit, 255);
        assert_eq!(icmp[0], 136, "Neighbor Advertisement");
        assert_eq!(icmp[4] & 0x20, 0x20, "Override");
        assert_eq!(&icmp[8..24], &v6.octets());
        assert_eq!(&icmp[24..26], &[2, 1], "Target Link-Layer Address option");
        assert_eq!(&icmp[26..32], &mac);
        let (hdr, payload) = etherparse::Icmpv6Header::from_slice(icmp).unwrap();
        let want = hdr
            .icmp_type
            .calc_checksum(ip6.source, ip6.destination, payload)
            .unwrap();
        assert_eq!(hdr.checksum, want);
    }

    #[test]
    fn usable_states_only() {
        assert!(usable(NeighbourState::Reachable));
        assert!(usable(NeighbourState::Stale));
        assert!(!usable(NeighbourState::Incomplete));
        assert!(!usable(NeighbourState::Failed));
        assert!(!usable(NeighbourState::None));
    }

    #[test]
    fn route_to_loopback_is_on_link() {
        // Every namespace has lo; 127.0.0.1 routes through it with no gateway.
        let Ok(r) = route(IpAddr::V4(Ipv4Addr::LOCALHOST)) else {
            eprintln!("SKIPPED route_to_loopback_is_on_link: lo is down in this namespace");
            return;
        };
        assert_eq!(r.next_hop, IpAddr::V4(Ipv4Addr::LOCALHOST));
    }

    #[test]
    fn resolve_gives_the_interface_its_own_mac_for_its_own_addresses() {
        let mac = [2, 0x5e, 0, 0, 0, 7];
        let addr = |ip: &str| crate::iface::IfAddr {
            ip: ip.parse().unwrap(),
            prefix_len: 24,
            link_local: false,
        };
        // An interface no netlink call could find: the answer comes from its addresses alone.
        let iface = crate::Interface {
            name: "nowhere0".into(),
            index: 0x7fff_fff0,
            mac,
            mtu: 1500,
            up: true,
            addrs: vec![addr("192.0.2.7"), addr("2001:db8::7")],
            rx_queues: 1,
        };
        for ip in ["192.0.2.7", "2001:db8::7"] {
            assert_eq!(
                resolve(&iface, ip.parse().unwrap(), Duration::ZERO).unwrap(),
                mac
            );
        }
    }
}
