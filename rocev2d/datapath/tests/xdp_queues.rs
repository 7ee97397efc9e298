//! The AF_XDP datapath serves every receive queue: on a veth with four queues it binds four
//! sockets, and frames an AF_PACKET peer spreads over those queues (one flow per UDP source
//! port, hashed to a queue by the sender) all arrive, none passed to the kernel for want of a
//! socket. Opened on one queue each (`XdpConfig::queue`), four datapaths share the interface's
//! one steering program, each receiving exactly what arrived on its queue.
//!
//! Needs root: the test re-runs itself inside a fresh network namespace (`ip netns exec`), so the
//! veth pair never appears in the caller's namespace and deleting the namespace removes it.

use rocev2_datapath::af_packet::{PacketConfig, PacketDatapath};
use rocev2_datapath::xdp::{XdpConfig, XdpDatapath};
use rocev2_datapath::{Datapath, Interface, RxBatch, TxBatch};
use rocev2_testbed::{VethEnd, veth_pair};
use std::time::{Duration, Instant};

const FRAMES: u16 = 256;

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

/// A veth pair `a`–`b` with four queues per end, addressed and up.
fn veth4(a: &str, b: &str) {
    let end = |ifname, addrs| VethEnd {
        addrs,
        queues: Some(4),
        ..VethEnd::new(ifname)
    };
    veth_pair(end(a, &["10.8.0.1/24"]), end(b, &["10.8.0.2/24"])).unwrap();
}

/// Sends one frame per UDP source port 49152.. from `b`'s AF_PACKET socket to `a`.
fn spray(a: &Interface, b: &Interface) {
    let mut p = PacketDatapath::open(b, PacketConfig::default()).unwrap();
    let mut tx = TxBatch::new(usize::from(FRAMES));
    for sport in 0..FRAMES {
        assert!(tx.push(&frame(a.mac, b.mac, 49152 + sport)));
    }
    while !tx.is_empty() {
        p.send(&mut tx).unwrap();
    }
}

fn body() {
    veth4("xqa", "xqb");
    let a = Interface::by_name("xqa").unwrap();
    let b = Interface::by_name("xqb").unwrap();
    assert_eq!(a.rx_queues, 4);
    let mut x = XdpDatapath::open(&a, XdpConfig::default()).unwrap();
    assert_eq!(x.queues(), 4, "{x:?}");
    // veth has no zero-copy AF_XDP: the default asks for it, falls back, and says why.
    assert!(
        x.describe()
            .contains("copy mode (zero-copy refused: AF_XDP bind"),
        "{x:?}"
    );
    spray(&a, &b);
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
        per_queue.iter().filter(|&&(_, n)| n > 0).count() >= 2,
        "frames spread over several queues: {per_queue:?}"
    );
}

/// Four datapaths of one queue each on one interface: one program, four map entries. Each
/// receives only frames of its own queue (its one counter), together all of them; a second
/// datapath on a served queue and one on a queue the interface lacks are refused with the
/// reason; closing one shard leaves the program to the others, and its queue can be opened
/// again, and once all are closed the program is detached.
fn body_shards() {
    veth4("xsa", "xsb");
    let a = Interface::by_name("xsa").unwrap();
    let b = Interface::by_name("xsb").unwrap();
    let one = |q| {
        XdpDatapath::open(
            &a,
            XdpConfig {
                queue: Some(q),
                ..XdpConfig::default()
            },
        )
    };
    let mut shards: Vec<XdpDatapath> = (0..4).map(|q| one(q).unwrap()).collect();
    for (q, x) in shards.iter().enumerate() {
        assert_eq!(x.queue(), Some(q as u32));
        assert!(
            x.describe().starts_with(&format!("rx/tx queue {q} only")),
            "{x:?}"
        );
    }
    let again = one(2).unwrap_err().to_string();
    assert!(again.contains("rx queue 2 is already served"), "{again}");
    let beyond = one(4).unwrap_err().to_string();
    assert!(
        beyond.contains("4 rx queue(s) in use, no queue 4"),
        "{beyond}"
    );
    let all = XdpDatapath::open(&a, XdpConfig::default())
        .unwrap_err()
        .to_string();
    assert!(all.contains("rx queue 0 is already served"), "{all}");

    // Shard 3 closes: its queue's frames go to the kernel (`steer_no_socket`) until it is
    // back, and the others keep the program.
    drop(shards.pop());
    shards.push(one(3).unwrap());

    spray(&a, &b);
    let mut rx = RxBatch::new(64);
    let mut got = [0u64; 4];
    let end = Instant::now() + Duration::from_secs(5);
    while got.iter().sum::<u64>() < u64::from(FRAMES) && Instant::now() < end {
        for (q, x) in shards.iter_mut().enumerate() {
            got[q] += x.recv(&mut rx).unwrap() as u64;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let s = shards[0].stats();
    eprintln!("per shard {got:?}, {s:?}");
    assert_eq!(got.iter().sum::<u64>(), u64::from(FRAMES), "{s:?}");
    assert!(got.iter().filter(|&&n| n > 0).count() >= 2, "{got:?}");
    for (q, x) in shards.iter().enumerate() {
        assert_eq!(x.rx_packets_per_queue(), vec![(q as u32, got[q])]);
    }
    assert_eq!(s.steer_no_socket, 0);
    assert_eq!(s.steer_redirected, u64::from(FRAMES));

    // The last shard detaches the program: a datapath of every queue attaches it anew.
    drop(shards);
    assert_eq!(
        XdpDatapath::open(&a, XdpConfig::default())
            .unwrap()
            .queues(),
        4
    );
}

#[test]
fn xdp_shards_share_the_program_one_queue_each() {
    let test = "xdp_shards_share_the_program_one_queue_each";
    let ns = format!("rv2xs{}", std::process::id());
    if rocev2_testbed::exec::in_fresh_netns(test, &ns, Duration::from_secs(600))
        .expect("re-run in a fresh namespace")
    {
        body_shards();
    }
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
