//! Test helpers for this crate's tests and for downstream crates (feature `testing`).
//!
//! Everything here is deterministic: given the same seeds and the same inputs, it produces the
//! same outputs bit for bit, so a failing engine test can be replayed from its seed.
//!
//! - [`link`]: a seeded one-way in-memory link with delay, rate, loss, duplication, reordering
//!   and corruption. Two of them joined back to back carry traffic between two engines.
//! - [`pair`]: two endpoints on such links with a virtual clock, and a one-call RC connection
//!   (or a UD QP on each side).
//! - [`retry_budget`]: whether a `RETRY_EXC_ERR` was earned, every attempt spoiled by the
//!   link.
//! - [`soak`]: one seeded connection of mixed verbs over faulty links, checked byte for byte
//!   (the soak command, `examples/soak.rs`, runs thousands).
//!
//! Source: none (test infrastructure, modelled on quinn-proto's `tests/util.rs` and smoltcp's
//! `phy/fault_injector.rs`).
//!
//! Deviations: none.

pub mod link;
pub mod pair;
pub mod retry_budget;
pub mod soak;

pub use link::{Fate, Link, LinkConfig, LinkStats};
pub use pair::{Conn, ConnectOptions, Event, Host, Pair, UdConn};
