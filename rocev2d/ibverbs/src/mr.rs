//! Protection domains and memory regions: `ibv_alloc_pd`, `ibv_dealloc_pd`, `ibv_reg_mr` (and
//! its `_iova`/`_iova2` forms), `ibv_dereg_mr`.
//!
//! A region is registered under the address the peer will name it by (the buffer's own
//! address, or the IOVA), and its bytes are the caller's buffer itself
//! ([`rocev2::Device::register_caller`]): nothing is copied or pinned. In-process the engine
//! copies to and from the buffer; attached, the daemon does, through this process's
//! `/proc/self/mem`. A buffer whose first or last byte is not mapped fails with `EFAULT`.
//!
//! Deviations: access bits in `IBV_ACCESS_OPTIONAL_RANGE` (relaxed ordering, …) are dropped,
//! as a device that does not support them does; memory windows, on-demand paging, zero-based
//! and DM regions fail with `EINVAL` (the engine's refusal of their bits).

use crate::abi::{self, ibv_context, ibv_mr, ibv_pd};
use crate::context::{Context, context};
use crate::engine::Engine;
use crate::handle::{self, Kind, guard, set_errno};
use core::ffi::{c_int, c_uint, c_void};
use rocev2::{AccessFlags, CallerRange};
use std::sync::Arc;

/// A protection domain: `ibv_pd` first, so its pointer is the handle.
#[repr(C)]
pub struct Pd {
    /// What the caller sees.
    pub ibv: ibv_pd,
    /// The device's PD.
    pub pd: rocev2::Pd,
    /// The device's engine.
    pub engine: Arc<Engine>,
}

/// The PD behind `pd`, if it is a live one.
pub fn pd<'a>(pd: *const ibv_pd) -> Option<&'a Pd> {
    // SAFETY: a registered Pd stays valid until ibv_dealloc_pd unregisters it.
    handle::check(pd, Kind::Pd).then(|| unsafe { &*pd.cast::<Pd>() })
}

/// A memory region: `ibv_mr` first, so its pointer is the handle.
#[repr(C)]
pub struct Mr {
    /// What the caller sees.
    pub ibv: ibv_mr,
    mr: rocev2::Mr,
    engine: Arc<Engine>,
}

#[unsafe(no_mangle)]
/// `ibv_alloc_pd(3)`.
pub extern "C" fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    guard(std::ptr::null_mut(), || {
        let Some(c): Option<&Context> = context(ctx) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        let pd = match c.engine.alloc_pd() {
            Ok(pd) => pd,
            Err(e) => {
                set_errno(crate::errno(&e));
                return std::ptr::null_mut();
            }
        };
        let p = Box::into_raw(Box::new(Pd {
            ibv: ibv_pd {
                context: ctx,
                handle: pd.id().value(),
            },
            pd,
            engine: Arc::clone(&c.engine),
        }))
        .cast::<ibv_pd>();
        handle::register(p, Kind::Pd);
        p
    })
}

#[unsafe(no_mangle)]
/// `ibv_dealloc_pd(3)`: `EBUSY` while regions or QPs remain in it.
pub extern "C" fn ibv_dealloc_pd(p: *mut ibv_pd) -> c_int {
    guard(libc::EIO, || {
        let Some(d) = pd(p) else {
            return libc::EINVAL;
        };
        if let Err(e) = d.engine.dealloc_pd(d.pd) {
            return crate::errno(&e);
        }
        handle::unregister(p, Kind::Pd);
        // SAFETY: was registered (checked above), made by Box::into_raw, now unregistered.
        drop(unsafe { Box::from_raw(p.cast::<Pd>()) });
        0
    })
}

/// Registers `len` bytes at `addr`, named `iova` by peers and work requests.
fn register(
    p: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    let Some(d) = pd(p) else {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    };
    if addr.is_null() && len > 0 {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    let access = AccessFlags::from_bits_retain(access & !abi::IBV_ACCESS_OPTIONAL_RANGE);
    // SAFETY: the ibv_reg_mr contract: the caller's `len` bytes at `addr` stay valid until
    // ibv_dereg_mr, which deregisters the region (and so drops the range) first.
    let range = unsafe { CallerRange::new(addr.cast(), len) };
    let mr = match d.engine.register_caller(d.pd, range, iova, access) {
        Ok(mr) => mr,
        Err(e) => {
            set_errno(crate::errno(&e));
            return std::ptr::null_mut();
        }
    };
    let info = *mr.info();
    let m = Box::into_raw(Box::new(Mr {
        ibv: ibv_mr {
            context: d.ibv.context,
            pd: p,
            addr,
            length: len,
            handle: info.id.value(),
            lkey: info.lkey.value(),
            rkey: info.rkey.value(),
        },
        mr,
        engine: Arc::clone(&d.engine),
    }))
    .cast::<ibv_mr>();
    handle::register(m, Kind::Mr);
    m
}

#[unsafe(no_mangle)]
/// `ibv_reg_mr(3)`.
pub extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    guard(std::ptr::null_mut(), || {
        register(pd, addr, length, addr as u64, access as c_uint)
    })
}

#[unsafe(no_mangle)]
/// `ibv_reg_mr_iova(3)`.
pub extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    guard(std::ptr::null_mut(), || {
        register(pd, addr, length, iova, access as c_uint)
    })
}

#[unsafe(no_mangle)]
/// `ibv_reg_mr_iova2(3)` (what verbs.h's `ibv_reg_mr` macro calls when the access flags are
/// not a compile-time constant).
pub extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    guard(std::ptr::null_mut(), || {
        register(pd, addr, length, iova, access)
    })
}

#[unsafe(no_mangle)]
/// `ibv_dereg_mr(3)`: the keys stop working and the buffer is never touched again once this
/// returns.
pub extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    guard(libc::EIO, || {
        if !handle::unregister(mr, Kind::Mr) {
            return libc::EINVAL;
        }
        // SAFETY: was registered until now, made by Box::into_raw.
        let m = unsafe { Box::from_raw(mr.cast::<Mr>()) };
        match m.engine.deregister(m.mr) {
            Ok(_) => 0,
            Err(e) => crate::errno(&e),
        }
    })
}
