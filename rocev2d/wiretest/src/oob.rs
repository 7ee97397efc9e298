//! The TCP side channel between the two sides, once their endpoints crossed it
//! ([`crate::setup`]): JSON lines, the client's questions
//! about the server's memory and counters and the server's answers ([`crate::serve`]); memory
//! travels as lowercase hex.
//!
//! Deviations: none.

use anyhow::anyhow;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;

/// The connection and what has been read of the next line.
pub struct Oob {
    /// The TCP connection; the driver also waits on it while the QP runs.
    pub stream: TcpStream,
    buf: Vec<u8>,
    /// The other side closed the connection.
    pub closed: bool,
}

impl Oob {
    /// Wraps a connected stream (no Nagle: every line is a question waiting for its answer).
    pub fn new(stream: TcpStream) -> anyhow::Result<Oob> {
        stream.set_nodelay(true)?;
        Ok(Oob {
            stream,
            buf: Vec::new(),
            closed: false,
        })
    }

    /// Writes one JSON line, blocking until it is written.
    pub fn send(&mut self, v: &Value) -> anyhow::Result<()> {
        let mut line = serde_json::to_string(v)?;
        line.push('\n');
        self.send_text(&line)
    }

    /// Writes `line` (newline included), blocking until it is written.
    fn send_text(&mut self, line: &str) -> anyhow::Result<()> {
        self.stream.set_nonblocking(false)?;
        self.stream.write_all(line.as_bytes())?;
        self.stream.set_nonblocking(true)?;
        Ok(())
    }

    /// A complete JSON line if one has arrived.
    pub fn try_line(&mut self) -> anyhow::Result<Option<Value>> {
        match self.try_text()? {
            Some(l) => Ok(Some(serde_json::from_str(&l)?)),
            None => Ok(None),
        }
    }

    /// A complete line (newline stripped) if one has arrived.
    fn try_text(&mut self) -> anyhow::Result<Option<String>> {
        self.stream.set_nonblocking(true)?;
        let mut chunk = [0u8; 65536];
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Ok(Some(String::from_utf8(line)?.trim_end().to_string()));
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    self.closed = true;
                    return Ok(None);
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// The unsigned integer `k` of a message.
pub fn u64_of(v: &Value, k: &str) -> anyhow::Result<u64> {
    v.get(k)
        .and_then(Value::as_u64)
        .ok_or_else(|| anyhow!("missing {k} in {v}"))
}

/// Bytes as they travel in a `read` answer.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The bytes of a `read` answer.
pub fn unhex(s: &str) -> anyhow::Result<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| anyhow!("bad hex"))
        })
        .collect()
}
