//! The model: hosts running the real RC engine, links, switches, and the event loop that joins
//! them. See the crate documentation for the picture and `docs/model.md` for what is and is not
//! modelled.
//!
//! Accounting is at frame bytes (Ethernet frame without FCS) throughout: per flow, bytes sent by
//! host NICs = bytes delivered to hosts + bytes dropped or lost + bytes in the network at the end
//! ([`Sim::conservation`]); per switch, bytes received = sent + dropped + held.
//!
//! Deviations: none beyond those of the parts (`link.rs`, `switch.rs`, `host.rs`).

use crate::dist::{self, SimRng};
use crate::event::{Event, EventQueue, PktId, PortId};
use crate::host::{CcScheme, Host, HostMemory, MR_BASE, host_ip, ip_host};
use crate::link::{PRIO_CFQ, PRIO_CTRL, PRIO_DATA, Port, wire_bytes};
use crate::routing::{Routes, ecmp_pick, five_tuple_hash};
use crate::scenario::{LossScope, SamplePorts, Scenario, ScenarioError};
use crate::switch::{MarkAt, Switch, SwitchPolicy};
use crate::topology::{NodeKind, Topology};
use crate::workload::{self, Capacity, FlowSpec};
use rand_core::RngCore;
use rocev2_core::Endpoint;
use rocev2_core::cq::{WcOpcode, WcStatus, WorkCompletion};
use rocev2_core::mr::{AccessFlags, NullMemory, VecMemory};
use rocev2_core::qp::{
    MpSnapshot, Mtu, Path, QpAttr, QpConfig, QpCounters, QpState, SendOp, SendWr, Sge,
};
use rocev2_core::time::{Instant, Rate};
use rocev2_core::wire::Qpn;
use rocev2_core::wire::frame::{Ecn, Frame};
use rocev2_ebpf_common::dvl::{self, Cft, Class, DvlConfig, FlowKey};
use rocev2_ebpf_common::iofd::{self, Action, MessageKey, Position, Refusal};
use rocev2_ebpf_common::red::Verdict;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

/// "No flow": a packet the model could not attribute (never expected).
pub const NO_FLOW: u32 = u32::MAX;

/// Offset of the IPv4 header in the engine's untagged frames.
const L3: usize = 14;
/// Offset of the BTH (IPv4 without options, checked by `classify`, and UDP).
const BTH: usize = L3 + 20 + 8;

/// A packet in the network.
#[derive(Debug, Clone, Default)]
pub struct Packet {
    /// Frame bytes (reused between packets; `len` of them are valid).
    pub buf: Vec<u8>,
    /// Frame length without FCS.
    pub len: u32,
    /// Flow it belongs to, or [`NO_FLOW`].
    pub flow: u32,
    /// Destination host.
    pub dst: u32,
    /// 5-tuple hash.
    pub hash: u64,
    /// Priority.
    pub prio: u8,
    /// ECN-capable (ECT(0), ECT(1) or CE).
    pub ect: bool,
    /// Carries CE.
    pub ce: bool,
    /// Ingress port at the current switch.
    pub ingress: PortId,
    /// Priority (lane) it arrived in at the current switch, for that ingress's PFC counts.
    pub ingress_prio: u8,
    /// IPv4 source and destination.
    pub src_ip: [u8; 4],
    /// IPv4 destination.
    pub dst_ip: [u8; 4],
    /// UDP source port.
    pub sport: u16,
    /// BTH opcode.
    pub opcode: u8,
    /// BTH destination QP.
    pub dest_qp: u32,
    /// Its message's length, when the packet tells (RETH, or a single-packet message).
    pub message_bytes: Option<u64>,
    /// Held in that ingress's PFC headroom rather than the shared pool.
    pub in_headroom: bool,
    /// Has left its host NIC.
    pub on_wire: bool,
    /// Slot in use.
    pub live: bool,
}

/// Per-flow state and results.
#[derive(Debug, Clone)]
pub struct Flow {
    /// What was asked for.
    pub spec: FlowSpec,
    /// UDP source port of the data direction (its ECMP entropy).
    pub sport: u16,
    qp_src: Option<Qpn>,
    qp_dst: Option<Qpn>,
    posted: u64,
    wrs_out: u32,
    /// Bytes whose WRITE completed at the sender.
    pub acked: u64,
    /// When the last byte was acknowledged.
    pub finish_ns: Option<u64>,
    /// The error status that ended the flow, if one did.
    pub failed: Option<WcStatus>,
    /// Frame bytes of the flow (both directions) sent by host NICs.
    pub sent_bytes: u64,
    /// Frame bytes of the flow delivered to hosts.
    pub delivered_bytes: u64,
    /// Frame bytes of the flow dropped in switches or lost on links.
    pub dropped_bytes: u64,
    /// Data packets that arrived with CE.
    pub ce_received: u64,
    /// Requester retransmissions (from the engine's QP counters).
    pub retransmits: u64,
    /// Requester timeouts.
    pub timeouts: u64,
    /// Packets the responder received out of sequence (PSN gaps), read at teardown.
    pub rx_out_of_sequence: u64,
    /// NAKs the responder sent, read at teardown.
    pub rx_naks_sent: u64,
    /// Packet-hops of the flow that IOFD deflected.
    pub deflected: u64,
    /// Packet-hops of the flow queued in a DVL congested-flow queue.
    pub cfq_packets: u64,
    /// MP-RDMA state of the sending QP (window, per-VP counters), read at teardown.
    pub mp_tx: Option<MpSnapshot>,
    /// MP-RDMA state of the receiving QP (per-VP counters, out-of-order histogram), read at
    /// teardown.
    pub mp_rx: Option<MpSnapshot>,
    bin: u64,
    bin_bytes: u64,
}

/// One sample of a port over time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortSample {
    /// Time, ns.
    pub time_ns: u64,
    /// Port.
    pub port: PortId,
    /// Bytes queued (all priorities).
    pub queue_bytes: u64,
    /// Cumulative CE marks.
    pub ecn_marks: u64,
    /// Cumulative drops.
    pub drops: u64,
    /// Cumulative PAUSE frames sent from this port's ingress.
    pub pause_sent: u64,
    /// Cumulative frame bytes sent.
    pub tx_bytes: u64,
}

/// A flow's sending rate in one bin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateSample {
    /// Flow.
    pub flow: u32,
    /// Bin start, ns.
    pub time_ns: u64,
    /// Wire bytes of data sent in the bin.
    pub wire_bytes: u64,
}

/// Run-wide counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Events handled.
    pub events: u64,
    /// Packet arrivals at a node (packet-hop events).
    pub packet_hops: u64,
    /// Frames the engines produced.
    pub frames_tx: u64,
    /// Frames the engines rejected (their drop counters give the reason).
    pub frames_rejected: u64,
    /// Frames the model could not parse or attribute (a bug if non-zero).
    pub unattributed: u64,
}

/// Per-flow byte balance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowBalance {
    /// Sent by host NICs.
    pub sent: u64,
    /// Delivered to hosts.
    pub delivered: u64,
    /// Dropped or lost.
    pub dropped: u64,
    /// Still in the network.
    pub in_flight: u64,
}

/// Per-switch byte balance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwitchBalance {
    /// Received.
    pub rx: u64,
    /// Sent.
    pub tx: u64,
    /// Dropped.
    pub dropped: u64,
    /// Held in queues.
    pub held: u64,
}

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
    pkts: Vec<Packet>,
    free: Vec<PktId>,
    flows: Vec<Flow>,
    next_flow: usize,
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

fn qp_key(host: u32, qpn: Qpn) -> u64 {
    (host as u64) << 32 | qpn.value() as u64
}

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
        if let Some(f) = scenario.faults {
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
        let routes = Routes::build(topo.hosts, &adj);

        let sw = scenario.switch;
        for pt in ports.iter_mut().filter(|p| p.node >= topo.hosts) {
            pt.iofd = sw.iofd.map(|c| (c.config(), Default::default()));
            pt.dvl = sw.dvl.map(|c| (c.config(), Default::default()));
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
            ep.set_receiver_cc(hs.cc.receiver(host_line_rate(&ports, h), hs.mtu));
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
            });
        }

        let flows = specs
            .into_iter()
            .enumerate()
            .map(|(i, spec)| Flow {
                spec,
                sport: 49152 + (dist::mix64(scenario.seed ^ (i as u64) << 8) % 16384) as u16,
                qp_src: None,
                qp_dst: None,
                posted: 0,
                wrs_out: 0,
                acked: 0,
                finish_ns: None,
                failed: None,
                sent_bytes: 0,
                delivered_bytes: 0,
                dropped_bytes: 0,
                ce_received: 0,
                retransmits: 0,
                timeouts: 0,
                rx_out_of_sequence: 0,
                rx_naks_sent: 0,
                deflected: 0,
                cfq_packets: 0,
                mp_tx: None,
                mp_rx: None,
                bin: 0,
                bin_bytes: 0,
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
            pkts: Vec::new(),
            free: Vec::new(),
            flows,
            next_flow: 0,
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
            self.flush_bin(f as u32, u64::MAX);
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

    fn kick(&mut self, port: PortId) {
        let node = self.ports[port as usize].node;
        if node < self.topo.hosts {
            self.host_kick(node);
        } else {
            self.switch_start(port);
        }
    }

    // ---- packets ----------------------------------------------------------------------------

    fn alloc(&mut self) -> PktId {
        match self.free.pop() {
            Some(id) => id,
            None => {
                self.pkts.push(Packet::default());
                self.pkts.len() as PktId - 1
            }
        }
    }

    fn release(&mut self, id: PktId) {
        let p = &mut self.pkts[id as usize];
        p.live = false;
        p.on_wire = false;
        self.free.push(id);
    }

    fn drop_pkt(&mut self, id: PktId) {
        let p = &self.pkts[id as usize];
        if let Some(f) = self.flows.get_mut(p.flow as usize) {
            f.dropped_bytes += p.len as u64;
        }
        self.release(id);
    }

    /// Starts serialising `pkt` on `port`; schedules its `TxDone` when `txdone` (hosts, or a
    /// switch port with more packets waiting).
    fn transmit(&mut self, port: PortId, pkt: PktId, txdone: bool) {
        let now = self.now;
        let p = &mut self.pkts[pkt as usize];
        p.on_wire = true;
        let len = p.len;
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
        if pt.loss_q32 > 0 && (self.rng_loss.next_u32() as u64) < pt.loss_q32 {
            pt.stats.lost += 1;
            self.drop_pkt(pkt);
            return;
        }
        let len = self.pkts[pkt as usize].len as u64;
        pt.stats.rx_packets += 1;
        pt.stats.rx_bytes += len;
        let node = pt.node;
        if node < self.topo.hosts {
            self.host_receive(node, pkt);
        } else {
            self.switch_receive(node - self.topo.hosts, port, pkt);
        }
    }

    fn on_pfc(&mut self, port: PortId, prio: usize, pause: bool) {
        let now = self.now;
        let pt = &mut self.ports[port as usize];
        let was_paused = pt.paused.iter().any(|&p| p);
        pt.paused[prio] = pause;
        let is_paused = pt.paused.iter().any(|&p| p);
        if pause {
            pt.stats.pause_received += 1;
        }
        if !was_paused && is_paused {
            pt.paused_since = now;
        } else if was_paused && !is_paused {
            pt.stats.paused_ns += now - pt.paused_since;
        }
        let (node, kick) = (pt.node, !pause && !pt.txdone_pending);
        if was_paused != is_paused && node < self.topo.hosts {
            // The QPs behind a paused NIC port learn it: DCQCN+ holds recovery while paused
            // (seed 002 §IV-B).
            let host = &mut self.hosts[node as usize];
            for f in self.flows.iter().filter(|f| f.spec.src == node) {
                if let Some(q) = f.qp_src {
                    let _ = host.ep.set_paused(q, is_paused);
                }
            }
        }
        if kick {
            self.kick(port);
        }
    }

    /// Sends a PFC frame upstream from ingress `port`: it takes the propagation delay plus the
    /// serialisation of a minimum frame.
    fn send_pfc(&mut self, port: PortId, prio: usize, pause: bool) {
        let pt = &mut self.ports[port as usize];
        pt.pause_sent[prio] = pause;
        if pause {
            pt.stats.pause_sent += 1;
        } else {
            pt.stats.resume_sent += 1;
        }
        let delay = pt.link.delay_ns + pt.link.rate.transmit_time(wire_bytes(60) as u64).as_nanos();
        let up = pt.peer;
        self.q.push(
            self.now + delay,
            Event::Pfc {
                port: up,
                prio: prio as u8,
                pause,
            },
        );
    }

    // ---- switches ---------------------------------------------------------------------------

    fn switch_receive(&mut self, sw: u32, ingress: PortId, pkt: PktId) {
        let (dst, hash, prio, len, ect) = {
            let p = &self.pkts[pkt as usize];
            (p.dst, p.hash, p.prio as usize, p.len as u64, p.ect)
        };
        let s = &mut self.switches[sw as usize];
        s.stats.rx_bytes += len;
        let Some(chosen) = ecmp_pick(self.routes.next_hops(sw, dst), hash, s.salt) else {
            s.stats.no_route += 1;
            s.stats.drop_bytes += len;
            self.drop_pkt(pkt);
            return;
        };
        let out = if prio == PRIO_CTRL as usize {
            chosen
        } else {
            self.deflect(sw, chosen, pkt)
        };
        let s = &mut self.switches[sw as usize];
        // Buffer admission: shared pool, then (lossless, while this ingress is paused) headroom.
        // The control class is always admitted (reserved space, see switch.rs).
        let in_headroom = if s.buffer_used + len <= s.buffer_bytes || prio == PRIO_CTRL as usize {
            false
        } else if s.pfc && self.ports[ingress as usize].pause_sent[prio] {
            let headroom = headroom_bytes(&self.scenario, &self.ports[ingress as usize]);
            if self.ports[ingress as usize].headroom_bytes[prio] + len <= headroom {
                true
            } else {
                self.switch_drop(sw, out, pkt, len);
                return;
            }
        } else {
            self.switch_drop(sw, out, pkt, len);
            return;
        };
        let qprio = if prio == PRIO_CTRL as usize {
            prio
        } else {
            self.dvl_class(out, ingress, pkt)
        };
        if self.switches[sw as usize].mark_at == MarkAt::Enqueue
            && self.apply_policy(sw, out, pkt, qprio, ect) == Verdict::Drop
        {
            self.switch_drop(sw, out, pkt, len);
            return;
        }
        let s = &mut self.switches[sw as usize];
        if !in_headroom {
            s.buffer_used += len;
            s.stats.max_buffer_bytes = s.stats.max_buffer_bytes.max(s.buffer_used);
        }
        let (pfc, xoff) = (s.pfc, s.xoff);
        {
            let p = &mut self.pkts[pkt as usize];
            p.ingress = ingress;
            p.ingress_prio = prio as u8;
            p.prio = qprio as u8;
            p.in_headroom = in_headroom;
        }
        let ing = &mut self.ports[ingress as usize];
        ing.ingress_bytes[prio] += len;
        if in_headroom {
            ing.headroom_bytes[prio] += len;
        }
        if pfc && !ing.pause_sent[prio] && ing.ingress_bytes[prio] > xoff {
            self.send_pfc(ingress, prio, true);
        }
        let o = &mut self.ports[out as usize];
        o.queues[qprio].push_back(pkt);
        o.queue_bytes[qprio] += len;
        let q = o.queued_bytes();
        o.stats.max_queue_bytes = o.stats.max_queue_bytes.max(q);
        if !o.txdone_pending {
            self.switch_start(out);
        }
    }

    /// Offers `pkt` to switch `sw`'s policy against the current bytes of egress `out`'s queue
    /// `prio`, marks it CE on a `Mark` verdict and returns the verdict (the caller drops).
    fn apply_policy(
        &mut self,
        sw: u32,
        out: PortId,
        pkt: PktId,
        prio: usize,
        ect: bool,
    ) -> Verdict {
        let port = &self.ports[out as usize];
        let qbytes = port.queue_bytes[prio];
        let policy = port.policy.unwrap_or(self.switches[sw as usize].policy);
        let verdict = policy.on_enqueue(qbytes, ect, self.rng_policy.next_u32());
        if ect && let Some(log) = &mut self.mark_log {
            log.push((qbytes, verdict == Verdict::Mark));
        }
        if verdict == Verdict::Mark {
            self.ports[out as usize].stats.ecn_marks += 1;
            let p = &mut self.pkts[pkt as usize];
            if !p.ce {
                p.ce = true;
                set_ce(&mut p.buf);
            }
        }
        verdict
    }

    fn switch_drop(&mut self, sw: u32, out: PortId, pkt: PktId, len: u64) {
        self.switches[sw as usize].stats.drop_bytes += len;
        let o = &mut self.ports[out as usize];
        o.stats.drops += 1;
        o.stats.drop_bytes += len;
        self.drop_pkt(pkt);
    }

    /// IOFD (seed 000 §IV, `iofd::decide`) at the egress port `chosen` that ECMP picked for
    /// data packet `pkt`: returns the port it leaves by. The alternate for a new deflection is
    /// drawn among the other equal-cost next hops; a deflected packet loses one token.
    fn deflect(&mut self, sw: u32, chosen: PortId, pkt: PktId) -> PortId {
        let Some(cfg) = self.ports[chosen as usize].iofd.as_ref().map(|(c, _)| *c) else {
            return chosen;
        };
        let (position, dst) = {
            let p = &self.pkts[pkt as usize];
            (Position::of_opcode(p.opcode), p.dst)
        };
        let n = self.routes.next_hops(sw, dst).len() as u64;
        if position == Position::None || n < 2 {
            return chosen;
        }
        // The paper's "randomly-selected output port" among the alternates.
        let k = (self.rng_iofd.next_u32() as u64 * (n - 1)) >> 32;
        let alternate = self
            .routes
            .next_hops(sw, dst)
            .iter()
            .copied()
            .filter(|&h| h != chosen)
            .nth(k as usize)
            .unwrap_or(chosen);
        let p = &self.pkts[pkt as usize];
        let tokens = p.buf[BTH + 4] & 0x3f;
        let ipkt = iofd::Packet {
            key: MessageKey {
                src: v4_mapped(p.src_ip),
                dst: v4_mapped(p.dst_ip),
                dest_qp: p.dest_qp,
            },
            position,
            message_bytes: p.message_bytes,
            tokens,
        };
        let pt = &mut self.ports[chosen as usize];
        let queue = pt.queue_bytes[PRIO_DATA as usize] + pt.queue_bytes[PRIO_CFQ as usize];
        let Some((_, dft)) = &mut pt.iofd else {
            return chosen;
        };
        let (action, refusal) = iofd::decide(dft, &cfg, &ipkt, queue, alternate);
        match refusal {
            Some(Refusal::TableFull) => pt.stats.iofd_table_full += 1,
            Some(Refusal::Long) => pt.stats.iofd_long += 1,
            Some(Refusal::NoTokens) => pt.stats.iofd_no_tokens += 1,
            None => {}
        }
        let Action::Deflect { port } = action else {
            return chosen;
        };
        pt.stats.iofd_deflected += 1;
        let p = &mut self.pkts[pkt as usize];
        // BTH byte 4, bits 5–0; the ICRC masks the byte and the UDP checksum is 0 (IPv4).
        if tokens > 0 {
            p.buf[BTH + 4] -= 1;
        }
        if let Some(f) = self.flows.get_mut(p.flow as usize) {
            f.deflected += 1;
        }
        port
    }

    /// DVL (seed 003, `dvl::decide`) at egress `out` for data packet `pkt` that came in on
    /// `ingress`: returns the queue it joins, and notifies the previous hop when the flow is
    /// isolated here (or, while it stays congested, again every half hold time).
    fn dvl_class(&mut self, out: PortId, ingress: PortId, pkt: PktId) -> usize {
        let now = self.now;
        let p = &self.pkts[pkt as usize];
        let (src, dst, sport, flow) = (p.src_ip, p.dst_ip, p.sport, p.flow);
        let pt = &mut self.ports[out as usize];
        let (normal, cfq) = (
            pt.queue_bytes[PRIO_DATA as usize],
            pt.queue_bytes[PRIO_CFQ as usize],
        );
        let Some((cfg, cft)) = &mut pt.dvl else {
            return PRIO_DATA as usize;
        };
        let key = flow_key(src, dst, sport, out);
        let (class, event) = dvl::decide(cft, cfg, &key, normal, cfq, now);
        let mut notify = false;
        match event {
            dvl::Event::Isolated => {
                pt.stats.dvl_isolated += 1;
                notify = true;
            }
            dvl::Event::Released => pt.stats.dvl_released += 1,
            dvl::Event::TableFull => pt.stats.dvl_table_full += 1,
            dvl::Event::None => {}
        }
        if class == Class::Normal {
            return PRIO_DATA as usize;
        }
        // Slide 10 #4–#5: the congested flow's queue keeps growing; refresh and tell upstream.
        if !notify
            && cfq >= cfg.threshold_bytes
            && cft
                .since(&key)
                .is_some_and(|t| now.saturating_sub(t) >= cfg.hold_ns / 2)
        {
            cft.remove(&key);
            cft.insert(&key, now);
            notify = true;
        }
        pt.stats.dvl_congested += 1;
        if let Some(f) = self.flows.get_mut(flow as usize) {
            f.cfq_packets += 1;
        }
        if notify {
            self.dvl_notify(out, ingress, src, dst, sport);
        }
        PRIO_CFQ as usize
    }

    /// Sends the DVL notification for a flow isolated at `out` to the switch behind `ingress`
    /// (slide 10 #5): it takes the propagation delay plus a minimum frame's serialisation, as a
    /// PFC frame does. Hosts have no congested-flow table and get none.
    fn dvl_notify(&mut self, out: PortId, ingress: PortId, src: [u8; 4], dst: [u8; 4], sport: u16) {
        let up = self.ports[ingress as usize].peer;
        if self.ports[up as usize].node < self.topo.hosts {
            return;
        }
        self.ports[out as usize].stats.dvl_notify_sent += 1;
        let link = self.ports[ingress as usize].link;
        let delay = link.delay_ns + link.rate.transmit_time(wire_bytes(60) as u64).as_nanos();
        self.q.push(
            self.now + delay,
            Event::DvlNotify {
                port: up,
                src: u32::from_be_bytes(src),
                dst: u32::from_be_bytes(dst),
                sport,
            },
        );
    }

    /// A DVL notification reached the switch of egress `port`: the flow is isolated there (or
    /// its isolation refreshed), as the eBPF loader's `isolate` does.
    fn on_dvl_notify(&mut self, port: PortId, src: u32, dst: u32, sport: u16) {
        let now = self.now;
        let pt = &mut self.ports[port as usize];
        let Some((_, cft)) = &mut pt.dvl else {
            return;
        };
        let key = flow_key(src.to_be_bytes(), dst.to_be_bytes(), sport, port);
        pt.stats.dvl_notify_received += 1;
        cft.remove(&key);
        if !cft.insert(&key, now) {
            pt.stats.dvl_table_full += 1;
        }
    }

    fn switch_start(&mut self, port: PortId) {
        let now = self.now;
        let pt = &mut self.ports[port as usize];
        if pt.busy_until > now {
            // Still sending: come back when the wire is free.
            if !pt.txdone_pending && pt.next_prio().is_some() {
                pt.txdone_pending = true;
                let t = pt.busy_until;
                self.q.push(t, Event::TxDone { port });
            }
            return;
        }
        let Some(prio) = pt.next_prio() else {
            return;
        };
        let Some(pkt) = pt.queues[prio].pop_front() else {
            return;
        };
        let (len, ingress, iprio, in_headroom) = {
            let p = &self.pkts[pkt as usize];
            (
                p.len as u64,
                p.ingress,
                p.ingress_prio as usize,
                p.in_headroom,
            )
        };
        pt.queue_bytes[prio] -= len;
        let sw = (pt.node - self.topo.hosts) as usize;
        let s = &mut self.switches[sw];
        s.stats.tx_bytes += len;
        if !in_headroom {
            s.buffer_used -= len;
        }
        let (pfc, xon) = (s.pfc, s.xon);
        let ing = &mut self.ports[ingress as usize];
        ing.ingress_bytes[iprio] -= len;
        if in_headroom {
            ing.headroom_bytes[iprio] -= len;
        }
        if pfc && ing.pause_sent[iprio] && ing.ingress_bytes[iprio] <= xon {
            self.send_pfc(ingress, iprio, false);
        }
        if self.switches[sw].mark_at == MarkAt::Dequeue {
            // Judged on the queue it leaves behind; a Drop verdict needs enqueue marking.
            let ect = self.pkts[pkt as usize].ect;
            let _ = self.apply_policy(sw as u32, port, pkt, prio, ect);
        }
        let more = self.ports[port as usize].next_prio().is_some();
        self.transmit(port, pkt, more);
    }

    // ---- hosts ------------------------------------------------------------------------------

    fn host_receive(&mut self, h: u32, pkt: PktId) {
        let now = Instant::from_nanos(self.now);
        let p = &self.pkts[pkt as usize];
        if let Some(f) = self.flows.get_mut(p.flow as usize) {
            f.delivered_bytes += p.len as u64;
            if p.ce && p.prio != PRIO_CTRL {
                f.ce_received += 1;
            }
        }
        let host = &mut self.hosts[h as usize];
        if host
            .ep
            .handle_frame(now, &p.buf[..p.len as usize], &mut host.mem)
            .is_err()
        {
            self.stats.frames_rejected += 1;
        }
        self.release(pkt);
        self.poll_completions(h);
        self.host_kick(h);
    }

    fn on_wake(&mut self, h: u32) {
        let host = &mut self.hosts[h as usize];
        if host.wake_at != self.now {
            return; // superseded
        }
        host.wake_at = u64::MAX;
        let now = Instant::from_nanos(self.now);
        if host.ep.poll_timeout().is_some_and(|t| t <= now) {
            host.ep.handle_timeout(now, &mut host.mem);
            self.poll_completions(h);
        }
        self.host_kick(h);
    }

    /// Lets host `h`'s NIC start its next frame if it is free; then re-arms its wake-up.
    fn host_kick(&mut self, h: u32) {
        let port = h as PortId;
        if self.ports[port as usize].busy_until <= self.now
            && !self.ports[port as usize].txdone_pending
        {
            loop {
                let pt = &mut self.ports[port as usize];
                if let Some(prio) = pt.next_prio() {
                    if let Some(pkt) = pt.queues[prio].pop_front() {
                        let len = self.pkts[pkt as usize].len as u64;
                        pt.queue_bytes[prio] -= len;
                        self.host_transmit(h, pkt);
                    }
                    break;
                }
                if !pt.queues[PRIO_DATA as usize].is_empty() {
                    break; // data is paused; pull nothing more behind it
                }
                let id = self.alloc();
                let host = &mut self.hosts[h as usize];
                let now = Instant::from_nanos(self.now);
                let pkt = &mut self.pkts[id as usize];
                match host.ep.poll_transmit(now, &mut host.mem, &mut pkt.buf) {
                    None => {
                        self.free.push(id);
                        break;
                    }
                    Some(n) => {
                        self.stats.frames_tx += 1;
                        self.classify(id, n);
                        let p = &self.pkts[id as usize];
                        let (prio, len) = (p.prio as usize, p.len as u64);
                        let pt = &mut self.ports[port as usize];
                        pt.queues[prio].push_back(id);
                        pt.queue_bytes[prio] += len;
                    }
                }
            }
        }
        self.arm_wake(h);
    }

    fn arm_wake(&mut self, h: u32) {
        let host = &mut self.hosts[h as usize];
        if let Some(t) = host.ep.poll_timeout() {
            let t = t.as_nanos().max(self.now);
            if t < host.wake_at {
                host.wake_at = t;
                self.q.push(t, Event::HostWake { host: h });
            }
        }
    }

    fn host_transmit(&mut self, h: u32, pkt: PktId) {
        let p = &self.pkts[pkt as usize];
        let (flow, len, prio) = (p.flow, p.len, p.prio);
        if let Some(f) = self.flows.get_mut(flow as usize) {
            f.sent_bytes += len as u64;
            if prio == PRIO_DATA && f.spec.src == h {
                let bin_ns = self.scenario.output.rate_bin_ns.max(1);
                if (flow as usize) < self.scenario.output.trace_flows as usize {
                    let b = self.now / bin_ns;
                    if b != f.bin {
                        self.flush_bin(flow, b);
                    }
                    self.flows[flow as usize].bin_bytes += wire_bytes(len) as u64;
                }
            }
        }
        self.transmit(h as PortId, pkt, true);
    }

    /// Writes flow `f`'s current bin and zero bins up to `next` (bounded), then opens `next`.
    fn flush_bin(&mut self, f: u32, next: u64) {
        let bin_ns = self.scenario.output.rate_bin_ns.max(1);
        let fl = &mut self.flows[f as usize];
        if fl.bin_bytes > 0 || next != u64::MAX {
            if fl.bin_bytes > 0 {
                self.rates.push(RateSample {
                    flow: f,
                    time_ns: fl.bin * bin_ns,
                    wire_bytes: fl.bin_bytes,
                });
            }
            if next != u64::MAX && fl.bin_bytes > 0 {
                for b in fl.bin + 1..next.min(fl.bin + 1000) {
                    self.rates.push(RateSample {
                        flow: f,
                        time_ns: b * bin_ns,
                        wire_bytes: 0,
                    });
                }
            }
        }
        fl.bin = next;
        fl.bin_bytes = 0;
    }

    /// Parses a frame the engine produced: destination, 5-tuple hash, priority, ECN, flow.
    fn classify(&mut self, id: PktId, n: usize) {
        let p = &mut self.pkts[id as usize];
        p.len = n as u32;
        p.live = true;
        p.on_wire = false;
        p.in_headroom = false;
        let parsed = Frame::new_checked(&p.buf[..n]).ok().and_then(|fr| {
            let ip = fr.ip_header();
            let udp = fr.udp_header();
            if ip.len() != 20 {
                return None;
            }
            let src: [u8; 4] = ip[12..16].try_into().ok()?;
            let dst: [u8; 4] = ip[16..20].try_into().ok()?;
            let sport = u16::from_be_bytes([udp[0], udp[1]]);
            let t = fr.transport();
            let bth = t.bth();
            let opcode = bth.opcode().0;
            let message_bytes = match t.reth() {
                Some(r) if Position::has_reth(opcode) => Some(r.dma_len() as u64),
                _ if Position::of_opcode(opcode) == Position::Only => {
                    Some(fr.payload().len() as u64)
                }
                _ => None,
            };
            Some((
                src,
                dst,
                sport,
                ip[1] & 3,
                opcode,
                bth.dest_qp(),
                message_bytes,
            ))
        });
        match parsed {
            Some((src, dst, sport, ecn, opcode, dest_qp, message_bytes)) => {
                p.src_ip = src;
                p.dst_ip = dst;
                p.sport = sport;
                p.opcode = opcode;
                p.dest_qp = dest_qp.value();
                p.message_bytes = message_bytes;
                p.dst = ip_host(dst);
                p.hash = five_tuple_hash(src, dst, sport);
                p.prio = if matches!(opcode, 0x11 | 0x12 | 0x81) {
                    PRIO_CTRL
                } else {
                    PRIO_DATA
                };
                p.ect = ecn != 0;
                p.ce = ecn == 3;
                p.flow = self
                    .qp_flow
                    .get(&qp_key(p.dst, dest_qp))
                    .copied()
                    .unwrap_or(NO_FLOW);
                if p.flow == NO_FLOW {
                    self.stats.unattributed += 1;
                }
            }
            None => {
                debug_assert!(false, "the engine emitted a frame the model cannot parse");
                self.stats.unattributed += 1;
                p.dst = u32::MAX;
                p.flow = NO_FLOW;
                p.prio = PRIO_DATA;
                p.opcode = u8::MAX;
                (p.src_ip, p.dst_ip, p.sport, p.message_bytes) = ([0; 4], [0; 4], 0, None);
            }
        }
    }

    // ---- flows ------------------------------------------------------------------------------

    fn on_flow_start(&mut self, f: u32) {
        let next = f as usize + 1;
        self.next_flow = next;
        if let Some(nf) = self.flows.get(next) {
            self.q.push(
                nf.spec.start_ns.max(self.now),
                Event::FlowStart { flow: next as u32 },
            );
        }
        let spec = self.flows[f as usize].spec;
        let sport = self.flows[f as usize].sport;
        match self.connect(f, spec.src, spec.dst, sport) {
            Some((qs, qd)) => {
                let fl = &mut self.flows[f as usize];
                fl.qp_src = Some(qs);
                fl.qp_dst = Some(qd);
                self.qp_flow.insert(qp_key(spec.src, qs), f);
                self.qp_flow.insert(qp_key(spec.dst, qd), f);
                self.post_wrs(f);
                self.host_kick(spec.src);
            }
            None => {
                self.flows[f as usize].failed = Some(WcStatus::GeneralErr);
            }
        }
    }

    /// The congestion controller of `flow`'s sending QP at the current time (rate, α, N, …).
    pub fn cc_snapshot(&self, flow: u32) -> Option<rocev2_core::cc::CcSnapshot> {
        let f = self.flows.get(flow as usize)?;
        let qpn = f.qp_src?;
        let host = self.hosts.get(f.spec.src as usize)?;
        host.ep.qp(qpn)?.cc_snapshot(Instant::from_nanos(self.now))
    }

    /// MP-RDMA state of `flow`'s sending (`sender`) or receiving QP now (window, per-VP
    /// counters, out-of-order histogram); `None` for a single-path flow or one torn down
    /// (then see [`Flow::mp_tx`] and [`Flow::mp_rx`]).
    pub fn mp_snapshot(&self, flow: u32, sender: bool) -> Option<MpSnapshot> {
        let f = self.flows.get(flow as usize)?;
        let (h, q) = if sender {
            (f.spec.src, f.qp_src?)
        } else {
            (f.spec.dst, f.qp_dst?)
        };
        self.hosts.get(h as usize)?.ep.qp(q)?.mp_snapshot()
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
            let cft = pt.dvl.map(|(_, t)| t).unwrap_or_default();
            pt.dvl = cfg.map(|c| (c, cft));
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

    /// The QP counters of `flow`'s sending (`sender`) or receiving QP now; `None` before it
    /// started or after teardown (then see the flow's fields).
    pub fn qp_counters(&self, flow: u32, sender: bool) -> Option<QpCounters> {
        let f = self.flows.get(flow as usize)?;
        let (h, q) = if sender {
            (f.spec.src, f.qp_src?)
        } else {
            (f.spec.dst, f.qp_dst?)
        };
        Some(*self.hosts.get(h as usize)?.ep.qp(q)?.counters())
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

    /// Creates an RC QP on each host and moves both to RTS pointed at each other (the same
    /// attributes as `rocev2_core::testing::Pair::connect`).
    fn connect(&mut self, f: u32, s: u32, d: u32, sport: u16) -> Option<(Qpn, Qpn)> {
        let hs = self.scenario.host;
        let now = Instant::from_nanos(self.now);
        let mut qpns = [Qpn::new(0); 2];
        for (i, h) in [s, d].into_iter().enumerate() {
            let host = &mut self.hosts[h as usize];
            let mut cfg = QpConfig::new(host.pd, host.cq, host.cq);
            cfg.max_inflight_psns = hs.max_inflight_psns;
            cfg.ack_req_every = hs.ack_req_every;
            cfg.max_send_wr = hs.wr_depth.max(1);
            cfg.cc = hs.cc.qp_config(host_line_rate(&self.ports, h), hs.mtu);
            cfg.iofd_tokens = hs.iofd.map(|t| t.tokens());
            if hs.cc == CcScheme::MpRdma {
                let seed = dist::mix64(self.scenario.seed ^ 0x3d ^ (f as u64) << 8 ^ h as u64);
                cfg.multipath = Some(hs.mp.config(seed));
            }
            let qpn = host.ep.create_qp(cfg).ok()?;
            let init = QpAttr {
                p_key: Some(0xffff),
                access: Some(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE),
                ..QpAttr::default()
            };
            host.ep
                .modify_qp(qpn, QpState::Init, &init, now, &mut host.mem)
                .ok()?;
            qpns[i] = qpn;
        }
        let psn =
            |x: u64| (dist::mix64(self.scenario.seed ^ x ^ (f as u64) << 16) & 0xff_ffff) as u32;
        let (psn_s, psn_d) = (psn(1), psn(2));
        for (h, peer, qpn, dest, rq_psn, sq_psn, port) in [
            (s, d, qpns[0], qpns[1], psn_d, psn_s, sport),
            (d, s, qpns[1], qpns[0], psn_s, psn_d, sport ^ 0x2000),
        ] {
            let path = Path {
                src_mac: mac(h),
                dst_mac: mac(peer),
                vlan: None,
                src_ip: IpAddr::V4(Ipv4Addr::from(host_ip(h))),
                dst_ip: IpAddr::V4(Ipv4Addr::from(host_ip(peer))),
                dscp: hs.dscp,
                ecn: if hs.ect { Ecn::Ect0 } else { Ecn::NotEct },
                hop_limit: 64,
                udp_src_port: port,
                flow_label: 0,
            };
            let rtr = QpAttr {
                path: Some(path),
                path_mtu: Some(self.mtu),
                dest_qpn: Some(dest),
                rq_psn: Some(rq_psn),
                max_dest_rd_atomic: Some(1),
                min_rnr_timer: Some(1),
                peer_ext: Some(hs.cc.peer_ext()),
                ..QpAttr::default()
            };
            let rts = QpAttr {
                sq_psn: Some(sq_psn),
                timeout: Some(hs.timeout),
                retry_cnt: Some(hs.retry_cnt),
                rnr_retry: Some(7),
                max_rd_atomic: Some(1),
                ..QpAttr::default()
            };
            let host = &mut self.hosts[h as usize];
            host.ep
                .modify_qp(qpn, QpState::Rtr, &rtr, now, &mut host.mem)
                .ok()?;
            host.ep
                .modify_qp(qpn, QpState::Rts, &rts, now, &mut host.mem)
                .ok()?;
        }
        Some((qpns[0], qpns[1]))
    }

    /// Posts WRITEs until the flow has `wr_depth` outstanding or everything is posted.
    fn post_wrs(&mut self, f: u32) {
        let hs = self.scenario.host;
        let fl = &mut self.flows[f as usize];
        let (Some(qs), Some(_)) = (fl.qp_src, fl.qp_dst) else {
            return;
        };
        let (src, dst) = (fl.spec.src, fl.spec.dst);
        let (dst_addr, rkey) = {
            let mr = &self.hosts[dst as usize].mr;
            (mr.addr, mr.rkey)
        };
        let host = &mut self.hosts[src as usize];
        while fl.wrs_out < hs.wr_depth && fl.posted < fl.spec.size {
            let off = fl.posted;
            let len = (fl.spec.size - off).min(hs.wr_bytes as u64) as u32;
            // With NullMemory every WRITE uses the region's start; with VecMemory the flow's
            // bytes land at the same offset they come from (flows fit, checked at build).
            let at = if hs.verify_mr_bytes > 0 { off } else { 0 };
            let wr = SendWr::new(
                off,
                SendOp::Write {
                    remote_addr: dst_addr + at,
                    rkey,
                },
            )
            .sge(Sge {
                addr: host.mr.addr + at,
                length: len,
                lkey: host.mr.lkey,
            });
            let wr = if hs.synchronise_last_wr && off + len as u64 == fl.spec.size {
                wr.synchronise()
            } else {
                wr
            };
            if host.ep.post_send(qs, wr).is_err() {
                fl.failed = Some(WcStatus::GeneralErr);
                return;
            }
            fl.posted += len as u64;
            fl.wrs_out += 1;
        }
    }

    fn poll_completions(&mut self, h: u32) {
        let host = &mut self.hosts[h as usize];
        self.wcs.clear();
        host.ep.poll_cq(host.cq, &mut self.wcs, usize::MAX);
        if self.wcs.is_empty() {
            return;
        }
        let wcs = std::mem::take(&mut self.wcs);
        for wc in &wcs {
            let Some(&f) = self.qp_flow.get(&qp_key(h, wc.qp_num)) else {
                continue;
            };
            let fl = &mut self.flows[f as usize];
            if fl.finish_ns.is_some() || fl.failed.is_some() {
                continue;
            }
            if wc.status == WcStatus::Success && wc.opcode == WcOpcode::RdmaWrite {
                let len = (fl.spec.size - wc.wr_id).min(self.scenario.host.wr_bytes as u64);
                fl.acked += len;
                fl.wrs_out -= 1;
                if fl.acked >= fl.spec.size {
                    fl.finish_ns = Some(self.now);
                    self.teardown(f);
                } else {
                    self.post_wrs(f);
                }
            } else if wc.status != WcStatus::Success {
                fl.failed = Some(wc.status);
                self.teardown(f);
            }
        }
        self.wcs = wcs;
    }

    /// Reads the sender's counters and destroys both QPs of a finished or failed flow.
    fn teardown(&mut self, f: u32) {
        let fl = &mut self.flows[f as usize];
        let (s, d) = (fl.spec.src, fl.spec.dst);
        if let Some(q) = fl.qp_src.take() {
            let ep = &mut self.hosts[s as usize].ep;
            if let Some(qp) = ep.qp(q) {
                fl.retransmits = qp.counters().retransmits;
                fl.timeouts = qp.counters().timeouts;
                fl.mp_tx = qp.mp_snapshot();
            }
            let _ = ep.destroy_qp(q);
            self.qp_flow.remove(&qp_key(s, q));
        }
        if let Some(q) = fl.qp_dst.take() {
            let ep = &mut self.hosts[d as usize].ep;
            if let Some(qp) = ep.qp(q) {
                fl.rx_out_of_sequence = qp.counters().out_of_sequence;
                fl.rx_naks_sent = qp.counters().naks_sent;
                fl.mp_rx = qp.mp_snapshot();
            }
            let _ = ep.destroy_qp(q);
            self.qp_flow.remove(&qp_key(d, q));
        }
        self.flush_bin(f, u64::MAX);
    }

    fn on_sample(&mut self) {
        for &p in &self.sampled {
            let pt = &self.ports[p as usize];
            self.samples.push(PortSample {
                time_ns: self.now,
                port: p,
                queue_bytes: pt.queued_bytes(),
                ecn_marks: pt.stats.ecn_marks,
                drops: pt.stats.drops,
                pause_sent: pt.stats.pause_sent,
                tx_bytes: pt.stats.tx_bytes,
            });
        }
        let next = self.now + self.scenario.output.sample_interval_ns;
        if next <= self.scenario.duration_ns {
            self.q.push(next, Event::Sample);
        }
    }

    // ---- checks -----------------------------------------------------------------------------

    /// Byte balance of every flow and every switch at the current time.
    pub fn conservation(&self) -> (Vec<FlowBalance>, Vec<SwitchBalance>) {
        let mut in_flight = vec![0u64; self.flows.len()];
        for p in &self.pkts {
            if p.live && p.on_wire && (p.flow as usize) < in_flight.len() {
                in_flight[p.flow as usize] += p.len as u64;
            }
        }
        let flows = self
            .flows
            .iter()
            .zip(in_flight)
            .map(|(f, in_flight)| FlowBalance {
                sent: f.sent_bytes,
                delivered: f.delivered_bytes,
                dropped: f.dropped_bytes,
                in_flight,
            })
            .collect();
        let switches = self
            .switches
            .iter()
            .map(|s| SwitchBalance {
                rx: s.stats.rx_bytes,
                tx: s.stats.tx_bytes,
                dropped: s.stats.drop_bytes,
                held: crate::switch::held_bytes(s, &self.ports),
            })
            .collect();
        (flows, switches)
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

/// An IPv4 address as the shared tables key it (v4-mapped IPv6, `::ffff:a.b.c.d`).
fn v4_mapped(ip: [u8; 4]) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[10] = 0xff;
    a[11] = 0xff;
    a[12..].copy_from_slice(&ip);
    a
}

/// The DVL key of a RoCEv2 flow on egress `port` (UDP to 4791).
fn flow_key(src: [u8; 4], dst: [u8; 4], sport: u16, port: PortId) -> FlowKey {
    FlowKey {
        src: v4_mapped(src),
        dst: v4_mapped(dst),
        port,
        src_port: sport,
        dst_port: 4791,
        protocol: 17,
    }
}

fn mac(h: u32) -> [u8; 6] {
    let [a, b, c, d] = h.to_be_bytes();
    [0x02, 0, a, b, c, d]
}

/// Headroom of one ingress priority: configured, or 2 · (rate · delay) + 2 maximum frames.
fn headroom_bytes(s: &Scenario, ingress: &Port) -> u64 {
    s.switch.pfc.headroom_bytes.unwrap_or_else(|| {
        let bdp =
            ingress.link.rate.as_bps() as u128 * ingress.link.delay_ns as u128 / 8_000_000_000;
        2 * bdp as u64 + 2 * (s.host.mtu as u64 + 128)
    })
}

/// Sets the IPv4 ECN field to CE and rewrites the header checksum (RFC 1624 would do it
/// incrementally; ten words are cheap). The ICRC masks the TOS byte (RoCEv2 Annex A17.8), so it
/// stays valid.
fn set_ce(buf: &mut [u8]) {
    buf[L3 + 1] |= 3;
    buf[L3 + 10] = 0;
    buf[L3 + 11] = 0;
    let mut sum: u32 = 0;
    for w in buf[L3..L3 + 20].chunks_exact(2) {
        sum += u16::from_be_bytes([w[0], w[1]]) as u32;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let c = !(sum as u16);
    buf[L3 + 10..L3 + 12].copy_from_slice(&c.to_be_bytes());
}

/// The line rate of host `h`'s NIC: the rate of its one port's link.
fn host_line_rate(ports: &[Port], h: u32) -> rocev2_core::time::Rate {
    ports
        .iter()
        .find(|p| p.node == h)
        .map_or(rocev2_core::time::Rate::from_gbps(100), |p| p.link.rate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_ce_keeps_ip_checksum_valid() {
        // A valid IPv4 header with ECT(0) (TOS 0x02) from the engine's emitter.
        let mut f = vec![0u8; 14];
        let mut ip = [
            0x45, 0x02, 0x00, 0x3c, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0, 0, 10, 0, 0, 1, 10, 0,
            0, 2,
        ];
        let mut sum: u32 = ip
            .chunks_exact(2)
            .map(|w| u16::from_be_bytes([w[0], w[1]]) as u32)
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        f.extend_from_slice(&ip);
        set_ce(&mut f);
        assert_eq!(f[L3 + 1] & 3, 3);
        let mut sum: u32 = f[L3..L3 + 20]
            .chunks_exact(2)
            .map(|w| u16::from_be_bytes([w[0], w[1]]) as u32)
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(sum, 0xffff, "a valid header sums to all ones");
    }
}
