//! Experiment `deploy/experiments/multipath_collision.toml` in its CI size (`--short`): a
//! rocev2 QP from `l0h0` to `l1h0` across a 2-leaf, 4-spine fabric, single-path in one variant
//! and MP-RDMA in the other, with a UDP flood pinned onto the uplink the QP's first packets
//! took. Checks what the run must produce whatever the machine's load: both flows sent in both
//! variants, the QP ran in the mode its variant asked for, the flood really shared the
//! single-path QP's uplink (that uplink carried the most packets and the others next to none),
//! the multipath QP used an uplink besides the flood's, the plots parse, nothing is left behind.

mod common;

use common::experiment::{check_outputs, last_port_sample, num, run_short};
use common::need_root;

const VARIANTS: [&str; 2] = ["single_path", "multipath"];
const UPLINKS: [&str; 4] = ["l0>s0", "l0>s1", "l0>s2", "l0>s3"];

#[test]
fn experiment_multipath_collision_short_pins_the_flood_and_spreads_multipath() {
    if !need_root("experiment_multipath_collision_short_pins_the_flood_and_spreads_multipath") {
        return;
    }
    let out = run_short("multipath_collision.toml");
    let (_, queue, flows) = check_outputs(
        &out,
        &VARIANTS,
        &["qp", "flood"],
        &UPLINKS,
        256 * 1024,
        4200,
    );
    for (v, mode) in VARIANTS.iter().zip(["rc", "multipath"]) {
        let qp = flows
            .with("variant", v)
            .find(|r| r["flow"] == "qp")
            .expect("qp row");
        assert_eq!(qp["mode"], mode, "{v}: {qp:?}");
        let flood = flows
            .with("variant", v)
            .find(|r| r["flow"] == "flood")
            .expect("flood row");
        let spine = flood["mode"]
            .strip_prefix("pinned to ")
            .unwrap_or_else(|| panic!("{v}: flood not pinned: {flood:?}"));
        let pinned = format!("l0>{spine}");
        assert!(UPLINKS.contains(&pinned.as_str()), "{v}: {pinned}");
        let packets: Vec<(String, f64)> = UPLINKS
            .iter()
            .map(|u| {
                (
                    u.to_string(),
                    num(last_port_sample(&queue, v, u), "packets"),
                )
            })
            .collect();
        let on_pinned = packets
            .iter()
            .find(|(u, _)| *u == pinned)
            .map_or(0.0, |p| p.1);
        let others: Vec<f64> = packets
            .iter()
            .filter(|(u, _)| *u != pinned)
            .map(|p| p.1)
            .collect();
        if *v == "single_path" {
            // One QP on one path plus the flood pinned to it: that uplink carried it all.
            assert!(
                others.iter().all(|n| n * 20.0 < on_pinned),
                "{v}: no collision on {pinned}: {packets:?}"
            );
        } else {
            // The multipath QP also took a spine the flood did not.
            assert!(
                others.iter().any(|n| *n >= 100.0),
                "{v}: multipath stayed on the flood's spine: {packets:?}"
            );
        }
    }
    std::fs::remove_dir_all(&out).expect("remove output");
}
