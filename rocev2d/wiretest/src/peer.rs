//! One side's host (its endpoint, driver and interface: [`Host`]) and connected QPs
//! ([`Conn`]: the QP, its buffer, CQ and side channel), and what both sides do with them: drive
//! the datapath, collect completions, post work requests, ask the other side over the side
//! channel, and the buffer layout and byte pattern both sides agree on. A client is one host with
//! one connection ([`Peer`]); a server with `--qps N` is one host, so one endpoint and one
//! receiver-side congestion state (DASR's sender count, DCQCN+'s CNP list), with up to N.
//!
//! Deviations: none.

use crate::oob::{Oob, unhex};
use crate::tap::Tap;
use anyhow::{anyhow, bail, ensure};
use rocev2_core::cq::{WcStatus, WorkCompletion};
use rocev2_core::mr::{MrInfo, VecMemory};
use rocev2_core::qp::{CqId, Path, SendWr, Sge};
use rocev2_core::wire::Qpn;
use rocev2_datapath::{Datapath, Driver, Interface};
use rocev2d::config::CcSettings;
use rocev2d::stats::Identity;
use serde_json::{Value, json};
use std::net::IpAddr;
use std::ops::Range;
use std::os::fd::AsFd;
use std::time::Instant;

// Buffer layout, the same on both sides.
/// Receive buffers: [`RECV_N`] slots of [`RECV_SLOT`] bytes.
pub const RECV_OFF: u64 = 0;
/// One receive buffer.
pub const RECV_SLOT: u64 = 8 << 10;
/// Receive buffers the server posts.
pub const RECV_N: u64 = 8;
/// Target of the `verbs` WRITEs and of `outlive`.
pub const WRITE_OFF: u64 = 64 << 10;
/// What the client READs.
pub const READ_OFF: u64 = 128 << 10;
/// The atomics' word and their results.
pub const ATOMIC_OFF: u64 = 192 << 10;
/// The `bulk` data, `--bulk-mib` MiB or `--bulk-kib` KiB.
pub const BULK_OFF: u64 = 1 << 20;
/// Where the buffer is registered.
pub const BASE_VA: u64 = 0x7f00_0000_0000;

/// The driver of a tapped datapath, whichever [`crate::setup`] opened.
pub type PeerDriver = Driver<Tap<Box<dyn Datapath + Send>>, VecMemory>;

/// A deterministic byte pattern (xorshift64*), the same on both sides for a seed.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
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

/// One side's host: the endpoint every QP of this process lives in, its memory and datapath.
pub struct Host {
    /// Endpoint, memory and datapath.
    pub d: PeerDriver,
    /// The interface (its MTU goes into the `stats` answer).
    pub iface: Interface,
    /// Interface and datapath as the counters snapshot names them.
    pub id: Identity,
    /// `--deadline-secs` from the start.
    pub end: Instant,
    /// Our GID, as an IP address.
    pub src_ip: IpAddr,
    /// The interface's path MTU, bytes.
    pub mtu: rocev2_core::qp::Mtu,
    /// The `[cc]` section every QP gets.
    pub cc: CcSettings,
}

/// One connected QP and what belongs to it alone.
pub struct Conn {
    /// Our QP.
    pub qpn: Qpn,
    /// Its only CQ (send and receive).
    pub cq: CqId,
    /// Its buffer.
    pub mr: MrInfo,
    /// The other side's QP.
    pub remote: rocev2::Endpoint,
    /// The other side's buffer (the first region of [`Conn::remote`]).
    pub remote_mr: rocev2::RemoteMr,
    /// The address vector toward the other side (the flood builds its frames from it).
    pub path: Path,
    /// The side channel.
    pub oob: Oob,
    /// Completions polled and not consumed yet.
    pub completions: Vec<WorkCompletion>,
    /// The largest DASR N the QP's controller has been given so far (Dart only).
    pub dasr_n_max: Option<u16>,
}

impl Conn {
    /// The byte range `off..off + len` of the buffer, checked.
    pub fn range(&self, off: u64, len: u64) -> anyhow::Result<Range<usize>> {
        let end = off.checked_add(len).filter(|e| *e <= self.mr.len);
        let end = end.ok_or_else(|| anyhow!("range {off}+{len} outside the buffer"))?;
        Ok(usize::try_from(off)?..usize::try_from(end)?)
    }

    /// The buffer's bytes in `d`'s memory.
    pub fn mem<'d>(&self, d: &'d PeerDriver) -> anyhow::Result<&'d [u8]> {
        d.mem
            .get(self.mr.id)
            .ok_or_else(|| anyhow!("buffer missing"))
    }

    /// Moves the QP's new completions into `self.completions` and notes its DASR N.
    pub fn collect(&mut self, d: &mut PeerDriver) {
        d.ep.poll_cq(self.cq, &mut self.completions, usize::MAX);
        let n =
            d.ep.qp(self.qpn)
                .and_then(|q| q.cc_snapshot(rocev2_datapath::clock::now()))
                .and_then(|s| s.n);
        if let Some(n) = n {
            self.dasr_n_max = Some(self.dasr_n_max.map_or(n, |m| m.max(n)));
        }
    }

    /// The QP's window, RTT and per-VP counters if it is multipath (the sender's with `tx`,
    /// else the receiver's, with its out-of-order statistics); `null` for an RC QP.
    pub fn mp_json(&self, d: &PeerDriver, tx: bool) -> Value {
        let Some(m) = d.ep.qp(self.qpn).and_then(|q| q.mp_snapshot()) else {
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
}

/// The client: its host and its one connection.
pub struct Peer {
    /// The host.
    pub host: Host,
    /// The QP.
    pub conn: Conn,
}

impl Peer {
    /// The buffer's bytes.
    pub fn mem(&self) -> anyhow::Result<&[u8]> {
        self.conn.mem(&self.host.d)
    }

    /// The byte range `off..off + len` of the buffer, checked.
    pub fn range(&self, off: u64, len: u64) -> anyhow::Result<Range<usize>> {
        self.conn.range(off, len)
    }

    /// Copies `data` into the buffer at `off`.
    pub fn write_local(&mut self, off: u64, data: &[u8]) -> anyhow::Result<()> {
        let r = self.range(off, data.len() as u64)?;
        let m = self
            .host
            .d
            .mem
            .get_mut(self.conn.mr.id)
            .ok_or_else(|| anyhow!("buffer missing"))?;
        m[r].copy_from_slice(data);
        Ok(())
    }

    /// Fails once `--deadline-secs` have passed.
    pub fn check_deadline(&self) -> anyhow::Result<()> {
        ensure!(Instant::now() < self.host.end, "deadline passed");
        Ok(())
    }

    /// Polls the driver once and moves new completions into `self.conn.completions`.
    pub fn turn(&mut self) -> anyhow::Result<()> {
        self.host.d.poll()?;
        self.conn.collect(&mut self.host.d);
        Ok(())
    }

    /// Drives until `n` completions are collected; returns them.
    pub fn complete(&mut self, n: usize) -> anyhow::Result<Vec<WorkCompletion>> {
        while self.conn.completions.len() < n {
            self.check_deadline()?;
            self.turn()?;
            if self.conn.completions.len() < n {
                self.host.d.wait(&[])?;
            }
        }
        Ok(self.conn.completions.drain(..n).collect())
    }

    /// Posts a send work request on our QP.
    pub fn post(&mut self, wr: SendWr) -> anyhow::Result<()> {
        self.host.d.ep.post_send(self.conn.qpn, wr)?;
        Ok(())
    }

    /// A scatter/gather entry for `len` bytes of the buffer at `off`.
    pub fn sge(&self, off: u64, len: u64) -> Sge {
        Sge {
            addr: self.conn.mr.addr + off,
            length: len as u32,
            lkey: self.conn.mr.lkey,
        }
    }

    /// Asks the server something over TCP while keeping the QP driven.
    pub fn call(&mut self, cmd: Value) -> anyhow::Result<Value> {
        self.conn.oob.send(&cmd)?;
        loop {
            self.check_deadline()?;
            self.turn()?;
            if let Some(v) = self.conn.oob.try_line()? {
                if let Some(e) = v.get("error") {
                    bail!("server: {e}");
                }
                return Ok(v);
            }
            ensure!(!self.conn.oob.closed, "server closed the connection");
            let fd = self.conn.oob.stream.as_fd();
            let extra = [fd];
            self.host.d.wait(&extra)?;
        }
    }

    /// `len` bytes of the server's buffer at `off`.
    pub fn remote_read(&mut self, off: u64, len: u64) -> anyhow::Result<Vec<u8>> {
        let v = self.call(json!({"cmd": "read", "off": off, "len": len}))?;
        unhex(v.get("hex").and_then(Value::as_str).unwrap_or(""))
    }

    /// Fails on the first completion that is not a success, with the QP's counters (a flushed
    /// request says only that something before it failed).
    pub fn expect_ok(&self, wcs: &[WorkCompletion]) -> anyhow::Result<()> {
        for wc in wcs {
            ensure!(
                wc.status == WcStatus::Success,
                "work request {} completed with {:?}; QP counters {:?}",
                wc.wr_id,
                wc.status,
                self.host.d.ep.qp(self.conn.qpn).map(|q| *q.counters())
            );
        }
        Ok(())
    }

    /// The QP's multipath state as the sender sees it ([`Conn::mp_json`]).
    pub fn mp_json(&self) -> Value {
        self.conn.mp_json(&self.host.d, true)
    }
}
