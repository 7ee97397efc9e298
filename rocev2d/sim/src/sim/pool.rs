//! The packet store: every packet in the network is a slot of two parallel vectors, reused
//! through a free list, so frame buffers are allocated once per slot rather than once per
//! packet. A packet carries its frame bytes plus what the model read from them once at the
//! sender (see `host_path.rs`), so switches never re-parse; what every hop reads is apart from
//! the rest, in a dense vector of its own.
//!
//! Deviations: none.

use crate::event::PktId;
use std::ops::{Index, IndexMut};

/// "No flow": a packet the model could not attribute (never expected).
pub const NO_FLOW: u32 = u32::MAX;

/// A packet in the network: what a switch reads at every hop, in 32 bytes, so that picking up
/// a packet that arrives costs one cache line. The frame bytes and the fields only the sender,
/// IOFD and DVL read are in [`PacketFrame`]; what a queued packet needs to leave its switch is
/// in its queue entry (`link::Queued`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Packet {
    /// 5-tuple hash.
    pub hash: u64,
    /// Frame length without FCS.
    pub len: u32,
    /// Flow it belongs to, or [`NO_FLOW`].
    pub flow: u32,
    /// Destination host.
    pub dst: u32,
    /// Priority.
    pub prio: u8,
    /// ECN-capable (ECT(0), ECT(1) or CE).
    pub ect: bool,
    /// Carries CE. A switch that marks sets only this; the frame's IP header is rewritten
    /// when the packet reaches its host (`host_path.rs`), so no switch touches frame bytes for
    /// a mark.
    pub ce: bool,
    /// Has left its host NIC.
    pub on_wire: bool,
    /// Slot in use.
    pub live: bool,
}

/// A packet's frame bytes and what the model read from them once at the sender beyond
/// [`Packet`]'s fields.
#[derive(Debug, Clone, Default)]
pub struct PacketFrame {
    /// Frame bytes (reused between packets; `len` of them are valid).
    pub buf: Vec<u8>,
    /// IPv4 source.
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
    /// The IPv4 identification its NIC gave it when it left (see [`crate::host::Host::ip_id`]).
    pub ip_id: u16,
}

/// Every packet in the network, indexed by [`PktId`]; released slots are reused (with their
/// buffers) before new ones are made.
#[derive(Debug, Default)]
pub(super) struct PacketPool {
    slots: Vec<Packet>,
    /// `frames[id]` belongs to `slots[id]`.
    frames: Vec<PacketFrame>,
    free: Vec<PktId>,
}

impl PacketPool {
    /// A slot for a new packet.
    pub(super) fn alloc(&mut self) -> PktId {
        match self.free.pop() {
            Some(id) => id,
            None => {
                self.slots.push(Packet::default());
                self.frames.push(PacketFrame::default());
                self.slots.len() as PktId - 1
            }
        }
    }

    /// Returns packet `id`'s slot to the pool (delivered, dropped, or never filled).
    pub(super) fn release(&mut self, id: PktId) {
        let p = &mut self.slots[id as usize];
        p.live = false;
        p.on_wire = false;
        self.free.push(id);
    }

    /// Packet `id`'s frame.
    pub(super) fn frame(&self, id: PktId) -> &PacketFrame {
        &self.frames[id as usize]
    }

    /// Packet `id` and its frame, both writable.
    pub(super) fn parts_mut(&mut self, id: PktId) -> (&mut Packet, &mut PacketFrame) {
        (&mut self.slots[id as usize], &mut self.frames[id as usize])
    }

    /// The packets in use.
    pub(super) fn live(&self) -> impl Iterator<Item = &Packet> {
        self.slots.iter().filter(|p| p.live)
    }
}

impl Index<PktId> for PacketPool {
    type Output = Packet;
    fn index(&self, id: PktId) -> &Packet {
        &self.slots[id as usize]
    }
}

impl IndexMut<PktId> for PacketPool {
    fn index_mut(&mut self, id: PktId) -> &mut Packet {
        &mut self.slots[id as usize]
    }
}
