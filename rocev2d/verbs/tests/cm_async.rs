//! `Device::next_cm_event_async` on a `Device::pair()` (no root): a REQ sent by one device is
//! awaited by the other through tokio's reactor, and a future dropped while pending loses no
//! event (cancel safety).

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
