//! Framing of the control stream, and descriptors beside it.
//!
//! A frame is a 4-byte little-endian body length, a 1-byte count of descriptors, and a postcard
//! body of at most [`MAX_BODY`] bytes. A frame's descriptors are sent as SCM_RIGHTS with its
//! first byte; a stream socket delivers ancillary data with the bytes it was sent with, so the
//! receiver queues descriptors in arrival order and each complete frame takes its count from the
//! front of the queue. A frame that claims more descriptors than arrived, too many, or too long a
//! body is a protocol error, after which the connection is closed.
//!
//! Deviations: none.

use bytes::{Buf, BufMut, BytesMut};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::VecDeque;
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// Largest body.
pub const MAX_BODY: usize = 64 * 1024;
/// Most descriptors one frame carries.
pub const MAX_FDS: usize = 8;
/// Most descriptors one `sendmsg` can pass (the kernel's `SCM_MAX_FD`). [`recv`] makes room for
/// all of them: those a truncated control buffer leaves out would be closed by the kernel in
/// the receiving thread, and a hostile sender's descriptor can make that close block.
const SCM_MAX_FD: usize = 253;
const HEADER: usize = 5;

/// Why the stream cannot be read on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    /// A header announcing more than [`MAX_BODY`] bytes or [`MAX_FDS`] descriptors.
    #[error("frame header out of range")]
    Header,
    /// A frame announcing descriptors that did not come with it.
    #[error("frame without its descriptors")]
    MissingFds,
    /// A body that is not a message.
    #[error("malformed message")]
    Malformed,
}

/// Encodes `msg` as a frame announcing `fds` descriptors.
pub fn encode<T: Serialize>(msg: &T, fds: usize) -> Vec<u8> {
    // Serialising the protocol's plain structs into a growable vector cannot fail.
    let body = postcard::to_allocvec(msg).unwrap_or_default();
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.put_u32_le(body.len() as u32);
    out.put_u8(fds as u8);
    out.extend_from_slice(&body);
    out
}

/// Bytes and descriptors received so far, cut into frames.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: BytesMut,
    fds: VecDeque<OwnedFd>,
}

impl Decoder {
    /// Appends received bytes.
    pub fn extend(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Appends received descriptors.
    pub fn push_fds(&mut self, fds: impl IntoIterator<Item = OwnedFd>) {
        self.fds.extend(fds);
    }

    /// Descriptors queued beyond what frames claimed so far: a peer sending more than it
    /// announces is closed before it can pile up descriptors in the daemon.
    pub fn queued_fds(&self) -> usize {
        self.fds.len()
    }

    /// The next complete frame's message and descriptors, `Ok(None)` if incomplete.
    ///
    /// # Errors
    /// [`FrameError`]: the connection should be closed.
    pub fn next_frame<T: DeserializeOwned>(
        &mut self,
    ) -> Result<Option<(T, Vec<OwnedFd>)>, FrameError> {
        if self.buf.len() < HEADER {
            return Ok(None);
        }
        let len = u32::from_le_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        let nfds = usize::from(self.buf[4]);
        if len > MAX_BODY || nfds > MAX_FDS {
            return Err(FrameError::Header);
        }
        if self.buf.len() < HEADER + len {
            return Ok(None);
        }
        if self.fds.len() < nfds {
            return Err(FrameError::MissingFds);
        }
        self.buf.advance(HEADER);
        let body = self.buf.split_to(len);
        // A malformed body leaves its descriptors queued, for the owner to dispose of
        // ([`Decoder::take_fds`]).
        let msg = postcard::from_bytes(&body).map_err(|_| FrameError::Malformed)?;
        let fds = self.fds.drain(..nfds).collect();
        Ok(Some((msg, fds)))
    }

    /// Every descriptor received and not yet handed out with a frame (a connection being
    /// closed gives them to whoever closes descriptors for it).
    pub fn take_fds(&mut self) -> Vec<OwnedFd> {
        self.fds.drain(..).collect()
    }
}

/// One `sendmsg` of `bytes` with `fds` attached; returns how many bytes the kernel took (send
/// the rest without the descriptors).
///
/// # Errors
/// The socket's (`WouldBlock` on a non-blocking one that is full).
pub fn send(sock: impl AsFd, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> std::io::Result<usize> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut anc = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && (fds.len() > MAX_FDS || !anc.push(SendAncillaryMessage::ScmRights(fds))) {
        return Err(std::io::Error::other("too many descriptors for one frame"));
    }
    Ok(rustix::net::sendmsg(
        sock,
        &[IoSlice::new(bytes)],
        &mut anc,
        SendFlags::NOSIGNAL,
    )?)
}

/// Sends a whole frame on a blocking socket.
///
/// # Errors
/// The socket's.
pub fn send_all(sock: impl AsFd, frame: &[u8], fds: &[BorrowedFd<'_>]) -> std::io::Result<()> {
    let sock = sock.as_fd();
    let mut sent = send(sock, frame, fds)?;
    while sent < frame.len() {
        sent += send(sock, &frame[sent..], &[])?;
    }
    Ok(())
}

/// One `recvmsg` into `dec`; returns the bytes read (0: the peer closed). Every descriptor
/// that came is queued in `dec`, however many (the frames then say which are too many).
///
/// # Errors
/// The socket's (`WouldBlock` on a non-blocking one with nothing to read).
pub fn recv(sock: impl AsFd, dec: &mut Decoder) -> std::io::Result<usize> {
    let mut buf = [0u8; 8192];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(SCM_MAX_FD))];
    let mut anc = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        sock,
        &mut [IoSliceMut::new(&mut buf)],
        &mut anc,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    for msg in anc.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = msg {
            dec.push_fds(fds);
        }
    }
    dec.extend(&buf[..got.bytes]);
    Ok(got.bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn descriptors_arrive_with_their_frame() {
        let (a, b) = UnixStream::pair().unwrap();
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        send_all(&a, &encode(&7u32, 1), &[file.as_fd()]).unwrap();
        send_all(&a, &encode(&8u32, 0), &[]).unwrap();
        let mut d = Decoder::default();
        let mut got = Vec::new();
        while got.len() < 2 {
            recv(&b, &mut d).unwrap();
            while let Some(f) = d.next_frame::<u32>().unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got[0].0, 7);
        assert_eq!(got[0].1.len(), 1);
        assert_eq!((got[1].0, got[1].1.len()), (8, 0));
    }

    #[test]
    fn every_descriptor_a_hostile_sender_attaches_is_received() {
        // More than a frame may carry, in one sendmsg: none left for the kernel to close in
        // the receiving thread.
        let (a, b) = UnixStream::pair().unwrap();
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        let fds = vec![file.as_fd(); SCM_MAX_FD];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(SCM_MAX_FD))];
        let mut anc = SendAncillaryBuffer::new(&mut space);
        assert!(anc.push(SendAncillaryMessage::ScmRights(&fds)));
        rustix::net::sendmsg(&a, &[IoSlice::new(&[0])], &mut anc, SendFlags::empty()).unwrap();
        let mut d = Decoder::default();
        assert_eq!(recv(&b, &mut d).unwrap(), 1);
        assert_eq!(d.queued_fds(), SCM_MAX_FD);
    }

    #[test]
    fn bad_headers_and_missing_descriptors_are_errors() {
        let mut d = Decoder::default();
        d.extend(&[0xff, 0xff, 0xff, 0xff, 0]);
        assert_eq!(d.next_frame::<u32>().err(), Some(FrameError::Header));
        let mut d = Decoder::default();
        d.extend(&encode(&1u32, 2));
        assert_eq!(d.next_frame::<u32>().err(), Some(FrameError::MissingFds));
        let mut d = Decoder::default();
        d.extend(&[1, 0, 0, 0, 0, 0xff]);
        assert_eq!(d.next_frame::<u32>().err(), Some(FrameError::Malformed));
        let mut d = Decoder::default();
        d.extend(&[1, 0]);
        assert!(matches!(d.next_frame::<u32>(), Ok(None)));
    }
}
