//! `rocev2-wiretest`: one RC QP against another `rocev2-wiretest`, over a real interface, with a
//! scripted workload whose every byte is checked. The namespace tests run one per namespace
//! (`rocev2d/wiretest/tests/wire_*.rs`); it is also the quickest by-hand check of a wire.
//!
//! The server (`--listen PORT`) and the client (`--connect ADDR:PORT`) exchange their QP
//! number, first PSN, GID (as an IP address), MTU, extension offer and buffer (address, length,
//! R_Key) over TCP as [`rocev2::Endpoint`]s (the exchange of [`rocev2::connect`], which
//! `write_bw` uses), as `ibv_rc_pingpong` exchanges its `LID:QPN:PSN:GID`; the destination MAC comes
//! from the kernel's neighbour table ([`rocev2_datapath::neigh`]), not from the peer. The TCP
//! connection then carries the client's questions about the server's memory and counters
//! (`crc`, `read`, `fill`, `recvs`, `stats`, `quit`), so the client can verify what arrived
//! ([`oob`], answered by [`serve`]).
//!
//! `--qps N` makes the server take N clients (one after the other or at once), each a QP in its
//! one endpoint, as N QPs of one NIC: the receiver-side congestion control then sees them all
//! (Dart's DASR counts the senders, seed 000 §III-B; DCQCN+'s notification point keeps one CNP
//! list, seed 002 §IV-B), which one server process per QP would hide. A client with
//! `--wait-for-all` starts its workload only once all N have connected.
//!
//! Workloads (client side; the server only serves; [`workload`]):
//!
//! * `verbs`: SEND (1, 1000 and 5000 bytes: one packet, one, several), SEND with immediate,
//!   RDMA WRITE, WRITE with immediate, RDMA READ, FetchAdd and CmpSwap, each checked against
//!   the server's memory and completions;
//! * `bulk`: `--bulk-mib` MiB (or `--bulk-kib` KiB) of RDMA WRITE in `--msg-bytes` messages (4 MiB), 16 outstanding,
//!   checked by CRC-32 of both buffers; prints the goodput;
//! * `mix`: as `bulk` with every other message an RDMA READ of a pattern the server lays out,
//!   so data, responses and ACKs flow both ways; both halves checked by CRC-32;
//! * `flood`: `bulk` while injecting malformed and random RoCEv2 frames through the same
//!   datapath ([`tap`]) at the server, whose drop counters must account for them;
//! * `outlive`: keeps WRITEs outstanding; prints `STARTED`, and once the server is killed, checks
//!   that the first failure is `RetryExcErr` and the rest flush;
//! * `rxe`: injects 500 frames with the IPv4 Identifications rdma_rxe would write (non-zero,
//!   covered by their ICRC), addressed to a QP that does not exist, and reports the server's
//!   counters: an AF_PACKET server counts them `unknown_qp` (ICRC verified), a UDP server
//!   `icrc_error`, or `unknown_qp` plus `icrc_unverifiable` with `--accept-unverified-icrc`.
//!
//! `--multipath [--vps N]` offers MP-RDMA (docs/multipath.md): the exchange line then carries
//! `rext=`, the capability word of docs/wire.md ("Negotiation"); a side without the flag sends
//! no such field, and the QP runs multipath only when both offered it (`READY`'s `"mode"`). Such a
//! QP refuses READ and atomics, so the client runs `bulk`, `flood` or `outlive` with it, not
//! `verbs`. The client's `bulk` result and the server's `stats` answer then hold `"mp"`: the
//! window, RTT and per-VP counters (client: packets sent, ECN echoes, out-of-order prunes;
//! server: packets received, CE marks, late arrivals).
//!
//! Output: `LISTENING`, `READY {json}`, `STARTED` and `RESULT {json}` lines on stdout (the
//! client's `RESULT` holds its own datapath counters under `"datapath"`); errors
//! exit non-zero with the reason on stderr. Logging goes to stderr through
//! `tracing-subscriber`, filtered by `RUST_LOG` (default `info`), as the daemon's.
//!
//! Deviations: none.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::todo,
        clippy::unimplemented
    )
)]

mod args;
mod oob;
mod peer;
mod serve;
mod setup;
mod tap;
mod workload;

use clap::Parser as _;

fn main() -> anyhow::Result<()> {
    rocev2d::init_logging();
    let a = args::Args::parse();
    if a.listen.is_some() {
        serve::serve(setup::open(&a)?, &a)
    } else {
        workload::run(&mut setup::client(&a)?, &a)
    }
}
