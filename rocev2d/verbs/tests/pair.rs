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
