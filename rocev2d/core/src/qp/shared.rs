//! What both transports of a QP share: its attributes, send and receive queues, timers,
//! counters, congestion control and pacer, and the few operations every part of the engine
//! needs on them (pacing, CNPs, the retransmission timer, completions and the Error flush).
//!
//! The RC transport ([`super::rc`]) and the multipath one ([`super::multipath`]) receive this
//! as an argument; multipath reuses RC's queues, PSNs, placement and completion (seed 001
//! §3.1), so the requester and responder state lives here rather than in one transport.
//!
//! Source: IBA Vol. 1 §10.3.1 (Error flushes every WQE), §11.4.2.1 (CQ overrun), §9.7.6
//! (retransmission timer); RoCEv2 Annex A17.9 (CNPs); seed 002 §II-B (notification point).
//!
//! Deviations: none beyond those in the module docs of [`super`].

use super::framing::PathHead;
use super::requester::Requester;
use super::responder::Responder;
use super::timer::{Timer, TimerTable};
use super::{CqId, Env, ExtCaps, Path, QpConfig, QpCounters, QpState};
use crate::cc::{AnyController, Pacer};
use crate::cq::{WcOpcode, WcStatus, WorkCompletion};
use crate::time::{Duration, Instant};
use crate::wire::FrameBuf;
use crate::wire::frame::Ecn;
use crate::wire::{Qpn, RoceRepr};
use core::net::IpAddr;

/// A QP's state outside its transport mode.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) qpn: Qpn,
    pub(super) cfg: QpConfig,
    pub(super) state: QpState,
    /// Why it entered ERROR, until it is reset.
    pub(super) error_cause: Option<super::ErrorCause>,
    pub(super) p_key: u16,
    pub(super) access: crate::mr::AccessFlags,
    pub(super) path: Option<Path>,
    pub(super) mtu: u32,
    pub(super) dest_qpn: Qpn,
    pub(super) max_dest_rd_atomic: u8,
    pub(super) min_rnr_timer: u8,
    pub(super) timeout: Option<Duration>,
    pub(super) retry_cnt: u8,
    pub(super) rnr_retry: u8,
    pub(super) max_rd_atomic: u8,
    pub(super) req: Requester,
    pub(super) resp: Responder,
    pub(super) timers: TimerTable,
    pub(super) counters: QpCounters,
    /// Extensions the peer announced at connection setup (docs/wire.md).
    pub(super) peer_ext: ExtCaps,
    pub(super) cc: Option<AnyController>,
    pub(super) pacer: Option<Pacer>,
    /// A CNP to send (with DCQCN+'s τ), ahead of everything else.
    pub(super) cnp_out: Option<Option<Duration>>,
    /// The latest time the endpoint drove this QP: a pacer deadline at or before it is no timer
    /// but a packet ready to go, and is not reported by `poll_timeout`.
    pub(super) last_now: Instant,
}

impl Shared {
    /// The state of a QP in Reset.
    pub(super) fn new(qpn: Qpn, cfg: QpConfig) -> Shared {
        Shared {
            qpn,
            cfg,
            state: QpState::Reset,
            error_cause: None,
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
            counters: QpCounters::default(),
            peer_ext: ExtCaps::default(),
            cc: cfg.cc.map(|c| c.build()),
            pacer: cfg
                .cc
                .map(|c| Pacer::new(c.line_rate(), cfg.pacer_burst_bytes)),
            cnp_out: None,
            last_now: Instant::ZERO,
        }
    }

    /// Accounts a paced packet of `bytes` that just left; the pacer spaces the next one at the
    /// controller's current rate.
    pub(super) fn on_paced_send(&mut self, now: Instant, bytes: usize) {
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
    pub(super) fn sync_pacer(&mut self, now: Instant) {
        if let (Some(p), Some(c)) = (&mut self.pacer, &self.cc) {
            p.set_rate_at(now, c.as_dyn().rate());
        }
    }

    /// Queues a CNP to the peer's QP (DCQCN NP, or DCQCN+'s list walk with its τ).
    pub(super) fn queue_cnp(&mut self, tau: Option<Duration>) {
        if self.can_respond() && self.path.is_some() {
            self.cnp_out = Some(tau);
        }
    }

    /// True when the pacer lets a data packet leave at `now` (always, without congestion
    /// control).
    pub(super) fn pacer_ready(&self, now: Instant) -> bool {
        self.pacer.is_none_or(|p| p.ready(now))
    }

    /// True when paced work is waiting for nothing but the pacer.
    pub(super) fn paced_work_waiting(&self) -> bool {
        (self.can_respond() && self.resp.read_pending())
            || (self.can_request() && !super::requester::blocked(self))
    }

    pub(super) fn can_respond(&self) -> bool {
        matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd)
    }

    pub(super) fn can_request(&self) -> bool {
        matches!(self.state, QpState::Rts | QpState::Sqd) && !self.timers.is_set(Timer::Rnr)
    }

    /// Sends a queued CNP (RoCEv2 Annex A17.9.1), with τ in REXT when the peer reads it.
    pub(super) fn transmit_cnp(
        &mut self,
        head: &PathHead,
        buf: &mut dyn FrameBuf,
    ) -> Option<usize> {
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
        let n = super::framing::emit(head, &roce, 0, buf, |_| {})?;
        self.cnp_out = None;
        self.counters.cnps_sent += 1;
        Some(n)
    }

    /// The peer's 16-bit id for DASR: the low 16 bits of its address (`cc::dasr`).
    pub(super) fn peer_id(&self) -> u16 {
        match self.path.map(|p| p.dst_ip) {
            Some(IpAddr::V4(a)) => u16::from_be_bytes([a.octets()[2], a.octets()[3]]),
            Some(IpAddr::V6(a)) => u16::from_be_bytes([a.octets()[14], a.octets()[15]]),
            None => 0,
        }
    }

    /// Feeds a data packet to the endpoint's receiver-side congestion control (notification
    /// point, DASR) and queues the CNP it asks for.
    pub(super) fn notify_data(
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
        let pos = op.position();
        // Only a request at the expected PSN opens or closes a message for DASR's count
        // (seed 000 §III-B counts messages): an out-of-sequence copy the responder discards
        // and its go-back-N resend would end one message twice.
        let counted = !op.is_read_response() && roce.bth.psn == self.resp.epsn();
        // The look-ahead rides on that same first packet (§III-D); a resent copy would
        // announce the group again.
        if let Some(l) = roce.ext.as_ref().and_then(|e| e.lookahead.as_ref())
            && counted
            && pos.starts_message()
        {
            env.rx_cc
                .on_lookahead(env.now, p_key, sender, l.group_size, l.members());
        }
        let arrival = crate::cc::DataArrival {
            p_key,
            sender,
            starts: pos.starts_message() && counted,
            ends: pos.ends_message() && counted,
            bytes: bytes as u64,
            ce,
        };
        if let crate::cc::Notify::Cnp(tau) = env.rx_cc.on_data(env.now, self.qpn, &arrival) {
            self.queue_cnp(tau);
        }
    }

    /// Why a post is refused in the current state: in ERROR, with the reason it went there.
    pub(super) fn refusal(&self) -> super::PostError {
        match (self.state, self.error_cause) {
            (QpState::Error, Some(c)) => super::PostError::InError(c),
            (s, _) => super::PostError::WrongState(s),
        }
    }

    /// (Re)arms the retransmission timer if anything is outstanding and a timeout is set.
    pub(super) fn arm_retransmit(&mut self, now: Instant) {
        match self.timeout {
            Some(t) if self.req.outstanding() => self.timers.set(Timer::Retransmit, now + t),
            _ => self.timers.stop(Timer::Retransmit),
        }
    }

    /// Enters Error: a queued fatal NAK still goes out; every outstanding work request
    /// completes, the one at send-queue index `failed.0` with status `failed.1`, all others with
    /// `WR_FLUSH_ERR` (IBA §10.3.1 and §11.4.2.1: flushed WQEs complete even when unsignaled).
    /// The cause ([`Shared::error_cause`]) is what the caller recorded first, else the failed
    /// request's status, else the application's own move.
    pub(super) fn enter_error(&mut self, failed: Option<(usize, WcStatus)>, env: &mut Env<'_>) {
        let cause = failed.map_or(super::ErrorCause::Modified, |(_, s)| {
            super::ErrorCause::Completion(s)
        });
        self.error_cause.get_or_insert(cause);
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
    pub(super) fn complete(&mut self, env: &mut Env<'_>, cq: CqId, c: WorkCompletion) {
        if !(env.complete)(cq, c) && self.state != QpState::Error {
            self.error_cause.get_or_insert(super::ErrorCause::CqOverrun);
            self.enter_error(None, env);
        }
    }
}

/// A completion of this QP with no immediate data or invalidated key.
pub(super) fn wc(
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
        ud: None,
    }
}
