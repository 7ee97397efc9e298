//! `rocev2-sim experiments --jobs N` runs an experiment's points on N threads and writes the
//! same files as one thread: the points are independent deterministic runs and their results
//! are written in order.

use std::path::Path;
use std::process::Command;

fn run(jobs: &str, out: &Path) -> String {
    let st = Command::new(env!("CARGO_BIN_EXE_rocev2-sim"))
        .args([
            "experiments",
            "--only",
            "fairness",
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
    std::fs::read_to_string(out.join("fairness/summary.csv")).expect("summary.csv")
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
