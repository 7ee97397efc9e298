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
//! While one close blocks, the others wait behind it, each still a descriptor of the daemon's.
//! So each connection has its own [`Closer`] (from [`Closer::for_connection`]) counting its
//! descriptors on their way here, and the control plane stops reading a connection while
//! [`MAX_CLOSING`] of them wait ([`Closer::below_limit`]): what more it sends stays in its
//! socket, charged to the sender.
//!
//! Deviations: none.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::time::Duration;

/// Descriptors of one connection that may wait for the closing thread before the control
/// plane stops reading the connection.
pub const MAX_CLOSING: usize = 64;

/// A handle to the closing thread, counting the descriptors it gave there that are not closed
/// yet; cheap to clone (clones share the count).
#[derive(Debug, Clone)]
pub struct Closer {
    tx: Sender<(Vec<OwnedFd>, Arc<AtomicUsize>)>,
    closing: Arc<AtomicUsize>,
}

impl Closer {
    /// Starts the thread.
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub fn start() -> std::io::Result<Closer> {
        let (tx, rx) = channel::<(Vec<OwnedFd>, Arc<AtomicUsize>)>();
        std::thread::Builder::new()
            .name("rocev2d-closer".into())
            .spawn(move || {
                for (fds, closing) in rx {
                    let n = fds.len();
                    drop(fds);
                    closing.fetch_sub(n, Ordering::Relaxed);
                }
            })?;
        Ok(Closer {
            tx,
            closing: Arc::default(),
        })
    }

    /// A handle to the same thread with a count of its own, for one connection.
    #[must_use]
    pub fn for_connection(&self) -> Closer {
        Closer {
            tx: self.tx.clone(),
            closing: Arc::default(),
        }
    }

    /// Descriptors given to the thread through this handle (and its clones) not closed yet.
    pub fn closing(&self) -> usize {
        self.closing.load(Ordering::Relaxed)
    }

    /// Returns once fewer than [`MAX_CLOSING`] of this handle's descriptors wait: a close that
    /// blocks holds back only the connection whose descriptors queue behind it.
    pub async fn below_limit(&self) {
        while self.closing() >= MAX_CLOSING {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Closes `fds` on the closing thread (here, if it is gone: the daemon is stopping).
    pub fn close(&self, fds: Vec<OwnedFd>) {
        if !fds.is_empty() {
            self.closing.fetch_add(fds.len(), Ordering::Relaxed);
            if let Err(back) = self.tx.send((fds, Arc::clone(&self.closing))) {
                let (fds, closing) = back.0;
                closing.fetch_sub(fds.len(), Ordering::Relaxed);
            }
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

    /// A TCP connection over loopback whose receiver (returned second) never reads, the
    /// sender's buffer full and its linger a minute: the sender's last close blocks until the
    /// receiver goes (its close resets the connection).
    fn lingering() -> (OwnedFd, std::net::TcpStream) {
        use rustix::net::sockopt;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        sockopt::set_socket_recv_buffer_size(&l, 4096).unwrap();
        let tx = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (rx, _) = l.accept().unwrap();
        sockopt::set_socket_send_buffer_size(&tx, 4096).unwrap();
        tx.set_nonblocking(true).unwrap();
        while std::io::Write::write(&mut &tx, &[0u8; 4096]).is_ok() {}
        sockopt::set_socket_linger(&tx, Some(Duration::from_secs(60))).unwrap();
        (tx.into(), rx)
    }

    #[test]
    fn descriptors_waiting_behind_a_blocked_close_are_counted_per_connection() {
        let c = Closer::start().unwrap();
        let (blocking, receiver) = lingering();
        let first = c.for_connection();
        first.close(vec![blocking]);
        let second = c.for_connection();
        let fds: Vec<OwnedFd> = (0..3)
            .map(|_| std::os::unix::net::UnixStream::pair().unwrap().0.into())
            .collect();
        second.close(fds);
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(first.closing(), 1, "the close blocks");
        assert_eq!(second.closing(), 3, "waiting behind it");
        assert_eq!(c.closing(), 0, "each connection counts its own");
        drop(receiver);
        let start = std::time::Instant::now();
        while first.closing() + second.closing() > 0 {
            assert!(start.elapsed() < Duration::from_secs(30), "never closed");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
