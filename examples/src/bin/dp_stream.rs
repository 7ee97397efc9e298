//! `dp_stream`: the datapath's own goodput, without the engine: the ceiling over `write_bw`
//! (`rocev2_examples::raw`).
//!
//! The client builds one frame of `size` payload bytes (default 4096, a full IBA MTU 4096
//! packet) once and sends it `iters` times as fast as its datapath takes frames, copying it
//! into the datapath's transmit buffers (`transmit_with`, as the engine builds its frames) in
//! batches of up to 64, with no flow control; then it tells the server, over the set-up connection, how
//! many it sent. The server counts the frames that arrive, busy-polling as `--poll spin` does,
//! and reports their payload per second from the first arrival to the last, and how many were
//! lost (sent faster than its datapath received them). No QP, no PSN, no ICRC, no ACK, no copy
//! into a memory region: `write_bw`'s goodput over the same datapath divided by this one is
//! what the stack costs (BENCHMARKS.md, `deploy/bench/pingpong-vs-tcp.sh`).
//!
//! Each side prints `goodput: G Gbit/s` (the client: what it sent; the server: what arrived)
//! and the CPU time it used per GiB. The server's TCP port is `-p` (default 18517).
//!
//! Deviations: none (not modelled on an existing tool).

use anyhow::{Result, bail};
use clap::Parser;
use rocev2_datapath::{RxBatch, TxBatch};
use rocev2_examples::raw::RawArgs;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// Stream raw RoCEv2 frames through a rocev2 datapath, without the engine.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    raw: RawArgs,
    /// Payload bytes per frame (a UD SEND Only: BTH and DETH before them).
    #[arg(short = 's', long = "size", default_value_t = 4096)]
    size: usize,
    /// Frames to send.
    #[arg(short = 'n', long = "iters", default_value_t = 262_144)]
    iters: u64,
}

/// Frames per `send`: the engine's transmit batch.
const BATCH: usize = 64;

fn main() -> Result<()> {
    let a = Args::parse();
    let mut p = a.raw.open("dp_stream")?;
    let frame = p.frame(a.size)?;
    let payload = a.size as u64;
    let cpu_start = rocev2_examples::cpu_time();
    let start = Instant::now();
    let bytes = if p.client {
        // Built where the datapath sends from (AF_XDP: in its UMEM), as the engine does: one
        // copy of each frame, as the engine makes one of each payload.
        let mut tx = TxBatch::new(BATCH);
        let (mut built, mut sent) = (0, 0);
        let len = frame.len();
        while sent < a.iters {
            let n = if tx.is_empty() {
                p.dp.transmit_with(&mut tx, &mut |buf| {
                    (built < a.iters).then(|| {
                        buf.frame_mut(len).copy_from_slice(&frame);
                        built += 1;
                        len
                    })
                })?
            } else {
                p.dp.send(&mut tx)?
            };
            sent += n as u64;
            if n == 0 {
                std::thread::yield_now();
            }
        }
        p.ctl.write_all(&sent.to_be_bytes())?;
        report("sent", sent, payload, start.elapsed());
        sent * payload
    } else {
        let is = p.matcher()?;
        let mut rx = RxBatch::new(BATCH);
        let (mut got, mut other) = (0u64, 0u64);
        let mut first_last: Option<(Instant, Instant)> = None;
        let mut sent = [0u8; 8];
        let mut told = 0;
        p.ctl.set_nonblocking(true)?;
        let mut idle_since = Instant::now();
        loop {
            let n = p.dp.recv_with(&mut rx, &mut |bytes, _| {
                if is(bytes.len(), &frame) {
                    got += 1;
                } else {
                    other += 1;
                }
            })?;
            if n > 0 {
                let now = Instant::now();
                first_last = Some((first_last.map_or(now, |(f, _)| f), now));
                idle_since = now;
                continue;
            }
            // Idle: has the client finished? Its count arrives after its last frame left.
            if told < sent.len() {
                match p.ctl.read(&mut sent[told..]) {
                    Ok(0) => bail!("the client hung up before saying how many frames it sent"),
                    Ok(k) => told += k,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e.into()),
                }
            } else if idle_since.elapsed() > Duration::from_millis(50) {
                break;
            }
            if first_last.is_none() && idle_since.elapsed() > Duration::from_secs(10) {
                bail!("no frame from {} in 10 s", p.peer());
            }
            std::thread::yield_now();
        }
        let sent = u64::from_be_bytes(sent);
        let (first, last) = first_last.unwrap_or((start, start));
        report("received", got, payload, last - first);
        println!(
            "frames sent {sent}, received {got}, lost {}, other frames {other}",
            sent.saturating_sub(got)
        );
        got * payload
    };
    let cpu = rocev2_examples::cpu_time().saturating_sub(cpu_start);
    println!(
        "cpu: {:.3} s per GiB (user + system of this process)",
        cpu.as_secs_f64() / (bytes.max(1) as f64 / f64::from(1u32 << 30))
    );
    Ok(())
}

/// Prints `frames` of `payload` bytes over `elapsed` as Gbit/s of payload.
fn report(what: &str, frames: u64, payload: u64, elapsed: Duration) {
    let bits = (frames * payload * 8) as f64;
    println!(
        "{what} {frames} frames of {payload} bytes in {:.3} s",
        elapsed.as_secs_f64()
    );
    println!(
        "goodput: {:.2} Gbit/s",
        bits / elapsed.as_secs_f64().max(1e-9) / 1e9
    );
}
