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
//! Deviations: none. The parser accepts what `sscanf("%x:%x:%x:%s")` would accept for the three
//! numbers (1–8 hex digits) but insists on exactly 32 hex digits of GID, since a shorter one
//! would leave part of the peer's GID uninitialised in `ibv_rc_pingpong`.

use rocev2_core::wire::{Psn, Qpn};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `ibv_rc_pingpong`'s default TCP port.
pub const DEFAULT_PORT: u16 = 18515;

/// Length of one message, terminating NUL included.
pub const MSG_LEN: usize = 52;

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
    /// The TCP connection failed or closed early.
    #[error("out-of-band connection: {0}")]
    Io(#[from] std::io::Error),
    /// The peer's message is not `LID:QPN:PSN:GID`.
    #[error("malformed pingpong message {0:?}")]
    Malformed(String),
    /// The peer did not finish with "done".
    #[error("peer did not confirm with \"done\"")]
    NoDone,
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
        let v6 = Ipv6Addr::from(self.gid);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }
}

/// The RoCEv2 GID of an address: IPv4-mapped for IPv4 (`::ffff:a.b.c.d`), the address itself for
/// IPv6.
pub fn gid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
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

/// Loopback helper for tests and examples: the IPv4 address of a GID, if it is IPv4-mapped.
pub fn ipv4_of(gid: &[u8; 16]) -> Option<Ipv4Addr> {
    Ipv6Addr::from(*gid).to_ipv4_mapped()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    /// `../shared/captures/rc_pingpong.tool-output.txt`: the server printed
    /// `QPN 0x000011, PSN 0x7d2a9e, GID ::ffff:192.168.77.10`.
    fn server() -> PingpongDest {
        PingpongDest {
            lid: 0,
            qpn: Qpn::new(0x11),
            psn: Psn::new(0x7d2a9e),
            gid: gid_of(IpAddr::V4(Ipv4Addr::new(192, 168, 77, 10))),
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
            gid: gid_of("fd00::2".parse().unwrap()),
            ..server()
        };
        assert_eq!(
            PingpongDest::from_wire(&v6.to_wire()).unwrap().ip(),
            "fd00::2".parse::<IpAddr>().unwrap()
        );
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
