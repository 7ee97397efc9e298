//! A packet through a switch: ECMP route, IOFD deflection (`iofd_dvl.rs`), shared-buffer
//! admission with PFC headroom, DVL queue choice, RED/ECN at enqueue or dequeue, the egress
//! queues, and the start of the next transmission.
//!
//! Source: `switch_node.rs` for the switch model and its sources (seed 002 §II-B.1 for RED/ECN,
//! seed 003 slide 9 for the buffer fill order).
//!
//! Deviations: those of `switch_node.rs`.

use super::Sim;
use super::pfc::headroom_bytes;
use crate::event::{Event, PktId, PortId};
use crate::link::{PRIO_CTRL, Queued};
use crate::routing::ecmp_pick;
use crate::switch_node::MarkAt;
use rand_core::RngCore;
use rocev2_ebpf_common::red::Verdict;

impl Sim {
    pub(super) fn switch_receive(&mut self, sw: u32, ingress: PortId, pkt: PktId) {
        let (dst, hash, prio, len, ect) = {
            let p = &self.pkts[pkt];
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
        // The control class is always admitted (reserved space, see switch_node.rs).
        let in_headroom = if s.pool_fits(len) || prio == PRIO_CTRL as usize {
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
            s.pool_take(len);
        }
        let (pfc, xoff) = (s.pfc, s.xoff);
        self.pkts[pkt].prio = qprio as u8;
        let ing = &mut self.ports[ingress as usize];
        ing.ingress_add(prio, len, in_headroom);
        if pfc && !ing.pause_sent[prio] && ing.ingress_bytes[prio] > xoff {
            self.send_pfc(ingress, prio, true);
        }
        let o = &mut self.ports[out as usize];
        o.enqueue(
            qprio,
            Queued {
                pkt,
                len: len as u32,
                ingress,
                ingress_prio: prio as u8,
                in_headroom,
            },
        );
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
            // The frame's bytes follow at delivery (`host_receive`).
            self.pkts[pkt].ce = true;
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

    pub(super) fn switch_start(&mut self, port: PortId) {
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
        let Some(q) = pt.dequeue(prio) else {
            return;
        };
        let (pkt, len, ingress, iprio, in_headroom) = (
            q.pkt,
            q.len as u64,
            q.ingress,
            q.ingress_prio as usize,
            q.in_headroom,
        );
        let sw = (pt.node - self.topo.hosts) as usize;
        let s = &mut self.switches[sw];
        s.stats.tx_bytes += len;
        if !in_headroom {
            s.pool_release(len);
        }
        let (pfc, xon) = (s.pfc, s.xon);
        let ing = &mut self.ports[ingress as usize];
        ing.ingress_remove(iprio, len, in_headroom);
        if pfc && ing.pause_sent[iprio] && ing.ingress_bytes[iprio] <= xon {
            self.send_pfc(ingress, iprio, false);
        }
        if self.switches[sw].mark_at == MarkAt::Dequeue {
            // Judged on the queue it leaves behind; a Drop verdict needs enqueue marking.
            let ect = self.pkts[pkt].ect;
            let _ = self.apply_policy(sw as u32, port, pkt, prio, ect);
        }
        let more = self.ports[port as usize].next_prio().is_some();
        self.transmit(port, pkt, q.len, more);
    }
}
