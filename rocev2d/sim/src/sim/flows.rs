//! A workload flow: one RC QP pair brought up at its start, WRITEs posted up to the host's
//! work-request depth, completions polled from the host's CQ, and both QPs torn down (their
//! counters kept) when the flow finishes or fails.
//!
//! Source: IBA §10.3 (QP state machine) for the bring-up, with the same attributes as
//! `rocev2_core::testing::Pair::connect`.
//!
//! Deviations: one flow is one WRITE stream from source to destination; no SENDs or READs.

use super::Sim;
use super::accounting::RateBin;
use super::build::host_line_rate;
use crate::dist;
use crate::event::Event;
use crate::host::{HostCc, host_ip};
use crate::workload::FlowSpec;
use rocev2_core::cq::{WcOpcode, WcStatus};
use rocev2_core::mr::AccessFlags;
use rocev2_core::qp::{
    ConnectAttr, MpSnapshot, Path, QpAttr, QpConfig, QpCounters, QpState, SendOp, SendWr, Sge,
};
use rocev2_core::time::Instant;
use rocev2_core::wire::Qpn;
use rocev2_core::wire::frame::Ecn;
use std::net::{IpAddr, Ipv4Addr};

/// Per-flow state and results.
#[derive(Debug, Clone)]
pub struct Flow {
    /// What was asked for.
    pub spec: FlowSpec,
    /// UDP source port of the data direction (its ECMP entropy).
    pub sport: u16,
    pub(super) qp_src: Option<Qpn>,
    pub(super) qp_dst: Option<Qpn>,
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
    /// The open bin of the flow's rate trace.
    pub(super) rate: RateBin,
}

impl Flow {
    /// A flow not started yet, whose data leaves from UDP source port `sport`.
    pub(super) fn new(spec: FlowSpec, sport: u16) -> Flow {
        Flow {
            spec,
            sport,
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
            rate: RateBin::default(),
        }
    }
}

/// The key of QP `qpn` on host `host` in [`Sim`]'s QP → flow map.
pub(super) fn qp_key(host: u32, qpn: Qpn) -> u64 {
    (host as u64) << 32 | qpn.value() as u64
}

impl Sim {
    pub(super) fn on_flow_start(&mut self, f: u32) {
        let next = f as usize + 1;
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
            cfg.cc = hs.qp_cc(host_line_rate(&self.ports, h));
            cfg.iofd_tokens = hs.iofd.map(|t| t.tokens());
            if hs.cc == HostCc::MpRdma {
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
            let attr = ConnectAttr {
                path,
                mtu: self.mtu,
                dest_qpn: dest,
                rq_psn,
                sq_psn,
                rd_atomic: 1,
                min_rnr_timer: 1,
                timeout: hs.timeout,
                retry_cnt: hs.retry_cnt,
                rnr_retry: 7,
                peer_ext: hs.cc.peer_ext(),
            };
            let host = &mut self.hosts[h as usize];
            host.ep.connect_qp(qpn, &attr, now, &mut host.mem).ok()?;
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
            // Dart's look-ahead (seed 000 §III-D): the flow's first message announces its
            // incast group; the core sends it only to a peer that takes it.
            let wr = match fl.spec.group.and_then(|g| self.groups.get(g as usize)) {
                Some(members) if off == 0 => wr.lookahead(members.len() as u16, members),
                _ => wr,
            };
            if host.ep.post_send(qs, wr).is_err() {
                fl.failed = Some(WcStatus::GeneralErr);
                return;
            }
            fl.posted += len as u64;
            fl.wrs_out += 1;
        }
    }

    pub(super) fn poll_completions(&mut self, h: u32) {
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
        self.close_rate_bin(f);
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
}

fn mac(h: u32) -> [u8; 6] {
    let [a, b, c, d] = h.to_be_bytes();
    [0x02, 0, a, b, c, d]
}
