//! The live objects this library handed out, so a verb given a pointer it did not make (or one
//! already destroyed) fails with `EINVAL` instead of dereferencing it, and the panic guard every
//! exported function runs in.
//!
//! Every object is a `#[repr(C)]` struct whose first field is the verbs struct the caller sees
//! (`ibv_cq` …), boxed and leaked; its address is the handle. [`register`] records it with its
//! kind, [`check`] looks it up, [`unregister`] removes it before the box is freed.
//!
//! A program calls some verbs in a loop on one handle (`ibv_poll_cq` busy-polling a CQ), so
//! each thread remembers the last handle it found live, valid while no handle was forgotten
//! since: the loop then checks without the lock.

use std::cell::Cell;
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// Handles forgotten so far (bumped under `LIVE`'s lock by [`unregister`]).
static FORGOTTEN: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The last handle this thread found live, its kind, and `FORGOTTEN` then.
    static LAST: Cell<(usize, Option<Kind>, u64)> = const { Cell::new((0, None, 0)) };
}

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
        FORGOTTEN.fetch_add(1, Ordering::Release);
        true
    } else {
        false
    }
}

/// True when `ptr` is a live object of `kind`.
pub fn check<T>(ptr: *const T, kind: Kind) -> bool {
    let p = ptr as usize;
    if LAST.get() == (p, Some(kind), FORGOTTEN.load(Ordering::Acquire)) {
        return true;
    }
    let live = crate::engine::lock(&LIVE);
    let ok = live.as_ref().is_some_and(|m| m.get(&p) == Some(&kind));
    if ok {
        LAST.set((p, Some(kind), FORGOTTEN.load(Ordering::Relaxed)));
    }
    ok
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
        assert!(
            !check(p, Kind::Cq),
            "destroyed, though this thread found it live last"
        );
        assert!(!unregister(p, Kind::Cq), "twice");
        // Destroyed by another thread after this one found it live.
        register(p, Kind::Qp);
        assert!(check(p, Kind::Qp));
        let q = p as usize;
        std::thread::spawn(move || assert!(unregister(q as *const u32, Kind::Qp)))
            .join()
            .unwrap();
        assert!(!check(p, Kind::Qp), "destroyed elsewhere");
    }

    #[test]
    fn a_panic_becomes_an_errno() {
        assert_eq!(guard(-1, || panic!("boom")), -1);
        // SAFETY: reads the calling thread's errno.
        assert_eq!(unsafe { *libc::__errno_location() }, libc::EIO);
        assert_eq!(guard(-1, || 3), 3);
    }
}
