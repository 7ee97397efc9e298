//! The daemon's optional metrics endpoint (`[stats] metrics`, `--metrics`): answers an HTTP
//! `GET /metrics` (or `GET /`) with the counters in the Prometheus text format
//! ([`rocev2d::stats::render_prometheus`]) and closes the connection, as Prometheus scrapes.
//!
//! It runs on a thread of its own ([`Metrics::spawn`]) and asks the engine shards for their
//! counters as `rocev2d stats` does, so a scrape costs a shard one snapshot and never blocks
//! its loop. It must not grow without bound whatever a client does: every socket is
//! non-blocking; at most [`MAX_CONNS`]
//! connections wait for their request (a new one beyond that closes the oldest); a request is
//! read up to [`MAX_REQUEST`] bytes and must be complete within [`REQUEST_TIMEOUT`]; an answer
//! that does not fit the socket's send buffer at once is cut off. Everything refused is
//! counted and logged at debug level.
//!
//! Deviations: HTTP/1.0-style answers only (`Connection: close`, no keep-alive, no chunking).

use std::io::{self, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

/// Connections waiting for their request at once.
pub const MAX_CONNS: usize = 16;
/// Longest request read (headers included).
pub const MAX_REQUEST: usize = 8192;
/// How long a connection may take to send its request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The listening socket and the connections not answered yet.
pub struct Metrics {
    listener: TcpListener,
    conns: Vec<Conn>,
    /// Connections closed without an answer: too many, too slow, too long, not HTTP.
    pub refused: u64,
}

struct Conn {
    stream: TcpStream,
    request: Vec<u8>,
    since: Instant,
}

/// What a complete request asks for.
#[derive(Debug, PartialEq, Eq)]
enum Ask {
    Metrics,
    NotFound,
    BadMethod,
}

impl Metrics {
    /// Listens on `addr`.
    ///
    /// # Errors
    /// The bind's error (address in use, not ours).
    pub fn bind(addr: SocketAddr) -> io::Result<Metrics> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        Ok(Metrics {
            listener,
            conns: Vec::new(),
            refused: 0,
        })
    }

    /// The address it listens on (the port chosen when asked for 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Descriptors to wait on: the listener, then every waiting connection.
    pub fn fds(&self) -> Vec<BorrowedFd<'_>> {
        std::iter::once(self.listener.as_fd())
            .chain(self.conns.iter().map(|c| c.stream.as_fd()))
            .collect()
    }

    /// Serves on a thread of its own until the process exits: sleeps in `poll(2)` on the
    /// listener and the waiting connections (a second at most, so an expired request is
    /// closed in time), then [`Metrics::serve`]s with `render`.
    ///
    /// # Errors
    /// The thread could not be started.
    pub fn spawn(mut self, render: impl Fn() -> String + Send + 'static) -> io::Result<()> {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let second = Timespec {
            tv_sec: 1,
            tv_nsec: 0,
        };
        std::thread::Builder::new()
            .name("rocev2d-metrics".into())
            .spawn(move || {
                loop {
                    {
                        let fds = self.fds();
                        let mut polled: Vec<PollFd<'_>> =
                            fds.iter().map(|f| PollFd::new(f, PollFlags::IN)).collect();
                        // An interrupted or failed poll only means an earlier look.
                        let _ = poll(&mut polled, Some(&second));
                    }
                    self.serve(&render);
                }
            })?;
        Ok(())
    }

    /// Accepts new connections, reads what requests have arrived, answers the complete ones
    /// with `render()` and drops the expired.
    pub fn serve(&mut self, render: impl Fn() -> String) {
        let now = Instant::now();
        while let Ok((stream, peer)) = self.listener.accept() {
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            if self.conns.len() == MAX_CONNS {
                self.conns.remove(0);
                self.refused += 1;
                tracing::debug!(%peer, "metrics: too many waiting connections, dropped the oldest");
            }
            self.conns.push(Conn {
                stream,
                request: Vec::new(),
                since: now,
            });
        }
        let mut refused = 0;
        self.conns.retain_mut(|c| match c.read() {
            Ok(Some(ask)) => {
                if let Err(e) = c.answer(&ask, &render) {
                    tracing::debug!(error = %e, "metrics: answer cut off");
                }
                false
            }
            Ok(None) if now.duration_since(c.since) < REQUEST_TIMEOUT => true,
            Ok(None) | Err(_) => {
                refused += 1;
                false
            }
        });
        self.refused += refused;
    }
}

impl Conn {
    /// Reads what has arrived: the request once its head is complete, `None` while it is
    /// not, an error for a closed, oversized or undecodable one.
    fn read(&mut self) -> io::Result<Option<Ask>> {
        let mut chunk = [0u8; 2048];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => self.request.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
            if self.request.len() > MAX_REQUEST {
                return Err(io::ErrorKind::InvalidData.into());
            }
        }
        Ok(parse(&self.request))
    }

    fn answer(&mut self, ask: &Ask, render: &impl Fn() -> String) -> io::Result<()> {
        let (status, kind, body) = match ask {
            Ask::Metrics => ("200 OK", "text/plain; version=0.0.4", render()),
            Ask::NotFound => ("404 Not Found", "text/plain", "try /metrics\n".to_string()),
            Ask::BadMethod => (
                "405 Method Not Allowed",
                "text/plain",
                "GET only\n".to_string(),
            ),
        };
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        self.stream.write_all(head.as_bytes())?;
        self.stream.write_all(body.as_bytes())?;
        self.stream.shutdown(std::net::Shutdown::Write)
    }
}

/// The request's ask once its head (request line and headers) is complete.
fn parse(request: &[u8]) -> Option<Ask> {
    let end = request
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .or_else(|| request.windows(2).position(|w| w == b"\n\n"))?;
    let head = String::from_utf8_lossy(&request[..end]);
    let mut words = head.lines().next().unwrap_or("").split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    Some(match (method, path.split('?').next().unwrap_or("")) {
        ("GET", "/metrics" | "/") => Ask::Metrics,
        ("GET", _) => Ask::NotFound,
        _ => Ask::BadMethod,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead as _;

    #[test]
    fn metrics_request_heads() {
        assert_eq!(
            parse(b"GET /metrics HTTP/1.1\r\nHost: x\r\n"),
            None,
            "head not complete"
        );
        assert_eq!(
            parse(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Some(Ask::Metrics)
        );
        assert_eq!(parse(b"GET /?x=1 HTTP/1.0\n\n"), Some(Ask::Metrics));
        assert_eq!(parse(b"GET /nope HTTP/1.0\r\n\r\n"), Some(Ask::NotFound));
        assert_eq!(
            parse(b"POST /metrics HTTP/1.0\r\n\r\n"),
            Some(Ask::BadMethod)
        );
        assert_eq!(parse(b"\x00\xff\r\n\r\n"), Some(Ask::BadMethod));
    }

    /// A scrape over loopback, a client that never finishes its request, and one that sends
    /// too much: the first is answered, the others closed and counted, none blocks `serve`.
    #[test]
    fn metrics_answers_and_refuses_without_blocking() {
        let mut m = Metrics::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = m.local_addr().unwrap();
        let mut slow = TcpStream::connect(addr).unwrap();
        slow.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
        let mut big = TcpStream::connect(addr).unwrap();
        big.write_all(&[b'x'; MAX_REQUEST + 10]).unwrap();
        let mut ok = TcpStream::connect(addr).unwrap();
        ok.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        ok.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // Connections and bytes arrive asynchronously over loopback: serve until answered.
        let mut answer = Vec::new();
        for _ in 0..500 {
            m.serve(|| "rocev2_up 1\n".to_string());
            ok.set_nonblocking(true).unwrap();
            let _ = ok.read_to_end(&mut answer);
            if answer.ends_with(b"rocev2_up 1\n") {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let text = String::from_utf8(answer).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("HTTP/1.1 200 OK"), "{text}");
        assert!(
            text.contains("Content-Type: text/plain; version=0.0.4\r\n"),
            "{text}"
        );
        assert!(text.ends_with("\r\n\r\nrocev2_up 1\n"), "{text}");
        assert_eq!(m.refused, 1, "the oversized request");
        assert_eq!(m.conns.len(), 1, "the slow client still waits");
        // Past the timeout the slow one is closed too.
        m.conns[0].since -= REQUEST_TIMEOUT;
        m.serve(String::new);
        assert_eq!((m.conns.len(), m.refused), (0, 2));
        slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut r = std::io::BufReader::new(slow);
        let mut line = String::new();
        assert_eq!(
            r.read_line(&mut line).unwrap(),
            0,
            "closed without an answer"
        );
    }
}
