//! Wake-ups between the two processes: the doorbell an application rings after posting, and
//! the eventfd the daemon signals after completing.
//!
//! The doorbell is one end of a datagram socket pair, not an eventfd, because a send on it
//! fails at once (`ECONNREFUSED`) when the daemon is gone: posting then reports the daemon's
//! death instead of queueing work nobody will do. A full doorbell (`EAGAIN`) means the daemon
//! has wake-ups pending already, which is as good as ringing.
//!
//! Deviations: none.

use rustix::event::EventfdFlags;
use std::io::ErrorKind;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixDatagram;

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

/// A doorbell pair: the daemon keeps the first, the application gets the second.
///
/// # Errors
/// `socketpair` failed.
pub fn doorbell_pair() -> std::io::Result<(UnixDatagram, UnixDatagram)> {
    let (a, b) = UnixDatagram::pair()?;
    a.set_nonblocking(true)?;
    b.set_nonblocking(true)?;
    Ok((a, b))
}

/// Rings the doorbell.
///
/// # Errors
/// The daemon's end is closed (`ECONNREFUSED`), or another socket error.
pub fn ring(bell: &UnixDatagram) -> std::io::Result<()> {
    match bell.send(&[1]) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(()),
        Err(e) => Err(e),
    }
}

/// Takes every pending ring off the daemon's end; true if there was one.
pub fn drain(bell: &UnixDatagram) -> bool {
    let mut any = false;
    let mut b = [0u8; 16];
    while bell.recv(&mut b).is_ok() {
        any = true;
    }
    any
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_doorbell_reports_the_daemons_death() {
        let (daemon, app) = doorbell_pair().unwrap();
        ring(&app).unwrap();
        assert!(drain(&daemon));
        assert!(!drain(&daemon));
        // More rings than the socket buffers are still fine.
        for _ in 0..100_000 {
            ring(&app).unwrap();
        }
        drop(daemon);
        assert!(ring(&app).is_err());
    }

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
