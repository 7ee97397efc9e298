//! `rocev2-sim experiments`: the full-size runs of `rocev2_sim::experiments`, written as CSV
//! and SVG under one directory per experiment (docs/congestion.md lists what each reproduces).
//!
//! The points of an experiment (each scheme, rate and size) are independent deterministic
//! runs: they go to `--jobs` threads at once ([`run_points`]), and the results are written in
//! the same order as by one thread, so the files do not depend on the thread count.

use anyhow::{Context, Result, bail};
use rocev2_core::cc::CcScheme;
use rocev2_sim::experiments::{DartIncast, Fairness, ManyFlows};
use rocev2_sim::plot;
use std::fmt::Write as _;
use std::path::Path;

const ALL: [&str; 3] = ["many_flows", "dart_incast", "fairness"];

/// Runs `run` on every point on up to `jobs` threads; the results come back in the points'
/// order. Each thread takes the next point not taken yet, so long and short runs mix.
fn run_points<P: Sync, R: Send>(points: &[P], jobs: usize, run: impl Fn(&P) -> R + Sync) -> Vec<R> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let mut done: Vec<(usize, R)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..jobs.clamp(1, points.len().max(1)))
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(p) = points.get(i) else { break mine };
                        mine.push((i, run(p)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| match w.join() {
                Ok(v) => v,
                // A panicking run is a bug in the model: let it surface as it would serially.
                Err(e) => std::panic::resume_unwind(e),
            })
            .collect()
    });
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

/// Runs the experiments `only` names (all by default) into `out`, `jobs` points at a time.
pub fn run(only: Option<&str>, out: &Path, quick: bool, jobs: usize) -> Result<()> {
    if let Some(o) = only
        && !ALL.contains(&o)
    {
        bail!("--only {o}: expected one of {}", ALL.join(", "));
    }
    for name in ALL.iter().filter(|n| only.is_none_or(|o| o == **n)) {
        let dir = out.join(name);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        match *name {
            "many_flows" => many_flows(&dir, quick, jobs)?,
            "dart_incast" => dart_incast(&dir, quick, jobs)?,
            _ => fairness(&dir, quick, jobs)?,
        }
        println!("wrote {}", dir.display());
    }
    Ok(())
}

/// Seed 002 Fig. 4 / Fig. 6: N flows from 8 senders into one receiver.
fn many_flows(dir: &Path, quick: bool, jobs: usize) -> Result<()> {
    let ns: &[u32] = if quick { &[64] } else { &[64, 512, 2000] };
    let mut summary = String::from(
        "cc,gbps,flows,queue_mean_bytes,queue_max_tail_bytes,throughput,tail_jain,pause_ns,cnps\n",
    );
    let mut points = Vec::new();
    for gbps in [10.0, 40.0] {
        for cc in [CcScheme::Dcqcn, CcScheme::DcqcnPlus] {
            for &n in ns {
                let mut e = ManyFlows::paper(cc, n, gbps);
                if quick {
                    e.spread_ns = 10_000_000;
                    e.duration_ns = 30_000_000;
                    e.tail_ns = 10_000_000;
                }
                points.push(e);
            }
        }
    }
    let mut results = run_points(&points, jobs, ManyFlows::run).into_iter();
    for gbps in [10.0, 40.0] {
        for cc in [CcScheme::Dcqcn, CcScheme::DcqcnPlus] {
            let mut queues = Vec::new();
            let mut thr = Vec::new();
            for &n in ns {
                let Some(r) = results.next() else {
                    bail!("many_flows: a point has no result");
                };
                println!(
                    "many_flows {} {gbps}G N={n}: queue {:.0} B (max {}), throughput {:.3}, Jain {:.3}",
                    cc.name(),
                    r.queue_mean_bytes,
                    r.queue_max_tail_bytes,
                    r.throughput,
                    r.tail_jain
                );
                writeln!(
                    summary,
                    "{},{gbps},{n},{:.0},{},{:.4},{:.4},{},{}",
                    cc.name(),
                    r.queue_mean_bytes,
                    r.queue_max_tail_bytes,
                    r.throughput,
                    r.tail_jain,
                    r.pause_ns,
                    r.cnps
                )?;
                let mut csv = String::from("time_ns,queue_bytes,rx_gbps,sent_gbps\n");
                for s in &r.samples {
                    writeln!(
                        csv,
                        "{},{},{:.4},{:.4}",
                        s.time_ns, s.queue_bytes, s.rx_gbps, s.sent_gbps
                    )?;
                }
                let stem = format!("{}_{gbps}g_{n}", cc.name());
                std::fs::write(dir.join(format!("{stem}.csv")), csv)?;
                let ms = |t: u64| t as f64 / 1e6;
                queues.push((
                    format!("N = {n}"),
                    r.samples
                        .iter()
                        .map(|s| (ms(s.time_ns), s.queue_bytes as f64 / 1e3))
                        .collect(),
                ));
                thr.push((
                    format!("N = {n}"),
                    r.samples
                        .iter()
                        .map(|s| (ms(s.time_ns), s.sent_gbps))
                        .collect(),
                ));
            }
            let stem = format!("{}_{gbps}g", cc.name());
            plot::series(
                &dir.join(format!("{stem}_queue.svg")),
                &format!("{} at {gbps} Gbit/s: bottleneck queue", cc.name()),
                "time (ms)",
                "queue (KB)",
                &queues,
                false,
            )?;
            plot::series(
                &dir.join(format!("{stem}_throughput.svg")),
                &format!("{} at {gbps} Gbit/s: total sending rate", cc.name()),
                "time (ms)",
                "Gbit/s",
                &thr,
                false,
            )?;
        }
    }
    std::fs::write(dir.join("summary.csv"), summary)?;
    Ok(())
}

/// Seed 000 §V-B / §VI-B: 16-way 8 KB incasts over background long flows.
fn dart_incast(dir: &Path, quick: bool, jobs: usize) -> Result<()> {
    let rounds = if quick { 6 } else { 40 };
    let mut summary =
        String::from("cc,gbps,short_flows,p50_ns,p99_ns,unfinished,utilisation,long_gbps\n");
    let schemes = [CcScheme::Dcqcn, CcScheme::DcqcnPlus, CcScheme::Dart];
    let points: Vec<DartIncast> = [10.0, 40.0]
        .into_iter()
        .flat_map(|gbps| schemes.map(|cc| DartIncast::paper(cc, gbps, rounds)))
        .collect();
    let mut results = run_points(&points, jobs, DartIncast::run).into_iter();
    for gbps in [10.0, 40.0] {
        let mut cdfs = Vec::new();
        for cc in schemes {
            let Some(r) = results.next() else {
                bail!("dart_incast: a point has no result");
            };
            println!(
                "dart_incast {} {gbps}G: short FCT p50 {} ns, p99 {} ns",
                cc.name(),
                r.p50_ns,
                r.p99_ns
            );
            writeln!(
                summary,
                "{},{gbps},{},{},{},{},{:.4},{:.3}",
                cc.name(),
                r.fcts_ns.len(),
                r.p50_ns,
                r.p99_ns,
                r.unfinished,
                r.utilisation,
                r.long_gbps
            )?;
            let mut csv = String::from("fct_ns\n");
            for f in &r.fcts_ns {
                writeln!(csv, "{f}")?;
            }
            std::fs::write(dir.join(format!("{}_{gbps}g_fct.csv", cc.name())), csv)?;
            let n = r.fcts_ns.len().max(1) as f64;
            cdfs.push((
                cc.name().to_string(),
                r.fcts_ns
                    .iter()
                    .enumerate()
                    .map(|(i, &t)| (t as f64 / 1e3, (i + 1) as f64 / n))
                    .collect(),
            ));
        }
        plot::series(
            &dir.join(format!("fct_cdf_{gbps}g.svg")),
            &format!("16 x 8 KB incast over long flows, {gbps} Gbit/s: short FCT"),
            "flow completion time (us)",
            "fraction of short flows",
            &cdfs,
            true,
        )?;
    }
    std::fs::write(dir.join("summary.csv"), summary)?;
    Ok(())
}

/// Seed 002 §VI-C: Jain's index of 8 long flows on one bottleneck.
fn fairness(dir: &Path, quick: bool, jobs: usize) -> Result<()> {
    let (from, to) = if quick {
        (5_000_000, 15_000_000)
    } else {
        (10_000_000, 110_000_000)
    };
    let mut summary = String::from("cc,gbps,jain,total_gbps,per_flow_gbps\n");
    let schemes = [CcScheme::Dcqcn, CcScheme::DcqcnPlus, CcScheme::Dart];
    let points: Vec<Fairness> = [10.0, 40.0]
        .into_iter()
        .flat_map(|gbps| schemes.map(|cc| Fairness::paper(cc, gbps, from, to)))
        .collect();
    let mut results = run_points(&points, jobs, Fairness::run).into_iter();
    for gbps in [10.0, 40.0] {
        for cc in schemes {
            let Some(r) = results.next() else {
                bail!("fairness: a point has no result");
            };
            println!(
                "fairness {} {gbps}G: Jain {:.4}, {:.2} Gbit/s",
                cc.name(),
                r.jain,
                r.total_gbps
            );
            let flows: Vec<String> = r.per_flow_gbps.iter().map(|g| format!("{g:.3}")).collect();
            writeln!(
                summary,
                "{},{gbps},{:.4},{:.3},{}",
                cc.name(),
                r.jain,
                r.total_gbps,
                flows.join(" ")
            )?;
        }
    }
    std::fs::write(dir.join("summary.csv"), summary)?;
    Ok(())
}
