//! `rocev2d switch`: make an interface a switch port (the eBPF switch-port program) and read
//! or remove it later, from any process in the port's network namespace.
//!
//! ```text
//! rocev2d switch attach --iface PORT --rate 10gbit --buffer 2mb \
//!     --red kmin=20kb,kmax=200kb,pmax=0.01 [--drop-non-ect] [--shaper htb|tbf|none] \
//!     [--hist-bucket 16kb] [--loss P --corrupt P --dup P --blackhole --seed S] [--config F]
//! rocev2d switch stats --iface PORT [--json]
//! rocev2d switch detach --iface PORT
//! ```
//!
//! `attach` returns once the port is live and leaves it so (the program hangs off a tc filter,
//! see `rocev2_ebpf_loader::switch_port`); `stats` and `detach` find it again by interface. Sizes
//! follow tc: `b`, `kb`/`k` (1024), `mb`/`m` (1024²), `gb`/`g`; rates follow tc's bit units:
//! `bit`, `kbit`, `mbit`, `gbit`, `tbit` (powers of 1000). Probabilities are fractions
//! (`0.01`) or percentages (`1%`).
//!
//! The configuration file (TOML) has the same keys; flags win over the file:
//!
//! ```toml
//! rate = "10gbit"
//! buffer = "2mb"
//! shaper = "htb"            # htb | tbf | none
//! hist_bucket = "64kb"      # default buffer / 32
//! [red]
//! kmin = "20kb"
//! kmax = "200kb"
//! pmax = 0.01               # 0..=1
//! drop_non_ect = false
//! [faults]
//! loss = 0.0                # 0..=1 each
//! corrupt = 0.0
//! duplicate = 0.0
//! blackhole = false
//! seed = 1                  # default: from the clock, printed
//! ```
//!
//! IOFD (`--iofd threshold=15kb,max-msg=8kb,alt=IFACE+IFACE`, or `[iofd]` with `threshold`,
//! `max_message`, `alternates = [..]` in the file) deflects short messages to the alternate
//! ports (fabric ports only) above the threshold; docs/switch.md.
//!
//! DVL (`--dvl SIZE[,accept]`, or `[dvl]` with `threshold` and `accept = true|false` in the
//! file; HTB shaper) isolates the flow whose packet finds the normal queue at the threshold
//! into a lower strict-priority congested-flow queue, releases it when both queues are below
//! it, and sends congestion notifications for it to the previous hop. `accept` makes the port
//! also accept the notifications arriving on it (a port facing a downstream switch).
//! `rocev2d switch isolate --iface PORT --src IP --dst IP [--proto udp] [--sport N] [--dport
//! N]` puts a flow into a port's table by hand, as a notification does.
//!
//! Deviations: none here (DVL's are in docs/switch.md).

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use rocev2_ebpf_common::{
    dvl::FlowKey,
    fault::{FaultConfig, from_ppb},
    red::{PROB_ONE, RedConfig},
    switch_port::{Counter, FLAG_DVL, FLAG_DVL_ACCEPT},
};
use rocev2_ebpf_loader::switch_port::{
    IofdSpec, Port, PortSpec, PortStats, Shaper, attach, ifindex,
};
use serde::Deserialize;
use serde_json::json;
use std::path::PathBuf;

/// `rocev2d switch`.
#[derive(Debug, Args)]
pub struct SwitchArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: SwitchCommand,
}

/// `rocev2d switch` subcommands.
#[derive(Debug, Subcommand)]
pub enum SwitchCommand {
    /// Shape a port and attach the switch program to its egress; returns once it is live.
    Attach(Box<AttachArgs>),
    /// Print a port's counters, modelled queue and queue histogram.
    Stats(PortArgs),
    /// Remove the program, the qdiscs attach added, and check the program is gone.
    Detach(PortArgs),
    /// DVL: isolate a flow on a port (as a congestion notification from downstream would).
    Isolate(IsolateArgs),
}

/// `rocev2d switch isolate`.
#[derive(Debug, Args)]
pub struct IsolateArgs {
    /// The port.
    #[arg(long)]
    pub iface: String,
    /// Source address of the flow.
    #[arg(long)]
    pub src: std::net::IpAddr,
    /// Destination address of the flow.
    #[arg(long)]
    pub dst: std::net::IpAddr,
    /// IP protocol: udp, tcp or a number.
    #[arg(long, default_value = "udp")]
    pub proto: String,
    /// Transport source port (0 for protocols without ports).
    #[arg(long, default_value_t = 0)]
    pub sport: u16,
    /// Transport destination port.
    #[arg(long, default_value_t = 0)]
    pub dport: u16,
}

/// `rocev2d switch attach`.
#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The port (an interface in this network namespace).
    #[arg(long)]
    pub iface: String,
    /// TOML configuration (keys in this module's doc); flags win.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Port rate, e.g. 10gbit.
    #[arg(long)]
    pub rate: Option<String>,
    /// Port buffer, e.g. 2mb.
    #[arg(long)]
    pub buffer: Option<String>,
    /// RED/ECN: kmin=SIZE,kmax=SIZE,pmax=P.
    #[arg(long)]
    pub red: Option<String>,
    /// Drop Not-ECT packets where ECT ones would be marked.
    #[arg(long)]
    pub drop_non_ect: bool,
    /// Shaper: htb, tbf, or none (keep the port's qdisc).
    #[arg(long)]
    pub shaper: Option<String>,
    /// Queue histogram bucket width (default buffer / 32).
    #[arg(long)]
    pub hist_bucket: Option<String>,
    /// Random loss probability (RoCEv2 frames).
    #[arg(long)]
    pub loss: Option<String>,
    /// Probability of flipping one bit after the BTH (RoCEv2 frames).
    #[arg(long)]
    pub corrupt: Option<String>,
    /// Duplication probability (RoCEv2 frames).
    #[arg(long)]
    pub dup: Option<String>,
    /// Drop every RoCEv2 frame.
    #[arg(long)]
    pub blackhole: bool,
    /// Seed of the fault draws (default: from the clock, printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// IOFD deflection: threshold=SIZE,max-msg=SIZE,alt=IFACE[+IFACE…] (fabric ports only).
    #[arg(long)]
    pub iofd: Option<String>,
    /// DVL congestion isolation: THRESHOLD or THRESHOLD,accept — the detection threshold on the normal
    /// queue (e.g. 30kb); `accept`: also accept congestion notifications arriving on the port.
    #[arg(long)]
    pub dvl: Option<String>,
}

/// `rocev2d switch stats` / `detach`.
#[derive(Debug, Args)]
pub struct PortArgs {
    /// The port.
    #[arg(long)]
    pub iface: String,
    /// Print JSON instead of text (stats only).
    #[arg(long)]
    pub json: bool,
}

/// The configuration file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    rate: Option<String>,
    buffer: Option<String>,
    shaper: Option<String>,
    hist_bucket: Option<String>,
    #[serde(default)]
    red: Option<FileRed>,
    #[serde(default)]
    faults: FileFaults,
    iofd: Option<FileIofd>,
    dvl: Option<FileDvl>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDvl {
    threshold: String,
    #[serde(default)]
    accept: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileIofd {
    threshold: String,
    max_message: String,
    alternates: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRed {
    kmin: String,
    kmax: String,
    pmax: f64,
    #[serde(default)]
    drop_non_ect: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileFaults {
    #[serde(default)]
    loss: f64,
    #[serde(default)]
    corrupt: f64,
    #[serde(default)]
    duplicate: f64,
    #[serde(default)]
    blackhole: bool,
    seed: Option<u64>,
}

/// Runs `rocev2d switch …`.
pub fn run(args: &SwitchArgs) -> anyhow::Result<()> {
    match &args.command {
        SwitchCommand::Attach(a) => {
            let spec = spec(a)?;
            let port = attach(&a.iface, &spec)?;
            // Scripts wait for this line.
            println!(
                "attached {} prog_id {} rate_bps {} buffer_bytes {} seed {}",
                a.iface,
                port.prog_id(),
                spec.rate_bps,
                spec.buffer_bytes,
                spec.faults.seed
            );
            Ok(())
        }
        SwitchCommand::Stats(a) => {
            let port = open(&a.iface)?;
            let stats = port.stats()?;
            if a.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&to_json(&a.iface, &port, &stats))?
                );
            } else {
                print!("{}", render_text(&a.iface, &stats));
            }
            Ok(())
        }
        SwitchCommand::Isolate(a) => {
            let mut port = open(&a.iface)?;
            let key = flow_key(a)?;
            port.isolate(&key)?;
            println!(
                "isolated {} {} -> {} proto {} sport {} dport {}",
                a.iface, a.src, a.dst, key.protocol, a.sport, a.dport
            );
            Ok(())
        }
        SwitchCommand::Detach(a) => {
            let port = open(&a.iface)?;
            let id = port.prog_id();
            port.detach()?;
            println!("detached {} prog_id {id}", a.iface);
            Ok(())
        }
    }
}

fn open(iface: &str) -> anyhow::Result<Port> {
    Port::open(iface)?.with_context(|| {
        format!("no switch program on {iface} in this network namespace (rocev2d switch attach)")
    })
}

fn spec(a: &AttachArgs) -> anyhow::Result<PortSpec> {
    let file: FileConfig = match &a.config {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| p.display().to_string())?;
            toml::from_str(&text).with_context(|| p.display().to_string())?
        }
        None => FileConfig::default(),
    };
    let rate = a
        .rate
        .as_ref()
        .or(file.rate.as_ref())
        .context("--rate (or `rate` in the config) is required")?;
    let rate_bps = parse_rate(rate).with_context(|| format!("rate {rate:?}"))?;
    let buffer = a
        .buffer
        .as_ref()
        .or(file.buffer.as_ref())
        .context("--buffer (or `buffer` in the config) is required")?;
    let buffer_bytes = parse_size(buffer).with_context(|| format!("buffer {buffer:?}"))?;
    let mut red = match (&a.red, &file.red) {
        (Some(s), _) => parse_red(s).with_context(|| format!("--red {s:?}"))?,
        (None, Some(r)) => RedConfig {
            kmin_bytes: size_u32(&r.kmin).context("red.kmin")?,
            kmax_bytes: size_u32(&r.kmax).context("red.kmax")?,
            pmax: q16(r.pmax).context("red.pmax")?,
            drop_non_ect: r.drop_non_ect,
        },
        // No marking: thresholds beyond any buffer.
        (None, None) => RedConfig {
            kmin_bytes: u32::MAX,
            kmax_bytes: u32::MAX,
            pmax: 0,
            drop_non_ect: false,
        },
    };
    red.drop_non_ect |= a.drop_non_ect;
    let shaper = match a
        .shaper
        .as_deref()
        .or(file.shaper.as_deref())
        .unwrap_or("htb")
    {
        "htb" => Shaper::Htb,
        "tbf" => Shaper::Tbf,
        "none" => Shaper::None,
        other => bail!("shaper {other:?}: accepted htb, tbf, none"),
    };
    let hist_bucket_bytes = match a.hist_bucket.as_ref().or(file.hist_bucket.as_ref()) {
        Some(s) => size_u32(s).context("hist_bucket")?,
        None => 0,
    };
    let prob = |flag: &Option<String>, file: f64, key: &str| -> anyhow::Result<u32> {
        let p = match flag {
            Some(s) => parse_probability(s).with_context(|| format!("--{key} {s:?}"))?,
            None => check_probability(file).with_context(|| format!("faults.{key}"))?,
        };
        Ok(from_ppb((p * 1e9).round() as u64))
    };
    let seed = a.seed.or(file.faults.seed).unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let faults = FaultConfig {
        loss: prob(&a.loss, file.faults.loss, "loss")?,
        corrupt: prob(&a.corrupt, file.faults.corrupt, "corrupt")?,
        duplicate: prob(&a.dup, file.faults.duplicate, "dup")?,
        blackhole: a.blackhole || file.faults.blackhole,
        seed,
    };
    let iofd = match (&a.iofd, &file.iofd) {
        (Some(s), _) => Some(parse_iofd(s).with_context(|| format!("--iofd {s:?}"))?),
        (None, Some(f)) => Some(iofd_spec(
            size_u32(&f.threshold).context("iofd.threshold")?,
            size_u32(&f.max_message).context("iofd.max_message")?,
            &f.alternates,
        )?),
        (None, None) => None,
    };
    let (dvl_threshold_bytes, dvl_accept) = match (&a.dvl, &file.dvl) {
        (Some(s), _) => {
            let (threshold, accept) = parse_dvl(s).with_context(|| format!("--dvl {s:?}"))?;
            (Some(threshold), accept)
        }
        (None, Some(f)) => (
            Some(size_u32(&f.threshold).context("dvl.threshold")?),
            f.accept,
        ),
        (None, None) => (None, false),
    };
    Ok(PortSpec {
        rate_bps,
        buffer_bytes,
        red,
        hist_bucket_bytes,
        faults,
        shaper,
        iofd,
        dvl_threshold_bytes,
        dvl_accept,
    })
}

/// `THRESHOLD[,accept]`.
fn parse_dvl(s: &str) -> anyhow::Result<(u32, bool)> {
    let (threshold, accept) = match s.split_once(',') {
        None => (s, false),
        Some((t, "accept")) => (t, true),
        Some((_, other)) => bail!("{other:?}: the only option is `accept`"),
    };
    Ok((size_u32(threshold)?, accept))
}

/// The CFT key of `rocev2d switch isolate`'s flow (the port is filled in by the loader).
fn flow_key(a: &IsolateArgs) -> anyhow::Result<FlowKey> {
    // Addresses are keyed as their GIDs (IPv4-mapped for IPv4), as the program reads them.
    let v6 = |ip| rocev2_core::wire::gid::gid(ip).octets();
    if a.src.is_ipv4() != a.dst.is_ipv4() {
        bail!("--src and --dst must be of the same family");
    }
    let protocol = match a.proto.as_str() {
        "udp" => 17,
        "tcp" => 6,
        n => n
            .parse::<u8>()
            .with_context(|| format!("--proto {n:?}: udp, tcp or 0..=255"))?,
    };
    Ok(FlowKey {
        src: v6(a.src),
        dst: v6(a.dst),
        port: 0,
        src_port: a.sport,
        dst_port: a.dport,
        protocol: u32::from(protocol),
    })
}

fn iofd_spec(threshold: u32, max_message: u32, alts: &[String]) -> anyhow::Result<IofdSpec> {
    let mut alternates = [0; 4];
    if alts.is_empty() || alts.len() > alternates.len() {
        bail!("1 to {} alternate ports", alternates.len());
    }
    for (slot, name) in alternates.iter_mut().zip(alts) {
        *slot = ifindex(name)?;
    }
    Ok(IofdSpec {
        threshold_bytes: threshold,
        max_message_bytes: max_message,
        alternates,
    })
}

/// `threshold=SIZE,max-msg=SIZE,alt=IFACE[+IFACE…]`.
fn parse_iofd(s: &str) -> anyhow::Result<IofdSpec> {
    let (mut threshold, mut max, mut alts) = (None, None, Vec::new());
    for part in s.split(',') {
        let (k, v) = part
            .split_once('=')
            .with_context(|| format!("{part:?} is not key=value"))?;
        match k.trim() {
            "threshold" => threshold = Some(size_u32(v)?),
            "max-msg" => max = Some(size_u32(v)?),
            "alt" => alts = v.split('+').map(|x| x.trim().to_owned()).collect(),
            other => bail!("unknown key {other:?} (threshold, max-msg, alt)"),
        }
    }
    let (Some(t), Some(m)) = (threshold, max) else {
        bail!("threshold, max-msg and alt are all required");
    };
    iofd_spec(t, m, &alts)
}

fn split_unit(s: &str) -> anyhow::Result<(f64, String)> {
    let s = s.trim().to_ascii_lowercase();
    let at = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(at);
    let n: f64 = num
        .parse()
        .with_context(|| format!("{num:?} is not a number"))?;
    if !n.is_finite() || n < 0.0 {
        bail!("{num:?} is not a non-negative number");
    }
    Ok((n, unit.trim().to_owned()))
}

/// A rate in tc's bit units.
fn parse_rate(s: &str) -> anyhow::Result<u64> {
    let (n, unit) = split_unit(s)?;
    let mult = match unit.as_str() {
        "bit" | "" => 1e0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "tbit" => 1e12,
        other => bail!("unit {other:?}: accepted bit, kbit, mbit, gbit, tbit"),
    };
    let bps = (n * mult).round() as u64;
    if bps == 0 {
        bail!("a rate must be above 0");
    }
    Ok(bps)
}

/// A size in tc's units (k = 1024).
fn parse_size(s: &str) -> anyhow::Result<u64> {
    let (n, unit) = split_unit(s)?;
    let mult = match unit.as_str() {
        "" | "b" => 1u64,
        "k" | "kb" => 1 << 10,
        "m" | "mb" => 1 << 20,
        "g" | "gb" => 1 << 30,
        other => bail!("unit {other:?}: accepted b, kb, mb, gb (powers of 1024, as tc)"),
    };
    Ok((n * mult as f64).round() as u64)
}

fn size_u32(s: &str) -> anyhow::Result<u32> {
    u32::try_from(parse_size(s)?).context("at most 4gb")
}

fn check_probability(p: f64) -> anyhow::Result<f64> {
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        bail!("{p} is not a probability (0..=1)")
    }
}

fn parse_probability(s: &str) -> anyhow::Result<f64> {
    let s = s.trim();
    let p = match s.strip_suffix('%') {
        Some(pc) => pc.trim().parse::<f64>()? / 100.0,
        None => s.parse::<f64>()?,
    };
    check_probability(p)
}

fn q16(p: f64) -> anyhow::Result<u32> {
    Ok((check_probability(p)? * f64::from(PROB_ONE)).round() as u32)
}

/// `kmin=SIZE,kmax=SIZE,pmax=P`.
fn parse_red(s: &str) -> anyhow::Result<RedConfig> {
    let (mut kmin, mut kmax, mut pmax) = (None, None, None);
    for part in s.split(',') {
        let (k, v) = part
            .split_once('=')
            .with_context(|| format!("{part:?} is not key=value"))?;
        match k.trim() {
            "kmin" => kmin = Some(size_u32(v)?),
            "kmax" => kmax = Some(size_u32(v)?),
            "pmax" => pmax = Some(q16(parse_probability(v)?)?),
            other => bail!("unknown key {other:?} (kmin, kmax, pmax)"),
        }
    }
    let (Some(kmin_bytes), Some(kmax_bytes), Some(pmax)) = (kmin, kmax, pmax) else {
        bail!("kmin, kmax and pmax are all required");
    };
    if kmax_bytes < kmin_bytes {
        bail!("kmax below kmin");
    }
    Ok(RedConfig {
        kmin_bytes,
        kmax_bytes,
        pmax,
        drop_non_ect: false,
    })
}

fn to_json(iface: &str, port: &Port, s: &PortStats) -> serde_json::Value {
    let c = &s.config;
    let counters: serde_json::Map<String, serde_json::Value> = s
        .counters
        .iter()
        .map(|(k, v)| (k.name().to_owned(), json!(v)))
        .collect();
    json!({
        "iface": iface,
        "prog_id": port.prog_id(),
        "accept_prog_id": port.accept_prog_id(),
        "config": {
            "rate_bps": c.rate_bps,
            "buffer_bytes": c.buffer_bytes,
            "red": {
                "kmin_bytes": c.kmin_bytes,
                "kmax_bytes": c.kmax_bytes,
                "pmax": f64::from(c.pmax) / f64::from(PROB_ONE),
                "drop_non_ect": c.red().drop_non_ect,
            },
            "faults": {
                "loss": f64::from(c.loss) / 4_294_967_296.0,
                "corrupt": f64::from(c.corrupt) / 4_294_967_296.0,
                "duplicate": f64::from(c.duplicate) / 4_294_967_296.0,
                "blackhole": c.faults().blackhole,
                "seed": c.seed,
            },
        },
        "counters": counters,
        "queue_bytes": s.queue_bytes,
        "queue_max_bytes": s.queue_max_bytes,
        "dvl": {
            "threshold_bytes": (c.flags & FLAG_DVL != 0).then_some(c.dvl_threshold_bytes),
            "accept": c.flags & FLAG_DVL_ACCEPT != 0,
            "cfq_bytes": s.cfq_bytes,
            "cfq_max_bytes": s.cfq_max_bytes,
            "isolated": s.isolated.iter().map(|(k, since)| json!({
                "src": std::net::Ipv6Addr::from(k.src).to_canonical().to_string(),
                "dst": std::net::Ipv6Addr::from(k.dst).to_canonical().to_string(),
                "protocol": k.protocol,
                "src_port": k.src_port,
                "dst_port": k.dst_port,
                "since_ns": since,
            })).collect::<Vec<_>>(),
        },
        "hist": {
            "bucket_bytes": c.hist_bucket_bytes,
            "packets": s.hist[0].to_vec(),
            "ect_queued": s.hist[1].to_vec(),
            "ce_marked": s.hist[2].to_vec(),
        },
    })
}

fn render_text(iface: &str, s: &PortStats) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let c = &s.config;
    let _ = writeln!(
        out,
        "{iface}: rate {} bit/s, buffer {} B, RED kmin {} B kmax {} B pmax {:.4}",
        c.rate_bps,
        c.buffer_bytes,
        c.kmin_bytes,
        c.kmax_bytes,
        f64::from(c.pmax) / f64::from(PROB_ONE)
    );
    let _ = writeln!(
        out,
        "queue_bytes {}\nqueue_max_bytes {}",
        s.queue_bytes, s.queue_max_bytes
    );
    if c.flags & FLAG_DVL != 0 {
        let _ = writeln!(
            out,
            "dvl_threshold_bytes {}\ndvl_accept {}\ncfq_bytes {}\ncfq_max_bytes {}\nisolated_flows {}",
            c.dvl_threshold_bytes,
            c.flags & FLAG_DVL_ACCEPT != 0,
            s.cfq_bytes,
            s.cfq_max_bytes,
            s.isolated.len()
        );
    }
    for (k, v) in &s.counters {
        let _ = writeln!(out, "{} {v}", k.name());
    }
    let _ = writeln!(
        out,
        "queue histogram (bucket {} B): from_bytes packets ect_queued ce_marked",
        c.hist_bucket_bytes
    );
    for b in 0..s.hist[0].len() {
        if s.hist[0][b] != 0 {
            let _ = writeln!(
                out,
                "  {:>10} {} {} {}",
                b as u64 * u64::from(c.hist_bucket_bytes),
                s.hist[0][b],
                s.hist[1][b],
                s.hist[2][b]
            );
        }
    }
    debug_assert_eq!(s.counters.len(), Counter::ALL.len());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switch_units_follow_tc() {
        assert_eq!(parse_rate("10gbit").unwrap(), 10_000_000_000);
        assert_eq!(parse_rate("2.5Gbit").unwrap(), 2_500_000_000);
        assert_eq!(parse_rate("100mbit").unwrap(), 100_000_000);
        assert!(parse_rate("10gbps").is_err());
        assert!(parse_rate("0bit").is_err());
        assert_eq!(parse_size("2mb").unwrap(), 2 << 20);
        assert_eq!(parse_size("20kb").unwrap(), 20 << 10);
        assert_eq!(parse_size("1500").unwrap(), 1500);
        assert!(parse_size("-1kb").is_err());
    }

    #[test]
    fn switch_red_flag_parses_and_checks() {
        let r = parse_red("kmin=20kb,kmax=200kb,pmax=0.01").unwrap();
        assert_eq!((r.kmin_bytes, r.kmax_bytes), (20 << 10, 200 << 10));
        assert_eq!(r.pmax, 655); // 0.01 · 65536 = 655.36
        assert_eq!(
            parse_red("kmin=1k,kmax=2k,pmax=50%").unwrap().pmax,
            PROB_ONE / 2
        );
        assert!(parse_red("kmin=2k,kmax=1k,pmax=0.1").is_err());
        assert!(parse_red("kmin=1k,pmax=0.1").is_err());
        assert!(parse_red("kmin=1k,kmax=2k,pmax=1.5").is_err());
    }

    #[test]
    fn switch_config_file_and_flags() {
        let dir = std::env::temp_dir().join(format!("rocev2d-switch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("port.toml");
        std::fs::write(
            &path,
            "rate = \"1gbit\"\nbuffer = \"256kb\"\nshaper = \"tbf\"\n\
             [red]\nkmin = \"16kb\"\nkmax = \"64kb\"\npmax = 0.1\n\
             [faults]\nloss = 0.5\nseed = 7\n",
        )
        .unwrap();
        let mut a = AttachArgs {
            iface: "x".into(),
            config: Some(path.clone()),
            rate: None,
            buffer: None,
            red: None,
            drop_non_ect: false,
            shaper: None,
            hist_bucket: None,
            loss: None,
            corrupt: None,
            dup: None,
            blackhole: false,
            seed: None,
            iofd: None,
            dvl: None,
        };
        let s = spec(&a).unwrap();
        assert_eq!((s.rate_bps, s.buffer_bytes), (1_000_000_000, 256 << 10));
        assert_eq!(s.shaper, Shaper::Tbf);
        assert_eq!(s.red.kmax_bytes, 64 << 10);
        assert_eq!(s.faults.loss, 1 << 31);
        assert_eq!(s.faults.seed, 7);
        assert_eq!(s.dvl_threshold_bytes, None);
        a.dvl = Some("30kb".into());
        let s = spec(&a).unwrap();
        assert_eq!(
            (s.dvl_threshold_bytes, s.dvl_accept),
            (Some(30 << 10), false)
        );
        a.dvl = Some("30kb,accept".into());
        let s = spec(&a).unwrap();
        assert_eq!(
            (s.dvl_threshold_bytes, s.dvl_accept),
            (Some(30 << 10), true)
        );
        a.dvl = Some("30kb,notify".into());
        assert!(spec(&a).is_err(), "unknown DVL option refused");
        a.dvl = None;
        a.rate = Some("2gbit".into());
        a.loss = Some("0".into());
        let s = spec(&a).unwrap();
        assert_eq!(s.rate_bps, 2_000_000_000);
        assert_eq!(s.faults.loss, 0);
        std::fs::write(
            &path,
            "rate = \"1gbit\"\nbuffer = \"1kb\"\n[dvl]\nthreshold = \"8kb\"\naccept = true\n",
        )
        .unwrap();
        let s = spec(&a).unwrap();
        assert_eq!((s.dvl_threshold_bytes, s.dvl_accept), (Some(8 << 10), true));
        std::fs::write(&path, "rate = \"1gbit\"\nbufer = \"1kb\"\n").unwrap();
        assert!(spec(&a).is_err(), "unknown key refused");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
