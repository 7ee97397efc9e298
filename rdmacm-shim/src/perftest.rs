//! The TCP exchange of linux-rdma/perftest (`ib_write_bw`, `ib_read_lat`, …), so rocev2's
//! perftest tools pair with the real ones on rdma_rxe or a RoCE NIC.
//!
//! Source: perftest 6.06 (tag `v4.5-0.17`, Debian bookworm's `perftest 4.5+0.17-1`),
//! `src/perftest_communication.c`, `src/perftest_communication.h`, `src/perftest_parameters.h`.
//! Every step is a fixed-size message each way over one TCP connection (default port 18515):
//! the client writes first, then reads; the server reads first, then writes
//! (`ctx_xchg_data_ethernet`, `ctx_hand_shake`). A test's sequence of steps is:
//!
//! 1. versions (`exchange_versions`): 16 bytes, the version text NUL-padded (`MAX_VERSION`);
//!    we send [`VERSION`] and refuse a peer older than 5.70 (`check_version_compatibility`,
//!    which the send and read tools of 6.06 apply too);
//! 2. system data (`check_sys_data`): the cycle buffer (page size), then the cache-line size,
//!    each a 4-byte big-endian `int`; each side keeps the larger;
//! 3. MTU (`check_mtu`): 2 bytes, the `enum ibv_mtu` code (1 = 256 … 5 = 4096) as one ASCII
//!    digit and a NUL (`sprintf("%d")` sent as `sizeof(char[2])`); each side keeps the smaller;
//! 4. a number of key handshakes (`ethernet_write_keys` / `ethernet_read_keys`), each the
//!    108-byte [`KeyMsg`] (`KEY_PRINT_FMT_GID`, `KEY_MSG_SIZE_GID`): before the run they carry
//!    the QP and buffer and then serve as barriers; the tools differ in how many they do;
//! 5. for the one-sided bandwidth tests, the reports (`xchg_bw_reports`): size and iterations
//!    as 8-byte big-endian integers, then peak BW, average BW and message rate as big-endian
//!    IEEE doubles, each its own step ([`BwReport`]);
//! 6. close (`ctx_close_connection`): one more handshake, then `"done\0"` written and not read.
//!
//! A newer perftest (≥ 6.28) negotiates a binary parameter block, but only with a peer of
//! 6.28 or later (`negotiate_params`), so announcing 6.06 keeps it on this sequence; it no
//! longer writes `"done"`, which nobody reads anyway.
//!
//! Deviations: only the GID form of the key message (RoCE always has a GID; the 59-byte form
//! without one is for InfiniBand); no `--dont_xchg_versions`; peers older than 5.70 (other
//! field sizes) are refused.

use rocev2_core::qp::Mtu;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv6Addr};

/// perftest's default TCP port (`DEF_PORT`).
pub const DEFAULT_PORT: u16 = 18515;

/// The version we announce: perftest 6.06's, whose exchange this module implements.
pub const VERSION: &str = "6.06";

/// The oldest peer version we accept (`check_version_compatibility`).
pub const MIN_PEER_VERSION: f64 = 5.70;

/// Bytes of the version message (`MAX_VERSION`).
pub const VERSION_LEN: usize = 16;

/// Bytes of the key message with a GID, NUL included (`KEY_MSG_SIZE_GID`).
pub const KEY_MSG_LEN: usize = 108;

/// What the client and server write last (`ctx_close_connection`).
pub const DONE: &[u8; 5] = b"done\0";

/// Why an exchange step failed.
#[derive(Debug, thiserror::Error)]
pub enum PerftestError {
    /// The TCP connection failed or closed early.
    #[error("perftest exchange connection: {0}")]
    Io(#[from] std::io::Error),
    /// A message that does not parse.
    #[error("malformed perftest {what} message {text:?}")]
    Malformed {
        /// Which step.
        what: &'static str,
        /// The message, lossily as text.
        text: String,
    },
    /// The peer's version is older than [`MIN_PEER_VERSION`].
    #[error("peer runs perftest {0}; this exchange needs 5.70 or later")]
    OldPeer(String),
}

fn malformed(what: &'static str, bytes: &[u8]) -> PerftestError {
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    PerftestError::Malformed {
        what,
        text: String::from_utf8_lossy(&bytes[..end]).into_owned(),
    }
}

/// One side's QP and buffer (`struct pingpong_dest`), as the key message carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyMsg {
    /// LID; 0 on RoCE.
    pub lid: u16,
    /// Outstanding RDMA READs this side accepts as responder (its `max_dest_rd_atomic`).
    pub out_reads: u16,
    /// QP number, 24 bits.
    pub qpn: u32,
    /// First PSN this side sends, 24 bits.
    pub psn: u32,
    /// R_Key of the buffer.
    pub rkey: u32,
    /// Address the peer writes to or reads from.
    pub vaddr: u64,
    /// GID, 16 bytes in network order.
    pub gid: [u8; 16],
    /// SRQ number (XRC/DC only; 0 here).
    pub srqn: u32,
}

impl KeyMsg {
    /// The 108-byte message: `KEY_PRINT_FMT_GID`, i.e.
    /// `%04x:%04x:%06x:%06x:%08x:%016llx:` then the 16 GID bytes as `%02x:` each, then
    /// `%08x:` for the SRQ number, and a NUL.
    pub fn to_wire(&self) -> [u8; KEY_MSG_LEN] {
        let mut text = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr
        );
        for b in self.gid {
            text.push_str(&format!("{b:02x}:"));
        }
        text.push_str(&format!("{:08x}:", self.srqn));
        let mut msg = [0u8; KEY_MSG_LEN];
        let n = text.len().min(KEY_MSG_LEN - 1);
        msg[..n].copy_from_slice(&text.as_bytes()[..n]);
        msg
    }

    /// Parses a peer's message: colon-separated hex fields in the order above
    /// (`ethernet_read_keys` splits at each `:` and converts with `strtol(…, 16)`). We insist
    /// on every field being present and in range, which perftest does not check.
    ///
    /// # Errors
    /// [`PerftestError::Malformed`].
    pub fn from_wire(msg: &[u8]) -> Result<KeyMsg, PerftestError> {
        let bad = || malformed("key", msg);
        let end = msg.iter().position(|b| *b == 0).ok_or_else(bad)?;
        let text = std::str::from_utf8(&msg[..end]).map_err(|_| bad())?;
        let f: Vec<&str> = text.split(':').collect();
        // 6 fields, 16 GID bytes, SRQN, and the empty tail after the last colon.
        if f.len() != 24 || !f[23].is_empty() {
            return Err(bad());
        }
        let hex = |s: &str, max: u64| -> Result<u64, PerftestError> {
            if s.is_empty() || s.len() > 16 {
                return Err(bad());
            }
            u64::from_str_radix(s, 16)
                .ok()
                .filter(|v| *v <= max)
                .ok_or_else(bad)
        };
        let mut gid = [0u8; 16];
        for (i, g) in gid.iter_mut().enumerate() {
            *g = hex(f[6 + i], 0xff)? as u8;
        }
        Ok(KeyMsg {
            lid: hex(f[0], 0xffff)? as u16,
            out_reads: hex(f[1], 0xffff)? as u16,
            qpn: hex(f[2], 0xff_ffff)? as u32,
            psn: hex(f[3], 0xff_ffff)? as u32,
            rkey: hex(f[4], 0xffff_ffff)? as u32,
            vaddr: hex(f[5], u64::MAX)?,
            gid,
            srqn: hex(f[22], 0xffff_ffff)? as u32,
        })
    }

    /// The peer's address from its GID (IPv4-mapped GIDs as IPv4).
    pub fn ip(&self) -> IpAddr {
        rocev2_core::wire::gid::gid_to_ip(Ipv6Addr::from(self.gid))
    }
}

/// The version message: [`VERSION`] NUL-padded to 16 bytes.
pub fn version_to_wire(version: &str) -> [u8; VERSION_LEN] {
    let mut msg = [0u8; VERSION_LEN];
    let n = version.len().min(VERSION_LEN - 1);
    msg[..n].copy_from_slice(&version.as_bytes()[..n]);
    msg
}

/// The peer's version text and its value as perftest compares it (`atof`: the leading
/// decimal number).
///
/// # Errors
/// [`PerftestError::Malformed`] when the text does not start with a number.
pub fn version_from_wire(msg: &[u8]) -> Result<(String, f64), PerftestError> {
    let end = msg.iter().position(|b| *b == 0).unwrap_or(msg.len());
    let text = String::from_utf8_lossy(&msg[..end]).into_owned();
    let num: String = text
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let v = num.parse::<f64>().map_err(|_| malformed("version", msg))?;
    Ok((text, v))
}

/// The MTU message: the code as one ASCII digit and a NUL.
pub fn mtu_to_wire(code: u8) -> [u8; 2] {
    [b'0' + code.min(9), 0]
}

/// Parses the MTU message; `None` when it is not a valid code, which perftest ignores
/// (`valid_mtu_size`), keeping its own.
pub fn mtu_from_wire(msg: [u8; 2]) -> Option<u8> {
    let code = msg[0].checked_sub(b'0')?;
    Mtu::from_code(code).map(|_| code)
}

/// One side's bandwidth report (`struct bw_report_data`, the fields `xchg_bw_reports`
/// sends to a peer of 5.33 or later).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BwReport {
    /// Message size, bytes.
    pub size: u64,
    /// Messages.
    pub iters: u64,
    /// Peak bandwidth, in the report's unit (MB/s or Gb/s).
    pub bw_peak: f64,
    /// Average bandwidth, same unit.
    pub bw_avg: f64,
    /// Message rate, Mpps.
    pub msg_rate: f64,
}

impl BwReport {
    /// The five steps' payloads, in order: size and iterations as big-endian 64-bit integers,
    /// then the doubles byte-swapped to big-endian (`hton_long`, `hton_double`).
    pub fn to_wire(&self) -> [[u8; 8]; 5] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.bw_peak.to_bits().to_be_bytes(),
            self.bw_avg.to_bits().to_be_bytes(),
            self.msg_rate.to_bits().to_be_bytes(),
        ]
    }

    /// Inverse of [`Self::to_wire`].
    pub fn from_wire(w: &[[u8; 8]; 5]) -> BwReport {
        let f = |b: [u8; 8]| f64::from_bits(u64::from_be_bytes(b));
        BwReport {
            size: u64::from_be_bytes(w[0]),
            iters: u64::from_be_bytes(w[1]),
            bw_peak: f(w[2]),
            bw_avg: f(w[3]),
            msg_rate: f(w[4]),
        }
    }
}

/// One end of the exchange over a connected stream.
#[derive(Debug)]
pub struct Exchange<S> {
    stream: S,
    client: bool,
}

impl<S: Read + Write> Exchange<S> {
    /// Wraps the connected stream; `client` is the side that connected.
    pub fn new(stream: S, client: bool) -> Self {
        Exchange { stream, client }
    }

    /// The stream, e.g. to wait for it to become readable.
    pub fn stream(&self) -> &S {
        &self.stream
    }

    /// One step (`ctx_xchg_data_ethernet`): the client writes `mine` then reads; the server
    /// reads then writes. Returns the peer's bytes, as many as `mine`.
    ///
    /// # Errors
    /// [`PerftestError::Io`].
    pub fn xchg<const N: usize>(&mut self, mine: &[u8; N]) -> Result<[u8; N], PerftestError> {
        let mut theirs = [0u8; N];
        if self.client {
            self.stream.write_all(mine)?;
            self.stream.read_exact(&mut theirs)?;
        } else {
            self.stream.read_exact(&mut theirs)?;
            self.stream.write_all(mine)?;
        }
        Ok(theirs)
    }

    /// Steps 1–3: versions, system data, MTU. Returns the peer's version text and the
    /// agreed cycle buffer, cache line and MTU code.
    ///
    /// # Errors
    /// [`PerftestError::OldPeer`], [`PerftestError::Malformed`], [`PerftestError::Io`].
    pub fn setup(&mut self, mine: &Setup) -> Result<(String, Setup), PerftestError> {
        let (text, v) = version_from_wire(&self.xchg(&version_to_wire(VERSION))?)?;
        if v < MIN_PEER_VERSION {
            return Err(PerftestError::OldPeer(text));
        }
        let cycle = i32::from_be_bytes(self.xchg(&mine.cycle_buffer.to_be_bytes())?);
        let line = i32::from_be_bytes(self.xchg(&mine.cache_line.to_be_bytes())?);
        let mtu = mtu_from_wire(self.xchg(&mtu_to_wire(mine.mtu_code))?);
        Ok((
            text,
            Setup {
                cycle_buffer: cycle.max(mine.cycle_buffer),
                cache_line: line.max(mine.cache_line),
                mtu_code: mtu.map_or(mine.mtu_code, |m| m.min(mine.mtu_code)),
            },
        ))
    }

    /// One key handshake (`ctx_hand_shake`): our [`KeyMsg`] for the peer's.
    ///
    /// # Errors
    /// [`PerftestError::Malformed`], [`PerftestError::Io`].
    pub fn hand_shake(&mut self, mine: &KeyMsg) -> Result<KeyMsg, PerftestError> {
        KeyMsg::from_wire(&self.xchg(&mine.to_wire())?)
    }

    /// Step 5 (`xchg_bw_reports`): our report for the peer's.
    ///
    /// # Errors
    /// [`PerftestError::Io`].
    pub fn bw_reports(&mut self, mine: &BwReport) -> Result<BwReport, PerftestError> {
        let w = mine.to_wire();
        let mut theirs = [[0u8; 8]; 5];
        for (t, m) in theirs.iter_mut().zip(&w) {
            *t = self.xchg(m)?;
        }
        Ok(BwReport::from_wire(&theirs))
    }

    /// Step 6 (`ctx_close_connection`): a last handshake, then `"done"`, whose write may fail
    /// harmlessly when a newer peer has already closed.
    ///
    /// # Errors
    /// As [`Self::hand_shake`].
    pub fn close(&mut self, mine: &KeyMsg) -> Result<(), PerftestError> {
        self.hand_shake(mine)?;
        let _ = self.stream.write_all(DONE);
        Ok(())
    }
}

/// What steps 2 and 3 carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setup {
    /// Cycle buffer, bytes (perftest: the page size, `DEF_PAGE_SIZE` 4096).
    pub cycle_buffer: i32,
    /// Cache line, bytes (`DEF_CACHE_LINE_SIZE` 64).
    pub cache_line: i32,
    /// MTU as `enum ibv_mtu` code.
    pub mtu_code: u8,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// The server VM of /work/shared/tools/rxe-vm (QPN 0x11, GID ::ffff:192.168.77.10), with
    /// an rkey and address of the kind rxe hands out.
    fn key() -> KeyMsg {
        KeyMsg {
            lid: 0,
            out_reads: 0x80,
            qpn: 0x11,
            psn: 0x7d2a9e,
            rkey: 0x1234,
            vaddr: 0x5581_2f0c_2000,
            gid: rocev2_core::wire::gid::gid("192.168.77.10".parse().unwrap()).octets(),
            srqn: 0,
        }
    }

    /// `KEY_PRINT_FMT_GID` written out by hand for [`key`]: 107 characters and a NUL.
    const KEY_TEXT: &str = "0000:0080:000011:7d2a9e:00001234:000055812f0c2000:\
00:00:00:00:00:00:00:00:00:00:ff:ff:c0:a8:4d:0a:00000000:";

    #[test]
    fn key_msg_emit_matches_perftest_format() {
        assert_eq!(KEY_TEXT.len(), KEY_MSG_LEN - 1);
        let w = key().to_wire();
        assert_eq!(&w[..KEY_MSG_LEN - 1], KEY_TEXT.as_bytes());
        assert_eq!(w[KEY_MSG_LEN - 1], 0);
    }

    #[test]
    fn key_msg_parse_round_trips() {
        let mut w = [0u8; KEY_MSG_LEN];
        w[..KEY_TEXT.len()].copy_from_slice(KEY_TEXT.as_bytes());
        let k = KeyMsg::from_wire(&w).unwrap();
        assert_eq!(k, key());
        assert_eq!(k.ip(), "192.168.77.10".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn key_msg_malformed_is_refused() {
        let good = KEY_TEXT.to_string();
        for bad in [
            String::new(),
            good.replacen("0000:", "", 1),
            good.replacen("000011", "1000000", 1),
            good.replacen(":ff:ff:", ":fff:ff:", 1),
            good.replacen("7d2a9e", "zz", 1),
            good.trim_end_matches(':').to_string(),
            good.replacen(":00000000:", ":0000:000:", 1),
        ] {
            let mut w = [0u8; KEY_MSG_LEN];
            let n = bad.len().min(KEY_MSG_LEN - 1);
            w[..n].copy_from_slice(&bad.as_bytes()[..n]);
            assert!(KeyMsg::from_wire(&w).is_err(), "{bad}");
        }
        assert!(KeyMsg::from_wire(&[b'0'; KEY_MSG_LEN]).is_err(), "no NUL");
    }

    #[test]
    fn version_message_is_nul_padded_text() {
        let w = version_to_wire(VERSION);
        assert_eq!(&w, b"6.06\0\0\0\0\0\0\0\0\0\0\0\0");
        assert_eq!(version_from_wire(&w).unwrap(), ("6.06".into(), 6.06));
        assert_eq!(version_from_wire(b"5.70-beta\0").unwrap().1, 5.70);
        assert!(version_from_wire(b"\0").is_err());
    }

    #[test]
    fn mtu_message_is_code_digit_and_nul() {
        assert_eq!(mtu_to_wire(Mtu::Mtu1024.code()), *b"3\0");
        assert_eq!(mtu_from_wire(*b"5\0"), Some(5));
        assert_eq!(mtu_from_wire(*b"0\0"), None);
        assert_eq!(mtu_from_wire(*b"6\0"), None);
    }

    #[test]
    fn bw_report_is_big_endian() {
        let r = BwReport {
            size: 65536,
            iters: 5000,
            bw_peak: 1.5,
            bw_avg: -2.0,
            msg_rate: 0.25,
        };
        let w = r.to_wire();
        assert_eq!(w[0], [0, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(w[1], [0, 0, 0, 0, 0, 0, 0x13, 0x88]);
        // IEEE 754: 1.5 = 0x3ff8_0000_0000_0000, -2.0 = 0xc000…, 0.25 = 0x3fd0….
        assert_eq!(w[2], [0x3f, 0xf8, 0, 0, 0, 0, 0, 0]);
        assert_eq!(w[3], [0xc0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(w[4], [0x3f, 0xd0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(BwReport::from_wire(&w), r);
    }

    /// A stream whose reads come from a script and whose writes are recorded.
    struct Script {
        input: Cursor<Vec<u8>>,
        output: Vec<u8>,
    }
    impl Read for Script {
        fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
            self.input.read(b)
        }
    }
    impl Write for Script {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.output.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn setup_sends_version_sysdata_mtu_and_takes_max_and_min() {
        let mut peer = version_to_wire("6.06").to_vec();
        peer.extend_from_slice(&8192i32.to_be_bytes());
        peer.extend_from_slice(&64i32.to_be_bytes());
        peer.extend_from_slice(b"3\0");
        let s = Script {
            input: Cursor::new(peer),
            output: Vec::new(),
        };
        let mut x = Exchange::new(s, true);
        let mine = Setup {
            cycle_buffer: 4096,
            cache_line: 64,
            mtu_code: 5,
        };
        let (v, agreed) = x.setup(&mine).unwrap();
        assert_eq!(v, "6.06");
        assert_eq!(
            agreed,
            Setup {
                cycle_buffer: 8192,
                cache_line: 64,
                mtu_code: 3
            }
        );
        let mut want = version_to_wire(VERSION).to_vec();
        want.extend_from_slice(&[0, 0, 0x10, 0, 0, 0, 0, 64, b'5', 0]);
        assert_eq!(x.stream().output, want);
    }

    #[test]
    fn setup_refuses_old_peer() {
        let s = Script {
            input: Cursor::new(version_to_wire("5.60").to_vec()),
            output: Vec::new(),
        };
        let mine = Setup {
            cycle_buffer: 4096,
            cache_line: 64,
            mtu_code: 3,
        };
        assert!(matches!(
            Exchange::new(s, false).setup(&mine),
            Err(PerftestError::OldPeer(v)) if v == "5.60"
        ));
    }

    #[test]
    fn close_is_handshake_then_done() {
        let s = Script {
            input: Cursor::new(key().to_wire().to_vec()),
            output: Vec::new(),
        };
        let mut x = Exchange::new(s, false);
        assert_eq!(x.hand_shake(&key()).unwrap(), key());
        x.stream.input = Cursor::new(key().to_wire().to_vec());
        x.stream.output.clear();
        x.close(&key()).unwrap();
        let out = &x.stream().output;
        assert_eq!(&out[..KEY_MSG_LEN], &key().to_wire());
        assert_eq!(&out[KEY_MSG_LEN..], DONE);
    }
}
