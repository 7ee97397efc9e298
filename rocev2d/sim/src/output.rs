//! Results of a run and their CSV form.
//!
//! Files written by [`Report::write_csv`] (one directory per run):
//! * `flows.csv`: per flow: endpoints, size, class, start, finish, FCT, goodput, retransmits,
//!   timeouts, CE-marked data packets, status, its byte balance, the responder's out-of-sequence
//!   packets and NAKs, and its IOFD-deflected and DVL-isolated packet-hops;
//! * `ports.csv`: per port at the end: every counter of `link::PortStats` (IOFD and DVL
//!   included);
//! * `switches.csv`: per switch: bytes received, sent, dropped, no-route drops, peak buffer,
//!   and its ports' counters summed (`ports_*`: IOFD and DVL per switch);
//! * `queues.csv`: per sampled port over time: queue bytes and cumulative ECN/drop/PAUSE/tx;
//! * `rates.csv`: per traced flow and bin: wire bytes sent and the rate in Gbit/s;
//! * `vps.csv`: per MP-RDMA flow, side (`tx` sender, `rx` receiver) and virtual path (UDP
//!   source port): packets, ECN marks and out-of-order counts (`mprdma::VpCounters`);
//! * `summary.csv`: one row: counts, FCT percentiles, totals.
//!
//! Rows are written in index order, so the files are as deterministic as the run.

use crate::link::PortStats;
use crate::sim::{PortSample, RateSample, RunStats, Sim};
use crate::switch_node::SwitchStats;
use crate::topology::NodeKind;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

/// One flow's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowRecord {
    /// Index.
    pub id: u32,
    /// Sender.
    pub src: u32,
    /// Receiver.
    pub dst: u32,
    /// Bytes asked for.
    pub size: u64,
    /// Workload class label.
    pub class: u8,
    /// Start, ns.
    pub start_ns: u64,
    /// Finish, ns (acknowledged).
    pub finish_ns: Option<u64>,
    /// Bytes acknowledged.
    pub acked: u64,
    /// Requester retransmissions.
    pub retransmits: u64,
    /// Requester timeouts.
    pub timeouts: u64,
    /// Data packets received with CE.
    pub ce_received: u64,
    /// `ok`, `running`, `not_started` or the libibverbs status name of the error.
    pub status: String,
    /// Frame bytes sent by NICs (both directions).
    pub sent_bytes: u64,
    /// Frame bytes delivered.
    pub delivered_bytes: u64,
    /// Frame bytes dropped or lost.
    pub dropped_bytes: u64,
    /// Packets the responder received out of sequence.
    pub rx_out_of_sequence: u64,
    /// NAKs the responder sent.
    pub rx_naks_sent: u64,
    /// Packet-hops IOFD deflected.
    pub deflected: u64,
    /// Packet-hops queued in a DVL congested-flow queue.
    pub cfq_packets: u64,
}

impl FlowRecord {
    /// Flow completion time, ns.
    pub fn fct_ns(&self) -> Option<u64> {
        self.finish_ns.map(|f| f - self.start_ns)
    }
    /// Goodput (acknowledged payload over the time the flow ran until `end_ns` or finish),
    /// Gbit/s.
    pub fn goodput_gbps(&self, end_ns: u64) -> f64 {
        let t = self
            .finish_ns
            .unwrap_or(end_ns)
            .saturating_sub(self.start_ns);
        if t == 0 {
            0.0
        } else {
            self.acked as f64 * 8.0 / t as f64
        }
    }
}

/// One port's final counters.
#[derive(Debug, Clone, PartialEq)]
pub struct PortRecord {
    /// Port id.
    pub port: u32,
    /// Owner node.
    pub node: u32,
    /// Node at the other end.
    pub peer_node: u32,
    /// `host`, `tier1`, `tier2`, `tier3`.
    pub kind: &'static str,
    /// Counters.
    pub stats: PortStats,
}

/// One switch's final counters, with its ports' IOFD and DVL counters summed.
#[derive(Debug, Clone, PartialEq)]
pub struct SwitchRecord {
    /// Node id.
    pub node: u32,
    /// `tier1`, `tier2`, `tier3`.
    pub kind: &'static str,
    /// Buffer counters.
    pub stats: SwitchStats,
    /// The ports' counters summed (queue and PFC fields summed too; `max_queue_bytes` is the
    /// largest).
    pub ports: PortStats,
}

/// Everything a run produced.
#[derive(Debug, Clone)]
pub struct Report {
    /// Scenario name.
    pub name: String,
    /// Seed.
    pub seed: u64,
    /// Simulated time, ns.
    pub end_ns: u64,
    /// Flows started (in start order).
    pub flows: Vec<FlowRecord>,
    /// Ports.
    pub ports: Vec<PortRecord>,
    /// Switches.
    pub switches: Vec<SwitchRecord>,
    /// Queue samples.
    pub samples: Vec<PortSample>,
    /// Rate samples.
    pub rates: Vec<RateSample>,
    /// Rate bin width, ns.
    pub rate_bin_ns: u64,
    /// Run counters.
    pub stats: RunStats,
    /// Per-VP counters of multipath flows.
    pub vps: Vec<VpRecord>,
}

/// One virtual path of one MP-RDMA flow (seed 001 §3.1), as seen by one side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VpRecord {
    /// Flow index.
    pub flow: u32,
    /// `true` for the sender's counters, `false` for the receiver's.
    pub sender: bool,
    /// The VP (UDP source port of the data packets).
    pub vp: u16,
    /// The counters.
    pub counters: rocev2_core::mprdma::VpCounters,
}

/// Percentile `p` (0–100) of sorted values by the nearest-rank method.
pub fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

impl Report {
    /// Collects the results of `sim` (call [`Sim::finish`] first).
    pub fn from_sim(sim: &Sim) -> Report {
        let end = sim.now_ns();
        let flows = sim
            .flows()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let status = match (f.failed, f.finish_ns) {
                    (Some(s), _) => format!("{s:?}"),
                    (None, Some(_)) => "ok".into(),
                    (None, None) if f.spec.start_ns <= end && f.sent_bytes > 0 => "running".into(),
                    _ => "not_started".into(),
                };
                FlowRecord {
                    id: i as u32,
                    src: f.spec.src,
                    dst: f.spec.dst,
                    size: f.spec.size,
                    class: f.spec.class,
                    start_ns: f.spec.start_ns,
                    finish_ns: f.finish_ns,
                    acked: f.acked,
                    retransmits: f.retransmits,
                    timeouts: f.timeouts,
                    ce_received: f.ce_received,
                    status,
                    sent_bytes: f.sent_bytes,
                    delivered_bytes: f.delivered_bytes,
                    dropped_bytes: f.dropped_bytes,
                    rx_out_of_sequence: f.rx_out_of_sequence,
                    rx_naks_sent: f.rx_naks_sent,
                    deflected: f.deflected,
                    cfq_packets: f.cfq_packets,
                }
            })
            .collect();
        let ports = sim
            .ports()
            .iter()
            .enumerate()
            .map(|(i, p)| PortRecord {
                port: i as u32,
                node: p.node,
                peer_node: sim.ports()[p.peer as usize].node,
                kind: match sim.node_kind(p.node) {
                    NodeKind::Host => "host",
                    NodeKind::Switch { tier: 1 } => "tier1",
                    NodeKind::Switch { tier: 2 } => "tier2",
                    NodeKind::Switch { .. } => "tier3",
                },
                stats: p.stats,
            })
            .collect::<Vec<PortRecord>>();
        let switches = sim
            .switches()
            .iter()
            .map(|sw| {
                let mine = sw.first_port as usize..(sw.first_port + sw.ports) as usize;
                SwitchRecord {
                    node: sw.node,
                    kind: ports[sw.first_port as usize].kind,
                    stats: sw.stats,
                    ports: ports[mine]
                        .iter()
                        .fold(PortStats::default(), |a, p| a.sum(&p.stats)),
                }
            })
            .collect();
        let mut vps = Vec::new();
        for (i, f) in sim.flows().iter().enumerate() {
            let i = i as u32;
            for (sender, snap) in [
                (true, f.mp_tx.clone().or_else(|| sim.mp_snapshot(i, true))),
                (false, f.mp_rx.clone().or_else(|| sim.mp_snapshot(i, false))),
            ] {
                let Some(snap) = snap else { continue };
                let side = if sender { snap.tx_vps } else { snap.rx_vps };
                vps.extend(side.into_iter().map(|(vp, counters)| VpRecord {
                    flow: i,
                    sender,
                    vp,
                    counters,
                }));
            }
        }
        Report {
            vps,
            name: sim.scenario().name.clone(),
            seed: sim.scenario().seed,
            end_ns: end,
            flows,
            ports,
            switches,
            samples: sim.port_samples().to_vec(),
            rates: sim.rate_samples().to_vec(),
            rate_bin_ns: sim.scenario().output.rate_bin_ns.max(1),
            stats: sim.stats(),
        }
    }

    /// Sorted FCTs of the finished flows that `keep` selects.
    pub fn fcts(&self, keep: impl Fn(&FlowRecord) -> bool) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .flows
            .iter()
            .filter(|f| keep(f))
            .filter_map(FlowRecord::fct_ns)
            .collect();
        v.sort_unstable();
        v
    }

    /// The summary as `key,value` lines.
    pub fn summary(&self) -> Vec<(String, String)> {
        let all = self.fcts(|_| true);
        let done = all.len();
        let total: u64 = self.ports.iter().map(|p| p.stats.drops).sum();
        let lost: u64 = self.ports.iter().map(|p| p.stats.lost).sum();
        let marks: u64 = self.ports.iter().map(|p| p.stats.ecn_marks).sum();
        let pauses: u64 = self.ports.iter().map(|p| p.stats.pause_sent).sum();
        let deflected: u64 = self.ports.iter().map(|p| p.stats.iofd_deflected).sum();
        let isolated: u64 = self.ports.iter().map(|p| p.stats.dvl_isolated).sum();
        let opt = |v: Option<u64>| v.map_or(String::from(""), |x| x.to_string());
        vec![
            ("name".into(), self.name.clone()),
            ("seed".into(), self.seed.to_string()),
            ("end_ns".into(), self.end_ns.to_string()),
            ("flows".into(), self.flows.len().to_string()),
            ("flows_finished".into(), done.to_string()),
            (
                "flows_failed".into(),
                self.flows
                    .iter()
                    .filter(|f| !matches!(f.status.as_str(), "ok" | "running" | "not_started"))
                    .count()
                    .to_string(),
            ),
            ("fct_p50_ns".into(), opt(percentile(&all, 50.0))),
            ("fct_p99_ns".into(), opt(percentile(&all, 99.0))),
            ("drops".into(), total.to_string()),
            ("lost".into(), lost.to_string()),
            ("ecn_marks".into(), marks.to_string()),
            ("pause_sent".into(), pauses.to_string()),
            ("iofd_deflected".into(), deflected.to_string()),
            ("dvl_isolated".into(), isolated.to_string()),
            ("events".into(), self.stats.events.to_string()),
            ("packet_hops".into(), self.stats.packet_hops.to_string()),
            ("frames_tx".into(), self.stats.frames_tx.to_string()),
            (
                "frames_rejected".into(),
                self.stats.frames_rejected.to_string(),
            ),
            ("unattributed".into(), self.stats.unattributed.to_string()),
        ]
    }

    /// Writes the CSV files into `dir` (created if needed) and returns their paths.
    ///
    /// # Errors
    /// Any IO error.
    pub fn write_csv(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir)?;
        let mut out = Vec::new();
        let mut put = |name: &str, text: String| -> io::Result<()> {
            let p = dir.join(name);
            std::fs::write(&p, text)?;
            out.push(p);
            Ok(())
        };

        let mut s = String::from(
            "id,src,dst,size_bytes,class,start_ns,finish_ns,fct_ns,goodput_gbps,acked_bytes,\
             retransmits,timeouts,ce_received,status,sent_bytes,delivered_bytes,dropped_bytes,\
             rx_out_of_sequence,rx_naks_sent,deflected,cfq_packets\n",
        );
        for f in &self.flows {
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{},{:.6},{},{},{},{},{},{},{},{},{},{},{},{}",
                f.id,
                f.src,
                f.dst,
                f.size,
                f.class,
                f.start_ns,
                f.finish_ns.map_or(String::new(), |x| x.to_string()),
                f.fct_ns().map_or(String::new(), |x| x.to_string()),
                f.goodput_gbps(self.end_ns),
                f.acked,
                f.retransmits,
                f.timeouts,
                f.ce_received,
                f.status,
                f.sent_bytes,
                f.delivered_bytes,
                f.dropped_bytes,
                f.rx_out_of_sequence,
                f.rx_naks_sent,
                f.deflected,
                f.cfq_packets
            );
        }
        put("flows.csv", s)?;

        let mut s = format!("port,node,peer_node,kind,{}\n", PortStats::CSV_HEADER);
        for p in &self.ports {
            let _ = writeln!(
                s,
                "{},{},{},{},{}",
                p.port,
                p.node,
                p.peer_node,
                p.kind,
                p.stats.csv()
            );
        }
        put("ports.csv", s)?;

        // The ports' sums are prefixed `ports_` so no column name repeats the switch's own.
        let mut s =
            String::from("node,kind,rx_bytes,tx_bytes,drop_bytes,no_route,max_buffer_bytes");
        for c in PortStats::CSV_HEADER.split(',') {
            let _ = write!(s, ",ports_{c}");
        }
        s.push('\n');
        for w in &self.switches {
            let t = &w.stats;
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{}",
                w.node,
                w.kind,
                t.rx_bytes,
                t.tx_bytes,
                t.drop_bytes,
                t.no_route,
                t.max_buffer_bytes,
                w.ports.csv()
            );
        }
        put("switches.csv", s)?;

        let mut s = String::from("time_ns,port,queue_bytes,ecn_marks,drops,pause_sent,tx_bytes\n");
        for q in &self.samples {
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{}",
                q.time_ns, q.port, q.queue_bytes, q.ecn_marks, q.drops, q.pause_sent, q.tx_bytes
            );
        }
        put("queues.csv", s)?;

        let mut s = String::from("flow,time_ns,wire_bytes,rate_gbps\n");
        for r in &self.rates {
            let _ = writeln!(
                s,
                "{},{},{},{:.6}",
                r.flow,
                r.time_ns,
                r.wire_bytes,
                r.wire_bytes as f64 * 8.0 / self.rate_bin_ns as f64
            );
        }
        put("rates.csv", s)?;

        let mut s = String::from("flow,side,vp,packets,ecn_marks,ood\n");
        for v in &self.vps {
            let c = &v.counters;
            let side = if v.sender { "tx" } else { "rx" };
            let _ = writeln!(
                s,
                "{},{side},{},{},{},{}",
                v.flow, v.vp, c.packets, c.ecn_marks, c.ood
            );
        }
        put("vps.csv", s)?;

        let sum = self.summary();
        let s = format!(
            "{}\n{}\n",
            sum.iter()
                .map(|(k, _)| k.as_str())
                .collect::<Vec<_>>()
                .join(","),
            sum.iter()
                .map(|(_, v)| v.as_str())
                .collect::<Vec<_>>()
                .join(",")
        );
        put("summary.csv", s)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&[7], 99.0), Some(7));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
