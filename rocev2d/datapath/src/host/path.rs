//! The path to a destination: our side from the interface, the next hop's MAC given or taken
//! from the neighbour table.

use crate::{Error, Interface, neigh};
use rocev2_core::qp::{AddressHandle, ModifyError, Path};
use rocev2_core::wire::Qpn;
use std::net::IpAddr;
use std::time::Duration;

/// Where the next hop's MAC comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextHop {
    /// Already known (given by the caller, or resolved earlier by a control plane).
    Mac([u8; 6]),
    /// The kernel's neighbour table, resolving the entry first if missing and waiting at most
    /// this long ([`neigh::resolve`]).
    Resolve(Duration),
}

impl NextHop {
    /// `mac` when given, else the neighbour table waiting at most `wait`.
    pub fn new(mac: Option<[u8; 6]>, wait: Duration) -> NextHop {
        mac.map_or(NextHop::Resolve(wait), NextHop::Mac)
    }

    /// The next hop's MAC towards `dst` out of `iface`.
    ///
    /// # Errors
    /// [`PathError::Neighbour`].
    pub fn mac(self, iface: &Interface, dst: IpAddr) -> Result<[u8; 6], PathError> {
        match self {
            NextHop::Mac(mac) => Ok(mac),
            NextHop::Resolve(wait) => neigh::resolve(iface, dst, wait)
                .map_err(|source| PathError::Neighbour { ip: dst, source }),
        }
    }
}

/// Why no path could be built.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// The interface has no global address of the destination's family to send from.
    #[error("interface {iface} has no usable {family} address")]
    NoAddress {
        /// The interface.
        iface: String,
        /// `"IPv4"` or `"IPv6"`.
        family: &'static str,
    },
    /// The next hop's MAC could not be resolved.
    #[error("no neighbour entry for {ip}: {source}")]
    Neighbour {
        /// The destination.
        ip: IpAddr,
        /// Why.
        #[source]
        source: Error,
    },
    /// The path cannot make an address handle (its fields are out of range).
    #[error(transparent)]
    Invalid(ModifyError),
}

/// The path of QP `qpn` to `dst` through interface `iface` ([`Interface::path_to`]): our MAC
/// and first global address of `dst`'s family, the next hop's MAC as `hop` says, DSCP `dscp`.
/// A missing source address is reported before resolving (which may wait).
///
/// # Errors
/// [`PathError::NoAddress`], [`PathError::Neighbour`].
pub fn path(
    iface: &Interface,
    qpn: Qpn,
    dst: IpAddr,
    hop: NextHop,
    dscp: u8,
) -> Result<Path, PathError> {
    let no_address = || PathError::NoAddress {
        iface: iface.name.clone(),
        family: if dst.is_ipv6() { "IPv6" } else { "IPv4" },
    };
    iface.source_ip(dst.is_ipv6()).ok_or_else(no_address)?;
    let mac = hop.mac(iface, dst)?;
    iface.path_to(qpn, dst, mac, dscp).ok_or_else(no_address)
}

/// An address handle to `dst` ([`path`] with QPN 0's UDP source port: a handle serves every UD
/// QP of the device).
///
/// # Errors
/// As [`path`]; [`PathError::Invalid`] for a `dscp` out of range.
pub fn address_handle(
    iface: &Interface,
    dst: IpAddr,
    hop: NextHop,
    dscp: u8,
) -> Result<AddressHandle, PathError> {
    AddressHandle::new(path(iface, Qpn::new(0), dst, hop, dscp)?).map_err(PathError::Invalid)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::iface::IfAddr;
    use std::net::Ipv4Addr;

    /// An interface with one IPv4 address and no IPv6 one.
    pub(crate) fn v4_only() -> Interface {
        Interface {
            name: "test0".into(),
            index: 7,
            mac: [2, 0, 0, 0, 0, 1],
            mtu: 1500,
            up: true,
            addrs: vec![IfAddr {
                ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                prefix_len: 24,
                link_local: false,
            }],
            rx_queues: 1,
        }
    }

    #[test]
    fn a_known_next_hop_makes_the_interfaces_path() {
        let iface = v4_only();
        let dst = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
        let hop = NextHop::new(Some([2, 0, 0, 0, 0, 2]), Duration::ZERO);
        let p = path(&iface, Qpn::new(5), dst, hop, 26).unwrap();
        assert_eq!(
            Some(p),
            iface.path_to(Qpn::new(5), dst, [2, 0, 0, 0, 0, 2], 26)
        );
        let ah = address_handle(&iface, dst, hop, 26).unwrap();
        assert_eq!(ah.path().udp_src_port, 49152);
    }

    /// No IPv6 address: refused before resolving (which would wait, and fail, on a made-up
    /// interface).
    #[test]
    fn no_source_address_is_refused_before_resolving() {
        let dst: IpAddr = "fd00::2".parse().unwrap();
        let e = path(
            &v4_only(),
            Qpn::new(5),
            dst,
            NextHop::Resolve(Duration::from_secs(5)),
            0,
        )
        .unwrap_err();
        assert!(
            matches!(e, PathError::NoAddress { family: "IPv6", .. }),
            "{e}"
        );
    }

    #[test]
    fn a_dscp_out_of_range_makes_no_handle() {
        let dst = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
        let e = address_handle(&v4_only(), dst, NextHop::Mac([2; 6]), 64).unwrap_err();
        assert!(matches!(e, PathError::Invalid(_)), "{e}");
    }
}
