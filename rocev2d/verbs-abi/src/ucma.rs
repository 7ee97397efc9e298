//! The private interface `librocev2_ibverbs.so` exports for `librocev2_rdmacm.so`: the device's
//! connection manager, keyed by the `ibv_context` and `ibv_qp` the verbs library handed out, so
//! the CM runs on the same device as the program's QPs (one device per process).
//!
//! `librocev2_rdmacm.so` looks up [`ENTRY`] at run time and calls it with [`VERSION`]; the verbs
//! library answers its table only for that version, so a mismatched pair fails at the first
//! rdma_cm call with a message naming both. Every call returns 0 or a positive `errno`.
// Fields without a doc mean what the field of `rdma_conn_param` or the CM message of the same
// name means.
#![allow(missing_docs)]

use core::ffi::{CStr, c_int, c_void};

/// The interface's version: bump it on any change of the types below.
pub const VERSION: u32 = 3;

/// The symbol of the entry point: `extern "C" fn(version: u32) -> *const Ops`, NULL when the
/// version is not the library's.
pub const ENTRY: &CStr = c"rocev2_ucma_ops";

/// The entry point's type.
pub type EntryFn = unsafe extern "C" fn(version: u32) -> *const Ops;

/// Bytes of private data a REQ carries (IBA §12.6.5), CMA header included.
pub const REQ_PRIVATE_DATA: usize = 92;
/// Bytes of private data a REP or REJ carries.
pub const REP_PRIVATE_DATA: usize = 196;
/// Bytes of private data a SIDR_REQ carries (IBA §12.11.1), CMA header included.
pub const SIDR_REQ_PRIVATE_DATA: usize = 216;
/// Bytes of private data a SIDR_REP carries (IBA §12.11.2).
pub const SIDR_REP_PRIVATE_DATA: usize = 136;
/// The most any CM message carries: what an [`Event`] has room for.
pub const MAX_PRIVATE_DATA: usize = SIDR_REQ_PRIVATE_DATA;

/// What [`Ops::connect`] sends in the REQ.
#[repr(C)]
pub struct ConnectArgs {
    /// `RDMA_PS_TCP << 16 | port`.
    pub service_id: u64,
    /// The source GID (the IPv4-mapped or IPv6 address of this side).
    pub local_gid: [u8; 16],
    /// The passive side's GID.
    pub peer_gid: [u8; 16],
    /// The CMA header and the application's bytes.
    pub private_data: [u8; REQ_PRIVATE_DATA],
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    /// 1: the CM moves the QP (a QP of `rdma_create_qp`); 0: the program does, and the REQ
    /// only announces its number (`conn_param.qp_num`, a QP of any type).
    pub moves_qp: u8,
    /// The first PSN this side receives (the REQ's Starting PSN).
    pub start_psn: u32,
}

/// What [`Ops::accept`] sends in the REP.
#[repr(C)]
pub struct AcceptArgs {
    pub private_data: [u8; REP_PRIVATE_DATA],
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub rnr_retry_count: u8,
    /// As [`ConnectArgs::moves_qp`].
    pub moves_qp: u8,
    /// The first PSN this side receives (the REP's Starting PSN).
    pub start_psn: u32,
}

/// What [`Ops::sidr_request`] sends in the SIDR_REQ.
#[repr(C)]
pub struct SidrRequestArgs {
    /// `RDMA_PS_UDP << 16 | port`.
    pub service_id: u64,
    /// The source GID.
    pub local_gid: [u8; 16],
    /// The responder's GID.
    pub peer_gid: [u8; 16],
    /// The CMA header and the application's bytes.
    pub private_data: [u8; SIDR_REQ_PRIVATE_DATA],
    pub private_data_len: u8,
}

/// What [`Ops::sidr_reply`] sends in the SIDR_REP.
#[repr(C)]
pub struct SidrReplyArgs {
    /// The SIDR_REP's status (IBA §12.11.2): 0 success, 2 rejected, ...
    pub status: u32,
    /// On success, the UD QP and Q_Key the requester sends to.
    pub qpn: u32,
    pub q_key: u32,
    pub private_data: [u8; SIDR_REP_PRIVATE_DATA],
    pub private_data_len: u8,
}

/// [`Event::kind`]: a connection request for a listened service.
pub const EV_CONNECT_REQUEST: u32 = 1;
/// The connection is up; its QP is in RTS.
pub const EV_ESTABLISHED: u32 = 2;
/// A REJ came; `status` is its reason.
pub const EV_REJECTED: u32 = 3;
/// The peer never answered.
pub const EV_TIMED_OUT: u32 = 4;
/// A DREQ came, or ours was answered (or given up on).
pub const EV_DISCONNECTED: u32 = 5;
/// The connection's time-wait is over.
pub const EV_TIMEWAIT_EXIT: u32 = 6;
/// A SIDR_REQ for a listened service: `conn` is the request to answer with
/// [`Ops::sidr_reply`].
pub const EV_SIDR_REQUEST: u32 = 7;
/// The SIDR_REP to [`Ops::sidr_request`]'s request `conn`: `status` is its status, and on
/// success `peer_qpn` and `q_key` the service's UD QP and Q_Key.
pub const EV_SIDR_REPLY: u32 = 8;
/// The SIDR_REQ `conn` went unanswered.
pub const EV_SIDR_TIMED_OUT: u32 = 9;

/// One CM event of a context.
#[repr(C)]
pub struct Event {
    /// `EV_*`.
    pub kind: u32,
    /// The REJ's reason (`EV_REJECTED`), the SIDR_REP's status (`EV_SIDR_REPLY`).
    pub status: u32,
    /// The connection (its local communication ID), or the SIDR request.
    pub conn: u32,
    /// `EV_CONNECT_REQUEST`: the peer's QPN, responder resources, initiator depth and RNR
    /// retry count, as the REQ announced them; `EV_ESTABLISHED`: the peer's QPN and what the
    /// connection's QP runs with (this side's READ depths); `EV_SIDR_REPLY`: the service's QPN.
    pub peer_qpn: u32,
    /// `EV_SIDR_REPLY`: the service's Q_Key.
    pub q_key: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub rnr_retry_count: u8,
    /// `EV_CONNECT_REQUEST`, `EV_ESTABLISHED`: the path MTU code (1 = 256 … 5 = 4096).
    pub path_mtu: u8,
    /// `EV_ESTABLISHED`: the first PSN this side receives.
    pub rq_psn: u32,
    /// `EV_CONNECT_REQUEST`: the REQ's Starting PSN; `EV_ESTABLISHED`: the first PSN this
    /// side sends (either way the same, on the passive side).
    pub sq_psn: u32,
    /// `EV_CONNECT_REQUEST`, `EV_ESTABLISHED`: the path's Local ACK Timeout exponent and the
    /// transport retry count.
    pub local_ack_timeout: u8,
    pub retry_count: u8,
    pub _pad: [u8; 2],
    /// `EV_CONNECT_REQUEST`, `EV_SIDR_REQUEST`: the service asked for.
    pub service_id: u64,
    /// `EV_CONNECT_REQUEST`, `EV_SIDR_REQUEST`: where the request came from.
    pub peer_gid: [u8; 16],
    /// The message's private data (for a REQ or SIDR_REQ, CMA header included).
    pub private_data_len: u32,
    pub private_data: [u8; MAX_PRIVATE_DATA],
}

/// The table [`ENTRY`] returns.
#[repr(C)]
pub struct Ops {
    /// [`VERSION`].
    pub version: u32,
    /// `size_of::<Ops>()`.
    pub size: u32,
    /// Opens the connection manager of the context's device (QP1); idempotent.
    pub enable: unsafe extern "C" fn(ctx: *mut c_void) -> c_int,
    /// Accepts REQs for a service on the context's device.
    pub listen: unsafe extern "C" fn(ctx: *mut c_void, service_id: u64) -> c_int,
    /// Stops accepting them.
    pub unlisten: unsafe extern "C" fn(ctx: *mut c_void, service_id: u64) -> c_int,
    /// Sends a REQ for a QP in INIT (any QP, untouched, without `moves_qp`); writes the
    /// connection to `conn`.
    pub connect:
        unsafe extern "C" fn(qp: *mut c_void, args: *const ConnectArgs, conn: *mut u32) -> c_int,
    /// Answers a connection request with a REP for a QP in INIT, which moves to RTR (any QP,
    /// untouched, without `moves_qp`).
    pub accept: unsafe extern "C" fn(qp: *mut c_void, conn: u32, args: *const AcceptArgs) -> c_int,
    /// The context's QP numbered `qp_num` (an `ibv_qp`), or NULL: how a `conn_param.qp_num`
    /// becomes a handle for `connect` and `accept`.
    pub qp_by_num: unsafe extern "C" fn(ctx: *mut c_void, qp_num: u32) -> *mut c_void,
    /// Answers a connection request with a REJ (reason: consumer).
    pub reject:
        unsafe extern "C" fn(ctx: *mut c_void, conn: u32, data: *const u8, len: usize) -> c_int,
    /// Moves the connection's QP to ERROR and sends a DREQ.
    pub disconnect:
        unsafe extern "C" fn(ctx: *mut c_void, conn: u32, data: *const u8, len: usize) -> c_int,
    /// Sends a SIDR_REQ (resent on the CM's timer); writes the request to `id`. Its answer
    /// comes as `EV_SIDR_REPLY` or `EV_SIDR_TIMED_OUT`.
    pub sidr_request:
        unsafe extern "C" fn(ctx: *mut c_void, args: *const SidrRequestArgs, id: *mut u32) -> c_int,
    /// Answers an `EV_SIDR_REQUEST` with a SIDR_REP.
    pub sidr_reply:
        unsafe extern "C" fn(ctx: *mut c_void, id: u32, args: *const SidrReplyArgs) -> c_int,
    /// Takes the context's next CM event, waiting up to `timeout_ms`; `ETIMEDOUT` if none came.
    pub next_event:
        unsafe extern "C" fn(ctx: *mut c_void, timeout_ms: u32, ev: *mut Event) -> c_int,
    /// Resolves the next hop towards `gid` (an IPv4-mapped or IPv6 address) out of the
    /// context's interface, waiting up to `timeout_ms`: `EHOSTUNREACH` when nothing answered.
    pub resolve: unsafe extern "C" fn(ctx: *mut c_void, gid: *const u8, timeout_ms: u32) -> c_int,
}
