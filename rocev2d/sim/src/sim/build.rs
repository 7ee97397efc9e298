//! Building a model from a scenario: ports numbered node by node, routes, switches with their
//! buffer and PFC thresholds, hosts with an endpoint, a CQ and one registered region each, and
//! the workload's flows; the first flow start and sample are scheduled.
//!
//! Source: the scenario format (`scenario.rs`) and the topology builders (`topology.rs`).
//!
//! Deviations: none.

use super::pool::PacketPool;
use super::{Flow, RunStats, Sim};
use crate::dist;
use crate::event::{Event, EventQueue, PortId};
use crate::host::{Host, HostMemory, MR_BASE, host_ip, sender_id};
use crate::link::Port;
use crate::routing::Routes;
use crate::scenario::{LossScope, SamplePorts, Scenario, ScenarioError};
use crate::switch_node::{MarkAt, Switch, SwitchPolicy};
use crate::workload::{self, Capacity};
use rocev2_core::Endpoint;
use rocev2_core::mr::{AccessFlags, NullMemory, VecMemory};
use rocev2_core::qp::Mtu;
use rocev2_core::time::Rate;
use std::collections::HashMap;

impl Sim {
    /// Builds the network and the workload of `scenario`.
    ///
    /// # Errors
    /// Inconsistent topology, workload or host settings, naming the key.
    pub fn new(scenario: &Scenario) -> Result<Sim, ScenarioError> {
        let topo = scenario.topology.build()?;
        let hs = scenario.host;
        let mtu = Mtu::from_bytes(hs.mtu).ok_or(ScenarioError::Invalid {
            key: "host.mtu",
            why: "must be 256, 512, 1024, 2048 or 4096".into(),
        })?;
        if hs.wr_bytes == 0 || hs.wr_depth == 0 || hs.wr_depth > 256 {
            return Err(ScenarioError::Invalid {
                key: "host.wr_bytes / host.wr_depth",
                why: "wr_bytes >= 1 and wr_depth in 1..=256".into(),
            });
        }
        if let Some((key, why)) = hs.check_rates() {
            return Err(ScenarioError::Invalid {
                key,
                why: why.into(),
            });
        }
        if hs.iofd.is_some_and(|t| !(1..=63).contains(&t.tokens)) {
            return Err(ScenarioError::Invalid {
                key: "host.iofd.tokens",
                why: "must be in 1..=63 (six bits)".into(),
            });
        }
        let host_rate = topo
            .links
            .iter()
            .find(|l| l.0 < topo.hosts)
            .map_or(Rate::from_gbps(10), |l| l.2.rate);
        let cap = Capacity {
            hosts: topo.hosts,
            host_bps: host_rate.as_bps() as f64,
            oversubscription: topo.oversubscription,
        };
        let specs =
            workload::generate(&scenario.workload, cap, scenario.duration_ns, scenario.seed)?;
        if hs.verify_mr_bytes > 0
            && let Some(f) = specs.iter().find(|f| f.size > hs.verify_mr_bytes as u64)
        {
            return Err(ScenarioError::Invalid {
                key: "host.verify_mr_bytes",
                why: format!("a flow of {} bytes does not fit; raise it", f.size),
            });
        }

        // Ports, numbered node by node (hosts first, one port each: host h's port is h).
        let n = topo.nodes.len();
        let mut degree = vec![0u32; n];
        for &(a, b, _) in &topo.links {
            degree[a as usize] += 1;
            degree[b as usize] += 1;
        }
        let mut first = vec![0u32; n + 1];
        for i in 0..n {
            first[i + 1] = first[i] + degree[i];
        }
        let mut fill = first.clone();
        let mut ports: Vec<Option<Port>> = vec![None; first[n] as usize];
        let mut adj: Vec<Vec<(PortId, u32)>> = vec![Vec::new(); n];
        for &(a, b, l) in &topo.links {
            let pa = fill[a as usize];
            let pb = fill[b as usize];
            fill[a as usize] += 1;
            fill[b as usize] += 1;
            ports[pa as usize] = Some(Port::new(a, pb, l));
            ports[pb as usize] = Some(Port::new(b, pa, l));
            adj[a as usize].push((pa, b));
            adj[b as usize].push((pb, a));
        }
        let mut ports: Vec<Port> = ports.into_iter().flatten().collect();
        if let Some((h, d)) = degree[..topo.hosts as usize]
            .iter()
            .enumerate()
            .find(|(_, d)| **d != 1)
        {
            return Err(ScenarioError::Invalid {
                key: "topology",
                why: format!("host {h} has {d} links; hosts need exactly one"),
            });
        }
        if let Some(f) = &scenario.faults {
            if !(0.0..1.0).contains(&f.loss) {
                return Err(ScenarioError::Invalid {
                    key: "faults.loss",
                    why: "must be in [0, 1)".into(),
                });
            }
            let q32 = (f.loss * 4_294_967_296.0) as u64;
            for i in 0..ports.len() {
                let peer_node = ports[ports[i].peer as usize].node;
                let fabric = ports[i].node >= topo.hosts && peer_node >= topo.hosts;
                if f.scope == LossScope::All || fabric {
                    ports[i].loss_q32 = q32;
                }
            }
        }
        for lf in scenario.faults.iter().flat_map(|f| &f.links) {
            let port = adj
                .get(lf.from as usize)
                .and_then(|a| a.iter().find(|&&(_, peer)| peer == lf.to))
                .map(|&(p, _)| ports[p as usize].peer)
                .ok_or_else(|| ScenarioError::Invalid {
                    key: "faults.links",
                    why: format!("nodes {} and {} are not neighbours", lf.from, lf.to),
                })?;
            if lf.drop_ip_id_mod == 0 {
                return Err(ScenarioError::Invalid {
                    key: "faults.links.drop_ip_id_mod",
                    why: "must be at least 1".into(),
                });
            }
            ports[port as usize].drop_ip_id_mod = lf.drop_ip_id_mod;
        }
        let routes = Routes::build(topo.hosts, &adj).ok_or_else(|| ScenarioError::Invalid {
            key: "topology",
            why: format!(
                "at most {} distinct ECMP next-hop sets (the route table's u16 ids)",
                crate::routing::MAX_SETS
            ),
        })?;

        let sw = scenario.switch;
        for pt in ports.iter_mut().filter(|p| p.node >= topo.hosts) {
            pt.iofd = sw.iofd.map(|c| Box::new((c.config(), Default::default())));
            pt.dvl = sw.dvl.map(|c| Box::new((c.config(), Default::default())));
        }
        let policy = match sw.red {
            Some(r) => SwitchPolicy::RedEcn(r.config()),
            None => SwitchPolicy::Forward,
        };
        let mut switches = Vec::new();
        for node in topo.hosts..n as u32 {
            let nports = degree[node as usize];
            let xoff = sw
                .pfc
                .xoff_bytes
                .unwrap_or(sw.buffer_bytes / (2 * nports.max(1) as u64));
            switches.push(Switch {
                node,
                first_port: first[node as usize],
                ports: nports,
                salt: dist::mix64(scenario.seed ^ (node as u64) << 20),
                policy,
                mark_at: sw.red.map_or(MarkAt::Enqueue, |r| r.mark_at),
                buffer_bytes: sw.buffer_bytes,
                buffer_used: 0,
                pfc: sw.pfc.enabled,
                xoff,
                xon: sw.pfc.xon_bytes.unwrap_or(xoff / 2),
                stats: Default::default(),
            });
        }

        let mut hosts = Vec::with_capacity(topo.hosts as usize);
        for h in 0..topo.hosts {
            let mut ep = Endpoint::new(dist::mix64(scenario.seed ^ 0xe9 ^ (h as u64) << 24));
            ep.set_receiver_cc(hs.receiver_cc(host_line_rate(&ports, h)));
            let pd = ep.alloc_pd();
            let cq = ep.create_cq(1 << 16);
            let (len, mem) = if hs.verify_mr_bytes > 0 {
                (hs.verify_mr_bytes as u64, HostMemory::Vec(VecMemory::new()))
            } else {
                (1 << 40, HostMemory::Null(NullMemory))
            };
            let access =
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
            let mr =
                ep.register_mr(pd, MR_BASE, len, access)
                    .map_err(|e| ScenarioError::Invalid {
                        key: "host",
                        why: format!("memory registration failed: {e}"),
                    })?;
            let mut mem = mem;
            if let HostMemory::Vec(v) = &mut mem {
                // A pattern unique to the host and offset, so misplaced bytes are detected.
                let bytes = (0..len)
                    .map(|i| (dist::mix64((h as u64) << 40 | i) & 0xff) as u8)
                    .collect();
                v.insert(mr.id, bytes);
            }
            hosts.push(Host {
                ep,
                mem,
                pd,
                cq,
                mr,
                ip: host_ip(h),
                wake_at: u64::MAX,
                ip_id: 0,
            });
        }

        let groups = workload::incast_groups(&specs)
            .into_iter()
            .map(|g| g.into_iter().map(sender_id).collect())
            .collect();
        let flows = specs
            .into_iter()
            .enumerate()
            .map(|(i, spec)| {
                let sport = 49152 + (dist::mix64(scenario.seed ^ (i as u64) << 8) % 16384) as u16;
                Flow::new(spec, sport)
            })
            .collect();

        let sampled = match scenario.output.sample_ports {
            SamplePorts::None => Vec::new(),
            SamplePorts::All => (0..ports.len() as u32).collect(),
            SamplePorts::Switch => (0..ports.len() as u32)
                .filter(|&p| ports[p as usize].node >= topo.hosts)
                .collect(),
        };

        let mut sim = Sim {
            scenario: scenario.clone(),
            topo,
            now: 0,
            q: EventQueue::new(),
            ports,
            hosts,
            switches,
            routes,
            pkts: PacketPool::default(),
            flows,
            groups,
            qp_flow: HashMap::new(),
            rng_policy: dist::rng(scenario.seed, 1),
            rng_loss: dist::rng(scenario.seed, 2),
            rng_iofd: dist::rng(scenario.seed, 3),
            wcs: Vec::new(),
            stats: RunStats::default(),
            sampled,
            samples: Vec::new(),
            rates: Vec::new(),
            mark_log: None,
            mtu,
        };
        if let Some(f) = sim.flows.first() {
            sim.q.push(f.spec.start_ns, Event::FlowStart { flow: 0 });
        }
        if scenario.output.sample_interval_ns > 0 && !sim.sampled.is_empty() {
            sim.q.push(0, Event::Sample);
        }
        Ok(sim)
    }
}

/// The line rate of host `h`'s NIC: the rate of its one port's link, port `h` (an index, not a
/// search: flow set-up calls this twice per flow).
pub(super) fn host_line_rate(ports: &[Port], h: u32) -> rocev2_core::time::Rate {
    ports[h as usize].link.rate
}
