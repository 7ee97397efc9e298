//! The out-of-band exchange of rdma-core's `ibv_rc_pingpong` (libibverbs/examples).
//!
//! Each side describes its QP as the text `LID:QPN:PSN:GID`, formatted `%04x:%06x:%06x:%s` with
//! the GID as 32 lower-case hex digits in byte order, and sends it NUL-terminated in a fixed
//! 52-byte message (`sizeof "0000:000000:000000:00000000000000000000000000000000"`). The
//! client connects to TCP port 18515, writes its message, reads the server's, then writes
//! `"done\0"`; the server reads the client's message, moves its QP to RTR/RTS, writes its own and
//! waits for `"done"` before closing. On RoCE the LID is 0 and the GID carries the address:
//! IPv4-mapped `::ffff:a.b.c.d` for an IPv4 GID.
//!
//! **rocev2's optional extension** (`*_exchange_ext`): a side that offers REXT capabilities
//! (docs/wire.md, "Negotiation"; `rc_pingpong --multipath`) sends, right after its standard
//! message, a second message of the same fixed length, `REXT:<word as 8 hex digits>`,
//! NUL-padded to 52 bytes. The client sends its extension only when offering one; a server
//! that offers one waits [`EXT_WAIT`] for the client's after reading its standard message (a
//! standard client sends nothing until it has the server's reply), and sends its own only if
//! the client sent one. So a standard peer never sees an extension message and its QP is
//! ordinary RC; a client offering one to a standard server fails (the server reads 52 bytes
//! where it expects `"done"`, and closes), loudly on both sides.
//!
//! Deviations: none. The parser accepts what `sscanf("%x:%x:%x:%s")` would accept for the three
//! numbers (1–8 hex digits) but insists on exactly 32 hex digits of GID, since a shorter one
//! would leave part of the peer's GID uninitialised in `ibv_rc_pingpong`.

use rocev2_core::wire::gid::gid_to_ip;
use rocev2_core::wire::{Psn, Qpn};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv6Addr};

/// `ibv_rc_pingpong`'s default TCP port.
pub const DEFAULT_PORT: u16 = 18515;

/// Length of one message, terminating NUL included.
pub const MSG_LEN: usize = 52;

/// How long a server offering an extension waits for the client's extension message before
/// treating the client as standard.
pub const EXT_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// The extension message's tag.
const EXT_TAG: &str = "REXT:";

/// What one side tells the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PingpongDest {
    /// Local identifier; 0 on RoCE.
    pub lid: u16,
    /// The QP number.
    pub qpn: Qpn,
    /// The first PSN this side sends.
    pub psn: Psn,
    /// The GID: the address, IPv4-mapped for IPv4.
    pub gid: [u8; 16],
}

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum OobError {
    /// The TCP connection failed (the cause is the error's source, printed once by callers
    /// that print the chain).
    #[error("out-of-band connection failed")]
    Io(#[source] std::io::Error),
    /// The peer closed the connection before the exchange was complete.
    #[error(
        "the peer closed the exchange before it was complete (an ibv_rc_pingpong server hangs up \
         when its QP cannot reach RTR with our address: check the GID index, -g, on both sides)"
    )]
    Closed,
    /// The peer's message is not `LID:QPN:PSN:GID`.
    #[error("malformed pingpong message {0:?}")]
    Malformed(String),
    /// The peer did not finish with "done".
    #[error("peer did not confirm with \"done\"")]
    NoDone,
}

impl From<std::io::Error> for OobError {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            OobError::Closed
        } else {
            OobError::Io(e)
        }
    }
}

impl PingpongDest {
    /// The 52-byte message for this side.
    pub fn to_wire(&self) -> [u8; MSG_LEN] {
        let mut gid = String::with_capacity(32);
        for b in self.gid {
            gid.push_str(&format!("{b:02x}"));
        }
        let text = format!(
            "{:04x}:{:06x}:{:06x}:{gid}",
            self.lid,
            self.qpn.value(),
            self.psn.value()
        );
        let mut msg = [0u8; MSG_LEN];
        msg[..text.len()].copy_from_slice(text.as_bytes());
        msg
    }

    /// Parses a peer's message (up to its NUL).
    pub fn from_wire(msg: &[u8]) -> Result<PingpongDest, OobError> {
        let end = msg.iter().position(|b| *b == 0).unwrap_or(msg.len());
        let text = String::from_utf8_lossy(&msg[..end]).into_owned();
        let bad = || OobError::Malformed(text.clone());
        let mut parts = text.split(':');
        let mut hex = |max: u32| -> Result<u32, OobError> {
            let p = parts.next().ok_or_else(bad)?;
            if p.is_empty() || p.len() > 8 {
                return Err(bad());
            }
            let v = u32::from_str_radix(p, 16).map_err(|_| bad())?;
            if v > max {
                return Err(bad());
            }
            Ok(v)
        };
        let lid = hex(0xffff)? as u16;
        let qpn = Qpn::new(hex(0x00ff_ffff)?);
        let psn = Psn::new(hex(0x00ff_ffff)?);
        let g = parts.next().ok_or_else(bad)?;
        if parts.next().is_some() || g.len() != 32 || !g.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let mut gid = [0u8; 16];
        for (i, b) in gid.iter_mut().enumerate() {
            *b = u8::from_str_radix(&g[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(PingpongDest { lid, qpn, psn, gid })
    }

    /// The peer's IP address from its GID.
    pub fn ip(&self) -> IpAddr {
        gid_to_ip(Ipv6Addr::from(self.gid))
    }
}

/// rocev2's extension message: `REXT:` and the capability word as 8 hex digits, NUL-padded
/// to [`MSG_LEN`] bytes.
pub fn ext_to_wire(word: u32) -> [u8; MSG_LEN] {
    let text = format!("{EXT_TAG}{word:08x}");
    let mut msg = [0u8; MSG_LEN];
    msg[..text.len()].copy_from_slice(text.as_bytes());
    msg
}

/// Parses an extension message: the capability word.
pub fn ext_from_wire(msg: &[u8]) -> Result<u32, OobError> {
    let end = msg.iter().position(|b| *b == 0).unwrap_or(msg.len());
    let text = String::from_utf8_lossy(&msg[..end]).into_owned();
    text.strip_prefix(EXT_TAG)
        .filter(|w| w.len() == 8)
        .and_then(|w| u32::from_str_radix(w, 16).ok())
        .ok_or(OobError::Malformed(text))
}

/// The client's half: send ours, read theirs, confirm with "done".
pub fn client_exchange(
    stream: &mut (impl Read + Write),
    mine: &PingpongDest,
) -> Result<PingpongDest, OobError> {
    stream.write_all(&mine.to_wire())?;
    let mut msg = [0u8; MSG_LEN];
    stream.read_exact(&mut msg)?;
    let theirs = PingpongDest::from_wire(&msg)?;
    stream.write_all(b"done\0")?;
    Ok(theirs)
}

/// The server's half: read theirs, let `connect` bring our QP to RTS with it, send ours, and
/// wait for "done" (the client's QP is then ready too).
pub fn server_exchange<E>(
    stream: &mut (impl Read + Write),
    mine: &PingpongDest,
    connect: impl FnOnce(&PingpongDest) -> Result<(), E>,
) -> Result<Result<PingpongDest, E>, OobError> {
    let mut msg = [0u8; MSG_LEN];
    stream.read_exact(&mut msg)?;
    let theirs = PingpongDest::from_wire(&msg)?;
    if let Err(e) = connect(&theirs) {
        return Ok(Err(e));
    }
    stream.write_all(&mine.to_wire())?;
    let mut done = [0u8; 5];
    stream.read_exact(&mut done)?;
    if &done[..4] != b"done" {
        return Err(OobError::NoDone);
    }
    Ok(Ok(theirs))
}

/// [`client_exchange`] with rocev2's extension: with `ext = Some(word)` the client also sends
/// its capability word and reads the server's, returned with the server's message (`None`
/// when the client offered nothing). The server must offer an extension too.
pub fn client_exchange_ext(
    stream: &mut (impl Read + Write),
    mine: &PingpongDest,
    ext: Option<u32>,
) -> Result<(PingpongDest, Option<u32>), OobError> {
    let Some(word) = ext else {
        return Ok((client_exchange(stream, mine)?, None));
    };
    stream.write_all(&mine.to_wire())?;
    stream.write_all(&ext_to_wire(word))?;
    let mut msg = [0u8; MSG_LEN];
    stream.read_exact(&mut msg)?;
    let theirs = PingpongDest::from_wire(&msg)?;
    stream.read_exact(&mut msg)?;
    let peer_word = ext_from_wire(&msg)?;
    stream.write_all(b"done\0")?;
    Ok((theirs, Some(peer_word)))
}

/// [`server_exchange`] with rocev2's extension. With `ext = Some(word)` the server waits up to
/// [`EXT_WAIT`] for the client's capability word after its standard message; if one comes,
/// `connect` gets it and the server answers with its own, otherwise (a standard client)
/// `connect` gets `None` and the exchange is the standard one. With `ext = None` it is
/// [`server_exchange`].
pub fn server_exchange_ext<E>(
    stream: &mut std::net::TcpStream,
    mine: &PingpongDest,
    ext: Option<u32>,
    connect: impl FnOnce(&PingpongDest, Option<u32>) -> Result<(), E>,
) -> Result<Result<(PingpongDest, Option<u32>), E>, OobError> {
    let Some(word) = ext else {
        let r = server_exchange(stream, mine, |peer| connect(peer, None))?;
        return Ok(r.map(|p| (p, None)));
    };
    let mut msg = [0u8; MSG_LEN];
    stream.read_exact(&mut msg)?;
    let theirs = PingpongDest::from_wire(&msg)?;
    let peer_word = read_ext_within(stream, EXT_WAIT)?;
    if let Err(e) = connect(&theirs, peer_word) {
        return Ok(Err(e));
    }
    stream.write_all(&mine.to_wire())?;
    if peer_word.is_some() {
        stream.write_all(&ext_to_wire(word))?;
    }
    let mut done = [0u8; 5];
    stream.read_exact(&mut done)?;
    if &done[..4] != b"done" {
        return Err(OobError::NoDone);
    }
    Ok(Ok((theirs, peer_word)))
}

/// The client's extension message if its first byte arrives within `wait`; `None` if nothing
/// does (a standard client, which waits for our reply).
fn read_ext_within(
    stream: &mut std::net::TcpStream,
    wait: std::time::Duration,
) -> Result<Option<u32>, OobError> {
    let before = stream.read_timeout()?;
    stream.set_read_timeout(Some(wait))?;
    let mut first = [0u8; 1];
    let got = match stream.read(&mut first) {
        Ok(0) => Err(OobError::Closed),
        Ok(_) => Ok(true),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(e.into()),
    };
    stream.set_read_timeout(before)?;
    if !got? {
        return Ok(None);
    }
    let mut msg = [0u8; MSG_LEN];
    msg[0] = first[0];
    stream.read_exact(&mut msg[1..])?;
    Ok(Some(ext_from_wire(&msg)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener, TcpStream};

    /// A server that hangs up before answering (ibv_rc_pingpong when its QP cannot reach RTR)
    /// is named as such, and the I/O cause of other failures is the source, not repeated in
    /// the message.
    #[test]
    fn client_exchange_server_hanging_up_is_closed_and_causes_print_once() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let peer = std::thread::spawn(move || {
            let (mut c, _) = listener.accept().unwrap();
            let mut msg = [0u8; MSG_LEN];
            c.read_exact(&mut msg).unwrap();
        });
        let mut s = TcpStream::connect(addr).unwrap();
        let e = client_exchange(&mut s, &server()).unwrap_err();
        peer.join().unwrap();
        assert!(matches!(e, OobError::Closed), "{e:?}");
        let io = OobError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        let cause = std::error::Error::source(&io).unwrap().to_string();
        assert!(!io.to_string().contains(&cause), "{io}: {cause}");
    }

    /// `../shared/captures/rc_pingpong.tool-output.txt`: the server printed
    /// `QPN 0x000011, PSN 0x7d2a9e, GID ::ffff:192.168.77.10`.
    fn server() -> PingpongDest {
        PingpongDest {
            lid: 0,
            qpn: Qpn::new(0x11),
            psn: Psn::new(0x7d2a9e),
            gid: rocev2_core::wire::gid::gid(IpAddr::V4(Ipv4Addr::new(192, 168, 77, 10))).octets(),
        }
    }

    #[test]
    fn pingpong_message_matches_ibv_rc_pingpong_format() {
        let msg = server().to_wire();
        assert_eq!(
            &msg[..51],
            b"0000:000011:7d2a9e:00000000000000000000ffffc0a84d0a"
        );
        assert_eq!(msg[51], 0, "NUL-terminated, 52 bytes in all");
        assert_eq!(PingpongDest::from_wire(&msg).unwrap(), server());
        assert_eq!(server().ip(), IpAddr::V4(Ipv4Addr::new(192, 168, 77, 10)));
    }

    #[test]
    fn pingpong_parse_accepts_sscanf_widths_and_rejects_garbage() {
        let d = PingpongDest::from_wire(b"0:11:7d2a9e:00000000000000000000ffffc0a84d0a\0").unwrap();
        assert_eq!(
            (d.lid, d.qpn, d.psn),
            (0, Qpn::new(0x11), Psn::new(0x7d2a9e))
        );
        for bad in [
            &b"0000:000011:7d2a9e\0"[..],
            b"0000:000011:7d2a9e:00ffffc0a84d0a\0",
            b"0000:1000000:7d2a9e:00000000000000000000ffffc0a84d0a\0",
            b"0000:zz:7d2a9e:00000000000000000000ffffc0a84d0a\0",
            b"0000:000011:7d2a9e:00000000000000000000ffffc0a84d0a:extra\0",
            b"",
        ] {
            assert!(
                matches!(PingpongDest::from_wire(bad), Err(OobError::Malformed(_))),
                "{bad:?}"
            );
        }
        let v6 = PingpongDest {
            gid: "fd00::2".parse::<Ipv6Addr>().unwrap().octets(),
            ..server()
        };
        assert_eq!(
            PingpongDest::from_wire(&v6.to_wire()).unwrap().ip(),
            "fd00::2".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn ext_message_is_fixed_length_and_parses_back() {
        let msg = ext_to_wire(0x8);
        assert_eq!(&msg[..13], b"REXT:00000008");
        assert!(msg[13..].iter().all(|b| *b == 0));
        assert_eq!(ext_from_wire(&msg).unwrap(), 8);
        for bad in [
            &b"REXT:8\0"[..],
            b"0000:000011:7d2a9e:00000000000000000000ffffc0a84d0a\0",
        ] {
            assert!(matches!(ext_from_wire(bad), Err(OobError::Malformed(_))));
        }
    }

    /// The server's result in [`ext_pair`].
    type ServerSide = Result<(PingpongDest, Option<u32>), String>;

    /// Runs `server_exchange_ext` with `server_ext` and the client half `client` over
    /// loopback; returns (server's result, what the server's `connect` saw, client's result).
    fn ext_pair<C: Send + 'static>(
        server_ext: Option<u32>,
        client: impl FnOnce(TcpStream) -> C + Send + 'static,
    ) -> (ServerSide, Option<Option<u32>>, C) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let c = std::thread::spawn(move || client(TcpStream::connect(addr).unwrap()));
        let (mut s, _) = listener.accept().unwrap();
        let mut seen = None;
        let r = server_exchange_ext(&mut s, &server(), server_ext, |_, w| {
            seen = Some(w);
            Ok::<(), ()>(())
        })
        .map_err(|e| e.to_string())
        .map(|r| r.unwrap());
        drop(s);
        (r, seen, c.join().unwrap())
    }

    fn client_dest() -> PingpongDest {
        PingpongDest {
            qpn: Qpn::new(0x12),
            psn: Psn::new(0x37cf8a),
            ..server()
        }
    }

    #[test]
    fn ext_both_offer_both_learn_the_word() {
        let (srv, seen, cli) = ext_pair(Some(0x8), |mut c| {
            client_exchange_ext(&mut c, &client_dest(), Some(0x8)).unwrap()
        });
        assert_eq!(srv.unwrap(), (client_dest(), Some(0x8)));
        assert_eq!(seen, Some(Some(0x8)));
        assert_eq!(cli, (server(), Some(0x8)));
    }

    #[test]
    fn ext_server_offering_to_standard_client_sends_standard_bytes_only() {
        // The client is `ibv_rc_pingpong`'s exchange, byte for byte: it must read exactly the
        // server's 52-byte message and nothing after it.
        let (srv, seen, rest) = ext_pair(Some(0x8), |mut c| {
            c.write_all(&client_dest().to_wire()).unwrap();
            let mut msg = [0u8; MSG_LEN];
            c.read_exact(&mut msg).unwrap();
            assert_eq!(PingpongDest::from_wire(&msg).unwrap(), server());
            c.write_all(b"done\0").unwrap();
            let mut rest = Vec::new();
            c.read_to_end(&mut rest).unwrap();
            rest
        });
        assert_eq!(srv.unwrap(), (client_dest(), None));
        assert_eq!(seen, Some(None), "connected without capabilities");
        assert!(rest.is_empty(), "a standard client was sent {rest:?}");
    }

    #[test]
    fn ext_client_offering_to_plain_server_fails_loudly() {
        let (srv, seen, cli) = ext_pair(None, |mut c| {
            client_exchange_ext(&mut c, &client_dest(), Some(0x8)).map_err(|e| e.to_string())
        });
        assert!(srv.is_err(), "{srv:?}");
        assert_eq!(seen, Some(None));
        assert!(cli.is_err(), "{cli:?}");
    }

    #[test]
    fn pingpong_exchange_over_loopback_in_tool_order() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let client_dest = PingpongDest {
            qpn: Qpn::new(0x12),
            psn: Psn::new(0x37cf8a),
            ..server()
        };
        let srv = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut connected = None;
            let r = server_exchange(&mut s, &server(), |peer| {
                connected = Some(*peer);
                Ok::<(), ()>(())
            });
            (r.unwrap().unwrap(), connected)
        });
        let mut c = TcpStream::connect(addr).unwrap();
        let got = client_exchange(&mut c, &client_dest).unwrap();
        assert_eq!(got, server());
        let (seen, connected) = srv.join().unwrap();
        assert_eq!(seen, client_dest);
        assert_eq!(
            connected,
            Some(client_dest),
            "the server connects its QP before replying"
        );
    }
}
