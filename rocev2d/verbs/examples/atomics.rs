//! Atomics: FETCH_AND_ADD and COMPARE_AND_SWAP on a 64-bit counter in the server's region.
//! Values are host-order `u64`s on both sides: `write_u64` / `read_u64` read and write the
//! region in host byte order, and the engine converts to and from the wire's big-endian, so
//! unlike raw verbs no `be64toh` is needed on the fetched value.

mod common;
use rocev2::{AccessFlags, Device, SendOp, SendWr};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (client, server) = Device::pair()?;
    let (cpd, spd) = (client.alloc_pd()?, server.alloc_pd()?);
    let counter = server.register(
        spd,
        vec![0; 8],
        AccessFlags::REMOTE_ATOMIC | AccessFlags::LOCAL_WRITE,
    )?;
    server.write_u64(&counter, 0, 40)?;
    // Where each atomic's original value lands.
    let result = client.register(cpd, vec![0; 8], AccessFlags::LOCAL_WRITE)?;
    let (ccq, scq) = (client.create_cq(16)?, server.create_cq(16)?);
    let cqp = client.create_rc_qp(cpd, ccq, ccq)?;
    let sqp = server.create_rc_qp(spd, scq, scq)?;
    common::join(&client, cqp, &server, sqp)?;
    let (addr, rkey) = (counter.addr(), counter.rkey());

    client.post_send(
        cqp,
        SendWr::new(
            1,
            SendOp::FetchAdd {
                remote_addr: addr,
                rkey,
                add: 2,
            },
        )
        .sge(result.sge(0, 8)?),
    )?;
    common::wait_one(&client, ccq)?;
    assert_eq!(client.read_u64(&result, 0)?, 40); // the value before the add

    let cas = SendOp::CompareSwap {
        remote_addr: addr,
        rkey,
        compare: 42,
        swap: 1000,
    };
    client.post_send(cqp, SendWr::new(2, cas).sge(result.sge(0, 8)?))?;
    common::wait_one(&client, ccq)?;
    assert_eq!(client.read_u64(&result, 0)?, 42); // matched: swapped
    assert_eq!(server.read_u64(&counter, 0)?, 1000);
    println!("fetch-add then compare-swap: counter 40 -> 42 -> 1000");
    Ok(())
}

#[cfg(test)]
#[test]
fn runs() {
    main().unwrap();
}
