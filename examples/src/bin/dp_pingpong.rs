//! `dp_pingpong`: the datapath's own round trip, without the engine: the floor under
//! `rc_pingpong --busy-poll` (`rocev2_examples::raw`).
//!
//! Both sides build one frame of `size` payload bytes to the other once, then bounce it `iters`
//! times, each side busy-polling its datapath as `--poll spin` does (`recv_with` back to back,
//! a `sched_yield` after each empty poll: `rocev2_datapath::driver` says why) and sending its
//! frame as soon as one arrives. `rc_pingpong`'s busy-polled round trip minus this one is what
//! the stack adds (BENCHMARKS.md, `deploy/bench/pingpong-vs-tcp.sh`).
//!
//! `--acks` adds RC's other two frames: an RC responder acknowledges each message, and
//! `rc_pingpong` (as rdma-core's) posts its next SEND only once its previous one is acknowledged
//! and the peer's has arrived. With `first`, each side sends a small frame (the ACK) as soon as
//! the peer's message arrives, then its own message when it may (the engine's order today: the
//! ACK leaves in the pass that received, before the application posts the answer); with `last`,
//! the answer leaves first and the ACK right behind it in the same `send`, and an ACK whose
//! answer must wait leaves at once. In copy mode the sender's `sendto` carries each frame through
//! veth and the peer's steering program, so the order decides what waits for what.
//!
//! Prints the same round-trip and CPU lines as the ping-pongs
//! (`rocev2_examples::print_round_trips`, `print_cpu`). The server's TCP port is `-p` (default
//! 18517).
//!
//! Deviations: none (not modelled on an existing tool).

use anyhow::{Result, bail};
use clap::{Parser, ValueEnum};
use rocev2_datapath::{RxBatch, TxBatch};
use rocev2_examples::raw::RawArgs;
use std::io::Read;
use std::time::{Duration, Instant};

/// Ping-pong one raw RoCEv2 frame through a rocev2 datapath, without the engine.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    raw: RawArgs,
    /// Payload bytes of the message (a UD SEND Only: BTH and DETH before them).
    #[arg(short = 's', long = "size", default_value_t = 64)]
    size: usize,
    /// Round trips.
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    iters: u32,
    /// RC's acknowledgements: none, first (before the answer) or last (after it).
    #[arg(long = "acks", value_enum, default_value_t = Acks::None)]
    acks: Acks,
}

/// Where each side's acknowledgement of the peer's message goes; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Acks {
    /// Two frames per round trip, no acknowledgements.
    None,
    /// Acknowledge on arrival, answer when allowed.
    First,
    /// Answer, then acknowledge, when the answer may leave at once.
    Last,
}

/// How long the client waits for an answer before sending its frame again (a lost frame).
const RESEND: Duration = Duration::from_millis(200);

fn main() -> Result<()> {
    let a = Args::parse();
    if a.acks != Acks::None && a.size == 0 {
        bail!("--acks needs -s 1 or more: an acknowledgement is told from a message by its length");
    }
    let mut p = a.raw.open("dp_pingpong")?;
    let message = p.frame(a.size)?;
    let ack = p.frame(0)?;
    let is = p.matcher()?;
    let mut rx = RxBatch::new(64);
    let mut tx = TxBatch::new(2);
    let mut rtts = Vec::with_capacity(a.iters as usize);
    let (mut resent, mut wrong) = (0u64, 0u64);
    let client = p.client;
    // `acked`: our last message was acknowledged (or needs no acknowledgement); `answer`: the
    // peer's message is not answered yet; `owed`: nor acknowledged.
    let (mut acked, mut answer, mut owed) = (true, false, false);
    let start = Instant::now();
    let cpu_start = rocev2_examples::cpu_time();
    if client {
        p.send(&mut tx, &[&message])?;
        acked = a.acks == Acks::None;
    }
    let mut t = Instant::now();
    // The client stops at its last answer; the server once it has answered every message
    // (its last answer may have to wait for the acknowledgement of the one before).
    let (n, mut answered) = (a.iters as usize, 0);
    while (client && rtts.len() < n) || (!client && answered < n) {
        let (mut messages, mut acks) = (0, 0);
        let kind = |len| (is(len, &message), is(len, &ack));
        let mut sort = |bytes: &[u8], _| match kind(bytes.len()) {
            (true, _) => messages += 1,
            (_, true) => acks += 1,
            _ => wrong += 1,
        };
        p.dp.recv_with(&mut rx, &mut sort)?;
        if messages > 0 {
            let now = Instant::now();
            rtts.push(now - t);
            t = now;
            answer = true;
            owed = a.acks != Acks::None;
        }
        acked |= acks > 0;
        if client && rtts.len() == n {
            break;
        }
        if owed && (a.acks == Acks::First || !(answer && acked)) {
            p.send(&mut tx, &[&ack])?;
            owed = false;
        }
        if answer && acked {
            if owed {
                p.send(&mut tx, &[&message, &ack])?;
            } else {
                p.send(&mut tx, &[&message])?;
            }
            (answer, owed, acked) = (false, false, a.acks == Acks::None);
            answered += 1;
        } else if messages + acks > 0 {
            continue;
        } else if client && t.elapsed() > RESEND {
            resent += 1;
            t = Instant::now();
            p.send(&mut tx, &[&message])?;
        } else if !client && rtts.is_empty() && t.elapsed() > Duration::from_secs(10) {
            bail!("no frame from {} in 10 s", p.peer());
        } else {
            std::thread::yield_now();
        }
    }
    let cpu = rocev2_examples::cpu_time().saturating_sub(cpu_start);
    rocev2_examples::print_summary(a.size as u64, a.iters, start.elapsed());
    rocev2_examples::print_round_trips(&rtts, !client);
    rocev2_examples::print_cpu(cpu, a.iters);
    println!("frames resent {resent}, other frames {wrong}");
    if !client {
        // Until the client hangs up: its last frame may still be on its way when we stop.
        let _ = p.ctl.read(&mut [0u8; 1]);
    }
    Ok(())
}
