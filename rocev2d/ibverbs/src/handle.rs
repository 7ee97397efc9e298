//! The live objects this library handed out, so a verb given a pointer it did not make (or one
//! already destroyed) fails with `EINVAL` instead of dereferencing it, and the panic guard every
//! exported function runs in.
//!
//! Every object is a `#[repr(C)]` struct whose first field is the verbs struct the caller sees
//! (`ibv_cq` …), boxed and leaked; its address is the handle. [`register`] records it with its
//! kind, [`check`] looks it up, [`unregister`] removes it before the box is freed.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

/// What a handle points to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A `Box<[*mut ibv_device]>` from `ibv_get_device_list`.
    DeviceList,
    /// A device (never freed).
    Device,
    /// `crate::context::Context`.
    Context,
    /// `crate::mr::Pd`.
    Pd,
    /// `crate::mr::Mr`.
    Mr,
    /// `crate::cq::Channel`.
    Channel,
    /// `crate::cq::Cq`.
    Cq,
    /// `crate::qp::Qp`.
    Qp,
    /// `crate::qp::Ah`.
    Ah,
    /// `crate::srq::Srq`.
    Srq,
}

static LIVE: Mutex<Option<HashMap<usize, Kind>>> = Mutex::new(None);

/// Records `ptr` as a live object of `kind`.
pub fn register<T>(ptr: *const T, kind: Kind) {
    crate::engine::lock(&LIVE)
        .get_or_insert_with(HashMap::new)
        .insert(ptr as usize, kind);
}

/// Forgets `ptr`; true when it was a live object of `kind` (then the caller frees it).
pub fn unregister<T>(ptr: *const T, kind: Kind) -> bool {
    let mut live = crate::engine::lock(&LIVE);
    let Some(map) = live.as_mut() else {
        return false;
    };
    if map.get(&(ptr as usize)) == Some(&kind) {
        map.remove(&(ptr as usize));
        true
    } else {
        false
    }
}

/// True when `ptr` is a live object of `kind`.
pub fn check<T>(ptr: *const T, kind: Kind) -> bool {
    crate::engine::lock(&LIVE)
        .as_ref()
        .is_some_and(|m| m.get(&(ptr as usize)) == Some(&kind))
}

/// Every live object of `kind`, as addresses.
pub fn live(kind: Kind) -> Vec<usize> {
    crate::engine::lock(&LIVE)
        .as_ref()
        .map_or_else(Vec::new, |m| {
            m.iter()
                .filter(|&(_, k)| *k == kind)
                .map(|(&p, _)| p)
                .collect()
        })
}

/// Sets the calling thread's `errno`.
pub fn set_errno(e: i32) {
    // SAFETY: `__errno_location` returns the calling thread's errno, valid for writes.
    unsafe { *libc::__errno_location() = e };
}

/// NULL with `errno` set to `e`: how a constructor (`ibv_create_*`) fails.
pub fn null_with<T>(e: i32) -> *mut T {
    set_errno(e);
    std::ptr::null_mut()
}

/// Runs `f` for an exported function, turning a panic into `on_panic` with `errno` `EIO` so
/// that no unwinding crosses into C.
pub fn guard<R>(on_panic: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            set_errno(libc::EIO);
            on_panic
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_checked_by_kind() {
        let x = Box::new(5u32);
        let p: *const u32 = &*x;
        assert!(!check(p, Kind::Cq));
        register(p, Kind::Cq);
        assert!(check(p, Kind::Cq));
        assert!(!check(p, Kind::Qp), "another kind");
        assert!(!unregister(p, Kind::Qp));
        assert!(unregister(p, Kind::Cq));
        assert!(!check(p, Kind::Cq), "destroyed");
        assert!(!unregister(p, Kind::Cq), "twice");
    }

    #[test]
    fn a_panic_becomes_an_errno() {
        assert_eq!(guard(-1, || panic!("boom")), -1);
        // SAFETY: reads the calling thread's errno.
        assert_eq!(unsafe { *libc::__errno_location() }, libc::EIO);
        assert_eq!(guard(-1, || 3), 3);
    }
}
