//! Ground truth for the CM MADs: `../shared/captures/rping_cm.pcap` (`rping -C 3 -S 64` between
//! 192.168.77.11, the client and active side, and 192.168.77.10, the server, over rdma_rxe; see
//! the captures' README). Every MAD frame must parse as a UD SEND Only to QP1 whose payload is a
//! CM MAD, its fields must agree with each other and with the RC traffic that follows, and
//! re-emitting each MAD must give back its exact bytes. The CM (`rocev2_core::cm`) must then
//! play either side of the capture's exchange with the same bytes but for its own IDs.

use crate::interop_util::captures;

use captures::frames;
use rocev2_core::cm::{
    AcceptParams, Cm, CmConfig, CmaAddrs, CmaHeader, ConnectParams, Event, PortSpace, ServiceId,
    Transmit,
};
use rocev2_core::time::Instant;
use rocev2_core::wire::mad::cm_connect::{RepRepr, ReqRepr};
use rocev2_core::wire::mad::{DEFAULT_P_KEY, attribute, method};
use rocev2_core::wire::{
    CmAttribute, CmRepr, FrameRepr, GSI_Q_KEY, IpRepr, MAD_LEN, MadPacket, Opcode, Operation, Psn,
    Qpn, Transport, mad,
};
use std::net::Ipv4Addr;

const SERVER: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 10);
const CLIENT: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 11);
/// rping's default port (no `-p` in rping_cm.tool-output.txt).
const RPING_PORT: u64 = 7174;
/// rdma_cm's ServiceID for RDMA_PS_TCP: 0x0000_0000_0106_0000 | port.
const PS_TCP_SERVICE: u64 = 0x0000_0000_0106_0000;

fn src(r: &FrameRepr) -> Ipv4Addr {
    match r.ip {
        IpRepr::V4 { src, .. } => src,
        IpRepr::V6 { .. } => panic!("rping_cm.pcap is IPv4"),
    }
}

struct Mad {
    frame: usize,
    from: Ipv4Addr,
    repr: CmRepr,
}

/// Every CM MAD of the capture, checked for framing and byte-exact re-emission; the RC frames.
fn mads_and_rc() -> (Vec<Mad>, Vec<FrameRepr>) {
    let (mut mads, mut rc) = (Vec::new(), Vec::new());
    for (i, bytes) in frames("rping_cm.pcap").iter().enumerate() {
        let (repr, payload) = FrameRepr::parse(bytes).unwrap();
        let bth = repr.roce.bth;
        if bth.opcode.transport() == Transport::Rc {
            rc.push(repr);
            continue;
        }
        // A MAD: UD SEND Only to QP1, DETH with the GSI Q_Key from QP1, default P_Key, and the
        // 256-byte MAD as the whole payload.
        assert_eq!(bth.opcode, Opcode::new(Transport::Ud, Operation::SendOnly));
        assert_eq!(bth.opcode.0, 100);
        assert_eq!(bth.dest_qp, Qpn::GSI);
        assert_eq!(bth.p_key, DEFAULT_P_KEY);
        let deth = repr.roce.deth.expect("UD carries a DETH");
        assert_eq!((deth.q_key, deth.src_qp), (GSI_Q_KEY, Qpn::GSI));
        assert_eq!(deth.q_key, 0x8001_0000);
        assert_eq!(payload.len(), MAD_LEN);
        let m = CmRepr::parse_bytes(payload).unwrap_or_else(|e| panic!("frame {}: {e}", i + 1));
        let mut again = [0u8; MAD_LEN];
        m.emit(&mut MadPacket::new_unchecked(&mut again[..]));
        assert_eq!(
            &again[..],
            payload,
            "frame {}: re-emitted MAD differs\n{m}",
            i + 1
        );
        mads.push(Mad {
            frame: i + 1,
            from: src(&repr),
            repr: m,
        });
    }
    (mads, rc)
}

#[test]
fn rping_cm_mads_parse_agree_and_round_trip() {
    let (mads, rc) = mads_and_rc();
    let kinds: Vec<(usize, u16, Ipv4Addr)> = mads
        .iter()
        .map(|m| (m.frame, m.repr.attribute.attribute_id(), m.from))
        .collect();
    assert_eq!(
        kinds,
        [
            (1, attribute::REQ, CLIENT),
            (2, attribute::REP, SERVER),
            (3, attribute::RTU, CLIENT),
            (40, attribute::DREQ, CLIENT),
            (41, attribute::DREP, SERVER),
        ]
    );
    for m in &mads {
        assert_eq!(m.repr.method, method::SEND);
        assert_eq!(m.repr.status, 0);
        // One transaction for the whole exchange, as rxe's CM sent it.
        assert_eq!(m.repr.transaction_id, mads[0].repr.transaction_id);
    }
    let [req, rep, rtu, dreq, drep] = [0, 1, 2, 3, 4].map(|k| &mads[k].repr.attribute);
    let (CmAttribute::Req(req), CmAttribute::Rep(rep)) = (req, rep) else {
        panic!("REQ, REP expected");
    };
    let (CmAttribute::Rtu(rtu), CmAttribute::Dreq(dreq), CmAttribute::Drep(drep)) =
        (rtu, dreq, drep)
    else {
        panic!("RTU, DREQ, DREP expected");
    };
    check_req(req);

    // Comm IDs: the client's is REQ.local, the server's REP.local; each later message names
    // both from its sender's side.
    let (client_id, server_id) = (req.local_comm_id, rep.local_comm_id);
    assert_ne!(client_id, server_id);
    assert_eq!(rep.remote_comm_id, client_id);
    assert_eq!(
        (rtu.local_comm_id, rtu.remote_comm_id),
        (client_id, server_id)
    );
    assert_eq!(
        (dreq.local_comm_id, dreq.remote_comm_id),
        (client_id, server_id)
    );
    assert_eq!(
        (drep.local_comm_id, drep.remote_comm_id),
        (server_id, client_id)
    );
    // The DREQ names the server's QP.
    assert_eq!(dreq.remote_qpn, rep.local_qpn);

    check_rc_follows(req, rep, &rc);
}

fn check_req(req: &ReqRepr) {
    assert_eq!(req.service_id, PS_TCP_SERVICE | RPING_PORT);
    assert_eq!(req.service_id >> 16, 0x0106, "RDMA_PS_TCP");
    assert_eq!(req.transport_service_type, 0, "RC");
    assert_eq!(req.local_q_key, 0, "Q_Key is RD-only");
    assert_eq!(req.partition_key, DEFAULT_P_KEY);
    assert_eq!(req.path_packet_payload_mtu, 3, "active MTU 1024");
    let p = req.primary_path;
    assert_eq!(p.local_port_gid, CLIENT.to_ipv6_mapped());
    assert_eq!(p.remote_port_gid, SERVER.to_ipv6_mapped());
    assert_eq!((p.local_port_lid, p.remote_port_lid), (0xffff, 0xffff));
    assert_eq!(p.hop_limit, 64, "the IPv4 TTL");
    assert_eq!(req.alternate_path, mad::cm_connect::PathRepr::NONE);
    // rdma_cm's private data: IPv4, then the addresses at bytes 16 and 32.
    assert_eq!(req.private_data[1] >> 4, 4);
    assert_eq!(req.private_data[16..20], CLIENT.octets());
    assert_eq!(req.private_data[32..36], SERVER.octets());
}

/// The RC traffic after the RTU goes to the QPNs the REQ and REP announced, and each side's
/// first packet carries the Starting PSN its peer announced (REQ's for the server, REP's for
/// the client: IBA §12.6.5/§12.6.8 with Linux's reading, see `cm_connect.rs`).
fn check_rc_follows(req: &ReqRepr, rep: &RepRepr, rc: &[FrameRepr]) {
    let from = |who: Ipv4Addr| rc.iter().filter(move |r| src(r) == who);
    let requests = |who: Ipv4Addr| {
        from(who).filter(|r| {
            r.roce
                .bth
                .opcode
                .operation()
                .is_some_and(|o| o.is_request())
        })
    };
    assert!(from(CLIENT).all(|r| r.roce.bth.dest_qp == rep.local_qpn));
    assert!(from(SERVER).all(|r| r.roce.bth.dest_qp == req.local_qpn));
    let first = |who| requests(who).next().map(|r| r.roce.bth.psn);
    assert_eq!(first(CLIENT), Some(rep.starting_psn));
    assert_eq!(first(SERVER), Some(req.starting_psn));
    assert_eq!(req.starting_psn, Psn::new(0x9e_1675));
    assert_eq!(rep.starting_psn, Psn::new(0xd2_ba60));
    assert!(rc.iter().all(|r| matches!(
        r.ip,
        IpRepr::V4 { src, dst, .. } if [src, dst].contains(&CLIENT) && [src, dst].contains(&SERVER)
    )));
}

/// Re-emits a capture MAD after `edit` (to put our Communication IDs into the peer's messages).
fn mad_bytes(repr: &CmRepr, edit: impl FnOnce(&mut CmAttribute)) -> [u8; MAD_LEN] {
    let mut r = repr.clone();
    edit(&mut r.attribute);
    let mut out = [0u8; MAD_LEN];
    r.emit(&mut MadPacket::new_unchecked(&mut out[..]));
    out
}

fn parse(t: &Transmit) -> CmRepr {
    CmRepr::parse_bytes(&t.mad).unwrap()
}

/// The capture's passive side, replayed through our CM: the client's REQ (frame 1) becomes a
/// ConnectRequest whose CMA header names the client and server and whose QPN/PSN are the
/// client's; our REP, DREP answer it with the server's fields exactly as rxe did, but for our
/// Communication ID.
#[test]
fn rping_cm_req_through_the_passive_cm() {
    let (mads, _) = mads_and_rc();
    let (req, rep, rtu, dreq, drep) = (
        &mads[0].repr,
        &mads[1].repr,
        &mads[2].repr,
        &mads[3].repr,
        &mads[4].repr,
    );
    let (client, server) = (CLIENT.to_ipv6_mapped(), SERVER.to_ipv6_mapped());
    let now = Instant::ZERO;
    let mut cm = Cm::new(
        CmConfig {
            local_ca_guid: 0x5054_00ff_fe77_000a,
        },
        1,
    );
    let sid = ServiceId::rdma_cm(PortSpace::TCP, RPING_PORT as u16);
    assert_eq!(sid.0, PS_TCP_SERVICE | RPING_PORT);
    cm.listen(sid).unwrap();
    cm.handle_mad(now, server, client, &mad_bytes(req, |_| {}));
    let Some(Event::ConnectRequest(r)) = cm.poll_event() else {
        panic!("no ConnectRequest: {:?}", cm.stats())
    };
    let cma = r.cma.expect("rping's REQ carries a CMA header");
    assert_eq!(
        cma.addrs,
        CmaAddrs::V4 {
            src: CLIENT,
            dst: SERVER
        }
    );
    assert_eq!(cma.src_port, 0xbf31);
    assert_eq!(sid.rdma_cm_parts(), Some((PortSpace::TCP, 7174)));
    assert_eq!(r.req.local_qpn, Qpn::new(0x11));
    assert_eq!(r.req.starting_psn, Psn::new(0x9e_1675));
    assert!(r.user_data().iter().all(|&b| b == 0));

    // Accept with the server's QP and PSN: the REP is frame 2 but for our Communication ID.
    let ours = r.conn.comm_id();
    cm.accept(
        now,
        r.conn,
        AcceptParams::new(Qpn::new(0x11), Psn::new(0xd2_ba60)),
    )
    .unwrap();
    let t = cm.poll_transmit().unwrap();
    assert_eq!((t.local_gid, t.peer_gid), (server, client));
    let want = mad_bytes(rep, |a| {
        if let CmAttribute::Rep(x) = a {
            x.local_comm_id = ours;
        }
    });
    assert_eq!(t.mad, want, "REP\nours {}\nrxe's {}", parse(&t), rep);

    // The client's RTU (frame 3), addressed to us.
    let to_us = |a: &mut CmAttribute| match a {
        CmAttribute::Rtu(x) => x.remote_comm_id = ours,
        CmAttribute::Dreq(x) => x.remote_comm_id = ours,
        _ => {}
    };
    cm.handle_mad(now, server, client, &mad_bytes(rtu, to_us));
    let Some(Event::Established { qp, .. }) = cm.poll_event() else {
        panic!("not established: {:?}", cm.stats())
    };
    assert_eq!(
        (qp.peer_qpn, qp.sq_psn, qp.rq_psn),
        (Qpn::new(0x11), Psn::new(0x9e_1675), Psn::new(0xd2_ba60))
    );
    // The client's DREQ (frame 40): Disconnected, and frame 41's DREP but for our ID.
    cm.handle_mad(now, server, client, &mad_bytes(dreq, to_us));
    assert!(matches!(cm.poll_event(), Some(Event::Disconnected { .. })));
    let t = cm.poll_transmit().unwrap();
    let want = mad_bytes(drep, |a| {
        if let CmAttribute::Drep(x) = a {
            x.local_comm_id = ours;
        }
    });
    assert_eq!(t.mad, want, "DREP\nours {}\nrxe's {}", parse(&t), drep);
    assert_eq!(cm.stats().wrong_state + cm.stats().unknown_comm_id, 0);
}

/// The capture's active side: connecting with rping's parameters gives frame 1's REQ but for
/// our Communication and transaction IDs, and the server's REP (frame 2) gives frame 3's RTU.
#[test]
fn rping_cm_active_cm_sends_rxes_req() {
    let (mads, _) = mads_and_rc();
    let (req, rep, rtu) = (&mads[0].repr, &mads[1].repr, &mads[2].repr);
    let CmAttribute::Req(rxe_req) = &req.attribute else {
        panic!()
    };
    let (client, server) = (CLIENT.to_ipv6_mapped(), SERVER.to_ipv6_mapped());
    let now = Instant::ZERO;
    let mut cm = Cm::new(
        CmConfig {
            local_ca_guid: 0x5054_00ff_fe77_000b,
        },
        1,
    );
    let mut p = ConnectParams::new(
        ServiceId::rdma_cm(PortSpace::TCP, 7174),
        client,
        server,
        Qpn::new(0x11),
        Psn::new(0x9e_1675),
    );
    // Linux derives the flow label from the ports; we take it as given. rxe's netdev had an
    // MTU of 1500, hence path MTU 1024: what an endpoint on such a link proposes.
    p.flow_label = rxe_req.primary_path.flow_label;
    p.path_mtu = 3;
    p.private_data = CmaHeader {
        src_port: 0xbf31,
        addrs: CmaAddrs::V4 {
            src: CLIENT,
            dst: SERVER,
        },
    }
    .private_data(&[]);
    let conn = cm.connect(now, p).unwrap();
    let t = cm.poll_transmit().unwrap();
    let ours = parse(&t);
    let mut want = req.clone();
    want.transaction_id = ours.transaction_id;
    let want = mad_bytes(&want, |a| {
        if let CmAttribute::Req(x) = a {
            x.local_comm_id = conn.comm_id();
        }
    });
    assert_eq!(t.mad, want, "REQ\nours {ours}\nrxe's {req}");

    // The server's REP, addressed to us.
    let mut rep = rep.clone();
    rep.transaction_id = ours.transaction_id;
    cm.handle_mad(
        now,
        client,
        server,
        &mad_bytes(&rep, |a| {
            if let CmAttribute::Rep(x) = a {
                x.remote_comm_id = conn.comm_id();
            }
        }),
    );
    let Some(Event::Established { qp, .. }) = cm.poll_event() else {
        panic!("not established: {:?}", cm.stats())
    };
    // The client sends from the REP's PSN, as its first RC request in the capture does.
    assert_eq!(
        (qp.peer_qpn, qp.sq_psn, qp.rq_psn),
        (Qpn::new(0x11), Psn::new(0xd2_ba60), Psn::new(0x9e_1675))
    );
    let t = cm.poll_transmit().unwrap();
    let mut want = rtu.clone();
    want.transaction_id = ours.transaction_id;
    let want = mad_bytes(&want, |a| {
        if let CmAttribute::Rtu(x) = a {
            x.local_comm_id = conn.comm_id();
        }
    });
    assert_eq!(t.mad, want, "RTU\nours {}\nrxe's {rtu}", parse(&t));
}

/// rxe's REQ frame (frame 1), fed whole into an Endpoint with QP1 open and a listener on
/// rping's port: the ConnectRequest names the client's QPN and PSN, and accepting it with the
/// server's QP and PSN makes the REP frame leave, which is frame 2 byte for byte but for the
/// IPv4 identification and checksum, our Communication ID, and the ICRC over them. The client's
/// RTU (frame 3, with our ID) moves the QP to RTS, and the client's first SEND (frame 4) gets
/// frame 5's ACK: the QP the CM set up speaks to rxe's client as rxe's server did.
#[test]
fn rping_req_frame_through_an_endpoint() {
    use rocev2_core::endpoint::{GSI_UDP_SRC_PORT, GsiConfig};
    use rocev2_core::mr::{AccessFlags, VecMemory};
    use rocev2_core::qp::{QpAttr, QpConfig, QpState, RecvWr, Sge};
    use rocev2_core::{DropReason, Endpoint};

    let f = frames("rping_cm.pcap");
    let (req_frame, rep_frame) = (&f[0], &f[1]);
    let now = Instant::ZERO;
    let mut mem = VecMemory::new();
    let mut ep = Endpoint::new(1);
    ep.enable_cm(GsiConfig {
        mac: [0x52, 0x54, 0x00, 0x77, 0x00, 0x0a],
        cm: CmConfig {
            local_ca_guid: 0x5054_00ff_fe77_000a,
        },
        seed: 1,
        // rxe's peer in the capture: a 1500-byte link, path MTU 1024.
        link_mtu: 1500,
    });
    ep.cm_listen(ServiceId::rdma_cm(PortSpace::TCP, RPING_PORT as u16))
        .unwrap();
    let pd = ep.alloc_pd();
    let cq = ep.create_cq(16);
    let qpn = ep.create_qp(QpConfig::new(pd, cq, cq)).unwrap();
    assert_eq!(qpn, Qpn::new(0x11), "rxe's first QPN, as the server's");
    ep.modify_qp(
        qpn,
        QpState::Init,
        &QpAttr::init_all_access(),
        now,
        &mut mem,
    )
    .unwrap();

    assert_eq!(ep.handle_frame(now, req_frame, &mut mem), Ok(()));
    let Some(Event::ConnectRequest(r)) = ep.poll_cm_event() else {
        panic!("no ConnectRequest: {:?}", ep.cm().unwrap().stats())
    };
    assert_eq!(
        (r.req.local_qpn, r.req.starting_psn),
        (Qpn::new(0x11), Psn::new(0x9e_1675))
    );
    assert_eq!(r.cma.map(|c| c.src_port), Some(0xbf31));
    let accept = AcceptParams::new(qpn, Psn::new(0xd2_ba60));
    ep.cm_accept(now, r.conn, accept, &mut mem).unwrap();
    // The QP waits in RTR for the client's first packet, with the client's QPN and PSN.
    assert_eq!(ep.qp(qpn).unwrap().state(), QpState::Rtr);

    let mut buf = Vec::new();
    let n = ep.poll_transmit(now, &mut mem, &mut buf).unwrap();
    let ours = &buf[..n];
    let (repr, payload) = FrameRepr::parse(ours).unwrap();
    assert_eq!(repr.udp.src_port, GSI_UDP_SRC_PORT);
    let m = CmRepr::parse_bytes(payload).unwrap();
    let CmAttribute::Rep(rep) = m.attribute else {
        panic!("not a REP: {m}")
    };
    assert_eq!(rep.remote_comm_id, r.req.local_comm_id);
    assert_eq!(
        (rep.local_qpn, rep.starting_psn),
        (Qpn::new(0x11), Psn::new(0xd2_ba60))
    );
    // Frame 2 with our Communication ID (MAD data byte 0 is at frame byte 14 + 20 + 8 + 12 + 8
    // + 24 = 86).
    assert_eq!(n, rep_frame.len());
    let mut want = rep_frame.clone();
    want[86..90].copy_from_slice(&rep.local_comm_id.to_be_bytes());
    let differ: Vec<usize> = (0..n).filter(|&i| ours[i] != want[i]).collect();
    let allowed = |i: usize| matches!(i, 18 | 19 | 24 | 25) || i >= n - 4;
    assert!(
        differ.iter().all(|&i| allowed(i)),
        "bytes differ beyond IP id/checksum and ICRC: {differ:?}"
    );

    // The client's RTU (frame 3), addressed to our Communication ID: the QP goes to RTS.
    let (mut rtu_repr, rtu_mad) = FrameRepr::parse(&f[2]).unwrap();
    let rtu_mad = mad_bytes(&CmRepr::parse_bytes(rtu_mad).unwrap(), |a| {
        if let CmAttribute::Rtu(x) = a {
            x.remote_comm_id = rep.local_comm_id;
        }
    });
    rtu_repr.eth.dst = [0x52, 0x54, 0x00, 0x77, 0x00, 0x0a];
    let mut rtu_frame = vec![0; rtu_repr.buffer_len(MAD_LEN).unwrap()];
    rtu_repr
        .emit_with(&mut rtu_frame, MAD_LEN, |d| d.copy_from_slice(&rtu_mad))
        .unwrap();
    assert_eq!(ep.handle_frame(now, &rtu_frame, &mut mem), Ok(()));
    assert!(matches!(
        ep.poll_cm_event(),
        Some(Event::Established { .. })
    ));
    assert_eq!(ep.qp(qpn).unwrap().state(), QpState::Rts);

    // The client's first RC packet (frame 4, rping's SEND of its buffer's address) lands in a
    // posted receive, and our ACK is frame 5 but for the IPv4 identification and checksum, the
    // UDP source port (the QP's own ECMP entropy) and the ICRC over them.
    let mr = ep
        .register_mr(pd, 0x1000, 64, AccessFlags::LOCAL_WRITE)
        .unwrap();
    mem.insert(mr.id, vec![0; 64]);
    let sge = Sge {
        addr: mr.addr,
        length: 64,
        lkey: mr.lkey,
    };
    ep.post_recv(
        qpn,
        RecvWr {
            wr_id: 1,
            sg_list: vec![sge],
        },
    )
    .unwrap();
    assert_eq!(ep.handle_frame(now, &f[3], &mut mem), Ok(()));
    let n = ep.poll_transmit(now, &mut mem, &mut buf).unwrap();
    let (ours, want) = (&buf[..n], &f[4]);
    assert_eq!(n, want.len());
    let differ: Vec<usize> = (0..n).filter(|&i| ours[i] != want[i]).collect();
    let allowed = |i: usize| matches!(i, 18 | 19 | 24 | 25 | 34 | 35) || i >= n - 4;
    assert!(
        differ.iter().all(|&i| allowed(i)),
        "ACK bytes differ beyond IP id/checksum, UDP source port and ICRC: {differ:?}"
    );
    let mut wcs = Vec::new();
    assert_eq!(ep.poll_cq(cq, &mut wcs, 4), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].byte_len), (1, 16));
    assert_eq!(ep.stats().total_drops(), 0);
    assert_eq!(ep.stats().drops(DropReason::BadMad), 0);
}
