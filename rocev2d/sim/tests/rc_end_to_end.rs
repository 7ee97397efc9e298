//! The real RC engine over a 3-hop path with random loss: every byte arrives exactly once, in
//! place, as the sender's memory holds it.

use crate::common;

use rocev2_sim::Sim;
use rocev2_sim::scenario::{FaultSpec, LossScope};
use rocev2_sim::workload::WorkloadSpec;

#[test]
fn rc_over_lossy_three_hops_delivers_exact_bytes() {
    let size = 300_000u64;
    // host0 – s – s – host2 and host1 – s – s – host3: three links each way, 2% loss on each.
    let mut s = common::scenario(
        common::dumbbell(2, 2, 10.0, 10.0, 1000),
        vec![WorkloadSpec::Flows {
            flows: vec![(0, 2, size, 0), (3, 1, size / 3, 5_000)],
        }],
        20_000_000,
    );
    s.faults = Some(FaultSpec {
        loss: 0.02,
        scope: LossScope::All,
        links: Vec::new(),
    });
    s.host.verify_mr_bytes = size as u32;
    s.host.timeout = 3; // 32.8 µs
    s.host.wr_bytes = 64 * 1024;
    let mut sim = Sim::new(&s).unwrap();
    let before: Vec<Vec<u8>> = (0..4)
        .map(|h| sim.host_bytes(h).unwrap().to_vec())
        .collect();
    sim.run();
    let lost: u64 = sim.ports().iter().map(|p| p.stats.lost).sum();
    let f0 = &sim.flows()[0];
    let f1 = &sim.flows()[1];
    eprintln!(
        "lost {lost}, retransmits {} {}, timeouts {} {}",
        f0.retransmits, f1.retransmits, f0.timeouts, f1.timeouts
    );
    assert!(lost > 20, "loss must have happened");
    assert!(f0.retransmits > 0);
    assert!(f0.finish_ns.is_some() && f1.finish_ns.is_some());
    assert!(f0.failed.is_none() && f1.failed.is_none());
    // Receiver memory: the written range equals the sender's, the rest is untouched.
    let check = |src: u32, dst: u32, n: usize| {
        let got = sim.host_bytes(dst).unwrap();
        assert_eq!(&got[..n], &before[src as usize][..n], "{src}->{dst} data");
        assert_eq!(
            &got[n..],
            &before[dst as usize][n..],
            "{dst} beyond the write"
        );
    };
    check(0, 2, size as usize);
    check(3, 1, (size / 3) as usize);
    // Exactly once: the responder saw duplicates (retransmissions after loss) and did not
    // complete any message twice — the sender's acknowledged bytes equal the flow size.
    assert_eq!(f0.acked, size);
    assert_eq!(f1.acked, size / 3);
    // Untouched hosts keep their memory.
    assert_eq!(sim.host_bytes(0).unwrap(), &before[0][..]);
    assert_eq!(sim.host_bytes(3).unwrap(), &before[3][..]);
}
