//! Queue pairs: `ibv_create_qp`, the extended `ibv_create_qp_ex` and `ibv_qp_to_qp_ex`,
//! `ibv_modify_qp`, `ibv_query_qp`, `ibv_destroy_qp`, and the `post_send`/`post_recv` entries
//! of the context's ops table. Every QP begins with an `ibv_qp_ex`; one created with send
//! operations posts through `ibv_wr_*` too (`crate::wr`), each request converted and posted as
//! `ibv_post_send`'s (`Qp::request`, `Qp::post`).
//!
//! `ibv_modify_qp` maps the attribute mask onto a [`rocev2::ModifySpec`] (one step of the
//! device's [`rocev2::Device::modify_qp`], in-process or in the daemon). The address vector
//! must carry a GRH (`is_global`), as on any RoCE device: its destination GID is the peer's IP
//! address (`::ffff:a.b.c.d` for IPv4), the next hop's MAC comes from the neighbour table
//! (resolved if missing), and the source is the interface's first global address of the same
//! family. The path MTU is lowered to what the interface carries.
//!
//! UD QPs (`IBV_QPT_UD`) send through address handles (`ibv_create_ah`, resolved the same
//! way, or `ibv_create_ah_from_wc` towards a receive's sender) and receive with the 40-byte GRH area first in the buffer (`IBV_WC_GRH`), as on RoCE.
//!
//! A QP created with `ibv_qp_init_attr.srq` takes its receive requests from that shared
//! receive queue (`crate::srq`) and refuses its own (`ibv_post_recv` fails with `EINVAL`).
//!
//! Deviations: RC and UD only; other types fail with `EOPNOTSUPP`, as do multicast and the
//! extended creation attributes of XRC, RSS and TSO. `ibv_query_qp` reports state, caps, access
//! flags and PSN-free attributes only. `ibv_destroy_qp` first lets the engine send what it
//! still owes the peer (at most [`DRAIN_LIMIT`]), since a process usually exits right after.

use crate::abi::{
    self, ibv_ah, ibv_ah_attr, ibv_pd, ibv_qp, ibv_qp_attr, ibv_qp_ex, ibv_qp_init_attr,
    ibv_recv_wr, ibv_send_wr,
};
use crate::context::{MAX_INLINE, MAX_QP_WR, MAX_SGE};
use crate::cq::cq;
use crate::engine::Engine;
use crate::handle::{self, Kind, guard, null_with, set_errno};
use crate::mr::pd;
use crate::wr::Batch;
use core::ffi::{c_int, c_uint, c_void};
use rocev2::{AhAttr, Destination, ModifySpec, UdAddress};
use rocev2_core::mr::{Lkey, Rkey};
use rocev2_core::qp::{Mtu, QpConfig, QpState, RecvWr, SendOp, SendWr, Sge};
use rocev2_core::wire::Qpn;
use rocev2_core::wire::gid::gid_to_ip;
use std::net::Ipv6Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long `ibv_destroy_qp` drives the engine so its last ACKs and responses leave.
pub const DRAIN_LIMIT: Duration = Duration::from_millis(500);

/// How long `ibv_modify_qp` to RTR waits for the peer's MAC.
const RESOLVE_WAIT: Duration = Duration::from_secs(3);

/// A queue pair: `ibv_qp_ex` (which begins with `ibv_qp`) first, so its pointer is the handle,
/// of either kind.
#[repr(C)]
pub struct Qp {
    /// What the caller sees.
    pub ibv: ibv_qp_ex,
    qp: rocev2::Qp,
    qp_type: c_int,
    cap: abi::ibv_qp_cap,
    sq_sig_all: bool,
    access: u32,
    /// A UD QP's Q_Key, as last set (programs answering a datagram read it back).
    q_key: u32,
    /// The `ibv_wr_*` operations it was created with (`ibv_create_qp_ex` with
    /// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`); `None`: no extended QP (`ibv_qp_to_qp_ex` is NULL).
    pub(crate) send_ops: Option<u64>,
    /// The requests `ibv_wr_*` are building.
    pub(crate) batch: Mutex<Batch>,
    engine: Arc<Engine>,
}

/// The `ibv_wr_*` operations this library implements.
pub const SEND_OPS: u64 = abi::IBV_QP_EX_WITH_RDMA_WRITE
    | abi::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | abi::IBV_QP_EX_WITH_SEND
    | abi::IBV_QP_EX_WITH_SEND_WITH_IMM
    | abi::IBV_QP_EX_WITH_RDMA_READ
    | abi::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | abi::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | abi::IBV_QP_EX_WITH_SEND_WITH_INV;

/// The QP behind `p`, if it is a live one.
pub(crate) fn qp<'a>(p: *const ibv_qp) -> Option<&'a Qp> {
    // SAFETY: a registered Qp stays valid until ibv_destroy_qp unregisters it.
    handle::check(p, Kind::Qp).then(|| unsafe { &*p.cast::<Qp>() })
}

/// The device QP behind `p` and its engine, if `p` is a live RC QP (the connection manager's,
/// [`crate::ucma`]); with `any`, a live QP of any type.
pub fn cm_qp(p: *const ibv_qp, any: bool) -> Option<(rocev2::Qp, Arc<Engine>)> {
    qp(p)
        .filter(|q| any || q.qp_type == abi::IBV_QPT_RC)
        .map(|q| (q.qp, q.engine.clone()))
}

/// The live QP of context `ctx` numbered `num` (for a `conn_param.qp_num`); a scan, as
/// connections are made rarely.
pub fn by_num(ctx: *const abi::ibv_context, num: u32) -> Option<*mut ibv_qp> {
    handle::live(Kind::Qp).into_iter().find_map(|p| {
        let p = p as *mut ibv_qp;
        let q = qp(p)?;
        let b = &q.ibv.qp_base;
        (b.qp_num == num && std::ptr::eq(b.context, ctx)).then_some(p)
    })
}

#[unsafe(no_mangle)]
/// `ibv_create_qp(3)`: an RC or UD QP in RESET.
pub extern "C" fn ibv_create_qp(p: *mut ibv_pd, init: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    guard(std::ptr::null_mut(), || create(p, init, None))
}

/// `verbs_context.create_qp_ex` (verbs.h's inline `ibv_create_qp_ex`, which passes a plain
/// request to `ibv_create_qp` itself): a QP with a PD and, with
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`, the `ibv_wr_*` post path for the operations asked for
/// ([`SEND_OPS`]); other attributes (XRC, RSS, TSO, create flags) and operations fail with
/// `EOPNOTSUPP`.
pub(crate) unsafe extern "C" fn create_qp_ex(
    ctx: *mut abi::ibv_context,
    init: *mut abi::ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    guard(std::ptr::null_mut(), || {
        if init.is_null() {
            return null_with(libc::EINVAL);
        }
        // SAFETY: the caller passes a readable and writable attr (checked not NULL).
        let a = unsafe { &*init };
        let known = abi::IBV_QP_INIT_ATTR_PD | abi::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        if a.comp_mask & !known != 0 {
            return null_with(libc::EOPNOTSUPP);
        }
        let ops =
            (a.comp_mask & abi::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0).then_some(a.send_ops_flags);
        if ops.is_some_and(|o| o & !SEND_OPS != 0) {
            return null_with(libc::EOPNOTSUPP);
        }
        let ours = pd(a.pd).is_some_and(|d| d.ibv.context == ctx);
        if a.comp_mask & abi::IBV_QP_INIT_ATTR_PD == 0 || !ours {
            return null_with(libc::EINVAL);
        }
        // `struct ibv_qp_init_attr_ex` begins with `struct ibv_qp_init_attr`.
        create(a.pd, init.cast(), ops)
    })
}

/// Makes a QP in RESET as `init` asks, writing the capacities it got back into it.
fn create(p: *mut ibv_pd, init: *mut ibv_qp_init_attr, send_ops: Option<u64>) -> *mut ibv_qp {
    let (Some(d), false) = (pd(p), init.is_null()) else {
        return null_with(libc::EINVAL);
    };
    // SAFETY: the caller passes a readable and writable init attr (checked not NULL).
    let init = unsafe { &mut *init };
    if init.qp_type != abi::IBV_QPT_RC && init.qp_type != abi::IBV_QPT_UD {
        return null_with(libc::EOPNOTSUPP);
    }
    let srq = match init.srq.is_null() {
        true => None,
        false => match crate::srq::srq(init.srq) {
            Some(s) => Some(s.device_srq()),
            None => return null_with(libc::EINVAL),
        },
    };
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
        srq: srq.map(|s| s.id()),
        ..QpConfig::new(d.pd.id(), scq.cq.id(), rcq.cq.id())
    };
    // The device brings a new QP up (RC to INIT, UD to RTS); a verbs QP starts in RESET,
    // where any state may return to, and the program's own modifies take it from there.
    let dev = &d.engine;
    let created = if init.qp_type == abi::IBV_QPT_UD {
        dev.create_ud_qp_with(cfg, 0)
    } else {
        dev.create_qp(cfg)
    };
    let reset = ModifySpec {
        state: Some(QpState::Reset.as_ibv()),
        ..ModifySpec::default()
    };
    let made = created.and_then(|q| {
        dev.modify_qp(q, &reset)
            .inspect_err(|_| drop(dev.destroy_qp(q)))
            .map(|_| q)
    });
    let dev_qp = match made {
        Ok(q) => q,
        Err(e) => return null_with(crate::errno(&e)),
    };
    let qpn = dev_qp.qpn();
    init.cap = cap;
    let q = Box::into_raw(Box::new(Qp {
        ibv: crate::wr::qp_ex(ibv_qp {
            context: d.ibv.context,
            qp_context: init.qp_context,
            pd: p,
            send_cq: init.send_cq,
            recv_cq: init.recv_cq,
            srq: init.srq,
            handle: qpn.value(),
            qp_num: qpn.value(),
            state: 0,
            qp_type: init.qp_type,
            mutex: libc::PTHREAD_MUTEX_INITIALIZER,
            cond: libc::PTHREAD_COND_INITIALIZER,
            events_completed: 0,
        }),
        qp: dev_qp,
        qp_type: init.qp_type,
        cap,
        sq_sig_all: init.sq_sig_all != 0,
        access: 0,
        q_key: 0,
        send_ops,
        batch: Mutex::default(),
        engine: Arc::clone(&d.engine),
    }))
    .cast::<ibv_qp>();
    handle::register(q, Kind::Qp);
    q
}

#[unsafe(no_mangle)]
/// `ibv_destroy_qp(3)`.
pub extern "C" fn ibv_destroy_qp(p: *mut ibv_qp) -> c_int {
    guard(libc::EIO, || {
        let Some(q) = qp(p) else {
            return libc::EINVAL;
        };
        // What the QP still owes the peer leaves first, whatever else is pending.
        let _ = q.engine.drain(DRAIN_LIMIT);
        if let Err(e) = q.engine.destroy_qp(q.qp) {
            return crate::errno(&e);
        }
        handle::unregister(p, Kind::Qp);
        // SAFETY: was registered, made by Box::into_raw, now unregistered.
        drop(unsafe { Box::from_raw(p.cast::<Qp>()) });
        0
    })
}

/// The destination `ah` names (it must carry a GRH: RoCE has no LIDs), its next hop resolved
/// through the neighbour table, and its DSCP.
fn destination(ah: &ibv_ah_attr) -> Result<Destination, c_int> {
    if ah.is_global == 0 {
        return Err(libc::EINVAL);
    }
    Ok(Destination {
        ip: gid_to_ip(Ipv6Addr::from(ah.grh.dgid.raw)),
        mac: None,
        dscp: ah.grh.traffic_class >> 2,
        resolve_timeout_ms: RESOLVE_WAIT.as_millis() as u32,
    })
}

/// `v` when `mask` has `bit`.
fn when<T>(mask: c_int, bit: c_int, v: T) -> Option<T> {
    (mask & bit != 0).then_some(v)
}

/// The attributes `attr` and `mask` set; an `errno` for one that cannot be expressed.
fn modify_spec(attr: &ibv_qp_attr, mask: c_int) -> Result<ModifySpec, c_int> {
    let has = |bit: c_int| mask & bit != 0;
    Ok(ModifySpec {
        state: match when(mask, abi::IBV_QP_STATE, attr.qp_state) {
            Some(s) => Some(u8::try_from(s).map_err(|_| libc::EINVAL)?),
            None => None,
        },
        pkey_index: when(mask, abi::IBV_QP_PKEY_INDEX, attr.pkey_index),
        access: when(mask, abi::IBV_QP_ACCESS_FLAGS, attr.qp_access_flags),
        q_key: when(mask, abi::IBV_QP_QKEY, attr.qkey),
        dest: match has(abi::IBV_QP_AV) {
            true => Some(destination(&attr.ah_attr)?),
            false => None,
        },
        path_mtu: match has(abi::IBV_QP_PATH_MTU) {
            true => {
                let m = u8::try_from(attr.path_mtu).ok().and_then(Mtu::from_code);
                Some(m.ok_or(libc::EINVAL)?.bytes())
            }
            false => None,
        },
        dest_qpn: when(mask, abi::IBV_QP_DEST_QPN, attr.dest_qp_num),
        rq_psn: when(mask, abi::IBV_QP_RQ_PSN, attr.rq_psn),
        sq_psn: when(mask, abi::IBV_QP_SQ_PSN, attr.sq_psn),
        max_dest_rd_atomic: when(
            mask,
            abi::IBV_QP_MAX_DEST_RD_ATOMIC,
            attr.max_dest_rd_atomic,
        ),
        max_rd_atomic: when(mask, abi::IBV_QP_MAX_QP_RD_ATOMIC, attr.max_rd_atomic),
        min_rnr_timer: when(mask, abi::IBV_QP_MIN_RNR_TIMER, attr.min_rnr_timer),
        timeout: when(mask, abi::IBV_QP_TIMEOUT, attr.timeout),
        retry_cnt: when(mask, abi::IBV_QP_RETRY_CNT, attr.retry_cnt),
        rnr_retry: when(mask, abi::IBV_QP_RNR_RETRY, attr.rnr_retry),
    })
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
        let spec = match modify_spec(attr, mask) {
            Ok(s) => s,
            Err(e) => return e,
        };
        let to = match q.engine.modify_qp(q.qp, &spec) {
            Ok(to) => to,
            Err(e) => {
                let qpn = q.qp.qpn().value();
                eprintln!("rocev2_ibverbs: modify QP {qpn:#x}: {}", crate::report(&e));
                return crate::errno(&e);
            }
        };
        // SAFETY: a live QP (checked); `state` and `access` are ours to keep, as libibverbs
        // updates `qp->state` in ibv_modify_qp.
        unsafe {
            let me = p.cast::<Qp>();
            (*me).ibv.qp_base.state = c_int::from(to.as_ibv());
            if let Some(acc) = spec.access {
                (*me).access = acc;
            }
            if let Some(k) = spec.q_key {
                (*me).q_key = k;
            }
        }
        0
    })
}

#[unsafe(no_mangle)]
/// `ibv_query_qp(3)`: state, capabilities, access flags and Q_Key.
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
        let state = q
            .engine
            .qp_state(q.qp)
            .map_or(0, |x| c_int::from(x.as_ibv()));
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
            a.qkey = q.q_key;
            a.port_num = 1;
            let i = &mut *init;
            let b = &q.ibv.qp_base;
            i.qp_context = b.qp_context;
            i.send_cq = b.send_cq;
            i.recv_cq = b.recv_cq;
            i.srq = b.srq;
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

/// What a send request carries: a scatter/gather list, or data already copied
/// (`ibv_wr_set_inline_data`).
pub(crate) enum Payload {
    Sges(Vec<Sge>),
    Inline(Vec<u8>),
}

impl Qp {
    /// The device's request `op` with `payload` and `flags` (`IBV_SEND_*`), and its UD
    /// destination; an `errno` for one it cannot express. Both post paths (`ibv_post_send`,
    /// `ibv_wr_*`) end here.
    ///
    /// # Safety
    /// With `IBV_SEND_INLINE`, each SGE of a [`Payload::Sges`] must name readable memory of
    /// this process.
    pub(crate) unsafe fn request(
        &self,
        wr_id: u64,
        op: SendOp,
        flags: c_uint,
        payload: Payload,
        to: Option<UdAddress>,
    ) -> Result<(SendWr, Option<UdAddress>), c_int> {
        if self.is_ud() != to.is_some() {
            return Err(libc::EINVAL);
        }
        let mut out = SendWr::new(wr_id, op);
        out.signaled = self.sq_sig_all || flags & abi::IBV_SEND_SIGNALED != 0;
        out.fence = flags & abi::IBV_SEND_FENCE != 0;
        out.solicited = flags & abi::IBV_SEND_SOLICITED != 0;
        let max_inline = self.max_inline();
        match payload {
            Payload::Inline(data) if data.len() > max_inline => return Err(libc::EINVAL),
            Payload::Inline(data) => out.inline_data = Some(data),
            Payload::Sges(sg) if flags & abi::IBV_SEND_INLINE != 0 => {
                let total: u64 = sg.iter().map(|s| u64::from(s.length)).sum();
                if total > max_inline as u64 {
                    return Err(libc::EINVAL);
                }
                let mut data = Vec::with_capacity(total as usize);
                for s in &sg {
                    if s.length > 0 && s.addr == 0 {
                        return Err(libc::EINVAL);
                    }
                    // SAFETY: this function's contract: an inline SGE names `length` readable
                    // bytes of this process at `addr` (bounded above by max_inline_data).
                    data.extend_from_slice(unsafe {
                        std::slice::from_raw_parts(s.addr as usize as *const u8, s.length as usize)
                    });
                }
                out.inline_data = Some(data);
            }
            Payload::Sges(sg) if sg.len() > self.max_send_sge() => {
                return Err(libc::EINVAL);
            }
            Payload::Sges(sg) => out.sg_list = sg,
        }
        Ok((out, to))
    }

    /// Whether it is a UD QP.
    pub(crate) fn is_ud(&self) -> bool {
        self.qp_type == abi::IBV_QPT_UD
    }

    /// The most SGEs per send request.
    pub(crate) fn max_send_sge(&self) -> usize {
        self.cap.max_send_sge as usize
    }

    /// The most inline bytes per send request.
    pub(crate) fn max_inline(&self) -> usize {
        self.cap.max_inline_data as usize
    }

    /// Posts `r` (to `to` on a UD QP).
    pub(crate) fn post(&self, r: SendWr, to: Option<UdAddress>) -> Result<(), c_int> {
        match to {
            Some(to) => self.engine.post_send_to(self.qp, to, r),
            None => self.engine.post_send(self.qp, r),
        }
        .map_err(|e| crate::errno(&e))
    }
}

/// The UD destination of address handle `ah`, remote QP and Q_Key.
pub(crate) fn ud_address(
    ah_ptr: *const ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) -> Option<UdAddress> {
    ah(ah_ptr).map(|a| UdAddress {
        ah: a.ah,
        qpn: Qpn::new(remote_qpn & 0xff_ffff),
        q_key: remote_qkey,
    })
}

/// The device's request for `wr` on `q`, and a UD request's destination; an `errno` for one
/// it cannot express.
///
/// # Safety
/// `wr`'s `sg_list` must hold `num_sge` readable entries, and with `IBV_SEND_INLINE` each
/// must name readable memory of this process.
unsafe fn send_wr(q: &Qp, wr: &ibv_send_wr) -> Result<(SendWr, Option<UdAddress>), c_int> {
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
    let to = match q.qp_type == abi::IBV_QPT_UD {
        true => {
            // SAFETY: on a UD QP the `ud` arm is the one the caller filled.
            let ud = unsafe { wr.wr.ud };
            Some(ud_address(ud.ah.cast(), ud.remote_qpn, ud.remote_qkey).ok_or(libc::EINVAL)?)
        }
        false => None,
    };
    // SAFETY: this function's contract.
    unsafe { q.request(wr.wr_id, op, wr.send_flags, Payload::Sges(sg), to) }
}

/// Posts a chain of requests, each through `post`; the first failure stops the chain, is
/// stored in `*bad` and returned as an errno.
fn post_chain<W>(
    first: *mut W,
    bad: *mut *mut W,
    next: impl Fn(&W) -> *mut W,
    mut post: impl FnMut(&W) -> Result<(), c_int>,
) -> c_int {
    let mut cur = first;
    while !cur.is_null() {
        // SAFETY: the caller's chain: each non-NULL `next` is a readable request.
        let w = unsafe { &*cur };
        if let Err(e) = post(w) {
            if !bad.is_null() {
                // SAFETY: the caller passes a writable pointer slot (checked not NULL).
                unsafe { *bad = cur };
            }
            return e;
        }
        cur = next(w);
    }
    0
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
            wr,
            bad,
            |w| w.next,
            |w| {
                // SAFETY: the ibv_post_send contract: SGE lists and inline data are readable.
                let (r, to) = unsafe { send_wr(q, w) }?;
                q.post(r, to)
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
        post_recv_chain(wr, bad, q.cap.max_recv_sge, |r| q.engine.post_recv(q.qp, r))
    })
}

/// Posts a chain of receive requests (`ibv_post_recv`, `ibv_post_srq_recv`) of at most
/// `max_sge` SGEs each through `post`, as [`post_chain`] does.
pub(crate) fn post_recv_chain(
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    max_sge: u32,
    mut post: impl FnMut(RecvWr) -> rocev2::Result<()>,
) -> c_int {
    post_chain(
        wr,
        bad,
        |w| w.next,
        |w| {
            // SAFETY: the ibv_post_recv contract: the SGE list is readable.
            let sg = unsafe { sges(w.sg_list, w.num_sge, max_sge) }.ok_or(libc::EINVAL)?;
            let r = RecvWr {
                wr_id: w.wr_id,
                sg_list: sg,
            };
            post(r).map_err(|e| crate::errno(&e))
        },
    )
}

#[unsafe(no_mangle)]
/// `ibv_qp_to_qp_ex(3)`: the QP's `ibv_qp_ex` when it was created with send operations
/// (`ibv_create_qp_ex` with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`), else NULL.
pub extern "C" fn ibv_qp_to_qp_ex(p: *mut ibv_qp) -> *mut ibv_qp_ex {
    guard(std::ptr::null_mut(), || match qp(p) {
        Some(q) if q.send_ops.is_some() => p.cast(),
        _ => std::ptr::null_mut(),
    })
}

/// An address handle: `ibv_ah` first, so its pointer is the handle.
#[repr(C)]
pub struct Ah {
    /// What the caller sees.
    pub ibv: ibv_ah,
    ah: rocev2::Ah,
    engine: Arc<Engine>,
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
        let made = destination(attr).and_then(|dest| {
            let want = AhAttr {
                ip: dest.ip,
                mac: dest.mac,
                dscp: dest.dscp,
                resolve_timeout: RESOLVE_WAIT,
            };
            d.engine.create_ah(d.pd, &want).map_err(|e| {
                eprintln!(
                    "rocev2_ibverbs: address handle to {}: {}",
                    dest.ip,
                    crate::report(&e)
                );
                crate::errno(&e)
            })
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
            engine: Arc::clone(&d.engine),
        }))
        .cast::<ibv_ah>();
        handle::register(a, Kind::Ah);
        a
    })
}

/// The address vector that answers the sender of `wc` (`ibv_init_ah_from_wc`): its GID from
/// the GRH area `grh` as the destination, the local GID the packet was sent to as the source
/// (its index in `ctx`'s table), its traffic class, hop limit 255; an `errno` without a GRH
/// (`IBV_WC_GRH`: every RoCE UD receive has one) or for a GID the interface does not hold.
///
/// # Safety
/// `grh` must point to 40 readable bytes when `wc` has `IBV_WC_GRH`.
unsafe fn ah_attr_from_wc(
    ctx: &crate::context::Context,
    port: u8,
    wc: &abi::ibv_wc,
    grh: *const u8,
) -> Result<ibv_ah_attr, c_int> {
    if port != 1 || wc.wc_flags & abi::IBV_WC_GRH == 0 || grh.is_null() {
        return Err(libc::EINVAL);
    }
    let mut area = [0u8; rocev2_core::wire::grh::GRH_LEN];
    // SAFETY: this function's contract: the GRH area is 40 readable bytes.
    unsafe { std::ptr::copy_nonoverlapping(grh, area.as_mut_ptr(), area.len()) };
    let local = rocev2_core::wire::grh::dest_gid(&area);
    let gids = ctx.engine.interface().gids();
    let index = gids.iter().position(|g| *g == local).ok_or(libc::ENOENT)?;
    Ok(ibv_ah_attr {
        grh: abi::ibv_global_route {
            dgid: abi::ibv_gid {
                raw: rocev2_core::wire::grh::source_gid(&area).octets(),
            },
            flow_label: 0,
            sgid_index: u8::try_from(index).map_err(|_| libc::ENOENT)?,
            hop_limit: 0xff,
            traffic_class: rocev2_core::wire::grh::traffic_class(&area),
        },
        dlid: 0,
        sl: wc.sl,
        src_path_bits: 0,
        static_rate: 0,
        is_global: 1,
        port_num: port,
    })
}

#[unsafe(no_mangle)]
/// `ibv_init_ah_from_wc(3)`: the address vector that answers a UD receive's sender.
pub extern "C" fn ibv_init_ah_from_wc(
    ctx: *mut abi::ibv_context,
    port: u8,
    wc: *mut abi::ibv_wc,
    grh: *mut c_void,
    attr: *mut ibv_ah_attr,
) -> c_int {
    guard(-1, || {
        let (Some(c), false, false) = (crate::context::context(ctx), wc.is_null(), attr.is_null())
        else {
            set_errno(libc::EINVAL);
            return -1;
        };
        // SAFETY: the caller's completion (checked not NULL) and, with IBV_WC_GRH, its 40-byte
        // GRH area (`struct ibv_grh`).
        match unsafe { ah_attr_from_wc(c, port, &*wc, grh.cast()) } {
            Ok(a) => {
                // SAFETY: the caller's writable attr (checked not NULL).
                unsafe { attr.write(a) };
                0
            }
            Err(e) => {
                set_errno(e);
                -1
            }
        }
    })
}

#[unsafe(no_mangle)]
/// `ibv_create_ah_from_wc(3)`: an address handle to a UD receive's sender
/// ([`ibv_init_ah_from_wc`], then [`ibv_create_ah`]).
pub extern "C" fn ibv_create_ah_from_wc(
    p: *mut ibv_pd,
    wc: *mut abi::ibv_wc,
    grh: *mut c_void,
    port: u8,
) -> *mut ibv_ah {
    guard(std::ptr::null_mut(), || {
        let Some(d) = pd(p) else {
            return null_with(libc::EINVAL);
        };
        let mut attr = std::mem::MaybeUninit::<ibv_ah_attr>::uninit();
        if ibv_init_ah_from_wc(d.ibv.context, port, wc, grh, attr.as_mut_ptr()) != 0 {
            return std::ptr::null_mut();
        }
        ibv_create_ah(p, attr.as_mut_ptr())
    })
}

#[unsafe(no_mangle)]
/// `ibv_destroy_ah(3)`.
pub extern "C" fn ibv_destroy_ah(a: *mut ibv_ah) -> c_int {
    guard(libc::EIO, || {
        if !handle::unregister(a, Kind::Ah) {
            return libc::EINVAL;
        }
        // SAFETY: was registered until now, made by Box::into_raw.
        let a = unsafe { Box::from_raw(a.cast::<Ah>()) };
        match a.engine.destroy_ah(a.ah) {
            Ok(()) => 0,
            Err(e) => crate::errno(&e),
        }
    })
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
