//! Experiment `deploy/experiments/iofd_deflection.toml` in its CI size (`--short`): a rocev2
//! QP writing 4 KiB messages with IOFD tokens across a 2-leaf, 2-spine fabric, with a UDP flood
//! pinned onto its uplink, IOFD off and on. Checks what the mechanism guarantees whatever the
//! machine's load: with IOFD the leaf's uplinks deflected messages (the counter moved) and the
//! flood's uplink is the one that deflected; without IOFD nothing was deflected; the queue
//! plot exists for both variants. How much IOFD saves is the full run's result.

mod common;

use common::experiment::{check_outputs, last_port_sample, num, run_short};
use common::need_root;

const UPLINKS: [&str; 2] = ["l0>s0", "l0>s1"];

#[test]
fn experiment_iofd_deflection_short_deflects_only_with_iofd() {
    if !need_root("experiment_iofd_deflection_short_deflects_only_with_iofd") {
        return;
    }
    let out = run_short("iofd_deflection.toml");
    let (_, queue, flows) = check_outputs(
        &out,
        &["no_iofd", "iofd"],
        &["qp", "flood"],
        &UPLINKS,
        256 * 1024,
        1500,
    );
    for u in UPLINKS {
        let off = last_port_sample(&queue, "no_iofd", u);
        assert_eq!(num(off, "iofd_deflected"), 0.0, "no_iofd {u}: {off:?}");
    }
    let flood = flows
        .with("variant", "iofd")
        .find(|r| r["flow"] == "flood")
        .expect("flood row");
    let spine = flood["mode"]
        .strip_prefix("pinned to ")
        .unwrap_or_else(|| panic!("flood not pinned: {flood:?}"));
    let pinned = format!("l0>{spine}");
    let deflected = num(last_port_sample(&queue, "iofd", &pinned), "iofd_deflected");
    assert!(
        deflected >= 1.0,
        "iofd: the flooded uplink {pinned} deflected nothing"
    );
    let qp = flows
        .with("variant", "iofd")
        .find(|r| r["flow"] == "qp")
        .expect("qp row");
    assert_eq!(qp["mode"], "rc", "{qp:?}");
    std::fs::remove_dir_all(&out).expect("remove output");
}
