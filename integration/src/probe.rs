//! Traffic probes that check a testbed with nothing but `std::net`: a UDP echo server, a UDP
//! pinger, a paced UDP blaster and a counting sink. `rocev2-testbed probe …` runs them inside a
//! host (`rocev2-testbed exec NAME HOST -- rocev2-testbed probe …`); each prints `ready` on
//! stderr once its socket is bound and its report as one JSON document on stdout, so a test
//! waits with [`crate::Process::wait_for_line`] and reads the report with
//! [`crate::Captured::json`].
//!
//! They exist because ping, iperf3 and netcat are not guaranteed on the machine, and because
//! the checks need exact control of the UDP source port (the ECMP hash input) and exact
//! counts.
//!
//! Deviations: none.

use serde::{Deserialize, Serialize};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// UDP + IPv4 + Ethernet header bytes around a datagram's payload.
pub const UDP_IPV4_OVERHEAD_BYTES: u64 = 8 + 20 + 14;
/// UDP + IPv6 + Ethernet header bytes around a datagram's payload.
pub const UDP_IPV6_OVERHEAD_BYTES: u64 = 8 + 40 + 14;

/// Largest datagram the probes read: more than any MTU the testbed allows.
const RECV_BUF_BYTES: usize = 65536;

/// A wildcard socket address of `target`'s family, so IPv4 and IPv6 pings use native sockets.
fn wildcard(target: &SocketAddr, port: u16) -> SocketAddr {
    match target {
        SocketAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port),
        SocketAddr::V6(_) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port),
    }
}

/// A UDP echo server on one or more ports, both IPv4 and IPv6 (one `[::]` socket per port,
/// which on Linux also receives IPv4 unless `net.ipv6.bindv6only` is set).
#[derive(Debug)]
pub struct EchoServer {
    sockets: Vec<UdpSocket>,
}

impl EchoServer {
    /// Bind every port.
    ///
    /// # Errors
    /// The first bind that fails (port in use, say).
    pub fn bind(ports: &[u16]) -> io::Result<EchoServer> {
        let sockets = ports
            .iter()
            .map(|&p| UdpSocket::bind(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), p)))
            .collect::<io::Result<_>>()?;
        Ok(EchoServer { sockets })
    }

    /// Echo every datagram back to its sender, forever (one thread per port).
    ///
    /// # Errors
    /// Returns only when a socket fails.
    pub fn run(self) -> io::Result<()> {
        let (tx, rx) = mpsc::channel();
        for socket in self.sockets {
            let tx = tx.clone();
            thread::spawn(move || {
                let mut buf = vec![0u8; RECV_BUF_BYTES];
                let err = loop {
                    match socket.recv_from(&mut buf) {
                        Ok((n, from)) => {
                            if let Err(e) = socket.send_to(&buf[..n], from) {
                                break e;
                            }
                        }
                        Err(e) => break e,
                    }
                };
                let _ = tx.send(err);
            });
        }
        drop(tx);
        match rx.recv() {
            Ok(e) => Err(e),
            Err(_) => Ok(()),
        }
    }
}

/// What to ping.
#[derive(Debug, Clone)]
pub struct PingSpec {
    /// Echo servers to ping.
    pub targets: Vec<SocketAddr>,
    /// Source ports to ping from, each in turn; empty: one ephemeral port.
    pub src_ports: Vec<u16>,
    /// Datagrams per (source port, target).
    pub count: u32,
    /// How long to wait for each echo.
    pub timeout: Duration,
}

/// The outcome for one (source port, target).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PingResult {
    /// The echo server.
    pub target: SocketAddr,
    /// The source port used.
    pub src_port: u16,
    /// Datagrams sent.
    pub sent: u32,
    /// Echoes received (each matched to its request by content).
    pub received: u32,
    /// Slowest echo, in microseconds.
    pub max_rtt_us: u64,
}

/// Everything [`ping`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PingReport {
    /// One entry per (source port, target), source ports outermost.
    pub results: Vec<PingResult>,
}

impl PingReport {
    /// Entries with at least one echo missing.
    pub fn lossy(&self) -> impl Iterator<Item = &PingResult> {
        self.results.iter().filter(|r| r.received < r.sent)
    }
}

/// Ping every target from every source port, one datagram at a time.
///
/// # Errors
/// A socket that cannot be bound or used (a source port in use, an unreachable network).
pub fn ping(spec: &PingSpec) -> io::Result<PingReport> {
    let ports = if spec.src_ports.is_empty() {
        vec![0]
    } else {
        spec.src_ports.clone()
    };
    let mut report = PingReport::default();
    let mut buf = vec![0u8; RECV_BUF_BYTES];
    for &port in &ports {
        for target in &spec.targets {
            // One socket per target: a port bound on `[::]` would also hold it for IPv4.
            let socket = UdpSocket::bind(wildcard(target, port))?;
            socket.set_read_timeout(Some(spec.timeout))?;
            let src_port = socket.local_addr()?.port();
            let mut result = PingResult {
                target: *target,
                src_port,
                sent: 0,
                received: 0,
                max_rtt_us: 0,
            };
            for seq in 0..spec.count {
                let payload = format!("rv2-ping {} {src_port} {target} {seq}", std::process::id());
                let sent_at = Instant::now();
                socket.send_to(payload.as_bytes(), target)?;
                result.sent += 1;
                // Skip late echoes of earlier requests; give up at the timeout.
                while let Some(left) = spec.timeout.checked_sub(sent_at.elapsed()) {
                    socket.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
                    match socket.recv_from(&mut buf) {
                        Ok((n, _)) if buf[..n] == *payload.as_bytes() => {
                            result.received += 1;
                            let rtt = sent_at.elapsed().as_micros();
                            result.max_rtt_us = result.max_rtt_us.max(rtt as u64);
                            break;
                        }
                        Ok(_) => {}
                        Err(e) if is_timeout(&e) => break,
                        // An ICMP error (port unreachable) is a lost echo, not a failed probe.
                        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => break,
                        Err(e) => return Err(e),
                    }
                }
            }
            report.results.push(result);
        }
    }
    Ok(report)
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// A UDP flood toward a sink.
#[derive(Debug, Clone)]
pub struct BlastSpec {
    /// The sink.
    pub target: SocketAddr,
    /// Source port (0: ephemeral).
    pub src_port: u16,
    /// UDP payload bytes per datagram.
    pub payload_bytes: usize,
    /// How long to send.
    pub duration: Duration,
    /// Pace to this many payload bits per second; as fast as possible when `None`. Pacing a
    /// little above a bottleneck keeps it full without burning a whole core on drops.
    pub rate_bps: Option<u64>,
}

/// What [`blast`] sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlastReport {
    /// Datagrams sent.
    pub packets: u64,
    /// Payload bytes sent.
    pub bytes: u64,
    /// Sends that failed (a full local qdisc answers ENOBUFS); not counted in `packets`.
    pub send_errors: u64,
    /// Time spent sending, in nanoseconds.
    pub elapsed_ns: u64,
}

/// Send datagrams of `payload_bytes` to the target for `duration`.
///
/// # Errors
/// A socket that cannot be bound.
pub fn blast(spec: &BlastSpec) -> io::Result<BlastReport> {
    let socket = UdpSocket::bind(wildcard(&spec.target, spec.src_port))?;
    let payload = vec![0x5a; spec.payload_bytes];
    let mut report = BlastReport::default();
    let start = Instant::now();
    while start.elapsed() < spec.duration {
        if let Some(rate) = spec.rate_bps.filter(|r| *r > 0) {
            let due_ns = u128::from(report.bytes) * 8 * 1_000_000_000 / u128::from(rate);
            let due = Duration::from_nanos(u64::try_from(due_ns).unwrap_or(u64::MAX));
            if let Some(ahead) = due.checked_sub(start.elapsed())
                && ahead > Duration::from_micros(200)
            {
                thread::sleep(ahead);
            }
        }
        match socket.send_to(&payload, spec.target) {
            Ok(n) => {
                report.packets += 1;
                report.bytes += n as u64;
            }
            Err(_) => report.send_errors += 1,
        }
    }
    report.elapsed_ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    Ok(report)
}

/// What [`sink`] received.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkReport {
    /// Datagrams received.
    pub packets: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// Time from the first datagram to the last, in nanoseconds.
    pub first_to_last_ns: u64,
}

impl SinkReport {
    /// The received rate in bits per second of Ethernet frames (what tc shapes), between the
    /// first and the last datagram; `ipv6` picks the header size.
    pub fn frame_rate_bps(&self, ipv6: bool) -> f64 {
        let overhead = if ipv6 {
            UDP_IPV6_OVERHEAD_BYTES
        } else {
            UDP_IPV4_OVERHEAD_BYTES
        };
        let frame_bytes = self.bytes + self.packets * overhead;
        if self.first_to_last_ns == 0 {
            return 0.0;
        }
        frame_bytes as f64 * 8.0 * 1e9 / self.first_to_last_ns as f64
    }
}

/// Count datagrams arriving on `port` (IPv4 and IPv6) until none came for `idle` after the
/// first, or `max` has passed. `ready` is called once the socket is bound.
///
/// # Errors
/// A socket that cannot be bound or read.
pub fn sink(
    port: u16,
    idle: Duration,
    max: Duration,
    ready: impl FnOnce(),
) -> io::Result<SinkReport> {
    let socket = UdpSocket::bind(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port))?;
    ready();
    let mut buf = vec![0u8; RECV_BUF_BYTES];
    let mut report = SinkReport::default();
    let start = Instant::now();
    let mut first: Option<Instant> = None;
    let mut last = start;
    loop {
        let left = max.saturating_sub(start.elapsed());
        if left.is_zero() {
            break;
        }
        let wait = if first.is_some() {
            idle.min(left)
        } else {
            left
        };
        socket.set_read_timeout(Some(wait))?;
        match socket.recv_from(&mut buf) {
            Ok((n, _)) => {
                last = Instant::now();
                first.get_or_insert(last);
                report.packets += 1;
                report.bytes += n as u64;
            }
            Err(e) if is_timeout(&e) => {
                if first.is_some() {
                    break;
                }
            }
            Err(e) => return Err(e),
        }
    }
    if let Some(first) = first {
        report.first_to_last_ns = u64::try_from((last - first).as_nanos()).unwrap_or(u64::MAX);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    /// A free UDP port on loopback (bound and released; good enough for a unit test).
    fn free_port() -> u16 {
        UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[test]
    fn ping_echo_over_loopback() {
        let server = EchoServer::bind(&[0]).unwrap();
        let port = server.sockets[0].local_addr().unwrap().port();
        thread::spawn(move || server.run());
        let spec = PingSpec {
            targets: vec![
                SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
                SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), port),
            ],
            src_ports: vec![],
            count: 3,
            timeout: Duration::from_secs(2),
        };
        let report = ping(&spec).unwrap();
        assert_eq!(report.results.len(), 2);
        assert_eq!(report.lossy().count(), 0, "{report:?}");
    }

    #[test]
    fn ping_without_server_loses_everything() {
        let spec = PingSpec {
            targets: vec![SocketAddr::new(
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                free_port(),
            )],
            src_ports: vec![],
            count: 2,
            timeout: Duration::from_millis(50),
        };
        let report = ping(&spec).unwrap();
        assert_eq!((report.results[0].sent, report.results[0].received), (2, 0));
    }

    #[test]
    fn blast_into_sink_counts_bytes() {
        let port = free_port();
        let (tx, rx) = mpsc::channel();
        let sink = thread::spawn(move || {
            sink(
                port,
                Duration::from_millis(200),
                Duration::from_secs(5),
                || {
                    let _ = tx.send(());
                },
            )
        });
        rx.recv().unwrap();
        let sent = blast(&BlastSpec {
            target: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
            src_port: 0,
            payload_bytes: 1000,
            duration: Duration::from_millis(100),
            rate_bps: Some(8_000_000),
        })
        .unwrap();
        let got = sink.join().unwrap().unwrap();
        // 8 Mbit/s for 0.1 s = 100 datagrams of 1000 bytes, give or take the pacing edge.
        assert!((90..=110).contains(&sent.packets), "{sent:?}");
        assert_eq!(got.bytes, got.packets * 1000);
        assert!(
            got.packets > 0 && got.packets <= sent.packets,
            "{got:?} {sent:?}"
        );
    }

    #[test]
    fn frame_rate_adds_headers() {
        let r = SinkReport {
            packets: 1000,
            bytes: 1000 * 1458,
            first_to_last_ns: 1_000_000_000,
        };
        // (1458 + 42) bytes × 1000 per second = 12 Mbit/s.
        assert_eq!(r.frame_rate_bps(false), 12_000_000.0);
    }
}
