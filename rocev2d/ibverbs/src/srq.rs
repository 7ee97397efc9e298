//! Shared receive queues: `ibv_create_srq`, `ibv_modify_srq`, `ibv_query_srq`,
//! `ibv_destroy_srq` and the `post_srq_recv` entry of the context's ops table, which verbs.h's
//! inline `ibv_post_srq_recv` calls; on the device's SRQs ([`rocev2::Device::create_srq`]).
//!
//! A QP created with `ibv_qp_init_attr.srq` takes its receive requests from the SRQ, in posting
//! order, and its receive completions name it in `ibv_wc.qp_num`. Each SRQ's limit wake-up
//! ([`rocev2::Device::srq_event_fd`]) is a member of its context's `async_fd` epoll set, so
//! `ibv_get_async_event` reports `IBV_EVENT_SRQ_LIMIT_REACHED` once the armed limit
//! (`ibv_modify_srq` with `IBV_SRQ_LIMIT`) is reached.
//!
//! Deviations: basic SRQs only (verbs.h's inline `ibv_create_srq_ex` passes a basic one to
//! `ibv_create_srq` and finds no extended op for XRC or tag matching: `EOPNOTSUPP`); `ibv_create_srq` ignores `srq_limit`, as verbs says it may, and arms nothing.

use crate::abi::{self, ibv_pd, ibv_recv_wr, ibv_srq, ibv_srq_attr, ibv_srq_init_attr};
use crate::context::{MAX_QP_WR, MAX_SGE, context};
use crate::engine::Engine;
use crate::epoll;
use crate::handle::{self, Kind, guard, null_with};
use crate::mr::pd;
use core::ffi::c_int;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

/// A shared receive queue: `ibv_srq` first, so its pointer is the handle.
#[repr(C)]
pub struct Srq {
    /// What the caller sees.
    pub ibv: ibv_srq,
    srq: rocev2::Srq,
    max_sge: u32,
    engine: Arc<Engine>,
    /// Its limit wake-up, a member of the context's `async_fd` set.
    event: OwnedFd,
}

/// The SRQ behind `p`, if it is a live one.
pub fn srq<'a>(p: *const ibv_srq) -> Option<&'a Srq> {
    // SAFETY: a registered Srq stays valid until ibv_destroy_srq unregisters it.
    handle::check(p, Kind::Srq).then(|| unsafe { &*p.cast::<Srq>() })
}

impl Srq {
    /// The device's SRQ.
    pub fn device_srq(&self) -> rocev2::Srq {
        self.srq
    }

    /// Takes its limit event: whether one was waiting.
    pub fn limit_reached(&self) -> bool {
        self.engine.srq_limit_reached(self.srq).unwrap_or(false)
    }
}

#[unsafe(no_mangle)]
/// `ibv_create_srq(3)`: writes the capacity and SGE count it got back into `init.attr`.
pub extern "C" fn ibv_create_srq(p: *mut ibv_pd, init: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    guard(std::ptr::null_mut(), || {
        let (Some(d), false) = (pd(p), init.is_null()) else {
            return null_with(libc::EINVAL);
        };
        let Some(cx) = context(d.ibv.context) else {
            return null_with(libc::EINVAL);
        };
        // SAFETY: the caller passes a readable and writable init attr (checked not NULL).
        let init = unsafe { &mut *init };
        if init.attr.max_wr > MAX_QP_WR || init.attr.max_sge > MAX_SGE {
            return null_with(libc::EINVAL);
        }
        let (max_wr, max_sge) = (init.attr.max_wr.max(1), init.attr.max_sge.max(1));
        let dev = &d.engine;
        let made = dev.create_srq(d.pd, max_wr, max_sge).and_then(|s| {
            dev.srq_event_fd(s)
                .map(|fd| (s, fd))
                .inspect_err(|_| drop(dev.destroy_srq(s)))
        });
        let (dev_srq, event) = match made {
            Ok(m) => m,
            Err(e) => return null_with(crate::errno(&e)),
        };
        let fd = event.as_raw_fd();
        let s = Box::into_raw(Box::new(Srq {
            ibv: ibv_srq {
                context: d.ibv.context,
                srq_context: init.srq_context,
                pd: p,
                handle: dev_srq.id().0,
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                cond: libc::PTHREAD_COND_INITIALIZER,
                events_completed: 0,
            },
            srq: dev_srq,
            max_sge,
            engine: Arc::clone(dev),
            event,
        }))
        .cast::<ibv_srq>();
        if let Err(e) = epoll::ctl(&cx.async_fd, libc::EPOLL_CTL_ADD, fd, s) {
            // SAFETY: made above by Box::into_raw and never handed out.
            let s = unsafe { Box::from_raw(s.cast::<Srq>()) };
            let _ = s.engine.destroy_srq(s.srq);
            return null_with(e);
        }
        init.attr.max_wr = max_wr;
        init.attr.max_sge = max_sge;
        handle::register(s, Kind::Srq);
        s
    })
}

#[unsafe(no_mangle)]
/// `ibv_modify_srq(3)`: `IBV_SRQ_MAX_WR` (a capacity not below what it holds) and
/// `IBV_SRQ_LIMIT` (a limit to arm, 0 disarms).
pub extern "C" fn ibv_modify_srq(p: *mut ibv_srq, attr: *mut ibv_srq_attr, mask: c_int) -> c_int {
    guard(libc::EIO, || {
        let (Some(s), false) = (srq(p), attr.is_null()) else {
            return libc::EINVAL;
        };
        if mask & !(abi::IBV_SRQ_MAX_WR | abi::IBV_SRQ_LIMIT) != 0 {
            return libc::EINVAL;
        }
        // SAFETY: the caller passes a readable attr (checked not NULL).
        let attr = unsafe { &*attr };
        let max_wr = (mask & abi::IBV_SRQ_MAX_WR != 0).then_some(attr.max_wr);
        if max_wr.is_some_and(|n| n > MAX_QP_WR) {
            return libc::EINVAL;
        }
        let limit = (mask & abi::IBV_SRQ_LIMIT != 0).then_some(attr.srq_limit);
        match s.engine.modify_srq(s.srq, max_wr, limit) {
            Ok(()) => 0,
            Err(e) => crate::errno(&e),
        }
    })
}

#[unsafe(no_mangle)]
/// `ibv_query_srq(3)`: capacity, SGEs per request and the armed limit (0: none).
pub extern "C" fn ibv_query_srq(p: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    guard(libc::EIO, || {
        let (Some(s), false) = (srq(p), attr.is_null()) else {
            return libc::EINVAL;
        };
        let a = match s.engine.query_srq(s.srq) {
            Ok(a) => a,
            Err(e) => return crate::errno(&e),
        };
        // SAFETY: the caller passes a writable attr (checked not NULL).
        unsafe {
            attr.write(ibv_srq_attr {
                max_wr: a.max_wr,
                max_sge: a.max_sge,
                srq_limit: a.limit,
            })
        };
        0
    })
}

#[unsafe(no_mangle)]
/// `ibv_destroy_srq(3)`: `EBUSY` while a QP takes from it.
pub extern "C" fn ibv_destroy_srq(p: *mut ibv_srq) -> c_int {
    guard(libc::EIO, || {
        let Some(s) = srq(p) else {
            return libc::EINVAL;
        };
        if let Err(e) = s.engine.destroy_srq(s.srq) {
            return crate::errno(&e);
        }
        if let Some(cx) = context(s.ibv.context) {
            let _ = epoll::ctl(&cx.async_fd, libc::EPOLL_CTL_DEL, s.event.as_raw_fd(), p);
        }
        handle::unregister(p, Kind::Srq);
        // SAFETY: was registered, made by Box::into_raw, now unregistered.
        drop(unsafe { Box::from_raw(p.cast::<Srq>()) });
        0
    })
}

/// `ibv_context_ops.post_srq_recv`.
pub(crate) unsafe extern "C" fn post_srq_recv(
    p: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    guard(libc::EIO, || {
        let Some(s) = srq(p) else {
            return libc::EINVAL;
        };
        crate::qp::post_recv_chain(wr, bad, s.max_sge, |r| s.engine.post_srq_recv(s.srq, r))
    })
}

/// Counts an acknowledged limit event of SRQ `p` (`ibv_ack_async_event`).
pub(crate) fn ack_event(p: *mut ibv_srq) {
    if srq(p).is_some() {
        // SAFETY: a live SRQ (checked); the counter is ours to keep, as libibverbs does.
        unsafe { (*p).events_completed = (*p).events_completed.wrapping_add(1) };
    }
}
