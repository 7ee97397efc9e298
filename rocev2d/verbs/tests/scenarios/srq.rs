//! The shared-receive-queue scenario, run on an in-process pair (`tests/srq.rs`) and through two
//! daemons (the daemon's `tests/attach.rs` includes this file with `#[path]`).
//!
//! Two RC QPs of the server take their receive requests from one SRQ; each is connected to a
//! QP of the client (two peers). Sends from the two peers consume the SRQ's requests in posting
//! order whichever QP they arrive on, and each receive completion names the QP it arrived on
//! (`ibv_wc.qp_num`). The armed limit fires once, when the SRQ holds fewer requests than it;
//! a QP with an SRQ refuses receive requests of its own; an SRQ QPs still use cannot be
//! destroyed, and can once they are gone.

use rocev2::{
    AccessFlags, ConnectOptions, Device, Error, ErrorKind, Qp, QpConfig, RecvWr, RemoteQp, SendOp,
    SendWr, WcOpcode, WcStatus,
};
use rocev2_core::EndpointError;
use std::time::Duration;

const SLOT: u64 = 256;

/// Where `dev`'s QP `qp` is reached (the next hop is the peer itself on a pair and a veth).
fn remote(dev: &Device, qp: Qp) -> RemoteQp {
    RemoteQp {
        qpn: qp.qpn(),
        psn: 0x10,
        ip: dev.source_ip(false).expect("IPv4 address"),
        mac: Some(dev.interface().mac),
    }
}

fn in_use(e: &Error) -> bool {
    matches!(
        e,
        Error::Verb(EndpointError::InUse)
            | Error::Refused {
                kind: ErrorKind::InUse,
                ..
            }
    )
}

/// Runs the scenario with `server`'s QPs on one SRQ and `client`'s QPs as their peers.
pub fn two_peers_share_one_srq(server: &Device, client: &Device) {
    let opts = ConnectOptions {
        local_psn: 0x10,
        ..ConnectOptions::default()
    };
    // Server: one SRQ, two QPs taking from it.
    let pd = server.alloc_pd().unwrap();
    let buf = server
        .register(pd, vec![0u8; 8 * SLOT as usize], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let cq = server.create_cq(16).unwrap();
    let srq = server.create_srq(pd, 8, 1).unwrap();
    let cfg = QpConfig {
        srq: Some(srq.id()),
        ..QpConfig::new(pd.id(), cq.id(), cq.id())
    };
    let sq = [
        server.create_qp(cfg).unwrap(),
        server.create_qp(cfg).unwrap(),
    ];
    let own = RecvWr {
        wr_id: 99,
        sg_list: vec![buf.sge(0, 16).unwrap()],
    };
    assert!(
        server.post_recv(sq[0], own).is_err(),
        "a QP with an SRQ takes no receive requests of its own"
    );

    // Client: two QPs, the two peers.
    let cpd = client.alloc_pd().unwrap();
    let msgs = client
        .register(cpd, vec![0u8; 4 * SLOT as usize], AccessFlags::empty())
        .unwrap();
    let ccq = client.create_cq(16).unwrap();
    let cq_ = [
        client.create_rc_qp(cpd, ccq, ccq).unwrap(),
        client.create_rc_qp(cpd, ccq, ccq).unwrap(),
    ];
    for i in 0..2 {
        server
            .connect(sq[i], &remote(client, cq_[i]), &opts)
            .unwrap();
        client
            .connect(cq_[i], &remote(server, sq[i]), &opts)
            .unwrap();
    }

    for i in 0..4u64 {
        let wr = RecvWr {
            wr_id: i,
            sg_list: vec![buf.sge(i * SLOT, SLOT as u32).unwrap()],
        };
        server.post_srq_recv(srq, wr).unwrap();
    }
    server.modify_srq(srq, None, Some(2)).unwrap();
    let attr = server.query_srq(srq).unwrap();
    assert_eq!(
        (attr.pd, attr.max_wr, attr.max_sge, attr.limit, attr.len),
        (pd.id(), 8, 1, 2, 4)
    );
    assert!(
        server.modify_srq(srq, None, Some(9)).is_err(),
        "a limit above the capacity"
    );
    assert!(!server.srq_limit_reached(srq).unwrap());

    // Peer 0, peer 1, peer 0: the SRQ's requests go in posting order, each completion names
    // the QP the message came on.
    for (k, peer) in [0usize, 1, 0].into_iter().enumerate() {
        let text = format!("message {k} from peer {peer}");
        let at = k as u64 * SLOT;
        client.mr_guard(&msgs).unwrap()[at as usize..][..text.len()]
            .copy_from_slice(text.as_bytes());
        let send =
            SendWr::new(k as u64, SendOp::Send).sge(msgs.sge(at, text.len() as u32).unwrap());
        client.post_send(cq_[peer], send).unwrap();
        let mut wcs = Vec::new();
        server
            .wait_cq(cq, &mut wcs, 1, Duration::from_secs(10))
            .expect("the server receives");
        let wc = wcs[0];
        assert_eq!(
            (wc.status, wc.opcode, wc.wr_id, wc.byte_len),
            (
                WcStatus::Success,
                WcOpcode::Recv,
                k as u64,
                text.len() as u32
            ),
            "message {k}"
        );
        assert_eq!(
            wc.qp_num,
            sq[peer].qpn(),
            "message {k} arrived on peer {peer}'s QP"
        );
        assert_eq!(wc.src_qp, cq_[peer].qpn());
        assert_eq!(
            &server.mr_guard(&buf).unwrap()[at as usize..][..text.len()],
            text.as_bytes()
        );
        let mut sent = Vec::new();
        client
            .wait_cq(ccq, &mut sent, 1, Duration::from_secs(10))
            .expect("the send completes");
        assert_eq!(
            (sent[0].wr_id, sent[0].status),
            (k as u64, WcStatus::Success)
        );
        // Two requests left after the second message: not below the limit of 2; one after
        // the third: below it, and the event fires once.
        assert_eq!(
            server.srq_limit_reached(srq).unwrap(),
            k == 2,
            "message {k}"
        );
    }
    assert!(!server.srq_limit_reached(srq).unwrap(), "taken once");
    let attr = server.query_srq(srq).unwrap();
    assert_eq!((attr.limit, attr.len), (0, 1), "disarmed, one request left");

    let e = server.destroy_srq(srq).unwrap_err();
    assert!(in_use(&e), "{e:?}");
    for qp in sq {
        server.destroy_qp(qp).unwrap();
    }
    server.destroy_srq(srq).unwrap();
    assert!(server.query_srq(srq).is_err(), "destroyed");
}
