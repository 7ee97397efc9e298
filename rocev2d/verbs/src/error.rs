//! The one error type of the user API.
//!
//! Deviations: none.

use rocev2_core::EndpointError;

/// What a [`crate::Device`] call can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Opening the interface or datapath, resolving a neighbour, or a socket failure while
    /// driving the device.
    #[error(transparent)]
    Datapath(#[from] rocev2_datapath::Error),
    /// A verb the engine refused (unknown handle, bad transition, full queue, bad registration).
    #[error(transparent)]
    Verb(#[from] EndpointError),
    /// The interface has no global address of the family asked for, so no GID to use.
    #[error("interface {iface} has no usable {family} address")]
    NoAddress {
        /// The interface.
        iface: String,
        /// `"IPv4"` or `"IPv6"`.
        family: &'static str,
    },
    /// The memory region handle does not belong to this device (or was deregistered).
    #[error("unknown memory region")]
    UnknownMr,
    /// The interface MTU is too small for any RoCE path MTU.
    #[error("interface {0} MTU is too small for RoCE (below 256 + headers)")]
    MtuTooSmall(String),
    /// [`crate::Device::wait_cq`] or [`crate::Device::drain`] ran out of time, or the daemon
    /// did not answer a request in time.
    #[error("timed out")]
    Timeout,
    /// No daemon answers on the control socket.
    #[error(
        "cannot attach to rocev2d at {path}: {source} (is `rocev2d run` serving the interface?)"
    )]
    Attach {
        /// The control socket.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The daemon closed the attachment: it stopped, or found this application's rings
    /// corrupted. Every object of the device is gone.
    #[error("the rocev2d daemon closed the attachment (it stopped or restarted)")]
    DaemonGone,
    /// The daemon refused a request.
    #[error("rocev2d refused: {message}")]
    Refused {
        /// What kind of refusal.
        kind: rocev2_ipc::proto::ErrorKind,
        /// The daemon's words.
        message: String,
    },
    /// The daemon answered something this build does not understand.
    #[error("control protocol: {0}")]
    Protocol(String),
    /// A local system call of the attachment failed.
    #[error(transparent)]
    Io(std::io::Error),
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
