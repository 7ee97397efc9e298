//! rdma_cm's conventions on top of the IB CM: service IDs made of a port space and a port, and
//! the CMA header rdma_cm puts at the start of a REQ's private data.
//!
//! Sources: Linux `include/rdma/ib_cm.h` (`IB_CMA_SERVICE_ID` 0x0000_0000_0100_0000 under the
//! mask 0xFFFF_FFFF_FF00_0000), rdma-core `librdmacm/rdma_cma.h` (port spaces: `RDMA_PS_IPOIB`
//! 0x0002, `RDMA_PS_TCP` 0x0106, `RDMA_PS_UDP` 0x0111, `RDMA_PS_IB` 0x013F; a service ID is
//! `port_space << 16 | port`), `librdmacm/cma.h`/kernel `cma.c` (`struct cma_hdr`). IBA Vol. 1
//! Annex A11 (RDMA IP CM Service) describes the same header. Checked against
//! `rping_cm.pcap` frame 1 (`tests/interop_cm_mads.rs`).
//!
//! The CMA header, 36 bytes, all big-endian:
//!
//! ```text
//!  0 CMA version (0x00) | 1 IP version in bits 7:4 (4 or 6) | 2..4 source port
//!  4..20 source IP | 20..36 destination IP   (IPv4: the last 4 of the 16 bytes, the rest zero)
//! ```
//!
//! Only the active side's (source) port travels in the header; the destination port is the
//! service ID's. rdma_cm puts the header in the REQ and the SIDR_REQ only; REP, REJ, RTU, DREQ,
//! DREP and SIDR_REP private data belong to the consumer whole.
//!
//! Deviations: none.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use alloc::vec::Vec;

use crate::wire::mad::array;

/// A CM Service ID (IBA Vol. 1 §12.6.5, REQ bytes 8–15): what a passive side listens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceId(pub u64);

/// rdma_cm's port spaces (`enum rdma_port_space`): which IP protocol's port numbers a service
/// ID's low 16 bits are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortSpace(pub u16);

impl PortSpace {
    /// `RDMA_PS_IPOIB`.
    pub const IPOIB: PortSpace = PortSpace(0x0002);
    /// `RDMA_PS_TCP`: reliable connections, as rping and most rdma_cm programs use.
    pub const TCP: PortSpace = PortSpace(0x0106);
    /// `RDMA_PS_UDP`.
    pub const UDP: PortSpace = PortSpace(0x0111);
    /// `RDMA_PS_IB`.
    pub const IB: PortSpace = PortSpace(0x013f);
}

/// The bits of a service ID that mark it as rdma_cm's (Linux `IB_CMA_SERVICE_ID_MASK`).
const RDMA_CM_MASK: u64 = 0xffff_ffff_ff00_0000;
/// Their value (Linux `IB_CMA_SERVICE_ID`).
const RDMA_CM_PREFIX: u64 = 0x0000_0000_0100_0000;

impl ServiceId {
    /// rdma_cm's service ID for `port` in `space`: `space << 16 | port` (rping on port 7174 in
    /// `RDMA_PS_TCP`: 0x0000_0000_0106_1c06).
    pub const fn rdma_cm(space: PortSpace, port: u16) -> ServiceId {
        ServiceId(((space.0 as u64) << 16) | port as u64)
    }

    /// The port space and port, if this is an rdma_cm service ID.
    pub const fn rdma_cm_parts(self) -> Option<(PortSpace, u16)> {
        if self.0 & RDMA_CM_MASK == RDMA_CM_PREFIX {
            Some((PortSpace((self.0 >> 16) as u16), self.0 as u16))
        } else {
            None
        }
    }
}

/// The Q_Key rdma_cm gives every `RDMA_PS_UDP` QP and answers SIDR_REQs with (Linux
/// `RDMA_UDP_QKEY`).
pub const RDMA_UDP_Q_KEY: u32 = 0x0123_4567;

/// The only CMA header version (`CMA_VERSION`).
pub const CMA_VERSION: u8 = 0;

/// Why private data does not start with a CMA header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CmaError {
    /// Fewer than [`CmaHeader::LEN`] bytes.
    #[error("private data shorter than the 36-byte CMA header")]
    Truncated,
    /// The CMA version is not 0.
    #[error("CMA version {0} (not 0)")]
    Version(u8),
    /// The IP version nibble is neither 4 nor 6.
    #[error("CMA IP version {0} (not 4 or 6)")]
    IpVersion(u8),
}

/// The two addresses of a CMA header, of one family (the header has one IP-version field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum CmaAddrs {
    V4 { src: Ipv4Addr, dst: Ipv4Addr },
    V6 { src: Ipv6Addr, dst: Ipv6Addr },
}

/// The meaning of a CMA header: who connects to whom over IP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmaHeader {
    /// The active side's source port.
    pub src_port: u16,
    /// Source (active side) and destination (passive side) IP addresses.
    pub addrs: CmaAddrs,
}

impl CmaHeader {
    /// Bytes of the header.
    pub const LEN: usize = 36;

    /// The active side's IP address.
    pub fn src_ip(&self) -> IpAddr {
        match self.addrs {
            CmaAddrs::V4 { src, .. } => IpAddr::V4(src),
            CmaAddrs::V6 { src, .. } => IpAddr::V6(src),
        }
    }

    /// The passive side's IP address.
    pub fn dst_ip(&self) -> IpAddr {
        match self.addrs {
            CmaAddrs::V4 { dst, .. } => IpAddr::V4(dst),
            CmaAddrs::V6 { dst, .. } => IpAddr::V6(dst),
        }
    }

    /// Reads the header at the start of a REQ's private data; the low nibble of the IP-version
    /// byte and the IPv4 padding are ignored, as the kernel does.
    pub fn parse(private_data: &[u8]) -> Result<Self, CmaError> {
        let b = private_data.get(..Self::LEN).ok_or(CmaError::Truncated)?;
        if b[0] != CMA_VERSION {
            return Err(CmaError::Version(b[0]));
        }
        let src_port = u16::from_be_bytes([b[2], b[3]]);
        let addrs = match b[1] >> 4 {
            4 => CmaAddrs::V4 {
                src: Ipv4Addr::from(array::<4>(&b[16..20])),
                dst: Ipv4Addr::from(array::<4>(&b[32..36])),
            },
            6 => CmaAddrs::V6 {
                src: Ipv6Addr::from(array::<16>(&b[4..20])),
                dst: Ipv6Addr::from(array::<16>(&b[20..36])),
            },
            v => return Err(CmaError::IpVersion(v)),
        };
        Ok(CmaHeader { src_port, addrs })
    }

    /// The header followed by the consumer's `user_data`: a REQ's private data as rdma_cm
    /// builds it. [`super::Cm::connect`] refuses it if longer than 92 bytes.
    pub fn private_data(&self, user_data: &[u8]) -> Vec<u8> {
        let mut b = [0u8; Self::LEN];
        b[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        match self.addrs {
            CmaAddrs::V4 { src, dst } => {
                b[1] = 4 << 4;
                b[16..20].copy_from_slice(&src.octets());
                b[32..36].copy_from_slice(&dst.octets());
            }
            CmaAddrs::V6 { src, dst } => {
                b[1] = 6 << 4;
                b[4..20].copy_from_slice(&src.octets());
                b[20..36].copy_from_slice(&dst.octets());
            }
        }
        let mut out = Vec::with_capacity(Self::LEN + user_data.len());
        out.extend_from_slice(&b);
        out.extend_from_slice(user_data);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::mad::cm_connect::{ReqPacket, ReqRepr};
    use crate::wire::mad::tests::{REQ, data};

    #[test]
    fn service_id_rdma_cm_tcp_port() {
        // rping_cm.pcap frame 1: ServiceID 0x0000_0000_0106_1c06, rping's default port 7174.
        let sid = ServiceId::rdma_cm(PortSpace::TCP, 7174);
        assert_eq!(sid, ServiceId(0x0000_0000_0106_1c06));
        assert_eq!(sid.rdma_cm_parts(), Some((PortSpace::TCP, 7174)));
        assert_eq!(
            ServiceId::rdma_cm(PortSpace::IB, 1).rdma_cm_parts(),
            Some((PortSpace::IB, 1))
        );
        // Not under IB_CMA_SERVICE_ID: an IBA-assigned or vendor service ID.
        assert_eq!(ServiceId(0x1000_0000_0106_1c06).rdma_cm_parts(), None);
        assert_eq!(ServiceId(0x0000_0000_0206_1c06).rdma_cm_parts(), None);
    }

    #[test]
    fn cma_header_parses_rping_req() {
        // rping_cm.pcap frame 1: 192.168.77.11 connects to 192.168.77.10.
        let req = ReqRepr::parse(&ReqPacket::new_checked(data(&REQ)).unwrap()).unwrap();
        let h = CmaHeader::parse(&req.private_data).unwrap();
        assert_eq!(
            h.addrs,
            CmaAddrs::V4 {
                src: Ipv4Addr::new(192, 168, 77, 11),
                dst: Ipv4Addr::new(192, 168, 77, 10),
            }
        );
        // Re-emitting gives the capture's 36 bytes; the rest of its private data is zero.
        let again = h.private_data(&[]);
        assert_eq!(&again[..], &req.private_data[..CmaHeader::LEN]);
        assert!(req.private_data[CmaHeader::LEN..].iter().all(|&b| b == 0));
    }

    #[test]
    fn cma_header_v6_round_trip_and_layout() {
        let h = CmaHeader {
            src_port: 0xbeef,
            addrs: CmaAddrs::V6 {
                src: "fd00::1".parse().unwrap(),
                dst: "fd00::2".parse().unwrap(),
            },
        };
        let b = h.private_data(b"hi");
        assert_eq!(b.len(), 38);
        assert_eq!(b[..4], [0, 0x60, 0xbe, 0xef]);
        assert_eq!(b[19], 1);
        assert_eq!(b[35], 2);
        assert_eq!(&b[36..], b"hi");
        assert_eq!(CmaHeader::parse(&b), Ok(h));
        assert_eq!(h.dst_ip(), "fd00::2".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn cma_header_rejects_short_version_and_family() {
        let mut b = CmaHeader {
            src_port: 1,
            addrs: CmaAddrs::V4 {
                src: Ipv4Addr::LOCALHOST,
                dst: Ipv4Addr::LOCALHOST,
            },
        }
        .private_data(&[]);
        assert_eq!(CmaHeader::parse(&b[..35]), Err(CmaError::Truncated));
        b[1] = 0x50;
        assert_eq!(CmaHeader::parse(&b), Err(CmaError::IpVersion(5)));
        b[0] = 1;
        assert_eq!(CmaHeader::parse(&b), Err(CmaError::Version(1)));
    }
}
