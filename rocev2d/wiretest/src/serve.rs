//! The server's side: keep the QP driven and answer the client's questions about its memory
//! and counters until the client says `quit` or goes away.
//!
//! | question | fields | answer |
//! |---|---|---|
//! | `crc` | `off`, `len` | `crc`: CRC-32 of those bytes |
//! | `read` | `off`, `len` | `hex`: the bytes |
//! | `fill` | `off`, `len`, `seed` | `ok`, after writing [`pattern`]`(seed)` there |
//! | `recvs` | | `wcs`: receive completions since the last `recvs` |
//! | `stats` | | `snapshot` (as `rocev2d stats --json`), `capture` (IPv4 ID and DF of received frames), `iface_mtu`, `mp` |
//! | `quit` | | `ok`, then the server exits |
//!
//! A question that fails is answered `{"error": reason}`; the server carries on.
//!
//! Deviations: none.

use crate::oob::{hex, u64_of};
use crate::peer::{Peer, pattern};
use anyhow::{anyhow, bail};
use rocev2_core::cq::WorkCompletion;
use rocev2d::stats;
use serde_json::{Value, json};
use std::os::fd::AsFd;

/// Serves until `quit` or the client closes the connection.
///
/// # Errors
/// Datapath and side-channel failures.
pub fn serve(peer: &mut Peer) -> anyhow::Result<()> {
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
                "mp": peer.mp_json(false),
            }))
        }
        "quit" => Ok(json!({"ok": true})),
        other => bail!("unknown command {other:?}"),
    }
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
