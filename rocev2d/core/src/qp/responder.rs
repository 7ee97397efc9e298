//! The responder half of an RC QP: receive queue, data placement, READ responses, atomics and
//! the ACK/NAK it returns.
//!
//! Source: IBA Vol. 1 §9.7.1 (PSN checks: expected, duplicate, out of sequence), §9.7.4
//! (responder duties: validate opcode sequence, length, R_Key and rights before touching
//! memory), §9.7.5.2 (ACK coalescing; NAK codes: PSN sequence error once per gap, RNR NAK when
//! no receive WQE is posted, remote access error, invalid request), §9.7.7 (duplicates: re-ACK
//! SEND/WRITE, re-execute READ, answer atomics from the saved result), §9.4.5 (atomics execute
//! exactly once).
//!
//! Responses leave in PSN order through one queue (`out`), so an ACK for a later request can
//! never overtake the READ responses of an earlier one, which the requester would read as an
//! implied NAK.
//!
//! A checked target is reused for the rest of its message while the MR table's generation is
//! unchanged, and checked again when a region was deregistered meanwhile, so deregistration
//! takes effect at the next packet.
//!
//! Deviations: none beyond those in the module docs of [`super`].

use super::framing::PathHead;
use super::requester::bth;
use super::{Env, RecvWr, Seg, Shared, gather, resolve_local, scatter, wc};
use crate::cq::{WcOpcode, WcStatus};
use crate::mr::{AccessError, AccessFlags, AtomicOp, MrId, PdId, Rkey};
use crate::time::Instant;
use crate::wire::FrameBuf;
use crate::wire::opcode::Position;
use crate::wire::{
    AethRepr, AtomicAckEthRepr, Credits, Msn, NakCode, Operation, Psn, RnrTimer, RoceRepr,
    Syndrome, Transport,
};
use alloc::collections::VecDeque;
use alloc::vec::Vec;

/// A remote range checked for this QP: where it is now, and under which MR generation.
#[derive(Debug, Clone, Copy)]
pub(super) struct Target {
    /// `None` for a zero-length operation, whose R_Key is not validated.
    pub(super) mr: Option<MrId>,
    /// Offset in `mr` of the next byte.
    pub(super) offset: u64,
    /// Virtual address of the next byte, and the key, to check again if needed.
    va: u64,
    rkey: Rkey,
    /// Bytes left.
    remaining: u64,
    generation: u64,
}

impl Target {
    /// Checks `[va, va + len)` under `rkey` for `need`; zero-length ranges are not checked
    /// (IBA §9.7.4.1: a zero-length RDMA's R_Key and VA are not validated).
    pub(super) fn check(
        pd: PdId,
        env: &Env<'_>,
        rkey: Rkey,
        va: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<Target, AccessError> {
        let (mr, offset) = if len == 0 {
            (None, 0)
        } else {
            let (mr, offset) = env.mrs.check_remote(pd, rkey, va, len, need)?;
            (Some(mr), offset)
        };
        Ok(Target {
            mr,
            offset,
            va,
            rkey,
            remaining: len,
            generation: env.mrs.generation(),
        })
    }

    /// Checks the rest of the range again if a region was deregistered since the last check.
    fn refresh(&mut self, pd: PdId, env: &Env<'_>, need: AccessFlags) -> Result<(), AccessError> {
        if self.mr.is_some() && self.generation != env.mrs.generation() {
            *self = Target::check(pd, env, self.rkey, self.va, self.remaining, need)?;
        }
        Ok(())
    }

    fn advance(&mut self, n: u64) {
        self.offset += n;
        self.va = self.va.wrapping_add(n);
        self.remaining -= n;
    }
}

/// The message being received, between its first and last packet.
#[derive(Debug, Default)]
enum InMsg {
    #[default]
    Idle,
    /// A SEND placed into a receive WQE whose SGEs were checked under generation `checked_gen`.
    Send {
        wr: RecvWr,
        segs: Vec<Seg>,
        cap: u64,
        off: u64,
        checked_gen: u64,
    },
    /// An RDMA WRITE of `total` bytes into `target`.
    Write { target: Target, total: u32 },
}

/// A response waiting to be sent.
#[derive(Debug, Clone, Copy)]
enum Out {
    /// ACK or NAK (the MSN is taken when it is sent).
    Ack { psn: Psn, syndrome: Syndrome },
    /// READ response packets `next ..= last` from `source`, answering the request at `start`;
    /// `replay` when that request was a duplicate (it holds no new responder resource).
    Read {
        start: Psn,
        next: Psn,
        first: bool,
        last: Psn,
        source: Target,
        replay: bool,
    },
    /// ATOMIC Acknowledge.
    AtomicAck { psn: Psn, orig: u64 },
}

/// Responder state (IBA §9.7).
#[derive(Debug, Default)]
pub(super) struct Responder {
    pub(super) rq: VecDeque<RecvWr>,
    /// Expected PSN.
    epsn: Psn,
    /// Messages completed.
    pub(super) msn: Msn,
    /// A sequence or RNR NAK for `epsn` is out: drop later packets silently until it arrives.
    nak_outstanding: bool,
    cur: InMsg,
    out: VecDeque<Out>,
    /// Results of recent atomics by PSN, for duplicates (IBA §9.4.5: never re-executed).
    replay: VecDeque<(Psn, u64)>,
    /// The NAK that put the QP into Error, still to be sent.
    fatal_nak: Option<(Psn, NakCode)>,
}

impl Responder {
    pub(super) fn reset(&mut self, psn: Psn) {
        self.epsn = psn;
    }
    pub(super) fn epsn(&self) -> Psn {
        self.epsn
    }
    pub(super) fn rq_len(&self) -> usize {
        self.rq.len()
    }
    pub(super) fn push(&mut self, wr: RecvWr) {
        self.rq.push_back(wr);
    }
    /// True when the next response is a READ response, which the pacer spaces.
    pub(super) fn read_pending(&self) -> bool {
        matches!(self.out.front(), Some(Out::Read { .. }))
    }
    pub(super) fn has_fatal_nak(&self) -> bool {
        self.fatal_nak.is_some()
    }
    /// Drops queued responses and returns the receive WQEs to flush, the one in progress first.
    pub(super) fn drain(&mut self) -> impl Iterator<Item = u64> + '_ {
        self.out.clear();
        let current = match core::mem::take(&mut self.cur) {
            InMsg::Send { wr, .. } => Some(wr.wr_id),
            _ => None,
        };
        current
            .into_iter()
            .chain(self.rq.drain(..).map(|w| w.wr_id))
    }
    /// READs being answered for new requests, the resources `max_dest_rd_atomic` bounds;
    /// answers to duplicates re-use the original's (IBA §9.7.7).
    fn pending_reads(&self) -> usize {
        self.out
            .iter()
            .filter(|o| matches!(o, Out::Read { replay: false, .. }))
            .count()
    }
    /// Queues the answer to a duplicate READ at `psn`. It takes the place of a queued answer to
    /// the same READ (the requester went back to `psn` and drops what it already has), or
    /// else goes before the queued responses to later requests: responses leave in PSN order
    /// and no READ is answered twice at once, however often the requester retries.
    fn requeue_read(&mut self, psn: Psn, job: Out) {
        let same = |o: &Out| {
            matches!(o, Out::Read { start, last, .. }
                if psn.distance(*start) >= 0 && last.distance(psn) >= 0)
        };
        if let Some(o) = self.out.iter_mut().find(|o| same(o)) {
            *o = job;
            return;
        }
        let later = |o: &Out| match o {
            Out::Read { start: p, .. }
            | Out::AtomicAck { psn: p, .. }
            | Out::Ack { psn: p, .. } => p.distance(psn) > 0,
        };
        let at = self.out.iter().position(later).unwrap_or(self.out.len());
        self.out.insert(at, job);
    }
    /// Queues an ACK, merging it into a queued ACK since ACKs are cumulative (IBA §9.7.5.2.1).
    fn ack(&mut self, psn: Psn) {
        if let Some(Out::Ack {
            psn: last,
            syndrome: Syndrome::Ack(_),
        }) = self.out.back_mut()
        {
            *last = psn;
        } else {
            self.out.push_back(Out::Ack {
                psn,
                syndrome: Syndrome::Ack(Credits::UNLIMITED),
            });
        }
    }
    /// Queues an RNR NAK for `psn` and drops what follows until the retry (IBA §9.7.5.2.8).
    fn rnr_nak(&mut self, psn: Psn, timer_code: u8) {
        let timer = RnrTimer::from_code(timer_code);
        self.out.push_back(Out::Ack {
            psn,
            syndrome: Syndrome::RnrNak(timer),
        });
        self.nak_outstanding = true;
    }
}

/// Rights the QP must grant remote peers for a request (IBA §10.2.4 QP access flags).
pub(super) fn needed_access(op: Operation) -> AccessFlags {
    if op.is_rdma_write() {
        AccessFlags::REMOTE_WRITE
    } else if op == Operation::RdmaReadRequest {
        AccessFlags::REMOTE_READ
    } else if op.is_atomic() {
        AccessFlags::REMOTE_ATOMIC
    } else {
        AccessFlags::empty()
    }
}

/// A fatal responder error: NAK the packet, then put the QP into Error (IBA §9.9.3 classes A
/// and C).
pub(super) fn fatal(qp: &mut Shared, env: &mut Env<'_>, psn: Psn, code: NakCode) {
    qp.resp.fatal_nak = Some((psn, code));
    qp.counters.naks_sent += 1;
    qp.error_cause
        .get_or_insert(super::ErrorCause::Responder(code));
    qp.enter_error(None, env);
}

/// The receive request the next incoming message consumes: from the QP's SRQ when it has one
/// ([`crate::srq`]), else from its own receive queue.
fn take_recv(qp: &mut Shared, env: &mut Env<'_>) -> Option<RecvWr> {
    match qp.cfg.srq {
        Some(id) => env.srqs.take(id),
        None => qp.resp.rq.pop_front(),
    }
}

/// Completes a receive WQE.
fn complete_recv(
    qp: &mut Shared,
    env: &mut Env<'_>,
    wr_id: u64,
    status: WcStatus,
    opcode: WcOpcode,
    len: u32,
    roce: &RoceRepr,
) {
    let mut c = wc(wr_id, status, opcode, len, qp.qpn, qp.dest_qpn);
    c.imm_data = roce.immdt.map(|i| i.imm);
    c.invalidated_rkey = roce.ieth.map(|i| i.r_key);
    let cq = qp.cfg.recv_cq;
    qp.complete(env, cq, c);
}

/// Our own receive buffer is bad (L_Key, bound or right): local protection error here, remote
/// operational error for the peer.
fn bad_recv_buffer(qp: &mut Shared, env: &mut Env<'_>, wr_id: u64, psn: Psn, roce: &RoceRepr) {
    complete_recv(
        qp,
        env,
        wr_id,
        WcStatus::LocProtErr,
        WcOpcode::Recv,
        0,
        roce,
    );
    fatal(qp, env, psn, NakCode::RemoteOperationalError);
}

/// Handles a request packet (IBA §9.7.4).
pub(super) fn on_request(
    qp: &mut Shared,
    env: &mut Env<'_>,
    roce: &RoceRepr,
    op: Operation,
    payload: &[u8],
) {
    let psn = roce.bth.psn;
    let d = psn.distance(qp.resp.epsn);
    if d > 0 {
        // A gap: NAK once, then drop until the expected PSN arrives (IBA §9.7.5.2.2).
        if qp.resp.nak_outstanding {
            qp.counters.out_of_sequence += 1;
        } else {
            let epsn = qp.resp.epsn;
            let syndrome = Syndrome::Nak(NakCode::PsnSequenceError);
            qp.resp.out.push_back(Out::Ack {
                psn: epsn,
                syndrome,
            });
            qp.resp.nak_outstanding = true;
            qp.counters.naks_sent += 1;
        }
        return;
    }
    if d < 0 {
        on_duplicate(qp, env, roce, op, psn);
        return;
    }
    qp.resp.nak_outstanding = false;
    let in_sequence = match qp.resp.cur {
        InMsg::Idle => op.position().starts_message(),
        InMsg::Send { .. } => op.is_send() && !op.position().starts_message(),
        InMsg::Write { .. } => op.is_rdma_write() && !op.position().starts_message(),
    };
    let mtu = qp.mtu as usize;
    let len_ok = match op.position() {
        Position::First | Position::Middle => payload.len() == mtu,
        Position::Last => !payload.is_empty() && payload.len() <= mtu,
        Position::Only => payload.len() <= mtu,
    };
    let transport_ok = roce.bth.opcode.transport() == Transport::Rc;
    if !transport_ok || !in_sequence || !len_ok || !qp.access.contains(needed_access(op)) {
        // Wrong transport, opcode sequence, length or a disabled operation: invalid request.
        if let InMsg::Send { wr, .. } = core::mem::take(&mut qp.resp.cur) {
            complete_recv(
                qp,
                env,
                wr.wr_id,
                WcStatus::RemInvReqErr,
                WcOpcode::Recv,
                0,
                roce,
            );
        }
        fatal(qp, env, psn, NakCode::InvalidRequest);
        return;
    }
    match op {
        Operation::RdmaReadRequest => on_read(qp, env, roce, psn),
        Operation::CompareSwap | Operation::FetchAdd => on_atomic(qp, env, roce, psn),
        _ if op.is_send() => on_send(qp, env, roce, op, psn, payload),
        _ => on_write(qp, env, roce, op, psn, payload),
    }
}

/// Advances the expected PSN past a SEND/WRITE packet and queues its ACK when asked for.
fn finish_packet(qp: &mut Shared, roce: &RoceRepr, psn: Psn, ends: bool) {
    qp.resp.epsn = psn.next();
    if roce.bth.ack_req || ends {
        qp.resp.ack(psn);
    }
}

fn on_send(
    qp: &mut Shared,
    env: &mut Env<'_>,
    roce: &RoceRepr,
    op: Operation,
    psn: Psn,
    payload: &[u8],
) {
    let generation = env.mrs.generation();
    if op.position().starts_message() {
        let Some(wr) = take_recv(qp, env) else {
            qp.resp.rnr_nak(psn, qp.min_rnr_timer);
            qp.counters.naks_sent += 1;
            return;
        };
        qp.resp.cur = InMsg::Send {
            wr,
            segs: Vec::new(),
            cap: 0,
            off: 0,
            checked_gen: u64::MAX,
        };
    }
    // The receive buffer is checked at the first packet and again after a deregistration.
    let InMsg::Send {
        wr,
        segs,
        cap,
        checked_gen,
        ..
    } = &mut qp.resp.cur
    else {
        return;
    };
    if *checked_gen != generation {
        match resolve_local(env.mrs, qp.cfg.pd, &wr.sg_list, AccessFlags::LOCAL_WRITE) {
            Ok(fresh) => {
                *cap = fresh.iter().map(|s| s.len as u64).sum();
                *segs = fresh;
                *checked_gen = generation;
            }
            Err(_) => {
                if let InMsg::Send { wr, .. } = core::mem::take(&mut qp.resp.cur) {
                    bad_recv_buffer(qp, env, wr.wr_id, psn, roce);
                }
                return;
            }
        }
    }
    let InMsg::Send { segs, cap, off, .. } = &mut qp.resp.cur else {
        return;
    };
    if *off + payload.len() as u64 > *cap {
        // The message does not fit the receive buffer: local length error here, invalid request
        // for the peer (as rdma_rxe answers).
        if let InMsg::Send { wr, .. } = core::mem::take(&mut qp.resp.cur) {
            complete_recv(
                qp,
                env,
                wr.wr_id,
                WcStatus::LocLenErr,
                WcOpcode::Recv,
                0,
                roce,
            );
        }
        fatal(qp, env, psn, NakCode::InvalidRequest);
        return;
    }
    scatter(env.mem, segs, *off, payload);
    *off += payload.len() as u64;
    let ends = op.position().ends_message();
    if ends {
        if let InMsg::Send { wr, off, .. } = core::mem::take(&mut qp.resp.cur) {
            complete_recv(
                qp,
                env,
                wr.wr_id,
                WcStatus::Success,
                WcOpcode::Recv,
                off as u32,
                roce,
            );
        }
        qp.resp.msn = qp.resp.msn.next();
    }
    finish_packet(qp, roce, psn, ends);
}

fn on_write(
    qp: &mut Shared,
    env: &mut Env<'_>,
    roce: &RoceRepr,
    op: Operation,
    psn: Psn,
    payload: &[u8],
) {
    let pd = qp.cfg.pd;
    if op.position().starts_message() {
        let Some(reth) = roce.reth else { return };
        let rkey = Rkey::new(reth.r_key);
        match Target::check(
            pd,
            env,
            rkey,
            reth.va,
            reth.dma_len as u64,
            AccessFlags::REMOTE_WRITE,
        ) {
            Ok(target) => {
                qp.resp.cur = InMsg::Write {
                    target,
                    total: reth.dma_len,
                }
            }
            Err(_) => return fatal(qp, env, psn, NakCode::RemoteAccessError),
        }
    }
    let InMsg::Write { target, .. } = &mut qp.resp.cur else {
        return;
    };
    if target.refresh(pd, env, AccessFlags::REMOTE_WRITE).is_err() {
        qp.resp.cur = InMsg::Idle;
        return fatal(qp, env, psn, NakCode::RemoteAccessError);
    }
    let ends = op.position().ends_message();
    let n = payload.len() as u64;
    if n > target.remaining || (ends && n != target.remaining) {
        // More or less data than the RETH announced.
        qp.resp.cur = InMsg::Idle;
        return fatal(qp, env, psn, NakCode::InvalidRequest);
    }
    let with_imm = matches!(
        op,
        Operation::RdmaWriteLastWithImmediate | Operation::RdmaWriteOnlyWithImmediate
    );
    // The immediate consumes a receive WQE: take it before placing data, so an RNR NAK leaves
    // memory and state as they were for the retry.
    let recv = if with_imm {
        match take_recv(qp, env) {
            Some(wr) => Some(wr),
            None => {
                qp.resp.rnr_nak(psn, qp.min_rnr_timer);
                qp.counters.naks_sent += 1;
                return;
            }
        }
    } else {
        None
    };
    let InMsg::Write { target, total } = &mut qp.resp.cur else {
        return;
    };
    if let Some(mr) = target.mr {
        env.mem.write(mr, target.offset, payload);
    }
    target.advance(n);
    let total = *total;
    if ends {
        qp.resp.cur = InMsg::Idle;
        if let Some(wr) = recv {
            complete_recv(
                qp,
                env,
                wr.wr_id,
                WcStatus::Success,
                WcOpcode::RecvRdmaWithImm,
                total,
                roce,
            );
        }
        qp.resp.msn = qp.resp.msn.next();
    }
    finish_packet(qp, roce, psn, ends);
}

/// The READ response job for a request (`replay`: a duplicate), or the access error that
/// refuses it.
fn read_job(
    qp: &Shared,
    env: &Env<'_>,
    roce: &RoceRepr,
    psn: Psn,
    replay: bool,
) -> Result<Out, AccessError> {
    let reth = roce.reth.ok_or(AccessError::UnknownKey)?;
    let rkey = Rkey::new(reth.r_key);
    let source = Target::check(
        qp.cfg.pd,
        env,
        rkey,
        reth.va,
        reth.dma_len as u64,
        AccessFlags::REMOTE_READ,
    )?;
    let n = reth.dma_len.div_ceil(qp.mtu).max(1);
    Ok(Out::Read {
        start: psn,
        next: psn,
        first: true,
        last: psn.add(n - 1),
        source,
        replay,
    })
}

fn on_read(qp: &mut Shared, env: &mut Env<'_>, roce: &RoceRepr, psn: Psn) {
    if qp.resp.pending_reads() >= qp.max_dest_rd_atomic as usize {
        // More READ/atomics outstanding than we advertised: invalid request.
        return fatal(qp, env, psn, NakCode::InvalidRequest);
    }
    match read_job(qp, env, roce, psn, false) {
        Ok(job) => {
            if let Out::Read { last, .. } = job {
                qp.resp.epsn = last.next();
            }
            qp.resp.out.push_back(job);
            qp.resp.msn = qp.resp.msn.next();
        }
        Err(_) => fatal(qp, env, psn, NakCode::RemoteAccessError),
    }
}

fn on_atomic(qp: &mut Shared, env: &mut Env<'_>, roce: &RoceRepr, psn: Psn) {
    let Some(a) = roce.atomic_eth else { return };
    if qp.max_dest_rd_atomic == 0 || qp.resp.pending_reads() >= qp.max_dest_rd_atomic as usize {
        return fatal(qp, env, psn, NakCode::InvalidRequest);
    }
    let (mr, offset) = match env
        .mrs
        .check_remote_atomic(qp.cfg.pd, Rkey::new(a.r_key), a.va)
    {
        Ok(found) => found,
        Err(AccessError::Misaligned) => return fatal(qp, env, psn, NakCode::InvalidRequest),
        Err(_) => return fatal(qp, env, psn, NakCode::RemoteAccessError),
    };
    let op = if roce.bth.opcode.operation() == Some(Operation::CompareSwap) {
        AtomicOp::CompareSwap {
            compare: a.compare,
            swap: a.swap_add,
        }
    } else {
        AtomicOp::FetchAdd { add: a.swap_add }
    };
    let orig = env.mem.atomic(mr, offset, op);
    if qp.resp.replay.len() >= (qp.max_dest_rd_atomic as usize).max(1) {
        qp.resp.replay.pop_front();
    }
    qp.resp.replay.push_back((psn, orig));
    qp.resp.out.push_back(Out::AtomicAck { psn, orig });
    qp.resp.epsn = psn.next();
    qp.resp.msn = qp.resp.msn.next();
}

/// A request older than expected: the requester resent it because our response was lost
/// (IBA §9.7.7).
fn on_duplicate(qp: &mut Shared, env: &mut Env<'_>, roce: &RoceRepr, op: Operation, psn: Psn) {
    qp.counters.duplicate_requests += 1;
    match op {
        Operation::RdmaReadRequest => {
            // Re-executed from memory for whatever range the retry asks for.
            if let Ok(job) = read_job(qp, env, roce, psn, true) {
                qp.resp.requeue_read(psn, job);
            }
        }
        Operation::CompareSwap | Operation::FetchAdd => {
            if let Some(&(_, orig)) = qp.resp.replay.iter().find(|(p, _)| *p == psn) {
                qp.resp.out.push_back(Out::AtomicAck { psn, orig });
            }
        }
        _ => {
            let last = qp.resp.epsn.sub(1);
            qp.resp.ack(last);
        }
    }
}

/// Builds the next queued response.
pub(super) fn transmit(
    qp: &mut Shared,
    env: &mut Env<'_>,
    head: &PathHead,
    buf: &mut dyn FrameBuf,
) -> Option<usize> {
    if qp.resp.read_pending() && !qp.pacer_ready(env.now) {
        // Responses leave in order, so everything waits behind a paced READ response.
        return None;
    }
    let pd = qp.cfg.pd;
    let ack = Syndrome::Ack(Credits::UNLIMITED);
    let aeth = |qp: &Shared, syndrome| {
        Some(AethRepr {
            syndrome,
            msn: qp.resp.msn,
        })
    };
    if let Some(Out::Read { next, source, .. }) = qp.resp.out.front_mut() {
        let psn = *next;
        if source.refresh(pd, env, AccessFlags::REMOTE_READ).is_err() {
            // The source was deregistered while we answered.
            qp.resp.out.pop_front();
            fatal(qp, env, psn, NakCode::RemoteAccessError);
            return transmit_fatal_nak(qp, head, buf);
        }
    }
    let (roce, plen, source) = match *qp.resp.out.front()? {
        Out::Ack { psn, syndrome } => {
            let bth = bth(qp, Operation::Acknowledge, psn, false, false);
            (
                RoceRepr {
                    aeth: aeth(qp, syndrome),
                    ..RoceRepr::new(bth)
                },
                0,
                None,
            )
        }
        Out::AtomicAck { psn, orig } => {
            let bth = bth(qp, Operation::AtomicAcknowledge, psn, false, false);
            let roce = RoceRepr {
                aeth: aeth(qp, ack),
                atomic_ack_eth: Some(AtomicAckEthRepr { orig_data: orig }),
                ..RoceRepr::new(bth)
            };
            (roce, 0, None)
        }
        Out::Read {
            next,
            first,
            last,
            source,
            ..
        } => {
            let is_last = next == last;
            let op = match (first, is_last) {
                (true, true) => Operation::RdmaReadResponseOnly,
                (true, false) => Operation::RdmaReadResponseFirst,
                (false, false) => Operation::RdmaReadResponseMiddle,
                (false, true) => Operation::RdmaReadResponseLast,
            };
            let plen = source.remaining.min(qp.mtu as u64) as usize;
            let mut roce = RoceRepr::new(bth(qp, op, next, false, false));
            if first || is_last {
                roce.aeth = aeth(qp, ack);
            }
            (roce, plen, Some(source))
        }
    };
    let roce = with_dasr_n(qp, env, roce);
    let mem: &dyn crate::mr::Memory = &*env.mem;
    let n = super::framing::emit(head, &roce, plen, buf, |dst| {
        if let Some(Target {
            mr: Some(mr),
            offset,
            ..
        }) = source
        {
            gather(
                mem,
                &[Seg {
                    mr,
                    offset,
                    len: plen as u32,
                }],
                0,
                dst,
            );
        }
    })?;
    match qp.resp.out.front_mut() {
        Some(Out::Read {
            next,
            first,
            last,
            source,
            ..
        }) if *next != *last => {
            *next = next.next();
            *first = false;
            source.advance(plen as u64);
        }
        _ => {
            qp.resp.out.pop_front();
        }
    }
    if source.is_some() {
        qp.on_paced_send(env.now, n);
    }
    Some(n)
}

/// True when [`transmit`] would produce a packet.
pub(super) fn has_sendable(qp: &Shared, now: Instant) -> bool {
    !qp.resp.out.is_empty() && (!qp.resp.read_pending() || qp.pacer_ready(now))
}

/// Adds DASR's N to a packet carrying an AETH when the peer reads it (seed 000 §III-A: "N is
/// piggybacked on every ACK").
fn with_dasr_n(qp: &Shared, env: &mut Env<'_>, mut roce: RoceRepr) -> RoceRepr {
    if roce.aeth.is_some()
        && qp.peer_ext.dasr_n
        && let Some(n) = env.rx_cc.dasr_n(env.now, qp.p_key, qp.peer_id())
    {
        roce.bth.tver = crate::wire::ext::TVER;
        roce.ext = Some(crate::wire::ExtRepr {
            dasr_n: Some(n),
            ..Default::default()
        });
    }
    roce
}

/// Sends the NAK that put the QP into Error, once.
pub(super) fn transmit_fatal_nak(
    qp: &mut Shared,
    head: &PathHead,
    buf: &mut dyn FrameBuf,
) -> Option<usize> {
    let (psn, code) = qp.resp.fatal_nak?;
    let roce = RoceRepr {
        aeth: Some(AethRepr {
            syndrome: Syndrome::Nak(code),
            msn: qp.resp.msn,
        }),
        ..RoceRepr::new(bth(qp, Operation::Acknowledge, psn, false, false))
    };
    let n = super::framing::emit(head, &roce, 0, buf, |_| {})?;
    qp.resp.fatal_nak = None;
    Some(n)
}
