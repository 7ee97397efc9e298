//! `rocev2`: a verbs-like API over the rocev2 RoCEv2 engine, in-process or attached to the
//! `rocev2d` daemon.
//!
//! A [`Device`] opens one Ethernet interface with a datapath ([`DatapathKind`]: AF_XDP, AF_PACKET,
//! UDP sockets, or the best available) and owns an engine, the registered memory and the
//! event-loop driver, driven by a progress thread ([`ProgressMode`]). The verbs map one to one:
//! [`Device::alloc_pd`], [`Device::register`] (`ibv_reg_mr`), [`Device::create_cq`],
//! [`Device::create_rc_qp`], [`Device::connect`] (INIT→RTR→RTS in one call),
//! [`Device::post_send`] / [`Device::post_recv`] with the core's [`SendWr`] / [`RecvWr`],
//! [`Device::poll_cq`], the blocking [`Device::wait_cq`] and the async
//! [`Device::next_completion`] / [`Device::completions`].
//!
//! A [`Device`] is a cheap, `Send + Sync` handle: clone it into threads or tasks; one can post
//! while another reaps.
//!
//! ```
//! use rocev2::{AccessFlags, ConnectOptions, Device, RemoteQp, SendOp, SendWr};
//! use std::time::Duration;
//! # fn main() -> Result<(), rocev2::Error> {
//! // Two devices joined in memory; `Device::open("eth0", DatapathKind::Auto)` opens a real
//! // interface the same way.
//! let (dev, peer) = Device::pair()?;
//! let (pd, ppd) = (dev.alloc_pd()?, peer.alloc_pd()?);
//! let mr = dev.register(pd, vec![0u8; 4096], AccessFlags::LOCAL_WRITE)?;
//! dev.mr_guard(&mr)?[..5].copy_from_slice(b"hello");
//! let target = peer.register(ppd, vec![0u8; 4096], AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
//! let (cq, pcq) = (dev.create_cq(64)?, peer.create_cq(64)?);
//! let (qp, pqp) = (dev.create_rc_qp(pd, cq, cq)?, peer.create_rc_qp(ppd, pcq, pcq)?);
//! // What each side learns from the other out of band (`rocev2::connect` exchanges it and
//! // brings both QPs up in one call).
//! let to = |d: &Device, qpn, psn| RemoteQp {
//!     qpn,
//!     psn,
//!     ip: d.source_ip(false).unwrap(),
//!     mac: None, // resolved through the neighbour table
//! };
//! let (psn, ppsn) = (rocev2::random_psn(), rocev2::random_psn());
//! dev.connect(qp, &to(&peer, pqp.qpn(), ppsn), &ConnectOptions { local_psn: psn, ..Default::default() })?;
//! peer.connect(pqp, &to(&dev, qp.qpn(), psn), &ConnectOptions { local_psn: ppsn, ..Default::default() })?;
//!
//! let write = SendOp::Write { remote_addr: target.addr(), rkey: target.rkey() };
//! dev.post_send(qp, SendWr::new(1, write).sge(mr.sge(0, 4096)?))?;
//! let mut wcs = Vec::new();
//! dev.wait_cq(cq, &mut wcs, 16, Duration::from_secs(5))?;
//! assert!(wcs[0].status.is_success());
//! // The peer made no call: its progress thread placed the bytes.
//! assert_eq!(&peer.mr_guard(&target)?[..5], b"hello");
//! # Ok(()) }
//! ```
//!
//! Connect in one call: [`connect::connect`] and [`connect::accept`] (and their
//! [`connect::tokio`] twins) exchange [`Endpoint`]s over TCP, with the [`RemoteMr`]s each side
//! offers, and bring both QPs to RTS, as the `ibverbs` crate's `handshake` or async-rdma's
//! `connect`/`listen` do. docs/api.md maps every concept of libibverbs, `ibverbs`, async-rdma
//! and sideway to this crate.
//!
//! Progress: in-process, a thread per device drives the engine, so a passive side serves the
//! peer's READs, WRITEs and atomics and sends its ACKs with no call at all; it busy-polls or
//! sleeps on the datapath and a wake-up eventfd as the driver's [`WaitMode`] says (the costs
//! are in [`ProgressMode`]'s module docs). [`ProgressMode::Caller`] keeps the engine inside
//! the application's calls instead.
//!
//! Attached: [`Device::attach`] uses the `rocev2d` serving the interface instead of an engine
//! in this process (docs/daemon.md): same methods and types; several applications share the
//! interface, and the daemon answers the peer's READs and atomics whatever the application
//! does.
//!
//! Async: [`Device::next_completion`] and [`Completions::next`] sleep on the CQ's eventfd
//! through tokio's reactor (the progress thread or the daemon signals it when completions
//! arrive), so an idle wait costs no CPU; they busy-poll with [`WaitMode::Spin`],
//! caller-driven, or outside a tokio runtime. Both are cancel-safe.
//!
//! Memory: the device owns registered buffers (`Vec<u8>`, `Box<[u8]>`, …); reach them with
//! [`Device::mr_guard`] (a guard that derefs to `[u8]`) or the typed atomic helpers
//! [`Device::read_u64`] / [`Device::write_u64`] (host byte order in memory; the wire carries
//! atomics big-endian, converted by the engine), and get them back with
//! [`Device::deregister`].
//!
//! Access rights are `ibv_access_flags` with full set operations, and every error says what to
//! do and keeps its cause:
//!
//! ```
//! use rocev2::AccessFlags;
//! let all = AccessFlags::all();
//! let remote = all - AccessFlags::LOCAL_WRITE;
//! assert!(remote.contains(AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC));
//! assert_eq!(remote.bits(), 0xe); // IBV_ACCESS_REMOTE_WRITE | _READ | _ATOMIC
//!
//! let e = rocev2::Error::WrongDevice("QP");
//! assert!(e.to_string().contains("use handles with the device that made them"));
//! ```
//!
//! UD: [`Device::create_ud_qp`], [`Device::create_ah`] and [`Device::post_send_to`] carry
//! datagrams (`IBV_QPT_UD`); every UD receive buffer starts with the 40-byte GRH area
//! ([`GRH_LEN`]), as libibverbs delivers it, and UD completions name the sender
//! ([`WorkCompletion::src_qp`], [`UdSource`]).
//!
//! Deviations from libibverbs: RC and UD QPs, no UC; memory is handed over as owned buffers instead of
//! raw pointers, so no `unsafe` is needed; one call connects a QP; no LIDs, GIDs are the
//! interface addresses; handles of another device are refused ([`Error::WrongDevice`]).
//!
//! Source layout, in layers that import downwards only (`tests/layering.rs`): the vocabulary
//! at the bottom (`error.rs`, `mr.rs`, `qp.rs`, `ud.rs` with the UD types and send checks,
//! `cm_wait.rs` with what CM waiters share, `wakeup.rs`, `engine.rs` with the in-process
//! engine's state, [`ProgressMode`] and [`EngineGuard`], `random.rs`, `endpoint.rs`); the seam
//! `backend.rs` (the `Backend` trait, chosen once when a device opens); the two backends,
//! in-process `local.rs` and attached `attached.rs`, which never import each other; the
//! [`Device`] in `device/` (`mod.rs`, and its CM, UD and stepwise calls in `cm.rs`, `ud.rs`,
//! `stepwise.rs`), whose public methods check their handles and delegate to the backend; on
//! top, `connect.rs` and `pair.rs`.

#![deny(missing_docs)]

mod attached;
mod backend;
mod cm_wait;
pub mod connect;
mod device;
mod endpoint;
mod engine;
mod error;
mod local;
mod mr;
mod pair;
mod qp;
mod random;
mod ud;
mod wakeup;

pub use connect::{ConnectConfig, ConnectError, Connection};
pub use device::{Completions, Device, DeviceConfig, MrGuard};
pub use endpoint::{Endpoint, EndpointFormatError, RemoteMr};
pub use engine::{EngineGuard, LocalDriver, ProgressMode};
pub use error::{Error, Result, check, ibv_name, report};
pub use mr::{Mr, Pd};
pub use qp::{ConnectOptions, Cq, Qp, RemoteQp, Srq};
pub use random::{random_psn, random_u64};
/// The engine behind a device ([`Device::engine`]): the core's `Endpoint`, not the exchange
/// type [`Endpoint`].
pub use rocev2_core::Endpoint as Engine;
pub use rocev2_core::cc::{CcScheme, CcSettings};
pub use rocev2_core::cm::{
    AcceptParams, CmaHeader, ConnId, ConnectParams, ConnectRequest, Event as CmEvent, PortSpace,
    QpParams, RDMA_UDP_Q_KEY, RejectReason, ServiceId, SidrId, SidrParams, SidrReplyParams,
    SidrRequest, SidrStatus,
};
pub use rocev2_core::cq::{UdSource, WcOpcode, WcStatus, WorkCompletion};
pub use rocev2_core::mprdma::MpConfig;
pub use rocev2_core::mr::{AccessFlags, Lkey, MrId, MrInfo, PdId, Rkey, VecMemory};
pub use rocev2_core::qp::{
    CqId, ErrorCause, ExtCaps, MpSnapshot, Mtu, QpConfig, QpMode, QpState, RecvWr, SendOp, SendWr,
    Sge,
};
pub use rocev2_core::srq::{SrqAttr, SrqId};
pub use rocev2_core::wire::gid::{gid, gid_to_ip};
pub use rocev2_core::wire::{Psn, Qpn};
pub use rocev2_datapath::auto::Options as DatapathOptions;
pub use rocev2_datapath::host::CallerRange;
pub use rocev2_datapath::{
    Datapath, Driver, DriverConfig, Interface, Mode as DatapathKind, Progress, WaitMode,
};
pub use rocev2_ipc::proto::{Destination, ErrorKind, ModifySpec};
pub use ud::{Ah, AhAttr, GRH_LEN, UdAddress};

/// The README's example, compiled and run as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
mod readme {}
