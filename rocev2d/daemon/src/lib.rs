//! The parts of `rocev2d` other programs share: the configuration file ([`config`]: the
//! wire-test tool `rocev2-wiretest` reads its `[cc]` section) and the counters snapshot
//! ([`stats`]: the tool answers its client with the same document `rocev2d stats` prints).
//!
//! Deviations: none.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::todo,
        clippy::unimplemented
    )
)]

pub mod closer;
pub mod config;
pub mod devices;
pub mod host;
pub mod stats;

/// Logs to stderr through `tracing-subscriber`, filtered by `RUST_LOG` (default `info`), in
/// colour only on a terminal: the daemon's and the wire-test tool's logging.
pub fn init_logging() {
    use std::io::IsTerminal as _;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
}

/// `aa:bb:cc:dd:ee:ff`, as `ip link` prints a MAC address.
pub fn mac(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}
