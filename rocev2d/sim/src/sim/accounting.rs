//! What a run records: run-wide counters, periodic port samples, per-flow rate bins, drops
//! charged to their flow, and the byte balance of every flow and switch
//! ([`Sim::conservation`]), which the conservation test checks.
//!
//! Deviations: none.

use super::Sim;
use crate::event::{Event, PktId, PortId};
use crate::link::Port;
use crate::switch_node::Switch;

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

/// A flow's open rate bin: which bin of `rate_bin_ns` it is, and the wire bytes of data the
/// flow sent in it so far.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct RateBin {
    bin: u64,
    bytes: u64,
}

impl RateBin {
    /// Counts `bytes` of flow `flow` sent at `now_ns`, first writing the open bin to `out` when
    /// `now_ns` is past it.
    pub(super) fn add(
        &mut self,
        flow: u32,
        now_ns: u64,
        bytes: u64,
        bin_ns: u64,
        out: &mut Vec<RateSample>,
    ) {
        let b = now_ns / bin_ns;
        if b != self.bin {
            self.flush(flow, b, bin_ns, out);
        }
        self.bytes += bytes;
    }

    /// Writes the open bin and zero bins up to `next` (bounded) to `out`, then opens `next`
    /// (`u64::MAX`: none).
    fn flush(&mut self, flow: u32, next: u64, bin_ns: u64, out: &mut Vec<RateSample>) {
        if self.bytes > 0 || next != u64::MAX {
            if self.bytes > 0 {
                out.push(RateSample {
                    flow,
                    time_ns: self.bin * bin_ns,
                    wire_bytes: self.bytes,
                });
            }
            if next != u64::MAX && self.bytes > 0 {
                for b in self.bin + 1..next.min(self.bin + 1000) {
                    out.push(RateSample {
                        flow,
                        time_ns: b * bin_ns,
                        wire_bytes: 0,
                    });
                }
            }
        }
        self.bin = next;
        self.bytes = 0;
    }
}

impl Sim {
    pub(super) fn drop_pkt(&mut self, id: PktId) {
        let p = &self.pkts[id];
        if let Some(f) = self.flows.get_mut(p.flow as usize) {
            f.dropped_bytes += p.len as u64;
        }
        self.pkts.release(id);
    }

    /// Writes flow `f`'s open rate bin to the samples and closes it for good (the flow ended,
    /// or the run did).
    pub(super) fn close_rate_bin(&mut self, f: u32) {
        let bin_ns = self.scenario.output.rate_bin_ns.max(1);
        self.flows[f as usize]
            .rate
            .flush(f, u64::MAX, bin_ns, &mut self.rates);
    }

    pub(super) fn on_sample(&mut self) {
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

    /// Byte balance of every flow and every switch at the current time.
    pub fn conservation(&self) -> (Vec<FlowBalance>, Vec<SwitchBalance>) {
        let mut in_flight = vec![0u64; self.flows.len()];
        for p in self.pkts.live() {
            if p.on_wire && (p.flow as usize) < in_flight.len() {
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
                held: held_bytes(s, &self.ports),
            })
            .collect();
        (flows, switches)
    }
}

/// Bytes held in a switch: everything queued at its ports, shared pool and headroom alike.
fn held_bytes(sw: &Switch, ports: &[Port]) -> u64 {
    let p = sw.first_port as usize..(sw.first_port + sw.ports) as usize;
    ports[p].iter().map(|p| p.queued_bytes()).sum()
}
