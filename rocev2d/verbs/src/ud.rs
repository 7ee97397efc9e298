//! The UD vocabulary: address handles ([`Ah`], [`AhAttr`]), the destination of a send
//! ([`UdAddress`]), the GRH area ([`GRH_LEN`]) and what a UD QP cannot send, checked alike by
//! both backends. The calls, and how UD works, are the device's.

use crate::error::{Error, Result};
use rocev2_core::qp::{Mtu, SendOp, SendWr};
use rocev2_core::wire::Qpn;
use std::net::IpAddr;
use std::time::Duration;

pub use rocev2_core::wire::grh::GRH_LEN;

/// An address handle (`ibv_ah`): the path to one peer port, made by [`Device::create_ah`](crate::Device::create_ah).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ah(pub(crate) u32, pub(crate) u64);

impl Ah {
    /// The handle's number on its device.
    pub fn id(&self) -> u32 {
        self.0
    }
}

/// Where an address handle leads (`ibv_ah_attr` with a GRH): the peer's address and how to
/// reach it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AhAttr {
    /// The peer's address (its GID; [`crate::gid_to_ip`] turns an IPv4-mapped GID into IPv4).
    pub ip: IpAddr,
    /// The next hop's MAC address; `None` resolves it through the neighbour table (ARP/ND),
    /// waiting up to [`AhAttr::resolve_timeout`].
    pub mac: Option<[u8; 6]>,
    /// DSCP of the packets sent through the handle (the GRH's traffic class >> 2; 26 by
    /// default, as [`crate::ConnectOptions::dscp`]).
    pub dscp: u8,
    /// Neighbour resolution bound when [`AhAttr::mac`] is `None`.
    pub resolve_timeout: Duration,
}

impl AhAttr {
    /// The handle to `ip`, its MAC resolved, with the defaults of [`crate::ConnectOptions`].
    pub fn new(ip: IpAddr) -> AhAttr {
        let d = crate::ConnectOptions::default();
        AhAttr {
            ip,
            mac: None,
            dscp: d.dscp,
            resolve_timeout: d.resolve_timeout,
        }
    }
}

/// The destination of a UD send (`ibv_send_wr.wr.ud`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdAddress {
    /// The path to the peer's port.
    pub ah: Ah,
    /// The peer's QP.
    pub qpn: Qpn,
    /// The Q_Key the peer's QP expects; with its high bit set, the sending QP's own Q_Key is
    /// sent instead (IBA §10.2.4).
    pub q_key: u32,
}

/// A UD destination given with a QP that is not UD.
pub(crate) fn not_ud() -> Error {
    Error::WrongQpType("a UD destination needs a UD QP")
}

/// A send without a destination on a UD QP.
pub(crate) fn needs_address() -> Error {
    Error::WrongQpType("a UD send needs an address: use Device::post_send_to")
}

/// Refuses, with a clear error, what a UD QP cannot send: anything but SEND (with immediate)
/// and messages longer than `mtu`.
pub(crate) fn check_ud_send(wr: &SendWr, mtu: Mtu) -> Result<()> {
    if !matches!(wr.op, SendOp::Send | SendOp::SendWithImm { .. }) {
        return Err(Error::WrongQpType(
            "RDMA READ, WRITE, atomics and SEND with invalidate need an RC QP",
        ));
    }
    let len = match &wr.inline_data {
        Some(d) => d.len() as u64,
        None => wr.sg_list.iter().map(|s| u64::from(s.length)).sum(),
    };
    if len > u64::from(mtu.bytes()) {
        return Err(Error::UdTooLong {
            len,
            mtu: mtu.bytes(),
        });
    }
    Ok(())
}
