//! Protection domains and memory-region handles.
//!
//! A region's bytes are owned by the [`crate::Device`] (the engine copies into and out of them
//! between work requests, as an HCA would DMA); the application reaches them through a guard,
//! [`crate::Device::mr_guard`] (which holds the device's lock: keep it short, the engine waits),
//! or the typed helpers [`crate::Device::read_u64`] / [`crate::Device::write_u64`], and gets
//! them back with [`crate::Device::deregister`]. So no raw pointer is ever handed to the engine
//! and this crate needs no `unsafe`.
//!
//! Deviations from verbs: a region is identified by a virtual address the device picks (page
//! aligned, never overlapping another region), not by the buffer's real address.

use crate::error::{Error, Result};
use rocev2_core::mr::{AccessFlags, Lkey, MrInfo, PdId, Rkey};
use rocev2_core::qp::Sge;

/// A protection domain (`ibv_pd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pd(pub(crate) PdId, pub(crate) u64);

impl Pd {
    /// The engine's id.
    pub fn id(&self) -> PdId {
        self.0
    }
}

/// A registered memory region (`ibv_mr`): keys, address and length. Cheap to copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mr {
    pub(crate) info: MrInfo,
    /// The device that owns the bytes, so another device's handle is refused.
    pub(crate) device: u64,
}

impl Mr {
    /// Local key, for this side's scatter/gather elements.
    pub fn lkey(&self) -> Lkey {
        self.info.lkey
    }
    /// Remote key, for the peer's RDMA READ/WRITE/atomics.
    pub fn rkey(&self) -> Rkey {
        self.info.rkey
    }
    /// Virtual address of the first byte.
    pub fn addr(&self) -> u64 {
        self.info.addr
    }
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.info.len
    }
    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.info.len == 0
    }
    /// Rights granted at registration.
    pub fn access(&self) -> AccessFlags {
        self.info.access
    }
    /// Everything the engine knows about the region.
    pub fn info(&self) -> &MrInfo {
        &self.info
    }
    /// The scatter/gather element for `len` bytes at `offset` in this region.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] when the range does not lie inside the region.
    pub fn sge(&self, offset: u64, len: u32) -> Result<Sge> {
        self.check_range(offset, u64::from(len))?;
        Ok(Sge {
            addr: self.info.addr + offset,
            length: len,
            lkey: self.info.lkey,
        })
    }

    /// The remote descriptor of `len` bytes at `offset` (address and rkey for a peer's READ,
    /// WRITE or atomic).
    ///
    /// # Errors
    /// [`Error::OutOfRange`].
    pub fn remote_addr(&self, offset: u64, len: u64) -> Result<u64> {
        self.check_range(offset, len)?;
        Ok(self.info.addr + offset)
    }

    pub(crate) fn check_range(&self, offset: u64, len: u64) -> Result<()> {
        if offset
            .checked_add(len)
            .is_some_and(|end| end <= self.info.len)
        {
            Ok(())
        } else {
            Err(Error::OutOfRange {
                offset,
                len,
                region_len: self.info.len,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocev2_core::mr::MrId;

    fn mr(len: u64) -> Mr {
        Mr {
            info: MrInfo {
                id: MrId::new(1),
                lkey: Lkey::new(5),
                rkey: Rkey::new(6),
                addr: 0x1000,
                len,
                access: AccessFlags::LOCAL_WRITE,
                pd: PdId::new(1),
            },
            device: 1,
        }
    }

    #[test]
    fn an_sge_outside_the_region_is_an_error_not_a_panic() {
        let m = mr(100);
        assert_eq!(m.sge(0, 100).unwrap().addr, 0x1000);
        assert_eq!(m.sge(90, 10).unwrap().length, 10);
        assert!(matches!(m.sge(91, 10), Err(Error::OutOfRange { .. })));
        assert!(matches!(m.sge(u64::MAX, 1), Err(Error::OutOfRange { .. })));
        assert!(m.remote_addr(100, 0).is_ok());
        assert!(m.remote_addr(96, 8).is_err());
    }
}
