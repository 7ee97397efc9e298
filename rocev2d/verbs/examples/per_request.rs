//! Several tokio tasks on one QP, each awaiting its own work request: one reaper task takes
//! every completion of the CQ (`Device::completions`) and hands each to the task that posted
//! it, through a one-shot channel registered under its `wr_id` before the post. A CQ delivers
//! completions in order to whoever polls it, so tasks polling it themselves would take each
//! other's; one reaper that dispatches is the pattern (async-rdma does the same inside).

mod common;
use rocev2::{AccessFlags, Device, Mr, Qp, SendOp, SendWr, WorkCompletion};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

const TASKS: u64 = 8;
const EACH: u64 = 50;

/// Completions awaited, by `wr_id`.
type Waiting = Arc<Mutex<HashMap<u64, oneshot::Sender<WorkCompletion>>>>;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(run())
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let (client, server) = Device::pair()?;
    let (cpd, spd) = (client.alloc_pd()?, server.alloc_pd()?);
    let src = client.register(cpd, vec![0; 8 * TASKS as usize], AccessFlags::LOCAL_WRITE)?;
    let rights = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let dst = server.register(spd, vec![0; 8 * TASKS as usize], rights)?;
    let (ccq, scq) = (client.create_cq(256)?, server.create_cq(16)?);
    let cqp = client.create_rc_qp(cpd, ccq, ccq)?;
    let sqp = server.create_rc_qp(spd, scq, scq)?;
    common::join(&client, cqp, &server, sqp)?;

    let waiting: Waiting = Arc::default();
    let reaper = tokio::spawn({
        let (client, waiting) = (client.clone(), Arc::clone(&waiting));
        async move {
            let mut wcs = client.completions(ccq);
            for _ in 0..TASKS * EACH {
                let wc = wcs.next().await?;
                let to = waiting.lock().unwrap().remove(&wc.wr_id);
                // A completion nobody awaits (an unsignaled request's error) has no taker.
                if let Some(to) = to {
                    let _ = to.send(wc);
                }
            }
            Ok::<_, rocev2::Error>(())
        }
    });
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (client, waiting) = (client.clone(), Arc::clone(&waiting));
        tasks.push(tokio::spawn(async move {
            write_each(&client, cqp, &src, &dst, &waiting, t).await
        }));
    }
    for t in tasks {
        t.await??;
    }
    reaper.await??;
    for t in 0..TASKS {
        assert_eq!(server.read_u64(&dst, 8 * t)?, t * 1000 + EACH - 1);
    }
    println!("{TASKS} tasks awaited {EACH} WRITEs each on one QP");
    Ok(())
}

/// Task `t`: `EACH` WRITEs of its own 8 bytes, each awaited before the next.
async fn write_each(
    dev: &Device,
    qp: Qp,
    src: &Mr,
    dst: &Mr,
    waiting: &Waiting,
    t: u64,
) -> rocev2::Result<()> {
    for i in 0..EACH {
        let wr_id = t * 1000 + i;
        dev.write_u64(src, 8 * t, wr_id)?;
        let (tx, rx) = oneshot::channel();
        // Registered before the post, so the reaper cannot see the completion first.
        waiting.lock().unwrap().insert(wr_id, tx);
        let write = SendOp::Write {
            remote_addr: dst.remote_addr(8 * t, 8)?,
            rkey: dst.rkey(),
        };
        dev.post_send(qp, SendWr::new(wr_id, write).sge(src.sge(8 * t, 8)?))?;
        let wc = rx.await.map_err(|_| rocev2::Error::Timeout)?;
        assert_eq!(wc.wr_id, wr_id, "each task gets its own completion");
        rocev2::check(wc)?;
    }
    Ok(())
}

#[cfg(test)]
#[test]
fn runs() {
    main().unwrap();
}
