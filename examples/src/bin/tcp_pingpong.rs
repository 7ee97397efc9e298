//! `tcp_pingpong`: the TCP baseline for `rc_pingpong --lat`: one TCP connection with
//! `TCP_NODELAY`, the client sends `size` bytes, the server echoes them, `iters` times; prints
//! the same throughput and usec/iter lines as `rc_pingpong` plus the round-trip median and p99.
//!
//! Deviations: none (not modelled on an existing tool).

use anyhow::{Context, Result};
use clap::Parser;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
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
        None => {
            let l = TcpListener::bind(("::", a.port))
                .or_else(|_| TcpListener::bind(("0.0.0.0", a.port)))
                .with_context(|| format!("listening on TCP port {}", a.port))?;
            l.accept()?.0
        }
        Some(h) => TcpStream::connect((h.as_str(), a.port))
            .with_context(|| format!("connecting to {h}:{}", a.port))?,
    };
    s.set_nodelay(true)?;
    let mut buf = vec![0x5au8; a.size];
    let mut rtts = Vec::with_capacity(a.iters as usize);
    let start = Instant::now();
    for _ in 0..a.iters {
        let t = Instant::now();
        if a.servername.is_some() {
            s.write_all(&buf)?;
            s.read_exact(&mut buf)?;
        } else {
            s.read_exact(&mut buf)?;
            s.write_all(&buf)?;
        }
        rtts.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let usec = start.elapsed().as_secs_f64() * 1e6;
    let bytes = a.size as u64 * u64::from(a.iters) * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{} iters in {:.2} seconds = {:.2} usec/iter",
        a.iters,
        usec / 1e6,
        usec / f64::from(a.iters)
    );
    // The server's first round includes waiting for the client.
    let skip = usize::from(a.servername.is_none()).min(rtts.len().saturating_sub(1));
    let mut v = rtts[skip..].to_vec();
    v.sort_by(f64::total_cmp);
    if !v.is_empty() {
        let pct = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
        println!(
            "round trip: median {:.2} usec, p99 {:.2} usec, {} samples",
            pct(0.5),
            pct(0.99),
            v.len()
        );
    }
    Ok(())
}
