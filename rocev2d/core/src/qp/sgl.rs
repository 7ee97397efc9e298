//! Scatter/gather: local SGE lists checked against the MR table, and copies between packets and
//! the memory they name.
//!
//! Source: IBA Vol. 1 §10.6.3 (L_Key checks: key, protection domain, bounds, access rights)
//! and §11.4.1 (a work request's data is the concatenation of its SGEs).
//!
//! Deviations: none.

use super::Sge;
use crate::mr::{Memory, MrId, MrTable, PdId};
use alloc::vec::Vec;

/// A local region range resolved from an SGE: where [`Memory`] finds the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Seg {
    pub(super) mr: MrId,
    pub(super) offset: u64,
    pub(super) len: u32,
}

/// Checks every SGE of a local list and returns where [`Memory`] finds the bytes.
pub(super) fn resolve_local(
    mrs: &MrTable,
    pd: PdId,
    sges: &[Sge],
    need: crate::mr::AccessFlags,
) -> Result<Vec<Seg>, crate::mr::AccessError> {
    sges.iter()
        .map(|s| {
            mrs.check_local(pd, s.lkey, s.addr, s.length as u64, need)
                .map(|(mr, offset)| Seg {
                    mr,
                    offset,
                    len: s.length,
                })
        })
        .collect()
}

/// Copies `dst.len()` bytes starting `off` bytes into the concatenation of `segs`.
pub(super) fn gather(mem: &dyn Memory, segs: &[Seg], mut off: u64, mut dst: &mut [u8]) {
    for s in segs {
        if dst.is_empty() {
            break;
        }
        if off >= s.len as u64 {
            off -= s.len as u64;
            continue;
        }
        let n = ((s.len as u64 - off) as usize).min(dst.len());
        let (head, tail) = dst.split_at_mut(n);
        mem.read(s.mr, s.offset + off, head);
        dst = tail;
        off = 0;
    }
}

/// Copies `src` to `off` bytes into the concatenation of `segs` (the caller checked capacity).
pub(super) fn scatter(mem: &mut dyn Memory, segs: &[Seg], mut off: u64, mut src: &[u8]) {
    for s in segs {
        if src.is_empty() {
            break;
        }
        if off >= s.len as u64 {
            off -= s.len as u64;
            continue;
        }
        let n = ((s.len as u64 - off) as usize).min(src.len());
        mem.write(s.mr, s.offset + off, &src[..n]);
        src = &src[n..];
        off = 0;
    }
}
