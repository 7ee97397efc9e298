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
//! `ibv_poll_cq`, …) call through the `ibv_context_ops` table of our contexts. Contexts are
//! plain (not `verbs_context`), so the header's extended inline verbs find no extended op and
//! fail as libibverbs does for a provider without them. Nothing of rdma-core's own device
//! list or providers runs.
//!
//! Layout: [`abi`] (the C structs, checked against the installed header by
//! `tests/layout.rs`), [`device`] (naming and the device list), [`context`] (open, queries),
//! [`mr`] (PDs and regions over [`memory::CallerMemory`]), [`cq`] (channels, CQs, polling),
//! [`qp`] (QPs, modify, posting), [`engine`] (the per-device engine and its progress thread),
//! [`handle`] (live-object checks and the panic guard every exported function runs in).
//!
//! Usage, supported calls and what differs: docs/ibverbs.md.
#![deny(unsafe_op_in_unsafe_fn)]
// The exported `extern "C"` functions are called from C, which has no `unsafe`: each takes the
// verbs contract for its pointer arguments, checks handles against the live objects it made
// ([`handle`]) and NULL before dereferencing, and writes only through the caller's out
// pointers. Marking them `unsafe fn` would change nothing for their only callers.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod abi;
pub mod context;
pub mod cq;
pub mod device;
pub mod engine;
pub mod handle;
pub mod memory;
pub mod mr;
pub mod qp;
