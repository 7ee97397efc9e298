//! The concrete testbed a [`Network`] becomes: namespace and interface names, L2 segments,
//! addresses and routes. Pure computation, no root needed, so it is unit-tested here and the
//! bring-up code ([`crate::netns`]) only renders it into `ip` and `tc` commands.
//!
//! **Names.** Every namespace is `rv2-OWNER-NODE`: OWNER is `PID-COUNTER` for a testbed owned
//! by a process (tests; Drop removes it, and the sweeper removes it once that pid is dead), or
//! a name (`[a-z]…`, from `rocev2-testbed up`; `down` removes it). Interfaces live inside the
//! namespaces, so their names only need to be unique per namespace; they still carry the
//! owner (`rv2` + base-36 pid and counter, or the name) so a leftover seen in `ip link`,
//! `bpftool net` or a capture says whose it is: `rv2TAGpN` for port N, `rv2TAGbr` for a
//! bridge, at most 15 bytes (IFNAMSIZ − 1), checked.
//!
//! **Addresses.** Links are grouped into L2 segments (a direct link, or everything hanging off
//! one tree of bridges), numbered in link order. Segment k is `10.(k/256).(k%256).0/24` and
//! `fd00:0:0:k::/64`. On a segment, hosts count up from `.1` (`::1`) and routers count down
//! from `.254` (`::fe`), both in link order, so in every shape the hosts' addresses are small
//! and the gateway is `.254`.
//!
//! **Routes.** Every host and router gets a route to every segment it is not on, through all
//! neighbouring routers on a shortest path (fewest routers): one next hop, or an ECMP group
//! when several are equally short (leaf-spine). A host whose routes all share one next-hop
//! set gets a single default route instead, which is what one would write by hand.
//!
//! Deviations: none.

use crate::topology::{Error, Network, Role, Shaping};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Every name this crate creates starts with this.
pub const PREFIX: &str = "rv2";
/// Longest node name: keeps namespace names short enough to read in `ip netns list`.
pub const NODE_NAME_MAX: usize = 8;
/// Longest testbed name: `rv2` + name + `p99` must fit in 15 bytes.
pub const TESTBED_NAME_MAX: usize = 8;
/// Linux interface names are at most IFNAMSIZ − 1 = 15 bytes.
pub const IFNAME_MAX: usize = 15;
/// Most ports one node may have (`p0`…`p99`).
const PORTS_MAX: usize = 100;

/// Who owns a testbed, which decides its names and who removes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Owner {
    /// Owned by a running process: removed by its Drop, or by the sweeper once `pid` is dead.
    Process {
        /// The owning process.
        pid: u32,
        /// Per-process testbed counter, so one process can hold several testbeds.
        counter: u32,
    },
    /// Named and persistent (`rocev2-testbed up`): removed by `rocev2-testbed down NAME`.
    Named(String),
}

impl Owner {
    /// `rv2-PID-COUNTER` or `rv2-NAME`: the start of every namespace name of this testbed.
    pub fn netns_prefix(&self) -> String {
        match self {
            Owner::Process { pid, counter } => format!("{PREFIX}-{pid}-{counter}"),
            Owner::Named(name) => format!("{PREFIX}-{name}"),
        }
    }

    /// `rv2` + base-36 pid and counter, or `rv2` + name: the start of every interface name.
    pub fn if_tag(&self) -> String {
        match self {
            Owner::Process { pid, counter } => {
                format!(
                    "{PREFIX}{}{}",
                    base36(u64::from(*pid)),
                    base36(u64::from(*counter))
                )
            }
            Owner::Named(name) => format!("{PREFIX}{name}"),
        }
    }

    /// Split a namespace name into its owner and node, if it is one of ours.
    ///
    /// `rv2-123-4-h0` is process 123's testbed 4; `rv2-pair-h0` is the named testbed `pair`.
    /// Anything else (including names that merely start with `rv2`) is not ours.
    pub fn parse_netns(netns: &str) -> Option<(Owner, String)> {
        let rest = netns.strip_prefix(PREFIX)?.strip_prefix('-')?;
        let mut fields = rest.splitn(3, '-');
        let first = fields.next()?;
        let second = fields.next()?;
        match fields.next() {
            Some(node)
                if is_digits(first) && is_digits(second) && valid_name(node, NODE_NAME_MAX) =>
            {
                let owner = Owner::Process {
                    pid: first.parse().ok()?,
                    counter: second.parse().ok()?,
                };
                Some((owner, node.to_owned()))
            }
            None if valid_name(first, TESTBED_NAME_MAX) && valid_name(second, NODE_NAME_MAX) => {
                Some((Owner::Named(first.to_owned()), second.to_owned()))
            }
            _ => None,
        }
    }
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// `[a-z][a-z0-9]*` of at most `max` characters: safe in namespace and interface names, and
/// unambiguous when parsing `rv2-…` back.
fn valid_name(name: &str, max: usize) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z'))
        && name.len() <= max
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// Check a persistent testbed's name.
///
/// # Errors
/// [`Error::BadName`] unless `[a-z][a-z0-9]*` of at most [`TESTBED_NAME_MAX`] characters.
pub fn check_testbed_name(name: &str) -> Result<(), Error> {
    if valid_name(name, TESTBED_NAME_MAX) {
        Ok(())
    } else {
        Err(Error::BadName {
            name: name.to_owned(),
            max: TESTBED_NAME_MAX,
        })
    }
}

/// One L2 segment and its subnets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// Segment number k (subnet `10.(k/256).(k%256).0/24`, `fd00:0:0:k::/64`).
    pub index: u16,
}

impl Segment {
    /// Length of the IPv4 prefix.
    pub const IPV4_PREFIX_LEN: u8 = 24;
    /// Length of the IPv6 prefix.
    pub const IPV6_PREFIX_LEN: u8 = 64;

    /// The IPv4 address with last octet `host`.
    pub fn ipv4(self, host: u8) -> Ipv4Addr {
        let [hi, lo] = self.index.to_be_bytes();
        Ipv4Addr::new(10, hi, lo, host)
    }

    /// The IPv6 address with interface identifier `host`.
    pub fn ipv6(self, host: u8) -> Ipv6Addr {
        Ipv6Addr::new(0xfd00, 0, 0, self.index, 0, 0, 0, u16::from(host))
    }

    /// `10.x.y.0/24`.
    pub fn ipv4_subnet(self) -> String {
        format!("{}/{}", self.ipv4(0), Self::IPV4_PREFIX_LEN)
    }

    /// `fd00:0:0:k::/64`.
    pub fn ipv6_subnet(self) -> String {
        format!("{}/{}", self.ipv6(0), Self::IPV6_PREFIX_LEN)
    }
}

/// One interface of a node: one end of a veth pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortPlan {
    /// Interface name inside the node's namespace.
    pub ifname: String,
    /// The node at the other end.
    pub peer: String,
    /// Interface name of the other end (in the peer's namespace).
    pub peer_ifname: String,
    /// Index of the link in [`Network::links`].
    pub link: usize,
    /// MTU.
    pub mtu: u32,
    /// Transmit and receive queues.
    #[serde(default = "crate::topology::one_queue")]
    pub queues: u32,
    /// The L2 segment this port is on.
    pub segment: Segment,
    /// IPv4 address; `None` on bridge ports.
    pub ipv4: Option<Ipv4Addr>,
    /// IPv6 address; `None` on bridge ports.
    pub ipv6: Option<Ipv6Addr>,
    /// Egress shaping, if any.
    pub egress: Option<Shaping>,
}

/// Where a route leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Destination {
    /// Everything not on a connected segment (hosts with a single way out).
    Default,
    /// One segment's subnets.
    Segment(Segment),
}

/// One next hop: the neighbouring router's address on a shared segment, and our interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextHop {
    /// The neighbour's IPv4 address.
    pub ipv4: Ipv4Addr,
    /// The neighbour's IPv6 address.
    pub ipv6: Ipv6Addr,
    /// Our interface toward it.
    pub ifname: String,
    /// The neighbour's node name (for humans).
    pub node: String,
}

/// A static route, with more than one next hop an ECMP group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// Where to.
    pub destination: Destination,
    /// Equal-cost next hops, in link order.
    pub nexthops: Vec<NextHop>,
}

/// One node, made concrete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePlan {
    /// Node name.
    pub name: String,
    /// Host, bridge or router.
    pub role: Role,
    /// Its network namespace.
    pub netns: String,
    /// Its ports, in link order.
    pub ports: Vec<PortPlan>,
    /// The bridge device enslaving all ports, on a bridge node.
    pub bridge: Option<String>,
    /// Its static routes.
    pub routes: Vec<Route>,
}

impl NodePlan {
    /// The first port's IPv4 address: a host's address.
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        self.ports.iter().find_map(|p| p.ipv4)
    }

    /// The first port's IPv6 address: a host's address.
    pub fn ipv6(&self) -> Option<Ipv6Addr> {
        self.ports.iter().find_map(|p| p.ipv6)
    }

    /// The port toward `peer`, if a link joins them.
    pub fn port_toward(&self, peer: &str) -> Option<&PortPlan> {
        self.ports.iter().find(|p| p.peer == peer)
    }
}

/// A whole testbed, made concrete; serialized into the state file of a named testbed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Who owns it.
    pub owner: Owner,
    /// Nodes, in [`Network::nodes`] order.
    pub nodes: Vec<NodePlan>,
    /// Number of L2 segments.
    pub segments: u16,
}

impl Plan {
    /// Work out names, segments, addresses and routes.
    ///
    /// # Errors
    /// A [`topology::Error`](Error) for a bad or duplicate name, a link to an unknown node or
    /// to itself, a bridge loop, a node twice on one segment, a full segment, too many ports,
    /// or interface names that would exceed 15 bytes.
    pub fn new(net: &Network, owner: Owner) -> Result<Plan, Error> {
        if let Owner::Named(name) = &owner {
            check_testbed_name(name)?;
        }
        let node_index = |name: &str| {
            net.nodes
                .iter()
                .position(|n| n.name == name)
                .ok_or_else(|| Error::UnknownNode(name.to_owned()))
        };
        for (i, node) in net.nodes.iter().enumerate() {
            if !valid_name(&node.name, NODE_NAME_MAX) {
                return Err(Error::BadName {
                    name: node.name.clone(),
                    max: NODE_NAME_MAX,
                });
            }
            if net.nodes[..i].iter().any(|n| n.name == node.name) {
                return Err(Error::DuplicateNode(node.name.clone()));
            }
        }
        // ends[l] = (node index of side 0, node index of side 1).
        let mut ends = Vec::with_capacity(net.links.len());
        for link in &net.links {
            let a = node_index(&link.ends[0])?;
            let b = node_index(&link.ends[1])?;
            if a == b {
                return Err(Error::SelfLink(link.ends[0].clone()));
            }
            ends.push([a, b]);
        }

        // An interface is (link, side); interface id = 2·link + side.
        let tag = owner.if_tag();
        let mut port_of = vec![0usize; 2 * net.links.len()];
        let mut ports_per_node = vec![Vec::new(); net.nodes.len()];
        for (l, pair) in ends.iter().enumerate() {
            for side in 0..2 {
                let node = pair[side];
                port_of[2 * l + side] = ports_per_node[node].len();
                ports_per_node[node].push(2 * l + side);
            }
        }
        for (node, ports) in net.nodes.iter().zip(&ports_per_node) {
            if ports.len() > PORTS_MAX {
                return Err(Error::TooManyPorts {
                    node: node.name.clone(),
                    ports: ports.len(),
                });
            }
        }
        let ifname = |iface: usize| format!("{tag}p{}", port_of[iface]);
        let longest = format!("{tag}p{}", PORTS_MAX - 1);
        if longest.len() > IFNAME_MAX {
            return Err(Error::BadName {
                name: longest,
                max: IFNAME_MAX,
            });
        }

        // L2 segments: a link's two ends are on one segment, and so are all ports of a bridge.
        let mut uf = UnionFind::new(2 * net.links.len());
        for l in 0..net.links.len() {
            uf.union(2 * l, 2 * l + 1);
        }
        for (node, ports) in net.nodes.iter().zip(&ports_per_node) {
            if node.role == Role::Bridge {
                for w in ports.windows(2) {
                    uf.union(w[0], w[1]);
                }
            }
        }
        // Number segments by first appearance in link order.
        let mut seg_of_root = vec![None; 2 * net.links.len()];
        let mut segment_of = vec![0u16; 2 * net.links.len()];
        let mut segments: u16 = 0;
        for (iface, slot) in segment_of.iter_mut().enumerate() {
            let root = uf.find(iface);
            *slot = match seg_of_root[root] {
                Some(s) => s,
                None => {
                    let s = segments;
                    // Segment numbers are the third and fourth bytes of 10.x.y.0/24.
                    segments = segments.checked_add(1).ok_or(Error::TooManySegments)?;
                    seg_of_root[root] = Some(s);
                    s
                }
            };
        }
        let nseg = usize::from(segments);

        // Per segment: its L3 interfaces (hosts, routers) in link order, and a tree check.
        let mut l3_on = vec![Vec::new(); nseg];
        let mut links_on = vec![0usize; nseg];
        let mut bridges_on = vec![0usize; nseg];
        for iface in 0..2 * net.links.len() {
            let node = ends[iface / 2][iface % 2];
            if net.nodes[node].role != Role::Bridge {
                l3_on[usize::from(segment_of[iface])].push(iface);
            }
        }
        for l in 0..net.links.len() {
            links_on[usize::from(segment_of[2 * l])] += 1;
        }
        for ports in ports_per_node.iter().zip(&net.nodes) {
            if ports.1.role == Role::Bridge
                && let Some(&first) = ports.0.first()
            {
                bridges_on[usize::from(segment_of[first])] += 1;
            }
        }
        for s in 0..nseg {
            // A connected graph is a tree iff edges = vertices − 1 (vertices: bridges and L3
            // interfaces, each of which has exactly one link).
            if links_on[s] + 1 != bridges_on[s] + l3_on[s].len() {
                let culprit = l3_on[s]
                    .first()
                    .map(|&i| net.nodes[ends[i / 2][i % 2]].name.clone())
                    .unwrap_or_default();
                return Err(Error::BridgeLoop(culprit));
            }
            let mut owners: Vec<usize> = l3_on[s].iter().map(|&i| ends[i / 2][i % 2]).collect();
            owners.sort_unstable();
            if let Some(w) = owners.windows(2).find(|w| w[0] == w[1]) {
                return Err(Error::TwoPortsOnSegment {
                    node: net.nodes[w[0]].name.clone(),
                });
            }
            if l3_on[s].len() > 254 {
                return Err(Error::SegmentFull(l3_on[s].len()));
            }
        }

        // Addresses: hosts up from 1, routers down from 254.
        let mut host_id = vec![None; 2 * net.links.len()];
        for l3 in &l3_on {
            let (mut up, mut down) = (1u8, 254u8);
            for &iface in l3 {
                let node = ends[iface / 2][iface % 2];
                if net.nodes[node].role == Role::Router {
                    host_id[iface] = Some(down);
                    down -= 1;
                } else {
                    host_id[iface] = Some(up);
                    up += 1;
                }
            }
        }

        let routes = Routing::new(net, &ports_per_node, &segment_of, nseg);
        let mut nodes = Vec::with_capacity(net.nodes.len());
        for (n, node) in net.nodes.iter().enumerate() {
            let ports = ports_per_node[n]
                .iter()
                .map(|&iface| {
                    let (l, side) = (iface / 2, iface % 2);
                    let peer_iface = 2 * l + (1 - side);
                    let segment = Segment {
                        index: segment_of[iface],
                    };
                    PortPlan {
                        ifname: ifname(iface),
                        peer: net.nodes[ends[l][1 - side]].name.clone(),
                        peer_ifname: ifname(peer_iface),
                        link: l,
                        mtu: net.links[l].mtu,
                        queues: net.links[l].queues,
                        segment,
                        ipv4: host_id[iface].map(|h| segment.ipv4(h)),
                        ipv6: host_id[iface].map(|h| segment.ipv6(h)),
                        egress: net.links[l].egress[side],
                    }
                })
                .collect();
            let mut routes = match node.role {
                Role::Bridge => Vec::new(),
                _ => routes.for_node(n, net, |iface| {
                    let seg = Segment {
                        index: segment_of[iface],
                    };
                    let id = host_id[iface].unwrap_or(0);
                    (seg.ipv4(id), seg.ipv6(id), ifname(iface))
                }),
            };
            if node.role == Role::Host {
                collapse_to_default(&mut routes);
            }
            nodes.push(NodePlan {
                name: node.name.clone(),
                role: node.role,
                netns: format!("{}-{}", owner.netns_prefix(), node.name),
                ports,
                bridge: (node.role == Role::Bridge).then(|| format!("{tag}br")),
                routes,
            });
        }
        Ok(Plan {
            owner,
            nodes,
            segments,
        })
    }

    /// The node named `name`.
    pub fn node(&self, name: &str) -> Option<&NodePlan> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// All hosts, in node order.
    pub fn hosts(&self) -> impl Iterator<Item = &NodePlan> {
        self.nodes.iter().filter(|n| n.role == Role::Host)
    }
}

/// A host whose routes all leave through the same next hops needs only a default route.
fn collapse_to_default(routes: &mut Vec<Route>) {
    let Some(first) = routes.first() else { return };
    if routes.iter().all(|r| r.nexthops == first.nexthops) {
        let nexthops = first.nexthops.clone();
        *routes = vec![Route {
            destination: Destination::Default,
            nexthops,
        }];
    }
}

/// Shortest paths over the bipartite graph of segments and routers.
struct Routing {
    /// `dist[s][n]`: routers traversed from router `n` to segment `s` (1 when `n` is on `s`);
    /// `None` when unreachable or `n` is not a router.
    dist: Vec<Vec<Option<u32>>>,
    /// Segments each node has an L3 interface on, with that interface.
    l3_segments: Vec<Vec<(u16, usize)>>,
    /// L3 interfaces on each segment, with their node.
    on_segment: Vec<Vec<(usize, usize)>>,
}

impl Routing {
    fn new(
        net: &Network,
        ports_per_node: &[Vec<usize>],
        segment_of: &[u16],
        nseg: usize,
    ) -> Routing {
        let mut l3_segments = vec![Vec::new(); net.nodes.len()];
        let mut on_segment = vec![Vec::new(); nseg];
        for (n, ports) in ports_per_node.iter().enumerate() {
            if net.nodes[n].role == Role::Bridge {
                continue;
            }
            for &iface in ports {
                l3_segments[n].push((segment_of[iface], iface));
                on_segment[usize::from(segment_of[iface])].push((n, iface));
            }
        }
        let is_router = |n: usize| net.nodes[n].role == Role::Router;
        let mut dist = vec![vec![None; net.nodes.len()]; nseg];
        for (s, dist_s) in dist.iter_mut().enumerate() {
            let mut seg_seen = vec![false; nseg];
            seg_seen[s] = true;
            let mut queue = VecDeque::from([(s, 0u32)]);
            while let Some((seg, d)) = queue.pop_front() {
                for &(n, _) in &on_segment[seg] {
                    if !is_router(n) || dist_s[n].is_some() {
                        continue;
                    }
                    dist_s[n] = Some(d + 1);
                    for &(other, _) in &l3_segments[n] {
                        let other = usize::from(other);
                        if !seg_seen[other] {
                            seg_seen[other] = true;
                            queue.push_back((other, d + 1));
                        }
                    }
                }
            }
        }
        Routing {
            dist,
            l3_segments,
            on_segment,
        }
    }

    /// Routes of node `n` to every segment it is not on. `addr(iface)` gives an interface's
    /// addresses and name.
    fn for_node(
        &self,
        n: usize,
        net: &Network,
        addr: impl Fn(usize) -> (Ipv4Addr, Ipv6Addr, String),
    ) -> Vec<Route> {
        let mine: Vec<u16> = self.l3_segments[n].iter().map(|&(s, _)| s).collect();
        let mut routes = Vec::new();
        for (s, dist_s) in self.dist.iter().enumerate() {
            let seg = s as u16;
            if mine.contains(&seg) {
                continue;
            }
            let mut best: Option<u32> = None;
            let mut nexthops = Vec::new();
            for &(my_seg, my_iface) in &self.l3_segments[n] {
                for &(r, r_iface) in &self.on_segment[usize::from(my_seg)] {
                    let Some(d) = dist_s[r] else { continue };
                    if r == n {
                        continue;
                    }
                    if best.is_none_or(|b| d < b) {
                        best = Some(d);
                        nexthops.clear();
                    }
                    if best == Some(d) {
                        let (ipv4, ipv6, _) = addr(r_iface);
                        let (_, _, ifname) = addr(my_iface);
                        nexthops.push(NextHop {
                            ipv4,
                            ipv6,
                            ifname,
                            node: net.nodes[r].name.clone(),
                        });
                    }
                }
            }
            if !nexthops.is_empty() {
                routes.push(Route {
                    destination: Destination::Segment(Segment { index: seg }),
                    nexthops,
                });
            }
        }
        routes
    }
}

/// Disjoint sets over interface ids, for grouping L2 segments.
struct UnionFind {
    parent: Vec<usize>,
}

impl UnionFind {
    fn new(n: usize) -> Self {
        UnionFind {
            parent: (0..n).collect(),
        }
    }

    fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] != x {
            self.parent[x] = self.parent[self.parent[x]];
            x = self.parent[x];
        }
        x
    }

    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.parent[rb.max(ra)] = rb.min(ra);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{LinkParams, SwitchKind, Topology};

    fn owner() -> Owner {
        Owner::Process {
            pid: 4_194_303,
            counter: 1295,
        }
    }

    fn plan(t: Topology) -> Plan {
        Plan::new(&t.network().unwrap(), owner()).unwrap()
    }

    #[test]
    fn netns_names_parse_back_only_when_ours() {
        let (o, node) = Owner::parse_netns("rv2-123-4-l0h1").unwrap();
        assert_eq!(
            o,
            Owner::Process {
                pid: 123,
                counter: 4
            }
        );
        assert_eq!(node, "l0h1");
        let (o, node) = Owner::parse_netns("rv2-pair-h0").unwrap();
        assert_eq!((o, node.as_str()), (Owner::Named("pair".into()), "h0"));
        for other in [
            "rv2",
            "rv2x-1-2-h0",
            "rv2-1-2",
            "rv2-1-2-H0",
            "rv2-Pair-h0",
            "netns0",
        ] {
            assert_eq!(Owner::parse_netns(other), None, "{other}");
        }
    }

    #[test]
    fn ifnames_fit_with_largest_pid_and_counter() {
        let p = plan(Topology::Pair {
            link: LinkParams::default(),
        });
        // pid 4194303 (the largest pid_max) = "2hwcf" in base 36, counter 1295 = "zz".
        assert_eq!(p.nodes[0].ports[0].ifname, "rv22hwcfzzp0");
        assert_eq!(p.nodes[0].netns, "rv2-4194303-1295-h0");
        assert!(format!("{}p99", owner().if_tag()).len() <= IFNAME_MAX);
    }

    #[test]
    fn too_long_testbed_name_rejected() {
        let net = Topology::Pair {
            link: LinkParams::default(),
        }
        .network()
        .unwrap();
        assert!(matches!(
            Plan::new(&net, Owner::Named("toolongname".into())),
            Err(Error::BadName { max: 8, .. })
        ));
    }

    #[test]
    fn pair_addresses_and_no_routes() {
        let p = plan(Topology::Pair {
            link: LinkParams::default(),
        });
        assert_eq!(p.nodes[0].ipv4(), Some(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(p.nodes[1].ipv4(), Some(Ipv4Addr::new(10, 0, 0, 2)));
        assert_eq!(p.nodes[1].ipv6(), Some("fd00::2".parse().unwrap()));
        assert!(p.nodes.iter().all(|n| n.routes.is_empty()));
        assert_eq!(p.nodes[0].ports[0].peer_ifname, p.nodes[1].ports[0].ifname);
    }

    #[test]
    fn bridge_star_is_one_segment() {
        let p = plan(Topology::Star {
            senders: 3,
            switch: SwitchKind::Bridge,
            link: LinkParams::default(),
        });
        assert_eq!(p.segments, 1);
        let sw = p.node("sw").unwrap();
        assert!(sw.bridge.is_some() && sw.ports.iter().all(|p| p.ipv4.is_none()));
        let rx = p.node("rx").unwrap();
        assert_eq!(rx.ipv4(), Some(Ipv4Addr::new(10, 0, 0, 4)));
        assert!(rx.routes.is_empty());
    }

    #[test]
    fn router_star_hosts_default_via_254() {
        let p = plan(Topology::Star {
            senders: 2,
            switch: SwitchKind::Router,
            link: LinkParams::default(),
        });
        let tx1 = p.node("tx1").unwrap();
        assert_eq!(tx1.ipv4(), Some(Ipv4Addr::new(10, 0, 1, 1)));
        assert_eq!(tx1.routes.len(), 1);
        assert_eq!(tx1.routes[0].destination, Destination::Default);
        assert_eq!(tx1.routes[0].nexthops[0].ipv4, Ipv4Addr::new(10, 0, 1, 254));
        // The router is on every segment: no routes needed.
        assert!(p.node("sw").unwrap().routes.is_empty());
    }

    #[test]
    fn router_dumbbell_routes_across_bottleneck() {
        let p = plan(Topology::Dumbbell {
            left: 1,
            right: 2,
            switch: SwitchKind::Router,
            link: LinkParams::default(),
            bottleneck: None,
        });
        // Segments: a0 (0), b0 (1), b1 (2), bottleneck (3): swa .254, swb .253.
        let swa = p.node("swa").unwrap();
        assert_eq!(swa.routes.len(), 2);
        for r in &swa.routes {
            assert_eq!(r.nexthops.len(), 1);
            assert_eq!(r.nexthops[0].ipv4, Ipv4Addr::new(10, 0, 3, 253));
            assert_eq!(r.nexthops[0].node, "swb");
        }
    }

    #[test]
    fn bridge_dumbbell_is_one_segment() {
        let p = plan(Topology::Dumbbell {
            left: 2,
            right: 2,
            switch: SwitchKind::Bridge,
            link: LinkParams::default(),
            bottleneck: None,
        });
        assert_eq!(p.segments, 1);
        let addrs: Vec<_> = p.hosts().map(|h| h.ipv4().unwrap().octets()[3]).collect();
        assert_eq!(addrs, [1, 2, 3, 4]);
    }

    #[test]
    fn leaf_spine_leaves_route_over_every_spine() {
        let p = plan(Topology::LeafSpine {
            leaves: 3,
            spines: 4,
            hosts_per_leaf: 2,
            link: LinkParams::default(),
            fabric: None,
        });
        let l0 = p.node("l0").unwrap();
        // 4 remote host segments (l1, l2) via all 4 spines; the 8 fabric segments of l1/l2
        // via the one spine on each.
        let remote_hosts: Vec<_> = l0
            .routes
            .iter()
            .filter(|r| matches!(r.destination, Destination::Segment(s) if s.index < 6))
            .collect();
        assert_eq!(remote_hosts.len(), 4);
        for r in remote_hosts {
            let spines: Vec<_> = r.nexthops.iter().map(|h| h.node.as_str()).collect();
            assert_eq!(spines, ["s0", "s1", "s2", "s3"]);
        }
        let s0 = p.node("s0").unwrap();
        let to_l2h1 = s0
            .routes
            .iter()
            .find(|r| r.destination == Destination::Segment(Segment { index: 5 }))
            .unwrap();
        assert_eq!(to_l2h1.nexthops.len(), 1);
        assert_eq!(to_l2h1.nexthops[0].node, "l2");
        let h = p.node("l1h1").unwrap();
        assert_eq!(h.routes.len(), 1);
        assert_eq!(h.routes[0].destination, Destination::Default);
        assert_eq!(h.ipv4(), Some(Ipv4Addr::new(10, 0, 3, 1)));
    }

    #[test]
    fn bridge_loop_rejected() {
        let mut net = Network::new();
        net.node("a", Role::Host)
            .node("x", Role::Bridge)
            .node("y", Role::Bridge);
        let l = LinkParams::default();
        net.link("a", "x", &l).unwrap();
        net.link("x", "y", &l).unwrap();
        net.link("y", "x", &l).unwrap();
        assert!(matches!(Plan::new(&net, owner()), Err(Error::BridgeLoop(n)) if n == "a"));
    }

    #[test]
    fn host_twice_on_a_bridge_rejected() {
        let mut net = Network::new();
        net.node("a", Role::Host).node("x", Role::Bridge);
        let l = LinkParams::default();
        net.link("a", "x", &l).unwrap();
        net.link("a", "x", &l).unwrap();
        assert!(matches!(
            Plan::new(&net, owner()),
            Err(Error::TwoPortsOnSegment { node }) if node == "a"
        ));
    }

    #[test]
    fn unknown_and_duplicate_nodes_rejected() {
        let mut net = Network::new();
        net.node("a", Role::Host).node("a", Role::Host);
        assert!(matches!(
            Plan::new(&net, owner()),
            Err(Error::DuplicateNode(_))
        ));
        let mut net = Network::new();
        net.node("a", Role::Host);
        net.link("a", "b", &LinkParams::default()).unwrap();
        assert!(matches!(Plan::new(&net, owner()), Err(Error::UnknownNode(b)) if b == "b"));
        let mut net = Network::new();
        net.node("A", Role::Host);
        assert!(matches!(
            Plan::new(&net, owner()),
            Err(Error::BadName { .. })
        ));
    }
}
