//! Two CMs against each other on a virtual clock (quinn's `Pair`, for MADs): a wire that delivers,
//! drops, duplicates or delays each MAD as the test says, and steps straight to the next
//! delivery or timer.

use super::*;
use crate::wire::mad::attribute;
use crate::wire::mad::cm_connect::{RepPacket, RepRepr, RtuRepr};
use crate::wire::mad::cm_disconnect::DreqRepr;
use crate::wire::{Psn, Qpn};
use alloc::boxed::Box;
use core::net::Ipv4Addr;
use proptest::prelude::*;
use std::vec;

/// `rping_cm.pcap`'s client (active side) and server.
const A_GID: Ipv6Addr = Ipv4Addr::new(192, 168, 77, 11).to_ipv6_mapped();
const B_GID: Ipv6Addr = Ipv4Addr::new(192, 168, 77, 10).to_ipv6_mapped();
const SID: ServiceId = ServiceId::rdma_cm(PortSpace::TCP, 7174);
const A_QPN: Qpn = Qpn::new(0x12);
const B_QPN: Qpn = Qpn::new(0x11);
const A_PSN: Psn = Psn::new(0x9e_1675);
const B_PSN: Psn = Psn::new(0xd2_ba60);
const LATENCY: Duration = Duration::from_micros(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Deliver,
    Drop,
    Duplicate,
    Delay(Duration),
}

/// Decides each MAD's fate from (sent by A?, AttributeID, how many of that kind that side sent
/// before).
type FateFn = Box<dyn FnMut(bool, u16, usize) -> Fate>;

struct Pair {
    now: Instant,
    a: Cm,
    b: Cm,
    ev_a: Vec<(Instant, Event)>,
    ev_b: Vec<(Instant, Event)>,
    /// In flight: (arrival, to B?, MAD).
    wire: Vec<(Instant, bool, Transmit)>,
    /// Every MAD sent: (by A?, AttributeID, bytes).
    sent: Vec<(bool, u16, [u8; MAD_LEN])>,
    dropped: Vec<(bool, u16)>,
    fate: FateFn,
    /// B accepts every request at once.
    auto_accept: bool,
}

fn attr(mad: &[u8; MAD_LEN]) -> u16 {
    u16::from_be_bytes([mad[16], mad[17]])
}

fn params() -> ConnectParams {
    let mut p = ConnectParams::new(SID, A_GID, B_GID, A_QPN, A_PSN);
    // A waits 268 ms + 2·PLT for a REP, B 1.07 s + 2·PLT for the RTU: A's REQ resend comes
    // first, so a lost REP is recovered by the REQ.
    p.remote_cm_response_timeout = 16;
    p.local_cm_response_timeout = 18;
    p.max_cm_retries = 3;
    p
}

/// A's wait for a REP: cm_timeout(16) + 2·cm_timeout(19 − 1).
fn req_wait() -> Duration {
    cm_timeout(16) + cm_timeout(18).saturating_mul(2)
}

impl Pair {
    fn new() -> Self {
        let mut b = Cm::new(CmConfig { local_ca_guid: 0xb }, 2);
        b.listen(SID).unwrap();
        Pair {
            now: Instant::ZERO,
            a: Cm::new(CmConfig { local_ca_guid: 0xa }, 1),
            b,
            ev_a: Vec::new(),
            ev_b: Vec::new(),
            wire: Vec::new(),
            sent: Vec::new(),
            dropped: Vec::new(),
            fate: Box::new(|_, _, _| Fate::Deliver),
            auto_accept: true,
        }
    }

    fn with_fate(fate: impl FnMut(bool, u16, usize) -> Fate + 'static) -> Self {
        Pair {
            fate: Box::new(fate),
            ..Pair::new()
        }
    }

    fn connect(&mut self, p: ConnectParams) -> ConnId {
        let id = self.a.connect(self.now, p).unwrap();
        self.pump();
        id
    }

    /// Moves events into the logs (B accepting on the way) and MADs onto the wire.
    fn pump(&mut self) {
        while let Some(e) = self.a.poll_event() {
            self.ev_a.push((self.now, e));
        }
        while let Some(e) = self.b.poll_event() {
            if let (true, Event::ConnectRequest(r)) = (self.auto_accept, &e) {
                let mut p = AcceptParams::new(B_QPN, B_PSN);
                p.private_data = b"rep".to_vec();
                self.b.accept(self.now, r.conn, p).unwrap();
            }
            if let (true, Event::SidrRequest(r)) = (self.auto_accept, &e) {
                self.b.sidr_reply(r.id, &sidr_answer()).unwrap();
            }
            self.ev_b.push((self.now, e));
        }
        for from_a in [true, false] {
            loop {
                let t = if from_a {
                    self.a.poll_transmit()
                } else {
                    self.b.poll_transmit()
                };
                let Some(t) = t else { break };
                let (src, dst) = if from_a {
                    (A_GID, B_GID)
                } else {
                    (B_GID, A_GID)
                };
                assert_eq!((t.local_gid, t.peer_gid), (src, dst));
                let kind = attr(&t.mad);
                let nth = self
                    .sent
                    .iter()
                    .filter(|s| (s.0, s.1) == (from_a, kind))
                    .count();
                self.sent.push((from_a, kind, t.mad));
                let at = self.now + LATENCY;
                match (self.fate)(from_a, kind, nth) {
                    Fate::Deliver => self.wire.push((at, from_a, t)),
                    Fate::Drop => self.dropped.push((from_a, kind)),
                    Fate::Duplicate => {
                        self.wire.push((at, from_a, t.clone()));
                        self.wire.push((at, from_a, t));
                    }
                    Fate::Delay(d) => self.wire.push((at + d, from_a, t)),
                }
            }
        }
    }

    /// The time of the next delivery or timer.
    fn next(&self) -> Option<Instant> {
        let wire = self.wire.iter().map(|w| w.0).min();
        [wire, self.a.poll_timeout(), self.b.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Delivers the earliest MAD or runs the timers due; false when nothing is left to do.
    fn step(&mut self) -> bool {
        let Some(t) = self.next() else { return false };
        self.now = self.now.max(t);
        if let Some(i) = self.wire.iter().position(|w| w.0 == t) {
            let (_, to_b, m) = self.wire.remove(i);
            if to_b {
                self.b.handle_mad(self.now, B_GID, A_GID, &m.mad);
            } else {
                self.a.handle_mad(self.now, A_GID, B_GID, &m.mad);
            }
        } else {
            self.a.handle_timeout(self.now);
            self.b.handle_timeout(self.now);
        }
        self.pump();
        true
    }

    /// Runs until nothing is in flight and no timer is set.
    fn drive(&mut self) {
        for _ in 0..10_000 {
            if !self.step() {
                return;
            }
        }
        panic!("the pair did not settle");
    }

    /// Runs everything due up to `until`, then sets the clock to it.
    fn run_until(&mut self, until: Instant) {
        while self.next().is_some_and(|t| t <= until) {
            self.step();
        }
        self.now = until;
    }

    fn kinds(&self) -> Vec<(bool, u16)> {
        self.sent.iter().map(|s| (s.0, s.1)).collect()
    }
}

fn events(log: &[(Instant, Event)]) -> Vec<&Event> {
    log.iter().map(|e| &e.1).collect()
}

fn established(log: &[(Instant, Event)]) -> Vec<QpParams> {
    log.iter()
        .filter_map(|e| match &e.1 {
            Event::Established { qp, .. } => Some(*qp),
            _ => None,
        })
        .collect()
}

const A: bool = true;
const B: bool = false;
use attribute::{DREP, DREQ, MRA, REJ, REP, REQ, RTU};

#[test]
fn cm_connect_accept_establishes_both_sides() {
    let mut p = Pair::new();
    let cma = CmaHeader {
        src_port: 40000,
        addrs: CmaAddrs::V4 {
            src: Ipv4Addr::new(192, 168, 77, 11),
            dst: Ipv4Addr::new(192, 168, 77, 10),
        },
    };
    let mut cp = params();
    cp.private_data = cma.private_data(b"hello");
    let a_id = p.connect(cp);
    p.drive();
    assert_eq!(p.kinds(), [(A, REQ), (B, REP), (A, RTU)]);
    // One transaction ID for the exchange, as in rping_cm.pcap.
    let tid = |k: usize| u64::from_be_bytes(p.sent[k].2[8..16].try_into().unwrap());
    assert_eq!((tid(1), tid(2)), (tid(0), tid(0)));

    let [
        Event::ConnectRequest(r),
        Event::Established { conn: b_id, .. },
    ] = &events(&p.ev_b)[..]
    else {
        panic!("B: {:?}", p.ev_b);
    };
    assert_eq!(r.cma, Some(cma));
    assert_eq!(&r.user_data()[..5], b"hello");
    assert_eq!((r.req.local_qpn, r.req.starting_psn), (A_QPN, A_PSN));
    assert_eq!(r.conn, *b_id);

    let qa = established(&p.ev_a)[0];
    let qb = established(&p.ev_b)[0];
    // Each side sends from the PSN the other announced and receives from its own.
    assert_eq!(
        (qa.local_qpn, qa.peer_qpn, qa.sq_psn, qa.rq_psn),
        (A_QPN, B_QPN, B_PSN, A_PSN)
    );
    assert_eq!(
        (qb.local_qpn, qb.peer_qpn, qb.sq_psn, qb.rq_psn),
        (B_QPN, A_QPN, A_PSN, B_PSN)
    );
    assert_eq!((qa.peer_gid, qb.peer_gid), (B_GID, A_GID));
    // The CM carries the parameters' path MTU (the endpoint lowers it to its link's first).
    assert_eq!(
        (qa.path_mtu, qa.hop_limit, qa.local_ack_timeout),
        (5, 64, 19)
    );
    let Event::Established { private_data, .. } = &p.ev_a[0].1 else {
        panic!()
    };
    assert_eq!(&private_data[..3], b"rep");
    assert_eq!(p.a.state(a_id), Some(State::Established));
    assert_eq!(p.b.state(*b_id), Some(State::Established));
    assert_eq!(p.a.poll_timeout(), None);

    // Same seeds, same inputs: the same bytes.
    let mut again = Pair::new();
    let mut cp = params();
    cp.private_data = cma.private_data(b"hello");
    again.connect(cp);
    again.drive();
    assert!(p.sent.iter().zip(&again.sent).all(|(x, y)| x.2 == y.2));
}

#[test]
fn cm_req_without_listener_gets_rej_invalid_service_id() {
    let mut p = Pair::new();
    assert!(p.b.unlisten(SID));
    let a_id = p.connect(params());
    p.drive();
    assert_eq!(p.kinds(), [(A, REQ), (B, REJ)]);
    // IBA §12.6.7.2 reason 8; the REJ rejects the REQ (Message REJected 0) and echoes its ID.
    let rej = &p.sent[1].2[24..];
    assert_eq!(u16::from_be_bytes([rej[10], rej[11]]), 8);
    assert_eq!(rej[8] >> 6, 0);
    assert_eq!(rej[4..8], a_id.comm_id().to_be_bytes());
    assert_eq!(
        events(&p.ev_a),
        [
            &Event::Rejected {
                conn: a_id,
                reason: RejectReason::INVALID_SERVICE_ID,
                private_data: vec![0; 148],
            },
            &Event::TimeWaitExit { conn: a_id },
        ]
    );
    assert_eq!(p.b.stats().no_listener, 1);
    assert!(p.ev_b.is_empty());
    assert_eq!(p.a.state(a_id), None);
}

#[test]
fn cm_lost_rep_recovered_by_duplicate_req() {
    let mut p = Pair::with_fate(|from_a, k, n| {
        if (from_a, k, n) == (B, REP, 0) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    p.connect(params());
    p.drive();
    // The resent REQ is a duplicate at B, which resends its REP.
    assert_eq!(
        p.kinds(),
        [(A, REQ), (B, REP), (A, REQ), (B, REP), (A, RTU)]
    );
    assert_eq!(p.sent[1].2, p.sent[3].2, "the REP is resent as is");
    assert_eq!(p.sent[0].2, p.sent[2].2, "the REQ is resent as is");
    assert_eq!(p.a.stats().retransmitted, 1);
    assert_eq!(p.b.stats().duplicate, 1);
    assert_eq!(established(&p.ev_a).len(), 1);
    assert_eq!(established(&p.ev_b).len(), 1);
    // The REQ went again exactly when A's REP wait ran out.
    assert_eq!(
        p.ev_a[0].0,
        Instant::ZERO + req_wait() + LATENCY.saturating_mul(2)
    );
}

#[test]
fn cm_lost_rtu_recovered_by_duplicate_rep() {
    let mut p = Pair::with_fate(|from_a, k, n| {
        if (from_a, k, n) == (A, RTU, 0) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    p.connect(params());
    p.drive();
    assert_eq!(
        p.kinds(),
        [(A, REQ), (B, REP), (A, RTU), (B, REP), (A, RTU)]
    );
    assert_eq!(p.b.stats().retransmitted, 1);
    assert_eq!(p.a.stats().duplicate, 1);
    assert_eq!(
        established(&p.ev_a).len(),
        1,
        "a duplicate REP is no new event"
    );
    assert_eq!(established(&p.ev_b).len(), 1);
    // B resent its REP after the REQ's Local CM Response Timeout + 2·PLT.
    let b_wait = cm_timeout(18) + cm_timeout(18).saturating_mul(2);
    assert_eq!(
        p.ev_b[1].0,
        Instant::ZERO + LATENCY.saturating_mul(3) + b_wait
    );
}

#[test]
fn cm_mra_extends_the_req_timeout() {
    let mut p = Pair::new();
    p.auto_accept = false;
    let a_id = p.connect(params());
    p.run_until(Instant::ZERO + LATENCY);
    let Event::ConnectRequest(r) = &p.ev_b[0].1 else {
        panic!()
    };
    let b_id = r.conn;
    // Service Timeout 24: 68.7 s, far past A's 2.4 s REP wait.
    p.b.send_mra(b_id, 24).unwrap();
    p.pump();
    let late = Instant::ZERO + req_wait().saturating_mul(10);
    p.run_until(late);
    assert_eq!(p.kinds(), [(A, REQ), (B, MRA)]);
    assert_eq!(p.a.state(a_id), Some(State::MraReqRcvd));
    assert_eq!(p.a.stats().retransmitted, 0);
    assert_eq!(
        p.a.poll_timeout(),
        Some(
            Instant::ZERO
                + LATENCY.saturating_mul(2)
                + cm_timeout(24)
                + cm_timeout(18).saturating_mul(2)
        )
    );
    p.b.accept(p.now, b_id, AcceptParams::new(B_QPN, B_PSN))
        .unwrap();
    p.pump();
    p.drive();
    assert_eq!(p.kinds(), [(A, REQ), (B, MRA), (B, REP), (A, RTU)]);
    assert_eq!(established(&p.ev_a).len(), 1);
    assert_eq!(established(&p.ev_b).len(), 1);
}

#[test]
fn cm_duplicate_req_after_mra_gets_the_mra_again() {
    let mut p = Pair::with_fate(|from_a, k, n| {
        if (from_a, k, n) == (B, MRA, 0) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    p.auto_accept = false;
    p.connect(params());
    p.run_until(Instant::ZERO + LATENCY);
    let Event::ConnectRequest(r) = &p.ev_b[0].1 else {
        panic!()
    };
    let b_id = r.conn;
    p.b.send_mra(b_id, 24).unwrap();
    p.pump();
    p.run_until(Instant::ZERO + req_wait().saturating_mul(2));
    assert_eq!(p.kinds(), [(A, REQ), (B, MRA), (A, REQ), (B, MRA)]);
    assert_eq!(p.b.stats().duplicate, 1);
    assert_eq!(p.b.state(b_id), Some(State::MraReqSent));
}

#[test]
fn cm_disconnect_dreq_drep_then_time_wait() {
    let mut p = Pair::new();
    let a_id = p.connect(params());
    p.drive();
    let Event::Established { conn: b_id, .. } = p.ev_b[1].1 else {
        panic!()
    };
    let t0 = p.now;
    p.a.disconnect(t0, a_id, b"bye").unwrap();
    p.pump();
    assert_eq!(p.a.state(a_id), Some(State::DreqSent));
    // The DREQ names B's QP.
    let dreq = &p.sent[3].2[24..];
    assert_eq!(dreq[8..11], [0, 0, 0x11]);
    p.run_until(t0 + LATENCY.saturating_mul(2));
    assert_eq!(p.kinds()[3..], [(A, DREQ), (B, DREP)]);
    assert_eq!(p.a.state(a_id), Some(State::TimeWait));
    assert_eq!(p.b.state(b_id), Some(State::TimeWait));
    let Event::Disconnected { private_data, .. } = &p.ev_b[2].1 else {
        panic!("{:?}", p.ev_b)
    };
    assert_eq!(&private_data[..3], b"bye");
    assert!(matches!(p.ev_a[1].1, Event::Disconnected { conn, .. } if conn == a_id));
    // Time-wait lasts the path's Local ACK Timeout: 4.096 µs · 2^19 = 2.147 s.
    let tw = cm_timeout(19);
    let exit = t0 + LATENCY.saturating_mul(2) + tw;
    p.run_until(Instant::from_nanos(exit.as_nanos() - 1));
    assert_eq!(p.a.state(a_id), Some(State::TimeWait));
    p.drive();
    assert_eq!(p.a.state(a_id), None);
    assert_eq!(p.b.state(b_id), None);
    assert_eq!(p.ev_a[2], (exit, Event::TimeWaitExit { conn: a_id }));
    assert_eq!(p.ev_b[3].1, Event::TimeWaitExit { conn: b_id });
    assert_eq!(p.a.disconnect(p.now, a_id, &[]), Err(CmError::UnknownConn));
}

#[test]
fn cm_lost_drep_dreq_resent_and_answered() {
    let mut p = Pair::with_fate(|from_a, k, n| {
        if (from_a, k, n) == (B, DREP, 0) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let a_id = p.connect(params());
    p.drive();
    p.a.disconnect(p.now, a_id, &[]).unwrap();
    p.pump();
    p.drive();
    assert_eq!(p.kinds()[3..], [(A, DREQ), (B, DREP), (A, DREQ), (B, DREP)]);
    // B's time-wait (2.1 s) ended before A's resend (2.4 s): B answers a DREQ for a connection
    // it no longer has, so A can finish (as Linux's `cm_issue_drep`).
    assert_eq!(p.b.stats().unknown_comm_id, 1);
    let disconnects = |log: &[(Instant, Event)]| {
        log.iter()
            .filter(|e| matches!(e.1, Event::Disconnected { .. }))
            .count()
    };
    assert_eq!((disconnects(&p.ev_a), disconnects(&p.ev_b)), (1, 1));
}

#[test]
fn cm_req_retries_exhausted_times_out_and_sends_rej_timeout() {
    let mut p = Pair::with_fate(|from_a, _, _| if from_a { Fate::Drop } else { Fate::Deliver });
    let a_id = p.connect(params());
    p.drive();
    // The REQ and Max CM Retries = 3 resends, then a REJ with reason Timeout (4).
    assert_eq!(
        p.kinds(),
        [(A, REQ), (A, REQ), (A, REQ), (A, REQ), (A, REJ)]
    );
    let rej = &p.sent[4].2[24..];
    assert_eq!(u16::from_be_bytes([rej[10], rej[11]]), 4);
    assert_eq!(rej[12..20], 0xau64.to_be_bytes(), "ARI: our CA GUID");
    assert_eq!(p.a.stats().retransmitted, 3);
    assert_eq!(p.a.stats().timed_out, 1);
    assert_eq!(
        p.ev_a[0],
        (
            Instant::ZERO + req_wait().saturating_mul(4),
            Event::TimedOut { conn: a_id }
        )
    );
    assert_eq!(p.ev_a[1].1, Event::TimeWaitExit { conn: a_id });
}

#[test]
fn cm_rep_retries_exhausted_rejects_the_established_active_side() {
    // Every RTU is lost: B gives up and its REJ (Timeout) takes A down too.
    let mut p = Pair::with_fate(|from_a, k, _| {
        if (from_a, k) == (A, RTU) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let a_id = p.connect(params());
    p.drive();
    assert_eq!(p.b.stats().retransmitted, 3);
    assert_eq!(p.a.stats().duplicate, 3);
    assert!(matches!(
        events(&p.ev_b)[..],
        [
            Event::ConnectRequest(_),
            Event::TimedOut { .. },
            Event::TimeWaitExit { .. }
        ]
    ));
    assert!(matches!(
        events(&p.ev_a)[..],
        [
            Event::Established { .. },
            Event::Rejected {
                reason: RejectReason::TIMEOUT,
                ..
            },
            Event::TimeWaitExit { .. }
        ]
    ));
    assert_eq!(p.a.state(a_id), None);
}

#[test]
fn cm_consumer_reject_resent_on_duplicate_req() {
    let mut p = Pair::with_fate(|from_a, k, n| {
        if (from_a, k, n) == (B, REJ, 0) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    p.auto_accept = false;
    let a_id = p.connect(params());
    p.run_until(Instant::ZERO + LATENCY);
    let Event::ConnectRequest(r) = &p.ev_b[0].1 else {
        panic!()
    };
    let b_id = r.conn;
    p.b.reject(p.now, b_id, RejectReason::CONSUMER, b"no")
        .unwrap();
    assert_eq!(
        p.b.accept(p.now, b_id, AcceptParams::new(B_QPN, B_PSN)),
        Err(CmError::WrongState(State::TimeWait))
    );
    p.pump();
    p.drive();
    assert_eq!(p.kinds(), [(A, REQ), (B, REJ), (A, REQ), (B, REJ)]);
    let Event::Rejected {
        reason,
        private_data,
        ..
    } = &p.ev_a[0].1
    else {
        panic!()
    };
    assert_eq!(*reason, RejectReason::CONSUMER);
    assert_eq!(&private_data[..2], b"no");
    assert_eq!(p.a.state(a_id), None);
}

#[test]
fn cm_bad_input_is_counted_and_answered_per_spec() {
    let mut cm = Cm::new(CmConfig { local_ca_guid: 1 }, 7);
    let now = Instant::ZERO;
    cm.handle_mad(now, B_GID, A_GID, &[0u8; 10]);
    let mut other_class = [0u8; MAD_LEN];
    other_class[..4].copy_from_slice(&[1, 0x04, 1, 1]);
    cm.handle_mad(now, B_GID, A_GID, &other_class);
    assert_eq!(cm.stats().malformed, 2);

    // A ClassPortInfo Get is a CM MAD we do not answer.
    let mut get = build_mad(
        9,
        CmAttribute::Rtu(RtuRepr {
            local_comm_id: 1,
            remote_comm_id: 2,
            private_data: [0; 224],
        }),
    );
    get[3] = method::GET;
    cm.handle_mad(now, B_GID, A_GID, &get);
    assert_eq!(cm.stats().unsupported, 1);

    // An RTU for nobody: dropped. A REP for nobody: REJ "invalid Communication ID" (6). A DREQ
    // for nobody: its DREP.
    let rtu = RtuRepr {
        local_comm_id: 5,
        remote_comm_id: 6,
        private_data: [0; 224],
    };
    cm.handle_mad(now, B_GID, A_GID, &build_mad(1, CmAttribute::Rtu(rtu)));
    assert_eq!(cm.poll_transmit(), None);
    // rping_cm.pcap frame 2.
    let rep = RepRepr::parse(&RepPacket::new_checked(&crate::wire::mad::tests::REP[24..]).unwrap())
        .unwrap();
    cm.handle_mad(now, B_GID, A_GID, &build_mad(2, CmAttribute::Rep(rep)));
    let t = cm.poll_transmit().unwrap();
    assert_eq!((t.local_gid, t.peer_gid, attr(&t.mad)), (B_GID, A_GID, REJ));
    let CmAttribute::Rej(rej) = CmRepr::parse_bytes(&t.mad).unwrap().attribute else {
        panic!()
    };
    assert_eq!(rej.reason, RejectReason::INVALID_COMM_ID.0);
    assert_eq!(rej.message_rejected, 1);
    assert_eq!(
        (rej.local_comm_id, rej.remote_comm_id),
        (rep.remote_comm_id, rep.local_comm_id)
    );
    let dreq = DreqRepr {
        local_comm_id: 5,
        remote_comm_id: 6,
        remote_qpn: Qpn::new(7),
        private_data: [0; 220],
    };
    cm.handle_mad(now, B_GID, A_GID, &build_mad(3, CmAttribute::Dreq(dreq)));
    let t = cm.poll_transmit().unwrap();
    let m = CmRepr::parse_bytes(&t.mad).unwrap();
    assert_eq!(m.transaction_id, 3);
    let CmAttribute::Drep(drep) = m.attribute else {
        panic!()
    };
    assert_eq!((drep.local_comm_id, drep.remote_comm_id), (6, 5));
    assert_eq!(cm.stats().unknown_comm_id, 3);
    assert_eq!(cm.stats().mads_received, 6);
    assert_eq!(cm.poll_event(), None);
}

/// A Get(ClassPortInfo) (IBA §13.4.8.1) is answered with a GetResp of the same transaction
/// naming CM class version 2; a Set of it is not.
#[test]
fn cm_class_port_info_get_answered() {
    let mut cm = Cm::new(CmConfig { local_ca_guid: 1 }, 7);
    let now = Instant::ZERO;
    let get = emit_mad(
        method::GET,
        0x1234,
        CmAttribute::ClassPortInfo(CLASS_PORT_INFO),
    );
    let mut set = get;
    set[3] = method::SET;
    cm.handle_mad(now, B_GID, A_GID, &set);
    assert_eq!(cm.poll_transmit(), None);
    assert_eq!(cm.stats().unsupported, 1);
    cm.handle_mad(now, B_GID, A_GID, &get);
    let t = cm.poll_transmit().unwrap();
    assert_eq!((t.local_gid, t.peer_gid), (B_GID, A_GID));
    let r = CmRepr::parse_bytes(&t.mad).unwrap();
    assert_eq!(
        (r.method, r.status, r.transaction_id),
        (method::GET_RESP, 0, 0x1234)
    );
    let CmAttribute::ClassPortInfo(info) = r.attribute else {
        panic!("{r}")
    };
    assert_eq!((info.base_version, info.class_version), (1, 2));
    assert_eq!(info.redirect_lid, 0, "not redirected");
    assert_eq!(cm.stats().unsupported, 1);
}

#[test]
fn cm_wrong_state_and_wrong_peer_are_counted() {
    let mut p = Pair::new();
    let a_id = p.connect(params());
    p.drive();
    // An RTU to the active side: its state does not expect one.
    let rtu = RtuRepr {
        local_comm_id: 0,
        remote_comm_id: a_id.comm_id(),
        private_data: [0; 224],
    };
    let mad = build_mad(1, CmAttribute::Rtu(rtu));
    p.a.handle_mad(p.now, A_GID, B_GID, &mad);
    assert_eq!(p.a.stats().wrong_state, 1);
    // The same from another GID is not for this connection at all.
    p.a.handle_mad(p.now, A_GID, Ipv6Addr::LOCALHOST, &mad);
    assert_eq!(p.a.stats().unknown_comm_id, 1);
    assert_eq!(p.a.state(a_id), Some(State::Established));
}

#[test]
fn cm_api_refuses_bad_calls() {
    let mut p = Pair::new();
    assert_eq!(p.b.listen(SID), Err(CmError::AlreadyListening));
    let mut cp = params();
    cp.private_data = vec![0; 93];
    assert_eq!(
        p.a.connect(p.now, cp),
        Err(CmError::PrivateDataTooLong { max: 92 })
    );
    let mut cp = params();
    cp.max_cm_retries = 16;
    assert_eq!(p.a.connect(p.now, cp), Err(CmError::InvalidParams));
    let a_id = p.connect(params());
    assert_eq!(
        p.a.accept(p.now, a_id, AcceptParams::new(A_QPN, A_PSN)),
        Err(CmError::WrongState(State::ReqSent))
    );
    assert_eq!(
        p.a.disconnect(p.now, a_id, &[]),
        Err(CmError::WrongState(State::ReqSent))
    );
    p.auto_accept = false;
    p.run_until(Instant::ZERO + LATENCY);
    let Event::ConnectRequest(r) = &p.ev_b[0].1 else {
        panic!()
    };
    let mut ap = AcceptParams::new(B_QPN, B_PSN);
    ap.private_data = vec![0; 197];
    assert_eq!(
        p.b.accept(p.now, r.conn, ap),
        Err(CmError::PrivateDataTooLong { max: 196 })
    );
    assert_eq!(p.b.send_mra(r.conn, 32), Err(CmError::InvalidParams));
    assert_eq!(p.b.state(r.conn), Some(State::ReqRcvd));
}

/// A fate per MAD, by send order; MADs past the list are delivered.
fn fate_strategy() -> impl Strategy<Value = Vec<Fate>> {
    let fate = prop_oneof![
        5 => Just(Fate::Deliver),
        2 => Just(Fate::Drop),
        1 => Just(Fate::Duplicate),
        // Up to 1 s: less than time-wait (2.1 s), which is what time-wait is for.
        1 => (0u64..1_000_000).prop_map(|us| Fate::Delay(Duration::from_micros(us))),
    ];
    proptest::collection::vec(fate, 0..40)
}

/// Whether a side's last word on its first connection is "connected".
fn connected(log: &[(Instant, Event)]) -> bool {
    log.iter()
        .rev()
        .find_map(|e| match e.1 {
            Event::Established { .. } => Some(true),
            Event::Rejected { .. } | Event::TimedOut { .. } => Some(false),
            _ => None,
        })
        .unwrap_or(false)
}

proptest! {
    /// Under loss, duplication and reordering, both sides end connected with matching QP
    /// parameters, or both end unconnected; the one exception is the protocol's last word
    /// lost: B gave up and its REJ never reached A. Then a disconnect always ends A's side.
    #[test]
    fn cm_lossy_wire_connects_or_fails_consistently(
        fates in fate_strategy(),
        retries in 0u8..4,
    ) {
        let seq = core::cell::Cell::new(0usize);
        let mut p = Pair::with_fate(move |_, _, _| {
            let k = seq.get();
            seq.set(k + 1);
            fates.get(k).copied().unwrap_or(Fate::Deliver)
        });
        let mut cp = params();
        cp.max_cm_retries = retries;
        let a_id = p.connect(cp);
        p.drive();
        let (ca, cb) = (connected(&p.ev_a), connected(&p.ev_b));
        let requests = p.ev_b.iter().filter(|e| matches!(e.1, Event::ConnectRequest(_))).count();
        prop_assert!(requests <= 1, "one REQ, one passive connection: {:?}", p.ev_b);
        prop_assert!(!cb || ca, "B connected without A");
        if ca && !cb {
            prop_assert!(p.dropped.contains(&(B, REJ)), "A connected alone: {:?} / {:?}", p.ev_a, p.ev_b);
        }
        if ca && cb {
            let (qa, qb) = (established(&p.ev_a)[0], established(&p.ev_b)[0]);
            prop_assert_eq!((qa.peer_qpn, qa.sq_psn, qa.rq_psn), (qb.local_qpn, qb.rq_psn, qb.sq_psn));
        }
        prop_assert!(established(&p.ev_a).len() <= 1 && established(&p.ev_b).len() <= 1);
        // Whatever did not end connected has left time-wait and is gone.
        if !ca {
            prop_assert_eq!(p.a.state(a_id), None);
        }
        if ca {
            p.a.disconnect(p.now, a_id, &[]).unwrap();
            p.pump();
            p.drive();
            prop_assert_eq!(p.a.state(a_id), None);
            let downs = p.ev_b.iter().filter(|e| matches!(e.1, Event::Disconnected { .. })).count();
            prop_assert!(downs <= 1);
        }
    }
}

#[test]
fn cm_active_timeout_rej_found_by_ari_ends_the_passive_side() {
    // Every REP is lost: A never learns B's ID, so its REJ (Timeout) has Remote Communication
    // ID 0 and B finds the connection by the ARI's CA GUID and A's ID.
    let mut p = Pair::with_fate(|from_a, k, _| {
        if (from_a, k) == (B, REP) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    p.connect(params());
    p.drive();
    let rej = &p.sent.iter().find(|s| s.1 == REJ).unwrap().2[24..];
    assert_eq!(rej[4..8], [0; 4]);
    assert!(matches!(
        events(&p.ev_b)[..],
        [
            Event::ConnectRequest(_),
            Event::Rejected {
                reason: RejectReason::TIMEOUT,
                ..
            },
            Event::TimeWaitExit { .. }
        ]
    ));
    assert_eq!(p.b.stats().timed_out, 0);
    assert_eq!(p.b.stats().unknown_comm_id, 0);
}

proptest! {
    /// MADs of a real exchange with bytes overwritten (IDs, attribute, method, lengths, state
    /// fields), thrown at either side between the steps of a connect and disconnect, never
    /// panic and are all counted.
    #[test]
    fn cm_corrupted_mads_never_panic(
        hits in proptest::collection::vec(
            (any::<usize>(), proptest::collection::vec((0usize..MAD_LEN, any::<u8>()), 1..4), any::<bool>()),
            1..40,
        ),
    ) {
        let mut clean = Pair::new();
        let a_id = clean.connect(params());
        clean.drive();
        clean.a.disconnect(clean.now, a_id, &[]).unwrap();
        clean.pump();
        clean.drive();
        let originals: Vec<[u8; MAD_LEN]> = clean.sent.iter().map(|s| s.2).collect();

        let mut p = Pair::new();
        let a_id = p.connect(params());
        let mut injected = [0u64; 2];
        for (k, (which, edits, to_a)) in hits.iter().enumerate() {
            let mut mad = originals[which % originals.len()];
            for &(at, byte) in edits {
                mad[at] = byte;
            }
            if *to_a {
                p.a.handle_mad(p.now, A_GID, B_GID, &mad);
            } else {
                p.b.handle_mad(p.now, B_GID, A_GID, &mad);
            }
            injected[usize::from(!*to_a)] += 1;
            p.pump();
            p.step();
            if k == hits.len() / 2 && p.a.state(a_id) == Some(State::Established) {
                p.a.disconnect(p.now, a_id, &[]).unwrap();
                p.pump();
            }
        }
        p.drive();
        let delivered = |to_a: bool| {
            p.sent.iter().filter(|s| s.0 != to_a).count() as u64
        };
        prop_assert!(p.a.stats().mads_received >= injected[0]);
        prop_assert!(p.b.stats().mads_received >= injected[1]);
        prop_assert!(p.a.stats().mads_received <= injected[0] + delivered(true));
        prop_assert!(p.b.stats().mads_received <= injected[1] + delivered(false));
    }
}

/// Engine shards: A is the CM of block 5, B of block 62.
fn sharded_pair() -> Pair {
    let mut p = Pair::new();
    p.a = Cm::new(CmConfig { local_ca_guid: 0xa }, 1).with_comm_id_block(5);
    let mut b = Cm::new(CmConfig { local_ca_guid: 0xb }, 2).with_comm_id_block(62);
    b.listen(SID).unwrap();
    p.b = b;
    p
}

/// Checks where every MAD sent so far routes: a REQ by its Service ID, every other one to the
/// block of the side it went to, naming a connection that side holds (or held).
fn assert_routes(p: &Pair, blocks: (u32, u32)) -> Vec<u16> {
    let mut kinds = Vec::new();
    for (from_a, kind, mad) in &p.sent {
        let (to, to_block) = match from_a {
            true => (&p.b, blocks.1),
            false => (&p.a, blocks.0),
        };
        match route(mad) {
            MadRoute::Req { service_id } => {
                assert_eq!((*kind, service_id), (attribute::REQ, SID));
            }
            MadRoute::Ours(id) => {
                assert_ne!(*kind, attribute::REQ);
                assert_eq!(comm_id_block(id), to_block, "{kind:#x} to block {to_block}");
                assert_eq!(to.comm_id_block(), Some(to_block));
                assert!(
                    p.ev_a.iter().chain(&p.ev_b).any(|(_, e)| match e {
                        Event::ConnectRequest(r) => r.conn.comm_id() == id,
                        Event::TimeWaitExit { conn } => conn.comm_id() == id,
                        _ => false,
                    }) || to.state(ConnId(id)).is_some(),
                    "{kind:#x} names {id:#x}, a connection of its receiver"
                );
            }
            MadRoute::Any => panic!("{kind:#x} routed nowhere"),
        }
        kinds.push(*kind);
    }
    kinds
}

#[test]
fn cm_shard_comm_ids_carry_the_block() {
    let mut p = sharded_pair();
    let mut ids = Vec::new();
    for k in 0..200 {
        let mut pk = params();
        pk.local_qpn = Qpn::new(0x100 + k);
        ids.push(p.a.connect(p.now, pk).unwrap().comm_id());
    }
    assert!(ids.iter().all(|&id| comm_id_block(id) == 5), "{ids:x?}");
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "unique");
    // The low 26 bits are random, not a counter.
    assert!(ids.iter().any(|&id| id & 0x3ff_ffff > 0x100_0000));
    // Block 0 never hands out ID 0, and a block wraps modulo 64 as a QPN block does.
    let mut z = Cm::new(CmConfig { local_ca_guid: 1 }, 3).with_comm_id_block(64);
    assert_eq!(z.comm_id_block(), Some(0));
    for k in 0..200 {
        let mut pk = params();
        pk.local_qpn = Qpn::new(0x100 + k);
        let id = z.connect(Instant::ZERO, pk).unwrap().comm_id();
        assert!(id != 0 && comm_id_block(id) == 0, "{id:#x}");
    }
    // Without a block the IDs use all 32 bits.
    let mut plain = Cm::new(CmConfig { local_ca_guid: 1 }, 3);
    assert_eq!(plain.comm_id_block(), None);
    let tops: BTreeSet<u32> = (0..200)
        .map(|k| {
            let mut pk = params();
            pk.local_qpn = Qpn::new(0x100 + k);
            comm_id_block(plain.connect(Instant::ZERO, pk).unwrap().comm_id())
        })
        .collect();
    assert!(tops.len() > 10, "{tops:?}");
}

#[test]
fn cm_shard_route_of_every_message_of_a_connection_and_its_disconnect() {
    let mut p = sharded_pair();
    let a_id = p.connect(params());
    p.drive();
    assert_eq!(p.a.state(a_id), Some(State::Established));
    p.b.disconnect(p.now, ConnId(b_conn(&p)), &[]).unwrap();
    p.pump();
    p.drive();
    let kinds = assert_routes(&p, (5, 62));
    assert_eq!(kinds, [REQ, REP, RTU, DREQ, DREP]);
}

/// B's connection (the only one it made).
fn b_conn(p: &Pair) -> u32 {
    p.ev_b
        .iter()
        .find_map(|(_, e)| match e {
            Event::ConnectRequest(r) => Some(r.conn.comm_id()),
            _ => None,
        })
        .unwrap()
}

#[test]
fn cm_shard_route_of_mra_and_rej() {
    let mut p = sharded_pair();
    p.auto_accept = false;
    p.connect(params());
    p.run_until(Instant::ZERO + LATENCY);
    let b_id = ConnId(b_conn(&p));
    p.b.send_mra(b_id, 24).unwrap();
    p.pump();
    p.b.reject(p.now, b_id, RejectReason::CONSUMER, b"no")
        .unwrap();
    p.pump();
    p.drive();
    assert_eq!(assert_routes(&p, (5, 62)), [REQ, MRA, REJ]);
}

#[test]
fn cm_shard_route_of_the_rest_is_any() {
    let mut p = sharded_pair();
    p.connect(params());
    p.drive();
    let rep = p.sent.iter().find(|s| s.1 == attribute::REP).unwrap().2;
    // A Get(ClassPortInfo), another class or method, a short or empty buffer.
    let cpi = emit_mad(method::GET, 7, CmAttribute::ClassPortInfo(CLASS_PORT_INFO));
    assert_eq!(route(&cpi), MadRoute::Any);
    for (at, byte) in [
        (1, crate::wire::mad::mgmt_class::PERF),
        (2, 1),
        (3, method::GET),
        (0, 2),
    ] {
        let mut m = rep;
        m[at] = byte;
        assert_eq!(route(&m), MadRoute::Any, "byte {at} = {byte:#x}");
    }
    assert_eq!(route(&rep[..MAD_LEN - 1]), MadRoute::Any);
    assert_eq!(route(&[]), MadRoute::Any);
    // Trailing bytes (an ICRC after the MAD) change nothing.
    let mut long = rep.to_vec();
    long.extend_from_slice(&[0xaa; 4]);
    assert_eq!(route(&long), route(&rep));
    assert!(matches!(route(&rep), MadRoute::Ours(id) if comm_id_block(id) == 5));
    // A REJ "Timeout" of an active side that never saw a REP names no ID of ours.
    let rej = build_mad(
        9,
        CmAttribute::Rej(RejRepr {
            local_comm_id: 77,
            remote_comm_id: 0,
            message_rejected: conn::MSG_REQ,
            reject_info_length: 8,
            reason: RejectReason::TIMEOUT.0,
            ari: [0; 72],
            private_data: [0; 148],
        }),
    );
    assert_eq!(route(&rej), MadRoute::Any);
}

proptest! {
    /// Any bytes: no panic, and a verdict consistent with the bytes.
    #[test]
    fn cm_route_arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        match route(&bytes) {
            MadRoute::Req { .. } => prop_assert_eq!(attr(&array(&bytes)), attribute::REQ),
            MadRoute::Ours(id) => prop_assert_ne!(id, 0),
            MadRoute::Any => {}
        }
    }

    /// A real MAD with a few bytes overwritten: no panic; a REQ stays a REQ.
    #[test]
    fn cm_route_corrupted_mads_never_panic(
        edits in proptest::collection::vec((0usize..MAD_LEN, any::<u8>()), 1..8),
    ) {
        let mut p = sharded_pair();
        p.connect(params());
        p.drive();
        for (_, _, mad) in &p.sent {
            let mut m = *mad;
            for &(at, b) in &edits {
                m[at] = b;
            }
            if let MadRoute::Req { .. } = route(&m) {
                prop_assert_eq!(attr(&m), attribute::REQ);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// SIDR

const UD_SID: ServiceId = ServiceId::rdma_cm(PortSpace::UDP, 7174);

/// B's answer to every SIDR_REQ when it auto-accepts.
fn sidr_answer() -> SidrReplyParams {
    SidrReplyParams {
        status: SidrStatus::SUCCESS,
        qpn: B_QPN,
        q_key: RDMA_UDP_Q_KEY,
        private_data: b"srep".to_vec(),
    }
}

/// A SIDR request from A to B for `UD_SID`, B listening on it, 4.3 s per try, 2 resends.
fn sidr_pair(fate: impl FnMut(bool, u16, usize) -> Fate + 'static) -> (Pair, SidrParams) {
    let mut p = Pair::with_fate(fate);
    p.b.listen(UD_SID).unwrap();
    let mut sp = SidrParams::new(UD_SID, A_GID, B_GID);
    sp.max_cm_retries = 2;
    (p, sp)
}

use attribute::{SIDR_REP, SIDR_REQ};

#[test]
fn sidr_request_is_answered_with_qpn_and_q_key() {
    let (mut p, mut sp) = sidr_pair(|_, _, _| Fate::Deliver);
    let cma = CmaHeader {
        src_port: 40000,
        addrs: CmaAddrs::V4 {
            src: Ipv4Addr::new(192, 168, 77, 11),
            dst: Ipv4Addr::new(192, 168, 77, 10),
        },
    };
    sp.private_data = cma.private_data(b"ud hello");
    let id = p.a.sidr_request(p.now, &sp).unwrap();
    p.pump();
    p.drive();
    assert_eq!(p.kinds(), vec![(A, SIDR_REQ), (B, SIDR_REP)]);
    // The REP echoes the REQ's transaction ID.
    assert_eq!(p.sent[0].2[8..16], p.sent[1].2[8..16]);
    let [Event::SidrRequest(r)] = &events(&p.ev_b)[..] else {
        panic!("{:?}", p.ev_b)
    };
    assert_eq!((r.peer_gid, r.local_gid, r.cma), (A_GID, B_GID, Some(cma)));
    assert_eq!((r.req.service_id, r.req.partition_key), (UD_SID.0, 0xffff));
    assert_eq!(&r.user_data()[..8], b"ud hello");
    let [
        Event::SidrReply {
            id: got,
            status,
            qpn,
            q_key,
            private_data,
        },
    ] = &events(&p.ev_a)[..]
    else {
        panic!("{:?}", p.ev_a)
    };
    assert_eq!(
        (*got, *status, *qpn, *q_key),
        (id, SidrStatus::SUCCESS, B_QPN, RDMA_UDP_Q_KEY)
    );
    assert_eq!(
        (private_data.len(), &private_data[..4]),
        (136, &b"srep"[..])
    );
    assert_eq!(p.a.poll_timeout(), None, "the request is over");
    assert_eq!(
        p.b.sidr_reply(r.id, &sidr_answer()),
        Err(CmError::UnknownConn)
    );
}

#[test]
fn sidr_lost_req_is_resent_on_the_timer() {
    let (mut p, sp) = sidr_pair(|from_a, kind, nth| match (from_a, kind, nth) {
        (A, SIDR_REQ, 0) => Fate::Drop,
        _ => Fate::Deliver,
    });
    let id = p.a.sidr_request(p.now, &sp).unwrap();
    p.pump();
    p.drive();
    assert_eq!(p.kinds(), vec![(A, SIDR_REQ), (A, SIDR_REQ), (B, SIDR_REP)]);
    assert_eq!(p.sent[0].2, p.sent[1].2, "the resend is the same MAD");
    assert_eq!(p.a.stats().retransmitted, 1);
    let (at, Event::SidrReply { id: got, .. }) = &p.ev_a[0] else {
        panic!("{:?}", p.ev_a)
    };
    assert_eq!(*got, id);
    assert!(
        *at >= Instant::ZERO + cm_timeout(20),
        "answered after one wait"
    );
}

#[test]
fn sidr_unanswered_request_times_out_after_its_retries() {
    let (mut p, sp) = sidr_pair(|_, kind, _| match kind {
        SIDR_REQ => Fate::Drop,
        _ => Fate::Deliver,
    });
    let id = p.a.sidr_request(p.now, &sp).unwrap();
    p.pump();
    p.drive();
    assert_eq!(p.kinds(), vec![(A, SIDR_REQ); 3]);
    assert_eq!(events(&p.ev_a), vec![&Event::SidrTimedOut { id }]);
    assert_eq!(
        p.ev_a[0].0,
        Instant::ZERO + cm_timeout(20).saturating_mul(3)
    );
    assert_eq!((p.a.stats().retransmitted, p.a.stats().timed_out), (2, 1));
}

#[test]
fn sidr_unlistened_service_gets_status_unsupported() {
    let (mut p, mut sp) = sidr_pair(|_, _, _| Fate::Deliver);
    sp.service_id = ServiceId::rdma_cm(PortSpace::UDP, 9);
    let id = p.a.sidr_request(p.now, &sp).unwrap();
    p.pump();
    p.drive();
    assert!(
        p.ev_b.is_empty(),
        "no event for a service nobody listens on"
    );
    assert_eq!(p.b.stats().no_listener, 1);
    let [
        Event::SidrReply {
            id: got, status, ..
        },
    ] = &events(&p.ev_a)[..]
    else {
        panic!("{:?}", p.ev_a)
    };
    assert_eq!((*got, *status), (id, SidrStatus::UNSUPPORTED));
}

#[test]
fn sidr_rep_for_unknown_request_is_counted_and_dropped() {
    let (mut p, sp) = sidr_pair(|_, _, _| Fate::Deliver);
    let id = p.a.sidr_request(p.now, &sp).unwrap();
    p.pump();
    p.drive();
    // The same SIDR_REP again (its request is over), then one naming another Request ID.
    let rep = p.sent[1].2;
    p.a.handle_mad(p.now, A_GID, B_GID, &rep);
    let mut other = rep;
    other[24..28].copy_from_slice(&(id.value() ^ 1).to_be_bytes());
    p.a.handle_mad(p.now, A_GID, B_GID, &other);
    assert_eq!(p.a.stats().unknown_comm_id, 2);
    assert_eq!(p.a.poll_event(), None);
    assert_eq!(p.a.poll_transmit(), None, "nothing is answered");
}

#[test]
fn sidr_rep_from_another_peer_is_not_taken() {
    let (mut p, sp) = sidr_pair(|_, kind, _| match kind {
        SIDR_REP => Fate::Drop,
        _ => Fate::Deliver,
    });
    p.a.sidr_request(p.now, &sp).unwrap();
    p.pump();
    p.run_until(p.now + LATENCY.saturating_mul(3));
    let rep = p.sent.iter().find(|s| s.1 == SIDR_REP).unwrap().2;
    p.a.handle_mad(
        p.now,
        A_GID,
        Ipv4Addr::new(10, 0, 0, 9).to_ipv6_mapped(),
        &rep,
    );
    assert_eq!(p.a.stats().unknown_comm_id, 1);
    assert_eq!(p.a.poll_event(), None);
}

#[test]
fn sidr_duplicate_req_gets_the_same_rep_again() {
    // The first REP is lost: A resends, and B answers the resend with its stored REP, no second
    // event.
    let (mut p, sp) = sidr_pair(|from_a, kind, nth| match (from_a, kind, nth) {
        (B, SIDR_REP, 0) => Fate::Drop,
        _ => Fate::Deliver,
    });
    p.a.sidr_request(p.now, &sp).unwrap();
    p.pump();
    p.drive();
    assert_eq!(
        p.kinds(),
        vec![(A, SIDR_REQ), (B, SIDR_REP), (A, SIDR_REQ), (B, SIDR_REP)]
    );
    assert_eq!(p.sent[1].2, p.sent[3].2);
    assert_eq!(p.ev_b.len(), 1);
    assert_eq!(p.b.stats().duplicate, 1);
    assert!(matches!(events(&p.ev_a)[..], [Event::SidrReply { .. }]));
}

#[test]
fn sidr_duplicate_of_an_unanswered_req_is_dropped() {
    let (mut p, sp) = sidr_pair(|_, kind, _| match kind {
        SIDR_REQ => Fate::Duplicate,
        _ => Fate::Deliver,
    });
    p.auto_accept = false;
    p.a.sidr_request(p.now, &sp).unwrap();
    p.pump();
    p.run_until(p.now + LATENCY.saturating_mul(2));
    assert_eq!(p.ev_b.len(), 1);
    assert_eq!(p.b.stats().duplicate, 1);
    let Event::SidrRequest(r) = &p.ev_b[0].1 else {
        panic!("{:?}", p.ev_b)
    };
    let mut refuse = sidr_answer();
    refuse.status = SidrStatus::REJECT;
    p.b.sidr_reply(r.id, &refuse).unwrap();
    p.pump();
    p.run_until(p.now + LATENCY.saturating_mul(2));
    assert!(matches!(
        events(&p.ev_a)[..],
        [Event::SidrReply {
            status: SidrStatus::REJECT,
            ..
        }]
    ));
}

#[test]
fn sidr_bad_calls_are_refused() {
    let mut a = Cm::new(CmConfig { local_ca_guid: 0xa }, 1);
    let mut sp = SidrParams::new(UD_SID, A_GID, B_GID);
    sp.private_data = vec![0; 217];
    assert_eq!(
        a.sidr_request(Instant::ZERO, &sp),
        Err(CmError::PrivateDataTooLong { max: 216 })
    );
    sp.private_data.clear();
    sp.max_cm_retries = 16;
    assert_eq!(
        a.sidr_request(Instant::ZERO, &sp),
        Err(CmError::InvalidParams)
    );
    let mut answer = sidr_answer();
    assert_eq!(
        a.sidr_reply(SidrId::from_value(5), &answer),
        Err(CmError::UnknownConn)
    );
    answer.private_data = vec![0; 137];
    assert_eq!(
        a.sidr_reply(SidrId::from_value(5), &answer),
        Err(CmError::PrivateDataTooLong { max: 136 })
    );
    assert_eq!(a.poll_transmit(), None);
}

#[test]
fn sidr_request_ids_carry_the_block_and_route_home() {
    let mut a = Cm::new(CmConfig { local_ca_guid: 0xa }, 1).with_comm_id_block(5);
    let id = a
        .sidr_request(Instant::ZERO, &SidrParams::new(UD_SID, A_GID, B_GID))
        .unwrap();
    assert_eq!(comm_id_block(id.value()), 5);
    let req = a.poll_transmit().unwrap().mad;
    assert_eq!(route(&req), MadRoute::Req { service_id: UD_SID });
    let mut b = Cm::new(CmConfig { local_ca_guid: 0xb }, 2);
    b.handle_mad(Instant::ZERO, B_GID, A_GID, &req);
    let rep = b.poll_transmit().unwrap().mad;
    assert_eq!(route(&rep), MadRoute::Ours(id.value()));
}
