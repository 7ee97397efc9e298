//! Two [`rocev2::Device`]s in one process on the two ends of a veth pair (AF_PACKET, then
//! AF_XDP, one test each): an RDMA
//! WRITE and a SEND complete through the async API ([`Device::next_completion`] on a minimal
//! executor), the receiver's [`Device::wait_cq`] sees the SEND, and the written bytes are in
//! the receiver's region.
//!
//! Needs root: the test re-runs itself inside a fresh network namespace (`ip netns exec`), so
//! the veth pair never appears in the caller's namespace and deleting the namespace removes it.

use rocev2::{
    AccessFlags, ConnectOptions, DatapathKind, Device, RecvWr, RemoteQp, SendOp, SendWr, WcOpcode,
    WcStatus,
};
use rocev2_testbed::{VethEnd, veth_pair};
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// Polls `f` until ready (the future wakes itself), for at most `limit`.
fn block_on<F: Future>(f: F, limit: Duration) -> F::Output {
    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    let waker = Waker::from(Arc::new(Noop));
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    let end = Instant::now() + limit;
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        assert!(Instant::now() < end, "future not ready within {limit:?}");
    }
}

fn body(kind: DatapathKind) {
    veth_pair(
        VethEnd {
            addrs: &["10.9.0.1/24"],
            ..VethEnd::new("vla")
        },
        VethEnd {
            addrs: &["10.9.0.2/24"],
            ..VethEnd::new("vlb")
        },
    )
    .unwrap();
    let a = Device::open("vla", kind).unwrap();
    let b = Device::open("vlb", kind).unwrap();
    assert_eq!(a.datapath_name(), kind.name());
    assert_eq!(b.datapath_name(), kind.name());
    let pd_a = a.alloc_pd().unwrap();
    let pd_b = b.alloc_pd().unwrap();
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 31 + 7) as u8).collect();
    let mr_a = a
        .register(
            pd_a,
            data.clone().into_boxed_slice(),
            AccessFlags::LOCAL_WRITE,
        )
        .unwrap();
    let mr_b = b
        .register(
            pd_b,
            vec![0u8; 200_000],
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let qa = a.create_rc_qp(pd_a, cq_a, cq_a).unwrap();
    let qb = b.create_rc_qp(pd_b, cq_b, cq_b).unwrap();
    let (psn_a, psn_b) = (rocev2::random_psn(), rocev2::random_psn());
    assert!(psn_a < 1 << 24 && psn_b < 1 << 24);
    let (mac_a, mac_b) = (a.interface().mac, b.interface().mac);
    a.connect(
        qa,
        &RemoteQp {
            qpn: qb.qpn(),
            psn: psn_b,
            ip: "10.9.0.2".parse().unwrap(),
            mac: Some(mac_b),
        },
        &ConnectOptions {
            local_psn: psn_a,
            ..ConnectOptions::default()
        },
    )
    .unwrap();
    b.connect(
        qb,
        &RemoteQp {
            qpn: qa.qpn(),
            psn: psn_a,
            ip: "10.9.0.1".parse().unwrap(),
            mac: Some(mac_a),
        },
        &ConnectOptions {
            local_psn: psn_b,
            ..ConnectOptions::default()
        },
    )
    .unwrap();
    b.post_recv(
        qb,
        RecvWr {
            wr_id: 7,
            sg_list: vec![mr_b.sge(150_000, 1000).unwrap()],
        },
    )
    .unwrap();
    // B in its own thread: wait for the SEND, then keep serving until its ACKs are out.
    let server = std::thread::spawn(move || {
        let mut wcs = Vec::new();
        let n = b
            .wait_cq(cq_b, &mut wcs, 4, Duration::from_secs(20))
            .unwrap();
        assert_eq!(n, 1);
        assert_eq!(
            (wcs[0].wr_id, wcs[0].status, wcs[0].opcode, wcs[0].byte_len),
            (7, WcStatus::Success, WcOpcode::Recv, 1000)
        );
        b.drain(Duration::from_secs(5)).unwrap();
        (b, mr_b)
    });
    let write = SendOp::Write {
        remote_addr: mr_b.addr() + 1000,
        rkey: mr_b.rkey(),
    };
    a.post_send(qa, SendWr::new(1, write).sge(mr_a.sge(0, 100_000).unwrap()))
        .unwrap();
    a.post_send(
        qa,
        SendWr::new(2, SendOp::Send).sge(mr_a.sge(0, 1000).unwrap()),
    )
    .unwrap();
    for want in [1, 2] {
        let wc = block_on(a.next_completion(cq_a), Duration::from_secs(20)).unwrap();
        assert_eq!((wc.wr_id, wc.status), (want, WcStatus::Success));
    }
    a.drain(Duration::from_secs(5)).unwrap();
    let (b, mr_b) = server.join().unwrap();
    let got = b.mr_guard(&mr_b).unwrap();
    assert_eq!(&got[1000..101_000], &data[..]);
    assert_eq!(&got[150_000..151_000], &data[..1000]);
    assert!(got[..1000].iter().all(|&x| x == 0));
    // Handles of one device are refused by another.
    assert!(matches!(a.mr_guard(&mr_b), Err(rocev2::Error::UnknownMr)));
    assert_eq!(a.deregister(mr_a).unwrap(), data);
}

#[test]
fn veth_write_and_send_complete_async() {
    in_netns("veth_write_and_send_complete_async", DatapathKind::Packet);
}

#[cfg(feature = "xdp")]
#[test]
fn veth_write_and_send_complete_async_xdp() {
    in_netns("veth_write_and_send_complete_async_xdp", DatapathKind::Xdp);
}

/// Runs [`body`] with `kind` in a fresh namespace: this test binary re-runs `test` inside it.
fn in_netns(test: &str, kind: DatapathKind) {
    let ns = format!("rv2vt{}{}", std::process::id(), kind.name());
    if rocev2_testbed::exec::in_fresh_netns(test, &ns, Duration::from_secs(600))
        .expect("re-run in a fresh namespace")
    {
        body(kind);
    }
}
