//! UD between two processes on the ends of a veth pair: a client (UDP-socket datapath) pings
//! a UD echo server (AF_PACKET, in its own namespace and process) which answers each ping to
//! the address its completion names (the GRH area's source and the DETH's source QP), as a
//! datagram service does. Every byte, the GRH area and the source QPNs are checked on both
//! sides.
//!
//! Needs root: the test re-runs itself inside a fresh network namespace, and the server is
//! this test binary again, run in a second namespace.

use rocev2::{
    AccessFlags, AhAttr, DatapathKind, Device, GRH_LEN, Qpn, RecvWr, SendOp, SendWr, UdAddress,
    WcOpcode, WcStatus, gid_to_ip,
};
use rocev2_testbed::exec::{Namespace, Process, netns_command};
use rocev2_testbed::{VethEnd, veth_pair};
use std::net::IpAddr;
use std::time::Duration;

const TEST: &str = "ud_echo_between_two_processes_over_veth";
const ROLE: &str = "ROCEV2_UD_VETH_SERVER";
const CLIENT: &str = "10.9.16.1";
const SERVER: &str = "10.9.16.2";
const Q_KEY: u32 = 0x1111_0001;
const PINGS: u64 = 20;
const WAIT: Duration = Duration::from_secs(20);
/// Receive buffers: the GRH area and a 1024-byte message.
const SLOT: u32 = GRH_LEN as u32 + 1024;

/// The message of ping `i`: `i + 1` bytes, different for every ping.
fn message(i: u64) -> Vec<u8> {
    (0..=i).map(|k| (k * 7 + i) as u8).collect()
}

/// The GRH area of an IPv4 packet from `src` to `dst`: 20 zero bytes, then the header.
fn check_grh(area: &[u8], src: &str, dst: &str) {
    let ip = |s: &str| match s.parse::<IpAddr>().unwrap() {
        IpAddr::V4(v) => v.octets(),
        IpAddr::V6(_) => unreachable!("the test runs over IPv4"),
    };
    assert!(area[..20].iter().all(|b| *b == 0), "{area:?}");
    assert_eq!(area[20], 0x45, "IPv4, 20-byte header");
    assert_eq!(area[29], 17, "UDP");
    assert_eq!(&area[32..36], &ip(src));
    assert_eq!(&area[36..40], &ip(dst));
}

/// The echo server: one UD QP, a receive per ping; answers each to where it came from.
fn server() {
    let d = Device::open("udb", DatapathKind::Packet).unwrap();
    let pd = d.alloc_pd().unwrap();
    let cq = d.create_cq(64).unwrap();
    let qp = d.create_ud_qp(pd, cq, cq, Q_KEY).unwrap();
    let n = PINGS as usize;
    let mr = d
        .register(pd, vec![0u8; n * SLOT as usize], AccessFlags::LOCAL_WRITE)
        .unwrap();
    for i in 0..PINGS {
        let sge = mr.sge(i * u64::from(SLOT), SLOT).unwrap();
        d.post_recv(
            qp,
            RecvWr {
                wr_id: i,
                sg_list: vec![sge],
            },
        )
        .unwrap();
    }
    println!("UDQPN {}", qp.qpn().value());
    let mut ah = None;
    for i in 0..PINGS {
        let mut wcs = Vec::new();
        d.wait_cq(cq, &mut wcs, 1, WAIT).unwrap();
        let wc = wcs[0];
        if wc.opcode == WcOpcode::Send {
            assert!(wc.status.is_success(), "{wc:?}");
            d.wait_cq(cq, &mut wcs, 1, WAIT).unwrap();
        }
        let wc = *wcs.last().unwrap();
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (i, WcStatus::Success, WcOpcode::Recv)
        );
        let len = wc.byte_len as usize - GRH_LEN;
        let at = (i * u64::from(SLOT)) as usize;
        let echo = {
            let m = d.mr_guard(&mr).unwrap();
            check_grh(&m[at..at + GRH_LEN], CLIENT, SERVER);
            assert_eq!(&m[at + GRH_LEN..at + GRH_LEN + len], &message(i)[..]);
            m[at + GRH_LEN..at + GRH_LEN + len].to_vec()
        };
        let src = gid_to_ip(wc.ud.unwrap().sgid);
        assert_eq!(src.to_string(), CLIENT);
        let ah = *ah.get_or_insert_with(|| d.create_ah(pd, &AhAttr::new(src)).unwrap());
        let to = UdAddress {
            ah,
            qpn: wc.src_qp,
            q_key: Q_KEY,
        };
        d.post_send_to(qp, to, SendWr::new(100 + i, SendOp::Send).inline(echo))
            .unwrap();
    }
    d.drain(Duration::from_secs(5)).unwrap();
}

#[test]
fn ud_echo_between_two_processes_over_veth() {
    if std::env::var_os(ROLE).is_some() {
        return server();
    }
    let ns = format!("rv2ud{}", std::process::id());
    if !rocev2_testbed::exec::in_fresh_netns(TEST, &ns, Duration::from_secs(300))
        .expect("re-run in a fresh namespace")
    {
        return;
    }
    let peer = format!("{ns}b");
    let _peer = Namespace::add(&peer).unwrap();
    veth_pair(
        VethEnd {
            addrs: &[&format!("{CLIENT}/24")],
            ..VethEnd::new("uda")
        },
        VethEnd {
            netns: Some(&peer),
            addrs: &[&format!("{SERVER}/24")],
            ..VethEnd::new("udb")
        },
    )
    .unwrap();

    let exe = std::env::current_exe().unwrap();
    let mut cmd = netns_command(&peer, exe);
    cmd.args(["--exact", TEST, "--nocapture"]).env(ROLE, "1");
    let mut srv = Process::spawn(&mut cmd).unwrap();
    let line = srv
        .wait_for_line(|l| l.starts_with("UDQPN "), WAIT)
        .unwrap();
    let server_qpn = Qpn::new(line["UDQPN ".len()..].trim().parse().unwrap());

    let d = Device::open("uda", DatapathKind::Udp).unwrap();
    let pd = d.alloc_pd().unwrap();
    let cq = d.create_cq(64).unwrap();
    let qp = d.create_ud_qp(pd, cq, cq, Q_KEY).unwrap();
    let mr = d
        .register(pd, vec![0u8; 2 * SLOT as usize], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let ah = d
        .create_ah(pd, &AhAttr::new(SERVER.parse().unwrap()))
        .unwrap();
    let to = UdAddress {
        ah,
        qpn: server_qpn,
        q_key: Q_KEY,
    };
    for i in 0..PINGS {
        let rx = mr.sge(u64::from(SLOT), SLOT).unwrap();
        d.post_recv(
            qp,
            RecvWr {
                wr_id: i,
                sg_list: vec![rx],
            },
        )
        .unwrap();
        let msg = message(i);
        d.mr_guard(&mr).unwrap()[..msg.len()].copy_from_slice(&msg);
        let tx = mr.sge(0, msg.len() as u32).unwrap();
        d.post_send_to(qp, to, SendWr::new(100 + i, SendOp::Send).sge(tx))
            .unwrap();
        let mut wcs = Vec::new();
        while !wcs
            .iter()
            .any(|w: &rocev2::WorkCompletion| w.opcode == WcOpcode::Recv)
        {
            d.wait_cq(cq, &mut wcs, 2, WAIT).unwrap();
        }
        for wc in &wcs {
            assert!(wc.status.is_success(), "{wc:?}");
        }
        let wc = wcs.iter().find(|w| w.opcode == WcOpcode::Recv).unwrap();
        assert_eq!(wc.wr_id, i);
        assert_eq!(wc.byte_len as usize, GRH_LEN + msg.len());
        assert_eq!(wc.src_qp, server_qpn);
        assert_eq!(gid_to_ip(wc.ud.unwrap().sgid).to_string(), SERVER);
        let m = d.mr_guard(&mr).unwrap();
        let at = SLOT as usize;
        check_grh(&m[at..at + GRH_LEN], SERVER, CLIENT);
        assert_eq!(&m[at + GRH_LEN..at + GRH_LEN + msg.len()], &msg[..]);
    }
    let out = srv.finish(WAIT).unwrap();
    assert!(out.stdout.contains("1 passed"), "{}", out.stdout);
}
