//! Wire hot paths against their floor: building and parsing an RDMA WRITE Only frame (IPv4,
//! RETH, 4096-byte payload) beside a plain CRC-32 of the same bytes, measured in the same run.
//!
//! Every path runs each byte of the frame through a CRC-32 once, so the plain CRC is the floor;
//! what the wire code adds on top (header encode/decode, ICRC masking, the IP header checksum)
//! shows as the ratio to it. `build_icrc` (`FrameRepr::emit`) and `build_template` (from a
//! path's header template built once, as the engine sends) also copy the 4 KiB payload into the
//! frame, so they are compared with a second reference as well, a copy of the payload plus the
//! plain CRC.
//! `parse_verify` is `FrameRepr::parse`; `receive` is what the endpoint does per frame (the same
//! checks and ICRC, building only the transport repr); `icrc_verify` is the ICRC check alone.
//! `deploy/bench/wire-ratio.sh` prints both ratios; BENCHMARKS.md records them (target: within
//! 1.25x of plain CRC).
//!
//! Run: `cargo bench -p rocev2-core --bench wire`.

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rocev2_core::wire::{
    BthRepr, EthRepr, FrameRepr, IpRepr, Opcode, Operation, Psn, Qpn, ROCEV2_UDP_PORT, RethRepr,
    RoceRepr, UdpRepr,
    frame::{Ecn, Frame},
    icrc,
};
use std::hint::black_box;
use std::net::Ipv4Addr;

const PAYLOAD: usize = 4096;
/// Where the ICRC's input starts in an untagged frame: the last eight bytes of the Ethernet
/// header stand in for the LRH.
const ICRC_FROM: usize = 14 - 8;

/// An RDMA WRITE Only as rxe sends it: IPv4 with DF, TTL 64, UDP checksum 0.
fn write_only() -> FrameRepr {
    FrameRepr {
        eth: EthRepr {
            src: [0x52, 0x54, 0x00, 0x77, 0x00, 0x0b],
            dst: [0x52, 0x54, 0x00, 0x77, 0x00, 0x0a],
            vlan: None,
        },
        ip: IpRepr::V4 {
            src: Ipv4Addr::new(192, 168, 77, 11),
            dst: Ipv4Addr::new(192, 168, 77, 10),
            dscp: 26,
            ecn: Ecn::Ect0,
            identification: 0x1234,
            dont_fragment: true,
            ttl: 64,
        },
        udp: UdpRepr {
            src_port: 0xc121,
            dst_port: ROCEV2_UDP_PORT,
            checksum: false,
        },
        roce: RoceRepr {
            reth: Some(RethRepr {
                va: 0x564a_cdd2_6000,
                r_key: 0x2ba,
                dma_len: PAYLOAD as u32,
            }),
            ..RoceRepr::new(BthRepr {
                ack_req: true,
                ..BthRepr::new(
                    Opcode::rc(Operation::RdmaWriteOnly),
                    0xffff,
                    Qpn::new(0x11),
                    Psn::new(0x37cf8a),
                )
            })
        },
    }
}

fn wire(c: &mut Criterion) {
    let repr = write_only();
    let payload: Vec<u8> = (0..PAYLOAD).map(|i| (i * 7) as u8).collect();
    let mut buf = vec![0u8; repr.buffer_len(PAYLOAD).unwrap()];
    repr.emit(&mut buf, &payload).unwrap();
    let frame = buf.clone();
    assert!(FrameRepr::parse(&frame).is_ok());

    let mut g = c.benchmark_group("wire_write_only_4k");
    // The whole frame (headers + 4096 bytes + ICRC) for every path, so GB/s compare directly.
    g.throughput(Throughput::Bytes(frame.len() as u64));
    g.bench_function("build_icrc", |b| {
        b.iter(|| {
            repr.emit(black_box(&mut buf), black_box(&payload)).unwrap();
        })
    });
    // What the engine does per frame: the path's header template is built once (a QP's
    // INIT→RTR), and each frame copies it and writes the lengths, checksum, transport headers,
    // payload and ICRC. `build_icrc` (`FrameRepr::emit`) builds the template per frame.
    let template = repr.template().unwrap();
    let ecn = repr.ip.ecn();
    g.bench_function("build_template", |b| {
        b.iter(|| {
            let payload = black_box(&payload[..]);
            template
                .emit_with(
                    black_box(&repr.roce),
                    ecn,
                    black_box(&mut buf),
                    payload.len(),
                    |dst| dst.copy_from_slice(payload),
                )
                .unwrap();
        })
    });
    assert_eq!(buf, frame, "the template builds the same frame");
    g.bench_function("parse_verify", |b| {
        b.iter(|| {
            // By reference, inside the `Result`: the repr must exist, but copying it out (336
            // bytes, a `memmove`) is not the parser's cost.
            let parsed = FrameRepr::parse(black_box(&frame));
            let (r, p) = parsed.as_ref().unwrap();
            black_box(r);
            black_box(p);
        })
    });
    // What the endpoint does per received frame: the same checks and ICRC, but only the
    // transport repr is built (L2–L4 are read from the checked view), no whole `FrameRepr`.
    g.bench_function("receive", |b| {
        b.iter(|| {
            let f = Frame::new_checked(black_box(&frame)).unwrap();
            f.verify_icrc().unwrap();
            // Borrowed in place, as the endpoint does (no move out of the `Result`).
            let r = RoceRepr::parse(f.transport());
            black_box(r.as_ref().unwrap());
            black_box(f.payload());
        })
    });
    // The ICRC alone over the received frame (no header checks, no repr): what `receive` and
    // `parse_verify` pay for the CRC itself, masked head and all, beside `plain_crc32`.
    g.bench_function("icrc_verify", |b| {
        b.iter(|| icrc::verify_frame(black_box(&frame[ICRC_FROM..]), 20).unwrap())
    });
    // The floor for `build`, which must also copy the payload into the frame: a 4 KiB copy plus
    // the plain CRC.
    let mut copy = vec![0u8; frame.len()];
    g.bench_function("copy_crc32", |b| {
        b.iter(|| {
            copy[..PAYLOAD].copy_from_slice(black_box(&payload));
            crc32fast::hash(black_box(&copy))
        })
    });
    g.bench_function("plain_crc32", |b| {
        b.iter(|| crc32fast::hash(black_box(&frame)))
    });
    g.finish();
}

criterion_group!(benches, wire);
criterion_main!(benches);
