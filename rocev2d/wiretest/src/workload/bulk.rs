//! `bulk`: `--bulk-mib` MiB of RDMA WRITE in `--msg-bytes` messages, 16 outstanding, checked
//! by comparing the CRC-32 of both buffers; reports the goodput, the QP's retransmissions and
//! timeouts and, for a multipath QP, the sender's per-VP counters.
//!
//! Deviations: none.

use crate::oob::u64_of;
use crate::peer::{BULK_OFF, Peer, pattern};
use anyhow::ensure;
use rocev2_core::mr::Rkey;
use rocev2_core::qp::{SendOp, SendWr};
use serde_json::{Value, json};
use std::time::Instant;

/// WRITEs in flight at once.
const OUTSTANDING: u64 = 16;

/// Writes `bytes` in messages of `msg` bytes and checks they arrived.
///
/// # Errors
/// A WRITE that did not complete successfully, a CRC mismatch, or the deadline.
pub fn run(peer: &mut Peer, bytes: u64, msg: u64) -> anyhow::Result<Value> {
    let data = pattern(0xb01c, usize::try_from(bytes)?);
    peer.write_local(BULK_OFF, &data)?;
    let local_crc = crc32fast::hash(&data);
    drop(data);
    let r = peer.remote;
    let msgs = bytes.div_ceil(msg);
    let start = Instant::now();
    let (mut posted, mut done) = (0u64, 0u64);
    while done < msgs {
        while posted < msgs && posted - done < OUTSTANDING {
            let off = BULK_OFF + posted * msg;
            let len = msg.min(bytes - posted * msg);
            let wr = SendWr::new(
                1000 + posted,
                SendOp::Write {
                    remote_addr: r.addr + off,
                    rkey: Rkey::new(r.rkey),
                },
            )
            .sge(peer.sge(off, len));
            peer.post(wr)?;
            posted += 1;
        }
        let wcs = peer.complete(1)?;
        Peer::expect_ok(&wcs)?;
        done += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let v = peer.call(json!({"cmd": "crc", "off": BULK_OFF, "len": bytes}))?;
    let remote_crc = u64_of(&v, "crc")?;
    ensure!(
        remote_crc == u64::from(local_crc),
        "bulk CRC differs: sent {local_crc:#x}, server has {remote_crc:#x}"
    );
    let qp = peer
        .d
        .ep
        .qp(peer.qpn)
        .map(|q| *q.counters())
        .unwrap_or_default();
    Ok(json!({
        "bytes": bytes,
        "secs": secs,
        "gbit_per_s": bytes as f64 * 8.0 / secs / 1e9,
        "crc": local_crc,
        "retransmits": qp.retransmits,
        "timeouts": qp.timeouts,
        "mp": peer.mp_json(true),
    }))
}
