//! Queue pairs: `ibv_create_qp`, `ibv_modify_qp`, `ibv_query_qp`, `ibv_destroy_qp`, and the
//! `post_send`/`post_recv` entries of the context's ops table.
//!
//! `ibv_modify_qp` maps the attribute mask onto the engine's `QpAttr`. The address vector
//! must carry a GRH (`is_global`), as on any RoCE device: its destination GID is the peer's IP
//! address (`::ffff:a.b.c.d` for IPv4), the next hop's MAC comes from the neighbour table
//! (resolved if missing), and the source is the interface's first global address of the same
//! family. The path MTU is lowered to what the interface carries.
//!
//! UD QPs (`IBV_QPT_UD`) send through address handles (`ibv_create_ah`, resolved the same
//! way) and receive with the 40-byte GRH area first in the buffer (`IBV_WC_GRH`), as on RoCE.
//!
//! Deviations: RC and UD only; other types fail with `EOPNOTSUPP`, as do SRQs, multicast and
//! the extended QP (`ibv_qp_to_qp_ex` returns NULL; perftest then uses `ibv_post_send`). `ibv_query_qp` reports state, caps, access flags and PSN-free
//! attributes only. `ibv_destroy_qp` first lets the engine send what it still owes the peer
//! (at most [`DRAIN_LIMIT`]), since a process usually exits right after.

use crate::abi::{
    self, ibv_ah, ibv_ah_attr, ibv_pd, ibv_qp, ibv_qp_attr, ibv_qp_init_attr, ibv_recv_wr,
    ibv_send_wr,
};
use crate::context::{MAX_INLINE, MAX_QP_WR, MAX_SGE};
use crate::cq::cq;
use crate::engine::{Engine, State};
use crate::handle::{self, Kind, guard, set_errno};
use crate::mr::pd;
use core::ffi::{c_int, c_void};
use rocev2_core::mr::{AccessFlags, Lkey, Rkey};
use rocev2_core::qp::state::MAX_RD_ATOMIC;
use rocev2_core::qp::{
    AddressHandle, Mtu, Path, QpAttr, QpConfig, QpState, RecvWr, SendOp, SendWr, Sge, UdDest,
};
use rocev2_core::wire::Qpn;
use rocev2_core::wire::gid::gid_to_ip;
use rocev2_datapath::host::{self, NextHop, PathError};
use rocev2_datapath::neigh;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

/// How long `ibv_destroy_qp` drives the engine so its last ACKs and responses leave.
pub const DRAIN_LIMIT: Duration = Duration::from_millis(500);

/// How long `ibv_modify_qp` to RTR waits for the peer's MAC.
const RESOLVE_WAIT: Duration = Duration::from_secs(3);

/// A queue pair: `ibv_qp` first, so its pointer is the handle.
#[repr(C)]
pub struct Qp {
    /// What the caller sees.
    pub ibv: ibv_qp,
    qpn: Qpn,
    qp_type: c_int,
    cap: abi::ibv_qp_cap,
    sq_sig_all: bool,
    access: u32,
    engine: Arc<Engine>,
}

fn qp<'a>(p: *const ibv_qp) -> Option<&'a Qp> {
    // SAFETY: a registered Qp stays valid until ibv_destroy_qp unregisters it.
    handle::check(p, Kind::Qp).then(|| unsafe { &*p.cast::<Qp>() })
}

fn null_with(errno: i32) -> *mut ibv_qp {
    set_errno(errno);
    std::ptr::null_mut()
}

#[unsafe(no_mangle)]
/// `ibv_create_qp(3)`: an RC QP in RESET.
pub extern "C" fn ibv_create_qp(p: *mut ibv_pd, init: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    guard(std::ptr::null_mut(), || {
        let (Some(d), false) = (pd(p), init.is_null()) else {
            return null_with(libc::EINVAL);
        };
        // SAFETY: the caller passes a readable and writable init attr (checked not NULL).
        let init = unsafe { &mut *init };
        if init.qp_type != abi::IBV_QPT_RC && init.qp_type != abi::IBV_QPT_UD {
            return null_with(libc::EOPNOTSUPP);
        }
        if !init.srq.is_null() {
            return null_with(libc::EOPNOTSUPP);
        }
        let (Some(scq), Some(rcq)) = (cq(init.send_cq), cq(init.recv_cq)) else {
            return null_with(libc::EINVAL);
        };
        let mut cap = init.cap;
        if cap.max_send_wr > MAX_QP_WR
            || cap.max_recv_wr > MAX_QP_WR
            || cap.max_send_sge > MAX_SGE
            || cap.max_recv_sge > MAX_SGE
            || cap.max_inline_data > MAX_INLINE
        {
            return null_with(libc::EINVAL);
        }
        cap.max_send_wr = cap.max_send_wr.max(1);
        cap.max_recv_wr = cap.max_recv_wr.max(1);
        cap.max_send_sge = cap.max_send_sge.max(1);
        cap.max_recv_sge = cap.max_recv_sge.max(1);
        let cfg = QpConfig {
            max_send_wr: cap.max_send_wr,
            max_recv_wr: cap.max_recv_wr,
            max_send_sge: cap.max_send_sge,
            max_recv_sge: cap.max_recv_sge,
            max_inline_data: cap.max_inline_data,
            ..QpConfig::new(d.id, scq.id, rcq.id)
        };
        let created = {
            let mut st = d.engine.lock();
            if init.qp_type == abi::IBV_QPT_UD {
                // A UD message is at most the port's MTU (verbs UD QPs have no path MTU).
                match st.iface.path_mtu(false) {
                    Some(mtu) => st.driver.ep.create_ud_qp(cfg, mtu),
                    None => return null_with(libc::EINVAL),
                }
            } else {
                st.driver.ep.create_qp(cfg)
            }
        };
        let Ok(qpn) = created else {
            return null_with(libc::EINVAL);
        };
        init.cap = cap;
        let q = Box::into_raw(Box::new(Qp {
            ibv: ibv_qp {
                context: d.ibv.context,
                qp_context: init.qp_context,
                pd: p,
                send_cq: init.send_cq,
                recv_cq: init.recv_cq,
                srq: std::ptr::null_mut(),
                handle: qpn.value(),
                qp_num: qpn.value(),
                state: 0,
                qp_type: init.qp_type,
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                cond: libc::PTHREAD_COND_INITIALIZER,
                events_completed: 0,
            },
            qpn,
            qp_type: init.qp_type,
            cap,
            sq_sig_all: init.sq_sig_all != 0,
            access: 0,
            engine: Arc::clone(&d.engine),
        }))
        .cast::<ibv_qp>();
        handle::register(q, Kind::Qp);
        q
    })
}

#[unsafe(no_mangle)]
/// `ibv_destroy_qp(3)`.
pub extern "C" fn ibv_destroy_qp(p: *mut ibv_qp) -> c_int {
    guard(libc::EIO, || {
        let Some(q) = qp(p) else {
            return libc::EINVAL;
        };
        {
            let mut st = q.engine.lock();
            st.drain(DRAIN_LIMIT);
            if st.driver.ep.destroy_qp(q.qpn).is_err() {
                return libc::EINVAL;
            }
        }
        handle::unregister(p, Kind::Qp);
        // SAFETY: was registered, made by Box::into_raw, now unregistered.
        drop(unsafe { Box::from_raw(p.cast::<Qp>()) });
        0
    })
}

/// The engine's MTU for `enum ibv_mtu` `m`.
fn mtu(m: c_int) -> Option<Mtu> {
    Mtu::from_bytes(128u32 << u32::try_from(m).ok().filter(|m| (1..=5).contains(m))?)
}

/// The destination `ah` names (it must carry a GRH: RoCE has no LIDs), its next hop resolved
/// as for an RC QP, and its DSCP.
fn destination(ah: &ibv_ah_attr) -> Result<(IpAddr, NextHop, u8), c_int> {
    if ah.is_global == 0 {
        return Err(libc::EINVAL);
    }
    let ip = gid_to_ip(Ipv6Addr::from(ah.grh.dgid.raw));
    Ok((
        ip,
        NextHop::Resolve(RESOLVE_WAIT),
        ah.grh.traffic_class >> 2,
    ))
}

/// The `errno` for a path that could not be built.
fn path_errno(e: &PathError) -> c_int {
    match e {
        PathError::NoAddress { .. } => libc::EADDRNOTAVAIL,
        PathError::Neighbour { ip, source } => {
            eprintln!("rocev2_ibverbs: no MAC address for {ip}: {source}");
            libc::EHOSTUNREACH
        }
        PathError::Invalid(_) | PathError::MtuTooSmall(_) | PathError::NotAnMtu(_) => libc::EINVAL,
    }
}

/// The path to the port `ah` names for QP `qpn`.
fn path_for(st: &State, qpn: Qpn, ah: &ibv_ah_attr) -> Result<Path, c_int> {
    let (ip, hop, dscp) = destination(ah)?;
    host::path(&st.iface, qpn, ip, hop, dscp).map_err(|e| path_errno(&e))
}

/// The state of QP `qpn`, RC or UD.
fn state_of(st: &State, qpn: Qpn) -> Option<QpState> {
    let ep = &st.driver.ep;
    ep.qp(qpn)
        .map(|q| q.state())
        .or_else(|| ep.ud_qp(qpn).map(|q| q.state()))
}

/// The QpAttr `attr` and `mask` ask for; an `errno` when they cannot be met.
fn qp_attr(st: &State, qpn: Qpn, attr: &ibv_qp_attr, mask: c_int) -> Result<QpAttr, c_int> {
    let has = |bit: c_int| mask & bit != 0;
    let mut a = QpAttr::default();
    if has(abi::IBV_QP_PKEY_INDEX) {
        if attr.pkey_index != 0 {
            return Err(libc::EINVAL);
        }
        a.p_key = Some(0xffff);
    }
    if has(abi::IBV_QP_ACCESS_FLAGS) {
        a.access = Some(AccessFlags::from_bits_retain(attr.qp_access_flags));
    }
    let mut v6 = false;
    if has(abi::IBV_QP_QKEY) {
        a.q_key = Some(attr.qkey);
    }
    if has(abi::IBV_QP_AV) {
        let path = path_for(st, qpn, &attr.ah_attr)?;
        v6 = path.dst_ip.is_ipv6();
        a.path = Some(path);
    }
    if has(abi::IBV_QP_PATH_MTU) {
        let asked = mtu(attr.path_mtu).ok_or(libc::EINVAL)?;
        let max = st.iface.path_mtu(v6).ok_or(libc::EINVAL)?;
        a.path_mtu = Some(asked.min(max));
    }
    if has(abi::IBV_QP_DEST_QPN) {
        a.dest_qpn = Some(Qpn::new(attr.dest_qp_num & 0xff_ffff));
    }
    if has(abi::IBV_QP_RQ_PSN) {
        a.rq_psn = Some(attr.rq_psn & 0xff_ffff);
    }
    if has(abi::IBV_QP_SQ_PSN) {
        a.sq_psn = Some(attr.sq_psn & 0xff_ffff);
    }
    // Both are clamped to the device's limit rather than refused: perftest passes the peer's
    // outstanding-read count (128 from rdma_rxe) as its own initiator depth.
    if has(abi::IBV_QP_MAX_DEST_RD_ATOMIC) {
        a.max_dest_rd_atomic = Some(attr.max_dest_rd_atomic.min(MAX_RD_ATOMIC));
    }
    if has(abi::IBV_QP_MAX_QP_RD_ATOMIC) {
        a.max_rd_atomic = Some(attr.max_rd_atomic.min(MAX_RD_ATOMIC));
    }
    if has(abi::IBV_QP_MIN_RNR_TIMER) {
        a.min_rnr_timer = Some(attr.min_rnr_timer);
    }
    if has(abi::IBV_QP_TIMEOUT) {
        a.timeout = Some(attr.timeout);
    }
    if has(abi::IBV_QP_RETRY_CNT) {
        a.retry_cnt = Some(attr.retry_cnt);
    }
    if has(abi::IBV_QP_RNR_RETRY) {
        a.rnr_retry = Some(attr.rnr_retry);
    }
    Ok(a)
}

#[unsafe(no_mangle)]
/// `ibv_modify_qp(3)`.
pub extern "C" fn ibv_modify_qp(p: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
    guard(libc::EIO, || {
        let (Some(q), false) = (qp(p), attr.is_null()) else {
            return libc::EINVAL;
        };
        // SAFETY: the caller passes a readable attr (checked not NULL).
        let attr = unsafe { &*attr };
        let mut st = q.engine.lock();
        let to = if mask & abi::IBV_QP_STATE != 0 {
            match u8::try_from(attr.qp_state).ok().and_then(QpState::from_ibv) {
                Some(s) => s,
                None => return libc::EINVAL,
            }
        } else {
            match state_of(&st, q.qpn) {
                Some(x) => x,
                None => return libc::EINVAL,
            }
        };
        let a = match qp_attr(&st, q.qpn, attr, mask) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let now = st.driver.now();
        let State { driver, .. } = &mut *st;
        let rocev2_datapath::Driver { ep, mem, .. } = driver;
        if let Err(e) = ep.modify_qp(q.qpn, to, &a, now, mem) {
            eprintln!(
                "rocev2_ibverbs: modify QP {:#x} to {to:?}: {e}",
                q.qpn.value()
            );
            return libc::EINVAL;
        }
        if let Some(path) = &a.path {
            neigh::announce(st.driver.datapath_mut(), path);
        }
        st.progress();
        drop(st);
        // SAFETY: a live QP (checked); `state` and `access` are ours to keep, as libibverbs
        // updates `qp->state` in ibv_modify_qp.
        unsafe {
            let me = p.cast::<Qp>();
            (*me).ibv.state = c_int::from(to.as_ibv());
            if let Some(acc) = a.access {
                (*me).access = acc.bits();
            }
        }
        0
    })
}

#[unsafe(no_mangle)]
/// `ibv_query_qp(3)`: state, capabilities and access flags.
pub extern "C" fn ibv_query_qp(
    p: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    guard(libc::EIO, || {
        let Some(q) = qp(p) else {
            return libc::EINVAL;
        };
        if attr.is_null() || init.is_null() {
            return libc::EINVAL;
        }
        let state = state_of(&q.engine.lock(), q.qpn).map_or(0, |x| c_int::from(x.as_ibv()));
        // SAFETY: the caller passes writable structs (checked not NULL); all-zero bytes are a
        // valid value of both (integers and NULL pointers).
        unsafe {
            std::ptr::write_bytes(attr, 0, 1);
            std::ptr::write_bytes(init, 0, 1);
            let a = &mut *attr;
            a.qp_state = state;
            a.cur_qp_state = state;
            a.cap = q.cap;
            a.qp_access_flags = q.access;
            a.port_num = 1;
            let i = &mut *init;
            i.qp_context = q.ibv.qp_context;
            i.send_cq = q.ibv.send_cq;
            i.recv_cq = q.ibv.recv_cq;
            i.cap = q.cap;
            i.qp_type = q.qp_type;
            i.sq_sig_all = c_int::from(q.sq_sig_all);
        }
        0
    })
}

/// The scatter/gather list of a work request; `None` for a bad count or NULL list.
///
/// # Safety
/// `sg` must point to `n` readable `ibv_sge` when `n > 0`.
unsafe fn sges(sg: *const abi::ibv_sge, n: c_int, max: u32) -> Option<Vec<Sge>> {
    let n = u32::try_from(n).ok().filter(|n| *n <= max)? as usize;
    if n == 0 {
        return Some(Vec::new());
    }
    if sg.is_null() {
        return None;
    }
    // SAFETY: the caller's contract: `n` readable entries.
    let list = unsafe { std::slice::from_raw_parts(sg, n) };
    Some(
        list.iter()
            .map(|s| Sge {
                addr: s.addr,
                length: s.length,
                lkey: Lkey::new(s.lkey),
            })
            .collect(),
    )
}

/// The engine's request for `wr` on `q`; an `errno` for one it cannot express.
///
/// # Safety
/// `wr`'s `sg_list` must hold `num_sge` readable entries, and with `IBV_SEND_INLINE` each
/// must name readable memory of this process.
unsafe fn send_wr(q: &Qp, wr: &ibv_send_wr) -> Result<SendWr, c_int> {
    let rdma = || {
        // SAFETY: the opcode says the `rdma` arm is the one the caller filled.
        let r = unsafe { wr.wr.rdma };
        (r.remote_addr, Rkey::new(r.rkey))
    };
    // SAFETY: the opcode says the `atomic` arm is the one the caller filled.
    let atomic = || unsafe { wr.wr.atomic };
    let op = match wr.opcode {
        abi::IBV_WR_SEND => SendOp::Send,
        abi::IBV_WR_SEND_WITH_IMM => SendOp::SendWithImm {
            imm: u32::from_be(wr.imm_data),
        },
        abi::IBV_WR_SEND_WITH_INV => SendOp::SendWithInv {
            rkey: Rkey::new(wr.imm_data),
        },
        abi::IBV_WR_RDMA_WRITE => {
            let (remote_addr, rkey) = rdma();
            SendOp::Write { remote_addr, rkey }
        }
        abi::IBV_WR_RDMA_WRITE_WITH_IMM => {
            let (remote_addr, rkey) = rdma();
            SendOp::WriteWithImm {
                remote_addr,
                rkey,
                imm: u32::from_be(wr.imm_data),
            }
        }
        abi::IBV_WR_RDMA_READ => {
            let (remote_addr, rkey) = rdma();
            SendOp::Read { remote_addr, rkey }
        }
        abi::IBV_WR_ATOMIC_CMP_AND_SWP => {
            let a = atomic();
            SendOp::CompareSwap {
                remote_addr: a.remote_addr,
                rkey: Rkey::new(a.rkey),
                compare: a.compare_add,
                swap: a.swap,
            }
        }
        abi::IBV_WR_ATOMIC_FETCH_AND_ADD => {
            let a = atomic();
            SendOp::FetchAdd {
                remote_addr: a.remote_addr,
                rkey: Rkey::new(a.rkey),
                add: a.compare_add,
            }
        }
        _ => return Err(libc::EINVAL),
    };
    // SAFETY: this function's contract.
    let sg = unsafe { sges(wr.sg_list, wr.num_sge, q.cap.max_send_sge) }.ok_or(libc::EINVAL)?;
    let flags = wr.send_flags;
    let mut out = SendWr::new(wr.wr_id, op);
    if q.qp_type == abi::IBV_QPT_UD {
        // SAFETY: on a UD QP the `ud` arm is the one the caller filled.
        let ud = unsafe { wr.wr.ud };
        let a = ah(ud.ah.cast()).ok_or(libc::EINVAL)?;
        out.ud = Some(UdDest {
            ah: a.ah,
            remote_qpn: Qpn::new(ud.remote_qpn & 0xff_ffff),
            remote_qkey: ud.remote_qkey,
        });
    }
    out.signaled = q.sq_sig_all || flags & abi::IBV_SEND_SIGNALED != 0;
    out.fence = flags & abi::IBV_SEND_FENCE != 0;
    out.solicited = flags & abi::IBV_SEND_SOLICITED != 0;
    if flags & abi::IBV_SEND_INLINE != 0 {
        let total: u64 = sg.iter().map(|s| u64::from(s.length)).sum();
        if total > u64::from(q.cap.max_inline_data) {
            return Err(libc::EINVAL);
        }
        let mut data = Vec::with_capacity(total as usize);
        for s in &sg {
            if s.length > 0 && s.addr == 0 {
                return Err(libc::EINVAL);
            }
            // SAFETY: this function's contract: an inline SGE names `length` readable bytes
            // of this process at `addr` (bounded above by max_inline_data).
            data.extend_from_slice(unsafe {
                std::slice::from_raw_parts(s.addr as usize as *const u8, s.length as usize)
            });
        }
        out.inline_data = Some(data);
    } else {
        out.sg_list = sg;
    }
    Ok(out)
}

/// Posts a chain of requests: each is converted by `convert` and handed to `post`; the first
/// failure stops the chain, is stored in `*bad` and returned as an errno.
fn post_chain<W>(
    q: &Qp,
    first: *mut W,
    bad: *mut *mut W,
    next: impl Fn(&W) -> *mut W,
    mut post: impl FnMut(&mut State, &W) -> Result<(), c_int>,
) -> c_int {
    let mut st = q.engine.lock();
    let mut cur = first;
    let mut rc = 0;
    while !cur.is_null() {
        // SAFETY: the caller's chain: each non-NULL `next` is a readable request.
        let w = unsafe { &*cur };
        if let Err(e) = post(&mut st, w) {
            rc = e;
            break;
        }
        cur = next(w);
    }
    if rc != 0 && !bad.is_null() {
        // SAFETY: the caller passes a writable pointer slot (checked not NULL).
        unsafe { *bad = cur };
    }
    drop(st);
    q.engine.nudge();
    rc
}

fn post_errno(e: rocev2_core::EndpointError) -> c_int {
    use rocev2_core::qp::PostError;
    match e {
        rocev2_core::EndpointError::Post(PostError::QueueFull) => libc::ENOMEM,
        _ => libc::EINVAL,
    }
}

/// `ibv_context_ops.post_send`.
pub(crate) unsafe extern "C" fn post_send(
    p: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    guard(libc::EIO, || {
        let Some(q) = qp(p) else {
            return libc::EINVAL;
        };
        post_chain(
            q,
            wr,
            bad,
            |w| w.next,
            |st, w| {
                // SAFETY: the ibv_post_send contract: SGE lists and inline data are readable.
                let r = unsafe { send_wr(q, w) }?;
                st.driver.ep.post_send(q.qpn, r).map_err(post_errno)
            },
        )
    })
}

/// `ibv_context_ops.post_recv`.
pub(crate) unsafe extern "C" fn post_recv(
    p: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    guard(libc::EIO, || {
        let Some(q) = qp(p) else {
            return libc::EINVAL;
        };
        post_chain(
            q,
            wr,
            bad,
            |w| w.next,
            |st, w| {
                // SAFETY: the ibv_post_recv contract: the SGE list is readable.
                let sg = unsafe { sges(w.sg_list, w.num_sge, q.cap.max_recv_sge) }
                    .ok_or(libc::EINVAL)?;
                let r = RecvWr {
                    wr_id: w.wr_id,
                    sg_list: sg,
                };
                st.driver.ep.post_recv(q.qpn, r).map_err(post_errno)
            },
        )
    })
}

#[unsafe(no_mangle)]
/// `ibv_qp_to_qp_ex(3)`: no extended QPs (see the module docs).
pub extern "C" fn ibv_qp_to_qp_ex(_qp: *mut ibv_qp) -> *mut c_void {
    std::ptr::null_mut()
}

/// An address handle: `ibv_ah` first, so its pointer is the handle.
#[repr(C)]
pub struct Ah {
    /// What the caller sees.
    pub ibv: ibv_ah,
    ah: AddressHandle,
}

fn ah<'a>(p: *const ibv_ah) -> Option<&'a Ah> {
    // SAFETY: a registered Ah stays valid until ibv_destroy_ah unregisters it.
    handle::check(p, Kind::Ah).then(|| unsafe { &*p.cast::<Ah>() })
}

#[unsafe(no_mangle)]
/// `ibv_create_ah(3)`: the path to the GID in `attr`'s GRH, resolved as for an RC QP.
pub extern "C" fn ibv_create_ah(p: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    guard(std::ptr::null_mut(), || {
        let (Some(d), false) = (pd(p), attr.is_null()) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        // SAFETY: the caller passes a readable attr (checked not NULL).
        let attr = unsafe { &*attr };
        let made = destination(attr).and_then(|(ip, hop, dscp)| {
            host::address_handle(&d.engine.lock().iface, ip, hop, dscp).map_err(|e| path_errno(&e))
        });
        let handle = match made {
            Ok(h) => h,
            Err(e) => {
                set_errno(e);
                return std::ptr::null_mut();
            }
        };
        let a = Box::into_raw(Box::new(Ah {
            ibv: ibv_ah {
                context: d.ibv.context,
                pd: p,
                handle: 0,
            },
            ah: handle,
        }))
        .cast::<ibv_ah>();
        handle::register(a, Kind::Ah);
        a
    })
}

#[unsafe(no_mangle)]
/// `ibv_create_ah_from_wc(3)`: not supported.
pub extern "C" fn ibv_create_ah_from_wc(
    _pd: *mut ibv_pd,
    _wc: *mut c_void,
    _grh: *mut c_void,
    _port: u8,
) -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

#[unsafe(no_mangle)]
/// `ibv_destroy_ah(3)`.
pub extern "C" fn ibv_destroy_ah(a: *mut ibv_ah) -> c_int {
    guard(libc::EIO, || {
        if !handle::unregister(a, Kind::Ah) {
            return libc::EINVAL;
        }
        // SAFETY: was registered until now, made by Box::into_raw.
        drop(unsafe { Box::from_raw(a.cast::<Ah>()) });
        0
    })
}

#[unsafe(no_mangle)]
/// `ibv_create_srq(3)`: not supported.
pub extern "C" fn ibv_create_srq(_pd: *mut ibv_pd, _attr: *mut c_void) -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

#[unsafe(no_mangle)]
/// `ibv_destroy_srq(3)`: there are none.
pub extern "C" fn ibv_destroy_srq(_srq: *mut c_void) -> c_int {
    libc::EINVAL
}

#[unsafe(no_mangle)]
/// `ibv_attach_mcast(3)`: no UD, so no multicast.
pub extern "C" fn ibv_attach_mcast(_qp: *mut ibv_qp, _gid: *const c_void, _lid: u16) -> c_int {
    libc::EOPNOTSUPP
}

#[unsafe(no_mangle)]
/// `ibv_detach_mcast(3)`: as `ibv_attach_mcast`.
pub extern "C" fn ibv_detach_mcast(_qp: *mut ibv_qp, _gid: *const c_void, _lid: u16) -> c_int {
    libc::EOPNOTSUPP
}
