//! The RC transport's entry points: where a received packet, a transmit opportunity and an
//! expired timer go in single-path RC mode.
//!
//! ```text
//!  packet ─► data? notification point / DASR (CNP queued) ─► request?  responder::on_request
//!                                                         └► response? requester::on_response
//!  transmit ─► responder::transmit / requester::transmit, taking turns
//!  timers  ─► RNR wait over: re-arm; retransmit: requester::on_retransmit_timeout
//! ```
//!
//! Source: IBA Vol. 1 §9.5, §9.7 (requester and responder); seed 002 §II-B and seed 000 §III-C
//! (receiver-side congestion control sees every data packet).
//!
//! Deviations: none beyond those in the module docs of [`super`].

use super::framing::PathHead;
use super::timer::{Fired, Timer};
use super::{Env, Inbound, QpState, Shared, requester, responder};
use crate::time::Instant;
use crate::wire::FrameBuf;

/// RC mode's own state.
#[derive(Debug)]
pub(super) struct Rc {
    /// Whose turn it is when both halves have something to send.
    responder_next: bool,
}

impl Default for Rc {
    fn default() -> Rc {
        Rc {
            responder_next: true,
        }
    }
}

impl Rc {
    /// True when a packet may leave now.
    pub(super) fn wants_to_send(&self, qp: &Shared, now: Instant) -> bool {
        qp.cnp_out.is_some()
            || qp.resp.has_fatal_nak()
            || (qp.can_respond() && responder::has_sendable(qp, now))
            || (qp.can_request() && requester::has_sendable(qp, now))
    }

    /// The earliest time [`Rc::wants_to_send`] can hold without another change to the QP, or
    /// `None` when it cannot: exactly the moment the pacer opens when only paced work waits.
    pub(super) fn send_gate(&self, qp: &Shared) -> Option<Instant> {
        let pacer = qp.pacer.map_or(Instant::ZERO, |p| p.next_send());
        // The responder has output when it would send once the pacer opens.
        let respond =
            (qp.can_respond() && responder::has_sendable(qp, Instant::FAR_FUTURE)).then(|| {
                if qp.resp.read_pending() {
                    pacer
                } else {
                    Instant::ZERO
                }
            });
        let request = (qp.can_request() && !requester::blocked(qp)).then_some(pacer);
        if qp.cnp_out.is_some() || qp.resp.has_fatal_nak() {
            Some(Instant::ZERO)
        } else {
            respond.into_iter().chain(request).min()
        }
    }

    /// The responder and the requester take turns when both have a packet.
    pub(super) fn poll_transmit(
        &mut self,
        qp: &mut Shared,
        env: &mut Env<'_>,
        head: &PathHead,
        buf: &mut dyn FrameBuf,
    ) -> Option<usize> {
        let order = if self.responder_next {
            [true, false]
        } else {
            [false, true]
        };
        for responder_turn in order {
            let sent = if responder_turn {
                if qp.can_respond() {
                    responder::transmit(qp, env, head, buf)
                } else {
                    None
                }
            } else if qp.can_request() {
                requester::transmit(qp, env, head, buf)
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

    /// Runs the expired RC timers.
    pub(super) fn handle_timeout(&mut self, qp: &mut Shared, env: &mut Env<'_>, fired: &Fired) {
        if fired[Timer::Rnr as usize] {
            // The wait is over: the retry goes out on the next poll_transmit.
            qp.arm_retransmit(env.now);
        }
        if fired[Timer::Retransmit as usize] {
            requester::on_retransmit_timeout(qp, env);
        }
    }

    /// A received packet: data feeds the receiver's congestion control, then the responder
    /// takes requests and the requester responses.
    pub(super) fn handle_packet(&mut self, qp: &mut Shared, env: &mut Env<'_>, pkt: &Inbound<'_>) {
        let Inbound {
            roce, op, payload, ..
        } = *pkt;
        if op.is_send() || op.is_rdma_write() || op.is_read_response() {
            // Frame bytes: Dart compares the receive throughput with the line rate (§III-C).
            qp.notify_data(env, roce, op, pkt.frame_len, pkt.ecn);
        }
        if op.is_request() {
            if qp.can_respond() {
                responder::on_request(qp, env, roce, op, payload);
            }
        } else if matches!(qp.state, QpState::Rts | QpState::Sqd) {
            requester::on_response(qp, env, roce, op, payload);
        }
    }
}
