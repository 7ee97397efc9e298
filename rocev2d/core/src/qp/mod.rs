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
//! A [`Qp`] is its `Shared` state (attributes, the requester's send queue, the responder's
//! receive queue, timers, counters, congestion control) and a transport chosen once at
//! INIT→RTR: RC (`rc`) or multipath (`multipath`). Each entry point dispatches on the transport
//! once and hands it the shared state. A received packet goes `Qp::handle_packet` →
//! `Rc::handle_packet` → `responder::on_request` (requests) or `requester::on_response` (ACKs,
//! READ responses); in multipath mode `Mp::handle_packet` → `multipath::receiver::on_data` or
//! `multipath::on_ack`.
//!
//! Unreliable Datagram QPs are a type of their own, [`UdQp`] (`ud`), sharing the work requests,
//! attributes, scatter/gather and framing with RC.
//!
//! Files by job: `requester` (send queue, segmentation, ACK/NAK handling, retransmission),
//! `responder` (receive queue, placement, READ responses, atomics, ACK/NAK generation), `rc`,
//! `multipath` (MP-RDMA over both), `shared`, `state` (states, attributes, [`ConnectAttr`]),
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
mod error_cause;
pub(crate) mod framing;
mod multipath;
mod rc;
mod requester;
mod responder;
mod sgl;
mod shared;
pub mod state;
mod timer;
mod ud;
mod wr;

use crate::cc::{CcSnapshot, CnpInfo, ReceiverCc};
use crate::cq::WorkCompletion;
use crate::mr::{Memory, MrTable};
use crate::time::{Duration, Instant};
pub use crate::wire::ext::ExtCaps;
use crate::wire::frame::Ecn;
use crate::wire::{Operation, Psn, Qpn, RoceRepr};
use multipath::Mp;
use rc::Rc;
use shared::{Shared, wc};
pub use state::{ConnectAttr, ModifyError, Mtu, Path, QpAttr, QpState};
use timer::Timer;

use crate::wire::FrameBuf;
pub use config::{CqId, IofdTokens, QpConfig};
pub use counters::QpCounters;
pub use error_cause::ErrorCause;
pub use multipath::MpSnapshot;
use sgl::{Seg, gather, resolve_local, scatter};
pub(crate) use ud::UdInbound;
pub use ud::{AddressHandle, UdQp};
pub use wr::{PostError, RecvWr, SendOp, SendWr, Sge, UdDest};

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
    /// The endpoint's shared receive queues.
    pub srqs: &'a mut crate::srq::SrqTable,
}

/// A received transport packet, as [`Qp::handle_packet`] hands it to the transport.
#[derive(Debug, Clone, Copy)]
struct Inbound<'a> {
    roce: &'a RoceRepr,
    op: Operation,
    payload: &'a [u8],
    /// The IP header's ECN codepoint.
    ecn: Ecn,
    /// Bytes on the wire without FCS (Dart measures receive throughput in them).
    frame_len: usize,
    /// The UDP source port: a multipath packet's virtual path.
    udp_src_port: u16,
}

/// A Reliable Connected queue pair: what both modes share, and its transport.
#[derive(Debug)]
pub struct Qp {
    sh: Shared,
    /// RC or multipath, chosen once at INIT→RTR.
    transport: Transport,
    /// The path's frame headers, built when the path is set (`framing`): every frame the QP
    /// sends starts from them. Beside `sh` rather than in it, so sending borrows them while
    /// `sh` is borrowed mutably, without a copy per frame.
    head: Option<framing::PathHead>,
}

/// How a QP moves its messages: the [`QpMode`] with the state only that mode has. Every entry
/// point of [`Qp`] dispatches on it once and hands the variant the [`Shared`] state.
#[derive(Debug)]
enum Transport {
    /// Single-path RC (`rc`, over `requester` and `responder`).
    Rc(Rc),
    /// MP-RDMA (`multipath`), from INIT→RTR on when both ends offered it.
    MultiPath(alloc::boxed::Box<Mp>),
}

impl Qp {
    /// A QP in the Reset state.
    pub fn new(qpn: Qpn, cfg: QpConfig) -> Qp {
        Qp {
            sh: Shared::new(qpn, cfg),
            transport: Transport::Rc(Rc::default()),
            head: None,
        }
    }

    /// The transport mode: [`QpMode::MultiPath`] once both ends offered it at INIT→RTR.
    pub fn mode(&self) -> QpMode {
        match self.transport {
            Transport::Rc(_) => QpMode::Rc,
            Transport::MultiPath(_) => QpMode::MultiPath,
        }
    }

    /// MP-RDMA window, per-VP counters and receiver statistics, in multipath mode.
    pub fn mp_snapshot(&self) -> Option<MpSnapshot> {
        match &self.transport {
            Transport::Rc(_) => None,
            Transport::MultiPath(mp) => Some(mp.snapshot()),
        }
    }

    /// The congestion controller's state at `now`, for traces and stats.
    pub fn cc_snapshot(&self, now: Instant) -> Option<CcSnapshot> {
        self.sh.cc.as_ref().map(|c| c.as_dyn().snapshot(now))
    }

    /// PFC paused or resumed this QP's priority (DCQCN+ holds recovery while paused).
    pub fn set_paused(&mut self, paused: bool) {
        if let Some(c) = &mut self.sh.cc {
            c.as_dyn_mut().set_paused(paused);
        }
    }

    /// Queues a CNP to the peer's QP (DCQCN NP, or DCQCN+'s list walk with its τ).
    pub(crate) fn queue_cnp(&mut self, tau: Option<Duration>) {
        self.sh.queue_cnp(tau);
    }

    /// A CNP for this QP arrived: the sender's controller reacts (seed 002 §II-B, §IV-B).
    pub(crate) fn on_cnp(&mut self, now: Instant, tau: Option<Duration>) {
        self.sh.counters.cnps_received += 1;
        if let Some(c) = &mut self.sh.cc {
            c.as_dyn_mut().on_cnp(now, &CnpInfo::new(tau));
        }
        self.sh.sync_pacer(now);
    }

    /// The QP number.
    pub fn qpn(&self) -> Qpn {
        self.sh.qpn
    }
    /// The current state.
    pub fn state(&self) -> QpState {
        self.sh.state
    }
    /// Why the QP entered ERROR ([`ErrorCause`]), until it is reset: on the passive side of a
    /// failed RDMA access, the only place the reason shows.
    pub fn error_cause(&self) -> Option<ErrorCause> {
        self.sh.error_cause
    }
    /// The creation-time configuration.
    pub fn config(&self) -> &QpConfig {
        &self.sh.cfg
    }
    /// The path set at INIT→RTR.
    pub fn path(&self) -> Option<&Path> {
        self.sh.path.as_ref()
    }
    /// The path MTU in payload bytes per packet, once INIT→RTR gave the QP a path.
    pub fn path_mtu(&self) -> Option<u32> {
        self.sh.path.map(|_| self.sh.mtu)
    }
    /// The partition key.
    pub fn p_key(&self) -> u16 {
        self.sh.p_key
    }
    /// Counters.
    pub fn counters(&self) -> &QpCounters {
        &self.sh.counters
    }

    /// Moves the QP to `to`, applying `attr` (IBA §11.2.4.2). Entering Error flushes every
    /// outstanding work request with `WR_FLUSH_ERR` (through `complete`); Reset clears all state.
    /// INIT→RTR chooses the transport: multipath when this QP offers it and the peer announced
    /// it.
    pub(crate) fn modify(
        &mut self,
        to: QpState,
        attr: &QpAttr,
        env: &mut Env<'_>,
    ) -> Result<(), ModifyError> {
        let sh = &mut self.sh;
        state::validate(sh.state, to, attr)?;
        if let Some(v) = attr.p_key {
            sh.p_key = v;
        }
        if let Some(v) = attr.access {
            sh.access = v;
        }
        if let Some(v) = attr.path {
            sh.path = Some(v);
            // `validate` checked the path, so it can be framed.
            self.head = framing::PathHead::new(&v);
        }
        if let Some(v) = attr.path_mtu {
            sh.mtu = v.bytes();
        }
        if let Some(v) = attr.dest_qpn {
            sh.dest_qpn = v;
        }
        if let Some(v) = attr.rq_psn {
            sh.resp.reset(Psn::new(v));
        }
        if let Some(v) = attr.max_dest_rd_atomic {
            sh.max_dest_rd_atomic = v;
        }
        if let Some(v) = attr.min_rnr_timer {
            sh.min_rnr_timer = v;
        }
        if let Some(v) = attr.sq_psn {
            sh.req.reset(Psn::new(v));
        }
        if let Some(v) = attr.timeout {
            sh.timeout = state::ack_timeout(v);
        }
        if let Some(v) = attr.retry_cnt {
            sh.retry_cnt = v;
            sh.req.retry_left = v;
        }
        if let Some(v) = attr.rnr_retry {
            sh.rnr_retry = v;
            sh.req.rnr_left = v;
        }
        if let Some(v) = attr.max_rd_atomic {
            sh.max_rd_atomic = v;
        }
        if let Some(v) = attr.peer_ext {
            sh.peer_ext = v;
        }
        if let (Some(mp), true) = (sh.cfg.multipath, sh.peer_ext.multipath) {
            // The window is a multipath QP's congestion control (seed 001 §3.2): no rate
            // controller or pacer runs beside it.
            sh.cc = None;
            sh.pacer = None;
            let (rq, sq) = (sh.resp.epsn(), sh.req.snd_una());
            if let Transport::Rc(_) = self.transport {
                let m = Mp::new(mp, sh.qpn.value(), rq, sq);
                self.transport = Transport::MultiPath(alloc::boxed::Box::new(m));
            }
            if let Transport::MultiPath(m) = &mut self.transport {
                if let Some(v) = attr.rq_psn {
                    m.reset_receiver(Psn::new(v));
                }
                if let Some(v) = attr.sq_psn {
                    m.reset_sender(Psn::new(v));
                }
            }
        }
        match to {
            QpState::Error => self.sh.enter_error(None, env),
            QpState::Reset => {
                let cfg = self.sh.cfg;
                *self = Qp::new(self.sh.qpn, cfg);
            }
            _ => self.sh.state = to,
        }
        Ok(())
    }

    /// Posts a send work request (`ibv_post_send`): allowed in RTS and SQD (IBA §10.3.1;
    /// requests posted in SQD start after the QP returns to RTS).
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), PostError> {
        let sh = &mut self.sh;
        if !matches!(sh.state, QpState::Rts | QpState::Sqd) {
            return Err(sh.refusal());
        }
        if wr.ud.is_some() {
            return Err(PostError::Unsupported);
        }
        if sh.req.sq_len() >= sh.cfg.max_send_wr as usize {
            return Err(PostError::QueueFull);
        }
        if wr.sg_list.len() > sh.cfg.max_send_sge as usize {
            return Err(PostError::TooManySge);
        }
        if let Transport::MultiPath(_) = self.transport
            && wr.op.is_rd_atomic()
        {
            // NOT IMPLEMENTED (seed 001 §3.1): READ and atomics over multipath.
            return Err(PostError::Unsupported);
        }
        sh.req.push(wr, sh.cfg.max_inline_data, sh.mtu)
    }

    /// Posts a receive work request (`ibv_post_recv`): allowed from Init on (IBA §10.3.1), so
    /// receive buffers are in place before the peer sends.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), PostError> {
        let sh = &mut self.sh;
        if matches!(sh.state, QpState::Reset | QpState::Error) {
            return Err(sh.refusal());
        }
        if sh.cfg.srq.is_some() {
            return Err(PostError::UsesSrq);
        }
        if sh.resp.rq_len() >= sh.cfg.max_recv_wr as usize {
            return Err(PostError::QueueFull);
        }
        if wr.sg_list.len() > sh.cfg.max_recv_sge as usize {
            return Err(PostError::TooManySge);
        }
        let total: u64 = wr.sg_list.iter().map(|s| s.length as u64).sum();
        if total > 1 << 31 {
            return Err(PostError::MessageTooLong);
        }
        sh.resp.push(wr);
        Ok(())
    }

    /// True when the QP has nothing to send and no timer pending: every request acknowledged
    /// and every ACK sent, so destroying it now leaves its peer waiting for nothing.
    pub fn is_idle(&self, now: Instant) -> bool {
        !self.wants_to_send(now) && self.poll_timeout().is_none()
    }

    /// True when the QP has a packet to send now (used by the endpoint's scheduler).
    pub(crate) fn wants_to_send(&self, now: Instant) -> bool {
        match &self.transport {
            Transport::Rc(rc) => rc.wants_to_send(&self.sh, now),
            Transport::MultiPath(mp) => mp.wants_to_send(&self.sh, now),
        }
    }

    /// A lower bound on when [`Qp::wants_to_send`] can next hold if nothing else changes the
    /// QP, or `None` when it cannot hold at any time before such a change: the endpoint's
    /// scheduler looks at the QP only from then on. Time only opens the gates `wants_to_send`
    /// tests (the pacer, MP-RDMA's synchronise delay and early-retransmission age), so this is
    /// sound; in RC mode it is exact (the pacer's next send when only paced work waits).
    pub(crate) fn send_gate(&self) -> Option<Instant> {
        match &self.transport {
            Transport::Rc(rc) => rc.send_gate(&self.sh),
            Transport::MultiPath(mp) => mp
                .wants_to_send(&self.sh, Instant::FAR_FUTURE)
                .then_some(Instant::ZERO),
        }
    }

    /// Writes the next frame into `buf` and returns its length, or `None` with nothing to send.
    pub(crate) fn poll_transmit(
        &mut self,
        env: &mut Env<'_>,
        buf: &mut dyn FrameBuf,
    ) -> Option<usize> {
        let sh = &mut self.sh;
        sh.last_now = sh.last_now.max(env.now);
        let head = self.head.as_ref()?;
        // A CNP and the fatal NAK go first in both modes.
        let n = match sh
            .transmit_cnp(head, buf)
            .or_else(|| responder::transmit_fatal_nak(sh, head, buf))
        {
            Some(n) => n,
            None => match &mut self.transport {
                Transport::Rc(rc) => rc.poll_transmit(sh, env, head, buf)?,
                Transport::MultiPath(mp) => mp.poll_transmit(sh, env, head, buf)?,
            },
        };
        sh.counters.tx_packets += 1;
        Some(n)
    }

    /// The earliest deadline: QP timers, the controller's timers, the pacer when paced work
    /// waits for it, and the transport's own deadline.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        let sh = &self.sh;
        let pacer = sh
            .pacer
            .filter(|p| p.next_send() > sh.last_now && sh.paced_work_waiting())
            .map(|p| p.next_send());
        let cc = sh.cc.as_ref().and_then(|c| c.as_dyn().poll_timeout());
        let own = match &self.transport {
            Transport::Rc(_) => None,
            Transport::MultiPath(mp) => mp.poll_timeout(sh),
        };
        [sh.timers.next(), cc, pacer, own]
            .into_iter()
            .flatten()
            .min()
    }

    /// [`Qp::poll_timeout`] when it may have moved since the last call, `None` when it cannot
    /// have: the endpoint's deadline index re-reads a QP only then. In RC mode without
    /// congestion control the deadline is the timer table's alone, which records its changes;
    /// a controller, a pacer (whose deadline follows every send and `last_now`) or multipath
    /// mode make every call a possible change.
    pub(crate) fn deadline_update(&mut self) -> Option<Option<Instant>> {
        let sh = &mut self.sh;
        let timers = sh.timers.take_changed();
        let volatile = sh.cc.is_some()
            || sh.pacer.is_some()
            || matches!(self.transport, Transport::MultiPath(_));
        (timers || volatile).then(|| self.poll_timeout())
    }

    /// Runs the timers whose deadline passed; a spurious call does nothing.
    pub(crate) fn handle_timeout(&mut self, env: &mut Env<'_>) {
        let sh = &mut self.sh;
        sh.last_now = sh.last_now.max(env.now);
        if let Some(c) = &mut sh.cc
            && c.as_dyn().poll_timeout().is_some_and(|t| t <= env.now)
        {
            c.as_dyn_mut().handle_timeout(env.now);
        }
        sh.sync_pacer(env.now);
        let fired = sh.timers.expired(env.now);
        match &mut self.transport {
            Transport::Rc(rc) => rc.handle_timeout(sh, env, &fired),
            Transport::MultiPath(mp) => mp.handle_timeout(sh, env, &fired),
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
        self.sh.counters.rx_packets += 1;
        let pkt = Inbound {
            roce,
            op,
            payload,
            ecn,
            frame_len,
            udp_src_port,
        };
        match &mut self.transport {
            Transport::Rc(rc) => rc.handle_packet(&mut self.sh, env, &pkt),
            Transport::MultiPath(mp) => mp.handle_packet(&mut self.sh, env, &pkt),
        }
    }
}
