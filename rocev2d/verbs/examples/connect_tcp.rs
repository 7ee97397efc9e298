//! Connect in one call over TCP (`rocev2::connect`), as the `ibverbs` crate's `handshake` or
//! async-rdma's `listen`/`connect`: the server offers a region and accepts; the client
//! connects, learns the region from the server's endpoint, and WRITEs into it. Here both ends
//! are a `Device::pair` on loopback TCP; on two hosts, open each with `Device::open` and
//! connect to the server's address.

use rocev2::connect::{self, ConnectConfig};
use rocev2::{AccessFlags, Device, SendOp, SendWr};
use std::net::TcpListener;
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (client, server) = Device::pair()?;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;

    let srv = std::thread::spawn(move || -> Result<_, String> {
        let pd = server.alloc_pd().map_err(|e| e.to_string())?;
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let mr = server
            .register(pd, vec![0; 4096], access)
            .map_err(|e| e.to_string())?;
        let cq = server.create_cq(16).map_err(|e| e.to_string())?;
        let qp = server.create_rc_qp(pd, cq, cq).map_err(|e| e.to_string())?;
        let conn = connect::accept(&server, qp, &listener, &ConnectConfig::default().mr(&mr))
            .map_err(|e| e.to_string())?;
        Ok((server, mr, conn))
    });

    let pd = client.alloc_pd()?;
    let mr = client.register(
        pd,
        b"written in one call".to_vec(),
        AccessFlags::LOCAL_WRITE,
    )?;
    let cq = client.create_cq(16)?;
    let qp = client.create_rc_qp(pd, cq, cq)?;
    let conn = connect::connect(&client, qp, addr, &ConnectConfig::default())?;
    let target = conn
        .peer
        .mrs
        .first()
        .ok_or("the server offered no region")?;
    let op = SendOp::Write {
        remote_addr: target.addr,
        rkey: target.rkey,
    };
    client.post_send(qp, SendWr::new(1, op).sge(mr.sge(0, 19)?))?;
    let mut wcs = Vec::new();
    client.wait_cq(cq, &mut wcs, 1, Duration::from_secs(5))?;
    rocev2::check(wcs.remove(0))?;

    let (server, smr, _conn) = srv.join().map_err(|_| "server panicked")??;
    assert_eq!(&server.mr_guard(&smr)?[..19], b"written in one call");
    println!("connected over {addr} in one call; the WRITE landed");
    Ok(())
}

#[cfg(test)]
#[test]
fn runs() {
    main().unwrap();
}
