//! `outlive`: keeps WRITEs outstanding while the server lives; prints `STARTED` once the first
//! completes (the test then kills the server), and checks that the first failure is
//! `RetryExcErr` (the retry count ran out) and every later work request flushes.
//!
//! Deviations: none.

use crate::peer::{Peer, WRITE_OFF};
use anyhow::ensure;
use rocev2_core::cq::WcStatus;
use rocev2_core::qp::{SendOp, SendWr};
use serde_json::{Value, json};

/// Writes until the server is gone, then checks how the QP failed.
///
/// # Errors
/// A first failure other than `RetryExcErr`, a later one other than a flush, or the deadline.
pub fn run(peer: &mut Peer) -> anyhow::Result<Value> {
    let r = peer.conn.remote_mr;
    let mut posted = 0u64;
    let mut statuses: Vec<WcStatus> = Vec::new();
    let mut started = false;
    let mut failed = false;
    loop {
        peer.check_deadline()?;
        while !failed && posted - statuses.len() as u64 <= 8 {
            let wr = SendWr::new(
                posted,
                SendOp::Write {
                    remote_addr: r.addr + WRITE_OFF,
                    rkey: r.rkey,
                },
            )
            .sge(peer.sge(WRITE_OFF, 60 << 10));
            peer.post(wr)?;
            posted += 1;
        }
        peer.turn()?;
        for wc in peer.conn.completions.drain(..) {
            failed |= wc.status != WcStatus::Success;
            statuses.push(wc.status);
        }
        if !started && statuses.first() == Some(&WcStatus::Success) {
            started = true;
            println!("STARTED");
        }
        if failed && statuses.len() as u64 == posted {
            break;
        }
        peer.host.d.wait(&[])?;
    }
    let first_error = statuses.iter().find(|s| **s != WcStatus::Success);
    let after: Vec<_> = statuses
        .iter()
        .skip_while(|s| **s == WcStatus::Success)
        .skip(1)
        .collect();
    ensure!(
        first_error == Some(&WcStatus::RetryExcErr),
        "first failure was {first_error:?}, expected RetryExcErr"
    );
    ensure!(
        after.iter().all(|s| **s == WcStatus::WrFlushErr),
        "after the failure: {after:?}"
    );
    let qp = peer
        .host
        .d
        .ep
        .qp(peer.conn.qpn)
        .map(|q| (q.state(), *q.counters()));
    Ok(json!({
        "completed": statuses.iter().filter(|s| **s == WcStatus::Success).count(),
        "first_error": format!("{:?}", WcStatus::RetryExcErr),
        "flushed": after.len(),
        "qp_state": format!("{:?}", qp.map(|q| q.0)),
        "timeouts": qp.map(|q| q.1.timeouts),
    }))
}
