//! Output shared by the ping-pong examples (`rc_pingpong`, `ud_pingpong`, `tcp_pingpong`,
//! `dp_pingpong`), so the RDMA and TCP figures that `deploy/bench/` compares are computed and
//! printed the same way, and the RDMA pair's exchange loop ([`pingpong`]); the flags of how the
//! rocev2 tools (`rc_pingpong`, `write_bw`, the perftest tools) open their device (in process or
//! attached to `rocev2d`) and wait; the address a GID index picks; and the interface an rdma_cm
//! tool (`rping`, `ucmatose`) opens for an address.

pub mod perftest;
pub mod pingpong;
pub mod raw;

use anyhow::Context as _;
use rocev2::{DatapathKind, Device, DeviceConfig, WaitMode};
use rocev2_core::time::Duration as CoreDuration;
use std::path::PathBuf;
use std::time::Duration;

/// The CM tools' device options (`rping`, `ucmatose`): the interface (default: the one holding
/// the tool's address, or the route's to it, [`interface_for`]) and how to open it.
#[derive(clap::Args, Debug, Clone)]
pub struct CmDeviceArgs {
    /// The interface. Ours.
    #[arg(long = "iface")]
    pub iface: Option<String>,
    /// The datapath, in-process or attached, and the wait mode.
    #[command(flatten)]
    pub device: DeviceArgs,
}

impl CmDeviceArgs {
    /// Opens the device on the interface for `addr` (`local`: an address of this host, else
    /// the peer's); returns the interface's name with it.
    ///
    /// # Errors
    /// No interface for `addr`, or the device does not open.
    pub fn open(&self, addr: std::net::IpAddr, local: bool) -> anyhow::Result<(String, Device)> {
        let iface = interface_for(self.iface.as_deref(), addr, local)?;
        let dev = self.device.open(&iface, DeviceConfig::default())?;
        Ok((iface, dev))
    }
}

/// How every rocev2 tool opens its device (in-process with a datapath, or attached to the
/// daemon serving the interface; the UDP datapath's options) and how it waits between events
/// (`rocev2_datapath::driver`, "WaitMode"): flattened into each tool's own options, so they all
/// take the same flags.
#[derive(clap::Args, Debug, Clone)]
pub struct DeviceArgs {
    /// Datapath: auto (best available), xdp (AF_XDP, root), packet (AF_PACKET, needs
    /// CAP_NET_RAW) or udp. Ours.
    #[arg(long = "datapath", default_value = "auto")]
    pub datapath: DatapathKind,
    /// UDP datapath: accept IPv4 frames whose ICRC cannot be verified (rdma_rxe covers the
    /// IPv4 Identification, which a UDP socket does not see); needed to talk to rxe over UDP
    /// sockets. Ours.
    #[arg(long = "accept-unverified-icrc")]
    pub accept_unverified_icrc: bool,
    /// Wait mode: sleep (ppoll), adaptive (busy-poll for --spin-us after activity, then ppoll)
    /// or spin (busy-poll, one core at 100%). Ours.
    #[arg(long = "poll", default_value = "adaptive")]
    pub poll: WaitMode,
    /// Spin window of --poll adaptive, in microseconds (default 200). Ours.
    #[arg(long = "spin-us")]
    pub spin_us: Option<u64>,
    /// Same as --poll spin. Ours.
    #[arg(long = "busy-poll", conflicts_with = "poll")]
    pub busy_poll: bool,
    /// Use the `rocev2d` serving the interface instead of an engine in this process (its
    /// control socket @rocev2d/IFACE of this network namespace, or --socket). Ours.
    #[arg(long = "attach")]
    pub attach: bool,
    /// The daemon's control socket, with --attach. Ours.
    #[arg(long = "socket", requires = "attach")]
    pub socket: Option<PathBuf>,
    /// UDP datapath: send runs of equal IPv6 datagrams as one `UDP_SEGMENT` entry (GSO;
    /// docs/datapath.md): the default, so this only undoes an earlier --no-udp-gso or a
    /// configuration's `gso = false`. Ours.
    #[arg(long = "udp-gso", overrides_with = "no_udp_gso")]
    pub udp_gso: bool,
    /// UDP datapath: send each datagram as its own entry (no GSO). Ours.
    #[arg(long = "no-udp-gso", overrides_with = "udp_gso")]
    pub no_udp_gso: bool,
    /// UDP datapath: take one datagram per receive entry instead of coalesced buffers
    /// (`UDP_GRO`). Ours.
    #[arg(long = "no-udp-gro")]
    pub no_udp_gro: bool,
}

impl DeviceArgs {
    /// The wait mode the flags ask for.
    ///
    /// # Errors
    /// `--spin-us` with a mode other than adaptive.
    pub fn wait_mode(&self) -> anyhow::Result<WaitMode> {
        let mode = if self.busy_poll {
            WaitMode::Spin
        } else {
            self.poll
        };
        match self.spin_us {
            None => Ok(mode),
            Some(us) => mode
                .with_spin(CoreDuration::from_micros(us))
                .map_err(|e| anyhow::anyhow!("--spin-us {us} with --poll {}: {e}", mode.name())),
        }
    }

    /// Opens interface `iface` as the flags say: attached to its daemon, or in-process with
    /// the flags' datapath and `cfg` (whose wait mode and UDP options are set from the flags).
    ///
    /// # Errors
    /// Bad flags; the device could not be opened or attached (the message says which).
    pub fn open(&self, iface: &str, mut cfg: DeviceConfig) -> anyhow::Result<Device> {
        cfg.driver.wait = self.wait_mode()?;
        cfg.datapath.udp.accept_unverified_icrc = self.accept_unverified_icrc;
        if self.udp_gso || self.no_udp_gso {
            cfg.datapath.udp.gso = self.udp_gso;
        }
        cfg.datapath.udp.gro = !self.no_udp_gro;
        let dev = if self.attach {
            let path = self
                .socket
                .clone()
                .unwrap_or_else(|| rocev2_ipc::default_socket(iface));
            Device::attach_socket_with(&path, cfg.driver.wait)
                .with_context(|| format!("attaching to the rocev2d serving {iface}"))?
        } else {
            Device::open_with(iface, self.datapath, cfg)
                .with_context(|| format!("opening {iface}"))?
        };
        if std::env::var_os("ROCEV2_VERBOSE").is_some() {
            eprintln!("{iface}: {}", dev.describe());
        }
        Ok(dev)
    }

    /// Opens `iface` as [`DeviceArgs::open`] does or, without a name, the first interface (by
    /// name, loopback excepted) that opens: the ibverbs examples' `-d` (rdma-core: the first
    /// RDMA device).
    ///
    /// # Errors
    /// The named interface could not be opened, or none could.
    pub fn open_or_first(&self, iface: Option<&str>, cfg: DeviceConfig) -> anyhow::Result<Device> {
        if let Some(n) = iface {
            return self.open(n, cfg);
        }
        let mut names: Vec<String> = rocev2::Interface::names()?
            .into_iter()
            .filter(|n| n != "lo")
            .collect();
        names.sort();
        for n in &names {
            if let Ok(d) = self.open(n, cfg) {
                return Ok(d);
            }
        }
        anyhow::bail!("no usable Ethernet interface among {names:?}")
    }
}

/// A TCP listener on `port` of every address: IPv6 (dual-stack where the host allows), else
/// IPv4 only. The out-of-band exchanges of the ping-pongs and `write_bw` listen with it.
///
/// # Errors
/// Neither family could bind the port.
pub fn listen(port: u16) -> anyhow::Result<std::net::TcpListener> {
    use std::net::TcpListener;
    TcpListener::bind(("::", port))
        .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
        .with_context(|| format!("listening on TCP port {port}"))
}

/// The local address of GID `index` in the device's table (rdma_rxe's order, docs/datapath.md
/// "GID table"), as `ibv_rc_pingpong -g` and perftest's `-x` pick it; without an index, the
/// interface's first IPv4 address, else its first IPv6 one. `flag` names the option in errors.
///
/// # Errors
/// An index past the table, or an interface without an address.
pub fn local_ip(
    dev: &rocev2::Device,
    index: Option<usize>,
    flag: &str,
) -> anyhow::Result<std::net::IpAddr> {
    use anyhow::Context as _;
    match index {
        Some(i) => {
            let gids = dev.gids();
            let gid = gids
                .get(i)
                .with_context(|| format!("{flag} {i}: the interface has {} GIDs", gids.len()))?;
            Ok(rocev2::gid_to_ip(*gid))
        }
        None => Ok(dev.source_ip(false).or_else(|_| dev.source_ip(true))?),
    }
}

/// Waits until `tcp` has bytes to read (or its peer closed it), leaving them there: a tool's
/// wait for its out-of-band peer (`write_bw`'s report, perftest's exchange). The tools' devices
/// always have a driver, their progress thread or the daemon, so the caller sleeps on the socket
/// alone, with a [`Device::poll`] every 100 ms to learn that the engine stopped or the daemon
/// went away. (Driving too, with [`Device::poll`] and [`Device::wait`], would race the progress
/// thread for the engine's lock on every packet: 66,000 contended lock hand-offs in a `write_bw`
/// server's 1 GiB.)
///
/// # Errors
/// The device's, or the socket's.
pub fn wait_readable(dev: &Device, tcp: &std::net::TcpStream) -> anyhow::Result<()> {
    use std::io::ErrorKind;
    tcp.set_read_timeout(Some(Duration::from_millis(100)))?;
    let ready = loop {
        match tcp.peek(&mut [0]) {
            Ok(_) => break Ok(()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if let Err(e) = dev.poll() {
                    break Err(e.into());
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => break Err(e.into()),
        }
    };
    tcp.set_read_timeout(None)?;
    ready
}

/// This process's CPU time (user + system) so far.
pub fn cpu_time() -> Duration {
    rocev2_datapath::clock::cpu_time().into()
}

/// Prints the CPU time this process used per round trip while it ran `iters` of them
/// (`cpu` is [`cpu_time`]'s difference over the loop), so a bench can add up both sides.
pub fn print_cpu(cpu: Duration, iters: u32) {
    println!(
        "cpu: {:.2} usec per round trip (user + system of this process over {iters} round trips)",
        cpu.as_secs_f64() * 1e6 / f64::from(iters.max(1))
    );
}

/// Prints ibv_rc_pingpong's two summary lines for `iters` round trips of `size` bytes each way.
pub fn print_summary(size: u64, iters: u32, elapsed: Duration) {
    let usec = elapsed.as_secs_f64() * 1e6;
    let bytes = size * u64::from(iters) * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{iters} iters in {:.2} seconds = {:.2} usec/iter",
        usec / 1e6,
        usec / f64::from(iters)
    );
}

/// Prints the median, p99 and maximum of the round trips and how many took over 1 ms; a
/// server skips its first, which includes waiting for the client's first message.
pub fn print_round_trips(rtts: &[Duration], server: bool) {
    let skip = usize::from(server).min(rtts.len().saturating_sub(1));
    let mut v: Vec<f64> = rtts[skip..].iter().map(|d| d.as_secs_f64() * 1e6).collect();
    if v.is_empty() {
        return;
    }
    v.sort_by(f64::total_cmp);
    let pct = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    // Single descheduled round trips (a scheduler slice is ~3 ms) hide below the p99.
    let slow = v.iter().filter(|&&us| us > 1000.0).count();
    println!(
        "round trip: median {:.2} usec, p99 {:.2} usec, {} samples, max {:.2} usec, {slow} over 1 ms",
        pct(0.5),
        pct(0.99),
        v.len(),
        pct(1.0)
    );
}

/// The interface an rdma_cm tool opens: `iface` if given, else the one holding `addr` (a
/// server's bind address, `local`), else the one the route to `addr` leaves by (a client's).
///
/// # Errors
/// No route, or no interface holds the address.
pub fn interface_for(
    iface: Option<&str>,
    addr: std::net::IpAddr,
    local: bool,
) -> anyhow::Result<String> {
    use rocev2_datapath::{Interface, neigh};
    if let Some(n) = iface {
        return Ok(n.to_owned());
    }
    let oif = if local {
        None
    } else {
        Some(neigh::route(addr).context("no route to the server")?.oif)
    };
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/net")?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    for n in names {
        let Ok(i) = Interface::by_name(&n) else {
            continue;
        };
        let found = match oif {
            Some(oif) => i.index == oif,
            None => i.addrs.iter().any(|x| x.ip == addr),
        };
        if found {
            return Ok(n);
        }
    }
    anyhow::bail!("no interface for {addr} (name one with --iface)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};
    use std::net::{TcpListener, TcpStream};

    /// The wait returns once the peer's bytes arrive, leaves them to read, and gives the socket
    /// its blocking reads back.
    #[test]
    fn a_wait_for_the_peer_leaves_its_bytes_and_the_socket_blocking() {
        let (dev, _peer) = Device::pair().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let writer = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            std::thread::sleep(Duration::from_millis(250));
            s.write_all(b"DONE").unwrap();
            s
        });
        let (mut tcp, _) = listener.accept().unwrap();
        wait_readable(&dev, &tcp).unwrap();
        assert_eq!(tcp.read_timeout().unwrap(), None);
        let mut got = [0u8; 4];
        tcp.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"DONE");
        drop(writer.join().unwrap());
    }
}
