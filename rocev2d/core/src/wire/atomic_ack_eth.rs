//! Atomic Acknowledge Extended Transport Header, 8 bytes.
//!
//! Source: IBA Vol. 1 §9.3.6 (AtomicAckETH). Follows the AETH in an ATOMIC Acknowledge and
//! returns the value the target held before the CmpSwap or FetchAdd, big-endian on the wire.
//!
//! Deviations: none.

use super::field;
use super::{Error, Header};

header_view!(
    Header::AtomicAckEth,
    8,
    "A read/write view of an AtomicAckETH."
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Original Remote Data: the 64-bit value before the atomic operation.
    pub fn orig_data(&self) -> u64 {
        field::u64_at(self.buffer.as_ref(), 0..8)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets Original Remote Data.
    pub fn set_orig_data(&mut self, v: u64) {
        field::set_u64(self.buffer.as_mut(), 0..8, v);
    }
}

/// The meaning of an AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// The value before the operation.
    pub orig_data: u64,
}

impl Repr {
    /// Length of an AtomicAckETH.
    pub const LEN: usize = 8;
    /// Reads an AtomicAckETH.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, Error> {
        Ok(Repr {
            orig_data: p.orig_data(),
        })
    }
    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        Self::LEN
    }
    /// Writes this header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_orig_data(self.orig_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // An all-zero value (a counter that started at 0) and a pattern that shows the byte order.
    static ZERO: [u8; 8] = [0; 8];
    static BYTES: [u8; 8] = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08];

    #[test]
    fn atomic_ack_eth_four_ways() {
        assert_eq!(Packet::new_checked(&ZERO[..]).unwrap().orig_data(), 0);
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.orig_data(), 0x0102030405060708);
        assert_eq!(
            Repr::parse(&p),
            Ok(Repr {
                orig_data: 0x0102030405060708
            })
        );
        let mut buf = [0u8; 8];
        Repr {
            orig_data: 0x0102030405060708,
        }
        .emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
        assert_eq!(
            Packet::new_checked(&BYTES[..7]),
            Err(Error::Truncated(Header::AtomicAckEth))
        );
    }
}
