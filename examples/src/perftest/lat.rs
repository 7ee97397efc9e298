//! The latency tests (`ib_write_lat`, `ib_read_lat`, `ib_send_lat`): perftest's
//! `run_iter_lat_write`, `run_iter_lat` and `run_iter_lat_send`, and the end of each tool's
//! `main`.

use super::{Ctx, Verb, report};
use anyhow::{Result, bail};
use rocev2::{Cq, Rkey, SendOp, SendWr, WcStatus};
use std::time::{Duration, Instant};

/// Runs every size, prints the table and closes as the tool does.
pub(super) fn run(c: &mut Ctx) -> Result<()> {
    let sizes = c.params.sizes.clone();
    if c.test.verb == Verb::Read && !c.client {
        // Only the client posts READs; the server serves them until the client closes.
        return c.close();
    }
    report::print_lat_heading();
    for size in sizes {
        let (tposted, rtt_factor) = match c.test.verb {
            Verb::Write => (write(c, size)?, 2.0),
            Verb::Read => (read(c, size)?, 1.0),
            Verb::Send => {
                c.post_recvs(size, c.params.rx_depth)?;
                c.sync()?;
                (send(c, size)?, 2.0)
            }
        };
        report::print_lat_row(size, &tposted, rtt_factor);
    }
    match c.test.verb {
        // write_lat's main ends without closing the connection.
        Verb::Write => Ok(()),
        _ => c.close(),
    }
}

/// Waits for one completion on `cq`, which must be a success.
fn one(c: &mut Ctx, cq: Cq, what: &str) -> Result<()> {
    let mut wcs = Vec::new();
    c.dev.wait_cq(cq, &mut wcs, 1, Duration::from_secs(30))?;
    if wcs[0].status != WcStatus::Success {
        bail!("{what} completion with error: {:?}", wcs[0].status);
    }
    Ok(())
}

/// `run_iter_lat_write`: the server writes first; each side waits for the peer's count in
/// the last byte of its second half, then writes its own.
fn write(c: &mut Ctx, size: u64) -> Result<Vec<Instant>> {
    let n = c.params.iters as usize;
    let post_off = (size - 1) as usize;
    let poll_off = (c.half + size - 1) as usize;
    let wr = SendWr::new(
        0,
        SendOp::Write {
            remote_addr: c.peer.vaddr,
            rkey: Rkey::new(c.peer.rkey),
        },
    )
    .sge(c.mr.sge(0, size as u32)?);
    let mut tposted = Vec::with_capacity(n);
    let (mut scnt, mut rcnt) = (0usize, 0usize);
    while scnt < n || rcnt < n {
        if rcnt < n && (scnt >= 1 || c.client) {
            rcnt += 1;
            let want = rcnt as u8;
            let mr = c.mr;
            c.drive_until("the peer's RDMA WRITE", |d| {
                d.mr_guard(&mr).map(|b| b[poll_off]).ok() == Some(want)
            })?;
        }
        if scnt < n {
            tposted.push(Instant::now());
            scnt += 1;
            c.dev.mr_guard(&c.mr)?[post_off] = scnt as u8;
            c.dev.post_send(c.qp, wr.clone())?;
            one(c, c.send_cq, "RDMA WRITE")?;
        }
    }
    Ok(tposted)
}

/// `run_iter_lat`: one READ at a time.
fn read(c: &mut Ctx, size: u64) -> Result<Vec<Instant>> {
    let wr = SendWr::new(
        0,
        SendOp::Read {
            remote_addr: c.peer.vaddr,
            rkey: Rkey::new(c.peer.rkey),
        },
    )
    .sge(c.mr.sge(0, size as u32)?);
    let mut tposted = Vec::with_capacity(c.params.iters as usize);
    for _ in 0..c.params.iters {
        tposted.push(Instant::now());
        c.dev.post_send(c.qp, wr.clone())?;
        one(c, c.send_cq, "RDMA READ")?;
    }
    Ok(tposted)
}

/// `run_iter_lat_send`: the client sends first; each side waits for the peer's SEND, then
/// sends, reposting a receive while more are to come.
fn send(c: &mut Ctx, size: u64) -> Result<Vec<Instant>> {
    let n = c.params.iters;
    let depth = u64::from(c.params.rx_depth);
    let wr = SendWr::new(0, SendOp::Send).sge(c.mr.sge(0, size as u32)?);
    let mut tposted = Vec::with_capacity(n as usize);
    let (mut scnt, mut rcnt) = (0u64, 0u64);
    while scnt < n || rcnt < n {
        if rcnt < n && (scnt >= 1 || !c.client) {
            one(c, c.recv_cq, "receive")?;
            rcnt += 1;
            if rcnt + depth <= n {
                c.post_recvs(size, 1)?;
            }
        }
        if scnt < n {
            tposted.push(Instant::now());
            scnt += 1;
            c.dev.post_send(c.qp, wr.clone())?;
            one(c, c.send_cq, "SEND")?;
        }
    }
    Ok(tposted)
}
