//! One side's connected QP and what both sides do with it: drive the datapath, collect
//! completions, post work requests, ask the other side over the side channel, and the buffer
//! layout and byte pattern both sides agree on.
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
use rocev2d::stats::Identity;
use serde_json::{Value, json};
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
/// The `bulk` data, `--bulk-mib` MiB.
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

/// One side, connected.
pub struct Peer {
    /// Endpoint, memory and datapath.
    pub d: PeerDriver,
    /// The interface (its MTU goes into the `stats` answer).
    pub iface: Interface,
    /// Interface and datapath as the counters snapshot names them.
    pub id: Identity,
    /// Our QP.
    pub qpn: Qpn,
    /// Its only CQ (send and receive).
    pub cq: CqId,
    /// The buffer.
    pub mr: MrInfo,
    /// The other side's QP.
    pub remote: rocev2::Endpoint,
    /// The other side's buffer (the first region of [`Peer::remote`]).
    pub remote_mr: rocev2::RemoteMr,
    /// The address vector toward the other side (the flood builds its frames from it).
    pub path: Path,
    /// The side channel.
    pub oob: Oob,
    /// `--deadline-secs` from the start.
    pub end: Instant,
    /// Completions polled and not consumed yet.
    pub completions: Vec<WorkCompletion>,
}

impl Peer {
    /// The buffer's bytes.
    pub fn mem(&self) -> anyhow::Result<&[u8]> {
        self.d
            .mem
            .get(self.mr.id)
            .ok_or_else(|| anyhow!("buffer missing"))
    }

    /// The byte range `off..off + len` of the buffer, checked.
    pub fn range(&self, off: u64, len: u64) -> anyhow::Result<Range<usize>> {
        let end = off.checked_add(len).filter(|e| *e <= self.mr.len);
        let end = end.ok_or_else(|| anyhow!("range {off}+{len} outside the buffer"))?;
        Ok(usize::try_from(off)?..usize::try_from(end)?)
    }

    /// Copies `data` into the buffer at `off`.
    pub fn write_local(&mut self, off: u64, data: &[u8]) -> anyhow::Result<()> {
        let r = self.range(off, data.len() as u64)?;
        let m = self
            .d
            .mem
            .get_mut(self.mr.id)
            .ok_or_else(|| anyhow!("buffer missing"))?;
        m[r].copy_from_slice(data);
        Ok(())
    }

    /// Fails once `--deadline-secs` have passed.
    pub fn check_deadline(&self) -> anyhow::Result<()> {
        ensure!(Instant::now() < self.end, "deadline passed");
        Ok(())
    }

    /// Polls the driver once and moves new completions into `self.completions`.
    pub fn turn(&mut self) -> anyhow::Result<()> {
        self.d.poll()?;
        self.d
            .ep
            .poll_cq(self.cq, &mut self.completions, usize::MAX);
        Ok(())
    }

    /// Drives until `n` completions are collected; returns them.
    pub fn complete(&mut self, n: usize) -> anyhow::Result<Vec<WorkCompletion>> {
        while self.completions.len() < n {
            self.check_deadline()?;
            self.turn()?;
            if self.completions.len() < n {
                self.d.wait(&[])?;
            }
        }
        Ok(self.completions.drain(..n).collect())
    }

    /// Posts a send work request on our QP.
    pub fn post(&mut self, wr: SendWr) -> anyhow::Result<()> {
        self.d.ep.post_send(self.qpn, wr)?;
        Ok(())
    }

    /// A scatter/gather entry for `len` bytes of the buffer at `off`.
    pub fn sge(&self, off: u64, len: u64) -> Sge {
        Sge {
            addr: self.mr.addr + off,
            length: len as u32,
            lkey: self.mr.lkey,
        }
    }

    /// Asks the server something over TCP while keeping the QP driven.
    pub fn call(&mut self, cmd: Value) -> anyhow::Result<Value> {
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
                self.d.ep.qp(self.qpn).map(|q| *q.counters())
            );
        }
        Ok(())
    }

    /// A multipath QP's window, RTT and per-VP counters (the sender's with `tx`, else the
    /// receiver's, with its out-of-order statistics); `null` for an RC QP.
    pub fn mp_json(&self, tx: bool) -> Value {
        let Some(m) = self.d.ep.qp(self.qpn).and_then(|q| q.mp_snapshot()) else {
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
