//! CI sizes of issue 21's experiments: seed 000 §VI's Clos (`DartClos`, on the 32-host fabric)
//! and the DCQCN+ sensitivity grid (`GridCell`, 64 flows over a few milliseconds). The full
//! sizes run from `rocev2-sim experiments --only dart_clos|dcqcn_plus_grid` (docs/results.md).

use rocev2_core::cc::CcScheme;
use rocev2_sim::experiments::{DartClos, GridCell, ManyFlows, ManyFlowsResult};
use std::path::Path;
use std::process::Command;

/// The Clos at CI size, 60% load: every scheme finishes its counted short flows, and only Dart
/// runs IOFD (deflections), as §VI-A pairs them; the marks Table I compares are counted.
#[test]
fn dart_clos_ci_deflects_under_dart_only_and_counts_short_flow_marks() {
    let dcqcn = DartClos::ci(CcScheme::Dcqcn, 0.6).run();
    let dart = DartClos::ci(CcScheme::Dart, 0.6).run();
    for (name, r) in [("dcqcn", &dcqcn), ("dart", &dart)] {
        eprintln!(
            "{name}: {} short flows, {} unfinished, p50 {} ns, p99 {} ns, {} CE of {} short packets, {} deflected",
            r.short_flows,
            r.unfinished,
            r.p50_ns,
            r.p99_ns,
            r.short_ce,
            r.short_packets,
            r.deflected
        );
        assert!(r.short_flows > 500, "{name}: {} short flows", r.short_flows);
        assert_eq!(r.unfinished, 0, "{name}");
        assert!(r.p50_ns > 0 && r.p99_ns >= r.p50_ns, "{name}");
        // The 16-sender incasts fill the 22.5 KB step at once: their packets are marked.
        assert!(r.short_ce > 0, "{name}");
    }
    // The same workload under both schemes.
    assert_eq!(dcqcn.short_flows, dart.short_flows);
    assert_eq!(dcqcn.deflected, 0);
    assert!(dart.deflected > 0, "IOFD never deflected under Dart");
}

/// `experiments --only dart_clos --quick` writes a summary row per scheme and load and Dart's
/// ratios, the same on one thread and on three.
#[test]
fn dart_clos_cli_ci_size_writes_the_same_rows_on_any_number_of_threads() {
    let run = |jobs: &str, out: &Path| {
        let st = Command::new(env!("CARGO_BIN_EXE_rocev2-sim"))
            .args([
                "experiments",
                "--only",
                "dart_clos",
                "--quick",
                "--jobs",
                jobs,
                "--out",
            ])
            .arg(out)
            .output()
            .expect("rocev2-sim runs");
        assert!(
            st.status.success(),
            "{}",
            String::from_utf8_lossy(&st.stderr)
        );
        let dir = out.join("dart_clos");
        for svg in ["fct_p99_vs_load", "fct_p50_vs_load", "ecn_marks_vs_load"] {
            assert!(dir.join(format!("{svg}.svg")).exists(), "{svg}.svg");
        }
        (
            std::fs::read_to_string(dir.join("summary.csv")).expect("summary.csv"),
            std::fs::read_to_string(dir.join("ratios.csv")).expect("ratios.csv"),
        )
    };
    let base = std::env::temp_dir().join(format!("rocev2-sim-clos-{}", std::process::id()));
    let one = run("1", &base.join("one"));
    let three = run("3", &base.join("three"));
    let _ = std::fs::remove_dir_all(&base);
    // Two loads × three schemes; two baselines per load.
    assert_eq!(one.0.lines().count(), 7, "{}", one.0);
    assert_eq!(one.1.lines().count(), 5, "{}", one.1);
    assert_eq!(one, three);
}

/// A grid cell at 64 flows on 40 Gbit/s, flows starting within 5 ms, last 5 ms of 15 ms.
fn cell(c: GridCell) -> ManyFlowsResult {
    let mut e: ManyFlows = c.many_flows(64, 40.0);
    (e.spread_ns, e.duration_ns, e.tail_ns) = (5_000_000, 15_000_000, 5_000_000);
    let r = e.run();
    eprintln!(
        "{c:?}: queue {:.0} B, throughput {:.3}, Jain {:.3}, {} CNPs",
        r.queue_mean_bytes, r.throughput, r.tail_jain, r.cnps
    );
    r
}

/// The grid's open parameters reach the switch, the notification point and the senders:
/// P_max 100% marks more densely than 1% and holds a shorter queue, δ = 5 µs walks the CNP
/// list five times slower than 1 µs (fewer CNPs), and the paper's cell is `ManyFlows::paper`
/// itself.
#[test]
fn dcqcn_plus_grid_parameters_change_the_queue_and_the_cnp_walk() {
    let paper = cell(GridCell::paper());
    let dense = cell(GridCell {
        pmax_percent: 100.0,
        ..GridCell::paper()
    });
    let slow_tick = cell(GridCell {
        delta_ns: 5_000,
        ..GridCell::paper()
    });
    assert!(
        dense.queue_mean_bytes < paper.queue_mean_bytes,
        "{} vs {}",
        dense.queue_mean_bytes,
        paper.queue_mean_bytes
    );
    assert!(
        slow_tick.cnps < paper.cnps,
        "{} vs {}",
        slow_tick.cnps,
        paper.cnps
    );
    let mut e = ManyFlows::paper(CcScheme::DcqcnPlus, 64, 40.0);
    (e.spread_ns, e.duration_ns, e.tail_ns) = (5_000_000, 15_000_000, 5_000_000);
    assert_eq!(e.run(), paper);
}

/// `experiments --only dcqcn_plus_grid --quick` writes one row per plane, rate and cell (64
/// flows within 10 ms, last 10 ms of 30 ms) and the six heat maps; the paper's row carries what
/// the library measures for that cell at that size.
#[test]
fn dcqcn_plus_grid_cli_ci_size_writes_every_cell_and_the_heat_maps() {
    let out = std::env::temp_dir().join(format!("rocev2-sim-grid-{}", std::process::id()));
    let st = Command::new(env!("CARGO_BIN_EXE_rocev2-sim"))
        .args([
            "experiments",
            "--only",
            "dcqcn_plus_grid",
            "--quick",
            "--out",
        ])
        .arg(&out)
        .output()
        .expect("rocev2-sim runs");
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let dir = out.join("dcqcn_plus_grid");
    let summary = std::fs::read_to_string(dir.join("summary.csv")).expect("summary.csv");
    let svgs: Vec<bool> = ["marking", "recovery"]
        .iter()
        .flat_map(|p| ["throughput", "queue", "jain"].map(|m| dir.join(format!("{p}_{m}.svg"))))
        .map(|f| f.exists())
        .collect();
    let _ = std::fs::remove_dir_all(&out);
    assert_eq!(svgs, [true; 6]);
    // Two planes × two rates × nine cells.
    assert_eq!(summary.lines().count(), 1 + 36, "{summary}");
    let paper_10g = summary
        .lines()
        .find(|l| l.starts_with("marking,10,64,1,20000,200000,1,1000,"))
        .expect("the paper's cell at 10 Gbit/s");
    let mut e = GridCell::paper().many_flows(64, 10.0);
    (e.spread_ns, e.duration_ns, e.tail_ns) = (10_000_000, 30_000_000, 10_000_000);
    let r = e.run();
    let cols: Vec<&str> = paper_10g.split(',').collect();
    assert_eq!(cols[8], format!("{:.0}", r.queue_mean_bytes), "{paper_10g}");
    assert_eq!(cols[10], format!("{:.4}", r.throughput), "{paper_10g}");
}
