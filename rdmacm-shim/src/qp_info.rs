//! The QP exchange of rocev2's own one-sided tools (`write_bw`, `rocev2-wiretest`): one text
//! line each way over TCP, as `ibv_rc_pingpong` exchanges `LID:QPN:PSN:GID`, but carrying the
//! remote buffer a WRITE or READ workload needs:
//!
//! `WBW1 <qpn hex6> <psn hex6> <ip> <rkey hex8> <addr hex16> <len> [rext=<word hex8>]`
//!
//! The IP address stands for the GID (`wire::gid`). The optional last field is the capability
//! word of docs/wire.md ("Negotiation"; bit 3 multipath): a side offering no extension sends
//! no such field. (The tag names the format's first user, `write_bw`, version 1.)
//!
//! Deviations: none (our own format; it pairs rocev2 tools with each other only).

use crate::oob::OobError;
use rocev2_core::qp::ExtCaps;
use std::net::IpAddr;

/// What each side tells the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInfo {
    /// QP number.
    pub qpn: u32,
    /// First PSN this side sends.
    pub psn: u32,
    /// GID, as the IP address it stands for.
    pub ip: IpAddr,
    /// R_Key of the buffer the other side may access.
    pub rkey: u32,
    /// Its virtual address.
    pub addr: u64,
    /// Its length, bytes.
    pub len: u64,
    /// The capability word, only from a side offering an extension.
    pub rext: Option<u32>,
}

/// The line's first field.
const TAG: &str = "WBW1";

impl QpInfo {
    /// The capability word a side sends when it offers multipath (`--multipath`), else none.
    pub fn multipath_offer(offer: bool) -> Option<u32> {
        offer.then(|| {
            ExtCaps {
                multipath: true,
                ..ExtCaps::default()
            }
            .to_word()
        })
    }

    /// The line, newline included.
    pub fn to_line(&self) -> String {
        let rext = self
            .rext
            .map(|w| format!(" rext={w:08x}"))
            .unwrap_or_default();
        format!(
            "{TAG} {:06x} {:06x} {} {:08x} {:016x} {}{rext}\n",
            self.qpn, self.psn, self.ip, self.rkey, self.addr, self.len
        )
    }

    /// Parses a line (its newline already stripped).
    ///
    /// # Errors
    /// [`OobError::Malformed`] for anything but the format above.
    pub fn from_line(line: &str) -> Result<QpInfo, OobError> {
        let bad = || OobError::Malformed(line.to_string());
        let f: Vec<&str> = line.split_whitespace().collect();
        if !(f.len() == 7 || f.len() == 8) || f[0] != TAG {
            return Err(bad());
        }
        let hex32 = |s: &str| u32::from_str_radix(s, 16).map_err(|_| bad());
        let rext = match f.get(7) {
            None => None,
            Some(t) => Some(hex32(t.strip_prefix("rext=").ok_or_else(bad)?)?),
        };
        Ok(QpInfo {
            qpn: hex32(f[1])?,
            psn: hex32(f[2])?,
            ip: f[3].parse().map_err(|_| bad())?,
            rkey: hex32(f[4])?,
            addr: u64::from_str_radix(f[5], 16).map_err(|_| bad())?,
            len: f[6].parse().map_err(|_| bad())?,
            rext,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(rext: Option<u32>) -> QpInfo {
        QpInfo {
            qpn: 0x11,
            psn: 0x7d2a9e,
            ip: "10.0.0.2".parse().unwrap(),
            rkey: 0x1234,
            addr: 0x7f00_0000_0000,
            len: 1 << 20,
            rext,
        }
    }

    #[test]
    fn line_without_offer_has_seven_fields() {
        let l = info(None).to_line();
        assert_eq!(
            l,
            "WBW1 000011 7d2a9e 10.0.0.2 00001234 00007f0000000000 1048576\n"
        );
        assert_eq!(QpInfo::from_line(l.trim_end()).unwrap(), info(None));
    }

    #[test]
    fn line_carries_the_capability_word() {
        let offer = QpInfo::multipath_offer(true);
        assert_eq!(offer, Some(0x8), "bit 3: multipath (docs/wire.md)");
        assert_eq!(QpInfo::multipath_offer(false), None);
        let l = info(offer).to_line();
        assert!(l.ends_with(" 1048576 rext=00000008\n"), "{l}");
        assert_eq!(QpInfo::from_line(l.trim_end()).unwrap(), info(offer));
        let v6 = QpInfo {
            ip: "fd00::2".parse().unwrap(),
            ..info(None)
        };
        assert_eq!(QpInfo::from_line(v6.to_line().trim_end()).unwrap(), v6);
    }

    #[test]
    fn malformed_lines_are_refused() {
        for bad in [
            "",
            "WBW1",
            "WBW2 000011 7d2a9e 10.0.0.2 00001234 00007f0000000000 1048576",
            "WBW1 000011 7d2a9e 10.0.0.300 00001234 00007f0000000000 1048576",
            "WBW1 zz 7d2a9e 10.0.0.2 00001234 00007f0000000000 1048576",
            "WBW1 000011 7d2a9e 10.0.0.2 00001234 00007f0000000000 -1",
            "WBW1 000011 7d2a9e 10.0.0.2 00001234 00007f0000000000 1048576 ext=8",
            "WBW1 000011 7d2a9e 10.0.0.2 00001234 00007f0000000000 1048576 rext=zz",
            "WBW1 000011 7d2a9e 10.0.0.2 00001234 00007f0000000000 1048576 rext=8 x",
        ] {
            assert!(
                matches!(QpInfo::from_line(bad), Err(OobError::Malformed(_))),
                "{bad}"
            );
        }
    }
}
