//! REXT: rocev2's negotiated extension header for its congestion-control and multipath schemes.
//!
//! Sources for the fields: seed 000 (Dart) §III-C (the receiver piggybacks N, the number of
//! active unique senders, on ACKs) and §III-D (look-ahead: an incast message carries the group
//! size and the 2-byte ids of its senders); seed 001 (MP-RDMA) Fig. 3 / §3.2–§3.4 (every ACK
//! echoes the virtual path, SACK PSN, AACK, ECE and ReTx bit; a data packet may carry the
//! synchronise flag); seed 002 (DCQCN+) §IV-B eq. (11) (a CNP carries the NP's period
//! τ = l·δ). IOFD deflection tokens are not here: they live in BTH Resv6a (see
//! [`super::bth`]) so that switches can spend them without touching the ICRC. [`ExtCaps`] is
//! what each side announces at connection setup, and decides which fields a QP may send.
//!
//! # Placement
//!
//! REXT sits directly after the BTH and is present exactly when `BTH.TVer == 1`. IBA §9.2
//! requires TVer 0 and rdma_rxe (and ConnectX NICs) drop any other version, so a standard peer
//! can never misread a REXT packet as something else; rocev2 only sets TVer 1 towards a peer
//! that announced REXT support during connection setup. A REXT-capable receiver parses the
//! header before the opcode's own headers, so every opcode (data, ACK, CNP) can carry it.
//!
//! ```text
//!  byte 0 flags: D L P T S R E M      byte 1: length in 4-byte words (whole REXT)
//!                7 6 5 4 3 2 1 0      bytes 2-3: reserved (0)
//!  then, in this order, one block per set flag:
//!  D (4)  N: u16 active unique senders (0 = no information) | reserved u16
//!  L (4+2m, padded to 4)  group size u16 | m u16 | m x sender id u16 | zero pad
//!  P (12) VP u16 (UDP source port echoed) | reserved u16 | reserved u8, SACK PSN u24
//!         | reserved u8, AACK PSN u24
//!  T (4)  tau: u32 nanoseconds
//!  M (8, or 24 with the A bit) A bit (7) + 7 reserved bits, MSN u24 | reserved u8, iPSN u24
//!         | with A: VA u64 | R_Key u32 | DMA length u32 (the message's RETH)
//!  S = synchronise (data), R = retransmitted packet (data) or the ACK of one,
//!  E = ECN-echo (ACK)
//! ```
//!
//! The M block is MP-RDMA's placement information (seed 001 §3.1): the MSN counts the messages
//! that consume a receive WQE (SEND, WRITE with immediate), so a SEND packet finds its WQE out of
//! order; the iPSN is the packet's index within its message, the offset of its payload. IBA puts
//! a RETH on a WRITE's first packet only; a later packet of a multipath WRITE repeats it in the
//! M block (the A bit), which is how "the header already embeds the address in every data
//! packet" (§3.1) is met without changing any IBA opcode.
//!
//! The length byte is redundant with the flags; a mismatch is [`Error::BadExtension`], which
//! makes a truncated or tampered REXT a counted drop instead of a misparse.
//!
//! Deviations: the look-ahead list holds at most [`MAX_LOOKAHEAD`] sender ids; a larger group
//! still carries its true size, so a receiver can count the senders it has not been told.

use super::field;
use super::{Error, Header, Psn};
use core::fmt;

/// The BTH.TVer value that announces a REXT header.
pub const TVER: u8 = 1;

/// Most sender ids a look-ahead block carries (seed 000 §III-D's example uses 20).
pub const MAX_LOOKAHEAD: usize = 32;

const F_DASR: u8 = 0x80;
const F_LOOKAHEAD: u8 = 0x40;
const F_MULTIPATH: u8 = 0x20;
const F_TAU: u8 = 0x10;
const F_SYNC: u8 = 0x08;
const F_RETX: u8 = 0x04;
const F_ECE: u8 = 0x02;
const F_PLACEMENT: u8 = 0x01;
/// In the M block's first byte: a RETH copy follows.
const M_ADDR: u8 = 0x80;

const BASE_LEN: usize = 4;
const DASR_LEN: usize = 4;
const MULTIPATH_LEN: usize = 12;
const TAU_LEN: usize = 4;
const PLACEMENT_LEN: usize = 8;
const PLACEMENT_ADDR_LEN: usize = 16;

const fn lookahead_len(members: usize) -> usize {
    (4 + 2 * members).div_ceil(4) * 4
}

/// A view of a REXT header. Unlike the fixed-size headers its length comes from its flags, so
/// [`Packet::new_checked`] reads them before proving the rest in bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checks.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps a buffer after [`Self::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = Packet { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// Ensures the buffer holds the whole header and that the length byte agrees with the
    /// flags (and, for a look-ahead block, with its member count).
    pub fn check_len(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        if b.len() < BASE_LEN {
            return Err(Error::Truncated(Header::Ext));
        }
        let declared = b[1] as usize * 4;
        if b.len() < declared {
            return Err(Error::Truncated(Header::Ext));
        }
        let flags = b[0];
        let mut len = BASE_LEN;
        if flags & F_DASR != 0 {
            len += DASR_LEN;
        }
        if flags & F_LOOKAHEAD != 0 {
            // The member count sits 2 bytes into the look-ahead block.
            let m_at = len + 2;
            if declared < m_at + 2 {
                return Err(Error::BadExtension);
            }
            let m = field::u16_at(b, m_at..m_at + 2) as usize;
            if m > MAX_LOOKAHEAD {
                return Err(Error::BadExtension);
            }
            len += lookahead_len(m);
        }
        if flags & F_MULTIPATH != 0 {
            len += MULTIPATH_LEN;
        }
        if flags & F_TAU != 0 {
            len += TAU_LEN;
        }
        if flags & F_PLACEMENT != 0 {
            // The A bit sits in the block's first byte.
            if declared < len + PLACEMENT_LEN {
                return Err(Error::BadExtension);
            }
            len += PLACEMENT_LEN;
            if b[len - PLACEMENT_LEN] & M_ADDR != 0 {
                len += PLACEMENT_ADDR_LEN;
            }
        }
        if len != declared {
            return Err(Error::BadExtension);
        }
        Ok(())
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// The flags byte.
    pub fn flags(&self) -> u8 {
        self.b()[0]
    }
    /// Length of the whole REXT in bytes (from its length byte).
    pub fn header_len(&self) -> usize {
        self.b()[1] as usize * 4
    }
    fn offset_of(&self, flag: u8) -> Option<usize> {
        let f = self.flags();
        if f & flag == 0 {
            return None;
        }
        let mut at = BASE_LEN;
        if flag == F_DASR {
            return Some(at);
        }
        if f & F_DASR != 0 {
            at += DASR_LEN;
        }
        if flag == F_LOOKAHEAD {
            return Some(at);
        }
        if f & F_LOOKAHEAD != 0 {
            at += lookahead_len(field::u16_at(self.b(), at + 2..at + 4) as usize);
        }
        if flag == F_MULTIPATH {
            return Some(at);
        }
        if f & F_MULTIPATH != 0 {
            at += MULTIPATH_LEN;
        }
        if flag == F_TAU {
            return Some(at);
        }
        if f & F_TAU != 0 {
            at += TAU_LEN;
        }
        Some(at)
    }
    /// DASR N (seed 000 §III-C), if the D block is present.
    pub fn dasr_n(&self) -> Option<u16> {
        self.offset_of(F_DASR)
            .map(|at| field::u16_at(self.b(), at..at + 2))
    }
    /// Look-ahead group size and member ids (seed 000 §III-D), if the L block is present.
    pub fn lookahead(&self) -> Option<(u16, impl Iterator<Item = u16> + '_)> {
        self.offset_of(F_LOOKAHEAD).map(|at| {
            let b = self.b();
            let size = field::u16_at(b, at..at + 2);
            let m = field::u16_at(b, at + 2..at + 4) as usize;
            let ids = (0..m).map(move |i| field::u16_at(b, at + 4 + 2 * i..at + 6 + 2 * i));
            (size, ids)
        })
    }
    /// MP-RDMA ACK fields (seed 001 Fig. 3): (VP, SACK PSN, AACK PSN), if the P block is present.
    pub fn multipath(&self) -> Option<(u16, Psn, Psn)> {
        self.offset_of(F_MULTIPATH).map(|at| {
            let b = self.b();
            (
                field::u16_at(b, at..at + 2),
                Psn::new(field::u24_at(b, at + 5)),
                Psn::new(field::u24_at(b, at + 9)),
            )
        })
    }
    /// DCQCN+ CNP period τ in nanoseconds (seed 002 eq. (11)), if the T block is present.
    pub fn tau_ns(&self) -> Option<u32> {
        self.offset_of(F_TAU)
            .map(|at| field::u32_at(self.b(), at..at + 4))
    }
    /// MP-RDMA placement (seed 001 §3.1): (MSN, iPSN, the message's RETH if the A bit is set),
    /// if the M block is present.
    pub fn placement(&self) -> Option<Placement> {
        self.offset_of(F_PLACEMENT).map(|at| {
            let b = self.b();
            let reth = (b[at] & M_ADDR != 0).then(|| super::RethRepr {
                va: field::u64_at(b, at + 8..at + 16),
                r_key: field::u32_at(b, at + 16..at + 20),
                dma_len: field::u32_at(b, at + 20..at + 24),
            });
            Placement {
                msn: field::u24_at(b, at + 1),
                ipsn: field::u24_at(b, at + 5),
                reth,
            }
        })
    }
}

/// Where an MP-RDMA data packet belongs (seed 001 §3.1), so it can be placed out of order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Sequence number (24 bits) of the message among those that consume a receive WQE: a SEND
    /// packet's WQE, and a WRITE with immediate's at its end.
    pub msn: u32,
    /// The packet's index within its message (24 bits): its payload starts `ipsn · PMTU` bytes in.
    pub ipsn: u32,
    /// The message's RETH, repeated on WRITE packets after the first.
    pub reth: Option<super::RethRepr>,
}

/// Look-ahead notification: an incast group announced on its first message (seed 000 §III-D).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lookahead {
    /// Number of senders in the incast group, which may exceed the listed members.
    pub group_size: u16,
    /// How many entries of `members` are valid.
    pub member_count: u8,
    /// 2-byte sender ids; the first `member_count` are meaningful.
    pub members: [u16; MAX_LOOKAHEAD],
}

impl Lookahead {
    /// The listed sender ids.
    pub fn members(&self) -> &[u16] {
        &self.members[..(self.member_count as usize).min(MAX_LOOKAHEAD)]
    }
}

/// MP-RDMA per-packet ACK fields (seed 001 Fig. 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MultipathAck {
    /// The virtual path (UDP source port) of the data packet being acknowledged.
    pub vp: u16,
    /// PSN of the data packet that triggered this ACK (selective ACK).
    pub sack_psn: Psn,
    /// Cumulative ACK: every PSN before this one has arrived.
    pub aack_psn: Psn,
}

/// The meaning of a REXT header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    /// DASR N piggybacked by the receiver (seed 000 §III-C).
    pub dasr_n: Option<u16>,
    /// Look-ahead incast group (seed 000 §III-D).
    pub lookahead: Option<Lookahead>,
    /// MP-RDMA ACK fields (seed 001 §3.2).
    pub multipath: Option<MultipathAck>,
    /// MP-RDMA placement of a data packet (seed 001 §3.1).
    pub placement: Option<Placement>,
    /// DCQCN+ CNP period τ in nanoseconds (seed 002 eq. (11)).
    pub tau_ns: Option<u32>,
    /// MP-RDMA synchronise flag on a data packet (seed 001 §3.4).
    pub synchronise: bool,
    /// MP-RDMA: a retransmitted data packet, or the ACK of one (seed 001 §3.3).
    pub retx: bool,
    /// MP-RDMA: ECN-echo, the acknowledged packet was CE-marked (seed 001 §3.2).
    pub ece: bool,
}

impl Repr {
    /// Reads a checked view.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, Error> {
        let f = p.flags();
        let lookahead = p.lookahead().map(|(group_size, ids)| {
            let mut members = [0u16; MAX_LOOKAHEAD];
            let mut n = 0;
            for (slot, id) in members.iter_mut().zip(ids) {
                *slot = id;
                n += 1;
            }
            Lookahead {
                group_size,
                member_count: n as u8,
                members,
            }
        });
        Ok(Repr {
            dasr_n: p.dasr_n(),
            lookahead,
            multipath: p.multipath().map(|(vp, sack_psn, aack_psn)| MultipathAck {
                vp,
                sack_psn,
                aack_psn,
            }),
            tau_ns: p.tau_ns(),
            placement: p.placement(),
            synchronise: f & F_SYNC != 0,
            retx: f & F_RETX != 0,
            ece: f & F_ECE != 0,
        })
    }

    fn flags(&self) -> u8 {
        let mut f = 0;
        for (on, bit) in [
            (self.dasr_n.is_some(), F_DASR),
            (self.lookahead.is_some(), F_LOOKAHEAD),
            (self.multipath.is_some(), F_MULTIPATH),
            (self.tau_ns.is_some(), F_TAU),
            (self.synchronise, F_SYNC),
            (self.retx, F_RETX),
            (self.ece, F_ECE),
            (self.placement.is_some(), F_PLACEMENT),
        ] {
            if on {
                f |= bit;
            }
        }
        f
    }

    /// Bytes [`Self::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        BASE_LEN
            + self.dasr_n.map_or(0, |_| DASR_LEN)
            + self
                .lookahead
                .map_or(0, |l| lookahead_len(l.members().len()))
            + self.multipath.map_or(0, |_| MULTIPATH_LEN)
            + self.tau_ns.map_or(0, |_| TAU_LEN)
            + self.placement.map_or(0, |m| {
                PLACEMENT_LEN + m.reth.map_or(0, |_| PLACEMENT_ADDR_LEN)
            })
    }

    /// Writes this header into exactly [`Self::buffer_len`] bytes (reserved bytes zeroed).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        let len = self.buffer_len();
        let b = &mut p.buffer.as_mut()[..len];
        b.fill(0);
        b[0] = self.flags();
        // At most 4 + 4 + 68 + 12 + 4 + 24 = 116 bytes, so the word count fits a byte.
        b[1] = (len / 4) as u8;
        let mut at = BASE_LEN;
        if let Some(n) = self.dasr_n {
            field::set_u16(b, at..at + 2, n);
            at += DASR_LEN;
        }
        if let Some(l) = &self.lookahead {
            let ids = l.members();
            field::set_u16(b, at..at + 2, l.group_size);
            field::set_u16(b, at + 2..at + 4, ids.len() as u16);
            for (i, id) in ids.iter().enumerate() {
                field::set_u16(b, at + 4 + 2 * i..at + 6 + 2 * i, *id);
            }
            at += lookahead_len(ids.len());
        }
        if let Some(m) = &self.multipath {
            field::set_u16(b, at..at + 2, m.vp);
            field::set_u24(b, at + 5, m.sack_psn.value());
            field::set_u24(b, at + 9, m.aack_psn.value());
            at += MULTIPATH_LEN;
        }
        if let Some(t) = self.tau_ns {
            field::set_u32(b, at..at + 4, t);
            at += TAU_LEN;
        }
        if let Some(m) = &self.placement {
            field::set_u24(b, at + 1, m.msn & 0xff_ffff);
            field::set_u24(b, at + 5, m.ipsn & 0xff_ffff);
            if let Some(r) = m.reth {
                b[at] = M_ADDR;
                field::set_u64(b, at + 8..at + 16, r.va);
                field::set_u32(b, at + 16..at + 20, r.r_key);
                field::set_u32(b, at + 20..at + 24, r.dma_len);
            }
        }
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("REXT")?;
        if let Some(n) = self.dasr_n {
            write!(f, " N={n}")?;
        }
        if let Some(l) = &self.lookahead {
            write!(
                f,
                " lookahead(group={} members={:?})",
                l.group_size,
                l.members()
            )?;
        }
        if let Some(m) = &self.multipath {
            write!(f, " vp={} sack={} aack={}", m.vp, m.sack_psn, m.aack_psn)?;
        }
        if let Some(t) = self.tau_ns {
            write!(f, " tau={t}ns")?;
        }
        if let Some(m) = &self.placement {
            write!(f, " msn={} ipsn={}", m.msn, m.ipsn)?;
            if let Some(r) = m.reth {
                write!(f, " va={:#x} rkey={:#x} len={}", r.va, r.r_key, r.dma_len)?;
            }
        }
        for (on, name) in [
            (self.synchronise, " SYNC"),
            (self.retx, " RETX"),
            (self.ece, " ECE"),
        ] {
            if on {
                f.write_str(name)?;
            }
        }
        Ok(())
    }
}

/// The rocev2 extensions a peer announced it understands (docs/wire.md, "Negotiation"). A QP
/// sends a REXT field or IOFD tokens only when the peer announced it; a standard peer announces
/// nothing and never sees them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExtCaps {
    /// DASR's N on ACKs (seed 000 §III-A).
    pub dasr_n: bool,
    /// DCQCN+'s τ on CNPs (seed 002 eq. (11)).
    pub cnp_tau: bool,
    /// Dart's look-ahead on first packets (seed 000 §III-D).
    pub lookahead: bool,
    /// MP-RDMA (seed 001 §3): the peer runs multipath mode, with placement on data packets
    /// and the multipath block on ACKs. Both ends must offer it for a QP to use it.
    pub multipath: bool,
}

impl ExtCaps {
    /// True when the peer understands at least one REXT field.
    pub const fn any(&self) -> bool {
        self.dasr_n || self.cnp_tau || self.lookahead || self.multipath
    }

    /// What either side of `self` and `other` offers: a QP's offer is its device's
    /// congestion-control extensions and those of its own configuration (multipath).
    pub const fn union(self, other: ExtCaps) -> ExtCaps {
        ExtCaps::from_word(self.to_word() | other.to_word())
    }

    /// The 32-bit capability word a side announces at connection setup (docs/wire.md,
    /// "Negotiation"): bit 0 `dasr_n`, bit 1 `cnp_tau`, bit 2 `lookahead`, bit 3 `multipath`,
    /// every other bit 0.
    pub const fn to_word(&self) -> u32 {
        (self.dasr_n as u32)
            | (self.cnp_tau as u32) << 1
            | (self.lookahead as u32) << 2
            | (self.multipath as u32) << 3
    }

    /// The capabilities a peer's word announces; bits not assigned yet are ignored, so a newer
    /// peer's word still yields what both understand.
    pub const fn from_word(word: u32) -> ExtCaps {
        ExtCaps {
            dasr_n: word & 1 != 0,
            cnp_tau: word & (1 << 1) != 0,
            lookahead: word & (1 << 2) != 0,
            multipath: word & (1 << 3) != 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn everything() -> Repr {
        let mut members = [0u16; MAX_LOOKAHEAD];
        members[..3].copy_from_slice(&[0x0a0b, 0x0c0d, 0x0e0f]);
        Repr {
            dasr_n: Some(16),
            lookahead: Some(Lookahead {
                group_size: 20,
                member_count: 3,
                members,
            }),
            multipath: Some(MultipathAck {
                vp: 49442,
                sack_psn: Psn::new(0x123456),
                aack_psn: Psn::new(0x123450),
            }),
            tau_ns: Some(50_000),
            placement: None,
            synchronise: false,
            retx: true,
            ece: true,
        }
    }

    // Hand-assembled from the layout in the module doc.
    static EVERYTHING: [u8; 36] = [
        0xf6, 9, 0, 0, // flags D L P T R E, 9 words
        0x00, 0x10, 0, 0, // N = 16
        0x00, 0x14, 0x00, 0x03, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0,
        0, // group 20, 3 ids, pad
        0xc1, 0x22, 0, 0, 0x00, 0x12, 0x34, 0x56, 0x00, 0x12, 0x34, 0x50, // VP, SACK, AACK
        0x00, 0x00, 0xc3, 0x50, // tau = 50 us
    ];

    #[test]
    fn ext_construct() {
        let r = everything();
        assert_eq!(r.buffer_len(), 36);
        let mut buf = [0xaau8; 36];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, EVERYTHING);
    }

    #[test]
    fn ext_deconstruct_and_parse() {
        let p = Packet::new_checked(&EVERYTHING[..]).unwrap();
        assert_eq!(p.header_len(), 36);
        assert_eq!(p.dasr_n(), Some(16));
        assert_eq!(p.tau_ns(), Some(50_000));
        assert_eq!(
            p.multipath(),
            Some((49442, Psn::new(0x123456), Psn::new(0x123450)))
        );
        assert_eq!(Repr::parse(&p), Ok(everything()));
    }

    #[test]
    fn ext_minimal_is_one_word() {
        let r = Repr {
            synchronise: true,
            ..Repr::default()
        };
        let mut buf = [0u8; 4];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, [0x08, 1, 0, 0]);
        assert_eq!(Repr::parse(&Packet::new_checked(&buf[..]).unwrap()), Ok(r));
    }

    // Hand-assembled from the layout in the module doc: an MP-RDMA WRITE middle packet.
    static PLACED: [u8; 28] = [
        0x0d, 7, 0, 0, // flags S R M, 7 words
        0x80, 0x00, 0x00, 0x05, 0x00, 0x00, 0x01, 0x02, // A bit, MSN 5, iPSN 0x102
        0, 0, 0, 0, 0x10, 0, 0, 0, // VA 0x1000_0000
        0x12, 0x34, 0x56, 0x78, 0x00, 0x10, 0x00, 0x00, // R_Key, DMA length 1 MiB
    ];

    fn placed() -> Repr {
        Repr {
            placement: Some(Placement {
                msn: 5,
                ipsn: 0x102,
                reth: Some(crate::wire::RethRepr {
                    va: 0x1000_0000,
                    r_key: 0x1234_5678,
                    dma_len: 1 << 20,
                }),
            }),
            synchronise: true,
            retx: true,
            ..Repr::default()
        }
    }

    #[test]
    fn ext_placement_construct_and_parse() {
        let r = placed();
        assert_eq!(r.buffer_len(), 28);
        let mut buf = [0xaau8; 28];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, PLACED);
        let p = Packet::new_checked(&PLACED[..]).unwrap();
        assert_eq!(p.placement().unwrap().ipsn, 0x102);
        assert_eq!(Repr::parse(&p), Ok(r));
        // Without the A bit the block is 8 bytes.
        let short = Repr {
            placement: Some(Placement {
                msn: 1,
                ipsn: 0,
                reth: None,
            }),
            tau_ns: Some(7),
            ..Repr::default()
        };
        let mut buf = [0u8; 16];
        short.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf[..4], [0x11, 4, 0, 0]);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Repr::parse(&p), Ok(short));
    }

    #[test]
    fn ext_placement_a_bit_without_address_rejected() {
        let mut b = PLACED;
        b[1] = 3; // declares only the 8-byte block, but the A bit asks for 16 more
        assert_eq!(Packet::new_checked(&b[..12]), Err(Error::BadExtension));
        b[1] = 2; // not even the 8-byte block
        assert_eq!(Packet::new_checked(&b[..8]), Err(Error::BadExtension));
    }

    #[test]
    fn ext_length_disagreeing_with_flags_rejected() {
        let mut b = EVERYTHING;
        b[1] = 8;
        assert_eq!(Packet::new_checked(&b[..]), Err(Error::BadExtension));
        b[1] = 10;
        assert_eq!(
            Packet::new_checked(&b[..]),
            Err(Error::Truncated(Header::Ext))
        );
        let mut b = EVERYTHING;
        b[11] = 40; // member count above MAX_LOOKAHEAD
        assert_eq!(Packet::new_checked(&b[..]), Err(Error::BadExtension));
        assert_eq!(
            Packet::new_checked(&EVERYTHING[..3]),
            Err(Error::Truncated(Header::Ext))
        );
    }

    #[test]
    fn ext_caps_word_bits_as_wire_md_assigns_them() {
        let mp = ExtCaps {
            multipath: true,
            ..ExtCaps::default()
        };
        assert_eq!(mp.to_word(), 0b1000);
        let all = ExtCaps {
            dasr_n: true,
            cnp_tau: true,
            lookahead: true,
            multipath: true,
        };
        assert_eq!(all.to_word(), 0b1111);
        assert_eq!(ExtCaps::from_word(0b0101).to_word(), 0b0101);
        // Unassigned bits are ignored, no word means nothing.
        assert_eq!(ExtCaps::from_word(0xffff_fff0), ExtCaps::default());
        assert_eq!(ExtCaps::from_word(0xffff_ff08), mp);
    }
}
