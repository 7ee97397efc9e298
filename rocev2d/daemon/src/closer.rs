//! [`Closer`]: the thread that closes descriptors applications sent and the daemon does not
//! keep.
//!
//! Closing a descriptor can block when it is the last reference to its file: a socket with a
//! long `SO_LINGER` that cannot drain, a file on a stalled FUSE mount. A hostile application
//! can send such descriptors with any request, so neither the datapath thread (every
//! application's traffic) nor the control thread (every application's requests) may make
//! that last close. The control thread hands the datapath thread duplicates (whose close is
//! never the last) and gives the originals here, with any the connection left unclaimed.
//!
//! Deviations: none.

use std::os::fd::OwnedFd;
use std::sync::mpsc::{Sender, channel};

/// A handle to the closing thread; cheap to clone.
#[derive(Debug, Clone)]
pub struct Closer(Sender<Vec<OwnedFd>>);

impl Closer {
    /// Starts the thread.
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub fn start() -> std::io::Result<Closer> {
        let (tx, rx) = channel::<Vec<OwnedFd>>();
        std::thread::Builder::new()
            .name("rocev2d-closer".into())
            .spawn(move || {
                for fds in rx {
                    drop(fds);
                }
            })?;
        Ok(Closer(tx))
    }

    /// Closes `fds` on the closing thread (here, if it is gone: the daemon is stopping).
    pub fn close(&self, fds: Vec<OwnedFd>) {
        if !fds.is_empty() {
            let _ = self.0.send(fds);
        }
    }

    /// Keeps `fds` until the guard drops, then closes them on the closing thread; meanwhile
    /// [`Held::dup`] lends duplicates, whose close is never the last while the guard lives.
    pub fn hold(&self, fds: Vec<OwnedFd>) -> Held {
        Held {
            fds,
            closer: self.clone(),
        }
    }
}

/// Descriptors kept until dropped, then closed on the closing thread ([`Closer::hold`]).
#[derive(Debug)]
pub struct Held {
    fds: Vec<OwnedFd>,
    closer: Closer,
}

impl Held {
    /// Duplicates of the descriptors, to hand on.
    ///
    /// # Errors
    /// `dup` failed (the process is out of descriptors).
    pub fn dup(&self) -> std::io::Result<Vec<OwnedFd>> {
        self.fds.iter().map(OwnedFd::try_clone).collect()
    }

    /// The descriptors, to look at.
    pub fn fds(&self) -> &[OwnedFd] {
        &self.fds
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.closer.close(std::mem::take(&mut self.fds));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn descriptors_are_closed_on_the_closing_thread() {
        let c = Closer::start().unwrap();
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let raw = a.as_raw_fd();
        c.close(vec![a.into()]);
        // Once closed, the peer reads the end of the stream.
        let mut buf = [0u8; 1];
        b.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        assert_eq!(
            std::io::Read::read(&mut &b, &mut buf).unwrap(),
            0,
            "fd {raw} closed"
        );
    }
}
