//! Model throughput: packet-hop events per second of wall time, on one core.
//!
//! * `leafspine_permutation`: 32 hosts on a 4×4 leaf-spine at 10 Gbit/s, a permutation of long
//!   flows for 200 µs of simulated time (every host's link busy: the heavy case per event);
//! * `dart_clos_1024_1ms`: the seed 000 §VI-A set-up of `deploy/scenarios/dart_clos_1024.toml`
//!   for 1 ms of simulated time (setup of 1024 engines and routes included).
//!
//! Criterion's "elements" are packet hops (arrivals of a packet at a node), so its thrpt line
//! reads directly as hops per second. The 10 ms Dart run takes too long for criterion's
//! repetitions; `BENCHMARKS.md` times it with the CLI.

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rocev2_sim::{Scenario, Sim};
use std::hint::black_box;

fn run(s: &Scenario) -> u64 {
    let mut sim = Sim::new(s).expect("scenario builds");
    sim.run();
    sim.stats().packet_hops
}

fn leafspine() -> Scenario {
    Scenario::from_toml(
        r#"
        name = "bench_leafspine"
        seed = 1
        duration_ns = 200_000
        [topology]
        kind = "leaf_spine"
        leaves = 4
        spines = 4
        hosts_per_leaf = 8
        rate_gbps = 10
        delay_ns = 1000
        [switch]
        buffer_bytes = 4_000_000
        pfc = { enabled = true }
        [[workload]]
        kind = "permutation"
        [output]
        sample_interval_ns = 0
        plots = false
        "#,
    )
    .expect("valid scenario")
}

fn dart() -> Scenario {
    let text = include_str!("../../../deploy/scenarios/dart_clos_1024.toml");
    let mut s = Scenario::from_toml(text).expect("valid scenario");
    s.duration_ns = 1_000_000;
    s.output.sample_interval_ns = 0;
    s
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("sim");
    g.sample_size(10);
    for (name, s) in [
        ("leafspine_permutation", leafspine()),
        ("dart_clos_1024_1ms", dart()),
    ] {
        let hops = run(&s);
        g.throughput(Throughput::Elements(hops));
        g.bench_function(name, |b| b.iter(|| black_box(run(&s))));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
