//! The C types the two preloaded libraries share: [`verbs`] (`<infiniband/verbs.h>`),
//! [`rdma_cma`] (`<rdma/rdma_cma.h>`) and [`ucma`], the private interface through which
//! `librocev2_rdmacm.so` reaches the connection manager of the device behind a
//! `librocev2_ibverbs.so` context, as librdmacm reaches the kernel's through `rdma_cm`.
//!
//! Types only: each library is a cdylib of its own and links this crate, so a struct is
//! defined once; tests/layout.rs checks them against the installed headers.

pub mod rdma_cma;
pub mod ucma;
pub mod verbs;
