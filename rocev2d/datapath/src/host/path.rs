//! The path to a destination: our side from the interface, the next hop's MAC given or taken
//! from the neighbour table; and an RC QP's connection attributes built on it.

use crate::{Error, Interface, neigh};
use rocev2_core::mr::AccessFlags;
use rocev2_core::qp::{
    AddressHandle, ConnectAttr, ModifyError, Mtu, Path, QpAttr, QpState, state::MAX_RD_ATOMIC,
};
use rocev2_core::wire::Qpn;
use rocev2_core::wire::ext::ExtCaps;
use rocev2_ipc::proto::{ConnectSpec, Destination, ModifySpec};
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
    /// The interface's IP MTU is too small for any IBA path MTU.
    #[error("interface {0} MTU is too small for RoCE")]
    MtuTooSmall(String),
    /// A path MTU in bytes that is not an IBA MTU.
    #[error("MTU {0} is not an IBA MTU")]
    NotAnMtu(u32),
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

/// The INIT→RTR→RTS attributes of RC QP `qpn` towards the peer `spec` describes: the path
/// ([`path`], the next hop as `hop` says) and the MTU `spec` asks for, lowered to what the
/// interface carries. The MTU is checked before resolving (which may wait).
///
/// # Errors
/// [`PathError::NotAnMtu`], [`PathError::MtuTooSmall`]; as [`path`].
pub fn connect_attr(
    iface: &Interface,
    qpn: Qpn,
    spec: &ConnectSpec,
    hop: NextHop,
) -> Result<ConnectAttr, PathError> {
    let want = Mtu::from_bytes(spec.mtu).ok_or(PathError::NotAnMtu(spec.mtu))?;
    let v6 = spec.ip.is_ipv6();
    iface.source_ip(v6).ok_or_else(|| PathError::NoAddress {
        iface: iface.name.clone(),
        family: if v6 { "IPv6" } else { "IPv4" },
    })?;
    let mtu = iface
        .path_mtu(v6)
        .ok_or_else(|| PathError::MtuTooSmall(iface.name.clone()))?
        .min(want);
    Ok(ConnectAttr {
        path: path(iface, qpn, spec.ip, hop, spec.dscp)?,
        mtu,
        dest_qpn: Qpn::new(spec.dest_qpn & 0xff_ffff),
        rq_psn: spec.remote_psn & 0xff_ffff,
        sq_psn: spec.local_psn & 0xff_ffff,
        rd_atomic: spec.rd_atomic,
        min_rnr_timer: spec.min_rnr_timer,
        timeout: spec.timeout,
        retry_cnt: spec.retry_cnt,
        rnr_retry: spec.rnr_retry,
        peer_ext: ExtCaps::from_word(spec.peer_ext),
    })
}

fn out_of_range(name: &'static str, range: &'static str) -> PathError {
    PathError::Invalid(ModifyError::OutOfRange { name, range })
}

/// The state and attributes one `ibv_modify_qp` asks of QP `qpn` (in state `current`) on
/// `iface`: its path built as [`path`] builds every path, through `hop`; the path MTU clamped
/// to the interface's. READ/atomic depths are clamped to the engine's limit rather than
/// refused: perftest passes the peer's outstanding-read count (128 from rdma_rxe) as its own.
///
/// # Errors
/// [`PathError`]: a state or partition that does not exist, or no path to the destination.
pub fn modify_attr(
    iface: &Interface,
    qpn: Qpn,
    spec: &ModifySpec,
    current: QpState,
    hop: impl FnOnce(&Destination) -> NextHop,
) -> Result<(QpState, QpAttr), PathError> {
    let to = match spec.state {
        Some(s) => QpState::from_ibv(s).ok_or(out_of_range("qp_state", "0 to 6"))?,
        None => current,
    };
    let mut a = QpAttr {
        access: spec.access.map(AccessFlags::from_bits_retain),
        q_key: spec.q_key,
        dest_qpn: spec.dest_qpn.map(|q| Qpn::new(q & 0xff_ffff)),
        rq_psn: spec.rq_psn.map(|p| p & 0xff_ffff),
        sq_psn: spec.sq_psn.map(|p| p & 0xff_ffff),
        max_dest_rd_atomic: spec.max_dest_rd_atomic.map(|n| n.min(MAX_RD_ATOMIC)),
        max_rd_atomic: spec.max_rd_atomic.map(|n| n.min(MAX_RD_ATOMIC)),
        min_rnr_timer: spec.min_rnr_timer,
        timeout: spec.timeout,
        retry_cnt: spec.retry_cnt,
        rnr_retry: spec.rnr_retry,
        ..QpAttr::default()
    };
    match spec.pkey_index {
        Some(0) => a.p_key = Some(0xffff),
        Some(_) => return Err(out_of_range("pkey_index", "0, the default partition")),
        None => {}
    }
    let mut v6 = false;
    if let Some(d) = &spec.dest {
        v6 = d.ip.is_ipv6();
        a.path = Some(path(iface, qpn, d.ip, hop(d), d.dscp)?);
    }
    if let Some(bytes) = spec.path_mtu {
        let want = Mtu::from_bytes(bytes).ok_or(PathError::NotAnMtu(bytes))?;
        let max = iface
            .path_mtu(v6)
            .ok_or_else(|| PathError::MtuTooSmall(iface.name.clone()))?;
        a.path_mtu = Some(want.min(max));
    }
    Ok((to, a))
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

    fn spec(mtu: u32) -> ConnectSpec {
        ConnectSpec {
            dest_qpn: 0x0100_0012,
            remote_psn: 0x0123_4567,
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            mac: None,
            local_psn: 7,
            mtu,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 6,
            min_rnr_timer: 12,
            rd_atomic: 16,
            dscp: 26,
            resolve_timeout_ms: 0,
            peer_ext: 0,
        }
    }

    /// The MTU is lowered to the interface's (1500 carries 1024), the QPN and PSNs are cut to
    /// 24 bits; a byte count that is no IBA MTU is refused before resolving.
    #[test]
    fn connect_attributes_follow_the_spec_and_the_interface() {
        let hop = NextHop::Mac([2, 0, 0, 0, 0, 2]);
        let a = connect_attr(&v4_only(), Qpn::new(5), &spec(4096), hop).unwrap();
        assert_eq!(a.mtu, Mtu::Mtu1024);
        assert_eq!(a.dest_qpn, Qpn::new(0x12));
        assert_eq!(a.rq_psn, 0x23_4567);
        assert_eq!(a.path.dst_mac, [2, 0, 0, 0, 0, 2]);
        assert_eq!((a.rd_atomic, a.rnr_retry, a.path.dscp), (16, 6, 26));
        let resolve = NextHop::Resolve(Duration::from_secs(5));
        let e = connect_attr(&v4_only(), Qpn::new(5), &spec(1000), resolve).unwrap_err();
        assert!(matches!(e, PathError::NotAnMtu(1000)), "{e}");
    }

    #[test]
    fn a_dscp_out_of_range_makes_no_handle() {
        let dst = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
        let e = address_handle(&v4_only(), dst, NextHop::Mac([2; 6]), 64).unwrap_err();
        assert!(matches!(e, PathError::Invalid(_)), "{e}");
    }
}
