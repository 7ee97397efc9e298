//! Many QPs on one CQ: eight connections share each side's completion queue, and the
//! completions tell them apart by `qp_num` (as an `ibv_wc`'s `qp_num` does).

mod common;
use rocev2::{AccessFlags, Device, RecvWr, SendOp, SendWr};
use std::collections::BTreeMap;

const QPS: usize = 8;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (client, server) = Device::pair()?;
    let (cpd, spd) = (client.alloc_pd()?, server.alloc_pd()?);
    let out = client.register(cpd, vec![0; 64 * QPS], AccessFlags::LOCAL_WRITE)?;
    let inbox = server.register(spd, vec![0; 64 * QPS], AccessFlags::LOCAL_WRITE)?;
    let (ccq, scq) = (client.create_cq(4 * QPS)?, server.create_cq(4 * QPS)?);
    let mut by_qpn = BTreeMap::new();
    let mut pairs = Vec::new();
    for i in 0..QPS {
        let (cqp, sqp) = (
            client.create_rc_qp(cpd, ccq, ccq)?,
            server.create_rc_qp(spd, scq, scq)?,
        );
        let at = (64 * i) as u64;
        server.post_recv(
            sqp,
            RecvWr {
                wr_id: i as u64,
                sg_list: vec![inbox.sge(at, 64)?],
            },
        )?;
        common::join(&client, cqp, &server, sqp)?;
        by_qpn.insert(sqp.qpn(), i);
        pairs.push(cqp);
    }
    for (i, qp) in pairs.iter().enumerate() {
        let at = (64 * i) as u64;
        client.mr_guard(&out)?[64 * i] = i as u8;
        client.post_send(
            *qp,
            SendWr::new(i as u64, SendOp::Send).sge(out.sge(at, 64)?),
        )?;
    }
    for _ in 0..QPS {
        common::wait_one(&client, ccq)?;
        let wc = common::wait_one(&server, scq)?;
        // Each message arrived on its own QP, into the buffer that QP's receive posted.
        assert_eq!(by_qpn[&wc.qp_num] as u64, wc.wr_id);
        assert_eq!(
            server.mr_guard(&inbox)?[64 * wc.wr_id as usize],
            wc.wr_id as u8
        );
    }
    println!("{QPS} QPs, one CQ per side: every message on its own QP");
    Ok(())
}

#[cfg(test)]
#[test]
fn runs() {
    main().unwrap();
}
