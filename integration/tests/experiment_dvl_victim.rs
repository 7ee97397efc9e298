//! Experiment `deploy/experiments/dvl_victim.toml` in its CI size (`--short`): a victim rocev2
//! QP sharing a router dumbbell's uplink with a UDP flow congested downstream, DVL off and on.
//! Checks what the mechanism guarantees whatever the machine's load: with DVL the congested
//! port isolated a flow and notified upstream, the uplink accepted the notifications and
//! queued packets in its congested-flow queue, and the victim's transfer completed
//! (byte-checked; the `dvl` variant runs until it does, the flood still on, so how fast the
//! machine moves it does not decide the test); without DVL no DVL counter moved; both flows sent in both variants; the
//! plots parse. How much DVL helps the victim is the full run's result (docs/experiments.md).

mod common;

use common::experiment::{check_outputs, last_port_sample, num, run_short};
use common::need_root;

const DVL_COUNTERS: [&str; 4] = [
    "dvl_isolated",
    "dvl_congested",
    "dvl_notify_sent",
    "dvl_notify_accepted",
];

#[test]
fn experiment_dvl_victim_short_isolates_and_the_victim_completes() {
    if !need_root("experiment_dvl_victim_short_isolates_and_the_victim_completes") {
        return;
    }
    let out = run_short("dvl_victim.toml");
    let (_, queue, flows) = check_outputs(
        &out,
        &["no_dvl", "dvl"],
        &["congested", "victim"],
        &["swa>swb", "swb>b0"],
        256 * 1024,
        1500,
    );
    for p in ["swa>swb", "swb>b0"] {
        let off = last_port_sample(&queue, "no_dvl", p);
        for c in DVL_COUNTERS {
            assert_eq!(num(off, c), 0.0, "no_dvl {p}: {off:?}");
        }
    }
    // The congested port detected the flow and told the uplink, which took it in.
    let down = last_port_sample(&queue, "dvl", "swb>b0");
    assert!(num(down, "dvl_isolated") >= 1.0, "{down:?}");
    assert!(num(down, "dvl_notify_sent") >= 1.0, "{down:?}");
    let up = last_port_sample(&queue, "dvl", "swa>swb");
    assert!(num(up, "dvl_notify_accepted") >= 1.0, "{up:?}");
    assert!(num(up, "dvl_congested") >= 1.0, "{up:?}");
    let victim = flows
        .with("variant", "dvl")
        .find(|r| r["flow"] == "victim")
        .expect("victim row");
    assert_eq!(victim["status"], "done", "{victim:?}");
    assert!(num(victim, "bytes") > 0.0, "{victim:?}");
    std::fs::remove_dir_all(&out).expect("remove output");
}
