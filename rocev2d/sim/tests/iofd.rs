//! IOFD in the model (seed 000 §IV): on a 2-leaf × 2-spine fabric whose one leaf uplink is
//! slowed under long flows, short messages are deflected whole to the other uplink and arrive
//! in PSN order, long flows never are, and the short flows see fewer CE marks than without.

use crate::common;

use rocev2_core::cc::CcScheme;
use rocev2_core::time::Rate;
use rocev2_sim::Sim;
use rocev2_sim::host::IofdHostSpec;
use rocev2_sim::switch_node::IofdSpec;
use rocev2_sim::topology::TopologySpec;
use rocev2_sim::workload::WorkloadSpec;

/// Leaf 0 is node 8 (after hosts 0..8): hosts 0..4 below it, 4..8 below leaf 1.
const LEAF0: u32 = 8;
const LONG: u64 = 100 << 20;
const SHORT: [u64; 3] = [2048, 4096, 8192];

struct Run {
    sim: Sim,
    /// Leaf 0's slowed uplink.
    slow: u32,
}

/// Two long flows (0→4, 1→5) and 240 short WRITEs (hosts 2, 3 → 6, 7, one every 4 µs from
/// 100 µs); leaf 0's uplink that ECMP gives long flow 0 runs at 5 of its 20 Gbit/s.
fn run(iofd: bool) -> Run {
    let mut flows = vec![(0, 4, LONG, 0), (1, 5, LONG, 0)];
    for i in 0..240u64 {
        let src = 2 + (i % 2) as u32;
        let dst = 6 + (i / 2 % 2) as u32;
        flows.push((src, dst, SHORT[i as usize % 3], 100_000 + i * 4_000));
    }
    let mut s = common::scenario(
        TopologySpec::LeafSpine {
            leaves: 2,
            spines: 2,
            hosts_per_leaf: 4,
            rate_gbps: 10.0,
            uplink_gbps: None,
            oversubscription: None,
            delay_ns: 1000,
        },
        vec![WorkloadSpec::Flows { flows }],
        1_300_000,
    );
    s.host.cc = CcScheme::Dcqcn.into();
    // Every sender puts 4 tokens on messages up to 8 KiB (the paper's set-up); the long flows'
    // 64 KiB WRITEs carry none.
    s.host.wr_bytes = 65536;
    s.host.iofd = Some(IofdHostSpec {
        tokens: 4,
        max_message_bytes: 8192,
    });
    if iofd {
        // The paper's 15 KB threshold, below the 20 KB K_min of the default RED curve.
        s.switch.iofd = Some(IofdSpec {
            threshold_bytes: 15_000,
            max_message_bytes: 8192,
        });
    }
    let mut sim = Sim::new(&s).unwrap();
    let slow = sim.route(LEAF0, 0).expect("leaf 0 routes flow 0");
    sim.set_port_rate(slow, Rate::from_gbps(5));
    sim.run();
    Run { sim, slow }
}

fn short_ce(sim: &Sim) -> u64 {
    sim.flows()[2..].iter().map(|f| f.ce_received).sum()
}

#[test]
fn iofd_deflects_short_messages_in_order_and_cuts_marks() {
    let on = run(true);
    let off = run(false);
    let (sim, slow) = (&on.sim, on.slow);
    let st = sim.ports()[slow as usize].stats;
    let shorts = &sim.flows()[2..];
    let deflected_flows = shorts.iter().filter(|f| f.deflected > 0).count();
    eprintln!(
        "slow uplink {slow}: deflected {} packets, long refusals {}, table full {}, no tokens {}; \
         {deflected_flows} of {} short flows deflected; short-flow CE marks {} with IOFD, {} \
         without",
        st.iofd_deflected,
        st.iofd_long,
        st.iofd_table_full,
        st.iofd_no_tokens,
        shorts.len(),
        short_ce(sim),
        short_ce(&off.sim)
    );
    assert!(st.iofd_deflected > 0, "nothing deflected");
    assert!(
        deflected_flows >= shorts.len() / 10,
        "only {deflected_flows} short flows deflected"
    );
    // A deflected message goes whole: its packet count is the flow's data packets (MTU 1024).
    for f in shorts.iter().filter(|f| f.deflected > 0) {
        assert_eq!(f.deflected, f.spec.size.div_ceil(1024), "flow {f:?}");
    }
    // Every short message arrives complete and in PSN order.
    for (i, f) in shorts.iter().enumerate() {
        assert!(f.finish_ns.is_some(), "short flow {} unfinished", i + 2);
        assert_eq!(
            (f.rx_out_of_sequence, f.rx_naks_sent, f.retransmits),
            (0, 0, 0),
            "short flow {} out of order",
            i + 2
        );
    }
    // Long flows' WRITEs are considered above the threshold, refused as long, never deflected.
    assert!(st.iofd_long > 0);
    assert!(sim.flows()[..2].iter().all(|f| f.deflected == 0));
    // The token rewrite keeps every frame valid (the receivers check the ICRC).
    assert_eq!(sim.stats().frames_rejected, 0);
    assert_eq!(sim.stats().unattributed, 0);
    // Leaf 1 has one port toward each host and spines one toward each leaf: nobody else has an
    // alternate, so only leaf 0's uplinks deflect.
    for (p, pt) in sim.ports().iter().enumerate() {
        if pt.node != LEAF0 {
            assert_eq!(pt.stats.iofd_deflected, 0, "port {p}");
        }
    }
    // The point of deflection: short flows avoid the marked queue.
    assert!(
        short_ce(sim) < short_ce(&off.sim),
        "CE marks {} with IOFD, {} without",
        short_ce(sim),
        short_ce(&off.sim)
    );
    // And without IOFD nothing is deflected.
    assert!(off.sim.ports().iter().all(|p| p.stats.iofd_deflected == 0));
}

#[test]
fn iofd_and_dvl_scenario_keys_parse_and_bad_tokens_are_refused() {
    let text = |tokens: u8| {
        format!(
            "duration_ns = 100000\n\
             [topology]\nkind = \"star\"\nhosts = 2\nrate_gbps = 10\ndelay_ns = 100\n\
             [switch]\nbuffer_bytes = 100000\n\
             [switch.iofd]\nthreshold_bytes = 15000\nmax_message_bytes = 8192\n\
             [switch.dvl]\nthreshold_bytes = 30000\n\
             [host.iofd]\ntokens = {tokens}\nmax_message_bytes = 8192\n\
             [[workload]]\nkind = \"flows\"\nflows = [[0, 1, 4096, 0]]\n"
        )
    };
    let s = rocev2_sim::Scenario::from_toml(&text(4)).unwrap();
    assert_eq!(s.switch.iofd.unwrap().threshold_bytes, 15_000);
    assert_eq!(s.switch.dvl.unwrap().hold_ns, 100_000, "default hold");
    assert_eq!(s.host.iofd.unwrap().tokens, 4);
    let mut sim = Sim::new(&s).unwrap();
    sim.run();
    assert!(sim.flows()[0].finish_ns.is_some());
    for bad in [0, 64] {
        let s = rocev2_sim::Scenario::from_toml(&text(bad)).unwrap();
        let e = Sim::new(&s).unwrap_err();
        assert!(e.to_string().contains("host.iofd.tokens"), "{e}");
    }
    assert!(
        rocev2_sim::Scenario::from_toml(&text(4).replace(
            "max_message_bytes = 8192\n[switch.dvl]",
            "max_message_bytes = 8192\nbogus = 1\n[switch.dvl]"
        ))
        .is_err()
    );
}
