//! BTH opcodes and the one table that says which headers follow each of them.
//!
//! Source: IBA Vol. 1 §9.2 Table 38 (OpCode field) and §9.3 (which extended transport headers
//! each packet carries, in the order BTH, RDETH, DETH, RETH, AtomicETH, AETH, AtomicAckETH,
//! ImmDt, IETH); RoCEv2 Annex A17.9.1 for the CNP opcode `1000_0001b`.
//!
//! The high three bits select the transport service, the low five the operation. [`Layout`] is
//! the only place that maps an opcode to its headers; [`super::packet`] uses it both to parse and
//! to emit, so the two cannot drift apart.
//!
//! Deviations: RD (`010b`) and XRC (`101b`) opcodes, and the IBA 1.5 additions FLUSH (0x1C) and
//! ATOMIC WRITE (0x1D), are reported as [`super::Error::UnknownOpcode`]: rocev2 implements RC,
//! UC and UD only.

use core::fmt;

/// Transport service, the opcode's high three bits (IBA Table 38).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connected, `000b`.
    Rc,
    /// Unreliable Connected, `001b`.
    Uc,
    /// Reliable Datagram, `010b` (not implemented).
    Rd,
    /// Unreliable Datagram, `011b`.
    Ud,
    /// Congestion Notification Packet, `100b` (RoCEv2 Annex A17.9).
    Cnp,
    /// Extended Reliable Connected, `101b` (not implemented).
    Xrc,
    /// Manufacturer specific, `11xb`.
    Vendor,
}

impl Transport {
    const fn bits(self) -> u8 {
        match self {
            Transport::Rc => 0b000,
            Transport::Uc => 0b001,
            Transport::Rd => 0b010,
            Transport::Ud => 0b011,
            Transport::Cnp => 0b100,
            Transport::Xrc => 0b101,
            Transport::Vendor => 0b110,
        }
    }
}

/// Operation, the opcode's low five bits (IBA Table 38); which ones a transport allows is
/// decided by [`Opcode::layout`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[allow(missing_docs)]
pub enum Operation {
    SendFirst = 0x00,
    SendMiddle = 0x01,
    SendLast = 0x02,
    SendLastWithImmediate = 0x03,
    SendOnly = 0x04,
    SendOnlyWithImmediate = 0x05,
    RdmaWriteFirst = 0x06,
    RdmaWriteMiddle = 0x07,
    RdmaWriteLast = 0x08,
    RdmaWriteLastWithImmediate = 0x09,
    RdmaWriteOnly = 0x0a,
    RdmaWriteOnlyWithImmediate = 0x0b,
    RdmaReadRequest = 0x0c,
    RdmaReadResponseFirst = 0x0d,
    RdmaReadResponseMiddle = 0x0e,
    RdmaReadResponseLast = 0x0f,
    RdmaReadResponseOnly = 0x10,
    Acknowledge = 0x11,
    AtomicAcknowledge = 0x12,
    CompareSwap = 0x13,
    FetchAdd = 0x14,
    SendLastWithInvalidate = 0x16,
    SendOnlyWithInvalidate = 0x17,
}

impl Operation {
    /// The operation with these low five bits, if IBA defines one.
    pub const fn from_bits(bits: u8) -> Option<Operation> {
        use Operation::*;
        Some(match bits {
            0x00 => SendFirst,
            0x01 => SendMiddle,
            0x02 => SendLast,
            0x03 => SendLastWithImmediate,
            0x04 => SendOnly,
            0x05 => SendOnlyWithImmediate,
            0x06 => RdmaWriteFirst,
            0x07 => RdmaWriteMiddle,
            0x08 => RdmaWriteLast,
            0x09 => RdmaWriteLastWithImmediate,
            0x0a => RdmaWriteOnly,
            0x0b => RdmaWriteOnlyWithImmediate,
            0x0c => RdmaReadRequest,
            0x0d => RdmaReadResponseFirst,
            0x0e => RdmaReadResponseMiddle,
            0x0f => RdmaReadResponseLast,
            0x10 => RdmaReadResponseOnly,
            0x11 => Acknowledge,
            0x12 => AtomicAcknowledge,
            0x13 => CompareSwap,
            0x14 => FetchAdd,
            0x16 => SendLastWithInvalidate,
            0x17 => SendOnlyWithInvalidate,
            _ => return None,
        })
    }

    /// Position of the packet within its message.
    pub const fn position(self) -> Position {
        use Operation::*;
        match self {
            SendFirst | RdmaWriteFirst | RdmaReadResponseFirst => Position::First,
            SendMiddle | RdmaWriteMiddle | RdmaReadResponseMiddle => Position::Middle,
            SendLast
            | SendLastWithImmediate
            | SendLastWithInvalidate
            | RdmaWriteLast
            | RdmaWriteLastWithImmediate
            | RdmaReadResponseLast => Position::Last,
            _ => Position::Only,
        }
    }

    /// SEND of any position (consumes a receive WQE at the responder).
    pub const fn is_send(self) -> bool {
        (self as u8) <= 0x05
            || matches!(
                self,
                Self::SendLastWithInvalidate | Self::SendOnlyWithInvalidate
            )
    }

    /// RDMA WRITE of any position.
    pub const fn is_rdma_write(self) -> bool {
        matches!(self as u8, 0x06..=0x0b)
    }

    /// RDMA READ response of any position.
    pub const fn is_read_response(self) -> bool {
        matches!(self as u8, 0x0d..=0x10)
    }

    /// COMPARE_SWAP or FETCH_ADD request.
    pub const fn is_atomic(self) -> bool {
        matches!(self, Self::CompareSwap | Self::FetchAdd)
    }

    /// A request (sent by the requester), as opposed to a response (ACK, READ response,
    /// atomic ACK).
    pub const fn is_request(self) -> bool {
        !self.is_read_response() && !matches!(self, Self::Acknowledge | Self::AtomicAcknowledge)
    }
}

/// Where a packet stands in its message (IBA §9.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    /// First packet of a multi-packet message.
    First,
    /// Neither first nor last.
    Middle,
    /// Last packet of a multi-packet message.
    Last,
    /// The whole message in one packet.
    Only,
}

impl Position {
    /// True for the packet that starts a message (First or Only).
    pub const fn starts_message(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }
    /// True for the packet that ends a message (Last or Only).
    pub const fn ends_message(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// Which headers follow the BTH (and any REXT) for an opcode, in wire order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Layout {
    /// Datagram ETH (UD), 8 bytes.
    pub deth: bool,
    /// RDMA ETH, 16 bytes.
    pub reth: bool,
    /// Atomic ETH, 28 bytes.
    pub atomic_eth: bool,
    /// ACK ETH, 4 bytes.
    pub aeth: bool,
    /// Atomic ACK ETH, 8 bytes.
    pub atomic_ack_eth: bool,
    /// Immediate data, 4 bytes.
    pub immdt: bool,
    /// Invalidate ETH, 4 bytes.
    pub ieth: bool,
    /// The CNP's 16 reserved bytes.
    pub cnp: bool,
    /// Whether a payload (possibly empty) follows the headers.
    pub payload: bool,
}

/// The layout of every opcode byte, computed once at compile time.
static LAYOUTS: [Option<Layout>; 256] = {
    let mut t = [None; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = Opcode(i as u8).compute_layout();
        i += 1;
    }
    t
};

impl Layout {
    /// No headers and no payload.
    const NONE: Layout = Layout {
        deth: false,
        reth: false,
        atomic_eth: false,
        aeth: false,
        atomic_ack_eth: false,
        immdt: false,
        ieth: false,
        cnp: false,
        payload: false,
    };

    /// Total length of the extended transport headers after the BTH (and REXT).
    pub const fn headers_len(&self) -> usize {
        (self.deth as usize) * 8
            + (self.reth as usize) * 16
            + (self.atomic_eth as usize) * 28
            + (self.aeth as usize) * 4
            + (self.atomic_ack_eth as usize) * 8
            + (self.immdt as usize) * 4
            + (self.ieth as usize) * 4
            + (self.cnp as usize) * 16
    }
}

/// A BTH opcode byte.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Opcode(pub u8);

impl Opcode {
    /// The CNP opcode, `100_00001b` (RoCEv2 Annex A17.9.1).
    pub const CNP: Opcode = Opcode(0x81);

    /// The opcode for `op` on `transport`. Whether the pair is valid is [`Self::layout`]'s call.
    pub const fn new(transport: Transport, op: Operation) -> Opcode {
        Opcode((transport.bits() << 5) | op as u8)
    }

    /// Shorthand for an RC opcode.
    pub const fn rc(op: Operation) -> Opcode {
        Self::new(Transport::Rc, op)
    }

    /// The transport service (high three bits).
    pub const fn transport(self) -> Transport {
        match self.0 >> 5 {
            0b000 => Transport::Rc,
            0b001 => Transport::Uc,
            0b010 => Transport::Rd,
            0b011 => Transport::Ud,
            0b100 => Transport::Cnp,
            0b101 => Transport::Xrc,
            _ => Transport::Vendor,
        }
    }

    /// The operation (low five bits), if IBA defines it; `None` for the CNP.
    pub const fn operation(self) -> Option<Operation> {
        if matches!(self.transport(), Transport::Cnp) {
            return None;
        }
        Operation::from_bits(self.0 & 0x1f)
    }

    /// The headers that follow the BTH, or [`super::Error::UnknownOpcode`] for an opcode that is
    /// reserved or belongs to a transport rocev2 does not implement. A lookup in a table built
    /// at compile time, since parse and emit ask for every packet.
    pub const fn layout(self) -> Result<Layout, super::Error> {
        match LAYOUTS[self.0 as usize] {
            Some(l) => Ok(l),
            None => Err(super::Error::UnknownOpcode(self.0)),
        }
    }

    /// [`Self::layout`] by reference into the table, for a view that keeps it: a pointer is
    /// stored and read back whole, where a copy of the nine flags was written byte by byte and
    /// read back as one word, a store-forwarding stall per received packet (4% of
    /// `engine_no_copy`'s samples).
    pub fn layout_ref(self) -> Result<&'static Layout, super::Error> {
        LAYOUTS[self.0 as usize]
            .as_ref()
            .ok_or(super::Error::UnknownOpcode(self.0))
    }

    /// Computes one entry of [`LAYOUTS`] from IBA Table 38 and §9.3.
    const fn compute_layout(self) -> Option<Layout> {
        use Operation::*;
        if self.0 == Self::CNP.0 {
            let mut l = Layout::NONE;
            l.cnp = true;
            return Some(l);
        }
        let Some(op) = self.operation() else {
            return None;
        };
        let allowed = match self.transport() {
            Transport::Rc => true,
            // UC: SEND and RDMA WRITE only (IBA Table 38, 001xxxxx).
            Transport::Uc => (op as u8) <= RdmaWriteOnlyWithImmediate as u8,
            // UD: SEND Only and SEND Only with Immediate (IBA Table 38, 011xxxxx).
            Transport::Ud => matches!(op, SendOnly | SendOnlyWithImmediate),
            _ => false,
        };
        if !allowed {
            return None;
        }
        Some(Layout {
            deth: matches!(self.transport(), Transport::Ud),
            reth: matches!(
                op,
                RdmaWriteFirst | RdmaWriteOnly | RdmaWriteOnlyWithImmediate | RdmaReadRequest
            ),
            atomic_eth: op.is_atomic(),
            aeth: matches!(
                op,
                RdmaReadResponseFirst
                    | RdmaReadResponseLast
                    | RdmaReadResponseOnly
                    | Acknowledge
                    | AtomicAcknowledge
            ),
            atomic_ack_eth: matches!(op, AtomicAcknowledge),
            immdt: matches!(
                op,
                SendLastWithImmediate
                    | SendOnlyWithImmediate
                    | RdmaWriteLastWithImmediate
                    | RdmaWriteOnlyWithImmediate
            ),
            ieth: matches!(op, SendLastWithInvalidate | SendOnlyWithInvalidate),
            cnp: false,
            payload: op.is_send() || op.is_rdma_write() || op.is_read_response(),
        })
    }

    /// The name Wireshark and the IBA tables use, e.g. `RC RDMA WRITE First`.
    pub fn name(self) -> &'static str {
        use Operation::*;
        if self == Self::CNP {
            return "CNP";
        }
        match (self.transport(), self.operation()) {
            (Transport::Rc | Transport::Uc | Transport::Ud, Some(op)) if self.layout().is_ok() => {
                match op {
                    SendFirst => "SEND First",
                    SendMiddle => "SEND Middle",
                    SendLast => "SEND Last",
                    SendLastWithImmediate => "SEND Last with Immediate",
                    SendOnly => "SEND Only",
                    SendOnlyWithImmediate => "SEND Only with Immediate",
                    RdmaWriteFirst => "RDMA WRITE First",
                    RdmaWriteMiddle => "RDMA WRITE Middle",
                    RdmaWriteLast => "RDMA WRITE Last",
                    RdmaWriteLastWithImmediate => "RDMA WRITE Last with Immediate",
                    RdmaWriteOnly => "RDMA WRITE Only",
                    RdmaWriteOnlyWithImmediate => "RDMA WRITE Only with Immediate",
                    RdmaReadRequest => "RDMA READ Request",
                    RdmaReadResponseFirst => "RDMA READ Response First",
                    RdmaReadResponseMiddle => "RDMA READ Response Middle",
                    RdmaReadResponseLast => "RDMA READ Response Last",
                    RdmaReadResponseOnly => "RDMA READ Response Only",
                    Acknowledge => "Acknowledge",
                    AtomicAcknowledge => "ATOMIC Acknowledge",
                    CompareSwap => "CmpSwap",
                    FetchAdd => "FetchAdd",
                    SendLastWithInvalidate => "SEND Last with Invalidate",
                    SendOnlyWithInvalidate => "SEND Only with Invalidate",
                }
            }
            _ => "unknown",
        }
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Opcode({:#04x} {})", self.0, self)
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = match self.transport() {
            Transport::Rc => "RC ",
            Transport::Uc => "UC ",
            Transport::Ud => "UD ",
            _ => "",
        };
        write!(f, "{t}{}", self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Error;

    #[test]
    fn opcode_values_match_iba_table_38() {
        assert_eq!(Opcode::rc(Operation::SendFirst).0, 0x00);
        assert_eq!(Opcode::rc(Operation::RdmaWriteOnlyWithImmediate).0, 0x0b);
        assert_eq!(Opcode::rc(Operation::Acknowledge).0, 0x11);
        assert_eq!(Opcode::rc(Operation::FetchAdd).0, 0x14);
        assert_eq!(Opcode::rc(Operation::SendOnlyWithInvalidate).0, 0x17);
        assert_eq!(Opcode::new(Transport::Uc, Operation::SendOnly).0, 0x24);
        assert_eq!(Opcode::new(Transport::Ud, Operation::SendOnly).0, 0x64);
        assert_eq!(Opcode::CNP.transport(), Transport::Cnp);
    }

    #[test]
    fn layout_lists_headers_per_iba_9_3() {
        let l = Opcode::rc(Operation::RdmaWriteOnlyWithImmediate)
            .layout()
            .unwrap();
        assert!(l.reth && l.immdt && l.payload && !l.aeth);
        assert_eq!(l.headers_len(), 20);
        let l = Opcode::rc(Operation::AtomicAcknowledge).layout().unwrap();
        assert!(l.aeth && l.atomic_ack_eth && !l.payload);
        let l = Opcode::rc(Operation::RdmaReadResponseMiddle)
            .layout()
            .unwrap();
        assert!(!l.aeth && l.payload, "READ response Middle carries no AETH");
        let l = Opcode::rc(Operation::RdmaReadRequest).layout().unwrap();
        assert!(l.reth && !l.payload);
        let l = Opcode(0x65).layout().unwrap();
        assert!(l.deth && l.immdt && l.payload);
        assert_eq!(Opcode::CNP.layout().unwrap().headers_len(), 16);
    }

    #[test]
    fn layout_rejects_reserved_and_unimplemented() {
        for raw in [
            0x15u8, 0x18, 0x1c, 0x1d, 0x1f, 0x2c, 0x31, 0x40, 0x60, 0x66, 0xa0, 0xc0, 0x80, 0xff,
        ] {
            assert_eq!(
                Opcode(raw).layout(),
                Err(Error::UnknownOpcode(raw)),
                "{raw:#x}"
            );
        }
    }

    #[test]
    fn opcode_every_byte_classifies_without_panic() {
        let valid = (0..=255u8).filter(|b| Opcode(*b).layout().is_ok()).count();
        // RC 23 + UC 12 + UD 2 + CNP 1.
        assert_eq!(valid, 38);
    }
}
