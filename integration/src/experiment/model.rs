//! The network model's run of an experiment (`[model]`): the same star, port and traffic as a
//! `rocev2-sim run` scenario, once per variant, whose port queue, port output and short-flow
//! completion times go into the same plots as the testbed's (series `VARIANT model`).
//!
//! The scenario is derived from the experiment, not written twice: hosts `tx0`… are model
//! hosts 0…, `rx` the last; every link runs at the sampled port's rate (the model's star has
//! one link rate); the switch's buffer and RED are the port's; each long flow and each short
//! transfer is a flow of the same size starting at the same time; every QP gets the variant's
//! CC scheme by name, and `[model] host` sets the rest of the model's `[host]` (MTU, ACK
//! timeout: what `rocev2-wiretest` is given in `extra`).
//!
//! Deviations: a star only (the topology the model and the testbed share exactly); the
//! model's hosts are paced at the port rate where the testbed's veths are not; the variant's
//! `line_gbps` and `min_rate_mbps` carry over and the scheme's other parameters are the
//! model's defaults for that line rate;
//! short transfers start on time, not back to back after a slow one.

use super::{Experiment, FlowKind, Variant, invalid};
use super::{SpecError, run::Tools};
use crate::Error;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// `[model]`: run the experiment in the network model too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// The model's `[host]` table (e.g. `{ mtu = 1024, timeout = 18 }`); `cc` comes from the
    /// variant.
    #[serde(default)]
    pub host: toml::Table,
    /// Propagation delay per link, ns.
    #[serde(default = "default_delay_ns")]
    pub delay_ns: u64,
    /// The model's seed.
    #[serde(default)]
    pub seed: u64,
}

fn default_delay_ns() -> u64 {
    1000
}

/// What the model gave for one variant.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRun {
    /// Variant.
    pub variant: String,
    /// (seconds, queue bytes, port output Mbit/s) of the switch port toward the receiver.
    pub port: Vec<(f64, u64, f64)>,
    /// Completion times of the short transfers that finished, ms.
    pub fcts_ms: Vec<f64>,
    /// Flows the model's QPs gave up on (a status other than `ok` or `running`, such as
    /// `RetryExcErr`).
    pub failed: usize,
}

/// A tc size (`512kb`: 1024-based) in bytes.
fn tc_bytes(key: &str, s: &str) -> Result<u64, SpecError> {
    let s = s.trim().to_ascii_lowercase();
    let digits = s.find(|c: char| !(c.is_ascii_digit() || c == '.'));
    let (n, unit) = s.split_at(digits.unwrap_or(s.len()));
    let k = match unit {
        "" | "b" => 1.0,
        "kb" | "k" => 1024.0,
        "mb" | "m" => 1024.0 * 1024.0,
        "gb" | "g" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(invalid(key, format!("{s:?}: size unit b, kb, mb or gb"))),
    };
    let v: f64 = n
        .parse()
        .map_err(|_| invalid(key, format!("{s:?} is not a size")))?;
    Ok((v * k) as u64)
}

/// A tc rate (`100mbit`: 1000-based) in Gbit/s.
pub(super) fn tc_gbps(key: &str, s: &str) -> Result<f64, SpecError> {
    let s = s.trim().to_ascii_lowercase();
    let digits = s.find(|c: char| !(c.is_ascii_digit() || c == '.'));
    let (n, unit) = s.split_at(digits.unwrap_or(s.len()));
    let k = match unit {
        "bit" => 1e-9,
        "kbit" => 1e-6,
        "mbit" => 1e-3,
        "gbit" => 1.0,
        _ => {
            return Err(invalid(
                key,
                format!("{s:?}: rate unit bit, kbit, mbit or gbit"),
            ));
        }
    };
    let v: f64 = n
        .parse()
        .map_err(|_| invalid(key, format!("{s:?} is not a rate")))?;
    Ok(v * k)
}

/// `kmin=20kb,kmax=200kb,pmax=0.2` as the model's `red` table.
fn red_table(key: &str, s: &str) -> Result<toml::Table, SpecError> {
    let mut t = toml::Table::new();
    for part in s.split(',') {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| invalid(key, format!("{part:?} is not KEY=VALUE")))?;
        match k.trim() {
            "kmin" => t.insert("kmin_bytes".into(), (tc_bytes(key, v)? as i64).into()),
            "kmax" => t.insert("kmax_bytes".into(), (tc_bytes(key, v)? as i64).into()),
            "pmax" => {
                let v = v.trim();
                let p = match v.strip_suffix('%') {
                    Some(pc) => pc.parse::<f64>(),
                    None => v.parse::<f64>().map(|p| p * 100.0),
                }
                .map_err(|_| invalid(key, format!("pmax {v:?}")))?;
                t.insert("pmax_percent".into(), p.into())
            }
            other => {
                return Err(invalid(
                    key,
                    format!("{other:?}: the model takes kmin, kmax, pmax"),
                ));
            }
        };
    }
    Ok(t)
}

impl Experiment {
    /// Why `[model]` cannot describe this experiment, if it cannot: a star, one sampled port
    /// (the switch's port toward the receiver every flow goes to), RoCE flows only, the
    /// variant's CC for every QP, no multipath.
    pub(super) fn check_model(&self) -> Result<(), SpecError> {
        let key = "model";
        if !matches!(self.topology, crate::Topology::Star { .. }) {
            return Err(invalid(key, "the model runs a star only"));
        }
        let sampled: Vec<_> = self.ports.iter().filter(|p| p.sample).collect();
        let [port] = sampled.as_slice() else {
            return Err(invalid(
                key,
                "exactly one sampled [[port]], toward the receiver",
            ));
        };
        let rx = port.toward.as_deref().unwrap_or("");
        if rx != "rx" {
            return Err(invalid(key, "the sampled [[port]] must be toward = \"rx\""));
        }
        tc_gbps("port.rate", &port.rate)?;
        tc_bytes("port.buffer", &port.buffer)?;
        if let Some(r) = &port.red {
            red_table("port.red", r)?;
        }
        let own_cc = self
            .flows
            .iter()
            .any(|f| f.cc.is_some() || f.multipath == Some(true) || f.kind != FlowKind::Roce)
            || self.shorts.iter().any(|s| s.cc.is_some());
        if own_cc || self.variants.iter().any(|v| v.multipath) {
            return Err(invalid(
                key,
                "every flow must be RoCE with the variant's CC and no multipath",
            ));
        }
        if self
            .flows
            .iter()
            .map(|f| &f.to)
            .chain(self.shorts.iter().map(|s| &s.to))
            .any(|t| t != "rx")
        {
            return Err(invalid(key, "every flow must go to rx"));
        }
        Ok(())
    }

    /// The model host number of a star's host.
    fn model_host(&self, name: &str) -> Option<i64> {
        let crate::Topology::Star { senders, .. } = self.topology else {
            return None;
        };
        if name == "rx" {
            return Some(senders as i64);
        }
        name.strip_prefix("tx")?.parse().ok()
    }

    /// The scenario of `variant` (checked by [`Experiment::check_model`]).
    fn scenario(&self, m: &ModelSpec, variant: &Variant) -> Result<toml::Table, SpecError> {
        let crate::Topology::Star { senders, .. } = self.topology else {
            return Err(invalid("model", "the model runs a star only"));
        };
        let Some(port) = self.ports.iter().find(|p| p.sample) else {
            return Err(invalid("model", "no sampled [[port]]"));
        };
        let host = |n: &str| {
            self.model_host(n)
                .ok_or_else(|| invalid("model", format!("{n:?}")))
        };
        let mib = |m: u64| (m << 20) as i64;
        let ns = |s: f64| (s * 1e9) as i64;
        let mut flows: Vec<toml::Value> = Vec::new();
        for f in &self.flows {
            let size = mib(f.mib.unwrap_or(1));
            let v = vec![
                host(&f.from)?.into(),
                host(&f.to)?.into(),
                size.into(),
                ns(f.start_secs).into(),
            ];
            flows.push(toml::Value::Array(v));
        }
        for s in &self.shorts {
            for k in 0..s.count {
                let start = s.start_secs + f64::from(k) * s.interval_secs;
                if start >= self.duration_secs {
                    break;
                }
                let v = vec![
                    host(&s.from)?.into(),
                    host(&s.to)?.into(),
                    mib(s.mib).into(),
                    ns(start).into(),
                ];
                flows.push(toml::Value::Array(v));
            }
        }
        let mut h = m.host.clone();
        let cc = variant.cc.as_ref().map_or("none", |c| c.scheme.as_str());
        h.insert("cc".into(), cc.into());
        // The variant's rates carry over: the model's `[host]` takes the daemon's `[cc]` keys.
        if let Some(c) = &variant.cc {
            if let Some(l) = c.line_gbps {
                h.insert("line_gbps".into(), l.into());
            }
            if let Some(m) = c.min_rate_mbps {
                h.insert("min_rate_mbps".into(), m.into());
            }
        }
        let mut switch = toml::Table::new();
        switch.insert(
            "buffer_bytes".into(),
            (tc_bytes("port.buffer", &port.buffer)? as i64).into(),
        );
        if let Some(r) = &port.red {
            switch.insert("red".into(), red_table("port.red", r)?.into());
        }
        let sample = (self.sample_ms * 1_000_000) as i64;
        let text = format!(
            "name = {name:?}\nseed = {seed}\nduration_ns = {dur}\n\
             [topology]\nkind = \"star\"\nhosts = {hosts}\nrate_gbps = {rate}\ndelay_ns = {delay}\n\
             [output]\nsample_interval_ns = {sample}\nrate_bin_ns = {sample}\ntrace_flows = 0\nplots = false\n",
            name = format!("{}_{}", self.name, variant.name),
            seed = m.seed,
            dur = ns(self.duration_secs),
            hosts = senders + 1,
            rate = tc_gbps("port.rate", &port.rate)?,
            delay = m.delay_ns,
        );
        let mut t: toml::Table =
            toml::from_str(&text).map_err(|e| SpecError::Toml(e.to_string()))?;
        t.insert("host".into(), h.into());
        t.insert("switch".into(), switch.into());
        let mut w = toml::Table::new();
        w.insert("kind".into(), "flows".into());
        w.insert("flows".into(), flows.into());
        t.insert("workload".into(), toml::Value::Array(vec![w.into()]));
        Ok(t)
    }
}

/// One CSV of the model's output as rows of named cells.
fn csv(path: &Path) -> Result<Vec<std::collections::HashMap<String, String>>, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_owned(),
        source,
    })?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split(',').collect();
    Ok(lines
        .map(|l| {
            header
                .iter()
                .zip(l.split(','))
                .map(|(h, v)| ((*h).to_owned(), v.to_owned()))
                .collect()
        })
        .collect())
}

fn cell<T: std::str::FromStr>(
    row: &std::collections::HashMap<String, String>,
    k: &str,
) -> Option<T> {
    row.get(k).and_then(|v| v.parse().ok())
}

/// Run the model for `variant` in `work/model/VARIANT` and read its port and FCTs.
///
/// # Errors
/// No `rocev2-sim`, a scenario it refuses, output it did not write.
pub fn run(
    exp: &Experiment,
    m: &ModelSpec,
    variant: &Variant,
    tools: &Tools,
    work: &Path,
) -> Result<ModelRun, Error> {
    let sim: &PathBuf = tools.sim.as_ref().ok_or_else(|| Error::MissingTool {
        program: "rocev2-sim".to_owned(),
        install: "cargo build -p rocev2-sim (the experiment has a [model] section)".to_owned(),
    })?;
    let dir = work.join("model").join(&variant.name);
    std::fs::create_dir_all(&dir).map_err(|source| Error::Io {
        path: dir.clone(),
        source,
    })?;
    let scenario = exp
        .scenario(m, variant)
        .map_err(|e| Error::Toml(e.to_string()))?;
    let file = dir.join("scenario.toml");
    let text = toml::to_string(&scenario).map_err(|e| Error::Toml(e.to_string()))?;
    std::fs::write(&file, text).map_err(|source| Error::Io {
        path: file.clone(),
        source,
    })?;
    let mut cmd = std::process::Command::new(sim);
    cmd.arg("run")
        .arg(&file)
        .arg("--out")
        .arg(&dir)
        .args(["--quiet", "--no-plots"]);
    crate::exec::run(&mut cmd, std::time::Duration::from_secs(600))?;
    let rx = exp.model_host("rx").unwrap_or(0);
    let hosts = rx + 1;
    let port = csv(&dir.join("ports.csv"))?
        .iter()
        .find(|r| {
            cell::<i64>(r, "node").is_some_and(|n| n >= hosts)
                && cell::<i64>(r, "peer_node") == Some(rx)
        })
        .and_then(|r| cell::<i64>(r, "port"))
        .ok_or_else(|| Error::Parse {
            cmd: format!("{} run {}", sim.display(), file.display()),
            output: "ports.csv has no switch port toward the receiver".to_owned(),
        })?;
    let mut samples = Vec::new();
    let mut last: Option<(f64, u64)> = None;
    for r in csv(&dir.join("queues.csv"))?
        .iter()
        .filter(|r| cell::<i64>(r, "port") == Some(port))
    {
        let (Some(t), Some(q), Some(tx)) = (
            cell::<u64>(r, "time_ns"),
            cell::<u64>(r, "queue_bytes"),
            cell::<u64>(r, "tx_bytes"),
        ) else {
            continue;
        };
        let t = t as f64 / 1e9;
        let mbps = last.map_or(0.0, |(t0, tx0)| {
            if t > t0 {
                tx.saturating_sub(tx0) as f64 * 8.0 / (t - t0) / 1e6
            } else {
                0.0
            }
        });
        last = Some((t, tx));
        samples.push((t, q, mbps));
    }
    let short_senders: Vec<i64> = exp
        .shorts
        .iter()
        .filter_map(|s| exp.model_host(&s.from))
        .collect();
    let flows = csv(&dir.join("flows.csv"))?;
    let failed = flows
        .iter()
        .filter(|r| r.get("status").is_some_and(|s| s != "ok" && s != "running"))
        .count();
    let fcts_ms = flows
        .iter()
        .filter(|r| cell::<i64>(r, "src").is_some_and(|s| short_senders.contains(&s)))
        .filter(|r| r.get("status").is_some_and(|s| s == "ok"))
        .filter_map(|r| cell::<f64>(r, "fct_ns"))
        .map(|ns| ns / 1e6)
        .collect();
    Ok(ModelRun {
        variant: variant.name.clone(),
        port: samples,
        fcts_ms,
        failed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped(file: &str) -> Experiment {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy/experiments")
            .join(file);
        Experiment::parse(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn scenario_is_the_experiments_star_port_and_traffic() {
        let e = shipped("dcqcn_incast.toml").shortened();
        let m = e.model.clone().unwrap();
        let v = &e.variants()[1];
        let t = e.scenario(&m, v).unwrap();
        assert_eq!(t["topology"]["hosts"].as_integer(), Some(6));
        assert_eq!(t["topology"]["rate_gbps"].as_float(), Some(0.1));
        assert_eq!(t["switch"]["buffer_bytes"].as_integer(), Some(512 * 1024));
        assert_eq!(t["host"]["cc"].as_str(), Some("dcqcn_plus"));
        assert_eq!(t["host"]["timeout"].as_integer(), Some(18));
        assert_eq!(t["duration_ns"].as_integer(), Some(6_000_000_000));
        let flows = t["workload"][0]["flows"].as_array().unwrap();
        // f1 (tx1, 96 MiB scaled by 6/24 = 24 MiB) starts at 1 s; rx is host 5.
        let f1 = flows[1].as_array().unwrap();
        let ints: Vec<i64> = f1.iter().filter_map(toml::Value::as_integer).collect();
        assert_eq!(ints, [1, 5, 24 << 20, 1_000_000_000]);
        // 4 long flows and the short transfers that start within the run.
        assert_eq!(flows.len(), 4 + 5);
    }

    #[test]
    fn model_refuses_what_it_cannot_run() {
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../deploy/experiments/multipath_collision.toml"),
        )
        .unwrap();
        let e = Experiment::parse(&format!("{text}\n[model]\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`model`") && e.contains("star"), "{e}");
    }

    #[test]
    fn tc_units() {
        assert_eq!(tc_bytes("k", "512kb").unwrap(), 512 * 1024);
        assert_eq!(tc_bytes("k", "2mb").unwrap(), 2 << 20);
        assert!((tc_gbps("k", "100mbit").unwrap() - 0.1).abs() < 1e-12);
        assert!(tc_gbps("k", "100mb").is_err());
        let r = red_table("k", "kmin=20kb,kmax=200kb,pmax=0.2").unwrap();
        assert_eq!(r["kmin_bytes"].as_integer(), Some(20 * 1024));
        assert!((r["pmax_percent"].as_float().unwrap() - 20.0).abs() < 1e-9);
        assert_eq!(
            red_table("k", "pmax=1%").unwrap()["pmax_percent"].as_float(),
            Some(1.0)
        );
    }
}
