//! The one error type of the user API.
//!
//! Each message says what went wrong and what to do; a variant's docs name the libibverbs
//! return value or work-completion status it corresponds to, where there is one. The cause (a
//! datapath, engine or system error) is the [`std::error::Error::source`] and is not repeated
//! in the message, so a reporter that walks the chain (`anyhow`'s `{:#}` or `{:?}`) prints
//! each cause once; print the chain, not just the top message.
//!
//! Work requests that fail after posting come back as a completion whose [`crate::WcStatus`] is
//! the ibverbs status of the same number; [`check`] turns one into [`Error::Completion`], whose
//! message names the constant (`IBV_WC_REM_ACCESS_ERR`, …) and what to do.
//!
//! Deviations: none.

use rocev2_core::EndpointError;
use rocev2_core::cq::{WcStatus, WorkCompletion};

/// What a [`crate::Device`] call can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Opening the interface or datapath, resolving a neighbour, or a socket failure while
    /// driving the device (`ibv_open_device` failing, or `ENETUNREACH`-like resolution
    /// failures of `rdma_resolve_route`).
    #[error("datapath failed{}", datapath_hint(.0))]
    Datapath(#[source] rocev2_datapath::Error),
    /// A verb the engine refused: unknown handle, bad transition, full queue, bad registration
    /// (`ibv_post_send`/`ibv_modify_qp`/`ibv_reg_mr` returning `EINVAL` or `ENOMEM`).
    #[error("the verb was refused{}", verb_hint(.0))]
    Verb(#[source] EndpointError),
    /// The interface has no global address of the family asked for, so no GID to use.
    #[error("interface {iface} has no usable {family} address (add one, e.g. `ip addr add`)")]
    NoAddress {
        /// The interface.
        iface: String,
        /// `"IPv4"` or `"IPv6"`.
        family: &'static str,
    },
    /// The memory region handle does not belong to this device, or was deregistered
    /// (`ibv_dereg_mr`/`ibv_post_*` with a stale `lkey`: `EINVAL`).
    #[error("unknown memory region (deregistered, or a handle of another device)")]
    UnknownMr,
    /// A handle (PD, CQ, QP) made by another [`crate::Device`].
    #[error("this {0} belongs to another device (use handles with the device that made them)")]
    WrongDevice(&'static str),
    /// A range outside a memory region ([`crate::Mr::sge`], [`crate::Device::read_u64`]);
    /// libibverbs would post it and complete with `IBV_WC_LOC_PROT_ERR`.
    #[error(
        "[{offset}, +{len}) lies outside the {region_len}-byte region (check offset and length)"
    )]
    OutOfRange {
        /// Offset asked for.
        offset: u64,
        /// Length asked for.
        len: u64,
        /// The region's length.
        region_len: u64,
    },
    /// A verb of one QP type on a QP of the other (`ibv_post_send` returning `EINVAL`): READ,
    /// WRITE, atomics or [`crate::Device::connect`] on a UD QP, a UD destination on an RC QP,
    /// or a UD send without one ([`crate::Device::post_send_to`]).
    #[error("{0} (a UD QP sends SEND and SEND with immediate to an address; RC does the rest)")]
    WrongQpType(&'static str),
    /// A UD message longer than the QP's MTU (IBA §9.8: a UD message is one packet;
    /// `ibv_post_send` returning `EINVAL`, or `IBV_WC_LOC_LEN_ERR` on some devices).
    #[error("a UD message of {len} bytes exceeds the {mtu}-byte MTU (send less, or use RC)")]
    UdTooLong {
        /// Bytes of the message.
        len: u64,
        /// The QP's MTU ([`crate::Device::ud_mtu`]).
        mtu: u32,
    },
    /// An address handle this device does not hold: destroyed, or made by another device.
    #[error("unknown address handle (destroyed, or a handle of another device)")]
    UnknownAh,
    /// The interface MTU is too small for any RoCE path MTU.
    #[error("interface {0} MTU is too small for RoCE (raise it to at least 256 + 78 bytes)")]
    MtuTooSmall(String),
    /// [`crate::Device::wait_cq`] or [`crate::Device::drain`] ran out of time, or the daemon
    /// did not answer a request in time.
    #[error("timed out (is the peer connected and running? raise the timeout if it is slow)")]
    Timeout,
    /// The progress thread of an in-process device stopped on a datapath failure; the device
    /// can do nothing more (`IBV_EVENT_DEVICE_FATAL`). Open it again.
    #[error("the progress thread stopped: {0} (reopen the device)")]
    ProgressStopped(String),
    /// No daemon answers on the control socket.
    #[error(
        "cannot attach to rocev2d at {} (is `rocev2d run` serving the interface?)",
        path.display()
    )]
    Attach {
        /// The control socket.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A `rocev2d` serves the interface, so an engine in this process cannot open it (the
    /// daemon's steering program takes its frames), and this open cannot attach instead.
    #[error(
        "{iface} is served by rocev2d (control socket {}): attach to it, or stop the daemon",
        socket.display()
    )]
    Served {
        /// The interface.
        iface: String,
        /// The daemon's control socket.
        socket: std::path::PathBuf,
    },
    /// The daemon closed the attachment: it stopped, or found this application's rings
    /// corrupted. Every object of the device is gone (`IBV_EVENT_DEVICE_FATAL`).
    #[error("the rocev2d daemon closed the attachment (restart it, then attach again)")]
    DaemonGone,
    /// The daemon refused a request.
    #[error("rocev2d refused: {message} (see the daemon's limits in docs/daemon.md)")]
    Refused {
        /// What kind of refusal.
        kind: rocev2_ipc::proto::ErrorKind,
        /// The daemon's words.
        message: String,
    },
    /// The daemon answered something this build does not understand.
    #[error("control protocol: {0} (use a daemon of the same version as this library)")]
    Protocol(String),
    /// A work request completed with an error status ([`check`]): the status is libibverbs'
    /// `ibv_wc_status` of the same number.
    #[error("work request {wr_id} failed with {}: {}", ibv_name(*status), hint(*status))]
    Completion {
        /// The failed request's id.
        wr_id: u64,
        /// Its status.
        status: WcStatus,
    },
    /// A local system call failed (eventfd, poll, thread creation).
    #[error("system call failed")]
    Io(#[source] std::io::Error),
}

/// What to check after a datapath failure, where a check can help: not for a build without
/// a feature, which no setting fixes.
fn datapath_hint(e: &rocev2_datapath::Error) -> &'static str {
    match e {
        rocev2_datapath::Error::Unsupported(_) => "",
        rocev2_datapath::Error::NoSuchInterface(_)
        | rocev2_datapath::Error::BadInterface { .. } => {
            " (check the interface name and that it is up)"
        }
        _ => {
            " (check that the interface is up and this process has the capabilities the datapath needs)"
        }
    }
}

/// What to check after a refused verb, where the refusal does not say it already.
fn verb_hint(e: &EndpointError) -> &'static str {
    use rocev2_core::qp::PostError;
    match e {
        EndpointError::Post(PostError::QueueFull) => " (wait for completions before posting more)",
        EndpointError::Post(PostError::InError(_)) => "",
        EndpointError::UnknownQp
        | EndpointError::UnknownCq
        | EndpointError::UnknownPd
        | EndpointError::UnknownSrq => " (check the handle)",
        _ => " (check the QP's state and the queue sizes)",
    }
}

impl Error {
    /// Why a path or address handle could not be built, as the API reports it (a private
    /// conversion: the datapath's error type stays out of the public API).
    pub(crate) fn from_path(e: rocev2_datapath::host::PathError) -> Error {
        use rocev2_datapath::host::PathError;
        match e {
            PathError::NoAddress { iface, family } => Error::NoAddress { iface, family },
            PathError::Neighbour { source, .. } => Error::Datapath(source),
            PathError::Invalid(e) => Error::Verb(rocev2_core::EndpointError::Modify(e)),
            PathError::MtuTooSmall(iface) => Error::MtuTooSmall(iface),
            PathError::NotAnMtu(_) => Error::Verb(rocev2_core::EndpointError::Modify(
                rocev2_core::qp::ModifyError::OutOfRange {
                    name: "path_mtu",
                    range: "256, 512, 1024, 2048 or 4096 bytes",
                },
            )),
        }
    }
}

impl From<rocev2_datapath::Error> for Error {
    fn from(e: rocev2_datapath::Error) -> Error {
        Error::Datapath(e)
    }
}

impl From<EndpointError> for Error {
    fn from(e: EndpointError) -> Error {
        Error::Verb(e)
    }
}

/// `wc` when it succeeded, else [`Error::Completion`] naming the ibverbs status and what to do.
///
/// # Errors
/// [`Error::Completion`].
pub fn check(wc: WorkCompletion) -> Result<WorkCompletion> {
    if wc.status.is_success() {
        Ok(wc)
    } else {
        Err(Error::Completion {
            wr_id: wc.wr_id,
            status: wc.status,
        })
    }
}

/// `e` and every cause below it, each once, joined by ": " (what `anyhow`'s `{:#}` prints), for
/// a message that must stand alone: a C program's stderr, the reason sent to a peer.
pub fn report(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// libibverbs' name of a status (`ibv_wc_status_str` gives prose; this is the constant).
pub fn ibv_name(status: WcStatus) -> &'static str {
    use WcStatus::*;
    match status {
        Success => "IBV_WC_SUCCESS",
        LocLenErr => "IBV_WC_LOC_LEN_ERR",
        LocQpOpErr => "IBV_WC_LOC_QP_OP_ERR",
        LocEecOpErr => "IBV_WC_LOC_EEC_OP_ERR",
        LocProtErr => "IBV_WC_LOC_PROT_ERR",
        WrFlushErr => "IBV_WC_WR_FLUSH_ERR",
        MwBindErr => "IBV_WC_MW_BIND_ERR",
        BadRespErr => "IBV_WC_BAD_RESP_ERR",
        LocAccessErr => "IBV_WC_LOC_ACCESS_ERR",
        RemInvReqErr => "IBV_WC_REM_INV_REQ_ERR",
        RemAccessErr => "IBV_WC_REM_ACCESS_ERR",
        RemOpErr => "IBV_WC_REM_OP_ERR",
        RetryExcErr => "IBV_WC_RETRY_EXC_ERR",
        RnrRetryExcErr => "IBV_WC_RNR_RETRY_EXC_ERR",
        LocRddViolErr => "IBV_WC_LOC_RDD_VIOL_ERR",
        RemInvRdReqErr => "IBV_WC_REM_INV_RD_REQ_ERR",
        RemAbortErr => "IBV_WC_REM_ABORT_ERR",
        InvEecnErr => "IBV_WC_INV_EECN_ERR",
        InvEecStateErr => "IBV_WC_INV_EEC_STATE_ERR",
        FatalErr => "IBV_WC_FATAL_ERR",
        RespTimeoutErr => "IBV_WC_RESP_TIMEOUT_ERR",
        GeneralErr => "IBV_WC_GENERAL_ERR",
    }
}

/// What to do about a failed completion.
fn hint(status: WcStatus) -> &'static str {
    use WcStatus::*;
    match status {
        Success => "nothing to do",
        LocLenErr => "post larger receive buffers, or send less",
        LocProtErr | LocAccessErr => {
            "check the SGE's lkey, bounds and the region's LOCAL_WRITE right"
        }
        RemAccessErr => {
            "check the remote address, length and rkey, and the peer region's REMOTE_* rights"
        }
        RemInvReqErr | RemInvRdReqErr => {
            "the peer refused the request: check the opcode, length and its QP's rights"
        }
        RetryExcErr => {
            "the peer did not answer: is it running, connected to this QP, and reachable?"
        }
        RnrRetryExcErr => "the peer had no receive posted: post receives before the peer sends",
        WrFlushErr => "the QP went to ERROR earlier; look at the first failed completion",
        _ => "the QP is now in ERROR: destroy it and connect a new one",
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn a_failed_completion_names_its_ibverbs_status() {
        let e = Error::Completion {
            wr_id: 3,
            status: WcStatus::RemAccessErr,
        };
        let s = e.to_string();
        assert!(
            s.contains("IBV_WC_REM_ACCESS_ERR") && s.contains("rkey"),
            "{s}"
        );
        // The numbering is libibverbs': the names follow it.
        assert_eq!(WcStatus::RetryExcErr as u32, 12);
        assert_eq!(ibv_name(WcStatus::RetryExcErr), "IBV_WC_RETRY_EXC_ERR");
        assert_eq!(ibv_name(WcStatus::GeneralErr), "IBV_WC_GENERAL_ERR");
    }

    #[test]
    fn errors_keep_their_cause_and_say_what_to_do() {
        let e = Error::from(EndpointError::UnknownQp);
        assert_eq!(e.source().map(|s| s.to_string()), Some("unknown QP".into()));
        assert!(e.to_string().contains("check the handle"), "{e}");
        let e = Error::Io(std::io::Error::other("boom"));
        assert!(e.source().is_some());
    }

    #[test]
    fn a_chain_prints_each_cause_once_and_hints_only_where_they_help() {
        use rocev2_core::qp::{ErrorCause, PostError};
        let cause = ErrorCause::Responder(rocev2_core::wire::NakCode::RemoteAccessError);
        let e = Error::from(EndpointError::Post(PostError::InError(cause)));
        let (top, below) = (e.to_string(), e.source().unwrap().to_string());
        assert!(!top.contains(&below), "the cause is not repeated: {top}");
        assert!(below.contains("remote access error"), "{below}");
        assert!(
            !top.contains('('),
            "no hint where the cause says it all: {top}"
        );
        let built = Error::Datapath(rocev2_datapath::Error::Unsupported("built without `xdp`"));
        assert_eq!(
            built.to_string(),
            "datapath failed",
            "no setting fixes a build"
        );
        let os = std::io::Error::from_raw_os_error(libc_eperm());
        let e = Error::Datapath(rocev2_datapath::Error::Io {
            op: "AF_XDP bind",
            os,
        });
        assert!(e.to_string().contains("capabilities"), "{e}");
        assert!(
            e.source().unwrap().source().is_none(),
            "the OS error is not a third link"
        );
    }

    /// `EPERM`, without a libc dependency for one constant.
    fn libc_eperm() -> i32 {
        1
    }
}
