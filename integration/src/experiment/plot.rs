//! Plots of an [`Outcome`], each written twice from one drawing routine: SVG (plotters'
//! SVG backend) and PNG (its bitmap backend and image encoder). Per variant, every flow's rate
//! over time (`rate_VARIANT`: sent, and delivered as `FLOW rx` where measured); all variants'
//! total rate (`throughput`: each flow's delivered rate where measured, else its sent rate),
//! each sampled port's queue (`queue`) and output rate (`port_rate`) over time; and, when
//! short transfers ran, the CDF of their completion times (`fct_cdf`). With a `[model]`, the
//! network model's queue, port output and FCTs join those plots as `VARIANT model`.
//!
//! Text is laid out with `ab_glyph` from a TrueType font read once from the system
//! ([`rocev2_sim::plot::register_font`]: DejaVu Sans or `ROCEV2_PLOT_FONT`).
//!
//! Deviations: none.

use super::run::Outcome;
use crate::Error;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// Line colours, in series order (Tableau 10: distinguishable, readable on white).
const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];
/// Pixel size of every plot (the SVG's view box too).
const SIZE: (u32, u32) = (960, 540);

/// One plot: named series of (x, y) points.
#[derive(Debug, Clone, PartialEq)]
pub struct Plot {
    /// File name without extension.
    pub stem: String,
    /// Caption.
    pub title: String,
    /// X axis label.
    pub x: String,
    /// Y axis label.
    pub y: String,
    /// (name, points) per line.
    pub series: Vec<(String, Vec<(f64, f64)>)>,
}

/// Register the font once per process ([`rocev2_sim::plot::register_font`]).
fn font() -> Result<(), Error> {
    rocev2_sim::plot::register_font().map_err(|why| Error::Plot {
        path: PathBuf::from("(font)"),
        why,
    })
}

fn upper(v: f64) -> f64 {
    if v.is_finite() && v > 0.0 {
        v * 1.05
    } else {
        1.0
    }
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    p: &Plot,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let points = || p.series.iter().flat_map(|(_, v)| v.iter());
    let xmax = upper(points().map(|(x, _)| *x).fold(0.0, f64::max));
    let ymax = upper(points().map(|(_, y)| *y).fold(0.0, f64::max));
    let mut chart = ChartBuilder::on(root)
        .caption(&p.title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..xmax, 0f64..ymax)?;
    chart
        .configure_mesh()
        .x_desc(p.x.as_str())
        .y_desc(p.y.as_str())
        .label_style(("sans-serif", 14))
        .draw()?;
    for (i, (name, pts)) in p.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()
}

/// Write `p` as `dir/STEM.svg` and `dir/STEM.png`; returns both paths.
///
/// # Errors
/// [`Error::Plot`] naming the file (no font, a backend error).
pub fn write(dir: &Path, p: &Plot) -> Result<Vec<PathBuf>, Error> {
    font()?;
    let svg = dir.join(format!("{}.svg", p.stem));
    let png = dir.join(format!("{}.png", p.stem));
    let fail = |path: &Path, e: String| Error::Plot {
        path: path.to_owned(),
        why: e,
    };
    draw(&SVGBackend::new(&svg, SIZE).into_drawing_area(), p)
        .map_err(|e| fail(&svg, e.to_string()))?;
    draw(&BitMapBackend::new(&png, SIZE).into_drawing_area(), p)
        .map_err(|e| fail(&png, e.to_string()))?;
    Ok(vec![svg, png])
}

/// Add `pt` to the series `name`, creating it.
fn push(series: &mut Vec<(String, Vec<(f64, f64)>)>, name: &str, pt: (f64, f64)) {
    match series.iter_mut().find(|(n, _)| n == name) {
        Some((_, pts)) => pts.push(pt),
        None => series.push((name.to_owned(), vec![pt])),
    }
}

/// The empirical CDF of `v`: (value, fraction at or below it), in order.
fn cdf(mut v: Vec<f64>) -> Vec<(f64, f64)> {
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    v.iter()
        .enumerate()
        .map(|(i, x)| (*x, (i + 1) as f64 / n))
        .collect()
}

/// The plots of an outcome (see the module doc).
pub fn plots(o: &Outcome) -> Vec<Plot> {
    let mut out = Vec::new();
    let mut totals = Vec::new();
    for v in &o.variants {
        let mut series = Vec::new();
        let mut total: Vec<(f64, f64)> = Vec::new();
        for r in o.rates.iter().filter(|r| &r.variant == v) {
            push(&mut series, &r.flow, (r.t_s, r.rate_mbps));
            if let Some(d) = r.delivered_mbps {
                push(&mut series, &format!("{} rx", r.flow), (r.t_s, d));
            }
            let rate = r.delivered_mbps.unwrap_or(r.rate_mbps);
            match total.last_mut() {
                Some((t, sum)) if *t == r.t_s => *sum += rate,
                _ => total.push((r.t_s, rate)),
            }
        }
        if !series.is_empty() {
            out.push(Plot {
                stem: format!("rate_{v}"),
                title: format!("{}: per-flow rate, variant {v}", o.experiment.name),
                x: "time (s)".to_owned(),
                y: "rate (Mbit/s)".to_owned(),
                series,
            });
            totals.push((v.clone(), total));
        }
    }
    if !totals.is_empty() {
        out.push(Plot {
            stem: "throughput".to_owned(),
            title: format!("{}: total rate of all flows", o.experiment.name),
            x: "time (s)".to_owned(),
            y: "rate (Mbit/s; delivered where measured, else sent)".to_owned(),
            series: totals,
        });
    }
    let mut queues = Vec::new();
    let ports: usize = {
        let mut p: Vec<&str> = o.ports.iter().map(|p| p.port.as_str()).collect();
        p.sort_unstable();
        p.dedup();
        p.len()
    };
    for s in &o.ports {
        let name = if ports > 1 {
            format!("{} {}", s.variant, s.port)
        } else {
            s.variant.clone()
        };
        push(&mut queues, &name, (s.t_s, s.queue_bytes as f64 / 1000.0));
    }
    let mut outputs = Vec::new();
    for s in &o.ports {
        let name = if ports > 1 {
            format!("{} {}", s.variant, s.port)
        } else {
            s.variant.clone()
        };
        push(&mut outputs, &name, (s.t_s, s.tx_mbps));
    }
    for m in &o.model {
        let name = format!("{} model", m.variant);
        for (t, q, mbps) in &m.port {
            push(&mut queues, &name, (*t, *q as f64 / 1000.0));
            push(&mut outputs, &name, (*t, *mbps));
        }
    }
    if !outputs.is_empty() {
        out.push(Plot {
            stem: "port_rate".to_owned(),
            title: format!("{}: switch port output", o.experiment.name),
            x: "time (s)".to_owned(),
            y: "rate (Mbit/s)".to_owned(),
            series: outputs,
        });
    }
    if !queues.is_empty() {
        out.push(Plot {
            stem: "queue".to_owned(),
            title: format!("{}: switch port queue", o.experiment.name),
            x: "time (s)".to_owned(),
            y: "queue (kB)".to_owned(),
            series: queues,
        });
    }
    let mut cdfs = Vec::new();
    for v in &o.variants {
        let ms = o.fcts.iter().filter(|f| &f.variant == v).map(|f| f.fct_ms);
        let pts = cdf(ms.collect());
        if !pts.is_empty() {
            cdfs.push((v.clone(), pts));
        }
    }
    for m in &o.model {
        let pts = cdf(m.fcts_ms.clone());
        if !pts.is_empty() {
            cdfs.push((format!("{} model", m.variant), pts));
        }
    }
    if !cdfs.is_empty() {
        out.push(Plot {
            stem: "fct_cdf".to_owned(),
            title: format!("{}: short-transfer completion times", o.experiment.name),
            x: "FCT (ms)".to_owned(),
            y: "CDF".to_owned(),
            series: cdfs,
        });
    }
    out
}

/// Write every plot of `o` into `dir`; returns the files.
///
/// # Errors
/// As [`write()`].
pub fn write_all(dir: &Path, o: &Outcome) -> Result<Vec<PathBuf>, Error> {
    let mut files = Vec::new();
    for p in plots(o) {
        files.extend(write(dir, &p)?);
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_svg_and_png_that_parse() {
        if font().is_err() {
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "SKIPPED (no TrueType font): plot test");
            return;
        }
        let dir = std::env::temp_dir().join(format!("rocev2-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = Plot {
            stem: "t".into(),
            title: "test".into(),
            x: "x".into(),
            y: "y".into(),
            series: vec![("a".into(), vec![(0.0, 1.0), (1.0, 2.0)])],
        };
        let files = write(&dir, &p).unwrap();
        let svg = std::fs::read_to_string(&files[0]).unwrap();
        assert!(svg.contains("<svg") && svg.contains("</svg>"), "{svg}");
        let png = std::fs::read(&files[1]).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
