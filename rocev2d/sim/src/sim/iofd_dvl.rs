//! The two flow-steering decisions of a switch, both computed by the same code the eBPF switch
//! programs run (`rocev2_ebpf_common`): IOFD deflection of short messages (seed 000 §IV,
//! `iofd::decide`) and DVL isolation of congested flows into their own queue, with its
//! notifications upstream (seed 003 slides 10–12, `dvl::decide`).
//!
//! Deviations: those of `switch_node.rs` (one table per port; release only with the CFQ empty; the
//! notification goes upstream when the egress isolates, as the model has no ingress queues).

use super::Sim;
use crate::event::{Event, PktId, PortId};
use crate::link::{PRIO_CFQ, PRIO_DATA};
use rand_core::RngCore;
use rocev2_core::wire::BthPacket;
use rocev2_ebpf_common::dvl::{self, Cft, Class, FlowKey};
use rocev2_ebpf_common::iofd::{self, Action, MessageKey, Position, Refusal};

impl Sim {
    /// IOFD (seed 000 §IV, `iofd::decide`) at the egress port `chosen` that ECMP picked for
    /// data packet `pkt`: returns the port it leaves by. The alternate for a new deflection is
    /// drawn among the other equal-cost next hops; a deflected packet loses one token.
    pub(super) fn deflect(&mut self, sw: u32, chosen: PortId, pkt: PktId) -> PortId {
        let Some(cfg) = self.ports[chosen as usize].iofd.as_deref().map(|(c, _)| *c) else {
            return chosen;
        };
        let position = Position::of_opcode(self.pkts.frame(pkt).opcode);
        let dst = self.pkts[pkt].dst;
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
        let p = self.pkts.frame(pkt);
        let bth = p.bth_offset as usize;
        let tokens = BthPacket::new_unchecked(&p.buf[bth..]).deflection_tokens();
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
        let Some((_, dft)) = pt.iofd.as_deref_mut() else {
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
        let (p, fr) = self.pkts.parts_mut(pkt);
        // BTH Resv6a; the ICRC masks its byte and the UDP checksum is 0 (IPv4).
        if tokens > 0 {
            BthPacket::new_unchecked(&mut fr.buf[bth..]).set_deflection_tokens(tokens - 1);
        }
        if let Some(f) = self.flows.get_mut(p.flow as usize) {
            f.deflected += 1;
        }
        port
    }

    /// DVL (seed 003, `dvl::decide`) at egress `out` for data packet `pkt` that came in on
    /// `ingress`: returns the queue it joins, and notifies the previous hop when the flow is
    /// isolated here (or, while it stays congested, again every half hold time).
    pub(super) fn dvl_class(&mut self, out: PortId, ingress: PortId, pkt: PktId) -> usize {
        let now = self.now;
        let pt = &mut self.ports[out as usize];
        let (normal, cfq) = (
            pt.queue_bytes[PRIO_DATA as usize],
            pt.queue_bytes[PRIO_CFQ as usize],
        );
        let Some((cfg, cft)) = pt.dvl.as_deref_mut() else {
            return PRIO_DATA as usize;
        };
        let fr = self.pkts.frame(pkt);
        let (src, dst, sport, flow) = (fr.src_ip, fr.dst_ip, fr.sport, self.pkts[pkt].flow);
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
        let delay = self.ports[ingress as usize].control_delay_ns();
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
    pub(super) fn on_dvl_notify(&mut self, port: PortId, src: u32, dst: u32, sport: u16) {
        let now = self.now;
        let pt = &mut self.ports[port as usize];
        let Some((_, cft)) = pt.dvl.as_deref_mut() else {
            return;
        };
        let key = flow_key(src.to_be_bytes(), dst.to_be_bytes(), sport, port);
        pt.stats.dvl_notify_received += 1;
        cft.remove(&key);
        if !cft.insert(&key, now) {
            pt.stats.dvl_table_full += 1;
        }
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
