//! RoCEv2 wire formats (placeholder while being written).
pub mod psn;
pub use psn::{Msn, Psn};
