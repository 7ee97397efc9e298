//! A process talking to itself over its interface's own address, as it could through a NIC or
//! rdma_rxe (`docs/datapath.md`, "Loopback"), on one end of a veth pair of two queues:
//!
//! - one device: two RC QPs connected to each other over the address (the MAC left for the
//!   device to resolve), a SEND each way compared byte for byte; every frame came back inside
//!   the process (`tx_looped`), none left on the link;
//! - two engine shards of the interface: shard 0 connects through the RDMA CM to a Service ID
//!   shard 1 listens on, at the same address, and the QPs exchange SENDs; the REQ reaches the
//!   listening shard and the data frames the shard owning their QP (`rx_forwarded`).
//!
//! Over AF_XDP and AF_PACKET. Needs root: the test re-runs itself inside a fresh network
//! namespace.

use rocev2::{
    AcceptParams, AccessFlags, CmEvent, ConnectOptions, ConnectParams, DatapathKind, Device,
    DeviceConfig, PortSpace, Psn, RecvWr, RemoteQp, SendOp, SendWr, ServiceId, WcOpcode, WcStatus,
    gid,
};
use rocev2_testbed::exec::Namespace;
use rocev2_testbed::{VethEnd, veth_pair};
use std::net::IpAddr;
use std::time::Duration;

const OWN: &str = "10.9.19.1";
const PEER: &str = "10.9.19.2";
const LEN: usize = 16384;
const WAIT: Duration = Duration::from_secs(20);

/// An RC QP on `d` with a region whose first half it sends (filled with `tag`) and whose
/// second half it receives into, one receive posted.
fn endpoint(d: &Device, tag: u8) -> (rocev2::Qp, rocev2::Cq, rocev2::Mr) {
    let pd = d.alloc_pd().unwrap();
    let cq = d.create_cq(8).unwrap();
    let qp = d.create_rc_qp(pd, cq, cq).unwrap();
    let mut buf: Vec<u8> = (0..LEN).map(|i| (i as u8) ^ tag).collect();
    buf.resize(2 * LEN, 0);
    let mr = d.register(pd, buf, AccessFlags::LOCAL_WRITE).unwrap();
    let sg_list = vec![mr.sge(LEN as u64, LEN as u32).unwrap()];
    d.post_recv(qp, RecvWr { wr_id: 2, sg_list }).unwrap();
    (qp, cq, mr)
}

/// SENDs each endpoint's first half to the other, then checks each received half.
fn swap(
    a: (&Device, &(rocev2::Qp, rocev2::Cq, rocev2::Mr), u8),
    b: (&Device, &(rocev2::Qp, rocev2::Cq, rocev2::Mr), u8),
) {
    for (d, (qp, _, mr), _) in [a, b] {
        let sge = mr.sge(0, LEN as u32).unwrap();
        d.post_send(*qp, SendWr::new(1, SendOp::Send).sge(sge))
            .unwrap();
    }
    for ((d, (_, cq, mr), _), from) in [(a, b.2), (b, a.2)] {
        let mut wcs = Vec::new();
        while wcs.len() < 2 {
            d.wait_cq(*cq, &mut wcs, 2, WAIT).unwrap();
        }
        assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
        assert!(
            wcs.iter()
                .any(|w| w.opcode == WcOpcode::Recv && w.byte_len as usize == LEN)
        );
        let want: Vec<u8> = (0..LEN).map(|i| (i as u8) ^ from).collect();
        assert!(d.mr_guard(mr).unwrap()[LEN..] == want[..], "data differ");
    }
}

fn one_device(kind: DatapathKind) {
    let d = Device::open(IFACE, kind).unwrap();
    let (a, b) = (endpoint(&d, 0x11), endpoint(&d, 0x22));
    let ip: IpAddr = OWN.parse().unwrap();
    // Each side's first PSN is the one the other expects.
    for (me, them, mine, theirs) in [(&a, &b, 0x100, 0x200), (&b, &a, 0x200, 0x100)] {
        let remote = RemoteQp {
            qpn: them.0.qpn(),
            psn: theirs,
            ip,
            mac: None,
        };
        let opts = ConnectOptions {
            local_psn: mine,
            ..ConnectOptions::default()
        };
        d.connect(me.0, &remote, &opts).unwrap();
    }
    swap((&d, &a, 0x11), (&d, &b, 0x22));
    let s = d.engine().unwrap().driver().datapath_stats();
    // 16 KiB each way at the default MTU of 1024 is at least 16 frames, plus the ACKs.
    assert!(s.tx_looped >= 32, "{s:?}");
    assert_eq!(s.tx_packets, 0, "nothing left on the link: {s:?}");
}

/// Shard `k` of the interface (over AF_XDP bound to queue `k`).
fn shard(kind: DatapathKind, k: u32) -> Device {
    #[cfg_attr(not(feature = "xdp"), allow(unused_mut))]
    let mut cfg = DeviceConfig {
        queue: Some(k),
        ..DeviceConfig::default()
    };
    #[cfg(feature = "xdp")]
    {
        cfg.datapath.xdp.queue = Some(k);
    }
    Device::open_with(IFACE, kind, cfg).unwrap()
}

fn two_shards(kind: DatapathKind) {
    let (d0, d1) = (shard(kind, 0), shard(kind, 1));
    let sid = ServiceId::rdma_cm(PortSpace::TCP, 7400);
    d1.cm_listen(sid).unwrap();
    let (a, b) = (endpoint(&d0, 0x33), endpoint(&d1, 0x44));
    let me = gid(OWN.parse::<IpAddr>().unwrap());
    let conn = d0
        .cm_connect(
            a.0,
            ConnectParams::new(sid, me, me, a.0.qpn(), Psn::new(7)),
            WAIT,
        )
        .unwrap();
    let req = d1
        .next_cm_event(|e| matches!(e, CmEvent::ConnectRequest(_)), WAIT)
        .unwrap();
    let CmEvent::ConnectRequest(req) = req else {
        unreachable!()
    };
    d1.cm_accept(req.conn, AcceptParams::new(b.0.qpn(), Psn::new(9)))
        .unwrap();
    for (d, c) in [(&d0, conn), (&d1, req.conn)] {
        d.next_cm_event(
            |e| matches!(e, CmEvent::Established { conn, .. } if *conn == c),
            WAIT,
        )
        .unwrap();
    }
    swap((&d0, &a, 0x33), (&d1, &b, 0x44));
    for d in [&d0, &d1] {
        let s = d.engine().unwrap().driver().datapath_stats();
        assert!(s.tx_looped > 0, "{s:?}");
        assert_eq!(s.tx_packets, 0, "nothing left on the link: {s:?}");
        // Every looped frame is the other shard's: forwarded to it, not handed to this core.
        assert_eq!(s.rx_forwarded, s.tx_looped, "{s:?}");
    }
}

const IFACE: &str = "ownA";

fn body(kind: DatapathKind, peer_ns: &str) {
    let _peer = Namespace::add(peer_ns).unwrap();
    veth_pair(
        VethEnd {
            addrs: &[&format!("{OWN}/24")],
            queues: Some(2),
            ..VethEnd::new(IFACE)
        },
        VethEnd {
            netns: Some(peer_ns),
            addrs: &[&format!("{PEER}/24")],
            queues: Some(2),
            ..VethEnd::new("ownB")
        },
    )
    .unwrap();
    one_device(kind);
    two_shards(kind);
}

fn in_netns(test: &str, tag: &str, kind: DatapathKind) {
    let ns = format!("rv2oa{tag}{}", std::process::id());
    if rocev2_testbed::exec::in_fresh_netns(test, &ns, Duration::from_secs(300))
        .expect("re-run in a fresh namespace")
    {
        body(kind, &format!("{ns}b"));
    }
}

#[cfg(feature = "xdp")]
#[test]
fn own_address_loops_back_within_a_device_and_between_xdp_shards() {
    in_netns(
        "own_address_loops_back_within_a_device_and_between_xdp_shards",
        "x",
        DatapathKind::Xdp,
    );
}

#[test]
fn own_address_loops_back_within_a_device_and_between_packet_shards() {
    in_netns(
        "own_address_loops_back_within_a_device_and_between_packet_shards",
        "p",
        DatapathKind::Packet,
    );
}
