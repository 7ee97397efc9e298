//! Completion channels and queues: `ibv_create_comp_channel`, `ibv_create_cq`, the extended
//! `ibv_create_cq_ex` with its poll functions (`ibv_start_poll`, `ibv_next_poll`,
//! `ibv_end_poll`, `ibv_wc_read_*`), `ibv_get_cq_event`, `ibv_ack_cq_events`, and the
//! `poll_cq`/`req_notify_cq` entries of the context's ops table that verbs.h's inline
//! `ibv_poll_cq` and `ibv_req_notify_cq` call. Every CQ begins with an `ibv_cq_ex`, so both
//! ways of polling work on any CQ.
//!
//! A channel's `fd` is an epoll set of its CQs' wake-ups ([`rocev2::Device::cq_event_fd`]):
//! readable while an armed CQ has a completion, so a program may `poll(2)` it as it would
//! libibverbs' channel; `ibv_get_cq_event` waits on it, takes the CQ's event and names the CQ.
//!
//! Deviations: `ibv_resize_cq` fails with `EOPNOTSUPP`; a CQ holds what was asked, rounded up
//! to at least one entry; `solicited_only` arms for every completion, a superset of what
//! verbs promises.

use crate::abi::{self, ibv_comp_channel, ibv_context, ibv_cq, ibv_cq_ex, ibv_wc};
use crate::context::{Context, MAX_CQE, context};
use crate::engine::{Engine, lock};
use crate::epoll;
use crate::handle::{self, Kind, guard, null_with, set_errno};
use core::ffi::{c_int, c_void};
use rocev2_core::cq::WorkCompletion;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

/// A completion channel: `ibv_comp_channel` first, so its pointer is the handle.
#[repr(C)]
pub struct Channel {
    /// What the caller sees (`fd` is `epoll`).
    pub ibv: ibv_comp_channel,
    /// The epoll set of its CQs' wake-ups, each registered with its `ibv_cq` pointer.
    epoll: OwnedFd,
    engine: Arc<Engine>,
}

/// A completion queue: `ibv_cq_ex` (which begins with `ibv_cq`) first, so its pointer is the
/// handle, of either kind.
#[repr(C)]
pub struct Cq {
    /// What the caller sees.
    pub ibv: ibv_cq_ex,
    /// The device's CQ.
    pub cq: rocev2::Cq,
    /// The device.
    pub engine: Arc<Engine>,
    /// The CQ's wake-up, in its channel's epoll set (`None` without a channel).
    event: Option<OwnedFd>,
    /// The completion `ibv_start_poll`/`ibv_next_poll` took, which `ibv_wc_read_*` read.
    current: Mutex<Polled>,
}

/// The extended poll's state: the completion being read, and the buffer it came through.
#[derive(Default)]
struct Polled {
    wc: Option<ibv_wc>,
    buf: Vec<WorkCompletion>,
}

/// The CQ behind `cq`, if it is a live one.
pub fn cq<'a>(cq: *const ibv_cq) -> Option<&'a Cq> {
    // SAFETY: a registered Cq stays valid until ibv_destroy_cq unregisters it.
    handle::check(cq, Kind::Cq).then(|| unsafe { &*cq.cast::<Cq>() })
}

fn channel<'a>(ch: *const ibv_comp_channel) -> Option<&'a Channel> {
    // SAFETY: a registered Channel stays valid until ibv_destroy_comp_channel unregisters it.
    handle::check(ch, Kind::Channel).then(|| unsafe { &*ch.cast::<Channel>() })
}

/// The ops table of every context.
pub fn ops() -> abi::ibv_context_ops {
    abi::ibv_context_ops {
        _slots0: [None; 11],
        poll_cq: Some(poll_cq),
        req_notify_cq: Some(req_notify_cq),
        _slots1: [None; 7],
        post_srq_recv: Some(crate::srq::post_srq_recv),
        _slots2: [None; 4],
        post_send: Some(crate::qp::post_send),
        post_recv: Some(crate::qp::post_recv),
        _slots3: [None; 5],
    }
}

#[unsafe(no_mangle)]
/// `ibv_create_comp_channel(3)`.
pub extern "C" fn ibv_create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel {
    guard(std::ptr::null_mut(), || {
        let Some(cx) = context(ctx) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        let epoll = match epoll::create() {
            Ok(e) => e,
            Err(e) => {
                set_errno(e);
                return std::ptr::null_mut();
            }
        };
        let p = Box::into_raw(Box::new(Channel {
            ibv: ibv_comp_channel {
                context: ctx,
                fd: epoll.as_raw_fd(),
                refcnt: 0,
            },
            epoll,
            engine: Arc::clone(&cx.engine),
        }))
        .cast::<ibv_comp_channel>();
        handle::register(p, Kind::Channel);
        p
    })
}

#[unsafe(no_mangle)]
/// `ibv_destroy_comp_channel(3)`: `EBUSY` while a CQ uses it.
pub extern "C" fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int {
    guard(libc::EIO, || {
        let Some(c) = channel(ch) else {
            return libc::EINVAL;
        };
        if c.ibv.refcnt > 0 {
            return libc::EBUSY;
        }
        handle::unregister(ch, Kind::Channel);
        // SAFETY: was registered, made by Box::into_raw, now unregistered.
        drop(unsafe { Box::from_raw(ch.cast::<Channel>()) });
        0
    })
}

#[unsafe(no_mangle)]
/// `ibv_create_cq(3)`.
pub extern "C" fn ibv_create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    ch: *mut ibv_comp_channel,
    _comp_vector: c_int,
) -> *mut ibv_cq {
    guard(std::ptr::null_mut(), || match u32::try_from(cqe) {
        Ok(n) => create(ctx, n, cq_context, ch).cast(),
        Err(_) => null_with(libc::EINVAL),
    })
}

/// `verbs_context.create_cq_ex` (verbs.h's inline `ibv_create_cq_ex`): a CQ whose completions
/// are also read field by field (`ibv_start_poll` …). The fields of a `struct ibv_wc`
/// (`IBV_WC_STANDARD_FLAGS`) are supported; timestamps, VLAN, flow tag and tag matching, and a
/// parent domain, fail with `EOPNOTSUPP`. The single-threaded and ignore-overrun flags are
/// hints, accepted.
pub(crate) unsafe extern "C" fn create_cq_ex(
    ctx: *mut ibv_context,
    attr: *mut abi::ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    guard(std::ptr::null_mut(), || {
        if attr.is_null() {
            return null_with(libc::EINVAL);
        }
        // SAFETY: the caller passes a readable attr (checked not NULL).
        let a = unsafe { &*attr };
        if a.comp_mask & !abi::IBV_CQ_INIT_ATTR_MASK_FLAGS != 0
            || a.wc_flags & !abi::IBV_WC_STANDARD_FLAGS != 0
        {
            return null_with(libc::EOPNOTSUPP);
        }
        let hints =
            abi::IBV_CREATE_CQ_ATTR_SINGLE_THREADED | abi::IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
        if a.comp_mask & abi::IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 && a.flags & !hints != 0 {
            return null_with(libc::EOPNOTSUPP);
        }
        create(ctx, a.cqe, a.cq_context, a.channel)
    })
}

/// Makes a CQ of at least `cqe` entries (both creation verbs).
fn create(
    ctx: *mut ibv_context,
    cqe: u32,
    cq_context: *mut c_void,
    ch: *mut ibv_comp_channel,
) -> *mut ibv_cq_ex {
    let Some(c): Option<&Context> = context(ctx) else {
        return null_with(libc::EINVAL);
    };
    let chan = match (ch.is_null(), channel(ch)) {
        (true, _) => None,
        (false, Some(c)) => Some(c),
        (false, None) => return null_with(libc::EINVAL),
    };
    if cqe > MAX_CQE {
        return null_with(libc::EINVAL);
    }
    let n = cqe.max(1);
    let made = c.engine.create_cq(n as usize).and_then(|q| {
        let event = chan.map(|_| c.engine.cq_event_fd(q)).transpose();
        event
            .inspect_err(|_| drop(c.engine.destroy_cq(q)))
            .map(|e| (q, e))
    });
    let (dev_cq, event) = match made {
        Ok(m) => m,
        Err(e) => return null_with(crate::errno(&e)),
    };
    let p = Box::into_raw(Box::new(Cq {
        ibv: ibv_cq_ex {
            cq: ibv_cq {
                context: ctx,
                channel: ch,
                cq_context,
                handle: dev_cq.id().0,
                cqe: n as c_int,
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                cond: libc::PTHREAD_COND_INITIALIZER,
                comp_events_completed: 0,
                async_events_completed: 0,
            },
            comp_mask: 0,
            status: 0,
            wr_id: 0,
            start_poll: Some(start_poll),
            next_poll: Some(next_poll),
            end_poll: Some(end_poll),
            read_opcode: Some(read_opcode),
            read_vendor_err: Some(read_vendor_err),
            read_byte_len: Some(read_byte_len),
            read_imm_data: Some(read_imm_data),
            read_qp_num: Some(read_qp_num),
            read_src_qp: Some(read_src_qp),
            read_wc_flags: Some(read_wc_flags),
            read_slid: Some(read_slid),
            read_sl: Some(read_sl),
            read_dlid_path_bits: Some(read_dlid_path_bits),
            _unsupported: [None; 5],
        },
        cq: dev_cq,
        engine: Arc::clone(&c.engine),
        event,
        current: Mutex::default(),
    }));
    if let (Some(chan), Some(ev)) = (chan, unsafe_cq_event(p)) {
        if let Err(e) = epoll::ctl(&chan.epoll, libc::EPOLL_CTL_ADD, ev, p.cast::<ibv_cq>()) {
            // SAFETY: made above by Box::into_raw and never handed out.
            let q = unsafe { Box::from_raw(p) };
            let _ = q.engine.destroy_cq(q.cq);
            return null_with(e);
        }
        // SAFETY: `ch` is a live channel (checked); the refcount is only touched under
        // these verbs, as libibverbs does.
        unsafe { (*ch).refcnt += 1 };
    }
    let p = p.cast::<ibv_cq_ex>();
    handle::register(p, Kind::Cq);
    p
}

/// The wake-up descriptor of the CQ at `p`, which this module just made.
fn unsafe_cq_event(p: *mut Cq) -> Option<RawFd> {
    // SAFETY: `p` is a Cq made by Box::into_raw in `create`, not yet shared.
    unsafe { (*p).event.as_ref().map(AsRawFd::as_raw_fd) }
}

#[unsafe(no_mangle)]
/// `ibv_destroy_cq(3)`: `EBUSY` while a QP completes into it.
pub extern "C" fn ibv_destroy_cq(p: *mut ibv_cq) -> c_int {
    guard(libc::EIO, || {
        let Some(c) = cq(p) else {
            return libc::EINVAL;
        };
        if let Err(e) = c.engine.destroy_cq(c.cq) {
            return crate::errno(&e);
        }
        let ch = c.ibv.cq.channel;
        if let (Some(chan), Some(ev)) = (channel(ch), &c.event) {
            let _ = epoll::ctl(&chan.epoll, libc::EPOLL_CTL_DEL, ev.as_raw_fd(), p);
            // SAFETY: a live channel (checked), as in ibv_create_cq.
            unsafe { (*ch).refcnt -= 1 };
        }
        handle::unregister(p, Kind::Cq);
        // SAFETY: was registered, made by Box::into_raw, now unregistered.
        drop(unsafe { Box::from_raw(p.cast::<Cq>()) });
        0
    })
}

#[unsafe(no_mangle)]
/// `ibv_resize_cq(3)`: not supported.
pub extern "C" fn ibv_resize_cq(_cq: *mut ibv_cq, _cqe: c_int) -> c_int {
    libc::EOPNOTSUPP
}

#[unsafe(no_mangle)]
/// `ibv_get_cq_event(3)`: waits on the channel's fd for the next event (or fails with `EAGAIN`
/// on a non-blocking one).
pub extern "C" fn ibv_get_cq_event(
    ch: *mut ibv_comp_channel,
    out_cq: *mut *mut ibv_cq,
    out_ctx: *mut *mut c_void,
) -> c_int {
    guard(-1, || {
        let Some(c) = channel(ch) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if out_cq.is_null() || out_ctx.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        loop {
            // The program sleeps: the progress thread takes the engine back at once.
            let p = match epoll::next::<ibv_cq>(&c.epoll, || c.engine.hand_back()) {
                Ok(p) => p,
                Err(e) => {
                    set_errno(e);
                    return -1;
                }
            };
            // A CQ destroyed with its event pending left the set with it.
            let Some(q) = cq(p) else { continue };
            q.engine.ack_cq_event(q.cq);
            // SAFETY: both are writable pointers of the caller (checked not NULL).
            unsafe {
                *out_cq = p;
                *out_ctx = q.ibv.cq.cq_context;
            }
            return 0;
        }
    })
}

#[unsafe(no_mangle)]
/// `ibv_ack_cq_events(3)`.
pub extern "C" fn ibv_ack_cq_events(p: *mut ibv_cq, nevents: u32) {
    guard((), || {
        if cq(p).is_some() {
            // SAFETY: a live CQ (checked); the counter is ours to keep, as libibverbs does.
            unsafe {
                (*p).comp_events_completed = (*p).comp_events_completed.wrapping_add(nevents)
            };
        }
    })
}

/// `ibv_context_ops.req_notify_cq`.
unsafe extern "C" fn req_notify_cq(p: *mut ibv_cq, _solicited_only: c_int) -> c_int {
    guard(libc::EIO, || {
        let Some(c) = cq(p) else {
            return libc::EINVAL;
        };
        if c.event.is_none() {
            return libc::EINVAL;
        }
        match c.engine.arm_cq(c.cq) {
            Ok(()) => 0,
            Err(e) => crate::errno(&e),
        }
    })
}

/// `ibv_context_ops.poll_cq`: moves up to `n` completions into `wc`, running one pass of the
/// engine first when the CQ is empty ([`rocev2::Device::poll_cq_driving`]).
unsafe extern "C" fn poll_cq(p: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    guard(-1, || {
        let Some(c) = cq(p) else {
            return -libc::EINVAL;
        };
        let Ok(n) = usize::try_from(n) else {
            return -libc::EINVAL;
        };
        if n == 0 {
            return 0;
        }
        if wc.is_null() {
            return -libc::EINVAL;
        }
        let mut out = Vec::with_capacity(n.min(64));
        if let Err(e) = c.engine.poll_cq_driving(c.cq, &mut out, n) {
            return -crate::errno(&e);
        }
        for (i, w) in out.iter().enumerate() {
            // SAFETY: the caller's array holds `n` entries and `out` has at most `n`.
            unsafe { wc.add(i).write(to_ibv(w)) };
        }
        out.len() as c_int
    })
}

/// A completion as `struct ibv_wc`.
fn to_ibv(w: &WorkCompletion) -> ibv_wc {
    let (imm, mut flags) = match (w.imm_data, w.invalidated_rkey) {
        (Some(i), _) => (i.to_be(), abi::IBV_WC_WITH_IMM),
        (None, Some(k)) => (k, abi::IBV_WC_WITH_INV),
        (None, None) => (0, 0),
    };
    if w.with_grh() {
        flags |= abi::IBV_WC_GRH;
    }
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status as c_int,
        opcode: w.opcode.as_ibv() as c_int,
        vendor_err: 0,
        byte_len: w.byte_len,
        imm_data: imm,
        qp_num: w.qp_num.value(),
        src_qp: w.src_qp.value(),
        wc_flags: flags,
        pkey_index: w.ud.map_or(0, |u| u.pkey_index),
        slid: 0,
        sl: 0,
        dlid_path_bits: 0,
    }
}

/// The extended poll: `ibv_start_poll`, `ibv_next_poll` and `ibv_end_poll` step through the
/// completions one at a time, each taken as `ibv_poll_cq` takes it (running one pass of the
/// engine when the CQ is empty), its status and `wr_id` in the `ibv_cq_ex` and its other
/// fields for `ibv_wc_read_*`.
impl Cq {
    /// Takes the next completion into `p` (this CQ's `ibv_cq_ex`): 0, `ENOENT` when there is
    /// none, or an errno.
    fn advance(&self, p: *mut ibv_cq_ex) -> c_int {
        let mut polled = lock(&self.current);
        let Polled { wc, buf } = &mut *polled;
        buf.clear();
        if let Err(e) = self.engine.poll_cq_driving(self.cq, buf, 1) {
            return crate::errno(&e);
        }
        *wc = buf.pop().map(|w| to_ibv(&w));
        let Some(w) = wc else {
            return libc::ENOENT;
        };
        // SAFETY: `p` is this live CQ (checked by the caller); `status` and `wr_id` are the
        // fields verbs.h's callers read, written only by the thread polling it.
        unsafe {
            (*p).status = w.status;
            (*p).wr_id = w.wr_id;
        }
        0
    }

    /// `f` of the completion being read (a zeroed one before any).
    fn read<T>(&self, f: impl FnOnce(&ibv_wc) -> T) -> T {
        let polled = lock(&self.current);
        f(polled.wc.as_ref().unwrap_or(&EMPTY_WC))
    }
}

/// What `ibv_wc_read_*` read before a completion was taken (a misuse: never a panic).
const EMPTY_WC: ibv_wc = ibv_wc {
    wr_id: 0,
    status: 0,
    opcode: 0,
    vendor_err: 0,
    byte_len: 0,
    imm_data: 0,
    qp_num: 0,
    src_qp: 0,
    wc_flags: 0,
    pkey_index: 0,
    slid: 0,
    sl: 0,
    dlid_path_bits: 0,
};

/// `ibv_cq_ex.start_poll`: the first completion, or `ENOENT`.
unsafe extern "C" fn start_poll(p: *mut ibv_cq_ex, attr: *mut abi::ibv_poll_cq_attr) -> c_int {
    guard(libc::EIO, || {
        let Some(c) = cq(p.cast()) else {
            return libc::EINVAL;
        };
        // SAFETY: the caller passes NULL or a readable attr.
        if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
            return libc::EINVAL;
        }
        c.advance(p)
    })
}

/// `ibv_cq_ex.next_poll`: the next completion, or `ENOENT`.
unsafe extern "C" fn next_poll(p: *mut ibv_cq_ex) -> c_int {
    guard(libc::EIO, || match cq(p.cast()) {
        Some(c) => c.advance(p),
        None => libc::EINVAL,
    })
}

/// `ibv_cq_ex.end_poll`: nothing is held between polls.
unsafe extern "C" fn end_poll(_p: *mut ibv_cq_ex) {}

/// Defines `ibv_cq_ex.read_*` functions, each reading one field of the current completion
/// (0 for a CQ that is not ours).
macro_rules! readers {
    ($($name:ident -> $t:ty = |$w:ident| $e:expr;)*) => {$(
        #[doc = concat!("`ibv_cq_ex.", stringify!($name), "`.")]
        unsafe extern "C" fn $name(p: *mut ibv_cq_ex) -> $t {
            guard(<$t>::default(), || cq(p.cast()).map_or(<$t>::default(), |c| c.read(|$w| $e)))
        }
    )*};
}

readers! {
    read_opcode -> c_int = |w| w.opcode;
    read_vendor_err -> u32 = |w| w.vendor_err;
    read_byte_len -> u32 = |w| w.byte_len;
    read_imm_data -> u32 = |w| w.imm_data;
    read_qp_num -> u32 = |w| w.qp_num;
    read_src_qp -> u32 = |w| w.src_qp;
    read_wc_flags -> core::ffi::c_uint = |w| w.wc_flags;
    read_slid -> u32 = |w| u32::from(w.slid);
    read_sl -> u8 = |w| w.sl;
    read_dlid_path_bits -> u8 = |w| w.dlid_path_bits;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errno() -> i32 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    /// The extended poll and creation refuse what is not a live CQ or context, writing nothing.
    #[test]
    fn extended_cq_functions_refuse_foreign_handles() {
        let mut junk = vec![0xa5u8; 512];
        let j = junk.as_mut_ptr().cast::<ibv_cq_ex>();
        let mut attr = abi::ibv_cq_init_attr_ex {
            cqe: 1,
            cq_context: std::ptr::null_mut(),
            channel: std::ptr::null_mut(),
            comp_vector: 0,
            wc_flags: abi::IBV_WC_STANDARD_FLAGS,
            comp_mask: 0,
            flags: 0,
            parent_domain: std::ptr::null_mut(),
        };
        // SAFETY: each function checks its handle before dereferencing it; `attr` is readable.
        unsafe {
            assert_eq!(start_poll(j, std::ptr::null_mut()), libc::EINVAL);
            assert_eq!(next_poll(j), libc::EINVAL);
            end_poll(j);
            assert_eq!(read_opcode(j), 0);
            assert_eq!(read_byte_len(j), 0);
            assert_eq!(read_wc_flags(j), 0);
            assert!(create_cq_ex(j.cast(), &mut attr).is_null());
            assert_eq!(errno(), libc::EINVAL);
            assert!(create_cq_ex(j.cast(), std::ptr::null_mut()).is_null());
            assert_eq!(errno(), libc::EINVAL);
            // Completion timestamps: refused whatever the context.
            attr.wc_flags |= 1 << 7;
            assert!(create_cq_ex(j.cast(), &mut attr).is_null());
            assert_eq!(errno(), libc::EOPNOTSUPP);
        }
        assert!(junk.iter().all(|b| *b == 0xa5));
    }
}
