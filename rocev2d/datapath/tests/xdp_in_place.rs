//! The AF_XDP datapath hands frames to the core inside their UMEM chunks, copying only received
//! frames larger than a chunk, and lets the core build every frame straight into the UMEM: two
//! [`Driver`]s over AF_XDP on the two ends of a veth pair move a 1 MiB RDMA WRITE at a path MTU
//! of 1024 (every frame fits a 4 KiB chunk: all in place) and of 4096 (each data frame takes two
//! chunks: built in place across two adjacent chunks of a transmit slot, gathered on receive,
//! while the ACKs stay in place). The written bytes must arrive intact, which a data frame
//! described with a wrong chunk, length or order would break (every frame's ICRC is also
//! verified by the core, and a dropped frame shows as a NAK or a retransmission), and the
//! `rx_in_place`/`tx_in_place` counters must say which path each frame took.
//!
//! Needs root: the test re-runs itself inside a fresh network namespace (`ip netns exec`), so the
//! veth pair never appears in the caller's namespace and deleting the namespace removes it.

use rocev2_core::DropReason;
use rocev2_core::cq::WcStatus;
use rocev2_core::qp::{Mtu, SendOp, SendWr, Sge};
use rocev2_core::testing::{ConnectOptions, Pair};
use rocev2_core::time::Duration as CoreDuration;
use rocev2_datapath::xdp::{XdpConfig, XdpDatapath};
use rocev2_datapath::{Datapath, DatapathStats, Driver, DriverConfig, Interface, WaitMode};
use rocev2_testbed::{VethEnd, veth_pair};
use std::time::{Duration, Instant};

/// Bytes written.
const LEN: usize = 1 << 20;

/// Moves one WRITE of [`LEN`] bytes from A to B over AF_XDP at path MTU `mtu`; returns A's and
/// B's datapath counters.
fn write_over_xdp(mtu: Mtu) -> (DatapathStats, DatapathStats) {
    // The in-memory Pair sets both QPs up (its hosts' MACs and IPs are the veths'), then its
    // endpoints move into drivers over the real interfaces.
    let mut pair = Pair::new(Default::default(), Default::default());
    let c = pair
        .connect(ConnectOptions {
            mr_len: LEN,
            mtu,
            // Real time passes: keep the ACK timeout (4.096 us * 2^18 = 1.07 s) far above how
            // long a debug build takes, so a retransmission would mean a lost frame.
            timeout: 18,
            ..ConnectOptions::default()
        })
        .unwrap();
    let data: Vec<u8> = (0..LEN as u32).map(|i| (i * 31 + 7) as u8).collect();
    pair.a
        .mem
        .get_mut(c.mr_a.id)
        .unwrap()
        .copy_from_slice(&data);
    let wr = SendWr::new(
        1,
        SendOp::Write {
            remote_addr: c.mr_b.addr,
            rkey: c.mr_b.rkey,
        },
    )
    .sge(Sge {
        addr: c.mr_a.addr,
        length: LEN as u32,
        lkey: c.mr_a.lkey,
    });
    pair.a.ep.post_send(c.qa, wr).unwrap();
    let open = |name: &str| {
        XdpDatapath::open(&Interface::by_name(name).unwrap(), XdpConfig::default()).unwrap()
    };
    let cfg = DriverConfig {
        wait: WaitMode::Spin,
        ..DriverConfig::default()
    };
    let mut a = Driver::new(pair.a.ep, pair.a.mem, open("xpa"), cfg);
    let mut b = Driver::new(pair.b.ep, pair.b.mem, open("xpb"), cfg);
    let end = Instant::now() + Duration::from_secs(60);
    let mut wcs = Vec::new();
    while wcs.is_empty() && Instant::now() < end {
        a.poll().unwrap();
        b.poll().unwrap();
        a.ep.poll_cq(c.cq_a, &mut wcs, 1);
    }
    // Let B's last ACKs out and A take them.
    b.run_until(CoreDuration::from_millis(50), |_| false)
        .unwrap();
    a.poll().unwrap();
    let (sa, sb) = (a.datapath().stats(), b.datapath().stats());
    assert_eq!(
        wcs.first().map(|w| w.status),
        Some(WcStatus::Success),
        "{mtu:?}: the WRITE completed\nA {sa:?}\nB {sb:?}"
    );
    assert!(
        b.mem.get(c.mr_b.id).unwrap() == &data[..],
        "{mtu:?}: the written bytes arrived intact"
    );
    for (side, d) in [("A", &a), ("B", &b)] {
        let s = d.ep.stats();
        assert_eq!(s.drops(DropReason::BadIcrc), 0, "{mtu:?} {side}: {s:?}");
    }
    let qb = b.ep.qp(c.qb).unwrap().counters();
    assert_eq!((qb.naks_sent, qb.out_of_sequence), (0, 0), "{mtu:?}");
    assert_eq!(a.ep.qp(c.qa).unwrap().counters().retransmits, 0, "{mtu:?}");
    (sa, sb)
}

fn body() {
    // The MACs and IPs of the Pair's hosts A and B, and room for 4 KiB RoCE frames.
    let end = |ifname, mac, addrs| VethEnd {
        addrs,
        mac: Some(mac),
        mtu: Some(4200),
        ..VethEnd::new(ifname)
    };
    veth_pair(
        end("xpa", "02:00:00:00:00:01", &["10.0.0.1/24"]),
        end("xpb", "02:00:00:00:00:02", &["10.0.0.2/24"]),
    )
    .unwrap();
    let packets = LEN / 1024;
    let (a, b) = write_over_xdp(Mtu::Mtu1024);
    // Every frame fits one chunk: A builds all its frames in place, B takes all of them in place.
    assert!(a.tx_packets >= packets as u64, "{a:?}");
    assert_eq!(
        a.tx_in_place, a.tx_packets,
        "A built every frame in a chunk"
    );
    assert_eq!(b.rx_in_place, b.rx_packets, "B handed every frame in place");
    assert!(b.rx_packets >= packets as u64, "{b:?}");
    assert!(
        a.rx_packets > 0 && a.rx_in_place == a.rx_packets,
        "ACKs: {a:?}"
    );

    let packets = (LEN / 4096) as u64;
    let (a, b) = write_over_xdp(Mtu::Mtu4096);
    // Each data frame (4 KiB of payload) takes two chunks: built in place all the same, and
    // gathered on receive; the ACKs fit one.
    assert!(a.tx_packets >= packets, "{a:?}");
    assert_eq!(
        a.tx_in_place, a.tx_packets,
        "A built every frame in place, across two chunks: {a:?}"
    );
    assert!(
        b.rx_packets - b.rx_in_place >= packets,
        "B gathered the data frames: {b:?}"
    );
    assert!(b.tx_in_place > 0, "B built its ACKs in place: {b:?}");
    assert_eq!(a.rx_in_place, a.rx_packets, "A took the ACKs in place");
}

#[test]
fn xdp_frames_in_place_at_mtu_1024_and_4096_gathered_on_receive() {
    let test = "xdp_frames_in_place_at_mtu_1024_and_4096_gathered_on_receive";
    let ns = format!("rv2xp{}", std::process::id());
    if rocev2_testbed::exec::in_fresh_netns(test, &ns, Duration::from_secs(600))
        .expect("re-run in a fresh namespace")
    {
        body();
    }
}
