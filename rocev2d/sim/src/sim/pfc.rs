//! Priority flow control (IEEE 802.1Qbb) between neighbours: a switch ingress above its XOFF
//! threshold sends PAUSE upstream, at or below XON RESUME; a paused egress stops serving that
//! priority, and a host NIC tells the QPs behind it (DCQCN+ holds recovery while paused, seed
//! 002 §IV-B). The thresholds and headroom are set in `build.rs` and used in `switch_path.rs`.
//!
//! Deviations: as in `switch_node.rs`: XOFF/XON state rather than pause quanta; a PFC frame takes the
//! propagation delay plus a minimum frame's serialisation and does not wait for the frame in
//! progress.

use super::Sim;
use crate::event::{Event, PortId};
use crate::link::Port;
use crate::scenario::Scenario;

impl Sim {
    pub(super) fn on_pfc(&mut self, port: PortId, prio: usize, pause: bool) {
        let now = self.now;
        let pt = &mut self.ports[port as usize];
        let changed = pt.pfc_received(prio, pause, now);
        let is_paused = pt.paused.iter().any(|&p| p);
        let (node, kick) = (pt.node, !pause && !pt.txdone_pending);
        if changed && node < self.topo.hosts {
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
    pub(super) fn send_pfc(&mut self, port: PortId, prio: usize, pause: bool) {
        let pt = &mut self.ports[port as usize];
        pt.pfc_sent(prio, pause);
        let (delay, up) = (pt.control_delay_ns(), pt.peer);
        self.q.push(
            self.now + delay,
            Event::Pfc {
                port: up,
                prio: prio as u8,
                pause,
            },
        );
    }
}

/// Headroom of one ingress priority: configured, or 2 · (rate · delay) + 2 maximum frames.
pub(super) fn headroom_bytes(s: &Scenario, ingress: &Port) -> u64 {
    s.switch.pfc.headroom_bytes.unwrap_or_else(|| {
        let bdp =
            ingress.link.rate.as_bps() as u128 * ingress.link.delay_ns as u128 / 8_000_000_000;
        2 * bdp as u64 + 2 * (s.host.mtu as u64 + 128)
    })
}
