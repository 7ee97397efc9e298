//! The host side of a device: what every owner of an engine keeps beside it, written once for
//! the in-process backend of `rocev2`, the daemon and the C ABI.
//!
//! - [`AhTable`]: address handles by number.
//! - [`RegionAddresses`]: the virtual addresses given to memory regions registered with memory
//!   the engine owns (not the C ABI's, whose regions keep the caller's addresses).
//! - [`path`], [`address_handle`] and [`connect_attr`]: the one way to build the path to a
//!   destination from an interface and the neighbour table, and an RC QP's attributes on it.
//! - [`ProgressThread`]: the thread that drives an engine while the application does not, and
//!   its one back-off policy towards application threads that drive the engine themselves.

mod addresses;
mod ahs;
mod path;
mod progress;

pub use addresses::RegionAddresses;
pub use ahs::AhTable;
pub use path::{NextHop, PathError, address_handle, connect_attr, path};
pub use progress::{BACKOFF, BACKOFF_MAX, Driving, Engine, ProgressThread};
