//! Experiment `deploy/experiments/dcqcn_incast.toml` in its CI size (`--short`): DCQCN vs
//! DCQCN+ under an incast growing to 4 rocev2 QPs into one RED/ECN switch port. Checks what
//! the run must produce whatever the machine's load: every QP sent (rate > 0) in both
//! variants with the variant's CC scheme, the port was sampled and its modelled queue stayed
//! within the buffer, the short-flow mix recorded completion times, the plots (FCT CDF too)
//! parse, nothing is left behind. Not the paper's numbers: those
//! need the full run (docs/experiments.md).

mod common;

use common::experiment::{
    Csv, assert_plot, check_model, check_outputs, last_port_sample, num, run_short,
};
use common::need_root;

const VARIANTS: [&str; 2] = ["dcqcn", "dcqcn_plus"];
const FLOWS: [&str; 4] = ["f0", "f1", "f2", "f3"];

#[test]
fn experiment_dcqcn_incast_short_measures_both_schemes() {
    if !need_root("experiment_dcqcn_incast_short_measures_both_schemes") {
        return;
    }
    let out = run_short("dcqcn_incast.toml");
    let fct_path = out.join("fct.csv");
    let (_, queue, flows) = check_outputs(&out, &VARIANTS, &FLOWS, &["sw>rx"], 512 * 1024, 1500);
    let fct = Csv::read(&fct_path);
    for (v, scheme) in VARIANTS.iter().zip(["dcqcn_cx4", "dcqcn_plus"]) {
        // Every QP ran with its variant's scheme, as RC, and none gave up: the flows' ACK
        // timeout (1.07 s) exceeds the time one MTU takes at DCQCN+'s floor R_l/10000, so a
        // QP cut that far can still get its retransmission out (dcqcn_incast.toml).
        for r in flows.with("variant", v) {
            assert!(
                r["status"] == "done" || r["status"] == "unfinished",
                "{v}: {r:?}"
            );
            assert_eq!(r["cc"], scheme, "{v}: {r:?}");
            assert_eq!(r["mode"], "rc", "{v}: {r:?}");
        }
        // The incast crossed the switch port: it forwarded and queued packets.
        let last = last_port_sample(&queue, v, "sw>rx");
        assert!(num(last, "packets") > 0.0, "{v}: {last:?}");
        assert!(num(last, "queue_max_bytes") > 0.0, "{v}: {last:?}");
        let out_max = queue
            .with("variant", v)
            .map(|r| num(r, "tx_mbps"))
            .fold(0.0, f64::max);
        assert!(
            out_max > 0.0 && out_max < 100_000.0,
            "{v}: port output {out_max} Mbit/s"
        );
        // The short-flow mix completed transfers of 1 MiB, each with a completion time.
        let fcts: Vec<_> = fct.with("variant", v).collect();
        assert!(!fcts.is_empty(), "{v}: no short transfer completed");
        for r in fcts {
            assert_eq!(r["bytes"], "1048576", "{v}: {r:?}");
            assert!(num(r, "fct_ms") > 0.0, "{v}: {r:?}");
        }
    }
    for ext in ["svg", "png"] {
        assert_plot(&out.join(format!("fct_cdf.{ext}")));
    }
    // The model runs every variant, R_min included (its [host] takes `min_rate_mbps`).
    check_model(&out, &["dcqcn", "dcqcn_plus"], 512 * 1024, true);
    std::fs::remove_dir_all(&out).expect("remove output");
}
