//! What a QP is created with: its queues' sizes, completion queues, congestion control and the
//! rocev2 options (multipath, IOFD tokens).
//!
//! Source: IBA Vol. 1 §11.2.4.1 (Create QP: queue depths, SGE and inline limits, CQs, PD) as
//! `ibv_qp_cap`/`ibv_qp_init_attr` carry them; seed 000 §IV-A (IOFD tokens); seed 001 §3
//! (multipath).
//!
//! Deviations: IOFD tokens are not negotiated ([`IofdTokens`]).

use crate::cc::CcConfig;
use crate::mr::PdId;

/// Handle of a completion queue within an [`crate::Endpoint`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CqId(pub u32);

/// Sizes and limits fixed at QP creation (`ibv_qp_cap` plus rocev2's own knobs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QpConfig {
    /// Protection domain of the QP.
    pub pd: PdId,
    /// Completion queue for send work requests.
    pub send_cq: CqId,
    /// Completion queue for receive work requests.
    pub recv_cq: CqId,
    /// Send queue capacity.
    pub max_send_wr: u32,
    /// Receive queue capacity.
    pub max_recv_wr: u32,
    /// SGEs per send work request.
    pub max_send_sge: u32,
    /// SGEs per receive work request.
    pub max_recv_sge: u32,
    /// Largest inline payload.
    pub max_inline_data: u32,
    /// Set AckReq at least every this many packets within a message, so long messages are
    /// acknowledged (and retransmission state freed) before their end.
    pub ack_req_every: u32,
    /// Most PSNs the requester has outstanding.
    pub max_inflight_psns: u32,
    /// Congestion control; `None` sends unpaced, as fast as the caller polls.
    pub cc: Option<CcConfig>,
    /// Bytes a paced QP may send back to back after idling (the pacer's bucket).
    pub pacer_burst_bytes: u64,
    /// Offer MP-RDMA multipath mode with these parameters (seed 001 §3); used when the peer
    /// announces it too ([`super::QpMode`]). A multipath QP ignores `cc`: its window is its congestion
    /// control (§3.2).
    pub multipath: Option<crate::mprdma::MpConfig>,
    /// Put IOFD deflection tokens on short messages' packets (seed 000 §IV-A); `None` (the
    /// default) sends every packet with 0, as a standard sender does.
    pub iofd_tokens: Option<IofdTokens>,
    /// Take receive requests from this shared receive queue instead of the QP's own receive
    /// queue ([`crate::srq`]); it must be in the QP's protection domain.
    pub srq: Option<crate::srq::SrqId>,
}

/// Which messages carry IOFD deflection tokens, and how many (seed 000 §IV-A: "short flows"
/// get tokens, long flows none; the paper uses 4). Every packet of a SEND or RDMA WRITE
/// message of at most `max_message_bytes` carries `tokens` in BTH Resv6a (docs/wire.md);
/// READ requests, atomics, responses and ACKs carry none.
///
/// Deviation (docs/wire.md, "Negotiation"): not negotiated yet. Resv6a is reserved, ignored on
/// receipt by IBA and masked by the ICRC, so a standard peer accepts such frames; but the bytes
/// differ from a standard sender's, so the option stays off unless the caller asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IofdTokens {
    /// Tokens per packet, 1–63 (six bits; more are truncated to the low six).
    pub tokens: u8,
    /// Largest message (bytes) that still counts as short.
    pub max_message_bytes: u32,
}

impl QpConfig {
    /// Defaults like `ibv_rc_pingpong`'s (send/recv depth 500, one SGE) with 64 bytes of inline
    /// data, AckReq every 16 packets and at most 1024 PSNs in flight.
    pub fn new(pd: PdId, send_cq: CqId, recv_cq: CqId) -> QpConfig {
        QpConfig {
            pd,
            send_cq,
            recv_cq,
            max_send_wr: 500,
            max_recv_wr: 500,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 64,
            ack_req_every: 16,
            max_inflight_psns: 1024,
            cc: None,
            pacer_burst_bytes: 16 * 1024,
            multipath: None,
            iofd_tokens: None,
            srq: None,
        }
    }

    /// The same configuration putting IOFD deflection tokens on short messages.
    pub fn with_iofd_tokens(mut self, t: IofdTokens) -> QpConfig {
        self.iofd_tokens = Some(t);
        self
    }

    /// The same configuration with congestion control `cc`.
    pub fn with_cc(mut self, cc: CcConfig) -> QpConfig {
        self.cc = Some(cc);
        self
    }

    /// The same configuration offering MP-RDMA multipath mode (seed 001 §3).
    pub fn with_multipath(mut self, mp: crate::mprdma::MpConfig) -> QpConfig {
        self.multipath = Some(mp);
        self
    }
}
