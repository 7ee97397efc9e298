//! SVG plots of a run, drawn with plotters' SVG backend: rate vs time (`rates.svg`), queue vs
//! time (`queues.svg`), FCT CDF (`fct_cdf.svg`) and, for a load sweep, p50/p99 FCT vs load
//! (`fct_vs_load.svg`); the experiments' line plots and heat maps ([`series`], [`heat_maps`]).
//!
//! Text is laid out with `ab_glyph` from a TrueType font read once from the system
//! ([`register_font`]: DejaVu Sans, Debian package `fonts-dejavu-core`, or `ROCEV2_PLOT_FONT`),
//! no fontconfig or freetype at build time; `rocev2-testbed`'s plots use the same font.

use crate::output::Report;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

const SIZE: (u32, u32) = (960, 540);
/// Most series one plot shows.
const MAX_SERIES: usize = 12;

/// Fonts tried in order when `ROCEV2_PLOT_FONT` is not set.
const FONTS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

/// Registers the plots' font ("sans-serif") once per process; later calls return the first
/// call's outcome.
///
/// # Errors
/// What to install (or set) when no font file is found, or that the file is not TrueType.
pub fn register_font() -> Result<(), String> {
    static FONT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    FONT.get_or_init(|| {
        let candidates: Vec<PathBuf> = match std::env::var_os("ROCEV2_PLOT_FONT") {
            Some(p) => vec![PathBuf::from(p)],
            None => FONTS.iter().map(PathBuf::from).collect(),
        };
        let Some(bytes) = candidates.iter().find_map(|p| std::fs::read(p).ok()) else {
            return Err(format!(
                "no TrueType font for the plots' text: apt-get install -y fonts-dejavu-core, or \
                 set ROCEV2_PLOT_FONT to a .ttf file (tried {candidates:?})"
            ));
        };
        // Registered fonts live as long as the process: leak the one file once.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| "the font file is not a valid TrueType font".to_owned())
    })
    .clone()
}

/// A drawing area on a new SVG file, the font registered first.
fn svg(
    path: &Path,
    size: (u32, u32),
) -> io::Result<DrawingArea<SVGBackend<'_>, plotters::coord::Shift>> {
    register_font().map_err(io::Error::other)?;
    Ok(SVGBackend::new(path, size).into_drawing_area())
}

fn err<E: std::fmt::Debug>(e: E) -> io::Error {
    io::Error::other(format!("plot: {e:?}"))
}

fn lines(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
    log_x: bool,
) -> io::Result<()> {
    let root = svg(path, SIZE)?;
    root.fill(&WHITE).map_err(err)?;
    let pts = series.iter().flat_map(|s| s.1.iter());
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0f64);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let y1 = if y1 <= 0.0 { 1.0 } else { y1 * 1.05 };
    let mut b = ChartBuilder::on(&root);
    b.caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70);
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x_desc)
                .y_desc(y_desc)
                .draw()
                .map_err(err)?;
            for (i, (name, p)) in series.iter().enumerate() {
                let c = Palette99::pick(i).to_rgba();
                chart
                    .draw_series(LineSeries::new(p.iter().copied(), c.stroke_width(2)))
                    .map_err(err)?
                    .label(name.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c));
            }
            if series.len() > 1 {
                chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.8))
                    .border_style(BLACK)
                    .draw()
                    .map_err(err)?;
            }
        }};
    }
    if log_x {
        let x0 = x0.max(1e-3);
        draw!(
            b.build_cartesian_2d((x0..x1.max(x0 * 1.01)).log_scale(), 0f64..y1)
                .map_err(err)?
        );
    } else {
        draw!(b.build_cartesian_2d(x0..x1, 0f64..y1).map_err(err)?);
    }
    root.present().map_err(err)
}

/// Sending rate (Gbit/s) vs time (µs) of the traced flows.
pub fn rates(report: &Report, path: &Path) -> io::Result<()> {
    let mut by_flow: BTreeMap<u32, Vec<(f64, f64)>> = BTreeMap::new();
    for r in &report.rates {
        by_flow.entry(r.flow).or_default().push((
            r.time_ns as f64 / 1e3,
            r.wire_bytes as f64 * 8.0 / report.rate_bin_ns as f64,
        ));
    }
    let series: Vec<_> = by_flow
        .into_iter()
        .take(MAX_SERIES)
        .map(|(f, p)| (format!("flow {f}"), p))
        .collect();
    lines(
        path,
        &format!("{}: per-QP sending rate", report.name),
        "time (us)",
        "rate (Gbit/s)",
        &series,
        false,
    )
}

/// Queue bytes (KB) vs time (µs) of the ports with the largest queues.
pub fn queues(report: &Report, path: &Path) -> io::Result<()> {
    let mut by_port: BTreeMap<u32, Vec<(f64, f64)>> = BTreeMap::new();
    for q in &report.samples {
        by_port
            .entry(q.port)
            .or_default()
            .push((q.time_ns as f64 / 1e3, q.queue_bytes as f64 / 1e3));
    }
    let mut ports: Vec<_> = by_port.into_iter().collect();
    // Busiest first (by peak queue, then port id for a stable order).
    ports.sort_by(|a, b| {
        let pa = a.1.iter().map(|p| p.1).fold(0.0, f64::max);
        let pb = b.1.iter().map(|p| p.1).fold(0.0, f64::max);
        pb.total_cmp(&pa).then(a.0.cmp(&b.0))
    });
    let series: Vec<_> = ports
        .into_iter()
        .take(MAX_SERIES.min(8))
        .map(|(p, v)| {
            let pr = &report.ports[p as usize];
            (format!("port {p} (node {}→{})", pr.node, pr.peer_node), v)
        })
        .collect();
    lines(
        path,
        &format!("{}: egress queues", report.name),
        "time (us)",
        "queue (KB)",
        &series,
        false,
    )
}

/// CDF of flow completion times (µs, log scale), one curve per workload class.
pub fn fct_cdf(report: &Report, path: &Path) -> io::Result<()> {
    let classes: std::collections::BTreeSet<u8> = report.flows.iter().map(|f| f.class).collect();
    let mut series = Vec::new();
    for c in classes.into_iter().take(MAX_SERIES) {
        let v = report.fcts(|f| f.class == c);
        if v.is_empty() {
            continue;
        }
        let n = v.len() as f64;
        let pts = v
            .iter()
            .enumerate()
            .map(|(i, &t)| (t as f64 / 1e3, (i + 1) as f64 / n))
            .collect();
        series.push((format!("class {c} ({} flows)", v.len()), pts));
    }
    lines(
        path,
        &format!("{}: FCT CDF", report.name),
        "flow completion time (us)",
        "fraction of flows",
        &series,
        true,
    )
}

/// p50 and p99 FCT (µs) against offered load (%), from `(load, p50_ns, p99_ns)` points.
pub fn fct_vs_load(name: &str, points: &[(f64, u64, u64)], path: &Path) -> io::Result<()> {
    let p50 = points
        .iter()
        .map(|&(l, a, _)| (l * 100.0, a as f64 / 1e3))
        .collect();
    let p99 = points
        .iter()
        .map(|&(l, _, b)| (l * 100.0, b as f64 / 1e3))
        .collect();
    lines(
        path,
        &format!("{name}: FCT vs load"),
        "load (%)",
        "FCT (us)",
        &[("p50".into(), p50), ("p99".into(), p99)],
        false,
    )
}

/// Named `(x, y)` series as lines (the experiments' queue, throughput and FCT CDF plots).
///
/// # Errors
/// IO or drawing errors.
pub fn series(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
    log_x: bool,
) -> io::Result<()> {
    lines(path, title, x_desc, y_desc, series, log_x)
}

/// One panel of [`heat_maps`]: `values[y][x]`, and the cells to outline (e.g. those meeting a
/// paper's numbers).
#[derive(Debug, Clone, PartialEq)]
pub struct HeatPanel {
    /// Panel title.
    pub title: String,
    /// One row per y label, one value per x label.
    pub values: Vec<Vec<f64>>,
    /// Outlined cells, same shape.
    pub outlined: Vec<Vec<bool>>,
}

/// Heat maps of `panels`, `columns` per row, sharing the axes' labels and one colour scale
/// from `lo` (light) to `hi` (dark); each cell is written with `fmt` of its value.
///
/// # Errors
/// IO or drawing errors.
#[allow(clippy::too_many_arguments)]
pub fn heat_maps(
    path: &Path,
    title: &str,
    (x_labels, x_desc): (&[String], &str),
    (y_labels, y_desc): (&[String], &str),
    panels: &[HeatPanel],
    columns: usize,
    (lo, hi): (f64, f64),
    fmt: &dyn Fn(f64) -> String,
) -> io::Result<()> {
    let columns = columns.max(1);
    let rows = panels.len().div_ceil(columns).max(1);
    let root = svg(path, (420 * columns as u32, 80 + 300 * rows as u32))?;
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(err)?;
    let (nx, ny) = (x_labels.len() as i32, y_labels.len() as i32);
    for (area, panel) in root.split_evenly((rows, columns)).iter().zip(panels) {
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(36)
            .y_label_area_size(72)
            .build_cartesian_2d((0..nx - 1).into_segmented(), (0..ny - 1).into_segmented())
            .map_err(err)?;
        let label = |labels: &[String], v: &SegmentValue<i32>| match v {
            SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        };
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .x_labels(x_labels.len())
            .y_labels(y_labels.len())
            .x_label_formatter(&|v| label(x_labels, v))
            .y_label_formatter(&|v| label(y_labels, v))
            .draw()
            .map_err(err)?;
        let span = if hi > lo { hi - lo } else { 1.0 };
        for (y, row) in panel.values.iter().enumerate() {
            for (x, &v) in row.iter().enumerate() {
                let (x, y) = (x as i32, y as i32);
                let f = ((v - lo) / span).clamp(0.0, 1.0);
                let light = 0.92 - 0.55 * f;
                // The segments of 0..=n − 1 are the cells; the last one ends at `Last`.
                let end = |i: i32, n: i32| {
                    if i + 1 < n {
                        SegmentValue::Exact(i + 1)
                    } else {
                        SegmentValue::Last
                    }
                };
                let cell = [
                    (SegmentValue::Exact(x), SegmentValue::Exact(y)),
                    (end(x, nx), end(y, ny)),
                ];
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        cell.clone(),
                        HSLColor(0.58, 0.65, light).filled(),
                    )))
                    .map_err(err)?;
                if panel
                    .outlined
                    .get(y as usize)
                    .and_then(|r| r.get(x as usize))
                    == Some(&true)
                {
                    chart
                        .draw_series(std::iter::once(Rectangle::new(
                            cell.clone(),
                            RGBColor(220, 40, 20).stroke_width(4),
                        )))
                        .map_err(err)?;
                }
                let ink = if light > 0.6 { BLACK } else { WHITE };
                chart
                    .draw_series(std::iter::once(Text::new(
                        fmt(v),
                        (SegmentValue::CenterOf(x), SegmentValue::CenterOf(y)),
                        ("sans-serif", 14).into_font().color(&ink),
                    )))
                    .map_err(err)?;
            }
        }
    }
    root.present().map_err(err)
}

/// Draws the per-run plots into `dir` and returns their paths.
///
/// # Errors
/// IO or drawing errors.
pub fn all(report: &Report, dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let rate = dir.join("rates.svg");
    rates(report, &rate)?;
    out.push(rate);
    let q = dir.join("queues.svg");
    queues(report, &q)?;
    out.push(q);
    let f = dir.join("fct_cdf.svg");
    fct_cdf(report, &f)?;
    out.push(f);
    Ok(out)
}
