//! RDMA WRITE with immediate: the bytes go straight into the peer's region, and the 32-bit
//! immediate arrives in a receive completion that tells the peer they are there (it consumes
//! a posted receive, whose buffer stays untouched).

mod common;
use rocev2::{AccessFlags, Device, RecvWr, SendOp, SendWr, WcOpcode};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (client, server) = Device::pair()?;
    let (cpd, spd) = (client.alloc_pd()?, server.alloc_pd()?);
    let src = client.register(cpd, vec![0xab; 4096], AccessFlags::LOCAL_WRITE)?;
    // The target must allow remote writes.
    let dst = server.register(
        spd,
        vec![0; 4096],
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    )?;
    let (ccq, scq) = (client.create_cq(16)?, server.create_cq(16)?);
    let cqp = client.create_rc_qp(cpd, ccq, ccq)?;
    let sqp = server.create_rc_qp(spd, scq, scq)?;
    server.post_recv(
        sqp,
        RecvWr {
            wr_id: 1,
            sg_list: Vec::new(),
        },
    )?;
    common::join(&client, cqp, &server, sqp)?;

    // The server's address and rkey would come from the connection exchange (`RemoteMr`).
    let op = SendOp::WriteWithImm {
        remote_addr: dst.addr() + 1024,
        rkey: dst.rkey(),
        imm: 0xfeed,
    };
    client.post_send(cqp, SendWr::new(2, op).sge(src.sge(0, 2048)?))?;
    common::wait_one(&client, ccq)?;
    let wc = common::wait_one(&server, scq)?;
    assert_eq!(
        (wc.opcode, wc.imm_data, wc.byte_len),
        (WcOpcode::RecvRdmaWithImm, Some(0xfeed), 2048)
    );
    let g = server.mr_guard(&dst)?;
    assert!(g[..1024].iter().all(|&b| b == 0) && g[1024..3072].iter().all(|&b| b == 0xab));
    println!("2048 bytes written at offset 1024, immediate {:#x}", 0xfeed);
    Ok(())
}

#[cfg(test)]
#[test]
fn runs() {
    main().unwrap();
}
