//! Writing an [`Outcome`]: `rates.csv`, `queue.csv`, `flows.csv`, `fct.csv` (when there are
//! short transfers) and `summary.md`. CSVs have a header row; fields are quoted only when they
//! hold a comma, quote or newline (RFC 4180).
//!
//! Deviations: none.

use super::run::{FctSample, Outcome, PortSample, RateSample};
use crate::Error;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

fn write(dir: &Path, name: &str, text: &str) -> Result<PathBuf, Error> {
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(|source| Error::Io {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(String::new, |v| v.to_string())
}

/// Write the CSVs into `dir`; returns the files written.
///
/// # Errors
/// [`Error::Io`].
pub fn write_csvs(dir: &Path, o: &Outcome) -> Result<Vec<PathBuf>, Error> {
    let mut files = Vec::new();
    let mut s = String::from("variant,time_s,flow,tx_bytes,rate_mbps,delivered_mbps\n");
    for r in &o.rates {
        let _ = writeln!(
            s,
            "{},{:.3},{},{},{:.3},{}",
            r.variant,
            r.t_s,
            r.flow,
            r.tx_bytes,
            r.rate_mbps,
            opt(r.delivered_mbps.map(|d| format!("{d:.3}")))
        );
    }
    files.push(write(dir, "rates.csv", &s)?);
    let mut s = String::from(
        "variant,time_s,port,queue_bytes,queue_max_bytes,packets,ce_marked,drop_buffer,iofd_deflected,\
         dvl_isolated,dvl_congested,dvl_notify_sent,dvl_notify_accepted,tx_mbps\n",
    );
    for p in &o.ports {
        let _ = writeln!(
            s,
            "{},{:.3},{},{},{},{},{},{},{},{},{},{},{},{:.3}",
            p.variant,
            p.t_s,
            field(&p.port),
            p.queue_bytes,
            p.queue_max_bytes,
            p.packets,
            p.ce_marked,
            p.drop_buffer,
            p.iofd_deflected,
            p.dvl_isolated,
            p.dvl_congested,
            p.dvl_notify_sent,
            p.dvl_notify_accepted,
            p.tx_mbps
        );
    }
    files.push(write(dir, "queue.csv", &s)?);
    let mut s = String::from(
        "variant,flow,kind,from,to,cc,mode,start_s,end_s,bytes,goodput_mbps,retransmits,status\n",
    );
    for f in &o.flows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{:.3},{},{},{},{},{}",
            f.variant,
            field(&f.flow),
            f.kind,
            f.from,
            f.to,
            f.cc,
            f.mode,
            f.start_s,
            opt(f.end_s.map(|e| format!("{e:.3}"))),
            f.bytes,
            opt(f.goodput_mbps.map(|g| format!("{g:.3}"))),
            opt(f.retransmits),
            field(&f.status)
        );
    }
    files.push(write(dir, "flows.csv", &s)?);
    if !o.fcts.is_empty() {
        let mut s = String::from("variant,mix,index,start_s,bytes,fct_ms\n");
        for f in &o.fcts {
            let _ = writeln!(
                s,
                "{},{},{},{:.3},{},{:.3}",
                f.variant, f.mix, f.index, f.start_s, f.bytes, f.fct_ms
            );
        }
        files.push(write(dir, "fct.csv", &s)?);
    }
    if !o.model.is_empty() {
        let mut s = String::from("variant,time_s,queue_bytes,tx_mbps\n");
        let mut f = String::from("variant,fct_ms\n");
        for m in &o.model {
            for (t, q, mbps) in &m.port {
                let _ = writeln!(s, "{},{t:.3},{q},{mbps:.3}", m.variant);
            }
            for ms in &m.fcts_ms {
                let _ = writeln!(f, "{},{ms:.3}", m.variant);
            }
        }
        files.push(write(dir, "model_port.csv", &s)?);
        files.push(write(dir, "model_fct.csv", &f)?);
    }
    Ok(files)
}

/// The `q`-quantile (nearest rank) of `v`, sorted here.
pub fn quantile(v: &[f64], q: f64) -> Option<f64> {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v.get(rank - 1).copied()
}

/// Jain's fairness index: 1 when all equal, 1/n when one takes all.
pub fn jain(x: &[f64]) -> Option<f64> {
    let s: f64 = x.iter().sum();
    let s2: f64 = x.iter().map(|v| v * v).sum();
    (s2 > 0.0).then(|| s * s / (x.len() as f64 * s2))
}

/// Per variant: the mean of each flow's rate over the samples where every flow of the
/// variant sent (rate > 0), and the mean total over those samples.
fn all_active(rates: &[&RateSample]) -> Option<(Vec<(String, f64)>, f64)> {
    let mut times: Vec<f64> = rates.iter().map(|r| r.t_s).collect();
    times.sort_by(f64::total_cmp);
    times.dedup();
    let mut flows: Vec<&str> = rates.iter().map(|r| r.flow.as_str()).collect();
    flows.sort_unstable();
    flows.dedup();
    let mut sums = vec![0.0; flows.len()];
    let mut n = 0usize;
    for t in times {
        let at: Vec<&&RateSample> = rates.iter().filter(|r| r.t_s == t).collect();
        if at.len() == flows.len() && at.iter().all(|r| r.rate_mbps > 0.0) {
            for r in at {
                if let Some(i) = flows.iter().position(|f| *f == r.flow) {
                    sums[i] += r.rate_mbps;
                }
            }
            n += 1;
        }
    }
    (n > 0).then(|| {
        let means: Vec<(String, f64)> = flows
            .iter()
            .zip(&sums)
            .map(|(f, s)| ((*f).to_owned(), s / n as f64))
            .collect();
        let total = means.iter().map(|(_, m)| m).sum();
        (means, total)
    })
}

/// The short transfers' completion times side by side, one row per variant and mix (the
/// comparison an FCT experiment is about); nothing when no short transfer ran.
fn fct_table(s: &mut String, o: &Outcome) {
    if o.fcts.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "## Short-flow completion times\n\n| variant | mix | cc | completed | failed | FCT p50 ms | p99 ms | max ms |\n|---|---|---|---|---|---|---|---|"
    );
    let ms = |x: Option<f64>| opt(x.map(|x| format!("{x:.1}")));
    for v in &o.variants {
        for m in &o.experiment.shorts {
            let fct: Vec<f64> = o
                .fcts
                .iter()
                .filter(|f| &f.variant == v && f.mix == m.name)
                .map(|f| f.fct_ms)
                .collect();
            let failed = o
                .flows
                .iter()
                .filter(|f| &f.variant == v && f.flow.starts_with(&format!("{}#", m.name)))
                .count();
            let cc =
                m.cc.as_ref()
                    .or_else(|| {
                        o.experiment
                            .variants
                            .iter()
                            .find(|x| &x.name == v)
                            .and_then(|x| x.cc.as_ref())
                    })
                    .map_or("none", |c| c.scheme.as_str());
            let _ = writeln!(
                s,
                "| {v} | {} | {cc} | {} | {failed} | {} | {} | {} |",
                m.name,
                fct.len(),
                ms(quantile(&fct, 0.5)),
                ms(quantile(&fct, 0.99)),
                ms(quantile(&fct, 1.0))
            );
        }
    }
    let _ = writeln!(s);
}

/// The network model's run of each variant (`[model]`): the same numbers for its port.
fn model_table(s: &mut String, o: &Outcome) {
    if o.experiment.model.is_none() {
        return;
    }
    let _ = writeln!(
        s,
        "## Network model\n\nThe same star, port and traffic in `rocev2-sim` (scenario and \
         output in `model/VARIANT/`; its curves are the `VARIANT model` series of the plots).\n\n\
         | variant | port output mean Mbit/s | queue mean kB | queue p99 kB | short transfers done | FCT p50 ms | p99 ms | flows given up |\n|---|---|---|---|---|---|---|---|"
    );
    let f1 = |x: Option<f64>| opt(x.map(|x| format!("{x:.1}")));
    for m in &o.model {
        let q: Vec<f64> = m.port.iter().map(|p| p.1 as f64 / 1000.0).collect();
        let out: Vec<f64> = m.port.iter().skip(1).map(|p| p.2).collect();
        let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            m.variant,
            f1(mean(&out)),
            f1(mean(&q)),
            f1(quantile(&q, 0.99)),
            m.fcts_ms.len(),
            f1(quantile(&m.fcts_ms, 0.5)),
            f1(quantile(&m.fcts_ms, 0.99)),
            m.failed
        );
    }
    let _ = writeln!(s);
}

/// Write `summary.md` into `dir`, listing `files` (CSVs and plots) as written.
///
/// # Errors
/// [`Error::Io`].
pub fn write_summary(
    dir: &Path,
    o: &Outcome,
    command: &str,
    files: &[PathBuf],
) -> Result<PathBuf, Error> {
    let e = &o.experiment;
    let mut s = String::new();
    let _ = writeln!(s, "# Experiment `{}`\n", e.name);
    if !e.description.trim().is_empty() {
        let _ = writeln!(s, "{}\n", e.description.trim());
    }
    let _ = writeln!(
        s,
        "Command: `{command}`{}; {} s per variant, sampled every {} ms; datapath `{}`.\n",
        if o.short {
            " (short mode: times, sizes and counts scaled down)"
        } else {
            ""
        },
        e.duration_secs,
        e.sample_ms,
        e.datapath
    );
    if o.aborted {
        let _ = writeln!(
            s,
            "**Aborted** (stopped by a signal): the numbers cover only what ran.\n"
        );
    }
    let _ = writeln!(
        s,
        "Rates are Ethernet bytes per second leaving each sender's interface \
         (retransmissions included); where a flow's receiver gets no other flow, the rate \
         arriving at the receiver's interface is recorded too (`delivered_mbps`, plotted as \
         `FLOW rx`); goodput is what the tool reports at the end of a \
         transfer (RoCE: CRC-checked bytes over the transfer time, none for a transfer still \
         running at the end; UDP: payload the sink received). Sent MiB is what the sender's \
         interface transmitted, checked MiB what the tool verified. Queue, CE marks and drops are the switch program's modelled port \
         (`rocev2d switch stats`); a port's output is its interface's transmit rate.\n"
    );
    fct_table(&mut s, o);
    model_table(&mut s, o);
    for v in &o.variants {
        let _ = writeln!(s, "## Variant `{v}`\n");
        let _ = writeln!(
            s,
            "| flow | kind | from → to | cc | mode | start s | end s | sent MiB | checked MiB | goodput Mbit/s | retransmits | status |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|");
        for f in o.flows.iter().filter(|f| &f.variant == v) {
            let sent = o
                .rates
                .iter()
                .filter(|r| &r.variant == v && r.flow == f.flow)
                .map(|r| r.tx_bytes)
                .max();
            let _ = writeln!(
                s,
                "| {} | {} | {} → {} | {} | {} | {:.1} | {} | {} | {:.1} | {} | {} | {} |",
                f.flow,
                f.kind,
                f.from,
                f.to,
                f.cc,
                f.mode,
                f.start_s,
                opt(f.end_s.map(|e| format!("{e:.1}"))),
                opt(sent.map(|b| format!("{:.1}", b as f64 / (1 << 20) as f64))),
                f.bytes as f64 / (1 << 20) as f64,
                opt(f.goodput_mbps.map(|g| format!("{g:.1}"))),
                opt(f.retransmits),
                f.status.replace('|', "/")
            );
        }
        let rates: Vec<&RateSample> = o.rates.iter().filter(|r| &r.variant == v).collect();
        if let Some((means, total)) = all_active(&rates) {
            let m: Vec<f64> = means.iter().map(|(_, m)| *m).collect();
            let _ = writeln!(
                s,
                "\nWhile every flow sent (sender rates): mean total {total:.1} Mbit/s, per flow {}, Jain {}.",
                means
                    .iter()
                    .map(|(f, m)| format!("{f} {m:.1}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                opt(jain(&m).map(|j| format!("{j:.3}")))
            );
        }
        let mut delivered = Vec::new();
        for f in o.flows.iter().filter(|f| &f.variant == v) {
            let mine: Vec<f64> = rates
                .iter()
                .filter(|r| r.flow == f.flow)
                .skip_while(|r| r.rate_mbps <= 0.0)
                .take_while(|r| f.end_s.is_none_or(|e| r.t_s <= e))
                .filter_map(|r| r.delivered_mbps)
                .collect();
            if !mine.is_empty() {
                let mean = mine.iter().sum::<f64>() / mine.len() as f64;
                delivered.push(format!("{} {mean:.1}", f.flow));
            }
        }
        if !delivered.is_empty() {
            let _ = writeln!(
                s,
                "\nMean delivered rate from each flow's first sample to its end (receiver \
                 interface, Mbit/s): {}.",
                delivered.join(", ")
            );
        }
        let ports: Vec<&PortSample> = o.ports.iter().filter(|p| &p.variant == v).collect();
        let mut names: Vec<&str> = ports.iter().map(|p| p.port.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        if !names.is_empty() {
            let _ = writeln!(
                s,
                "\n| port | output mean Mbit/s | utilisation | queue mean kB | queue p99 kB | queue max kB | packets | CE marked | buffer drops | IOFD deflected | DVL isolated / CFQ packets / notified / accepted |"
            );
            let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|");
        }
        for n in names {
            let mine: Vec<&&PortSample> = ports.iter().filter(|p| p.port == n).collect();
            let q: Vec<f64> = mine.iter().map(|p| p.queue_bytes as f64 / 1000.0).collect();
            let Some(last) = mine.last() else { continue };
            let out: f64 = mine.iter().map(|p| p.tx_mbps).sum::<f64>() / mine.len() as f64;
            let util = last
                .rate_mbps
                .filter(|r| *r > 0.0)
                .map(|r| format!("{:.0}%", out / r * 100.0));
            let _ = writeln!(
                s,
                "| {n} | {out:.1} | {} | {:.1} | {} | {:.1} | {} | {} | {} | {} | {} / {} / {} / {} |",
                opt(util),
                q.iter().sum::<f64>() / q.len() as f64,
                opt(quantile(&q, 0.99).map(|x| format!("{x:.1}"))),
                last.queue_max_bytes as f64 / 1000.0,
                last.packets,
                last.ce_marked,
                last.drop_buffer,
                last.iofd_deflected,
                last.dvl_isolated,
                last.dvl_congested,
                last.dvl_notify_sent,
                last.dvl_notify_accepted
            );
        }
        let fcts: Vec<&FctSample> = o.fcts.iter().filter(|f| &f.variant == v).collect();
        if !fcts.is_empty() {
            let ms: Vec<f64> = fcts.iter().map(|f| f.fct_ms).collect();
            let _ = writeln!(
                s,
                "\nShort transfers: {} completed, FCT p50 {} ms, p99 {} ms, max {} ms.",
                ms.len(),
                opt(quantile(&ms, 0.5).map(|x| format!("{x:.1}"))),
                opt(quantile(&ms, 0.99).map(|x| format!("{x:.1}"))),
                opt(quantile(&ms, 1.0).map(|x| format!("{x:.1}")))
            );
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s, "## Files\n");
    for f in files {
        if let Some(name) = f.file_name() {
            let _ = writeln!(s, "- `{}`", name.to_string_lossy());
        }
    }
    write(dir, "summary.md", &s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_nearest_rank() {
        let v = [5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(quantile(&v, 0.5), Some(3.0));
        assert_eq!(quantile(&v, 0.99), Some(5.0));
        assert_eq!(quantile(&v, 0.0), Some(1.0));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn jain_equal_and_one_takes_all() {
        assert_eq!(jain(&[3.0, 3.0]), Some(1.0));
        assert_eq!(jain(&[4.0, 0.0]), Some(0.5));
        assert_eq!(jain(&[0.0, 0.0]), None);
    }

    #[test]
    fn csv_field_quotes_only_when_needed() {
        assert_eq!(field("sw>rx"), "sw>rx");
        assert_eq!(field("failed: a, b"), "\"failed: a, b\"");
        assert_eq!(field("say \"x\","), "\"say \"\"x\"\",\"");
    }

    #[test]
    fn all_active_uses_only_samples_where_every_flow_sent() {
        let r = |t: f64, flow: &str, rate: f64| RateSample {
            variant: "v".into(),
            t_s: t,
            flow: flow.into(),
            tx_bytes: 0,
            rate_mbps: rate,
            delivered_mbps: None,
        };
        let rates = [
            r(1.0, "a", 90.0),
            r(1.0, "b", 0.0),
            r(2.0, "a", 40.0),
            r(2.0, "b", 60.0),
        ];
        let refs: Vec<&RateSample> = rates.iter().collect();
        let (means, total) = all_active(&refs).unwrap();
        assert_eq!(means, [("a".to_owned(), 40.0), ("b".to_owned(), 60.0)]);
        assert_eq!(total, 100.0);
    }
}
