//! Sans-IO RoCEv2.
//!
//! This crate is the part of rocev2 that knows the protocol: the wire formats
//! ([`wire`]), and everything built on them. It performs no IO, reads no clock,
//! spawns no thread and draws no randomness of its own: every entry point takes
//! the current time as an [`time::Instant`] and every random choice comes from a
//! seed or generator the caller passes in. The same code therefore runs inside
//! the daemon on a real interface, in the deterministic network model, and in
//! unit tests, and a test run is reproducible bit for bit.
//!
//! The crate is `no_std` (with `alloc`): that is how the contract above is
//! enforced rather than merely promised, since `std::net`, `std::time` and
//! `std::thread` are simply not there.
#![no_std]
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::todo,
        clippy::unimplemented
    )
)]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod cc;
pub mod cm;
pub mod cq;
mod drop_reason;
pub mod endpoint;
pub mod mprdma;
pub mod mr;
pub mod qp;
mod qpn_block;
pub mod srq;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod time;
pub mod wire;

pub use endpoint::{DropReason, Endpoint, EndpointError, EndpointStats};
