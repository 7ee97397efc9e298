//! Ground truth from Linux soft-RoCE: every frame in `../shared/captures/*.pcap` (rdma_rxe on
//! kernel 6.1 driven by rdma-core and perftest, see that folder's README) must parse, its ICRC
//! must verify with our code, and emitting the parsed `FrameRepr` must give back the exact bytes.

use crate::interop_util::captures;

use captures::frames;
use rocev2_core::Endpoint;
use rocev2_core::mr::{AccessFlags, VecMemory};
use rocev2_core::qp::{AddressHandle, Mtu, Path, QpConfig, RecvWr, SendOp, SendWr, Sge, UdDest};
use rocev2_core::time::Instant;
use rocev2_core::wire::{
    Error, FrameRepr, IpRepr, Opcode, Operation, Psn, Qpn, Syndrome, Transport, frame::Ecn,
    frame::Frame,
};
use std::collections::BTreeMap;

/// Each parsed frame with its payload.
type Parsed = Vec<(FrameRepr, Vec<u8>)>;

/// Parses, verifies and re-emits every frame; returns the opcode histogram and the reprs.
fn check_capture(name: &str) -> (BTreeMap<u8, usize>, Parsed) {
    let mut hist = BTreeMap::new();
    let mut reprs = Vec::new();
    for (i, bytes) in frames(name).iter().enumerate() {
        let (repr, payload) =
            FrameRepr::parse(bytes).unwrap_or_else(|e| panic!("{name} frame {}: {e}", i + 1));
        let mut again = vec![0u8; repr.buffer_len(payload.len()).unwrap()];
        repr.emit(&mut again, payload).unwrap();
        assert_eq!(
            &again,
            bytes,
            "{name} frame {}: re-emitted bytes differ\n{repr}",
            i + 1
        );
        *hist.entry(repr.roce.bth.opcode.0).or_insert(0) += 1;
        reprs.push((repr, payload.to_vec()));
    }
    (hist, reprs)
}

#[test]
fn captures_rc_pingpong_round_trip() {
    let (hist, reprs) = check_capture("rc_pingpong.pcap");
    assert_eq!(
        hist,
        BTreeMap::from([(0x00, 10), (0x01, 20), (0x02, 10), (0x11, 10)])
    );
    // rc_pingpong.tool-output.txt: the client (192.168.77.11) starts at PSN 0x37cf8a towards
    // QPN 0x11 with 4096-byte messages at MTU 1024 (First, Middle, Middle, Last).
    let (first, payload) = &reprs[0];
    assert_eq!(first.roce.bth.opcode, Opcode::rc(Operation::SendFirst));
    assert_eq!(first.roce.bth.dest_qp, Qpn::new(0x11));
    assert_eq!(first.roce.bth.psn, Psn::new(0x37cf8a));
    assert_eq!(payload.len(), 1024);
    let acks = reprs
        .iter()
        .filter(|(r, _)| r.roce.bth.opcode == Opcode::rc(Operation::Acknowledge));
    for (ack, _) in acks {
        assert!(matches!(ack.roce.aeth.unwrap().syndrome, Syndrome::Ack(_)));
    }
}

#[test]
fn captures_write_bw_round_trip() {
    let (hist, reprs) = check_capture("write_bw.pcap");
    assert_eq!(
        hist,
        BTreeMap::from([(0x06, 5), (0x07, 30), (0x08, 5), (0x11, 5)])
    );
    // write_bw.tool-output.txt: the server's buffer is RKey 0x2ba at VAddr 0x564acdd26000 and
    // every message is 8192 bytes.
    let reth = reprs[0].0.roce.reth.expect("WRITE First carries a RETH");
    assert_eq!(
        (reth.r_key, reth.va, reth.dma_len),
        (0x2ba, 0x564a_cdd2_6000, 8192)
    );
}

#[test]
fn captures_read_bw_round_trip() {
    let (hist, reprs) = check_capture("read_bw.pcap");
    assert_eq!(
        hist,
        BTreeMap::from([(0x0c, 5), (0x0d, 5), (0x0e, 30), (0x0f, 5)])
    );
    let req = reprs
        .iter()
        .find(|(r, _)| r.roce.bth.opcode == Opcode::rc(Operation::RdmaReadRequest))
        .unwrap();
    assert_eq!(req.0.roce.reth.unwrap().dma_len, 8192);
    // A READ response of 8 packets advances the PSN by 8 (IBA §9.7.1: a READ request consumes
    // one PSN per response packet).
    let firsts: Vec<Psn> = reprs
        .iter()
        .filter(|(r, _)| r.roce.bth.opcode == Opcode::rc(Operation::RdmaReadResponseFirst))
        .map(|(r, _)| r.roce.bth.psn)
        .collect();
    assert!(
        firsts.windows(2).all(|w| w[1].distance(w[0]) == 8),
        "{firsts:?}"
    );
}

#[test]
fn captures_atomic_fadd_round_trip() {
    let (hist, reprs) = check_capture("atomic_fadd.pcap");
    assert_eq!(hist, BTreeMap::from([(0x12, 5), (0x14, 5)]));
    let fadd = reprs
        .iter()
        .find(|(r, _)| r.roce.atomic_eth.is_some())
        .unwrap();
    assert_eq!(
        fadd.0.roce.atomic_eth.unwrap().va % 8,
        0,
        "atomics target 8-byte aligned words"
    );
    assert!(
        reprs
            .iter()
            .filter(|(r, _)| r.roce.bth.opcode.0 == 0x12)
            .all(|(r, _)| r.roce.atomic_ack_eth.is_some())
    );
}

#[test]
fn captures_ud_pingpong_round_trip() {
    let (hist, reprs) = check_capture("ud_pingpong.pcap");
    assert_eq!(hist, BTreeMap::from([(0x64, 10)]));
    assert!(
        reprs
            .iter()
            .all(|(r, _)| r.roce.bth.opcode.transport() == Transport::Ud && r.roce.deth.is_some())
    );
}

/// A UD QP standing in for `ibv_ud_pingpong`'s server (ud_pingpong.tool-output.txt: QPN 0x11,
/// send PSN 0x537e9d, Q_Key 0x11111111 in every DETH) takes the client's first rxe frame as
/// libibverbs delivers it (GRH area = 20 zero bytes and the IPv4 header, then the 512-byte
/// payload; byte_len 552; source QP 0x11), and its reply is rxe's frame 2 byte for byte once
/// rxe's IPv4 Identification, which rocev2 writes as 0, is copied in.
#[test]
fn captures_ud_pingpong_received_and_answered_like_rxe() {
    let frames = frames("ud_pingpong.pcap");
    let (request, reply) = (&frames[0], &frames[1]);
    let now = Instant::ZERO;
    let mut ep = Endpoint::new(1);
    let mut mem = VecMemory::new();
    let pd = ep.alloc_pd();
    let cq = ep.create_cq(16);
    let mr = ep
        .register_mr(pd, 0x1000, 2048, AccessFlags::LOCAL_WRITE)
        .unwrap();
    mem.insert(mr.id, vec![0; 2048]);
    let qpn = ep
        .create_ud_qp(QpConfig::new(pd, cq, cq), Mtu::Mtu1024)
        .unwrap();
    assert_eq!(qpn, Qpn::new(0x11));
    ep.activate_ud_qp(qpn, 0x1111_1111, 0x537e9d, now, &mut mem)
        .unwrap();
    let sge = |addr, length| Sge {
        addr,
        length,
        lkey: mr.lkey,
    };
    let sg_list = vec![sge(0x1000, 512 + 40)];
    ep.post_recv(qpn, RecvWr { wr_id: 1, sg_list }).unwrap();
    assert_eq!(ep.handle_frame(now, request, &mut mem), Ok(()));
    let mut wcs = Vec::new();
    ep.poll_cq(cq, &mut wcs, 8);
    let wc = wcs[0];
    assert_eq!((wc.wr_id, wc.byte_len, wc.src_qp), (1, 552, Qpn::new(0x11)));
    assert_eq!(
        wc.ud.unwrap().sgid,
        "::ffff:192.168.77.11"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
    );
    let buf = mem.get(mr.id).unwrap();
    assert_eq!(buf[..20], [0u8; 20]);
    assert_eq!(buf[20..40], request[14..34]);
    let (req, payload) = FrameRepr::parse(request).unwrap();
    assert_eq!(buf[40..552], *payload);

    // The reply: the same 512 bytes back to the client's QP 0x11.
    let (want, _) = FrameRepr::parse(reply).unwrap();
    let IpRepr::V4 { src, dst, .. } = want.ip else {
        panic!("IPv4 capture")
    };
    let path = Path {
        src_mac: want.eth.src,
        dst_mac: want.eth.dst,
        vlan: None,
        src_ip: src.into(),
        dst_ip: dst.into(),
        dscp: 0,
        ecn: Ecn::NotEct,
        hop_limit: 64,
        udp_src_port: want.udp.src_port,
        flow_label: 0,
    };
    let dest = UdDest {
        ah: AddressHandle::new(path).unwrap(),
        remote_qpn: req.roce.deth.unwrap().src_qp,
        remote_qkey: 0x1111_1111,
    };
    mem.get_mut(mr.id).unwrap()[1024..1536].copy_from_slice(payload);
    let wr = SendWr::new(2, SendOp::Send).sge(sge(0x1400, 512)).ud(dest);
    ep.post_send(qpn, wr).unwrap();
    let mut out = Vec::new();
    let n = ep.poll_transmit(now, &mut mem, &mut out).unwrap();
    let (mut ours, ours_payload) = FrameRepr::parse(&out[..n]).unwrap();
    assert_eq!(ours.roce, want.roce);
    if let (
        IpRepr::V4 { identification, .. },
        IpRepr::V4 {
            identification: rxe,
            ..
        },
    ) = (&mut ours.ip, want.ip)
    {
        assert_eq!(*identification, 0);
        *identification = rxe;
    }
    let mut again = vec![0; ours.buffer_len(ours_payload.len()).unwrap()];
    ours.emit(&mut again, ours_payload).unwrap();
    assert_eq!(&again, reply);
}

#[test]
fn captures_rping_cm_round_trip() {
    let (hist, reprs) = check_capture("rping_cm.pcap");
    assert_eq!(
        hist,
        BTreeMap::from([
            (0x04, 12),
            (0x0a, 3),
            (0x0c, 3),
            (0x10, 3),
            (0x11, 15),
            (0x64, 5)
        ])
    );
    // The CM MADs go to QP1 with the GSI Q_Key.
    for (r, _) in reprs.iter().filter(|(r, _)| r.roce.deth.is_some()) {
        assert_eq!(r.roce.bth.dest_qp, Qpn::GSI);
        assert_eq!(r.roce.deth.unwrap().q_key, 0x8001_0000);
    }
}

/// A single flipped bit anywhere the ICRC covers is caught; in a masked field it is not.
#[test]
fn captures_every_covered_bit_flip_is_detected() {
    let frame = &frames("write_bw.pcap")[0];
    let frame = &frame[..]; // 1082-byte RDMA WRITE First
    let checked = Frame::new_checked(frame).unwrap();
    checked.verify_icrc().unwrap();
    let l3 = 14;
    let masked = |i: usize| {
        // IPv4 TOS, TTL, checksum; UDP checksum; BTH byte 4.
        [
            l3 + 1,
            l3 + 8,
            l3 + 10,
            l3 + 11,
            l3 + 26,
            l3 + 27,
            l3 + 28 + 4,
        ]
        .contains(&i)
    };
    for i in l3..frame.len() {
        let mut f = frame.to_vec();
        f[i] ^= 0x10;
        let verdict = Frame::new_checked(&f).and_then(|fr| fr.verify_icrc());
        if masked(i) {
            // The ICRC ignores these; the IP or UDP checksum may still object.
            assert_ne!(
                verdict,
                Err(Error::BadIcrc),
                "byte {i} is masked from the ICRC"
            );
        } else {
            assert!(verdict.is_err(), "flip at byte {i} went unnoticed");
        }
    }
}
