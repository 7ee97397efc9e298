//! The server's side: listen, accept `--qps` clients one after the other (each a QP in the one
//! endpoint, so the receiver-side congestion control sees them all: DASR counts its senders
//! across them, seed 000 §III-B), keep every QP driven and answer each client's questions about
//! its QP's memory and the endpoint's counters; a connection ends with its `quit` or when its
//! client goes away, its QP and buffer are freed, and the server exits when all `--qps` have.
//!
//! | question | fields | answer |
//! |---|---|---|
//! | `crc` | `off`, `len` | `crc`: CRC-32 of those bytes |
//! | `read` | `off`, `len` | `hex`: the bytes |
//! | `fill` | `off`, `len`, `seed` | `ok`, after writing [`pattern`]`(seed)` there |
//! | `recvs` | | `wcs`: receive completions since the last `recvs` |
//! | `stats` | | `snapshot` (as `rocev2d stats --json`, every QP of the endpoint), `capture` (IPv4 ID and DF of received frames), `iface_mtu`, `mp` (this QP's), `dasr` (the endpoint's DASR state, Dart only) |
//! | `all` | | `ok`, once all `--qps` clients have connected (an incast's transfers start together) |
//! | `quit` | | `ok`, then the server drops this connection |
//!
//! A question that fails is answered `{"error": reason}`; the server carries on.
//!
//! Deviations: none.

use crate::args::Args;
use crate::oob::{hex, u64_of};
use crate::peer::{Conn, Host, pattern};
use crate::setup;
use anyhow::{Context as _, anyhow, bail};
use rocev2_core::cq::WorkCompletion;
use rocev2d::stats;
use serde_json::{Value, json};
use std::io::ErrorKind;
use std::net::TcpListener;
use std::os::fd::{AsFd, BorrowedFd};

/// What became of a connection after its questions were answered.
#[derive(PartialEq, Eq)]
enum After {
    /// It stays.
    Open,
    /// It asked `all` and waits for the answer.
    WaitsForAll,
    /// `quit` or gone: free it.
    Done,
}

/// Listens on `--listen`, serves `--qps` clients, returns once every one has quit or gone.
///
/// # Errors
/// Datapath and side-channel failures, or a connection whose QP could not be brought up.
pub fn serve(mut host: Host, a: &Args) -> anyhow::Result<()> {
    let port = a.listen.ok_or_else(|| anyhow!("--listen is required"))?;
    let l = TcpListener::bind((if a.ipv6 { "::" } else { "0.0.0.0" }, port))
        .with_context(|| format!("listening on TCP {port}"))?;
    println!("LISTENING {port}");
    l.set_nonblocking(true)?;
    let mut conns: Vec<(Conn, After)> = Vec::new();
    let mut accepted = 0u32;
    loop {
        host.d.poll()?;
        for (c, _) in &mut conns {
            c.collect(&mut host.d);
        }
        while accepted < a.qps {
            match l.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false)?;
                    conns.push((setup::add_qp(&mut host, a, stream)?, After::Open));
                    accepted += 1;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            }
        }
        for (c, after) in &mut conns {
            if *after == After::WaitsForAll && accepted == a.qps {
                c.oob.send(&json!({"ok": true}))?;
                *after = After::Open;
            }
            if *after == After::Open {
                *after = answer(&mut host, c)?;
            }
        }
        for (c, _) in conns.extract_if(.., |(_, after)| *after == After::Done) {
            free(&mut host, &c)?;
        }
        if accepted == a.qps && conns.is_empty() {
            return Ok(());
        }
        let mut extra: Vec<BorrowedFd<'_>> =
            conns.iter().map(|(c, _)| c.oob.stream.as_fd()).collect();
        if accepted < a.qps {
            extra.push(l.as_fd());
        }
        host.d.wait(&extra)?;
    }
}

/// Answers what `c`'s client has asked so far.
fn answer(host: &mut Host, c: &mut Conn) -> anyhow::Result<After> {
    while let Some(cmd) = c.oob.try_line()? {
        match cmd["cmd"].as_str() {
            Some("all") => return Ok(After::WaitsForAll),
            Some("quit") => {
                c.oob.send(&json!({"ok": true}))?;
                return Ok(After::Done);
            }
            _ => {}
        }
        let reply = handle(host, c, &cmd).unwrap_or_else(|e| json!({"error": e.to_string()}));
        c.oob.send(&reply)?;
    }
    Ok(if c.oob.closed {
        After::Done
    } else {
        After::Open
    })
}

/// Frees a finished connection's QP, CQ and buffer (a long-running server would otherwise
/// hold every transfer's buffer to the end).
fn free(host: &mut Host, c: &Conn) -> anyhow::Result<()> {
    let ep = &mut host.d.ep;
    ep.destroy_qp(c.qpn)?;
    ep.destroy_cq(c.cq)?;
    ep.deregister_mr(c.mr.id)?;
    host.d.mem.remove(c.mr.id);
    Ok(())
}

fn handle(host: &mut Host, c: &mut Conn, cmd: &Value) -> anyhow::Result<Value> {
    let name = cmd["cmd"].as_str().unwrap_or("");
    match name {
        "crc" | "read" | "fill" => {
            let r = c.range(u64_of(cmd, "off")?, u64_of(cmd, "len")?)?;
            match name {
                "crc" => Ok(json!({"crc": crc32fast::hash(&c.mem(&host.d)?[r])})),
                "read" => Ok(json!({"hex": hex(&c.mem(&host.d)?[r])})),
                _ => {
                    let data = pattern(u64_of(cmd, "seed")?, r.len());
                    let m = host
                        .d
                        .mem
                        .get_mut(c.mr.id)
                        .ok_or_else(|| anyhow!("buffer missing"))?;
                    m[r].copy_from_slice(&data);
                    Ok(json!({"ok": true}))
                }
            }
        }
        "recvs" => {
            let wcs: Vec<Value> = c.completions.drain(..).map(|w| wc_json(&w)).collect();
            Ok(json!({ "wcs": wcs }))
        }
        "stats" => {
            // Count whatever is still queued in the socket before answering: the server may be
            // behind a burst (the flood's tail) when the question arrives.
            for _ in 0..10_000 {
                if host.d.poll()?.rx == 0 {
                    break;
                }
            }
            c.collect(&mut host.d);
            let snap = stats::snapshot(
                &host.id,
                &host.d.ep,
                rocev2_datapath::clock::now(),
                &host.d.datapath_stats(),
            );
            let capture: Vec<Value> = host
                .d
                .datapath()
                .capture
                .iter()
                .map(|(id, df)| json!({"id": id, "df": df}))
                .collect();
            let dasr = host.d.ep.receiver_cc().dasr.as_ref().map(|r| {
                json!({"state": format!("{:?}", r.state()), "throughput_bps": r.throughput.as_bps()})
            });
            Ok(json!({
                "snapshot": snap,
                "capture": capture,
                "iface_mtu": host.iface.mtu,
                "mp": c.mp_json(&host.d, false),
                "dasr": dasr,
            }))
        }
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
