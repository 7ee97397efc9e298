//! Choosing a datapath: the best one this process may open on an interface, and why.
//!
//! Order of preference: AF_XDP (root: loading and attaching the steering program; no system
//! call per received batch, the kernel stack never sees RoCEv2 frames), then AF_PACKET (needs
//! `CAP_NET_RAW`; verifies every ICRC), then UDP sockets (no privilege; see [`crate::udp`] for
//! what it cannot verify). AF_XDP is tried first whatever the failure (no privileges, another
//! XDP program on the interface, no BTF), and its error becomes part of the reason. The choice
//! and its reason are logged and returned, so `rocev2d stats` can show them. AF_XDP and AF_PACKET
//! come wrapped in a [`crate::loopback::Loopback`], so frames to the interface's own addresses
//! come back to it.
//!
//! In a build without the `xdp` cargo feature, opening AF_XDP fails with [`Error::Xdp`] ("built
//! without the `xdp` feature"): asked for, that is the error; in [`Mode::Auto`] it is the reason
//! AF_PACKET (or UDP) was chosen, as any other AF_XDP failure would be.
//!
//! Deviations: none.

use crate::af_packet::{PacketConfig, PacketDatapath};
use crate::loopback::Loopback;
use crate::udp::{UdpConfig, UdpDatapath};
#[cfg(feature = "xdp")]
use crate::xdp::{XdpConfig, XdpDatapath};
use crate::{Datapath, Error, Interface};
use std::fmt;
use std::str::FromStr;

/// Which datapath to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// The best available, see the module docs.
    #[default]
    Auto,
    /// AF_PACKET.
    Packet,
    /// UDP sockets.
    Udp,
    /// AF_XDP sockets fed by the steering XDP program.
    Xdp,
}

impl Mode {
    /// The name used on the command line and in configuration files.
    pub const fn name(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Packet => "packet",
            Mode::Udp => "udp",
            Mode::Xdp => "xdp",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mode {
    type Err = &'static str;
    fn from_str(s: &str) -> Result<Mode, Self::Err> {
        match s {
            "auto" => Ok(Mode::Auto),
            "packet" => Ok(Mode::Packet),
            "udp" => Ok(Mode::Udp),
            "xdp" => Ok(Mode::Xdp),
            _ => Err("one of auto, xdp, packet, udp"),
        }
    }
}

/// Settings of every datapath, used by whichever is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Options {
    /// AF_PACKET settings.
    pub packet: PacketConfig,
    /// UDP settings.
    pub udp: UdpConfig,
    /// AF_XDP settings.
    #[cfg(feature = "xdp")]
    pub xdp: XdpConfig,
}

/// An open AF_XDP datapath and its description (queues, copy mode, attach mode).
type OpenedXdp = (Box<dyn Datapath + Send>, String);

#[cfg(feature = "xdp")]
fn open_xdp(iface: &Interface, opts: &Options) -> Result<OpenedXdp, Error> {
    let x = XdpDatapath::open(iface, opts.xdp)?;
    let describe = x.describe();
    Ok((Box::new(x), describe))
}

#[cfg(not(feature = "xdp"))]
fn open_xdp(_: &Interface, _: &Options) -> Result<OpenedXdp, Error> {
    Err(Error::Unsupported(
        "rocev2-datapath was built without the `xdp` feature",
    ))
}

/// An open datapath and why it was chosen.
pub struct Opened {
    /// The datapath.
    pub datapath: Box<dyn Datapath + Send>,
    /// One sentence for logs and stats.
    pub reason: String,
}

impl fmt::Debug for Opened {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Opened")
            .field("datapath", &self.datapath.name())
            .field("reason", &self.reason)
            .finish()
    }
}

/// Opens the datapath `mode` asks for on `iface`.
///
/// # Errors
/// The chosen datapath's error; in [`Mode::Auto`], the UDP datapath's error when AF_PACKET was
/// not permitted, or AF_PACKET's error when it failed for another reason.
pub fn open(iface: &Interface, mode: Mode, opts: &Options) -> Result<Opened, Error> {
    let opened = match mode {
        Mode::Xdp => {
            let (datapath, describe) = open_xdp(iface, opts)?;
            Opened {
                reason: format!("xdp: asked for; {describe}"),
                datapath,
            }
        }
        Mode::Packet => Opened {
            datapath: Box::new(PacketDatapath::open(iface, opts.packet)?),
            reason: "packet: asked for".into(),
        },
        Mode::Udp => {
            let u = UdpDatapath::open(iface, opts.udp)?;
            Opened {
                reason: format!("udp: asked for; {}", u.describe()),
                datapath: Box::new(u),
            }
        }
        Mode::Auto => match open_xdp(iface, opts) {
            Ok((datapath, describe)) => Opened {
                reason: format!("xdp: steering program loaded; {describe}"),
                datapath,
            },
            Err(xdp) => match PacketDatapath::open(iface, opts.packet) {
                Ok(p) => Opened {
                    datapath: Box::new(p),
                    reason: format!("packet: AF_XDP unavailable ({xdp}); AF_PACKET permitted"),
                },
                Err(e) if e.is_permission() => {
                    let u = UdpDatapath::open(iface, opts.udp)?;
                    Opened {
                        reason: format!(
                            "udp: AF_XDP unavailable ({xdp}); AF_PACKET not permitted ({e}); \
                             IPv4 frames from senders with non-zero IP IDs cannot be \
                             ICRC-verified; {}",
                            u.describe()
                        ),
                        datapath: Box::new(u),
                    }
                }
                Err(e) => return Err(e),
            },
        },
    };
    // Frames to the host's own addresses come back to it ([`crate::loopback`]); over UDP the
    // kernel does that itself.
    let opened = match opened.datapath.carries_datagrams() {
        true => opened,
        false => Opened {
            datapath: Box::new(Loopback::new(iface.mac, opened.datapath)),
            ..opened
        },
    };
    tracing::info!(
        iface = %iface.name,
        datapath = opened.datapath.name(),
        reason = %opened.reason,
        "datapath opened"
    );
    Ok(opened)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_names_roundtrip() {
        for m in [Mode::Auto, Mode::Xdp, Mode::Packet, Mode::Udp] {
            assert_eq!(m.name().parse::<Mode>(), Ok(m));
        }
        assert!("af_xdp".parse::<Mode>().is_err());
    }

    #[cfg(not(feature = "xdp"))]
    #[test]
    fn xdp_without_the_feature_says_so() {
        let lo = Interface {
            name: "lo".into(),
            index: 1,
            mac: [0; 6],
            mtu: 65536,
            up: true,
            addrs: Vec::new(),
            rx_queues: 1,
        };
        let e = open(&lo, Mode::Xdp, &Options::default()).unwrap_err();
        assert!(
            e.to_string().contains("built without the `xdp` feature"),
            "{e}"
        );
    }
}
