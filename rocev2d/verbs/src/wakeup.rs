//! Sleeping on descriptors: blocking in `poll(2)`, or async through tokio's reactor.
//!
//! Both backends wake a waiter the same way: a CQ's eventfd becomes readable when completions
//! arrive (signalled by the in-process progress thread or by the daemon), and an attached
//! device also watches its control socket, which
//! becomes readable when the daemon dies. [`Waitable`] holds such a descriptor and, the first
//! time a task awaits it, its registration with the reactor of the task's runtime.
//!
//! Deviations: without the `tokio` feature, or outside a tokio runtime, the async waits busy-poll
//! (they yield to the executor and look again).

use crate::error::{Error, Result};
use rustix::event::{PollFd, PollFlags, Timespec};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

/// A descriptor to sleep on, with its reactor registration made on first async use.
#[derive(Debug)]
pub(crate) struct Waitable<F> {
    inner: F,
    #[cfg(feature = "tokio")]
    reactor: std::sync::OnceLock<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>,
}

impl<F: AsFd> Waitable<F> {
    pub(crate) fn new(inner: F) -> Waitable<F> {
        Waitable {
            inner,
            #[cfg(feature = "tokio")]
            reactor: std::sync::OnceLock::new(),
        }
    }

    /// The wrapped descriptor.
    pub(crate) fn get(&self) -> &F {
        &self.inner
    }

    /// Its registration with the current tokio runtime's reactor; `None` outside a runtime.
    #[cfg(feature = "tokio")]
    fn reactor(&self) -> Result<Option<&tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>> {
        use tokio::io::unix::AsyncFd;
        if let Some(r) = self.reactor.get() {
            return Ok(Some(r));
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Ok(None);
        }
        let fd = self.inner.as_fd().try_clone_to_owned().map_err(Error::Io)?;
        // Deprecated because a generic `T: AsRawFd` may not own its descriptor; an `OwnedFd`
        // does, for the `AsyncFd`'s whole life, which is the condition the unsafe replacement
        // states. So this stays safe code.
        #[allow(deprecated)]
        let r = AsyncFd::with_interest(fd, tokio::io::Interest::READABLE).map_err(Error::Io)?;
        // Another task may have registered meanwhile; either registration serves.
        let _ = self.reactor.set(r);
        Ok(self.reactor.get())
    }
}

/// Sleeps until one of `fds` is readable (or hung up) or `timeout` passes; returns which are.
pub(crate) fn wait_any(fds: &[BorrowedFd<'_>], timeout: Duration) -> Result<Vec<bool>> {
    let mut pfds: Vec<PollFd<'_>> = fds.iter().map(|f| PollFd::new(f, PollFlags::IN)).collect();
    let ts = Timespec {
        tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    match rustix::event::poll(&mut pfds, Some(&ts)) {
        Ok(_) | Err(rustix::io::Errno::INTR) => {}
        Err(e) => return Err(Error::Io(e.into())),
    }
    Ok(pfds.iter().map(|f| !f.revents().is_empty()).collect())
}

/// A [`Waitable`] of any descriptor type, so one wait can take several.
pub(crate) trait Wait {
    /// The registration with the current tokio runtime's reactor; `None` outside a runtime.
    #[cfg(feature = "tokio")]
    fn registration(&self) -> Result<Option<&tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>>;
}

impl<F: AsFd> Wait for Waitable<F> {
    #[cfg(feature = "tokio")]
    fn registration(&self) -> Result<Option<&tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>> {
        self.reactor()
    }
}

/// Sleeps until one of `ws` is readable. Returns `Ok(false)` when it cannot sleep (no tokio
/// runtime): the caller then yields and looks again.
pub(crate) async fn readable(ws: &[&(dyn Wait + Sync)]) -> Result<bool> {
    #[cfg(feature = "tokio")]
    {
        use std::future::Future;
        use std::task::Poll;
        let mut regs = Vec::with_capacity(ws.len());
        for w in ws {
            let Some(r) = w.registration()? else {
                return Ok(false);
            };
            regs.push(r);
        }
        let mut futs: Vec<_> = regs.iter().map(|r| Box::pin(r.readable())).collect();
        std::future::poll_fn(|cx| {
            for f in &mut futs {
                if let Poll::Ready(g) = f.as_mut().poll(cx) {
                    g.map_err(Error::Io)?.clear_ready();
                    return Poll::Ready(Ok(true));
                }
            }
            Poll::Pending
        })
        .await
    }
    #[cfg(not(feature = "tokio"))]
    {
        let _ = ws;
        Ok(false)
    }
}

/// Returns `Pending` once (waking itself), so a busy-polling future lets others run.
pub(crate) async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            std::task::Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await
}
