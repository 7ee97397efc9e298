//! Invalidate Extended Transport Header, 4 bytes.
//!
//! Source: IBA Vol. 1 §9.3.8 (IETH). Carried by SEND Last/Only with Invalidate: the R_Key the
//! responder must invalidate when the message completes.
//!
//! Deviations: none.

use super::field;
use super::{Error, Header};

header_view!(Header::Ieth, 4, "A read/write view of an IETH.");

impl<T: AsRef<[u8]>> Packet<T> {
    /// R_Key to invalidate.
    pub fn r_key(&self) -> u32 {
        field::u32_at(self.buffer.as_ref(), 0..4)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the R_Key to invalidate.
    pub fn set_r_key(&mut self, v: u32) {
        field::set_u32(self.buffer.as_mut(), 0..4, v);
    }
}

/// The meaning of an IETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// The R_Key to invalidate.
    pub r_key: u32,
}

impl Repr {
    /// Length of an IETH.
    pub const LEN: usize = 4;
    /// Reads an IETH.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, Error> {
        Ok(Repr { r_key: p.r_key() })
    }
    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        Self::LEN
    }
    /// Writes this header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_r_key(self.r_key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static BYTES: [u8; 4] = [0x00, 0x00, 0x02, 0xcf];

    #[test]
    fn ieth_four_ways() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.r_key(), 0x2cf);
        assert_eq!(Repr::parse(&p), Ok(Repr { r_key: 0x2cf }));
        let mut buf = [0u8; 4];
        Repr { r_key: 0x2cf }.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
        assert_eq!(
            Packet::new_checked(&BYTES[..2]),
            Err(Error::Truncated(Header::Ieth))
        );
    }
}
