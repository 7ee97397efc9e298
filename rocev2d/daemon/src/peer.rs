//! `rocev2d peer`: one RC QP against another `rocev2d peer`, over a real interface, with a
//! scripted workload whose every byte is checked. The namespace tests run one peer per
//! namespace (`rocev2d/daemon/tests/wire_*.rs`); it is also the quickest by-hand check of a
//! wire.
//!
//! The server (`--listen PORT`) and the client (`--connect ADDR:PORT`) exchange their QP
//! number, first PSN, GID (as an IP address), R_Key, buffer address and length as one JSON line
//! each over TCP, as `ibv_rc_pingpong` exchanges its `LID:QPN:PSN:GID`; the destination MAC comes
//! from the kernel's neighbour table ([`rocev2_datapath::neigh`]), not from the peer. The TCP
//! connection then carries the client's questions about the server's memory and counters
//! (`crc`, `read`, `fill`, `recvs`, `stats`, `quit`), so the client can verify what arrived.
//!
//! Workloads (client side; the server only serves):
//!
//! * `verbs`: SEND (1, 1000 and 5000 bytes: one packet, one, several), SEND with immediate,
//!   RDMA WRITE, WRITE with immediate, RDMA READ, FetchAdd and CmpSwap, each checked against
//!   the server's memory and completions;
//! * `bulk`: `--bulk-mib` MiB of RDMA WRITE in `--msg-bytes` messages (4 MiB), 16 outstanding, checked by
//!   CRC-32 of both buffers; prints the goodput;
//! * `flood`: `bulk` while injecting malformed and random RoCEv2 frames through the same
//!   datapath at the server, whose drop counters must account for them;
//! * `outlive`: keeps WRITEs outstanding; prints `STARTED`, and once the server is killed, checks
//!   that the first failure is `RetryExcErr` and the rest flush;
//! * `rxe`: injects 500 frames with the IPv4 Identifications rdma_rxe would write (non-zero,
//!   covered by their ICRC), addressed to a QP that does not exist, and reports the server's
//!   counters: an AF_PACKET server counts them `unknown_qp` (ICRC verified), a UDP server
//!   `icrc_error`, or `unknown_qp` plus `icrc_unverifiable` with `--accept-unverified-icrc`.
//!
//! `--multipath [--vps N]` offers MP-RDMA (docs/multipath.md): the JSON line then carries
//! `"rext"`, the capability word of docs/wire.md ("Negotiation"); a side without the flag sends
//! no such key, and the QP runs multipath only when both offered it (`READY`'s `"mode"`). Such a
//! QP refuses READ and atomics, so the client runs `bulk`, `flood` or `outlive` with it, not
//! `verbs`. The client's `bulk` result and the server's `stats` answer then hold `"mp"`: the
//! window, RTT and per-VP counters (client: packets sent, ECN echoes, out-of-order prunes;
//! server: packets received, CE marks, late arrivals).
//!
//! Output: `LISTENING`, `READY {json}`, `STARTED` and `RESULT {json}` lines on stdout; errors
//! exit non-zero with the reason on stderr.
//!
//! Deviations: none.

use anyhow::{Context as _, anyhow, bail, ensure};
use clap::{Args, ValueEnum};
use rocev2_core::Endpoint;
use rocev2_core::cq::{WcStatus, WorkCompletion};
use rocev2_core::mprdma::MpConfig;
use rocev2_core::mr::Rkey;
use rocev2_core::mr::{AccessFlags, MrInfo, VecMemory};
use rocev2_core::qp::{
    CqId, ExtCaps, IofdTokens, Path, QpAttr, QpConfig, QpMode, QpState, RecvWr, SendOp, SendWr, Sge,
};
use rocev2_core::wire::frame::Ecn;
use rocev2_core::wire::{EthRepr, FrameRepr, IpRepr, Qpn, ROCEV2_UDP_PORT, UdpRepr};
use rocev2_datapath::entropy::os_seed;
use rocev2_datapath::{
    Datapath, DatapathStats, Driver, DriverConfig, Error as DpError, Interface, Mode, RxBatch,
    TxBatch, WaitMode, auto, neigh,
};
use rocev2d::stats::{self, Identity};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration as StdDuration, Instant as StdInstant};

/// What the client does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// Every verb once, checked.
    Verbs,
    /// A large RDMA WRITE checked by CRC.
    Bulk,
    /// Bulk while injecting garbage frames at the server.
    Flood,
    /// Keep WRITEs outstanding until the server dies.
    Outlive,
    /// Inject frames shaped as rdma_rxe writes them (IPv4 Identification not 0, ICRC over it)
    /// at the server, then report its counters.
    Rxe,
}

/// `rocev2d peer`.
#[derive(Debug, Args)]
pub struct PeerArgs {
    /// Interface carrying the RoCEv2 traffic.
    #[arg(long)]
    pub iface: String,
    /// Datapath: auto, xdp, packet or udp.
    #[arg(long, default_value = "auto")]
    pub datapath: Mode,
    /// Serve: listen for the client's TCP connection on this port.
    #[arg(long, conflicts_with = "connect", required_unless_present = "connect")]
    pub listen: Option<u16>,
    /// Act: connect to the server's TCP address.
    #[arg(long)]
    pub connect: Option<SocketAddr>,
    /// The client's workload.
    #[arg(long, value_enum, default_value = "verbs")]
    pub workload: Workload,
    /// MiB moved by `bulk` and `flood` (both sides must agree: it sizes the buffers).
    #[arg(long, default_value_t = 64)]
    pub bulk_mib: u64,
    /// Size of each RDMA WRITE message of `bulk` and `flood` (short messages exercise IOFD).
    #[arg(long, default_value_t = 4 << 20, value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    pub msg_bytes: u64,
    /// Use the interface's IPv6 address as GID instead of its IPv4 address.
    #[arg(long)]
    pub ipv6: bool,
    /// Offer MP-RDMA multipath mode; used only if the peer offers it too.
    #[arg(long)]
    pub multipath: bool,
    /// Virtual paths (UDP source ports from 49152) of a multipath QP.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=16384))]
    pub vps: u16,
    /// Local ACK timeout code (4.096 us * 2^code).
    #[arg(long, default_value_t = 14)]
    pub timeout: u8,
    /// Retry count after timeouts and sequence NAKs.
    #[arg(long, default_value_t = 7)]
    pub retry_cnt: u8,
    /// UDP datapath: accept IPv4 frames whose ICRC cannot be verified (see `udp.rs`).
    #[arg(long)]
    pub accept_unverified_icrc: bool,
    /// Busy-poll instead of sleeping.
    #[arg(long)]
    pub busy_poll: bool,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 120)]
    pub deadline_secs: u64,
    /// A `rocev2d run` configuration file whose `[cc]` section chooses the QP's congestion
    /// control (both peers should use the same scheme).
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
    /// Put this many IOFD deflection tokens (1..=63) on the packets of SEND/WRITE messages of
    /// at most `--iofd-max-msg` bytes (seed 000 §IV-A; docs/switch.md). Off by default.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=63))]
    pub iofd_tokens: Option<u8>,
    /// Largest message that gets `--iofd-tokens`.
    #[arg(long, default_value_t = 8192)]
    pub iofd_max_msg: u32,
}

/// What each side tells the other.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct QpInfo {
    qpn: u32,
    psn: u32,
    ip: IpAddr,
    rkey: u32,
    addr: u64,
    len: u64,
    /// The capability word (docs/wire.md), only from a side offering an extension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rext: Option<u32>,
}

// Buffer layout, the same on both sides.
const RECV_OFF: u64 = 0; // 8 receive buffers of 8 KiB
const RECV_SLOT: u64 = 8 << 10;
const RECV_N: u64 = 8;
const WRITE_OFF: u64 = 64 << 10;
const READ_OFF: u64 = 128 << 10;
const ATOMIC_OFF: u64 = 192 << 10;
const BULK_OFF: u64 = 1 << 20;
const BASE_VA: u64 = 0x7f00_0000_0000;

/// A datapath wrapper recording the first received frames' IPv4 ID/DF (the wire capture of the
/// UDP-mode test) and injecting queued frames (the flood).
struct Tap<D> {
    inner: D,
    capture: Vec<(u16, bool)>,
    capture_max: usize,
    inject: VecDeque<Vec<u8>>,
    injected: u64,
    scratch: TxBatch,
}

impl<D: Datapath> Datapath for Tap<D> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn recv(&mut self, batch: &mut RxBatch) -> Result<usize, DpError> {
        let n = self.inner.recv(batch)?;
        for (f, _) in batch.iter() {
            if self.capture.len() >= self.capture_max {
                break;
            }
            if f.get(12..14) == Some(&[0x08, 0x00]) && f.len() >= 34 {
                let id = u16::from_be_bytes([f[18], f[19]]);
                self.capture.push((id, f[20] & 0x40 != 0));
            }
        }
        Ok(n)
    }
    fn send(&mut self, batch: &mut TxBatch) -> Result<usize, DpError> {
        // A few garbage frames ride along with every real batch, so the flood is spread over
        // the whole transfer without overrunning the receiver.
        for _ in 0..8 {
            let Some(f) = self.inject.pop_front() else {
                break;
            };
            self.scratch.push(&f);
        }
        while !self.scratch.is_empty() {
            let before = self.scratch.pending();
            self.inner.send(&mut self.scratch)?;
            self.injected += (before - self.scratch.pending()) as u64;
            if self.scratch.pending() == before {
                break;
            }
        }
        self.inner.send(batch)
    }
    fn fd(&self) -> BorrowedFd<'_> {
        self.inner.fd()
    }
    fn stats(&self) -> DatapathStats {
        self.inner.stats()
    }
}

type PeerDriver = Driver<Tap<Box<dyn Datapath + Send>>, VecMemory>;

/// The TCP side channel: JSON lines.
struct Oob {
    stream: TcpStream,
    buf: Vec<u8>,
    closed: bool,
}

impl Oob {
    fn new(stream: TcpStream) -> anyhow::Result<Oob> {
        stream.set_nodelay(true)?;
        Ok(Oob {
            stream,
            buf: Vec::new(),
            closed: false,
        })
    }
    fn send(&mut self, v: &Value) -> anyhow::Result<()> {
        self.stream.set_nonblocking(false)?;
        let mut line = serde_json::to_vec(v)?;
        line.push(b'\n');
        self.stream.write_all(&line)?;
        self.stream.set_nonblocking(true)?;
        Ok(())
    }
    /// A complete line if one has arrived.
    fn try_line(&mut self) -> anyhow::Result<Option<Value>> {
        self.stream.set_nonblocking(true)?;
        let mut chunk = [0u8; 65536];
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Ok(Some(serde_json::from_slice(&line)?));
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    self.closed = true;
                    return Ok(None);
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        }
    }
    /// Blocks for a line (setup only, before the driver runs).
    fn line_blocking(&mut self, timeout: StdDuration) -> anyhow::Result<Value> {
        let end = StdInstant::now() + timeout;
        loop {
            if let Some(v) = self.try_line()? {
                return Ok(v);
            }
            ensure!(!self.closed, "the peer closed the connection");
            ensure!(
                StdInstant::now() < end,
                "no answer from the peer in {timeout:?}"
            );
            std::thread::sleep(StdDuration::from_millis(1));
        }
    }
}

/// A deterministic byte pattern (xorshift64*), the same on both sides for a seed.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> anyhow::Result<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| anyhow!("bad hex"))
        })
        .collect()
}

struct Peer {
    d: PeerDriver,
    iface: Interface,
    id: Identity,
    qpn: Qpn,
    cq: CqId,
    mr: MrInfo,
    remote: QpInfo,
    path: Path,
    oob: Oob,
    end: StdInstant,
    completions: Vec<WorkCompletion>,
}

fn u64_of(v: &Value, k: &str) -> anyhow::Result<u64> {
    v.get(k)
        .and_then(Value::as_u64)
        .ok_or_else(|| anyhow!("missing {k} in {v}"))
}

impl Peer {
    fn mem(&self) -> anyhow::Result<&[u8]> {
        self.d
            .mem
            .get(self.mr.id)
            .ok_or_else(|| anyhow!("buffer missing"))
    }
    fn range(&self, off: u64, len: u64) -> anyhow::Result<std::ops::Range<usize>> {
        let end = off.checked_add(len).filter(|e| *e <= self.mr.len);
        let end = end.ok_or_else(|| anyhow!("range {off}+{len} outside the buffer"))?;
        Ok(usize::try_from(off)?..usize::try_from(end)?)
    }

    fn check_deadline(&self) -> anyhow::Result<()> {
        ensure!(StdInstant::now() < self.end, "deadline passed");
        Ok(())
    }

    /// Polls the driver once and moves new completions into `self.completions`.
    fn turn(&mut self) -> anyhow::Result<()> {
        self.d.poll()?;
        self.d
            .ep
            .poll_cq(self.cq, &mut self.completions, usize::MAX);
        Ok(())
    }

    /// Drives until `n` completions are collected; returns them.
    fn complete(&mut self, n: usize) -> anyhow::Result<Vec<WorkCompletion>> {
        while self.completions.len() < n {
            self.check_deadline()?;
            self.turn()?;
            if self.completions.len() < n {
                self.d.wait(&[])?;
            }
        }
        Ok(self.completions.drain(..n).collect())
    }

    fn post(&mut self, wr: SendWr) -> anyhow::Result<()> {
        self.d.ep.post_send(self.qpn, wr)?;
        Ok(())
    }

    fn sge(&self, off: u64, len: u64) -> Sge {
        Sge {
            addr: self.mr.addr + off,
            length: len as u32,
            lkey: self.mr.lkey,
        }
    }

    /// Asks the server something over TCP while keeping the QP driven.
    fn call(&mut self, cmd: Value) -> anyhow::Result<Value> {
        self.oob.send(&cmd)?;
        loop {
            self.check_deadline()?;
            self.turn()?;
            if let Some(v) = self.oob.try_line()? {
                if let Some(e) = v.get("error") {
                    bail!("server: {e}");
                }
                return Ok(v);
            }
            ensure!(!self.oob.closed, "server closed the connection");
            let fd = self.oob.stream.as_fd();
            let extra = [fd];
            self.d.wait(&extra)?;
        }
    }

    fn expect_ok(wcs: &[WorkCompletion]) -> anyhow::Result<()> {
        for wc in wcs {
            ensure!(
                wc.status == WcStatus::Success,
                "work request {} completed with {:?}",
                wc.wr_id,
                wc.status
            );
        }
        Ok(())
    }

    fn write_local(&mut self, off: u64, data: &[u8]) -> anyhow::Result<()> {
        let r = self.range(off, data.len() as u64)?;
        let m = self
            .d
            .mem
            .get_mut(self.mr.id)
            .ok_or_else(|| anyhow!("buffer missing"))?;
        m[r].copy_from_slice(data);
        Ok(())
    }

    fn remote_read(&mut self, off: u64, len: u64) -> anyhow::Result<Vec<u8>> {
        let v = self.call(json!({"cmd": "read", "off": off, "len": len}))?;
        unhex(v.get("hex").and_then(Value::as_str).unwrap_or(""))
    }

    fn verbs(&mut self) -> anyhow::Result<Value> {
        let r = self.remote;
        // SEND of 1, 1000 and 5000 bytes, then 64 bytes with immediate.
        let sizes = [1u64, 1000, 5000, 64];
        for (i, &n) in sizes.iter().enumerate() {
            let data = pattern(100 + i as u64, n as usize);
            let off = RECV_OFF + i as u64 * RECV_SLOT;
            self.write_local(off, &data)?;
            let op = if i == 3 {
                SendOp::SendWithImm { imm: 0xdead_beef }
            } else {
                SendOp::Send
            };
            let wr = SendWr::new(i as u64, op).sge(self.sge(off, n));
            self.post(wr)?;
        }
        Self::expect_ok(&self.complete(sizes.len())?)?;
        let recvs = self.call(json!({"cmd": "recvs"}))?;
        let wcs = recvs
            .get("wcs")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        ensure!(
            wcs.len() == sizes.len(),
            "server saw {} receives: {recvs}",
            wcs.len()
        );
        for (i, &n) in sizes.iter().enumerate() {
            let wc = &wcs[i];
            ensure!(wc["status"] == "Success", "receive {i}: {wc}");
            ensure!(wc["byte_len"] == n, "receive {i} length: {wc}");
            let got = self.remote_read(RECV_OFF + i as u64 * RECV_SLOT, n)?;
            ensure!(
                got == pattern(100 + i as u64, n as usize),
                "SEND {i} bytes differ"
            );
        }
        ensure!(wcs[3]["imm"] == 0xdead_beefu32, "immediate: {}", wcs[3]);

        // RDMA WRITE, and WRITE with immediate (consumes the server's fifth receive).
        let data = pattern(7, 10_000);
        self.write_local(WRITE_OFF, &data)?;
        let wr = SendWr::new(
            10,
            SendOp::Write {
                remote_addr: r.addr + WRITE_OFF,
                rkey: Rkey::new(r.rkey),
            },
        )
        .sge(self.sge(WRITE_OFF, 10_000));
        self.post(wr)?;
        let wr = SendWr::new(
            11,
            SendOp::WriteWithImm {
                remote_addr: r.addr + WRITE_OFF + 10_000,
                rkey: Rkey::new(r.rkey),
                imm: 7,
            },
        )
        .sge(self.sge(WRITE_OFF, 100));
        self.post(wr)?;
        Self::expect_ok(&self.complete(2)?)?;
        let got = self.remote_read(WRITE_OFF, 10_100)?;
        ensure!(got[..10_000] == data[..], "WRITE bytes differ");
        ensure!(
            got[10_000..] == data[..100],
            "WRITE with immediate bytes differ"
        );
        let recvs = self.call(json!({"cmd": "recvs"}))?;
        let imm_wc = recvs["wcs"].get(0).cloned().unwrap_or(Value::Null);
        ensure!(
            imm_wc["imm"] == 7 && imm_wc["opcode"] == "RecvRdmaWithImm",
            "WRITE with immediate completion: {recvs}"
        );

        // RDMA READ of 20000 bytes the server fills.
        self.call(json!({"cmd": "fill", "off": READ_OFF, "len": 20_000, "seed": 5}))?;
        let wr = SendWr::new(
            20,
            SendOp::Read {
                remote_addr: r.addr + READ_OFF,
                rkey: Rkey::new(r.rkey),
            },
        )
        .sge(self.sge(READ_OFF, 20_000));
        self.post(wr)?;
        Self::expect_ok(&self.complete(1)?)?;
        let local = self.mem()?[self.range(READ_OFF, 20_000)?].to_vec();
        ensure!(local == pattern(5, 20_000), "READ bytes differ");

        // Atomics on a word the client first WRITEs to 100.
        self.write_local(ATOMIC_OFF, &100u64.to_ne_bytes())?;
        let wr = SendWr::new(
            30,
            SendOp::Write {
                remote_addr: r.addr + ATOMIC_OFF,
                rkey: Rkey::new(r.rkey),
            },
        )
        .sge(self.sge(ATOMIC_OFF, 8));
        self.post(wr)?;
        Self::expect_ok(&self.complete(1)?)?;
        let wr = SendWr::new(
            31,
            SendOp::FetchAdd {
                remote_addr: r.addr + ATOMIC_OFF,
                rkey: Rkey::new(r.rkey),
                add: 5,
            },
        )
        .sge(self.sge(ATOMIC_OFF + 8, 8));
        self.post(wr)?;
        let wr = SendWr::new(
            32,
            SendOp::CompareSwap {
                remote_addr: r.addr + ATOMIC_OFF,
                rkey: Rkey::new(r.rkey),
                compare: 105,
                swap: 42,
            },
        )
        .sge(self.sge(ATOMIC_OFF + 16, 8));
        self.post(wr)?;
        Self::expect_ok(&self.complete(2)?)?;
        let m = self.mem()?;
        let word = |o: u64| -> anyhow::Result<u64> {
            let r = usize::try_from(ATOMIC_OFF + o)?;
            Ok(u64::from_ne_bytes(m[r..r + 8].try_into()?))
        };
        let (fa, cs) = (word(8)?, word(16)?);
        ensure!(fa == 100, "FetchAdd returned {fa}, expected 100");
        ensure!(cs == 105, "CmpSwap returned {cs}, expected 105");
        let fin = self.remote_read(ATOMIC_OFF, 8)?;
        let fin = u64::from_ne_bytes(fin.as_slice().try_into()?);
        ensure!(fin == 42, "server word is {fin}, expected 42");
        Ok(
            json!({"send": sizes, "write": 10_100, "read": 20_000, "fetch_add": fa, "cmp_swap": cs, "final": fin}),
        )
    }

    fn bulk(&mut self, bytes: u64, msg: u64) -> anyhow::Result<Value> {
        let data = pattern(0xb01c, usize::try_from(bytes)?);
        self.write_local(BULK_OFF, &data)?;
        let local_crc = crc32fast::hash(&data);
        drop(data);
        let r = self.remote;
        let msgs = bytes.div_ceil(msg);
        let start = StdInstant::now();
        let (mut posted, mut done) = (0u64, 0u64);
        while done < msgs {
            while posted < msgs && posted - done < 16 {
                let off = BULK_OFF + posted * msg;
                let len = msg.min(bytes - posted * msg);
                let wr = SendWr::new(
                    1000 + posted,
                    SendOp::Write {
                        remote_addr: r.addr + off,
                        rkey: Rkey::new(r.rkey),
                    },
                )
                .sge(self.sge(off, len));
                self.post(wr)?;
                posted += 1;
            }
            let wcs = self.complete(1)?;
            Self::expect_ok(&wcs)?;
            done += 1;
        }
        let secs = start.elapsed().as_secs_f64();
        let v = self.call(json!({"cmd": "crc", "off": BULK_OFF, "len": bytes}))?;
        let remote_crc = u64_of(&v, "crc")?;
        ensure!(
            remote_crc == u64::from(local_crc),
            "bulk CRC differs: sent {local_crc:#x}, server has {remote_crc:#x}"
        );
        let qp = self
            .d
            .ep
            .qp(self.qpn)
            .map(|q| *q.counters())
            .unwrap_or_default();
        Ok(json!({
            "bytes": bytes,
            "secs": secs,
            "gbit_per_s": bytes as f64 * 8.0 / secs / 1e9,
            "crc": local_crc,
            "retransmits": qp.retransmits,
            "timeouts": qp.timeouts,
            "mp": mp_json(&self.d.ep, self.qpn, true),
        }))
    }

    /// Frames for the flood, built like the QP's own (same MACs, addresses, ports).
    /// With `rxe_ids`, only frames with non-zero IPv4 Identifications to a missing QP.
    fn flood_frames(
        &self,
        per_kind: usize,
        rxe_ids: bool,
    ) -> anyhow::Result<(Vec<Vec<u8>>, Value)> {
        use rocev2_core::wire::{BthRepr, Opcode, Operation, Psn, RoceRepr};
        let p = &self.path;
        let ip = match (p.src_ip, p.dst_ip) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => IpRepr::V4 {
                src,
                dst,
                dscp: p.dscp,
                ecn: p.ecn,
                identification: 0,
                dont_fragment: true,
                ttl: p.hop_limit,
            },
            (IpAddr::V6(src), IpAddr::V6(dst)) => IpRepr::V6 {
                src,
                dst,
                dscp: p.dscp,
                ecn: p.ecn,
                flow_label: 0,
                hop_limit: p.hop_limit,
            },
            _ => bail!("mixed address families"),
        };
        let frame_id = |qpn: u32, payload: &[u8], id: u16| -> anyhow::Result<Vec<u8>> {
            let ip = match ip {
                IpRepr::V4 { .. } if id != 0 => match ip {
                    IpRepr::V4 {
                        src,
                        dst,
                        dscp,
                        ecn,
                        dont_fragment,
                        ttl,
                        ..
                    } => IpRepr::V4 {
                        src,
                        dst,
                        dscp,
                        ecn,
                        identification: id,
                        dont_fragment,
                        ttl,
                    },
                    v6 => v6,
                },
                other => other,
            };
            let repr = FrameRepr {
                eth: EthRepr {
                    src: p.src_mac,
                    dst: p.dst_mac,
                    vlan: None,
                },
                ip,
                udp: UdpRepr {
                    src_port: p.udp_src_port,
                    dst_port: ROCEV2_UDP_PORT,
                    checksum: false,
                },
                roce: RoceRepr::new(BthRepr::new(
                    Opcode::rc(Operation::SendOnly),
                    0xffff,
                    Qpn::new(qpn),
                    Psn::new(0x12_3456),
                )),
            };
            let mut buf = vec![0; repr.buffer_len(payload.len())?];
            repr.emit(&mut buf, payload)?;
            Ok(buf)
        };
        if rxe_ids {
            ensure!(!ip_is_v6(&ip), "IPv6 has no Identification");
            let out = (0..per_kind)
                .map(|i| frame_id(0xab_cdee, &pattern(i as u64, 64), 0x1000 + i as u16))
                .collect::<anyhow::Result<Vec<_>>>()?;
            return Ok((out, json!({ "rxe_ip_id": per_kind })));
        }
        let frame = |qpn: u32, payload: &[u8]| frame_id(qpn, payload, 0);
        let l2l3 = 14 + if ip_is_v6(&ip) { 40 } else { 20 };
        let mut out = Vec::new();
        let mut rng = 0x5eed_u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for i in 0..per_kind {
            // Valid frame for a QP that does not exist: unknown_qp.
            out.push(frame(0xab_cdef, &pattern(i as u64, 64))?);
            // The real QP, one payload bit flipped after the ICRC was computed: icrc_error.
            let mut f = frame(self.remote.qpn, &pattern(i as u64, 64))?;
            let at = l2l3 + 8 + 12 + 3;
            f[at] ^= 0x10;
            out.push(f);
            // Random bytes as the UDP payload (a BTH with random opcode, TVer, …): any reason.
            let mut f = frame(self.remote.qpn, &[])?;
            let n = 1 + (next() % 120) as usize;
            f.truncate(l2l3 + 8);
            f.extend((0..n).map(|_| next() as u8));
            let ulen = (8 + n) as u16;
            f[l2l3 + 4..l2l3 + 6].copy_from_slice(&ulen.to_be_bytes());
            if let IpRepr::V4 { .. } = ip {
                let total = (20 + 8 + n) as u16;
                f[16..18].copy_from_slice(&total.to_be_bytes());
                f[24..26].fill(0);
                let sum = ipv4_sum(&f[14..34]);
                f[24..26].copy_from_slice(&sum.to_be_bytes());
            } else {
                f[18..20].copy_from_slice(&ulen.to_be_bytes());
            }
            out.push(f);
        }
        // Interleave kinds so each is spread over the transfer.
        Ok((
            out,
            json!({"unknown_qp": per_kind, "icrc_error": per_kind, "random": per_kind}),
        ))
    }
}

fn ip_is_v6(ip: &IpRepr) -> bool {
    matches!(ip, IpRepr::V6 { .. })
}

fn ipv4_sum(h: &[u8]) -> u16 {
    let mut s: u32 = h
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// A multipath QP's window, RTT and per-VP counters (the sender's with `tx`, else the
/// receiver's, with its out-of-order statistics); `null` for an RC QP.
fn mp_json(ep: &Endpoint, qpn: Qpn, tx: bool) -> Value {
    let Some(m) = ep.qp(qpn).and_then(|q| q.mp_snapshot()) else {
        return Value::Null;
    };
    let vps: Vec<Value> = if tx { &m.tx_vps } else { &m.rx_vps }
        .iter()
        .map(|(port, c)| json!({"vp": port, "packets": c.packets, "ecn_marks": c.ecn_marks, "ood": c.ood}))
        .collect();
    json!({
        "cwnd": m.cwnd,
        "srtt_ns": m.rtt.as_nanos(),
        "random_vp_sends": m.random_vp_sends,
        "vps": vps,
        "bitmap_drops": m.rx.bitmap_drops,
        "loss_nacks": m.rx.loss_nacks,
        "ood_p999": m.rx.ood_percentile(0.999),
    })
}

fn wc_json(wc: &WorkCompletion) -> Value {
    json!({
        "wr_id": wc.wr_id,
        "status": format!("{:?}", wc.status),
        "opcode": format!("{:?}", wc.opcode),
        "byte_len": wc.byte_len,
        "imm": wc.imm_data,
    })
}

/// Runs `rocev2d peer`.
///
/// # Errors
/// Any setup failure, workload mismatch or deadline.
pub fn run(a: &PeerArgs) -> anyhow::Result<()> {
    let end = StdInstant::now() + StdDuration::from_secs(a.deadline_secs);
    let iface = Interface::by_name(&a.iface)?;
    let src_ip = iface.source_ip(a.ipv6).ok_or_else(|| {
        anyhow!(
            "{} has no {} address",
            a.iface,
            if a.ipv6 { "IPv6" } else { "IPv4" }
        )
    })?;
    let mtu = iface
        .path_mtu(a.ipv6)
        .ok_or_else(|| anyhow!("{}'s MTU {} is too small for RoCEv2", a.iface, iface.mtu))?;
    let mut opts = auto::Options::default();
    opts.udp.accept_unverified_icrc = a.accept_unverified_icrc;
    let opened = auto::open(&iface, a.datapath, &opts)?;
    let id = Identity {
        iface: a.iface.clone(),
        datapath: opened.datapath.name().to_string(),
        reason: opened.reason.clone(),
        started: std::time::Instant::now(),
    };

    // The endpoint, one buffer, one CQ, one QP in INIT.
    let mut ep = Endpoint::new(os_seed()?);
    let len = BULK_OFF + a.bulk_mib * (1 << 20);
    let all = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let pd = ep.alloc_pd();
    let mr = ep.register_mr(pd, BASE_VA, len, all)?;
    let mut mem = VecMemory::new();
    mem.insert(mr.id, vec![0; usize::try_from(len)?]);
    let cq = ep.create_cq(1 << 16);
    let cc = match &a.config {
        Some(p) => rocev2d::config::Config::load(p)?.cc,
        None => rocev2d::config::CcSettings::default(),
    };
    ep.set_receiver_cc(cc.receiver());
    let mut qp_cfg = QpConfig::new(pd, cq, cq);
    qp_cfg.cc = cc.qp_config();
    qp_cfg.iofd_tokens = a.iofd_tokens.map(|tokens| IofdTokens {
        tokens,
        max_message_bytes: a.iofd_max_msg,
    });
    if a.multipath {
        qp_cfg = qp_cfg.with_multipath(MpConfig {
            vp_count: a.vps,
            seed: os_seed()?,
            ..MpConfig::paper()
        });
    }
    let qpn = ep.create_qp(qp_cfg)?;
    let now = rocev2_datapath::clock::now();
    ep.modify_qp(
        qpn,
        QpState::Init,
        &QpAttr {
            p_key: Some(0xffff),
            access: Some(all),
            ..QpAttr::default()
        },
        now,
        &mut mem,
    )?;
    let psn = (os_seed()? & 0xff_ffff) as u32;
    let me = QpInfo {
        qpn: qpn.value(),
        psn,
        ip: src_ip,
        rkey: mr.rkey.value(),
        addr: mr.addr,
        len,
        rext: a.multipath.then(|| {
            ExtCaps {
                multipath: true,
                ..ExtCaps::default()
            }
            .to_word()
        }),
    };

    // Out-of-band exchange.
    let stream = match (a.listen, a.connect) {
        (Some(port), _) => {
            let l = TcpListener::bind((if a.ipv6 { "::" } else { "0.0.0.0" }, port))
                .with_context(|| format!("listening on TCP {port}"))?;
            println!("LISTENING {port}");
            l.accept()?.0
        }
        (None, Some(addr)) => TcpStream::connect_timeout(&addr, StdDuration::from_secs(10))
            .with_context(|| format!("connecting to {addr}"))?,
        (None, None) => bail!("--listen or --connect is required"),
    };
    let mut oob = Oob::new(stream)?;
    oob.send(&serde_json::to_value(me)?)?;
    let remote: QpInfo = serde_json::from_value(oob.line_blocking(StdDuration::from_secs(10))?)?;

    // Server: receive buffers before the client can send.
    if a.listen.is_some() {
        for i in 0..RECV_N {
            ep.post_recv(
                qpn,
                RecvWr {
                    wr_id: i,
                    sg_list: vec![Sge {
                        addr: mr.addr + RECV_OFF + i * RECV_SLOT,
                        length: RECV_SLOT as u32,
                        lkey: mr.lkey,
                    }],
                },
            )?;
        }
    }

    let dst_mac = neigh::resolve(&iface, remote.ip, StdDuration::from_secs(3))?;
    let path = Path {
        src_mac: iface.mac,
        dst_mac,
        vlan: None,
        src_ip,
        dst_ip: remote.ip,
        dscp: 26,
        ecn: Ecn::Ect0,
        hop_limit: 64,
        udp_src_port: 49152 | (qpn.value() as u16 & 0x3fff),
        flow_label: 0,
    };
    ep.modify_qp(
        qpn,
        QpState::Rtr,
        &QpAttr {
            path: Some(path),
            path_mtu: Some(mtu),
            dest_qpn: Some(Qpn::new(remote.qpn)),
            rq_psn: Some(remote.psn),
            max_dest_rd_atomic: Some(16),
            min_rnr_timer: Some(1),
            peer_ext: Some(remote.rext.map_or(cc.scheme.peer_ext(), ExtCaps::from_word)),
            ..QpAttr::default()
        },
        now,
        &mut mem,
    )?;
    ep.modify_qp(
        qpn,
        QpState::Rts,
        &QpAttr {
            sq_psn: Some(psn),
            timeout: Some(a.timeout),
            retry_cnt: Some(a.retry_cnt),
            rnr_retry: Some(7),
            max_rd_atomic: Some(16),
            ..QpAttr::default()
        },
        now,
        &mut mem,
    )?;
    let tap = Tap {
        inner: opened.datapath,
        capture: Vec::new(),
        capture_max: 256,
        inject: VecDeque::new(),
        injected: 0,
        scratch: TxBatch::new(16),
    };
    let cfg = DriverConfig {
        wait: if a.busy_poll {
            WaitMode::Spin
        } else {
            WaitMode::Sleep
        },
        ..DriverConfig::default()
    };
    let multipath = ep.qp(qpn).map(|q| q.mode()) == Some(QpMode::MultiPath);
    if multipath && a.listen.is_none() && a.workload == Workload::Verbs {
        bail!("a multipath QP refuses READ and atomics: use --workload bulk, flood or outlive");
    }
    let d = Driver::new(ep, mem, tap, cfg);
    println!(
        "READY {}",
        json!({"datapath": id.datapath, "reason": id.reason, "qpn": qpn.value(), "mtu": mtu.bytes(), "peer": remote.ip, "dst_mac": rocev2d::mac(dst_mac), "mode": if multipath { "multipath" } else { "rc" }})
    );
    let mut peer = Peer {
        d,
        iface,
        id,
        qpn,
        cq,
        mr,
        remote,
        path,
        oob,
        end,
        completions: Vec::new(),
    };
    if a.listen.is_some() {
        serve(&mut peer)
    } else {
        let result = match a.workload {
            Workload::Verbs => peer.verbs()?,
            Workload::Bulk => peer.bulk(a.bulk_mib << 20, a.msg_bytes)?,
            Workload::Flood => flood(&mut peer, a.bulk_mib << 20, a.msg_bytes, false)?,
            Workload::Rxe => flood(&mut peer, 0, a.msg_bytes, true)?,
            Workload::Outlive => outlive(&mut peer)?,
        };
        let mut result = result;
        if a.workload != Workload::Outlive {
            // Every result carries the server's counters and wire capture.
            result["server"] = peer.call(json!({"cmd": "stats"}))?;
            let _ = peer.call(json!({"cmd": "quit"}));
        }
        println!("RESULT {result}");
        Ok(())
    }
}

fn flood(peer: &mut Peer, bytes: u64, msg: u64, rxe_ids: bool) -> anyhow::Result<Value> {
    let (frames, injected) = peer.flood_frames(if rxe_ids { 500 } else { 2000 }, rxe_ids)?;
    let total = frames.len() as u64;
    peer.d.datapath_mut().inject.extend(frames);
    let bulk = if rxe_ids {
        Value::Null
    } else {
        peer.bulk(bytes, msg)?
    };
    // Whatever is still queued goes out now.
    while !peer.d.datapath().inject.is_empty() {
        peer.check_deadline()?;
        peer.d.poll()?;
        // An empty batch still lets the tap send its frames.
        let mut empty = TxBatch::new(1);
        peer.d.datapath_mut().send(&mut empty)?;
    }
    ensure!(
        peer.d.datapath().injected == total,
        "not every flood frame was sent"
    );
    // Let the server count the tail.
    let settle = StdInstant::now() + StdDuration::from_millis(200);
    while StdInstant::now() < settle {
        peer.turn()?;
        std::thread::sleep(StdDuration::from_millis(5));
    }
    Ok(json!({"bulk": bulk, "injected": injected}))
}

fn outlive(peer: &mut Peer) -> anyhow::Result<Value> {
    let r = peer.remote;
    let mut posted = 0u64;
    let mut statuses: Vec<WcStatus> = Vec::new();
    let mut started = false;
    let t0 = StdInstant::now();
    let mut failed_at = None;
    loop {
        peer.check_deadline()?;
        while failed_at.is_none() && posted - statuses.len() as u64 <= 8 {
            let wr = SendWr::new(
                posted,
                SendOp::Write {
                    remote_addr: r.addr + WRITE_OFF,
                    rkey: Rkey::new(r.rkey),
                },
            )
            .sge(peer.sge(WRITE_OFF, 60 << 10));
            peer.post(wr)?;
            posted += 1;
        }
        peer.turn()?;
        for wc in peer.completions.drain(..) {
            if wc.status != WcStatus::Success && failed_at.is_none() {
                failed_at = Some(t0.elapsed());
            }
            statuses.push(wc.status);
        }
        if !started && statuses.first() == Some(&WcStatus::Success) {
            started = true;
            println!("STARTED");
        }
        if failed_at.is_some() && statuses.len() as u64 == posted {
            break;
        }
        peer.d.wait(&[])?;
    }
    let first_error = statuses.iter().find(|s| **s != WcStatus::Success);
    let after: Vec<_> = statuses
        .iter()
        .skip_while(|s| **s == WcStatus::Success)
        .skip(1)
        .collect();
    ensure!(
        first_error == Some(&WcStatus::RetryExcErr),
        "first failure was {first_error:?}, expected RetryExcErr"
    );
    ensure!(
        after.iter().all(|s| **s == WcStatus::WrFlushErr),
        "after the failure: {after:?}"
    );
    let qp = peer.d.ep.qp(peer.qpn).map(|q| (q.state(), *q.counters()));
    Ok(json!({
        "completed": statuses.iter().filter(|s| **s == WcStatus::Success).count(),
        "first_error": format!("{:?}", WcStatus::RetryExcErr),
        "flushed": after.len(),
        "qp_state": format!("{:?}", qp.map(|q| q.0)),
        "timeouts": qp.map(|q| q.1.timeouts),
    }))
}

fn serve(peer: &mut Peer) -> anyhow::Result<()> {
    loop {
        peer.turn()?;
        while let Some(cmd) = peer.oob.try_line()? {
            let reply = match handle(peer, &cmd) {
                Ok(v) => v,
                Err(e) => json!({"error": e.to_string()}),
            };
            peer.oob.send(&reply)?;
            if cmd["cmd"] == "quit" {
                return Ok(());
            }
        }
        if peer.oob.closed {
            return Ok(());
        }
        let fd = peer.oob.stream.as_fd();
        let extra = [fd];
        peer.d.wait(&extra)?;
    }
}

fn handle(peer: &mut Peer, cmd: &Value) -> anyhow::Result<Value> {
    let name = cmd["cmd"].as_str().unwrap_or("");
    match name {
        "crc" | "read" | "fill" => {
            let r = peer.range(u64_of(cmd, "off")?, u64_of(cmd, "len")?)?;
            match name {
                "crc" => Ok(json!({"crc": crc32fast::hash(&peer.mem()?[r])})),
                "read" => Ok(json!({"hex": hex(&peer.mem()?[r])})),
                _ => {
                    let data = pattern(u64_of(cmd, "seed")?, r.len());
                    let m = peer
                        .d
                        .mem
                        .get_mut(peer.mr.id)
                        .ok_or_else(|| anyhow!("buffer missing"))?;
                    m[r].copy_from_slice(&data);
                    Ok(json!({"ok": true}))
                }
            }
        }
        "recvs" => {
            let wcs: Vec<Value> = peer.completions.drain(..).map(|w| wc_json(&w)).collect();
            Ok(json!({ "wcs": wcs }))
        }
        "stats" => {
            // Count whatever is still queued in the socket before answering: the server may be
            // behind a burst (the flood's tail) when the question arrives.
            for _ in 0..10_000 {
                if peer.d.poll()?.rx == 0 {
                    break;
                }
            }
            peer.d
                .ep
                .poll_cq(peer.cq, &mut peer.completions, usize::MAX);
            let snap = stats::snapshot(
                &peer.id,
                &peer.d.ep,
                rocev2_datapath::clock::now(),
                &peer.d.datapath_stats(),
            );
            let capture: Vec<Value> = peer
                .d
                .datapath()
                .capture
                .iter()
                .map(|(id, df)| json!({"id": id, "df": df}))
                .collect();
            Ok(json!({
                "snapshot": snap,
                "capture": capture,
                "iface_mtu": peer.iface.mtu,
                "mp": mp_json(&peer.d.ep, peer.qpn, false),
            }))
        }
        "quit" => Ok(json!({"ok": true})),
        other => bail!("unknown command {other:?}"),
    }
}
