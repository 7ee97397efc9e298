//! One flow on an idle path: goodput at line rate minus the exact header overhead, and the
//! round-trip time equal to the sum of link delays and serialisation.

use crate::common;

use rocev2_sim::Sim;
use rocev2_sim::link::wire_bytes;
use rocev2_sim::workload::WorkloadSpec;

/// Per data packet: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4 = 58 frame bytes of headers,
/// plus 16 (RETH) on the first packet of each WRITE, and on the wire FCS 4 + preamble/SFD 8 +
/// IFG 12 (`link::wire_bytes`).
const HDR: u64 = 14 + 20 + 8 + 12 + 4;
const RETH: u64 = 16;

#[test]
fn single_flow_reaches_line_rate_minus_headers() {
    let mtu = 4096u64;
    let wr = 1u64 << 20;
    let size = 8 * wr; // 8 MiB: 8 WRITEs of 256 packets each
    let mut s = common::scenario(
        common::dumbbell(1, 1, 40.0, 40.0, 1000),
        vec![WorkloadSpec::Flows {
            flows: vec![(0, 1, size, 0)],
        }],
        5_000_000,
    );
    s.host.mtu = mtu as u32;
    s.host.wr_bytes = wr as u32;
    let mut sim = Sim::new(&s).unwrap();
    sim.run();
    let f = &sim.flows()[0];
    let fct = f.finish_ns.expect("flow finished") - f.spec.start_ns;
    // Exact wire bytes of the data: every packet carries the MTU; one RETH per WRITE.
    let packets = size / mtu;
    let wire = packets * wire_bytes((mtu + HDR) as u32) as u64 + (size / wr) * RETH;
    let ideal_goodput = size as f64 / wire as f64 * 40e9; // payload bit/s at line rate
    let goodput = size as f64 * 8.0 / (fct as f64 / 1e9);
    eprintln!(
        "fct {fct} ns, goodput {:.3} Gbit/s, ideal {:.3} Gbit/s ({:.2}%)",
        goodput / 1e9,
        ideal_goodput / 1e9,
        100.0 * goodput / ideal_goodput
    );
    assert!(goodput >= 0.99 * ideal_goodput);
    assert!(goodput <= ideal_goodput * 1.0001, "faster than the wire");
    assert_eq!(f.retransmits, 0);
}

#[test]
fn small_write_rtt_is_links_plus_serialisation() {
    // host0 – s – s – host1: three links of 1 µs each.
    let delay = 1000u64;
    let payload = 64u64;
    let mut s = common::scenario(
        common::dumbbell(1, 1, 10.0, 10.0, delay),
        vec![WorkloadSpec::Flows {
            flows: vec![(0, 1, payload, 1000)],
        }],
        1_000_000,
    );
    s.host.mtu = 1024;
    let mut sim = Sim::new(&s).unwrap();
    sim.run();
    let f = &sim.flows()[0];
    let fct = f.finish_ns.unwrap() - f.spec.start_ns;
    // Data: one RDMA WRITE Only packet = headers + RETH + payload; ACK: headers + AETH (4).
    let data = wire_bytes((HDR + RETH + payload) as u32) as u64;
    let ack = wire_bytes((HDR + 4) as u32) as u64;
    let ser = |b: u64| (b * 8 * 1_000_000_000).div_ceil(10_000_000_000);
    let expect = 3 * (ser(data) + delay) + 3 * (ser(ack) + delay);
    assert_eq!(
        fct, expect,
        "RTT = Σ links (serialisation + delay), both ways"
    );
}
