//! The SIDR scenario, run on an in-process pair (`tests/sidr.rs`) and through two daemons (the
//! daemon's `tests/attach.rs` includes this file with `#[path]`).
//!
//! B listens on an `RDMA_PS_UDP` service and answers with its UD QP and rdma_cm's Q_Key; A
//! resolves it, with the CMA header rdma_cm sends, and sends a datagram to what the answer
//! says, which arrives. A service nobody listens on is answered "not supported".

use rocev2::{
    AccessFlags, AhAttr, CmEvent, CmaHeader, Device, GRH_LEN, PortSpace, RDMA_UDP_Q_KEY, RecvWr,
    SendOp, SendWr, ServiceId, SidrParams, SidrReplyParams, SidrRequest, SidrStatus, UdAddress,
    gid,
};
use rocev2_core::cm::CmaAddrs;
use std::net::IpAddr;
use std::time::Duration;

/// A (at `a_ip`) resolves B's service on `port` (B at `b_ip`) and sends it a datagram.
/// `before_answer` runs between B's SIDR request event and its answer (a test of who else may
/// answer, say).
pub fn resolve_and_send(
    (a, a_ip): (&Device, IpAddr),
    (b, b_ip): (&Device, IpAddr),
    port: u16,
    wait: Duration,
    before_answer: impl FnOnce(&SidrRequest, &SidrReplyParams),
) {
    let service = ServiceId::rdma_cm(PortSpace::UDP, port);
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
    let mut params = SidrParams::new(service, gid(a_ip), gid(b_ip));
    let (IpAddr::V4(src), IpAddr::V4(dst)) = (a_ip, b_ip) else {
        panic!("IPv4 hosts")
    };
    let cma = CmaHeader {
        src_port: 50000,
        addrs: CmaAddrs::V4 { src, dst },
    };
    params.private_data = cma.private_data(b"who serves it?");
    let id = a.cm_sidr_request(params, wait).unwrap();

    // B answers with its QP.
    let ev = b
        .next_cm_event(|e| matches!(e, CmEvent::SidrRequest(_)), wait)
        .unwrap();
    let CmEvent::SidrRequest(req) = ev else {
        panic!("{ev:?}")
    };
    assert_eq!((req.peer_gid, req.cma), (gid(a_ip), Some(cma)));
    assert_eq!(&req.user_data()[..14], b"who serves it?");
    let answer = SidrReplyParams {
        status: SidrStatus::SUCCESS,
        qpn: qp_b.qpn(),
        q_key: RDMA_UDP_Q_KEY,
        private_data: b"here".to_vec(),
    };
    before_answer(&req, &answer);
    b.cm_sidr_reply(req.id, answer.clone()).unwrap();
    assert!(b.cm_sidr_reply(req.id, answer).is_err(), "answered once");

    // A learns the QPN and Q_Key, and sends a datagram there.
    let ev = a.next_cm_event(|e| e.sidr() == Some(id), wait).unwrap();
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
    a.wait_cq(cq_a, &mut wcs, 1, wait).unwrap();
    assert!(wcs[0].status.is_success());
    wcs.clear();
    b.wait_cq(cq_b, &mut wcs, 1, wait).unwrap();
    assert!(wcs[0].status.is_success());
    assert_eq!((wcs[0].wr_id, wcs[0].src_qp), (7, qp_a.qpn()));
    assert_eq!(wcs[0].byte_len as usize, GRH_LEN + 5);
    assert_eq!(&b.mr_guard(&mr_b).unwrap()[GRH_LEN..GRH_LEN + 5], b"hello");
}

/// A resolves a service on B (the CM enabled) that nobody listens on: "not supported".
pub fn unlistened_is_unsupported(a: &Device, a_ip: IpAddr, b_ip: IpAddr, wait: Duration) {
    let service = ServiceId::rdma_cm(PortSpace::UDP, 9);
    let params = SidrParams::new(service, gid(a_ip), gid(b_ip));
    let id = a.cm_sidr_request(params, wait).unwrap();
    let ev = a.next_cm_event(|e| e.sidr() == Some(id), wait).unwrap();
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
