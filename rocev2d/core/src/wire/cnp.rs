//! Congestion Notification Packet: a BTH with opcode 0x81 and 16 reserved bytes.
//!
//! Source: RoCEv2 Annex A17.9.1 (CNP format) and seed 002 §II-B (the DCQCN notification point
//! sends one to the sender's QP when CE-marked packets arrive). The BTH of a CNP has opcode
//! `1000_0001b`, BECN set, DestQP = the QP whose packets were marked, and A, SE, M, PadCnt and
//! PSN zero; the 16 bytes after it are reserved. [`bth`] builds that BTH so every CNP rocev2
//! sends is the same shape a ConnectX NIC sends.
//!
//! DCQCN+'s period τ travels in a REXT header before the reserved bytes, never inside them:
//! reserved bytes are ignored by standard receivers and must stay zero (see `docs/wire.md`).
//!
//! Deviations: none.

use super::{BthRepr, Error, Header, Opcode, Psn, Qpn};

header_view!(
    Header::Cnp,
    16,
    "A view of the 16 reserved bytes that follow a CNP's BTH."
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The reserved bytes, for inspection; receivers ignore them.
    pub fn reserved(&self) -> &[u8] {
        &self.buffer.as_ref()[..16]
    }
}

/// The BTH of a CNP telling the sender QP `dest_qp` that its packets were CE-marked.
pub const fn bth(dest_qp: Qpn, p_key: u16) -> BthRepr {
    BthRepr {
        becn: true,
        ..BthRepr::new(Opcode::CNP, p_key, dest_qp, Psn::new(0))
    }
}

/// Reads the reserved bytes (nothing to validate: receivers ignore them).
pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<(), Error> {
    p.check_len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::BthPacket;

    #[test]
    fn cnp_bth_has_opcode_0x81_and_becn() {
        let mut buf = [0u8; 12];
        bth(Qpn::new(0x11), 0xffff).emit(&mut BthPacket::new_unchecked(&mut buf[..]));
        assert_eq!(
            buf,
            [
                0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x00, 0x11, 0x00, 0x00, 0x00, 0x00
            ]
        );
    }

    #[test]
    fn cnp_reserved_truncated() {
        let b = [0u8; 15];
        assert_eq!(
            Packet::new_checked(&b[..]),
            Err(Error::Truncated(Header::Cnp))
        );
        assert_eq!(parse(&Packet::new_unchecked(&[0u8; 16][..])), Ok(()));
    }
}
