//! Every scenario under `deploy/scenarios/` parses and builds a model (topology, workload,
//! faults), so a key renamed in the code cannot leave a shipped file behind.

use rocev2_sim::{Scenario, Sim};

#[test]
fn shipped_scenarios_parse_and_build() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/scenarios");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let s = Scenario::from_toml(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Sim::new(&s).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        n += 1;
    }
    assert!(n >= 7, "found {n} scenarios in {}", dir.display());
}
