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
//! and rights.
//!
//! A received packet enters at `Qp::handle_packet`, which dispatches once on the QP's
//! transport (an enum chosen at INIT→RTR): RC goes to `responder::on_request` (requests) or
//! `requester::on_response` (ACKs, READ responses); multipath to `multipath::on_data` or
//! `multipath::on_ack`. Files by job: `requester` (send queue, segmentation, ACK/NAK handling,
//! retransmission), `responder` (receive queue, placement, READ responses, atomics, ACK/NAK
//! generation), `multipath` (MP-RDMA over both), `state` (states, attributes, [`ConnectAttr`]),
//! `wr` (work requests), `config`, `counters`, `sgl` (scatter/gather), `framing` (a transport
//! packet to a frame on the QP's path) and `timer`.
//!
//! Deviations (also in `docs/transport.md`):
//! * end-to-end credits are neither honoured nor advertised: every ACK carries the "invalid"
//!   credit code 31, as Linux rxe sends, and the requester ignores credits (IBA allows a
//!   responder to opt out of credit-based flow control this way);
//! * SEND with Invalidate reports the invalidated R_Key in the completion, but rocev2 has no
//!   memory windows or fast-registration MRs, so there is nothing to invalidate;
//! * the requester keeps at most [`QpConfig::max_inflight_psns`] PSNs outstanding (IBA only
//!   bounds it by 2^23), which bounds go-back-N work.

mod config;
mod counters;
mod framing;
mod multipath;
mod requester;
mod responder;
mod sgl;
pub mod state;
mod timer;
mod wr;

use crate::cc::{AnyController, CcSnapshot, CnpInfo, Pacer, ReceiverCc};
use crate::cq::{WcOpcode, WcStatus, WorkCompletion};
use crate::mr::{Memory, MrTable};
use crate::time::{Duration, Instant};
pub use crate::wire::ext::ExtCaps;
use crate::wire::frame::Ecn;
use crate::wire::{Psn, Qpn, RoceRepr};
use alloc::vec::Vec;
use core::net::IpAddr;
use requester::Requester;
use responder::Responder;
pub use state::{ConnectAttr, ModifyError, Mtu, Path, QpAttr, QpState};
use timer::{Timer, TimerTable};

pub use config::{CqId, IofdTokens, QpConfig};
pub use counters::QpCounters;
pub use multipath::MpSnapshot;
use sgl::{Seg, gather, resolve_local, scatter};
pub use wr::{PostError, RecvWr, SendOp, SendWr, Sge};

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
    /// RC or multipath, chosen once at INIT→RTR.
    transport: Transport,
}

/// How a QP moves its messages: the [`QpMode`] with the state only that mode has. Every entry
/// point of [`Qp`] dispatches on it once; the requester's send queue and the responder's
/// receive queue are shared by both modes (multipath reuses RC's queues, PSNs, placement and
/// completion, seed 001 §3.1).
#[derive(Debug)]
enum Transport {
    /// Single-path RC (`requester`, `responder`).
    Rc,
    /// MP-RDMA (`multipath`), from INIT→RTR on when both ends offered it.
    MultiPath(alloc::boxed::Box<multipath::Mp>),
}

impl Transport {
    fn mp(&self) -> Option<&multipath::Mp> {
        match self {
            Transport::Rc => None,
            Transport::MultiPath(mp) => Some(mp),
        }
    }
    fn mp_mut(&mut self) -> Option<&mut multipath::Mp> {
        match self {
            Transport::Rc => None,
            Transport::MultiPath(mp) => Some(mp),
        }
    }
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
            transport: Transport::Rc,
        }
    }

    /// The transport mode: [`QpMode::MultiPath`] once both ends offered it at INIT→RTR.
    pub fn mode(&self) -> QpMode {
        match self.transport {
            Transport::Rc => QpMode::Rc,
            Transport::MultiPath(_) => QpMode::MultiPath,
        }
    }

    /// MP-RDMA window, per-VP counters and receiver statistics, in multipath mode.
    pub fn mp_snapshot(&self) -> Option<MpSnapshot> {
        self.transport.mp().map(|m| m.snapshot())
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
            if let Transport::Rc = self.transport {
                let m = multipath::Mp::new(mp, self.qpn.value(), rq, sq);
                self.transport = Transport::MultiPath(alloc::boxed::Box::new(m));
            }
            if let Some(m) = self.transport.mp_mut() {
                if let Some(v) = attr.rq_psn {
                    m.reset_receiver(Psn::new(v));
                }
                if let Some(v) = attr.sq_psn {
                    m.reset_sender(Psn::new(v));
                }
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
        if self.mode() == QpMode::MultiPath && wr.op.is_rd_atomic() {
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
        match self.transport {
            Transport::Rc => {
                self.cnp_out.is_some()
                    || self.resp.has_fatal_nak()
                    || (self.can_respond() && responder::has_sendable(self, now))
                    || (self.can_request() && requester::has_sendable(self, now))
            }
            Transport::MultiPath(_) => {
                self.resp.has_fatal_nak()
                    || (self.can_respond() && multipath::has_ack(self))
                    || (self.can_request() && multipath::has_sendable(self, now))
            }
        }
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
        // A CNP and the fatal NAK go first in both modes.
        let n = match self
            .transmit_cnp(&path, buf)
            .or_else(|| responder::transmit_fatal_nak(self, &path, buf))
        {
            Some(n) => n,
            None => match self.transport {
                Transport::Rc => self.transmit_rc(env, &path, buf)?,
                Transport::MultiPath(_) => self.transmit_mp(env, &path, buf)?,
            },
        };
        self.counters.tx_packets += 1;
        Some(n)
    }

    /// RC: the responder and the requester take turns when both have a packet.
    fn transmit_rc(&mut self, env: &mut Env<'_>, path: &Path, buf: &mut Vec<u8>) -> Option<usize> {
        let order = if self.responder_next {
            [true, false]
        } else {
            [false, true]
        };
        for responder_turn in order {
            let sent = if responder_turn {
                if self.can_respond() {
                    responder::transmit(self, env, path, buf)
                } else {
                    None
                }
            } else if self.can_request() {
                requester::transmit(self, env, path, buf)
            } else {
                None
            };
            if sent.is_some() {
                self.responder_next = !responder_turn;
                return sent;
            }
        }
        None
    }

    /// Multipath: ACKs first (seed 001 §3.1: "immediately"), then data.
    fn transmit_mp(&mut self, env: &mut Env<'_>, path: &Path, buf: &mut Vec<u8>) -> Option<usize> {
        let ack = if self.can_respond() {
            multipath::transmit_ack(self, path, buf)
        } else {
            None
        };
        match ack {
            Some(n) => Some(n),
            None if self.can_request() => multipath::transmit_data(self, env, path, buf),
            None => None,
        }
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
        let n = framing::emit(path, roce, 0, buf, |_| {})?;
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
        let sync = match self.transport {
            Transport::Rc => None,
            Transport::MultiPath(_) => multipath::sync_deadline(self, self.last_now),
        };
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
        match self.transport {
            Transport::Rc => {
                if fired[Timer::Rnr as usize] {
                    // The wait is over: the retry goes out on the next poll_transmit.
                    self.arm_retransmit(env.now);
                }
                if fired[Timer::Retransmit as usize] {
                    requester::on_retransmit_timeout(self, env);
                }
            }
            Transport::MultiPath(_) => {
                if fired[Timer::Rnr as usize] {
                    self.arm_retransmit(env.now);
                    multipath::on_rnr_wait_over(self);
                }
                if fired[Timer::Retransmit as usize] {
                    multipath::on_retransmit_timeout(self, env);
                }
                if fired[Timer::MpBurst as usize] {
                    multipath::on_burst_timeout(self, env.now);
                }
                if fired[Timer::MpEarly as usize] {
                    multipath::on_early_timeout(self, env.now);
                }
            }
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
        if let Transport::MultiPath(_) = self.transport {
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
        // RC: data feeds the receiver's congestion control, then the responder or requester.
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
