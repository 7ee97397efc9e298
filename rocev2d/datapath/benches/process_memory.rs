//! What a packet's payload costs to read and write in each backing of a region
//! ([`HostMemory`]): bytes the daemon holds or maps (`Owned`, the same copy a `Shared` memfd
//! region makes) against another process's memory through its `/proc/PID/mem` descriptor
//! (`Process`, the C ABI attached to `rocev2d`), and the same process region with its pages
//! moved onto a memfd the daemon maps (`moved`: `SharedPages`, what an attached C program's
//! registration does), measured in the same run. The process region here is this process's own
//! (`/proc/self/mem`): the kernel takes the same path (`access_remote_vm`) for any process.
//!
//! Per packet (4 KiB) and per message (64 KiB, what reading a WRITE whole would cost per 4 KiB
//! of it). Run: `cargo bench -p rocev2-datapath --bench process_memory`; BENCHMARKS.md
//! ("Unmodified RDMA software") records the ratios.

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rocev2_core::mr::{Memory, MrId};
use rocev2_datapath::host::{Backing, CallerRange, HostMemory, ProcessMemory, SharedPages};
use rocev2_ipc::shm::Region;
use std::hint::black_box;

const REGION: usize = 16 << 20;

/// Region 1 owned, region 2 this process's `target` through `/proc/self/mem`, region 3
/// `moved` with its whole pages on a memfd mapped again as the daemon maps it.
fn regions() -> (HostMemory, Vec<u8>, Vec<u8>, SharedPages) {
    let target = vec![1u8; REGION];
    let moved = vec![1u8; REGION + 8192];
    let mut mem = HostMemory::default();
    mem.insert(MrId::new(1), Backing::Owned(vec![1u8; REGION]));
    let fd = ProcessMemory::open_own().expect("/proc/self/mem");
    let process = ProcessMemory::from_fd(fd).expect("a process's memory");
    let range = process
        .range(target.as_ptr() as u64, REGION as u64)
        .expect("mapped");
    mem.insert(MrId::new(2), Backing::Process(range));
    // Its whole pages: from the first page boundary inside, REGION bytes.
    let start = moved.as_ptr() as usize;
    let at = start.next_multiple_of(4096) - start;
    // SAFETY: inside `moved`, which outlives every use of `mem` in the bench.
    let caller = unsafe { CallerRange::new(moved.as_ptr().add(at).cast_mut(), REGION) };
    let shared = SharedPages::share(&caller, 1);
    let mut range = process
        .range(caller.addr() as u64, REGION as u64)
        .expect("mapped");
    for (p, fd) in shared.pieces() {
        let region = Region::from_fd(fd.try_clone_to_owned().expect("dup"), p.file_len);
        let region = region.expect("the moved pages' memfd").into_mapping();
        range
            .map_pages(p.offset, p.len, p.file_offset, region)
            .expect("a piece inside");
    }
    assert_eq!(range.mapped_bytes(), REGION, "every page moved");
    mem.insert(MrId::new(3), Backing::Process(range));
    (mem, target, moved, shared)
}

fn payload(c: &mut Criterion) {
    let (mut mem, _target, _moved, _shared) = regions();
    for len in [4096usize, 65536] {
        let mut g = c.benchmark_group(format!("read_{}k", len / 1024));
        g.throughput(Throughput::Bytes(len as u64));
        let mut buf = vec![0u8; len];
        for (name, mr) in [("owned", 1), ("process", 2), ("moved", 3)] {
            let mut off = 0;
            g.bench_function(BenchmarkId::from_parameter(name), |b| {
                b.iter(|| {
                    mem.read(MrId::new(mr), off as u64, &mut buf);
                    off = (off + len) % REGION;
                    black_box(&buf);
                })
            });
        }
        g.finish();
    }
    let mut g = c.benchmark_group("write_4k");
    g.throughput(Throughput::Bytes(4096));
    let data = vec![2u8; 4096];
    for (name, mr) in [("owned", 1), ("process", 2), ("moved", 3)] {
        let mut off = 0;
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                mem.write(MrId::new(mr), off as u64, black_box(&data));
                off = (off + 4096) % REGION;
            })
        });
    }
    g.finish();
}

criterion_group!(benches, payload);
criterion_main!(benches);
