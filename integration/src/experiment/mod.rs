//! Experiments on testbeds: `rocev2-testbed run EXPERIMENT.toml [--out DIR] [--short]`
//! (docs/experiments.md).
//!
//! An experiment file (`deploy/experiments/*.toml`, [`Experiment`]) names a topology (the
//! `[topology]` table of a testbed file), the switch ports to attach `rocev2d switch` to and
//! with what (`[[port]]`: rate, buffer, RED/ECN, IOFD, DVL — whatever `switch attach` takes),
//! the traffic (`[[flow]]`: RoCE bulk transfers by `rocev2-wiretest` with a per-QP congestion
//! control scheme and optionally MP-RDMA, or paced UDP floods by `rocev2-testbed probe blast`;
//! `[[short]]`: a sequence of short RoCE transfers whose completion times are recorded) and the
//! variants to compare (`[[variant]]`: the same traffic once per variant, each on a fresh
//! testbed, the variant choosing the CC scheme and multipath by default).
//!
//! Every RoCE transfer to one host is a QP of that host's one `rocev2-wiretest` server
//! ([`Experiment::receivers`], `--qps`), as QPs of one NIC share its endpoint: an incast's
//! receiver counts all its senders (Dart) and keeps one CNP list (DCQCN+).
//!
//! [`run()`] brings each variant's testbed up, attaches the ports, starts the flows on time,
//! samples every `sample_ms` (per-flow rate from the sender's interface counters, each port's
//! modelled queue, CE marks and drops from `rocev2d switch stats --json`), collects what the
//! tools report when they finish (goodput, retransmissions, completion time), and tears
//! everything down — also on an error or Ctrl-C. [`report`] writes the CSVs and the Markdown
//! summary, [`plot`] the SVG and PNG plots.
//!
//! Deviations: the per-second rate of a flow is the Ethernet bytes its sender's interface
//! transmitted (retransmissions included), not goodput: the tools print goodput only when a
//! transfer ends, and that final goodput is in `flows.csv`. Hence each long flow and flood
//! needs a sender host of its own (checked).

pub mod model;
pub mod plot;
pub mod report;
pub mod run;

pub use run::{Outcome, Tools, run};

use crate::topology::Topology;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// Why an experiment file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Not TOML, an unknown key, or a value of the wrong type (names the key).
    #[error("experiment file: {0}")]
    Toml(String),
    /// A value that cannot work, naming the key.
    #[error("`{key}`: {why}")]
    Invalid {
        /// The TOML key.
        key: String,
        /// What is wrong.
        why: String,
    },
}

fn invalid(key: impl Into<String>, why: impl Into<String>) -> SpecError {
    SpecError::Invalid {
        key: key.into(),
        why: why.into(),
    }
}

/// An experiment file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    /// Name, used in the output and the summary's title.
    pub name: String,
    /// What it shows and which paper figure it follows (copied into the summary).
    #[serde(default)]
    pub description: String,
    /// How long each variant runs, in seconds, unless every transfer finishes earlier (or a
    /// variant's `finish` flows end later).
    pub duration_secs: f64,
    /// The duration of `--short` (CI) runs; start times, transfer sizes and short-flow counts
    /// shrink by `short_secs / duration_secs` too.
    pub short_secs: f64,
    /// Sampling period in milliseconds (at most 1000).
    #[serde(default = "default_sample_ms")]
    pub sample_ms: u64,
    /// `rocev2-wiretest`'s datapath: `packet` (AF_PACKET, the default: several peers can share
    /// a receiver's interface), `udp`, `xdp` or `auto`.
    #[serde(default = "default_datapath")]
    pub datapath: String,
    /// The testbed, as the `[topology]` table of `deploy/testbeds/*.toml`.
    pub topology: Topology,
    /// Switch ports to attach `rocev2d switch` to.
    #[serde(default, rename = "port")]
    pub ports: Vec<PortSpec>,
    /// The variants; none: one variant named `default` without CC.
    #[serde(default, rename = "variant")]
    pub variants: Vec<Variant>,
    /// Long flows and floods.
    #[serde(default, rename = "flow")]
    pub flows: Vec<FlowSpec>,
    /// Short-flow mixes.
    #[serde(default, rename = "short")]
    pub shorts: Vec<ShortSpec>,
    /// Run the same experiment in the network model too and overlay its curves ([`model`]).
    #[serde(default)]
    pub model: Option<model::ModelSpec>,
}

fn default_sample_ms() -> u64 {
    500
}

fn default_datapath() -> String {
    "packet".to_owned()
}

/// Switch ports chosen like [`crate::PortSelection`], and the `rocev2d switch attach` options
/// they get.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortSpec {
    /// The switch node (`sw`, `l0`, …).
    pub switch: String,
    /// Only its port toward this node.
    #[serde(default)]
    pub toward: Option<String>,
    /// Only its ports toward nodes of this role (`host`, `router`, `bridge`).
    #[serde(default)]
    pub toward_role: Option<crate::Role>,
    /// `--rate` (tc units: `100mbit`).
    pub rate: String,
    /// `--buffer` (tc units: `512kb`).
    pub buffer: String,
    /// `--red` (`kmin=20kb,kmax=200kb,pmax=0.2`); no marking when absent.
    #[serde(default)]
    pub red: Option<String>,
    /// More `switch attach` arguments (`["--dvl", "30kb"]`, `["--shaper", "tbf"]`). In each,
    /// `{others}` becomes the interfaces of the other ports this entry selects on the same
    /// switch, joined by `+`: IOFD's alternates (`["--iofd",
    /// "threshold=15kb,max-msg=8kb,alt={others}"]` on a leaf's uplinks), whose names the file
    /// cannot know.
    #[serde(default)]
    pub extra: Vec<String>,
    /// Attach only in these variants (all when empty): the same port with and without a
    /// program option (DVL on vs off) is two entries, one per variant.
    #[serde(default)]
    pub variants: Vec<String>,
    /// Whether to sample this port's queue and counters (default true).
    #[serde(default = "yes")]
    pub sample: bool,
}

fn yes() -> bool {
    true
}

/// The `[cc]` section `rocev2-wiretest --config` reads (`rocev2d run`'s keys).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CcSpec {
    /// `none`, `dcqcn`, `dcqcn_cx4`, `dcqcn_plus` or `dart`.
    pub scheme: String,
    /// Where flows start, Gbit/s (the bottleneck's rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line_gbps: Option<f64>,
    /// M of DCQCN+'s eqs. (16), (17).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu_bytes: Option<u32>,
    /// DCQCN's R_min (dcqcn, dcqcn_cx4, dart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_rate_mbps: Option<f64>,
    /// DASR's measurement interval, µs (dart): about one RTT of the testbed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dasr_interval_us: Option<u64>,
}

/// One variant: the same traffic with other defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    /// Name (`[a-z0-9_]+`), used in file names and series.
    pub name: String,
    /// Congestion control of every RoCE flow that does not set its own.
    #[serde(default)]
    pub cc: Option<CcSpec>,
    /// MP-RDMA for every RoCE flow that does not say.
    #[serde(default)]
    pub multipath: bool,
    /// RoCE flows this variant runs to their end: its traffic goes on past the duration
    /// until they end (at the latest at their transfer's deadline). A test that checks that a
    /// transfer completes then depends on what the variant guarantees, not on how fast the
    /// machine moves it within the duration.
    #[serde(default)]
    pub finish: Vec<String>,
}

/// What a flow is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FlowKind {
    /// A `rocev2-wiretest --workload bulk` RDMA WRITE transfer, CRC-checked.
    #[default]
    Roce,
    /// A paced UDP flood (`rocev2-testbed probe blast`) into a sink.
    Udp,
}

/// A long flow or a flood.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowSpec {
    /// Name (`[a-z0-9_]+`), the series name in CSVs and plots.
    pub name: String,
    /// RoCE (default) or UDP.
    #[serde(default)]
    pub kind: FlowKind,
    /// Sender host; no other flow may send from it (its interface counters are the rate).
    pub from: String,
    /// Receiver host.
    pub to: String,
    /// When it starts, seconds after the variant's traffic begins.
    #[serde(default)]
    pub start_secs: f64,
    /// RoCE: MiB to write.
    #[serde(default)]
    pub mib: Option<u64>,
    /// RoCE: bytes per WRITE (`--msg-bytes`); the tool's default (4 MiB) when absent.
    #[serde(default)]
    pub msg_bytes: Option<u64>,
    /// RoCE: this flow's own congestion control, instead of the variant's.
    #[serde(default)]
    pub cc: Option<CcSpec>,
    /// RoCE: MP-RDMA on or off, instead of the variant's.
    #[serde(default)]
    pub multipath: Option<bool>,
    /// RoCE multipath: virtual paths (`--vps`).
    #[serde(default)]
    pub vps: Option<u16>,
    /// RoCE: more `rocev2-wiretest` arguments (both sides), e.g. `["--iofd-tokens", "4"]`.
    #[serde(default)]
    pub extra: Vec<String>,
    /// UDP: the pace in Mbit/s of payload.
    #[serde(default)]
    pub rate_mbps: Option<f64>,
    /// UDP: how long it sends, seconds (until the end of the run when absent).
    #[serde(default)]
    pub secs: Option<f64>,
    /// UDP: source port (the ECMP hash input); ephemeral when absent.
    #[serde(default)]
    pub src_port: Option<u16>,
    /// UDP: destination port (5201 + flow index when absent).
    #[serde(default)]
    pub dst_port: Option<u16>,
    /// UDP: collide with this RoCE flow. Both senders must hang off the same router (a leaf);
    /// once the named flow has sent 32 packets up that router's uplinks, the flood starts
    /// from a source port that the router's ECMP hash puts on the uplink that carried most of
    /// them (found with `ip route get … ipproto 17 sport P`), so both share one spine. Its
    /// `start_secs` is then the earliest start.
    #[serde(default)]
    pub collide_with: Option<String>,
}

/// A short-flow mix: `count` RoCE transfers of `mib` MiB from one host to another, one after
/// the other, `interval_secs` apart (start to start, or back to back when one takes longer);
/// each one's completion time is recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShortSpec {
    /// Name (`[a-z0-9_]+`).
    pub name: String,
    /// Sender host (not the sender of a long flow).
    pub from: String,
    /// Receiver host.
    pub to: String,
    /// Size of each transfer, MiB (`rocev2-wiretest --bulk-mib` moves whole MiB).
    pub mib: u64,
    /// How many.
    pub count: u32,
    /// Start of the first one.
    #[serde(default)]
    pub start_secs: f64,
    /// Start-to-start interval.
    pub interval_secs: f64,
    /// Bytes per WRITE.
    #[serde(default)]
    pub msg_bytes: Option<u64>,
    /// Their own CC instead of the variant's.
    #[serde(default)]
    pub cc: Option<CcSpec>,
    /// More `rocev2-wiretest` arguments (both sides), as a flow's `extra`.
    #[serde(default)]
    pub extra: Vec<String>,
}

/// The one `rocev2-wiretest` server of a receiving host in one variant: every RoCE flow and
/// short transfer to that host is a QP in its endpoint, as QPs of one NIC are, so its
/// receiver-side congestion control sees them all (Dart's DASR counts the senders, seed 000
/// §III-B; DCQCN+ keeps one CNP list, seed 002 §IV-B).
#[derive(Debug, Clone, PartialEq)]
pub struct Receiver {
    /// The receiving host.
    pub host: String,
    /// QPs it takes: its RoCE flows and every short transfer to it.
    pub qps: u32,
    /// The largest transfer to it, MiB (each QP's buffer).
    pub mib: u64,
    /// The congestion control of all its QPs (the endpoint has one receiver side).
    pub cc: Option<CcSpec>,
    /// Whether it offers MP-RDMA.
    pub multipath: bool,
    /// Virtual paths of its multipath QPs.
    pub vps: Option<u16>,
    /// The `extra` arguments all its transfers give.
    pub extra: Vec<String>,
}

fn check_name(key: &str, name: &str) -> Result<(), SpecError> {
    if name.is_empty()
        || name.len() > 32
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        return Err(invalid(key, format!("{name:?} is not [a-z0-9_]{{1,32}}")));
    }
    Ok(())
}

fn check_secs(key: &str, v: f64) -> Result<(), SpecError> {
    if !(v.is_finite() && v >= 0.0) {
        return Err(invalid(key, format!("{v} is not a duration in seconds")));
    }
    Ok(())
}

impl Experiment {
    /// Parse and check an experiment file's text.
    ///
    /// # Errors
    /// [`SpecError::Toml`] on a syntax or type error; [`SpecError::Invalid`] naming the key of
    /// a value that cannot work (an unknown host, two flows from one host, no size).
    pub fn parse(text: &str) -> Result<Self, SpecError> {
        let e: Experiment = toml::from_str(text).map_err(|e| SpecError::Toml(e.to_string()))?;
        e.check()?;
        Ok(e)
    }

    fn check(&self) -> Result<(), SpecError> {
        check_name("name", &self.name)?;
        check_secs("duration_secs", self.duration_secs)?;
        check_secs("short_secs", self.short_secs)?;
        if self.duration_secs <= 0.0 || self.short_secs <= 0.0 {
            return Err(invalid("duration_secs", "durations must be positive"));
        }
        if !(10..=1000).contains(&self.sample_ms) {
            return Err(invalid(
                "sample_ms",
                "10..=1000 (sample every second or faster)",
            ));
        }
        if !["auto", "xdp", "packet", "udp"].contains(&self.datapath.as_str()) {
            return Err(invalid("datapath", "auto, xdp, packet or udp"));
        }
        let net = self
            .topology
            .network()
            .map_err(|e| invalid("topology", e.to_string()))?;
        let node = |key: &str, n: &str, host: bool| match net.nodes.iter().find(|x| x.name == n) {
            Some(x) if x.role.is_switch() != host => Ok(()),
            Some(_) => Err(invalid(
                key,
                format!("{n:?} is not a {}", if host { "host" } else { "switch" }),
            )),
            None => Err(invalid(key, format!("no node {n:?} in the topology"))),
        };
        for (i, p) in self.ports.iter().enumerate() {
            node(&format!("port[{i}].switch"), &p.switch, false)?;
            if let Some(t) = &p.toward
                && !net.nodes.iter().any(|x| x.name == *t)
            {
                return Err(invalid(
                    format!("port[{i}].toward"),
                    format!("no node {t:?}"),
                ));
            }
        }
        let mut names = BTreeSet::new();
        for (i, v) in self.variants.iter().enumerate() {
            check_name(&format!("variant[{i}].name"), &v.name)?;
            if !names.insert(v.name.clone()) {
                return Err(invalid(format!("variant[{i}].name"), "used twice"));
            }
        }
        for (i, p) in self.ports.iter().enumerate() {
            if let Some(v) = p.variants.iter().find(|v| !names.contains(*v)) {
                return Err(invalid(
                    format!("port[{i}].variants"),
                    format!("no variant {v:?}"),
                ));
            }
        }
        let mut names = BTreeSet::new();
        let mut senders = BTreeSet::new();
        for (i, f) in self.flows.iter().enumerate() {
            let key = |k: &str| format!("flow[{i}].{k}");
            check_name(&key("name"), &f.name)?;
            if !names.insert(f.name.clone()) {
                return Err(invalid(key("name"), "used twice"));
            }
            node(&key("from"), &f.from, true)?;
            node(&key("to"), &f.to, true)?;
            if f.from == f.to {
                return Err(invalid(key("to"), "a flow to its own sender"));
            }
            if !senders.insert(f.from.clone()) {
                return Err(invalid(
                    key("from"),
                    format!(
                        "another flow already sends from {:?}: a flow's rate is its sender's \
                         interface counter, so each needs a host of its own",
                        f.from
                    ),
                ));
            }
            check_secs(&key("start_secs"), f.start_secs)?;
            match f.kind {
                FlowKind::Roce => {
                    if f.mib.is_none_or(|m| m == 0) {
                        return Err(invalid(key("mib"), "a RoCE flow needs mib > 0"));
                    }
                    if f.rate_mbps.is_some()
                        || f.secs.is_some()
                        || f.src_port.is_some()
                        || f.collide_with.is_some()
                    {
                        return Err(invalid(
                            key("kind"),
                            "rate_mbps, secs, src_port and collide_with are for udp flows",
                        ));
                    }
                }
                FlowKind::Udp => {
                    if !f.rate_mbps.is_some_and(|r| r.is_finite() && r > 0.0) {
                        return Err(invalid(key("rate_mbps"), "a UDP flow needs rate_mbps > 0"));
                    }
                    if let Some(s) = f.secs {
                        check_secs(&key("secs"), s)?;
                    }
                    if f.mib.is_some() || f.cc.is_some() || f.multipath.is_some() {
                        return Err(invalid(
                            key("kind"),
                            "mib, cc and multipath are for roce flows",
                        ));
                    }
                    if let Some(c) = &f.collide_with {
                        self.check_collision(&net, f, c)
                            .map_err(|why| invalid(key("collide_with"), why))?;
                    }
                }
            }
        }
        for (i, s) in self.shorts.iter().enumerate() {
            let key = |k: &str| format!("short[{i}].{k}");
            check_name(&key("name"), &s.name)?;
            if !names.insert(s.name.clone()) {
                return Err(invalid(key("name"), "used twice"));
            }
            node(&key("from"), &s.from, true)?;
            node(&key("to"), &s.to, true)?;
            if senders.contains(&s.from) {
                return Err(invalid(
                    key("from"),
                    format!("{:?} already sends a long flow", s.from),
                ));
            }
            if s.mib == 0 || s.count == 0 {
                return Err(invalid(key("count"), "mib and count must be positive"));
            }
            check_secs(&key("start_secs"), s.start_secs)?;
            check_secs(&key("interval_secs"), s.interval_secs)?;
        }
        if self.flows.is_empty() && self.shorts.is_empty() {
            return Err(invalid("flow", "no traffic"));
        }
        for (i, v) in self.variants.iter().enumerate() {
            for n in &v.finish {
                if !self
                    .flows
                    .iter()
                    .any(|f| f.name == *n && f.kind == FlowKind::Roce)
                {
                    return Err(invalid(
                        format!("variant[{i}].finish"),
                        format!("no RoCE flow {n:?} (a flood has no end to wait for)"),
                    ));
                }
            }
        }
        for v in self.variants() {
            self.receivers(&v)?;
        }
        if self.model.is_some() {
            self.check_model()?;
        }
        Ok(())
    }

    /// Why flood `f` cannot collide with flow `with`, if it cannot.
    fn check_collision(
        &self,
        net: &crate::topology::Network,
        f: &FlowSpec,
        with: &str,
    ) -> Result<(), String> {
        let Some(other) = self.flows.iter().find(|o| o.name == with) else {
            return Err(format!("no flow named {with:?}"));
        };
        if other.kind != FlowKind::Roce {
            return Err(format!("{with:?} is not a RoCE flow"));
        }
        if f.src_port.is_some() {
            return Err("src_port is chosen by the collision".to_owned());
        }
        let first_hop = |host: &str| {
            net.links.iter().find_map(|l| match &l.ends {
                [a, b] if a == host => Some(b.clone()),
                [a, b] if b == host => Some(a.clone()),
                _ => None,
            })
        };
        let (Some(a), Some(b)) = (first_hop(&f.from), first_hop(&other.from)) else {
            return Err("a sender without a link".to_owned());
        };
        let router = net
            .nodes
            .iter()
            .any(|n| n.name == a && n.role == crate::Role::Router);
        if a != b || !router {
            return Err(format!(
                "{} and {} must hang off the same router (they hang off {a} and {b})",
                f.from, other.from
            ));
        }
        Ok(())
    }

    /// The receiving hosts of RoCE traffic in variant `v`, in the order of their first
    /// transfer, each one server.
    ///
    /// # Errors
    /// [`SpecError::Invalid`] when transfers to one host differ in what the server side takes
    /// (congestion control, multipath, `vps`, `extra`): they are QPs of one endpoint.
    pub fn receivers(&self, v: &Variant) -> Result<Vec<Receiver>, SpecError> {
        let flows = self
            .flows
            .iter()
            .enumerate()
            .filter(|(_, f)| f.kind == FlowKind::Roce)
            .map(|(i, f)| {
                let r = Receiver {
                    host: f.to.clone(),
                    qps: 1,
                    mib: f.mib.unwrap_or(1),
                    cc: f.cc.clone().or_else(|| v.cc.clone()),
                    multipath: f.multipath.unwrap_or(v.multipath),
                    vps: f.vps,
                    extra: f.extra.clone(),
                };
                (format!("flow[{i}]"), r)
            });
        let shorts = self.shorts.iter().enumerate().map(|(i, s)| {
            let r = Receiver {
                host: s.to.clone(),
                qps: s.count,
                mib: s.mib,
                cc: s.cc.clone().or_else(|| v.cc.clone()),
                multipath: v.multipath,
                vps: None,
                extra: s.extra.clone(),
            };
            (format!("short[{i}]"), r)
        });
        let mut out: Vec<Receiver> = Vec::new();
        for (key, t) in flows.chain(shorts) {
            match out.iter_mut().find(|r| r.host == t.host) {
                None => out.push(t),
                Some(r) => {
                    if (&r.cc, r.multipath, r.vps, &r.extra)
                        != (&t.cc, t.multipath, t.vps, &t.extra)
                    {
                        return Err(invalid(
                            key,
                            format!(
                                "variant {:?}: its cc, multipath, vps or extra differ from those \
                                 of another transfer to {:?}, whose transfers are QPs of one \
                                 endpoint (one server)",
                                v.name, t.host
                            ),
                        ));
                    }
                    r.qps = r.qps.saturating_add(t.qps);
                    r.mib = r.mib.max(t.mib);
                }
            }
        }
        Ok(out)
    }

    /// The variants to run: the file's, or one named `default` without CC.
    pub fn variants(&self) -> Vec<Variant> {
        if self.variants.is_empty() {
            vec![Variant {
                name: "default".to_owned(),
                cc: None,
                multipath: false,
                finish: Vec::new(),
            }]
        } else {
            self.variants.clone()
        }
    }

    /// The experiment as a `--short` run does it: the duration `short_secs`, and start times,
    /// flood lengths, transfer sizes (at least 1 MiB) and short-flow counts and intervals
    /// scaled by `short_secs / duration_secs`.
    pub fn shortened(&self) -> Experiment {
        let k = (self.short_secs / self.duration_secs).min(1.0);
        let mut e = self.clone();
        e.duration_secs = self.short_secs;
        let mib = |m: u64| ((m as f64 * k).ceil() as u64).max(1);
        for f in &mut e.flows {
            f.start_secs *= k;
            f.mib = f.mib.map(mib);
            f.secs = f.secs.map(|s| s * k);
        }
        for s in &mut e.shorts {
            s.start_secs *= k;
            s.interval_secs *= k;
            s.count = ((f64::from(s.count) * k).ceil() as u32).max(1);
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped(file: &str) -> Experiment {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy/experiments")
            .join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        Experiment::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn shipped_experiments_parse() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/experiments");
        let mut n = 0;
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".toml") {
                let x = shipped(&name);
                assert!(x.short_secs <= 10.0, "{name}: CI runs must stay short");
                n += 1;
            }
        }
        assert!(n >= 2, "{n} experiment files");
    }

    const SMALL: &str = r#"
name = "t"
duration_secs = 20
short_secs = 5
[topology]
kind = "star"
senders = 2
switch = "router"
[[flow]]
name = "a"
from = "tx0"
to = "rx"
mib = 10
start_secs = 8
"#;

    #[test]
    fn short_mode_scales_times_and_sizes() {
        let e = Experiment::parse(SMALL).unwrap().shortened();
        assert_eq!(e.duration_secs, 5.0);
        assert_eq!(e.flows[0].start_secs, 2.0);
        assert_eq!(e.flows[0].mib, Some(3));
        assert_eq!(e.variants()[0].name, "default");
    }

    #[test]
    fn two_flows_from_one_host_rejected() {
        let text = format!("{SMALL}[[flow]]\nname = \"b\"\nfrom = \"tx0\"\nto = \"rx\"\nmib = 1\n");
        let e = Experiment::parse(&text).unwrap_err().to_string();
        assert!(e.contains("flow[1].from"), "{e}");
    }

    #[test]
    fn transfers_to_one_host_share_one_server() {
        let two = SMALL.replace("senders = 2", "senders = 3");
        let flow_b = "[[flow]]\nname = \"b\"\nfrom = \"tx1\"\nto = \"rx\"\nmib = 20\n";
        let mice = "[[short]]\nname = \"m\"\nfrom = \"tx2\"\nto = \"rx\"\nmib = 1\n\
                    count = 4\ninterval_secs = 1\n";
        let e = Experiment::parse(&format!("{two}{flow_b}{mice}")).unwrap();
        let r = e.receivers(&e.variants()[0]).unwrap();
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!((r[0].host.as_str(), r[0].qps, r[0].mib), ("rx", 6, 20));
        let differ = format!("{two}{}extra = [\"--timeout\", \"18\"]\n{mice}", flow_b);
        let err = Experiment::parse(&differ).unwrap_err().to_string();
        assert!(
            err.contains("flow[1]") && err.contains("one server"),
            "{err}"
        );
    }

    #[test]
    fn port_of_an_unknown_variant_rejected() {
        let port = "[[port]]\nswitch = \"sw\"\nrate = \"1mbit\"\nbuffer = \"1kb\"\n";
        let text = format!("{SMALL}[[variant]]\nname = \"on\"\n{port}variants = [\"on\"]\n");
        assert!(Experiment::parse(&text).is_ok());
        let e = Experiment::parse(&text.replace("variants = [\"on\"]", "variants = [\"off\"]"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("port[0].variants") && e.contains("off"), "{e}");
    }

    #[test]
    fn variant_finishes_only_roce_flows() {
        let text = format!("{SMALL}[[variant]]\nname = \"on\"\nfinish = [\"a\"]\n");
        let e = Experiment::parse(&text).unwrap();
        assert_eq!(e.variants()[0].finish, ["a"]);
        let e = Experiment::parse(&text.replace("[\"a\"]", "[\"nope\"]"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("variant[0].finish") && e.contains("nope"), "{e}");
    }

    #[test]
    fn unknown_host_and_key_rejected() {
        let e = Experiment::parse(&SMALL.replace("tx0", "tx9"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("flow[0].from") && e.contains("tx9"), "{e}");
        let e = Experiment::parse(&format!("{SMALL}colour = 1\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("colour"), "{e}");
        let e = Experiment::parse(&SMALL.replace("from = \"tx0\"", "from = \"sw\""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a host"), "{e}");
    }
}
