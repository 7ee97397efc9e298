//! Wake-ups between the two processes: the doorbell an application rings after posting, and
//! the eventfd the daemon signals after completing. Both are eventfds ([`EventFd`]).
//!
//! The doorbell is an eventfd rather than a socket because a socket can carry descriptors: a
//! hostile application could send some with each ring, and the daemon's thread that drains
//! the doorbell would then be the one closing them (a close that may block, for a socket with
//! a long `SO_LINGER` or a FUSE file). A ring on a dead daemon's doorbell is not refused; the
//! application learns of the death from its control socket, which every wait watches.
//!
//! Deviations: none.

use rustix::event::EventfdFlags;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// A counter another process can wait on (`eventfd(2)`, non-blocking).
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A new one at zero.
    ///
    /// # Errors
    /// `eventfd` failed.
    pub fn new() -> std::io::Result<EventFd> {
        Ok(EventFd(rustix::event::eventfd(
            0,
            EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK,
        )?))
    }

    /// Wraps one received from the other process.
    pub fn from_fd(fd: OwnedFd) -> EventFd {
        EventFd(fd)
    }

    /// A descriptor of the same eventfd, to hand to the other process.
    ///
    /// # Errors
    /// `dup` failed.
    pub fn share(&self) -> std::io::Result<OwnedFd> {
        self.0.try_clone()
    }

    /// Makes it readable.
    pub fn signal(&self) {
        // Only fails when the counter would overflow, i.e. it is readable already.
        let _ = rustix::io::write(&self.0, &1u64.to_ne_bytes());
    }

    /// Resets it; true if it was signalled.
    pub fn clear(&self) -> bool {
        let mut v = [0u8; 8];
        rustix::io::read(&self.0, &mut v).is_ok_and(|n| n == 8)
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_eventfd_counts_signals_until_cleared() {
        let e = EventFd::new().unwrap();
        assert!(!e.clear());
        e.signal();
        e.signal();
        assert!(e.clear());
        assert!(!e.clear());
    }
}
