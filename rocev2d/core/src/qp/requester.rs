//! The requester half of an RC QP: send queue, segmentation, ACK/NAK handling, retransmission.
//!
//! Source: IBA Vol. 1 §9.5 (requester: packet sequencing, segmentation into First/Middle/Last/
//! Only at the path MTU, AckReq), §9.7.5.1 (requester's handling of ACK, NAK, RNR NAK and
//! implied NAKs), §9.7.6 (retransmission: local ACK timeout 4.096 µs · 2^timeout, retry
//! counters, go-back-N from the NAKed PSN), §9.4.4–§9.4.5 (READ and atomic semantics, including
//! the limit of outstanding READ/atomics and fences).
//!
//! PSNs are assigned when a work request starts: a SEND or WRITE uses one PSN per packet, a READ
//! one per expected response packet, an atomic one. `cursor` walks the send queue; going back
//! to a PSN just moves the cursor, and a READ resent from the middle asks for the remainder
//! only (IBA permits a requester to restart a READ at any response PSN).
//!
//! Under a congestion controller that reads RTTs, each first transmission of a packet that asks for an ACK is
//! stamped with the time it left, and the positive ACK that covers it gives the controller one
//! RTT sample ([`crate::cc::AckInfo::rtt`], TIMELY's completion-event RTT). A go-back-N drops
//! the stamps, since an ACK after a resend cannot tell which copy it answers (Karn's rule).
//!
//! Deviations: none beyond those in the module docs of [`super`].

use super::framing::PathHead;
use super::{Env, PostError, QpState, Seg, SendOp, SendWr, Shared, Timer, gather, scatter, wc};
use crate::cq::WcStatus;
use crate::mr::AccessFlags;
use crate::time::{Duration, Instant};
use crate::wire::FrameBuf;
use crate::wire::{
    AtomicEthRepr, BthRepr, IethRepr, ImmDtRepr, NakCode, Opcode, Operation, Psn, RethRepr,
    RoceRepr, Syndrome,
};
use alloc::collections::VecDeque;
use alloc::vec::Vec;

/// A send work request in the send queue, with its transmission state.
#[derive(Debug)]
pub(super) struct SendWqe {
    pub wr: SendWr,
    /// Message length in bytes.
    len: u32,
    /// PSNs the request consumes (≥ 1).
    npkts: u32,
    /// First PSN, once started.
    first_psn: Psn,
    /// Where the latest READ request for this WQE started (READ only).
    read_req_psn: Psn,
    /// Receive-WQE sequence number of the message (seed 001 §3.1's MSN): how many earlier
    /// messages consume a receive WQE at the peer. Carried by multipath packets only.
    pub(super) recv_msn: u32,
    /// The local SGEs, resolved when the request starts...
    segs: Vec<Seg>,
    /// ...under this [`crate::mr::MrTable::generation`].
    segs_gen: u64,
}

impl SendWqe {
    fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts - 1)
    }
    fn contains(&self, psn: Psn) -> bool {
        let d = psn.distance(self.first_psn);
        d >= 0 && (d as u32) < self.npkts
    }
}

/// Requester state (IBA §9.5).
#[derive(Debug, Default)]
pub(super) struct Requester {
    sq: VecDeque<SendWqe>,
    /// How many WQEs at the front have PSNs assigned.
    assigned: usize,
    /// The WQE being (re)transmitted, and its next packet.
    cursor: usize,
    cursor_pkt: u32,
    /// First PSN of the next WQE to start.
    next_psn: Psn,
    /// [`SendWqe::recv_msn`] of the next WQE to start.
    next_recv_msn: u32,
    /// Oldest PSN not yet acknowledged.
    snd_una: Psn,
    /// One past the highest PSN ever sent.
    snd_max: Psn,
    /// READ/atomic WQEs started and not complete (bounded by max_rd_atomic).
    rd_atomic_inflight: u32,
    /// Retries left after timeouts and sequence NAKs.
    pub retry_left: u8,
    /// Retries left after RNR NAKs (7 = infinite).
    pub rnr_left: u8,
    /// The PSN the last go-back-N restarted from, so that a burst of out-of-order responses
    /// costs one retry, not one per packet.
    goback_at: Option<Psn>,
    /// A retry was spent and nothing has progressed since: the NAKs the retry provokes do not
    /// spend more ([`retry_from`]).
    retrying: bool,
    /// AckReq packets sent once and not yet acknowledged, with when they left, oldest first
    /// (kept only under a controller that reads RTTs).
    rtt_stamps: VecDeque<(Psn, Instant)>,
}

impl Requester {
    pub(super) fn reset(&mut self, psn: Psn) {
        self.next_psn = psn;
        self.snd_una = psn;
        self.snd_max = psn;
        self.rtt_stamps.clear();
    }
    /// The RTT of the newest stamped packet a positive ACK of `psn` covers, dropping the
    /// stamps it covers.
    fn rtt_sample(&mut self, psn: Psn, now: Instant) -> Option<Duration> {
        let mut sent = None;
        while let Some(&(p, t)) = self.rtt_stamps.front() {
            if p.distance(psn) > 0 {
                break;
            }
            sent = Some(t);
            self.rtt_stamps.pop_front();
        }
        sent.map(|t| now - t)
    }
    pub(super) fn snd_una(&self) -> Psn {
        self.snd_una
    }
    pub(super) fn sq_len(&self) -> usize {
        self.sq.len()
    }
    /// True while sent PSNs await acknowledgement.
    pub(super) fn outstanding(&self) -> bool {
        self.snd_una != self.snd_max
    }

    /// Validates and queues a work request.
    pub(super) fn push(&mut self, wr: SendWr, max_inline: u32, mtu: u32) -> Result<(), PostError> {
        let len: u64 = match &wr.inline_data {
            Some(d) => {
                if wr.op.is_rd_atomic() || d.len() > max_inline as usize {
                    return Err(PostError::BadInline);
                }
                d.len() as u64
            }
            None => wr.sg_list.iter().map(|s| s.length as u64).sum(),
        };
        if len > 1 << 31 {
            return Err(PostError::MessageTooLong);
        }
        if wr.op.is_atomic() && (wr.sg_list.len() != 1 || len != 8) {
            return Err(PostError::BadAtomic);
        }
        let len = len as u32;
        let npkts = if wr.op.is_atomic() {
            1
        } else {
            len.div_ceil(mtu).max(1)
        };
        self.sq.push_back(SendWqe {
            wr,
            len,
            npkts,
            first_psn: Psn::new(0),
            read_req_psn: Psn::new(0),
            recv_msn: 0,
            segs: Vec::new(),
            segs_gen: 0,
        });
        Ok(())
    }

    /// Removes every WQE (for the flush on entering Error).
    pub(super) fn drain(&mut self) -> impl Iterator<Item = SendWr> + '_ {
        self.assigned = 0;
        self.cursor = 0;
        self.cursor_pkt = 0;
        self.rd_atomic_inflight = 0;
        self.snd_una = self.snd_max;
        self.sq.drain(..).map(|w| w.wr)
    }

    fn psn_at_cursor(&self) -> Psn {
        match self.sq.get(self.cursor) {
            Some(w) if self.cursor < self.assigned => w.first_psn.add(self.cursor_pkt),
            _ => self.next_psn,
        }
    }

    /// Index in the send queue of the started WQE that owns `psn`.
    pub(super) fn index_of(&self, psn: Psn) -> Option<usize> {
        self.sq
            .iter()
            .take(self.assigned)
            .position(|w| w.contains(psn))
    }

    /// Points the cursor at `psn` for go-back-N.
    fn go_back(&mut self, psn: Psn) {
        self.goback_at = Some(psn);
        self.rtt_stamps.clear();
        match self
            .sq
            .iter()
            .take(self.assigned)
            .position(|w| w.contains(psn))
        {
            Some(i) => {
                self.cursor = i;
                self.cursor_pkt = psn.distance(self.sq[i].first_psn) as u32;
            }
            None => {
                self.cursor = self.assigned;
                self.cursor_pkt = 0;
            }
        }
    }
}

/// True when the requester cannot start or continue right now, the pacer aside.
pub(super) fn blocked(qp: &Shared) -> bool {
    let r = &qp.req;
    let Some(w) = r.sq.get(r.cursor) else {
        return true;
    };
    let window = qp.cfg.max_inflight_psns as i32;
    if r.cursor == r.assigned {
        // Starting a new WQE (IBA §10.3.1: SQD starts none; §9.4.4: READ/atomic limit; fences).
        qp.state == QpState::Sqd
            || (w.wr.op.is_rd_atomic() && r.rd_atomic_inflight >= qp.max_rd_atomic.max(1) as u32)
            || (w.wr.fence && r.rd_atomic_inflight > 0)
            || r.next_psn.distance(r.snd_una) >= window
    } else {
        r.psn_at_cursor().distance(r.snd_una) >= window
    }
}

/// True when [`transmit`] would produce a packet.
pub(super) fn has_sendable(qp: &Shared, now: Instant) -> bool {
    !blocked(qp) && qp.pacer_ready(now)
}

pub(super) fn bth(qp: &Shared, op: Operation, psn: Psn, ack_req: bool, solicited: bool) -> BthRepr {
    BthRepr {
        solicited,
        ack_req,
        ..BthRepr::new(Opcode::rc(op), qp.p_key, qp.dest_qpn, psn)
    }
}

/// (Re)checks the local SGEs of the WQE at `at` unless they were checked under the current MR
/// generation. `false` when a bad L_Key, bound or right put the QP into Error: the WQE completes
/// with a local protection error (IBA §11.6.2 completion status table).
fn check_segs(qp: &mut Shared, env: &mut Env<'_>, at: usize) -> bool {
    let generation = env.mrs.generation();
    let Some(w) = qp.req.sq.get_mut(at) else {
        return false;
    };
    if w.wr.inline_data.is_some()
        || (w.segs_gen == generation && w.segs.len() == w.wr.sg_list.len())
    {
        return true;
    }
    // READ and atomic results are written into the SGEs, so they need LOCAL_WRITE.
    let need = if w.wr.op.is_rd_atomic() {
        AccessFlags::LOCAL_WRITE
    } else {
        AccessFlags::empty()
    };
    match super::resolve_local(env.mrs, qp.cfg.pd, &w.wr.sg_list, need) {
        Ok(segs) => {
            w.segs = segs;
            w.segs_gen = generation;
            true
        }
        Err(_) => {
            qp.enter_error(Some((at, WcStatus::LocProtErr)), env);
            false
        }
    }
}

/// Starts the WQE at the cursor: checks its local SGEs and assigns its PSNs. `false` when a
/// local protection error put the QP into Error.
fn start(qp: &mut Shared, env: &mut Env<'_>) -> bool {
    let at = qp.req.cursor;
    if !check_segs(qp, env, at) {
        return false;
    }
    let r = &mut qp.req;
    let w = &mut r.sq[at];
    w.first_psn = r.next_psn;
    w.read_req_psn = r.next_psn;
    w.recv_msn = r.next_recv_msn;
    if matches!(
        w.wr.op,
        SendOp::Send
            | SendOp::SendWithImm { .. }
            | SendOp::SendWithInv { .. }
            | SendOp::WriteWithImm { .. }
    ) {
        r.next_recv_msn = r.next_recv_msn.wrapping_add(1) & 0xff_ffff;
    }
    r.next_psn = r.next_psn.add(w.npkts);
    r.assigned += 1;
    if w.wr.op.is_rd_atomic() {
        r.rd_atomic_inflight += 1;
    }
    true
}

/// Builds the next request packet, if the send queue has one that may go now.
pub(super) fn transmit(
    qp: &mut Shared,
    env: &mut Env<'_>,
    head: &PathHead,
    buf: &mut dyn FrameBuf,
) -> Option<usize> {
    if !qp.pacer_ready(env.now) {
        return None;
    }
    let (at, k) = next_new(qp, env)?;
    let (n, psn_end) = emit_packet(qp, env, head, at, k, None, buf)?;
    sent_new(qp, env.now, at, k, psn_end);
    qp.on_paced_send(env.now, n);
    Some(n)
}

/// The send-queue position (WQE index, packet index) of the next new packet, starting its WQE
/// if needed; `None` when blocked or when starting failed (the QP is then in Error).
pub(super) fn next_new(qp: &mut Shared, env: &mut Env<'_>) -> Option<(usize, u32)> {
    if blocked(qp) {
        return None;
    }
    if qp.req.cursor == qp.req.assigned {
        if !start(qp, env) {
            return None;
        }
    } else if !check_segs(qp, env, qp.req.cursor) {
        return None;
    }
    Some((qp.req.cursor, qp.req.cursor_pkt))
}

/// The send-queue position of a PSN already sent, with its local SGEs checked (for a
/// multipath retransmission); `None` if no started WQE holds it.
pub(super) fn position_of(qp: &mut Shared, env: &mut Env<'_>, psn: Psn) -> Option<(usize, u32)> {
    let at = qp.req.index_of(psn)?;
    if !check_segs(qp, env, at) {
        return None;
    }
    Some((at, psn.distance(qp.req.sq[at].first_psn) as u32))
}

/// True when the send queue holds packets never sent (started or not).
pub(super) fn has_unsent(qp: &Shared) -> bool {
    // A multipath sender never moves the cursor back, so everything from it on is unsent.
    qp.req.cursor < qp.req.sq.len()
}

/// The WQE at the cursor, if it has not started yet.
pub(super) fn unstarted_at_cursor(qp: &Shared) -> Option<&SendWqe> {
    let r = &qp.req;
    (r.cursor == r.assigned)
        .then(|| r.sq.get(r.cursor))
        .flatten()
}

/// Accounts the packet `k` of WQE `at` (ending at `psn_end`) as sent: moves the cursor past
/// it and arms the retransmission timer.
pub(super) fn sent_new(qp: &mut Shared, now: Instant, at: usize, k: u32, psn_end: Psn) {
    let r = &mut qp.req;
    let w = &r.sq[at];
    let psn = w.first_psn.add(k);
    let is_single = w.wr.op.is_rd_atomic() || k + 1 == w.npkts;
    if psn.distance(r.snd_max) < 0 {
        qp.counters.retransmits += 1;
    } else if qp.cc.as_ref().is_some_and(|c| c.as_dyn().wants_rtt())
        && (is_single || (k + 1).is_multiple_of(qp.cfg.ack_req_every.max(1)))
    {
        r.rtt_stamps.push_back((psn, now));
    }
    if psn_end.distance(r.snd_max) > 0 {
        r.snd_max = psn_end;
    }
    if is_single {
        r.cursor += 1;
        r.cursor_pkt = 0;
    } else {
        r.cursor_pkt += 1;
    }
    if !qp.timers.is_set(Timer::Retransmit) {
        qp.arm_retransmit(now);
    }
}

/// True when packet `k` of WQE `at` is its message's last.
pub(super) fn ends_message(qp: &Shared, at: usize, k: u32) -> bool {
    qp.req.sq.get(at).is_some_and(|w| k + 1 >= w.npkts)
}

/// What a multipath packet adds to its request (seed 001 §3.1, §3.3).
#[derive(Debug, Clone, Copy)]
pub(super) struct MpTag {
    /// A retransmission (the ReTx bit).
    pub retx: bool,
}

/// Builds and emits packet `k` of WQE `at`; returns its length and the PSN after it. A
/// multipath packet (`mp`) also carries its placement, synchronise and ReTx fields in REXT.
pub(super) fn emit_packet(
    qp: &Shared,
    env: &mut Env<'_>,
    head: &PathHead,
    at: usize,
    k: u32,
    mp: Option<MpTag>,
    buf: &mut dyn FrameBuf,
) -> Option<(usize, Psn)> {
    let mtu = qp.mtu;
    let r = &qp.req;
    let w = &r.sq[at];
    let psn = w.first_psn.add(k);
    let ack_every = qp.cfg.ack_req_every.max(1);
    let (roce, offset, plen, psn_end) = match w.wr.op {
        SendOp::Read { remote_addr, rkey } => {
            // A READ request (re)started at response k asks only for the rest (IBA §9.4.4).
            let done = (k as u64 * mtu as u64).min(w.len as u64);
            let reth = RethRepr {
                va: remote_addr.wrapping_add(done),
                r_key: rkey.value(),
                dma_len: w.len - done as u32,
            };
            let roce = RoceRepr {
                reth: Some(reth),
                ..RoceRepr::new(bth(qp, Operation::RdmaReadRequest, psn, true, false))
            };
            (roce, 0, 0, w.first_psn.add(w.npkts))
        }
        SendOp::CompareSwap {
            remote_addr,
            rkey,
            compare,
            swap,
        } => {
            let a = AtomicEthRepr {
                va: remote_addr,
                r_key: rkey.value(),
                swap_add: swap,
                compare,
            };
            (
                RoceRepr {
                    atomic_eth: Some(a),
                    ..RoceRepr::new(bth(qp, Operation::CompareSwap, psn, true, false))
                },
                0,
                0,
                psn.next(),
            )
        }
        SendOp::FetchAdd {
            remote_addr,
            rkey,
            add,
        } => {
            let a = AtomicEthRepr {
                va: remote_addr,
                r_key: rkey.value(),
                swap_add: add,
                compare: 0,
            };
            (
                RoceRepr {
                    atomic_eth: Some(a),
                    ..RoceRepr::new(bth(qp, Operation::FetchAdd, psn, true, false))
                },
                0,
                0,
                psn.next(),
            )
        }
        op => {
            let offset = k as u64 * mtu as u64;
            let plen = (w.len as u64 - offset.min(w.len as u64)).min(mtu as u64) as usize;
            let n = w.npkts;
            let (first, last) = (k == 0, k + 1 == n);
            use Operation::*;
            let opcode = match (op, first, last) {
                (SendOp::Write { .. } | SendOp::WriteWithImm { .. }, true, false) => RdmaWriteFirst,
                (SendOp::Write { .. } | SendOp::WriteWithImm { .. }, false, false) => {
                    RdmaWriteMiddle
                }
                (SendOp::Write { .. }, false, true) => RdmaWriteLast,
                (SendOp::Write { .. }, true, true) => RdmaWriteOnly,
                (SendOp::WriteWithImm { .. }, false, true) => RdmaWriteLastWithImmediate,
                (SendOp::WriteWithImm { .. }, true, true) => RdmaWriteOnlyWithImmediate,
                (_, true, false) => SendFirst,
                (_, false, false) => SendMiddle,
                (SendOp::SendWithImm { .. }, false, true) => SendLastWithImmediate,
                (SendOp::SendWithImm { .. }, true, true) => SendOnlyWithImmediate,
                (SendOp::SendWithInv { .. }, false, true) => SendLastWithInvalidate,
                (SendOp::SendWithInv { .. }, true, true) => SendOnlyWithInvalidate,
                (_, false, true) => SendLast,
                (_, true, true) => SendOnly,
            };
            let ack_req = last || (k + 1).is_multiple_of(ack_every);
            let mut roce = RoceRepr::new(bth(qp, opcode, psn, ack_req, last && w.wr.solicited));
            // seed 000 §IV-A: a short message's packets leave with the deflection tokens.
            if let Some(t) = qp.cfg.iofd_tokens.filter(|t| w.len <= t.max_message_bytes) {
                roce.bth.deflection_tokens = t.tokens & 0x3f;
            }
            match op {
                SendOp::Write { remote_addr, rkey }
                | SendOp::WriteWithImm {
                    remote_addr, rkey, ..
                } if first => {
                    roce.reth = Some(RethRepr {
                        va: remote_addr,
                        r_key: rkey.value(),
                        dma_len: w.len,
                    });
                }
                _ => {}
            }
            match op {
                SendOp::SendWithImm { imm } | SendOp::WriteWithImm { imm, .. } if last => {
                    roce.immdt = Some(ImmDtRepr { imm })
                }
                SendOp::SendWithInv { rkey } if last => {
                    roce.ieth = Some(IethRepr {
                        r_key: rkey.value(),
                    })
                }
                _ => {}
            }
            // Dart's look-ahead rides on a message's first packet (seed 000 §III-D).
            if let Some(l) = w.wr.lookahead.filter(|_| first && qp.peer_ext.lookahead) {
                roce.bth.tver = crate::wire::ext::TVER;
                roce.ext = Some(crate::wire::ExtRepr {
                    lookahead: Some(l),
                    ..Default::default()
                });
            }
            if let Some(tag) = mp {
                // seed 001 §3.1: every packet says where it goes; a WRITE's later packets
                // repeat the RETH.
                let reth = match op {
                    SendOp::Write { remote_addr, rkey }
                    | SendOp::WriteWithImm {
                        remote_addr, rkey, ..
                    } if !first => Some(RethRepr {
                        va: remote_addr,
                        r_key: rkey.value(),
                        dma_len: w.len,
                    }),
                    _ => None,
                };
                roce.bth.tver = crate::wire::ext::TVER;
                let ext = roce.ext.get_or_insert_with(Default::default);
                ext.placement = Some(crate::wire::ext::Placement {
                    msn: w.recv_msn,
                    ipsn: k,
                    reth,
                });
                ext.synchronise = w.wr.synchronise;
                ext.retx = tag.retx;
            }
            (roce, offset, plen, psn.next())
        }
    };
    let mem: &dyn crate::mr::Memory = &*env.mem;
    let n = super::framing::emit(head, &roce, plen, buf, |dst| match &w.wr.inline_data {
        Some(d) => dst.copy_from_slice(&d[offset as usize..offset as usize + dst.len()]),
        None => gather(mem, &w.segs, offset, dst),
    })?;
    Some((n, psn_end))
}

/// Outcome of a cumulative acknowledgement.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Acked {
    /// Applied (possibly acknowledging nothing new).
    Ok,
    /// It covers a READ or atomic whose response has not arrived: the responses were lost
    /// (IBA §9.7.5.1.2, implied NAK).
    ImpliedNak,
    /// Older than what is already acknowledged, or for a PSN never sent.
    Ignored,
}

/// Completes the front WQE with `status`.
fn pop_front(qp: &mut Shared, env: &mut Env<'_>, status: WcStatus) {
    let r = &mut qp.req;
    let Some(w) = r.sq.pop_front() else { return };
    r.assigned = r.assigned.saturating_sub(1);
    if r.cursor > 0 {
        r.cursor -= 1;
    } else {
        r.cursor_pkt = 0;
    }
    if w.wr.op.is_rd_atomic() {
        r.rd_atomic_inflight = r.rd_atomic_inflight.saturating_sub(1);
    }
    if status != WcStatus::Success || w.wr.signaled {
        let c = wc(
            w.wr.wr_id,
            status,
            w.wr.op.wc_opcode(),
            w.len,
            qp.qpn,
            qp.dest_qpn,
        );
        let cq = qp.cfg.send_cq;
        qp.complete(env, cq, c);
    }
}

/// Forward progress resets the retry counters and restarts the timer (IBA §9.7.6.1.3).
fn progressed(qp: &mut Shared, now: Instant) {
    qp.req.retry_left = qp.retry_cnt;
    qp.req.rnr_left = qp.rnr_retry;
    qp.req.goback_at = None;
    qp.req.retrying = false;
    qp.arm_retransmit(now);
}

/// What sent the requester back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// The local ACK timeout expired.
    Timeout,
    /// A sequence NAK or an implied NAK.
    Nak,
}

/// Acknowledges every PSN up to and including `psn` (IBA §9.7.5.1: ACKs are cumulative).
pub(super) fn ack_through(qp: &mut Shared, env: &mut Env<'_>, psn: Psn) -> Acked {
    let r = &qp.req;
    if psn.distance(r.snd_una) < -1 || psn.distance(r.snd_max) >= 0 {
        return Acked::Ignored;
    }
    let mut advanced = false;
    let mut outcome = Acked::Ok;
    while qp.req.assigned > 0 && qp.state != QpState::Error {
        let w = &qp.req.sq[0];
        if w.wr.op.is_rd_atomic() {
            if psn.distance(w.first_psn) >= 0 {
                outcome = Acked::ImpliedNak;
            }
            break;
        }
        if w.last_psn().distance(psn) <= 0 {
            qp.req.snd_una = w.last_psn().next();
            pop_front(qp, env, WcStatus::Success);
            advanced = true;
        } else {
            if psn.distance(qp.req.snd_una) >= 0 {
                let r = &mut qp.req;
                r.snd_una = psn.next();
                // No need to resend what the peer already has.
                let acked = psn.next().distance(r.sq[0].first_psn) as u32;
                if r.cursor == 0 && r.cursor_pkt < acked {
                    r.cursor_pkt = acked;
                }
                advanced = true;
            }
            break;
        }
    }
    if advanced {
        progressed(qp, env.now);
    }
    outcome
}

/// A sequence error, implied NAK or timeout: spend a retry and go back to `psn`, or fail the
/// front WQE with `RETRY_EXC_ERR` when none are left (IBA §9.7.6.1.3).
///
/// Once a retry is spent and until something progresses, NAKs go back without spending: the
/// go-back-N resend of a deep pipeline draws a sequence NAK for each packet reordered at the
/// responder's new frontier, and an incomplete READ or atomic at the front turns every later
/// ACK into an implied NAK, so charging each one drained the whole budget while the first retry
/// was still being answered (the soak found it: `testing::soak`, seeds 4, 1588 and 1835 at MTU
/// 256 with 2–10% faults). Such a NAK neither spends nor restarts the timer, so a sequence that
/// makes no progress still ends, by timeouts, each of which spends; rdma_rxe does the same
/// (its completer's `started_retry`).
fn retry_from(qp: &mut Shared, env: &mut Env<'_>, psn: Psn, why: Retry) {
    if qp.req.goback_at == Some(psn) {
        return;
    }
    if why == Retry::Nak && qp.req.retrying {
        qp.req.go_back(psn);
        return;
    }
    if qp.req.retry_left == 0 {
        qp.enter_error(Some((0, WcStatus::RetryExcErr)), env);
        return;
    }
    qp.req.retry_left -= 1;
    qp.req.retrying = true;
    qp.req.go_back(psn);
    qp.arm_retransmit(env.now);
}

/// The retransmission timer fired: no ACK arrived within the local ACK timeout.
pub(super) fn on_retransmit_timeout(qp: &mut Shared, env: &mut Env<'_>) {
    if !qp.req.outstanding() || !matches!(qp.state, QpState::Rts | QpState::Sqd) {
        return;
    }
    qp.counters.timeouts += 1;
    qp.req.goback_at = None;
    let una = qp.req.snd_una;
    retry_from(qp, env, una, Retry::Timeout);
}

/// Handles a response packet: ACK/NAK, READ response or ATOMIC Acknowledge.
pub(super) fn on_response(
    qp: &mut Shared,
    env: &mut Env<'_>,
    roce: &RoceRepr,
    op: Operation,
    payload: &[u8],
) {
    let psn = roce.bth.psn;
    let syndrome = roce.aeth.map(|a| a.syndrome);
    // Every AETH may carry DASR's N for the controller (seed 000 §III-A); a positive ACK of a
    // stamped packet also gives it an RTT.
    if let (Some(c), Some(_)) = (&mut qp.cc, roce.aeth) {
        let n = roce.ext.and_then(|e| e.dasr_n);
        let mut ack = crate::cc::AckInfo::new(n);
        if let (Operation::Acknowledge, Some(Syndrome::Ack(_))) = (op, syndrome)
            && let Some(rtt) = qp.req.rtt_sample(psn, env.now)
        {
            ack = ack.with_rtt(rtt);
        }
        c.as_dyn_mut().on_ack(env.now, &ack);
        qp.sync_pacer(env.now);
    }
    match (op, syndrome) {
        (Operation::Acknowledge, Some(Syndrome::Ack(_))) => match ack_through(qp, env, psn) {
            Acked::Ok => {}
            Acked::ImpliedNak => {
                let una = qp.req.snd_una;
                retry_from(qp, env, una, Retry::Nak);
            }
            Acked::Ignored => qp.counters.unexpected_responses += 1,
        },
        (Operation::Acknowledge, Some(Syndrome::RnrNak(timer))) => {
            qp.counters.naks_received += 1;
            qp.counters.rnr_naks_received += 1;
            if ack_through(qp, env, psn.sub(1)) == Acked::Ignored || qp.state == QpState::Error {
                return;
            }
            // rnr_retry 7 means "retry forever" (IBA §9.7.5.2.8).
            if qp.rnr_retry != 7 {
                if qp.req.rnr_left == 0 {
                    qp.enter_error(Some((0, WcStatus::RnrRetryExcErr)), env);
                    return;
                }
                qp.req.rnr_left -= 1;
            }
            // Everything before the NAKed PSN is acknowledged, except what an incomplete READ or
            // atomic still misses; resume from the oldest gap.
            let una = qp.req.snd_una;
            qp.req.go_back(una);
            qp.timers.stop(Timer::Retransmit);
            qp.timers.set(Timer::Rnr, env.now + timer.duration());
        }
        (Operation::Acknowledge, Some(Syndrome::Nak(code))) => {
            qp.counters.naks_received += 1;
            if ack_through(qp, env, psn.sub(1)) == Acked::Ignored || qp.state == QpState::Error {
                return;
            }
            let status = match code {
                NakCode::PsnSequenceError => {
                    // Each sequence NAK is sent once per gap, so it always costs a retry. Resume
                    // from the NAKed PSN, or from an earlier READ/atomic whose responses are
                    // missing (the implied NAK ack_through just found).
                    qp.req.goback_at = None;
                    let una = qp.req.snd_una;
                    retry_from(qp, env, una, Retry::Nak);
                    return;
                }
                NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                NakCode::InvalidRdRequest => WcStatus::RemInvRdReqErr,
                NakCode::Reserved(_) => WcStatus::BadRespErr,
            };
            let failed = qp.req.index_of(psn);
            qp.enter_error(failed.map(|i| (i, status)), env);
        }
        (Operation::AtomicAcknowledge, Some(Syndrome::Ack(_))) => on_atomic_ack(qp, env, roce, psn),
        (op, _) if op.is_read_response() => on_read_response(qp, env, op, psn, payload),
        _ => qp.counters.unexpected_responses += 1,
    }
}

/// Finds the READ (`read`) or atomic WQE a response belongs to and acknowledges everything
/// before it; `true` when the response is the next one expected for the front WQE.
fn settle_before(qp: &mut Shared, env: &mut Env<'_>, psn: Psn, read: bool) -> bool {
    let r = &qp.req;
    let found = r.sq.iter().take(r.assigned).find(|w| {
        w.contains(psn)
            && w.wr.op.is_rd_atomic()
            && (matches!(w.wr.op, SendOp::Read { .. }) == read)
    });
    let Some(first) = found.map(|w| w.first_psn) else {
        qp.counters.unexpected_responses += 1;
        return false;
    };
    // Responses come in PSN order, so this one acknowledges every earlier request.
    if first.distance(qp.req.snd_una) > 0 {
        match ack_through(qp, env, first.sub(1)) {
            Acked::Ok => {}
            Acked::ImpliedNak => {
                let una = qp.req.snd_una;
                retry_from(qp, env, una, Retry::Nak);
                return false;
            }
            Acked::Ignored => {
                qp.counters.unexpected_responses += 1;
                return false;
            }
        }
    }
    if qp.state == QpState::Error || qp.req.sq.front().map(|w| w.first_psn) != Some(first) {
        return false;
    }
    let d = psn.distance(qp.req.snd_una);
    if d < 0 {
        qp.counters.unexpected_responses += 1;
        return false;
    }
    if d > 0 {
        // A response is missing: an implied NAK for it.
        let una = qp.req.snd_una;
        retry_from(qp, env, una, Retry::Nak);
        return false;
    }
    true
}

fn on_read_response(qp: &mut Shared, env: &mut Env<'_>, op: Operation, psn: Psn, payload: &[u8]) {
    if !settle_before(qp, env, psn, true) || !check_segs(qp, env, 0) {
        return;
    }
    let mtu = qp.mtu as u64;
    let w = &qp.req.sq[0];
    let idx = psn.distance(w.first_psn) as u64;
    let is_last = psn == w.last_psn();
    let want_len = (w.len as u64 - (idx * mtu).min(w.len as u64)).min(mtu) as usize;
    let pos_ok = if is_last {
        matches!(
            op,
            Operation::RdmaReadResponseLast | Operation::RdmaReadResponseOnly
        )
    } else {
        matches!(
            op,
            Operation::RdmaReadResponseFirst | Operation::RdmaReadResponseMiddle
        )
    };
    if !pos_ok || payload.len() != want_len {
        // IBA §9.7.5.1.3: a response of the wrong shape is a bad response.
        qp.enter_error(Some((0, WcStatus::BadRespErr)), env);
        return;
    }
    scatter(env.mem, &w.segs, idx * mtu, payload);
    qp.req.snd_una = psn.next();
    if is_last {
        pop_front(qp, env, WcStatus::Success);
    }
    progressed(qp, env.now);
}

fn on_atomic_ack(qp: &mut Shared, env: &mut Env<'_>, roce: &RoceRepr, psn: Psn) {
    if !settle_before(qp, env, psn, false) || !check_segs(qp, env, 0) {
        return;
    }
    let Some(orig) = roce.atomic_ack_eth.map(|a| a.orig_data) else {
        return;
    };
    // The original value lands in the local SGE as a native-endian u64, as libibverbs users
    // read it.
    scatter(env.mem, &qp.req.sq[0].segs, 0, &orig.to_ne_bytes());
    qp.req.snd_una = psn.next();
    pop_front(qp, env, WcStatus::Success);
    progressed(qp, env.now);
}
