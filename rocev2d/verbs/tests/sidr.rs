//! Service ID Resolution (SIDR) between the two ends of a `Device::pair` (no root): one side
//! listens on an `RDMA_PS_UDP` service and answers with its UD QP and rdma_cm's Q_Key, the
//! other resolves it and sends a datagram to what the answer says, which arrives. A service
//! nobody listens on is answered "not supported".

use rocev2::{
    AccessFlags, AhAttr, CmEvent, CmaHeader, Device, GRH_LEN, PortSpace, RDMA_UDP_Q_KEY, RecvWr,
    SendOp, SendWr, ServiceId, SidrParams, SidrReplyParams, SidrStatus, UdAddress, gid,
};
use rocev2_core::cm::CmaAddrs;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn sidr_resolves_a_ud_service_and_a_datagram_reaches_it() {
    let (a, b) = Device::pair().unwrap();
    let service = ServiceId::rdma_cm(PortSpace::UDP, 7174);
    // B: the service, a UD QP with rdma_cm's Q_Key and a receive posted.
    let pd_b = b.alloc_pd().unwrap();
    let cq_b = b.create_cq(8).unwrap();
    let qp_b = b.create_ud_qp(pd_b, cq_b, cq_b, RDMA_UDP_Q_KEY).unwrap();
    let mr_b = b
        .register(pd_b, vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let wr = RecvWr {
        wr_id: 7,
        sg_list: vec![mr_b.sge(0, 1024).unwrap()],
    };
    b.post_recv(qp_b, wr).unwrap();
    b.cm_listen(service).unwrap();

    // A: resolves the service, with the CMA header rdma_cm sends.
    let (a_ip, b_ip) = (a.interface().addrs[0].ip, b.interface().addrs[0].ip);
    let mut params = SidrParams::new(service, gid(a_ip), gid(b_ip));
    let (std::net::IpAddr::V4(src), std::net::IpAddr::V4(dst)) = (a_ip, b_ip) else {
        panic!("the pair is IPv4")
    };
    let cma = CmaHeader {
        src_port: 50000,
        addrs: CmaAddrs::V4 { src, dst },
    };
    params.private_data = cma.private_data(b"who serves 7174?");
    let id = a.cm_sidr_request(params, Duration::from_secs(2)).unwrap();

    // B answers with its QP.
    let ev = b
        .next_cm_event(|e| matches!(e, CmEvent::SidrRequest(_)), WAIT)
        .unwrap();
    let CmEvent::SidrRequest(req) = ev else {
        panic!("{ev:?}")
    };
    assert_eq!((req.peer_gid, req.cma), (gid(a_ip), Some(cma)));
    assert_eq!(&req.user_data()[..16], b"who serves 7174?");
    let answer = SidrReplyParams {
        status: SidrStatus::SUCCESS,
        qpn: qp_b.qpn(),
        q_key: RDMA_UDP_Q_KEY,
        private_data: b"here".to_vec(),
    };
    b.cm_sidr_reply(req.id, answer.clone()).unwrap();
    assert!(b.cm_sidr_reply(req.id, answer).is_err(), "answered once");

    // A learns the QPN and Q_Key, and sends a datagram there.
    let ev = a.next_cm_event(|e| e.sidr() == Some(id), WAIT).unwrap();
    let CmEvent::SidrReply {
        status,
        qpn,
        q_key,
        private_data,
        ..
    } = ev
    else {
        panic!("{ev:?}")
    };
    assert_eq!(
        (status, qpn, q_key),
        (SidrStatus::SUCCESS, qp_b.qpn(), RDMA_UDP_Q_KEY)
    );
    assert_eq!(&private_data[..4], b"here");

    let pd_a = a.alloc_pd().unwrap();
    let cq_a = a.create_cq(8).unwrap();
    let qp_a = a.create_ud_qp(pd_a, cq_a, cq_a, RDMA_UDP_Q_KEY).unwrap();
    let mr_a = a
        .register(pd_a, vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    a.mr_guard(&mr_a).unwrap()[..5].copy_from_slice(b"hello");
    let ah = a.create_ah(pd_a, &AhAttr::new(b_ip)).unwrap();
    let wr = SendWr::new(1, SendOp::Send).sge(mr_a.sge(0, 5).unwrap());
    a.post_send_to(qp_a, UdAddress { ah, qpn, q_key }, wr)
        .unwrap();
    let mut wcs = Vec::new();
    a.wait_cq(cq_a, &mut wcs, 1, WAIT).unwrap();
    assert!(wcs[0].status.is_success());
    wcs.clear();
    b.wait_cq(cq_b, &mut wcs, 1, WAIT).unwrap();
    assert!(wcs[0].status.is_success());
    assert_eq!((wcs[0].wr_id, wcs[0].src_qp), (7, qp_a.qpn()));
    assert_eq!(wcs[0].byte_len as usize, GRH_LEN + 5);
    assert_eq!(&b.mr_guard(&mr_b).unwrap()[GRH_LEN..GRH_LEN + 5], b"hello");
}

#[test]
fn sidr_for_a_service_nobody_listens_on_is_unsupported() {
    let (a, b) = Device::pair().unwrap();
    b.enable_cm().unwrap();
    let service = ServiceId::rdma_cm(PortSpace::UDP, 9);
    let params = SidrParams::new(
        service,
        gid(a.interface().addrs[0].ip),
        gid(b.interface().addrs[0].ip),
    );
    let id = a.cm_sidr_request(params, Duration::from_secs(2)).unwrap();
    let ev = a.next_cm_event(|e| e.sidr() == Some(id), WAIT).unwrap();
    assert!(
        matches!(
            ev,
            CmEvent::SidrReply {
                status: SidrStatus::UNSUPPORTED,
                ..
            }
        ),
        "{ev:?}"
    );
}
