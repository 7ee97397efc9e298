//! `bulk` and `mix`: `--bulk-mib` MiB (or `--bulk-kib` KiB) moved in `--msg-bytes` messages, 16 outstanding, checked
//! by comparing the CRC-32 of both sides' buffers. `bulk` RDMA WRITEs it all; `mix` alternates
//! WRITE and READ messages, WRITEs into the first half of the server's bulk area and READs
//! from the second (which the server fills with a pattern first), so both directions carry
//! data and each side's faults hit requests, responses and ACKs. Reports the goodput, the
//! QP's retransmissions and timeouts, for a Dart QP the largest DASR N its ACKs carried
//! (`dasr_n_max`), and for a multipath QP the sender's per-VP counters.
//!
//! Deviations: none.

use crate::oob::u64_of;
use crate::peer::{BULK_OFF, Peer, pattern};
use anyhow::ensure;
use rocev2_core::qp::{SendOp, SendWr};
use serde_json::{Value, json};
use std::time::Instant;

/// Messages in flight at once.
const OUTSTANDING: u64 = 16;
/// Seed of the pattern the server lays out for `mix`'s READs.
const READ_SEED: u64 = 0x4ead;

/// Moves `bytes` in messages of `msg` bytes, all WRITEs or (`mix`) alternately WRITE and
/// READ, and checks both buffers.
///
/// # Errors
/// A message that did not complete successfully, a CRC mismatch, or the deadline.
pub fn run(peer: &mut Peer, bytes: u64, msg: u64, mix: bool) -> anyhow::Result<Value> {
    // WRITEs go to BULK_OFF.., READs (mix only) come from the second half.
    let write_bytes = if mix { bytes / 2 } else { bytes };
    let read_off = BULK_OFF + write_bytes;
    let read_bytes = bytes - write_bytes;
    let data = pattern(0xb01c, usize::try_from(write_bytes)?);
    peer.write_local(BULK_OFF, &data)?;
    let local_crc = crc32fast::hash(&data);
    drop(data);
    if read_bytes > 0 {
        peer.call(json!({"cmd": "fill", "off": read_off, "len": read_bytes, "seed": READ_SEED}))?;
    }
    let r = peer.conn.remote_mr;
    // Message k of each kind covers [k·msg, (k+1)·msg) of its region.
    let writes = write_bytes.div_ceil(msg);
    let reads = read_bytes.div_ceil(msg);
    let msgs = writes + reads;
    let start = Instant::now();
    let (mut posted, mut done) = (0u64, 0u64);
    let (mut w, mut rd) = (0u64, 0u64);
    while done < msgs {
        while posted < msgs && posted - done < OUTSTANDING {
            // Alternate while both kinds remain.
            let read = rd < reads && (w >= writes || posted % 2 == 1);
            let (base, region, k) = if read {
                rd += 1;
                (read_off, read_bytes, rd - 1)
            } else {
                w += 1;
                (BULK_OFF, write_bytes, w - 1)
            };
            let off = base + k * msg;
            let len = msg.min(region - k * msg);
            let op = if read {
                SendOp::Read {
                    remote_addr: r.addr + off,
                    rkey: r.rkey,
                }
            } else {
                SendOp::Write {
                    remote_addr: r.addr + off,
                    rkey: r.rkey,
                }
            };
            peer.post(SendWr::new(1000 + posted, op).sge(peer.sge(off, len)))?;
            posted += 1;
        }
        let wcs = peer.complete(1)?;
        peer.expect_ok(&wcs)?;
        done += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let v = peer.call(json!({"cmd": "crc", "off": BULK_OFF, "len": write_bytes}))?;
    let remote_crc = u64_of(&v, "crc")?;
    ensure!(
        remote_crc == u64::from(local_crc),
        "WRITE CRC differs: sent {local_crc:#x}, server has {remote_crc:#x}"
    );
    let mut result = json!({
        "bytes": bytes,
        "secs": secs,
        "gbit_per_s": bytes as f64 * 8.0 / secs / 1e9,
        "crc": local_crc,
    });
    if read_bytes > 0 {
        let got = crc32fast::hash(&peer.mem()?[peer.range(read_off, read_bytes)?]);
        let want = crc32fast::hash(&pattern(READ_SEED, usize::try_from(read_bytes)?));
        ensure!(
            got == want,
            "READ CRC differs: read {got:#x}, server's pattern {want:#x}"
        );
        result["write_bytes"] = json!(write_bytes);
        result["read_bytes"] = json!(read_bytes);
        result["read_crc"] = json!(got);
    }
    let qp = peer
        .host
        .d
        .ep
        .qp(peer.conn.qpn)
        .map(|q| *q.counters())
        .unwrap_or_default();
    result["retransmits"] = json!(qp.retransmits);
    result["timeouts"] = json!(qp.timeouts);
    result["mp"] = peer.mp_json();
    // Dart: the most senders the receiver counted while this QP sent (seed 000 §III-A).
    result["dasr_n_max"] = json!(peer.conn.dasr_n_max);
    Ok(result)
}
