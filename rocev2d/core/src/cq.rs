//! Completion queues: where a QP reports finished work requests to the application.
//!
//! Source: IBA Vol. 1 §11.4.2 (completion queue operations: poll for completion, the work
//! completion's contents). Status and opcode values, and the status strings, are those of
//! libibverbs (`enum ibv_wc_status`, `enum ibv_wc_opcode`, `ibv_wc_status_str`) so they can be
//! handed to a verbs application unchanged and read as users expect.
//!
//! # Overrun
//!
//! A CQ holds at most `capacity` completions. IBA treats a completion that does not fit as a CQ
//! overrun, an affiliated asynchronous error (`IBV_EVENT_CQ_ERR` in verbs) after which the CQ is
//! unusable. [`Cq::push`] therefore never drops a completion silently and never overwrites one:
//! the first push that does not fit puts the CQ in the overrun state, and from then on every push
//! is refused and counted. The refused completion is handed back inside the error so the caller
//! can log it; the QP that pushed it moves itself to the error state, since a QP whose
//! completions are lost can no longer tell the application what happened (rxe does the same:
//! fault behaviour class G). Completions queued before the overrun stay pollable, so the
//! application can see how far its work got.
//!
//! Deviations:
//! - NOT IMPLEMENTED (IBA §11.4.2): completion notification (`ibv_req_notify_cq`) and CQ
//!   resizing; the host polls.

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::fmt;

use crate::wire::Qpn;
use core::net::Ipv6Addr;

/// Completion status (IBA §11.4.2), numerically `enum ibv_wc_status` of libibverbs.
///
/// For any status other than [`WcStatus::Success`] only `wr_id`, `status` and `qp_num` of the
/// [`WorkCompletion`] are meaningful, as in verbs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u32)]
pub enum WcStatus {
    /// The work request completed without error.
    Success = 0,
    /// Local length error: a receive buffer was too small for the incoming message, or a send
    /// exceeded the port's message size limit.
    LocLenErr = 1,
    /// Local QP operation error: an internal consistency error in the QP (e.g. a malformed work
    /// request).
    LocQpOpErr = 2,
    /// Local EE context operation error (reliable datagram only; never produced here).
    LocEecOpErr = 3,
    /// Local protection error: a scatter/gather entry's L_Key, PD, rights or bounds failed the
    /// memory region check.
    LocProtErr = 4,
    /// Work request flushed: it was outstanding when the QP entered the error state.
    WrFlushErr = 5,
    /// Memory window bind error (memory windows are not implemented; never produced here).
    MwBindErr = 6,
    /// Bad response: the responder answered with an unexpected opcode or transport header.
    BadRespErr = 7,
    /// Local access error: a protection error on a local buffer detected while executing an
    /// RDMA READ response or atomic response.
    LocAccessErr = 8,
    /// Remote invalid request: the responder NAKed the request as invalid (unsupported opcode,
    /// message too long for its buffer, misaligned atomic, …).
    RemInvReqErr = 9,
    /// Remote access error: the responder NAKed an R_Key, bounds or rights violation.
    RemAccessErr = 10,
    /// Remote operation error: the responder could not complete the operation for a reason of
    /// its own.
    RemOpErr = 11,
    /// Transport retry counter exceeded: no acknowledgement after `retry_cnt` retransmissions.
    RetryExcErr = 12,
    /// RNR retry counter exceeded: the responder kept answering RNR NAK after `rnr_retry`
    /// retries.
    RnrRetryExcErr = 13,
    /// Local RDD violation (reliable datagram only; never produced here).
    LocRddViolErr = 14,
    /// Remote invalid RD request (reliable datagram only; never produced here).
    RemInvRdReqErr = 15,
    /// Remote abort error: the responder aborted the operation.
    RemAbortErr = 16,
    /// Invalid EE context number (reliable datagram only; never produced here).
    InvEecnErr = 17,
    /// Invalid EE context state (reliable datagram only; never produced here).
    InvEecStateErr = 18,
    /// Fatal error.
    FatalErr = 19,
    /// Response timeout error.
    RespTimeoutErr = 20,
    /// General error: none of the above.
    GeneralErr = 21,
}

impl WcStatus {
    /// Every status, in numeric order.
    pub const ALL: [WcStatus; 22] = [
        WcStatus::Success,
        WcStatus::LocLenErr,
        WcStatus::LocQpOpErr,
        WcStatus::LocEecOpErr,
        WcStatus::LocProtErr,
        WcStatus::WrFlushErr,
        WcStatus::MwBindErr,
        WcStatus::BadRespErr,
        WcStatus::LocAccessErr,
        WcStatus::RemInvReqErr,
        WcStatus::RemAccessErr,
        WcStatus::RemOpErr,
        WcStatus::RetryExcErr,
        WcStatus::RnrRetryExcErr,
        WcStatus::LocRddViolErr,
        WcStatus::RemInvRdReqErr,
        WcStatus::RemAbortErr,
        WcStatus::InvEecnErr,
        WcStatus::InvEecStateErr,
        WcStatus::FatalErr,
        WcStatus::RespTimeoutErr,
        WcStatus::GeneralErr,
    ];

    /// The `enum ibv_wc_status` value.
    pub const fn as_ibv(self) -> u32 {
        self as u32
    }

    /// The status whose `enum ibv_wc_status` value is `v`, if any.
    pub const fn from_ibv(v: u32) -> Option<WcStatus> {
        if (v as usize) < Self::ALL.len() {
            Some(Self::ALL[v as usize])
        } else {
            None
        }
    }

    /// True for [`WcStatus::Success`].
    pub const fn is_success(self) -> bool {
        matches!(self, WcStatus::Success)
    }

    /// The text `ibv_wc_status_str` gives for this status.
    pub const fn as_str(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocEecOpErr => "local EE context operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::MwBindErr => "memory management operation error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::LocRddViolErr => "local RDD violation error",
            WcStatus::RemInvRdReqErr => "remote invalid RD request",
            WcStatus::RemAbortErr => "aborted error",
            WcStatus::InvEecnErr => "invalid EE context number",
            WcStatus::InvEecStateErr => "invalid EE context state",
            WcStatus::FatalErr => "fatal error",
            WcStatus::RespTimeoutErr => "response timeout error",
            WcStatus::GeneralErr => "general error",
        }
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What kind of work request completed, numerically `enum ibv_wc_opcode` of libibverbs.
///
/// Send-queue opcodes are below 128, receive-queue opcodes 128 and up, as in verbs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u32)]
#[non_exhaustive]
pub enum WcOpcode {
    /// A SEND (with or without immediate or invalidate) completed at the requester.
    Send = 0,
    /// An RDMA WRITE (with or without immediate) completed at the requester.
    RdmaWrite = 1,
    /// An RDMA READ completed: the data is in the local buffers.
    RdmaRead = 2,
    /// An atomic CmpSwap completed: the original value is in the local buffer.
    CompSwap = 3,
    /// An atomic FetchAdd completed: the original value is in the local buffer.
    FetchAdd = 4,
    /// A receive work request consumed an incoming SEND.
    Recv = 128,
    /// A receive work request consumed an incoming RDMA WRITE with immediate (the data went to
    /// the R_Key's region; the receive buffer only yields the immediate).
    RecvRdmaWithImm = 129,
}

impl WcOpcode {
    /// The `enum ibv_wc_opcode` value.
    pub const fn as_ibv(self) -> u32 {
        self as u32
    }

    /// The opcode whose `enum ibv_wc_opcode` value is `v`, if we produce it.
    pub const fn from_ibv(v: u32) -> Option<WcOpcode> {
        Some(match v {
            0 => WcOpcode::Send,
            1 => WcOpcode::RdmaWrite,
            2 => WcOpcode::RdmaRead,
            3 => WcOpcode::CompSwap,
            4 => WcOpcode::FetchAdd,
            128 => WcOpcode::Recv,
            129 => WcOpcode::RecvRdmaWithImm,
            _ => return None,
        })
    }

    /// True for opcodes completing a receive work request (`IBV_WC_RECV` bit, 128).
    pub const fn is_recv(self) -> bool {
        self.as_ibv() & 128 != 0
    }
}

/// One completed work request (IBA §11.4.2, `struct ibv_wc`).
///
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The application's identifier from the work request.
    pub wr_id: u64,
    /// How it ended.
    pub status: WcStatus,
    /// What kind of request it was.
    pub opcode: WcOpcode,
    /// Bytes transferred: received message length for receives, READ/atomic result length.
    pub byte_len: u32,
    /// The immediate data of a SEND or RDMA WRITE with immediate (host order), receive side
    /// only (`IBV_WC_WITH_IMM`).
    pub imm_data: Option<u32>,
    /// The R_Key a SEND with invalidate asked us to invalidate, receive side only
    /// (`IBV_WC_WITH_INV`).
    pub invalidated_rkey: Option<u32>,
    /// The local QP the work request belonged to.
    pub qp_num: Qpn,
    /// The remote QP that sent the message (receives only; for RC it is the connected peer,
    /// for UD the DETH's SrcQP).
    pub src_qp: Qpn,
    /// UD receives only: where the datagram came from. Its presence is verbs' `IBV_WC_GRH`
    /// ([`Self::with_grh`]): on RoCEv2 every UD packet arrives with an IP header, so the first
    /// 40 bytes of the receive buffer always hold its image (IBA §11.4.2, Annex A17.4).
    pub ud: Option<UdSource>,
}

impl WorkCompletion {
    /// True when the receive buffer starts with the 40-byte GRH area (`IBV_WC_GRH`).
    pub const fn with_grh(&self) -> bool {
        self.ud.is_some()
    }
}

/// The sender of a UD message, as a UD receive completion reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdSource {
    /// The sender's GID: its IP source address, IPv4-mapped for IPv4 (Annex A17.3.1). The same
    /// address is in the GRH area of the buffer.
    pub sgid: Ipv6Addr,
    /// Index of the packet's P_Key in the port's P_Key table (`ibv_wc.pkey_index`). rocev2
    /// ports have one entry, the default P_Key, so this is 0.
    pub pkey_index: u16,
}

/// Why [`Cq::push`] refused a completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CqError {
    /// The CQ is full, or already overrun: it is now in the overrun state and the completion was
    /// not queued (it is returned here). The QP must move to the error state.
    #[error("completion queue overrun")]
    Overflow(WorkCompletion),
}

/// Counters of one CQ, as `rocev2d stats` prints them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqStats {
    /// Completions accepted by [`Cq::push`].
    pub pushed: u64,
    /// Completions handed to the application by [`Cq::poll`] or [`Cq::pop`].
    pub polled: u64,
    /// Completions refused because the CQ was full or overrun.
    pub overflows: u64,
}

/// A completion queue of bounded capacity (IBA §11.4.2).
#[derive(Clone, Debug)]
pub struct Cq {
    entries: VecDeque<WorkCompletion>,
    capacity: usize,
    overrun: bool,
    stats: CqStats,
}

impl Cq {
    /// An empty CQ that holds up to `capacity` completions. Storage grows on demand, so a large
    /// capacity costs nothing until used (the model creates many CQs).
    pub fn new(capacity: usize) -> Self {
        Cq {
            entries: VecDeque::new(),
            capacity,
            overrun: false,
            stats: CqStats::default(),
        }
    }

    /// Queues a completion.
    ///
    /// # Errors
    ///
    /// [`CqError::Overflow`] if the CQ is full or already overrun; the CQ is then (or stays) in
    /// the overrun state for good. See the module docs.
    pub fn push(&mut self, wc: WorkCompletion) -> Result<(), CqError> {
        if self.overrun || self.entries.len() >= self.capacity {
            self.overrun = true;
            self.stats.overflows = self.stats.overflows.saturating_add(1);
            return Err(CqError::Overflow(wc));
        }
        self.entries.push_back(wc);
        self.stats.pushed = self.stats.pushed.saturating_add(1);
        Ok(())
    }

    /// Moves up to `max` of the oldest completions to the end of `out` (`ibv_poll_cq`), returning
    /// how many.
    pub fn poll(&mut self, out: &mut Vec<WorkCompletion>, max: usize) -> usize {
        let n = max.min(self.entries.len());
        out.extend(self.entries.drain(..n));
        self.stats.polled = self.stats.polled.saturating_add(n as u64);
        n
    }

    /// Removes and returns the oldest completion.
    pub fn pop(&mut self) -> Option<WorkCompletion> {
        let wc = self.entries.pop_front()?;
        self.stats.polled = self.stats.polled.saturating_add(1);
        Some(wc)
    }

    /// Completions waiting to be polled.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing waits to be polled.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The most completions the CQ holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// True once a completion has been refused; it stays true (IBA: an overrun CQ is in error
    /// and must be destroyed).
    pub fn is_overrun(&self) -> bool {
        self.overrun
    }

    /// The counters.
    pub fn stats(&self) -> CqStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;
    use alloc::vec;

    use super::*;

    fn wc(wr_id: u64) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            byte_len: 0,
            imm_data: None,
            invalidated_rkey: None,
            qp_num: Qpn::new(0x11),
            src_qp: Qpn::new(0),
            ud: None,
        }
    }

    #[test]
    fn wc_status_values_match_libibverbs() {
        for (i, s) in WcStatus::ALL.iter().enumerate() {
            assert_eq!(s.as_ibv(), i as u32);
            assert_eq!(WcStatus::from_ibv(i as u32), Some(*s));
        }
        assert_eq!(WcStatus::RetryExcErr.as_ibv(), 12);
        assert_eq!(WcStatus::RnrRetryExcErr.as_ibv(), 13);
        assert_eq!(WcStatus::GeneralErr.as_ibv(), 21);
        assert_eq!(WcStatus::from_ibv(22), None);
        assert!(WcStatus::Success.is_success());
        assert!(!WcStatus::WrFlushErr.is_success());
    }

    #[test]
    fn wc_status_display_matches_ibv_wc_status_str() {
        assert_eq!(WcStatus::Success.to_string(), "success");
        assert_eq!(WcStatus::LocLenErr.to_string(), "local length error");
        assert_eq!(
            WcStatus::WrFlushErr.to_string(),
            "Work Request Flushed Error"
        );
        assert_eq!(WcStatus::RemAccessErr.to_string(), "remote access error");
        assert_eq!(
            WcStatus::RetryExcErr.to_string(),
            "transport retry counter exceeded"
        );
        assert_eq!(
            WcStatus::RnrRetryExcErr.to_string(),
            "RNR retry counter exceeded"
        );
        assert_eq!(WcStatus::RemAbortErr.to_string(), "aborted error");
        assert_eq!(WcStatus::GeneralErr.to_string(), "general error");
    }

    #[test]
    fn wc_opcode_values_match_libibverbs() {
        let all = [
            (WcOpcode::Send, 0),
            (WcOpcode::RdmaWrite, 1),
            (WcOpcode::RdmaRead, 2),
            (WcOpcode::CompSwap, 3),
            (WcOpcode::FetchAdd, 4),
            (WcOpcode::Recv, 128),
            (WcOpcode::RecvRdmaWithImm, 129),
        ];
        for (op, v) in all {
            assert_eq!(op.as_ibv(), v);
            assert_eq!(WcOpcode::from_ibv(v), Some(op));
            assert_eq!(op.is_recv(), v >= 128);
        }
        assert_eq!(
            WcOpcode::from_ibv(5),
            None,
            "IBV_WC_BIND_MW is not produced"
        );
    }

    #[test]
    fn cq_poll_returns_oldest_first_up_to_max() {
        let mut cq = Cq::new(8);
        for i in 0..5 {
            cq.push(wc(i)).unwrap();
        }
        let mut out = vec![wc(99)];
        assert_eq!(cq.poll(&mut out, 3), 3);
        let ids: Vec<u64> = out.iter().map(|w| w.wr_id).collect();
        assert_eq!(ids, [99, 0, 1, 2], "appended after existing entries");
        assert_eq!(cq.len(), 2);
        assert_eq!(cq.pop().map(|w| w.wr_id), Some(3));
        assert_eq!(cq.poll(&mut out, 10), 1);
        assert_eq!(cq.poll(&mut out, 10), 0);
        assert!(cq.is_empty());
        assert_eq!(cq.pop(), None);
        assert_eq!(
            cq.stats(),
            CqStats {
                pushed: 5,
                polled: 5,
                overflows: 0
            }
        );
    }

    #[test]
    fn cq_push_when_full_overruns_and_refuses_everything_after() {
        let mut cq = Cq::new(2);
        cq.push(wc(0)).unwrap();
        cq.push(wc(1)).unwrap();
        assert!(!cq.is_overrun());
        assert_eq!(cq.push(wc(2)), Err(CqError::Overflow(wc(2))));
        assert!(cq.is_overrun());
        // Draining does not clear the overrun: the CQ is in error for good.
        assert_eq!(cq.pop().map(|w| w.wr_id), Some(0));
        assert_eq!(cq.push(wc(3)), Err(CqError::Overflow(wc(3))));
        assert!(cq.is_overrun());
        // Completions queued before the overrun stay pollable.
        assert_eq!(cq.pop().map(|w| w.wr_id), Some(1));
        assert_eq!(cq.pop(), None);
        assert_eq!(
            cq.stats(),
            CqStats {
                pushed: 2,
                polled: 2,
                overflows: 2
            }
        );
    }

    #[test]
    fn cq_capacity_zero_overruns_on_first_push() {
        let mut cq = Cq::new(0);
        assert_eq!(cq.capacity(), 0);
        assert!(cq.push(wc(0)).is_err());
        assert!(cq.is_overrun());
    }
}
