//! [`HostMemory`]: every attached application's registered regions, as the engine sees memory.
//!
//! Each region is the application's memfd mapped into the daemon ([`rocev2_ipc::shm::Region`]),
//! so the engine places and gathers payload in place, and RDMA atomics are real atomics on the
//! application's word (they hold against its own threads too). The core checks every access
//! against the region's bounds first; the region checks again and the daemon reads zeros or
//! drops the write if the core were ever wrong.
//!
//! Deviations: none.

use rocev2_core::mr::{AtomicOp, Memory, MrId};
use rocev2_ipc::shm::Region;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

/// The regions of every attachment, by the engine's region id.
#[derive(Debug, Default)]
pub struct HostMemory {
    regions: BTreeMap<MrId, Region>,
}

impl HostMemory {
    /// Backs region `mr` with `region`.
    pub fn insert(&mut self, mr: MrId, region: Region) {
        self.regions.insert(mr, region);
    }

    /// Unmaps region `mr`.
    pub fn remove(&mut self, mr: MrId) -> Option<Region> {
        self.regions.remove(&mr)
    }

    /// Regions mapped.
    pub fn len(&self) -> usize {
        self.regions.len()
    }

    /// True when no region is mapped.
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }
}

fn at(offset: u64) -> usize {
    usize::try_from(offset).unwrap_or(usize::MAX)
}

impl Memory for HostMemory {
    fn read(&self, mr: MrId, offset: u64, buf: &mut [u8]) {
        if !self
            .regions
            .get(&mr)
            .is_some_and(|r| r.read(at(offset), buf))
        {
            buf.fill(0);
        }
    }

    fn write(&mut self, mr: MrId, offset: u64, data: &[u8]) {
        if let Some(r) = self.regions.get(&mr) {
            r.write(at(offset), data);
        }
    }

    fn atomic(&mut self, mr: MrId, offset: u64, op: AtomicOp) -> u64 {
        let Some(word) = self.regions.get(&mr).and_then(|r| r.atomic_u64(at(offset))) else {
            return 0;
        };
        match op {
            AtomicOp::FetchAdd { add } => word.fetch_add(add, Ordering::SeqCst),
            AtomicOp::CompareSwap { compare, swap } => word
                .compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst)
                .unwrap_or_else(|current| current),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomics_and_copies_reach_the_shared_pages() {
        let region = Region::create("t", 64).unwrap();
        let view = Region::from_fd(region.fd().try_clone_to_owned().unwrap(), 64).unwrap();
        let mut m = HostMemory::default();
        let id = MrId::new(3);
        m.insert(id, region);
        m.write(id, 8, &5u64.to_ne_bytes());
        assert_eq!(m.atomic(id, 8, AtomicOp::FetchAdd { add: 2 }), 5);
        let miss = AtomicOp::CompareSwap {
            compare: 1,
            swap: 9,
        };
        assert_eq!(m.atomic(id, 8, miss), 7);
        let hit = AtomicOp::CompareSwap {
            compare: 7,
            swap: 9,
        };
        assert_eq!(m.atomic(id, 8, hit), 7);
        let mut w = [0u8; 8];
        view.read(8, &mut w);
        assert_eq!(u64::from_ne_bytes(w), 9);
        // Outside the region, or an unknown one: zeros, nothing written, no panic.
        let mut buf = [1u8; 8];
        m.read(id, 60, &mut buf);
        assert_eq!(buf, [0; 8]);
        m.write(MrId::new(4), 0, &[1]);
        assert_eq!(m.atomic(id, 60, hit), 0);
    }
}
