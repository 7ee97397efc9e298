//! IDs and the connection calls: `rdma_create_id` … `rdma_disconnect`, and [`dispatch`], which
//! turns the device's CM events into the IDs' `rdma_cm_event`s as the kernel's `rdma_cm` does.
//!
//! Addresses are resolved by the call itself (`ADDR_RESOLVED` and `ROUTE_RESOLVED` are queued
//! before it returns): `rdma_resolve_addr` waits for the next hop's MAC, as the kernel's does
//! before its event, and a peer that does not answer gets `ADDR_ERROR` (status `-ETIMEDOUT`),
//! which programs handle before they set up anything else (rping, having made its CQ thread,
//! would otherwise wait for it forever after a failed `rdma_connect`).
//!
//! An RDMA_PS_UDP ID resolves a UD service instead of connecting, as the kernel's rdma_cm
//! does (IBA §12.11, SIDR): `rdma_connect` sends a SIDR_REQ, whose SIDR_REP becomes
//! `ESTABLISHED` with the service's QPN, Q_Key and address vector in `param.ud` (or
//! `UNREACHABLE` with the SIDR status, `-ETIMEDOUT` when unanswered); a listener's
//! `CONNECT_REQUEST` is answered by `rdma_accept` (a SIDR_REP naming the ID's QP, Q_Key
//! `RDMA_UDP_QKEY`) or `rdma_reject`, and has no `ESTABLISHED` of its own.

use crate::abi::{self, rdma_cm_id, rdma_conn_param, rdma_event_channel};
use crate::addr::{ephemeral_port, from_sockaddr, gid_bytes, to_storage};
use crate::device::{self, Dev};
use crate::ep;
use crate::state::{ConnAttrs, EvSpec, IdState, Request, State, UdParam, lock};
use crate::verbs::ops;
use crate::{call, unsupported, verbose};
use core::ffi::{c_int, c_void};
use rocev2_core::cm::{CmaAddrs, CmaHeader, PortSpace, RDMA_UDP_Q_KEY, ServiceId, SidrStatus};
use rocev2_verbs_abi::ucma::{self, AcceptArgs, ConnectArgs, SidrReplyArgs, SidrRequestArgs};
use rocev2_verbs_abi::verbs::{IBV_QPT_RC, IBV_QPT_UD};
use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};

/// User bytes a REQ carries after the CMA header (librdmacm's limit for RDMA_PS_TCP).
pub const MAX_CONNECT_DATA: usize = ucma::REQ_PRIVATE_DATA - CmaHeader::LEN;
/// User bytes of a REP.
pub const MAX_ACCEPT_DATA: usize = ucma::REP_PRIVATE_DATA;
/// User bytes of a REJ (IBA §12.6.7).
pub const MAX_REJECT_DATA: usize = 148;
/// User bytes a SIDR_REQ carries after the CMA header (librdmacm's limit for RDMA_PS_UDP).
pub const MAX_UD_CONNECT_DATA: usize = ucma::SIDR_REQ_PRIVATE_DATA - CmaHeader::LEN;
/// User bytes of a SIDR_REP (an RDMA_PS_UDP accept or reject).
pub const MAX_UD_ACCEPT_DATA: usize = ucma::SIDR_REP_PRIVATE_DATA;

/// The port space of ID `p`: RDMA_PS_UDP's resolve UD services, RDMA_PS_TCP's connect RC QPs.
fn port_space(p: *const rdma_cm_id) -> PortSpace {
    // SAFETY: a live ID (the callers checked it under the lock): our Box.
    match unsafe { (*p).ps } {
        abi::RDMA_PS_UDP => PortSpace::UDP,
        _ => PortSpace::TCP,
    }
}
/// Makes an ID on `channel` (NULL: a synchronous ID with a private channel).
///
/// # Errors
/// `EINVAL`, `EOPNOTSUPP` (a port space other than RDMA_PS_TCP and RDMA_PS_UDP), `ENODEV`,
/// `eventfd`'s.
pub fn create(
    channel: *mut rdma_event_channel,
    context: *mut c_void,
    ps: c_int,
) -> Result<*mut rdma_cm_id, c_int> {
    let qp_type = match ps {
        abi::RDMA_PS_TCP => IBV_QPT_RC,
        abi::RDMA_PS_UDP => IBV_QPT_UD,
        _ => {
            return Err(unsupported(
                "a port space other than RDMA_PS_TCP and RDMA_PS_UDP",
            ));
        }
    };
    device::devices()?;
    let (channel, sync) = if channel.is_null() {
        (crate::channel::new_channel()?, true)
    } else {
        if !lock().channels.contains_key(&(channel as usize)) {
            return Err(libc::EINVAL);
        }
        (channel, false)
    };
    // SAFETY: an all-zero rdma_cm_id is a valid value (NULL pointers, AF_UNSPEC addresses).
    let mut id: Box<rdma_cm_id> = Box::new(unsafe { std::mem::zeroed() });
    id.channel = channel;
    id.context = context;
    id.ps = ps;
    id.qp_type = qp_type;
    let p = Box::into_raw(id);
    let mut st = lock();
    let serial = st.serial();
    st.ids.insert(
        p as usize,
        IdState {
            serial,
            channel: channel as usize,
            sync,
            ..Default::default()
        },
    );
    Ok(p)
}

/// The ports IDs of this process are bound to (a connection request's ID shares its
/// listener's port, and keeps it when the listener goes, as with the kernel's rdma_cm).
fn ports(st: &State) -> HashSet<u16> {
    st.ids
        .values()
        .filter(|s| s.request.is_none())
        .filter_map(|s| s.src.map(|a| a.port()))
        .collect()
}

/// Records where ID `p` is and whom it talks to, in the table and in its `route`.
fn set_route(
    st: &mut State,
    p: *mut rdma_cm_id,
    dev: Option<&Dev>,
    src: SocketAddr,
    dst: Option<SocketAddr>,
) {
    let Some(s) = st.ids.get_mut(&(p as usize)) else {
        return;
    };
    s.src = Some(src);
    s.dst = dst;
    if let Some(d) = dev {
        s.ctx = d.ctx;
    }
    // SAFETY: a live ID (in the table, under the lock): our Box.
    let id = unsafe { &mut *p };
    if let Some(d) = dev {
        id.verbs = d.verbs();
        id.pd = d.pd();
        id.port_num = 1;
    }
    id.route.addr.src_storage = to_storage(src).0;
    id.route.addr.ibaddr.sgid.raw = gid_bytes(src.ip());
    if let Some(dst) = dst {
        id.route.addr.dst_storage = to_storage(dst).0;
        id.route.addr.ibaddr.dgid.raw = gid_bytes(dst.ip());
    }
    id.route.addr.ibaddr.pkey = 0xffff_u16.to_be();
}

/// Binds ID `p` to `addr` (port 0: an ephemeral one).
fn bind(p: *mut rdma_cm_id, addr: SocketAddr) -> Result<(), c_int> {
    let dev = if addr.ip().is_unspecified() {
        None
    } else {
        Some(device::with_ip(addr.ip()).ok_or(libc::EADDRNOTAVAIL)?)
    };
    let mut st = lock();
    let s = st.id(p)?;
    if s.src.is_some() {
        return Err(libc::EINVAL);
    }
    let taken = ports(&st);
    let port = match addr.port() {
        0 => ephemeral_port(&taken),
        p if taken.contains(&p) => return Err(libc::EADDRINUSE),
        p => p,
    };
    set_route(&mut st, p, dev, SocketAddr::new(addr.ip(), port), None);
    Ok(())
}

#[unsafe(no_mangle)]
/// `rdma_create_id(3)`: RDMA_PS_TCP (RC) and RDMA_PS_UDP (UD).
pub extern "C" fn rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: c_int,
) -> c_int {
    call(|| {
        if id.is_null() {
            return Err(libc::EINVAL);
        }
        let p = create(channel, context, ps)?;
        // SAFETY: non-NULL, the caller's out pointer.
        unsafe { *id = p };
        Ok(())
    })
}

/// Frees ID `p`: stops listening, refuses a request it has not answered, disconnects a
/// connection still up.
pub fn destroy(p: *mut rdma_cm_id) -> Result<(), c_int> {
    let mut st = lock();
    let s = st.ids.remove(&(p as usize)).ok_or(libc::EINVAL)?;
    let ops = ops()?;
    if let Some(service) = s.service {
        st.listeners.remove(&service);
        for ctx in &s.listen_ctxs {
            // SAFETY: a live context of the verbs library.
            unsafe { (ops.unlisten)(*ctx as *mut _, service) };
        }
    }
    if let Some(conn) = s.conn {
        st.conns.remove(&(s.ctx, conn));
        if port_space(p) == PortSpace::UDP {
            // A resolution has nothing to end; a request nobody answered is refused.
            if s.request.is_some() {
                sidr_reply(ops, s.ctx, conn, SidrStatus::REJECT, 0, &[]);
            }
        } else if s.request.is_some() && !s.established && !s.disconnected {
            // SAFETY: a live context; no private data.
            unsafe { (ops.reject)(s.ctx as *mut _, conn, std::ptr::null(), 0) };
        } else if s.established && !s.disconnected {
            // SAFETY: a live context; no private data.
            unsafe { (ops.disconnect)(s.ctx as *mut _, conn, std::ptr::null(), 0) };
        }
    }
    drop(st);
    if s.sync {
        crate::channel::free_channel(s.channel as *mut _)?;
    }
    // SAFETY: made by Box::into_raw in `create` (or `dispatch`), now out of the table.
    drop(unsafe { Box::from_raw(p) });
    Ok(())
}

#[unsafe(no_mangle)]
/// `rdma_destroy_id(3)`. Unlike librdmacm it does not wait for the ID's events to be
/// acknowledged: those handed out stay valid until they are, those queued are dropped.
pub extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    call(|| destroy(id))
}

#[unsafe(no_mangle)]
/// `rdma_bind_addr(3)`: a local address of a device (its device becomes the ID's `verbs`) or
/// the wildcard; port 0 takes an ephemeral port.
pub extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int {
    call(|| {
        let a = from_sockaddr(addr)?;
        bind(id, a)
    })
}

/// `rdma_resolve_addr` without the wait of a synchronous ID.
fn resolve_addr(
    p: *mut rdma_cm_id,
    src: *mut libc::sockaddr,
    dst: *mut libc::sockaddr,
    timeout: std::time::Duration,
) -> Result<(), c_int> {
    let ops = ops()?;
    let dst = from_sockaddr(dst)?;
    if !src.is_null() && lock().id(p)?.src.is_none() {
        let s = from_sockaddr(src)?;
        bind(p, s)?;
    }
    let ctx = {
        let mut st = lock();
        let s = st.id(p)?;
        let bound = s.src;
        let (dev, ip) = match bound.map(|a| a.ip()).filter(|ip| !ip.is_unspecified()) {
            Some(ip) if ip.is_ipv6() != dst.is_ipv6() => return Err(libc::EINVAL),
            Some(ip) => (device::with_ip(ip).ok_or(libc::EADDRNOTAVAIL)?, ip),
            None => device::toward(dst.ip()).ok_or(libc::EADDRNOTAVAIL)?,
        };
        let port = match bound {
            Some(a) if a.port() != 0 => a.port(),
            _ => ephemeral_port(&ports(&st)),
        };
        set_route(&mut st, p, Some(dev), SocketAddr::new(ip, port), Some(dst));
        dev.ctx
    };
    // Outside the lock: it may wait up to `timeout`.
    let ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
    let gid = gid_bytes(dst.ip());
    // SAFETY: a live context of the verbs library, 16 bytes of GID.
    let r = unsafe { (ops.resolve)(ctx as *mut _, gid.as_ptr(), ms) };
    let (event, status) = match r {
        0 => (abi::RDMA_CM_EVENT_ADDR_RESOLVED, 0),
        libc::EHOSTUNREACH => (abi::RDMA_CM_EVENT_ADDR_ERROR, -libc::ETIMEDOUT),
        e => return Err(e),
    };
    lock().push(
        p as usize,
        EvSpec {
            event,
            status,
            ..Default::default()
        },
    );
    Ok(())
}

/// How long `rdma_resolve_addr` waits for the next hop when the caller gives no time.
const RESOLVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

#[unsafe(no_mangle)]
/// `rdma_resolve_addr(3)`: picks the device and source address and waits up to `timeout_ms`
/// (2 s when not positive) for the next hop's MAC, then queues `ADDR_RESOLVED`, or
/// `ADDR_ERROR` with status `-ETIMEDOUT` when nothing answered (`EADDRNOTAVAIL` when no
/// device has an address of the family).
pub extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src_addr: *mut libc::sockaddr,
    dst_addr: *mut libc::sockaddr,
    timeout_ms: c_int,
) -> c_int {
    call(|| {
        let timeout = u64::try_from(timeout_ms)
            .ok()
            .filter(|&ms| ms > 0)
            .map_or(RESOLVE_TIMEOUT, std::time::Duration::from_millis);
        resolve_addr(id, src_addr, dst_addr, timeout)?;
        ep::complete(id, abi::RDMA_CM_EVENT_ADDR_RESOLVED)
    })
}

#[unsafe(no_mangle)]
/// `rdma_resolve_route(3)`: queues `ROUTE_RESOLVED` for a resolved address (RoCE has no path
/// records to ask for).
pub extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    call(|| {
        let mut st = lock();
        if st.id(id)?.dst.is_none() {
            return Err(libc::EINVAL);
        }
        st.push(
            id as usize,
            EvSpec {
                event: abi::RDMA_CM_EVENT_ROUTE_RESOLVED,
                ..Default::default()
            },
        );
        drop(st);
        ep::complete(id, abi::RDMA_CM_EVENT_ROUTE_RESOLVED)
    })
}

#[unsafe(no_mangle)]
/// `rdma_listen(3)`: on the bound address's device, or every device for the wildcard. The
/// backlog is not limited.
pub extern "C" fn rdma_listen(id: *mut rdma_cm_id, _backlog: c_int) -> c_int {
    call(|| {
        let ops = ops()?;
        if lock().id(id)?.src.is_none() {
            bind(
                id,
                SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0),
            )?;
        }
        let mut st = lock();
        let s = st.id(id)?;
        if s.service.is_some() || s.conn.is_some() {
            return Err(libc::EINVAL);
        }
        let src = s.src.ok_or(libc::EINVAL)?;
        let ctxs: Vec<usize> = match s.ctx {
            0 => device::devices()?.iter().map(|d| d.ctx).collect(),
            c => vec![c],
        };
        let service = ServiceId::rdma_cm(port_space(id), src.port()).0;
        let mut done = Vec::new();
        for ctx in ctxs {
            // SAFETY: a live context of the verbs library.
            let r = unsafe { (ops.listen)(ctx as *mut _, service) };
            if r != 0 {
                for c in done {
                    // SAFETY: as above.
                    unsafe { (ops.unlisten)(c as *mut _, service) };
                }
                return Err(if r == libc::EBUSY {
                    libc::EADDRINUSE
                } else {
                    r
                });
            }
            done.push(ctx);
        }
        let s = st.id(id)?;
        s.service = Some(service);
        s.listen_ctxs = done;
        st.listeners.insert(service, id as usize);
        if verbose() {
            eprintln!("rocev2_rdmacm: listening on {src}");
        }
        Ok(())
    })
}

/// The connection parameters at `param` (NULL: librdmacm's defaults).
fn conn_param(param: *const rdma_conn_param) -> Option<rdma_conn_param> {
    // SAFETY: NULL or the caller's parameters.
    unsafe { param.as_ref() }.copied()
}

/// The private data of `param`, at most `max` bytes.
fn private_data(param: &Option<rdma_conn_param>, max: usize) -> Result<Vec<u8>, c_int> {
    let Some(p) = param else {
        return Ok(Vec::new());
    };
    let n = usize::from(p.private_data_len);
    if n > max {
        return Err(libc::EINVAL);
    }
    if n == 0 || p.private_data.is_null() {
        return Ok(Vec::new());
    }
    // SAFETY: the caller's `private_data_len` bytes at `private_data`.
    Ok(unsafe { std::slice::from_raw_parts(p.private_data.cast::<u8>(), n) }.to_vec())
}

/// The QP a connection of ID `p` announces and whether the CM moves it (`moves_qp`): the ID's
/// own (made by `rdma_create_qp`), or else the program's QP `conn_param.qp_num` of the ID's
/// device, which the program moves itself (UCX's reserved QPN).
fn id_qp(
    ops: &ucma::Ops,
    ctx: usize,
    p: *mut rdma_cm_id,
    param: &Option<rdma_conn_param>,
) -> Result<(*mut c_void, u8), c_int> {
    // SAFETY: a live ID (the caller checked it under the lock): our Box.
    let qp = unsafe { (*p).qp };
    if !qp.is_null() {
        return Ok((qp.cast(), 1));
    }
    let num = param.map_or(0, |p| p.qp_num);
    if num == 0 {
        return Err(libc::EINVAL);
    }
    // SAFETY: a live context of the verbs library.
    let theirs = unsafe { (ops.qp_by_num)(ctx as *mut _, num) };
    if theirs.is_null() {
        return Err(libc::EINVAL);
    }
    Ok((theirs, 0))
}

/// A READ/atomic depth: what the caller asked (librdmacm's 0xFF: the most), within the
/// device's limit.
fn depth(asked: u8, dev_max: u8) -> u8 {
    asked.min(dev_max)
}

#[unsafe(no_mangle)]
/// `rdma_connect(3)`: sends the REQ (CMA header, then up to 56 bytes of private data); the QP
/// moves to RTR and RTS when the REP comes, then `ESTABLISHED`. An RDMA_PS_UDP ID sends a
/// SIDR_REQ instead (up to 180 bytes), answered by `ESTABLISHED` with `param.ud`.
pub extern "C" fn rdma_connect(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int {
    call(|| {
        let ops = ops()?;
        let param = self::conn_param(conn_param);
        let mut st = lock();
        let s = st.id(id)?;
        let (Some(src), Some(dst)) = (s.src, s.dst) else {
            return Err(libc::EINVAL);
        };
        if s.conn.is_some() || s.service.is_some() || s.established {
            return Err(libc::EISCONN);
        }
        let ctx = s.ctx;
        let dev = device::by_ctx(ctx).ok_or(libc::ENODEV)?;
        let addrs = match (src.ip(), dst.ip()) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => CmaAddrs::V4 { src, dst },
            (IpAddr::V6(src), IpAddr::V6(dst)) => CmaAddrs::V6 { src, dst },
            _ => return Err(libc::EINVAL),
        };
        let header = CmaHeader {
            src_port: src.port(),
            addrs,
        };
        let ps = port_space(id);
        let service_id = ServiceId::rdma_cm(ps, dst.port()).0;
        let (local_gid, peer_gid) = (gid_bytes(src.ip()), gid_bytes(dst.ip()));
        let mut conn = 0;
        let r = if ps == PortSpace::UDP {
            let data = header.private_data(&private_data(&param, MAX_UD_CONNECT_DATA)?);
            let mut args = SidrRequestArgs {
                service_id,
                local_gid,
                peer_gid,
                private_data: [0; ucma::SIDR_REQ_PRIVATE_DATA],
                private_data_len: data.len() as u8,
            };
            args.private_data[..data.len()].copy_from_slice(&data);
            // SAFETY: a live context of the verbs library; args and out pointer local.
            unsafe { (ops.sidr_request)(ctx as *mut _, &args, &mut conn) }
        } else {
            let data = header.private_data(&private_data(&param, MAX_CONNECT_DATA)?);
            let (qp, moves_qp) = id_qp(ops, ctx, id, &param)?;
            let psn = crate::random_u32() & 0xff_ffff;
            st.id(id)?.psn = psn;
            let mut args = ConnectArgs {
                moves_qp,
                start_psn: psn,
                service_id,
                local_gid,
                peer_gid,
                private_data: [0; ucma::REQ_PRIVATE_DATA],
                private_data_len: data.len() as u8,
                responder_resources: depth(
                    param.map_or(u8::MAX, |p| p.responder_resources),
                    dev.max_rd_atomic,
                ),
                initiator_depth: depth(
                    param.map_or(u8::MAX, |p| p.initiator_depth),
                    dev.max_rd_atomic,
                ),
                retry_count: param.map_or(7, |p| p.retry_count),
                rnr_retry_count: param.map_or(7, |p| p.rnr_retry_count),
            };
            args.private_data[..data.len()].copy_from_slice(&data);
            // SAFETY: a live QP of the verbs library (checked there), args and out pointer
            // local.
            unsafe { (ops.connect)(qp, &args, &mut conn) }
        };
        if r != 0 {
            return Err(r);
        }
        st.id(id)?.conn = Some(conn);
        st.conns.insert((ctx, conn), id as usize);
        drop(st);
        ep::complete(id, abi::RDMA_CM_EVENT_ESTABLISHED)
    })
}

/// Answers SIDR request `conn` of context `ctx`; the outcome is the peer's to see.
fn sidr_reply(
    ops: &ucma::Ops,
    ctx: usize,
    conn: u32,
    status: SidrStatus,
    qpn: u32,
    data: &[u8],
) -> c_int {
    let mut args = SidrReplyArgs {
        status: status.0.into(),
        qpn,
        q_key: RDMA_UDP_Q_KEY,
        private_data: [0; ucma::SIDR_REP_PRIVATE_DATA],
        private_data_len: 0,
    };
    let n = data.len().min(ucma::SIDR_REP_PRIVATE_DATA);
    args.private_data[..n].copy_from_slice(&data[..n]);
    args.private_data_len = n as u8;
    // SAFETY: a live context of the verbs library; args local.
    unsafe { (ops.sidr_reply)(ctx as *mut _, conn, &args) }
}

/// Answers the SIDR request of RDMA_PS_UDP ID `id` (whose table entry `st` holds, locked):
/// with the ID's QP (or `qp_num`) on success. The request is then done with.
fn answer_ud(
    ops: &ucma::Ops,
    st: &mut State,
    id: *mut rdma_cm_id,
    status: SidrStatus,
    param: &Option<rdma_conn_param>,
) -> Result<(), c_int> {
    let data = private_data(param, MAX_UD_ACCEPT_DATA)?;
    let s = st.id(id)?;
    let (Some(conn), Some(_)) = (s.conn, s.request) else {
        return Err(libc::EINVAL);
    };
    let ctx = s.ctx;
    // SAFETY: a live ID: our Box; its QP, when it has one, is the verbs library's.
    let qpn = match unsafe { (*id).qp.as_ref() } {
        Some(qp) => qp.qp_num,
        None => param.map_or(0, |p| p.qp_num),
    };
    if status == SidrStatus::SUCCESS && qpn == 0 {
        return Err(libc::EINVAL);
    }
    match sidr_reply(ops, ctx, conn, status, qpn, &data) {
        0 => {}
        e => return Err(e),
    }
    s.conn = None;
    if status == SidrStatus::SUCCESS {
        s.established = true;
    } else {
        s.disconnected = true;
    }
    st.conns.remove(&(ctx, conn));
    Ok(())
}

#[unsafe(no_mangle)]
/// `rdma_accept(3)`: answers the request with a REP (up to 196 bytes of private data); the QP
/// moves to RTR now and to RTS with the RTU, then `ESTABLISHED`. An RDMA_PS_UDP ID answers
/// with a SIDR_REP (up to 136 bytes) naming its QP, or `qp_num` without one; no event follows.
pub extern "C" fn rdma_accept(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int {
    call(|| {
        let ops = ops()?;
        let param = self::conn_param(conn_param);
        let mut st = lock();
        st.id(id)?;
        if port_space(id) == PortSpace::UDP {
            return answer_ud(ops, &mut st, id, SidrStatus::SUCCESS, &param);
        }
        let data = private_data(&param, MAX_ACCEPT_DATA)?;
        let s = st.id(id)?;
        let (Some(conn), Some(req)) = (s.conn, s.request) else {
            return Err(libc::EINVAL);
        };
        if s.established {
            return Err(libc::EISCONN);
        }
        let dev = device::by_ctx(s.ctx).ok_or(libc::ENODEV)?;
        let (qp, moves_qp) = id_qp(ops, s.ctx, id, &param)?;
        let mut args = AcceptArgs {
            moves_qp,
            start_psn: s.psn,
            private_data: [0; ucma::REP_PRIVATE_DATA],
            private_data_len: data.len() as u8,
            responder_resources: depth(
                param.map_or(req.responder_resources, |p| p.responder_resources),
                dev.max_rd_atomic,
            ),
            initiator_depth: depth(
                param.map_or(req.initiator_depth, |p| p.initiator_depth),
                dev.max_rd_atomic,
            ),
            rnr_retry_count: param.map_or(req.rnr_retry_count, |p| p.rnr_retry_count),
        };
        args.private_data[..data.len()].copy_from_slice(&data);
        // SAFETY: a live QP of the verbs library (checked there), args local.
        let r = unsafe { (ops.accept)(qp, conn, &args) };
        if r != 0 {
            return Err(r);
        }
        drop(st);
        ep::complete(id, abi::RDMA_CM_EVENT_ESTABLISHED)
    })
}

#[unsafe(no_mangle)]
/// `rdma_reject(3)`: a REJ (reason: consumer) with up to 148 bytes of private data; for an
/// RDMA_PS_UDP ID, a SIDR_REP "rejected" with up to 136.
pub extern "C" fn rdma_reject(id: *mut rdma_cm_id, private_data: *const c_void, len: u8) -> c_int {
    call(|| {
        let ops = ops()?;
        let mut st = lock();
        st.id(id)?;
        if port_space(id) == PortSpace::UDP {
            let param = Some(rdma_conn_param {
                private_data,
                private_data_len: len,
                // SAFETY: an all-zero rdma_conn_param is a valid value (no pointers used).
                ..unsafe { std::mem::zeroed() }
            });
            return answer_ud(ops, &mut st, id, SidrStatus::REJECT, &param);
        }
        if usize::from(len) > MAX_REJECT_DATA {
            return Err(libc::EINVAL);
        }
        let s = st.id(id)?;
        let (Some(conn), Some(_)) = (s.conn, s.request) else {
            return Err(libc::EINVAL);
        };
        if s.established || s.disconnected {
            return Err(libc::EINVAL);
        }
        let ctx = s.ctx;
        s.disconnected = true;
        let data = if private_data.is_null() {
            std::ptr::null()
        } else {
            private_data.cast::<u8>()
        };
        let n = if data.is_null() { 0 } else { usize::from(len) };
        // SAFETY: a live context; the caller's `len` bytes.
        match unsafe { (ops.reject)(ctx as *mut _, conn, data, n) } {
            0 => Ok(()),
            e => Err(e),
        }
    })
}

#[unsafe(no_mangle)]
/// `rdma_disconnect(3)`: the QP moves to ERROR (outstanding work completes flushed) and a DREQ
/// leaves; `DISCONNECTED` follows. After the peer disconnected first, only moves the QP.
pub extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    call(|| {
        let ops = ops()?;
        let mut st = lock();
        let s = st.id(id)?;
        let Some(conn) = s.conn else {
            return Err(libc::ENOTCONN);
        };
        let ctx = s.ctx;
        if s.disconnected {
            // SAFETY: a live ID: our Box.
            let qp = unsafe { (*id).qp };
            if !qp.is_null() {
                crate::qp::to_error(qp);
            }
            return Ok(());
        }
        s.disconnected = true;
        let sync = s.sync;
        // SAFETY: a live context; no private data.
        let r = unsafe { (ops.disconnect)(ctx as *mut _, conn, std::ptr::null(), 0) };
        drop(st);
        if r != 0 {
            return Err(r);
        }
        if sync {
            ep::complete(id, abi::RDMA_CM_EVENT_DISCONNECTED)?;
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
/// `rdma_establish(3)`: the device's CM sends the RTU itself when the REP comes, so this only
/// checks that the connection is up (`EINVAL` otherwise).
pub extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
    call(|| {
        if lock().id(id)?.established {
            Ok(())
        } else {
            Err(libc::EINVAL)
        }
    })
}

/// The port of an ID's address, network order (0 for a NULL or unknown ID, as librdmacm).
fn port(id: *mut rdma_cm_id, f: fn(&IdState) -> Option<SocketAddr>) -> u16 {
    crate::call_or(0, || {
        Ok(lock()
            .id(id)
            .ok()
            .and_then(|s| f(s))
            .map_or(0, |a| a.port().to_be()))
    })
}

#[unsafe(no_mangle)]
/// `rdma_get_src_port(3)`.
pub extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    port(id, |s| s.src)
}

#[unsafe(no_mangle)]
/// `rdma_get_dst_port(3)`.
pub extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    port(id, |s| s.dst)
}

#[unsafe(no_mangle)]
/// `rdma_migrate_id(3)`: the ID's later events go to `channel` (NULL: a synchronous ID).
pub extern "C" fn rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> c_int {
    call(|| {
        let new = if channel.is_null() {
            crate::channel::new_channel()?
        } else {
            channel
        };
        let mut st = lock();
        if !st.channels.contains_key(&(new as usize)) || !st.ids.contains_key(&(id as usize)) {
            drop(st);
            if channel.is_null() {
                crate::channel::free_channel(new)?;
            }
            return Err(libc::EINVAL);
        }
        let s = st.id(id)?;
        let old = (s.sync, s.channel);
        s.channel = new as usize;
        s.sync = channel.is_null();
        // SAFETY: a live ID: our Box.
        unsafe { (*id).channel = new };
        drop(st);
        if old.0 {
            crate::channel::free_channel(old.1 as *mut _)?;
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
/// `rdma_set_option(3)`: the RDMA_OPTION_ID options (TOS, REUSEADDR, AFONLY, ACK_TIMEOUT) are
/// accepted and have no effect (the device picks its DSCP and timeouts); RDMA_OPTION_IB_PATH
/// fails with `EOPNOTSUPP` (RoCE has no path records here).
pub extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    _optlen: usize,
) -> c_int {
    call(|| {
        lock().id(id)?;
        if optval.is_null() {
            return Err(libc::EINVAL);
        }
        match (level, optname) {
            (
                abi::RDMA_OPTION_ID,
                abi::RDMA_OPTION_ID_TOS
                | abi::RDMA_OPTION_ID_REUSEADDR
                | abi::RDMA_OPTION_ID_AFONLY
                | abi::RDMA_OPTION_ID_ACK_TIMEOUT,
            ) => Ok(()),
            (abi::RDMA_OPTION_IB, abi::RDMA_OPTION_IB_PATH) => {
                Err(unsupported("rdma_set_option(RDMA_OPTION_IB_PATH)"))
            }
            _ => Err(libc::ENOSYS),
        }
    })
}

#[unsafe(no_mangle)]
/// `rdma_join_multicast(3)`: not supported (`EOPNOTSUPP`).
pub extern "C" fn rdma_join_multicast(
    _id: *mut rdma_cm_id,
    _addr: *mut libc::sockaddr,
    _context: *mut c_void,
) -> c_int {
    call(|| Err(unsupported("rdma_join_multicast (multicast)")))
}

#[unsafe(no_mangle)]
/// `rdma_leave_multicast(3)`: not supported (`EOPNOTSUPP`).
pub extern "C" fn rdma_leave_multicast(_id: *mut rdma_cm_id, _addr: *mut libc::sockaddr) -> c_int {
    call(|| Err(unsupported("rdma_leave_multicast (multicast)")))
}

#[unsafe(no_mangle)]
/// `rdma_get_devices(3)`: the contexts of the devices (opened once, never closed), NULL-ended.
pub extern "C" fn rdma_get_devices(
    num_devices: *mut c_int,
) -> *mut *mut rocev2_verbs_abi::verbs::ibv_context {
    crate::call_or(std::ptr::null_mut(), || {
        let devs = device::devices()?;
        let mut v: Vec<*mut rocev2_verbs_abi::verbs::ibv_context> =
            devs.iter().map(Dev::verbs).collect();
        if !num_devices.is_null() {
            // SAFETY: non-NULL, the caller's out pointer.
            unsafe { *num_devices = v.len() as c_int };
        }
        v.push(std::ptr::null_mut());
        let b = v.into_boxed_slice();
        let list = Box::into_raw(b).cast::<*mut rocev2_verbs_abi::verbs::ibv_context>();
        DEVICE_LISTS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((list as usize, devs.len() + 1));
        Ok(list)
    })
}

/// The lists `rdma_get_devices` handed out, with their lengths.
static DEVICE_LISTS: std::sync::Mutex<Vec<(usize, usize)>> = std::sync::Mutex::new(Vec::new());

#[unsafe(no_mangle)]
/// `rdma_free_devices(3)`: frees a list of `rdma_get_devices`; ignores anything else.
pub extern "C" fn rdma_free_devices(list: *mut *mut rocev2_verbs_abi::verbs::ibv_context) {
    crate::call_or((), || {
        let mut lists = DEVICE_LISTS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = lists.iter().position(|(p, _)| *p == list as usize) {
            let (_, n) = lists.swap_remove(i);
            // SAFETY: made from a boxed slice of `n` pointers in rdma_get_devices.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(list, n)) });
        }
        Ok(())
    })
}

/// Hands the device's CM event `e` of context `ctx` to the ID it concerns.
pub fn dispatch(ctx: usize, e: &ucma::Event) {
    let ops = match ops() {
        Ok(o) => o,
        Err(_) => return,
    };
    let mut st = lock();
    let data = &e.private_data[..(e.private_data_len as usize).min(ucma::MAX_PRIVATE_DATA)];
    match e.kind {
        ucma::EV_CONNECT_REQUEST if !request(&mut st, ctx, e, data) => {
            // SAFETY: a live context; no private data.
            unsafe { (ops.reject)(ctx as *mut _, e.conn, std::ptr::null(), 0) };
            return;
        }
        ucma::EV_SIDR_REQUEST if !request(&mut st, ctx, e, data) => {
            sidr_reply(ops, ctx, e.conn, SidrStatus::UNSUPPORTED, 0, &[]);
            return;
        }
        ucma::EV_CONNECT_REQUEST | ucma::EV_SIDR_REQUEST => return,
        _ => {}
    }
    let Some(&id) = st.conns.get(&(ctx, e.conn)) else {
        return;
    };
    let Some(s) = st.ids.get_mut(&id) else { return };
    let mut ud = None;
    let (event, status) = match e.kind {
        ucma::EV_ESTABLISHED => {
            s.established = true;
            s.attrs = Some(ConnAttrs {
                dest_qpn: e.peer_qpn,
                path_mtu: e.path_mtu,
                sq_psn: e.sq_psn,
                rq_psn: e.rq_psn,
                timeout: e.local_ack_timeout,
                retry_count: e.retry_count,
                rnr_retry_count: e.rnr_retry_count,
                max_rd_atomic: e.initiator_depth,
                max_dest_rd_atomic: e.responder_resources,
            });
            // SAFETY: a live ID (in the table, under the lock): our Box.
            let own_qp = unsafe { !(*(id as *const rdma_cm_id)).qp.is_null() };
            // As librdmacm: the active side of a program that moves its QP itself learns of
            // the REP first, moves the QP, then calls `rdma_establish` (the device's CM has
            // already sent the RTU).
            if s.request.is_none() && !own_qp {
                (abi::RDMA_CM_EVENT_CONNECT_RESPONSE, 0)
            } else {
                (abi::RDMA_CM_EVENT_ESTABLISHED, 0)
            }
        }
        ucma::EV_REJECTED => (abi::RDMA_CM_EVENT_REJECTED, e.status as c_int),
        ucma::EV_TIMED_OUT | ucma::EV_SIDR_TIMED_OUT => {
            (abi::RDMA_CM_EVENT_UNREACHABLE, -libc::ETIMEDOUT)
        }
        ucma::EV_DISCONNECTED => {
            s.disconnected = true;
            (abi::RDMA_CM_EVENT_DISCONNECTED, 0)
        }
        ucma::EV_TIMEWAIT_EXIT => (abi::RDMA_CM_EVENT_TIMEWAIT_EXIT, 0),
        // As the kernel's rdma_cm: a failed resolution is UNREACHABLE with the SIDR status, a
        // Q_Key other than rdma_cm's an address error.
        ucma::EV_SIDR_REPLY if e.status != u32::from(SidrStatus::SUCCESS.0) => {
            (abi::RDMA_CM_EVENT_UNREACHABLE, e.status as c_int)
        }
        ucma::EV_SIDR_REPLY if e.q_key != RDMA_UDP_Q_KEY => {
            (abi::RDMA_CM_EVENT_ADDR_ERROR, -libc::EINVAL)
        }
        ucma::EV_SIDR_REPLY => {
            let (Some(src), Some(dst), Some(dev)) = (s.src, s.dst, device::by_ctx(ctx)) else {
                return;
            };
            s.established = true;
            ud = Some(UdParam {
                ah_attr: dev.ah_to(src.ip(), gid_bytes(dst.ip())),
                qp_num: e.peer_qpn,
                qkey: e.q_key,
            });
            (abi::RDMA_CM_EVENT_ESTABLISHED, 0)
        }
        _ => return,
    };
    // A resolution ends with its answer: the ID keeps no connection.
    if matches!(e.kind, ucma::EV_SIDR_REPLY | ucma::EV_SIDR_TIMED_OUT) {
        s.conn = None;
    }
    if matches!(
        e.kind,
        ucma::EV_REJECTED
            | ucma::EV_TIMED_OUT
            | ucma::EV_TIMEWAIT_EXIT
            | ucma::EV_SIDR_REPLY
            | ucma::EV_SIDR_TIMED_OUT
    ) {
        st.conns.remove(&(ctx, e.conn));
    }
    st.push(
        id,
        EvSpec {
            event,
            status,
            data: data.to_vec(),
            ud,
            ..Default::default()
        },
    );
}

/// A connection request, or a SIDR request: a new ID on the listener's channel; false when
/// nobody listens in its port space or it has no CMA header (then it is refused).
fn request(st: &mut State, ctx: usize, e: &ucma::Event, data: &[u8]) -> bool {
    let Some(&listener) = st.listeners.get(&e.service_id) else {
        return false;
    };
    let sidr = e.kind == ucma::EV_SIDR_REQUEST;
    if sidr != (port_space(listener as *const rdma_cm_id) == PortSpace::UDP) {
        return false;
    }
    let Ok(h) = CmaHeader::parse(data) else {
        return false;
    };
    let Some(l) = st.ids.get(&listener) else {
        return false;
    };
    let (sync, listen_port) = (l.sync, l.src.map_or(0, |a| a.port()));
    // A synchronous listener's requests are taken by rdma_get_request; the new ID is
    // synchronous too, with a channel of its own.
    let channel = if sync {
        // SAFETY: plain syscall.
        let fd = unsafe { libc::eventfd(0, libc::EFD_SEMAPHORE | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return false;
        }
        let ch = Box::into_raw(Box::new(rdma_event_channel { fd }));
        st.channels.insert(
            ch as usize,
            crate::state::Chan {
                fd,
                queue: Default::default(),
            },
        );
        ch
    } else {
        l.channel as *mut rdma_event_channel
    };
    // SAFETY: the listener is live (in the table, under the lock): our Box.
    let lid = unsafe { &*(listener as *const rdma_cm_id) };
    // SAFETY: an all-zero rdma_cm_id is a valid value.
    let mut id: Box<rdma_cm_id> = Box::new(unsafe { std::mem::zeroed() });
    id.channel = channel;
    id.context = lid.context;
    id.ps = lid.ps;
    id.qp_type = lid.qp_type;
    let p = Box::into_raw(id);
    let serial = st.serial();
    st.ids.insert(
        p as usize,
        IdState {
            serial,
            channel: channel as usize,
            sync,
            conn: Some(e.conn),
            request: Some(Request {
                // Seen from this side: the peer's initiator depth is our responder resources.
                responder_resources: e.initiator_depth,
                initiator_depth: e.responder_resources,
                rnr_retry_count: e.rnr_retry_count,
            }),
            ..Default::default()
        },
    );
    st.conns.insert((ctx, e.conn), p as usize);
    let dev = device::by_ctx(ctx);
    set_route(
        st,
        p,
        dev,
        SocketAddr::new(h.dst_ip(), listen_port),
        Some(SocketAddr::new(h.src_ip(), h.src_port)),
    );
    // What the QP runs with if the program moves it itself (`rdma_init_qp_attr` before
    // `rdma_accept`, as `rping -q` does): the REQ's terms, this side's receive PSN chosen now.
    if let (false, Some(d), Some(s)) = (sidr, dev, st.ids.get_mut(&(p as usize))) {
        s.psn = crate::random_u32() & 0xff_ffff;
        s.attrs = Some(ConnAttrs {
            dest_qpn: e.peer_qpn,
            path_mtu: e.path_mtu,
            sq_psn: e.sq_psn,
            rq_psn: s.psn,
            timeout: e.local_ack_timeout,
            retry_count: e.retry_count,
            rnr_retry_count: e.rnr_retry_count,
            max_rd_atomic: depth(e.responder_resources, d.max_rd_atomic),
            max_dest_rd_atomic: depth(e.initiator_depth, d.max_rd_atomic),
        });
    }
    // A SIDR request's `param.ud` carries the address vector back to the requester.
    let ud = dev.filter(|_| sidr).map(|d| UdParam {
        ah_attr: d.ah_to(h.dst_ip(), e.peer_gid),
        qp_num: 0,
        qkey: 0,
    });
    st.push(
        p as usize,
        EvSpec {
            listen: listener,
            event: abi::RDMA_CM_EVENT_CONNECT_REQUEST,
            data: data[CmaHeader::LEN..].to_vec(),
            responder_resources: e.initiator_depth,
            initiator_depth: e.responder_resources,
            rnr_retry_count: e.rnr_retry_count,
            qp_num: e.peer_qpn,
            ud,
            ..Default::default()
        },
    );
    true
}
