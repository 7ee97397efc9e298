//! The async completion stream on tokio: one task posts SENDs while another reaps the peer's
//! receive completions from `Device::completions` (woken by the CQ's eventfd, not busy
//! polling), as async-rdma users split senders and receivers. `Device` is `Send + Sync`:
//! clones go into tasks.

mod common;
use rocev2::{AccessFlags, Device, RecvWr, SendOp, SendWr, WcOpcode};
use std::time::Duration;

const MESSAGES: u64 = 1000;
/// Receives posted at a time.
const RING: u64 = 32;

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
    let out = client.register(cpd, vec![0; 8], AccessFlags::LOCAL_WRITE)?;
    let inbox = server.register(spd, vec![0; 8 * RING as usize], AccessFlags::LOCAL_WRITE)?;
    let (ccq, scq) = (client.create_cq(64)?, server.create_cq(2 * RING as usize)?);
    let cqp = client.create_rc_qp(cpd, ccq, ccq)?;
    let sqp = server.create_rc_qp(spd, scq, scq)?;
    // Receive `i` lands in slot `i % RING`; the reaper posts `i + RING` once it has read `i`.
    let recv = move |i: u64| -> rocev2::Result<RecvWr> {
        Ok(RecvWr {
            wr_id: i,
            sg_list: vec![inbox.sge(8 * (i % RING), 8)?],
        })
    };
    for i in 0..RING {
        server.post_recv(sqp, recv(i)?)?;
    }
    common::join(&client, cqp, &server, sqp)?;

    // The reaper: the server's receive completions, as a stream.
    let reaper = tokio::spawn({
        let server = server.clone();
        async move {
            let mut wcs = server.completions(scq);
            for want in 0..MESSAGES {
                let wc = rocev2::check(wcs.next().await?)?;
                assert_eq!((wc.wr_id, wc.opcode), (want, WcOpcode::Recv));
                assert_eq!(server.read_u64(&inbox, 8 * (want % RING))?, want);
                server.post_recv(sqp, recv(want + RING)?)?;
            }
            Ok::<_, rocev2::Error>(())
        }
    });
    // The poster: one message at a time from one buffer, so it waits for each send.
    let mut sent = client.completions(ccq);
    for i in 0..MESSAGES {
        client.write_u64(&out, 0, i)?;
        client.post_send(cqp, SendWr::new(i, SendOp::Send).sge(out.sge(0, 8)?))?;
        rocev2::check(sent.next().await?)?;
    }
    tokio::time::timeout(Duration::from_secs(10), reaper).await???;
    println!("{MESSAGES} messages posted by one task, reaped by another");
    Ok(())
}

#[cfg(test)]
#[test]
fn runs() {
    main().unwrap();
}
