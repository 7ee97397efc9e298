//! The soak's CI share: 300 seeds of `testing::soak` (mixed verbs, RC and multipath, 0–10% of
//! every fault). The soak command (`examples/soak.rs`) runs thousands; any failing seed it
//! finds is replayed with `--from SEED --seeds 1` and belongs in this file's pinned list.

use rocev2_core::testing::soak;

#[test]
fn soak_300_seeds_every_byte_and_atomic_checked() {
    let mut failed = Vec::new();
    let (mut mp, mut faults) = (0, 0);
    for seed in 0..300 {
        match soak::run(seed) {
            Ok(o) => {
                mp += usize::from(o.multipath);
                faults += o.faults;
            }
            Err(f) => failed.push(f),
        }
    }
    // The seeds must exercise what they claim to: both modes, and faults on the links.
    assert!(mp > 30 && mp < 120, "{mp} of 300 seeds ran multipath");
    assert!(faults > 1000, "only {faults} link faults in 300 seeds");
    assert!(
        failed.is_empty(),
        "{} seeds failed: {failed:#?}",
        failed.len()
    );
}
