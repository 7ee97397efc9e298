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
use crate::link::{PRIO_CTRL, PRIO_DATA, Queued, wire_bytes};
use crate::routing::five_tuple_hash;
use rocev2_core::time::Instant;
use rocev2_core::wire::frame::{Ecn, Frame};
use rocev2_core::wire::{IpRepr, Opcode, Operation, Qpn, ip};
use rocev2_ebpf_common::iofd::Position;

impl Sim {
    pub(super) fn host_receive(&mut self, h: u32, pkt: PktId) {
        let now = Instant::from_nanos(self.now);
        let (p, fr) = self.pkts.parts_mut(pkt);
        if p.ce {
            // A switch's mark (`apply_policy`) reaches the frame here, once, rather than at the
            // switch, where it would be the only touch of the frame's bytes. The ICRC masks the
            // TOS byte (RoCEv2 Annex A17.8), so the frame stays valid. (The engine never emits
            // CE, so a frame that carries it was marked by a switch.)
            let marked = ip::mark_ce(&mut fr.buf[..p.len as usize]);
            debug_assert!(marked, "classified frames are IPv4");
        }
        let (p, fr) = (&*p, &*fr);
        if let Some(f) = self.flows.get_mut(p.flow as usize) {
            f.delivered_bytes += p.len as u64;
            if p.ce && p.prio != PRIO_CTRL {
                f.ce_received += 1;
            }
        }
        let host = &mut self.hosts[h as usize];
        if host
            .ep
            .handle_frame(now, &fr.buf[..p.len as usize], &mut host.mem)
            .is_err()
        {
            self.stats.frames_rejected += 1;
        }
        self.pkts.release(pkt);
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
                    if let Some(q) = pt.dequeue(prio) {
                        self.host_transmit(h, q.pkt);
                    }
                    break;
                }
                if !pt.queues[PRIO_DATA as usize].is_empty() {
                    break; // data is paused; pull nothing more behind it
                }
                let id = self.pkts.alloc();
                let host = &mut self.hosts[h as usize];
                let now = Instant::from_nanos(self.now);
                let (_, fr) = self.pkts.parts_mut(id);
                match host.ep.poll_transmit(now, &mut host.mem, &mut fr.buf) {
                    None => {
                        self.pkts.release(id);
                        break;
                    }
                    Some(n) => {
                        self.stats.frames_tx += 1;
                        self.classify(id, n);
                        let p = &self.pkts[id];
                        let (prio, len) = (p.prio as usize, p.len);
                        let pt = &mut self.ports[port as usize];
                        pt.enqueue(prio, Queued::at_host(id, len));
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
        let host = &mut self.hosts[h as usize];
        let (p, fr) = self.pkts.parts_mut(pkt);
        fr.ip_id = host.ip_id;
        host.ip_id = host.ip_id.wrapping_add(1);
        p.on_wire = true;
        let (flow, len, prio) = (p.flow, p.len, p.prio);
        if let Some(f) = self.flows.get_mut(flow as usize) {
            f.sent_bytes += len as u64;
            if prio == PRIO_DATA && f.spec.src == h {
                let bin_ns = self.scenario.output.rate_bin_ns.max(1);
                if (flow as usize) < self.scenario.output.trace_flows as usize {
                    f.rate.add(
                        flow,
                        self.now,
                        wire_bytes(len) as u64,
                        bin_ns,
                        &mut self.rates,
                    );
                }
            }
        }
        self.transmit(h as PortId, pkt, len, true);
    }

    /// Reads a frame the engine produced: destination, 5-tuple hash, priority, ECN, flow.
    fn classify(&mut self, id: PktId, n: usize) {
        let (p, fr) = self.pkts.parts_mut(id);
        p.len = n as u32;
        p.live = true;
        p.on_wire = false;
        match Headers::read(&fr.buf[..n]) {
            Some(h) => {
                fr.src_ip = h.src;
                fr.dst_ip = h.dst;
                fr.sport = h.sport;
                fr.opcode = h.opcode.0;
                fr.bth_offset = h.bth_offset;
                fr.dest_qp = h.dest_qp.value();
                fr.message_bytes = h.message_bytes;
                p.dst = ip_host(h.dst);
                p.hash = five_tuple_hash(h.src, h.dst, h.sport);
                p.prio = if is_control(h.opcode) {
                    PRIO_CTRL
                } else {
                    PRIO_DATA
                };
                p.ect = h.ecn != Ecn::NotEct;
                p.ce = h.ecn == Ecn::Ce;
                p.flow = self
                    .qp_flow
                    .get(&qp_key(p.dst, h.dest_qp))
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
                fr.opcode = u8::MAX;
                fr.bth_offset = 0;
                (fr.src_ip, fr.dst_ip, fr.sport, fr.message_bytes) = ([0; 4], [0; 4], 0, None);
            }
        }
    }
}

/// The control class: RC ACK/NAK, atomic ACK and CNP travel at [`PRIO_CTRL`] (seed 000 §VI-A:
/// "high-priority queues only for ACKs").
fn is_control(op: Opcode) -> bool {
    op == Opcode::rc(Operation::Acknowledge)
        || op == Opcode::rc(Operation::AtomicAcknowledge)
        || op == Opcode::CNP
}

/// What the model reads from a frame once, as it leaves its host: switches decide on these
/// and never parse again.
struct Headers {
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    ecn: Ecn,
    opcode: Opcode,
    dest_qp: Qpn,
    /// The message's length when the packet tells (RETH, or a single-packet message), as IOFD
    /// wants it.
    message_bytes: Option<u64>,
    /// Where the BTH starts in the frame.
    bth_offset: u32,
}

impl Headers {
    /// The headers of an IPv4 RoCEv2 frame; `None` for anything the engine should not emit.
    /// Reads the few fields it needs through the frame's views rather than parsing every
    /// header into a `FrameRepr` (this runs once per frame the engine sends).
    fn read(frame: &[u8]) -> Option<Headers> {
        let fr = Frame::new_checked(frame).ok()?;
        let IpRepr::V4 { src, dst, ecn, .. } = fr.ip_repr() else {
            return None;
        };
        let (ip_at, _) = ip::ip_header(frame)?;
        let roce = fr.transport();
        let bth = roce.bth();
        let opcode = bth.opcode();
        let op = opcode.0;
        let message_bytes = match roce.reth() {
            Some(r) if Position::has_reth(op) => Some(r.dma_len() as u64),
            _ if Position::of_opcode(op) == Position::Only => Some(fr.payload().len() as u64),
            _ => None,
        };
        Some(Headers {
            src: src.octets(),
            dst: dst.octets(),
            sport: fr.udp_repr().src_port,
            ecn,
            opcode,
            dest_qp: bth.dest_qp(),
            message_bytes,
            bth_offset: (ip_at + fr.ip_header().len() + fr.udp_header().len()) as u32,
        })
    }
}
