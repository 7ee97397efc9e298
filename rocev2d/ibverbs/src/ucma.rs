//! The private interface of [`rocev2_verbs_abi::ucma`]: the connection manager of the device
//! behind a context, for `librocev2_rdmacm.so`, as the kernel's `rdma_cm` serves librdmacm.
//!
//! It is this library's so that one device serves both: the QPs `rdma_create_qp` makes are
//! this library's `ibv_qp`s, and their connections are made by the CM of the same
//! [`rocev2::Device`] ([`rocev2::Device::cm_connect`] and friends, in-process or attached).
//! Every call checks its context or QP handle as the verbs do, and returns 0 or an `errno`.

use crate::abi::{ibv_context, ibv_qp};
use crate::context::context;
use crate::engine::Engine;
use crate::handle::guard;
use core::ffi::{c_int, c_void};
use rocev2::{Error, Psn};
use rocev2_core::cm::{
    AcceptParams, ConnId, ConnectParams, Event, RejectReason, ServiceId, SidrId, SidrParams,
    SidrReplyParams, SidrStatus,
};
use rocev2_core::wire::Qpn;
use rocev2_verbs_abi::ucma::{self, AcceptArgs, ConnectArgs, Ops, SidrReplyArgs, SidrRequestArgs};
use std::net::Ipv6Addr;
use std::sync::Arc;
use std::time::Duration;

/// How long a connect waits for the peer's MAC.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(3);

static OPS: Ops = Ops {
    version: ucma::VERSION,
    size: size_of::<Ops>() as u32,
    enable,
    listen,
    unlisten,
    connect,
    accept,
    reject,
    disconnect,
    sidr_request,
    sidr_reply,
    next_event,
    resolve,
    qp_by_num,
};

#[unsafe(no_mangle)]
/// The entry point ([`ucma::ENTRY`]): the table for `version`, NULL for any other.
pub extern "C" fn rocev2_ucma_ops(version: u32) -> *const Ops {
    if version == ucma::VERSION {
        &OPS
    } else {
        std::ptr::null()
    }
}

/// The engine of context `ctx`.
fn engine(ctx: *mut c_void) -> Result<Arc<Engine>, c_int> {
    context(ctx.cast::<ibv_context>())
        .map(|c| c.engine.clone())
        .ok_or(libc::EINVAL)
}

/// Runs a call: its error as an `errno`, a panic as `EIO`.
fn call(f: impl FnOnce() -> Result<(), c_int>) -> c_int {
    guard(libc::EIO, || f().err().unwrap_or(0))
}

/// The device's error as an `errno`.
fn err(e: Error) -> c_int {
    crate::errno(&e)
}

/// `len` bytes at `data` (none when NULL or empty), at most `max`.
fn bytes<'a>(data: *const u8, len: usize, max: usize) -> Result<&'a [u8], c_int> {
    if len > max {
        return Err(libc::EINVAL);
    }
    if data.is_null() || len == 0 {
        return Ok(&[]);
    }
    // SAFETY: the caller passes `len` readable bytes at `data` (the interface's contract).
    Ok(unsafe { std::slice::from_raw_parts(data, len) })
}

/// The kernel's neighbour table for the device's interface, as the connect's own resolution
/// reads it: resolved here, before the connect, so that `rdma_resolve_addr` reports a peer that
/// does not answer as librdmacm does (`ADDR_ERROR`), not `rdma_connect`.
unsafe extern "C" fn resolve(ctx: *mut c_void, gid: *const u8, timeout_ms: u32) -> c_int {
    call(|| {
        let dev = engine(ctx)?;
        if gid.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: non-NULL, 16 readable bytes (the interface's contract).
        let gid = unsafe { gid.cast::<[u8; 16]>().read_unaligned() };
        let ip = rocev2::gid_to_ip(Ipv6Addr::from(gid));
        let wait = Duration::from_millis(u64::from(timeout_ms));
        rocev2_datapath::neigh::resolve(dev.interface(), ip, wait)
            .map(drop)
            .map_err(|_| libc::EHOSTUNREACH)
    })
}

/// An argument struct of the interface that carries private data.
trait Carries {
    /// Its private-data array and the length the caller gave.
    fn data(&self) -> (&[u8], u8);
}

macro_rules! carries {
    ($($t:ty),*) => {$(
        impl Carries for $t {
            fn data(&self) -> (&[u8], u8) {
                (&self.private_data, self.private_data_len)
            }
        }
    )*};
}
carries!(ConnectArgs, AcceptArgs, SidrRequestArgs, SidrReplyArgs);

/// The caller's arguments at `args` and the private data they carry; `EINVAL` for NULL or a
/// length beyond the array.
fn read_args<'a, T: Carries>(args: *const T) -> Result<(&'a T, Vec<u8>), c_int> {
    // SAFETY: NULL or the caller's arguments (the interface's contract).
    let a = unsafe { args.as_ref() }.ok_or(libc::EINVAL)?;
    let (all, len) = a.data();
    let data = all.get(..usize::from(len)).ok_or(libc::EINVAL)?.to_vec();
    Ok((a, data))
}

unsafe extern "C" fn enable(ctx: *mut c_void) -> c_int {
    call(|| engine(ctx)?.enable_cm().map_err(err))
}

unsafe extern "C" fn listen(ctx: *mut c_void, service_id: u64) -> c_int {
    call(|| engine(ctx)?.cm_listen(ServiceId(service_id)).map_err(err))
}

unsafe extern "C" fn unlisten(ctx: *mut c_void, service_id: u64) -> c_int {
    call(|| {
        engine(ctx)?
            .cm_unlisten(ServiceId(service_id))
            .map(drop)
            .map_err(err)
    })
}

unsafe extern "C" fn connect(qp: *mut c_void, args: *const ConnectArgs, conn: *mut u32) -> c_int {
    call(|| {
        let (a, data) = read_args(args)?;
        let moves_qp = a.moves_qp != 0;
        let (qp, engine) = crate::qp::cm_qp(qp.cast::<ibv_qp>(), !moves_qp).ok_or(libc::EINVAL)?;
        if conn.is_null() {
            return Err(libc::EINVAL);
        }
        let params = ConnectParams {
            moves_qp,
            private_data: data,
            responder_resources: a.responder_resources,
            initiator_depth: a.initiator_depth,
            retry_count: a.retry_count.min(7),
            rnr_retry_count: a.rnr_retry_count.min(7),
            ..ConnectParams::new(
                ServiceId(a.service_id),
                Ipv6Addr::from(a.local_gid),
                Ipv6Addr::from(a.peer_gid),
                qp.qpn(),
                Psn::new(a.start_psn),
            )
        };
        let id = engine
            .cm_connect(qp, params, RESOLVE_TIMEOUT)
            .map_err(err)?;
        // SAFETY: non-NULL, the caller's out pointer.
        unsafe { *conn = id.comm_id() };
        Ok(())
    })
}

unsafe extern "C" fn accept(qp: *mut c_void, conn: u32, args: *const AcceptArgs) -> c_int {
    call(|| {
        let (a, data) = read_args(args)?;
        let moves_qp = a.moves_qp != 0;
        let (qp, engine) = crate::qp::cm_qp(qp.cast::<ibv_qp>(), !moves_qp).ok_or(libc::EINVAL)?;
        let params = AcceptParams {
            moves_qp,
            private_data: data,
            responder_resources: a.responder_resources,
            initiator_depth: a.initiator_depth,
            rnr_retry_count: a.rnr_retry_count.min(7),
            ..AcceptParams::new(qp.qpn(), Psn::new(a.start_psn))
        };
        engine
            .cm_accept(ConnId::from_comm_id(conn), params)
            .map_err(err)
    })
}

unsafe extern "C" fn qp_by_num(ctx: *mut c_void, qp_num: u32) -> *mut c_void {
    guard(std::ptr::null_mut(), || {
        crate::qp::by_num(ctx.cast(), qp_num).map_or(std::ptr::null_mut(), |p| p.cast())
    })
}

unsafe extern "C" fn reject(ctx: *mut c_void, conn: u32, data: *const u8, len: usize) -> c_int {
    call(|| {
        let data = bytes(data, len, ucma::REP_PRIVATE_DATA)?;
        engine(ctx)?
            .cm_reject(ConnId::from_comm_id(conn), RejectReason::CONSUMER, data)
            .map_err(err)
    })
}

unsafe extern "C" fn disconnect(ctx: *mut c_void, conn: u32, data: *const u8, len: usize) -> c_int {
    call(|| {
        let data = bytes(data, len, ucma::REP_PRIVATE_DATA)?;
        engine(ctx)?
            .cm_disconnect(ConnId::from_comm_id(conn), data)
            .map_err(err)
    })
}

unsafe extern "C" fn sidr_request(
    ctx: *mut c_void,
    args: *const SidrRequestArgs,
    id: *mut u32,
) -> c_int {
    call(|| {
        let engine = engine(ctx)?;
        if id.is_null() {
            return Err(libc::EINVAL);
        }
        let (a, data) = read_args(args)?;
        let params = SidrParams {
            private_data: data,
            ..SidrParams::new(
                ServiceId(a.service_id),
                Ipv6Addr::from(a.local_gid),
                Ipv6Addr::from(a.peer_gid),
            )
        };
        let sidr = engine
            .cm_sidr_request(params, RESOLVE_TIMEOUT)
            .map_err(err)?;
        // SAFETY: non-NULL, the caller's out pointer.
        unsafe { *id = sidr.value() };
        Ok(())
    })
}

unsafe extern "C" fn sidr_reply(ctx: *mut c_void, id: u32, args: *const SidrReplyArgs) -> c_int {
    call(|| {
        let engine = engine(ctx)?;
        let (a, data) = read_args(args)?;
        let params = SidrReplyParams {
            status: SidrStatus(u8::try_from(a.status).map_err(|_| libc::EINVAL)?),
            qpn: Qpn::new(a.qpn),
            q_key: a.q_key,
            private_data: data,
        };
        engine
            .cm_sidr_reply(SidrId::from_value(id), params)
            .map_err(err)
    })
}

unsafe extern "C" fn next_event(ctx: *mut c_void, timeout_ms: u32, ev: *mut ucma::Event) -> c_int {
    call(|| {
        if ev.is_null() {
            return Err(libc::EINVAL);
        }
        let engine = engine(ctx)?;
        let timeout = Duration::from_millis(timeout_ms.into());
        // SAFETY: non-NULL, the caller's out struct.
        let out = unsafe { &mut *ev };
        let e = engine.next_cm_event(|_| true, timeout).map_err(err)?;
        fill(out, e, engine.interface());
        Ok(())
    })
}

/// Writes CM event `e` into `out`; its path MTU at most what `iface` carries to the peer (the
/// MTU the device's CM runs the connection at).
fn fill(out: &mut ucma::Event, e: Event, iface: &rocev2_datapath::Interface) {
    let mtu = |code: u8, peer: Ipv6Addr| {
        let link = iface.path_mtu(rocev2::gid_to_ip(peer).is_ipv6());
        link.map_or(0, |l| code.min(l.code()))
    };
    out.status = 0;
    out.peer_qpn = 0;
    out.q_key = 0;
    out.responder_resources = 0;
    out.initiator_depth = 0;
    out.rnr_retry_count = 0;
    out.path_mtu = 0;
    out.rq_psn = 0;
    out.sq_psn = 0;
    out.local_ack_timeout = 0;
    out.retry_count = 0;
    out.service_id = 0;
    out.peer_gid = [0; 16];
    let (kind, id, data) = match e {
        Event::ConnectRequest(r) => {
            out.peer_qpn = r.req.local_qpn.value();
            out.responder_resources = r.req.responder_resources;
            out.initiator_depth = r.req.initiator_depth;
            out.rnr_retry_count = r.req.rnr_retry_count;
            out.path_mtu = mtu(r.req.path_packet_payload_mtu, r.peer_gid);
            out.sq_psn = r.req.starting_psn.value();
            out.local_ack_timeout = r.req.primary_path.local_ack_timeout;
            out.retry_count = r.req.retry_count;
            out.service_id = r.req.service_id;
            out.peer_gid = r.peer_gid.octets();
            (
                ucma::EV_CONNECT_REQUEST,
                r.conn.comm_id(),
                r.req.private_data.to_vec(),
            )
        }
        Event::Established {
            conn,
            qp,
            private_data,
        } => {
            out.peer_qpn = qp.peer_qpn.value();
            out.responder_resources = qp.max_dest_rd_atomic;
            out.initiator_depth = qp.max_rd_atomic;
            out.rnr_retry_count = qp.rnr_retry_count;
            out.path_mtu = mtu(qp.path_mtu, qp.peer_gid);
            out.rq_psn = qp.rq_psn.value();
            out.sq_psn = qp.sq_psn.value();
            out.local_ack_timeout = qp.local_ack_timeout;
            out.retry_count = qp.retry_count;
            (ucma::EV_ESTABLISHED, conn.comm_id(), private_data)
        }
        Event::Rejected {
            conn,
            reason,
            private_data,
        } => {
            out.status = reason.0.into();
            (ucma::EV_REJECTED, conn.comm_id(), private_data)
        }
        Event::TimedOut { conn } => (ucma::EV_TIMED_OUT, conn.comm_id(), Vec::new()),
        Event::Disconnected { conn, private_data } => {
            (ucma::EV_DISCONNECTED, conn.comm_id(), private_data)
        }
        Event::TimeWaitExit { conn } => (ucma::EV_TIMEWAIT_EXIT, conn.comm_id(), Vec::new()),
        Event::SidrRequest(r) => {
            out.service_id = r.req.service_id;
            out.peer_gid = r.peer_gid.octets();
            (
                ucma::EV_SIDR_REQUEST,
                r.id.value(),
                r.req.private_data.to_vec(),
            )
        }
        Event::SidrReply {
            id,
            status,
            qpn,
            q_key,
            private_data,
        } => {
            out.status = status.0.into();
            out.peer_qpn = qpn.value();
            out.q_key = q_key;
            (ucma::EV_SIDR_REPLY, id.value(), private_data)
        }
        Event::SidrTimedOut { id } => (ucma::EV_SIDR_TIMED_OUT, id.value(), Vec::new()),
    };
    out.kind = kind;
    out.conn = id;
    let n = data.len().min(ucma::MAX_PRIVATE_DATA);
    out.private_data[..n].copy_from_slice(&data[..n]);
    out.private_data[n..].fill(0);
    out.private_data_len = n as u32;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_its_version_is_served() {
        assert!(!rocev2_ucma_ops(ucma::VERSION).is_null());
        assert!(rocev2_ucma_ops(ucma::VERSION + 1).is_null());
    }

    #[test]
    fn foreign_handles_are_refused() {
        let mut x = 0u64;
        let p = (&raw mut x).cast::<c_void>();
        // SAFETY: the calls check the handle before any use.
        unsafe {
            assert_eq!(listen(p, 1), libc::EINVAL);
            assert_eq!(
                reject(std::ptr::null_mut(), 1, std::ptr::null(), 0),
                libc::EINVAL
            );
            assert_eq!(reject(p, 1, std::ptr::null(), 197), libc::EINVAL);
            let mut conn = 0;
            assert_eq!(connect(p, std::ptr::null(), &mut conn), libc::EINVAL);
        }
    }
}
