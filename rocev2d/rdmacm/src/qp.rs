//! QPs on IDs: `rdma_create_qp`, `rdma_create_qp_ex`, `rdma_destroy_qp`, `rdma_init_qp_attr`.
//!
//! `rdma_create_qp_ex` makes a QP (`rdma_create_qp` is it with the basic attributes, as in
//! librdmacm) through the verbs library's `ibv_create_qp_ex`, so an extended QP (the `ibv_wr_*`
//! post path perftest takes) can be an ID's. It makes a QP of the verbs library (with CQs and completion channels of its
//! own when the attributes name none, as librdmacm): an RDMA_PS_TCP ID's is RC, moved to INIT,
//! and the device's CM moves it to RTR and RTS as the connection is made; an RDMA_PS_UDP ID's
//! is UD, moved to RTS at once with Q_Key `RDMA_UDP_QKEY`, as librdmacm does.

use crate::abi::{self, rdma_cm_id};
use crate::addr::gid_bytes;
use crate::call;
use crate::device::{self, Dev};
use crate::state::ConnAttrs;
use crate::state::{OwnCqs, lock};
use crate::verbs;
use core::ffi::c_int;
use rocev2_core::cm::RDMA_UDP_Q_KEY;
use rocev2_verbs_abi::verbs::{
    IBV_QP_ACCESS_FLAGS, IBV_QP_AV, IBV_QP_DEST_QPN, IBV_QP_INIT_ATTR_PD,
    IBV_QP_MAX_DEST_RD_ATOMIC, IBV_QP_MAX_QP_RD_ATOMIC, IBV_QP_MIN_RNR_TIMER, IBV_QP_PATH_MTU,
    IBV_QP_PKEY_INDEX, IBV_QP_QKEY, IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY, IBV_QP_RQ_PSN,
    IBV_QP_SQ_PSN, IBV_QP_STATE, IBV_QP_TIMEOUT, IBV_QPT_RC, IBV_QPT_UD,
};
use rocev2_verbs_abi::verbs::{ibv_pd, ibv_qp, ibv_qp_attr, ibv_qp_init_attr, ibv_qp_init_attr_ex};
use std::net::IpAddr;

/// `IBV_QP_PORT`.
const IBV_QP_PORT: c_int = 1 << 5;
/// `IBV_QPS_INIT`, `IBV_QPS_RTR`, `IBV_QPS_RTS`, `IBV_QPS_ERR`.
const IBV_QPS_INIT: c_int = 1;
const IBV_QPS_RTR: c_int = 2;
const IBV_QPS_RTS: c_int = 3;
const IBV_QPS_ERR: c_int = 6;
/// The RNR NAK timer code a connection's QP announces (0.64 ms), as the device's CM gives its
/// own QPs.
const MIN_RNR_TIMER: u8 = 12;
/// What the peer may do to a connected QP: write, read and atomics (librdmacm lets the CM
/// grant them; the regions' own access flags still decide).
const ACCESS: u32 = 1 | 2 | 4 | 8;

/// The attributes and mask of the transition to `attr.qp_state` of an ID's QP that need no
/// connection: INIT for RC, INIT, RTR and RTS for UD (`ud`). `None` for any other.
fn transition(attr: &mut ibv_qp_attr, ud: bool) -> Option<c_int> {
    match (attr.qp_state, ud) {
        (IBV_QPS_INIT, false) => {
            attr.pkey_index = 0;
            attr.port_num = 1;
            attr.qp_access_flags = ACCESS;
            Some(IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)
        }
        (IBV_QPS_INIT, true) => {
            attr.pkey_index = 0;
            attr.port_num = 1;
            attr.qkey = RDMA_UDP_Q_KEY;
            Some(IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)
        }
        (IBV_QPS_RTR, true) => Some(IBV_QP_STATE),
        (IBV_QPS_RTS, true) => {
            attr.sq_psn = 0;
            Some(IBV_QP_STATE | IBV_QP_SQ_PSN)
        }
        _ => None,
    }
}

/// Moves a new QP to INIT, and a UD one on to RTS.
fn bring_up(qp: *mut ibv_qp, ud: bool) -> Result<(), c_int> {
    let states: &[c_int] = if ud {
        &[IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS]
    } else {
        &[IBV_QPS_INIT]
    };
    for &state in states {
        // SAFETY: an all-zero ibv_qp_attr is a valid value.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = state;
        let mask = transition(&mut a, ud).ok_or(libc::EINVAL)?;
        // SAFETY: the QP just made; the verbs library checks the handle.
        match unsafe { verbs::ibv_modify_qp(qp, &mut a, mask) } {
            0 => {}
            r => return Err(r),
        }
    }
    Ok(())
}

/// Moves `qp` to ERROR (its outstanding work completes flushed).
pub fn to_error(qp: *mut ibv_qp) {
    // SAFETY: an all-zero ibv_qp_attr is a valid value of the plain C struct.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = IBV_QPS_ERR;
    // SAFETY: the verbs library checks the QP handle.
    unsafe { verbs::ibv_modify_qp(qp, &mut a, IBV_QP_STATE) };
}

/// Makes a CQ with a completion channel of its own on `ctx` for `depth` entries.
fn own_cq(
    ctx: *mut rocev2_verbs_abi::verbs::ibv_context,
    depth: u32,
    cqs: &mut OwnCqs,
) -> Result<*mut rocev2_verbs_abi::verbs::ibv_cq, c_int> {
    // SAFETY: a live context of the verbs library.
    let ch = unsafe { verbs::ibv_create_comp_channel(ctx) };
    if ch.is_null() {
        return Err(crate::errno());
    }
    cqs.channels.push(ch as usize);
    let n = c_int::try_from(depth.max(1)).unwrap_or(c_int::MAX);
    // SAFETY: a live context and channel.
    let cq = unsafe { verbs::ibv_create_cq(ctx, n, std::ptr::null_mut(), ch, 0) };
    if cq.is_null() {
        return Err(crate::errno());
    }
    cqs.cqs.push(cq as usize);
    Ok(cq)
}

/// Frees what [`own_cq`] made.
fn free_cqs(cqs: OwnCqs) {
    for cq in cqs.cqs {
        // SAFETY: a CQ this library made; the verbs library checks it.
        unsafe { verbs::ibv_destroy_cq(cq as *mut _) };
    }
    for ch in cqs.channels {
        // SAFETY: a channel this library made; the verbs library checks it.
        unsafe { verbs::ibv_destroy_comp_channel(ch as *mut _) };
    }
}

/// Makes the QP of ID `id` with `pd` (NULL: the ID's) and the basic attributes
/// `attr`, which get back the CQs and capabilities the QP was made with.
pub fn create(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> Result<(), c_int> {
    if attr.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: an all-zero ibv_qp_init_attr_ex is a valid value (NULL pointers, no fields asked).
    let mut ex: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
    {
        // SAFETY: non-NULL, the caller's attributes.
        let a = unsafe { &*attr };
        ex.qp_context = a.qp_context;
        ex.send_cq = a.send_cq;
        ex.recv_cq = a.recv_cq;
        ex.srq = a.srq;
        ex.cap = a.cap;
        ex.qp_type = a.qp_type;
        ex.sq_sig_all = a.sq_sig_all;
    }
    ex.comp_mask = IBV_QP_INIT_ATTR_PD;
    ex.pd = pd;
    let r = create_ex(id, &mut ex);
    // SAFETY: as above; librdmacm copies the attributes back whatever the outcome.
    let a = unsafe { &mut *attr };
    a.send_cq = ex.send_cq;
    a.recv_cq = ex.recv_cq;
    a.srq = ex.srq;
    a.cap = ex.cap;
    a.qp_type = ex.qp_type;
    r
}

/// Makes the QP of ID `id` with `attr` (its PD, or the ID's).
pub fn create_ex(id: *mut rdma_cm_id, attr: *mut ibv_qp_init_attr_ex) -> Result<(), c_int> {
    if attr.is_null() {
        return Err(libc::EINVAL);
    }
    let mut st = lock();
    st.id(id)?;
    // SAFETY: a live ID (in the table, under the lock): our Box.
    let cm = unsafe { &mut *id };
    if cm.verbs.is_null() || !cm.qp.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: non-NULL, the caller's attributes.
    let a = unsafe { &mut *attr };
    // No type (0, which no ibv_qp_type is): the ID's, as rdma_create_ep's callers expect.
    if a.qp_type == 0 {
        a.qp_type = cm.qp_type;
    }
    let ud = cm.ps == abi::RDMA_PS_UDP;
    if a.qp_type != if ud { IBV_QPT_UD } else { IBV_QPT_RC } {
        return Err(crate::unsupported(
            "rdma_create_qp: a QP type other than IBV_QPT_RC (RDMA_PS_TCP) or IBV_QPT_UD (RDMA_PS_UDP)",
        ));
    }
    let asked = if a.comp_mask & IBV_QP_INIT_ATTR_PD != 0 {
        a.pd
    } else {
        std::ptr::null_mut()
    };
    // Without one of the caller's, the ID's: its device's PD, or its QP's last one.
    let pd = if asked.is_null() { cm.pd } else { asked };
    if pd.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: a PD of the verbs library (it checks the handle when the QP is made; the context
    // is read only to refuse another device's).
    if unsafe { (*pd).context } != cm.verbs {
        return Err(libc::EINVAL);
    }
    let mut cqs = OwnCqs {
        cqs: Vec::new(),
        channels: Vec::new(),
    };
    let made = (|| {
        if a.recv_cq.is_null() {
            a.recv_cq = own_cq(cm.verbs, a.cap.max_recv_wr, &mut cqs)?;
            cm.recv_cq = a.recv_cq;
            cm.recv_cq_channel = cqs.channels[cqs.channels.len() - 1] as *mut _;
        }
        if a.send_cq.is_null() {
            a.send_cq = own_cq(cm.verbs, a.cap.max_send_wr, &mut cqs)?;
            cm.send_cq = a.send_cq;
            cm.send_cq_channel = cqs.channels[cqs.channels.len() - 1] as *mut _;
        }
        a.pd = pd;
        a.comp_mask |= IBV_QP_INIT_ATTR_PD;
        // SAFETY: a live context of the verbs library and the caller's attributes.
        let qp = unsafe { verbs::ibv_create_qp_ex(cm.verbs, a) };
        if qp.is_null() {
            return Err(crate::errno());
        }
        if let Err(r) = bring_up(qp, ud) {
            // SAFETY: the QP just made, not handed out.
            unsafe { verbs::ibv_destroy_qp(qp) };
            return Err(r);
        }
        Ok(qp)
    })();
    match made {
        Ok(qp) => {
            cm.qp = qp;
            cm.pd = pd;
            if !cqs.cqs.is_empty() {
                st.id(id)?.own_cqs = Some(cqs);
            }
            Ok(())
        }
        Err(e) => {
            cm.recv_cq = std::ptr::null_mut();
            cm.send_cq = std::ptr::null_mut();
            cm.recv_cq_channel = std::ptr::null_mut();
            cm.send_cq_channel = std::ptr::null_mut();
            free_cqs(cqs);
            Err(e)
        }
    }
}

#[unsafe(no_mangle)]
/// `rdma_create_qp(3)`: RC on an RDMA_PS_TCP ID, UD on an RDMA_PS_UDP one.
pub extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    call(|| create(id, pd, attr))
}

/// Frees the QP of ID `id` and the CQs made for it.
pub fn destroy(id: *mut rdma_cm_id) -> Result<(), c_int> {
    let mut st = lock();
    let cqs = st.id(id)?.own_cqs.take();
    // SAFETY: a live ID: our Box.
    let cm = unsafe { &mut *id };
    if !cm.qp.is_null() {
        // SAFETY: the ID's QP; the verbs library checks the handle.
        unsafe { verbs::ibv_destroy_qp(cm.qp) };
        cm.qp = std::ptr::null_mut();
    }
    if let Some(cqs) = cqs {
        cm.recv_cq = std::ptr::null_mut();
        cm.send_cq = std::ptr::null_mut();
        cm.recv_cq_channel = std::ptr::null_mut();
        cm.send_cq_channel = std::ptr::null_mut();
        free_cqs(cqs);
    }
    Ok(())
}

#[unsafe(no_mangle)]
/// `rdma_destroy_qp(3)`.
pub extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    call(|| destroy(id));
}

/// The RTR or RTS attributes and mask of a connection's QP (`attr.qp_state`) from what it runs
/// with, toward `peer` from `local` on device `dev`, as the kernel's CM gives them.
fn connected(
    attr: &mut ibv_qp_attr,
    c: &ConnAttrs,
    dev: &Dev,
    local: IpAddr,
    peer: IpAddr,
) -> Option<c_int> {
    match attr.qp_state {
        IBV_QPS_RTR => {
            attr.ah_attr = dev.ah_to(local, gid_bytes(peer));
            attr.path_mtu = c_int::from(c.path_mtu);
            attr.dest_qp_num = c.dest_qpn;
            attr.rq_psn = c.rq_psn;
            attr.max_dest_rd_atomic = c.max_dest_rd_atomic;
            attr.min_rnr_timer = MIN_RNR_TIMER;
            Some(
                IBV_QP_STATE
                    | IBV_QP_AV
                    | IBV_QP_PATH_MTU
                    | IBV_QP_DEST_QPN
                    | IBV_QP_RQ_PSN
                    | IBV_QP_MAX_DEST_RD_ATOMIC
                    | IBV_QP_MIN_RNR_TIMER,
            )
        }
        IBV_QPS_RTS => {
            attr.sq_psn = c.sq_psn;
            attr.timeout = c.timeout;
            attr.retry_cnt = c.retry_count;
            attr.rnr_retry = c.rnr_retry_count;
            attr.max_rd_atomic = c.max_rd_atomic;
            Some(
                IBV_QP_STATE
                    | IBV_QP_TIMEOUT
                    | IBV_QP_RETRY_CNT
                    | IBV_QP_RNR_RETRY
                    | IBV_QP_SQ_PSN
                    | IBV_QP_MAX_QP_RD_ATOMIC,
            )
        }
        _ => None,
    }
}

#[unsafe(no_mangle)]
/// `rdma_init_qp_attr(3)`: the INIT transition, and RTR and RTS: of an RDMA_PS_UDP ID at any
/// time, of a connection's QP once its terms are known (the passive side from the request on,
/// the active side from `RDMA_CM_EVENT_CONNECT_RESPONSE`), for a program that moves its own QP
/// (`conn_param.qp_num`); before that, `EINVAL`.
pub extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    call(|| {
        let mut st = lock();
        let s = st.id(id)?;
        let conn = match (s.attrs, s.src, s.dst, device::by_ctx(s.ctx)) {
            (Some(c), Some(src), Some(dst), Some(d)) => Some((c, src.ip(), dst.ip(), d)),
            _ => None,
        };
        // SAFETY: a live ID (in the table, under the lock): our Box.
        let ud = unsafe { (*id).ps } == abi::RDMA_PS_UDP;
        drop(st);
        if attr.is_null() || mask.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: non-NULL, the caller's attributes.
        let a = unsafe { &mut *attr };
        let m = transition(a, ud)
            .or_else(|| {
                let (c, local, peer, d) = conn?;
                connected(a, &c, d, local, peer)
            })
            .ok_or(libc::EINVAL)?;
        // SAFETY: non-NULL, the caller's out pointer.
        unsafe { *mask = m };
        Ok(())
    })
}

#[unsafe(no_mangle)]
/// `rdma_create_qp_ex(3)`: as `rdma_create_qp`, with the extended attributes (`send_ops_flags`
/// for the `ibv_wr_*` post path).
pub extern "C" fn rdma_create_qp_ex(id: *mut rdma_cm_id, attr: *mut ibv_qp_init_attr_ex) -> c_int {
    call(|| create_ex(id, attr))
}
