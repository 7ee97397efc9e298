//! rdma_cm-style connections between engine shards whose MADs all land on the wrong shard
//! (`docs/datapath.md` "Several queues"): a client and a server, two AF_XDP shards
//! each on the ends of a veth pair of two queues. The client's shard k binds queue k + 1 mod 2
//! (steering crossed, as `write_bw --cross-queues`), the server's binds queue k; server shard k
//! listens on its own Service ID, client shard k connects to it through the CM. On a veth a
//! frame sent on queue q arrives on the peer's queue q, so every MAD (REQ, REP, RTU, DREQ,
//! DREP) and every data frame reaches the other shard first and is forwarded to the one whose
//! CM or QP owns it. Each connection establishes, moves 64 KiB each way (compared byte for
//! byte), and disconnects with DREQ/DREP; the shards' `rx_cm_forwarded` show the MADs took the
//! hop and each CM received exactly its own MADs. The same over AF_PACKET, where every shard
//! sees every frame: each MAD is taken by its owner alone.
//!
//! Needs root: the test re-runs itself inside a fresh network namespace.

use rocev2::{
    AcceptParams, AccessFlags, CmEvent, ConnectParams, DatapathKind, Device, DeviceConfig,
    PortSpace, Psn, RecvWr, SendOp, SendWr, ServiceId, WcOpcode, WcStatus, gid,
};
use rocev2_testbed::exec::Namespace;
use rocev2_testbed::{VethEnd, veth_pair};
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::time::Duration;

const CLIENT: &str = "10.9.18.1";
const SERVER: &str = "10.9.18.2";
const SHARDS: u32 = 2;
const LEN: usize = 65536;
const WAIT: Duration = Duration::from_secs(20);

/// Server shard k's Service ID.
fn service(k: u32) -> ServiceId {
    ServiceId::rdma_cm(PortSpace::TCP, 7300 + k as u16)
}

/// What shard k of `side` sends: different per shard and side.
fn pattern(side: u8, k: u32) -> Vec<u8> {
    (0..LEN)
        .map(|i| (i as u32 * 31 + k * 7 + u32::from(side)) as u8)
        .collect()
}

/// Shard k of `iface` over `kind`; over AF_XDP its socket on queue `bind` (AF_PACKET sees
/// every queue).
fn shard(kind: DatapathKind, iface: &str, k: u32, bind: u32) -> Device {
    #[cfg_attr(not(feature = "xdp"), allow(unused_mut))]
    let mut cfg = DeviceConfig {
        queue: Some(k),
        ..DeviceConfig::default()
    };
    #[cfg(feature = "xdp")]
    {
        cfg.datapath.xdp.queue = Some(bind);
    }
    #[cfg(not(feature = "xdp"))]
    let _ = bind;
    Device::open_with(iface, kind, cfg).unwrap()
}

/// A shard's QP with a region: the first half sent from, the second received into.
struct Side {
    qp: rocev2::Qp,
    cq: rocev2::Cq,
    mr: rocev2::Mr,
}

fn side(d: &Device, send: &[u8]) -> Side {
    let pd = d.alloc_pd().unwrap();
    let cq = d.create_cq(16).unwrap();
    let qp = d.create_rc_qp(pd, cq, cq).unwrap();
    let mut buf = send.to_vec();
    buf.resize(2 * LEN, 0);
    let mr = d.register(pd, buf, AccessFlags::LOCAL_WRITE).unwrap();
    let sge = mr.sge(LEN as u64, LEN as u32).unwrap();
    d.post_recv(
        qp,
        RecvWr {
            wr_id: 2,
            sg_list: vec![sge],
        },
    )
    .unwrap();
    Side { qp, cq, mr }
}

/// Sends the first half of the region and waits for both the send and the receive, then checks
/// the received half against `expect`.
fn exchange(d: &Device, s: &Side, expect: &[u8]) {
    let sge = s.mr.sge(0, LEN as u32).unwrap();
    d.post_send(s.qp, SendWr::new(1, SendOp::Send).sge(sge))
        .unwrap();
    let mut wcs = Vec::new();
    while wcs.len() < 2 {
        d.wait_cq(s.cq, &mut wcs, 2, WAIT).unwrap();
    }
    for wc in &wcs {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
    let recv = wcs.iter().find(|w| w.opcode == WcOpcode::Recv).unwrap();
    assert_eq!((recv.wr_id, recv.byte_len as usize), (2, LEN));
    assert!(d.mr_guard(&s.mr).unwrap()[LEN..] == *expect, "data differ");
}

/// Waits for the first event of `d` that `pick` takes.
fn event(d: &Device, what: &str, pick: impl FnMut(&CmEvent) -> bool) -> CmEvent {
    d.next_cm_event(pick, WAIT)
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// The CM MADs shard `d` forwarded, after checking that its CM received exactly `mads` (its
/// own connection's, each once).
fn forwarded(d: &Device, who: &str, mads: u64) -> u64 {
    let g = d.engine().unwrap();
    let s = g.driver().datapath_stats();
    let cm = g.cm().unwrap().stats().clone();
    println!(
        "{who}: {}; rx_forwarded {}, rx_cm_forwarded {}, rx_from_shards {}, rx_other_shard {}, \
         cm {cm:?}",
        d.datapath_reason(),
        s.rx_forwarded,
        s.rx_cm_forwarded,
        s.rx_from_shards,
        s.rx_other_shard
    );
    assert_eq!(
        (
            cm.unknown_comm_id,
            cm.no_listener,
            cm.timed_out,
            cm.duplicate
        ),
        (0, 0, 0, 0),
        "{who}: a MAD reached a CM that does not own it"
    );
    assert_eq!(cm.mads_received, mads, "{who}: {cm:?}");
    assert!(
        s.rx_from_shards + s.rx_other_shard > 0,
        "{who}: the other shard's frames never came here"
    );
    s.rx_cm_forwarded
}

/// The server, in namespace `ns`: shard k listens on `service(k)`, accepts one connection,
/// exchanges data and waits for the client's DREQ. Returns the MADs its shards forwarded.
fn server(kind: DatapathKind, ns: &str, ready: std::sync::mpsc::Sender<()>) -> u64 {
    let f = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
    rustix::thread::move_into_link_name_space(
        f.as_fd(),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )
    .unwrap();
    let devs: Vec<Device> = (0..SHARDS).map(|k| shard(kind, "csb", k, k)).collect();
    for (k, d) in (0..SHARDS).zip(&devs) {
        d.cm_listen(service(k)).unwrap();
    }
    // One listener per Service ID among the shards of an interface.
    assert!(devs[1].cm_listen(service(0)).is_err());
    let sides: Vec<Side> = (0..SHARDS)
        .map(|k| side(&devs[k as usize], &pattern(b's', k)))
        .collect();
    ready.send(()).unwrap();
    for (k, (d, s)) in (0..SHARDS).zip(devs.iter().zip(&sides)) {
        let CmEvent::ConnectRequest(req) =
            event(d, "REQ", |e| matches!(e, CmEvent::ConnectRequest(_)))
        else {
            unreachable!()
        };
        assert_eq!(req.req.service_id, service(k).0);
        d.cm_accept(
            req.conn,
            AcceptParams::new(s.qp.qpn(), Psn::new(0x5000 + k)),
        )
        .unwrap();
        let conn = req.conn;
        event(
            d,
            "RTU",
            |e| matches!(e, CmEvent::Established { conn: c, .. } if *c == conn),
        );
        exchange(d, s, &pattern(b'c', k));
        let CmEvent::Disconnected { private_data, .. } = event(
            d,
            "DREQ",
            |e| matches!(e, CmEvent::Disconnected { conn: c, .. } if *c == conn),
        ) else {
            unreachable!()
        };
        assert_eq!(
            private_data.get(..3),
            Some(&b"bye"[..]),
            "the client's DREQ"
        );
    }
    devs.iter()
        .zip(0..)
        .map(|(d, k)| forwarded(d, &format!("server shard {k}"), 3))
        .sum()
}

fn body(kind: DatapathKind, ns: &str) {
    let _ns = Namespace::add(ns).unwrap();
    veth_pair(
        VethEnd {
            addrs: &[&format!("{CLIENT}/24")],
            queues: Some(SHARDS),
            ..VethEnd::new("csa")
        },
        VethEnd {
            netns: Some(ns),
            addrs: &[&format!("{SERVER}/24")],
            queues: Some(SHARDS),
            ..VethEnd::new("csb")
        },
    )
    .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let ns_b = ns.to_string();
    let server = std::thread::spawn(move || server(kind, &ns_b, tx));
    let devs: Vec<Device> = (0..SHARDS)
        .map(|k| shard(kind, "csa", k, (k + 1) % SHARDS))
        .collect();
    rx.recv_timeout(WAIT).expect("server ready");
    let (me, peer) = (
        gid(CLIENT.parse::<IpAddr>().unwrap()),
        gid(SERVER.parse::<IpAddr>().unwrap()),
    );
    for (k, d) in (0..SHARDS).zip(&devs) {
        let s = side(d, &pattern(b'c', k));
        let params = ConnectParams::new(service(k), me, peer, s.qp.qpn(), Psn::new(0x100 + k));
        let conn = d.cm_connect(s.qp, params, WAIT).unwrap();
        assert_eq!(
            conn.comm_id() >> 26,
            k,
            "the CM's IDs carry its shard's block"
        );
        event(
            d,
            "REP",
            |e| matches!(e, CmEvent::Established { conn: c, .. } if *c == conn),
        );
        exchange(d, &s, &pattern(b's', k));
        d.cm_disconnect(conn, b"bye").unwrap();
        event(
            d,
            "DREP",
            |e| matches!(e, CmEvent::Disconnected { conn: c, .. } if *c == conn),
        );
        let cm = d.engine().unwrap().cm().unwrap().stats().clone();
        assert_eq!(cm.retransmitted, 0, "every MAD answered at once: {cm:?}");
    }
    let server_fwd = server.join().expect("server");
    let client_fwd: u64 = devs
        .iter()
        .zip(0..)
        .map(|(d, k)| forwarded(d, &format!("client shard {k}"), 2))
        .sum();
    // Over AF_XDP every MAD took the hop: per connection the REQ, RTU and DREQ to the server,
    // the REP and DREP to the client. Over AF_PACKET nothing is forwarded.
    let hops = match kind {
        DatapathKind::Xdp => 1,
        _ => 0,
    };
    assert_eq!(server_fwd, hops * 3 * u64::from(SHARDS), "server");
    assert_eq!(client_fwd, hops * 2 * u64::from(SHARDS), "client");
}

fn in_netns(test: &str, tag: &str, kind: DatapathKind) {
    let ns = format!("rv2cs{tag}{}", std::process::id());
    if rocev2_testbed::exec::in_fresh_netns(test, &ns, Duration::from_secs(300))
        .expect("re-run in a fresh namespace")
    {
        body(kind, &format!("{ns}b"));
    }
}

#[cfg(feature = "xdp")]
#[test]
fn cm_connects_shards_whose_mads_all_land_on_the_wrong_shard() {
    in_netns(
        "cm_connects_shards_whose_mads_all_land_on_the_wrong_shard",
        "x",
        DatapathKind::Xdp,
    );
}

#[test]
fn cm_connects_packet_shards_each_mad_taken_by_its_owner_alone() {
    in_netns(
        "cm_connects_packet_shards_each_mad_taken_by_its_owner_alone",
        "p",
        DatapathKind::Packet,
    );
}
