//! ACK Extended Transport Header, 4 bytes: the responder's verdict on a request.
//!
//! Source: IBA Vol. 1 §9.3.5 (AETH), and the syndrome, credit count and RNR timer encoding
//! tables of §9.7 (reliable service); the values agree with Linux `include/rdma/ib_hdrs.h`.
//!
//! ```text
//!  byte 0: Syndrome                         | bytes 1..4: MSN (24 bits)
//!  bit 7 = 0 | bits 6-5 type | bits 4-0 value
//!             00 ACK          credit count code (31 = invalid / no flow control)
//!             01 RNR NAK      RNR timer code
//!             10 reserved
//!             11 NAK          0 PSN sequence error, 1 invalid request, 2 remote access
//!                             error, 3 remote operational error, 4 invalid RD request
//! ```
//!
//! Deviations: none. Bit 7 of the syndrome is reserved; it is ignored on receipt.

use super::field;
use super::{Error, Header, Msn};
use crate::time::Duration;
use core::fmt;

header_view!(Header::Aeth, 4, "A read/write view of an AETH.");

impl<T: AsRef<[u8]>> Packet<T> {
    /// The raw syndrome byte.
    pub fn syndrome_byte(&self) -> u8 {
        self.buffer.as_ref()[0]
    }
    /// MSN: the responder's message sequence number (24 bits).
    pub fn msn(&self) -> Msn {
        Msn::new(field::u24_at(self.buffer.as_ref(), 1))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the raw syndrome byte.
    pub fn set_syndrome_byte(&mut self, v: u8) {
        self.buffer.as_mut()[0] = v;
    }
    /// Sets MSN.
    pub fn set_msn(&mut self, v: Msn) {
        field::set_u24(self.buffer.as_mut(), 1, v.value());
    }
}

/// End-to-end credits advertised in an ACK: a 5-bit code for a number of receive WQEs.
///
/// IBA §9.7 credit count encoding: codes 0–30 stand for 0, 1, 2, 3, 4, 6, 8, 12, …, 32768 (each power
/// of two and the midpoint above it); code 31 means the responder does not do end-to-end flow
/// control ("invalid" credit count).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Credits(u8);

impl Credits {
    /// Code 31: no end-to-end credit limit.
    pub const UNLIMITED: Credits = Credits(31);

    /// The credit count a code stands for; `None` for [`Credits::UNLIMITED`].
    pub const fn count(self) -> Option<u32> {
        match self.0 {
            0 => Some(0),
            1 => Some(1),
            31 => None,
            // From code 2 on, even codes are powers of two and odd codes 1.5 times the power
            // below: 2, 3, 4, 6, 8, 12, ..., 32768.
            c if c % 2 == 0 => Some(1 << (c / 2)),
            c => Some(3 << ((c - 3) / 2)),
        }
    }

    /// The largest code whose count does not exceed `n` (so we never promise more WQEs than
    /// are posted).
    pub fn at_most(n: u32) -> Credits {
        (0..31u8)
            .rev()
            .map(Credits)
            .find(|c| c.count().is_some_and(|v| v <= n))
            .unwrap_or(Credits(0))
    }

    /// The 5-bit code.
    pub const fn code(self) -> u8 {
        self.0
    }

    /// The credits for a 5-bit code (higher bits dropped).
    pub const fn from_code(code: u8) -> Credits {
        Credits(code & 0x1f)
    }
}

/// The RNR NAK timer: how long the requester waits before retrying after "receiver not ready".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RnrTimer(u8);

/// IBA §9.7 RNR NAK timer encoding, in microseconds; code 0 is the longest, 655.36 ms.
const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

impl RnrTimer {
    /// The timer for a 5-bit code (higher bits dropped).
    pub const fn from_code(code: u8) -> RnrTimer {
        RnrTimer(code & 0x1f)
    }
    /// The 5-bit code.
    pub const fn code(self) -> u8 {
        self.0
    }
    /// The delay this code stands for.
    pub const fn duration(self) -> Duration {
        Duration::from_micros(RNR_TIMER_US[(self.0 & 0x1f) as usize] as u64)
    }
}

/// NAK codes (syndrome `011xxxxx`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// 0: PSN sequence error; the requester restarts from the AETH's PSN.
    PsnSequenceError,
    /// 1: invalid request (bad opcode sequence, length, or unsupported operation).
    InvalidRequest,
    /// 2: remote access error (R_Key, bounds or permission).
    RemoteAccessError,
    /// 3: remote operational error (the responder failed internally).
    RemoteOperationalError,
    /// 4: invalid RD request.
    InvalidRdRequest,
    /// 5–31: reserved; kept as data so a peer's unknown code is reported, not a panic.
    Reserved(u8),
}

impl NakCode {
    /// The NAK of 5-bit code `c` (AETH syndrome bits 4–0).
    pub const fn from_code(c: u8) -> NakCode {
        match c & 0x1f {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            other => NakCode::Reserved(other),
        }
    }
    /// Its 5-bit code.
    pub const fn code(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(c) => c & 0x1f,
        }
    }
}

/// The AETH syndrome: ACK, RNR NAK or NAK, by bits 6–5.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive acknowledgement with end-to-end credits.
    Ack(Credits),
    /// Receiver not ready: retry after the timer.
    RnrNak(RnrTimer),
    /// Negative acknowledgement.
    Nak(NakCode),
}

impl Syndrome {
    /// Decodes a syndrome byte; bit 7 (reserved) is ignored.
    pub const fn from_byte(b: u8) -> Result<Syndrome, Error> {
        let v = b & 0x1f;
        match (b >> 5) & 0x3 {
            0b00 => Ok(Syndrome::Ack(Credits::from_code(v))),
            0b01 => Ok(Syndrome::RnrNak(RnrTimer::from_code(v))),
            0b11 => Ok(Syndrome::Nak(NakCode::from_code(v))),
            _ => Err(Error::ReservedSyndrome(b)),
        }
    }
    /// Encodes the syndrome byte.
    pub const fn to_byte(self) -> u8 {
        match self {
            Syndrome::Ack(c) => c.code(),
            Syndrome::RnrNak(t) => 0x20 | t.code(),
            Syndrome::Nak(n) => 0x60 | n.code(),
        }
    }
}

/// The meaning of an AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// ACK, RNR NAK or NAK.
    pub syndrome: Syndrome,
    /// The responder's MSN.
    pub msn: Msn,
}

impl Repr {
    /// Length of an AETH.
    pub const LEN: usize = 4;
    /// Reads an AETH; the reserved syndrome type is an error.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, Error> {
        Ok(Repr {
            syndrome: Syndrome::from_byte(p.syndrome_byte())?,
            msn: p.msn(),
        })
    }
    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        Self::LEN
    }
    /// Writes this AETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_syndrome_byte(self.syndrome.to_byte());
        p.set_msn(self.msn);
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.syndrome {
            Syndrome::Ack(c) => match c.count() {
                Some(n) => write!(f, "AETH ACK credits={n}")?,
                None => write!(f, "AETH ACK credits=unlimited")?,
            },
            Syndrome::RnrNak(t) => write!(f, "AETH RNR-NAK timer={}", t.duration())?,
            Syndrome::Nak(n) => write!(f, "AETH NAK {n:?}")?,
        }
        write!(f, " msn={}", self.msn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // rc_pingpong.pcap: the server's ACK carries syndrome 0x1f (ACK, no credit limit, as rxe
    // always sends) and MSN 1 after the first 4096-byte SEND.
    static ACK: [u8; 4] = [0x1f, 0x00, 0x00, 0x01];

    #[test]
    fn aeth_deconstruct() {
        let p = Packet::new_checked(&ACK[..]).unwrap();
        assert_eq!(p.syndrome_byte(), 0x1f);
        assert_eq!(p.msn(), Msn::new(1));
    }

    #[test]
    fn aeth_construct() {
        let mut buf = [0u8; 4];
        Repr {
            syndrome: Syndrome::Nak(NakCode::RemoteAccessError),
            msn: Msn::new(0xabcdef),
        }
        .emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, [0x62, 0xab, 0xcd, 0xef]);
    }

    #[test]
    fn aeth_parse() {
        let r = Repr::parse(&Packet::new_checked(&ACK[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            Repr {
                syndrome: Syndrome::Ack(Credits::UNLIMITED),
                msn: Msn::new(1)
            }
        );
    }

    #[test]
    fn aeth_reserved_syndrome_rejected() {
        let b = [0x40u8, 0, 0, 0];
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&b[..])),
            Err(Error::ReservedSyndrome(0x40))
        );
        assert_eq!(
            Packet::new_checked(&b[..3]),
            Err(Error::Truncated(Header::Aeth))
        );
    }

    #[test]
    fn aeth_syndrome_round_trips_every_valid_byte() {
        for b in 0u8..=0x7f {
            match Syndrome::from_byte(b) {
                Ok(s) => assert_eq!(s.to_byte(), b),
                Err(e) => assert_eq!(e, Error::ReservedSyndrome(b)),
            }
        }
        assert_eq!(
            Syndrome::from_byte(0x20 | 14),
            Ok(Syndrome::RnrNak(RnrTimer::from_code(14)))
        );
        assert_eq!(
            Syndrome::from_byte(0x60),
            Ok(Syndrome::Nak(NakCode::PsnSequenceError))
        );
        assert_eq!(
            Syndrome::from_byte(0x65),
            Ok(Syndrome::Nak(NakCode::Reserved(5)))
        );
    }

    #[test]
    fn credits_encoding_table() {
        let expect = [
            0u32, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
            1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
        ];
        for (code, n) in expect.iter().enumerate() {
            assert_eq!(
                Credits::from_code(code as u8).count(),
                Some(*n),
                "code {code}"
            );
        }
        assert_eq!(Credits::UNLIMITED.count(), None);
        assert_eq!(Credits::at_most(0).code(), 0);
        assert_eq!(Credits::at_most(5).count(), Some(4));
        assert_eq!(Credits::at_most(7).count(), Some(6));
        assert_eq!(Credits::at_most(1 << 20).count(), Some(32768));
    }

    #[test]
    fn rnr_timer_encoding_table() {
        assert_eq!(
            RnrTimer::from_code(0).duration(),
            Duration::from_micros(655_360)
        );
        assert_eq!(RnrTimer::from_code(1).duration(), Duration::from_micros(10));
        assert_eq!(
            RnrTimer::from_code(12).duration(),
            Duration::from_micros(640)
        );
        assert_eq!(
            RnrTimer::from_code(31).duration(),
            Duration::from_micros(491_520)
        );
    }
}
