//! The AF_XDP datapath serves every receive queue: on a veth with four queues it binds four
//! sockets, and frames an AF_PACKET peer spreads over those queues (one flow per UDP source
//! port, hashed to a queue by the sender) all arrive, none passed to the kernel for want of a
//! socket.
//!
//! Needs root: the test re-runs itself inside a fresh network namespace (`ip netns exec`), so the
//! veth pair never appears in the caller's namespace and deleting the namespace removes it.

use rocev2_datapath::af_packet::{PacketConfig, PacketDatapath};
use rocev2_datapath::xdp::{XdpConfig, XdpDatapath};
use rocev2_datapath::{Datapath, Interface, RxBatch, TxBatch};
use std::process::Command;
use std::time::{Duration, Instant};

const FRAMES: u16 = 256;

fn sh(args: &[&str]) {
    let st = Command::new(args[0]).args(&args[1..]).status().unwrap();
    assert!(st.success(), "{args:?}: {st}");
}

/// An untagged IPv4 UDP frame to port 4791 from `sport` with a 16-byte zero payload: enough for
/// the steering program and the datapath's filter (the core is not involved here).
fn frame(dst: [u8; 6], src: [u8; 6], sport: u16) -> Vec<u8> {
    let payload = 16u16;
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + 8 + payload).to_be_bytes();
    f.extend_from_slice(&[0x45, 0, total[0], total[1], 0, 0, 0x40, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&[10, 8, 0, 2, 10, 8, 0, 1]);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&4791u16.to_be_bytes());
    f.extend_from_slice(&(8 + payload).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&[0; 16]);
    f
}

fn body() {
    sh(&[
        "ip",
        "link",
        "add",
        "xqa",
        "numtxqueues",
        "4",
        "numrxqueues",
        "4",
        "type",
        "veth",
        "peer",
        "name",
        "xqb",
        "numtxqueues",
        "4",
        "numrxqueues",
        "4",
    ]);
    for (dev, ip) in [("xqa", "10.8.0.1/24"), ("xqb", "10.8.0.2/24")] {
        sh(&["ip", "addr", "add", ip, "dev", dev]);
        sh(&["ip", "link", "set", dev, "up"]);
    }
    let a = Interface::by_name("xqa").unwrap();
    let b = Interface::by_name("xqb").unwrap();
    assert_eq!(a.rx_queues, 4);
    let mut x = XdpDatapath::open(&a, XdpConfig::default()).unwrap();
    assert_eq!(x.queues(), 4, "{x:?}");
    let mut p = PacketDatapath::open(&b, PacketConfig::default()).unwrap();
    let mut tx = TxBatch::new(usize::from(FRAMES));
    for sport in 0..FRAMES {
        assert!(tx.push(&frame(a.mac, b.mac, 49152 + sport)));
    }
    while !tx.is_empty() {
        p.send(&mut tx).unwrap();
    }
    let mut rx = RxBatch::new(64);
    let mut got = 0u64;
    let end = Instant::now() + Duration::from_secs(5);
    while got < u64::from(FRAMES) && Instant::now() < end {
        got += x.recv(&mut rx).unwrap() as u64;
        std::thread::sleep(Duration::from_millis(1));
    }
    let per_queue = x.rx_packets_per_queue();
    let s = x.stats();
    eprintln!("per queue {per_queue:?}, {s:?}");
    assert_eq!(got, u64::from(FRAMES), "{per_queue:?} {s:?}");
    assert_eq!(s.steer_no_socket, 0);
    assert_eq!(s.steer_redirected, u64::from(FRAMES));
    assert!(
        per_queue.iter().filter(|&&n| n > 0).count() >= 2,
        "frames spread over several queues: {per_queue:?}"
    );
}

#[test]
fn xdp_serves_every_rx_queue() {
    let test = "xdp_serves_every_rx_queue";
    let ns = format!("rv2xq{}", std::process::id());
    if rocev2_testbed::exec::in_fresh_netns(test, &ns, Duration::from_secs(600))
        .expect("re-run in a fresh namespace")
    {
        body();
    }
}
