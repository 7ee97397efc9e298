//! `Device::pair`: two in-process devices joined in memory run the API without root or
//! namespaces, and `connect` over loopback TCP brings them up with the pair's addresses.

use rocev2::connect::{self, ConnectConfig};
use rocev2::{AccessFlags, Device, SendOp, SendWr, WcStatus};
use std::time::Duration;

#[test]
fn connect_over_loopback_uses_the_interfaces_addresses_and_a_passive_peer_serves_reads() {
    let (dev, server) = Device::pair().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let srv = std::thread::spawn(move || {
        let pd = server.alloc_pd().unwrap();
        let bytes: Vec<u8> = (0..=255).collect();
        let mr = server
            .register(
                pd,
                bytes,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
            )
            .unwrap();
        let cq = server.create_cq(4).unwrap();
        let qp = server.create_rc_qp(pd, cq, cq).unwrap();
        let c = connect::accept(&server, qp, &listener, &ConnectConfig::default().mr(&mr)).unwrap();
        (server, c)
    });
    let pd = dev.alloc_pd().unwrap();
    let mr = dev
        .register(pd, vec![0u8; 256], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let cq = dev.create_cq(64).unwrap();
    let qp = dev.create_rc_qp(pd, cq, cq).unwrap();
    let c = connect::connect(&dev, qp, addr, &ConnectConfig::default()).unwrap();
    // TCP left from 127.0.0.1, which the pair's interfaces lack: the GIDs are theirs.
    assert_eq!(c.local.ip, dev.source_ip(false).unwrap());
    let (server, sc) = srv.join().unwrap();
    assert_eq!(c.peer.ip, server.source_ip(false).unwrap());
    assert_eq!(sc.peer.ip, c.local.ip);

    let target = c.peer.mrs[0];
    for i in 0..100u64 {
        let read = SendOp::Read {
            remote_addr: target.addr,
            rkey: target.rkey,
        };
        dev.post_send(qp, SendWr::new(i, read).sge(mr.sge(0, 256).unwrap()))
            .unwrap();
        let mut wcs = Vec::new();
        dev.wait_cq(cq, &mut wcs, 1, Duration::from_secs(5))
            .unwrap();
        assert_eq!(wcs.len(), 1);
        assert_eq!(wcs[0].status, WcStatus::Success);
        assert_eq!(wcs[0].wr_id, i);
    }
    let want: Vec<u8> = (0..=255).collect();
    assert_eq!(&dev.mr_guard(&mr).unwrap()[..], &want[..]);
    // The server made no call since accept.
    drop(server);
}

/// A pass that received a SEND may hold its ACK for the receiver's answer (rocev2's local.rs
/// module docs); when the receiver takes the completion and then never posts or calls again,
/// or closes its device at once, the ACK still leaves: the sender's SEND completes without a
/// retransmission, in each wait mode (the ACK timeout is ~1 s, so only an ACK that never left
/// would retransmit).
#[test]
fn send_completes_when_the_receiver_takes_it_and_never_answers() {
    use rocev2::{ConnectOptions, DeviceConfig, DriverConfig, RecvWr, RemoteQp, WaitMode};
    let modes = [WaitMode::Spin, WaitMode::default(), WaitMode::Sleep];
    for (wait, close) in modes.into_iter().flat_map(|m| [(m, false), (m, true)]) {
        let cfg = DeviceConfig {
            driver: DriverConfig {
                wait,
                ..DriverConfig::default()
            },
            ..DeviceConfig::default()
        };
        let (a, b) = Device::pair_with(cfg).unwrap();
        let side = |dev: &Device| {
            let pd = dev.alloc_pd().unwrap();
            let mr = dev
                .register(pd, vec![0u8; 64], AccessFlags::LOCAL_WRITE)
                .unwrap();
            let cq = dev.create_cq(16).unwrap();
            let qp = dev.create_rc_qp(pd, cq, cq).unwrap();
            (mr, cq, qp)
        };
        let (mr_a, cq_a, qp_a) = side(&a);
        let (mr_b, cq_b, qp_b) = side(&b);
        for (me, qp, peer, peer_qp) in [(&a, qp_a, &b, qp_b), (&b, qp_b, &a, qp_a)] {
            let remote = RemoteQp {
                qpn: peer_qp.qpn(),
                psn: 0x100,
                ip: peer.source_ip(false).unwrap(),
                mac: Some(peer.interface().mac),
            };
            let opts = ConnectOptions {
                local_psn: 0x100,
                timeout: 18,
                ..ConnectOptions::default()
            };
            me.connect(qp, &remote, &opts).unwrap();
        }
        b.post_recv(
            qp_b,
            RecvWr {
                wr_id: 1,
                sg_list: vec![mr_b.sge(0, 64).unwrap()],
            },
        )
        .unwrap();
        a.post_send(
            qp_a,
            SendWr::new(2, SendOp::Send).sge(mr_a.sge(0, 64).unwrap()),
        )
        .unwrap();
        let mut wcs = Vec::new();
        b.wait_cq(cq_b, &mut wcs, 1, Duration::from_secs(10))
            .unwrap();
        assert_eq!(
            (wcs[0].wr_id, wcs[0].status),
            (1, WcStatus::Success),
            "{wait}"
        );
        // B's application is done: no post, no call; or it closes the device.
        let b = if close {
            drop(b);
            None
        } else {
            Some(b)
        };
        wcs.clear();
        a.wait_cq(cq_a, &mut wcs, 1, Duration::from_secs(10))
            .unwrap();
        assert_eq!(
            (wcs[0].wr_id, wcs[0].status),
            (2, WcStatus::Success),
            "{wait}, close {close}"
        );
        let retransmits = a
            .engine()
            .unwrap()
            .qp(qp_a.qpn())
            .unwrap()
            .counters()
            .retransmits;
        assert_eq!(retransmits, 0, "{wait}, close {close}");
        drop(b);
    }
}

#[test]
fn the_passive_side_of_a_refused_write_learns_why_its_qp_failed() {
    use rocev2::{ConnectOptions, ErrorCause, RemoteQp, Rkey};
    let (dev, peer) = Device::pair().unwrap();
    let (pd, ppd) = (dev.alloc_pd().unwrap(), peer.alloc_pd().unwrap());
    let src = dev
        .register(pd, vec![1u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let rights = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let dst = peer.register(ppd, vec![0u8; 64], rights).unwrap();
    let (cq, pcq) = (dev.create_cq(8).unwrap(), peer.create_cq(8).unwrap());
    let qp = dev.create_rc_qp(pd, cq, cq).unwrap();
    let pqp = peer.create_rc_qp(ppd, pcq, pcq).unwrap();
    let to = |d: &Device, qpn| RemoteQp {
        qpn,
        psn: 0,
        ip: d.source_ip(false).unwrap(),
        mac: None,
    };
    let o = ConnectOptions::default();
    dev.connect(qp, &to(&peer, pqp.qpn()), &o).unwrap();
    peer.connect(pqp, &to(&dev, qp.qpn()), &o).unwrap();
    assert_eq!(peer.qp_error(pqp), None, "not failed yet");
    // A WRITE with a key the peer never gave.
    let bad = SendOp::Write {
        remote_addr: dst.addr(),
        rkey: Rkey::new(dst.rkey().value() ^ 1),
    };
    dev.post_send(qp, SendWr::new(1, bad).sge(src.sge(0, 64).unwrap()))
        .unwrap();
    let mut wcs = Vec::new();
    dev.wait_cq(cq, &mut wcs, 1, Duration::from_secs(5))
        .unwrap();
    assert_eq!(wcs[0].status, WcStatus::RemAccessErr);
    assert_eq!(
        dev.qp_error(qp),
        Some(ErrorCause::Completion(WcStatus::RemAccessErr))
    );
    // The peer posted nothing; only its QP's cause says why, as IBV_EVENT_QP_ACCESS_ERR would.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while peer.qp_error(pqp).is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let why = peer.qp_error(pqp).expect("the peer's QP failed");
    assert_eq!(why.ibv_event(), Some(3), "{why}");
    assert!(why.to_string().contains("remote access error"), "{why}");
    // A post there completes at once, flushed, as an HCA flushes it.
    peer.post_send(pqp, SendWr::new(2, SendOp::Send)).unwrap();
    wcs.clear();
    peer.wait_cq(pcq, &mut wcs, 1, Duration::from_secs(5))
        .unwrap();
    assert_eq!((wcs[0].wr_id, wcs[0].status), (2, WcStatus::WrFlushErr));
}
