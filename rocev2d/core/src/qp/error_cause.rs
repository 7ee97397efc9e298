//! [`ErrorCause`]: why an RC QP entered ERROR, kept for the application until the QP is reset.
//!
//! The requester's side learns it from the completion that failed; the responder's side
//! (the passive end of an RDMA access, which posted nothing that could fail) learns it only
//! here, as an HCA reports it through an affiliated asynchronous event (IBA §11.6.3:
//! invalid request, local access violation, catastrophic error). [`ErrorCause::ibv_event`]
//! gives that event's `ibv_event_type` number.
//!
//! Deviations: none.

use crate::cq::WcStatus;
use crate::wire::aeth::NakCode;

/// Why a QP entered ERROR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCause {
    /// A work request of this QP completed with this status (retries exhausted, the peer's NAK,
    /// a bad local buffer): the completion says so too.
    Completion(WcStatus),
    /// The responder refused a request of the peer with this NAK, which ends the connection
    /// (IBA §9.7.5.2.4 ff.): a remote access violation, an invalid request, or an operational
    /// error.
    Responder(NakCode),
    /// A completion queue was full when a completion was due (IBA §11.4.2.1: CQ overrun).
    CqOverrun,
    /// The application moved the QP to ERROR.
    Modified,
}

impl ErrorCause {
    /// The `ibv_event_type` of the affiliated asynchronous event an HCA raises for this cause:
    /// `IBV_EVENT_QP_FATAL` (1), `IBV_EVENT_QP_REQ_ERR` (2) or `IBV_EVENT_QP_ACCESS_ERR` (3);
    /// `None` where verbs raises none (the failed completion, or the application's own move,
    /// tells it).
    pub const fn ibv_event(self) -> Option<u32> {
        match self {
            ErrorCause::Responder(NakCode::InvalidRequest) => Some(2),
            ErrorCause::Responder(NakCode::RemoteAccessError) => Some(3),
            ErrorCause::Responder(_) | ErrorCause::CqOverrun => Some(1),
            ErrorCause::Completion(_) | ErrorCause::Modified => None,
        }
    }
}

impl ErrorCause {
    /// The cause as two numbers (kind, and the status or NAK code), for a record that crosses
    /// a process boundary; [`ErrorCause::from_parts`] reads it back.
    pub const fn to_parts(self) -> (u8, u32) {
        match self {
            ErrorCause::Completion(s) => (0, s as u32),
            ErrorCause::Responder(c) => (1, c.code() as u32),
            ErrorCause::CqOverrun => (2, 0),
            ErrorCause::Modified => (3, 0),
        }
    }

    /// The cause [`ErrorCause::to_parts`] wrote; `None` for numbers it never writes.
    pub const fn from_parts(kind: u8, value: u32) -> Option<ErrorCause> {
        Some(match kind {
            0 => match WcStatus::from_ibv(value) {
                Some(s) => ErrorCause::Completion(s),
                None => return None,
            },
            1 if value < 32 => ErrorCause::Responder(NakCode::from_code(value as u8)),
            2 => ErrorCause::CqOverrun,
            3 => ErrorCause::Modified,
            _ => return None,
        })
    }
}

impl core::fmt::Display for ErrorCause {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ErrorCause::Completion(s) => write!(f, "a work request completed with {s:?}"),
            ErrorCause::Responder(NakCode::RemoteAccessError) => f.write_str(
                "the peer's request broke a region's key, bounds or rights (remote access error)",
            ),
            ErrorCause::Responder(NakCode::InvalidRequest) => {
                f.write_str("the peer sent a request this QP does not allow (invalid request)")
            }
            ErrorCause::Responder(c) => {
                write!(f, "the responder failed the peer's request ({c:?})")
            }
            ErrorCause::CqOverrun => f.write_str("a completion queue overflowed"),
            ErrorCause::Modified => f.write_str("the application moved it to ERROR"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_round_trip_and_unknown_ones_are_none() {
        for c in [
            ErrorCause::Completion(WcStatus::RetryExcErr),
            ErrorCause::Responder(NakCode::RemoteAccessError),
            ErrorCause::Responder(NakCode::Reserved(9)),
            ErrorCause::CqOverrun,
            ErrorCause::Modified,
        ] {
            let (k, v) = c.to_parts();
            assert_eq!(ErrorCause::from_parts(k, v), Some(c));
        }
        assert_eq!(ErrorCause::from_parts(1, 32), None);
        assert_eq!(ErrorCause::from_parts(4, 0), None);
        assert_eq!(ErrorCause::from_parts(0, 999), None);
    }
}
