//! `librocev2_ibverbs.so`: the libibverbs 1.1 C ABI over the rocev2 engine, so unmodified
//! verbs programs (rdma-core's `ibv_rc_pingpong`, perftest's `ib_write_bw`, …) run on a host
//! without RDMA hardware or kernel RDMA modules:
//!
//! ```text
//! LD_PRELOAD=librocev2_ibverbs.so ibv_rc_pingpong -d rocev2_eth0 -g 1
//! ```
//!
//! The program still loads rdma-core's libibverbs, but every `ibv_*` symbol it calls resolves
//! to this library first, and the inline verbs of `<infiniband/verbs.h>` (`ibv_post_send`,
//! `ibv_poll_cq`, …) call through the `ibv_context_ops` table of our contexts. Each context
//! sits inside a `struct verbs_context`, as a provider's does, so the header's extended inline
//! verbs (`ibv_query_device_ex`, `ibv_create_cq_ex`, `ibv_create_qp_ex`, …) find our extended
//! ops, and the ones we leave empty fail as libibverbs does for a provider without them.
//! Nothing of rdma-core's own device list or providers runs.
//!
//! Layout: [`abi`] (the C structs, checked against the installed header by
//! rocev2d/verbs-abi's `tests/layout.rs`), [`device`] (naming and the device list), [`context`] (open, queries),
//! [`mr`] (PDs and regions of the caller's own memory), [`cq`] (channels, CQs, polling, the
//! extended poll), [`qp`] (QPs, modify, posting), [`wr`] (the `ibv_wr_*` post path of an
//! extended QP), [`srq`] (shared receive queues), [`epoll`] (the sets behind
//! a channel's `fd` and a context's `async_fd`), [`engine`] (the per-interface [`rocev2::Device`]: in-process
//! or attached to `rocev2d`, as a Rust application's), [`handle`] (live-object checks and the
//! panic guard every exported function runs in), [`ucma`] (the device's connection manager,
//! for `librocev2_rdmacm.so`).
//!
//! Usage, supported calls and what differs: docs/ibverbs.md.
#![deny(unsafe_op_in_unsafe_fn)]
// The exported `extern "C"` functions are called from C, which has no `unsafe`: each takes the
// verbs contract for its pointer arguments, checks handles against the live objects it made
// ([`handle`]) and NULL before dereferencing, and writes only through the caller's out
// pointers. Marking them `unsafe fn` would change nothing for their only callers.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub use rocev2_verbs_abi::verbs as abi;
pub mod context;
pub mod cq;
pub mod device;
pub mod engine;
pub mod epoll;
pub mod handle;
pub mod mr;
pub mod qp;
pub mod srq;
pub mod ucma;
pub mod wr;

use core::ffi::c_int;
use rocev2::Error;
use rocev2_core::EndpointError;

pub use rocev2::report;

/// The `errno` a failed verb reports for `e`.
pub fn errno(e: &Error) -> c_int {
    use rocev2_core::mr::MrError;
    use rocev2_core::qp::PostError;
    use rocev2_ipc::proto::ErrorKind;
    match e {
        // A buffer the process does not have (`ibv_reg_mr`).
        Error::Io(io) if io.kind() == std::io::ErrorKind::InvalidInput => libc::EFAULT,
        Error::Io(io) => io.raw_os_error().unwrap_or(libc::EIO),
        Error::Verb(EndpointError::Post(PostError::QueueFull)) => libc::ENOMEM,
        Error::Verb(EndpointError::InUse | EndpointError::Mr(MrError::Busy)) => libc::EBUSY,
        Error::Refused { kind, .. } => match kind {
            ErrorKind::Limit => libc::ENOMEM,
            ErrorKind::InUse => libc::EBUSY,
            ErrorKind::Path => libc::EHOSTUNREACH,
            ErrorKind::Timeout => libc::ETIMEDOUT,
            _ => libc::EINVAL,
        },
        Error::Datapath(_) => libc::EHOSTUNREACH,
        Error::NoAddress { .. } => libc::EADDRNOTAVAIL,
        Error::Timeout => libc::ETIMEDOUT,
        Error::DaemonGone | Error::ProgressStopped(_) => libc::EIO,
        _ => libc::EINVAL,
    }
}
