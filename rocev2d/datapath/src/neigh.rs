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

/// The MAC address frames to `dst` must carry, leaving through interface `iface`: the next
/// hop's from the neighbour table, resolved first if missing, waiting at most `wait`.
///
/// # Errors
/// [`Error::Unresolved`] when no entry appeared in time, or netlink failures.
pub fn resolve(iface: &crate::Interface, dst: IpAddr, wait: Duration) -> Result<[u8; 6], Error> {
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
}
