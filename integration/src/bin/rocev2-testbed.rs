//! `rocev2-testbed`: build the testbeds of `deploy/testbeds/*.toml` by hand, run anything in
//! them, and take them down; plus the traffic probes the integration tests run inside hosts.
//!
//! ```text
//! rocev2-testbed up deploy/testbeds/pair.toml     # stays up after the command exits
//! rocev2-testbed list
//! rocev2-testbed exec pair h0 -- ip -br addr
//! rocev2-testbed down pair
//! rocev2-testbed sweep                             # leftovers of crashed test runs
//! rocev2-testbed run deploy/experiments/dcqcn_incast.toml --out out/dcqcn [--short]
//! ```
//!
//! `run` is an experiment (docs/experiments.md): testbed, switch programs, traffic, samples,
//! CSVs, plots and a Markdown summary in the output folder, everything torn down at the end,
//! on an error or on Ctrl-C.
//!
//! `RUST_LOG=debug` prints every `ip`/`tc` command and batch script, so the same testbed can
//! be rebuilt without this tool.

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use rocev2_testbed::probe::{self, BlastSpec, PingSpec};
use rocev2_testbed::sweep::sweep;
use rocev2_testbed::{Testbed, TestbedState, TopologyFile};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// Network-namespace testbeds for rocev2.
#[derive(Parser, Debug)]
#[command(version)]
struct Cli {
    /// Where named testbeds record what to tear down.
    #[arg(long, global = true, value_name = "DIR", default_value = rocev2_testbed::DEFAULT_STATE_DIR)]
    state_dir: PathBuf,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Bring up the testbed a topology file describes; it stays up until `down`.
    Up {
        /// The topology file (see deploy/testbeds/).
        file: PathBuf,
        /// Use this name instead of the file's `name`.
        #[arg(long)]
        name: Option<String>,
    },
    /// Tear a named testbed down: processes, namespaces, links, qdiscs, state file.
    Down {
        /// The testbed's name.
        name: String,
    },
    /// Run a command inside one node of a testbed (`ip netns exec`), with this terminal.
    Exec {
        /// The testbed's name.
        name: String,
        /// The node (host or switch), e.g. h0, tx3, l1h0, sw.
        node: String,
        /// The command and its arguments (after `--`).
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// List the named testbeds, their nodes and addresses.
    List {
        /// Print the state files as a JSON array instead.
        #[arg(long)]
        json: bool,
    },
    /// Remove leftovers of crashed runs: namespaces of dead processes, unrecorded named ones.
    Sweep,
    /// Run an experiment (deploy/experiments/*.toml): CSVs, plots and summary.md into --out.
    Run {
        /// The experiment file.
        file: PathBuf,
        /// Output folder (created; files in it are overwritten).
        #[arg(long, default_value = "out/experiment")]
        out: PathBuf,
        /// The CI size: the file's `short_secs`, with times and sizes scaled down.
        #[arg(long)]
        short: bool,
    },
    /// Traffic probes (run them inside a host with `exec`); reports are JSON on stdout.
    #[command(subcommand)]
    Probe(Probe),
}

#[derive(Subcommand, Debug)]
enum Probe {
    /// UDP echo server on every --port, IPv4 and IPv6; prints `ready` on stderr, runs until killed.
    Echo {
        /// A port to serve (repeatable).
        #[arg(long = "port", required = true)]
        ports: Vec<u16>,
    },
    /// Ping UDP echo servers; exits 1 if any echo is missing.
    Ping(PingArgs),
    /// Send a UDP flood for a while.
    Blast {
        /// The sink's address, e.g. 10.0.1.1:5201 or [fd00:0:0:1::1]:5201.
        #[arg(long)]
        target: SocketAddr,
        /// Source port (0: ephemeral).
        #[arg(long, default_value_t = 0)]
        src_port: u16,
        /// UDP payload bytes per datagram.
        #[arg(long, default_value_t = 1400)]
        payload_bytes: usize,
        /// How long to send, in milliseconds.
        #[arg(long, default_value_t = 2000)]
        duration_ms: u64,
        /// Pace to this many payload bits per second (default: as fast as possible).
        #[arg(long)]
        rate_bps: Option<u64>,
    },
    /// Count UDP datagrams on a port until idle; prints `ready` on stderr once bound.
    Sink {
        /// The port.
        #[arg(long)]
        port: u16,
        /// Stop after this many milliseconds without a datagram (once one came).
        #[arg(long, default_value_t = 500)]
        idle_ms: u64,
        /// Stop after this many milliseconds in any case.
        #[arg(long, default_value_t = 30_000)]
        max_ms: u64,
    },
}

#[derive(Args, Debug)]
struct PingArgs {
    /// An echo server's address (repeatable).
    #[arg(long = "target", required = true)]
    targets: Vec<SocketAddr>,
    /// Source ports: one port `P` or an inclusive range `A-B` (default: one ephemeral port).
    #[arg(long, value_parser = parse_ports)]
    src_ports: Option<PortRange>,
    /// Datagrams per source port and target.
    #[arg(long, default_value_t = 3)]
    count: u32,
    /// How long to wait for each echo, in milliseconds.
    #[arg(long, default_value_t = 500)]
    timeout_ms: u64,
}

#[derive(Debug, Clone, Copy)]
struct PortRange(u16, u16);

fn parse_ports(s: &str) -> Result<PortRange, String> {
    let (a, b) = s.split_once('-').unwrap_or((s, s));
    let a: u16 = a.parse().map_err(|e| format!("{a:?}: {e}"))?;
    let b: u16 = b.parse().map_err(|e| format!("{b:?}: {e}"))?;
    if a == 0 || a > b {
        return Err(format!("{s:?}: need 1 <= A <= B"));
    }
    Ok(PortRange(a, b))
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        // `rocev2-testbed list | head` is not an error.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rocev2-testbed: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    let dir = cli.state_dir.as_path();
    match cli.command {
        Cmd::Up { file, name } => up(&file, name, dir),
        Cmd::Down { name } => {
            Testbed::open(&name, dir)?.down()?;
            println!("testbed {name} is down");
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Exec {
            name,
            node,
            command,
        } => {
            let tb = Testbed::open(&name, dir)?;
            let (program, args) = command.split_first().context("no command given")?;
            let mut cmd = tb.command(&node, program)?;
            let status = cmd
                .args(args)
                .status()
                .with_context(|| format!("running ip netns exec for {program}"))?;
            // Pass the command's exit code on, as `ip netns exec` does.
            Ok(ExitCode::from(
                status.code().map_or(1, |c| c.clamp(0, 255) as u8),
            ))
        }
        Cmd::List { json } => list(dir, json),
        Cmd::Sweep => {
            let report = sweep(dir)?;
            for ns in &report.removed_netns {
                println!("removed namespace {ns}");
            }
            for f in &report.removed_state_files {
                println!("removed stale state file {}", f.display());
            }
            println!(
                "sweep: {} namespace(s) removed, {} kept (owner alive or testbed up)",
                report.removed_netns.len(),
                report.kept_netns.len()
            );
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run { file, out, short } => run_experiment(&file, &out, short),
        Cmd::Probe(p) => probe(p),
    }
}

fn up(file: &Path, name: Option<String>, dir: &Path) -> Result<ExitCode> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let spec = TopologyFile::parse(&text).with_context(|| format!("in {}", file.display()))?;
    let name = name.unwrap_or(spec.name);
    let network = spec.topology.network()?;
    let tb = Testbed::up_named(&network, &name, dir)?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "testbed {name} is up: {} namespaces",
        tb.plan().nodes.len()
    )?;
    print_nodes(&mut out, tb.plan())?;
    if let Some(h) = tb.hosts().next() {
        writeln!(
            out,
            "\nrun a command: rocev2-testbed exec {name} {} -- ip -br addr",
            h.name
        )?;
    }
    writeln!(out, "take it down:  rocev2-testbed down {name}")?;
    Ok(ExitCode::SUCCESS)
}

/// One line per port: what a researcher needs to address hosts and find switch ports.
fn print_nodes(out: &mut impl Write, plan: &rocev2_testbed::Plan) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<6} {:<6} {:<18} {:<14} {:<28} {:<6} shaping",
        "node", "role", "netns", "port", "addresses", "peer"
    )?;
    for node in &plan.nodes {
        for p in &node.ports {
            let addrs = match (p.ipv4, p.ipv6) {
                (Some(v4), Some(v6)) => format!("{v4} {v6}"),
                _ => format!("(in bridge {})", node.bridge.as_deref().unwrap_or("?")),
            };
            let shaping = p.egress.map_or_else(
                || "-".to_owned(),
                |s| {
                    format!(
                        "{} Mbit/s, {} B buffer, {:?}",
                        s.rate_bps / 1_000_000,
                        s.buffer_bytes,
                        s.shaper
                    )
                },
            );
            writeln!(
                out,
                "{:<6} {:<6} {:<18} {:<14} {:<28} {:<6} {shaping}",
                node.name,
                node.role.to_string(),
                node.netns,
                p.ifname,
                addrs,
                p.peer
            )?;
        }
    }
    Ok(())
}

fn list(dir: &Path, json: bool) -> Result<ExitCode> {
    let states = TestbedState::list(dir)?;
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&states)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if states.is_empty() {
        writeln!(out, "no testbeds up (state dir {})", dir.display())?;
    }
    for state in &states {
        let live = state.live_netns().len();
        let total = state.plan.nodes.len();
        let status = if live == total {
            "up".to_owned()
        } else {
            format!(
                "PARTIAL: {live}/{total} namespaces (down {} removes it)",
                state.name
            )
        };
        writeln!(
            out,
            "testbed {} ({status}), created by pid {}",
            state.name, state.created_by_pid
        )?;
        print_nodes(&mut out, &state.plan)?;
        writeln!(out)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn run_experiment(file: &Path, out: &Path, short: bool) -> Result<ExitCode> {
    use rocev2_testbed::experiment::{self, Experiment, Tools, plot, report};
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let exp = Experiment::parse(&text).with_context(|| format!("in {}", file.display()))?;
    let exp = if short { exp.shortened() } else { exp };
    let exe = std::env::current_exe().context("locating this executable")?;
    let tools = Tools::beside(&exe)?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    // Ctrl-C and SIGTERM raise a flag the sampling loop reads: the run stops, tears down and
    // writes what it measured. A second Ctrl-C still waits for the teardown.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("signal handler")?;
    }
    let bar = indicatif::ProgressBar::new(1);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {percent:>3}% {msg}",
        )
        .context("progress template")?,
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    eprintln!(
        "experiment {}: {} variant(s) of {} s{}",
        exp.name,
        exp.variants().len(),
        exp.duration_secs,
        if short { " (short)" } else { "" }
    );
    let outcome = experiment::run(&exp, short, &tools, out, &stop, &bar);
    bar.finish_and_clear();
    let outcome = outcome?;
    let mut files = report::write_csvs(out, &outcome)?;
    files.extend(plot::write_all(out, &outcome)?);
    let command = format!(
        "rocev2-testbed run {}{}",
        file.display(),
        if short { " --short" } else { "" }
    );
    let summary = report::write_summary(out, &outcome, &command, &files)?;
    for f in files.iter().chain([&summary]) {
        println!("{}", f.display());
    }
    if outcome.aborted {
        eprintln!("rocev2-testbed: stopped by a signal; the files cover what ran");
        return Ok(ExitCode::from(130));
    }
    Ok(ExitCode::SUCCESS)
}

fn probe(p: Probe) -> Result<ExitCode> {
    match p {
        Probe::Echo { ports } => {
            let server = probe::EchoServer::bind(&ports).context("binding echo ports")?;
            eprintln!("ready");
            server.run().context("echo server")?;
            Ok(ExitCode::SUCCESS)
        }
        Probe::Ping(a) => {
            let src_ports = a.src_ports.map_or_else(Vec::new, |r| (r.0..=r.1).collect());
            let spec = PingSpec {
                targets: a.targets,
                src_ports,
                count: a.count,
                timeout: Duration::from_millis(a.timeout_ms),
            };
            let report = probe::ping(&spec).context("ping")?;
            println!("{}", serde_json::to_string(&report)?);
            Ok(if report.lossy().next().is_some() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        Probe::Blast {
            target,
            src_port,
            payload_bytes,
            duration_ms,
            rate_bps,
        } => {
            if payload_bytes == 0 {
                bail!("--payload-bytes must be at least 1");
            }
            let report = probe::blast(&BlastSpec {
                target,
                src_port,
                payload_bytes,
                duration: Duration::from_millis(duration_ms),
                rate_bps,
            })
            .context("blast")?;
            println!("{}", serde_json::to_string(&report)?);
            Ok(ExitCode::SUCCESS)
        }
        Probe::Sink {
            port,
            idle_ms,
            max_ms,
        } => {
            let report = probe::sink(
                port,
                Duration::from_millis(idle_ms),
                Duration::from_millis(max_ms),
                || eprintln!("ready"),
            )
            .context("sink")?;
            println!("{}", serde_json::to_string(&report)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}
