//! The AF_XDP datapath keeps transmitting when one-chunk and two-chunk frames mix: a 4 KiB
//! RoCE frame takes two descriptors, an ACK or an ARP announcement one, so after an odd one the
//! tx ring's reservations no longer end on frame boundaries. `xdpilone` refreshes its view of
//! the kernel's consumer only when it believes the ring full, and a stale remainder of one slot
//! once refused every two-chunk frame for good (write_bw over AF_XDP stopped after its 1022nd
//! frame). Here one small frame and then three rings' worth of two-chunk frames must all
//! arrive at an AF_PACKET peer.
//!
//! Needs root: the test re-runs itself inside a fresh network namespace.

use rocev2_datapath::af_packet::{PacketConfig, PacketDatapath};
use rocev2_datapath::xdp::{XdpConfig, XdpDatapath};
use rocev2_datapath::{Datapath, Interface, RxBatch, TxBatch};
use rocev2_testbed::{VethEnd, veth_pair};
use std::time::{Duration, Instant};

/// Descriptors in the tx ring under test.
const RING: u32 = 64;
/// Two-chunk frames sent after the one-chunk frame: three trips around the ring.
const BIG: usize = 3 * RING as usize / 2;

/// An untagged IPv4 UDP frame to port 4791 with `payload` zero bytes.
fn frame(dst: [u8; 6], src: [u8; 6], payload: u16) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + 8 + payload).to_be_bytes();
    f.extend_from_slice(&[0x45, 0, total[0], total[1], 0, 0, 0x40, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&[10, 9, 0, 1, 10, 9, 0, 2]);
    f.extend_from_slice(&49152u16.to_be_bytes());
    f.extend_from_slice(&4791u16.to_be_bytes());
    f.extend_from_slice(&(8 + payload).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.resize(f.len() + usize::from(payload), 0);
    f
}

fn body() {
    let end = |ifname, addrs| VethEnd {
        addrs,
        mtu: Some(4200),
        ..VethEnd::new(ifname)
    };
    veth_pair(end("xta", &["10.9.0.1/24"]), end("xtb", &["10.9.0.2/24"])).unwrap();
    let a = Interface::by_name("xta").unwrap();
    let b = Interface::by_name("xtb").unwrap();
    let cfg = XdpConfig {
        tx_frames: RING,
        ..XdpConfig::default()
    };
    let mut x = XdpDatapath::open(&a, cfg).unwrap();
    let mut p = PacketDatapath::open(&b, PacketConfig::default()).unwrap();
    let mut frames = vec![frame(b.mac, a.mac, 32)];
    // 4170 bytes, a RoCEv2 WRITE First at a 4096-byte MTU: two 4096-byte chunks.
    frames.extend((0..BIG).map(|_| frame(b.mac, a.mac, 4170 - 42)));
    let mut rx = RxBatch::new(64);
    let mut got = 0usize;
    let mut next = frames.iter();
    let mut tx = TxBatch::new(16);
    let end = Instant::now() + Duration::from_secs(10);
    while got < frames.len() && Instant::now() < end {
        if tx.is_empty() {
            for f in next.by_ref().take(16) {
                assert!(tx.push(f));
            }
        }
        x.send(&mut tx).unwrap();
        got += p.recv(&mut rx).unwrap();
        std::thread::sleep(Duration::from_micros(200));
    }
    let s = x.stats();
    assert_eq!(
        got,
        frames.len(),
        "frames received of {} sent ({} still queued): {s:?}",
        frames.len(),
        tx.pending()
    );
}

#[test]
fn xdp_tx_ring_mixes_one_and_two_chunk_frames() {
    let test = "xdp_tx_ring_mixes_one_and_two_chunk_frames";
    let ns = format!("rv2xt{}", std::process::id());
    if rocev2_testbed::exec::in_fresh_netns(test, &ns, Duration::from_secs(600))
        .expect("re-run in a fresh namespace")
    {
        body();
    }
}
