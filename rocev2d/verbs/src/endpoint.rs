//! [`Endpoint`]: everything a peer needs to connect to one QP, and the regions it may access.
//!
//! Every verbs program exchanges these values out of band (`ibv_rc_pingpong` sends
//! `LID:QPN:PSN:GID`; the `ibverbs` crate serialises a `QueuePairEndpoint`; async-rdma sends an
//! `MrToken` per region). rocev2 has one type for all of it and one byte form, used by
//! [`crate::connect`] and by every rocev2 tool; with the `serde` feature it also serialises to
//! any serde format for programs that carry it over their own channel.
//!
//! The byte form, big-endian, version 1:
//!
//! | bytes | field |
//! | --- | --- |
//! | 0 | version (1) |
//! | 1..3 | length of what follows |
//! | 3 | flags: bit 0 IPv6 GID, bit 1 MAC present, the others 0 |
//! | 4..8 | QP number (24 bits) |
//! | 8..12 | first PSN (24 bits) |
//! | 12..14 | path MTU in bytes (256, 512, 1024, 2048 or 4096) |
//! | 14..18 | extension capability word (docs/wire.md, "Negotiation") |
//! | 18.. | GID as an IPv4 (4 bytes) or IPv6 (16 bytes) address, then the MAC (6 bytes) if present, then the region count (2 bytes) and per region its address (8), length (8) and R_Key (4) |
//!
//! The leading length lets a stream reader take one endpoint without knowing its fields; a
//! later version may append fields, and this one refuses what it cannot read with an error
//! that names the version. Parsing never panics: every malformation is an
//! [`EndpointFormatError`] naming it.
//!
//! Deviations from the `ibverbs` crate's `QueuePairEndpoint`: no LID (RoCE addresses by GID);
//! the GID is carried as the IP address it stands for.

use crate::mr::Mr;
use rocev2_core::mr::Rkey;
use rocev2_core::qp::{ExtCaps, Mtu};
use rocev2_core::wire::Qpn;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What a peer needs to connect a QP to ours, and the regions of ours it may access.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "serde",
    serde(try_from = "serde_form::Endpoint", into = "serde_form::Endpoint")
)]
pub struct Endpoint {
    /// The QP number the peer sends to.
    pub qpn: Qpn,
    /// The first PSN this QP sends (the peer's expected PSN), 24 bits.
    pub psn: u32,
    /// The GID, as the IP address it stands for (IPv4-mapped GIDs as IPv4).
    pub ip: IpAddr,
    /// The MAC address of this side's interface, when known. Only a peer on the same link may
    /// use it as its next hop; [`crate::connect`] resolves the next hop through the neighbour
    /// table instead, so a routed path works too.
    pub mac: Option<[u8; 6]>,
    /// The largest path MTU this side accepts; both sides use the smaller of theirs.
    pub mtu: Mtu,
    /// The rocev2 extensions this QP offers (docs/wire.md, "Negotiation"); none for a
    /// standard RoCEv2 peer.
    pub ext: ExtCaps,
    /// Regions the peer may READ, WRITE or run atomics on (`MrToken`s in async-rdma's words).
    pub mrs: Vec<RemoteMr>,
}

/// A region of the other side: what a READ, WRITE or atomic names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "serde",
    serde(from = "serde_form::RemoteMr", into = "serde_form::RemoteMr")
)]
pub struct RemoteMr {
    /// Virtual address of its first byte.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Its R_Key.
    pub rkey: Rkey,
}

impl RemoteMr {
    /// The address of the byte at `offset`, or `None` when `len` bytes from there would not lie
    /// inside the region: a WRITE or READ of `len` bytes at `offset` targets this address.
    pub fn addr_at(&self, offset: u64, len: u64) -> Option<u64> {
        let end = offset.checked_add(len)?;
        (end <= self.len).then(|| self.addr + offset)
    }
}

impl From<&Mr> for RemoteMr {
    fn from(mr: &Mr) -> RemoteMr {
        RemoteMr {
            addr: mr.addr(),
            len: mr.len(),
            rkey: mr.rkey(),
        }
    }
}

/// What is wrong with an endpoint's byte form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EndpointFormatError {
    /// Fewer bytes than the fields need.
    #[error("endpoint truncated: {need} bytes needed, {have} present")]
    Truncated {
        /// Bytes the fields read so far need.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// A version this build cannot read (the peer runs a newer or foreign program).
    #[error("endpoint version {0} is not supported (this build reads version {VERSION})")]
    Version(u8),
    /// More bytes than the length field announces.
    #[error("endpoint has {0} bytes after its announced length")]
    Trailing(usize),
    /// Flag bits this version does not define.
    #[error("endpoint flags {0:#04x} set undefined bits")]
    Flags(u8),
    /// A QP number or PSN wider than 24 bits.
    #[error("endpoint {field} {value:#x} is wider than 24 bits")]
    Wide {
        /// `"QP number"` or `"PSN"`.
        field: &'static str,
        /// The value.
        value: u32,
    },
    /// Not one of the five IBA path MTUs.
    #[error("endpoint MTU {0} is not 256, 512, 1024, 2048 or 4096")]
    Mtu(u32),
    /// More regions than one endpoint carries ([`Endpoint::MAX_MRS`]).
    #[error("endpoint carries {0} regions, at most {max} fit", max = Endpoint::MAX_MRS)]
    TooManyMrs(usize),
}

/// The one version this build reads and writes.
const VERSION: u8 = 1;

/// Byte ranges of the fixed fields; the rest is laid out by the flags.
mod field {
    use std::ops::Range;
    pub const VERSION: usize = 0;
    pub const LENGTH: Range<usize> = 1..3;
    pub const FLAGS: usize = 3;
    pub const QPN: Range<usize> = 4..8;
    pub const PSN: Range<usize> = 8..12;
    pub const MTU: Range<usize> = 12..14;
    pub const EXT: Range<usize> = 14..18;
    pub const IP: usize = 18;
    /// The bytes before the length field's count starts.
    pub const HEADER: usize = 3;
    /// One region: address, length, R_Key.
    pub const MR: usize = 20;
}

const FLAG_V6: u8 = 1;
const FLAG_MAC: u8 = 2;

impl Endpoint {
    /// Regions one endpoint carries at most (so its byte form stays under 64 KiB).
    pub const MAX_MRS: usize = 3000;

    /// Bytes of the leading header ([`Endpoint::body_len`] reads it): version and length.
    pub const HEADER_LEN: usize = field::HEADER;

    /// Length of the byte form.
    pub fn buffer_len(&self) -> usize {
        let ip = if self.ip.is_ipv6() { 16 } else { 4 };
        let mac = if self.mac.is_some() { 6 } else { 0 };
        field::IP + ip + mac + 2 + field::MR * self.mrs.len()
    }

    /// The byte form.
    ///
    /// # Errors
    /// [`EndpointFormatError::TooManyMrs`] above [`Endpoint::MAX_MRS`] regions.
    pub fn to_bytes(&self) -> Result<Vec<u8>, EndpointFormatError> {
        if self.mrs.len() > Endpoint::MAX_MRS {
            return Err(EndpointFormatError::TooManyMrs(self.mrs.len()));
        }
        let len = self.buffer_len();
        let mut b = Vec::with_capacity(len);
        b.push(VERSION);
        // At most 18 + 16 + 6 + 2 + 20 · MAX_MRS bytes: fits the 16-bit field.
        b.extend_from_slice(&((len - field::HEADER) as u16).to_be_bytes());
        let flags = if self.ip.is_ipv6() { FLAG_V6 } else { 0 }
            | if self.mac.is_some() { FLAG_MAC } else { 0 };
        b.push(flags);
        b.extend_from_slice(&self.qpn.value().to_be_bytes());
        b.extend_from_slice(&(self.psn & 0xff_ffff).to_be_bytes());
        b.extend_from_slice(&(self.mtu.bytes() as u16).to_be_bytes());
        b.extend_from_slice(&self.ext.to_word().to_be_bytes());
        match self.ip {
            IpAddr::V4(a) => b.extend_from_slice(&a.octets()),
            IpAddr::V6(a) => b.extend_from_slice(&a.octets()),
        }
        if let Some(mac) = self.mac {
            b.extend_from_slice(&mac);
        }
        b.extend_from_slice(&(self.mrs.len() as u16).to_be_bytes());
        for mr in &self.mrs {
            b.extend_from_slice(&mr.addr.to_be_bytes());
            b.extend_from_slice(&mr.len.to_be_bytes());
            b.extend_from_slice(&mr.rkey.value().to_be_bytes());
        }
        debug_assert_eq!(b.len(), len);
        Ok(b)
    }

    /// How many bytes follow a header of [`Endpoint::HEADER_LEN`] bytes: what a stream reader
    /// reads next to hold one whole endpoint.
    ///
    /// # Errors
    /// [`EndpointFormatError::Truncated`] for a short header, [`EndpointFormatError::Version`]
    /// for a version this build cannot read.
    pub fn body_len(header: &[u8]) -> Result<usize, EndpointFormatError> {
        let h = header
            .get(..field::HEADER)
            .ok_or(EndpointFormatError::Truncated {
                need: field::HEADER,
                have: header.len(),
            })?;
        if h[field::VERSION] != VERSION {
            return Err(EndpointFormatError::Version(h[field::VERSION]));
        }
        Ok(usize::from(u16::from_be_bytes([
            h[field::LENGTH.start],
            h[field::LENGTH.start + 1],
        ])))
    }

    /// Parses exactly one endpoint's byte form.
    ///
    /// # Errors
    /// The first malformation found, as an [`EndpointFormatError`].
    pub fn parse(bytes: &[u8]) -> Result<Endpoint, EndpointFormatError> {
        let total = field::HEADER + Endpoint::body_len(bytes)?;
        if bytes.len() > total {
            return Err(EndpointFormatError::Trailing(bytes.len() - total));
        }
        let mut r = Reader {
            b: bytes,
            at: field::FLAGS,
        };
        let flags = r.take::<1>()?[0];
        if flags & !(FLAG_V6 | FLAG_MAC) != 0 {
            return Err(EndpointFormatError::Flags(flags));
        }
        debug_assert_eq!(r.at, field::QPN.start);
        let qpn = u32::from_be_bytes(r.take()?);
        debug_assert_eq!(r.at, field::PSN.start);
        let psn = u32::from_be_bytes(r.take()?);
        for (field, value) in [("QP number", qpn), ("PSN", psn)] {
            if value > 0xff_ffff {
                return Err(EndpointFormatError::Wide { field, value });
            }
        }
        debug_assert_eq!(r.at, field::MTU.start);
        let mtu = u32::from(u16::from_be_bytes(r.take()?));
        let mtu = Mtu::from_bytes(mtu).ok_or(EndpointFormatError::Mtu(mtu))?;
        debug_assert_eq!(r.at, field::EXT.start);
        let ext = ExtCaps::from_word(u32::from_be_bytes(r.take()?));
        debug_assert_eq!(r.at, field::IP);
        let ip = if flags & FLAG_V6 != 0 {
            IpAddr::V6(Ipv6Addr::from(r.take::<16>()?))
        } else {
            IpAddr::V4(Ipv4Addr::from(r.take::<4>()?))
        };
        let mac = if flags & FLAG_MAC != 0 {
            Some(r.take::<6>()?)
        } else {
            None
        };
        let n = usize::from(u16::from_be_bytes(r.take()?));
        if n > Endpoint::MAX_MRS {
            return Err(EndpointFormatError::TooManyMrs(n));
        }
        let mut mrs = Vec::with_capacity(n.min(bytes.len() / field::MR));
        for _ in 0..n {
            mrs.push(RemoteMr {
                addr: u64::from_be_bytes(r.take()?),
                len: u64::from_be_bytes(r.take()?),
                rkey: Rkey::new(u32::from_be_bytes(r.take()?)),
            });
        }
        if r.at < total {
            return Err(EndpointFormatError::Trailing(total - r.at));
        }
        Ok(Endpoint {
            qpn: Qpn::new(qpn),
            psn,
            ip,
            mac,
            mtu,
            ext,
            mrs,
        })
    }
}

/// Reads fixed-size fields in order, refusing to pass the end.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], EndpointFormatError> {
        let need = self.at + N;
        let got = self
            .b
            .get(self.at..need)
            .ok_or(EndpointFormatError::Truncated {
                need,
                have: self.b.len(),
            })?;
        self.at = need;
        let mut out = [0; N];
        out.copy_from_slice(got);
        Ok(out)
    }
}

/// The serde form: plain numbers, checked on the way in as the byte form is.
#[cfg(feature = "serde")]
mod serde_form {
    use super::EndpointFormatError;
    use std::net::IpAddr;

    #[derive(serde::Serialize, serde::Deserialize)]
    pub struct Endpoint {
        qpn: u32,
        psn: u32,
        ip: IpAddr,
        mac: Option<[u8; 6]>,
        mtu: u32,
        ext: u32,
        mrs: Vec<super::RemoteMr>,
    }

    #[derive(serde::Serialize, serde::Deserialize)]
    pub struct RemoteMr {
        addr: u64,
        len: u64,
        rkey: u32,
    }

    impl From<super::Endpoint> for Endpoint {
        fn from(e: super::Endpoint) -> Endpoint {
            Endpoint {
                qpn: e.qpn.value(),
                psn: e.psn,
                ip: e.ip,
                mac: e.mac,
                mtu: e.mtu.bytes(),
                ext: e.ext.to_word(),
                mrs: e.mrs,
            }
        }
    }

    impl TryFrom<Endpoint> for super::Endpoint {
        type Error = EndpointFormatError;
        fn try_from(e: Endpoint) -> Result<super::Endpoint, EndpointFormatError> {
            for (field, value) in [("QP number", e.qpn), ("PSN", e.psn)] {
                if value > 0xff_ffff {
                    return Err(EndpointFormatError::Wide { field, value });
                }
            }
            if e.mrs.len() > super::Endpoint::MAX_MRS {
                return Err(EndpointFormatError::TooManyMrs(e.mrs.len()));
            }
            Ok(super::Endpoint {
                qpn: rocev2_core::wire::Qpn::new(e.qpn),
                psn: e.psn,
                ip: e.ip,
                mac: e.mac,
                mtu: rocev2_core::qp::Mtu::from_bytes(e.mtu)
                    .ok_or(EndpointFormatError::Mtu(e.mtu))?,
                ext: rocev2_core::qp::ExtCaps::from_word(e.ext),
                mrs: e.mrs,
            })
        }
    }

    impl From<super::RemoteMr> for RemoteMr {
        fn from(m: super::RemoteMr) -> RemoteMr {
            RemoteMr {
                addr: m.addr,
                len: m.len,
                rkey: m.rkey.value(),
            }
        }
    }

    impl From<RemoteMr> for super::RemoteMr {
        fn from(m: RemoteMr) -> super::RemoteMr {
            super::RemoteMr {
                addr: m.addr,
                len: m.len,
                rkey: rocev2_core::mr::Rkey::new(m.rkey),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Endpoint {
        Endpoint {
            qpn: Qpn::new(0x11),
            psn: 0x7d2a9e,
            ip: "10.0.0.2".parse().unwrap(),
            mac: Some([2, 0, 0, 0, 0, 1]),
            mtu: Mtu::Mtu1024,
            ext: ExtCaps::from_word(8),
            mrs: vec![RemoteMr {
                addr: 0x1000_0000,
                len: 4096,
                rkey: Rkey::new(0x1234),
            }],
        }
    }

    /// The sample, byte by byte: the table of the module docs.
    const SAMPLE: [u8; 50] = [
        1, 0, 47,   // version, length
        0x02, // flags: IPv4, MAC
        0, 0, 0, 0x11, // QPN
        0, 0x7d, 0x2a, 0x9e, // PSN
        0x04, 0x00, // MTU 1024
        0, 0, 0, 8, // multipath
        10, 0, 0, 2, // GID
        2, 0, 0, 0, 0, 1, // MAC
        0, 1, // one region
        0, 0, 0, 0, 0x10, 0, 0, 0, // address
        0, 0, 0, 0, 0, 0, 0x10, 0, // length
        0, 0, 0x12, 0x34, // R_Key
    ];

    #[test]
    fn emit_matches_the_documented_layout() {
        assert_eq!(sample().to_bytes().unwrap(), SAMPLE);
        assert_eq!(sample().buffer_len(), SAMPLE.len());
        assert_eq!(Endpoint::body_len(&SAMPLE), Ok(SAMPLE.len() - 3));
    }

    #[test]
    fn parse_reads_the_documented_layout() {
        assert_eq!(Endpoint::parse(&SAMPLE), Ok(sample()));
    }

    #[test]
    fn each_malformation_is_named() {
        use EndpointFormatError as E;
        let with = |i: usize, v: u8| {
            let mut b = SAMPLE.to_vec();
            b[i] = v;
            Endpoint::parse(&b)
        };
        assert_eq!(with(0, 2), Err(E::Version(2)));
        assert_eq!(with(3, 0x06), Err(E::Flags(0x06)));
        assert_eq!(
            with(4, 1),
            Err(E::Wide {
                field: "QP number",
                value: 0x0100_0011
            })
        );
        assert_eq!(
            with(8, 1),
            Err(E::Wide {
                field: "PSN",
                value: 0x017d_2a9e
            })
        );
        assert_eq!(with(12, 5), Err(E::Mtu(0x500)));
        assert_eq!(with(28, 0x10), Err(E::TooManyMrs(0x1001)));
        // The count promises a second region the length does not hold.
        assert_eq!(with(29, 2), Err(E::Truncated { need: 58, have: 50 }));
        assert_eq!(Endpoint::parse(&[]), Err(E::Truncated { need: 3, have: 0 }));
        // Cut inside the region: its length field ends past the bytes present.
        assert_eq!(
            Endpoint::parse(&SAMPLE[..40]),
            Err(E::Truncated { need: 46, have: 40 })
        );
        let mut long = SAMPLE.to_vec();
        long.push(0);
        assert_eq!(Endpoint::parse(&long), Err(E::Trailing(1)));
        // A length that announces more than the fields use.
        let mut padded = SAMPLE.to_vec();
        padded[2] += 1;
        padded.push(0);
        assert_eq!(Endpoint::parse(&padded), Err(E::Trailing(1)));
    }

    #[test]
    fn too_many_regions_are_refused_on_emit() {
        let mut e = sample();
        e.mrs = vec![e.mrs[0]; Endpoint::MAX_MRS + 1];
        assert_eq!(
            e.to_bytes(),
            Err(EndpointFormatError::TooManyMrs(Endpoint::MAX_MRS + 1))
        );
        e.mrs.pop();
        let b = e.to_bytes().unwrap();
        assert_eq!(Endpoint::parse(&b), Ok(e));
    }

    #[test]
    fn remote_mr_bounds_offsets() {
        let m = sample().mrs[0];
        assert_eq!(m.addr_at(0, 4096), Some(0x1000_0000));
        assert_eq!(m.addr_at(4000, 96), Some(0x1000_0000 + 4000));
        assert_eq!(m.addr_at(4000, 97), None);
        assert_eq!(m.addr_at(u64::MAX, 1), None);
    }

    fn any_endpoint() -> impl Strategy<Value = Endpoint> {
        let ip = prop_oneof![
            any::<[u8; 4]>().prop_map(IpAddr::from),
            any::<[u8; 16]>().prop_map(IpAddr::from),
        ];
        let mtu = prop_oneof![
            Just(Mtu::Mtu256),
            Just(Mtu::Mtu512),
            Just(Mtu::Mtu1024),
            Just(Mtu::Mtu2048),
            Just(Mtu::Mtu4096),
        ];
        let mr = (any::<u64>(), any::<u64>(), any::<u32>()).prop_map(|(addr, len, k)| RemoteMr {
            addr,
            len,
            rkey: Rkey::new(k),
        });
        (
            0u32..1 << 24,
            0u32..1 << 24,
            ip,
            any::<Option<[u8; 6]>>(),
            mtu,
            0u32..16,
            proptest::collection::vec(mr, 0..8),
        )
            .prop_map(|(qpn, psn, ip, mac, mtu, ext, mrs)| Endpoint {
                qpn: Qpn::new(qpn),
                psn,
                ip,
                mac,
                mtu,
                ext: ExtCaps::from_word(ext),
                mrs,
            })
    }

    proptest! {
        #[test]
        fn round_trips(e in any_endpoint()) {
            let b = e.to_bytes().unwrap();
            prop_assert_eq!(b.len(), e.buffer_len());
            prop_assert_eq!(Endpoint::body_len(&b).unwrap() + Endpoint::HEADER_LEN, b.len());
            prop_assert_eq!(Endpoint::parse(&b), Ok(e));
        }

        /// Garbage never panics, and what parses survives another emit and parse unchanged
        /// (unknown capability bits are dropped, as [`ExtCaps::from_word`] documents).
        #[test]
        fn garbage_is_an_error_or_stable(b in proptest::collection::vec(any::<u8>(), 0..96)) {
            if let Ok(e) = Endpoint::parse(&b) {
                prop_assert_eq!(Endpoint::parse(&e.to_bytes().unwrap()), Ok(e));
            }
        }

        /// A valid endpoint with a byte changed or cut short: never a panic, and a cut is
        /// always an error (the length field announces the missing bytes).
        #[test]
        fn mutations_never_panic(e in any_endpoint(), i in any::<usize>(), v in any::<u8>(), cut in any::<bool>()) {
            let mut b = e.to_bytes().unwrap();
            let i = i % b.len();
            if cut {
                b.truncate(i);
                prop_assert!(Endpoint::parse(&b).is_err());
            } else {
                b[i] = v;
                if let Ok(p) = Endpoint::parse(&b) {
                    prop_assert_eq!(Endpoint::parse(&p.to_bytes().unwrap()), Ok(p));
                }
            }
        }
    }

    #[cfg(feature = "serde")]
    #[test]
    fn serde_round_trips_and_checks() {
        let e = sample();
        let j = serde_json::to_string(&e).unwrap();
        assert_eq!(serde_json::from_str::<Endpoint>(&j).unwrap(), e);
        let wide = j.replace("\"qpn\":17", "\"qpn\":16777216");
        assert!(serde_json::from_str::<Endpoint>(&wide).is_err(), "{wide}");
        let mtu = j.replace("\"mtu\":1024", "\"mtu\":1000");
        let err = serde_json::from_str::<Endpoint>(&mtu).unwrap_err();
        assert!(err.to_string().contains("MTU 1000"), "{err}");
    }
}
