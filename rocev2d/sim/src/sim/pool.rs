//! The packet store: every packet in the network is a slot of one vector, reused through a free
//! list, so frame buffers are allocated once per slot rather than once per packet. A packet
//! carries its frame bytes plus what the model read from them once at the sender (see
//! `host_path.rs`), so switches never re-parse.
//!
//! Deviations: none.

use super::Sim;
use crate::event::{PktId, PortId};

/// "No flow": a packet the model could not attribute (never expected).
pub const NO_FLOW: u32 = u32::MAX;

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
    /// BTH opcode byte, as the shared IOFD code takes it.
    pub opcode: u8,
    /// Where the BTH starts in `buf` (IOFD spends deflection tokens there).
    pub bth_offset: u32,
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

impl Sim {
    pub(super) fn alloc(&mut self) -> PktId {
        match self.free.pop() {
            Some(id) => id,
            None => {
                self.pkts.push(Packet::default());
                self.pkts.len() as PktId - 1
            }
        }
    }

    pub(super) fn release(&mut self, id: PktId) {
        let p = &mut self.pkts[id as usize];
        p.live = false;
        p.on_wire = false;
        self.free.push(id);
    }
}
