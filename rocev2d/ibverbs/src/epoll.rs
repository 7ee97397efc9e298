//! The epoll sets behind the descriptors a program waits on: a completion channel's `fd` (its
//! CQs' wake-ups) and a context's `async_fd` (its SRQs' limit wake-ups). Each member carries
//! the pointer of the object it wakes for; a wait returns the pointer of one readable member.
//!
//! Deviations: none.

use core::ffi::c_int;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A new, empty epoll set.
///
/// # Errors
/// `epoll_create1`'s `errno`.
pub fn create() -> Result<OwnedFd, c_int> {
    // SAFETY: epoll_create1 takes no pointers; a non-negative result is ours.
    let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: just created, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn last_errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Adds (`EPOLL_CTL_ADD`) or removes (`EPOLL_CTL_DEL`) `fd` to the set `epoll`,
/// readable-level, carrying `data`.
///
/// # Errors
/// `epoll_ctl`'s `errno`.
pub fn ctl<T>(epoll: &OwnedFd, op: c_int, fd: RawFd, data: *mut T) -> Result<(), c_int> {
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: data as u64,
    };
    // SAFETY: both descriptors are live; `ev` is a live local the kernel only reads.
    if unsafe { libc::epoll_ctl(epoll.as_raw_fd(), op, fd, &mut ev) } < 0 {
        return Err(last_errno());
    }
    Ok(())
}

/// The pointer a readable member of `epoll` carries: waits for one, calling `sleeping` before
/// a blocking wait, unless the descriptor is non-blocking (then `EAGAIN` at once when none
/// is readable), as a `read` of libibverbs' descriptor would. A signal ends the wait with
/// `EINTR`, as it ends that `read`: programs such as qperf end a timed loop blocked here with
/// `SIGALRM`, and a wait that carried on would never return to them.
///
/// # Errors
/// `EAGAIN`; `EINTR`; `EIO` when the wait fails otherwise.
pub fn next<T>(epoll: &OwnedFd, sleeping: impl Fn()) -> Result<*mut T, c_int> {
    let fd = epoll.as_raw_fd();
    // SAFETY: F_GETFL takes no pointer.
    let nonblocking = unsafe { libc::fcntl(fd, libc::F_GETFL) } & libc::O_NONBLOCK != 0;
    let timeout = if nonblocking {
        0
    } else {
        sleeping();
        -1
    };
    let mut ev = libc::epoll_event { events: 0, u64: 0 };
    // SAFETY: a live epoll descriptor; room for one event in a live local.
    match unsafe { libc::epoll_wait(fd, &mut ev, 1, timeout) } {
        1.. => Ok(ev.u64 as usize as *mut T),
        0 => Err(libc::EAGAIN),
        _ => match last_errno() {
            libc::EINTR => Err(libc::EINTR),
            _ => Err(libc::EIO),
        },
    }
}
