//! Running an [`Experiment`]: per variant, a fresh testbed, the switch ports attached, the
//! flows started on time, samples every `sample_ms`, and everything torn down again.
//!
//! Teardown does not depend on reaching the end: every process is a [`Process`] (killed when
//! dropped) and the testbed a [`Testbed`] (its namespaces deleted when dropped, which also
//! releases the switch programs, docs/switch.md "Lifetime"), so an error, a panic or the stop
//! flag (Ctrl-C) leaves nothing behind. The stop flag ends the current variant early and skips
//! the rest; what was measured until then is kept and marked aborted.
//!
//! Deviations: none beyond the module's (rates are sender interface counters).

use super::{CcSpec, Experiment, FlowKind, FlowSpec, Receiver, ShortSpec, Variant};
use crate::exec::{self, Process};
use crate::probe::SinkReport;
use crate::{Error, IfCounters, PortSelection, SwitchPort, Testbed};
use indicatif::ProgressBar;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a server may take to print `LISTENING`, a sink `ready`, an attach to finish.
const SETUP: Duration = Duration::from_secs(30);
/// How long a finished client's last output and a server's exit may take.
const EXIT: Duration = Duration::from_secs(10);
/// The longest nap of the scheduling loop, so the stop flag is seen quickly.
const NAP: Duration = Duration::from_millis(50);
/// First out-of-band TCP port of the receivers' servers (one per receiving host).
const SERVER_OOB_PORT: u16 = 18600;
/// First UDP port of the floods' sinks.
const SINK_PORT: u16 = 5201;

/// The programs an experiment runs.
#[derive(Debug, Clone)]
pub struct Tools {
    /// `rocev2d` (its `switch` subcommand).
    pub rocev2d: PathBuf,
    /// `rocev2-wiretest` (the RoCE flows).
    pub wiretest: PathBuf,
    /// `rocev2-testbed` (its `probe blast`/`probe sink` for UDP flows).
    pub testbed: PathBuf,
    /// `rocev2-sim`, for experiments with a `[model]` (an error there when absent).
    pub sim: Option<PathBuf>,
}

impl Tools {
    /// The tools beside `exe` (the same cargo target directory), else on `PATH`.
    ///
    /// # Errors
    /// [`Error::MissingTool`] naming the cargo command that builds a missing one.
    pub fn beside(exe: &Path) -> Result<Tools, Error> {
        let find = |name: &str, package: &str| {
            let here = exe.with_file_name(name);
            if here.is_file() {
                return Ok(here);
            }
            crate::tools::find(name.as_ref()).ok_or_else(|| Error::MissingTool {
                program: name.to_owned(),
                install: format!(
                    "cargo build -p {package} (looked beside {} and on PATH)",
                    exe.display()
                ),
            })
        };
        Ok(Tools {
            rocev2d: find("rocev2d", "rocev2d")?,
            wiretest: find("rocev2-wiretest", "rocev2-wiretest")?,
            testbed: find("rocev2-testbed", "rocev2-testbed")?,
            sim: find("rocev2-sim", "rocev2-sim").ok(),
        })
    }
}

/// One rate sample of one flow.
#[derive(Debug, Clone, PartialEq)]
pub struct RateSample {
    /// Variant.
    pub variant: String,
    /// Seconds since the variant's traffic began.
    pub t_s: f64,
    /// Flow name.
    pub flow: String,
    /// Bytes the sender's interface has transmitted since the traffic began.
    pub tx_bytes: u64,
    /// Rate since the previous sample, Mbit/s of Ethernet frames.
    pub rate_mbps: f64,
    /// The rate arriving at the receiver's interface since the previous sample, Mbit/s of
    /// Ethernet frames; only when no other flow goes to that host.
    pub delivered_mbps: Option<f64>,
}

/// One sample of one switch port (`rocev2d switch stats --json`).
#[derive(Debug, Clone, PartialEq)]
pub struct PortSample {
    /// Variant.
    pub variant: String,
    /// Seconds since the variant's traffic began.
    pub t_s: f64,
    /// `SWITCH>PEER`.
    pub port: String,
    /// The modelled queue now.
    pub queue_bytes: u64,
    /// Its maximum so far.
    pub queue_max_bytes: u64,
    /// Packets seen.
    pub packets: u64,
    /// CE marks so far.
    pub ce_marked: u64,
    /// Tail drops so far.
    pub drop_buffer: u64,
    /// IOFD deflections so far.
    pub iofd_deflected: u64,
    /// DVL: flows this port isolated itself so far (its normal queue reached the threshold).
    pub dvl_isolated: u64,
    /// DVL: packets it put in its congested-flow queue so far.
    pub dvl_congested: u64,
    /// DVL: congestion notifications it sent upstream so far.
    pub dvl_notify_sent: u64,
    /// DVL: notifications it accepted from downstream so far (`accept` ports).
    pub dvl_notify_accepted: u64,
    /// The port interface's transmit rate since the previous sample, Mbit/s of Ethernet
    /// frames: what the port delivered.
    pub tx_mbps: f64,
    /// The port's modelled rate (`[[port]] rate`), Mbit/s: the utilisation's denominator.
    pub rate_mbps: Option<f64>,
}

/// What became of one flow.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowResult {
    /// Variant.
    pub variant: String,
    /// Flow name.
    pub flow: String,
    /// `roce` or `udp`.
    pub kind: String,
    /// Sender host.
    pub from: String,
    /// Receiver host.
    pub to: String,
    /// Congestion control scheme (`none` without `[cc]`), or `-` for UDP.
    pub cc: String,
    /// `rc` or `multipath` as the QP ran (the client's `READY`), `-` when unknown or UDP.
    pub mode: String,
    /// When it started, seconds.
    pub start_s: f64,
    /// When it finished, if it did.
    pub end_s: Option<f64>,
    /// Bytes the tool reports moved (RoCE: the transfer, checked; UDP: datagrams received).
    pub bytes: u64,
    /// Goodput the tool reports, Mbit/s (RoCE: bytes over its transfer time; UDP: the sink's
    /// frame rate).
    pub goodput_mbps: Option<f64>,
    /// The QP's retransmitted packets (RoCE).
    pub retransmits: Option<u64>,
    /// `done`, `unfinished` (still running at the end) or `failed: …`.
    pub status: String,
}

/// One short transfer's completion time.
#[derive(Debug, Clone, PartialEq)]
pub struct FctSample {
    /// Variant.
    pub variant: String,
    /// The mix.
    pub mix: String,
    /// Its number in the mix.
    pub index: u32,
    /// When it started, seconds.
    pub start_s: f64,
    /// Bytes moved.
    pub bytes: u64,
    /// The transfer's duration as `rocev2-wiretest` measures it (first post to last
    /// completion), milliseconds.
    pub fct_ms: f64,
}

/// Everything measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The experiment as run (shortened under `--short`).
    pub experiment: Experiment,
    /// Whether `--short`.
    pub short: bool,
    /// Variants run (completely or until stopped), in order.
    pub variants: Vec<String>,
    /// Per-flow rates.
    pub rates: Vec<RateSample>,
    /// Per-port samples.
    pub ports: Vec<PortSample>,
    /// Per-flow results.
    pub flows: Vec<FlowResult>,
    /// Short transfers' completion times.
    pub fcts: Vec<FctSample>,
    /// Whether the stop flag cut the run short.
    pub aborted: bool,
    /// The network model's runs of the variants (`[model]`).
    pub model: Vec<super::model::ModelRun>,
}

/// Run `exp` (already shortened for `--short`) variant after variant, writing the CC
/// configuration files into `work`; stop early when `stop` is raised. Progress goes to `bar`
/// (length in milliseconds of planned run time).
///
/// # Errors
/// A testbed that does not come up, a switch attach or server start that fails.
pub fn run(
    exp: &Experiment,
    short: bool,
    tools: &Tools,
    work: &Path,
    stop: &AtomicBool,
    bar: &ProgressBar,
) -> Result<Outcome, Error> {
    let mut out = Outcome {
        experiment: exp.clone(),
        short,
        variants: Vec::new(),
        rates: Vec::new(),
        ports: Vec::new(),
        flows: Vec::new(),
        fcts: Vec::new(),
        aborted: false,
        model: Vec::new(),
    };
    let variants = exp.variants();
    let per_variant_ms = (exp.duration_secs * 1000.0) as u64;
    bar.set_length(per_variant_ms * variants.len() as u64);
    for (i, v) in variants.iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            out.aborted = true;
            break;
        }
        bar.set_position(per_variant_ms * i as u64);
        bar.set_message(format!("{}: bringing the testbed up", v.name));
        out.variants.push(v.name.clone());
        let mut run = VariantRun::up(exp, v, tools, work)?;
        let t0 = run.start(bar)?;
        let aborted = run.drive(t0, stop, bar, per_variant_ms * i as u64)?;
        run.finish(t0, &mut out);
        bar.set_message(format!("{}: tearing down", v.name));
        run.down()?;
        if let Some(m) = exp.model.as_ref() {
            bar.set_message(format!("{}: the network model", v.name));
            out.model.push(super::model::run(exp, m, v, tools, work)?);
        }
        if aborted {
            out.aborted = true;
            break;
        }
    }
    Ok(out)
}

/// A long flow while the variant runs.
struct Flow {
    spec: FlowSpec,
    cc: String,
    /// The sender's interface, read for the rate.
    netns: String,
    ifname: String,
    /// A UDP flow's sink (a RoCE flow's server is its receiver's [`Server`]).
    sink: Option<Process>,
    client: Option<Process>,
    started: Option<f64>,
    ended: Option<f64>,
    result: Option<FlowResult>,
    /// tx_bytes at t0 and at the previous sample.
    base: u64,
    last: Option<(f64, u64)>,
    /// The receiver's interface when this flow is its only one, and its rx_bytes at the
    /// previous sample.
    rx: Option<(String, String, u64)>,
    /// A flood that collides with a RoCE flow.
    collide: Option<Collide>,
    /// The uplink peer (spine) a colliding flood was pinned to.
    pinned: Option<String>,
}

/// Where a colliding flood may go: the shared router's uplinks and, for each, a UDP source
/// port its ECMP hash sends there.
struct Collide {
    /// Index of the RoCE flow to collide with.
    with: usize,
    /// The router's namespace.
    netns: String,
    /// (uplink interface, the node it leads to, source port hashed onto it).
    uplinks: Vec<(String, String, u16)>,
    /// The uplinks' tx_packets when that flow started.
    base: Option<Vec<u64>>,
}

/// Packets the collided-with flow must have sent up the uplinks before its spine is chosen.
const COLLIDE_AFTER_PACKETS: u64 = 32;
/// Source ports tried for the colliding flood.
const COLLIDE_PORTS: std::ops::Range<u16> = 40000..41024;

/// A short-flow mix while the variant runs.
struct Mix {
    spec: ShortSpec,
    next: u32,
    next_start: f64,
    /// The transfer under way: its client and when it started.
    running: Option<(Process, f64)>,
}

/// A receiving host's one server ([`Receiver`]) while the variant runs.
struct Server {
    host: String,
    /// Its out-of-band TCP port.
    port: u16,
    process: Process,
}

struct VariantRun<'a> {
    exp: &'a Experiment,
    variant: &'a Variant,
    tools: &'a Tools,
    work: &'a Path,
    flows: Vec<Flow>,
    mixes: Vec<Mix>,
    servers: Vec<Server>,
    /// Sampled ports and their `rate` in Mbit/s.
    ports: Vec<(SwitchPort, Option<f64>)>,
    /// Per sampled port: (time, tx_bytes) of its previous sample.
    port_last: Vec<(f64, u64)>,
    rates: Vec<RateSample>,
    samples: Vec<PortSample>,
    fcts: Vec<FctSample>,
    failures: Vec<FlowResult>,
    /// Last: dropped after every process.
    tb: Testbed,
}

/// What `{others}` in a port's `extra` stands for: the interfaces of the other ports of the
/// same switch among those one `[[port]]` entry chose, joined by `+` (IOFD's `alt=` list).
fn others(chosen: &[SwitchPort], port: &SwitchPort) -> String {
    chosen
        .iter()
        .filter(|o| o.netns == port.netns && o.ifname != port.ifname)
        .map(|o| o.ifname.as_str())
        .collect::<Vec<_>>()
        .join("+")
}

/// The `[cc]` file of one RoCE peer pair, or `None` without CC.
fn cc_file(work: &Path, name: &str, cc: Option<&CcSpec>) -> Result<Option<PathBuf>, Error> {
    let Some(cc) = cc else { return Ok(None) };
    #[derive(serde::Serialize)]
    struct File<'a> {
        cc: &'a CcSpec,
    }
    let text = toml::to_string(&File { cc }).map_err(|e| Error::Toml(e.to_string()))?;
    let path = work.join(format!("{name}.toml"));
    std::fs::create_dir_all(work).map_err(|source| Error::Io {
        path: work.to_owned(),
        source,
    })?;
    std::fs::write(&path, text).map_err(|source| Error::Io {
        path: path.clone(),
        source,
    })?;
    Ok(Some(path))
}

/// A host's one interface (hosts in these topologies have a single port).
fn host_iface(tb: &Testbed, host: &str) -> Result<(String, String, String), Error> {
    let n = tb.node(host)?;
    let port = n
        .ports
        .first()
        .ok_or_else(|| crate::topology::Error::UnknownNode(format!("{host} has no port")))?;
    let ip = n
        .ipv4()
        .ok_or_else(|| crate::topology::Error::UnknownNode(format!("{host} has no address")))?;
    Ok((n.netns.clone(), port.ifname.clone(), ip.to_string()))
}

fn secs_since(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64()
}

/// The JSON after `PREFIX ` on the first such line of `text`.
fn tagged_json(text: &str, prefix: &str) -> Option<Value> {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|j| serde_json::from_str(j.trim()).ok())
}

impl<'a> VariantRun<'a> {
    /// Bring the testbed up, attach the ports, start the servers and sinks.
    fn up(
        exp: &'a Experiment,
        variant: &'a Variant,
        tools: &'a Tools,
        work: &'a Path,
    ) -> Result<Self, Error> {
        let tb = Testbed::up_topology(&exp.topology)?;
        let mut run = VariantRun {
            exp,
            variant,
            tools,
            work,
            flows: Vec::new(),
            mixes: Vec::new(),
            servers: Vec::new(),
            ports: Vec::new(),
            port_last: Vec::new(),
            rates: Vec::new(),
            samples: Vec::new(),
            fcts: Vec::new(),
            failures: Vec::new(),
            tb,
        };
        run.attach()?;
        let receivers = exp
            .receivers(variant)
            .map_err(|e| Error::Toml(e.to_string()))?;
        for (k, r) in receivers.iter().enumerate() {
            run.start_server(k, r)?;
        }
        for (i, f) in exp.flows.iter().enumerate() {
            run.add_flow(i, f)?;
        }
        for s in &exp.shorts {
            run.mixes.push(Mix {
                spec: s.clone(),
                next: 0,
                next_start: s.start_secs,
                running: None,
            });
        }
        Ok(run)
    }

    fn attach(&mut self) -> Result<(), Error> {
        let mine =
            |p: &&super::PortSpec| p.variants.is_empty() || p.variants.contains(&self.variant.name);
        for p in self.exp.ports.iter().filter(mine) {
            let mut sel = PortSelection::all().on(&p.switch);
            if let Some(t) = &p.toward {
                sel = sel.toward(t);
            }
            if let Some(r) = p.toward_role {
                sel = sel.toward_role(r);
            }
            let chosen = self.tb.switch_ports(&sel);
            if chosen.is_empty() {
                return Err(crate::topology::Error::UnknownNode(format!(
                    "no port of {} matches the [[port]] selection",
                    p.switch
                ))
                .into());
            }
            for port in &chosen {
                let others = others(&chosen, port);
                let mut cmd = exec::netns_command(&port.netns, &self.tools.rocev2d);
                cmd.args(["switch", "attach", "--iface", &port.ifname])
                    .args(["--rate", &p.rate, "--buffer", &p.buffer]);
                if let Some(red) = &p.red {
                    cmd.args(["--red", red]);
                }
                cmd.args(p.extra.iter().map(|a| a.replace("{others}", &others)));
                exec::run(&mut cmd, SETUP)?;
                if p.sample {
                    let rate = super::model::tc_gbps("port.rate", &p.rate).ok();
                    self.ports.push((port.clone(), rate.map(|g| g * 1000.0)));
                }
            }
        }
        Ok(())
    }

    fn cc_for(&self, own: Option<&'a CcSpec>) -> Option<&'a CcSpec> {
        own.or(self.variant.cc.as_ref())
    }

    /// How long a RoCE transfer may take before its peers give up, seconds.
    fn deadline_secs(&self) -> u64 {
        (self.exp.duration_secs * 4.0) as u64 + 60
    }

    /// The arguments both RoCE peers of a transfer take.
    #[allow(clippy::too_many_arguments)]
    fn wiretest_args(
        &self,
        cmd: &mut Command,
        config: Option<&Path>,
        mib: u64,
        msg_bytes: Option<u64>,
        multipath: bool,
        vps: Option<u16>,
        extra: &[String],
    ) {
        cmd.args(["--datapath", &self.exp.datapath])
            .args(["--bulk-mib", &mib.to_string()])
            .args(["--deadline-secs", &self.deadline_secs().to_string()]);
        if let Some(m) = msg_bytes {
            cmd.args(["--msg-bytes", &m.to_string()]);
        }
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        if multipath {
            cmd.arg("--multipath");
            if let Some(vps) = vps {
                cmd.args(["--vps", &vps.to_string()]);
            }
        }
        cmd.args(extra);
    }

    /// Start receiver `k`'s server (`--qps`: its flows and short transfers) and wait until it
    /// listens.
    fn start_server(&mut self, k: usize, r: &Receiver) -> Result<(), Error> {
        let config = cc_file(
            &self.work.join("configs"),
            &format!("{}-server-{}", self.variant.name, r.host),
            r.cc.as_ref(),
        )?;
        let (netns, ifname, _) = host_iface(&self.tb, &r.host)?;
        let port = SERVER_OOB_PORT + k as u16;
        let mut cmd = exec::netns_command(&netns, &self.tools.wiretest);
        cmd.args(["--iface", &ifname, "--listen", &port.to_string()])
            .args(["--qps", &r.qps.to_string()]);
        self.wiretest_args(
            &mut cmd,
            config.as_deref(),
            r.mib,
            None,
            r.multipath,
            r.vps,
            &r.extra,
        );
        let mut process = Process::spawn(&mut cmd)?;
        process.wait_for_line(|l| l.starts_with("LISTENING"), SETUP)?;
        self.servers.push(Server {
            host: r.host.clone(),
            port,
            process,
        });
        Ok(())
    }

    /// The out-of-band address of `host`'s server.
    fn server_addr(&self, host: &str) -> Result<String, Error> {
        let (_, _, ip) = host_iface(&self.tb, host)?;
        let port = self
            .servers
            .iter()
            .find(|s| s.host == host)
            .map(|s| s.port)
            .ok_or_else(|| crate::topology::Error::UnknownNode(format!("no server in {host}")))?;
        Ok(format!("{ip}:{port}"))
    }

    fn add_flow(&mut self, i: usize, f: &'a FlowSpec) -> Result<(), Error> {
        let (netns, ifname, _) = host_iface(&self.tb, &f.from)?;
        let to_netns = self.tb.node(&f.to)?.netns.clone();
        let (sink, cc) = match f.kind {
            // The receiver's server takes the flow's QP.
            FlowKind::Roce => {
                let cc = self.cc_for(f.cc.as_ref());
                cc_file(
                    &self.work.join("configs"),
                    &format!("{}-{}", self.variant.name, f.name),
                    cc,
                )?;
                (
                    None,
                    cc.map_or_else(|| "none".to_owned(), |c| c.scheme.clone()),
                )
            }
            FlowKind::Udp => {
                let port = f.dst_port.unwrap_or(SINK_PORT + i as u16);
                let max_ms = ((self.exp.duration_secs + 30.0) * 1000.0) as u64;
                let mut cmd = exec::netns_command(&to_netns, &self.tools.testbed);
                cmd.args(["probe", "sink", "--port", &port.to_string()])
                    .args(["--idle-ms", "1000", "--max-ms", &max_ms.to_string()]);
                let mut p = Process::spawn(&mut cmd)?;
                p.wait_for_line(|l| l == "ready", SETUP)?;
                (Some(p), "-".to_owned())
            }
        };
        let collide = match &f.collide_with {
            Some(with) => Some(self.collision_ports(i, f, with)?),
            None => None,
        };
        self.flows.push(Flow {
            spec: f.clone(),
            cc,
            netns,
            ifname,
            sink,
            client: None,
            started: None,
            ended: None,
            result: None,
            base: 0,
            last: None,
            rx: self.exclusive_receiver(f)?,
            collide,
            pinned: None,
        });
        Ok(())
    }

    /// For flood `i` (`f`) colliding with flow `with`: the first-hop router's uplinks and a
    /// source port per uplink, asked of the router's FIB (`ip route get` with the flood's
    /// addresses, ports and input interface: the lookup a forwarded datagram gets, ECMP hash
    /// included).
    fn collision_ports(&self, i: usize, f: &FlowSpec, with: &str) -> Result<Collide, Error> {
        let unknown = |what: String| Error::from(crate::topology::Error::UnknownNode(what));
        let with = self
            .exp
            .flows
            .iter()
            .position(|o| o.name == with)
            .ok_or_else(|| unknown(with.to_owned()))?;
        let host = self.tb.node(&f.from)?;
        let leaf_name = host
            .ports
            .first()
            .map(|p| p.peer.clone())
            .ok_or_else(|| unknown(format!("{} has no port", f.from)))?;
        let leaf = self.tb.node(&leaf_name)?;
        let iif = leaf
            .port_toward(&f.from)
            .ok_or_else(|| unknown(format!("{leaf_name}->{}", f.from)))?
            .ifname
            .clone();
        let src = host
            .ipv4()
            .ok_or_else(|| unknown(format!("{} has no address", f.from)))?;
        let dst = self
            .tb
            .node(&f.to)?
            .ipv4()
            .ok_or_else(|| unknown(format!("{} has no address", f.to)))?;
        let dport = f.dst_port.unwrap_or(SINK_PORT + i as u16).to_string();
        let sel = PortSelection::all()
            .on(&leaf_name)
            .toward_role(crate::Role::Router);
        let ups = self.tb.switch_ports(&sel);
        let mut found: Vec<Option<u16>> = vec![None; ups.len()];
        for sport in COLLIDE_PORTS {
            if found.iter().all(Option::is_some) {
                break;
            }
            let mut cmd = exec::netns_command(&leaf.netns, "ip");
            cmd.args(["route", "get", &dst.to_string(), "from", &src.to_string()])
                .args(["iif", &iif, "ipproto", "17", "sport", &sport.to_string()])
                .args(["dport", &dport]);
            let out = exec::run(&mut cmd, SETUP)?;
            let dev = out
                .stdout
                .split_whitespace()
                .skip_while(|w| *w != "dev")
                .nth(1)
                .map(str::to_owned);
            if let Some(k) = ups.iter().position(|u| Some(&u.ifname) == dev.as_ref()) {
                found[k].get_or_insert(sport);
            }
        }
        let mut uplinks = Vec::new();
        for (u, p) in ups.iter().zip(found) {
            let p = p.ok_or_else(|| Error::Parse {
                cmd: format!("ip route get … sport {COLLIDE_PORTS:?}"),
                output: format!("no source port hashes onto {} ({})", u.ifname, u.peer),
            })?;
            uplinks.push((u.ifname.clone(), u.peer.clone(), p));
        }
        Ok(Collide {
            with,
            netns: leaf.netns.clone(),
            uplinks,
            base: None,
        })
    }

    /// The uplinks' tx_packets.
    fn uplink_packets(c: &Collide) -> Result<Vec<u64>, Error> {
        c.uplinks
            .iter()
            .map(|(ifname, _, _)| Ok(IfCounters::read(&c.netns, ifname)?.tx_packets))
            .collect()
    }

    /// For a colliding flood: `None` until the flow it collides with has sent
    /// [`COLLIDE_AFTER_PACKETS`] up the uplinks; then the source port of the uplink that
    /// carried most of them, and that uplink's peer.
    fn collision(&self, i: usize) -> Result<Option<(u16, String)>, Error> {
        let Some(c) = &self.flows[i].collide else {
            return Ok(None);
        };
        let Some(base) = &c.base else { return Ok(None) };
        let now = Self::uplink_packets(c)?;
        let sent: Vec<u64> = now
            .iter()
            .zip(base)
            .map(|(n, b)| n.saturating_sub(*b))
            .collect();
        if sent.iter().sum::<u64>() < COLLIDE_AFTER_PACKETS {
            return Ok(None);
        }
        let best = (0..sent.len()).max_by_key(|&k| sent[k]).unwrap_or(0);
        Ok(c.uplinks
            .get(best)
            .map(|(_, peer, port)| (*port, peer.clone())))
    }

    /// `f`'s receiver's interface, when no other flow or short transfer goes to that host.
    fn exclusive_receiver(&self, f: &FlowSpec) -> Result<Option<(String, String, u64)>, Error> {
        let flows = self.exp.flows.iter().filter(|o| o.to == f.to).count();
        if flows > 1 || self.exp.shorts.iter().any(|s| s.to == f.to) {
            return Ok(None);
        }
        let (netns, ifname, _) = host_iface(&self.tb, &f.to)?;
        Ok(Some((netns, ifname, 0)))
    }

    /// Read every flow's base counter; the traffic begins now.
    fn start(&mut self, bar: &ProgressBar) -> Result<Instant, Error> {
        for f in &mut self.flows {
            f.base = IfCounters::read(&f.netns, &f.ifname)?.tx_bytes;
            if let Some((netns, ifname, last)) = f.rx.as_mut() {
                *last = IfCounters::read(netns, ifname)?.rx_bytes;
            }
        }
        self.port_last = self
            .ports
            .iter()
            .map(|(p, _)| Ok((0.0, p.counters()?.tx_bytes)))
            .collect::<Result<_, Error>>()?;
        bar.set_message(format!("{}: traffic starts", self.variant.name));
        let t0 = Instant::now();
        for f in &mut self.flows {
            f.last = Some((0.0, f.base));
        }
        Ok(t0)
    }

    fn start_flow(&mut self, i: usize, t: f64) -> Result<(), Error> {
        let spec = self.flows[i].spec.clone();
        let (_, from_if, _) = host_iface(&self.tb, &spec.from)?;
        let (_, _, to_ip) = host_iface(&self.tb, &spec.to)?;
        let from_netns = self.flows[i].netns.clone();
        let server = match spec.kind {
            FlowKind::Roce => self.server_addr(&spec.to)?,
            FlowKind::Udp => String::new(),
        };
        let mut src_port = spec.src_port;
        if self.flows[i].collide.is_some() {
            match self.collision(i)? {
                Some((port, peer)) => {
                    src_port = Some(port);
                    self.flows[i].pinned = Some(peer);
                }
                // Not yet: the loop asks again.
                None => return Ok(()),
            }
        }
        for j in 0..self.flows.len() {
            if let Some(c) = self.flows[j].collide.as_ref().filter(|c| c.with == i) {
                let base = Self::uplink_packets(c)?;
                if let Some(c) = self.flows[j].collide.as_mut() {
                    c.base = Some(base);
                }
            }
        }
        let mut cmd;
        match spec.kind {
            FlowKind::Roce => {
                cmd = exec::netns_command(&from_netns, &self.tools.wiretest);
                cmd.args(["--iface", &from_if, "--connect", &server])
                    .args(["--workload", "bulk"]);
                let config = self.cc_for(spec.cc.as_ref()).map(|_| {
                    self.work
                        .join("configs")
                        .join(format!("{}-{}.toml", self.variant.name, spec.name))
                });
                self.wiretest_args(
                    &mut cmd,
                    config.as_deref(),
                    spec.mib.unwrap_or(1),
                    spec.msg_bytes,
                    spec.multipath.unwrap_or(self.variant.multipath),
                    spec.vps,
                    &spec.extra,
                );
            }
            FlowKind::Udp => {
                let port = spec.dst_port.unwrap_or(SINK_PORT + i as u16);
                // Without `secs` a flood lasts the run, which `finish` flows may lengthen up
                // to their deadline; the end of the run then stops it (`end_floods`).
                let end = if self.variant.finish.is_empty() {
                    self.exp.duration_secs
                } else {
                    self.deadline_secs() as f64
                };
                let secs = spec.secs.unwrap_or(end - t).max(0.1);
                let rate = spec.rate_mbps.unwrap_or(1.0) * 1e6;
                cmd = exec::netns_command(&from_netns, &self.tools.testbed);
                cmd.args(["probe", "blast", "--target", &format!("{to_ip}:{port}")])
                    .args(["--duration-ms", &((secs * 1000.0) as u64).to_string()])
                    .args(["--rate-bps", &(rate as u64).to_string()]);
                if let Some(p) = src_port {
                    cmd.args(["--src-port", &p.to_string()]);
                }
            }
        }
        self.flows[i].client = Some(Process::spawn(&mut cmd)?);
        self.flows[i].started = Some(t);
        Ok(())
    }

    /// The scheduling and sampling loop; returns whether the stop flag ended it.
    fn drive(
        &mut self,
        t0: Instant,
        stop: &AtomicBool,
        bar: &ProgressBar,
        bar_base_ms: u64,
    ) -> Result<bool, Error> {
        let period = self.exp.sample_ms as f64 / 1000.0;
        let mut next_sample = period;
        loop {
            if stop.load(Ordering::Relaxed) {
                self.sample(secs_since(t0))?;
                return Ok(true);
            }
            let t = secs_since(t0);
            for i in 0..self.flows.len() {
                if self.flows[i].started.is_none() && t >= self.flows[i].spec.start_secs {
                    self.start_flow(i, t)?;
                }
            }
            self.reap_flows(t0);
            for m in 0..self.mixes.len() {
                self.step_mix(m, t0)?;
            }
            let t = secs_since(t0);
            if t >= next_sample {
                self.sample(t)?;
                next_sample = (t / period).floor() * period + period;
                bar.set_position(bar_base_ms + (t * 1000.0) as u64);
                bar.set_message(self.status(t));
            }
            let all_done = self.flows.iter().all(|f| f.ended.is_some())
                && self
                    .mixes
                    .iter()
                    .all(|m| m.next >= m.spec.count && m.running.is_none());
            // The variant's `finish` flows hold the run past the duration until they end
            // (their client exits by its deadline at the latest).
            let finishing = self
                .flows
                .iter()
                .any(|f| f.ended.is_none() && self.variant.finish.contains(&f.spec.name));
            if (t >= self.exp.duration_secs && !finishing) || all_done {
                self.sample(secs_since(t0))?;
                self.end_floods(secs_since(t0));
                return Ok(false);
            }
            let wait = (next_sample - secs_since(t0)).max(0.0);
            std::thread::sleep(Duration::from_secs_f64(wait).min(NAP));
        }
    }

    /// Stop the floods that last the run (no `secs`): they are done when it ends.
    fn end_floods(&mut self, t: f64) {
        for f in &mut self.flows {
            if f.spec.kind != FlowKind::Udp || f.spec.secs.is_some() {
                continue;
            }
            if let Some(mut c) = f.client.take() {
                c.kill();
                f.ended = Some(t);
                f.result = Some(udp_result(f, None, Some(t), "done"));
            }
        }
    }

    /// One line for the progress bar.
    fn status(&self, t: f64) -> String {
        let running = self
            .flows
            .iter()
            .filter(|f| f.started.is_some() && f.ended.is_none())
            .count();
        let total: f64 = self
            .flows
            .iter()
            .filter_map(|f| {
                self.rates
                    .iter()
                    .rev()
                    .find(|r| r.flow == f.spec.name)
                    .map(|r| r.rate_mbps)
            })
            .sum();
        let queue = self.samples.last().map_or_else(String::new, |s| {
            format!(", queue {} kB", s.queue_bytes / 1000)
        });
        format!(
            "{}: t {t:.1} s, {running}/{} flows running, {total:.0} Mbit/s{queue}",
            self.variant.name,
            self.flows.len()
        )
    }

    /// Collect what finished clients report.
    fn reap_flows(&mut self, t0: Instant) {
        for i in 0..self.flows.len() {
            let done = self.flows[i]
                .client
                .as_mut()
                .is_some_and(|c| !c.is_running());
            if !done {
                continue;
            }
            let t = secs_since(t0);
            let Some(client) = self.flows[i].client.take() else {
                continue;
            };
            let got = client.wait(EXIT);
            let f = &mut self.flows[i];
            f.ended = Some(t);
            f.result = Some(match got {
                Ok(c) if c.status.success() => match f.spec.kind {
                    FlowKind::Roce => roce_result(f, &c.stdout, t, "done"),
                    // The blast is done; the sink's report comes at the end.
                    FlowKind::Udp => udp_result(f, None, Some(t), "done"),
                },
                Ok(c) => {
                    let name = format!("{}-{}", self.variant.name, f.spec.name);
                    let mut r = roce_result(f, &c.stdout, t, "failed");
                    r.status = failure(self.work, &name, &c);
                    r
                }
                Err(e) => {
                    let mut r = roce_result(f, "", t, "failed");
                    r.status = format!("failed: {e}");
                    r
                }
            });
        }
    }

    /// Start the next short transfer of mix `m` when due; collect a finished one.
    fn step_mix(&mut self, m: usize, t0: Instant) -> Result<(), Error> {
        let t = secs_since(t0);
        if let Some((client, _)) = self.mixes[m].running.as_mut() {
            if client.is_running() {
                return Ok(());
            }
            let Some((client, started)) = self.mixes[m].running.take() else {
                return Ok(());
            };
            let index = self.mixes[m].next - 1;
            let spec = &self.mixes[m].spec;
            match client.wait(EXIT) {
                Ok(c) if c.status.success() => {
                    let r = tagged_json(&c.stdout, "RESULT ");
                    let secs = r.as_ref().and_then(|r| r["secs"].as_f64());
                    let bytes = r.as_ref().and_then(|r| r["bytes"].as_u64());
                    if let (Some(secs), Some(bytes)) = (secs, bytes) {
                        self.fcts.push(FctSample {
                            variant: self.variant.name.clone(),
                            mix: spec.name.clone(),
                            index,
                            start_s: started,
                            bytes,
                            fct_ms: secs * 1000.0,
                        });
                    }
                }
                other => {
                    let status = match other {
                        Ok(c) => failure(
                            self.work,
                            &format!("{}-{}-{index}", self.variant.name, spec.name),
                            &c,
                        ),
                        Err(e) => format!("failed: {e}"),
                    };
                    self.failures.push(FlowResult {
                        variant: self.variant.name.clone(),
                        flow: format!("{}#{index}", spec.name),
                        kind: "roce".to_owned(),
                        from: spec.from.clone(),
                        to: spec.to.clone(),
                        cc: "-".to_owned(),
                        mode: "-".to_owned(),
                        start_s: started,
                        end_s: Some(t),
                        bytes: 0,
                        goodput_mbps: None,
                        retransmits: None,
                        status,
                    });
                }
            }
            return Ok(());
        }
        let mix = &self.mixes[m];
        if mix.next >= mix.spec.count || t < mix.next_start || t >= self.exp.duration_secs {
            return Ok(());
        }
        let spec = mix.spec.clone();
        let cc = self.cc_for(spec.cc.as_ref());
        let config = cc_file(
            &self.work.join("configs"),
            &format!("{}-{}", self.variant.name, spec.name),
            cc,
        )?;
        let (from_netns, from_if, _) = host_iface(&self.tb, &spec.from)?;
        let server = self.server_addr(&spec.to)?;
        let mut ccmd = exec::netns_command(&from_netns, &self.tools.wiretest);
        ccmd.args(["--iface", &from_if, "--connect", &server])
            .args(["--workload", "bulk"]);
        self.wiretest_args(
            &mut ccmd,
            config.as_deref(),
            spec.mib,
            spec.msg_bytes,
            self.variant.multipath,
            None,
            &spec.extra,
        );
        let client = Process::spawn(&mut ccmd)?;
        let started = secs_since(t0);
        let mix = &mut self.mixes[m];
        mix.next += 1;
        mix.next_start = mix.next_start.max(started - mix.spec.interval_secs) + spec.interval_secs;
        mix.running = Some((client, started));
        Ok(())
    }

    /// One sample of every flow's sender counter and every sampled port.
    fn sample(&mut self, t: f64) -> Result<(), Error> {
        for f in &mut self.flows {
            let tx = IfCounters::read(&f.netns, &f.ifname)?.tx_bytes;
            let (t_prev, tx_prev) = f.last.unwrap_or((0.0, f.base));
            let dt = t - t_prev;
            if dt <= 0.0 {
                continue;
            }
            let rate_mbps = tx.saturating_sub(tx_prev) as f64 * 8.0 / dt / 1e6;
            let delivered_mbps = match f.rx.as_mut() {
                Some((netns, ifname, last)) => {
                    let rx = IfCounters::read(netns, ifname)?.rx_bytes;
                    let d = rx.saturating_sub(*last) as f64 * 8.0 / dt / 1e6;
                    *last = rx;
                    Some(d)
                }
                None => None,
            };
            self.rates.push(RateSample {
                variant: self.variant.name.clone(),
                t_s: t,
                flow: f.spec.name.clone(),
                tx_bytes: tx.saturating_sub(f.base),
                rate_mbps,
                delivered_mbps,
            });
            f.last = Some((t, tx));
        }
        for (k, (p, rate_mbps)) in self.ports.iter().enumerate() {
            let tx = p.counters()?.tx_bytes;
            let (t_prev, tx_prev) = self.port_last.get(k).copied().unwrap_or((0.0, tx));
            let dt = t - t_prev;
            let tx_mbps = if dt > 0.0 {
                tx.saturating_sub(tx_prev) as f64 * 8.0 / dt / 1e6
            } else {
                0.0
            };
            if let Some(last) = self.port_last.get_mut(k) {
                *last = (t, tx);
            }
            let mut cmd = exec::netns_command(&p.netns, &self.tools.rocev2d);
            cmd.args(["switch", "stats", "--iface", &p.ifname, "--json"]);
            let s: Value = exec::collect_json(&mut cmd, SETUP)?;
            let c = |k: &str| s["counters"][k].as_u64().unwrap_or(0);
            self.samples.push(PortSample {
                variant: self.variant.name.clone(),
                t_s: t,
                port: format!("{}>{}", p.switch, p.peer),
                queue_bytes: s["queue_bytes"].as_u64().unwrap_or(0),
                queue_max_bytes: s["queue_max_bytes"].as_u64().unwrap_or(0),
                packets: c("packets"),
                ce_marked: c("ce_marked"),
                drop_buffer: c("drop_buffer"),
                iofd_deflected: c("iofd_deflected"),
                dvl_isolated: c("dvl_isolated"),
                dvl_congested: c("dvl_congested"),
                dvl_notify_sent: c("dvl_notify_sent"),
                dvl_notify_accepted: c("dvl_notify_accepted"),
                tx_mbps,
                rate_mbps: *rate_mbps,
            });
        }
        Ok(())
    }

    /// Stop what still runs and move the results into `out`.
    fn finish(&mut self, t0: Instant, out: &mut Outcome) {
        let t = secs_since(t0);
        for f in &mut self.flows {
            if let Some(mut c) = f.client.take() {
                let got = c.kill();
                f.result = Some(match f.spec.kind {
                    // A client that printed its checked RESULT finished its transfer; only its
                    // exit was cut short.
                    FlowKind::Roce if tagged_json(&got.stdout, "RESULT ").is_some() => {
                        roce_result(f, &got.stdout, t, "done")
                    }
                    FlowKind::Roce => roce_result(f, &got.stdout, t, "unfinished"),
                    FlowKind::Udp => udp_result(f, None, None, "unfinished"),
                });
            }
            // A sink stops after a second without datagrams.
            if let Some(sink) = f.sink.take() {
                let report = sink
                    .wait(EXIT)
                    .ok()
                    .and_then(|c| serde_json::from_str::<SinkReport>(c.stdout.trim()).ok());
                let status = f
                    .result
                    .as_ref()
                    .map_or("unfinished", |r| r.status.as_str())
                    .to_owned();
                f.result = Some(udp_result(f, report.as_ref(), f.ended, &status));
            }
            if f.result.is_none() {
                f.result = Some(FlowResult {
                    variant: self.variant.name.clone(),
                    flow: f.spec.name.clone(),
                    kind: "roce".to_owned(),
                    from: f.spec.from.clone(),
                    to: f.spec.to.clone(),
                    cc: f.cc.clone(),
                    mode: "-".to_owned(),
                    start_s: f.spec.start_secs,
                    end_s: None,
                    bytes: 0,
                    goodput_mbps: None,
                    retransmits: None,
                    status: "not started".to_owned(),
                });
            }
            if let Some(mut r) = f.result.take() {
                r.variant = self.variant.name.clone();
                out.flows.push(r);
            }
        }
        for m in &mut self.mixes {
            if let Some((mut c, _)) = m.running.take() {
                c.kill();
            }
        }
        // A server whose clients all quit has exited; one still waiting for transfers that
        // the end of the run cut off is stopped. Its output (Dart: the receiver's `DASR`
        // state every second) is kept in `logs/VARIANT-server-HOST.log`.
        for s in &mut self.servers {
            let c = s.process.kill();
            let dir = self.work.join("logs");
            let text = format!(
                "{}\n--- stdout\n{}--- stderr\n{}",
                c.cmd, c.stdout, c.stderr
            );
            let path = dir.join(format!("{}-server-{}.log", self.variant.name, s.host));
            let _ = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(path, text));
        }
        out.flows.append(&mut self.failures);
        out.rates.append(&mut self.rates);
        out.ports.append(&mut self.samples);
        out.fcts.append(&mut self.fcts);
    }

    /// Tear the testbed down (every process first).
    fn down(self) -> Result<(), Error> {
        let VariantRun {
            flows,
            mixes,
            servers,
            tb,
            ..
        } = self;
        drop(flows);
        drop(mixes);
        drop(servers);
        tb.down()
    }
}

/// The status of a client that exited unsuccessfully: its error line (anyhow's `Error: …`,
/// else its last line), with its whole output kept in `work/logs/NAME.log`.
fn failure(work: &Path, name: &str, c: &exec::Captured) -> String {
    let why = c
        .stderr
        .lines()
        .find(|l| l.starts_with("Error"))
        .or_else(|| c.stderr.lines().rev().find(|l| !l.trim().is_empty()))
        .unwrap_or("")
        .trim()
        .to_owned();
    let dir = work.join("logs");
    let path = dir.join(format!("{name}.log"));
    let text = format!(
        "{}\n--- stdout\n{}--- stderr\n{}",
        c.cmd, c.stdout, c.stderr
    );
    let kept = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&path, text))
        .map_or_else(|_| String::new(), |()| format!(" (logs/{name}.log)"));
    format!("failed ({}): {why}{kept}", c.status)
}

/// A RoCE flow's result from its client's output (`READY` and `RESULT` lines).
fn roce_result(f: &Flow, stdout: &str, t: f64, status: &str) -> FlowResult {
    let ready = tagged_json(stdout, "READY ");
    let result = tagged_json(stdout, "RESULT ");
    let get = |k: &str| result.as_ref().map(|r| r[k].clone());
    FlowResult {
        variant: String::new(),
        flow: f.spec.name.clone(),
        kind: "roce".to_owned(),
        from: f.spec.from.clone(),
        to: f.spec.to.clone(),
        cc: f.cc.clone(),
        mode: ready
            .as_ref()
            .and_then(|r| r["mode"].as_str())
            .unwrap_or("-")
            .to_owned(),
        start_s: f.started.unwrap_or(f.spec.start_secs),
        end_s: (status == "done").then_some(t),
        bytes: get("bytes").and_then(|v| v.as_u64()).unwrap_or(0),
        goodput_mbps: get("gbit_per_s")
            .and_then(|v| v.as_f64())
            .map(|g| g * 1000.0),
        retransmits: get("retransmits").and_then(|v| v.as_u64()),
        status: status.to_owned(),
    }
}

/// A UDP flood's result: the sink's report when there is one (payload bytes, and their rate
/// between the first and the last datagram).
fn udp_result(f: &Flow, sink: Option<&SinkReport>, end: Option<f64>, status: &str) -> FlowResult {
    FlowResult {
        variant: String::new(),
        flow: f.spec.name.clone(),
        kind: "udp".to_owned(),
        from: f.spec.from.clone(),
        to: f.spec.to.clone(),
        cc: "-".to_owned(),
        mode: f
            .pinned
            .as_ref()
            .map_or_else(|| "-".to_owned(), |p| format!("pinned to {p}")),
        start_s: f.started.unwrap_or(f.spec.start_secs),
        end_s: end,
        bytes: sink.map_or(0, |s| s.bytes),
        goodput_mbps: sink
            .filter(|s| s.first_to_last_ns > 0)
            .map(|s| s.bytes as f64 * 8.0 / s.first_to_last_ns as f64 * 1000.0),
        retransmits: None,
        status: status.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn others_are_the_same_switchs_other_chosen_ports() {
        let port = |netns: &str, ifname: &str| SwitchPort {
            switch: "l0".into(),
            role: crate::Role::Router,
            netns: netns.into(),
            ifname: ifname.into(),
            index: 0,
            peer: "s0".into(),
            peer_role: crate::Role::Router,
            mtu: 1500,
        };
        let chosen = [
            port("n0", "p1"),
            port("n0", "p2"),
            port("n0", "p3"),
            port("n9", "p4"),
        ];
        assert_eq!(others(&chosen, &chosen[0]), "p2+p3");
        assert_eq!(others(&chosen, &chosen[2]), "p1+p2");
        assert_eq!(others(&chosen[3..], &chosen[3]), "");
    }
}
