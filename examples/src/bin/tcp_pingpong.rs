//! `tcp_pingpong`: the TCP baseline for `rc_pingpong --lat`: one TCP connection with
//! `TCP_NODELAY`, the client sends `size` bytes, the server echoes them, `iters` times; prints
//! the same throughput and usec/iter lines as `rc_pingpong` plus the round-trip median and p99
//! and the CPU time this process used per round trip.
//!
//! Deviations: none (not modelled on an existing tool).

use anyhow::{Context, Result};
use clap::Parser;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

/// TCP ping-pong with TCP_NODELAY, for comparison with rc_pingpong.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// TCP port.
    #[arg(short = 'p', long = "port", default_value_t = 18516)]
    port: u16,
    /// Message size.
    #[arg(short = 's', long = "size", default_value_t = 4096)]
    size: usize,
    /// Round trips.
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    iters: u32,
    /// Server to connect to; none: be the server.
    servername: Option<String>,
}

fn main() -> Result<()> {
    let a = Args::parse();
    let mut s = match &a.servername {
        None => rocev2_examples::listen(a.port)?.accept()?.0,
        Some(h) => TcpStream::connect((h.as_str(), a.port))
            .with_context(|| format!("connecting to {h}:{}", a.port))?,
    };
    s.set_nodelay(true)?;
    let mut buf = vec![0x5au8; a.size];
    let mut rtts = Vec::with_capacity(a.iters as usize);
    let start = Instant::now();
    let cpu_start = rocev2_examples::cpu_time();
    for _ in 0..a.iters {
        let t = Instant::now();
        if a.servername.is_some() {
            s.write_all(&buf)?;
            s.read_exact(&mut buf)?;
        } else {
            s.read_exact(&mut buf)?;
            s.write_all(&buf)?;
        }
        rtts.push(t.elapsed());
    }
    let cpu = rocev2_examples::cpu_time().saturating_sub(cpu_start);
    rocev2_examples::print_summary(a.size as u64, a.iters, start.elapsed());
    rocev2_examples::print_round_trips(&rtts, a.servername.is_none());
    rocev2_examples::print_cpu(cpu, a.iters);
    Ok(())
}
