//! In-order flow deflection (IOFD): the deflected-flow table and the per-packet decision.
//!
//! Source: seed 000 (Dart) §IV-A and §IV-B. The table ("DFT") maps a message's identity to the
//! alternate output port its packets take; an entry is allocated when the start packet of a
//! short message is deflected and a free entry exists, and freed when the end packet passes;
//! "no DFT entry may be overwritten except by natural deallocation". A packet may be deflected
//! only while it carries deflection tokens (rocev2 carries them in BTH Resv6a, docs/wire.md);
//! the switch removes a token from each deflected packet. Deflection is allowed only when the
//! chosen port's queue is above the deflection threshold, which sits below the ECN threshold
//! (§IV-B; the paper's evaluation: 8-entry DFT, 15 KB threshold vs 22.5 KB ECN, 4 tokens,
//! short flows 2–8 KB). Long messages are never deflected.
//!
//! The table is behind the [`Dft`] trait: the eBPF program uses a BPF hash map of
//! [`DFT_ENTRIES`] entries whose insert-if-absent is atomic in the kernel (so a live entry is
//! never overwritten, even by two CPUs at once, and a full map refuses); the model and the
//! tests use [`ArrayDft`]. [`decide`] is the policy both run.
//!
//! Deviations:
//! - One table per *port* (the chosen egress port), not per switch: with ECMP hashing on the
//!   5-tuple every packet of a message picks the same port, whose program alone needs the
//!   entry. Eight entries per port is more capacity than the paper's eight per switch.
//! - A message's length is known only from a RETH (WRITE first/only) or when it is a single
//!   packet (`*_ONLY`); a multi-packet SEND (or READ response) has no length on its first packet
//!   and is treated as long. NOT IMPLEMENTED (seed 000 §IV-A): learning a SEND's length.
//! - Messages are ordered within themselves, not across messages of a QP: a deflected message
//!   may overtake the previous message of its QP still queued on the congested port, which the
//!   responder sees as a PSN gap (a NAK and go-back-N), as in the paper's per-message flows.
//! - Deadlock avoidance by virtual lanes (§IV-B) and failure handling (§IV-C) are not modelled.

/// Entries of the deflected-flow table (seed 000 §VI-A: an 8-entry DFT).
pub const DFT_ENTRIES: u32 = 8;

/// A message's identity: source and destination address (IPv4 as v4-mapped IPv6) and
/// destination QP. A QP has at most one message starting at a time on the wire, so this
/// identifies the message in progress.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageKey {
    /// Source address, 16 bytes.
    pub src: [u8; 16],
    /// Destination address, 16 bytes.
    pub dst: [u8; 16],
    /// Destination QP number (24 bits).
    pub dest_qp: u32,
}

/// Where a packet sits in its message (from the BTH opcode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// The first of several packets.
    First,
    /// Neither first nor last.
    Middle,
    /// The last of several packets.
    Last,
    /// A single-packet message.
    Only,
    /// Not part of a message that may be deflected (ACK, CNP, unknown): never deflected.
    None,
}

impl Position {
    /// The position of a packet with BTH opcode `opcode` (IBA Table 38), for the RC and UC
    /// transports; every other transport or opcode is [`Position::None`].
    pub const fn of_opcode(opcode: u8) -> Position {
        let transport = opcode >> 5;
        if transport > 1 {
            return Position::None;
        }
        match opcode & 0x1f {
            0x00 | 0x06 | 0x0d => Position::First,
            0x01 | 0x07 | 0x0e => Position::Middle,
            0x02 | 0x03 | 0x08 | 0x09 | 0x0f | 0x16 => Position::Last,
            0x04 | 0x05 | 0x0a | 0x0b | 0x10 | 0x17 => Position::Only,
            _ => Position::None,
        }
    }

    /// Whether the first packet of this opcode carries a RETH with the message length.
    pub const fn has_reth(opcode: u8) -> bool {
        opcode >> 5 <= 1 && matches!(opcode & 0x1f, 0x06 | 0x0a | 0x0b)
    }
}

/// IOFD settings of one port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IofdConfig {
    /// Deflect only while the chosen port's queue holds more than this, bytes (below K_min).
    pub threshold_bytes: u64,
    /// Messages up to this many bytes are short and may be deflected.
    pub max_message_bytes: u64,
}

/// One packet, as the decision needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet {
    /// Its message.
    pub key: MessageKey,
    /// Its place in the message.
    pub position: Position,
    /// The message length if known (RETH, or the payload of a single-packet message).
    pub message_bytes: Option<u64>,
    /// Deflection tokens it carries (BTH Resv6a).
    pub tokens: u8,
}

/// The table's operations.
pub trait Dft {
    /// The alternate port of a live entry for `key`.
    fn get(&self, key: &MessageKey) -> Option<u32>;
    /// Allocates an entry if `key` has none and a free one exists; never overwrites. Returns
    /// whether it did.
    fn insert_new(&mut self, key: &MessageKey, port: u32) -> bool;
    /// Frees `key`'s entry.
    fn remove(&mut self, key: &MessageKey);
}

/// What to do with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Take the chosen port (wait in line).
    Forward,
    /// Send it out of `port` instead, with one token less.
    Deflect {
        /// The alternate port.
        port: u32,
    },
}

/// Why a packet that could have been deflected was not (for counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The table is full.
    TableFull,
    /// The message is long or of unknown length.
    Long,
    /// No tokens left.
    NoTokens,
}

/// The IOFD decision (seed 000 §IV-A, Fig. 7) for `pkt` whose chosen port holds `queue_bytes`;
/// `alternate` is the port a new deflection takes (the caller draws it at random among the
/// configured alternates, as the paper's "randomly-selected output port"). Returns the action
/// and, for a start packet refused above the threshold, why.
pub fn decide<T: Dft>(
    dft: &mut T,
    cfg: &IofdConfig,
    pkt: &Packet,
    queue_bytes: u64,
    alternate: u32,
) -> (Action, Option<Refusal>) {
    // §IV-A: "Every packet consults the DFT to determine its path."
    if let Some(port) = dft.get(&pkt.key) {
        // §IV-A: "Entries in the DFT are de-allocated when the end packet of an RDMA message
        // passes through the switch."
        if matches!(pkt.position, Position::Last | Position::Only) {
            dft.remove(&pkt.key);
        }
        return (Action::Deflect { port }, None);
    }
    let starts = matches!(pkt.position, Position::First | Position::Only);
    // §IV-B: "Deflection is allowed only if the queue position is above the threshold."
    if !starts || queue_bytes <= cfg.threshold_bytes {
        return (Action::Forward, None);
    }
    // §IV-B: "IOFD does not misroute long flows."
    match pkt.message_bytes {
        Some(n) if n <= cfg.max_message_bytes => {}
        _ => return (Action::Forward, Some(Refusal::Long)),
    }
    // §IV-A: "If either DFT entries are unavailable or the flow has exhausted its tokens, the
    // flow may not be deflected at the switch."
    if pkt.tokens == 0 {
        return (Action::Forward, Some(Refusal::NoTokens));
    }
    // A single-packet message needs no entry: nothing follows it.
    if pkt.position == Position::Only || dft.insert_new(&pkt.key, alternate) {
        (Action::Deflect { port: alternate }, None)
    } else {
        (Action::Forward, Some(Refusal::TableFull))
    }
}

/// A fixed array of [`DFT_ENTRIES`] entries: the table for the model and the tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArrayDft {
    entries: [Option<(MessageKey, u32)>; DFT_ENTRIES as usize],
}

impl ArrayDft {
    /// Live entries.
    pub fn len(&self) -> usize {
        self.entries.iter().filter(|e| e.is_some()).count()
    }

    /// No live entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Dft for ArrayDft {
    fn get(&self, key: &MessageKey) -> Option<u32> {
        self.entries
            .iter()
            .flatten()
            .find(|(k, _)| k == key)
            .map(|&(_, p)| p)
    }

    fn insert_new(&mut self, key: &MessageKey, port: u32) -> bool {
        if self.get(key).is_some() {
            return false;
        }
        match self.entries.iter_mut().find(|e| e.is_none()) {
            Some(slot) => {
                *slot = Some((*key, port));
                true
            }
            None => false,
        }
    }

    fn remove(&mut self, key: &MessageKey) {
        for e in &mut self.entries {
            if matches!(e, Some((k, _)) if k == key) {
                *e = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: IofdConfig = IofdConfig {
        threshold_bytes: 15_000,
        max_message_bytes: 8192,
    };

    fn key(qp: u32) -> MessageKey {
        MessageKey {
            dest_qp: qp,
            ..MessageKey::default()
        }
    }

    fn pkt(qp: u32, position: Position, len: Option<u64>, tokens: u8) -> Packet {
        Packet {
            key: key(qp),
            position,
            message_bytes: len,
            tokens,
        }
    }

    #[test]
    fn iofd_below_threshold_waits_in_line() {
        let mut t = ArrayDft::default();
        let p = pkt(1, Position::First, Some(4096), 4);
        assert_eq!(decide(&mut t, &CFG, &p, 15_000, 9), (Action::Forward, None));
        assert!(t.is_empty());
    }

    #[test]
    fn iofd_whole_message_follows_first_packet_then_entry_freed() {
        let mut t = ArrayDft::default();
        let first = pkt(1, Position::First, Some(4096), 4);
        assert_eq!(
            decide(&mut t, &CFG, &first, 20_000, 9).0,
            Action::Deflect { port: 9 }
        );
        // Later packets follow the entry whatever the queue is now, and whatever alternate
        // the caller would draw.
        let mid = pkt(1, Position::Middle, None, 4);
        assert_eq!(
            decide(&mut t, &CFG, &mid, 0, 3).0,
            Action::Deflect { port: 9 }
        );
        let last = pkt(1, Position::Last, None, 4);
        assert_eq!(
            decide(&mut t, &CFG, &last, 0, 3).0,
            Action::Deflect { port: 9 }
        );
        assert!(t.is_empty(), "freed on the last packet");
        // The next message of the QP decides afresh.
        assert_eq!(decide(&mut t, &CFG, &mid, 0, 3).0, Action::Forward);
    }

    #[test]
    fn iofd_long_or_unknown_length_never_deflected() {
        let mut t = ArrayDft::default();
        let long = pkt(1, Position::First, Some(8193), 4);
        assert_eq!(
            decide(&mut t, &CFG, &long, 1 << 20, 9),
            (Action::Forward, Some(Refusal::Long))
        );
        let send = pkt(2, Position::First, None, 4);
        assert_eq!(
            decide(&mut t, &CFG, &send, 1 << 20, 9),
            (Action::Forward, Some(Refusal::Long))
        );
        assert!(t.is_empty());
    }

    #[test]
    fn iofd_no_tokens_waits() {
        let mut t = ArrayDft::default();
        let p = pkt(1, Position::Only, Some(100), 0);
        assert_eq!(
            decide(&mut t, &CFG, &p, 1 << 20, 9),
            (Action::Forward, Some(Refusal::NoTokens))
        );
    }

    #[test]
    fn iofd_single_packet_needs_no_entry() {
        let mut t = ArrayDft::default();
        let p = pkt(1, Position::Only, Some(100), 1);
        assert_eq!(
            decide(&mut t, &CFG, &p, 1 << 20, 9).0,
            Action::Deflect { port: 9 }
        );
        assert!(t.is_empty());
    }

    #[test]
    fn iofd_full_table_refuses_and_never_overwrites() {
        let mut t = ArrayDft::default();
        for qp in 0..DFT_ENTRIES {
            let p = pkt(qp, Position::First, Some(4096), 4);
            assert_eq!(
                decide(&mut t, &CFG, &p, 1 << 20, 100 + qp).0,
                Action::Deflect { port: 100 + qp }
            );
        }
        let ninth = pkt(99, Position::First, Some(4096), 4);
        assert_eq!(
            decide(&mut t, &CFG, &ninth, 1 << 20, 7),
            (Action::Forward, Some(Refusal::TableFull))
        );
        // Every earlier entry is intact.
        for qp in 0..DFT_ENTRIES {
            assert_eq!(t.get(&key(qp)), Some(100 + qp));
        }
        // A second start packet with the same key does not move a live entry either.
        let again = pkt(3, Position::First, Some(4096), 4);
        assert_eq!(
            decide(&mut t, &CFG, &again, 1 << 20, 55).0,
            Action::Deflect { port: 103 }
        );
        // Freeing one makes room.
        decide(&mut t, &CFG, &pkt(0, Position::Last, None, 4), 0, 0);
        assert_eq!(
            decide(&mut t, &CFG, &ninth, 1 << 20, 7).0,
            Action::Deflect { port: 7 }
        );
    }

    #[test]
    fn iofd_opcode_positions() {
        assert_eq!(Position::of_opcode(0x06), Position::First); // RC WRITE_FIRST
        assert_eq!(Position::of_opcode(0x0a), Position::Only); // RC WRITE_ONLY
        assert_eq!(Position::of_opcode(0x27), Position::Middle); // UC WRITE_MIDDLE
        assert_eq!(Position::of_opcode(0x04), Position::Only); // RC SEND_ONLY
        assert_eq!(Position::of_opcode(0x11), Position::None); // RC ACK
        assert_eq!(Position::of_opcode(0x81), Position::None); // CNP
        assert_eq!(Position::of_opcode(0x64), Position::None); // UD SEND_ONLY
        assert!(Position::has_reth(0x06) && Position::has_reth(0x2a) && !Position::has_reth(0x00));
    }
}
