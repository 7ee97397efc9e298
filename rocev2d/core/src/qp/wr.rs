//! Work requests: what `ibv_post_send` and `ibv_post_recv` hand a QP, and why a post is refused.
//!
//! Source: IBA Vol. 1 §11.4.1 (Post Send / Post Receive Request: opcodes, scatter/gather
//! lists, inline data, signaled/fenced/solicited flags; a UD send names its destination:
//! address handle, QP and Q_Key) and `ibv_post_send(3)`. rocev2 adds
//! two fields of its own: Dart's look-ahead (seed 000 §III-D) and MP-RDMA's synchronise flag
//! (seed 001 §3.4).
//!
//! Deviations: no memory windows, so SEND with Invalidate only reports the R_Key (see
//! [`super`]); READ and atomics are refused on a multipath QP ([`PostError::Unsupported`]).

use super::QpState;
use super::ud::AddressHandle;
use crate::cq::WcOpcode;
use crate::mr::{Lkey, Rkey};
use crate::wire::Qpn;
use alloc::vec::Vec;

/// A local scatter/gather element: `length` bytes at virtual address `addr` under `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Bytes.
    pub length: u32,
    /// Local key of the region holding them.
    pub lkey: Lkey,
}

/// The operation of a send work request (`ibv_wr_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// SEND: consumes a receive WQE at the peer.
    Send,
    /// SEND with 32 bits of immediate data for the peer's completion.
    SendWithImm {
        /// Immediate data.
        imm: u32,
    },
    /// SEND that asks the peer to invalidate `rkey`.
    SendWithInv {
        /// The R_Key to invalidate.
        rkey: Rkey,
    },
    /// RDMA WRITE to `remote_addr` under `rkey`.
    Write {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: Rkey,
    },
    /// RDMA WRITE whose last packet carries immediate data and consumes a receive WQE.
    WriteWithImm {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: Rkey,
        /// Immediate data.
        imm: u32,
    },
    /// RDMA READ from `remote_addr` under `rkey` into the local SGEs.
    Read {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: Rkey,
    },
    /// ATOMIC CmpSwap on the 8-byte word at `remote_addr`; the old value lands in the SGE.
    CompareSwap {
        /// Remote virtual address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: Rkey,
        /// Value expected.
        compare: u64,
        /// Value written when it matches.
        swap: u64,
    },
    /// ATOMIC FetchAdd on the 8-byte word at `remote_addr`; the old value lands in the SGE.
    FetchAdd {
        /// Remote virtual address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: Rkey,
        /// Addend.
        add: u64,
    },
}

impl SendOp {
    pub(super) fn is_rd_atomic(&self) -> bool {
        matches!(
            self,
            SendOp::Read { .. } | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. }
        )
    }
    pub(super) fn is_atomic(&self) -> bool {
        matches!(self, SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. })
    }
    /// The opcode of this request's completion.
    pub fn wc_opcode(&self) -> WcOpcode {
        match self {
            SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. } => {
                WcOpcode::Send
            }
            SendOp::Write { .. } | SendOp::WriteWithImm { .. } => WcOpcode::RdmaWrite,
            SendOp::Read { .. } => WcOpcode::RdmaRead,
            SendOp::CompareSwap { .. } => WcOpcode::CompSwap,
            SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
        }
    }
}

/// A send work request (`ibv_send_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOp,
    /// Local data (gathered for SEND/WRITE, scattered into for READ/atomics).
    pub sg_list: Vec<Sge>,
    /// Data copied at post time instead of `sg_list` (`IBV_SEND_INLINE`).
    pub inline_data: Option<Vec<u8>>,
    /// Generate a completion on success (`IBV_SEND_SIGNALED`); errors always complete.
    pub signaled: bool,
    /// Wait for earlier READ/atomics to finish first (`IBV_SEND_FENCE`).
    pub fence: bool,
    /// Ask for a solicited event at the peer (`IBV_SEND_SOLICITED`).
    pub solicited: bool,
    /// Dart look-ahead: this message starts an incast group (seed 000 §III-D); sent only to a
    /// peer that announced look-ahead support.
    pub lookahead: Option<crate::wire::ext::Lookahead>,
    /// MP-RDMA synchronise flag (seed 001 §3.4): on a multipath QP the message updates the
    /// peer's memory only after every earlier message has; ignored in RC, which is in order.
    pub synchronise: bool,
    /// Where a UD QP sends this message (`ibv_send_wr.wr.ud`); required on a UD QP, refused on
    /// an RC QP ([`PostError::Unsupported`]).
    pub ud: Option<UdDest>,
}

/// The destination of a UD send (IBA §11.4.1.1): a path, a QP and the Q_Key it expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdDest {
    /// How to reach the destination's port.
    pub ah: AddressHandle,
    /// The destination QP.
    pub remote_qpn: Qpn,
    /// The Q_Key to put in the DETH; with its high bit set the sending QP's own Q_Key is used
    /// instead (IBA §10.2.4).
    pub remote_qkey: u32,
}

impl SendWr {
    /// A signaled request with no data; add data with [`Self::sge`] or [`Self::inline`].
    pub fn new(wr_id: u64, op: SendOp) -> SendWr {
        SendWr {
            wr_id,
            op,
            sg_list: Vec::new(),
            inline_data: None,
            signaled: true,
            fence: false,
            solicited: false,
            lookahead: None,
            synchronise: false,
            ud: None,
        }
    }
    /// Sends this message to `dest` (UD QPs only).
    pub fn ud(mut self, dest: UdDest) -> Self {
        self.ud = Some(dest);
        self
    }
    /// Sets the synchronise flag (seed 001 §3.4).
    pub fn synchronise(mut self) -> Self {
        self.synchronise = true;
        self
    }
    /// Appends a scatter/gather element.
    pub fn sge(mut self, sge: Sge) -> Self {
        self.sg_list.push(sge);
        self
    }
    /// Sends `data` inline.
    pub fn inline(mut self, data: Vec<u8>) -> Self {
        self.inline_data = Some(data);
        self
    }
    /// Completes only on error.
    pub fn unsignaled(mut self) -> Self {
        self.signaled = false;
        self
    }
    /// Sets the fence flag.
    pub fn fence(mut self) -> Self {
        self.fence = true;
        self
    }
    /// Announces an incast group of `group_size` senders with these 16-bit sender ids (at
    /// most [`crate::wire::ext::MAX_LOOKAHEAD`] are listed; the rest are counted by size).
    pub fn lookahead(mut self, group_size: u16, members: &[u16]) -> Self {
        let mut l = crate::wire::ext::Lookahead {
            group_size,
            member_count: 0,
            members: [0; crate::wire::ext::MAX_LOOKAHEAD],
        };
        for (slot, id) in l.members.iter_mut().zip(members) {
            *slot = *id;
            l.member_count += 1;
        }
        self.lookahead = Some(l);
        self
    }
    /// Sets the solicited-event flag.
    pub fn solicited(mut self) -> Self {
        self.solicited = true;
        self
    }
}

/// A receive work request (`ibv_recv_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where an incoming SEND's data goes.
    pub sg_list: Vec<Sge>,
}

/// Why a work request was refused at post time (the caller's mistake, as `ibv_post_*` errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// The QP's state does not accept this queue's requests.
    #[error("QP in state {0:?} does not accept this request")]
    WrongState(QpState),
    /// The QP takes its receive requests from a shared receive queue: post them there.
    #[error("this QP receives from a shared receive queue: post the request to the SRQ")]
    UsesSrq,
    /// The QP is in ERROR, for this reason: it accepts no request until it is reset.
    #[error("QP in ERROR since {0}: it accepts no request (reset or destroy it)")]
    InError(super::ErrorCause),
    /// The queue already holds its capacity of requests.
    #[error("work queue full")]
    QueueFull,
    /// More SGEs than the QP was created for.
    #[error("too many scatter/gather elements")]
    TooManySge,
    /// Inline data longer than the QP's `max_inline_data`, or inline on a READ/atomic.
    #[error("inline data too long or not allowed for this operation")]
    BadInline,
    /// The message is longer than 2^31 bytes (IBA's largest message).
    #[error("message longer than 2^31 bytes")]
    MessageTooLong,
    /// An atomic needs exactly one 8-byte SGE.
    #[error("atomic operations need one 8-byte scatter/gather element")]
    BadAtomic,
    /// The QP's type or mode does not carry this operation: READ and atomics on a multipath
    /// QP; anything but SEND (with immediate) with a [`UdDest`] on a UD QP; a [`UdDest`] on an
    /// RC QP; a UD send to the multicast QPN.
    #[error("operation not supported by this QP's type or mode")]
    Unsupported,
}
