//! Whether a `RETRY_EXC_ERR` was earned: did the link spoil every attempt the requester made?
//!
//! A requester gives up after `retry_cnt` retries without forward progress (IBA §9.7.6.1.3,
//! C9-140). Over a link that loses, corrupts and reorders frames at rates of several percent,
//! a READ of a dozen response packets can lose an attempt in two, so in a long enough soak
//! some work request legitimately fails all eight of its attempts. That outcome is the
//! transport doing what the spec says; a responder that ignores a duplicate, or a requester
//! that drops a valid response, produces the same status. [`check`] tells them apart from the
//! run's [`Event`]s: the retry budget counts as spent on the link only if, in every attempt
//! since the requester's last forward progress, the link spoiled ([`Fate::spoiled`]) a frame
//! of the exchange for the work request at the front, or the peer's QP, already in Error
//! itself, refused one. An attempt in which every request packet and every response arrived
//! intact and in order is a protocol fault.
//!
//! How attempts are found: a retry goes back to the oldest unacknowledged PSN (`una`) and
//! resends from there at once, so `una` is the lowest PSN the requester sent at the last instant
//! it sent requests (the final retry). `una` became the front when the response acknowledging
//! the most below it first arrived (forward progress, which refills the budget); every send
//! of a request with PSN `una` from then on is an attempt. The exchange of the work request at
//! `una` is its request packets, up to the one that ends its message (a READ or atomic request
//! is one packet), and the responses to them: READ responses and ATOMIC Acknowledges for its
//! PSNs, ACKs and NAKs for any PSN from `una` on (ACKs are cumulative, so a later one answers
//! it too).
//!
//! Source: IBA Vol. 1 §9.7.6.1.3 (retry counter), §9.7.5.1 (cumulative ACKs, implied NAK).
//!
//! Deviations: none.

use super::{Event, Fate};
use crate::endpoint::DropReason;
use crate::time::Duration;
use crate::wire::{FrameRepr, Operation, Psn, Syndrome};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

/// A frame of the requester's exchange, parsed once.
struct Frame {
    at: u64,
    /// Sent by the requester (a request) or by the peer (a response).
    request: bool,
    op: Operation,
    psn: Psn,
    /// RETH DMA length (READ requests).
    dma_len: u32,
    fate: Fate,
    /// The peer's QP refused it because it was in Error.
    refused: bool,
}

/// Checks that every attempt of the work request the requester (side A when `requester_a`)
/// gave up on was spoiled by the link; returns how many attempts there were. `answer_within`
/// bounds a round trip over the links (delays, reordering, serialization).
///
/// # Errors
/// Why the failure is not explained: the attempt that went through clean, or an event log
/// with no retry in it.
pub fn check(
    events: &[Event],
    requester_a: bool,
    mtu_bytes: u32,
    answer_within: Duration,
) -> Result<usize, String> {
    let frames = exchange(events, requester_a);
    let requests: Vec<&Frame> = frames.iter().filter(|f| f.request).collect();
    let last_at = requests
        .last()
        .map(|f| f.at)
        .ok_or("the requester sent nothing")?;
    let mut last: Vec<&Frame> = requests
        .iter()
        .copied()
        .filter(|f| f.at == last_at)
        .collect();
    let anchor = last[0].psn;
    last.sort_by_key(|f| f.psn.distance(anchor));
    let una = last[0].psn;
    // The work request at `una`: its last PSN, from the final retry's packets.
    let mut end = una;
    for f in last.iter().filter(|f| f.psn.distance(una) >= 0) {
        end = f.psn;
        if f.op == Operation::RdmaReadRequest {
            end = una.add(f.dma_len.div_ceil(mtu_bytes).max(1) - 1);
        }
        if f.op.position().ends_message() {
            break;
        }
    }
    let since = progress_at(events, requester_a, una);
    let mut starts: Vec<u64> = requests
        .iter()
        .filter(|f| f.psn == una && f.at >= since)
        .map(|f| f.at)
        .collect();
    starts.dedup();
    if starts.is_empty() {
        return Err("no attempt at the final retry's PSN".into());
    }
    let in_wr = |p: Psn| p.distance(una) >= 0 && end.distance(p) >= 0;
    let part_of = |f: &Frame| {
        if !f.request && f.op == Operation::Acknowledge {
            f.psn.distance(una) >= 0
        } else {
            in_wr(f.psn)
        }
    };
    for (i, &from) in starts.iter().enumerate() {
        let next = starts.get(i + 1).copied().unwrap_or(u64::MAX);
        let to = next.max(from.saturating_add(answer_within.as_nanos()));
        let spoiled = frames
            .iter()
            .filter(|f| f.at >= from && f.at < to && part_of(f))
            .any(|f| f.fate.spoiled() || f.refused);
        if !spoiled {
            return Err(format!(
                "attempt {} of {} at {from} ns (PSN {:#08x}..={:#08x}) went through clean",
                i + 1,
                starts.len(),
                una.value(),
                end.value()
            ));
        }
    }
    Ok(starts.len())
}

/// When `una` became the front of the requester's queue: the first accepted arrival of the
/// response that acknowledges the most below `una` (0 when there was none: `una` was the first
/// PSN). An ACK, READ response or ATOMIC Acknowledge acknowledges through its own PSN, a NAK
/// through the PSN before it (IBA §9.7.5.1).
fn progress_at(events: &[Event], requester_a: bool, una: Psn) -> u64 {
    let mut best: Option<(i32, u64)> = None;
    for e in events {
        let Event::Received {
            at,
            to_a,
            frame,
            result: Ok(()),
            ..
        } = e
        else {
            continue;
        };
        if *to_a != requester_a {
            continue;
        }
        let Some((repr, op)) = FrameRepr::parse(frame)
            .ok()
            .and_then(|(r, _)| Some((r.roce, r.roce.bth.opcode.operation()?)))
        else {
            continue;
        };
        if op.is_request() {
            continue;
        }
        let nak = matches!(
            repr.aeth.map(|a| a.syndrome),
            Some(Syndrome::Nak(_) | Syndrome::RnrNak(_))
        );
        let through = if nak {
            repr.bth.psn.sub(1)
        } else {
            repr.bth.psn
        };
        let d = through.distance(una);
        if d < 0 && best.is_none_or(|(b, _)| d > b) {
            best = Some((d, at.as_nanos()));
        }
    }
    best.map_or(0, |(_, at)| at)
}

/// The requester's requests and the peer's responses, in sending order, each with the
/// peer's refusal when the peer's QP was in Error.
fn exchange(events: &[Event], requester_a: bool) -> Vec<Frame> {
    let mut frames = Vec::new();
    for (i, e) in events.iter().enumerate() {
        let Event::Sent {
            at,
            from_a,
            frame,
            fate,
        } = e
        else {
            continue;
        };
        let Ok((repr, _)) = FrameRepr::parse(frame) else {
            continue;
        };
        let Some(op) = repr.roce.bth.opcode.operation() else {
            continue;
        };
        let request = *from_a == requester_a;
        if op.is_request() != request {
            continue;
        }
        // The same bytes delivered later to the other side and refused there.
        let refused = events[i..].iter().any(|r| {
            matches!(r, Event::Received { to_a, frame: got, result: Err(DropReason::QpNotReady), .. }
                if *to_a != *from_a && got == frame)
        });
        frames.push(Frame {
            at: at.as_nanos(),
            request,
            op,
            psn: repr.roce.bth.psn,
            dma_len: repr.roce.reth.map_or(0, |r| r.dma_len),
            fate: *fate,
            refused,
        });
    }
    frames
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cq::WcStatus;
    use crate::qp::{Mtu, SendOp, SendWr, Sge};
    use crate::testing::{ConnectOptions, LinkConfig, Pair};
    use crate::wire::FrameRepr;
    use alloc::vec;

    /// A READ whose every response the link loses: the requester spends its budget and fails.
    fn read_with_every_answer_lost() -> Vec<Event> {
        let link = LinkConfig::default().delay(Duration::from_micros(2));
        let mut p = Pair::new(link.clone(), link);
        let c = p
            .connect(ConnectOptions {
                mtu: Mtu::Mtu256,
                timeout: 5,
                retry_cnt: 3,
                ..ConnectOptions::default()
            })
            .unwrap();
        p.events = Some(Vec::new());
        let sge = Sge {
            addr: c.mr_a.addr,
            length: 600,
            lkey: c.mr_a.lkey,
        };
        let op = SendOp::Read {
            remote_addr: c.mr_b.addr,
            rkey: c.mr_b.rkey,
        };
        p.a.ep.post_send(c.qa, SendWr::new(7, op).sge(sge)).unwrap();
        let is_response = |f: &[u8]| {
            FrameRepr::parse(f)
                .ok()
                .and_then(|(r, _)| r.roce.bth.opcode.operation())
                .is_some_and(|o| o.is_read_response())
        };
        for _ in 0..100_000 {
            if !p.step_losing(|from_a, f| !from_a && is_response(f)) {
                break;
            }
        }
        let wcs = p.completions(true, c.cq_a);
        assert_eq!(
            wcs.iter().map(|w| w.status).collect::<Vec<_>>(),
            vec![WcStatus::RetryExcErr]
        );
        p.events.take().unwrap()
    }

    #[test]
    fn retry_budget_every_attempt_lost_is_explained() {
        let events = read_with_every_answer_lost();
        // The original send and three retries.
        assert_eq!(check(&events, true, 256, Duration::from_micros(50)), Ok(4));
    }

    #[test]
    fn retry_budget_attempt_delivered_and_unanswered_is_a_protocol_fault() {
        // The same run, as if the link had delivered every frame: a responder that sends
        // three answers nobody receives, or a requester that ignores them.
        let mut events = read_with_every_answer_lost();
        for e in &mut events {
            if let Event::Sent { fate, .. } = e {
                *fate = Fate::default();
            }
        }
        let why = check(&events, true, 256, Duration::from_micros(50)).unwrap_err();
        assert!(why.starts_with("attempt 1 of 4"), "{why}");
    }
}
