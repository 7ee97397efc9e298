//! Engine-only throughput: one RC QP sends 64 KiB RDMA WRITEs to another, frames handed over
//! directly (no link model), measured beside a plain `memcpy` of the same 64 KiB in the same
//! run. `NullMemory` variants drop the payload copies, so the difference between the two is
//! what copying costs and the rest is per-packet protocol work (headers, ICRC both ways, ACKs).
//!
//! `engine_no_copy_one` sends a single MTU-sized WRITE (one data packet and its ACK), so a
//! data packet's own cost is `(engine_no_copy - engine_no_copy_one) / (packets - 1)` and the
//! rest of `engine_no_copy_one` is what a message costs once (post, ACK, completion), which
//! 16 packets at MTU 4096 share and 64 at MTU 1024.
//!
//! Run: `cargo bench -p rocev2-core --bench engine`; BENCHMARKS.md records the per-packet
//! times.

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rocev2_core::cq::{WcStatus, WorkCompletion};
use rocev2_core::mr::{Memory, NullMemory};
use rocev2_core::qp::{Mtu, SendOp, SendWr, Sge};
use rocev2_core::testing::{Conn, ConnectOptions, Host, LinkConfig, Pair};
use rocev2_core::time::Instant;
use std::hint::black_box;

const MSG: usize = 64 * 1024;

fn connected(mtu: Mtu) -> (Pair, Conn) {
    let mut p = Pair::new(LinkConfig::default(), LinkConfig::default());
    let o = ConnectOptions {
        mtu,
        mr_len: MSG,
        cq_len: 1 << 16,
        ..ConnectOptions::default()
    };
    let c = p.connect(o).expect("connect");
    (p, c)
}

/// Scratch buffers reused across iterations.
struct Scratch {
    frame: Vec<u8>,
    wcs: Vec<WorkCompletion>,
}

/// Posts a WRITE of `len` bytes and moves every frame A and B want to send to the other side
/// until it completes.
fn write_once(
    a: &mut Host,
    b: &mut Host,
    mem: (&mut dyn Memory, &mut dyn Memory),
    c: &Conn,
    s: &mut Scratch,
    len: usize,
) {
    let (ma, mb) = mem;
    let now = Instant::ZERO;
    let w = SendOp::Write {
        remote_addr: c.mr_b.addr,
        rkey: c.mr_b.rkey,
    };
    let sge = Sge {
        addr: c.mr_a.addr,
        length: len as u32,
        lkey: c.mr_a.lkey,
    };
    a.ep.post_send(c.qa, SendWr::new(1, w).sge(sge))
        .expect("post");
    loop {
        while let Some(n) = a.ep.poll_transmit(now, ma, &mut s.frame) {
            let _ = b.ep.handle_frame(now, &s.frame[..n], mb);
        }
        while let Some(n) = b.ep.poll_transmit(now, mb, &mut s.frame) {
            let _ = a.ep.handle_frame(now, &s.frame[..n], ma);
        }
        s.wcs.clear();
        if a.ep.poll_cq(c.cq_a, &mut s.wcs, 1) > 0 {
            assert_eq!(s.wcs[0].status, WcStatus::Success);
            return;
        }
    }
}

fn bench(cr: &mut Criterion) {
    let mut g = cr.benchmark_group("rc_write_64k");
    g.throughput(Throughput::Bytes(MSG as u64));
    // Both page-aligned: at some distances of the destination past the source (1-31 bytes
    // modulo 4096) glibc's `rep movsb` runs ~35x slower on AMD EPYC (BENCHMARKS.md, "Copies in
    // pieces"), and two vectors' heap addresses would pick the reference's speed by chance.
    let src = vec![0x5au8; MSG + 4096];
    let mut dst = vec![0u8; MSG + 4096];
    let (s0, d0) = (
        src.as_ptr().align_offset(4096),
        dst.as_ptr().align_offset(4096),
    );
    g.bench_function("memcpy", |b| {
        b.iter(|| {
            dst[d0..d0 + MSG].copy_from_slice(black_box(&src[s0..s0 + MSG]));
            black_box(&mut dst);
        })
    });
    let mut s = Scratch {
        frame: Vec::with_capacity(8192),
        wcs: Vec::new(),
    };
    for mtu in [Mtu::Mtu1024, Mtu::Mtu4096] {
        let (mut p, c) = connected(mtu);
        g.bench_with_input(BenchmarkId::new("engine", mtu.bytes()), &mtu, |bch, _| {
            bch.iter(|| {
                let Pair { a, b, .. } = &mut p;
                let (mut ma, mut mb) = (std::mem::take(&mut a.mem), std::mem::take(&mut b.mem));
                write_once(a, b, (&mut ma, &mut mb), &c, &mut s, MSG);
                (a.mem, b.mem) = (ma, mb);
            })
        });
        let (mut p, c) = connected(mtu);
        g.bench_with_input(
            BenchmarkId::new("engine_no_copy", mtu.bytes()),
            &mtu,
            |bch, _| {
                bch.iter(|| {
                    let Pair { a, b, .. } = &mut p;
                    write_once(a, b, (&mut NullMemory, &mut NullMemory), &c, &mut s, MSG);
                })
            },
        );
        // GB/s of this one are of its single packet's payload.
        g.throughput(Throughput::Bytes(u64::from(mtu.bytes())));
        g.bench_with_input(
            BenchmarkId::new("engine_no_copy_one", mtu.bytes()),
            &mtu,
            |bch, _| {
                bch.iter(|| {
                    let Pair { a, b, .. } = &mut p;
                    let one = mtu.bytes() as usize;
                    write_once(a, b, (&mut NullMemory, &mut NullMemory), &c, &mut s, one);
                })
            },
        );
        g.throughput(Throughput::Bytes(MSG as u64));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
