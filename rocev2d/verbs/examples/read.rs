//! RDMA READ from a passive server: after the bring-up the server makes no call at all; its
//! progress thread answers the READs, as an RDMA NIC would.

mod common;
use rocev2::{AccessFlags, Device, SendOp, SendWr};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (client, server) = Device::pair()?;
    let (cpd, spd) = (client.alloc_pd()?, server.alloc_pd()?);
    let table: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
    let remote = server.register(spd, table.clone(), AccessFlags::REMOTE_READ)?;
    let local = client.register(cpd, vec![0; 8192], AccessFlags::LOCAL_WRITE)?;
    let (ccq, scq) = (client.create_cq(16)?, server.create_cq(16)?);
    let cqp = client.create_rc_qp(cpd, ccq, ccq)?;
    let sqp = server.create_rc_qp(spd, scq, scq)?;
    common::join(&client, cqp, &server, sqp)?;

    // Read the table in two halves (each spans several MTU-sized responses).
    for (i, half) in [0u64, 4096].into_iter().enumerate() {
        let op = SendOp::Read {
            remote_addr: remote.addr() + half,
            rkey: remote.rkey(),
        };
        client.post_send(cqp, SendWr::new(i as u64, op).sge(local.sge(half, 4096)?))?;
    }
    for _ in 0..2 {
        common::wait_one(&client, ccq)?;
    }
    assert_eq!(&client.mr_guard(&local)?[..], &table[..]);
    println!("read 8192 bytes from a server that made no call");
    Ok(())
}

#[cfg(test)]
#[test]
fn runs() {
    main().unwrap();
}
