//! Topologies: which nodes exist and which full-duplex links join them.
//!
//! Hosts are nodes `0..hosts`, switches follow. Every link is full duplex with one rate and one
//! propagation delay in both directions. Four families are built:
//!
//! * **star**: N hosts on one switch, for N:1 incast;
//! * **dumbbell**: two switches joined by a bottleneck link, hosts on both sides;
//! * **leaf-spine**: L leaves × S spines, H hosts per leaf, every leaf joined to every spine;
//!   the leaf uplink rate gives the oversubscription `H·host_rate / (S·uplink_rate)`;
//! * **3-tier Clos** (k-ary fat-tree and its oversubscribed variants): P pods of E edge and A
//!   aggregation switches, H hosts per edge switch, every edge joined to every aggregation switch
//!   of its pod, aggregation switch `j` of every pod joined to core group `j` of C cores. A
//!   k-ary fat-tree is P = k, E = A = H = C = k/2 (k³/4 hosts: 1024 at k = 16). Seed 000 §VI-A
//!   simulates 1024 hosts in a Clos oversubscribed 4:1; `deploy/scenarios/dart_clos_1024.toml`
//!   builds it as 16 pods × 4 edges × 16 hosts with 4 aggregation and 16 core switches.
//!
//! Deviations: links are symmetric and error-free unless a loss rate is configured; there is no
//! link failure model.

use rocev2_core::time::Rate;
use serde::{Deserialize, Serialize};

/// Rate and propagation delay of a link (both directions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkSpec {
    /// Line rate.
    pub rate: Rate,
    /// One-way propagation delay, ns.
    pub delay_ns: u64,
}

/// What a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// An end host with one NIC port.
    Host,
    /// A switch; `tier` 1 = edge/leaf/ToR, 2 = aggregation/spine, 3 = core.
    Switch {
        /// Tier, from the hosts up.
        tier: u8,
    },
}

/// A built topology.
#[derive(Debug, Clone)]
pub struct Topology {
    /// Short description for outputs.
    pub name: String,
    /// Number of hosts (nodes `0..hosts`).
    pub hosts: u32,
    /// Every node, hosts first.
    pub nodes: Vec<NodeKind>,
    /// Full-duplex links `(a, b, spec)`; ports are numbered per node in this order.
    pub links: Vec<(u32, u32, LinkSpec)>,
    /// Ratio of host access capacity to core capacity (1 = full bisection).
    pub oversubscription: f64,
}

fn rate(gbps: f64) -> Rate {
    Rate::from_bps((gbps * 1e9).round() as u64)
}

/// A topology as written in a scenario file (`[topology]`, `kind = "..."`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum TopologySpec {
    /// N hosts on one switch.
    Star {
        /// Hosts.
        hosts: u32,
        /// Host link rate, Gbit/s.
        rate_gbps: f64,
        /// Propagation delay per link, ns.
        delay_ns: u64,
    },
    /// `left` hosts – switch – bottleneck – switch – `right` hosts.
    Dumbbell {
        /// Hosts on the left switch (numbered first).
        left: u32,
        /// Hosts on the right switch.
        right: u32,
        /// Host link rate, Gbit/s.
        rate_gbps: f64,
        /// Bottleneck rate, Gbit/s.
        bottleneck_gbps: f64,
        /// Propagation delay per link, ns.
        delay_ns: u64,
    },
    /// Two-tier leaf-spine.
    LeafSpine {
        /// Leaf switches.
        leaves: u32,
        /// Spine switches.
        spines: u32,
        /// Hosts per leaf.
        hosts_per_leaf: u32,
        /// Host link rate, Gbit/s.
        rate_gbps: f64,
        /// Leaf–spine link rate, Gbit/s; default: full bisection divided by `oversubscription`.
        #[serde(default)]
        uplink_gbps: Option<f64>,
        /// Oversubscription at the leaves when `uplink_gbps` is not given (default 1).
        #[serde(default)]
        oversubscription: Option<f64>,
        /// Propagation delay per link, ns.
        delay_ns: u64,
    },
    /// Three-tier Clos; `k` alone builds the k-ary fat-tree.
    Clos {
        /// Fat-tree arity: sets every count below that is not given (k pods, k/2 of the rest).
        #[serde(default)]
        k: Option<u32>,
        /// Pods.
        #[serde(default)]
        pods: Option<u32>,
        /// Edge (ToR) switches per pod.
        #[serde(default)]
        edges_per_pod: Option<u32>,
        /// Aggregation switches per pod.
        #[serde(default)]
        aggs_per_pod: Option<u32>,
        /// Hosts per edge switch.
        #[serde(default)]
        hosts_per_edge: Option<u32>,
        /// Core switches per aggregation switch (core group size).
        #[serde(default)]
        cores_per_agg: Option<u32>,
        /// Host link rate, Gbit/s.
        rate_gbps: f64,
        /// Edge–aggregation and aggregation–core rate, Gbit/s (default: host rate).
        #[serde(default)]
        fabric_gbps: Option<f64>,
        /// Propagation delay per link, ns.
        delay_ns: u64,
    },
}

/// A scenario's topology is inconsistent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("topology.{key}: {why}")]
pub struct TopologyError {
    /// The TOML key at fault.
    pub key: &'static str,
    /// What is wrong.
    pub why: String,
}

fn positive(key: &'static str, v: u32) -> Result<u32, TopologyError> {
    if v == 0 {
        Err(TopologyError {
            key,
            why: "must be at least 1".into(),
        })
    } else {
        Ok(v)
    }
}

impl TopologySpec {
    /// Builds the topology.
    ///
    /// # Errors
    /// A count of zero, a non-positive rate, or a Clos without enough counts.
    pub fn build(&self) -> Result<Topology, TopologyError> {
        let mut b = Builder::default();
        let check_rate = |key, g: f64| {
            if g > 0.0 && g.is_finite() {
                Ok(g)
            } else {
                Err(TopologyError {
                    key,
                    why: format!("{g} is not a positive rate"),
                })
            }
        };
        match *self {
            TopologySpec::Star {
                hosts,
                rate_gbps,
                delay_ns,
            } => {
                let n = positive("hosts", hosts)?;
                let l = LinkSpec {
                    rate: rate(check_rate("rate_gbps", rate_gbps)?),
                    delay_ns,
                };
                b.hosts(n);
                let sw = b.switch(1);
                for h in 0..n {
                    b.link(h, sw, l);
                }
                Ok(b.finish(format!("star{n}"), 1.0))
            }
            TopologySpec::Dumbbell {
                left,
                right,
                rate_gbps,
                bottleneck_gbps,
                delay_ns,
            } => {
                let (l, r) = (positive("left", left)?, positive("right", right)?);
                let host = LinkSpec {
                    rate: rate(check_rate("rate_gbps", rate_gbps)?),
                    delay_ns,
                };
                let neck = LinkSpec {
                    rate: rate(check_rate("bottleneck_gbps", bottleneck_gbps)?),
                    delay_ns,
                };
                b.hosts(l + r);
                let (sl, sr) = (b.switch(1), b.switch(1));
                for h in 0..l {
                    b.link(h, sl, host);
                }
                for h in l..l + r {
                    b.link(h, sr, host);
                }
                b.link(sl, sr, neck);
                let over = (l.min(r) as f64 * rate_gbps) / bottleneck_gbps;
                Ok(b.finish(format!("dumbbell{l}x{r}"), over.max(1.0)))
            }
            TopologySpec::LeafSpine {
                leaves,
                spines,
                hosts_per_leaf,
                rate_gbps,
                uplink_gbps,
                oversubscription,
                delay_ns,
            } => {
                let (nl, ns, hpl) = (
                    positive("leaves", leaves)?,
                    positive("spines", spines)?,
                    positive("hosts_per_leaf", hosts_per_leaf)?,
                );
                let host_rate = check_rate("rate_gbps", rate_gbps)?;
                let up = match (uplink_gbps, oversubscription) {
                    (Some(u), _) => check_rate("uplink_gbps", u)?,
                    (None, o) => {
                        let o = check_rate("oversubscription", o.unwrap_or(1.0))?;
                        hpl as f64 * host_rate / (ns as f64 * o)
                    }
                };
                let host = LinkSpec {
                    rate: rate(host_rate),
                    delay_ns,
                };
                let fabric = LinkSpec {
                    rate: rate(up),
                    delay_ns,
                };
                b.hosts(nl * hpl);
                let leaf0 = b.switches(nl, 1);
                let spine0 = b.switches(ns, 2);
                for l in 0..nl {
                    for h in 0..hpl {
                        b.link(l * hpl + h, leaf0 + l, host);
                    }
                }
                for l in 0..nl {
                    for s in 0..ns {
                        b.link(leaf0 + l, spine0 + s, fabric);
                    }
                }
                let over = hpl as f64 * host_rate / (ns as f64 * up);
                Ok(b.finish(format!("leafspine{nl}x{ns}x{hpl}"), over.max(1.0)))
            }
            TopologySpec::Clos {
                k,
                pods,
                edges_per_pod,
                aggs_per_pod,
                hosts_per_edge,
                cores_per_agg,
                rate_gbps,
                fabric_gbps,
                delay_ns,
            } => {
                let half = k.map(|k| k / 2);
                let need = |key: &'static str, v: Option<u32>, dflt: Option<u32>| {
                    v.or(dflt).ok_or_else(|| TopologyError {
                        key,
                        why: "required unless k is given".into(),
                    })
                };
                let p = positive("pods", need("pods", pods, k)?)?;
                let e = positive("edges_per_pod", need("edges_per_pod", edges_per_pod, half)?)?;
                let a = positive("aggs_per_pod", need("aggs_per_pod", aggs_per_pod, half)?)?;
                let h = positive(
                    "hosts_per_edge",
                    need("hosts_per_edge", hosts_per_edge, half)?,
                )?;
                let c = positive("cores_per_agg", need("cores_per_agg", cores_per_agg, half)?)?;
                let host_rate = check_rate("rate_gbps", rate_gbps)?;
                let fab = check_rate("fabric_gbps", fabric_gbps.unwrap_or(host_rate))?;
                let host = LinkSpec {
                    rate: rate(host_rate),
                    delay_ns,
                };
                let fabric = LinkSpec {
                    rate: rate(fab),
                    delay_ns,
                };
                b.hosts(p * e * h);
                let edge0 = b.switches(p * e, 1);
                let agg0 = b.switches(p * a, 2);
                let core0 = b.switches(a * c, 3);
                for pod in 0..p {
                    for ed in 0..e {
                        let sw = edge0 + pod * e + ed;
                        for x in 0..h {
                            b.link((pod * e + ed) * h + x, sw, host);
                        }
                    }
                }
                for pod in 0..p {
                    for ed in 0..e {
                        for ag in 0..a {
                            b.link(edge0 + pod * e + ed, agg0 + pod * a + ag, fabric);
                        }
                    }
                }
                for pod in 0..p {
                    for ag in 0..a {
                        for co in 0..c {
                            b.link(agg0 + pod * a + ag, core0 + ag * c + co, fabric);
                        }
                    }
                }
                let edge_over = (h as f64 * host_rate) / (a as f64 * fab);
                let agg_over = (e as f64) / (c as f64);
                Ok(b.finish(
                    format!("clos{p}x{e}x{a}x{h}x{c}"),
                    (edge_over * agg_over).max(1.0),
                ))
            }
        }
    }
}

#[derive(Default)]
struct Builder {
    hosts: u32,
    nodes: Vec<NodeKind>,
    links: Vec<(u32, u32, LinkSpec)>,
}

impl Builder {
    fn hosts(&mut self, n: u32) {
        self.hosts = n;
        self.nodes.extend((0..n).map(|_| NodeKind::Host));
    }
    fn switch(&mut self, tier: u8) -> u32 {
        self.nodes.push(NodeKind::Switch { tier });
        self.nodes.len() as u32 - 1
    }
    fn switches(&mut self, n: u32, tier: u8) -> u32 {
        let first = self.nodes.len() as u32;
        for _ in 0..n {
            self.switch(tier);
        }
        first
    }
    fn link(&mut self, a: u32, b: u32, l: LinkSpec) {
        self.links.push((a, b, l));
    }
    fn finish(self, name: String, oversubscription: f64) -> Topology {
        Topology {
            name,
            hosts: self.hosts,
            nodes: self.nodes,
            links: self.links,
            oversubscription,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fat_tree_k16_has_1024_hosts_and_320_switches() {
        let t = TopologySpec::Clos {
            k: Some(16),
            pods: None,
            edges_per_pod: None,
            aggs_per_pod: None,
            hosts_per_edge: None,
            cores_per_agg: None,
            rate_gbps: 10.0,
            fabric_gbps: None,
            delay_ns: 1000,
        }
        .build()
        .unwrap();
        assert_eq!(t.hosts, 1024);
        // k²/2 edge + k²/2 agg + k²/4 core.
        assert_eq!(t.nodes.len() - 1024, 128 + 128 + 64);
        // Hosts, edge–agg, agg–core: k³/4 links each.
        assert_eq!(t.links.len(), 3 * 1024);
        assert_eq!(t.oversubscription, 1.0);
    }

    #[test]
    fn leaf_spine_oversubscription_sets_uplink_rate() {
        let t = TopologySpec::LeafSpine {
            leaves: 4,
            spines: 2,
            hosts_per_leaf: 8,
            rate_gbps: 10.0,
            uplink_gbps: None,
            oversubscription: Some(2.0),
            delay_ns: 500,
        }
        .build()
        .unwrap();
        assert_eq!(t.hosts, 32);
        let up = t.links.last().unwrap().2;
        assert_eq!(up.rate, Rate::from_gbps(20));
        assert_eq!(t.oversubscription, 2.0);
    }

    #[test]
    fn zero_counts_name_the_key() {
        let e = TopologySpec::Star {
            hosts: 0,
            rate_gbps: 10.0,
            delay_ns: 1,
        }
        .build()
        .unwrap_err();
        assert_eq!(e.key, "hosts");
    }
}
