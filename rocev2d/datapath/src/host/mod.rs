//! The host side of a device: what every owner of an engine keeps beside it, written once for
//! the in-process backend of `rocev2`, the daemon and the C ABI.
//!
//! - [`AhTable`]: address handles by number.
//! - [`HostMemory`]: the engine's memory, whoever holds each region's bytes (the device, an
//!   attached application's memfd, the caller's own buffer, or an attached C program's).
//! - [`SharedPages`]: an attached C program's registered pages moved onto memfds the daemon
//!   maps, so its accesses skip `/proc/PID/mem`.
//! - [`RegionAddresses`]: the virtual addresses given to memory regions registered with memory
//!   the engine owns (not the C ABI's, whose regions keep the caller's addresses).
//! - [`path`], [`address_handle`], [`connect_attr`] and [`modify_attr`]: the one way to build
//!   the path to a destination from an interface and the neighbour table, and a QP's
//!   attributes on it (all at once, or one `ibv_modify_qp` at a time).
//! - [`ProgressThread`]: the thread that drives an engine while the application does not, and
//!   its one back-off policy towards application threads that drive the engine themselves.

mod addresses;
mod ahs;
mod memory;
mod path;
mod progress;
mod shared_pages;

pub use addresses::RegionAddresses;
pub use ahs::AhTable;
pub use memory::{Backing, CallerRange, HostMemory, ProcessMemory, ProcessRange};
pub use path::{NextHop, PathError, address_handle, connect_attr, modify_attr, path};
pub use progress::{BACKOFF, BACKOFF_MAX, Driving, Engine, ProgressThread};
pub use shared_pages::SharedPages;
