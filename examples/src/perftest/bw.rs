//! The bandwidth tests (`ib_write_bw`, `ib_read_bw`, `ib_send_bw`): perftest's `run_iter_bw`
//! (client) and `run_iter_bw_server` (send server), and the end of each tool's `main`.

use super::{Ctx, Verb, report};
use anyhow::{Result, bail};
use rdmacm_shim::perftest::BwReport;
use rocev2::{Rkey, SendOp, SendWr, WcStatus};
use std::time::{Duration, Instant};

/// Runs every size, prints the table and closes as the tool does.
pub(super) fn run(c: &mut Ctx) -> Result<()> {
    let gbits = c.args.report_gbits;
    let sizes = c.params.sizes.clone();
    let send = c.test.verb == Verb::Send;
    if !c.client && !send {
        // The WRITE/READ server only serves until the client's end-of-test handshake, then
        // shows the client's figures (`xchg_bw_reports`, `print_full_bw_report`).
        report::print_bw_heading(gbits);
        c.sync()?;
        let zero = BwReport {
            size: 0,
            iters: 0,
            bw_peak: 0.0,
            bw_avg: 0.0,
            msg_rate: 0.0,
        };
        let theirs = c.step(|x| x.bw_reports(&zero))?;
        report::print_bw_row(&theirs, gbits);
        if c.args.check && c.test.verb == Verb::Write {
            c.check(c.half, 0, theirs.size)?;
        }
        return c.close();
    }
    report::print_bw_heading(gbits);
    let mut last = None;
    for size in sizes {
        if send && !c.client {
            c.post_recvs(size, c.params.rx_depth)?;
        }
        if send {
            c.sync()?;
        }
        let r = if c.client {
            client(c, size)?
        } else {
            server(c, size)?
        };
        report::print_bw_row(&r, gbits);
        last = Some(r);
    }
    let size = last.map_or(0, |r| r.size);
    if send {
        if c.args.check && !c.client {
            c.check(c.half, 0, size)?;
        }
        return c.close();
    }
    c.sync()?;
    if let Some(r) = last {
        c.step(|x| x.bw_reports(&r))?;
    }
    if c.args.check && c.test.verb == Verb::Read {
        c.check(0, c.half, size)?;
    }
    c.close()
}

/// `run_iter_bw`: `iters` requests, `tx_depth` outstanding, one in `cq_mod` signaled (and the
/// last); returns the report.
fn client(c: &mut Ctx, size: u64) -> Result<BwReport> {
    let n = c.params.iters as usize;
    let (depth, cq_mod) = (c.params.tx_depth as usize, c.params.cq_mod as usize);
    let rkey = Rkey::new(c.peer.rkey);
    let op = match c.test.verb {
        Verb::Write => SendOp::Write {
            remote_addr: c.peer.vaddr,
            rkey,
        },
        Verb::Read => SendOp::Read {
            remote_addr: c.peer.vaddr,
            rkey,
        },
        Verb::Send => SendOp::Send,
    };
    let now = Instant::now();
    let (mut tposted, mut tcompleted) = (vec![now; n], vec![now; n]);
    let signaled: Vec<usize> = (0..n)
        .filter(|i| (i + 1) % cq_mod == 0 || i + 1 == n)
        .collect();
    let (mut posted, mut completed) = (0usize, 0usize);
    let mut wcs = Vec::new();
    while completed < n {
        while posted < n && posted - completed < depth {
            let mut wr = SendWr::new(posted as u64, op).sge(c.mr.sge(0, size as u32)?);
            wr.signaled = (posted + 1) % cq_mod == 0 || posted + 1 == n;
            tposted[posted] = Instant::now();
            c.dev.post_send(c.qp, wr)?;
            posted += 1;
        }
        wcs.clear();
        c.dev
            .wait_cq(c.send_cq, &mut wcs, 16, Duration::from_secs(30))?;
        let t = Instant::now();
        for wc in &wcs {
            if wc.status != WcStatus::Success {
                bail!(
                    "Completion with error at client: wr_id {} {:?}",
                    wc.wr_id,
                    wc.status
                );
            }
            let j = wc.wr_id as usize;
            tcompleted[completed..=j].fill(t);
            completed = j + 1;
        }
    }
    Ok(report::bw_report(
        size,
        &tposted,
        &tcompleted,
        &signaled,
        c.args.no_peak,
        c.args.report_gbits,
    ))
}

/// `run_iter_bw_server`: receives until `iters` arrived, keeping the receive queue full. No
/// peak (perftest sets `noPeak` for this side); the average runs from the first receive.
fn server(c: &mut Ctx, size: u64) -> Result<BwReport> {
    let n = c.params.iters;
    let mut posted = u64::from(c.params.rx_depth);
    let (mut got, mut first, mut last) = (0u64, None, Instant::now());
    let mut wcs = Vec::new();
    while got < n {
        wcs.clear();
        c.dev
            .wait_cq(c.recv_cq, &mut wcs, 16, Duration::from_secs(30))?;
        last = Instant::now();
        first.get_or_insert(last);
        for wc in &wcs {
            if wc.status != WcStatus::Success || wc.byte_len != size as u32 {
                bail!(
                    "Completion with error at server: {:?}, {} bytes of {size}",
                    wc.status,
                    wc.byte_len
                );
            }
            got += 1;
        }
        let want = (n - got).min(u64::from(c.params.rx_depth));
        let outstanding = posted - got;
        if want > outstanding {
            c.post_recvs(size, (want - outstanding) as u32)?;
            posted += want - outstanding;
        }
    }
    let secs = (last - first.unwrap_or(last)).as_secs_f64().max(1e-9);
    let unit = if c.args.report_gbits {
        125e6
    } else {
        f64::from(1u32 << 20)
    };
    Ok(BwReport {
        size,
        iters: n,
        bw_peak: 0.0,
        bw_avg: (size * n) as f64 / secs / unit,
        msg_rate: n as f64 / secs / 1e6,
    })
}
