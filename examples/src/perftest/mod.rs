//! perftest-compatible tools over the rocev2 user API: one implementation behind the six
//! binaries `ib_write_bw`, `ib_read_bw`, `ib_send_bw`, `ib_write_lat`, `ib_read_lat` and
//! `ib_send_lat`, each calling [`main`] with its [`Test`].
//!
//! Source: linux-rdma/perftest 6.06 (tag `v4.5-0.17`, Debian bookworm's perftest), the
//! `main` of `write_bw.c`, `read_bw.c`, `send_bw.c`, `write_lat.c`, `read_lat.c`,
//! `send_lat.c`, and in `perftest_resources.c` `run_iter_bw`, `run_iter_bw_server`,
//! `run_iter_lat_write`, `run_iter_lat`, `run_iter_lat_send`. Same command line ([`args`]),
//! TCP exchange (`rdmacm_shim::perftest`), traffic and output ([`report`]), so each pairs
//! with perftest's tool of the same name.
//!
//! The exchange sequence per test after versions, system data and MTU (each `H` one key
//! handshake, `C` the QP brought to RTS):
//!
//! ```text
//! write_bw, read_bw   H C H(remote printed) H | client runs | H, reports, H + "done"
//! send_bw, send_lat   H C H H(remote printed) | receives posted, H | both run | H + "done"
//! write_lat           H H C H(remote printed) H | both run | (no close)
//! read_lat            H H C H(remote printed) H | client runs | H + "done"
//! ```
//!
//! The traffic: the buffer is two halves of `max(size, cycle buffer)` bytes; the peer's
//! operations target the second, advertised half. bw clients keep `tx-depth` requests
//! outstanding, one in `cq-mod` signaled; the send_bw server keeps `rx-depth` receives
//! posted. write_lat ping-pongs: each side writes the message with its last byte set to its
//! message count and waits for the peer's count to appear in the last byte of its own second
//! half (the server sends first); send_lat ping-pongs SENDs (the client sends first); read_lat
//! posts one READ at a time. Latency is the interval between successive posts, halved for the
//! ping-pongs.
//!
//! A wait on the exchange connection leaves the engine to its progress thread or the daemon,
//! and drives it itself only when nothing else does ([`Driven`], [`crate::wait_readable`]); a
//! write_lat side polling its memory drives it.
//!
//! Deviations: one RC QP (`-q 1`), iterations only (no `-D`), no rdma_cm (`-R`: the CM works,
//! `rping` and `ucmatose` use it, but these tools connect through perftest's TCP exchange
//! only), no bidirectional (`-b`) or inline data; no rocev2 extensions (perftest's exchange has
//! no place for an offer, so the QP sends no REXT field whatever the device's congestion-control
//! scheme: `write_bw` and `rc_pingpong --rext` carry them between rocev2 hosts); a bw client
//! always targets the start of the peer's half instead of cycling through the cycle buffer. (The send_bw server measures from its
//! first receive, as perftest's does; a datapath that batches receives inflates that figure on
//! short runs.) Ours: `--datapath`, `--poll`/`--spin-us`/`--busy-poll`,
//! `--accept-unverified-icrc`, and the hidden `--check` (both sides rocev2's): the data source
//! is filled with a pattern and the side the data lands on compares it, printing
//! `check: OK` or failing.

pub mod args;
mod bw;
mod lat;
pub mod report;

use anyhow::{Context, Result, bail};
use clap::{CommandFactory, FromArgMatches};
use rdmacm_shim::perftest::{Exchange, KeyMsg, PerftestError, Setup};
use rocev2::{
    AccessFlags, ConnectOptions, Cq, Device, DeviceConfig, Mr, Mtu, Qp, QpConfig, RecvWr, RemoteQp,
};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// The operation a test measures (perftest's `VerbType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// SEND/RECV.
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
}

/// Bandwidth or latency (perftest's `TestType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Throughput of a stream of requests.
    Bw,
    /// Time of one request.
    Lat,
}

/// One of the six tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Test {
    /// What it sends.
    pub verb: Verb,
    /// What it measures.
    pub kind: Kind,
}

impl Test {
    /// perftest's name for it, `ib_<verb>_<kind>`.
    pub fn name(&self) -> &'static str {
        match (self.verb, self.kind) {
            (Verb::Send, Kind::Bw) => "ib_send_bw",
            (Verb::Write, Kind::Bw) => "ib_write_bw",
            (Verb::Read, Kind::Bw) => "ib_read_bw",
            (Verb::Send, Kind::Lat) => "ib_send_lat",
            (Verb::Write, Kind::Lat) => "ib_write_lat",
            (Verb::Read, Kind::Lat) => "ib_read_lat",
        }
    }

    /// The verb as the header names it (`testsStr`).
    pub fn verb_name(&self) -> &'static str {
        match self.verb {
            Verb::Send => "Send",
            Verb::Write => "RDMA_Write",
            Verb::Read => "RDMA_Read",
        }
    }
}

/// The exchange connection, as a stream whose reads wait as [`crate::wait_readable`] does.
pub struct Driven<'a> {
    dev: &'a mut Device,
    tcp: &'a TcpStream,
}

impl Read for Driven<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        crate::wait_readable(self.dev, self.tcp).map_err(std::io::Error::other)?;
        (&*self.tcp).read(buf)
    }
}

impl Write for Driven<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        (&*self.tcp).write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Everything a run needs: device, resources, the connection and both key messages.
pub struct Ctx {
    dev: Device,
    tcp: TcpStream,
    client: bool,
    test: Test,
    args: args::Args,
    params: args::Params,
    mr: Mr,
    /// Bytes in each half of the buffer (`BUFF_SIZE`).
    half: u64,
    qp: Qp,
    send_cq: Cq,
    recv_cq: Cq,
    mine: KeyMsg,
    peer: KeyMsg,
}

impl Ctx {
    /// One exchange step with the engine kept running.
    fn step<T>(
        &mut self,
        f: impl FnOnce(&mut Exchange<Driven<'_>>) -> Result<T, PerftestError>,
    ) -> Result<T> {
        let driven = Driven {
            dev: &mut self.dev,
            tcp: &self.tcp,
        };
        Ok(f(&mut Exchange::new(driven, self.client))?)
    }

    /// One key handshake (a barrier once connected).
    fn sync(&mut self) -> Result<KeyMsg> {
        let mine = self.mine;
        self.step(|x| x.hand_shake(&mine))
    }

    /// `ctx_close_connection`.
    fn close(&mut self) -> Result<()> {
        let mine = self.mine;
        self.step(|x| x.close(&mine))
    }

    /// Posts `n` receives of `size` bytes into the second half of the buffer.
    fn post_recvs(&mut self, size: u64, n: u32) -> Result<()> {
        for _ in 0..n {
            let wr = RecvWr {
                wr_id: 0,
                sg_list: vec![self.mr.sge(self.half, size as u32)?],
            };
            self.dev.post_recv(self.qp, wr)?;
        }
        Ok(())
    }

    /// Drives the engine until `done` holds, for at most 30 s.
    fn drive_until(&mut self, what: &str, mut done: impl FnMut(&Device) -> bool) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.dev.poll()?;
            if done(&self.dev) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("timed out waiting for {what}");
            }
            self.dev.wait(&[])?;
        }
    }

    /// The `--check` pattern byte at `offset` of the `client`'s (or server's) buffer.
    fn pattern(client: bool, offset: u64) -> u8 {
        let x = offset.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(client) << 63;
        (x >> 56) as u8 ^ offset as u8
    }

    /// `--check`: `len` bytes at `dst` of our buffer must equal the peer's pattern from `src`.
    fn check(&self, dst: u64, src: u64, len: u64) -> Result<()> {
        let b = self.dev.mr_guard(&self.mr)?;
        let bad = (0..len).find(|&k| b[(dst + k) as usize] != Ctx::pattern(!self.client, src + k));
        match bad {
            None => {
                println!("check: OK ({len} bytes as the peer sent them)");
                Ok(())
            }
            Some(k) => bail!("check: MISMATCH at byte {k} of {len}"),
        }
    }
}

/// Runs `test` with the process's command line, as perftest's tool of that name.
///
/// # Errors
/// Any failure, as a sentence for the user.
pub fn main(test: Test) -> Result<()> {
    let m = args::Args::command().name(test.name()).get_matches();
    let args = args::Args::from_arg_matches(&m)?;
    if args.version {
        println!("Version: {}", rdmacm_shim::perftest::VERSION);
        return Ok(());
    }
    let params = args.params(test)?;
    let dev = args.device.open(&args.dev, DeviceConfig::default())?;
    let my_ip = crate::local_ip(&dev, args.gid_index, "-x")?;
    let if_mtu = dev
        .interface()
        .path_mtu(my_ip.is_ipv6())
        .context("the interface's MTU is below 256 bytes of payload")?;
    let mtu = match args.mtu {
        Some(m) => Mtu::from_bytes(m)
            .with_context(|| format!("-m {m}: one of 256, 512, 1024, 2048, 4096"))?
            .min(if_mtu),
        None => if_mtu,
    };

    let client = args.servername.is_some();
    let tcp = match &args.servername {
        None => {
            println!();
            println!("************************************");
            println!("* Waiting for client to connect... *");
            println!("************************************");
            // perftest listens on IPv4 (AF_INET) only.
            let l = TcpListener::bind((Ipv4Addr::UNSPECIFIED, args.port))
                .with_context(|| format!("Couldn't listen to port {}", args.port))?;
            l.accept()?.0
        }
        Some(host) => {
            let addrs: Vec<_> = (host.as_str(), args.port)
                .to_socket_addrs()
                .with_context(|| format!("resolving {host}"))?
                .filter(|a| a.is_ipv4())
                .collect();
            TcpStream::connect(&addrs[..])
                .with_context(|| format!("Couldn't connect to {host}:{}", args.port))?
        }
    };
    tcp.set_nodelay(true)?;

    // Versions, system data, MTU; then the resources, sized by the agreed cycle buffer.
    let my_setup = Setup {
        cycle_buffer: 4096,
        cache_line: 64,
        mtu_code: mtu.code(),
    };
    let (_, agreed) = Exchange::new(&tcp, client).setup(&my_setup)?;
    let mtu = Mtu::from_code(agreed.mtu_code).unwrap_or(mtu).bytes();
    let max_size = params.sizes.iter().copied().max().unwrap_or(1);
    let half = max_size.max(agreed.cycle_buffer.max(1) as u64);
    let pd = dev.alloc_pd()?;
    let mut buf = vec![0u8; (2 * half) as usize];
    if args.check {
        for (k, b) in buf.iter_mut().enumerate() {
            *b = Ctx::pattern(client, k as u64);
        }
    }
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mr = dev.register(pd, buf, access)?;
    let send_cq = dev.create_cq(params.tx_depth as usize + 16)?;
    let recv_cq = dev.create_cq(params.rx_depth as usize + 16)?;
    let mut qcfg = QpConfig::new(pd.id(), send_cq.id(), recv_cq.id());
    qcfg.max_send_wr = params.tx_depth.max(1);
    qcfg.max_recv_wr = params.rx_depth.max(1);
    let qp = dev.create_qp(qcfg)?;
    let psn = rocev2::random_psn();
    let mine = KeyMsg {
        lid: 0,
        out_reads: params.out_reads,
        qpn: qp.qpn().value(),
        psn,
        rkey: mr.rkey().value(),
        vaddr: mr.addr() + half,
        gid: rocev2::gid(my_ip).octets(),
        srqn: 0,
    };
    report::print_header(&report::Header {
        test,
        dev: &args.dev,
        client,
        params: &params,
        mtu,
        gid_index: args.gid_index,
        datapath: dev.datapath_name(),
    });
    let mut c = Ctx {
        dev,
        tcp,
        client,
        test,
        args,
        params,
        mr,
        half,
        qp,
        send_cq,
        recv_cq,
        mine,
        peer: mine,
    };

    // The handshakes around bringing the QP up (see the module doc).
    c.peer = c.sync()?;
    if test.kind == Kind::Lat && test.verb != Verb::Send {
        c.sync()?;
    }
    if c.peer.ip().is_ipv4() != my_ip.is_ipv4() {
        bail!("Found Incompatibility issue with GID types (IPv4 and IPv6)");
    }
    let opts = ConnectOptions {
        local_psn: psn,
        mtu: Mtu::from_bytes(mtu).context("agreed MTU")?,
        rd_atomic: c.peer.out_reads.clamp(1, args::MAX_OUT_READS) as u8,
        ..ConnectOptions::default()
    };
    let remote = RemoteQp {
        qpn: rocev2::Qpn::new(c.peer.qpn),
        psn: c.peer.psn,
        ip: c.peer.ip(),
        mac: None,
    };
    c.dev.connect(c.qp, &remote, &opts)?;
    if test.verb == Verb::Send {
        c.sync()?;
    }
    report::print_dest("local", test.verb, &c.mine);
    c.peer = c.sync()?;
    report::print_dest("remote", test.verb, &c.peer);
    if test.verb != Verb::Send {
        c.sync()?;
    }

    match test.kind {
        Kind::Bw => bw::run(&mut c)?,
        Kind::Lat => lat::run(&mut c)?,
    }
    println!("{}", report::RULE);
    // The peer's last requests may still need our ACK: keep the engine running until it left.
    if let Err(e) = c.dev.drain(Duration::from_secs(2)) {
        eprintln!("{}: draining the QP: {e}", test.name());
    }
    Ok(())
}
