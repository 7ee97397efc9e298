//! [`CallerMemory`]: the engine's [`Memory`] over the application's own buffers, as
//! `ibv_reg_mr` hands them over (any pointer; the engine reads and writes them in place, as a
//! NIC's DMA would).
//!
//! The core only calls [`Memory`] after its `MrTable` check, but every access here is bounded
//! again against the registered length, so a core bug reads zeros or drops bytes instead of
//! touching memory outside a region. Atomics use a real `AtomicU64` on the (8-byte aligned)
//! word, because the application's threads may touch it while the "HCA" does.
//!
//! Deviations: none from verbs; like a NIC, the engine may read a buffer the application is
//! writing (what is sent is then unspecified), which is the caller's contract in verbs.

use rocev2_core::mr::{AtomicOp, Memory, MrId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// One registered buffer: its address in this process and length.
#[derive(Debug, Clone, Copy)]
struct Region {
    ptr: usize,
    len: usize,
}

/// The registered buffers of one device, by region.
#[derive(Debug, Default)]
pub struct CallerMemory {
    regions: HashMap<MrId, Region>,
}

impl CallerMemory {
    /// Adds region `mr`: `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr..ptr + len` must be readable and writable memory of this process until
    /// [`CallerMemory::remove`] is called for `mr` (the `ibv_reg_mr` contract).
    pub unsafe fn insert(&mut self, mr: MrId, ptr: *mut u8, len: usize) {
        self.regions.insert(
            mr,
            Region {
                ptr: ptr as usize,
                len,
            },
        );
    }

    /// Forgets region `mr`; its memory is never touched again.
    pub fn remove(&mut self, mr: MrId) {
        self.regions.remove(&mr);
    }

    /// The address of `n` bytes at `offset` in `mr`, if they lie inside it.
    fn span(&self, mr: MrId, offset: u64, n: usize) -> Option<usize> {
        let r = self.regions.get(&mr)?;
        let off = usize::try_from(offset).ok()?;
        (off.checked_add(n)? <= r.len).then(|| r.ptr + off)
    }
}

impl Memory for CallerMemory {
    fn read(&self, mr: MrId, offset: u64, buf: &mut [u8]) {
        match self.span(mr, offset, buf.len()) {
            // SAFETY: `span` checked that the bytes lie inside a registered region, which
            // `insert`'s contract keeps readable until removed; `buf` is ours and distinct.
            Some(p) => unsafe {
                std::ptr::copy_nonoverlapping(p as *const u8, buf.as_mut_ptr(), buf.len())
            },
            None => buf.fill(0),
        }
    }

    fn write(&mut self, mr: MrId, offset: u64, data: &[u8]) {
        if let Some(p) = self.span(mr, offset, data.len()) {
            // SAFETY: as in `read`, the span is inside a live, writable registered region.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p as *mut u8, data.len()) }
        }
    }

    fn atomic(&mut self, mr: MrId, offset: u64, op: AtomicOp) -> u64 {
        let Some(p) = self.span(mr, offset, 8).filter(|p| p % 8 == 0) else {
            return 0;
        };
        // SAFETY: 8 bytes inside a live registered region, 8-byte aligned (checked above);
        // every access the engine makes to it goes through atomics, and the application's
        // threads racing it is the verbs contract for atomics on host memory.
        let word = unsafe { AtomicU64::from_ptr(p as *mut u64) };
        match op {
            AtomicOp::FetchAdd { add } => word.fetch_add(add, Ordering::SeqCst),
            AtomicOp::CompareSwap { compare, swap } => {
                match word.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(v) | Err(v) => v,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accesses_stay_inside_regions() {
        let mut buf = vec![7u8; 16];
        let mut m = CallerMemory::default();
        let id = MrId::new(1);
        // SAFETY: `buf` outlives `m`'s use below and is not otherwise touched meanwhile.
        unsafe { m.insert(id, buf.as_mut_ptr(), buf.len()) };
        m.write(id, 14, &[1, 2]);
        m.write(id, 15, &[9, 9]); // one byte past the end: dropped whole
        let mut out = [0xffu8; 4];
        m.read(id, 13, &mut out); // past the end: zeros
        assert_eq!(out, [0; 4]);
        m.read(id, 12, &mut out);
        assert_eq!(out, [7, 7, 1, 2]);
        m.read(MrId::new(2), 0, &mut out);
        assert_eq!(out, [0; 4], "unknown region reads zeros");
        m.remove(id);
        m.write(id, 0, &[5]);
        assert_eq!(buf[0], 7, "a removed region is not written");
    }

    #[test]
    fn atomics_are_real_and_aligned() {
        let mut words = vec![5u64, 0];
        let mut m = CallerMemory::default();
        let id = MrId::new(1);
        // SAFETY: `words` outlives the uses below.
        unsafe { m.insert(id, words.as_mut_ptr().cast(), 16) };
        assert_eq!(m.atomic(id, 0, AtomicOp::FetchAdd { add: 3 }), 5);
        let cs = AtomicOp::CompareSwap {
            compare: 8,
            swap: 1,
        };
        assert_eq!(m.atomic(id, 0, cs), 8);
        assert_eq!(
            m.atomic(id, 4, AtomicOp::FetchAdd { add: 1 }),
            0,
            "misaligned"
        );
        assert_eq!(
            m.atomic(id, 16, AtomicOp::FetchAdd { add: 1 }),
            0,
            "outside"
        );
        assert_eq!(words, [1, 0]);
    }
}
