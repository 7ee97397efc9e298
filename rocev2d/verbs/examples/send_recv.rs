//! SEND/RECV, as `ibv_rc_pingpong` does: the receiver posts a buffer, the sender's message
//! lands in it. Runs on an in-memory `Device::pair` (no root); with `Device::open` on two
//! hosts the calls are the same.

mod common;
use rocev2::{AccessFlags, Device, RecvWr, SendOp, SendWr, WcOpcode};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (client, server) = Device::pair()?;
    let (cpd, spd) = (client.alloc_pd()?, server.alloc_pd()?);
    // Buffers are handed over to the device (`ibv_reg_mr` on memory it then owns).
    let msg = client.register(cpd, b"hello over RoCEv2".to_vec(), AccessFlags::LOCAL_WRITE)?;
    let inbox = server.register(spd, vec![0u8; 64], AccessFlags::LOCAL_WRITE)?;
    let (ccq, scq) = (client.create_cq(16)?, server.create_cq(16)?);
    let cqp = client.create_rc_qp(cpd, ccq, ccq)?;
    let sqp = server.create_rc_qp(spd, scq, scq)?;

    // Post the receive before the peer can send (or the SEND waits on RNR retries).
    server.post_recv(
        sqp,
        RecvWr {
            wr_id: 7,
            sg_list: vec![inbox.sge(0, 64)?],
        },
    )?;
    common::join(&client, cqp, &server, sqp)?;

    client.post_send(cqp, SendWr::new(1, SendOp::Send).sge(msg.sge(0, 17)?))?;
    let sent = common::wait_one(&client, ccq)?;
    let got = common::wait_one(&server, scq)?;
    assert_eq!((sent.wr_id, got.wr_id, got.opcode), (1, 7, WcOpcode::Recv));
    let len = got.byte_len as usize;
    let text = String::from_utf8(server.mr_guard(&inbox)?[..len].to_vec())?;
    println!("server received {len} bytes: {text:?}");
    assert_eq!(text, "hello over RoCEv2");
    Ok(())
}

#[cfg(test)]
#[test]
fn runs() {
    main().unwrap();
}
