//! Helpers shared by rocev2's eBPF programs (see `src/bin/`): bounds-checked packet access
//! and header parsing under the verifier's rules.
#![no_std]

pub mod parse;
