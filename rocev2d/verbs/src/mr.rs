//! Protection domains and memory-region handles.
//!
//! A region's bytes are owned by the [`crate::Device`] (the engine copies into and out of them
//! between work requests, as an HCA would DMA); the application reaches them through
//! [`crate::Device::mr_bytes`] / [`crate::Device::mr_bytes_mut`] and gets them back with
//! [`crate::Device::deregister`]. So no raw pointer is ever handed to the engine and this crate
//! needs no `unsafe`.
//!
//! Deviations from verbs: a region is identified by a virtual address the device picks (page
//! aligned, never overlapping another region), not by the buffer's real address.

use rocev2_core::mr::{AccessFlags, Lkey, MrInfo, PdId, Rkey};
use rocev2_core::qp::Sge;

/// A protection domain (`ibv_pd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pd(pub(crate) PdId);

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
    /// # Panics
    /// When the range does not lie inside the region.
    pub fn sge(&self, offset: u64, len: u32) -> Sge {
        assert!(
            offset
                .checked_add(u64::from(len))
                .is_some_and(|end| end <= self.info.len),
            "SGE [{offset}, +{len}) outside a region of {} bytes",
            self.info.len
        );
        Sge {
            addr: self.info.addr + offset,
            length: len,
            lkey: self.info.lkey,
        }
    }
}
