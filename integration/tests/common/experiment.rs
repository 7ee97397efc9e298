//! Running a shipped experiment (`deploy/experiments/*.toml`) in `--short` mode through the
//! CLI and checking what it wrote: CSV rows with plausible rates, plots that parse, a summary
//! per variant, and no namespace of the run left behind.

use super::{BIN, netns_list};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One CSV file: its header and rows, as strings by column name.
pub struct Csv {
    pub header: Vec<String>,
    pub rows: Vec<BTreeMap<String, String>>,
}

impl Csv {
    /// Read `path` (the runner's CSVs: no quoted commas except in `status`).
    pub fn read(path: &Path) -> Csv {
        let text =
            std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut lines = text.lines();
        let header: Vec<String> = lines
            .next()
            .unwrap_or_else(|| panic!("{} is empty", path.display()))
            .split(',')
            .map(str::to_owned)
            .collect();
        let rows = lines
            .map(|l| {
                let cells: Vec<&str> = l.splitn(header.len(), ',').collect();
                assert_eq!(cells.len(), header.len(), "{}: {l}", path.display());
                header
                    .iter()
                    .cloned()
                    .zip(cells.iter().map(|c| (*c).to_owned()))
                    .collect()
            })
            .collect();
        Csv { header, rows }
    }

    /// Rows whose `key` column equals `value`.
    pub fn with<'a>(
        &'a self,
        key: &'a str,
        value: &'a str,
    ) -> impl Iterator<Item = &'a BTreeMap<String, String>> + 'a {
        self.rows.iter().filter(move |r| r[key] == value)
    }
}

/// A number from a CSV cell.
pub fn num(row: &BTreeMap<String, String>, key: &str) -> f64 {
    row[key]
        .parse()
        .unwrap_or_else(|e| panic!("{key} = {:?}: {e}", row[key]))
}

/// Run `rocev2-testbed run deploy/experiments/FILE --short --out DIR` and return DIR. Panics,
/// naming the build command, when `rocev2d`, `rocev2-wiretest` or `rocev2-sim` (`[model]`)
/// is not built beside the CLI.
pub fn run_short(file: &str) -> PathBuf {
    for tool in ["rocev2d", "rocev2-wiretest", "rocev2-sim"] {
        let p = Path::new(BIN).with_file_name(tool);
        assert!(
            p.is_file(),
            "{} not found: experiments run it; build it first with `cargo build -p {tool}`",
            p.display()
        );
    }
    let spec = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/experiments")
        .join(file);
    let out = std::env::temp_dir().join(format!(
        "rocev2-experiment-{}-{}",
        file.trim_end_matches(".toml"),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&out);
    let started = std::time::Instant::now();
    let child = Command::new(BIN)
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .arg("--short")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn rocev2-testbed run");
    let pid = child.id();
    let done = child.wait_with_output().expect("rocev2-testbed run");
    let stdout = String::from_utf8_lossy(&done.stdout);
    let stderr = String::from_utf8_lossy(&done.stderr);
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "{file} --short: {:.1} s\n{stdout}{stderr}",
        started.elapsed().as_secs_f64()
    );
    assert!(done.status.success(), "{file}: {}\n{stderr}", done.status);
    // Everything the run brought up is gone (its namespaces are rv2-PID-…).
    let left: Vec<String> = netns_list()
        .into_iter()
        .filter(|n| n.starts_with(&format!("rv2-{pid}-")))
        .collect();
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
    out
}

/// The checks every experiment's output passes: each variant has rows for each flow and each
/// port; every flow sent at a plausible non-zero rate (at most 100 Gbit/s) in every variant;
/// each port's queue stayed within `buffer_bytes` plus one frame of `mtu` bytes (the switch
/// program updates its queue without a lock; docs/switch.md "Races": runs of dcqcn_incast saw
/// its maximum up to 1065 bytes above a 512 KiB buffer); every plot exists as SVG
/// (XML whose root is `<svg>`) and PNG (decodes, 960x540); the summary has a section per
/// variant. Returns (rates, queue, flows).
pub fn check_outputs(
    out: &Path,
    variants: &[&str],
    flows: &[&str],
    ports: &[&str],
    buffer_bytes: u64,
    mtu: u64,
) -> (Csv, Csv, Csv) {
    let limit = (buffer_bytes + mtu + 14) as f64;
    let rates = Csv::read(&out.join("rates.csv"));
    let queue = Csv::read(&out.join("queue.csv"));
    let flow_csv = Csv::read(&out.join("flows.csv"));
    assert_eq!(
        rates.header,
        [
            "variant",
            "time_s",
            "flow",
            "tx_bytes",
            "rate_mbps",
            "delivered_mbps"
        ]
    );
    for v in variants {
        for f in flows {
            let mine: Vec<_> = rates
                .with("variant", v)
                .filter(|r| r["flow"] == *f)
                .collect();
            assert!(mine.len() >= 2, "{v}/{f}: {} rate rows", mine.len());
            let max = mine.iter().map(|r| num(r, "rate_mbps")).fold(0.0, f64::max);
            assert!(
                max > 0.0 && max < 100_000.0,
                "{v}/{f}: highest rate {max} Mbit/s"
            );
            assert!(
                mine.iter().all(|r| num(r, "rate_mbps") >= 0.0),
                "{v}/{f}: negative rate"
            );
            assert_eq!(
                flow_csv
                    .with("variant", v)
                    .filter(|r| r["flow"] == *f)
                    .count(),
                1,
                "{v}/{f}: flows.csv"
            );
        }
        for p in ports {
            let mine: Vec<_> = queue
                .with("variant", v)
                .filter(|r| r["port"] == *p)
                .collect();
            assert!(mine.len() >= 2, "{v}/{p}: {} queue rows", mine.len());
            for r in &mine {
                assert!(
                    num(r, "queue_bytes") <= limit && num(r, "queue_max_bytes") <= limit,
                    "{v}/{p}: queue above the buffer: {r:?}"
                );
            }
        }
        for ext in ["svg", "png"] {
            assert_plot(&out.join(format!("rate_{v}.{ext}")));
        }
    }
    for stem in ["throughput", "queue", "port_rate"] {
        for ext in ["svg", "png"] {
            assert_plot(&out.join(format!("{stem}.{ext}")));
        }
    }
    let summary = std::fs::read_to_string(out.join("summary.md")).expect("summary.md");
    for v in variants {
        assert!(
            summary.contains(&format!("## Variant `{v}`")),
            "summary.md lacks {v}:\n{summary}"
        );
    }
    (rates, queue, flow_csv)
}

/// The last sample of `port` in `variant`.
pub fn last_port_sample<'a>(
    queue: &'a Csv,
    variant: &'a str,
    port: &'a str,
) -> &'a BTreeMap<String, String> {
    queue
        .with("variant", variant)
        .filter(|r| r["port"] == port)
        .last()
        .unwrap_or_else(|| panic!("no sample of {port} in {variant}"))
}

/// An SVG that is XML with an `<svg>` root, or a PNG that decodes to 960x540.
pub fn assert_plot(path: &Path) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if path.extension().is_some_and(|e| e == "svg") {
        let text = String::from_utf8(bytes).expect("SVG is UTF-8");
        let doc = roxmltree::Document::parse(&text)
            .unwrap_or_else(|e| panic!("{}: not XML: {e}", path.display()));
        assert_eq!(
            doc.root_element().tag_name().name(),
            "svg",
            "{}",
            path.display()
        );
        assert!(
            doc.descendants()
                .any(|n| n.has_tag_name("polyline") || n.has_tag_name("path")),
            "{}: no line drawn",
            path.display()
        );
    } else {
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", path.display());
        let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
            .read_info()
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader
            .next_frame(&mut buf)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!((info.width, info.height), (960, 540), "{}", path.display());
    }
}

/// The checks of an experiment with a `[model]`: the network model's port series has samples
/// of each variant, within `buffer_bytes` (the model is exact); it completed short transfers
/// (when `fcts`) and none of its QPs gave up (deterministic: the same scenario, the same
/// result); its curves are in the queue plot (legend `VARIANT model`) and the summary has its
/// table.
pub fn check_model(out: &Path, variants: &[&str], buffer_bytes: u64, fcts: bool) {
    let port = Csv::read(&out.join("model_port.csv"));
    let fct = Csv::read(&out.join("model_fct.csv"));
    let svg = std::fs::read_to_string(out.join("queue.svg")).expect("queue.svg");
    let summary = std::fs::read_to_string(out.join("summary.md")).expect("summary.md");
    assert!(summary.contains("## Network model"), "{summary}");
    for v in variants {
        let rows: Vec<_> = port.with("variant", v).collect();
        assert!(rows.len() >= 2, "{v}: {} model samples", rows.len());
        assert!(
            rows.iter()
                .all(|r| num(r, "queue_bytes") <= buffer_bytes as f64),
            "{v}: model queue above the buffer"
        );
        assert!(
            rows.iter().any(|r| num(r, "tx_mbps") > 0.0),
            "{v}: the model's port sent nothing"
        );
        if fcts {
            assert!(fct.with("variant", v).count() > 0, "{v}: no model FCT");
        }
        assert!(
            svg.contains(&format!("{v} model")),
            "{v}: no model series in queue.svg"
        );
        let model = &summary[summary.find("## Network model").unwrap_or(0)..];
        let row = model
            .lines()
            .find(|l| {
                l.starts_with(&format!("| {v} | "))
                    && l.ends_with(" |")
                    && l.matches('|').count() == 9
            })
            .unwrap_or_else(|| panic!("{v}: no model row in summary.md"));
        assert!(row.ends_with("| 0 |"), "{v}: model QPs gave up: {row}");
    }
}
