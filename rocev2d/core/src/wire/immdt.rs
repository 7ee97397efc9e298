//! Immediate Data Extended Transport Header, 4 bytes.
//!
//! Source: IBA Vol. 1 §9.3.7 (ImmDt). Carried by SEND and RDMA WRITE Last/Only with Immediate;
//! the responder hands the 32 bits to the application in the receive completion. They are
//! opaque: rocev2 passes them through in network byte order, as libibverbs' `imm_data` does.
//!
//! Deviations: none.

use super::field;
use super::{Error, Header};

header_view!(Header::ImmDt, 4, "A read/write view of an ImmDt header.");

impl<T: AsRef<[u8]>> Packet<T> {
    /// Immediate Data, read as a big-endian u32.
    pub fn imm(&self) -> u32 {
        field::u32_at(self.buffer.as_ref(), 0..4)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets Immediate Data.
    pub fn set_imm(&mut self, v: u32) {
        field::set_u32(self.buffer.as_mut(), 0..4, v);
    }
}

/// The meaning of an ImmDt header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// The immediate value.
    pub imm: u32,
}

impl Repr {
    /// Length of an ImmDt header.
    pub const LEN: usize = 4;
    /// Reads an ImmDt header.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, Error> {
        Ok(Repr { imm: p.imm() })
    }
    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        Self::LEN
    }
    /// Writes this header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_imm(self.imm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // IBA §9.3.6 has no example; the bytes are the value in network order.
    static BYTES: [u8; 4] = [0xde, 0xad, 0xbe, 0xef];

    #[test]
    fn immdt_four_ways() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.imm(), 0xdeadbeef);
        assert_eq!(Repr::parse(&p), Ok(Repr { imm: 0xdeadbeef }));
        let mut buf = [0u8; 4];
        Repr { imm: 0xdeadbeef }.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
        assert_eq!(
            Packet::new_checked(&BYTES[..3]),
            Err(Error::Truncated(Header::ImmDt))
        );
    }
}
