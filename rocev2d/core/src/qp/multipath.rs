//! A queue pair in multipath mode: MP-RDMA (seed 001 §3) driven through the RC engine.
//!
//! The algorithms are in [`crate::mprdma`]; this file joins them to the QP. The sender reuses
//! the requester's send queue, PSN assignment, packet building and in-order completion
//! (`ack_through`); only the choice of *which* PSN goes *where* and *when* is MP-RDMA's. The
//! receiver reuses the responder's receive queue, key checks and placement, but accepts
//! packets out of order within its tracking bitmap and answers every data packet with its own
//! ACK. [`Mp`] holds the mode's state and the entry points the QP dispatches to; the sender is
//! below, the receiver in `multipath/receiver.rs`.
//!
//! ```text
//!  sender                                             receiver
//!  ACK(vp, sack, aack, E, R) ─► window (§3.2)         data(psn, vp, MSN, iPSN, S, R)
//!     sack < snd_ool && !R ─► cwnd −1, no clock (§3.3)   ─► bitmap: dup / beyond L / accept
//!     else clock ≤ 2 on vp; rest after ½ RTT (§3.4)      ─► S and earlier missing: NACK
//!  token ─► recovery? snd_retx : new : early retx        ─► place now, complete in order
//!  NACK(psn): psn = aack ─► loss recovery (Fig. 7),      ─► ACK(vp, psn, rcv_nxt, CE, R)
//!       again if sack left after psn's retransmission       overflow ─► NACK(rcv_nxt, sack)
//!             psn > aack ─► resend that synchronise PSN
//! ```
//!
//! Deviations (also in `docs/multipath.md`): READ and atomics are refused on a multipath QP
//! (`PostError::Unsupported`); a SEND packet whose receive WQE is not posted gets an RNR NAK of
//! its own (the paper does not treat RNR), and the sender pauses as in RC, then resends that
//! PSN; ACKs leave on the VP they acknowledge, so an ACK path fails together with its data path; no DCQCN runs on a multipath QP (the window is its
//! congestion control, §3.2), so the receiver sends no CNPs for it.

mod receiver;

use super::framing::PathHead;
use super::requester::{self, MpTag};
use super::timer::Fired;
use super::{Env, Inbound, QpState, Shared, Timer};
use crate::cq::{WcOpcode, WcStatus};
use crate::mprdma::bitmap::TrackingBitmap;
use crate::mprdma::path::{MAX_PER_ACK, PathSelector};
use crate::mprdma::recovery::Scoreboard;
use crate::mprdma::window::Window;
use crate::mprdma::{MpConfig, MpRxStats, VpCounters, sync};
use crate::time::{Duration, Instant};
use crate::wire::FrameBuf;
use crate::wire::ext::MultipathAck;
use crate::wire::frame::Ecn;
use crate::wire::{NakCode, Operation, Psn, RoceRepr, Syndrome};
use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec;
use alloc::vec::Vec;

/// An ACK or NACK to send (seed 001 §3.1: "the receiver immediately generates an ACK").
#[derive(Debug, Clone, Copy)]
struct AckOut {
    /// The PSN of the data packet answered (SACK).
    psn: Psn,
    vp: u16,
    ece: bool,
    retx: bool,
    kind: AckKind,
}

/// What an [`AckOut`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AckKind {
    /// The packet arrived.
    Ack,
    /// Sequence NAK of this PSN: `rcv_nxt` is missing (the answered packet overflowed the
    /// bitmap), or the answered synchronise packet came early (it names itself).
    Nak(Psn),
    /// RNR NAK: no receive WQE for this SEND yet.
    Rnr,
}

/// What a message's tail needs for its receive completion, kept until it completes in order.
#[derive(Debug, Clone, Copy)]
struct TailInfo {
    psn: Psn,
    opcode: WcOpcode,
    byte_len: u32,
    imm: Option<u32>,
    invalidated_rkey: Option<u32>,
}

/// MP-RDMA state of a QP.
#[derive(Debug)]
pub(super) struct Mp {
    cfg: MpConfig,
    win: Window,
    board: Scoreboard,
    paths: PathSelector,
    /// snd_ooh: the highest PSN selectively acknowledged (§3.3).
    snd_ooh: Option<Psn>,
    /// When the last packet ending a message left (the synchronise delay counts from it).
    last_msg_end: Instant,
    /// The last time the sender sent or heard anything (idle restart, §3.4).
    last_activity: Instant,
    bitmap: TrackingBitmap,
    /// The receive-WQE sequence number of the receive queue's front WQE.
    rq_msn: u32,
    tails: Vec<TailInfo>,
    acks: VecDeque<AckOut>,
    rx: MpRxStats,
    rx_vps: BTreeMap<u16, VpCounters>,
}

/// A multipath QP's state for stats and traces.
#[derive(Debug, Clone, PartialEq)]
pub struct MpSnapshot {
    /// cwnd, packets (seed 001 §3.2).
    pub cwnd: f64,
    /// snd_nxt − snd_una.
    pub in_flight: u32,
    /// Smoothed RTT.
    pub rtt: Duration,
    /// Data packets sent to random VPs rather than an ACK's: the initial window, burst-timer
    /// sends and probes (seed 001 §3.2, §3.4).
    pub random_vp_sends: u64,
    /// Per-VP sender counters (packets sent, ECN echoes, out-of-order prunes), by port.
    pub tx_vps: Vec<(u16, VpCounters)>,
    /// Per-VP receiver counters (packets, CE marks, arrivals more than Δ out of order).
    pub rx_vps: Vec<(u16, VpCounters)>,
    /// Receiver statistics (out-of-order histogram, drops, NACKs).
    pub rx: MpRxStats,
}

impl Mp {
    pub(super) fn new(cfg: MpConfig, qpn: u32, rq_psn: Psn, sq_psn: Psn) -> Mp {
        let seed = cfg.seed ^ (qpn as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        Mp {
            cfg,
            win: Window::new(cfg.iw),
            board: Scoreboard::new(sq_psn, cfg.initial_rtt),
            paths: PathSelector::new(seed, cfg.vp_base, cfg.vp_count, cfg.probe_p),
            snd_ooh: None,
            last_msg_end: Instant::ZERO,
            last_activity: Instant::ZERO,
            bitmap: TrackingBitmap::new(cfg.bitmap_len, rq_psn),
            rq_msn: 0,
            tails: Vec::new(),
            acks: VecDeque::new(),
            rx: MpRxStats {
                ood_hist: vec![0; cfg.bitmap_len as usize + 1],
                ..MpRxStats::default()
            },
            rx_vps: BTreeMap::new(),
        }
    }

    /// The receiver's expected PSN is `psn` (INIT→RTR).
    pub(super) fn reset_receiver(&mut self, psn: Psn) {
        self.bitmap = TrackingBitmap::new(self.cfg.bitmap_len, psn);
    }

    /// The sender's first PSN is `psn` (RTR→RTS).
    pub(super) fn reset_sender(&mut self, psn: Psn) {
        self.board = Scoreboard::new(psn, self.cfg.initial_rtt);
    }

    pub(super) fn snapshot(&self) -> MpSnapshot {
        MpSnapshot {
            cwnd: self.win.cwnd(),
            in_flight: self.board.in_flight(),
            rtt: self.board.rtt(),
            random_vp_sends: self.paths.random_sends(),
            tx_vps: self.paths.counters().map(|(p, c)| (p, *c)).collect(),
            rx_vps: self.rx_vps.iter().map(|(p, c)| (*p, *c)).collect(),
            rx: self.rx.clone(),
        }
    }

    /// Packets the window allows beyond those already clocked out (§3.2).
    fn room(&self) -> u32 {
        let awnd = self.win.awnd(self.board.in_flight()).floor();
        (awnd.max(0.0) as u32).saturating_sub(self.paths.queued())
    }
}

/// The entry points [`super::Qp`] dispatches to in multipath mode.
impl Mp {
    /// True when a packet may leave now: an ACK, or data the window and the ACK clock allow.
    pub(super) fn wants_to_send(&self, qp: &Shared, now: Instant) -> bool {
        qp.resp.has_fatal_nak()
            || (qp.can_respond() && !self.acks.is_empty())
            || (qp.can_request() && has_sendable(qp, self, now))
    }

    /// ACKs first (seed 001 §3.1: "immediately"), then data.
    pub(super) fn poll_transmit(
        &mut self,
        qp: &mut Shared,
        env: &mut Env<'_>,
        head: &PathHead,
        buf: &mut dyn FrameBuf,
    ) -> Option<usize> {
        let ack = if qp.can_respond() {
            receiver::transmit_ack(qp, self, head, buf)
        } else {
            None
        };
        match ack {
            Some(n) => Some(n),
            None if qp.can_request() => transmit_data(qp, self, env, head, buf),
            None => None,
        }
    }

    /// When a synchronise message held back by its delay may start (§3.4), if one is waiting.
    pub(super) fn poll_timeout(&self, qp: &Shared) -> Option<Instant> {
        sync_wait(qp, self, qp.last_now)
    }

    /// Runs the expired timers: the RNR wait, the retransmission timeout, burst control and
    /// early retransmission (§3.4).
    pub(super) fn handle_timeout(&mut self, qp: &mut Shared, env: &mut Env<'_>, fired: &Fired) {
        if fired[Timer::Rnr as usize] {
            qp.arm_retransmit(env.now);
            on_rnr_wait_over(self);
        }
        if fired[Timer::Retransmit as usize] {
            on_retransmit_timeout(qp, self, env);
        }
        if fired[Timer::MpBurst as usize] {
            on_burst_timeout(qp, self, env.now);
        }
        if fired[Timer::MpEarly as usize] {
            on_early_timeout(qp, self, env.now);
        }
    }

    /// A received packet: data to the receiver, ACKs and NACKs to the sender. ECN is echoed per
    /// ACK (§3.2); no notification point runs.
    pub(super) fn handle_packet(&mut self, qp: &mut Shared, env: &mut Env<'_>, pkt: &Inbound<'_>) {
        let ce = pkt.ecn == Ecn::Ce;
        qp.counters.ce_received += ce as u64;
        if pkt.op.is_request() {
            if qp.can_respond() {
                receiver::on_data(qp, self, env, pkt, ce);
            }
        } else if matches!(qp.state, QpState::Rts | QpState::Sqd) {
            on_ack(qp, self, env, pkt.roce);
        }
    }
}

// ---- sender -------------------------------------------------------------------------------

/// What the next data packet would be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Recovery: resend this PSN (Fig. 7).
    Recover(Psn),
    /// A new packet.
    New,
    /// Nothing new: resend this unacknowledged PSN early (FUSO, §3.4).
    Early(Psn),
}

/// The synchronise delay still to wait before the WQE at the cursor may start (§3.4).
fn sync_wait(qp: &Shared, mp: &Mp, now: Instant) -> Option<Instant> {
    let w = requester::unstarted_at_cursor(qp)?;
    if !w.wr.synchronise {
        return None;
    }
    let dt = sync::delay(
        mp.cfg.sync_alpha,
        mp.cfg.delta,
        mp.win.cwnd(),
        mp.board.rtt(),
    );
    let at = mp.last_msg_end + dt;
    (at > now).then_some(at)
}

/// The next packet's kind, without changing anything.
fn peek(qp: &Shared, mp: &Mp, now: Instant) -> Option<Next> {
    if let Some(p) = mp.board.peek_retransmission() {
        return Some(Next::Recover(p));
    }
    if requester::has_unsent(qp) {
        return (!requester::blocked(qp) && sync_wait(qp, mp, now).is_none()).then_some(Next::New);
    }
    mp.board.peek_early(now, early_after(mp)).map(Next::Early)
}

/// True when something is waiting to be sent: §3.4's test for "no new data available".
fn has_data(qp: &Shared, mp: &Mp, now: Instant) -> bool {
    mp.board.peek_retransmission().is_some()
        || requester::has_unsent(qp)
        || mp.board.peek_early(now, early_after(mp)).is_some()
}

/// How long a packet goes unacknowledged before early retransmission may resend it: §3.4
/// resends "unacknowledged packets", and a packet younger than this is taken to be in flight
/// still, not lost (the threshold is ours, `MpConfig::early_retx_rtts`).
fn early_after(mp: &Mp) -> Duration {
    mp.board
        .rtt()
        .saturating_mul(mp.cfg.early_retx_rtts.max(1) as u64)
}

/// With no new data and no recovery, arms the early-retransmission timer for the moment the
/// oldest unacknowledged packet becomes due, so a lost tail is resent without waiting for the
/// retransmission timeout even when no ACK comes back to clock it (§3.4).
fn arm_early(qp: &mut Shared, mp: &Mp) {
    let due = if requester::has_unsent(qp) || mp.board.peek_retransmission().is_some() {
        None
    } else {
        mp.board.early_due(early_after(mp))
    };
    match due {
        Some(at) => qp.timers.set(Timer::MpEarly, at),
        None => qp.timers.stop(Timer::MpEarly),
    }
}

/// With nothing in flight there is no ACK clock: the window goes out on random VPs (§3.2's
/// initial window), after restarting from IW if the sender idled for 3 RTTs (§3.4).
fn start_clock_if_idle(qp: &Shared, mp: &mut Mp, now: Instant) {
    let unsent = requester::has_unsent(qp);
    if mp.board.in_flight() > 0 || mp.paths.has_clock() || !unsent {
        return;
    }
    let idle = now.saturating_duration_since(mp.last_activity);
    if mp.last_activity > Instant::ZERO
        && idle
            >= mp
                .board
                .rtt()
                .saturating_mul(mp.cfg.idle_restart_rtts as u64)
    {
        mp.win.restart();
    }
    let room = mp.room();
    mp.paths.release_free(room);
    mp.last_activity = now;
}

/// True when [`transmit_data`] would send a packet now.
fn has_sendable(qp: &Shared, mp: &Mp, now: Instant) -> bool {
    let idle_start = mp.board.in_flight() == 0 && requester::has_unsent(qp);
    (mp.paths.has_clock() || idle_start)
        && mp.win.awnd(mp.board.in_flight()) >= 1.0
        && peek(qp, mp, now).is_some()
}

/// Sends the next data packet on the VP the ACK clock gives it.
fn transmit_data(
    qp: &mut Shared,
    mp: &mut Mp,
    env: &mut Env<'_>,
    head: &PathHead,
    buf: &mut dyn FrameBuf,
) -> Option<usize> {
    let now = env.now;
    start_clock_if_idle(qp, mp, now);
    if !mp.paths.has_clock() {
        return None;
    }
    if mp.win.awnd(mp.board.in_flight()) < 1.0 {
        // The window closed under the clocked-out packets (ECN or out-of-order ACKs since).
        mp.paths.clear();
        return None;
    }
    let next = peek(qp, mp, now)?;
    let (at, k, retx) = match next {
        Next::Recover(p) | Next::Early(p) => {
            let (at, k) = requester::position_of(qp, env, p)?;
            (at, k, true)
        }
        Next::New => {
            let (at, k) = requester::next_new(qp, env)?;
            (at, k, false)
        }
    };
    let vp = mp.paths.take()?;
    let vp_head = head.with_src_port(vp);
    let (n, psn_end) = requester::emit_packet(qp, env, &vp_head, at, k, Some(MpTag { retx }), buf)?;
    let ends = requester::ends_message(qp, at, k);
    if retx {
        qp.counters.retransmits += 1;
        if !qp.timers.is_set(Timer::Retransmit) {
            qp.arm_retransmit(now);
        }
    } else {
        requester::sent_new(qp, now, at, k, psn_end);
    }
    match next {
        Next::Recover(p) => mp.board.on_retransmit(p, now, false),
        Next::Early(p) => mp.board.on_retransmit(p, now, true),
        Next::New => {
            mp.board.on_send_new(now);
            if ends {
                mp.last_msg_end = now;
            }
        }
    }
    if retx {
        mp.win.on_retransmit_sent();
    }
    mp.paths.counters_mut(vp).packets += 1;
    mp.last_activity = now;
    arm_early(qp, mp);
    Some(n)
}

/// An ACK or NACK with the multipath block arrived (seed 001 §3.2–§3.4).
fn on_ack(qp: &mut Shared, mp: &mut Mp, env: &mut Env<'_>, roce: &RoceRepr) {
    let now = env.now;
    let Some(aeth) = roce.aeth else {
        qp.counters.unexpected_responses += 1;
        return;
    };
    let (nak, rnr) = match aeth.syndrome {
        Syndrome::Ack(_) => (None, None),
        Syndrome::Nak(NakCode::PsnSequenceError) => (Some(roce.bth.psn), None),
        Syndrome::RnrNak(timer) if roce.ext.is_some_and(|e| e.multipath.is_some()) => {
            (Some(roce.bth.psn), Some(timer))
        }
        Syndrome::Nak(_) | Syndrome::RnrNak(_) => {
            // The responder's fatal NAKs (access, invalid request, operational errors) are
            // RC's, and end the QP as in RC.
            return requester::on_response(qp, env, roce, Operation::Acknowledge, &[]);
        }
    };
    let Some(ext) = roce.ext else {
        qp.counters.unexpected_responses += 1;
        return;
    };
    let Some(MultipathAck {
        vp,
        sack_psn,
        aack_psn,
    }) = ext.multipath
    else {
        qp.counters.unexpected_responses += 1;
        return;
    };
    if aack_psn.distance(mp.board.nxt()) > 0 {
        // Acknowledges what was never sent. (An AACK below snd_una is normal: ACKs of
        // different paths overtake each other.)
        qp.counters.unexpected_responses += 1;
        return;
    }
    mp.last_activity = now;
    let c = mp.paths.counters_mut(vp);
    c.ecn_marks += ext.ece as u64;
    if nak.is_none() {
        mp.board.on_sack(sack_psn, now);
        // seed 001 §3.2: cwnd ± per ACK, inflate + 1.
        mp.win.on_ack(ext.ece);
    } else {
        // The packet the NACK answers left the network without an ACK (dropped beyond the
        // bitmap, or refused): it frees its place.
        mp.win.on_ack_of_nothing();
    }
    let advanced = mp.board.on_aack(aack_psn);
    mp.win.on_una_advanced(advanced);
    // seed 001 §3.3: snd_ooh is the highest SACKed PSN; an ACK below snd_ool = snd_ooh − Δ
    // (and not for a retransmission) comes from a slow path: cwnd − 1 and no clock.
    let mut pruned = false;
    if nak.is_none() {
        let ooh = match mp.snd_ooh {
            Some(h) if h.distance(sack_psn) >= 0 => h,
            _ => sack_psn,
        };
        mp.snd_ooh = Some(ooh);
        let ool = ooh.sub(mp.cfg.delta as u32);
        if !ext.retx && sack_psn.distance(ool) < 0 {
            pruned = true;
            mp.win.reduce(1.0);
            mp.paths.counters_mut(vp).ood += 1;
        }
    }
    match (nak, rnr) {
        (Some(p), None) if p == aack_psn => {
            // seed 001 §3.4, Fig. 7: recovery = snd_nxt, snd_retx = NACKed PSN — once per
            // loss: again only when the overflowing packet left after p's retransmission,
            // which therefore was lost too.
            if mp.board.is_new_loss(p, sack_psn) {
                let nxt = mp.board.nxt();
                mp.board.enter_recovery(p, nxt);
            }
        }
        // A synchronise packet that came too early (§3.4), or a SEND without its receive WQE
        // yet: send that PSN again (after the RNR wait).
        (Some(p), _) => mp.board.enter_recovery(p, p.next()),
        (None, _) => {}
    }
    if nak.is_some() {
        qp.counters.naks_received += 1;
    }
    if let Some(timer) = rnr {
        // IBA §9.7.5.2.8 as in RC: spend an RNR retry (7 = forever) and pause the sender.
        qp.counters.rnr_naks_received += 1;
        if qp.rnr_retry != 7 {
            if qp.req.rnr_left == 0 {
                qp.enter_error(Some((0, WcStatus::RnrRetryExcErr)), env);
                return;
            }
            qp.req.rnr_left -= 1;
        }
        qp.timers.stop(Timer::Retransmit);
        qp.timers.set(Timer::Rnr, now + timer.duration());
    }
    if advanced > 0 {
        let _ = requester::ack_through(qp, env, aack_psn.sub(1));
        if qp.state == QpState::Error {
            return;
        }
    }
    arm_early(qp, mp);
    let has_data = has_data(qp, mp, now);
    if mp.win.awnd(mp.board.in_flight()) < 1.0 {
        mp.paths.clear();
    }
    if pruned {
        return;
    }
    let room = mp.room();
    if room == 0 {
        return;
    }
    if !has_data {
        // seed 001 §3.4 "use it or lose it": an ACK that should clock out a packet finds
        // nothing to send.
        mp.win.reduce(1.0);
        return;
    }
    let rtt = mp.board.rtt();
    mp.paths.clock(now, rtt, vp, room);
    if room > MAX_PER_ACK {
        // seed 001 §3.4 burst control: the rest waits for later ACKs; only if none returns
        // for ½ RTT does the burst timer send it to random VPs.
        qp.timers.set(
            Timer::MpBurst,
            now + Duration::from_nanos(rtt.as_nanos() / 2),
        );
    } else {
        qp.timers.stop(Timer::MpBurst);
    }
}

/// An RNR wait ended: no ACK clock survived the pause, so the window goes to random VPs.
fn on_rnr_wait_over(mp: &mut Mp) {
    mp.paths.clear();
    let room = mp.room();
    mp.paths.release_free(room);
}

/// The burst timer fired: what the window still allows goes to random VPs (§3.4).
fn on_burst_timeout(qp: &Shared, mp: &mut Mp, now: Instant) {
    let has_data = has_data(qp, mp, now);
    let room = mp.room();
    if has_data && room > 0 {
        mp.paths.release_free(room);
    }
}

/// The early-retransmission timer fired: the packets now overdue go to random VPs as far as
/// the window allows (§3.4: "if there is no new data to transmit and awnd allows"), since no
/// ACK is coming back to clock them out.
fn on_early_timeout(qp: &Shared, mp: &mut Mp, now: Instant) {
    if requester::has_unsent(qp) {
        return;
    }
    let room = mp.room();
    let due = mp.board.early_due_count(now, early_after(mp), room);
    if due > 0 {
        mp.paths.release_free(due);
    }
}

/// The retransmission timer fired: resend everything unacknowledged, as the last resort of
/// §3.4, spending a retry as RC does.
fn on_retransmit_timeout(qp: &mut Shared, mp: &mut Mp, env: &mut Env<'_>) {
    if mp.board.in_flight() == 0 || !matches!(qp.state, QpState::Rts | QpState::Sqd) {
        return;
    }
    qp.counters.timeouts += 1;
    if qp.req.retry_left == 0 {
        qp.enter_error(Some((0, WcStatus::RetryExcErr)), env);
        return;
    }
    qp.req.retry_left -= 1;
    mp.board.on_timeout();
    mp.win.on_timeout(mp.board.in_flight());
    mp.paths.clear();
    let room = mp.room();
    mp.paths.release_free(room);
    qp.arm_retransmit(env.now);
    arm_early(qp, mp);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mprdma::VpCounters;
    use crate::mprdma::bitmap::Slot;
    use core::mem::size_of;

    /// Seed 001 §4 (Table 1; its rows did not survive in the seed's text, only the total):
    /// MP-RDMA adds 66 B per connection to RoCEv2's state, whatever the number of paths. Ours is
    /// what a multipath QP holds beyond an RC one (RC mode's own state is one flag; both share
    /// [`Shared`]): the boxed [`Mp`] and what it allocates. It is larger, and not all of it is
    /// constant (docs/multipath.md, "State per connection"): a software QP keeps `f64`
    /// windows, 64-bit times and PSNs, a seeded ChaCha8 generator for VP choice, one byte per
    /// bitmap slot (the paper's two bits), per-VP counters for stats, an OOD histogram, and a
    /// scoreboard entry per packet in flight. The bound is a regression guard on the inline
    /// part, not the paper's figure.
    #[test]
    fn multipath_state_beyond_rc_measured_against_the_papers_66_bytes() {
        let cfg = MpConfig::paper();
        let mp = Mp::new(cfg, 1, Psn::new(0), Psn::new(0));
        let inline = size_of::<Mp>();
        let bitmap = usize::from(cfg.bitmap_len) * size_of::<Slot>();
        let hist = mp.rx.ood_hist.capacity() * size_of::<u64>();
        std::eprintln!(
            "Mp inline {inline} B (Window {}, Scoreboard {}, PathSelector {}, TrackingBitmap {}, \
             MpConfig {}, MpRxStats {}); heap at creation: bitmap {bitmap} B (L = {}), OOD \
             histogram {hist} B; per VP used: {} B of counters on each side plus map nodes; RC's \
             own state {} B",
            size_of::<Window>(),
            size_of::<Scoreboard>(),
            size_of::<PathSelector>(),
            size_of::<TrackingBitmap>(),
            size_of::<MpConfig>(),
            size_of::<MpRxStats>(),
            cfg.bitmap_len,
            size_of::<VpCounters>(),
            size_of::<super::super::rc::Rc>(),
        );
        // The bitmap's slots are one byte each: 4x the paper's two bits.
        assert_eq!(size_of::<Slot>(), 1);
        assert_eq!(bitmap, 64);
        assert!(inline <= 1024, "Mp grew to {inline} B inline");
    }
}
