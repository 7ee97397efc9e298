//! `rocev2d run`'s configuration file (TOML). Every key is optional; command-line flags win
//! over the file. An error names the TOML key and the accepted range (STYLE.md §4.2).
//!
//! ```toml
//! iface = "eth0"
//!
//! [datapath]
//! mode = "auto"            # auto | xdp | packet | udp
//! wait = "adaptive"        # sleep (ppoll) | adaptive (busy-poll spin_us after activity, then
//!                          # ppoll) | spin (busy-poll, one core at 100%); docs/datapath.md
//! spin_us = 200            # 1..=1000000: adaptive's spin window, microseconds
//! busy_poll = false        # true: same as wait = "spin" (older key)
//! rx_batch = 64            # 1..=1024 frames per receive call
//! tx_batch = 64            # 1..=1024 frames per send call
//! queues = 1               # 0..=64 engine shards, each its own thread, rx queue and QPN
//!                          # block (0: one per rx queue of the interface); docs/daemon.md
//!
//! [datapath.udp]
//! accept_unverified_icrc = false
//! gro = true               # receive coalesced buffers (UDP_GRO)
//! gso = true               # send runs of equal IPv6 datagrams as one (UDP_SEGMENT); docs/datapath.md
//! rcvbuf_bytes = 8388608   # 65536..=1073741824
//! sndbuf_bytes = 4194304   # 65536..=1073741824
//!
//! [datapath.packet]
//! guard_udp_port = true
//! rcvbuf_bytes = 8388608
//! sndbuf_bytes = 4194304
//!
//! [stats]
//! socket = "/run/rocev2d/eth0.sock"   # the control socket (applications attach, `rocev2d
//!                                     # stats` asks): a path, or @NAME for an abstract
//!                                     # socket; default: @rocev2d/IFACE (abstract, this
//!                                     # network namespace's)
//! metrics = "127.0.0.1:9464"          # Prometheus text format over HTTP; default: off
//!
//! [control]                # who may attach (docs/daemon.md)
//! mode = 0o660             # a filesystem socket's file mode (default 0o600)
//! group = 1001             # a filesystem socket's group, whose members (primary group) may attach
//! allow_uids = [1000]      # users besides root and the daemon's own (SO_PEERCRED)
//!
//! [limits]                 # per attached application
//! max_qps = 1024           # 1..=1000000: QPs, and as many shared receive queues
//! max_cqs = 1024           # 1..=1000000
//! max_ahs = 4096           # 1..=1000000: UD address handles
//! max_mrs = 4096           # 1..=1000000: memory regions (zero-length ones too)
//! max_listens = 64         # 1..=1000000: CM service IDs listened on
//! max_apps_per_user = 64   # 1..=1000000: attachments of one user at once
//! max_mr_bytes = 17179869184
//! max_ring_bytes = 1073741824  # its QPs' and CQs' shared rings (each up to 16 MiB)
//!
//! [cc]                     # congestion control of every QP (docs/congestion.md)
//! scheme = "dcqcn"         # none | dcqcn | dcqcn_cx4 | dcqcn_plus | dart | timely
//! line_gbps = 10           # 0.001..=1000: the port's rate, where flows start
//! mtu_bytes = 1024         # 256..=4096: M of DCQCN+'s eqs. (16), (17)
//! min_rate_mbps = 100      # 0.001..=1000000: DCQCN's R_min (dcqcn, dcqcn_cx4, dart);
//!                          # default the paper's 100 Mbit/s, too high for a slow testbed port
//! dasr_interval_us = 10    # 1..=1000000: DASR's measurement interval (dart), about one RTT;
//!                          # default 10 µs, a dozen packets at 10 Gbit/s but less than one at
//!                          # 100 Mbit/s (docs/congestion.md)
//! ```
//!
//! Each QP the daemon creates gets its own controller of `cc.scheme`, and the endpoint the
//! matching receiver side (notification point, DASR); `rocev2d stats` shows each QP's rate,
//! target, α, N and CNPs.
//!
//! Deviations: none.

use crate::host::Limits;
use rocev2_core::cc::CcScheme;
pub use rocev2_core::cc::CcSettings;
use rocev2_core::time::Duration;
use rocev2_core::time::Rate;
use rocev2_datapath::auto::Options;
use rocev2_datapath::{Mode, WaitMode};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Why a configuration was refused.
#[derive(Debug)]
pub enum Error {
    /// The file could not be read.
    Read(PathBuf, std::io::Error),
    /// Not TOML, an unknown key, or a value of the wrong type (toml names the key).
    Syntax(PathBuf, String),
    /// A value outside its range.
    Range {
        /// Dotted TOML key.
        key: &'static str,
        /// The value given.
        value: String,
        /// What is accepted.
        range: &'static str,
    },
    /// `cc.scheme` names no scheme of the core's table ([`rocev2_core::cc::SCHEMES`]).
    Scheme {
        /// The value given.
        value: String,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Read(p, e) => write!(f, "{}: {e}", p.display()),
            Error::Syntax(p, e) => write!(f, "{}: {e}", p.display()),
            Error::Range { key, value, range } => {
                write!(
                    f,
                    "config key `{key}` = {value} is out of range (accepted: {range})"
                )
            }
            Error::Scheme { value } => {
                let names: Vec<&str> = CcScheme::names().collect();
                write!(
                    f,
                    "config key `cc.scheme` = {value} is out of range (accepted: {})",
                    names.join(", ")
                )
            }
        }
    }
}

impl std::error::Error for Error {}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    iface: Option<String>,
    #[serde(default)]
    datapath: DatapathSection,
    #[serde(default)]
    stats: StatsSection,
    #[serde(default)]
    cc: CcSection,
    #[serde(default)]
    control: ControlSection,
    #[serde(default)]
    limits: LimitsSection,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ControlSection {
    mode: Option<u32>,
    allow_uids: Option<Vec<u32>>,
    group: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsSection {
    max_qps: Option<u64>,
    max_cqs: Option<u64>,
    max_ahs: Option<u64>,
    max_mrs: Option<u64>,
    max_listens: Option<u64>,
    max_apps_per_user: Option<u64>,
    max_mr_bytes: Option<u64>,
    max_ring_bytes: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CcSection {
    scheme: Option<String>,
    line_gbps: Option<f64>,
    mtu_bytes: Option<u64>,
    min_rate_mbps: Option<f64>,
    dasr_interval_us: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DatapathSection {
    mode: Option<String>,
    wait: Option<String>,
    spin_us: Option<u64>,
    busy_poll: Option<bool>,
    rx_batch: Option<u64>,
    tx_batch: Option<u64>,
    queues: Option<u64>,
    #[serde(default)]
    udp: UdpSection,
    #[serde(default)]
    packet: PacketSection,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct UdpSection {
    accept_unverified_icrc: Option<bool>,
    gro: Option<bool>,
    gso: Option<bool>,
    rcvbuf_bytes: Option<u64>,
    sndbuf_bytes: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PacketSection {
    guard_udp_port: Option<bool>,
    rcvbuf_bytes: Option<u64>,
    sndbuf_bytes: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct StatsSection {
    socket: Option<PathBuf>,
    metrics: Option<String>,
}

/// The daemon's settings after merging file and flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Interface to serve.
    pub iface: Option<String>,
    /// Which datapath.
    pub mode: Mode,
    /// How the driver waits between events.
    pub wait: WaitMode,
    /// Frames per receive call.
    pub rx_batch: usize,
    /// Frames per send call.
    pub tx_batch: usize,
    /// Engine shards (`docs/daemon.md`, "Several queues"): 1, today's one engine; N, one per
    /// rx queue 0..N; 0, one per rx queue of the interface.
    pub queues: u32,
    /// Datapath settings.
    pub options: Options,
    /// Control socket path (applications attach and `rocev2d stats` asks there); `None` =
    /// the abstract socket `@rocev2d/IFACE`.
    pub stats_socket: Option<PathBuf>,
    /// Who may attach.
    pub control: ControlSettings,
    /// What one application may hold.
    pub limits: Limits,
    /// Where to serve Prometheus metrics over HTTP; `None`: nowhere.
    pub metrics: Option<SocketAddr>,
    /// Congestion control.
    pub cc: CcSettings,
}

/// `[control]`: the control socket's permissions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlSettings {
    /// File mode of a filesystem socket (default 0o600: root only; 0o660 and a group opens it
    /// to the group at the file level). An abstract socket has none: any process of the
    /// daemon's network namespace reaches it, and `allow_uids` decides.
    pub mode: u32,
    /// Users allowed besides root and the daemon's own user (checked with SO_PEERCRED on every
    /// connection, whatever the file mode).
    pub allow_uids: Vec<u32>,
    /// A filesystem socket's group (its file's group owner), whose members by primary group
    /// (SO_PEERCRED's) may attach too.
    pub group: Option<u32>,
}

impl Default for ControlSettings {
    fn default() -> Self {
        ControlSettings {
            mode: 0o600,
            allow_uids: Vec::new(),
            group: None,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            iface: None,
            mode: Mode::Auto,
            wait: WaitMode::default(),
            rx_batch: 64,
            tx_batch: 64,
            queues: 1,
            options: Options::default(),
            stats_socket: None,
            control: ControlSettings::default(),
            limits: Limits::default(),
            metrics: None,
            cc: CcSettings::default(),
        }
    }
}

const BATCH_RANGE: std::ops::RangeInclusive<u64> = 1..=1024;
/// `[datapath] queues`: as many shards as the steering program's map holds queues, or 0.
pub const QUEUES_RANGE: std::ops::RangeInclusive<u64> = 0..=64;
const BUF_RANGE: std::ops::RangeInclusive<u64> = 65_536..=1 << 30;

fn ranged(
    key: &'static str,
    v: Option<u64>,
    range: std::ops::RangeInclusive<u64>,
    text: &'static str,
) -> Result<Option<usize>, Error> {
    match v {
        None => Ok(None),
        Some(x) if range.contains(&x) => Ok(usize::try_from(x).ok()),
        Some(x) => Err(Error::Range {
            key,
            value: x.to_string(),
            range: text,
        }),
    }
}

/// `[datapath]`'s `wait`, `spin_us` and `busy_poll` keys as one mode.
fn wait_mode(
    wait: Option<&str>,
    spin_us: Option<u64>,
    busy_poll: Option<bool>,
) -> Result<WaitMode, Error> {
    let mut mode = match wait {
        None => WaitMode::default(),
        Some(w) => w.parse().map_err(|range| Error::Range {
            key: "datapath.wait",
            value: format!("{w:?}"),
            range,
        })?,
    };
    if busy_poll == Some(true) {
        if mode != WaitMode::Spin && wait.is_some() {
            return Err(Error::Range {
                key: "datapath.busy_poll",
                value: "true".into(),
                range: "false when `datapath.wait` is not \"spin\" (it means wait = \"spin\")",
            });
        }
        mode = WaitMode::Spin;
    }
    if let Some(us) = ranged("datapath.spin_us", spin_us, 1..=1_000_000, "1..=1000000")? {
        mode = mode
            .with_spin(Duration::from_micros(us as u64))
            .map_err(|_| Error::Range {
                key: "datapath.spin_us",
                value: us.to_string(),
                range: "absent unless `datapath.wait` is \"adaptive\"",
            })?;
    }
    Ok(mode)
}

impl Config {
    /// Reads `path`.
    ///
    /// # Errors
    /// See [`Error`].
    pub fn load(path: &Path) -> Result<Config, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Read(path.to_path_buf(), e))?;
        Self::parse(&text).map_err(|e| match e {
            Error::Syntax(_, m) => Error::Syntax(path.to_path_buf(), m),
            other => other,
        })
    }

    /// Parses TOML text.
    ///
    /// # Errors
    /// See [`Error`].
    pub fn parse(text: &str) -> Result<Config, Error> {
        let f: File =
            toml::from_str(text).map_err(|e| Error::Syntax(PathBuf::new(), e.to_string()))?;
        let mut c = Config {
            iface: f.iface,
            ..Config::default()
        };
        let d = f.datapath;
        if let Some(m) = d.mode {
            c.mode = m.parse().map_err(|range| Error::Range {
                key: "datapath.mode",
                value: format!("{m:?}"),
                range,
            })?;
        }
        c.wait = wait_mode(d.wait.as_deref(), d.spin_us, d.busy_poll)?;
        let b = "1..=1024";
        c.rx_batch = ranged("datapath.rx_batch", d.rx_batch, BATCH_RANGE, b)?.unwrap_or(64);
        c.tx_batch = ranged("datapath.tx_batch", d.tx_batch, BATCH_RANGE, b)?.unwrap_or(64);
        if let Some(q) = ranged("datapath.queues", d.queues, QUEUES_RANGE, "0..=64")? {
            c.queues = q as u32;
        }
        let r = "65536..=1073741824";
        let o = &mut c.options;
        if let Some(v) = d.udp.accept_unverified_icrc {
            o.udp.accept_unverified_icrc = v;
        }
        if let Some(v) = d.udp.gro {
            o.udp.gro = v;
        }
        if let Some(v) = d.udp.gso {
            o.udp.gso = v;
        }
        if let Some(v) = ranged(
            "datapath.udp.rcvbuf_bytes",
            d.udp.rcvbuf_bytes,
            BUF_RANGE,
            r,
        )? {
            o.udp.rcvbuf_bytes = v;
        }
        if let Some(v) = ranged(
            "datapath.udp.sndbuf_bytes",
            d.udp.sndbuf_bytes,
            BUF_RANGE,
            r,
        )? {
            o.udp.sndbuf_bytes = v;
        }
        if let Some(v) = d.packet.guard_udp_port {
            o.packet.guard_udp_port = v;
        }
        if let Some(v) = ranged(
            "datapath.packet.rcvbuf_bytes",
            d.packet.rcvbuf_bytes,
            BUF_RANGE,
            r,
        )? {
            o.packet.rcvbuf_bytes = v;
        }
        if let Some(v) = ranged(
            "datapath.packet.sndbuf_bytes",
            d.packet.sndbuf_bytes,
            BUF_RANGE,
            r,
        )? {
            o.packet.sndbuf_bytes = v;
        }
        c.stats_socket = f.stats.socket;
        if let Some(m) = f.control.mode {
            if m > 0o777 {
                return Err(Error::Range {
                    key: "control.mode",
                    value: format!("{m:#o}"),
                    range: "a file mode, 0o000..=0o777",
                });
            }
            c.control.mode = m;
        }
        c.control.allow_uids = f.control.allow_uids.unwrap_or_default();
        c.control.group = f.control.group;
        let n = "1..=1000000";
        let l = &mut c.limits;
        if let Some(v) = ranged("limits.max_qps", f.limits.max_qps, 1..=1_000_000, n)? {
            l.max_qps = v as u32;
        }
        if let Some(v) = ranged("limits.max_cqs", f.limits.max_cqs, 1..=1_000_000, n)? {
            l.max_cqs = v as u32;
        }
        if let Some(v) = ranged("limits.max_ahs", f.limits.max_ahs, 1..=1_000_000, n)? {
            l.max_ahs = v as u32;
        }
        if let Some(v) = ranged("limits.max_mrs", f.limits.max_mrs, 1..=1_000_000, n)? {
            l.max_mrs = v as u32;
        }
        let listens = f.limits.max_listens;
        if let Some(v) = ranged("limits.max_listens", listens, 1..=1_000_000, n)? {
            l.max_listens = v as u32;
        }
        let apps = f.limits.max_apps_per_user;
        if let Some(v) = ranged("limits.max_apps_per_user", apps, 1..=1_000_000, n)? {
            l.max_apps_per_user = v as u32;
        }
        if let Some(v) = f.limits.max_mr_bytes {
            l.max_mr_bytes = v;
        }
        if let Some(v) = f.limits.max_ring_bytes {
            l.max_ring_bytes = v;
        }
        if let Some(m) = f.stats.metrics {
            c.metrics = Some(m.parse().map_err(|_| Error::Range {
                key: "stats.metrics",
                value: format!("{m:?}"),
                range: "an address and port, e.g. \"127.0.0.1:9464\" or \"[::1]:9464\"",
            })?);
        }
        if let Some(name) = f.cc.scheme {
            c.cc.scheme = CcScheme::from_name(&name).ok_or(Error::Scheme {
                value: format!("{name:?}"),
            })?;
        }
        if let Some(g) = f.cc.line_gbps {
            if !(0.001..=1000.0).contains(&g) {
                return Err(Error::Range {
                    key: "cc.line_gbps",
                    value: g.to_string(),
                    range: "0.001..=1000",
                });
            }
            c.cc.line = Rate::from_bps((g * 1e9).round() as u64);
        }
        if let Some(m) = ranged("cc.mtu_bytes", f.cc.mtu_bytes, 256..=4096, "256..=4096")? {
            c.cc.mtu_bytes = u32::try_from(m).unwrap_or(1024);
        }
        if let Some(m) = f.cc.min_rate_mbps {
            if !(0.001..=1_000_000.0).contains(&m) {
                return Err(Error::Range {
                    key: "cc.min_rate_mbps",
                    value: m.to_string(),
                    range: "0.001..=1000000",
                });
            }
            c.cc.r_min = Some(Rate::from_bps((m * 1e6).round() as u64));
        }
        if let Some(us) = ranged(
            "cc.dasr_interval_us",
            f.cc.dasr_interval_us,
            1..=1_000_000,
            "1..=1000000",
        )? {
            c.cc.dasr_interval = Some(Duration::from_micros(us as u64));
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocev2_core::cc::CcConfig;

    #[test]
    fn config_full_file_parses() {
        let c = Config::parse(
            r#"
            iface = "veth0"
            [datapath]
            mode = "udp"
            wait = "adaptive"
            spin_us = 50
            rx_batch = 32
            [datapath.udp]
            accept_unverified_icrc = true
            gro = false
            gso = false
            rcvbuf_bytes = 1048576
            [datapath.packet]
            guard_udp_port = false
            [stats]
            socket = "/tmp/x.sock"
            [control]
            mode = 0o660
            allow_uids = [1000, 1001]
            [limits]
            max_qps = 4
            max_mr_bytes = 1048576
            "#,
        )
        .unwrap();
        assert_eq!(c.iface.as_deref(), Some("veth0"));
        assert_eq!(c.control.mode, 0o660);
        let g = Config::parse("[control]\ngroup = 1001")
            .unwrap()
            .control
            .group;
        assert_eq!(g, Some(1001));
        assert_eq!(c.control.allow_uids, [1000, 1001]);
        assert_eq!((c.limits.max_qps, c.limits.max_cqs), (4, 1024));
        assert_eq!(c.limits.max_ahs, 4096);
        assert_eq!(
            Config::parse("[limits]\nmax_ahs = 2")
                .unwrap()
                .limits
                .max_ahs,
            2
        );
        assert!(Config::parse("[limits]\nmax_ahs = 0").is_err());
        assert!(Config::parse("[limits]\nmax_mrs = 0").is_err());
        let l = Config::parse("[limits]\nmax_mrs = 3\nmax_listens = 2")
            .unwrap()
            .limits;
        assert_eq!((l.max_mrs, l.max_listens), (3, 2));
        let rings = Config::parse("[limits]\nmax_ring_bytes = 65536").unwrap();
        assert_eq!(rings.limits.max_ring_bytes, 65536);
        assert_eq!(c.limits.max_mr_bytes, 1 << 20);
        assert!(Config::parse("[control]\nmode = 0o1777").is_err());
        assert!(Config::parse("[limits]\nmax_qps = 0").is_err());
        assert_eq!(c.mode, Mode::Udp);
        assert_eq!(
            c.wait,
            WaitMode::Adaptive {
                spin: Duration::from_micros(50)
            }
        );
        assert_eq!((c.rx_batch, c.tx_batch), (32, 64));
        assert_eq!(c.queues, 1, "one engine unless asked");
        let q = |t: &str| Config::parse(t).map(|c| c.queues);
        assert_eq!(q("[datapath]\nqueues = 4").unwrap(), 4);
        assert_eq!(q("[datapath]\nqueues = 0").unwrap(), 0, "one per rx queue");
        let e = q("[datapath]\nqueues = 65").unwrap_err().to_string();
        assert!(
            e.contains("`datapath.queues`") && e.contains("0..=64"),
            "{e}"
        );
        assert!(c.options.udp.accept_unverified_icrc);
        assert!(!c.options.udp.gro && !c.options.udp.gso);
        assert_eq!(c.options.udp.rcvbuf_bytes, 1 << 20);
        assert!(!c.options.packet.guard_udp_port);
        assert_eq!(c.stats_socket, Some(PathBuf::from("/tmp/x.sock")));
        assert_eq!(Config::parse("").unwrap(), Config::default());
    }

    #[test]
    fn config_cc_section_selects_the_scheme() {
        let c = Config::parse("[cc]\nscheme = \"dcqcn_plus\"\nline_gbps = 40\nmtu_bytes = 4096")
            .unwrap();
        assert_eq!(c.cc.scheme, CcScheme::DcqcnPlus);
        assert_eq!(c.cc.line, Rate::from_gbps(40));
        match c.cc.qp_config() {
            Some(CcConfig::DcqcnPlus(p)) => {
                assert_eq!(p.line_rate, Rate::from_gbps(40));
                assert_eq!(p.mtu_bytes, 4096);
            }
            other => panic!("{other:?}"),
        }
        let dart = Config::parse("[cc]\nscheme = \"dart\"").unwrap().cc;
        assert_eq!(dart.line, Rate::from_gbps(10), "default line rate");
        let paper = dart.receiver().dasr.map(|d| d.params().measure_interval);
        assert_eq!(
            paper,
            Some(Duration::from_micros(10)),
            "the paper's default"
        );
        let slow = Config::parse("[cc]\nscheme = \"dart\"\ndasr_interval_us = 1000").unwrap();
        let iv = slow.cc.receiver().dasr.map(|d| d.params().measure_interval);
        assert_eq!(iv, Some(Duration::from_micros(1000)));
        assert!(Config::parse("[cc]\ndasr_interval_us = 0").is_err());
        assert!(Config::default().cc.qp_config().is_none(), "default: none");
        let e = Config::parse("[cc]\nscheme = \"hpcc\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`cc.scheme`") && e.contains("dcqcn_plus"), "{e}");
        let r = Config::parse("[cc]\nscheme = \"dcqcn\"\nmin_rate_mbps = 5").unwrap();
        match r.cc.qp_config() {
            Some(CcConfig::Dcqcn(p)) => assert_eq!(p.r_min, Rate::from_bps(5_000_000)),
            other => panic!("{other:?}"),
        }
        let e = Config::parse("[cc]\nmin_rate_mbps = 0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`cc.min_rate_mbps`"), "{e}");
        let e = Config::parse("[cc]\nline_gbps = 0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`cc.line_gbps`"), "{e}");
        let e = Config::parse("[cc]\nmtu_bytes = 9000")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`cc.mtu_bytes`") && e.contains("256..=4096"),
            "{e}"
        );
    }

    #[test]
    fn config_errors_name_key_and_range() {
        let e = Config::parse("[datapath]\nrx_batch = 0")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "config key `datapath.rx_batch` = 0 is out of range (accepted: 1..=1024)"
        );
        let e = Config::parse("[datapath]\nmode = \"af_xdp\"")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`datapath.mode`") && e.contains("auto, xdp, packet, udp"),
            "{e}"
        );
        let e = Config::parse("[datapath.udp]\nrcvbuf_bytes = 10")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("datapath.udp.rcvbuf_bytes") && e.contains("65536"),
            "{e}"
        );
        let e = Config::parse("[datapath]\nbatch = 3")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `batch`"), "{e}");
        let e = Config::parse("[datapath]\nbusy_poll = 3")
            .unwrap_err()
            .to_string();
        assert!(e.contains("busy_poll"), "{e}");
    }

    #[test]
    fn config_wait_modes_and_busy_poll_alias() {
        let wait = |text: &str| Config::parse(text).map(|c| c.wait);
        assert_eq!(
            wait("").unwrap(),
            WaitMode::default(),
            "adaptive by default"
        );
        assert_eq!(
            wait("[datapath]\nwait = \"sleep\"").unwrap(),
            WaitMode::Sleep
        );
        assert_eq!(wait("[datapath]\nwait = \"spin\"").unwrap(), WaitMode::Spin);
        assert_eq!(
            wait("[datapath]\nbusy_poll = true").unwrap(),
            WaitMode::Spin
        );
        assert_eq!(
            wait("[datapath]\nbusy_poll = true\nwait = \"spin\"").unwrap(),
            WaitMode::Spin
        );
        assert_eq!(
            wait("[datapath]\nbusy_poll = false").unwrap(),
            WaitMode::default()
        );
        assert_eq!(
            wait("[datapath]\nspin_us = 1000000").unwrap(),
            WaitMode::Adaptive {
                spin: Duration::from_secs(1)
            }
        );
        let e = |text: &str| wait(text).unwrap_err().to_string();
        let m = e("[datapath]\nwait = \"busy\"");
        assert!(
            m.contains("`datapath.wait`") && m.contains("sleep, adaptive, spin"),
            "{m}"
        );
        let m = e("[datapath]\nspin_us = 0");
        assert!(
            m.contains("`datapath.spin_us`") && m.contains("1..=1000000"),
            "{m}"
        );
        let m = e("[datapath]\nwait = \"sleep\"\nspin_us = 10");
        assert!(
            m.contains("`datapath.spin_us`") && m.contains("adaptive"),
            "{m}"
        );
        let m = e("[datapath]\nwait = \"sleep\"\nbusy_poll = true");
        assert!(m.contains("`datapath.busy_poll`"), "{m}");
    }
}
