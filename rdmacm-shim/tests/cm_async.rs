//! The async rdma_cm calls on a tokio runtime, between the two ends of [`Device::pair`] (no
//! root, no namespace).

use rdmacm_shim::cm::{CmId, CmListener};
use rocev2::{AccessFlags, Cq, Device, Mr, Qp, RecvWr, SendOp, SendWr, WcOpcode, WcStatus};
use rocev2_datapath::clock::cpu_time;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

fn side(dev: &Device) -> (Mr, Cq, Qp) {
    let pd = dev.alloc_pd().unwrap();
    let mr = dev
        .register(pd, vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let cq = dev.create_cq(16).unwrap();
    let qp = dev.create_rc_qp(pd, cq, cq).unwrap();
    (mr, cq, qp)
}

/// An async listener accepts an async connect made 600 ms later on the same one-thread
/// runtime (so the pending accept must yield it), a SEND crosses with its bytes, and the
/// wait cost little CPU: the accept slept on the CM eventfd instead of polling.
#[test]
fn cm_async_accept_and_connect_on_a_pair() {
    let (a, b) = Device::pair().unwrap();
    let (mr_a, cq_a, qp_a) = side(&a);
    let (mr_b, cq_b, qp_b) = side(&b);
    b.post_recv(
        qp_b,
        RecvWr {
            wr_id: 9,
            sg_list: vec![mr_b.sge(0, 4096).unwrap()],
        },
    )
    .unwrap();
    let to: SocketAddr = "10.77.0.2:7174".parse().unwrap();
    let listener = CmListener::bind(&b, to).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (cpu0, wall0) = (Duration::from(cpu_time()), Instant::now());
    let (id, server) = rt.block_on(async {
        let accept = tokio::spawn(async move { listener.accept_async(qp_b, b"welcome").await });
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(!accept.is_finished(), "accepted before anyone connected");
        let id = tokio::time::timeout(
            Duration::from_secs(20),
            CmId::connect_async(&a, qp_a, to, b"hello"),
        )
        .await
        .expect("connect in time")
        .expect("connect");
        let server = tokio::time::timeout(Duration::from_secs(20), accept)
            .await
            .expect("accept in time")
            .unwrap()
            .expect("accept");
        (id, server)
    });
    let (cpu, wall) = (Duration::from(cpu_time()) - cpu0, wall0.elapsed());
    let (server_id, hello) = server;
    assert_eq!(&hello[..5], b"hello");
    assert_eq!(&id.peer_private_data()[..7], b"welcome");
    assert_eq!(server_id.peer().ip(), a.source_ip(false).unwrap());

    a.mr_guard(&mr_a).unwrap()[..12].copy_from_slice(b"async CM ok!");
    a.post_send(
        qp_a,
        SendWr::new(1, SendOp::Send).sge(mr_a.sge(0, 12).unwrap()),
    )
    .unwrap();
    let wc = rt.block_on(b.next_completion(cq_b)).unwrap();
    assert_eq!((wc.wr_id, wc.opcode, wc.byte_len), (9, WcOpcode::Recv, 12));
    assert_eq!(wc.status, WcStatus::Success);
    assert_eq!(&b.mr_guard(&mr_b).unwrap()[..12], b"async CM ok!");
    let wc = rt.block_on(a.next_completion(cq_a)).unwrap();
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success));

    // Busy polling would burn the whole 600 ms; the progress threads and the waiter sleep.
    assert!(wall >= Duration::from_millis(500), "{wall:?}");
    assert!(cpu < wall / 3, "{cpu:?} of CPU over {wall:?} of waiting");
}

/// Connected, then torn down asynchronously: the passive side awaits the disconnect (a first
/// wait dropped by its timeout loses nothing), the active side's `disconnect_async` comes
/// 600 ms later on the same one-thread runtime; both return, the passive side's own
/// disconnect then returns at once, the QPs are in ERROR, and the waits cost little CPU (they
/// slept instead of polling).
#[test]
fn cm_async_disconnect_is_seen_by_the_peer() {
    let (a, b) = Device::pair().unwrap();
    let (_mr_a, _cq_a, qp_a) = side(&a);
    let (_mr_b, _cq_b, qp_b) = side(&b);
    let to: SocketAddr = "10.77.0.2:7176".parse().unwrap();
    let listener = CmListener::bind(&b, to).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (cpu0, wall0) = rt.block_on(async {
        let accept = tokio::spawn(async move { listener.accept_async(qp_b, &[]).await });
        let id = CmId::connect_async(&a, qp_a, to, b"bye soon")
            .await
            .expect("connect");
        let (server_id, _) = accept.await.unwrap().expect("accept");
        assert_eq!(a.qp_state(qp_a), Some(rocev2::QpState::Rts));

        let early = tokio::time::timeout(
            Duration::from_millis(100),
            server_id.wait_disconnect_async(),
        );
        assert!(early.await.is_err(), "nobody disconnected yet");
        let (cpu0, wall0) = (Duration::from(cpu_time()), Instant::now());
        let peer = tokio::spawn(async move {
            let data = server_id.wait_disconnect_async().await;
            (server_id, data)
        });
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(!peer.is_finished(), "disconnected before anyone did");
        tokio::time::timeout(Duration::from_secs(20), id.disconnect_async())
            .await
            .expect("disconnect in time")
            .expect("disconnect");
        let (server_id, data) = tokio::time::timeout(Duration::from_secs(20), peer)
            .await
            .expect("peer saw it in time")
            .unwrap();
        data.expect("peer's disconnect event");
        // Disconnecting after the wait saw the peer's is done at once (rdma_disconnect after
        // DISCONNECTED, as ucmatose's client does).
        server_id
            .disconnect_async()
            .await
            .expect("passive disconnect");
        (cpu0, wall0)
    });
    let (cpu, wall) = (Duration::from(cpu_time()) - cpu0, wall0.elapsed());
    assert_eq!(a.qp_state(qp_a), Some(rocev2::QpState::Error));
    assert_eq!(b.qp_state(qp_b), Some(rocev2::QpState::Error));
    assert!(wall >= Duration::from_millis(500), "{wall:?}");
    assert!(cpu < wall / 3, "{cpu:?} of CPU over {wall:?} of waiting");
}
