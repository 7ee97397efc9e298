//! `librocev2_rdmacm.so`: librdmacm's C ABI over the connection manager of the rocev2 device,
//! so unmodified rdma_cm programs (rdma-core's `rping`, `ucmatose`, perftest's `-R`) run
//! without RDMA hardware, kernel modules or `/dev/infiniband/rdma_cm`:
//!
//! ```text
//! LD_PRELOAD=librocev2_rdmacm.so:librocev2_ibverbs.so rping -s -a 10.0.0.2
//! ```
//!
//! Design: one device per process. The verbs library (`librocev2_ibverbs.so`) owns the device;
//! this library holds none. It keeps librdmacm's user-level state (event channels, IDs,
//! events, addresses) and reaches the device only through the public `ibv_*` calls (to open
//! the devices, make the QPs and CQs of `rdma_create_qp`) and the verbs library's private CM
//! interface ([`rocev2_verbs_abi::ucma`]: listen, connect, accept, reject, disconnect, next
//! event, keyed by `ibv_context` and `ibv_qp`), as librdmacm talks to the kernel's `ucma`. So
//! an `rdma_create_qp` QP is an `ibv_qp` the verbs library serves, and its connection is made
//! by the CM of the same device. Holding a device here too would need a second copy of the
//! engine in the process, unaware of the first one's QPs. The interface is looked up by name
//! and version at the first call; a verbs library that lacks it, or serves another version,
//! fails that call with `ENODEV` and a one-line message.
//!
//! Both libraries are preloaded, in either order: the program's `rdma_*` calls resolve here
//! and this library's `ibv_*` calls to the verbs library, since both come before rdma-core's
//! libraries in the global scope.
//!
//! Layout: [`abi`] (rdma_cma.h's structs, checked against the installed header by
//! rocev2d/verbs-abi's layout test), [`verbs`] (the verbs library's calls), [`device`] (the devices and the
//! threads taking their CM events), [`state`] (the tables of live handles), [`channel`]
//! (event channels, `rdma_get_cm_event`), [`id`] (IDs and the connection calls), [`qp`] (QPs
//! on IDs), [`addr`] (addresses, `rdma_getaddrinfo`), [`ep`] (`rdma_create_ep` and the
//! synchronous calls).
//!
//! Usage, supported calls and what differs from librdmacm on a NIC: docs/rdmacm.md.
#![deny(unsafe_op_in_unsafe_fn)]
// The exported `extern "C"` functions are called from C, which has no `unsafe`: each checks its
// handles against the live objects this library made ([`state`]) and NULL before dereferencing.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub use rocev2_verbs_abi::rdma_cma as abi;

pub mod addr;
pub mod channel;
pub mod device;
pub mod ep;
pub mod id;
pub mod qp;
pub mod state;
pub mod verbs;

use core::ffi::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Sets the calling thread's `errno`.
pub fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns the calling thread's errno, valid for writes.
    unsafe { *libc::__errno_location() = e };
}

/// The calling thread's `errno`.
pub fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Runs an exported call returning 0 or -1 with `errno`, as librdmacm's do; a panic becomes
/// -1 with `EIO`, so no unwinding crosses into C.
pub fn call(f: impl FnOnce() -> Result<(), c_int>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            set_errno(e);
            -1
        }
        Err(_) => {
            set_errno(libc::EIO);
            -1
        }
    }
}

/// Runs an exported call returning a value, `on_error` with `errno` set on failure or panic.
pub fn call_or<R>(on_error: R, f: impl FnOnce() -> Result<R, c_int>) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            set_errno(e);
            on_error
        }
        Err(_) => {
            set_errno(libc::EIO);
            on_error
        }
    }
}

/// Random bits from the kernel (ephemeral ports, start PSNs).
pub fn random_u32() -> u32 {
    let mut r = [0u8; 4];
    // SAFETY: 4 writable bytes; a short read leaves zeros, still a valid value.
    unsafe { libc::getrandom(r.as_mut_ptr().cast(), r.len(), 0) };
    u32::from_ne_bytes(r)
}

/// Says on stderr that `what` is not supported, and returns the `errno` for it.
pub fn unsupported(what: &str) -> c_int {
    eprintln!("rocev2_rdmacm: {what} is not supported");
    libc::EOPNOTSUPP
}

/// Whether `ROCEV2_VERBOSE` asks for what the library does on stderr.
pub fn verbose() -> bool {
    std::env::var_os("ROCEV2_VERBOSE").is_some()
}
