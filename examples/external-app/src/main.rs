//! A rocev2 application of its own: SEND, WRITE, READ and both atomics between two hosts over
//! the UDP datapath, the QPs connected in one call.
//!
//! `rocev2-external-app server IFACE PORT`: offers a 64 KiB region with every remote right,
//! receives one SEND, serves the client's one-sided operations until the client reports on the
//! TCP connection, then checks what landed and answers `ok` or what differs.
//!
//! `rocev2-external-app client IFACE HOST:PORT`: WRITEs a pattern into the server's region,
//! SENDs its first 1000 bytes, READs the pattern back, runs FetchAdd (+7) and CompareSwap
//! (7 → 42) on one word, checks every result, then asks the server for its verdict.
//!
//! Both print `PASS` and exit 0 only when every byte matched.

use rocev2::connect::{self, ConnectConfig};
use rocev2::{AccessFlags, DatapathKind, Device, Mr, RecvWr, RemoteMr, SendOp, SendWr, WcStatus};
use std::error::Error;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

type Result<T> = std::result::Result<T, Box<dyn Error>>;

const LEN: usize = 65536;
/// Where the SEND lands in the server's region.
const RECV_AT: u64 = 32768;
/// The word the atomics work on.
const WORD_AT: u64 = 8192;

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 13 + 5) as u8).collect()
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (role, iface, addr) = match &args[..] {
        [_, role, iface, addr] => (role.as_str(), iface.as_str(), addr.as_str()),
        _ => {
            return Err(
                "usage: rocev2-external-app server IFACE PORT | client IFACE HOST:PORT".into(),
            );
        }
    };
    let dev = Device::open(iface, DatapathKind::Udp)?;
    let pd = dev.alloc_pd()?;
    let all = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let mr = dev.register(pd, vec![0u8; LEN], all)?;
    let cq = dev.create_cq(16)?;
    let qp = dev.create_rc_qp(pd, cq, cq)?;
    let verdict = match role {
        "server" => server(&dev, qp, cq, &mr, addr)?,
        "client" => client(&dev, qp, cq, &mr, addr)?,
        _ => return Err(format!("unknown role {role}: server or client").into()),
    };
    dev.drain(Duration::from_secs(5))?;
    if verdict.is_empty() {
        println!("PASS");
        Ok(())
    } else {
        Err(format!("FAIL: {verdict}").into())
    }
}

fn server(dev: &Device, qp: rocev2::Qp, cq: rocev2::Cq, mr: &Mr, port: &str) -> Result<String> {
    dev.post_recv(
        qp,
        RecvWr {
            wr_id: 1,
            sg_list: vec![mr.sge(RECV_AT, 1000)?],
        },
    )?;
    let l = TcpListener::bind(("0.0.0.0", port.parse::<u16>()?))?;
    println!("LISTENING {port}");
    let mut c = connect::accept(dev, qp, &l, &ConnectConfig::default().mr(mr))?;
    let mut wcs = Vec::new();
    dev.wait_cq(cq, &mut wcs, 1, Duration::from_secs(20))?;
    if wcs[0].status != WcStatus::Success {
        return Err(format!("receive completed with {:?}", wcs[0].status).into());
    }
    // The device's progress thread answers the client's READs and atomics meanwhile.
    c.stream.read_exact(&mut [0u8])?;
    let m = dev.mr_guard(mr)?;
    let mut wrong = Vec::new();
    if m[..4096] != pattern(4096)[..] {
        wrong.push("WRITE data");
    }
    if m[RECV_AT as usize..RECV_AT as usize + 1000] != pattern(1000)[..] {
        wrong.push("SEND data");
    }
    let at = WORD_AT as usize;
    if u64::from_ne_bytes(m[at..at + 8].try_into()?) != 42 {
        wrong.push("atomic word");
    }
    let verdict = wrong.join(", ");
    c.stream.write_all(format!("{verdict}\n").as_bytes())?;
    Ok(verdict)
}

fn client(dev: &Device, qp: rocev2::Qp, cq: rocev2::Cq, mr: &Mr, addr: &str) -> Result<String> {
    dev.mr_guard(mr)?[..4096].copy_from_slice(&pattern(4096));
    let mut c = connect::connect(dev, qp, addr, &ConnectConfig::default())?;
    let peer: RemoteMr = *c.peer.mrs.first().ok_or("the server offered no region")?;
    let at = |off: u64, len: u64| {
        peer.addr_at(off, len)
            .ok_or("the server's region is too small")
    };
    let rkey = peer.rkey;
    let wrs = [
        SendWr::new(
            1,
            SendOp::Write {
                remote_addr: at(0, 4096)?,
                rkey,
            },
        )
        .sge(mr.sge(0, 4096)?),
        SendWr::new(2, SendOp::Send).sge(mr.sge(0, 1000)?),
        SendWr::new(
            3,
            SendOp::Read {
                remote_addr: at(0, 4096)?,
                rkey,
            },
        )
        .sge(mr.sge(16384, 4096)?),
        SendWr::new(
            4,
            SendOp::FetchAdd {
                remote_addr: at(WORD_AT, 8)?,
                rkey,
                add: 7,
            },
        )
        .sge(mr.sge(20480, 8)?),
        SendWr::new(
            5,
            SendOp::CompareSwap {
                remote_addr: at(WORD_AT, 8)?,
                rkey,
                compare: 7,
                swap: 42,
            },
        )
        .sge(mr.sge(20488, 8)?),
    ];
    let mut wcs = Vec::new();
    for wr in wrs {
        let id = wr.wr_id;
        dev.post_send(qp, wr)?;
        wcs.clear();
        dev.wait_cq(cq, &mut wcs, 1, Duration::from_secs(20))?;
        if (wcs[0].wr_id, wcs[0].status) != (id, WcStatus::Success) {
            return Err(format!("work request {id}: {:?}", wcs[0]).into());
        }
    }
    let m = dev.mr_guard(mr)?;
    let word = |o: usize| m[o..o + 8].try_into().map(u64::from_ne_bytes);
    let mut wrong = Vec::new();
    if m[16384..20480] != pattern(4096)[..] {
        wrong.push("READ data".to_string());
    }
    if (word(20480)?, word(20488)?) != (0, 7) {
        wrong.push("atomics' original values".to_string());
    }
    c.stream.write_all(&[0])?;
    let mut answer = String::new();
    c.stream.read_to_string(&mut answer)?;
    if !answer.trim().is_empty() {
        wrong.push(format!("server: {}", answer.trim()));
    }
    Ok(wrong.join(", "))
}
