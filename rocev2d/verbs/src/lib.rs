//! `rocev2`: a verbs-like API over the rocev2 RoCEv2 engine, running in-process.
//!
//! A [`Device`] opens one Ethernet interface with a datapath ([`DatapathKind`]: AF_XDP, AF_PACKET,
//! UDP sockets, or the best available) and owns an engine, the registered memory and the
//! event-loop driver. The verbs map one to one: [`Device::alloc_pd`],
//! [`Device::register`] (`ibv_reg_mr`), [`Device::create_cq`], [`Device::create_rc_qp`],
//! [`Device::connect`] (INIT→RTR→RTS in one call), [`Device::post_send`] /
//! [`Device::post_recv`] with the core's [`SendWr`] / [`RecvWr`], [`Device::poll_cq`], and
//! the blocking [`Device::wait_cq`] that drives the engine until a completion arrives.
//!
//! ```no_run
//! use rocev2::{AccessFlags, ConnectOptions, DatapathKind, Device, RemoteQp, SendOp, SendWr};
//! use std::time::Duration;
//! # fn main() -> Result<(), rocev2::Error> {
//! let mut dev = Device::open("eth0", DatapathKind::Auto)?;
//! let pd = dev.alloc_pd()?;
//! let mr = dev.register(pd, vec![0u8; 4096], AccessFlags::LOCAL_WRITE)?;
//! dev.mr_bytes_mut(&mr)?[..5].copy_from_slice(b"hello");
//! let cq = dev.create_cq(64)?;
//! let qp = dev.create_rc_qp(pd, cq, cq)?;
//! // The peer's QP number, PSN, address and buffer come from an out-of-band exchange
//! // (`rocev2::connect` does it and the bring-up in one call, below).
//! let (peer_qpn, peer_psn, peer_addr, peer_rkey) = (0x11, 0x7d2a9e, 0x1000_0000, 0x1234);
//! let remote = RemoteQp {
//!     qpn: rocev2::Qpn::new(peer_qpn),
//!     psn: peer_psn,
//!     ip: "192.168.77.10".parse().unwrap(),
//!     mac: None, // resolved through the neighbour table
//! };
//! let opts = ConnectOptions { local_psn: rocev2::random_psn(), ..ConnectOptions::default() };
//! dev.connect(qp, &remote, &opts)?;
//! let write = SendOp::Write { remote_addr: peer_addr, rkey: rocev2::Rkey::new(peer_rkey) };
//! dev.post_send(qp, SendWr::new(1, write).sge(mr.sge(0, 4096)))?;
//! let mut wcs = Vec::new();
//! dev.wait_cq(cq, &mut wcs, 16, Duration::from_secs(5))?;
//! assert!(wcs[0].status.is_success());
//! dev.drain(Duration::from_secs(1))?; // let the last ACKs leave before exiting
//! # Ok(()) }
//! ```
//!
//! Connect in one call: [`connect::connect`] and [`connect::accept`] (and their
//! [`connect::tokio`] twins) exchange [`Endpoint`]s over TCP, with the [`RemoteMr`]s each side
//! offers, and bring both QPs to RTS, as the `ibverbs` crate's `handshake` or async-rdma's
//! `connect`/`listen` do. docs/api.md maps every concept of libibverbs, `ibverbs`, async-rdma
//! and sideway to this crate.
//!
//! Attached: [`Device::attach`] uses the `rocev2d` serving the interface instead of an engine
//! in this process (docs/daemon.md): same methods and types; several applications share the
//! interface, and the daemon answers the peer's READs and atomics whatever the application
//! does.
//!
//! Async: [`Device::next_completion`] returns a `Future` of the next completion. Attached and
//! on tokio it sleeps on the CQ's eventfd through tokio's reactor; in-process it drives the
//! engine on each poll and wakes itself when nothing completed, so it busy-polls.
//!
//! Deviations from libibverbs: RC QPs only; memory is handed over as owned buffers (read and
//! written between operations with [`Device::mr_bytes`] / [`Device::mr_bytes_mut`]) instead of
//! raw pointers, so no `unsafe` is needed; in-process, the engine runs only inside this
//! crate's calls (no progress thread); one call connects a QP; no LIDs, GIDs are the interface
//! addresses.

mod attached;
pub mod connect;
mod device;
mod endpoint;
mod error;
mod mr;
mod qp;

pub use connect::{ConnectConfig, ConnectError, Connection};
pub use device::{Device, DeviceConfig, NextCompletion, random_psn, random_u64};
pub use endpoint::{Endpoint, EndpointFormatError, RemoteMr};
pub use error::{Error, Result};
pub use mr::{Mr, Pd};
pub use qp::{ConnectOptions, Cq, Qp, RemoteQp};
pub use rocev2_core::cq::{WcOpcode, WcStatus, WorkCompletion};
pub use rocev2_core::mprdma::MpConfig;
pub use rocev2_core::mr::{AccessFlags, Lkey, Rkey};
pub use rocev2_core::qp::{
    ExtCaps, MpSnapshot, Mtu, QpConfig, QpMode, QpState, RecvWr, SendOp, SendWr, Sge,
};
pub use rocev2_core::wire::Qpn;
pub use rocev2_core::wire::gid::{gid, gid_to_ip};
pub use rocev2_datapath::{DriverConfig, Mode as DatapathKind, WaitMode};
