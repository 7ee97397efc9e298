//! The soak command: thousands of seeded in-memory connections of mixed verbs over links with
//! 0–10% loss, duplication, reordering and corruption, every byte and every atomic checked
//! (`rocev2_core::testing::soak`). Not run by CI, which runs a few hundred seeds
//! (`tests/soak.rs`); results in docs/reliability.md.
//!
//! ```sh
//! cargo run --release -p rocev2-core --features testing --example soak -- --seeds 10000
//! cargo run --release -p rocev2-core --features testing --example soak -- --from 4242 --seeds 1
//! ```
//!
//! Options: `--from S` (first seed, default 0), `--seeds N` (how many, default 10000),
//! `--threads T` (default: the machine's cores), `--trace` (print every frame of each failing
//! seed, replayed). Prints every failure with its seed and exits 1 if there was one.

use rocev2_core::testing::soak::{self, Failure, Outcome};
use rocev2_core::wire::FrameRepr;
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

fn arg(args: &[String], name: &str, default: u64) -> Result<u64, String> {
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{name} takes a whole number")),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let (from, count, threads) = match (
        arg(&args, "--from", 0),
        arg(&args, "--seeds", 10_000),
        arg(&args, "--threads", cores),
    ) {
        (Ok(f), Ok(n), Ok(t)) => (f, n, t.max(1)),
        (Err(e), ..) | (_, Err(e), _) | (.., Err(e)) => {
            eprintln!("soak: {e} (options: --from S --seeds N --threads T)");
            return ExitCode::from(2);
        }
    };
    let next = AtomicU64::new(from);
    let end = from.saturating_add(count);
    let outcomes: Mutex<Vec<Outcome>> = Mutex::new(Vec::new());
    let failures: Mutex<Vec<Failure>> = Mutex::new(Vec::new());
    let start = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= end {
                        break;
                    }
                    match soak::run(seed) {
                        Ok(o) => outcomes.lock().unwrap().push(o),
                        Err(f) => {
                            eprintln!("FAILED seed {}: {}", f.seed, f.what);
                            failures.lock().unwrap().push(f);
                        }
                    }
                }
            });
        }
    });
    let outcomes = outcomes.into_inner().unwrap();
    let failures = failures.into_inner().unwrap();
    if args.iter().any(|a| a == "--trace") {
        for f in &failures {
            let mut trace = Some(Vec::new());
            let _ = soak::run_traced(f.seed, &mut trace);
            println!("seed {}: every frame sent, in order", f.seed);
            for (from_a, frame) in trace.unwrap_or_default() {
                let dir = if from_a { "A→B" } else { "B→A" };
                match FrameRepr::parse(&frame) {
                    Ok((repr, payload)) => println!("{dir} {} +{}B", repr.roce, payload.len()),
                    Err(e) => println!("{dir} unparsable: {e}"),
                }
            }
        }
    }
    let mp = outcomes.iter().filter(|o| o.multipath).count();
    let wrs: usize = outcomes.iter().map(|o| o.work_requests).sum();
    let bytes: u64 = outcomes.iter().map(|o| o.bytes).sum();
    let faults: u64 = outcomes.iter().map(|o| o.faults).sum();
    println!(
        "soak: seeds {from}..{end}: {} passed ({} RC, {mp} multipath), {} failed; {wrs} work \
         requests, {bytes} payload bytes, {faults} frames lost/duplicated/reordered/corrupted; \
         {:.1} s on {threads} threads",
        outcomes.len(),
        outcomes.len() - mp,
        failures.len(),
        start.elapsed().as_secs_f64()
    );
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
