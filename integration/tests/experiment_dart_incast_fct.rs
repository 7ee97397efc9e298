//! Experiment `deploy/experiments/dart_incast_fct.toml` in its CI size (`--short`): Dart vs
//! DCQCN short-flow completion times under a 3:1 incast of rocev2 QPs into one RED/ECN switch
//! port. Checks what the mechanism guarantees whatever the machine's load: every long QP ran
//! with its variant's scheme, every short transfer that started completed (none failed) with
//! its completion time recorded, in both variants; the FCT CDF plot and the summary's FCT
//! table exist. Which scheme is faster is the full run's result (docs/experiments.md), not a
//! test: it depends on the load.

mod common;

use common::experiment::{Csv, assert_plot, check_model, check_outputs, num, run_short};
use common::need_root;

const VARIANTS: [&str; 2] = ["dart", "dcqcn"];

#[test]
fn experiment_dart_incast_fct_short_records_fcts_of_both_schemes() {
    if !need_root("experiment_dart_incast_fct_short_records_fcts_of_both_schemes") {
        return;
    }
    let out = run_short("dart_incast_fct.toml");
    let (_, _, flows) = check_outputs(
        &out,
        &VARIANTS,
        &["f0", "f1", "f2"],
        &["sw>rx"],
        512 * 1024,
        1500,
    );
    let fct = Csv::read(&out.join("fct.csv"));
    for (v, scheme) in VARIANTS.iter().zip(["dart", "dcqcn_cx4"]) {
        for r in flows.with("variant", v) {
            // Short transfers appear in flows.csv only when they failed.
            assert!(!r["flow"].starts_with("mice#"), "{v}: {r:?}");
            assert!(
                r["status"] == "done" || r["status"] == "unfinished",
                "{v}: {r:?}"
            );
            assert_eq!(r["cc"], scheme, "{v}: {r:?}");
            assert_eq!(r["mode"], "rc", "{v}: {r:?}");
        }
        let fcts: Vec<_> = fct.with("variant", v).collect();
        assert!(!fcts.is_empty(), "{v}: no short transfer completed");
        for r in fcts {
            assert_eq!(r["bytes"], "1048576", "{v}: {r:?}");
            assert!(num(r, "fct_ms") > 0.0, "{v}: {r:?}");
        }
    }
    let summary = std::fs::read_to_string(out.join("summary.md")).expect("summary.md");
    assert!(
        summary.contains("## Short-flow completion times"),
        "{summary}"
    );
    for (v, scheme) in VARIANTS.iter().zip(["dart", "dcqcn_cx4"]) {
        assert!(
            summary.contains(&format!("| {v} | mice | {scheme} |")),
            "{v}: {summary}"
        );
    }
    for ext in ["svg", "png"] {
        assert_plot(&out.join(format!("fct_cdf.{ext}")));
    }
    // The model runs every variant, R_min included (its [host] takes `min_rate_mbps`).
    check_model(&out, &["dcqcn", "dart"], 512 * 1024, true);
    std::fs::remove_dir_all(&out).expect("remove output");
}
