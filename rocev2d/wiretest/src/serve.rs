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
//! Under Dart the server prints a `DASR {json}` line every second: the receiver's state (seed 000
//! Fig. 5) and its last measured receive rate, and how many milliseconds of the second it spent
//! in each state (sampled each time the server wakes), so a run shows when the receiver judged
//! a congestion its own (N = |AUSS|, CNPs held) and when not (N = 1, DCQCN's CNPs).
//!
//! Deviations: none.

use crate::args::Args;
use crate::oob::{hex, u64_of};
use crate::peer::{Conn, Host, pattern};
use crate::setup;
use anyhow::{Context as _, anyhow, bail};
use rocev2_core::cc::DartState;
use rocev2_core::cq::WorkCompletion;
use rocev2d::stats;
use serde_json::{Value, json};
use std::io::ErrorKind;
use std::net::TcpListener;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

/// How often the `DASR` line is printed.
const DASR_EVERY: Duration = Duration::from_secs(1);

/// Time spent in each DASR receiver state since the last `DASR` line.
struct DasrLog {
    start: Instant,
    last: Instant,
    line_at: Instant,
    /// Milliseconds in no congestion, receiver congestion, non-receiver congestion.
    ms: [f64; 3],
}

impl DasrLog {
    fn new() -> DasrLog {
        let now = Instant::now();
        DasrLog {
            start: now,
            last: now,
            line_at: now + DASR_EVERY,
            ms: [0.0; 3],
        }
    }

    /// Adds the time since the last call to the receiver's current state; prints the line
    /// when a second is up. Nothing without DASR.
    fn note(&mut self, host: &Host) {
        let Some(r) = host.d.ep.receiver_cc().dasr.as_ref() else {
            return;
        };
        let now = Instant::now();
        let k = match r.state() {
            DartState::NoCongestion => 0,
            DartState::ReceiverCongestion => 1,
            DartState::NonReceiverCongestion => 2,
        };
        self.ms[k] += (now - self.last).as_secs_f64() * 1000.0;
        self.last = now;
        if now >= self.line_at {
            let [no, receiver, non_receiver] = self.ms.map(|m| m.round() as u64);
            println!(
                "DASR {}",
                json!({
                    "t_ms": (now - self.start).as_millis() as u64,
                    "state": format!("{:?}", r.state()),
                    "throughput_mbps": r.throughput.as_bps() as f64 / 1e6,
                    "ms": {"no": no, "receiver": receiver, "non_receiver": non_receiver},
                })
            );
            self.ms = [0.0; 3];
            self.line_at = now + DASR_EVERY;
        }
    }
}

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
    let mut dasr = DasrLog::new();
    loop {
        host.d.poll()?;
        dasr.note(&host);
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
