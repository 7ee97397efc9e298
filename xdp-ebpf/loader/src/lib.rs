//! Loads rocev2's eBPF programs (crate `rocev2-ebpf`, compiled for `bpfel-unknown-none` by this
//! crate's build script) into the kernel with aya, attaches them and reads their counters.
//!
//! - [`steer`]: the XDP program that hands RoCEv2 frames to AF_XDP sockets.
//!
//! Every handle detaches what it attached when dropped, so a process that exits — cleanly or by
//! a panic — leaves nothing attached behind; attachments are BPF links, which the kernel also
//! releases when a killed process's descriptors close (`rocev2d/daemon/tests/wire_daemon.rs`
//! checks SIGTERM and SIGKILL).

pub mod steer;

/// Errors of loading, attaching and reading programs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kernel rejected the object (verifier, missing BTF, no privileges).
    #[error("loading the eBPF object: {0}")]
    Load(#[from] aya::EbpfError),
    /// Loading or attaching a program failed.
    #[error("eBPF program `{name}`: {source}")]
    Program {
        /// Program name in the object.
        name: &'static str,
        /// What aya reported.
        #[source]
        source: aya::programs::ProgramError,
    },
    /// A map operation failed.
    #[error("eBPF map `{name}`: {source}")]
    Map {
        /// Map name in the object.
        name: &'static str,
        /// What aya reported.
        #[source]
        source: aya::maps::MapError,
    },
    /// The object lacks a program or map this loader expects (built from other sources).
    #[error("the eBPF object has no {0}")]
    Missing(&'static str),
}
