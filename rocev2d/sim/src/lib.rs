//! A deterministic packet-level network model that runs the real rocev2 RC engines.
//!
//! ```text
//!   workload ──FlowStart──> host: rocev2_core::Endpoint ──poll_transmit──> NIC port
//!                                 ^ handle_frame / handle_timeout            │ serialise at
//!                                 │                                          v line rate
//!                           Arrive ◄── link (delay) ◄── switch egress queue ◄── ECMP route
//!                                  RED/ECN, IOFD, DVL (rocev2-ebpf-common), PFC
//! ```
//!
//! Every host runs a real [`rocev2_core::Endpoint`]: frames on the modelled wire are the bytes it
//! emits (Ethernet/IPv4/UDP/BTH/RETH/payload/ICRC), switches rewrite the IPv4 ECN field and
//! header checksum when they mark, and receivers verify the ICRC. Time is simulated in integer
//! nanoseconds by one event queue keyed by (time, sequence), every random draw comes from a
//! seeded Xoshiro256++ stream, and no hash map is iterated, so a scenario and its seed determine
//! every output bit for bit. Nothing reads a clock (only the CLI's progress bar does).
//!
//! * [`topology`]: star, dumbbell, leaf-spine, 3-tier Clos / fat-tree;
//! * [`routing`]: shortest paths, ECMP on the 5-tuple;
//! * [`link`]: ports, serialisation, priorities, their queue and PFC bookkeeping;
//! * [`switch_node`]: the switch model and its settings: shared buffer, RED/ECN, PFC, IOFD
//!   deflection and DVL isolation (all three decisions from `rocev2-ebpf-common`);
//! * [`host`]: the NIC model and host settings (`[host]`, the congestion control [`host::HostCc`]);
//! * [`workload`]: flows (one RC QP pair per flow);
//! * [`sim`]: the model itself, a folder by job: build, event loop, packet pool, switch path,
//!   IOFD/DVL, PFC, host NIC, flows, accounting; [`output`] and [`plot`]: CSV and SVG;
//! * [`experiments`]: the papers' congestion-control experiments (`rocev2-sim experiments`).
//!
//! `docs/model.md` says what is modelled, what is not, and how to run scenarios.
#![forbid(unsafe_code)]

pub mod dist;
pub mod event;
pub mod experiments;
pub mod host;
pub mod link;
pub mod output;
pub mod plot;
pub mod routing;
pub mod scenario;
pub mod sim;
pub mod switch_node;
pub mod topology;
pub mod workload;

pub use output::Report;
pub use scenario::Scenario;
pub use sim::Sim;
