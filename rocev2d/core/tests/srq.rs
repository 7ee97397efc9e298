//! Shared receive queues over a simulated link: two RC QPs of B take their receive requests
//! from one SRQ in posting order, a QP with an SRQ refuses its own receive requests, an empty
//! SRQ RNR-NAKs until a request is posted, the limit event fires once per arming, a QP in
//! ERROR leaves the SRQ's other requests in place, and an SRQ in use cannot be destroyed.

use rocev2_core::EndpointError;
use rocev2_core::cq::{WcOpcode, WcStatus};
use rocev2_core::mr::MrInfo;
use rocev2_core::qp::{PostError, QpAttr, QpConfig, QpState, RecvWr, SendOp, SendWr, Sge};
use rocev2_core::testing::{ConnectOptions, LinkConfig, Pair};
use rocev2_core::time::Duration;
use rocev2_core::wire::Qpn;

const STEPS: usize = 100_000;

fn sge(mr: &MrInfo, off: u64, len: u32) -> Sge {
    Sge {
        addr: mr.addr + off,
        length: len,
        lkey: mr.lkey,
    }
}

fn recv(mr: &MrInfo, id: u64) -> RecvWr {
    RecvWr {
        wr_id: id,
        sg_list: vec![sge(mr, id * 256, 256)],
    }
}

/// A pair with two QPs each side; B's take from one SRQ of `depth` requests.
struct Rig {
    p: Pair,
    qa: [Qpn; 2],
    qb: [Qpn; 2],
    srq: rocev2_core::srq::SrqId,
    mr_a: MrInfo,
    mr_b: MrInfo,
    cq_a: rocev2_core::qp::CqId,
    cq_b: rocev2_core::qp::CqId,
}

fn rig(depth: u32) -> Rig {
    let link = LinkConfig::default().delay(Duration::from_micros(2));
    let mut p = Pair::new(link.clone(), link);
    let o = ConnectOptions {
        // RNR NAKs retried for ever: an empty SRQ waits for a request.
        rnr_retry: 7,
        min_rnr_timer: 1,
        ..ConnectOptions::default()
    };
    let all = o.mr_access;
    let now = p.now;
    let side = |h: &mut rocev2_core::testing::Host, srq_depth: Option<u32>| {
        let pd = h.ep.alloc_pd();
        let cq = h.ep.create_cq(64);
        let mr = h.ep.register_mr(pd, 0x1000_0000, 1 << 16, all).unwrap();
        h.mem.insert(mr.id, vec![0; 1 << 16]);
        let srq = srq_depth.map(|d| h.ep.create_srq(pd, d, 1).unwrap());
        let mut qps = [Qpn::new(0); 2];
        for q in &mut qps {
            let cfg = QpConfig {
                srq,
                ..QpConfig::new(pd, cq, cq)
            };
            *q = h.ep.create_qp(cfg).unwrap();
            let init = QpAttr {
                p_key: Some(0xffff),
                access: Some(all),
                ..QpAttr::default()
            };
            h.ep.modify_qp(*q, QpState::Init, &init, now, &mut h.mem)
                .unwrap();
        }
        (qps, mr, cq, srq)
    };
    let (qa, mr_a, cq_a, _) = side(&mut p.a, None);
    let (qb, mr_b, cq_b, srq) = side(&mut p.b, Some(depth));
    for i in 0..2 {
        p.connect_qps(qa[i], qb[i], &o).unwrap();
    }
    Rig {
        p,
        qa,
        qb,
        srq: srq.unwrap(),
        mr_a,
        mr_b,
        cq_a,
        cq_b,
    }
}

impl Rig {
    fn send(&mut self, on: usize, id: u64) {
        let wr = SendWr::new(id, SendOp::Send).sge(sge(&self.mr_a, 0, 64));
        self.p.a.ep.post_send(self.qa[on], wr).unwrap();
    }
}

#[test]
fn two_qps_take_one_srqs_requests_in_posting_order() {
    let mut r = rig(8);
    for id in 0..4 {
        r.p.b.ep.post_srq_recv(r.srq, recv(&r.mr_b, id)).unwrap();
    }
    let e = r.p.b.ep.post_recv(r.qb[0], recv(&r.mr_b, 9)).unwrap_err();
    assert_eq!(e, EndpointError::Post(PostError::UsesSrq));
    r.send(1, 100);
    assert!(r.p.drive(STEPS));
    r.send(0, 101);
    assert!(r.p.drive(STEPS));
    r.send(1, 102);
    assert!(r.p.drive(STEPS));
    let got: Vec<(u64, Qpn)> =
        r.p.completions(false, r.cq_b)
            .iter()
            .map(|w| {
                assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::Recv));
                (w.wr_id, w.qp_num)
            })
            .collect();
    assert_eq!(got, [(0, r.qb[1]), (1, r.qb[0]), (2, r.qb[1])]);
    assert_eq!(r.p.b.ep.query_srq(r.srq).unwrap().len, 1);
}

#[test]
fn an_empty_srq_rnr_naks_until_a_request_is_posted() {
    let mut r = rig(4);
    r.send(0, 7);
    r.p.drive(2_000);
    assert!(
        r.p.completions(true, r.cq_a).is_empty(),
        "no receive request: no completion"
    );
    r.p.b.ep.post_srq_recv(r.srq, recv(&r.mr_b, 3)).unwrap();
    assert!(r.p.drive(STEPS));
    let a = r.p.completions(true, r.cq_a);
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].status, WcStatus::Success);
    assert_eq!(r.p.completions(false, r.cq_b)[0].wr_id, 3);
}

#[test]
fn the_limit_event_fires_once_per_arming() {
    let mut r = rig(8);
    for id in 0..4 {
        r.p.b.ep.post_srq_recv(r.srq, recv(&r.mr_b, id)).unwrap();
    }
    r.p.b.ep.modify_srq(r.srq, None, Some(3)).unwrap();
    r.send(0, 1);
    assert!(r.p.drive(STEPS));
    assert_eq!(r.p.b.ep.poll_srq_limit(), None, "3 left: not below 3");
    r.send(1, 2);
    assert!(r.p.drive(STEPS));
    assert_eq!(r.p.b.ep.poll_srq_limit(), Some(r.srq));
    r.send(0, 3);
    assert!(r.p.drive(STEPS));
    assert_eq!(r.p.b.ep.poll_srq_limit(), None, "disarmed after firing");
    assert_eq!(r.p.b.ep.query_srq(r.srq).unwrap().limit, 0);
}

#[test]
fn a_failed_qp_leaves_the_srqs_other_requests_and_the_srq_outlives_its_qps() {
    let mut r = rig(8);
    for id in 0..3 {
        r.p.b.ep.post_srq_recv(r.srq, recv(&r.mr_b, id)).unwrap();
    }
    let now = r.p.now;
    let b = &mut r.p.b;
    b.ep.modify_qp(r.qb[0], QpState::Error, &QpAttr::default(), now, &mut b.mem)
        .unwrap();
    assert!(
        r.p.completions(false, r.cq_b).is_empty(),
        "nothing of the SRQ is flushed with one QP"
    );
    assert_eq!(r.p.b.ep.query_srq(r.srq).unwrap().len, 3);
    r.send(1, 5);
    assert!(r.p.drive(STEPS));
    assert_eq!(r.p.completions(false, r.cq_b)[0].wr_id, 0);
    assert_eq!(r.p.b.ep.destroy_srq(r.srq), Err(EndpointError::InUse));
    for q in r.qb {
        r.p.b.ep.destroy_qp(q).unwrap();
    }
    r.p.b.ep.destroy_srq(r.srq).unwrap();
    assert_eq!(
        r.p.b.ep.post_srq_recv(r.srq, recv(&r.mr_b, 9)),
        Err(EndpointError::UnknownSrq)
    );
}
