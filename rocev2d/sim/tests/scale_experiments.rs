//! CI sizes of the papers' experiments: seed 000 §VI's Clos (`DartClos`, on the 32-host fabric),
//! the DCQCN+ sensitivity grid (`GridCell`, 64 flows over a few milliseconds) and seed 001
//! §5.3's permutation (`MpClos`, 4 of the 32 leaves). The full sizes run from `rocev2-sim
//! experiments --only dart_clos|dcqcn_plus_grid|mp_clos` (docs/results.md).

use rocev2_core::cc::CcScheme;
use rocev2_sim::experiments::{DartClos, GridCell, ManyFlows, ManyFlowsResult, MpClos, MpClosFct};
use std::path::Path;

use crate::common;

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
        let dir = common::experiments("dart_clos", Some(jobs), out);
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
    // Two loads × four schemes; three baselines per load.
    assert_eq!(one.0.lines().count(), 1 + 2 * 4, "{}", one.0);
    assert_eq!(one.1.lines().count(), 1 + 2 * 3, "{}", one.1);
    assert_eq!(one, three);
}

/// `experiments --only dart_clos_sensitivity --quick` writes a row per variant, load and scheme,
/// two ratio rows per variant and a plot per variant, and each variant reaches the run: the
/// access-link reading offers four times the short flows of the core's (4:1), the heavy mix
/// more than the light one, the long runs ten times the length, and the long mixes the mixes'
/// shares.
#[test]
fn dart_clos_sensitivity_cli_ci_size_writes_every_variant_and_each_changes_the_run() {
    let base = std::env::temp_dir().join(format!("rocev2-sim-sens-{}", std::process::id()));
    let dir = common::experiments("dart_clos_sensitivity", Some("2"), &base);
    let summary = std::fs::read_to_string(dir.join("summary.csv")).expect("summary.csv");
    let ratios = std::fs::read_to_string(dir.join("ratios.csv")).expect("ratios.csv");
    let plots = std::fs::read_dir(&dir)
        .expect("the experiment's folder")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "svg"))
        })
        .count();
    let _ = std::fs::remove_dir_all(&base);
    // Nine variants × two loads × four schemes; three baselines per variant.
    assert_eq!(summary.lines().count(), 1 + 9 * 2 * 4, "{summary}");
    assert_eq!(ratios.lines().count(), 1 + 9 * 3, "{ratios}");
    assert_eq!(plots, 9);
    let header: Vec<&str> = summary.lines().next().expect("header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let (short, duration, fraction) = (
        col("short_flows"),
        col("duration_ns"),
        col("short_fraction"),
    );
    // The DCQCN row at 60% of each variant.
    let row = |variant: &str| -> Vec<String> {
        let prefix = format!("{variant},dcqcn,0.6,");
        let line = summary
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("{prefix}"));
        line.split(',').map(str::to_string).collect()
    };
    let num = |r: &[String], c: usize| r[c].parse::<f64>().expect("a number");
    let typical = row("typical");
    let access = num(&row("load_of_access_link"), short) / num(&typical, short);
    assert!(
        (3.0..5.0).contains(&access),
        "access/core short flows {access}"
    );
    assert!(num(&row("heavy_mix"), short) > num(&row("light_mix"), short) * 2.0);
    for long in ["run_10x", "light_mix_run_10x", "heavy_mix_run_10x"] {
        assert_eq!(
            num(&row(long), duration),
            10.0 * num(&typical, duration),
            "{long}"
        );
    }
    for mix in ["light_mix", "heavy_mix"] {
        let long = row(&format!("{mix}_run_10x"));
        assert_eq!(num(&long, fraction), num(&row(mix), fraction), "{mix}");
    }
}

/// `--variant` runs one variant of `dart_clos_sensitivity` and refuses a name it does not know.
#[test]
fn dart_clos_sensitivity_cli_variant_runs_only_that_variant() {
    let base = std::env::temp_dir().join(format!("rocev2-sim-variant-{}", std::process::id()));
    let run = |variant: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_rocev2-sim"))
            .args(["experiments", "--only", "dart_clos_sensitivity", "--quick"])
            .args(["--variant", variant, "--out"])
            .arg(&base)
            .output()
            .expect("rocev2-sim runs")
    };
    let pfc = run("pfc");
    assert!(
        pfc.status.success(),
        "{}",
        String::from_utf8_lossy(&pfc.stderr)
    );
    let dir = base.join("dart_clos_sensitivity");
    let summary = std::fs::read_to_string(dir.join("summary.csv")).expect("summary.csv");
    let unknown = run("no_such_variant");
    let _ = std::fs::remove_dir_all(&base);
    // Two loads × four schemes, all of them PFC's.
    assert_eq!(summary.lines().count(), 1 + 2 * 4, "{summary}");
    assert!(
        summary.lines().skip(1).all(|l| l.starts_with("pfc,")),
        "{summary}"
    );
    assert!(!unknown.status.success());
    let err = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        err.contains("--variant no_such_variant") && err.contains("run_10x"),
        "{err}"
    );
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
    let dir = common::experiments("dcqcn_plus_grid", None, &out);
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

/// Seed 001 §5.3 / Fig. 12(b) at CI size (4 leaves of 10 servers, 20 connections, goodput over
/// 0.1–0.4 ms), two permutations: MP-RDMA's mean goodput per connection is at least the
/// paper's 34.78% above ECMP DCQCN's on the same permutation, and its slowest connection is
/// faster than DCQCN's (the paper: 32.95 Gbit/s against DCQCN's below 15).
#[test]
fn mp_clos_ci_permutation_beats_ecmp_dcqcn_by_the_papers_margin() {
    for seed in 1..=2 {
        let mp = MpClos::ci(true, seed);
        let sp = MpClos::ci(false, seed);
        // Both schemes run the same 20 cross-leaf connections.
        assert_eq!(mp.pairs(), sp.pairs());
        assert_eq!(mp.pairs().len(), 20);
        let (m, s) = (mp.run(), sp.run());
        eprintln!(
            "seed {seed}: MP-RDMA mean {:.2} (min {:.2}) Gbit/s, DCQCN mean {:.2} (min {:.2}): {:.3}x",
            m.mean_gbps,
            m.min_gbps,
            s.mean_gbps,
            s.min_gbps,
            m.mean_gbps / s.mean_gbps
        );
        assert_eq!(m.per_flow.len(), 20);
        assert!(
            m.mean_gbps >= 1.3478 * s.mean_gbps,
            "seed {seed}: {:.2} vs {:.2}",
            m.mean_gbps,
            s.mean_gbps
        );
        assert!(m.min_gbps > s.min_gbps, "seed {seed}");
    }
}

/// Seed 001 §5.3 / Fig. 13 at CI size (4 leaves, web-search arrivals over 1 ms at 50% load,
/// drained to 8 ms): both schemes run the same flows, MP-RDMA finishes all of them, and its
/// mean FCT over the flows both finished is below DCQCN's (the paper: 6.0–17.7% lower).
#[test]
fn mp_clos_ci_web_search_mean_fct_below_dcqcn() {
    let mp = MpClosFct::ci(true, 0.5);
    let sp = MpClosFct::ci(false, 0.5);
    assert_eq!(mp.flows(), sp.flows());
    let (m, s) = (mp.run(), sp.run());
    let sizes = |r: &rocev2_sim::experiments::MpClosFctResult| -> Vec<u64> {
        r.flows.iter().map(|f| f.0).collect()
    };
    assert_eq!(sizes(&m), sizes(&s));
    let (m_fct, n) = m.mean_fct_both_finished(&s, 0..u64::MAX);
    let (s_fct, n2) = s.mean_fct_both_finished(&m, 0..u64::MAX);
    eprintln!(
        "{n} flows finished by both of {}: MP-RDMA {m_fct:.0} ns, DCQCN {s_fct:.0} ns ({:.3}); unfinished {} / {}",
        m.flows.len(),
        m_fct / s_fct,
        m.unfinished(),
        s.unfinished()
    );
    assert_eq!(n, n2);
    assert!(n > 30, "{n}");
    assert_eq!(m.unfinished(), 0);
    assert!(m_fct < s_fct, "{m_fct:.0} vs {s_fct:.0}");
}

/// `experiments --only mp_clos --quick` writes a row per scheme and seed, the ratio of the
/// means, every connection's goodput, the FCT rows per load and class, and the plots.
#[test]
fn mp_clos_cli_ci_size_writes_rows_per_scheme_and_seed() {
    let out = std::env::temp_dir().join(format!("rocev2-sim-mpclos-{}", std::process::id()));
    let dir = common::experiments("mp_clos", None, &out);
    let summary = std::fs::read_to_string(dir.join("summary.csv")).expect("summary.csv");
    let per_flow = std::fs::read_to_string(dir.join("per_flow.csv")).expect("per_flow.csv");
    let fct = std::fs::read_to_string(dir.join("fct.csv")).expect("fct.csv");
    let svg = ["goodput_per_connection", "fct_normalised_vs_load"]
        .map(|f| dir.join(format!("{f}.svg")).exists());
    let _ = std::fs::remove_dir_all(&out);
    assert_eq!(svg, [true; 2]);
    // Two loads × three size classes.
    assert_eq!(fct.lines().count(), 1 + 6, "{fct}");
    // Two schemes × three seeds, then the ratio; 20 connections each.
    assert_eq!(summary.lines().count(), 1 + 6 + 1, "{summary}");
    assert_eq!(per_flow.lines().count(), 1 + 6 * 20);
    let r = MpClos::ci(true, 1).run();
    let row = summary
        .lines()
        .find(|l| l.starts_with("mp_rdma,1,"))
        .expect("MP-RDMA's row for seed 1");
    assert_eq!(
        row,
        format!("mp_rdma,1,20,{:.3},{:.3}", r.mean_gbps, r.min_gbps)
    );
    let ratio: f64 = summary
        .lines()
        .last()
        .and_then(|l| l.split(',').nth(3))
        .and_then(|v| v.parse().ok())
        .expect("the ratio row");
    assert!(ratio > 1.0, "{summary}");
}
