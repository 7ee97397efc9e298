//! What a testbed is made of: the shapes tests ask for ([`Topology`]: pair, incast star,
//! dumbbell, leaf-spine) and the generic graph of nodes and links they expand to ([`Network`]).
//!
//! A shape is what a topology file (`deploy/testbeds/*.toml`) names; [`Topology::network`]
//! turns it into a [`Network`], which a test may still edit (shape one more port, say) before
//! [`crate::Testbed::up`] brings it up. Every node becomes a network namespace, every link a
//! veth pair; addresses and routes are derived later by [`crate::plan`].
//!
//! Node names, fixed so tests and researchers can address hosts by name:
//!
//! | shape | hosts | switches |
//! |---|---|---|
//! | pair | `h0`, `h1` (one direct link) | none |
//! | star | senders `tx0`…`tx{N-1}`, receiver `rx` | `sw` |
//! | dumbbell | left `a0`…, right `b0`… | `swa`, `swb` (the link between them is the bottleneck) |
//! | leaf-spine | `l{leaf}h{i}` | leaves `l0`…, spines `s0`… |
//!
//! Deviations: none from the issue, but two choices worth knowing. A pair is two hosts on one
//! veth, with no switch between them (an incast star with one sender is the pair through a
//! switch). Leaf-spine switches are always routers, since ECMP needs routing and a bridged
//! leaf-spine would be a loop.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Default MTU of every link: a 4096-byte RoCE payload plus BTH, RETH, ICRC, UDP and an IPv6
/// header (4176 bytes) fits, with room for our extension header.
pub const DEFAULT_MTU: u32 = 4200;
/// Default per-port buffer when a rate is set but no buffer: a shallow-buffer switch port.
pub const DEFAULT_BUFFER_BYTES: u64 = 128 * 1024;

/// Accepted MTUs: IPv6 needs at least 1280; 9216 is the common jumbo-frame ceiling.
const MTU_RANGE: (u64, u64) = (1280, 9216);
/// Accepted queue counts of a veth end: 1 to 64 (the AF_XDP steering program's XSKMAP size).
const QUEUES_RANGE: (u64, u64) = (1, 64);
/// Accepted rates: 1 Mbit/s to 100 Gbit/s (veth cannot move much more anyway).
const RATE_RANGE: (u64, u64) = (1_000_000, 100_000_000_000);
/// Accepted buffers: up to 1 GiB; the lower bound is one full frame, checked against the MTU.
const BUFFER_MAX: u64 = 1 << 30;
/// Most hosts (or switches, leaves, spines) a shape may ask for: names, addresses (one /24
/// per segment) and bring-up time all stay small.
const COUNT_RANGE: (u64, u64) = (1, 64);

/// A configuration mistake, naming the TOML key and the accepted range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A number outside its accepted range.
    #[error("`{key}` = {value} is out of range (accepted: {min}..={max})")]
    OutOfRange {
        /// The TOML key, e.g. `topology.link.mtu`.
        key: String,
        /// The value given.
        value: u64,
        /// Smallest accepted value.
        min: u64,
        /// Largest accepted value.
        max: u64,
    },
    /// A key that only makes sense together with another one.
    #[error("`{key}` needs `{needs}`")]
    Needs {
        /// The key given.
        key: String,
        /// The key it needs.
        needs: String,
    },
    /// A node or testbed name that is not `[a-z][a-z0-9]*` within its length limit.
    #[error("name {name:?} is not [a-z][a-z0-9]* of at most {max} characters")]
    BadName {
        /// The name given.
        name: String,
        /// Its length limit.
        max: usize,
    },
    /// Two nodes with the same name.
    #[error("node {0:?} declared twice")]
    DuplicateNode(String),
    /// A link or query names a node that does not exist.
    #[error("no node named {0:?}")]
    UnknownNode(String),
    /// A link from a node to itself.
    #[error("link from {0:?} to itself")]
    SelfLink(String),
    /// Bridges connected in a cycle: frames would loop (no STP runs).
    #[error("bridges form a loop in the segment of {0:?}")]
    BridgeLoop(String),
    /// A host or router with two interfaces on one L2 segment: its routes would be ambiguous.
    #[error("node {node:?} has two interfaces on one L2 segment")]
    TwoPortsOnSegment {
        /// The node.
        node: String,
    },
    /// More L2 segments than the 10.0.0.0/8 addressing has /24s for.
    #[error("more than 65535 L2 segments")]
    TooManySegments,
    /// More addresses than one /24 holds.
    #[error("an L2 segment has {0} hosts and routers; at most 254 fit its /24")]
    SegmentFull(usize),
    /// More ports on one node than the interface names allow.
    #[error("node {node:?} has {ports} ports; at most 100 fit the interface names")]
    TooManyPorts {
        /// The node.
        node: String,
        /// Its port count.
        ports: usize,
    },
}

/// A topology file: `deploy/testbeds/*.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyFile {
    /// Testbed name for `rocev2-testbed up` (namespaces become `rv2-NAME-NODE`): `[a-z][a-z0-9]*`,
    /// at most 8 characters so interface names stay within 15 bytes.
    pub name: String,
    /// The shape.
    pub topology: Topology,
}

impl TopologyFile {
    /// Parse and validate a topology file's text.
    ///
    /// # Errors
    /// [`crate::Error::Toml`] on a syntax or type error; [`crate::Error::Topology`] on a value
    /// out of range or a bad name.
    pub fn parse(text: &str) -> Result<Self, crate::Error> {
        let file: TopologyFile =
            toml::from_str(text).map_err(|e| crate::Error::Toml(e.to_string()))?;
        crate::plan::check_testbed_name(&file.name)?;
        file.topology.network()?;
        Ok(file)
    }
}

/// A testbed shape. In TOML the variant is the `kind` key (`"pair"`, `"star"`, `"dumbbell"`,
/// `"leaf-spine"`) of the `[topology]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Topology {
    /// Two hosts, `h0` and `h1`, on one direct link.
    Pair {
        /// The link.
        #[serde(default)]
        link: LinkParams,
    },
    /// N:1 incast: senders `tx0`…`tx{N-1}` and the receiver `rx`, all on switch `sw`. The
    /// switch's port toward `rx` is where the incast queue builds.
    Star {
        /// Number of senders.
        senders: usize,
        /// A bridge (one L2 segment) or a router (one subnet per host).
        #[serde(default)]
        switch: SwitchKind,
        /// Every host link.
        #[serde(default)]
        link: LinkParams,
    },
    /// Left hosts `a0`… on switch `swa`, right hosts `b0`… on switch `swb`, one link between
    /// the switches.
    Dumbbell {
        /// Hosts on the left.
        left: usize,
        /// Hosts on the right.
        right: usize,
        /// Bridges (one L2 segment) or routers (one subnet per link).
        #[serde(default)]
        switch: SwitchKind,
        /// Every host link.
        #[serde(default)]
        link: LinkParams,
        /// The switch-to-switch link; the host link's parameters when absent.
        #[serde(default)]
        bottleneck: Option<LinkParams>,
    },
    /// L leaves, S spines, H hosts per leaf; every leaf has one link to every spine, and each
    /// leaf routes toward the other leaves over all spines (ECMP hashed on the UDP/TCP ports).
    LeafSpine {
        /// Leaves `l0`….
        leaves: usize,
        /// Spines `s0`….
        spines: usize,
        /// Hosts `l{leaf}h{i}` per leaf.
        hosts_per_leaf: usize,
        /// Every host-to-leaf link.
        #[serde(default)]
        link: LinkParams,
        /// Every leaf-to-spine link; the host link's parameters when absent.
        #[serde(default)]
        fabric: Option<LinkParams>,
    },
}

/// How a switch node forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SwitchKind {
    /// A Linux bridge in its own namespace: all its hosts share one L2 segment and subnet.
    #[default]
    Bridge,
    /// A namespace that routes (IPv4 and IPv6 forwarding on): each port is its own subnet.
    Router,
}

/// A node's part in the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// An end host: addresses, routes toward its switches, no forwarding.
    Host,
    /// An L2 switch (Linux bridge); its ports have no addresses.
    Bridge,
    /// An L3 switch: forwarding on, static routes with ECMP over equal-cost next hops.
    Router,
}

impl Role {
    /// Whether a switch program may sit on this node's ports (bridges and routers).
    pub fn is_switch(self) -> bool {
        matches!(self, Role::Bridge | Role::Router)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Host => "host",
            Role::Bridge => "bridge",
            Role::Router => "router",
        })
    }
}

impl From<SwitchKind> for Role {
    fn from(kind: SwitchKind) -> Self {
        match kind {
            SwitchKind::Bridge => Role::Bridge,
            SwitchKind::Router => Role::Router,
        }
    }
}

/// Which qdisc enforces a port's rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shaper {
    /// `htb` root with one class and a `bfifo` child of `buffer_bytes`: a class tree that later
    /// work can hang more classes or filters on.
    #[default]
    Htb,
    /// A single `tbf` whose `limit` is `buffer_bytes`: the simplest shaper.
    Tbf,
}

/// A link's parameters as a topology file gives them; the rate and buffer apply to the egress
/// of both ends, as a physical link of that speed would.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkParams {
    /// MTU of both veth ends, in bytes (IP MTU, Ethernet header excluded).
    #[serde(default = "default_mtu")]
    pub mtu: u32,
    /// Egress rate of each end, in bit/s of Ethernet frames (headers included, as tc counts);
    /// no shaping when absent.
    #[serde(default)]
    pub rate_bps: Option<u64>,
    /// Egress queue of each end, in bytes; [`DEFAULT_BUFFER_BYTES`] when a rate is set without it.
    #[serde(default)]
    pub buffer_bytes: Option<u64>,
    /// The qdisc that shapes.
    #[serde(default)]
    pub shaper: Shaper,
    /// Transmit and receive queues of each veth end (`numtxqueues`/`numrxqueues`): one AF_XDP
    /// engine shard per queue (`write_bw -q N`); 1 by default.
    #[serde(default = "one_queue")]
    pub queues: u32,
}

fn default_mtu() -> u32 {
    DEFAULT_MTU
}

pub(crate) fn one_queue() -> u32 {
    1
}

impl Default for LinkParams {
    fn default() -> Self {
        LinkParams {
            mtu: DEFAULT_MTU,
            rate_bps: None,
            buffer_bytes: None,
            shaper: Shaper::Htb,
            queues: 1,
        }
    }
}

impl LinkParams {
    /// Unshaped link with the default MTU.
    pub fn new() -> Self {
        Self::default()
    }

    /// Set the MTU.
    pub fn mtu(mut self, mtu: u32) -> Self {
        self.mtu = mtu;
        self
    }

    /// Shape both ends to `rate_bps` with a `buffer_bytes` egress queue.
    pub fn rate(mut self, rate_bps: u64, buffer_bytes: u64) -> Self {
        self.rate_bps = Some(rate_bps);
        self.buffer_bytes = Some(buffer_bytes);
        self
    }

    /// Choose the shaping qdisc.
    pub fn shaper(mut self, shaper: Shaper) -> Self {
        self.shaper = shaper;
        self
    }

    /// Give each veth end `queues` transmit and receive queues.
    pub fn queues(mut self, queues: u32) -> Self {
        self.queues = queues;
        self
    }

    /// The egress shaping these parameters ask for, checked; `key` names the TOML table.
    fn shaping(&self, key: &str) -> Result<Option<Shaping>, Error> {
        in_range(&format!("{key}.mtu"), u64::from(self.mtu), MTU_RANGE)?;
        in_range(
            &format!("{key}.queues"),
            u64::from(self.queues),
            QUEUES_RANGE,
        )?;
        let Some(rate_bps) = self.rate_bps else {
            return match self.buffer_bytes {
                Some(_) => Err(Error::Needs {
                    key: format!("{key}.buffer_bytes"),
                    needs: format!("{key}.rate_bps"),
                }),
                None => Ok(None),
            };
        };
        in_range(&format!("{key}.rate_bps"), rate_bps, RATE_RANGE)?;
        let buffer_bytes = self.buffer_bytes.unwrap_or(DEFAULT_BUFFER_BYTES);
        let frame = u64::from(self.mtu) + crate::link::ETHERNET_HEADER_BYTES;
        in_range(
            &format!("{key}.buffer_bytes"),
            buffer_bytes,
            (frame, BUFFER_MAX),
        )?;
        Ok(Some(Shaping {
            rate_bps,
            buffer_bytes,
            shaper: self.shaper,
        }))
    }
}

/// Egress shaping of one port, as tc applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shaping {
    /// Rate in bit/s of Ethernet frames.
    pub rate_bps: u64,
    /// Queue limit in bytes; arrivals beyond it are dropped (tail drop).
    pub buffer_bytes: u64,
    /// The qdisc.
    pub shaper: Shaper,
}

/// A node of the generic graph: one network namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// Name, `[a-z][a-z0-9]*`, at most [`crate::plan::NODE_NAME_MAX`] characters.
    pub name: String,
    /// Host, bridge or router.
    pub role: Role,
}

/// A link of the generic graph: one veth pair, `ends[0]` in one node, `ends[1]` in the other.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// The two nodes' names.
    pub ends: [String; 2],
    /// MTU of both veth ends.
    pub mtu: u32,
    /// Transmit and receive queues of each end.
    #[serde(default = "one_queue")]
    pub queues: u32,
    /// Egress shaping at `ends[0]` (toward `ends[1]`) and at `ends[1]`.
    pub egress: [Option<Shaping>; 2],
}

/// The generic graph every shape expands to. Ports are numbered per node in link order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Network {
    /// Nodes, in namespace creation order.
    pub nodes: Vec<Node>,
    /// Links, in creation order (which also numbers the L2 segments and so the subnets).
    pub links: Vec<Link>,
}

impl Network {
    /// An empty network.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a node.
    pub fn node(&mut self, name: impl Into<String>, role: Role) -> &mut Self {
        self.nodes.push(Node {
            name: name.into(),
            role,
        });
        self
    }

    /// Add a link with `params` applied to both ends.
    ///
    /// # Errors
    /// [`Error::OutOfRange`]/[`Error::Needs`] when `params` are invalid.
    pub fn link(&mut self, a: &str, b: &str, params: &LinkParams) -> Result<&mut Self, Error> {
        let shaping = params.shaping("link")?;
        self.links.push(Link {
            ends: [a.to_owned(), b.to_owned()],
            mtu: params.mtu,
            queues: params.queues,
            egress: [shaping, shaping],
        });
        Ok(self)
    }

    /// Set (or with `None` remove) the egress shaping of `node`'s port toward `peer`, on every
    /// link between them. This is how a test makes one switch port the bottleneck.
    ///
    /// # Errors
    /// [`Error::UnknownNode`] when no link joins `node` and `peer`.
    pub fn shape_port(
        &mut self,
        node: &str,
        peer: &str,
        shaping: Option<Shaping>,
    ) -> Result<&mut Self, Error> {
        let mut found = false;
        for link in &mut self.links {
            for side in 0..2 {
                if link.ends[side] == node && link.ends[1 - side] == peer {
                    link.egress[side] = shaping;
                    found = true;
                }
            }
        }
        if found {
            Ok(self)
        } else {
            Err(Error::UnknownNode(format!("{node}->{peer}")))
        }
    }
}

fn in_range(key: &str, value: u64, (min, max): (u64, u64)) -> Result<(), Error> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(Error::OutOfRange {
            key: key.to_owned(),
            value,
            min,
            max,
        })
    }
}

fn count(key: &str, value: usize) -> Result<usize, Error> {
    in_range(key, value as u64, COUNT_RANGE)?;
    Ok(value)
}

impl Topology {
    /// Expand the shape into its generic graph, checking every parameter.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] (naming the `topology.*` key) or [`Error::Needs`].
    pub fn network(&self) -> Result<Network, Error> {
        let mut net = Network::new();
        let key = "topology.link";
        match self {
            Topology::Pair { link } => {
                net.node("h0", Role::Host).node("h1", Role::Host);
                push_link(&mut net, "h0", "h1", link, key)?;
            }
            Topology::Star {
                senders,
                switch,
                link,
            } => {
                let senders = count("topology.senders", *senders)?;
                net.node("sw", (*switch).into());
                for i in 0..senders {
                    net.node(format!("tx{i}"), Role::Host);
                }
                net.node("rx", Role::Host);
                for i in 0..senders {
                    push_link(&mut net, &format!("tx{i}"), "sw", link, key)?;
                }
                push_link(&mut net, "rx", "sw", link, key)?;
            }
            Topology::Dumbbell {
                left,
                right,
                switch,
                link,
                bottleneck,
            } => {
                let left = count("topology.left", *left)?;
                let right = count("topology.right", *right)?;
                net.node("swa", (*switch).into())
                    .node("swb", (*switch).into());
                for i in 0..left {
                    net.node(format!("a{i}"), Role::Host);
                }
                for i in 0..right {
                    net.node(format!("b{i}"), Role::Host);
                }
                for i in 0..left {
                    push_link(&mut net, &format!("a{i}"), "swa", link, key)?;
                }
                for i in 0..right {
                    push_link(&mut net, &format!("b{i}"), "swb", link, key)?;
                }
                let (params, key) = match bottleneck {
                    Some(b) => (b, "topology.bottleneck"),
                    None => (link, key),
                };
                push_link(&mut net, "swa", "swb", params, key)?;
            }
            Topology::LeafSpine {
                leaves,
                spines,
                hosts_per_leaf,
                link,
                fabric,
            } => {
                let leaves = count("topology.leaves", *leaves)?;
                let spines = count("topology.spines", *spines)?;
                let hosts = count("topology.hosts_per_leaf", *hosts_per_leaf)?;
                for s in 0..spines {
                    net.node(format!("s{s}"), Role::Router);
                }
                for l in 0..leaves {
                    net.node(format!("l{l}"), Role::Router);
                }
                for l in 0..leaves {
                    for h in 0..hosts {
                        net.node(format!("l{l}h{h}"), Role::Host);
                    }
                }
                // Host links first, so host subnets are 10.0.0.0/24, 10.0.1.0/24, … in order.
                for l in 0..leaves {
                    for h in 0..hosts {
                        push_link(&mut net, &format!("l{l}h{h}"), &format!("l{l}"), link, key)?;
                    }
                }
                let (params, key) = match fabric {
                    Some(f) => (f, "topology.fabric"),
                    None => (link, key),
                };
                for l in 0..leaves {
                    for s in 0..spines {
                        push_link(&mut net, &format!("l{l}"), &format!("s{s}"), params, key)?;
                    }
                }
            }
        }
        Ok(net)
    }
}

fn push_link(
    net: &mut Network,
    a: &str,
    b: &str,
    params: &LinkParams,
    key: &str,
) -> Result<(), Error> {
    let shaping = params.shaping(key)?;
    net.links.push(Link {
        ends: [a.to_owned(), b.to_owned()],
        mtu: params.mtu,
        queues: params.queues,
        egress: [shaping, shaping],
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaf_spine_counts_nodes_and_links() {
        let t = Topology::LeafSpine {
            leaves: 4,
            spines: 2,
            hosts_per_leaf: 2,
            link: LinkParams::default(),
            fabric: None,
        };
        let net = t.network().unwrap();
        assert_eq!(net.nodes.len(), 2 + 4 + 8);
        assert_eq!(net.links.len(), 8 + 8);
        assert_eq!(net.links[0].ends, ["l0h0".to_owned(), "l0".to_owned()]);
        assert_eq!(net.links[8].ends, ["l0".to_owned(), "s0".to_owned()]);
    }

    #[test]
    fn toml_star_parses_with_defaults() {
        let f = TopologyFile::parse(
            "name = \"inc\"\n[topology]\nkind = \"star\"\nsenders = 3\n\
             [topology.link]\nrate_bps = 100_000_000\n",
        )
        .unwrap();
        let Topology::Star {
            senders,
            switch,
            link,
        } = f.topology
        else {
            panic!("not a star: {:?}", f.topology)
        };
        assert_eq!(
            (senders, switch, link.mtu),
            (3, SwitchKind::Bridge, DEFAULT_MTU)
        );
        assert_eq!(link.rate_bps, Some(100_000_000));
    }

    #[test]
    fn toml_unknown_key_rejected() {
        let e = TopologyFile::parse("name = \"p\"\n[topology]\nkind = \"pair\"\nspeed = 3\n");
        assert!(matches!(e, Err(crate::Error::Toml(m)) if m.contains("speed")));
    }

    #[test]
    fn mtu_out_of_range_names_key() {
        let t = Topology::Pair {
            link: LinkParams::new().mtu(70000),
        };
        match t.network() {
            Err(Error::OutOfRange { key, max, .. }) => {
                assert_eq!(key, "topology.link.mtu");
                assert_eq!(max, 9216);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn buffer_without_rate_rejected() {
        let link = LinkParams {
            buffer_bytes: Some(10_000),
            ..LinkParams::default()
        };
        let t = Topology::Pair { link };
        assert!(matches!(t.network(), Err(Error::Needs { .. })));
    }

    #[test]
    fn buffer_smaller_than_a_frame_rejected() {
        let t = Topology::Pair {
            link: LinkParams::new().rate(100_000_000, 1000),
        };
        assert!(matches!(
            t.network(),
            Err(Error::OutOfRange { key, min: 4214, .. }) if key == "topology.link.buffer_bytes"
        ));
    }

    #[test]
    fn shape_port_sets_one_side() {
        let mut net = Topology::Pair {
            link: LinkParams::default(),
        }
        .network()
        .unwrap();
        let s = Shaping {
            rate_bps: 1_000_000,
            buffer_bytes: 10_000,
            shaper: Shaper::Tbf,
        };
        net.shape_port("h1", "h0", Some(s)).unwrap();
        assert_eq!(net.links[0].egress, [None, Some(s)]);
        assert!(net.shape_port("h1", "h7", None).is_err());
    }
}
