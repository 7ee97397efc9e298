//! `rocev2d`: runs a rocev2 endpoint on a Linux interface (`run`), reports its counters
//! (`stats`), lists the interfaces usable as RoCE devices (`devices`), and makes an interface
//! an eBPF switch port (`switch`).
//!
//! Logging goes to stderr through `tracing-subscriber`, filtered by `RUST_LOG` (default
//! `info`); readiness lines for scripts go to stdout.
//!
//! Deviations: none.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::todo,
        clippy::unimplemented
    )
)]

mod cli;
mod control;
mod event_loop;
mod metrics;
mod switch_cmd;

use anyhow::{Context as _, bail};
use clap::Parser as _;
use cli::{Cli, Command, StatsArgs};
use rocev2d::{config, stats};
use std::path::Path;
use std::time::Duration;

fn main() -> anyhow::Result<()> {
    rocev2d::init_logging();
    match Cli::parse().command {
        Command::Run(a) => {
            let mut cfg = match &a.config {
                Some(p) => config::Config::load(p)?,
                None => config::Config::default(),
            };
            if a.iface.is_some() {
                cfg.iface = a.iface;
            }
            if let Some(m) = a.datapath {
                cfg.mode = m;
            }
            if a.busy_poll {
                cfg.wait = rocev2_datapath::WaitMode::Spin;
            }
            if a.stats_socket.is_some() {
                cfg.stats_socket = a.stats_socket;
            }
            if let Some(q) = a.queues {
                cfg.queues = q;
            }
            if a.metrics.is_some() {
                cfg.metrics = a.metrics;
            }
            event_loop::run(&cfg)
        }
        Command::Stats(a) => stats_cmd(&a),
        Command::Devices(a) => {
            let r = rocev2d::devices::report().context("listing interfaces")?;
            let out = if a.json {
                serde_json::to_string_pretty(&r)? + "\n"
            } else {
                rocev2d::devices::text(&r)
            };
            // A closed pipe (`| head`) ends the listing quietly.
            let _ = std::io::Write::write_all(&mut std::io::stdout(), out.as_bytes());
            Ok(())
        }
        Command::Switch(a) => switch_cmd::run(&a),
    }
}

fn stats_cmd(a: &StatsArgs) -> anyhow::Result<()> {
    let path = match (&a.socket, &a.iface) {
        (Some(p), _) => p.clone(),
        (None, Some(i)) => rocev2_ipc::default_socket(i),
        (None, None) => {
            let socks = rocev2_ipc::daemons().context("listing this namespace's sockets")?;
            match socks.as_slice() {
                [one] => one.clone(),
                [] => bail!(
                    "no rocev2d serves an interface in this network namespace (is `rocev2d run` running here?)"
                ),
                _ => bail!(
                    "several daemons run ({}); choose one with --iface or --socket",
                    socks
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
    };
    if let Some(every) = a.watch {
        return watch(&path, every);
    }
    let snap = fetch(&path)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&snap)?);
    } else if a.prometheus {
        print!("{}", stats::render_prometheus(&snap));
    } else {
        print!("{}", stats::render_text(&snap));
    }
    Ok(())
}

/// `rocev2d stats --watch`: a snapshot every `every`, printed as rates against the one before
/// (redrawn in place on a terminal), until interrupted or the daemon goes away.
fn watch(path: &Path, every: Duration) -> anyhow::Result<()> {
    use std::io::IsTerminal as _;
    let tty = std::io::stdout().is_terminal();
    let mut prev = (fetch(path)?, std::time::Instant::now());
    loop {
        std::thread::sleep(every);
        let cur = (fetch(path)?, std::time::Instant::now());
        let text = stats::render_rates(&prev.0, &cur.0, (cur.1 - prev.1).as_secs_f64());
        if tty {
            // Home and clear: the table stays in place.
            print!("\x1b[H\x1b[2J{text}");
        } else {
            println!("{text}");
        }
        prev = cur;
    }
}

/// Asks a running daemon's control socket for its snapshot.
fn fetch(path: &Path) -> anyhow::Result<stats::Snapshot> {
    use rocev2_ipc::frame;
    use rocev2_ipc::proto::{Part, Request, Response};
    let s = rocev2_ipc::connect(path).with_context(|| {
        format!(
            "connecting to {} (is `rocev2d run` serving that interface?)",
            path.display()
        )
    })?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut dec = frame::Decoder::default();
    // A daemon that refuses the connection answers before reading: a failed send may still
    // leave its answer to read.
    let sent = frame::send_all(&s, &frame::encode(&Request::Stats, 0), &[]);
    let mut parts = rocev2_ipc::proto::StatsParts::default();
    let answer = loop {
        if let Some((r, _)) = dec.next_frame::<Response>()? {
            match parts.push(r) {
                Part::More => continue,
                Part::Whole(json) => break Response::Stats(json),
                Part::Other(other) => break other,
            }
        }
        if frame::recv(&s, &mut dec)? == 0 {
            sent?;
            bail!("{} closed the connection", path.display());
        }
    };
    match answer {
        Response::Stats(json) => {
            serde_json::from_str(&json).with_context(|| format!("decoding {}", path.display()))
        }
        Response::Error { message, .. } => bail!("{}: {message}", path.display()),
        other => bail!("{}: unexpected answer {other:?}", path.display()),
    }
}
