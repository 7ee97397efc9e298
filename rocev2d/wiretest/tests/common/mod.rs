//! What the wire scenarios share: the tool under test and [`peers`].
// Each scenario file compiles this module separately and uses only part of it.
#![allow(dead_code)]

mod peers;
pub use peers::*;

use std::path::PathBuf;

/// The tool under test.
pub fn wiretest() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rocev2-wiretest"))
}
