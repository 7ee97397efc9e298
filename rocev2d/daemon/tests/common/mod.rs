//! What the daemon's scenarios share: its binary, and the wire-test tool's helpers
//! ([`peers`]) for the switch scenarios that run real QPs through a switch port.
// Each scenario file compiles this module separately and uses only part of it.
#![allow(dead_code)]

#[path = "../../../wiretest/tests/common/peers.rs"]
mod peers;
pub use peers::*;

use std::path::{Path, PathBuf};

/// The daemon binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_rocev2d");

/// `rocev2-wiretest`. Cargo names only this package's own binaries to its tests, so it is
/// looked for beside `rocev2d`, in the same target directory; `cargo test --workspace` builds
/// both before any test runs.
///
/// # Panics
/// When it is not there, naming the command that builds it.
pub fn wiretest() -> PathBuf {
    let p = Path::new(BIN).with_file_name("rocev2-wiretest");
    assert!(
        p.is_file(),
        "{} not found: the switch scenarios run the wire-test tool; build it first with \
         `cargo build -p rocev2-wiretest`",
        p.display()
    );
    p
}

/// An example tool, beside `rocev2d` in the target directory (the examples package's binaries
/// are built by `cargo test --workspace` before any test runs).
pub fn example(name: &str) -> PathBuf {
    let p = Path::new(BIN).with_file_name(name);
    assert!(
        p.is_file(),
        "{} not found: build it with `cargo build -p rocev2-examples`",
        p.display()
    );
    p
}
