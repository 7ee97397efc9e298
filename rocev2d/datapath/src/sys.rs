//! Thin, checked wrappers over the few system calls the datapaths need that `socket2` does not
//! offer: integer socket options, `recvmmsg` and `sendmmsg` bookkeeping, control-message walking,
//! `ppoll` and a small epoll set. Every `unsafe` block of the crate that is not specific to one
//! datapath lives here, each with its `// SAFETY:` argument.
//!
//! Deviations: none.

use rocev2_core::time::Duration;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// `UDP_SEGMENT` (`SOL_UDP`, linux/udp.h): the send's payload is cut into datagrams of this
/// many bytes (GSO). Not in every libc target of the `libc` crate.
pub(crate) const UDP_SEGMENT: libc::c_int = 103;
/// `UDP_GRO` (`SOL_UDP`, linux/udp.h): the socket takes coalesced buffers; each `recvmsg`
/// reports the segment size in a control message of this type.
pub(crate) const UDP_GRO: libc::c_int = 104;

/// `setsockopt(fd, level, name, &val, sizeof(int))`.
pub(crate) fn setsockopt_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    val: libc::c_int,
) -> io::Result<()> {
    setsockopt(fd, level, name, &val)
}

/// `setsockopt` with any plain-old-data value.
pub(crate) fn setsockopt<T: Copy>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    val: &T,
) -> io::Result<()> {
    // SAFETY: `val` points to a live `T` of exactly the length passed; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (val as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `getsockopt` into a plain-old-data value (e.g. `tpacket_stats`), starting from `init`.
pub(crate) fn getsockopt<T: Copy>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    init: T,
) -> io::Result<T> {
    let mut val = init;
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `val` is a live, writable `T` and `len` its size; the kernel writes at most `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut val as *mut T).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(val)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Attaches a classic BPF socket filter (`SO_ATTACH_FILTER`).
pub(crate) fn attach_filter(fd: BorrowedFd<'_>, prog: &[libc::sock_filter]) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        len: u16::try_from(prog.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?,
        // The kernel copies the program and never writes through this pointer.
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog)
}

/// A control-message buffer for one datagram, aligned for `cmsghdr`.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub(crate) struct Cmsg(pub [u8; 128]);

impl Default for Cmsg {
    fn default() -> Self {
        Cmsg([0; 128])
    }
}

/// One control message: level, type and data.
pub(crate) struct CmsgRef<'a> {
    pub level: libc::c_int,
    pub kind: libc::c_int,
    pub data: &'a [u8],
}

/// Walks the control messages the kernel wrote into `buf[..len]`, bounds-checked by hand
/// (rather than with `CMSG_NXTHDR`) so a bad length can never read outside the buffer.
pub(crate) fn cmsgs(buf: &[u8], len: usize) -> impl Iterator<Item = CmsgRef<'_>> {
    let buf = &buf[..len.min(buf.len())];
    let hdr = std::mem::size_of::<libc::cmsghdr>();
    let align = std::mem::size_of::<usize>();
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let head = buf.get(at..at.checked_add(hdr)?)?;
        // cmsghdr is { size_t cmsg_len; int cmsg_level; int cmsg_type; } on Linux.
        let clen = usize::from_ne_bytes(head.get(..align)?.try_into().ok()?);
        let level = libc::c_int::from_ne_bytes(head.get(align..align + 4)?.try_into().ok()?);
        let kind = libc::c_int::from_ne_bytes(head.get(align + 4..align + 8)?.try_into().ok()?);
        if clen < hdr {
            return None;
        }
        let data = buf.get(at + hdr..at.checked_add(clen)?)?;
        at = at.checked_add(clen.div_ceil(align) * align)?;
        Some(CmsgRef { level, kind, data })
    })
}

/// Appends one control message to `buf` at `*at`; returns `false` if it does not fit.
pub(crate) fn push_cmsg(
    buf: &mut [u8],
    at: &mut usize,
    level: libc::c_int,
    kind: libc::c_int,
    data: &[u8],
) -> bool {
    let hdr = std::mem::size_of::<libc::cmsghdr>();
    let align = std::mem::size_of::<usize>();
    let clen = hdr + data.len();
    let space = clen.div_ceil(align) * align;
    let Some(dst) = buf.get_mut(*at..*at + space) else {
        return false;
    };
    dst.fill(0);
    dst[..align].copy_from_slice(&clen.to_ne_bytes());
    dst[align..align + 4].copy_from_slice(&level.to_ne_bytes());
    dst[align + 4..align + 8].copy_from_slice(&kind.to_ne_bytes());
    dst[hdr..clen].copy_from_slice(data);
    *at += space;
    true
}

/// Blocks until one of `fds` is ready or `timeout` passes (`None`: forever). Returns the number
/// of ready descriptors; `EINTR` counts as zero.
pub(crate) fn ppoll(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<usize> {
    let ts = timeout.map(crate::clock::timespec);
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `fds` is a valid slice of pollfd of the given length, `tsp` is null or points to
    // a live timespec, and a null signal mask leaves the mask unchanged.
    let rc = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            tsp,
            std::ptr::null(),
        )
    };
    if rc >= 0 {
        Ok(rc as usize)
    } else {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            Ok(0)
        } else {
            Err(e)
        }
    }
}

/// An epoll set used as one pollable descriptor for a datapath with several sockets.
#[derive(Debug)]
pub(crate) struct Epoll(OwnedFd);

impl Epoll {
    pub(crate) fn new() -> io::Result<Epoll> {
        // SAFETY: plain system call; on success it returns a new descriptor we own.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by epoll_create1 and nothing else owns it.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Watches `fd` for readability (level-triggered).
    pub(crate) fn add_readable(&self, fd: RawFd) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: `ev` is a valid epoll_event; the kernel copies it.
        let rc = unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.0.as_fd()
    }
}

/// True for the errors that mean "try again later" on a non-blocking socket.
pub(crate) fn would_block(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EAGAIN) | Some(libc::ENOBUFS) | Some(libc::EINTR)
    )
}

/// One non-blocking `recvmmsg` into `msgs` with `flags` (plus `MSG_DONTWAIT`): the messages
/// filled, 0 when nothing waits, or the error.
///
/// # Safety
/// Every pointer inside `msgs` (name, iovecs and what they point at, control buffer) must
/// refer to live memory of the length given beside it, writable and not moved or freed until
/// this returns.
pub(crate) unsafe fn recvmmsg(
    fd: RawFd,
    msgs: &mut [libc::mmsghdr],
    flags: libc::c_int,
) -> Result<usize, crate::Error> {
    // SAFETY: the caller vouches for the pointers inside `msgs`; `msgs` itself is a live,
    // writable slice of the length passed.
    let r = unsafe {
        libc::recvmmsg(
            fd,
            msgs.as_mut_ptr(),
            msgs.len() as libc::c_uint,
            flags | libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if would_block(&e) {
            Ok(0)
        } else {
            Err(crate::Error::io("recvmmsg", e))
        };
    }
    Ok((r as usize).min(msgs.len()))
}

/// Settles one non-blocking `sendmmsg` (result `r`) over the first `lens.len()` frames of
/// `batch`: counts and consumes what went, and returns how many frames that was, or `None`
/// when the socket is full and the rest must wait. A frame the kernel refuses outright
/// (EMSGSIZE above the path MTU, EINVAL for a source address that is not ours, unreachable)
/// is dropped and counted as `tx_errors`: the core retransmits or fails the request.
pub(crate) fn settle_sendmmsg(
    r: libc::c_int,
    lens: &[usize],
    batch: &mut crate::TxBatch,
    st: &mut crate::DatapathStats,
) -> Option<usize> {
    if r < 0 {
        let e = io::Error::last_os_error();
        if would_block(&e) {
            st.tx_blocked += 1;
            return None;
        }
        tracing::debug!(error = %e, "sendmmsg refused a frame");
        st.tx_errors += 1;
        batch.consume(1);
        return Some(1);
    }
    let sent = (r as usize).min(lens.len());
    st.tx_packets += sent as u64;
    st.tx_bytes += lens[..sent].iter().map(|&b| b as u64).sum::<u64>();
    batch.consume(sent);
    Some(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmsg_roundtrip_and_bounds() {
        let mut buf = [0u8; 128];
        let mut at = 0;
        assert!(push_cmsg(
            &mut buf,
            &mut at,
            libc::IPPROTO_IP,
            libc::IP_TOS,
            &[0x03]
        ));
        assert!(push_cmsg(
            &mut buf,
            &mut at,
            libc::IPPROTO_IP,
            libc::IP_TTL,
            &64i32.to_ne_bytes()
        ));
        let got: Vec<_> = cmsgs(&buf, at)
            .map(|c| (c.level, c.kind, c.data.to_vec()))
            .collect();
        assert_eq!(
            got,
            vec![
                (libc::IPPROTO_IP, libc::IP_TOS, vec![3]),
                (libc::IPPROTO_IP, libc::IP_TTL, 64i32.to_ne_bytes().to_vec())
            ]
        );
        // A length running past the buffer ends the walk instead of reading outside.
        let mut bad = buf;
        bad[..8].copy_from_slice(&1000usize.to_ne_bytes());
        assert_eq!(cmsgs(&bad, at).count(), 0);
        assert_eq!(cmsgs(&buf, 5).count(), 0, "a truncated header is ignored");
        let mut small = [0u8; 8];
        let mut at = 0;
        assert!(!push_cmsg(&mut small, &mut at, 0, 0, &[1]));
    }
}
