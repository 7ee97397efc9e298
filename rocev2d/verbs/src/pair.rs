//! Two in-process devices joined by an in-memory link ([`rocev2_datapath::pair`]): the whole
//! API (progress threads, completions, `connect`) with no interface, no privileges and no
//! network namespace, for doctests, examples, and tests of an application's RDMA logic.
//!
//! The ends are made-up interfaces, `mem0` (10.77.0.1, MAC 02:00:00:00:77:01) and `mem1`
//! (10.77.0.2, 02:00:00:00:77:02), with a 1500-byte MTU. There is no neighbour table behind
//! them: give [`crate::RemoteQp::mac`] (the peer's [`Device::interface`] MAC), or connect
//! with [`crate::connect`], whose endpoints carry it.

use crate::device::{Device, DeviceConfig};
use crate::error::Result;
use rocev2_datapath::Interface;
use rocev2_datapath::iface::IfAddr;
use std::net::{IpAddr, Ipv4Addr};

/// The made-up interface of end `i` (0 or 1); see the module docs.
fn interface(i: u8) -> Interface {
    Interface {
        name: format!("mem{i}"),
        index: 0,
        mac: [0x02, 0, 0, 0, 0x77, i + 1],
        mtu: 1500,
        up: true,
        addrs: vec![IfAddr {
            ip: IpAddr::V4(Ipv4Addr::new(10, 77, 0, i + 1)),
            prefix_len: 24,
            link_local: false,
        }],
        rx_queues: 1,
    }
}

impl Device {
    /// Two devices joined by an in-memory link, each with its progress thread: the whole API
    /// with no interface, no privileges and no namespace (doctests, examples, tests of an
    /// application's logic). The ends are made-up interfaces `mem0` (10.77.0.1) and `mem1`
    /// (10.77.0.2) that know each other's MAC in place of a neighbour table. [`crate::connect`] works
    /// over TCP on any local address (the endpoints carry the pair's addresses).
    ///
    /// ```
    /// let (a, b) = rocev2::Device::pair()?;
    /// assert_eq!(a.datapath_name(), "memory");
    /// assert_ne!(a.interface().mac, b.interface().mac);
    /// # Ok::<(), rocev2::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`crate::Error::Datapath`] or [`crate::Error::Io`] when out of descriptors or threads.
    pub fn pair() -> Result<(Device, Device)> {
        Device::pair_with(DeviceConfig::default())
    }

    /// As [`Device::pair`], both ends with these settings (the datapath options do not apply).
    ///
    /// # Errors
    /// As [`Device::pair`].
    pub fn pair_with(cfg: DeviceConfig) -> Result<(Device, Device)> {
        let (a, b) = rocev2_datapath::pair::pair()?;
        let why = "in-memory pair (Device::pair)".to_string();
        let (i0, i1) = (interface(0), interface(1));
        let neighbour = |i: &Interface| i.addrs.iter().map(|a| (a.ip, i.mac)).collect();
        let (n0, n1) = (neighbour(&i1), neighbour(&i0));
        Ok((
            Device::in_process(i0, Box::new(a), why.clone(), n0, cfg)?,
            Device::in_process(i1, Box::new(b), why, n1, cfg)?,
        ))
    }
}
