//! The receiver of a multipath QP: out-of-order placement within the tracking bitmap, in-order
//! completion, and one ACK (or NACK) per data packet on the VP it came from.
//!
//! Source: seed 001 §3.1 (placement by MSN and iPSN, "the receiver immediately generates an
//! ACK"), §3.3 (tracking bitmap of L slots, drop beyond it), §3.4 (synchronise packets,
//! overflow NACK), Fig. 6 (completion as `rcv_nxt` advances).
//!
//! Deviations: see [`super`] (RNR NAK per packet; READ and atomics refused).

use super::{AckKind, AckOut, Mp, TailInfo};
use crate::cq::{WcOpcode, WcStatus};
use crate::mprdma::bitmap::{Mark, Slot};
use crate::mprdma::sync;
use crate::mr::{AccessFlags, Rkey};
use crate::qp::framing::PathHead;
use crate::qp::requester;
use crate::qp::responder::{self, Target};
use crate::qp::{Env, Inbound, Shared, resolve_local, scatter, wc};
use crate::wire::FrameBuf;
use crate::wire::ext::MultipathAck;
use crate::wire::opcode::Position;
use crate::wire::{
    AethRepr, Credits, ExtRepr, NakCode, Operation, RnrTimer, RoceRepr, Syndrome, Transport,
};

/// Handles a data packet of a multipath QP (seed 001 §3.1, §3.3, §3.4). `vp` is its UDP source
/// port.
pub(super) fn on_data(
    qp: &mut Shared,
    mp: &mut Mp,
    env: &mut Env<'_>,
    pkt: &Inbound<'_>,
    ce: bool,
) {
    let Inbound {
        roce,
        op,
        payload,
        udp_src_port: vp,
        ..
    } = *pkt;
    let psn = roce.bth.psn;
    let placement = roce.ext.and_then(|e| e.placement);
    let (sync, retx) = roce.ext.map_or((false, false), |e| (e.synchronise, e.retx));
    let Some(pl) = placement.filter(|_| op.is_send() || op.is_rdma_write()) else {
        // READ and atomics do not run over multipath, and every data packet says where it goes.
        return responder::fatal(qp, env, psn, NakCode::InvalidRequest);
    };
    {
        let c = mp.rx_vps.entry(vp).or_default();
        c.packets += 1;
        c.ecn_marks += ce as u64;
        let d = psn.distance(mp.bitmap.head());
        if d >= 0 {
            let last = mp.rx.ood_hist.len() - 1;
            mp.rx.ood_hist[(d as usize).min(last)] += 1;
            if d > mp.cfg.delta as i32 {
                c.ood += 1;
            }
        }
    }
    let ack = AckOut {
        psn,
        vp,
        ece: ce,
        retx,
        kind: AckKind::Ack,
    };
    match mp.bitmap.check(psn) {
        Mark::Duplicate => {
            qp.counters.duplicate_requests += 1;
            mp.acks.push_back(ack);
            return;
        }
        Mark::Beyond => {
            // seed 001 §3.3: beyond rcv_nxt + L the packet is dropped; §3.4: "if a packet gets
            // lost, OOD will continuously increase until it is larger than the size of the
            // tracking bitmap. Then, a NACK will be generated" — for every packet that
            // overflows, naming the missing rcv_nxt and answering the dropped PSN, so that the
            // sender can tell a lost retransmission from a NACK it already acted on.
            mp.rx.bitmap_drops += 1;
            mp.rx.loss_nacks += 1;
            mp.acks.push_back(AckOut {
                kind: AckKind::Nak(mp.bitmap.head()),
                ..ack
            });
            qp.counters.naks_sent += 1;
            return;
        }
        Mark::Accepted => {}
    }
    let msg_first = psn.sub(pl.ipsn);
    if sync && !sync::may_apply(msg_first, mp.bitmap.head()) {
        // seed 001 §3.4: never update memory ahead of earlier messages; NACK so it is resent.
        mp.rx.sync_nacks += 1;
        mp.acks.push_back(AckOut {
            kind: AckKind::Nak(psn),
            ..ack
        });
        qp.counters.naks_sent += 1;
        return;
    }
    let slot = match place(qp, mp, env, roce, op, payload, pl) {
        Ok(slot) => slot,
        Err(Refused::NoWqe) => {
            // IBA §9.7.5.2.8's RNR NAK, per packet: the sender waits and resends it.
            mp.rx.rnr_drops += 1;
            mp.acks.push_back(AckOut {
                kind: AckKind::Rnr,
                ..ack
            });
            qp.counters.naks_sent += 1;
            return;
        }
        Err(Refused::Fatal) => return,
    };
    mp.bitmap.mark(psn, slot);
    mp.acks.push_back(ack);
    advance(qp, mp, env);
}

/// Why [`place`] refused a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    /// A protocol or access error: the QP is in Error, its fatal NAK queued.
    Fatal,
    /// The SEND's receive WQE is not posted yet.
    NoWqe,
}

/// Validates a packet and writes its payload where it belongs; the slot it fills.
fn place(
    qp: &mut Shared,
    mp: &mut Mp,
    env: &mut Env<'_>,
    roce: &RoceRepr,
    op: Operation,
    payload: &[u8],
    pl: crate::wire::ext::Placement,
) -> Result<Slot, Refused> {
    let psn = roce.bth.psn;
    let mtu = qp.mtu as u64;
    let pos = op.position();
    let len_ok = match pos {
        Position::First | Position::Middle => payload.len() as u64 == mtu,
        Position::Last => !payload.is_empty() && payload.len() as u64 <= mtu,
        Position::Only => payload.len() as u64 <= mtu,
    };
    let first_ok = pos.starts_message() == (pl.ipsn == 0);
    if roce.bth.opcode.transport() != Transport::Rc
        || !len_ok
        || !first_ok
        || !qp.access.contains(responder::needed_access(op))
    {
        responder::fatal(qp, env, psn, NakCode::InvalidRequest);
        return Err(Refused::Fatal);
    }
    let off = pl.ipsn as u64 * mtu;
    let n = payload.len() as u64;
    let ends = pos.ends_message();
    let imm = roce.immdt.map(|i| i.imm);
    let needs_wqe = op.is_send()
        || matches!(
            op,
            Operation::RdmaWriteLastWithImmediate | Operation::RdmaWriteOnlyWithImmediate
        );
    let rq_index = pl.msn.wrapping_sub(mp.rq_msn) & 0xff_ffff;
    if needs_wqe && qp.resp.rq.get(rq_index as usize).is_none() {
        return Err(Refused::NoWqe);
    }
    let tail = if op.is_rdma_write() {
        let reth = if pos.starts_message() {
            roce.reth
        } else {
            pl.reth
        };
        let Some(reth) = reth else {
            responder::fatal(qp, env, psn, NakCode::InvalidRequest);
            return Err(Refused::Fatal);
        };
        let total = reth.dma_len as u64;
        if off + n > total || (ends && off + n != total) {
            responder::fatal(qp, env, psn, NakCode::InvalidRequest);
            return Err(Refused::Fatal);
        }
        let target = Target::check(
            qp.cfg.pd,
            env,
            Rkey::new(reth.r_key),
            reth.va.wrapping_add(off),
            n,
            AccessFlags::REMOTE_WRITE,
        );
        match target {
            Ok(Target {
                mr: Some(mr),
                offset,
                ..
            }) => env.mem.write(mr, offset, payload),
            Ok(_) => {}
            Err(_) => {
                responder::fatal(qp, env, psn, NakCode::RemoteAccessError);
                return Err(Refused::Fatal);
            }
        }
        (ends && needs_wqe).then_some(TailInfo {
            psn,
            opcode: WcOpcode::RecvRdmaWithImm,
            byte_len: reth.dma_len,
            imm,
            invalidated_rkey: None,
        })
    } else {
        let wr = qp.resp.rq.get(rq_index as usize).ok_or(Refused::NoWqe)?;
        let Ok(segs) = resolve_local(env.mrs, qp.cfg.pd, &wr.sg_list, AccessFlags::LOCAL_WRITE)
        else {
            responder::fatal(qp, env, psn, NakCode::RemoteOperationalError);
            return Err(Refused::Fatal);
        };
        let cap: u64 = segs.iter().map(|s| s.len as u64).sum();
        if off + n > cap {
            responder::fatal(qp, env, psn, NakCode::InvalidRequest);
            return Err(Refused::Fatal);
        }
        scatter(env.mem, &segs, off, payload);
        ends.then_some(TailInfo {
            psn,
            opcode: WcOpcode::Recv,
            byte_len: (off + n) as u32,
            imm,
            invalidated_rkey: roce.ieth.map(|i| i.r_key),
        })
    };
    Ok(match (ends, tail) {
        (false, _) => Slot::Received,
        (true, Some(t)) => {
            mp.tails.push(t);
            Slot::TailWithCompletion
        }
        (true, None) => Slot::Tail,
    })
}

/// Moves `rcv_nxt` over the received head slots and completes messages in order (Fig. 6).
fn advance(qp: &mut Shared, mp: &mut Mp, env: &mut Env<'_>) {
    loop {
        let at = mp.bitmap.head();
        let Some(slot) = mp.bitmap.pop() else {
            return;
        };
        match slot {
            Slot::Empty | Slot::Received => continue,
            Slot::Tail => {
                qp.resp.msn = qp.resp.msn.next();
            }
            Slot::TailWithCompletion => {
                let Some(i) = mp.tails.iter().position(|t| t.psn == at) else {
                    continue;
                };
                let t = mp.tails.swap_remove(i);
                mp.rq_msn = mp.rq_msn.wrapping_add(1) & 0xff_ffff;
                qp.resp.msn = qp.resp.msn.next();
                let Some(wr) = qp.resp.rq.pop_front() else {
                    continue;
                };
                let mut c = wc(
                    wr.wr_id,
                    WcStatus::Success,
                    t.opcode,
                    t.byte_len,
                    qp.qpn,
                    qp.dest_qpn,
                );
                c.imm_data = t.imm;
                c.invalidated_rkey = t.invalidated_rkey;
                let cq = qp.cfg.recv_cq;
                qp.complete(env, cq, c);
            }
        }
    }
}

/// Sends the next ACK or NACK: AETH as in RC (BTH PSN = `rcv_nxt − 1` for an ACK, the NACKed
/// PSN for a NACK) and REXT's multipath block (SACK = the PSN of the packet answered, for a NACK
/// too), on the VP of the packet it answers.
pub(super) fn transmit_ack(
    qp: &Shared,
    mp: &mut Mp,
    head: &PathHead,
    buf: &mut dyn FrameBuf,
) -> Option<usize> {
    let a = *mp.acks.front()?;
    let aack = mp.bitmap.head();
    let (syndrome, bth_psn) = match a.kind {
        AckKind::Ack => (Syndrome::Ack(Credits::UNLIMITED), aack.sub(1)),
        AckKind::Nak(missing) => (Syndrome::Nak(NakCode::PsnSequenceError), missing),
        AckKind::Rnr => (
            Syndrome::RnrNak(RnrTimer::from_code(qp.min_rnr_timer)),
            a.psn,
        ),
    };
    let mut roce = RoceRepr {
        aeth: Some(AethRepr {
            syndrome,
            msn: qp.resp.msn,
        }),
        ..RoceRepr::new(requester::bth(
            qp,
            Operation::Acknowledge,
            bth_psn,
            false,
            false,
        ))
    };
    roce.bth.tver = crate::wire::ext::TVER;
    roce.ext = Some(ExtRepr {
        multipath: Some(MultipathAck {
            vp: a.vp,
            sack_psn: a.psn,
            aack_psn: aack,
        }),
        ece: a.ece,
        retx: a.retx,
        ..ExtRepr::default()
    });
    let n = crate::qp::framing::emit(&head.with_src_port(a.vp), &roce, 0, buf, |_| {})?;
    mp.acks.pop_front();
    Some(n)
}
