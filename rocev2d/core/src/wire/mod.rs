//! RoCEv2 wire formats: zero-copy packet views and plain `Repr` structs.
//!
//! Layout of a RoCEv2 frame, and where each part lives:
//!
//! ```text
//! Ethernet II [802.1Q] | IPv4 or IPv6 | UDP dport 4791 | BTH [REXT] [DETH] [RETH] [AtomicETH]
//!                                                       [AETH] [AtomicAckETH] [ImmDt] [IETH]
//!                                                       payload [pad] ICRC
//! frame.rs (etherparse) --------------------------------| packet.rs, one file per header ----|
//! ```
//!
//! Two levels, as in smoltcp:
//!
//! * `Packet<T: AsRef<[u8]>>` in each header file is a view over bytes. `new_checked` proves
//!   that every getter is in bounds; getters then read fields without further checks. Views do
//!   no semantic validation.
//! * `Repr` is the plain meaning of a header. `Repr::parse` validates a view (known opcode,
//!   consistent lengths, reserved code points); `Repr::emit` writes into a caller buffer of
//!   exactly `buffer_len()` bytes and never allocates.
//!
//! # Panics
//!
//! Nothing here panics on received bytes: every parser returns [`Error`], which names the reason
//! so the endpoint can count drops by reason. `emit` may panic only when *our own* buffer is
//! shorter than `buffer_len()`, which is a bug in the caller that tests catch.
//!
//! Which headers follow the BTH is decided by one table, [`opcode::Layout`], used by both parse
//! and emit, so the two can never disagree.

use core::fmt;

macro_rules! header_view {
    ($header:expr, $len:expr, $doc:literal) => {
        #[doc = $doc]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct Packet<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> Packet<T> {
            /// Length of this header in bytes.
            pub const LEN: usize = $len;

            /// Wraps a buffer without checking its length; getters may then panic.
            pub const fn new_unchecked(buffer: T) -> Self {
                Packet { buffer }
            }

            /// Wraps a buffer after [`Self::check_len`]; use this on received bytes.
            pub fn new_checked(buffer: T) -> Result<Self, crate::wire::Error> {
                let p = Self::new_unchecked(buffer);
                p.check_len()?;
                Ok(p)
            }

            /// Ensures every getter is in bounds.
            pub fn check_len(&self) -> Result<(), crate::wire::Error> {
                if self.buffer.as_ref().len() < Self::LEN {
                    Err(crate::wire::Error::Truncated($header))
                } else {
                    Ok(())
                }
            }

            /// Gives back the underlying buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}

pub mod aeth;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
pub mod cnp;
pub mod datagram;
pub mod deth;
pub mod ext;
pub mod frame;
pub mod gid;
pub mod grh;
pub mod icrc;
pub mod ieth;
pub mod immdt;
pub mod ip;
pub mod mad;
pub mod opcode;
pub mod packet;
pub mod psn;
pub mod reth;

pub use aeth::{Credits, NakCode, Packet as AethPacket, Repr as AethRepr, RnrTimer, Syndrome};
pub use atomic_ack_eth::{Packet as AtomicAckEthPacket, Repr as AtomicAckEthRepr};
pub use atomic_eth::{Packet as AtomicEthPacket, Repr as AtomicEthRepr};
pub use bth::{Packet as BthPacket, Qpn, Repr as BthRepr};
pub use cnp::Packet as CnpPacket;
pub use datagram::DatagramMeta;
pub use deth::{Packet as DethPacket, Repr as DethRepr};
pub use ext::{Packet as ExtPacket, Repr as ExtRepr};
pub use frame::{
    EthRepr, FrameBuf, FrameRepr, HeaderTemplate, IpRepr, ROCEV2_UDP_PORT, UdpRepr, VlanRepr,
};
pub use ieth::{Packet as IethPacket, Repr as IethRepr};
pub use immdt::{Packet as ImmDtPacket, Repr as ImmDtRepr};
pub use mad::{
    CmAttribute, CmRepr, GSI_Q_KEY, HeaderRepr as MadHeaderRepr, MAD_LEN, MadError,
    Packet as MadPacket,
};
pub use opcode::{Layout, Opcode, Operation, Transport};
pub use packet::{Packet as RocePacket, Repr as RoceRepr};
pub use psn::{Msn, Psn};
pub use reth::{Packet as RethPacket, Repr as RethRepr};

/// A header of a RoCEv2 frame, named in errors and drop counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)]
pub enum Header {
    Ethernet,
    Vlan,
    Ipv4,
    Ipv6,
    Udp,
    Bth,
    Ext,
    Deth,
    Reth,
    AtomicEth,
    Aeth,
    AtomicAckEth,
    ImmDt,
    Ieth,
    Cnp,
    Icrc,
    /// A management datagram (the payload of a UD packet to QP1).
    Mad,
}

impl fmt::Display for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Header::Ethernet => "Ethernet",
            Header::Vlan => "802.1Q",
            Header::Ipv4 => "IPv4",
            Header::Ipv6 => "IPv6",
            Header::Udp => "UDP",
            Header::Bth => "BTH",
            Header::Ext => "REXT",
            Header::Deth => "DETH",
            Header::Reth => "RETH",
            Header::AtomicEth => "AtomicETH",
            Header::Aeth => "AETH",
            Header::AtomicAckEth => "AtomicAckETH",
            Header::ImmDt => "ImmDt",
            Header::Ieth => "IETH",
            Header::Cnp => "CNP",
            Header::Icrc => "ICRC",
            Header::Mad => "MAD",
        })
    }
}

/// Why bytes are not a valid RoCEv2 frame. Every variant maps to one drop reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The bytes end inside this header.
    #[error("truncated {0} header")]
    Truncated(Header),
    /// A header's fields are inconsistent (bad IP version or length, UDP length, ...).
    #[error("malformed {0} header")]
    Malformed(Header),
    /// The Ethernet frame carries neither IPv4 nor IPv6 (after an optional 802.1Q tag).
    #[error("not an IPv4 or IPv6 frame")]
    NotIp,
    /// The IP packet is not UDP, or is a fragment.
    #[error("not an unfragmented UDP packet")]
    NotUdp,
    /// The UDP destination port is not 4791.
    #[error("UDP destination port {0} is not RoCEv2 (4791)")]
    NotRoce(u16),
    /// IPv4 options or IPv6 extension headers: RoCEv2 peers never send them and the ICRC
    /// rules for them are unspecified, so they are refused rather than guessed at.
    #[error("IPv4 options and IPv6 extension headers are not supported")]
    IpOptions,
    /// The IPv4 header checksum does not match.
    #[error("bad IPv4 header checksum")]
    BadIpChecksum,
    /// The UDP checksum is present and does not match.
    #[error("bad UDP checksum")]
    BadUdpChecksum,
    /// The BTH opcode is reserved, or belongs to a transport we do not implement (RD, XRC,
    /// manufacturer-specific).
    #[error("unknown or unsupported opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// BTH.TVer is neither 0 (IBA) nor 1 (IBA plus our negotiated REXT header).
    #[error("unsupported transport header version {0}")]
    BadTver(u8),
    /// The REXT extension header has a length that does not match its flags.
    #[error("malformed REXT extension header")]
    BadExtension,
    /// BTH.PadCnt is larger than the payload, or non-zero on an opcode without payload.
    #[error("pad count exceeds payload")]
    BadPadCount,
    /// An opcode that carries no payload (ACK, READ request, atomic) has trailing bytes.
    #[error("payload on an opcode that carries none")]
    UnexpectedPayload,
    /// The AETH syndrome uses the reserved type `10b`.
    #[error("reserved AETH syndrome {0:#04x}")]
    ReservedSyndrome(u8),
    /// The invariant CRC does not match the frame.
    #[error("ICRC mismatch")]
    BadIcrc,
    /// A `Repr` cannot be emitted: its headers do not match its opcode's layout, or its
    /// payload does not fit the IP/UDP length fields.
    #[error("representation does not match the opcode layout or length limits")]
    BadRepr,
    /// A management datagram this crate does not accept (base or class version, class,
    /// attribute; see [`mad`]).
    #[error("{0}")]
    BadMad(MadError),
}

/// Big-endian accessors on byte slices for the header views; the views' `check_len` has proved
/// the ranges in bounds.
pub(crate) mod field {
    /// A byte range within a header.
    pub type Field = core::ops::Range<usize>;

    #[inline]
    pub fn u16_at(b: &[u8], f: Field) -> u16 {
        let mut a = [0u8; 2];
        a.copy_from_slice(&b[f]);
        u16::from_be_bytes(a)
    }
    #[inline]
    pub fn u24_at(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
    }
    #[inline]
    pub fn u32_at(b: &[u8], f: Field) -> u32 {
        let mut a = [0u8; 4];
        a.copy_from_slice(&b[f]);
        u32::from_be_bytes(a)
    }
    #[inline]
    pub fn u64_at(b: &[u8], f: Field) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[f]);
        u64::from_be_bytes(a)
    }
    #[inline]
    pub fn set_u16(b: &mut [u8], f: Field, v: u16) {
        b[f].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn set_u24(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
    }
    #[inline]
    pub fn set_u32(b: &mut [u8], f: Field, v: u32) {
        b[f].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn set_u64(b: &mut [u8], f: Field, v: u64) {
        b[f].copy_from_slice(&v.to_be_bytes());
    }
}
