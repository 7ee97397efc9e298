//! A payload's copy through [`shm::copy_slice`] (pieces of at most 2 KiB) against one
//! `copy_from_slice` of the same 4 KiB (one `memcpy`), in the same run, at three distances of
//! the destination past the source modulo 4096: 0 (both page-aligned), 16 (inside the 1–31
//! bytes where `rep movsb` stalls on some CPUs, e.g. AMD EPYC) and 54 (a BTH-only frame's
//! payload built from a page-aligned MR). Run: `cargo bench -p rocev2-ipc --bench copy`;
//! BENCHMARKS.md ("Copies in pieces") records the figures.

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rocev2_ipc::shm;
use std::hint::black_box;

const LEN: usize = 4096;

/// The index of the first page-aligned byte of `v`.
fn page(v: &[u8]) -> usize {
    v.as_ptr().align_offset(4096)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("copy_4k");
    g.throughput(Throughput::Bytes(LEN as u64));
    let src = vec![0x5au8; 3 * 4096];
    let mut dst = vec![0u8; 3 * 4096];
    let s = page(&src);
    let d = page(&dst);
    for past in [0, 16, 54] {
        g.bench_with_input(BenchmarkId::new("memcpy", past), &past, |b, &k| {
            b.iter(|| dst[d + k..d + k + LEN].copy_from_slice(black_box(&src[s..s + LEN])))
        });
        g.bench_with_input(BenchmarkId::new("pieces", past), &past, |b, &k| {
            b.iter(|| shm::copy_slice(&mut dst[d + k..d + k + LEN], black_box(&src[s..s + LEN])))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
