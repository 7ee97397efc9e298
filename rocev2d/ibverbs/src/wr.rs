//! The extended post path of an `ibv_qp_ex` (verbs.h's inline `ibv_wr_*`): `ibv_wr_start`, one
//! builder per request (`ibv_wr_send`, `ibv_wr_rdma_write`, …) followed by its setters
//! (`ibv_wr_set_sge`, `ibv_wr_set_ud_addr`, …), then `ibv_wr_complete` posts the batch or
//! `ibv_wr_abort` drops it.
//!
//! Each builder opens a request with the `wr_id` and `wr_flags` the program set in the
//! `ibv_qp_ex` just before, as libibverbs' providers do. The builders return nothing, so the
//! first thing wrong (an operation the QP was not created with or that this library does not
//! implement, a setter with no request open, a bad address handle, too many SGEs or inline
//! bytes) is kept and returned by `ibv_wr_complete`, which then posts nothing. Every request
//! goes through the same conversion and post as `ibv_post_send`'s (`Qp::request`).
//!
//! Deviations: requests are checked as a whole before any is posted, but posted one by one, so
//! a send queue that fills part-way leaves the first part posted (`ibv_wr_complete` returns
//! `ENOMEM`). Memory windows, local invalidate, TSO, XRC and atomic write are not implemented:
//! their builders make `ibv_wr_complete` fail with `EOPNOTSUPP`.

use crate::abi::{self, ibv_ah, ibv_data_buf, ibv_qp, ibv_qp_ex, ibv_sge};
use crate::engine::lock;
use crate::handle::guard;
use crate::qp::{Payload, Qp, qp, ud_address};
use core::ffi::{c_int, c_void};
use rocev2::UdAddress;
use rocev2_core::mr::{Lkey, Rkey};
use rocev2_core::qp::{SendOp, Sge};

/// The requests being built between `ibv_wr_start` and `ibv_wr_complete`.
#[derive(Default)]
pub struct Batch {
    wrs: Vec<Building>,
    /// The first error, returned by `ibv_wr_complete`.
    error: Option<c_int>,
}

/// One request being built.
struct Building {
    wr_id: u64,
    flags: core::ffi::c_uint,
    op: SendOp,
    payload: Payload,
    to: Option<UdAddress>,
}

/// `qp` with the `ibv_wr_*` functions in its extended part.
pub fn qp_ex(qp: ibv_qp) -> ibv_qp_ex {
    ibv_qp_ex {
        qp_base: qp,
        comp_mask: 0,
        wr_id: 0,
        wr_flags: 0,
        wr_atomic_cmp_swp,
        wr_atomic_fetch_add,
        wr_bind_mw,
        wr_local_inv,
        wr_rdma_read,
        wr_rdma_write,
        wr_rdma_write_imm,
        wr_send,
        wr_send_imm,
        wr_send_inv,
        wr_send_tso,
        wr_set_ud_addr,
        wr_set_xrc_srqn,
        wr_set_inline_data,
        wr_set_inline_data_list,
        wr_set_sge,
        wr_set_sge_list,
        wr_start,
        wr_complete,
        wr_abort,
        wr_atomic_write,
    }
}

/// Runs `f` on the batch of the live extended QP `p` (nothing for anything else: the builders
/// have no way to report it, and `ibv_wr_complete` on it fails with `EINVAL`).
fn with_batch(p: *mut ibv_qp_ex, f: impl FnOnce(&Qp, &mut Batch)) {
    guard((), || {
        if let Some(q) = qp(p.cast::<ibv_qp>()).filter(|q| q.send_ops.is_some()) {
            f(q, &mut lock(&q.batch));
        }
    })
}

impl Batch {
    /// Keeps the first error.
    fn fail(&mut self, e: c_int) {
        self.error.get_or_insert(e);
    }

    /// Opens a request of operation `op` (`IBV_QP_EX_WITH_*` bit `with`), with the `wr_id` and
    /// `wr_flags` the program set in `p`.
    fn open(&mut self, q: &Qp, p: *mut ibv_qp_ex, with: u64, op: SendOp) {
        if q.send_ops.unwrap_or(0) & with == 0 {
            return self.fail(libc::EOPNOTSUPP);
        }
        // SAFETY: `p` is the live QP `q` (checked); the program writes these two fields
        // before calling the builder, on the thread that builds.
        let (wr_id, flags) = unsafe { ((*p).wr_id, (*p).wr_flags) };
        self.wrs.push(Building {
            wr_id,
            flags,
            op,
            payload: Payload::Sges(Vec::new()),
            to: None,
        });
    }

    /// The request the setters apply to: the last one opened.
    fn last(&mut self) -> Option<&mut Building> {
        if self.wrs.is_empty() {
            self.fail(libc::EINVAL);
        }
        self.wrs.last_mut()
    }

    /// Sets the last request's payload.
    fn set_payload(&mut self, payload: Payload) {
        if let Some(b) = self.last() {
            b.payload = payload;
        }
    }
}

/// Defines a builder: `$name(qp, args…)` opens a request of `$with` made by `$op`.
macro_rules! builder {
    ($(#[$doc:meta])* $name:ident($($arg:ident: $t:ty),*) = $with:ident => $op:expr) => {
        $(#[$doc])*
        unsafe extern "C" fn $name(p: *mut ibv_qp_ex $(, $arg: $t)*) {
            with_batch(p, |q, b| b.open(q, p, abi::$with, $op));
        }
    };
}

builder!(
    /// `ibv_wr_rdma_write`.
    wr_rdma_write(rkey: u32, remote_addr: u64) = IBV_QP_EX_WITH_RDMA_WRITE =>
        SendOp::Write { remote_addr, rkey: Rkey::new(rkey) }
);
builder!(
    /// `ibv_wr_rdma_write_imm` (`imm` in network order, as in `ibv_send_wr`).
    wr_rdma_write_imm(rkey: u32, remote_addr: u64, imm: u32) = IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM =>
        SendOp::WriteWithImm { remote_addr, rkey: Rkey::new(rkey), imm: u32::from_be(imm) }
);
builder!(
    /// `ibv_wr_send`.
    wr_send() = IBV_QP_EX_WITH_SEND => SendOp::Send
);
builder!(
    /// `ibv_wr_send_imm` (`imm` in network order).
    wr_send_imm(imm: u32) = IBV_QP_EX_WITH_SEND_WITH_IMM =>
        SendOp::SendWithImm { imm: u32::from_be(imm) }
);
builder!(
    /// `ibv_wr_send_inv`.
    wr_send_inv(rkey: u32) = IBV_QP_EX_WITH_SEND_WITH_INV =>
        SendOp::SendWithInv { rkey: Rkey::new(rkey) }
);
builder!(
    /// `ibv_wr_rdma_read`.
    wr_rdma_read(rkey: u32, remote_addr: u64) = IBV_QP_EX_WITH_RDMA_READ =>
        SendOp::Read { remote_addr, rkey: Rkey::new(rkey) }
);
builder!(
    /// `ibv_wr_atomic_cmp_swp`.
    wr_atomic_cmp_swp(rkey: u32, remote_addr: u64, compare: u64, swap: u64) =
        IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP =>
        SendOp::CompareSwap { remote_addr, rkey: Rkey::new(rkey), compare, swap }
);
builder!(
    /// `ibv_wr_atomic_fetch_add`.
    wr_atomic_fetch_add(rkey: u32, remote_addr: u64, add: u64) =
        IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD =>
        SendOp::FetchAdd { remote_addr, rkey: Rkey::new(rkey), add }
);

/// Defines a builder or setter this library does not implement: `ibv_wr_complete` then fails
/// with `EOPNOTSUPP`.
macro_rules! unsupported {
    ($($name:ident($($arg:ident: $t:ty),*);)*) => {$(
        #[doc = concat!("`ibv_", stringify!($name), "`: not implemented.")]
        unsafe extern "C" fn $name(p: *mut ibv_qp_ex $(, $arg: $t)*) {
            $(let _ = $arg;)*
            with_batch(p, |_, b| b.fail(libc::EOPNOTSUPP));
        }
    )*};
}

unsupported! {
    wr_bind_mw(mw: *mut c_void, rkey: u32, info: *const c_void);
    wr_local_inv(rkey: u32);
    wr_send_tso(hdr: *mut c_void, hdr_sz: u16, mss: u16);
    wr_set_xrc_srqn(srqn: u32);
    wr_atomic_write(rkey: u32, remote_addr: u64, data: *const c_void);
}

/// `ibv_wr_set_ud_addr`: the last request's destination (UD QPs only).
unsafe extern "C" fn wr_set_ud_addr(p: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    with_batch(p, |q, b| {
        let Some(to) = ud_address(ah, qpn, qkey).filter(|_| q.is_ud()) else {
            return b.fail(libc::EINVAL);
        };
        if let Some(w) = b.last() {
            w.to = Some(to);
        }
    });
}

/// `ibv_wr_set_sge`: the last request's one SGE.
unsafe extern "C" fn wr_set_sge(p: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    let sge = Sge {
        addr,
        length,
        lkey: Lkey::new(lkey),
    };
    with_batch(p, |_, b| b.set_payload(Payload::Sges(vec![sge])));
}

/// `ibv_wr_set_sge_list`: the last request's SGEs, copied now.
unsafe extern "C" fn wr_set_sge_list(p: *mut ibv_qp_ex, n: usize, list: *const ibv_sge) {
    with_batch(p, |q, b| {
        if n > q.max_send_sge() || (n > 0 && list.is_null()) {
            return b.fail(libc::EINVAL);
        }
        let sges = match n {
            0 => Vec::new(),
            // SAFETY: the caller's list of `n` SGEs (checked not NULL, `n` bounded).
            _ => unsafe { std::slice::from_raw_parts(list, n) }
                .iter()
                .map(|s| Sge {
                    addr: s.addr,
                    length: s.length,
                    lkey: Lkey::new(s.lkey),
                })
                .collect(),
        };
        b.set_payload(Payload::Sges(sges));
    });
}

/// Copies the buffers `bufs` (at most `max` bytes in all) into one inline payload; `None` when
/// they are too long or one is NULL.
///
/// # Safety
/// Each buffer must name `length` readable bytes at `addr`.
unsafe fn inline_copy(bufs: &[ibv_data_buf], max: usize) -> Option<Vec<u8>> {
    let total = bufs
        .iter()
        .try_fold(0usize, |t, d| t.checked_add(d.length))?;
    if total > max {
        return None;
    }
    let mut data = Vec::with_capacity(total);
    for d in bufs.iter().filter(|d| d.length > 0) {
        if d.addr.is_null() {
            return None;
        }
        // SAFETY: this function's contract (the buffer's bytes are readable, bounded above).
        data.extend_from_slice(unsafe {
            std::slice::from_raw_parts(d.addr.cast::<u8>(), d.length)
        });
    }
    Some(data)
}

/// `ibv_wr_set_inline_data`: the last request carries these bytes, copied now.
unsafe extern "C" fn wr_set_inline_data(p: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    with_batch(p, |q, b| {
        let buf = [ibv_data_buf { addr, length }];
        // SAFETY: the caller's buffer of `length` readable bytes.
        match unsafe { inline_copy(&buf, q.max_inline()) } {
            Some(data) => b.set_payload(Payload::Inline(data)),
            None => b.fail(libc::EINVAL),
        }
    });
}

/// `ibv_wr_set_inline_data_list`: as [`wr_set_inline_data`], the buffers one after another.
unsafe extern "C" fn wr_set_inline_data_list(
    p: *mut ibv_qp_ex,
    n: usize,
    list: *const ibv_data_buf,
) {
    with_batch(p, |q, b| {
        if n > 0 && list.is_null() {
            return b.fail(libc::EINVAL);
        }
        let bufs = match n {
            0 => &[][..],
            // SAFETY: the caller's list of `n` buffers (checked not NULL).
            _ => unsafe { std::slice::from_raw_parts(list, n) },
        };
        // SAFETY: each of the caller's buffers names `length` readable bytes.
        match unsafe { inline_copy(bufs, q.max_inline()) } {
            Some(data) => b.set_payload(Payload::Inline(data)),
            None => b.fail(libc::EINVAL),
        }
    });
}

/// `ibv_wr_start`: an empty batch (dropping one left open).
unsafe extern "C" fn wr_start(p: *mut ibv_qp_ex) {
    with_batch(p, |_, b| *b = Batch::default());
}

/// `ibv_wr_abort`: drops the batch.
unsafe extern "C" fn wr_abort(p: *mut ibv_qp_ex) {
    with_batch(p, |_, b| *b = Batch::default());
}

/// `ibv_wr_complete`: posts the batch, in order; the first error (of a builder or setter, or of
/// a request's checks) posts nothing and is returned. See the module docs for a queue that
/// fills part-way.
unsafe extern "C" fn wr_complete(p: *mut ibv_qp_ex) -> c_int {
    guard(libc::EIO, || {
        let Some(q) = qp(p.cast::<ibv_qp>()).filter(|q| q.send_ops.is_some()) else {
            return libc::EINVAL;
        };
        let batch = std::mem::take(&mut *lock(&q.batch));
        if let Some(e) = batch.error {
            return e;
        }
        let mut reqs = Vec::with_capacity(batch.wrs.len());
        for w in batch.wrs {
            // SAFETY: the `ibv_wr_*` contract: the SGEs of a request flagged IBV_SEND_INLINE
            // name readable memory until it is posted, here.
            match unsafe { q.request(w.wr_id, w.op, w.flags, w.payload, w.to) } {
                Ok(r) => reqs.push(r),
                Err(e) => return e,
            }
        }
        for (r, to) in reqs {
            if let Err(e) = q.post(r, to) {
                return e;
            }
        }
        0
    })
}
