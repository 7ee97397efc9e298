//! RDMA Extended Transport Header, 16 bytes: where an RDMA WRITE or READ lands.
//!
//! Source: IBA Vol. 1 §9.3.3 (RETH). Carried by RDMA WRITE First/Only (with or
//! without Immediate) and RDMA READ Request.
//!
//! ```text
//!  0..8 VirtualAddress | 8..12 R_Key | 12..16 DMA Length
//! ```
//!
//! Deviations: none.

use super::field::{self, Field};
use super::{Error, Header};
use core::fmt;

const VA: Field = 0..8;
const R_KEY: Field = 8..12;
const DMA_LEN: Field = 12..16;

header_view!(Header::Reth, 16, "A read/write view of a RETH.");

impl<T: AsRef<[u8]>> Packet<T> {
    /// VirtualAddress: the remote address of the first byte (64 bits).
    pub fn va(&self) -> u64 {
        field::u64_at(self.buffer.as_ref(), VA)
    }
    /// R_Key: the remote key that authorises the access.
    pub fn r_key(&self) -> u32 {
        field::u32_at(self.buffer.as_ref(), R_KEY)
    }
    /// DMA Length: bytes of the whole message (up to 2^31, IBA §9.4.4).
    pub fn dma_len(&self) -> u32 {
        field::u32_at(self.buffer.as_ref(), DMA_LEN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets VirtualAddress.
    pub fn set_va(&mut self, v: u64) {
        field::set_u64(self.buffer.as_mut(), VA, v);
    }
    /// Sets R_Key.
    pub fn set_r_key(&mut self, v: u32) {
        field::set_u32(self.buffer.as_mut(), R_KEY, v);
    }
    /// Sets DMA Length.
    pub fn set_dma_len(&mut self, v: u32) {
        field::set_u32(self.buffer.as_mut(), DMA_LEN, v);
    }
}

/// The meaning of a RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub r_key: u32,
    /// Message length in bytes.
    pub dma_len: u32,
}

impl Repr {
    /// Length of a RETH.
    pub const LEN: usize = 16;
    /// Reads a RETH; every value is meaningful, so nothing is rejected.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, Error> {
        Ok(Repr {
            va: p.va(),
            r_key: p.r_key(),
            dma_len: p.dma_len(),
        })
    }
    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        Self::LEN
    }
    /// Writes this RETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_va(self.va);
        p.set_r_key(self.r_key);
        p.set_dma_len(self.dma_len);
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RETH va={:#x} rkey={:#010x} len={}",
            self.va, self.r_key, self.dma_len
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // write_bw.pcap, first RDMA WRITE First from the client: va 0x564acdd26000,
    // rkey 0x2ba, 8192 bytes (write_bw.tool-output.txt: server RKey 0x0002ba VAddr
    // 0x00564acdd26000).
    static BYTES: [u8; 16] = [
        0x00, 0x00, 0x56, 0x4a, 0xcd, 0xd2, 0x60, 0x00, 0x00, 0x00, 0x02, 0xba, 0x00, 0x00, 0x20,
        0x00,
    ];
    const REPR: Repr = Repr {
        va: 0x564a_cdd2_6000,
        r_key: 0x2ba,
        dma_len: 8192,
    };

    #[test]
    fn reth_deconstruct() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(
            (p.va(), p.r_key(), p.dma_len()),
            (0x564a_cdd2_6000, 0x2ba, 8192)
        );
    }

    #[test]
    fn reth_construct() {
        let mut buf = [0u8; 16];
        REPR.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn reth_parse() {
        assert_eq!(
            Repr::parse(&Packet::new_checked(&BYTES[..]).unwrap()),
            Ok(REPR)
        );
    }

    #[test]
    fn reth_truncated() {
        assert_eq!(
            Packet::new_checked(&BYTES[..15]),
            Err(Error::Truncated(Header::Reth))
        );
    }
}
