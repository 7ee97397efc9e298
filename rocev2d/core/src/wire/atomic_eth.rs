//! Atomic Extended Transport Header, 28 bytes: the operands of CmpSwap and FetchAdd.
//!
//! Source: IBA Vol. 1 §9.3.4 (AtomicETH); semantics §9.4.5.
//!
//! ```text
//!  0..8 VirtualAddress | 8..12 R_Key | 12..20 Swap (or Add) Data | 20..28 Compare Data
//! ```
//!
//! The target must be 8-byte aligned (IBA §9.4.5, checked by the responder, not here).
//!
//! Deviations: none.

use super::field::{self, Field};
use super::{Error, Header};
use core::fmt;

const VA: Field = 0..8;
const R_KEY: Field = 8..12;
const SWAP_ADD: Field = 12..20;
const COMPARE: Field = 20..28;

header_view!(Header::AtomicEth, 28, "A read/write view of an AtomicETH.");

impl<T: AsRef<[u8]>> Packet<T> {
    /// VirtualAddress of the 64-bit target.
    pub fn va(&self) -> u64 {
        field::u64_at(self.buffer.as_ref(), VA)
    }
    /// R_Key authorising the access.
    pub fn r_key(&self) -> u32 {
        field::u32_at(self.buffer.as_ref(), R_KEY)
    }
    /// Swap Data (CmpSwap) or Add Data (FetchAdd).
    pub fn swap_add(&self) -> u64 {
        field::u64_at(self.buffer.as_ref(), SWAP_ADD)
    }
    /// Compare Data (CmpSwap; ignored by FetchAdd).
    pub fn compare(&self) -> u64 {
        field::u64_at(self.buffer.as_ref(), COMPARE)
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
    /// Sets Swap/Add Data.
    pub fn set_swap_add(&mut self, v: u64) {
        field::set_u64(self.buffer.as_mut(), SWAP_ADD, v);
    }
    /// Sets Compare Data.
    pub fn set_compare(&mut self, v: u64) {
        field::set_u64(self.buffer.as_mut(), COMPARE, v);
    }
}

/// The meaning of an AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Remote virtual address of the target.
    pub va: u64,
    /// Remote key.
    pub r_key: u32,
    /// Swap value (CmpSwap) or addend (FetchAdd).
    pub swap_add: u64,
    /// Compare value (CmpSwap).
    pub compare: u64,
}

impl Repr {
    /// Length of an AtomicETH.
    pub const LEN: usize = 28;
    /// Reads an AtomicETH.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, Error> {
        Ok(Repr {
            va: p.va(),
            r_key: p.r_key(),
            swap_add: p.swap_add(),
            compare: p.compare(),
        })
    }
    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        Self::LEN
    }
    /// Writes this header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_va(self.va);
        p.set_r_key(self.r_key);
        p.set_swap_add(self.swap_add);
        p.set_compare(self.compare);
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "AtomicETH va={:#x} rkey={:#010x} swap/add={:#x} compare={:#x}",
            self.va, self.r_key, self.swap_add, self.compare
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static BYTES: [u8; 28] = [
        0x00, 0x00, 0x7f, 0x00, 0x12, 0x34, 0x56, 0x78, // va
        0x00, 0x00, 0x02, 0xba, // rkey
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, // add 1
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, // compare
    ];
    const REPR: Repr = Repr {
        va: 0x7f00_1234_5678,
        r_key: 0x2ba,
        swap_add: 1,
        compare: u64::MAX - 1,
    };

    #[test]
    fn atomic_eth_four_ways() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(
            (p.va(), p.r_key(), p.swap_add(), p.compare()),
            (REPR.va, REPR.r_key, 1, u64::MAX - 1)
        );
        assert_eq!(Repr::parse(&p), Ok(REPR));
        let mut buf = [0u8; 28];
        REPR.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
        assert_eq!(
            Packet::new_checked(&BYTES[..27]),
            Err(Error::Truncated(Header::AtomicEth))
        );
    }
}
