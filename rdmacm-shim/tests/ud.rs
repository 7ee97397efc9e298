//! rdma_cm's UD resolution between the two ends of `Device::pair` (no root): the passive side
//! answers with its UD QP, the active side learns its QPN and Q_Key and a datagram sent there
//! arrives; a port nobody listens on, and a refusal, end in `SidrRefused`.

use rdmacm_shim::cm::CmApiError;
use rdmacm_shim::ud::{UdListener, resolve};
use rocev2::{
    AccessFlags, AhAttr, Device, GRH_LEN, RDMA_UDP_Q_KEY, RecvWr, SendOp, SendWr, SidrStatus,
    UdAddress,
};
use std::net::SocketAddr;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

fn addr(dev: &Device, port: u16) -> SocketAddr {
    SocketAddr::new(dev.interface().addrs[0].ip, port)
}

#[test]
fn ud_resolve_then_a_datagram_reaches_the_resolved_qp() {
    let (a, b) = Device::pair().unwrap();
    let pd_b = b.alloc_pd().unwrap();
    let cq_b = b.create_cq(8).unwrap();
    let qp_b = b.create_ud_qp(pd_b, cq_b, cq_b, RDMA_UDP_Q_KEY).unwrap();
    let mr_b = b
        .register(pd_b, vec![0u8; 1024], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let wr = RecvWr {
        wr_id: 3,
        sg_list: vec![mr_b.sge(0, 512).unwrap()],
    };
    b.post_recv(qp_b, wr).unwrap();
    let listener = UdListener::bind(&b, addr(&b, 7174)).unwrap();
    let b_addr = addr(&b, 7174);

    let a2 = a.clone();
    let active = std::thread::spawn(move || resolve(&a2, b_addr, b"udaddy?", WAIT));
    let req = listener.get_request(WAIT).unwrap();
    assert_eq!(req.peer().ip(), a.interface().addrs[0].ip);
    assert_eq!(&req.private_data()[..7], b"udaddy?");
    req.accept(qp_b, b"yes").unwrap();
    let peer = active.join().unwrap().unwrap();
    assert_eq!((peer.qpn, peer.q_key), (qp_b.qpn(), RDMA_UDP_Q_KEY));
    assert_eq!(&peer.private_data[..3], b"yes");

    let pd_a = a.alloc_pd().unwrap();
    let cq_a = a.create_cq(8).unwrap();
    let qp_a = a.create_ud_qp(pd_a, cq_a, cq_a, RDMA_UDP_Q_KEY).unwrap();
    let mr_a = a
        .register(pd_a, vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    a.mr_guard(&mr_a).unwrap()[..4].copy_from_slice(b"ping");
    let ah = a.create_ah(pd_a, &AhAttr::new(peer.addr.ip())).unwrap();
    let to = UdAddress {
        ah,
        qpn: peer.qpn,
        q_key: peer.q_key,
    };
    let wr = SendWr::new(1, SendOp::Send).sge(mr_a.sge(0, 4).unwrap());
    a.post_send_to(qp_a, to, wr).unwrap();
    let mut wcs = Vec::new();
    b.wait_cq(cq_b, &mut wcs, 1, WAIT).unwrap();
    assert!(wcs[0].status.is_success());
    assert_eq!(wcs[0].src_qp, qp_a.qpn());
    assert_eq!(&b.mr_guard(&mr_b).unwrap()[GRH_LEN..GRH_LEN + 4], b"ping");
}

#[test]
fn ud_resolve_of_an_unserved_port_or_a_refusal_is_an_error() {
    let (a, b) = Device::pair().unwrap();
    b.enable_cm().unwrap();
    let r = resolve(&a, addr(&b, 9), b"", WAIT);
    assert!(
        matches!(
            r,
            Err(CmApiError::SidrRefused {
                status: SidrStatus::UNSUPPORTED,
                ..
            })
        ),
        "{r:?}"
    );
    let listener = UdListener::bind(&b, addr(&b, 7175)).unwrap();
    let b_addr = addr(&b, 7175);
    let a2 = a.clone();
    let active = std::thread::spawn(move || resolve(&a2, b_addr, b"", WAIT));
    listener.get_request(WAIT).unwrap().reject(b"no").unwrap();
    let r = active.join().unwrap();
    let Err(CmApiError::SidrRefused {
        status,
        private_data,
        ..
    }) = r
    else {
        panic!("{r:?}")
    };
    assert_eq!(
        (status, &private_data[..2]),
        (SidrStatus::REJECT, &b"no"[..])
    );
    let long = vec![0u8; 181];
    assert!(matches!(
        resolve(&a, b_addr, &long, WAIT),
        Err(CmApiError::PrivateDataTooLong { len: 181, max: 180 })
    ));
}
