//! `rocev2-sim experiments --jobs N` runs an experiment's points on N threads and writes the
//! same files as one thread: the points are independent deterministic runs and their results
//! are written in order.

use std::path::Path;

use crate::common;

fn run(jobs: &str, out: &Path) -> String {
    let dir = common::experiments("fairness", Some(jobs), out);
    std::fs::read_to_string(dir.join("summary.csv")).expect("summary.csv")
}

#[test]
fn experiments_write_the_same_files_on_any_number_of_threads() {
    let base = std::env::temp_dir().join(format!("rocev2-sim-jobs-{}", std::process::id()));
    let one = run("1", &base.join("one"));
    let three = run("3", &base.join("three"));
    let _ = std::fs::remove_dir_all(&base);
    // Six points: three schemes at 10 and 40 Gbit/s.
    assert_eq!(one.lines().count(), 7, "{one}");
    assert_eq!(one, three);
}
