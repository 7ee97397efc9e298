//! Loads rocev2's eBPF programs (crate `rocev2-ebpf`, compiled for `bpfel-unknown-none` by this
//! crate's build script) into the kernel with aya, attaches them and reads their counters.
//!
//! - [`steer`]: the XDP program that hands RoCEv2 frames to AF_XDP sockets. Its handle
//!   detaches what it attached when dropped, so a process that exits — cleanly or by a panic —
//!   leaves nothing attached behind; the attachment is a BPF link, which the kernel also
//!   releases when a killed process's descriptors close (`rocev2d/daemon/tests/wire_daemon.rs`
//!   checks SIGTERM and SIGKILL).
//! - [`switch_port`]: the tc program that makes an interface a switch port (queue model, RED/ECN,
//!   fault injection). Deliberately the opposite lifetime: a port stays configured after the
//!   attaching process exits, until [`switch_port::Port::detach`] (or the namespace goes).

pub mod steer;
pub mod switch_port;

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
    /// A switch-port setting out of range.
    #[error("switch port: {0}")]
    Config(&'static str),
    /// No such interface in this network namespace.
    #[error("no interface {0:?} in this network namespace")]
    NoInterface(String),
    /// The port already has the switch program.
    #[error("{0} already has a switch program (rocev2d switch detach --iface {0})")]
    AlreadyAttached(String),
    /// A `tc` command failed.
    #[error("`{cmd}` failed: {stderr}")]
    Tc {
        /// The command line.
        cmd: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// The program was detached but the kernel still lists it.
    #[error("program {0} still loaded after detach")]
    StillLoaded(u32),
    /// Reading our network namespace's identity failed.
    #[error("/proc/self/ns/net: {0}")]
    Netns(#[source] std::io::Error),
}
