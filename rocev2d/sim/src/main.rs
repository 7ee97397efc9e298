//! `rocev2-sim run scenario.toml`: runs a scenario of the network model and writes CSV files
//! and SVG plots (see `docs/model.md`). `rocev2-sim experiments`: runs the papers' congestion
//! control experiments at full size (`rocev2_sim::experiments`, docs/congestion.md). The
//! progress bar is the only thing that reads a clock.

mod cli_experiments;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use rocev2_sim::output::percentile;
use rocev2_sim::{Report, Scenario, Sim, plot};
use std::path::{Path, PathBuf};

#[derive(Parser)]
#[command(version, about = "Deterministic packet-level RoCEv2 network model")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a scenario file.
    Run {
        /// The scenario (TOML).
        scenario: PathBuf,
        /// Output directory (default: out/<scenario name>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Override the scenario's seed.
        #[arg(long)]
        seed: Option<u64>,
        /// Override the simulated duration, ns.
        #[arg(long)]
        duration_ns: Option<u64>,
        /// Skip the SVG plots.
        #[arg(long)]
        no_plots: bool,
        /// No progress bar.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Run the papers' congestion-control experiments (docs/congestion.md) and write CSV + SVG.
    Experiments {
        /// Only this experiment: many_flows, dart_incast, fairness, dcqcn_plus_grid, dart_clos,
        /// dart_clos_sensitivity or mp_clos.
        #[arg(long)]
        only: Option<String>,
        /// Output directory.
        #[arg(long, default_value = "out/experiments")]
        out: PathBuf,
        /// The CI sizes instead of the full ones (seconds instead of minutes).
        #[arg(long)]
        quick: bool,
        /// dart_clos_sensitivity on the 256-host Clos (the paper's 4:1 edge, per-host load and
        /// incast degree, a quarter of its pods) instead of the paper's 1024 hosts.
        #[arg(long)]
        quarter: bool,
        /// dart_clos_sensitivity: only this variant (typical, light_mix, heavy_mix,
        /// load_of_access_link, run_10x, light_mix_run_10x, heavy_mix_run_10x, pfc,
        /// buffer_1mb).
        #[arg(long)]
        variant: Option<String>,
        /// Points run at once (default: every CPU); the files do not depend on it.
        #[arg(long)]
        jobs: Option<usize>,
    },
}

fn run_one(s: &Scenario, dir: &Path, plots: bool, quiet: bool) -> Result<Report> {
    let mut sim = Sim::new(s).with_context(|| format!("building scenario {}", s.name))?;
    let total_us = s.duration_ns.div_ceil(1000).max(1);
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total_us)
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix} [{elapsed_precise}] {wide_bar} {pos}/{len} us simulated  {msg}",
        )?
        .progress_chars("=> "),
    );
    bar.set_prefix(s.name.clone());
    let step = (s.duration_ns / 200).max(1000);
    sim.run_with_progress(step, |now| {
        bar.set_position(now / 1000);
        let st = sim_stats_msg(now);
        bar.set_message(st);
    });
    bar.finish();
    sim.finish();
    let report = Report::from_sim(&sim);
    let files = report
        .write_csv(dir)
        .with_context(|| format!("writing {}", dir.display()))?;
    if plots && s.output.plots {
        plot::all(&report, dir).context("drawing plots")?;
    }
    let summary = report.summary();
    let width = summary.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in &summary {
        println!("{k:width$}  {v}");
    }
    println!("wrote {} files to {}", files.len(), dir.display());
    Ok(report)
}

/// The progress message must not depend on the run's internals that are borrowed mutably.
fn sim_stats_msg(now: u64) -> String {
    format!("t = {:.1} us", now as f64 / 1e3)
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Experiments {
            only,
            out,
            quick,
            quarter,
            variant,
            jobs,
        } => {
            let jobs = jobs.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
            });
            let sweep = cli_experiments::SweepOpts { quarter, variant };
            cli_experiments::run(only.as_deref(), &out, quick, &sweep, jobs)
        }
        Cmd::Run {
            scenario,
            out,
            seed,
            duration_ns,
            no_plots,
            quiet,
        } => {
            let text = std::fs::read_to_string(&scenario)
                .with_context(|| format!("reading {}", scenario.display()))?;
            let mut s = Scenario::from_toml(&text)
                .with_context(|| format!("parsing {}", scenario.display()))?;
            if let Some(seed) = seed {
                s.seed = seed;
            }
            if let Some(d) = duration_ns {
                s.duration_ns = d;
            }
            let dir = out.unwrap_or_else(|| PathBuf::from("out").join(&s.name));
            match s.sweep.clone() {
                None => {
                    run_one(&s, &dir, !no_plots, quiet)?;
                }
                Some(sweep) => {
                    let mut points = Vec::new();
                    let mut csv = String::from("load,flows_finished,fct_p50_ns,fct_p99_ns\n");
                    for &load in &sweep.loads {
                        let sl = s.with_load(load);
                        let r = run_one(&sl, &dir.join(&sl.name), !no_plots, quiet)?;
                        let f = r.fcts(|_| true);
                        let (p50, p99) = (percentile(&f, 50.0), percentile(&f, 99.0));
                        csv.push_str(&format!(
                            "{load},{},{},{}\n",
                            f.len(),
                            p50.map_or(String::new(), |v| v.to_string()),
                            p99.map_or(String::new(), |v| v.to_string())
                        ));
                        if let (Some(a), Some(b)) = (p50, p99) {
                            points.push((load, a, b));
                        }
                    }
                    std::fs::create_dir_all(&dir)?;
                    std::fs::write(dir.join("sweep.csv"), csv)?;
                    if !no_plots && s.output.plots {
                        plot::fct_vs_load(&s.name, &points, &dir.join("fct_vs_load.svg"))?;
                    }
                    println!("wrote sweep.csv to {}", dir.display());
                }
            }
            Ok(())
        }
    }
}
