//! Output shared by the ping-pong examples (`rc_pingpong`, `tcp_pingpong`), so the RDMA and TCP
//! figures that `deploy/bench/` compares are computed and printed the same way.

use std::time::Duration;

/// Prints ibv_rc_pingpong's two summary lines for `iters` round trips of `size` bytes each way.
pub fn print_summary(size: u64, iters: u32, elapsed: Duration) {
    let usec = elapsed.as_secs_f64() * 1e6;
    let bytes = size * u64::from(iters) * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{iters} iters in {:.2} seconds = {:.2} usec/iter",
        usec / 1e6,
        usec / f64::from(iters)
    );
}

/// Prints the median and p99 of the round trips; a server skips its first, which includes
/// waiting for the client's first message.
pub fn print_round_trips(rtts: &[Duration], server: bool) {
    let skip = usize::from(server).min(rtts.len().saturating_sub(1));
    let mut v: Vec<f64> = rtts[skip..].iter().map(|d| d.as_secs_f64() * 1e6).collect();
    if v.is_empty() {
        return;
    }
    v.sort_by(f64::total_cmp);
    let pct = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    println!(
        "round trip: median {:.2} usec, p99 {:.2} usec, {} samples",
        pct(0.5),
        pct(0.99),
        v.len()
    );
}
