//! Switch policy shared by the eBPF switch programs and the network model (`rocev2-sim`).
//!
//! Everything here must run inside an eBPF program as well as in the model, so it is written
//! under the verifier's rules (STYLE.md §2, "One switch policy"): `no_std`, no allocation, no
//! floating point (BPF has no FP unit), fixed-size tables, bounded loops, time as `u64` ns, and
//! randomness passed in as a `u32` (the programs draw it with `bpf_get_prandom_u32()`, the model
//! from its seeded generator). Keeping the decision in one place means a marking curve measured
//! in the model is the curve the XDP programs apply.
//!
//! It holds the RED/ECN decision ([`red`]), the switch port's queue model ([`queue`]) and
//! seeded fault draws ([`fault`]), the IOFD deflection decision ([`iofd`]), the DVL
//! congested-flow table and isolation decision ([`dvl`]), and the map layouts of the AF_XDP steering program
//! ([`steer`]) and the switch-port program ([`switch_port`]); map names and record layouts live here
//! so the kernel programs and their loader cannot disagree. The `user` feature adds the
//! `aya::Pod` impls the loader needs to read and write the records.
//!
//! Deviations: none.
#![no_std]
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

pub mod dvl;
pub mod fault;
pub mod iofd;
pub mod queue;
pub mod red;
pub mod steer;
pub mod switch_port;
