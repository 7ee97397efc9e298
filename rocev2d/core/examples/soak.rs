//! The soak command: thousands of seeded in-memory connections of mixed verbs over links with
//! 0–10% loss, duplication, reordering and corruption, every byte and every atomic checked
//! (`rocev2_core::testing::soak`). CI runs 50,000 seeds (`tests/soak.rs`); results in
//! docs/reliability.md.
//!
//! ```sh
//! cargo run --release -p rocev2-core --features testing --example soak -- --seeds 10000
//! cargo run --release -p rocev2-core --features testing --example soak -- --from 4242 --seeds 1
//! ```
//!
//! Options: `--from S` (first seed, default 0), `--seeds N` (how many, default 10000),
//! `--threads T` (default: the machine's cores), `--trace` (replay each failing seed and print,
//! in time order, every frame sent and every frame delivered: accepted, dropped by the endpoint
//! and why, or what the receiving QP's counters say it was — duplicate, out of sequence,
//! unexpected; a frame sent and never delivered was lost on the link). Prints every failure
//! with its seed and exits 1 if there was one.

use rocev2_core::qp::QpCounters;
use rocev2_core::testing::Event;
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
            let mut events = Some(Vec::new());
            let _ = soak::run_traced(f.seed, &mut events);
            println!(
                "seed {}: every frame sent (->) and delivered (<-), in time order",
                f.seed
            );
            print_events(&events.unwrap_or_default());
        }
    }
    let mp = outcomes.iter().filter(|o| o.multipath).count();
    let exhausted = outcomes.iter().filter(|o| o.exhausted).count();
    let wrs: usize = outcomes.iter().map(|o| o.work_requests).sum();
    let bytes: u64 = outcomes.iter().map(|o| o.bytes).sum();
    let faults: u64 = outcomes.iter().map(|o| o.faults).sum();
    println!(
        "soak: seeds {from}..{end}: {} passed ({} RC, {mp} multipath), of which {exhausted} \
         spent a retry budget on attempts the link spoiled, {} failed; {wrs} work requests, \
         {bytes} payload bytes, {faults} frames lost/duplicated/reordered/corrupted; {:.1} s on \
         {threads} threads",
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

/// Prints a replayed run's events, one line each; a delivered frame says what became of it.
fn print_events(events: &[Event]) {
    // The counters of each side's QP after the last frame it received, to name what changed.
    let mut last = [QpCounters::default(); 2];
    for e in events {
        match e {
            Event::Sent {
                at,
                from_a,
                frame,
                fate,
            } => {
                let side = if *from_a { "A->" } else { "B->" };
                let mut link = Vec::new();
                if fate.lost {
                    link.push("lost");
                }
                if fate.corrupted {
                    link.push("corrupted");
                }
                if fate.copies > 1 {
                    link.push("duplicated");
                }
                if fate.held_back > 0 {
                    link.push("held back");
                }
                let link = if link.is_empty() {
                    String::new()
                } else {
                    format!(" [link: {}]", link.join(", "))
                };
                println!("{:>12} {side} {}{link}", at.as_nanos(), describe(frame));
            }
            Event::Received {
                at,
                to_a,
                frame,
                result,
                counters,
            } => {
                let side = if *to_a { "<-A" } else { "<-B" };
                let fate = match (result, counters) {
                    (Err(reason), _) => format!("dropped: {}", reason.name()),
                    (Ok(()), Some(c)) => {
                        let before = &mut last[usize::from(!*to_a)];
                        let fate = qp_fate(before, c);
                        *before = *c;
                        fate
                    }
                    (Ok(()), None) => "accepted".to_string(),
                };
                println!("{:>12} {side} {} [{fate}]", at.as_nanos(), describe(frame));
            }
        }
    }
}

/// What the receiving QP did with a frame, read from how its counters moved.
fn qp_fate(before: &QpCounters, after: &QpCounters) -> String {
    let moved = [
        (
            "duplicate request",
            after.duplicate_requests > before.duplicate_requests,
        ),
        (
            "out of sequence, dropped",
            after.out_of_sequence > before.out_of_sequence,
        ),
        (
            "unexpected response, dropped",
            after.unexpected_responses > before.unexpected_responses,
        ),
        ("NAK received", after.naks_received > before.naks_received),
        ("NAK sent", after.naks_sent > before.naks_sent),
    ];
    let named: Vec<&str> = moved.iter().filter(|(_, m)| *m).map(|(n, _)| *n).collect();
    if named.is_empty() {
        "accepted".to_string()
    } else {
        named.join(", ")
    }
}

/// A frame's transport headers and payload length, or why it does not parse (corrupted).
fn describe(frame: &[u8]) -> String {
    match FrameRepr::parse(frame) {
        Ok((repr, payload)) => format!("{} +{}B", repr.roce, payload.len()),
        Err(e) => format!("unparsable: {e}"),
    }
}
