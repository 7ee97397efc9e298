//! Dart's look-ahead in the model's workloads (seed 000 §III-D): an incast's first message
//! announces the whole group, so the receiver counts every member from that one packet and the
//! next ACKs carry N = the group (plus whoever else is sending) to everyone, before the other
//! members have sent anything.

use crate::common;

use rocev2_core::cc::CcScheme;
use rocev2_core::time::Rate;
use rocev2_sim::workload::WorkloadSpec;
use rocev2_sim::{Scenario, Sim};

const MEMBERS: u32 = 8;
const LONG: u32 = MEMBERS;
const RECEIVER: u32 = MEMBERS + 1;

/// Hosts 0..8 send one `size_bytes` message each to host 9, starting 100 µs in with up to
/// 200 µs of jitter; host 8 sends a long flow to host 9 from time 0. 10 Gbit/s star, 1 µs links.
fn scenario(cc: CcScheme, lookahead: bool, size_bytes: u64) -> Scenario {
    let mut s = common::scenario(
        common::star(RECEIVER + 1, 10.0, 1000),
        vec![
            WorkloadSpec::LongLived {
                pairs: vec![(LONG, RECEIVER)],
                start_ns: 0,
            },
            WorkloadSpec::Incast {
                receiver: RECEIVER,
                senders: Some((0..MEMBERS).collect()),
                degree: None,
                size_bytes,
                jitter_ns: 200_000,
                rounds: Some(1),
                period_ns: 0,
                start_ns: 100_000,
                lookahead,
            },
        ],
        2_000_000,
    );
    s.host.cc = cc.into();
    // An ACK every 4 packets (the dart_incast experiment's setting), so N returns within an RTT.
    s.host.ack_req_every = 4;
    s
}

/// Time for N to reach both senders: ACKs come every 4 packets, behind a queue the two
/// line-rate senders build (measured: the long flow's ACK carries N 8 µs after the first
/// member starts, the member's own 13 µs after).
const SETTLE_NS: u64 = 20_000;

/// The first member to start, and how long before the second one it did.
fn first_member(sim: &Sim) -> (u32, u64) {
    let mut starts: Vec<(u64, u32)> = sim
        .flows()
        .iter()
        .enumerate()
        .filter(|(_, f)| f.spec.class == 1)
        .map(|(i, f)| (f.spec.start_ns, i as u32))
        .collect();
    starts.sort_unstable();
    (starts[0].1, starts[1].0 - starts[0].0)
}

#[test]
fn dart_receiver_learns_the_incast_group_from_its_first_packet() {
    let mut n_seen = Vec::new();
    for lookahead in [true, false] {
        let s = scenario(CcScheme::Dart, lookahead, 65_536);
        let mut sim = Sim::new(&s).unwrap();
        let (first, lead) = first_member(&sim);
        // The test needs the other members to start well after the first one's ACKs return.
        assert!(lead > 2 * SETTLE_NS, "seed gives a lead of only {lead} ns");
        let t = sim.flows()[first as usize].spec.start_ns + SETTLE_NS;
        sim.run_until(t);
        let others_sent: u64 = sim
            .flows()
            .iter()
            .enumerate()
            .filter(|(i, f)| f.spec.class == 1 && *i as u32 != first)
            .map(|(_, f)| f.sent_bytes)
            .sum();
        assert_eq!(others_sent, 0, "no other member has sent yet");
        let long = sim.cc_snapshot(0).expect("the long flow runs");
        let member = sim.cc_snapshot(first).expect("the first member runs");
        eprintln!("lookahead {lookahead}: long flow {long:?}, first member {member:?}");
        n_seen.push((long.n, member.n, long.rate));
    }
    // With the announcement every member counts at once: 8 members + the long flow.
    let group = Some(MEMBERS as u16 + 1);
    assert_eq!(n_seen[0].0, group, "long flow, look-ahead on");
    assert_eq!(n_seen[0].1, group, "first member, look-ahead on");
    // The long flow already runs at line·η/N (seed 000 §III-A), not at half the line.
    let share = Rate::from_bps(10_000_000_000 * 95 / 100 / (MEMBERS as u64 + 1));
    assert!(n_seen[0].2 <= share, "{:?} above {share:?}", n_seen[0].2);
    // Without it the receiver knows only the two senders it has heard from.
    assert_eq!(n_seen[1].0, Some(2), "long flow, look-ahead off");
    assert_eq!(n_seen[1].1, Some(2), "first member, look-ahead off");
}

/// The announcement goes only to a peer that announced the REXT look-ahead capability (Dart):
/// under DCQCN the run is the same byte for byte with or without it.
#[test]
fn lookahead_changes_nothing_for_a_peer_that_does_not_take_it() {
    let run = |lookahead| {
        let mut sim = Sim::new(&scenario(CcScheme::Dcqcn, lookahead, 65_536)).unwrap();
        sim.run();
        sim.flows()
            .iter()
            .map(|f| (f.sent_bytes, f.delivered_bytes, f.finish_ns))
            .collect::<Vec<_>>()
    };
    let on = run(true);
    assert!(on.iter().skip(1).all(|f| f.2.is_some()), "{on:?}");
    assert_eq!(on, run(false));
}

/// Every member's first message carries the same announcement; the copies arriving after a
/// member's message ended must not count it again, or the long flow would stay at line/9 for
/// the 2 s soft-state timeout (seed 000 §III-B) once the incast is over.
#[test]
fn dart_members_leave_the_count_when_their_messages_end() {
    // 4 KB messages: the first member is done long before the last one announces the group.
    let mut sim = Sim::new(&scenario(CcScheme::Dart, true, 4096)).unwrap();
    let (first, _) = first_member(&sim);
    let last_start = sim.flows().iter().map(|f| f.spec.start_ns).max().unwrap();
    sim.run();
    assert!(
        sim.flows()[first as usize]
            .finish_ns
            .is_some_and(|t| t < last_start),
        "the first member finished before the last one started"
    );
    assert!(
        sim.flows()
            .iter()
            .filter(|f| f.spec.class == 1)
            .all(|f| f.finish_ns.is_some_and(|t| t < 1_000_000)),
        "the incast is over by 1 ms"
    );
    let long = sim.cc_snapshot(0).expect("the long flow runs");
    assert_eq!(long.n, Some(1), "{long:?}");
}
