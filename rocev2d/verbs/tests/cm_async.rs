//! `Device::next_cm_event_async` on a `Device::pair()` (no root): a REQ sent by one device is
//! awaited by the other through tokio's reactor, and a future dropped while pending loses no
//! event (cancel safety). An MRA answering a REQ reaches the requester's CM.

use rocev2::{CmEvent, ConnectParams, Device, PortSpace, Psn, ServiceId, gid};
use std::time::Duration;

#[test]
fn connect_request_is_awaited_and_cancel_loses_nothing() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run());
}

async fn run() {
    let (a, b) = Device::pair().expect("pair");
    let service = ServiceId::rdma_cm(PortSpace::TCP, 7174);
    a.cm_listen(service).expect("listen");
    let is_req = |ev: &CmEvent| matches!(ev, CmEvent::ConnectRequest(_));

    // Pending with nothing queued: a timeout drops the future mid-sleep.
    let early = tokio::time::timeout(Duration::from_millis(100), a.next_cm_event_async(is_req));
    assert!(early.await.is_err(), "no REQ was sent yet");

    let pd = b.alloc_pd().expect("pd");
    let cq = b.create_cq(4).expect("cq");
    let qp = b.create_rc_qp(pd, cq, cq).expect("qp");
    let params = ConnectParams::new(
        service,
        gid(b.interface().addrs[0].ip),
        gid(a.interface().addrs[0].ip),
        qp.qpn(),
        Psn::new(0x1234),
    );
    let b2 = b.clone();
    let conn =
        tokio::task::spawn_blocking(move || b2.cm_connect(qp, params, Duration::from_secs(2)))
            .await
            .expect("join")
            .expect("cm_connect");

    let ev = tokio::time::timeout(Duration::from_secs(10), a.next_cm_event_async(is_req))
        .await
        .expect("REQ awaited within 10 s")
        .expect("event");
    let CmEvent::ConnectRequest(req) = ev else {
        panic!("picked {ev:?}")
    };
    assert_eq!(req.peer_gid, gid(b.interface().addrs[0].ip));
    assert_eq!(req.req.local_qpn, qp.qpn(), "REQ carries b's QPN");
    let _ = conn;
}

/// A blocking and an async waiter on one device, each waiting for its own event: the async
/// one's REQ arrives while its runtime's thread is busy (so tokio has not yet looked at the
/// reactor) and the blocking waiter, woken by the same event, goes back to sleep meanwhile.
/// The async waiter must still get its REQ without any later event.
#[test]
fn blocking_waiter_does_not_steal_an_async_waiters_wake_up() {
    let (a, b) = Device::pair().expect("pair");
    let service = ServiceId::rdma_cm(PortSpace::TCP, 7175);
    a.cm_listen(service).expect("listen");
    // The blocking waiter: waits for an event nobody sends, until the test is over.
    let a2 = a.clone();
    let blocking = std::thread::spawn(move || {
        a2.next_cm_event(
            |ev| matches!(ev, CmEvent::Rejected { .. }),
            Duration::from_secs(8),
        )
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let is_req = |ev: &CmEvent| matches!(ev, CmEvent::ConnectRequest(_));
    rt.block_on(async {
        let a3 = a.clone();
        let waiter = tokio::spawn(async move { a3.next_cm_event_async(is_req).await });
        // Let the waiter look at the queue and go to sleep.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiter.is_finished(), "no REQ was sent yet");
        let pd = b.alloc_pd().expect("pd");
        let cq = b.create_cq(4).expect("cq");
        let qp = b.create_rc_qp(pd, cq, cq).expect("qp");
        let params = ConnectParams::new(
            service,
            gid(b.interface().addrs[0].ip),
            gid(a.interface().addrs[0].ip),
            qp.qpn(),
            Psn::new(0x1234),
        );
        b.cm_connect(qp, params, Duration::from_secs(2))
            .expect("cm_connect");
        // Keep the runtime's only thread away from its reactor while the REQ arrives and
        // the blocking waiter wakes and sleeps again.
        std::thread::sleep(Duration::from_millis(1500));
        let ev = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the async waiter woke for its REQ (no later event comes)")
            .expect("join")
            .expect("event");
        assert!(is_req(&ev), "picked {ev:?}");
    });
    let left = blocking.join().expect("join");
    assert!(
        matches!(left, Err(rocev2::Error::Timeout)),
        "the blocking waiter picked only its own: {left:?}"
    );
}

/// `Device::cm_send_mra` answers a REQ: the requester's CM moves to MRA-received (it holds its
/// REQ for the service timeout, IBA §12.6.6), and a second MRA after the accept is refused.
#[test]
fn cm_send_mra_reaches_the_requesters_cm() {
    use rocev2::AcceptParams;
    use rocev2_core::cm::State;
    let (a, b) = Device::pair().expect("pair");
    let service = ServiceId::rdma_cm(PortSpace::TCP, 7176);
    a.cm_listen(service).expect("listen");
    let pd = b.alloc_pd().expect("pd");
    let cq = b.create_cq(4).expect("cq");
    let qp = b.create_rc_qp(pd, cq, cq).expect("qp");
    let params = ConnectParams::new(
        service,
        gid(b.interface().addrs[0].ip),
        gid(a.interface().addrs[0].ip),
        qp.qpn(),
        Psn::new(0x1234),
    );
    let conn = b
        .cm_connect(qp, params, Duration::from_secs(2))
        .expect("cm_connect");
    let is_req = |ev: &CmEvent| matches!(ev, CmEvent::ConnectRequest(_));
    let CmEvent::ConnectRequest(req) = a
        .next_cm_event(is_req, Duration::from_secs(10))
        .expect("REQ")
    else {
        unreachable!()
    };
    let state = || {
        b.engine()
            .expect("in-process")
            .cm()
            .expect("CM")
            .state(conn)
    };
    assert_eq!(state(), Some(State::ReqSent));
    a.cm_send_mra(req.conn, 24).expect("MRA");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while state() != Some(State::MraReqRcvd) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        state(),
        Some(State::MraReqRcvd),
        "the MRA did not reach b's CM"
    );

    let pd_a = a.alloc_pd().expect("pd");
    let cq_a = a.create_cq(4).expect("cq");
    let qp_a = a.create_rc_qp(pd_a, cq_a, cq_a).expect("qp");
    a.cm_accept(req.conn, AcceptParams::new(qp_a.qpn(), Psn::new(7)))
        .expect("accept");
    assert!(matches!(
        a.cm_send_mra(req.conn, 24),
        Err(rocev2::Error::Verb(_))
    ));
}
