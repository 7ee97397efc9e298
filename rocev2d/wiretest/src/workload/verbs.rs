//! `verbs`: every verb once, each checked against the server's memory and completions: SEND of
//! 1, 1000 and 5000 bytes (one packet, one, several) and of 64 bytes with immediate, RDMA WRITE
//! and WRITE with immediate, RDMA READ, FetchAdd and CmpSwap. A multipath QP refuses READ and
//! atomics, so [`crate::setup`] refuses this workload on one.
//!
//! Deviations: none.

use crate::peer::{ATOMIC_OFF, Peer, READ_OFF, RECV_OFF, RECV_SLOT, WRITE_OFF, pattern};
use anyhow::ensure;
use rocev2_core::qp::{SendOp, SendWr};
use serde_json::{Value, json};

/// Runs every verb once and checks each.
///
/// # Errors
/// A completion that is not a success, bytes or values that differ, or the deadline.
pub fn run(peer: &mut Peer) -> anyhow::Result<Value> {
    let r = peer.conn.remote_mr;
    // SEND of 1, 1000 and 5000 bytes, then 64 bytes with immediate.
    let sizes = [1u64, 1000, 5000, 64];
    for (i, &n) in sizes.iter().enumerate() {
        let data = pattern(100 + i as u64, n as usize);
        let off = RECV_OFF + i as u64 * RECV_SLOT;
        peer.write_local(off, &data)?;
        let op = if i == 3 {
            SendOp::SendWithImm { imm: 0xdead_beef }
        } else {
            SendOp::Send
        };
        let wr = SendWr::new(i as u64, op).sge(peer.sge(off, n));
        peer.post(wr)?;
    }
    let wcs = peer.complete(sizes.len())?;
    peer.expect_ok(&wcs)?;
    let recvs = peer.call(json!({"cmd": "recvs"}))?;
    let wcs = recvs
        .get("wcs")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    ensure!(
        wcs.len() == sizes.len(),
        "server saw {} receives: {recvs}",
        wcs.len()
    );
    for (i, &n) in sizes.iter().enumerate() {
        let wc = &wcs[i];
        ensure!(wc["status"] == "Success", "receive {i}: {wc}");
        ensure!(wc["byte_len"] == n, "receive {i} length: {wc}");
        let got = peer.remote_read(RECV_OFF + i as u64 * RECV_SLOT, n)?;
        ensure!(
            got == pattern(100 + i as u64, n as usize),
            "SEND {i} bytes differ"
        );
    }
    ensure!(wcs[3]["imm"] == 0xdead_beefu32, "immediate: {}", wcs[3]);

    // RDMA WRITE, and WRITE with immediate (consumes the server's fifth receive).
    let data = pattern(7, 10_000);
    peer.write_local(WRITE_OFF, &data)?;
    let wr = SendWr::new(
        10,
        SendOp::Write {
            remote_addr: r.addr + WRITE_OFF,
            rkey: r.rkey,
        },
    )
    .sge(peer.sge(WRITE_OFF, 10_000));
    peer.post(wr)?;
    let wr = SendWr::new(
        11,
        SendOp::WriteWithImm {
            remote_addr: r.addr + WRITE_OFF + 10_000,
            rkey: r.rkey,
            imm: 7,
        },
    )
    .sge(peer.sge(WRITE_OFF, 100));
    peer.post(wr)?;
    let wcs = peer.complete(2)?;
    peer.expect_ok(&wcs)?;
    let got = peer.remote_read(WRITE_OFF, 10_100)?;
    ensure!(got[..10_000] == data[..], "WRITE bytes differ");
    ensure!(
        got[10_000..] == data[..100],
        "WRITE with immediate bytes differ"
    );
    let recvs = peer.call(json!({"cmd": "recvs"}))?;
    let imm_wc = recvs["wcs"].get(0).cloned().unwrap_or(Value::Null);
    ensure!(
        imm_wc["imm"] == 7 && imm_wc["opcode"] == "RecvRdmaWithImm",
        "WRITE with immediate completion: {recvs}"
    );

    // RDMA READ of 20000 bytes the server fills.
    peer.call(json!({"cmd": "fill", "off": READ_OFF, "len": 20_000, "seed": 5}))?;
    let wr = SendWr::new(
        20,
        SendOp::Read {
            remote_addr: r.addr + READ_OFF,
            rkey: r.rkey,
        },
    )
    .sge(peer.sge(READ_OFF, 20_000));
    peer.post(wr)?;
    let wcs = peer.complete(1)?;
    peer.expect_ok(&wcs)?;
    let local = peer.mem()?[peer.range(READ_OFF, 20_000)?].to_vec();
    ensure!(local == pattern(5, 20_000), "READ bytes differ");

    // Atomics on a word the client first WRITEs to 100.
    peer.write_local(ATOMIC_OFF, &100u64.to_ne_bytes())?;
    let wr = SendWr::new(
        30,
        SendOp::Write {
            remote_addr: r.addr + ATOMIC_OFF,
            rkey: r.rkey,
        },
    )
    .sge(peer.sge(ATOMIC_OFF, 8));
    peer.post(wr)?;
    let wcs = peer.complete(1)?;
    peer.expect_ok(&wcs)?;
    let wr = SendWr::new(
        31,
        SendOp::FetchAdd {
            remote_addr: r.addr + ATOMIC_OFF,
            rkey: r.rkey,
            add: 5,
        },
    )
    .sge(peer.sge(ATOMIC_OFF + 8, 8));
    peer.post(wr)?;
    let wr = SendWr::new(
        32,
        SendOp::CompareSwap {
            remote_addr: r.addr + ATOMIC_OFF,
            rkey: r.rkey,
            compare: 105,
            swap: 42,
        },
    )
    .sge(peer.sge(ATOMIC_OFF + 16, 8));
    peer.post(wr)?;
    let wcs = peer.complete(2)?;
    peer.expect_ok(&wcs)?;
    let m = peer.mem()?;
    let word = |o: u64| -> anyhow::Result<u64> {
        let r = usize::try_from(ATOMIC_OFF + o)?;
        Ok(u64::from_ne_bytes(m[r..r + 8].try_into()?))
    };
    let (fa, cs) = (word(8)?, word(16)?);
    ensure!(fa == 100, "FetchAdd returned {fa}, expected 100");
    ensure!(cs == 105, "CmpSwap returned {cs}, expected 105");
    let fin = peer.remote_read(ATOMIC_OFF, 8)?;
    let fin = u64::from_ne_bytes(fin.as_slice().try_into()?);
    ensure!(fin == 42, "server word is {fin}, expected 42");
    Ok(
        json!({"send": sizes, "write": 10_100, "read": 20_000, "fetch_add": fa, "cmp_swap": cs, "final": fin}),
    )
}
