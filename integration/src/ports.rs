//! Switch ports: where switch programs (the XDP/tc RED-ECN, IOFD, DVL and fault-injection
//! programs of the eBPF switch) attach, and whose counters tests read.
//!
//! A [`PortSelection`] picks ports by switch, by the node at the other end, or by that node's
//! role (host-facing vs fabric ports); [`crate::Testbed::switch_ports`] returns each chosen
//! port as a [`SwitchPort`]: the namespace and interface name an attach call needs. This crate
//! attaches nothing itself: the loader owns its programs' lifetime, and the testbed's teardown
//! removes the interfaces (and with them any attached program) in any case.
//!
//! On a bridge switch the ports are the veths enslaved to the bridge (what an XDP program
//! attaches to); on a router switch, its addressed interfaces.
//!
//! Deviations: none.

use crate::Error;
use crate::link::IfCounters;
use crate::plan::Plan;
use crate::topology::Role;

/// One port of a switch node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchPort {
    /// The switch's node name.
    pub switch: String,
    /// Bridge or router.
    pub role: Role,
    /// The switch's namespace: where to attach.
    pub netns: String,
    /// The port's interface name inside `netns`.
    pub ifname: String,
    /// Port number on the switch (position in link order).
    pub index: usize,
    /// The node at the other end of the link.
    pub peer: String,
    /// That node's role: [`Role::Host`] for an edge port, a switch role for a fabric port.
    pub peer_role: Role,
    /// The port's MTU.
    pub mtu: u32,
}

impl SwitchPort {
    /// Read the port's counters now.
    ///
    /// # Errors
    /// As [`IfCounters::read`].
    pub fn counters(&self) -> Result<IfCounters, Error> {
        IfCounters::read(&self.netns, &self.ifname)
    }
}

/// Which switch ports to pick: every criterion set must hold; none set picks every port of
/// every switch.
///
/// ```
/// use rocev2_testbed::{PortSelection, Role};
/// // The incast bottleneck: switch `sw`'s port toward the receiver.
/// let bottleneck = PortSelection::all().on("sw").toward("rx");
/// // Leaf l0's uplinks, toward any spine.
/// let uplinks = PortSelection::all().on("l0").toward_role(Role::Router);
/// # let _ = (bottleneck, uplinks);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortSelection {
    switch: Option<String>,
    peer: Option<String>,
    peer_role: Option<Role>,
}

impl PortSelection {
    /// Every port of every switch.
    pub fn all() -> Self {
        Self::default()
    }

    /// Only ports of switch `switch`.
    pub fn on(mut self, switch: impl Into<String>) -> Self {
        self.switch = Some(switch.into());
        self
    }

    /// Only ports whose link leads to node `peer`.
    pub fn toward(mut self, peer: impl Into<String>) -> Self {
        self.peer = Some(peer.into());
        self
    }

    /// Only ports whose link leads to a node of `role` (hosts: edge ports; routers or bridges:
    /// fabric ports).
    pub fn toward_role(mut self, role: Role) -> Self {
        self.peer_role = Some(role);
        self
    }

    fn matches(&self, port: &SwitchPort) -> bool {
        self.switch.as_ref().is_none_or(|s| *s == port.switch)
            && self.peer.as_ref().is_none_or(|p| *p == port.peer)
            && self.peer_role.is_none_or(|r| r == port.peer_role)
    }
}

/// The ports of `plan` that `selection` picks, in node then port order.
pub(crate) fn select(plan: &Plan, selection: &PortSelection) -> Vec<SwitchPort> {
    let mut out = Vec::new();
    for node in plan.nodes.iter().filter(|n| n.role.is_switch()) {
        for (index, port) in node.ports.iter().enumerate() {
            let peer_role = plan.node(&port.peer).map_or(Role::Host, |p| p.role);
            let candidate = SwitchPort {
                switch: node.name.clone(),
                role: node.role,
                netns: node.netns.clone(),
                ifname: port.ifname.clone(),
                index,
                peer: port.peer.clone(),
                peer_role,
                mtu: port.mtu,
            };
            if selection.matches(&candidate) {
                out.push(candidate);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Owner;
    use crate::topology::{LinkParams, SwitchKind, Topology};

    fn plan(t: Topology) -> Plan {
        Plan::new(&t.network().unwrap(), Owner::Named("t".into())).unwrap()
    }

    #[test]
    fn incast_bottleneck_is_one_port() {
        let p = plan(Topology::Star {
            senders: 4,
            switch: SwitchKind::Bridge,
            link: LinkParams::default(),
        });
        let ports = select(&p, &PortSelection::all().on("sw").toward("rx"));
        assert_eq!(ports.len(), 1);
        assert_eq!(ports[0].netns, "rv2-t-sw");
        assert_eq!(ports[0].ifname, "rv2tp4");
        assert_eq!(ports[0].role, Role::Bridge);
        assert_eq!(select(&p, &PortSelection::all()).len(), 5);
    }

    #[test]
    fn leaf_uplinks_and_edges() {
        let p = plan(Topology::LeafSpine {
            leaves: 2,
            spines: 3,
            hosts_per_leaf: 2,
            link: LinkParams::default(),
            fabric: None,
        });
        let up = select(&p, &PortSelection::all().on("l1").toward_role(Role::Router));
        let peers: Vec<_> = up.iter().map(|p| p.peer.as_str()).collect();
        assert_eq!(peers, ["s0", "s1", "s2"]);
        let edges = select(&p, &PortSelection::all().toward_role(Role::Host));
        assert_eq!(edges.len(), 4);
        assert!(edges.iter().all(|e| e.switch.starts_with('l')));
        // Every spine port faces a leaf.
        assert_eq!(select(&p, &PortSelection::all().on("s2")).len(), 2);
    }
}
