//! The host without a daemon around it: attachments, isolation, limits, hostile rings.

use super::*;
use rocev2_core::cq::WcOpcode;
use rocev2_core::mr::Lkey;
use rocev2_core::qp::{SendOp, Sge};
use rocev2_core::wire::ext::ExtCaps;
use rocev2_datapath::iface::IfAddr;
use rocev2_ipc::proto::ErrorKind;
use std::os::unix::net::UnixStream;

fn host(limits: Limits) -> (Host, Endpoint, HostMemory) {
    host_at(limits, 1)
}

/// A host whose interface has MAC 02::0n and address 10.0.0.n.
fn host_at(limits: Limits, n: u8) -> (Host, Endpoint, HostMemory) {
    let iface = Interface {
        name: "t0".into(),
        index: 7,
        mac: [2, 0, 0, 0, 0, n],
        mtu: 4200,
        up: true,
        addrs: vec![IfAddr {
            ip: std::net::IpAddr::V4([10, 0, 0, n].into()),
            prefix_len: 24,
            link_local: false,
        }],
        rx_queues: 1,
    };
    let mut ep = Endpoint::new(1);
    ep.enable_cm(rocev2_core::endpoint::GsiConfig {
        mac: iface.mac,
        cm: rocev2_core::cm::CmConfig { local_ca_guid: 1 },
        seed: 1,
        link_mtu: iface.mtu,
    });
    (Host::new(iface, limits, None), ep, HostMemory::default())
}

/// An attachment, with the application's end of its connection (kept open) and doorbell.
fn attach(h: &mut Host) -> (u32, UnixStream, OwnedFd) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let creds = Creds { pid: 1, uid: 0 };
    let (id, bell) = h.attach(creds, ours.into()).unwrap();
    (id, theirs, bell)
}

fn ask(h: &mut Host, ep: &mut Endpoint, mem: &mut HostMemory, app: u32, req: Request) -> Reply {
    h.request(ep, mem, Instant::ZERO, app, req, Vec::new())
}

fn expect_refusal(r: &Reply, want: ErrorKind) {
    match &r.response {
        Response::Error { kind, .. } => assert_eq!(*kind, want, "{:?}", r.response),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// PD, CQ and RC QP of a fresh attachment; returns (pd, cq, qpn, the QP's rings' fds).
fn qp(
    h: &mut Host,
    ep: &mut Endpoint,
    mem: &mut HostMemory,
    app: u32,
) -> (u32, u32, u32, Vec<OwnedFd>) {
    qp_with(h, ep, mem, app, Request::CreateQp)
}

/// As [`qp`], the QP made by the request `create` builds from the spec.
fn qp_with(
    h: &mut Host,
    ep: &mut Endpoint,
    mem: &mut HostMemory,
    app: u32,
    create: impl FnOnce(QpSpec) -> Request,
) -> (u32, u32, u32, Vec<OwnedFd>) {
    let Response::Pd(pd) = ask(h, ep, mem, app, Request::AllocPd).response else {
        panic!()
    };
    let r = ask(h, ep, mem, app, Request::CreateCq { capacity: 8 });
    let Response::Cq { id: cq, .. } = r.response else {
        panic!("{:?}", r.response)
    };
    let spec = small_spec(pd, cq);
    let r = ask(h, ep, mem, app, create(spec));
    let (Response::Qp { qpn, .. } | Response::UdQp { qpn, .. }) = r.response else {
        panic!("{:?}", r.response)
    };
    (pd, cq, qpn, r.fds)
}

/// A QP of four requests each way, one SGE, in `pd` completing into `cq`.
fn small_spec(pd: u32, cq: u32) -> QpSpec {
    QpSpec {
        pd,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
        ack_req_every: 16,
        max_inflight_psns: 1024,
        multipath: None,
        srq: None,
    }
}

/// The consumer end of CQ `cq` (8 slots) of attachment `app`.
fn cq_ring(h: &Host, app: u32, cq: u32) -> Ring {
    let fd = h.apps[&app].cqs[&CqId(cq)]
        .ring
        .region()
        .fd()
        .try_clone_to_owned()
        .unwrap();
    let len = Ring::region_len(8, rocev2_ipc::proto::SLOT_SIZE) as u64;
    Ring::open(
        Region::from_fd(fd, len).unwrap(),
        8,
        rocev2_ipc::proto::SLOT_SIZE,
        End::Consumer,
    )
    .unwrap()
}

fn sq(fds: &[OwnedFd]) -> Ring {
    let fd = fds[0].try_clone().unwrap();
    let len = Ring::region_len(4, rocev2_ipc::proto::SLOT_SIZE) as u64;
    Ring::open(
        Region::from_fd(fd, len).unwrap(),
        4,
        rocev2_ipc::proto::SLOT_SIZE,
        End::Producer,
    )
    .unwrap()
}

#[test]
fn an_application_cannot_name_another_applications_objects() {
    let (mut h, mut ep, mut mem) = host(Limits::default());
    let (a, _ca, _) = attach(&mut h);
    let (b, _cb, _) = attach(&mut h);
    let (pd, cq, qpn, _) = qp(&mut h, &mut ep, &mut mem, a);
    for req in [
        Request::DeallocPd { pd },
        Request::DestroyCq { cq },
        Request::DestroyQp { qpn },
        Request::QueryQp { qpn },
        Request::ModifyToError { qpn },
        Request::DeregMr { mr: 0 },
    ] {
        expect_refusal(
            &ask(&mut h, &mut ep, &mut mem, b, req),
            ErrorKind::UnknownHandle,
        );
    }
    let region = Region::create("t", 4096).unwrap();
    let reg = Request::RegMr {
        pd,
        len: 4096,
        access: 1,
        at: None,
    };
    let r = h.request(
        &mut ep,
        &mut mem,
        Instant::ZERO,
        b,
        reg,
        vec![region.fd().try_clone_to_owned().unwrap()],
    );
    expect_refusal(&r, ErrorKind::UnknownHandle);
    // A's objects are intact.
    assert!(matches!(
        ask(&mut h, &mut ep, &mut mem, a, Request::QueryQp { qpn }).response,
        Response::QpStatus {
            state: 1,
            multipath: false,
            error: None
        }
    ));
    assert_eq!(h.counters().refused_requests, 7);
}

#[test]
fn limits_and_bad_memory_are_refused_with_reasons() {
    let limits = Limits {
        max_qps: 1,
        max_cqs: 2,
        max_ahs: 1,
        max_mr_bytes: 8192,
        ..Limits::default()
    };
    let (mut h, mut ep, mut mem) = host(limits);
    let (a, _c, _) = attach(&mut h);
    let (pd, cq, _, _) = qp(&mut h, &mut ep, &mut mem, a);
    let spec = QpSpec {
        pd,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
        ack_req_every: 16,
        max_inflight_psns: 1024,
        multipath: None,
        srq: None,
    };
    expect_refusal(
        &ask(&mut h, &mut ep, &mut mem, a, Request::CreateQp(spec)),
        ErrorKind::Limit,
    );
    let mut reg = |len: u64, fds: Vec<OwnedFd>| {
        h.request(
            &mut ep,
            &mut mem,
            Instant::ZERO,
            a,
            Request::RegMr {
                pd,
                len,
                access: 1,
                at: None,
            },
            fds,
        )
    };
    // Over the byte limit, without its memfd, with an unsealed one, with a wrong size.
    expect_refusal(&reg(1 << 20, Vec::new()), ErrorKind::Limit);
    expect_refusal(&reg(4096, Vec::new()), ErrorKind::Invalid);
    let plain = rustix::fs::memfd_create("t", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&plain, 4096).unwrap();
    expect_refusal(&reg(4096, vec![plain]), ErrorKind::Invalid);
    let small = Region::create("t", 100).unwrap();
    expect_refusal(
        &reg(4096, vec![small.fd().try_clone_to_owned().unwrap()]),
        ErrorKind::Invalid,
    );
    let ok = Region::create("t", 4096).unwrap();
    assert!(matches!(
        reg(4096, vec![ok.fd().try_clone_to_owned().unwrap()]).response,
        Response::Mr(_)
    ));
    expect_refusal(
        &ask(
            &mut h,
            &mut ep,
            &mut mem,
            a,
            Request::CreateCq { capacity: 0 },
        ),
        ErrorKind::Invalid,
    );
    let huge = Request::CreateCq { capacity: u32::MAX };
    expect_refusal(&ask(&mut h, &mut ep, &mut mem, a, huge), ErrorKind::Invalid);
    ask(
        &mut h,
        &mut ep,
        &mut mem,
        a,
        Request::CreateCq { capacity: 4 },
    );
    expect_refusal(
        &ask(
            &mut h,
            &mut ep,
            &mut mem,
            a,
            Request::CreateCq { capacity: 4 },
        ),
        ErrorKind::Limit,
    );
}

/// Rings count against `max_ring_bytes` whoever makes them (CQ, RC QP, UD QP), the refusal
/// names the key, and destroying an object gives its rings' bytes back.
#[test]
fn ring_bytes_are_bounded_and_given_back() {
    let ring = |slots| Ring::region_len(slots, rocev2_ipc::proto::SLOT_SIZE) as u64;
    // `qp` makes an 8-slot CQ and a QP of 4 + 4 slots; room for exactly one more such QP.
    let max_ring_bytes = ring(8) + 4 * ring(4);
    let (mut h, mut ep, mut mem) = host(Limits {
        max_ring_bytes,
        ..Limits::default()
    });
    let (a, _c, _) = attach(&mut h);
    let (pd, cq, qpn, _) = qp(&mut h, &mut ep, &mut mem, a);
    let bytes = |h: &Host| h.snapshot()[0].ring_bytes;
    assert_eq!(bytes(&h), ring(8) + 2 * ring(4));
    let ud = |h: &mut Host, ep: &mut Endpoint, mem: &mut HostMemory| {
        let spec = small_spec(pd, cq);
        let req = Request::CreateUdQp {
            spec,
            q_key: 0x1111,
            sq_psn: 0,
        };
        ask(h, ep, mem, a, req)
    };
    assert!(matches!(
        ud(&mut h, &mut ep, &mut mem).response,
        Response::UdQp { .. }
    ));
    assert_eq!(bytes(&h), max_ring_bytes);
    // Full: a CQ of one slot, an RC QP and a UD QP are each refused, naming the key.
    let refused = [
        ask(
            &mut h,
            &mut ep,
            &mut mem,
            a,
            Request::CreateCq { capacity: 1 },
        ),
        ask(
            &mut h,
            &mut ep,
            &mut mem,
            a,
            Request::CreateQp(small_spec(pd, cq)),
        ),
        ud(&mut h, &mut ep, &mut mem),
    ];
    for r in &refused {
        expect_refusal(r, ErrorKind::Limit);
        let Response::Error { message, .. } = &r.response else {
            unreachable!()
        };
        assert!(message.contains("max_ring_bytes"), "{message}");
    }
    assert_eq!(bytes(&h), max_ring_bytes);
    // Destroying the RC QP makes room for another.
    ask(&mut h, &mut ep, &mut mem, a, Request::DestroyQp { qpn });
    assert_eq!(bytes(&h), ring(8) + 2 * ring(4));
    let r = ask(
        &mut h,
        &mut ep,
        &mut mem,
        a,
        Request::CreateQp(small_spec(pd, cq)),
    );
    assert!(
        matches!(r.response, Response::Qp { .. }),
        "{:?}",
        r.response
    );
}

#[test]
fn a_request_the_engine_refuses_completes_with_an_error() {
    let (mut h, mut ep, mut mem) = host(Limits::default());
    let (a, _c, _) = attach(&mut h);
    let (_, cq, qpn, fds) = qp(&mut h, &mut ep, &mut mem, a);
    let cq_fd = {
        // The CQ's ring, from a second CreateCq's layout: reopen ours through the host's.
        let app = h.apps.get(&a).unwrap();
        app.cqs
            .get(&CqId(cq))
            .unwrap()
            .ring
            .region()
            .fd()
            .try_clone_to_owned()
            .unwrap()
    };
    let mut sq = sq(&fds);
    // The QP is in INIT: a SEND there is refused by the engine (wrong state).
    let wr = SendWr::new(42, SendOp::Send);
    assert_eq!(sq.push(&record::encode(&SendRecord::from(&wr))), Ok(true));
    assert!(h.service(&mut ep, &mut mem, Instant::ZERO));
    let len = Ring::region_len(8, rocev2_ipc::proto::SLOT_SIZE) as u64;
    let mut ring = Ring::open(
        Region::from_fd(cq_fd, len).unwrap(),
        8,
        rocev2_ipc::proto::SLOT_SIZE,
        End::Consumer,
    )
    .unwrap();
    let mut buf = Vec::new();
    assert_eq!(ring.pop(&mut buf), Ok(true));
    let wc = WorkCompletion::try_from(record::decode::<CompletionRecord>(&buf).unwrap()).unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (42, WcStatus::LocQpOpErr, WcOpcode::Send)
    );
    assert_eq!(wc.qp_num.value(), qpn);
    assert_eq!(h.counters().refused_work_requests, 1);
    assert_eq!(h.len(), 1);
    // Asleep, the application gets its eventfd signalled with the next completion; awake, not.
    let event = {
        let app = h.apps.get(&a).unwrap();
        app.cqs
            .get(&CqId(cq))
            .unwrap()
            .event
            .as_fd()
            .try_clone_to_owned()
            .unwrap()
    };
    let event = EventFd::from_fd(event);
    ring.set_asleep(true);
    sq.push(&record::encode(&SendRecord::from(&wr))).unwrap();
    h.service(&mut ep, &mut mem, Instant::ZERO);
    assert!(event.clear(), "a sleeping consumer is woken");
    ring.set_asleep(false);
    sq.push(&record::encode(&SendRecord::from(&wr))).unwrap();
    h.service(&mut ep, &mut mem, Instant::ZERO);
    assert!(!event.clear(), "an awake consumer is not");
}

#[test]
fn refused_requests_of_an_application_that_reads_no_completion_stay_bounded() {
    let (mut h, mut ep, mut mem) = host(Limits::default());
    let (a, _c, _) = attach(&mut h);
    // The QP stays in INIT, so every SEND is refused; its CQ (8 slots) is never read.
    let (_, cq, _, fds) = qp(&mut h, &mut ep, &mut mem, a);
    let mut sq = sq(&fds);
    let wr = SendWr::new(1, SendOp::Send);
    let mut pushed = 0;
    for _ in 0..100 {
        while sq.push(&record::encode(&SendRecord::from(&wr))) == Ok(true) {
            pushed += 1;
        }
        h.service(&mut ep, &mut mem, Instant::ZERO);
    }
    let share = &h.apps[&a].cqs[&CqId(cq)];
    // The CQ ring holds 8, the daemon at most 8 more: the rest stays in the SQ ring.
    assert!(share.made.len() <= 8, "{} queued", share.made.len());
    assert!(pushed < 100, "the producer was stopped: {pushed} pushed");
    assert_eq!(h.counters().refused_work_requests, 16);
    assert!(
        !h.service(&mut ep, &mut mem, Instant::ZERO),
        "nothing moves: the loop may sleep"
    );
    // Once the application reads its completions, the daemon takes requests again.
    let mut ring = cq_ring(&h, a, cq);
    let mut buf = Vec::new();
    while ring.pop(&mut buf) == Ok(true) {}
    // One pass delivers the daemon's queued completions, the next takes requests again.
    assert!(h.service(&mut ep, &mut mem, Instant::ZERO));
    h.service(&mut ep, &mut mem, Instant::ZERO);
    assert!(h.counters().refused_work_requests > 16);
}

#[test]
fn garbage_in_a_ring_closes_the_attachment_and_frees_everything() {
    let (mut h, mut ep, mut mem) = host(Limits::default());
    let (a, app_end, _) = attach(&mut h);
    let (b, _cb, _) = attach(&mut h);
    let (pd, _, _, fds) = qp(&mut h, &mut ep, &mut mem, a);
    let region = Region::create("t", 4096).unwrap();
    let r = h.request(
        &mut ep,
        &mut mem,
        Instant::ZERO,
        a,
        Request::RegMr {
            pd,
            len: 4096,
            access: 1,
            at: None,
        },
        vec![region.fd().try_clone_to_owned().unwrap()],
    );
    assert!(matches!(r.response, Response::Mr(_)));
    let (_, _, qpn_b, _) = qp(&mut h, &mut ep, &mut mem, b);
    let mut sq = sq(&fds);
    assert_eq!(sq.push(&[0xff; 40]), Ok(true));
    h.service(&mut ep, &mut mem, Instant::ZERO);
    assert_eq!(h.counters().closed_corrupt, 1);
    assert_eq!(h.len(), 1, "only the corrupt attachment is closed");
    // Its QP, CQ and region are gone from the engine and unmapped; B's QP is untouched.
    assert_eq!(ep.qps().count(), 1);
    assert_eq!(ep.qps().next().unwrap().qpn().value(), qpn_b);
    assert!(mem.is_empty());
    // The application sees its connection shut down.
    let mut byte = [0u8; 1];
    assert_eq!(std::io::Read::read(&mut &app_end, &mut byte).unwrap(), 0);
}

#[test]
fn detach_destroys_every_object_and_ids_are_not_reused_across_apps() {
    let (mut h, mut ep, mut mem) = host(Limits::default());
    for _ in 0..3 {
        let (a, _c, _) = attach(&mut h);
        let (pd, _, _, _) = qp(&mut h, &mut ep, &mut mem, a);
        let region = Region::create("t", 4096).unwrap();
        h.request(
            &mut ep,
            &mut mem,
            Instant::ZERO,
            a,
            Request::RegMr {
                pd,
                len: 4096,
                access: 1,
                at: None,
            },
            vec![region.fd().try_clone_to_owned().unwrap()],
        );
        assert_eq!(mem.len(), 1);
        h.detach(&mut ep, &mut mem, Instant::ZERO, a);
        assert_eq!(ep.qps().count(), 0);
        assert!(mem.is_empty());
        assert!(h.is_empty());
        // A stale id answers nothing.
        expect_refusal(
            &ask(&mut h, &mut ep, &mut mem, a, Request::AllocPd),
            ErrorKind::UnknownHandle,
        );
    }
    assert_eq!(h.counters().attached, 3);
    assert_eq!(h.counters().detached, 3);
}

#[test]
fn cm_service_ids_and_connections_belong_to_one_application() {
    let (mut h, mut ep, mut mem) = host(Limits::default());
    let (a, _ca, _) = attach(&mut h);
    let (b, _cb, _) = attach(&mut h);
    let (_, _, qpn_a, _) = qp(&mut h, &mut ep, &mut mem, a);
    let (_, _, qpn_b, _) = qp(&mut h, &mut ep, &mut mem, b);
    let service_id = 0x0106_1c06;
    let listen = Request::CmListen { service_id };
    assert_eq!(
        ask(&mut h, &mut ep, &mut mem, a, listen.clone()).response,
        Response::Done
    );
    // Taken: by another application, or by this one.
    expect_refusal(
        &ask(&mut h, &mut ep, &mut mem, b, listen.clone()),
        ErrorKind::InUse,
    );
    expect_refusal(
        &ask(&mut h, &mut ep, &mut mem, a, listen.clone()),
        ErrorKind::InUse,
    );
    // B cannot give up A's listen.
    assert_eq!(
        ask(
            &mut h,
            &mut ep,
            &mut mem,
            b,
            Request::CmUnlisten { service_id }
        )
        .response,
        Response::Listened(false)
    );
    // A connects with its own QP, not with B's.
    let spec = rocev2_ipc::cm::ConnectSpec::from(&rocev2_core::cm::ConnectParams::new(
        rocev2_core::cm::ServiceId(0x0106_1c07),
        "::ffff:10.0.0.1".parse().unwrap(),
        "::ffff:10.0.0.2".parse().unwrap(),
        Qpn::new(0),
        rocev2_core::wire::Psn::new(5),
    ));
    let connect = |qpn| Request::CmConnect {
        qpn,
        spec: spec.clone(),
        mac: Some([2, 0, 0, 0, 0, 2]),
        resolve_timeout_ms: 0,
    };
    expect_refusal(
        &ask(&mut h, &mut ep, &mut mem, a, connect(qpn_b)),
        ErrorKind::UnknownHandle,
    );
    let Response::CmConn(comm_id) = ask(&mut h, &mut ep, &mut mem, a, connect(qpn_a)).response
    else {
        panic!("A could not connect its own QP")
    };
    // Only A may act on its connection; B may not even accept it onto B's own QP.
    let accept = rocev2_ipc::cm::AcceptSpec::from(&rocev2_core::cm::AcceptParams::new(
        Qpn::new(qpn_b),
        rocev2_core::wire::Psn::new(1),
    ));
    for req in [
        Request::CmDisconnect {
            comm_id,
            private_data: vec![],
        },
        Request::CmReject {
            comm_id,
            reason: 28,
            private_data: vec![],
        },
        Request::CmAccept {
            comm_id,
            spec: accept.clone(),
        },
    ] {
        expect_refusal(
            &ask(&mut h, &mut ep, &mut mem, b, req),
            ErrorKind::UnknownHandle,
        );
    }
    // Each application polls its own events only (none yet: no peer answered).
    assert_eq!(
        ask(&mut h, &mut ep, &mut mem, b, Request::CmPoll { max: 8 }).response,
        Response::CmEvents(vec![])
    );
    // A's CM eventfd comes with CmEnable.
    assert_eq!(
        ask(&mut h, &mut ep, &mut mem, a, Request::CmEnable)
            .fds
            .len(),
        1
    );
    // A goes: its listen is free for B.
    h.detach(&mut ep, &mut mem, Instant::ZERO, a);
    assert_eq!(
        ask(&mut h, &mut ep, &mut mem, b, listen).response,
        Response::Done
    );
    assert_eq!(
        ask(
            &mut h,
            &mut ep,
            &mut mem,
            b,
            Request::CmUnlisten { service_id }
        )
        .response,
        Response::Listened(true)
    );
}

/// Carries frames from one host's engine to the other's, and routes the CM events on both.
fn carry(from: &mut (Host, Endpoint, HostMemory), to: &mut (Host, Endpoint, HostMemory)) -> bool {
    let mut buf = Vec::new();
    let mut moved = false;
    while let Some(n) = from.1.poll_transmit(Instant::ZERO, &mut from.2, &mut buf) {
        to.1.handle_frame(Instant::ZERO, &buf[..n], &mut to.2)
            .expect("frame accepted");
        moved = true;
    }
    moved |= from.0.service(&mut from.1, &mut from.2, Instant::ZERO);
    moved | to.0.service(&mut to.1, &mut to.2, Instant::ZERO)
}

/// [`carry`] both ways until nothing moves.
fn shuttle(x: &mut (Host, Endpoint, HostMemory), y: &mut (Host, Endpoint, HostMemory)) {
    while carry(x, y) | carry(y, x) {}
}

fn events(h: &mut (Host, Endpoint, HostMemory), app: u32) -> Vec<rocev2_core::cm::Event> {
    let r = ask(
        &mut h.0,
        &mut h.1,
        &mut h.2,
        app,
        Request::CmPoll { max: 64 },
    );
    let Response::CmEvents(records) = r.response else {
        panic!("{:?}", r.response)
    };
    records
        .into_iter()
        .map(|r| rocev2_core::cm::Event::try_from(r).unwrap())
        .collect()
}

#[test]
fn cm_events_reach_only_their_application_and_a_dying_one_sends_a_dreq() {
    use rocev2_core::cm::{AcceptParams, ConnectParams, Event, ServiceId};
    use rocev2_core::wire::Psn;
    let mut x = host_at(Limits::default(), 1);
    let mut y = host_at(Limits::default(), 2);
    // On x: application 1 listens on port 7174's service, application 2 on 7175's.
    let (a1, _c1, _) = attach(&mut x.0);
    let (a2, _c2, _) = attach(&mut x.0);
    let (_, _, qpn1, _) = qp(&mut x.0, &mut x.1, &mut x.2, a1);
    let svc = |port: u64| ServiceId(0x0106_0000 | port);
    for (app, port) in [(a1, 7174), (a2, 7175)] {
        let r = ask(
            &mut x.0,
            &mut x.1,
            &mut x.2,
            app,
            Request::CmListen {
                service_id: svc(port).0,
            },
        );
        assert_eq!(r.response, Response::Done);
        ask(&mut x.0, &mut x.1, &mut x.2, app, Request::CmEnable);
    }
    // On y: application 3 connects to 7174.
    let (a3, _c3, _) = attach(&mut y.0);
    let (_, _, qpn3, _) = qp(&mut y.0, &mut y.1, &mut y.2, a3);
    let params = ConnectParams::new(
        svc(7174),
        "::ffff:10.0.0.2".parse().unwrap(),
        "::ffff:10.0.0.1".parse().unwrap(),
        Qpn::new(0),
        Psn::new(100),
    );
    let r = ask(
        &mut y.0,
        &mut y.1,
        &mut y.2,
        a3,
        Request::CmConnect {
            qpn: qpn3,
            spec: (&params).into(),
            mac: Some([2, 0, 0, 0, 0, 1]),
            resolve_timeout_ms: 0,
        },
    );
    let Response::CmConn(active) = r.response else {
        panic!("{:?}", r.response)
    };
    shuttle(&mut x, &mut y);
    // The request is application 1's alone.
    assert!(events(&mut x, a2).is_empty());
    let got = events(&mut x, a1);
    let [Event::ConnectRequest(req)] = &got[..] else {
        panic!("{got:?}")
    };
    assert_eq!(req.req.service_id, svc(7174).0);
    // Application 2 cannot answer it; application 1 accepts with its own QP.
    let accept = |qpn| Request::CmAccept {
        comm_id: req.conn.comm_id(),
        spec: (&AcceptParams::new(Qpn::new(qpn), Psn::new(200))).into(),
    };
    expect_refusal(
        &ask(&mut x.0, &mut x.1, &mut x.2, a2, accept(qpn1)),
        ErrorKind::UnknownHandle,
    );
    assert_eq!(
        ask(&mut x.0, &mut x.1, &mut x.2, a1, accept(qpn1)).response,
        Response::Done
    );
    shuttle(&mut x, &mut y);
    let up = |evs: Vec<Event>| matches!(&evs[..], [Event::Established { .. }]);
    assert!(up(events(&mut y, a3)));
    assert!(up(events(&mut x, a1)));
    assert!(events(&mut x, a2).is_empty());
    // Application 1 dies: the daemon sends the DREQ its CM ID would have.
    x.0.detach(&mut x.1, &mut x.2, Instant::ZERO, a1);
    shuttle(&mut x, &mut y);
    let got = events(&mut y, a3);
    assert!(
        matches!(&got[..], [Event::Disconnected { conn, .. }] if conn.comm_id() == active),
        "{got:?}"
    );
    assert_eq!(x.0.counters().cm_orphans_closed, 1);
    assert!(events(&mut x, a2).is_empty());
}

/// A UD QP with Q_Key 0x77 (RTS at once).
fn ud_qp(spec: QpSpec) -> Request {
    Request::CreateUdQp {
        spec,
        q_key: 0x77,
        sq_psn: 5,
    }
}

#[test]
fn ud_address_handles_are_their_applications_own_and_count_against_its_limit() {
    let limits = Limits {
        max_ahs: 1,
        ..Limits::default()
    };
    let (mut h, mut ep, mut mem) = host(limits);
    let (a, _ca, _) = attach(&mut h);
    let (b, _cb, _) = attach(&mut h);
    let to = |mac| Request::CreateAh {
        ip: std::net::IpAddr::V4([10, 0, 0, 2].into()),
        mac,
        dscp: 26,
        resolve_timeout_ms: 0,
    };
    let peer_mac = Some([2, 0, 0, 0, 0, 2]);
    let Response::Ah(ah) = ask(&mut h, &mut ep, &mut mem, a, to(peer_mac)).response else {
        panic!()
    };
    let r = ask(&mut h, &mut ep, &mut mem, a, to(peer_mac));
    expect_refusal(&r, ErrorKind::Limit);
    // The control plane resolves the MAC first; none reaching the host is a path failure.
    expect_refusal(
        &ask(&mut h, &mut ep, &mut mem, b, to(None)),
        ErrorKind::Path,
    );
    let destroy = Request::DestroyAh { ah };
    expect_refusal(
        &ask(&mut h, &mut ep, &mut mem, b, destroy.clone()),
        ErrorKind::UnknownHandle,
    );

    // B's UD send naming A's handle: refused with an error completion, nothing leaves.
    let (_, b_cq, b_qpn, b_fds) = qp_with(&mut h, &mut ep, &mut mem, b, ud_qp);
    let r = ask(
        &mut h,
        &mut ep,
        &mut mem,
        b,
        Request::QueryQp { qpn: b_qpn },
    );
    assert_eq!(
        r.response,
        Response::QpStatus {
            state: QpState::Rts.as_ibv(),
            multipath: false,
            error: None
        }
    );
    let send = |wr_id| {
        let wr = SendWr::new(wr_id, SendOp::Send).inline(b"datagram".to_vec());
        let ud = record::UdRecord {
            ah,
            remote_qpn: 0x99,
            remote_qkey: 0x77,
        };
        record::encode(&SendRecord::from(&wr).with_ud(ud))
    };
    sq(&b_fds).push(&send(1)).unwrap();
    h.service(&mut ep, &mut mem, Instant::ZERO);
    let mut buf = Vec::new();
    assert_eq!(cq_ring(&h, b, b_cq).pop(&mut buf), Ok(true));
    let wc = WorkCompletion::try_from(record::decode::<CompletionRecord>(&buf).unwrap()).unwrap();
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::LocQpOpErr));
    let mut frame = Vec::new();
    assert_eq!(ep.poll_transmit(Instant::ZERO, &mut mem, &mut frame), None);

    // A's own send through it leaves from the daemon's MAC and address.
    let (_, a_cq, a_qpn, a_fds) = qp_with(&mut h, &mut ep, &mut mem, a, ud_qp);
    sq(&a_fds).push(&send(2)).unwrap();
    h.service(&mut ep, &mut mem, Instant::ZERO);
    let n = ep
        .poll_transmit(Instant::ZERO, &mut mem, &mut frame)
        .expect("A's datagram");
    let f = &frame[..n];
    assert_eq!(&f[0..6], &[2, 0, 0, 0, 0, 2], "to the resolved next hop");
    assert_eq!(&f[6..12], &[2, 0, 0, 0, 0, 1], "from the daemon's MAC");
    assert_eq!(&f[26..30], &[10, 0, 0, 1], "from the daemon's address");
    assert_eq!(&f[30..34], &[10, 0, 0, 2]);
    // BTH (at 42): destination QP 0x99; DETH (at 54): Q_Key 0x77, source QP A's.
    assert_eq!(&f[47..50], &[0, 0, 0x99]);
    assert_eq!(&f[54..58], &0x77u32.to_be_bytes());
    assert_eq!(&f[59..62], &a_qpn.to_be_bytes()[1..]);
    h.service(&mut ep, &mut mem, Instant::ZERO);
    assert_eq!(cq_ring(&h, a, a_cq).pop(&mut buf), Ok(true));
    let wc = WorkCompletion::try_from(record::decode::<CompletionRecord>(&buf).unwrap()).unwrap();
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success));

    // Destroyed, the handle frees A's quota.
    assert_eq!(
        ask(&mut h, &mut ep, &mut mem, a, destroy.clone()).response,
        Response::Done
    );
    expect_refusal(
        &ask(&mut h, &mut ep, &mut mem, a, destroy),
        ErrorKind::UnknownHandle,
    );
    assert!(matches!(
        ask(&mut h, &mut ep, &mut mem, a, to(peer_mac)).response,
        Response::Ah(_)
    ));
}

#[test]
fn mp_snapshot_answers_only_the_applications_own_qp() {
    let (mut h, mut ep, mut mem) = host(Limits::default());
    let (a, _ca, _) = attach(&mut h);
    let (b, _cb, _) = attach(&mut h);
    let mp = MpConfig::paper();
    let (_, _, mp_qpn, _) = qp_with(&mut h, &mut ep, &mut mem, a, |mut spec| {
        spec.multipath = Some(rocev2_ipc::proto::MpSpec {
            iw: mp.iw,
            bitmap_len: mp.bitmap_len,
            delta: mp.delta,
            sync_alpha: mp.sync_alpha,
            probe_p: mp.probe_p,
            initial_rtt_ns: mp.initial_rtt.as_nanos(),
            idle_restart_rtts: mp.idle_restart_rtts,
            early_retx_rtts: mp.early_retx_rtts,
            vp_base: mp.vp_base,
            vp_count: mp.vp_count,
            seed: mp.seed,
        });
        Request::CreateQp(spec)
    });
    let (_, _, rc_qpn, _) = qp(&mut h, &mut ep, &mut mem, a);
    // The peer announced multipath: the QP runs MP-RDMA once connected.
    let connect = |qpn| Request::Connect {
        qpn,
        spec: ConnectSpec {
            dest_qpn: 0x99,
            remote_psn: 0,
            ip: std::net::IpAddr::V4([10, 0, 0, 2].into()),
            mac: Some([2, 0, 0, 0, 0, 2]),
            local_psn: 0,
            mtu: 1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            rd_atomic: 1,
            dscp: 26,
            resolve_timeout_ms: 0,
            peer_ext: ExtCaps {
                multipath: true,
                ..Default::default()
            }
            .to_word(),
        },
    };
    for qpn in [mp_qpn, rc_qpn] {
        let r = ask(&mut h, &mut ep, &mut mem, a, connect(qpn));
        assert_eq!(r.response, Response::Done, "{:?}", r.response);
    }
    let snap = |h: &mut Host, ep: &mut Endpoint, mem: &mut HostMemory, app, qpn| {
        ask(h, ep, mem, app, Request::MpSnapshot { qpn }).response
    };
    // The owner reads what the engine holds; an RC QP has no multipath state.
    let Response::MpState(Some(state)) = snap(&mut h, &mut ep, &mut mem, a, mp_qpn) else {
        panic!("no multipath state for A's MP-RDMA QP")
    };
    let engine = ep.qp(Qpn::new(mp_qpn)).unwrap().mp_snapshot().unwrap();
    assert_eq!(rocev2_core::qp::MpSnapshot::from(state), engine);
    assert_eq!(engine.cwnd, f64::from(mp.iw));
    assert_eq!(
        snap(&mut h, &mut ep, &mut mem, a, rc_qpn),
        Response::MpState(None)
    );
    let before = h.counters().refused_requests;
    // Another application cannot read it, nor can anyone name a QP no one has.
    for (app, qpn) in [(b, mp_qpn), (b, rc_qpn), (a, 0xab_cdef)] {
        let r = ask(&mut h, &mut ep, &mut mem, app, Request::MpSnapshot { qpn });
        expect_refusal(&r, ErrorKind::UnknownHandle);
    }
    assert_eq!(h.counters().refused_requests, before + 3);
}

#[test]
fn cm_mra_is_sent_only_for_the_applications_own_request_and_the_peer_holds_its_req() {
    use rocev2_core::cm::{ConnectParams, Event, ServiceId, State};
    use rocev2_core::wire::Psn;
    let mut x = host_at(Limits::default(), 1);
    let mut y = host_at(Limits::default(), 2);
    let (a1, _c1, _) = attach(&mut x.0);
    let (a2, _c2, _) = attach(&mut x.0);
    let svc = ServiceId(0x0106_0000 | 7174);
    let r = ask(
        &mut x.0,
        &mut x.1,
        &mut x.2,
        a1,
        Request::CmListen { service_id: svc.0 },
    );
    assert_eq!(r.response, Response::Done);
    ask(&mut x.0, &mut x.1, &mut x.2, a1, Request::CmEnable);
    let (a3, _c3, _) = attach(&mut y.0);
    let (_, _, qpn3, _) = qp(&mut y.0, &mut y.1, &mut y.2, a3);
    let params = ConnectParams::new(
        svc,
        "::ffff:10.0.0.2".parse().unwrap(),
        "::ffff:10.0.0.1".parse().unwrap(),
        Qpn::new(0),
        Psn::new(100),
    );
    let r = ask(
        &mut y.0,
        &mut y.1,
        &mut y.2,
        a3,
        Request::CmConnect {
            qpn: qpn3,
            spec: (&params).into(),
            mac: Some([2, 0, 0, 0, 0, 1]),
            resolve_timeout_ms: 0,
        },
    );
    let Response::CmConn(active) = r.response else {
        panic!("{:?}", r.response)
    };
    shuttle(&mut x, &mut y);
    let got = events(&mut x, a1);
    let [Event::ConnectRequest(req)] = &got[..] else {
        panic!("{got:?}")
    };
    let mra = Request::CmSendMra {
        comm_id: req.conn.comm_id(),
        service_timeout: 24,
    };
    let before = x.0.counters().refused_requests;
    expect_refusal(
        &ask(&mut x.0, &mut x.1, &mut x.2, a2, mra.clone()),
        ErrorKind::UnknownHandle,
    );
    assert_eq!(x.0.counters().refused_requests, before + 1);
    let active = rocev2_core::cm::ConnId::from_comm_id(active);
    let peer_state = |y: &(Host, Endpoint, HostMemory)| y.1.cm().unwrap().state(active);
    assert_eq!(peer_state(&y), Some(State::ReqSent));
    assert_eq!(
        ask(&mut x.0, &mut x.1, &mut x.2, a1, mra.clone()).response,
        Response::Done
    );
    shuttle(&mut x, &mut y);
    // The active side's CM saw the MRA: it holds its REQ for the service timeout.
    assert_eq!(peer_state(&y), Some(State::MraReqRcvd));
    assert_eq!(x.1.cm().unwrap().state(req.conn), Some(State::MraReqSent));
}

/// An attachment of user `uid`.
fn attach_as(h: &mut Host, uid: u32) -> (u32, UnixStream) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let (id, _bell) = h.attach(Creds { pid: 2, uid }, ours.into()).unwrap();
    (id, theirs)
}

#[test]
fn region_count_listens_privileged_ports_and_controlled_qkeys_are_bounded() {
    let limits = Limits {
        max_mrs: 2,
        max_listens: 2,
        ..Limits::default()
    };
    let (mut h, mut ep, mut mem) = host(limits);
    let (user, _c) = attach_as(&mut h, 1000);
    let Response::Pd(pd) = ask(&mut h, &mut ep, &mut mem, user, Request::AllocPd).response else {
        panic!()
    };
    // Zero-length regions cost no bytes, but count.
    let reg = |h: &mut Host, ep: &mut Endpoint, mem: &mut HostMemory| {
        let region = Region::create("t", 1).unwrap();
        let req = Request::RegMr {
            pd,
            len: 0,
            access: 1,
            at: None,
        };
        let fd = region.fd().try_clone_to_owned().unwrap();
        h.request(ep, mem, Instant::ZERO, user, req, vec![fd])
    };
    for _ in 0..2 {
        let r = reg(&mut h, &mut ep, &mut mem);
        assert!(matches!(r.response, Response::Mr(_)), "{:?}", r.response);
    }
    expect_refusal(&reg(&mut h, &mut ep, &mut mem), ErrorKind::Limit);
    assert_eq!(
        ask(&mut h, &mut ep, &mut mem, user, Request::CmEnable).response,
        Response::CmEnabled
    );
    let listen = |port: u16| Request::CmListen {
        service_id: ServiceId::rdma_cm(rocev2_core::cm::PortSpace::TCP, port).0,
    };
    // rping's 7174 is anyone's; 80 only root's, as with the kernel's rdma_cm.
    expect_refusal(
        &ask(&mut h, &mut ep, &mut mem, user, listen(80)),
        ErrorKind::Invalid,
    );
    for port in [7174, 7175] {
        let r = ask(&mut h, &mut ep, &mut mem, user, listen(port));
        assert_eq!(r.response, Response::Done);
    }
    expect_refusal(
        &ask(&mut h, &mut ep, &mut mem, user, listen(7176)),
        ErrorKind::Limit,
    );
    let (root, _r) = attach_as(&mut h, 0);
    let _ = ask(&mut h, &mut ep, &mut mem, root, Request::CmEnable);
    assert_eq!(
        ask(&mut h, &mut ep, &mut mem, root, listen(80)).response,
        Response::Done
    );
    // The GSI's controlled Q_Key is root's alone.
    let ud = |q_key| {
        move |spec| Request::CreateUdQp {
            spec,
            q_key,
            sq_psn: 0,
        }
    };
    let (_, _, _, _) = qp_with(&mut h, &mut ep, &mut mem, user, ud(0x1234));
    let Response::Pd(pd) = ask(&mut h, &mut ep, &mut mem, user, Request::AllocPd).response else {
        panic!()
    };
    let Response::Cq { id: cq, .. } = ask(
        &mut h,
        &mut ep,
        &mut mem,
        user,
        Request::CreateCq { capacity: 8 },
    )
    .response
    else {
        panic!()
    };
    let spec = small_spec(pd, cq);
    let r = ask(&mut h, &mut ep, &mut mem, user, ud(0x8001_0000)(spec));
    expect_refusal(&r, ErrorKind::Invalid);
}

#[test]
fn a_user_holds_at_most_its_attachments() {
    let limits = Limits {
        max_apps_per_user: 2,
        ..Limits::default()
    };
    let (mut h, _ep, _mem) = host(limits);
    let _a = attach_as(&mut h, 1000);
    let _b = attach_as(&mut h, 1000);
    let (ours, _theirs) = UnixStream::pair().unwrap();
    let refused = h.attach(Creds { pid: 3, uid: 1000 }, ours.into());
    match refused {
        Err(Refusal(kind, message)) => {
            assert_eq!(kind, ErrorKind::Limit);
            assert!(message.contains("max_apps_per_user"), "{message}");
        }
        other => panic!("{:?}", other.map(|(id, _)| id)),
    }
    let _c = attach_as(&mut h, 1001);
    assert_eq!(h.apps.len(), 3, "another user is not held back");
}

#[test]
fn attachment_ids_skip_live_ones_when_they_wrap() {
    let (mut h, _ep, _mem) = host(Limits::default());
    let (first, _a) = attach_as(&mut h, 0);
    h.roster.set_next(u32::MAX);
    let (last, _b) = attach_as(&mut h, 0);
    assert_eq!(last, u32::MAX);
    // The next would be `first` again (ids skip 0): it is live, so it is skipped.
    let (next, _c) = attach_as(&mut h, 0);
    assert_ne!(next, first);
    assert_eq!(h.apps.len(), 3);
}

#[test]
fn region_addresses_are_distinct_while_live_and_reused_after() {
    let (mut h, mut ep, mut mem) = host(Limits::default());
    let (a, _c, _) = attach(&mut h);
    let Response::Pd(pd) = ask(&mut h, &mut ep, &mut mem, a, Request::AllocPd).response else {
        panic!()
    };
    let reg = |h: &mut Host, ep: &mut Endpoint, mem: &mut HostMemory| {
        let region = Region::create("t", 8192).unwrap();
        let req = Request::RegMr {
            pd,
            len: 8192,
            access: 1,
            at: None,
        };
        let fd = region.fd().try_clone_to_owned().unwrap();
        match h.request(ep, mem, Instant::ZERO, a, req, vec![fd]).response {
            Response::Mr(m) => m,
            other => panic!("{other:?}"),
        }
    };
    let (x, y) = (
        reg(&mut h, &mut ep, &mut mem),
        reg(&mut h, &mut ep, &mut mem),
    );
    assert!(
        x.addr + x.len <= y.addr || y.addr + y.len <= x.addr,
        "{x:?} {y:?}"
    );
    let r = ask(&mut h, &mut ep, &mut mem, a, Request::DeregMr { mr: x.id });
    assert_eq!(r.response, Response::Done);
    let z = reg(&mut h, &mut ep, &mut mem);
    assert_eq!(z.addr, x.addr, "the freed range is given out again");
    assert_ne!(z.rkey, x.rkey, "under a new key");
    assert_eq!(mem.len(), 2);
}

/// An SRQ's ring feeds the engine's SRQ as a QP's receive ring feeds its QP; a record the
/// SRQ refuses (too many SGEs: the application's side refuses it first, so only a hostile one
/// pushes it) is counted and dropped; a query first takes what waits in the ring; the ring's
/// bytes count towards the application's and go back at destroy.
#[test]
fn srq_rings_feed_the_engine_and_refused_records_are_counted() {
    let (mut h, mut ep, mut mem) = host(Limits::default());
    let (a, _c, _) = attach(&mut h);
    let Response::Pd(pd) = ask(&mut h, &mut ep, &mut mem, a, Request::AllocPd).response else {
        panic!()
    };
    let create = Request::CreateSrq {
        pd,
        max_wr: 4,
        max_sge: 1,
    };
    let r = ask(&mut h, &mut ep, &mut mem, a, create);
    let Response::Srq { id, slots } = r.response else {
        panic!("{:?}", r.response)
    };
    assert_eq!(
        (slots, r.fds.len()),
        (4, 2),
        "the limit eventfd and the ring"
    );
    let len = Ring::region_len(slots, rocev2_ipc::proto::SLOT_SIZE) as u64;
    let region = Region::from_fd(r.fds[1].try_clone().unwrap(), len).unwrap();
    let mut ring = Ring::open(region, slots, rocev2_ipc::proto::SLOT_SIZE, End::Producer).unwrap();
    let ring_bytes = h.snapshot()[0].ring_bytes;
    assert!(ring_bytes >= len, "{ring_bytes}");
    let wr = |wr_id, sges: usize| {
        let sge = Sge {
            addr: 0,
            length: 8,
            lkey: Lkey::new(1),
        };
        let wr = RecvWr {
            wr_id,
            sg_list: vec![sge; sges],
        };
        let mut buf = Vec::new();
        record::encode_into(&RecvRecord::from(&wr), &mut buf);
        buf
    };
    for rec in [wr(1, 1), wr(2, 2), wr(3, 1)] {
        assert_eq!(ring.push(&rec), Ok(true));
    }
    h.service(&mut ep, &mut mem, Instant::ZERO);
    let srq = SrqId(id);
    assert_eq!(ep.query_srq(srq).unwrap().len, 2);
    assert_eq!(h.counters().refused_work_requests, 1);
    // Pushed after the last pass: the query takes it first.
    assert_eq!(ring.push(&wr(4, 1)), Ok(true));
    let q = ask(&mut h, &mut ep, &mut mem, a, Request::QuerySrq { srq: id });
    assert!(
        matches!(q.response, Response::SrqAttr { len: 3, .. }),
        "{:?}",
        q.response
    );
    let d = ask(
        &mut h,
        &mut ep,
        &mut mem,
        a,
        Request::DestroySrq { srq: id },
    );
    assert_eq!(d.response, Response::Done);
    assert_eq!(h.snapshot()[0].ring_bytes, ring_bytes - len);
}

/// Memory registered in place with some of its pages moved onto memfds: the daemon maps
/// those pieces, reaches the rest through `/proc/self/mem`, and refuses a registration whose
/// descriptors or pieces do not add up.
#[test]
fn in_place_regions_map_the_moved_pages_they_announce() {
    use rocev2_ipc::proto::{InPlace, PagePiece};
    let (mut h, mut ep, mut mem) = host(Limits::default());
    let (a, _c, _) = attach(&mut h);
    let Response::Pd(pd) = ask(&mut h, &mut ep, &mut mem, a, Request::AllocPd).response else {
        panic!()
    };
    let buf = [7u8; 64];
    let piece = Region::create("t", 4096).unwrap();
    let reg = |h: &mut Host, ep: &mut Endpoint, mem: &mut HostMemory, p: PagePiece, n| {
        let req = Request::RegMr {
            pd,
            len: 64,
            access: 1,
            at: Some(InPlace {
                addr: buf.as_ptr() as u64,
                iova: 0x1000,
                pages: vec![p],
            }),
        };
        let mut fds = vec![rocev2_datapath::host::ProcessMemory::open_own().unwrap()];
        fds.extend((0..n).map(|_| piece.fd().try_clone_to_owned().unwrap()));
        h.request(ep, mem, Instant::ZERO, a, req, fds)
    };
    let good = PagePiece {
        offset: 16,
        len: 32,
        file_offset: 100,
        file_len: 4096,
    };
    for (p, n) in [
        (good, 0),
        (good, 2),
        (PagePiece { offset: 40, ..good }, 1),
        (
            PagePiece {
                file_len: 8192,
                ..good
            },
            1,
        ),
    ] {
        let r = reg(&mut h, &mut ep, &mut mem, p, n);
        expect_refusal(&r, ErrorKind::Invalid);
    }
    assert!(mem.is_empty(), "nothing refused is backed");
    let Response::Mr(m) = reg(&mut h, &mut ep, &mut mem, good, 1).response else {
        panic!()
    };
    let id = MrId::new(m.id);
    let Some(Backing::Process(r)) = mem.get(id) else {
        panic!()
    };
    assert_eq!(r.mapped_bytes(), 32);
    piece.write(100, &[9; 32]);
    let mut got = [0u8; 64];
    rocev2_core::mr::Memory::read(&mem, id, 0, &mut got);
    assert_eq!(got[..16], [7; 16]);
    assert_eq!(got[16..48], [9; 32]);
    assert_eq!(got[48..], [7; 16]);
}

/// Two engine shards' hosts, as `rocev2d run --queues 2` makes them: one roster and the
/// interface's listen registry shared.
#[test]
fn shards_share_attachment_ids_the_user_limit_and_service_ids() {
    use rocev2_datapath::handoff::Shard;
    let limits = Limits {
        max_apps_per_user: 2,
        ..Limits::default()
    };
    let (h0, mut ep0, mut mem0) = host(limits);
    let (h1, mut ep1, mut mem1) = host(limits);
    // An interface index of its own: the registry is keyed by namespace and index.
    let iface = Interface {
        index: 70_001,
        ..h0.iface.clone()
    };
    let (d0, d1) = rocev2_datapath::pair::pair().unwrap();
    let (s0, s1) = (
        Shard::join(&iface, 0, d0).unwrap(),
        Shard::join(&iface, 1, d1).unwrap(),
    );
    let roster = Arc::new(Roster::default());
    let cc = Arc::new(CcBoard::default());
    let mut h0 = h0.sharing(Arc::clone(&roster), s0.listens(), Arc::clone(&cc));
    let mut h1 = h1.sharing(Arc::clone(&roster), s1.listens(), cc);
    let (a, _ca) = attach_as(&mut h0, 1000);
    let (b, _cb) = attach_as(&mut h1, 1000);
    assert_ne!(a, b, "one id space for the host");
    let (ours, _theirs) = UnixStream::pair().unwrap();
    let refused = h0.attach(Creds { pid: 3, uid: 1000 }, ours.into());
    assert!(
        matches!(&refused, Err(Refusal(ErrorKind::Limit, m)) if m.contains("max_apps_per_user")),
        "the user's two attachments are on two shards: {:?}",
        refused.map(|(id, _)| id)
    );
    let service = ServiceId::rdma_cm(rocev2_core::cm::PortSpace::TCP, 7174).0;
    let listen = |h: &mut Host, ep: &mut Endpoint, mem: &mut HostMemory, app| {
        ask(
            h,
            ep,
            mem,
            app,
            Request::CmListen {
                service_id: service,
            },
        )
    };
    assert!(matches!(
        listen(&mut h0, &mut ep0, &mut mem0, a).response,
        Response::Done
    ));
    let r = listen(&mut h1, &mut ep1, &mut mem1, b);
    expect_refusal(&r, ErrorKind::InUse);
    // Its owner going frees it for the other shard.
    h0.detach(&mut ep0, &mut mem0, Instant::ZERO, a);
    assert!(matches!(
        listen(&mut h1, &mut ep1, &mut mem1, b).response,
        Response::Done
    ));
    let (c, _cc) = attach_as(&mut h0, 1000);
    assert_ne!(
        c, b,
        "a detached id's place is given back, a live one's never"
    );
}

/// Two engine shards' hosts with Dart's receiver, as `rocev2d run --queues 2 --cc dart` makes
/// them: DASR's N and throughput are the host's, through the board their services exchange.
#[test]
fn shards_share_one_receivers_congestion_state() {
    use rocev2_core::cc::{CcScheme, CcTuning, DartState, DataArrival};
    use rocev2_core::time::{Duration, Rate};
    use rocev2_datapath::handoff::Shard;
    let (h0, mut ep0, mut mem0) = host(Limits::default());
    let (h1, mut ep1, mut mem1) = host(Limits::default());
    let iface = Interface {
        index: 70_002,
        ..h0.iface.clone()
    };
    let (d0, d1) = rocev2_datapath::pair::pair().unwrap();
    let (s0, s1) = (
        Shard::join(&iface, 0, d0).unwrap(),
        Shard::join(&iface, 1, d1).unwrap(),
    );
    let line = Rate::from_gbps(10);
    for (k, ep) in [&mut ep0, &mut ep1].into_iter().enumerate() {
        let rx = CcScheme::Dart.receiver(line, 1024, &CcTuning::default());
        ep.set_receiver_cc(rx.with_shard(k));
    }
    let (roster, cc) = (Arc::new(Roster::default()), Arc::new(CcBoard::default()));
    let mut h0 = h0.sharing(Arc::clone(&roster), s0.listens(), Arc::clone(&cc));
    let mut h1 = h1.sharing(roster, s1.listens(), cc);
    let at = |us: u64| Instant::ZERO + Duration::from_micros(us);
    // 10 µs: senders 1 and 2 on shard 0, 3 on shard 1, 7000 bytes each (the host at 11.2
    // Gbit/s, each shard at 5.6), CE-marked: receiver congestion for the host.
    for (ep, senders) in [(&mut ep0, [1, 2]), (&mut ep1, [3, 3])] {
        for i in 0..7u64 {
            let d = DataArrival {
                p_key: 0xffff,
                sender: senders[i as usize % 2],
                starts: i < 2,
                bytes: 1000,
                ce: true,
                ..DataArrival::default()
            };
            ep.receiver_cc_mut()
                .on_data(at(i + 1), rocev2_core::wire::Qpn::new(0x11), &d);
        }
    }
    for (h, ep, mem) in [
        (&mut h0, &mut ep0, &mut mem0),
        (&mut h1, &mut ep1, &mut mem1),
    ] {
        assert_eq!(
            ep.poll_timeout(),
            Some(at(10)),
            "the interval's end is a timer"
        );
        ep.handle_timeout(at(10), mem);
        h.service(ep, mem, at(10));
    }
    // Shard 0 published first and read shard 1's on its next pass.
    h0.service(&mut ep0, &mut mem0, at(10));
    for ep in [&mut ep0, &mut ep1] {
        let rx = ep.receiver_cc_mut();
        let d = rx.dasr.as_ref().unwrap();
        assert_eq!(d.state(), DartState::ReceiverCongestion);
        assert_eq!(d.throughput, Rate::from_bps(11_200_000_000));
        assert_eq!(
            rx.dasr_n(at(10), 0xffff, 1),
            Some(3),
            "senders of both shards"
        );
    }
}
