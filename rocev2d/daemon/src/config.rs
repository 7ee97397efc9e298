//! `rocev2d run`'s configuration file (TOML). Every key is optional; command-line flags win
//! over the file. An error names the TOML key and the accepted range (STYLE.md §4.2).
//!
//! ```toml
//! iface = "eth0"
//!
//! [datapath]
//! mode = "auto"            # auto | xdp | packet | udp
//! busy_poll = false        # spin instead of sleeping in ppoll
//! rx_batch = 64            # 1..=1024 frames per receive call
//! tx_batch = 64            # 1..=1024 frames per send call
//!
//! [datapath.udp]
//! accept_unverified_icrc = false
//! rcvbuf_bytes = 8388608   # 65536..=1073741824
//! sndbuf_bytes = 4194304   # 65536..=1073741824
//!
//! [datapath.packet]
//! guard_udp_port = true
//! rcvbuf_bytes = 8388608
//! sndbuf_bytes = 4194304
//!
//! [stats]
//! socket = "/run/rocev2d/eth0.sock"   # default: /run/rocev2d/IFACE.sock
//! ```
//!
//! Deviations: none.

use rocev2_datapath::Mode;
use rocev2_datapath::auto::Options;
use serde::Deserialize;
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
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DatapathSection {
    mode: Option<String>,
    busy_poll: Option<bool>,
    rx_batch: Option<u64>,
    tx_batch: Option<u64>,
    #[serde(default)]
    udp: UdpSection,
    #[serde(default)]
    packet: PacketSection,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct UdpSection {
    accept_unverified_icrc: Option<bool>,
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
}

/// The daemon's settings after merging file and flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Interface to serve.
    pub iface: Option<String>,
    /// Which datapath.
    pub mode: Mode,
    /// Spin instead of sleeping.
    pub busy_poll: bool,
    /// Frames per receive call.
    pub rx_batch: usize,
    /// Frames per send call.
    pub tx_batch: usize,
    /// Datapath settings.
    pub options: Options,
    /// Stats socket path; `None` = `/run/rocev2d/IFACE.sock`.
    pub stats_socket: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            iface: None,
            mode: Mode::Auto,
            busy_poll: false,
            rx_batch: 64,
            tx_batch: 64,
            options: Options::default(),
            stats_socket: None,
        }
    }
}

const BATCH_RANGE: std::ops::RangeInclusive<u64> = 1..=1024;
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
        c.busy_poll = d.busy_poll.unwrap_or(false);
        let b = "1..=1024";
        c.rx_batch = ranged("datapath.rx_batch", d.rx_batch, BATCH_RANGE, b)?.unwrap_or(64);
        c.tx_batch = ranged("datapath.tx_batch", d.tx_batch, BATCH_RANGE, b)?.unwrap_or(64);
        let r = "65536..=1073741824";
        let o = &mut c.options;
        if let Some(v) = d.udp.accept_unverified_icrc {
            o.udp.accept_unverified_icrc = v;
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
        Ok(c)
    }
}

/// The stats socket of the daemon serving `iface`.
pub fn default_stats_socket(iface: &str) -> PathBuf {
    PathBuf::from(format!("/run/rocev2d/{iface}.sock"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_full_file_parses() {
        let c = Config::parse(
            r#"
            iface = "veth0"
            [datapath]
            mode = "udp"
            busy_poll = true
            rx_batch = 32
            [datapath.udp]
            accept_unverified_icrc = true
            rcvbuf_bytes = 1048576
            [datapath.packet]
            guard_udp_port = false
            [stats]
            socket = "/tmp/x.sock"
            "#,
        )
        .unwrap();
        assert_eq!(c.iface.as_deref(), Some("veth0"));
        assert_eq!(c.mode, Mode::Udp);
        assert!(c.busy_poll);
        assert_eq!((c.rx_batch, c.tx_batch), (32, 64));
        assert!(c.options.udp.accept_unverified_icrc);
        assert_eq!(c.options.udp.rcvbuf_bytes, 1 << 20);
        assert!(!c.options.packet.guard_udp_port);
        assert_eq!(c.stats_socket, Some(PathBuf::from("/tmp/x.sock")));
        assert_eq!(Config::parse("").unwrap(), Config::default());
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
}
