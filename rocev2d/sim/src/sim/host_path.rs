//! The host NIC around the engine: pull frames from `poll_transmit` when the port is free,
//! read each frame once (destination, 5-tuple, priority, ECN, flow), serialise it, hand
//! arriving frames to `handle_frame`, and turn the engine's deadlines into `HostWake` events.
//!
//! Source: `host.rs` for the NIC model (seed 000 §VI-A for the control priority).
//!
//! Deviations: those of `host.rs`.

use super::flows::qp_key;
use super::{NO_FLOW, Sim};
use crate::event::{Event, PktId, PortId};
use crate::host::ip_host;
use crate::link::{PRIO_CTRL, PRIO_DATA, wire_bytes};
use crate::routing::five_tuple_hash;
use rocev2_core::time::Instant;
use rocev2_core::wire::frame::Frame;
use rocev2_ebpf_common::iofd::Position;

impl Sim {
    pub(super) fn host_receive(&mut self, h: u32, pkt: PktId) {
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

    pub(super) fn on_wake(&mut self, h: u32) {
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
    pub(super) fn host_kick(&mut self, h: u32) {
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
}
