//! The model: hosts running the real RC engine, links, switches, and the event loop that joins
//! them. See the crate documentation for the picture and `docs/model.md` for what is and is not
//! modelled.
//!
//! This file holds [`Sim`], its event loop (pop the earliest event, dispatch it by kind), the
//! links between nodes (serialise at line rate, deliver after the propagation delay, random
//! loss) and the accessors and knobs tests and experiments use. Each job has a file of its own:
//!
//! * `build.rs`: [`Sim::new`], from a scenario to ports, switches, hosts and flows;
//! * `pool.rs`: the packet store, slots reused so a run allocates frames once;
//! * `switch_path.rs`: a switch's ingress: route, admit to the buffer, RED/ECN, egress queues;
//! * `iofd_dvl.rs`: the IOFD deflection and DVL isolation decisions on that path;
//! * `pfc.rs`: PAUSE and RESUME between neighbours;
//! * `host_path.rs`: the host NIC: pull frames from the engine, classify, send, receive, timers;
//! * `flows.rs`: a workload flow's QP pair: set-up, work requests, completions, teardown;
//! * `accounting.rs`: counters, samples, rate bins and the byte-conservation check.
//!
//! Accounting is at frame bytes (Ethernet frame without FCS) throughout: per flow, bytes sent by
//! host NICs = bytes delivered to hosts + bytes dropped or lost + bytes in the network at the end
//! ([`Sim::conservation`]); per switch, bytes received = sent + dropped + held.
//!
//! Deviations: none beyond those of the parts (`link.rs`, `switch_node.rs`, `host.rs`).

use crate::dist::SimRng;
use crate::event::{Event, EventQueue, PktId, PortId};
use crate::host::{Host, HostMemory, host_ip};
use crate::link::{Port, wire_bytes};
use crate::routing::{Routes, ecmp_pick, five_tuple_hash};
use crate::scenario::Scenario;
use crate::switch_node::{Switch, SwitchPolicy};
use crate::topology::{NodeKind, Topology};
use rand_core::RngCore;
use rocev2_core::cq::WorkCompletion;
use rocev2_core::qp::Mtu;
use rocev2_core::time::Rate;
use rocev2_ebpf_common::dvl::DvlConfig;
use std::collections::HashMap;

mod accounting;
mod build;
mod flows;
mod host_path;
mod iofd_dvl;
mod pfc;
mod pool;
mod switch_path;

pub use accounting::{FlowBalance, PortSample, RateSample, RunStats, SwitchBalance};
pub use flows::Flow;
use pool::PacketPool;
pub use pool::{NO_FLOW, Packet, PacketFrame};

/// The network model.
#[derive(Debug)]
pub struct Sim {
    scenario: Scenario,
    topo: Topology,
    now: u64,
    q: EventQueue,
    ports: Vec<Port>,
    hosts: Vec<Host>,
    switches: Vec<Switch>,
    routes: Routes,
    pkts: PacketPool,
    flows: Vec<Flow>,
    /// Each announced incast group's sender ids ([`crate::workload::incast_groups`]).
    groups: Vec<Vec<u16>>,
    /// (host, QPN on that host) → flow. Looked up, never iterated.
    qp_flow: HashMap<u64, u32>,
    rng_policy: SimRng,
    rng_loss: SimRng,
    rng_iofd: SimRng,
    wcs: Vec<WorkCompletion>,
    stats: RunStats,
    sampled: Vec<PortId>,
    samples: Vec<PortSample>,
    rates: Vec<RateSample>,
    mark_log: Option<Vec<(u64, bool)>>,
    mtu: Mtu,
}

impl Sim {
    /// The scenario this model runs.
    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    /// The built topology.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// Current simulated time, ns.
    pub fn now_ns(&self) -> u64 {
        self.now
    }

    /// Flows (started or not).
    pub fn flows(&self) -> &[Flow] {
        &self.flows
    }

    /// Every port.
    pub fn ports(&self) -> &[Port] {
        &self.ports
    }

    /// Every switch.
    pub fn switches(&self) -> &[Switch] {
        &self.switches
    }

    /// Host `h`.
    pub fn host(&self, h: u32) -> &Host {
        &self.hosts[h as usize]
    }

    /// Run-wide counters.
    pub fn stats(&self) -> RunStats {
        self.stats
    }

    /// Port samples so far.
    pub fn port_samples(&self) -> &[PortSample] {
        &self.samples
    }

    /// Rate samples so far (flushed bins only; [`Sim::finish`] flushes the rest).
    pub fn rate_samples(&self) -> &[RateSample] {
        &self.rates
    }

    /// Starts recording, for every ECT packet a switch offers to its policy, the egress queue
    /// bytes it saw and whether it was marked (for checking the RED curve).
    pub fn record_marks(&mut self) {
        self.mark_log = Some(Vec::new());
    }

    /// The marks recorded since [`Sim::record_marks`].
    pub fn marks(&self) -> &[(u64, bool)] {
        self.mark_log.as_deref().unwrap_or(&[])
    }

    /// Events waiting in the queue.
    pub fn pending_events(&self) -> usize {
        self.q.len()
    }

    /// Runs every event up to and including `until_ns`, then sets the clock there.
    pub fn run_until(&mut self, until_ns: u64) {
        while let Some(t) = self.q.peek_time() {
            if t > until_ns {
                break;
            }
            let Some((t, ev)) = self.q.pop() else { break };
            self.now = t;
            self.dispatch(ev);
        }
        self.now = self.now.max(until_ns);
    }

    /// Runs to the scenario's end, calling `progress(now)` every `every_ns` of simulated time.
    pub fn run_with_progress(&mut self, every_ns: u64, mut progress: impl FnMut(u64)) {
        let end = self.scenario.duration_ns;
        let step = every_ns.max(1);
        let mut t = 0;
        while t < end {
            t = (t + step).min(end);
            self.run_until(t);
            progress(t);
        }
    }

    /// Runs to the scenario's end.
    pub fn run(&mut self) {
        self.run_until(self.scenario.duration_ns);
    }

    /// Flushes rate bins; call once after the last run.
    pub fn finish(&mut self) {
        for f in 0..self.flows.len() {
            self.close_rate_bin(f as u32);
        }
    }

    fn dispatch(&mut self, ev: Event) {
        self.stats.events += 1;
        match ev {
            Event::Arrive { port, pkt } => self.on_arrive(port, pkt),
            Event::TxDone { port } => {
                self.ports[port as usize].txdone_pending = false;
                self.kick(port);
            }
            Event::Pfc { port, prio, pause } => self.on_pfc(port, prio as usize, pause),
            Event::HostWake { host } => self.on_wake(host),
            Event::FlowStart { flow } => self.on_flow_start(flow),
            Event::Sample => self.on_sample(),
            Event::DvlNotify {
                port,
                src,
                dst,
                sport,
            } => self.on_dvl_notify(port, src, dst, sport),
        }
    }

    pub(super) fn kick(&mut self, port: PortId) {
        let node = self.ports[port as usize].node;
        if node < self.topo.hosts {
            self.host_kick(node);
        } else {
            self.switch_start(port);
        }
    }

    /// Starts serialising `pkt` of `len` frame bytes on `port`; schedules its `TxDone` when
    /// `txdone` (hosts, or a switch port with more packets waiting).
    pub(super) fn transmit(&mut self, port: PortId, pkt: PktId, len: u32, txdone: bool) {
        let now = self.now;
        let pt = &mut self.ports[port as usize];
        pt.stats.tx_packets += 1;
        pt.stats.tx_bytes += len as u64;
        let ser = pt
            .link
            .rate
            .transmit_time(wire_bytes(len) as u64)
            .as_nanos();
        let (peer, delay) = (pt.peer, pt.link.delay_ns);
        pt.busy_until = now + ser;
        if txdone {
            pt.txdone_pending = true;
            self.q.push(now + ser, Event::TxDone { port });
        }
        self.q
            .push(now + ser + delay, Event::Arrive { port: peer, pkt });
    }

    fn on_arrive(&mut self, port: PortId, pkt: PktId) {
        self.stats.packet_hops += 1;
        let pt = &mut self.ports[port as usize];
        if (pt.loss_q32 > 0 && (self.rng_loss.next_u32() as u64) < pt.loss_q32)
            || (pt.drop_ip_id_mod > 0
                && self.pkts.frame(pkt).ip_id.is_multiple_of(pt.drop_ip_id_mod))
        {
            pt.stats.lost += 1;
            self.drop_pkt(pkt);
            return;
        }
        let len = self.pkts[pkt].len as u64;
        pt.stats.rx_packets += 1;
        pt.stats.rx_bytes += len;
        let node = pt.node;
        if node < self.topo.hosts {
            self.host_receive(node, pkt);
        } else {
            self.switch_receive(node - self.topo.hosts, port, pkt);
        }
    }

    /// The ports at both ends of the link between nodes `a` and `b`: `(a's egress, b's
    /// egress)`, if they are neighbours.
    pub fn link_ports(&self, a: u32, b: u32) -> Option<(PortId, PortId)> {
        let pa = self
            .ports
            .iter()
            .position(|p| p.node == a && self.ports[p.peer as usize].node == b)?;
        Some((pa as PortId, self.ports[pa].peer))
    }

    /// Gives switch egress `port` its own policy (e.g. its own RED curve, seed 001 Fig. 5).
    pub fn set_port_policy(&mut self, port: PortId, policy: SwitchPolicy) {
        if let Some(pt) = self.ports.get_mut(port as usize) {
            pt.policy = Some(policy);
        }
    }

    /// Gives switch egress `port` its own DVL settings (`None`: no isolation there), keeping its
    /// table (e.g. a threshold above the buffer, so only notifications isolate).
    pub fn set_port_dvl(&mut self, port: PortId, cfg: Option<DvlConfig>) {
        if let Some(pt) = self.ports.get_mut(port as usize)
            && pt.node >= self.topo.hosts
        {
            let cft = pt.dvl.as_deref().map(|&(_, t)| t).unwrap_or_default();
            pt.dvl = cfg.map(|c| Box::new((c, cft)));
        }
    }

    /// The egress port ECMP gives `flow`'s data packets at switch node `node` (before any
    /// deflection), if the switch routes toward its receiver.
    pub fn route(&self, node: u32, flow: u32) -> Option<PortId> {
        let f = self.flows.get(flow as usize)?;
        let sw = self
            .switches
            .get(node.checked_sub(self.topo.hosts)? as usize)?;
        let (s, d) = (f.spec.src, f.spec.dst);
        let hash = five_tuple_hash(host_ip(s), host_ip(d), f.sport);
        ecmp_pick(
            self.routes.next_hops(node - self.topo.hosts, d),
            hash,
            sw.salt,
        )
    }

    /// Sets the loss probability of packets arriving at `port` from its peer (1.0: the link
    /// delivers nothing), from now on.
    pub fn set_port_loss(&mut self, port: PortId, p: f64) {
        if let Some(pt) = self.ports.get_mut(port as usize) {
            pt.loss_q32 = (p.clamp(0.0, 1.0) * 4_294_967_296.0) as u64;
        }
    }

    /// Changes the rate at which `port` sends, from its next packet on (a degraded link, seed
    /// 001 §2.3's 40 → 1 Gb/s auto-negotiation failure).
    pub fn set_port_rate(&mut self, port: PortId, rate: Rate) {
        if let Some(pt) = self.ports.get_mut(port as usize) {
            pt.link.rate = rate;
        }
    }

    /// Bytes of host `h`'s registered region (with `host.verify_mr_bytes`), for data checks.
    pub fn host_bytes(&self, h: u32) -> Option<&[u8]> {
        let host = &self.hosts[h as usize];
        match &host.mem {
            HostMemory::Vec(v) => v.get(host.mr.id),
            HostMemory::Null(_) => None,
        }
    }

    /// The kind of node `n`.
    pub fn node_kind(&self, n: u32) -> NodeKind {
        self.topo.nodes[n as usize]
    }
}
