//! Reliable Connected queue pairs: the sans-IO RC transport.
//!
//! Source: IBA Vol. 1 ch. 9 (transport layer: §9.5 requester and §9.7 reliable service), ch. 10
//! (QP states) and ch. 11 (verbs semantics). A [`Qp`] is driven by its [`crate::Endpoint`]:
//!
//! * `Qp::handle_packet` (through [`crate::Endpoint::handle_frame`]) takes a received, already ICRC-checked transport packet;
//! * `Qp::poll_transmit` (through [`crate::Endpoint::poll_transmit`]) writes the next frame this QP wants to send, if any;
//! * `Qp::poll_timeout` / `Qp::handle_timeout` drive its timers.
//!
//! Nothing here reads a clock or touches application memory directly: time comes in as
//! [`Instant`], and bytes move through [`Memory`] after [`MrTable`] has checked the key, bounds
//! and rights. The code is split by role: `requester` (send queue, segmentation, ACK/NAK
//! handling, retransmission) and `responder` (receive queue, placement, READ responses,
//! atomics, ACK/NAK generation).
//!
//! Deviations (also in `docs/transport.md`):
//! * end-to-end credits are neither honoured nor advertised: every ACK carries the "invalid"
//!   credit code 31, as Linux rxe sends, and the requester ignores credits (IBA allows a
//!   responder to opt out of credit-based flow control this way);
//! * SEND with Invalidate reports the invalidated R_Key in the completion, but rocev2 has no
//!   memory windows or fast-registration MRs, so there is nothing to invalidate;
//! * the requester keeps at most [`QpConfig::max_inflight_psns`] PSNs outstanding (IBA only
//!   bounds it by 2^23), which bounds go-back-N work.

mod multipath;
mod requester;
mod responder;
pub mod state;
mod timer;

use crate::cc::{AnyController, CcConfig, CcSnapshot, CnpInfo, Pacer, ReceiverCc};
use crate::cq::{WcOpcode, WcStatus, WorkCompletion};
use crate::mr::{Lkey, Memory, MrId, MrTable, PdId, Rkey};
use crate::time::{Duration, Instant};
use crate::wire::frame::Ecn;
use crate::wire::{EthRepr, FrameRepr, IpRepr, Psn, Qpn, ROCEV2_UDP_PORT, RoceRepr, UdpRepr};
use alloc::vec::Vec;
use core::net::IpAddr;
use requester::Requester;
use responder::Responder;
pub use crate::wire::ext::ExtCaps;
pub use state::{ConnectAttr, ModifyError, Mtu, Path, QpAttr, QpState};
use timer::{Timer, TimerTable};

pub use multipath::MpSnapshot;

/// How a connected QP transports its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpMode {
    /// Ordinary single-path RC (IBA ch. 9): one UDP source port, go-back-N.
    Rc,
    /// MP-RDMA (seed 001 §3): packets spread over virtual paths, one window, per-packet ACKs,
    /// out-of-order placement within a tracking bitmap. Chosen when the QP's
    /// [`QpConfig::multipath`] is set and the peer announced [`ExtCaps::multipath`]; a standard
    /// peer always gets [`QpMode::Rc`].
    MultiPath,
}
/// Handle of a completion queue within an [`crate::Endpoint`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CqId(pub u32);

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
    fn is_rd_atomic(&self) -> bool {
        matches!(
            self,
            SendOp::Read { .. } | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. }
        )
    }
    fn is_atomic(&self) -> bool {
        matches!(self, SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. })
    }
    fn wc_opcode(&self) -> WcOpcode {
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
        }
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
    /// The QP's mode does not carry this operation (READ and atomics on a multipath QP).
    #[error("operation not supported in this QP mode")]
    Unsupported,
}

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
    /// announces it too ([`QpMode`]). A multipath QP ignores `cc`: its window is its congestion
    /// control (§3.2).
    pub multipath: Option<crate::mprdma::MpConfig>,
    /// Put IOFD deflection tokens on short messages' packets (seed 000 §IV-A); `None` (the
    /// default) sends every packet with 0, as a standard sender does.
    pub iofd_tokens: Option<IofdTokens>,
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

/// Per-QP counters, with the names `rocev2d stats` prints.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpCounters {
    /// Packets sent (all kinds).
    pub tx_packets: u64,
    /// Packets accepted by the QP.
    pub rx_packets: u64,
    /// Request packets sent again after a NAK, implied NAK or timeout.
    pub retransmits: u64,
    /// Retransmission timer expiries.
    pub timeouts: u64,
    /// NAKs sent (sequence, RNR and errors).
    pub naks_sent: u64,
    /// NAKs received.
    pub naks_received: u64,
    /// RNR NAKs received.
    pub rnr_naks_received: u64,
    /// Duplicate requests answered.
    pub duplicate_requests: u64,
    /// Out-of-sequence requests dropped while a NAK for the gap was outstanding.
    pub out_of_sequence: u64,
    /// Responses that matched no outstanding request (stale duplicates included).
    pub unexpected_responses: u64,
    /// CE-marked data packets received.
    pub ce_received: u64,
    /// CNPs sent to the peer.
    pub cnps_sent: u64,
    /// CNPs received from the peer.
    pub cnps_received: u64,
}

/// A local region range resolved from an SGE: where [`Memory`] finds the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seg {
    mr: MrId,
    offset: u64,
    len: u32,
}

/// Checks every SGE of a local list and returns where [`Memory`] finds the bytes.
fn resolve_local(
    mrs: &MrTable,
    pd: PdId,
    sges: &[Sge],
    need: crate::mr::AccessFlags,
) -> Result<Vec<Seg>, crate::mr::AccessError> {
    sges.iter()
        .map(|s| {
            mrs.check_local(pd, s.lkey, s.addr, s.length as u64, need)
                .map(|(mr, offset)| Seg {
                    mr,
                    offset,
                    len: s.length,
                })
        })
        .collect()
}

/// Copies `dst.len()` bytes starting `off` bytes into the concatenation of `segs`.
fn gather(mem: &dyn Memory, segs: &[Seg], mut off: u64, mut dst: &mut [u8]) {
    for s in segs {
        if dst.is_empty() {
            break;
        }
        if off >= s.len as u64 {
            off -= s.len as u64;
            continue;
        }
        let n = ((s.len as u64 - off) as usize).min(dst.len());
        let (head, tail) = dst.split_at_mut(n);
        mem.read(s.mr, s.offset + off, head);
        dst = tail;
        off = 0;
    }
}

/// Copies `src` to `off` bytes into the concatenation of `segs` (the caller checked capacity).
fn scatter(mem: &mut dyn Memory, segs: &[Seg], mut off: u64, mut src: &[u8]) {
    for s in segs {
        if src.is_empty() {
            break;
        }
        if off >= s.len as u64 {
            off -= s.len as u64;
            continue;
        }
        let n = ((s.len as u64 - off) as usize).min(src.len());
        mem.write(s.mr, s.offset + off, &src[..n]);
        src = &src[n..];
        off = 0;
    }
}

/// What a QP needs from its endpoint while it works: time, keys, memory and completion queues.
pub(crate) struct Env<'a> {
    pub now: Instant,
    pub mrs: &'a MrTable,
    pub mem: &'a mut dyn Memory,
    pub complete: &'a mut dyn FnMut(CqId, WorkCompletion) -> bool,
    /// The endpoint's receiver-side congestion state (notification point, DASR).
    pub rx_cc: &'a mut ReceiverCc,
}

/// A Reliable Connected queue pair.
#[derive(Debug)]
pub struct Qp {
    qpn: Qpn,
    cfg: QpConfig,
    state: QpState,
    p_key: u16,
    access: crate::mr::AccessFlags,
    path: Option<Path>,
    mtu: u32,
    dest_qpn: Qpn,
    max_dest_rd_atomic: u8,
    min_rnr_timer: u8,
    timeout: Option<Duration>,
    retry_cnt: u8,
    rnr_retry: u8,
    max_rd_atomic: u8,
    req: Requester,
    resp: Responder,
    timers: TimerTable,
    /// Whose turn it is when both halves have something to send.
    responder_next: bool,
    counters: QpCounters,
    /// Extensions the peer announced at connection setup (docs/wire.md).
    peer_ext: ExtCaps,
    cc: Option<AnyController>,
    pacer: Option<Pacer>,
    /// A CNP to send (with DCQCN+'s τ), ahead of everything else.
    cnp_out: Option<Option<Duration>>,
    /// The latest time the endpoint drove this QP: a pacer deadline at or before it is no timer
    /// but a packet ready to go, and is not reported by `poll_timeout`.
    last_now: Instant,
    /// MP-RDMA state, in [`QpMode::MultiPath`] (from INIT→RTR on).
    mp: Option<alloc::boxed::Box<multipath::Mp>>,
}

impl Qp {
    /// A QP in the Reset state.
    pub fn new(qpn: Qpn, cfg: QpConfig) -> Qp {
        Qp {
            qpn,
            cfg,
            state: QpState::Reset,
            p_key: 0xffff,
            access: crate::mr::AccessFlags::empty(),
            path: None,
            mtu: 1024,
            dest_qpn: Qpn::new(0),
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
            timeout: None,
            retry_cnt: 0,
            rnr_retry: 0,
            max_rd_atomic: 0,
            req: Requester::default(),
            resp: Responder::default(),
            timers: TimerTable::default(),
            responder_next: true,
            counters: QpCounters::default(),
            peer_ext: ExtCaps::default(),
            cc: cfg.cc.map(|c| c.build()),
            pacer: cfg
                .cc
                .map(|c| Pacer::new(c.line_rate(), cfg.pacer_burst_bytes)),
            cnp_out: None,
            last_now: Instant::ZERO,
            mp: None,
        }
    }

    /// The transport mode: [`QpMode::MultiPath`] once both ends offered it at INIT→RTR.
    pub fn mode(&self) -> QpMode {
        if self.mp.is_some() {
            QpMode::MultiPath
        } else {
            QpMode::Rc
        }
    }

    /// MP-RDMA window, per-VP counters and receiver statistics, in multipath mode.
    pub fn mp_snapshot(&self) -> Option<MpSnapshot> {
        self.mp.as_deref().map(|m| m.snapshot())
    }

    /// The congestion controller's state at `now`, for traces and stats.
    pub fn cc_snapshot(&self, now: Instant) -> Option<CcSnapshot> {
        self.cc.as_ref().map(|c| c.as_dyn().snapshot(now))
    }

    /// PFC paused or resumed this QP's priority (DCQCN+ holds recovery while paused).
    pub fn set_paused(&mut self, paused: bool) {
        if let Some(c) = &mut self.cc {
            c.as_dyn_mut().set_paused(paused);
        }
    }

    /// Accounts a paced packet of `bytes` that just left; the pacer spaces the next one at the
    /// controller's current rate.
    fn on_paced_send(&mut self, now: Instant, bytes: usize) {
        if let (Some(p), Some(c)) = (&mut self.pacer, &self.cc) {
            p.set_rate(c.as_dyn().rate());
            p.on_send(now, bytes as u64);
        }
        if let Some(c) = &mut self.cc {
            c.as_dyn_mut().on_packet_sent(now, bytes as u64);
        }
    }

    /// Applies the controller's current rate to a pacer wait already running, so that an
    /// increase (recovery, a smaller DASR N) is not held back by a gap computed at the old rate.
    pub(crate) fn sync_pacer(&mut self, now: Instant) {
        if let (Some(p), Some(c)) = (&mut self.pacer, &self.cc) {
            p.set_rate_at(now, c.as_dyn().rate());
        }
    }

    /// Queues a CNP to the peer's QP (DCQCN NP, or DCQCN+'s list walk with its τ).
    pub(crate) fn queue_cnp(&mut self, tau: Option<Duration>) {
        if self.can_respond() && self.path.is_some() {
            self.cnp_out = Some(tau);
        }
    }

    /// A CNP for this QP arrived: the sender's controller reacts (seed 002 §II-B, §IV-B).
    pub(crate) fn on_cnp(&mut self, now: Instant, tau: Option<Duration>) {
        self.counters.cnps_received += 1;
        if let Some(c) = &mut self.cc {
            c.as_dyn_mut().on_cnp(now, &CnpInfo::new(tau));
        }
        self.sync_pacer(now);
    }

    /// The QP number.
    pub fn qpn(&self) -> Qpn {
        self.qpn
    }
    /// The current state.
    pub fn state(&self) -> QpState {
        self.state
    }
    /// The creation-time configuration.
    pub fn config(&self) -> &QpConfig {
        &self.cfg
    }
    /// The path set at INIT→RTR.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_ref()
    }
    /// The partition key.
    pub fn p_key(&self) -> u16 {
        self.p_key
    }
    /// Counters.
    pub fn counters(&self) -> &QpCounters {
        &self.counters
    }

    /// Moves the QP to `to`, applying `attr` (IBA §11.2.4.2). Entering Error flushes every
    /// outstanding work request with `WR_FLUSH_ERR` (through `complete`); Reset clears all state.
    pub(crate) fn modify(
        &mut self,
        to: QpState,
        attr: &QpAttr,
        env: &mut Env<'_>,
    ) -> Result<(), ModifyError> {
        state::validate(self.state, to, attr)?;
        if let Some(v) = attr.p_key {
            self.p_key = v;
        }
        if let Some(v) = attr.access {
            self.access = v;
        }
        if let Some(v) = attr.path {
            self.path = Some(v);
        }
        if let Some(v) = attr.path_mtu {
            self.mtu = v.bytes();
        }
        if let Some(v) = attr.dest_qpn {
            self.dest_qpn = v;
        }
        if let Some(v) = attr.rq_psn {
            self.resp.reset(Psn::new(v));
        }
        if let Some(v) = attr.max_dest_rd_atomic {
            self.max_dest_rd_atomic = v;
        }
        if let Some(v) = attr.min_rnr_timer {
            self.min_rnr_timer = v;
        }
        if let Some(v) = attr.sq_psn {
            self.req.reset(Psn::new(v));
        }
        if let Some(v) = attr.timeout {
            self.timeout = state::ack_timeout(v);
        }
        if let Some(v) = attr.retry_cnt {
            self.retry_cnt = v;
            self.req.retry_left = v;
        }
        if let Some(v) = attr.rnr_retry {
            self.rnr_retry = v;
            self.req.rnr_left = v;
        }
        if let Some(v) = attr.max_rd_atomic {
            self.max_rd_atomic = v;
        }
        if let Some(v) = attr.peer_ext {
            self.peer_ext = v;
        }
        if let (Some(mp), true) = (self.cfg.multipath, self.peer_ext.multipath) {
            // The window is a multipath QP's congestion control (seed 001 §3.2): no rate
            // controller or pacer runs beside it.
            self.cc = None;
            self.pacer = None;
            let (rq, sq) = (self.resp.epsn(), self.req.snd_una());
            let m = self.mp.get_or_insert_with(|| {
                alloc::boxed::Box::new(multipath::Mp::new(mp, self.qpn.value(), rq, sq))
            });
            if let Some(v) = attr.rq_psn {
                m.reset_receiver(Psn::new(v));
            }
            if let Some(v) = attr.sq_psn {
                m.reset_sender(Psn::new(v));
            }
        }
        match to {
            QpState::Error => self.enter_error(None, env),
            QpState::Reset => {
                let cfg = self.cfg;
                *self = Qp::new(self.qpn, cfg);
            }
            _ => self.state = to,
        }
        Ok(())
    }

    /// Posts a send work request (`ibv_post_send`): allowed in RTS and SQD (IBA §10.3.1;
    /// requests posted in SQD start after the QP returns to RTS).
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), PostError> {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) {
            return Err(PostError::WrongState(self.state));
        }
        if self.req.sq_len() >= self.cfg.max_send_wr as usize {
            return Err(PostError::QueueFull);
        }
        if wr.sg_list.len() > self.cfg.max_send_sge as usize {
            return Err(PostError::TooManySge);
        }
        if self.mp.is_some() && wr.op.is_rd_atomic() {
            // NOT IMPLEMENTED (seed 001 §3.1): READ and atomics over multipath (issue 7).
            return Err(PostError::Unsupported);
        }
        self.req.push(wr, self.cfg.max_inline_data, self.mtu)
    }

    /// Posts a receive work request (`ibv_post_recv`): allowed from Init on (IBA §10.3.1), so
    /// receive buffers are in place before the peer sends.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), PostError> {
        if matches!(self.state, QpState::Reset | QpState::Error) {
            return Err(PostError::WrongState(self.state));
        }
        if self.resp.rq_len() >= self.cfg.max_recv_wr as usize {
            return Err(PostError::QueueFull);
        }
        if wr.sg_list.len() > self.cfg.max_recv_sge as usize {
            return Err(PostError::TooManySge);
        }
        let total: u64 = wr.sg_list.iter().map(|s| s.length as u64).sum();
        if total > 1 << 31 {
            return Err(PostError::MessageTooLong);
        }
        self.resp.push(wr);
        Ok(())
    }

    /// True when the QP has a packet to send now (used by the endpoint's scheduler).
    pub(crate) fn wants_to_send(&self, now: Instant) -> bool {
        if self.mp.is_some() {
            return self.resp.has_fatal_nak()
                || (self.can_respond() && multipath::has_ack(self))
                || (self.can_request() && multipath::has_sendable(self, now));
        }
        self.cnp_out.is_some()
            || self.resp.has_fatal_nak()
            || (self.can_respond() && responder::has_sendable(self, now))
            || (self.can_request() && requester::has_sendable(self, now))
    }

    /// True when the pacer lets a data packet leave at `now` (always, without congestion
    /// control).
    fn pacer_ready(&self, now: Instant) -> bool {
        self.pacer.is_none_or(|p| p.ready(now))
    }

    /// True when paced work is waiting for nothing but the pacer.
    fn paced_work_waiting(&self) -> bool {
        (self.can_respond() && self.resp.read_pending())
            || (self.can_request() && !requester::blocked(self))
    }

    fn can_respond(&self) -> bool {
        matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd)
    }
    fn can_request(&self) -> bool {
        matches!(self.state, QpState::Rts | QpState::Sqd) && !self.timers.is_set(Timer::Rnr)
    }

    /// Writes the next frame into `buf` and returns its length, or `None` with nothing to send.
    pub(crate) fn poll_transmit(&mut self, env: &mut Env<'_>, buf: &mut Vec<u8>) -> Option<usize> {
        self.last_now = self.last_now.max(env.now);
        let path = self.path?;
        let n = match self
            .transmit_cnp(&path, buf)
            .or_else(|| responder::transmit_fatal_nak(self, &path, buf))
        {
            Some(n) => n,
            None if self.mp.is_some() => {
                // Multipath: ACKs first (seed 001 §3.1: "immediately"), then data.
                let ack = if self.can_respond() {
                    multipath::transmit_ack(self, &path, buf)
                } else {
                    None
                };
                match ack {
                    Some(n) => n,
                    None if self.can_request() => multipath::transmit_data(self, env, &path, buf)?,
                    None => return None,
                }
            }
            None => {
                let order = if self.responder_next {
                    [true, false]
                } else {
                    [false, true]
                };
                let mut sent = None;
                for responder_turn in order {
                    sent = if responder_turn {
                        if self.can_respond() {
                            responder::transmit(self, env, &path, buf)
                        } else {
                            None
                        }
                    } else if self.can_request() {
                        requester::transmit(self, env, &path, buf)
                    } else {
                        None
                    };
                    if sent.is_some() {
                        self.responder_next = !responder_turn;
                        break;
                    }
                }
                sent?
            }
        };
        self.counters.tx_packets += 1;
        Some(n)
    }

    /// Sends a queued CNP (RoCEv2 Annex A17.9.1), with τ in REXT when the peer reads it.
    fn transmit_cnp(&mut self, path: &Path, buf: &mut Vec<u8>) -> Option<usize> {
        let tau = self.cnp_out?;
        let mut roce = RoceRepr::new(crate::wire::cnp::bth(self.dest_qpn, self.p_key));
        if let Some(tau) = tau.filter(|_| self.peer_ext.cnp_tau) {
            roce.bth.tver = crate::wire::ext::TVER;
            let tau_ns = u32::try_from(tau.as_nanos()).unwrap_or(u32::MAX);
            roce.ext = Some(crate::wire::ExtRepr {
                tau_ns: Some(tau_ns),
                ..Default::default()
            });
        }
        let n = self.emit(path, roce, 0, buf, |_| {})?;
        self.cnp_out = None;
        self.counters.cnps_sent += 1;
        Some(n)
    }

    /// The earliest deadline: QP timers, the controller's timers, and the pacer when paced work
    /// waits for it.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        let pacer = self
            .pacer
            .filter(|p| p.next_send() > self.last_now && self.paced_work_waiting())
            .map(|p| p.next_send());
        let cc = self.cc.as_ref().and_then(|c| c.as_dyn().poll_timeout());
        let sync = multipath::sync_deadline(self, self.last_now);
        [self.timers.next(), cc, pacer, sync]
            .into_iter()
            .flatten()
            .min()
    }

    /// Runs the timers whose deadline passed; a spurious call does nothing.
    pub(crate) fn handle_timeout(&mut self, env: &mut Env<'_>) {
        self.last_now = self.last_now.max(env.now);
        if let Some(c) = &mut self.cc {
            if c.as_dyn().poll_timeout().is_some_and(|t| t <= env.now) {
                c.as_dyn_mut().handle_timeout(env.now);
            }
        }
        self.sync_pacer(env.now);
        let fired = self.timers.expired(env.now);
        if fired[Timer::Rnr as usize] {
            // The wait is over: the retry goes out on the next poll_transmit.
            self.arm_retransmit(env.now);
            multipath::on_rnr_wait_over(self);
        }
        if fired[Timer::Retransmit as usize] {
            if self.mp.is_some() {
                multipath::on_retransmit_timeout(self, env);
            } else {
                requester::on_retransmit_timeout(self, env);
            }
        }
        if fired[Timer::MpBurst as usize] {
            multipath::on_burst_timeout(self, env.now);
        }
        if fired[Timer::MpEarly as usize] {
            multipath::on_early_timeout(self, env.now);
        }
    }

    /// Handles a received transport packet addressed to this QP (`frame_len` bytes on the wire
    /// without FCS, sent from UDP port `udp_src_port`). The endpoint has verified the ICRC, the
    /// source address and the P_Key.
    pub(crate) fn handle_packet(
        &mut self,
        env: &mut Env<'_>,
        roce: &RoceRepr,
        payload: &[u8],
        ecn: Ecn,
        frame_len: usize,
        udp_src_port: u16,
    ) {
        let Some(op) = roce.bth.opcode.operation() else {
            return;
        };
        self.counters.rx_packets += 1;
        if self.mp.is_some() {
            // Multipath: ECN is echoed per ACK (seed 001 §3.2), no notification point runs.
            let ce = ecn == Ecn::Ce;
            self.counters.ce_received += ce as u64;
            if op.is_request() {
                if self.can_respond() {
                    multipath::on_data(self, env, roce, op, payload, udp_src_port, ce);
                }
            } else if matches!(self.state, QpState::Rts | QpState::Sqd) {
                multipath::on_ack(self, env, roce);
            }
            return;
        }
        if op.is_send() || op.is_rdma_write() || op.is_read_response() {
            // Frame bytes: Dart compares the receive throughput with the line rate (§III-C).
            self.notify_data(env, roce, op, frame_len, ecn);
        }
        if op.is_request() {
            if self.can_respond() {
                responder::on_request(self, env, roce, op, payload);
            }
        } else if matches!(self.state, QpState::Rts | QpState::Sqd) {
            requester::on_response(self, env, roce, op, payload);
        }
    }

    /// The peer's 16-bit id for DASR: the low 16 bits of its address (`cc::dasr`).
    fn peer_id(&self) -> u16 {
        match self.path.map(|p| p.dst_ip) {
            Some(IpAddr::V4(a)) => u16::from_be_bytes([a.octets()[2], a.octets()[3]]),
            Some(IpAddr::V6(a)) => u16::from_be_bytes([a.octets()[14], a.octets()[15]]),
            None => 0,
        }
    }

    /// Feeds a data packet to the endpoint's receiver-side congestion control (notification
    /// point, DASR) and queues the CNP it asks for.
    fn notify_data(
        &mut self,
        env: &mut Env<'_>,
        roce: &RoceRepr,
        op: crate::wire::Operation,
        bytes: usize,
        ecn: Ecn,
    ) {
        if self.path.is_none() {
            return;
        }
        let ce = ecn == Ecn::Ce;
        self.counters.ce_received += ce as u64;
        let sender = self.peer_id();
        let p_key = roce.bth.p_key;
        if let Some(l) = roce.ext.as_ref().and_then(|e| e.lookahead.as_ref()) {
            env.rx_cc
                .on_lookahead(env.now, p_key, l.group_size, l.members());
        }
        let pos = op.position();
        let arrival = crate::cc::DataArrival {
            p_key,
            sender,
            starts: pos.starts_message() && !op.is_read_response(),
            ends: pos.ends_message() && !op.is_read_response(),
            bytes: bytes as u64,
            ce,
        };
        if let crate::cc::Notify::Cnp(tau) = env.rx_cc.on_data(env.now, self.qpn, &arrival) {
            self.queue_cnp(tau);
        }
    }

    /// (Re)arms the retransmission timer if anything is outstanding and a timeout is set.
    fn arm_retransmit(&mut self, now: Instant) {
        match self.timeout {
            Some(t) if self.req.outstanding() => self.timers.set(Timer::Retransmit, now + t),
            _ => self.timers.stop(Timer::Retransmit),
        }
    }

    /// Frames a transport packet for this QP's path and lets `fill` write its payload.
    fn emit(
        &self,
        path: &Path,
        roce: RoceRepr,
        payload_len: usize,
        buf: &mut Vec<u8>,
        fill: impl FnOnce(&mut [u8]),
    ) -> Option<usize> {
        // Only data packets are ECN-capable: switches mark data, and the notification point
        // reacts to marked data only (seed 002 §II-B).
        let carries_data = roce.bth.opcode.layout().is_ok_and(|l| l.payload);
        let ecn = if carries_data { path.ecn } else { Ecn::NotEct };
        let ip = match (path.src_ip, path.dst_ip) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => IpRepr::V4 {
                src,
                dst,
                dscp: path.dscp,
                ecn,
                // Identification 0 with DF, as a UDP socket's kernel would write it, so all
                // datapaths produce the same ICRC (docs/wire.md, "ICRC in each datapath mode").
                identification: 0,
                dont_fragment: true,
                ttl: path.hop_limit,
            },
            (IpAddr::V6(src), IpAddr::V6(dst)) => IpRepr::V6 {
                src,
                dst,
                dscp: path.dscp,
                ecn,
                flow_label: path.flow_label,
                hop_limit: path.hop_limit,
            },
            // Mixed families are refused at modify time.
            _ => return None,
        };
        let frame = FrameRepr {
            eth: EthRepr {
                src: path.src_mac,
                dst: path.dst_mac,
                vlan: path.vlan,
            },
            ip,
            udp: UdpRepr {
                src_port: path.udp_src_port,
                dst_port: ROCEV2_UDP_PORT,
                checksum: path.dst_ip.is_ipv6(),
            },
            roce,
        };
        let len = frame.buffer_len(payload_len).ok()?;
        // No need to zero: emit writes every byte (headers, payload via `fill`, pad, ICRC).
        buf.resize(len, 0);
        frame.emit_with(buf, payload_len, fill).ok()?;
        Some(len)
    }

    /// Enters Error: a queued fatal NAK still goes out; every outstanding work request
    /// completes, the one at send-queue index `failed.0` with status `failed.1`, all others with
    /// `WR_FLUSH_ERR` (IBA §10.3.1 and §11.4.2.1: flushed WQEs complete even when unsignaled).
    fn enter_error(&mut self, failed: Option<(usize, WcStatus)>, env: &mut Env<'_>) {
        self.state = QpState::Error;
        self.timers = TimerTable::default();
        let (qpn, dest) = (self.qpn, self.dest_qpn);
        let (send_cq, recv_cq) = (self.cfg.send_cq, self.cfg.recv_cq);
        for (i, wr) in self.req.drain().enumerate() {
            let s = match failed {
                Some((at, status)) if at == i => status,
                _ => WcStatus::WrFlushErr,
            };
            (env.complete)(send_cq, wc(wr.wr_id, s, wr.op.wc_opcode(), 0, qpn, dest));
        }
        for wr_id in self.resp.drain() {
            (env.complete)(
                recv_cq,
                wc(wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0, qpn, dest),
            );
        }
    }

    /// Delivers a completion; a full CQ is a CQ overrun, which IBA makes fatal for the QP.
    fn complete(&mut self, env: &mut Env<'_>, cq: CqId, c: WorkCompletion) {
        if !(env.complete)(cq, c) && self.state != QpState::Error {
            self.enter_error(None, env);
        }
    }
}

fn wc(
    wr_id: u64,
    status: WcStatus,
    opcode: WcOpcode,
    byte_len: u32,
    qp_num: Qpn,
    src_qp: Qpn,
) -> WorkCompletion {
    WorkCompletion {
        wr_id,
        status,
        opcode,
        byte_len,
        imm_data: None,
        invalidated_rkey: None,
        qp_num,
        src_qp,
    }
}
