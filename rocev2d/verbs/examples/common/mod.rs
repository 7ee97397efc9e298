//! What every example does the same way: bring two QPs of a [`Device::pair`] to RTS, and wait
//! for one successful completion. Over a network, `rocev2::connect` does the first in one call
//! (examples/connect_tcp.rs); here both QPs are at hand, so each side learns the other's QP
//! number and PSN directly, as an ibverbs program does after its out-of-band exchange.

// Each example uses what it needs of this.
#![allow(dead_code)]

use rocev2::{ConnectOptions, Cq, Device, Qp, RemoteQp, WorkCompletion};
use std::time::Duration;

/// INIT→RTR→RTS for `qa` on `a` toward `qb` on `b`, and back.
pub fn join(a: &Device, qa: Qp, b: &Device, qb: Qp) -> rocev2::Result<()> {
    let (psn_a, psn_b) = (rocev2::random_psn(), rocev2::random_psn());
    let toward = |peer: &Device, qpn, psn| -> rocev2::Result<RemoteQp> {
        Ok(RemoteQp {
            qpn,
            psn,
            ip: peer.source_ip(false)?,
            mac: None, // resolved as the neighbour table (here: the pair) says
        })
    };
    let opts = |local_psn| ConnectOptions {
        local_psn,
        ..ConnectOptions::default()
    };
    a.connect(qa, &toward(b, qb.qpn(), psn_b)?, &opts(psn_a))?;
    b.connect(qb, &toward(a, qa.qpn(), psn_a)?, &opts(psn_b))
}

/// The next completion of `cq`, an error unless it succeeded (`ibv_poll_cq` in a loop, then
/// a look at `wc.status`).
pub fn wait_one(dev: &Device, cq: Cq) -> rocev2::Result<WorkCompletion> {
    let mut wcs = Vec::with_capacity(1);
    dev.wait_cq(cq, &mut wcs, 1, Duration::from_secs(5))?;
    rocev2::check(wcs.pop().ok_or(rocev2::Error::Timeout)?)
}
