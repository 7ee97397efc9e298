//! The responder half of an RC QP: receive queue, data placement, READ responses, atomics and
//! the ACK/NAK it returns.
//!
//! Source: IBA Vol. 1 §9.7.1 (PSN checks: expected, duplicate, out of sequence), §9.7.4
//! (responder duties: validate opcode sequence, length, R_Key and rights before touching
//! memory), §9.7.5.2 (ACK coalescing, NAK codes: PSN sequence error once per gap, RNR NAK when
//! no receive WQE is posted, remote access error, invalid request), §9.7.7 (duplicates: re-ACK
//! SEND/WRITE, re-execute READ, answer atomics from the saved result), §9.4.5 (atomics execute
//! exactly once).
//!
//! Responses leave in PSN order through one queue (`out`), so an ACK for a later request can
//! never overtake the READ responses of an earlier one, which the requester would read as an
//! implied NAK.
//!
//! Deviations: none beyond those in the module docs of [`super`].

use super::requester::bth;
use super::{Env, Path, Qp, RecvWr, Seg, gather, scatter, wc};
use crate::cq::{WcOpcode, WcStatus};
use crate::mr::{AccessError, AccessFlags, AtomicOp, MrId, Rkey};
use crate::wire::{
    AethRepr, AtomicAckEthRepr, Credits, Msn, NakCode, Operation, Psn, RnrTimer, RoceRepr,
    Syndrome, Transport,
};
use alloc::collections::VecDeque;
use alloc::vec::Vec;

/// The message being received, between its first and last packet.
#[derive(Debug, Default)]
enum InMsg {
    #[default]
    Idle,
    /// A SEND placed into a receive WQE.
    Send {
        wr: RecvWr,
        segs: Vec<Seg>,
        cap: u64,
        off: u64,
    },
    /// An RDMA WRITE; `mr` is `None` for a zero-length WRITE, which has no valid R_Key.
    Write {
        mr: Option<MrId>,
        offset: u64,
        remaining: u64,
        total: u32,
    },
}

/// A response waiting to be sent.
#[derive(Debug)]
enum Out {
    /// ACK or NAK (the MSN is taken when it is sent).
    Ack { psn: Psn, syndrome: Syndrome },
    /// READ response packets `next ..= last`; `start` is the request's PSN.
    Read {
        start: Psn,
        next: Psn,
        last: Psn,
        mr: Option<MrId>,
        offset: u64,
        len: u32,
    },
    /// ATOMIC Acknowledge.
    AtomicAck { psn: Psn, orig: u64 },
}

/// Responder state (IBA §9.7).
#[derive(Debug, Default)]
pub(super) struct Responder {
    rq: VecDeque<RecvWr>,
    /// Expected PSN.
    epsn: Psn,
    /// Messages completed.
    msn: Msn,
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
    pub(super) fn rq_len(&self) -> usize {
        self.rq.len()
    }
    pub(super) fn push(&mut self, wr: RecvWr) {
        self.rq.push_back(wr);
    }
    pub(super) fn has_output(&self) -> bool {
        !self.out.is_empty()
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
    fn pending_reads(&self) -> usize {
        self.out
            .iter()
            .filter(|o| matches!(o, Out::Read { .. }))
            .count()
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
}

/// Rights the QP must grant remote peers for a request (IBA §10.2.4 QP access flags).
fn needed_access(op: Operation) -> AccessFlags {
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

/// A class A/C error (IBA §9.9.3): NAK the packet, then put the QP into Error.
fn fatal(qp: &mut Qp, env: &mut Env<'_>, psn: Psn, code: NakCode) {
    qp.resp.fatal_nak = Some((psn, code));
    qp.counters.naks_sent += 1;
    qp.enter_error(None, env);
}

/// Completes the receive WQE of the current message.
fn complete_recv(
    qp: &mut Qp,
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

/// Takes the next receive WQE and resolves its SGEs, or answers RNR NAK when there is none.
fn take_recv_wqe(qp: &mut Qp, env: &mut Env<'_>, psn: Psn) -> Option<(RecvWr, Vec<Seg>, u64)> {
    let Some(wr) = qp.resp.rq.pop_front() else {
        // IBA §9.7.5.2.8: no receive WQE: RNR NAK with our timer; the PSN does not advance.
        let timer = RnrTimer::from_code(qp.min_rnr_timer);
        qp.resp.out.push_back(Out::Ack {
            psn,
            syndrome: Syndrome::RnrNak(timer),
        });
        qp.resp.nak_outstanding = true;
        qp.counters.naks_sent += 1;
        return None;
    };
    let mut segs = Vec::with_capacity(wr.sg_list.len());
    for s in &wr.sg_list {
        match env.mrs.check_local(
            qp.cfg.pd,
            s.lkey,
            s.addr,
            s.length as u64,
            AccessFlags::LOCAL_WRITE,
        ) {
            Ok((mr, offset)) => segs.push(Seg {
                mr,
                offset,
                len: s.length,
            }),
            Err(_) => {
                // Our own receive buffer is bad: local protection error here, remote
                // operational error for the peer.
                let cq = qp.cfg.recv_cq;
                let c = wc(
                    wr.wr_id,
                    WcStatus::LocProtErr,
                    WcOpcode::Recv,
                    0,
                    qp.qpn,
                    qp.dest_qpn,
                );
                qp.complete(env, cq, c);
                fatal(qp, env, psn, NakCode::RemoteOperationalError);
                return None;
            }
        }
    }
    let cap = segs.iter().map(|s| s.len as u64).sum();
    Some((wr, segs, cap))
}

/// Handles a request packet (IBA §9.7.4).
pub(super) fn on_request(
    qp: &mut Qp,
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
            qp.resp.out.push_back(Out::Ack {
                psn: epsn,
                syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
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
    use Operation::*;
    let in_sequence = match (&qp.resp.cur, op) {
        (InMsg::Idle, _) => op.position().starts_message(),
        (InMsg::Send { .. }, _) => op.is_send() && !op.position().starts_message(),
        (InMsg::Write { .. }, _) => op.is_rdma_write() && !op.position().starts_message(),
    };
    let mtu = qp.mtu as usize;
    let len_ok = match op.position() {
        crate::wire::opcode::Position::First | crate::wire::opcode::Position::Middle => {
            payload.len() == mtu
        }
        crate::wire::opcode::Position::Last => !payload.is_empty() && payload.len() <= mtu,
        crate::wire::opcode::Position::Only => payload.len() <= mtu,
    };
    if roce.bth.opcode.transport() != Transport::Rc
        || !in_sequence
        || !len_ok
        || !qp.access.contains(needed_access(op))
    {
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
    let ends = op.position().ends_message();
    match op {
        RdmaReadRequest => on_read(qp, env, roce, psn),
        CompareSwap | FetchAdd => on_atomic(qp, env, roce, psn),
        _ if op.is_send() => {
            if op.position().starts_message() {
                let Some((wr, segs, cap)) = take_recv_wqe(qp, env, psn) else {
                    return;
                };
                qp.resp.cur = InMsg::Send {
                    wr,
                    segs,
                    cap,
                    off: 0,
                };
            }
            let InMsg::Send { segs, cap, off, .. } = &mut qp.resp.cur else {
                return;
            };
            if *off + payload.len() as u64 > *cap {
                // The message does not fit the receive buffer (IBA §9.7.4.1.4? rxe
                // RESPST_ERR_LENGTH): local length error here, invalid request for the peer.
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
        _ => on_write(qp, env, roce, op, psn, payload, ends),
    }
}

/// Advances the expected PSN past a SEND/WRITE packet and queues its ACK when asked for.
fn finish_packet(qp: &mut Qp, roce: &RoceRepr, psn: Psn, ends: bool) {
    qp.resp.epsn = psn.next();
    if roce.bth.ack_req || ends {
        qp.resp.ack(psn);
    }
}

fn on_write(
    qp: &mut Qp,
    env: &mut Env<'_>,
    roce: &RoceRepr,
    op: Operation,
    psn: Psn,
    payload: &[u8],
    ends: bool,
) {
    if op.position().starts_message() {
        let Some(reth) = roce.reth else { return };
        // A zero-length WRITE's R_Key and address are not validated (IBA §9.7.4.1.3? C9-88).
        let mr = if reth.dma_len == 0 {
            None
        } else {
            match env.mrs.check_remote(
                qp.cfg.pd,
                Rkey::new(reth.r_key),
                reth.va,
                reth.dma_len as u64,
                AccessFlags::REMOTE_WRITE,
            ) {
                Ok((mr, offset)) => Some((mr, offset)),
                Err(_) => {
                    fatal(qp, env, psn, NakCode::RemoteAccessError);
                    return;
                }
            }
        };
        qp.resp.cur = InMsg::Write {
            mr: mr.map(|m| m.0),
            offset: mr.map_or(0, |m| m.1),
            remaining: reth.dma_len as u64,
            total: reth.dma_len,
        };
    }
    let InMsg::Write { remaining, .. } = &qp.resp.cur else {
        return;
    };
    let n = payload.len() as u64;
    if n > *remaining || (ends && n != *remaining) {
        // More or less data than the RETH announced.
        qp.resp.cur = InMsg::Idle;
        fatal(qp, env, psn, NakCode::InvalidRequest);
        return;
    }
    let with_imm = matches!(
        op,
        Operation::RdmaWriteLastWithImmediate | Operation::RdmaWriteOnlyWithImmediate
    );
    // The immediate consumes a receive WQE: take it before placing data, so an RNR NAK leaves
    // memory and state as they were for the retry.
    let recv = if with_imm {
        match qp.resp.rq.pop_front() {
            Some(wr) => Some(wr),
            None => {
                let timer = RnrTimer::from_code(qp.min_rnr_timer);
                qp.resp.out.push_back(Out::Ack {
                    psn,
                    syndrome: Syndrome::RnrNak(timer),
                });
                qp.resp.nak_outstanding = true;
                qp.counters.naks_sent += 1;
                return;
            }
        }
    } else {
        None
    };
    let InMsg::Write {
        mr,
        offset,
        remaining,
        total,
    } = &mut qp.resp.cur
    else {
        return;
    };
    if let Some(mr) = *mr {
        env.mem.write(mr, *offset, payload);
    }
    *offset += n;
    *remaining -= n;
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

/// Queues READ response packets for `[va, va + len)` starting at `psn`; `None` on an access
/// error.
fn read_job(qp: &Qp, env: &Env<'_>, roce: &RoceRepr, psn: Psn) -> Option<Out> {
    let reth = roce.reth?;
    let (mr, offset) = if reth.dma_len == 0 {
        (None, 0)
    } else {
        let (mr, offset) = env
            .mrs
            .check_remote(
                qp.cfg.pd,
                Rkey::new(reth.r_key),
                reth.va,
                reth.dma_len as u64,
                AccessFlags::REMOTE_READ,
            )
            .ok()?;
        (Some(mr), offset)
    };
    let n = reth.dma_len.div_ceil(qp.mtu).max(1);
    Some(Out::Read {
        start: psn,
        next: psn,
        last: psn.add(n - 1),
        mr,
        offset,
        len: reth.dma_len,
    })
}

fn on_read(qp: &mut Qp, env: &mut Env<'_>, roce: &RoceRepr, psn: Psn) {
    if qp.resp.pending_reads() >= qp.max_dest_rd_atomic as usize {
        // More READ/atomics than we advertised (IBA §9.7.4.1.5?): invalid request.
        fatal(qp, env, psn, NakCode::InvalidRequest);
        return;
    }
    let Some(job) = read_job(qp, env, roce, psn) else {
        fatal(qp, env, psn, NakCode::RemoteAccessError);
        return;
    };
    if let Out::Read { last, .. } = job {
        qp.resp.epsn = last.next();
    }
    qp.resp.out.push_back(job);
    qp.resp.msn = qp.resp.msn.next();
}

fn on_atomic(qp: &mut Qp, env: &mut Env<'_>, roce: &RoceRepr, psn: Psn) {
    let Some(a) = roce.atomic_eth else { return };
    if qp.max_dest_rd_atomic == 0 || qp.resp.pending_reads() >= qp.max_dest_rd_atomic as usize {
        fatal(qp, env, psn, NakCode::InvalidRequest);
        return;
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
    let keep = (qp.max_dest_rd_atomic as usize).max(1);
    if qp.resp.replay.len() >= keep {
        qp.resp.replay.pop_front();
    }
    qp.resp.replay.push_back((psn, orig));
    qp.resp.out.push_back(Out::AtomicAck { psn, orig });
    qp.resp.epsn = psn.next();
    qp.resp.msn = qp.resp.msn.next();
}

/// A request older than expected: the requester resent it because our response was lost
/// (IBA §9.7.7).
fn on_duplicate(qp: &mut Qp, env: &mut Env<'_>, roce: &RoceRepr, op: Operation, psn: Psn) {
    qp.counters.duplicate_requests += 1;
    match op {
        Operation::RdmaReadRequest => {
            // Re-executed from memory for whatever range the retry asks for.
            if let Some(job) = read_job(qp, env, roce, psn) {
                qp.resp.out.push_back(job);
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
    qp: &mut Qp,
    env: &mut Env<'_>,
    path: &Path,
    buf: &mut Vec<u8>,
) -> Option<usize> {
    let aeth = |qp: &Qp, syndrome| {
        Some(AethRepr {
            syndrome,
            msn: qp.resp.msn,
        })
    };
    let ack = Syndrome::Ack(Credits::UNLIMITED);
    match *qp.resp.out.front()? {
        Out::Ack { psn, syndrome } => {
            let roce = RoceRepr {
                aeth: aeth(qp, syndrome),
                ..RoceRepr::new(bth(qp, Operation::Acknowledge, psn, false, false))
            };
            let n = qp.emit(path, roce, 0, buf, |_| {})?;
            qp.resp.out.pop_front();
            Some(n)
        }
        Out::AtomicAck { psn, orig } => {
            let roce = RoceRepr {
                aeth: aeth(qp, ack),
                atomic_ack_eth: Some(AtomicAckEthRepr { orig_data: orig }),
                ..RoceRepr::new(bth(qp, Operation::AtomicAcknowledge, psn, false, false))
            };
            let n = qp.emit(path, roce, 0, buf, |_| {})?;
            qp.resp.out.pop_front();
            Some(n)
        }
        Out::Read {
            start,
            next,
            last,
            mr,
            offset,
            len,
        } => {
            let mtu = qp.mtu as u64;
            let idx = next.distance(start) as u64;
            let done = (idx * mtu).min(len as u64);
            let plen = (len as u64 - done).min(mtu) as usize;
            let (first, is_last) = (next == start, next == last);
            let op = match (first, is_last) {
                (true, true) => Operation::RdmaReadResponseOnly,
                (true, false) => Operation::RdmaReadResponseFirst,
                (false, false) => Operation::RdmaReadResponseMiddle,
                (false, true) => Operation::RdmaReadResponseLast,
            };
            let mut roce = RoceRepr::new(bth(qp, op, next, false, false));
            if first || is_last {
                roce.aeth = aeth(qp, ack);
            }
            let mem: &dyn crate::mr::Memory = &*env.mem;
            let n = qp.emit(path, roce, plen, buf, |dst| {
                if let Some(mr) = mr {
                    gather(mem, &[Seg { mr, offset, len }], done, dst);
                }
            })?;
            if is_last {
                qp.resp.out.pop_front();
            } else if let Some(Out::Read { next, .. }) = qp.resp.out.front_mut() {
                *next = next.next();
            }
            Some(n)
        }
    }
}

/// Sends the NAK that put the QP into Error, once.
pub(super) fn transmit_fatal_nak(qp: &mut Qp, path: &Path, buf: &mut Vec<u8>) -> Option<usize> {
    let (psn, code) = qp.resp.fatal_nak?;
    let roce = RoceRepr {
        aeth: Some(AethRepr {
            syndrome: Syndrome::Nak(code),
            msn: qp.resp.msn,
        }),
        ..RoceRepr::new(bth(qp, Operation::Acknowledge, psn, false, false))
    };
    let n = qp.emit(path, roce, 0, buf, |_| {})?;
    qp.resp.fatal_nak = None;
    Some(n)
}
