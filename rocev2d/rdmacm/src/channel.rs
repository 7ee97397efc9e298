//! Event channels: `rdma_create_event_channel`, `rdma_destroy_event_channel`,
//! `rdma_get_cm_event`, `rdma_ack_cm_event`, `rdma_event_str`.
//!
//! A channel's `fd` is an eventfd in semaphore mode, counting its queued events: it is
//! readable exactly while events wait, so programs may `poll` it, and `rdma_get_cm_event`
//! blocks in `read` on it (or fails with `EAGAIN` if the program made it non-blocking).

use crate::abi::{self, rdma_cm_event, rdma_event_channel};
use crate::state::{Chan, Ev, lock};
use crate::{call, call_or};
use core::ffi::{c_char, c_int};
use std::collections::VecDeque;

/// Makes a channel; its address is the handle.
///
/// # Errors
/// The `errno` of `eventfd`.
pub fn new_channel() -> Result<*mut rdma_event_channel, c_int> {
    // SAFETY: plain syscall.
    let fd = unsafe { libc::eventfd(0, libc::EFD_SEMAPHORE | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(crate::errno());
    }
    let ch = Box::into_raw(Box::new(rdma_event_channel { fd }));
    lock().channels.insert(
        ch as usize,
        Chan {
            fd,
            queue: VecDeque::new(),
        },
    );
    Ok(ch)
}

/// Frees channel `ch`: its queued events are dropped; events handed out stay valid until
/// acknowledged.
///
/// # Errors
/// `EINVAL` for a channel that is not live.
pub fn free_channel(ch: *mut rdma_event_channel) -> Result<(), c_int> {
    let c = lock().channels.remove(&(ch as usize)).ok_or(libc::EINVAL)?;
    // SAFETY: the channel's own eventfd, closed once (it left the table).
    unsafe { libc::close(c.fd) };
    // SAFETY: made by Box::into_raw in new_channel, now out of the table.
    drop(unsafe { Box::from_raw(ch) });
    Ok(())
}

/// Takes the next event of channel `ch`, waiting as its fd's blocking mode says. A signal
/// ends the wait with `EINTR`, as it ends librdmacm's `read` (unless the handler asked for
/// `SA_RESTART`): a program may end a blocked wait that way.
///
/// # Errors
/// `EINVAL` for a channel that is not live; `read`'s (`EAGAIN` when non-blocking, `EINTR`).
pub fn take(ch: *mut rdma_event_channel) -> Result<*mut rdma_cm_event, c_int> {
    let fd = lock().channels.get(&(ch as usize)).ok_or(libc::EINVAL)?.fd;
    loop {
        let mut count = 0u64;
        // SAFETY: the channel's eventfd and 8 writable bytes.
        let n = unsafe { libc::read(fd, (&raw mut count).cast(), 8) };
        if n != 8 {
            return Err(crate::errno());
        }
        let mut st = lock();
        let Some(c) = st.channels.get_mut(&(ch as usize)) else {
            return Err(libc::EINVAL);
        };
        // One count per queued event: the read took this one's.
        let Some(ev) = c.queue.pop_front() else {
            continue;
        };
        if !st.current(&ev) {
            continue;
        }
        let p = Box::into_raw(ev);
        st.events.insert(p as usize);
        return Ok(p.cast::<rdma_cm_event>());
    }
}

/// Frees an event handed out by [`take`].
///
/// # Errors
/// `EINVAL` for one that is not handed out (foreign, or acknowledged already).
pub fn ack(ev: *mut rdma_cm_event) -> Result<(), c_int> {
    if !lock().events.remove(&(ev as usize)) {
        return Err(libc::EINVAL);
    }
    // SAFETY: made by Box::into_raw in `take` (`rdma_cm_event` first in `Ev`), now out of
    // the table.
    drop(unsafe { Box::from_raw(ev.cast::<Ev>()) });
    Ok(())
}

#[unsafe(no_mangle)]
/// `rdma_create_event_channel(3)`: fails with `ENODEV` when no device (or no verbs library
/// serving the CM interface) is there, as librdmacm does without devices.
pub extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    call_or(std::ptr::null_mut(), || {
        crate::device::devices()?;
        new_channel()
    })
}

#[unsafe(no_mangle)]
/// `rdma_destroy_event_channel(3)`.
pub extern "C" fn rdma_destroy_event_channel(ch: *mut rdma_event_channel) {
    call(|| free_channel(ch));
}

#[unsafe(no_mangle)]
/// `rdma_get_cm_event(3)`.
pub extern "C" fn rdma_get_cm_event(
    ch: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    call(|| {
        if event.is_null() {
            return Err(libc::EINVAL);
        }
        let ev = take(ch)?;
        // SAFETY: non-NULL, the caller's out pointer.
        unsafe { *event = ev };
        Ok(())
    })
}

#[unsafe(no_mangle)]
/// `rdma_ack_cm_event(3)`.
pub extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    call(|| ack(event))
}

#[unsafe(no_mangle)]
/// `rdma_event_str(3)`.
pub extern "C" fn rdma_event_str(event: c_int) -> *const c_char {
    let s: &'static core::ffi::CStr = match event {
        abi::RDMA_CM_EVENT_ADDR_RESOLVED => c"RDMA_CM_EVENT_ADDR_RESOLVED",
        abi::RDMA_CM_EVENT_ADDR_ERROR => c"RDMA_CM_EVENT_ADDR_ERROR",
        abi::RDMA_CM_EVENT_ROUTE_RESOLVED => c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        abi::RDMA_CM_EVENT_ROUTE_ERROR => c"RDMA_CM_EVENT_ROUTE_ERROR",
        abi::RDMA_CM_EVENT_CONNECT_REQUEST => c"RDMA_CM_EVENT_CONNECT_REQUEST",
        abi::RDMA_CM_EVENT_CONNECT_RESPONSE => c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        abi::RDMA_CM_EVENT_CONNECT_ERROR => c"RDMA_CM_EVENT_CONNECT_ERROR",
        abi::RDMA_CM_EVENT_UNREACHABLE => c"RDMA_CM_EVENT_UNREACHABLE",
        abi::RDMA_CM_EVENT_REJECTED => c"RDMA_CM_EVENT_REJECTED",
        abi::RDMA_CM_EVENT_ESTABLISHED => c"RDMA_CM_EVENT_ESTABLISHED",
        abi::RDMA_CM_EVENT_DISCONNECTED => c"RDMA_CM_EVENT_DISCONNECTED",
        abi::RDMA_CM_EVENT_DEVICE_REMOVAL => c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        abi::RDMA_CM_EVENT_MULTICAST_JOIN => c"RDMA_CM_EVENT_MULTICAST_JOIN",
        abi::RDMA_CM_EVENT_MULTICAST_ERROR => c"RDMA_CM_EVENT_MULTICAST_ERROR",
        abi::RDMA_CM_EVENT_ADDR_CHANGE => c"RDMA_CM_EVENT_ADDR_CHANGE",
        abi::RDMA_CM_EVENT_TIMEWAIT_EXIT => c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
        _ => c"UNKNOWN EVENT",
    };
    s.as_ptr()
}
