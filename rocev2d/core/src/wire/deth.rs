//! Datagram Extended Transport Header, 8 bytes: the Q_Key and source QP of a UD packet.
//!
//! Source: IBA Vol. 1 §9.3.2 (DETH). Every UD packet carries one; rocev2 needs it
//! to parse rdma_cm's MADs on QP1 (`rping_cm.pcap`) and UD pingpong traffic.
//!
//! ```text
//!  0..4 Q_Key | 4 Reserved | 5..8 SrcQP (24 bits)
//! ```
//!
//! Deviations: none.

use super::field;
use super::{Error, Header, Qpn};
use core::fmt;

header_view!(Header::Deth, 8, "A read/write view of a DETH.");

impl<T: AsRef<[u8]>> Packet<T> {
    /// Q_Key: the datagram's queue key; QP1 traffic uses the well-known GSI Q_Key 0x80010000.
    pub fn q_key(&self) -> u32 {
        field::u32_at(self.buffer.as_ref(), 0..4)
    }
    /// SrcQP: the sender's QP.
    pub fn src_qp(&self) -> Qpn {
        Qpn::new(field::u24_at(self.buffer.as_ref(), 5))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets Q_Key.
    pub fn set_q_key(&mut self, v: u32) {
        field::set_u32(self.buffer.as_mut(), 0..4, v);
    }
    /// Sets SrcQP and clears the reserved byte.
    pub fn set_src_qp(&mut self, v: Qpn) {
        self.buffer.as_mut()[4] = 0;
        field::set_u24(self.buffer.as_mut(), 5, v.value());
    }
}

/// The meaning of a DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Queue key.
    pub q_key: u32,
    /// Source QP.
    pub src_qp: Qpn,
}

impl Repr {
    /// Length of a DETH.
    pub const LEN: usize = 8;
    /// Reads a DETH.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, Error> {
        Ok(Repr {
            q_key: p.q_key(),
            src_qp: p.src_qp(),
        })
    }
    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        Self::LEN
    }
    /// Writes this header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_q_key(self.q_key);
        p.set_src_qp(self.src_qp);
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DETH qkey={:#010x} src_qp={}", self.q_key, self.src_qp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The GSI Q_Key 0x80010000 from source QP 1, as rdma_cm sends its MADs.
    static BYTES: [u8; 8] = [0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01];

    #[test]
    fn deth_four_ways() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!((p.q_key(), p.src_qp()), (0x8001_0000, Qpn::GSI));
        let r = Repr::parse(&p).unwrap();
        assert_eq!(
            r,
            Repr {
                q_key: 0x8001_0000,
                src_qp: Qpn::GSI
            }
        );
        let mut buf = [0xffu8; 8];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
        assert_eq!(
            Packet::new_checked(&BYTES[..7]),
            Err(Error::Truncated(Header::Deth))
        );
    }
}
