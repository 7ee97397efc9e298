//! Scenario files (`deploy/scenarios/*.toml`): everything a run needs, with defaults.
//!
//! ```toml
//! name = "incast-8"
//! seed = 1
//! duration_ns = 200_000
//! [topology]
//! kind = "star"
//! hosts = 9
//! rate_gbps = 40
//! delay_ns = 1000
//! [switch]
//! buffer_bytes = 1_000_000
//! pfc = { enabled = true }
//! [[workload]]
//! kind = "incast"
//! receiver = 0
//! degree = 8
//! size_bytes = 65536
//! ```
//!
//! Every section but `[topology]` and `[[workload]]` may be left out. `[sweep] loads = [...]`
//! runs the scenario once per load (replacing the `load` of every Poisson and Dart-mix
//! workload) and plots p50/p99 FCT against load.

use crate::host::HostSpec;
use crate::switch_node::SwitchSpec;
use crate::topology::TopologySpec;
use crate::workload::WorkloadSpec;
use serde::{Deserialize, Serialize};

/// Which ports are sampled over time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SamplePorts {
    /// Every switch egress port.
    #[default]
    Switch,
    /// Every port, host NICs included.
    All,
    /// None (final counters only).
    None,
}

/// `[output]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputSpec {
    /// Queue/counter sampling period, ns (0 = off).
    pub sample_interval_ns: u64,
    /// Which ports to sample.
    pub sample_ports: SamplePorts,
    /// Width of a rate-trace bin, ns.
    pub rate_bin_ns: u64,
    /// Rate traces for the first this many flows.
    pub trace_flows: u32,
    /// Draw SVG plots.
    pub plots: bool,
}

impl Default for OutputSpec {
    fn default() -> Self {
        OutputSpec {
            sample_interval_ns: 10_000,
            sample_ports: SamplePorts::Switch,
            rate_bin_ns: 10_000,
            trace_flows: 64,
            plots: true,
        }
    }
}

/// Where random loss applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LossScope {
    /// Every link direction.
    #[default]
    All,
    /// Only switch-to-switch links.
    Fabric,
}

/// `[faults]`: random packet loss on links, and deterministic loss on named ones.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// Probability that a packet is lost on a link.
    #[serde(default)]
    pub loss: f64,
    /// Which links.
    #[serde(default)]
    pub scope: LossScope,
    /// `[[faults.links]]`: links that drop by IPv4 identification.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<LinkFault>,
}

/// `[[faults.links]]`: packets going from node `from` to its neighbour `to` are lost when their
/// IPv4 identification is 0 modulo `drop_ip_id_mod` (seed 001 §5.1.1 drops "ID mod 100 == 0"
/// at the switch's ingress: 1% of a NIC's packets, the same ones on every run). Nodes are
/// numbered hosts first, then switches in the topology's order (`topology.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkFault {
    /// Upstream node.
    pub from: u32,
    /// Downstream node, where the packet is dropped on arrival.
    pub to: u32,
    /// The modulus, at least 1.
    pub drop_ip_id_mod: u16,
}

/// `[sweep]`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepSpec {
    /// Loads to run.
    pub loads: Vec<f64>,
}

/// A whole scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Name, used for output file names.
    #[serde(default = "default_name")]
    pub name: String,
    /// Seed of every random draw.
    #[serde(default)]
    pub seed: u64,
    /// Simulated time, ns.
    pub duration_ns: u64,
    /// The network.
    pub topology: TopologySpec,
    /// Switch settings.
    #[serde(default)]
    pub switch: SwitchSpec,
    /// Host settings.
    #[serde(default)]
    pub host: HostSpec,
    /// Traffic.
    pub workload: Vec<WorkloadSpec>,
    /// Outputs.
    #[serde(default)]
    pub output: OutputSpec,
    /// Link loss.
    #[serde(default)]
    pub faults: Option<FaultSpec>,
    /// Load sweep.
    #[serde(default)]
    pub sweep: Option<SweepSpec>,
}

fn default_name() -> String {
    "scenario".into()
}

/// A scenario file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// Not valid TOML or not the expected shape (the message names the key).
    #[error("{0}")]
    Parse(#[from] toml::de::Error),
    /// The topology is inconsistent.
    #[error(transparent)]
    Topology(#[from] crate::topology::TopologyError),
    /// A workload is inconsistent.
    #[error(transparent)]
    Workload(#[from] crate::workload::WorkloadError),
    /// Another setting is out of range.
    #[error("{key}: {why}")]
    Invalid {
        /// The TOML key.
        key: &'static str,
        /// Accepted range.
        why: String,
    },
}

impl Scenario {
    /// Parses a scenario from TOML text.
    ///
    /// # Errors
    /// Syntax errors and unknown or missing keys, naming the key.
    pub fn from_toml(text: &str) -> Result<Scenario, ScenarioError> {
        Ok(toml::from_str(text)?)
    }

    /// A copy with every Poisson/Dart-mix load replaced by `load`.
    pub fn with_load(&self, load: f64) -> Scenario {
        let mut s = self.clone();
        for w in &mut s.workload {
            match w {
                WorkloadSpec::Poisson { load: l, .. } | WorkloadSpec::DartMix { load: l, .. } => {
                    *l = load
                }
                _ => {}
            }
        }
        s.name = format!("{}-load{:.0}", self.name, load * 100.0);
        s
    }
}
