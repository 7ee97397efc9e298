//! Scenario builders shared by the model's tests.
#![allow(dead_code)]

use rocev2_sim::Scenario;
use rocev2_sim::host::HostSpec;
use rocev2_sim::scenario::OutputSpec;
use rocev2_sim::switch_node::SwitchSpec;
use rocev2_sim::topology::TopologySpec;
use rocev2_sim::workload::WorkloadSpec;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A scenario with default switches and hosts and no sampling.
pub fn scenario(topology: TopologySpec, workload: Vec<WorkloadSpec>, duration_ns: u64) -> Scenario {
    Scenario {
        name: "test".into(),
        seed: 1,
        duration_ns,
        topology,
        switch: SwitchSpec::default(),
        host: HostSpec::default(),
        workload,
        output: OutputSpec {
            sample_interval_ns: 0,
            plots: false,
            ..OutputSpec::default()
        },
        faults: None,
        sweep: None,
    }
}

/// `n` hosts on one switch.
pub fn star(n: u32, gbps: f64, delay_ns: u64) -> TopologySpec {
    TopologySpec::Star {
        hosts: n,
        rate_gbps: gbps,
        delay_ns,
    }
}

/// Two switches, `l` and `r` hosts, bottleneck at `neck` Gbit/s.
pub fn dumbbell(l: u32, r: u32, gbps: f64, neck: f64, delay_ns: u64) -> TopologySpec {
    TopologySpec::Dumbbell {
        left: l,
        right: r,
        rate_gbps: gbps,
        bottleneck_gbps: neck,
        delay_ns,
    }
}

/// Runs `rocev2-sim experiments --only <only> --quick [--jobs <jobs>] --out <out>`, fails the
/// test with the tool's stderr if it fails, and returns the experiment's directory.
pub fn experiments(only: &str, jobs: Option<&str>, out: &Path) -> PathBuf {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rocev2-sim"));
    cmd.args(["experiments", "--only", only, "--quick"]);
    if let Some(j) = jobs {
        cmd.args(["--jobs", j]);
    }
    let st = cmd.arg("--out").arg(out).output().expect("rocev2-sim runs");
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    out.join(only)
}
