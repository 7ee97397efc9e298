//! The client's workloads. Each returns the JSON of its `RESULT` line; every result but
//! `outlive`'s (whose server is dead by then) also carries the server's `stats` answer under
//! `"server"`.
//!
//! Deviations: none.

mod bulk;
mod flood;
mod outlive;
mod verbs;

use crate::args::Args;
use crate::peer::Peer;
use clap::ValueEnum;
use serde_json::json;

/// What the client does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// Every verb once, checked.
    Verbs,
    /// A large RDMA WRITE checked by CRC.
    Bulk,
    /// Alternate WRITE and READ messages over the bulk area, both directions checked by CRC.
    Mix,
    /// Bulk while injecting garbage frames at the server.
    Flood,
    /// Keep WRITEs outstanding until the server dies.
    Outlive,
    /// Inject frames shaped as rdma_rxe writes them (IPv4 Identification not 0, ICRC over it)
    /// at the server, then report its counters.
    Rxe,
}

/// Runs `a.workload` and prints its `RESULT`; then tells the server to quit.
///
/// # Errors
/// A check that failed, a datapath or side-channel failure, or the deadline.
pub fn run(peer: &mut Peer, a: &Args) -> anyhow::Result<()> {
    let bytes = a.bulk_bytes();
    if a.wait_for_all {
        peer.call(json!({"cmd": "all"}))?;
    }
    let mut result = match a.workload {
        Workload::Verbs => verbs::run(peer)?,
        Workload::Bulk => bulk::run(peer, bytes, a.msg_bytes, false)?,
        Workload::Mix => bulk::run(peer, bytes, a.msg_bytes, true)?,
        Workload::Flood => flood::flood(peer, bytes, a.msg_bytes)?,
        Workload::Rxe => flood::rxe(peer)?,
        Workload::Outlive => outlive::run(peer)?,
    };
    if a.workload != Workload::Outlive {
        // The client's own datapath counters (the server's are in its snapshot).
        result["datapath"] = peer
            .host
            .d
            .datapath_stats()
            .named()
            .into_iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect::<serde_json::Map<_, _>>()
            .into();
        result["server"] = peer.call(json!({"cmd": "stats"}))?;
        let _ = peer.call(json!({"cmd": "quit"}));
    }
    println!("RESULT {result}");
    Ok(())
}
