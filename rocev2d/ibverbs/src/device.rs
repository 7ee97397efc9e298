//! Devices: one `rocev2_<iface>` per interface of the calling thread's network namespace that
//! is up, is Ethernet (so not loopback) and has a global IPv4 or IPv6 address, as rdma-core
//! names rxe devices after their netdev.
//!
//! A device is made once per interface name and kept for the life of the process (a handful
//! of bytes each), so a context may outlive the list it was opened from, as with libibverbs.
//! Its engine is opened by the first `ibv_open_device` and shared by every context of the
//! device until the last one closes.

use crate::abi::{self, ibv_device};
use crate::engine::{self, Engine, lock};
use crate::handle::{self, Kind};
use rocev2_datapath::Interface;
use std::sync::{Arc, Mutex, Weak};

/// The prefix of every device name.
pub const PREFIX: &str = "rocev2_";

/// A device: `ibv_device` first, so its pointer is the handle.
#[repr(C)]
pub struct Device {
    /// What the caller sees.
    pub ibv: ibv_device,
    /// The interface's name.
    pub iface: String,
    /// The GUID (`ibv_get_device_guid`, big-endian), from the MAC's EUI-64.
    pub guid: u64,
    engine: Mutex<Weak<Engine>>,
}

impl Device {
    /// The device's engine, opened now if no context holds it.
    ///
    /// # Errors
    /// [`engine::open`]'s.
    pub fn engine(&self) -> Result<Arc<Engine>, String> {
        let mut weak = lock(&self.engine);
        if let Some(e) = weak.upgrade() {
            return Ok(e);
        }
        let e = Arc::new(engine::open(&self.iface)?);
        *weak = Arc::downgrade(&e);
        Ok(e)
    }
}

/// Every device made so far, by interface name.
static DEVICES: Mutex<Vec<&'static Device>> = Mutex::new(Vec::new());

/// The GUID of an interface with this MAC: its modified EUI-64, as rxe derives it.
pub fn guid(mac: [u8; 6]) -> u64 {
    let [a, b, c, d, e, f] = mac;
    u64::from_ne_bytes([a ^ 2, b, c, 0xff, 0xfe, d, e, f])
}

/// The device of interface `iface`, made on first use.
fn device(iface: &Interface) -> &'static Device {
    let mut all = lock(&DEVICES);
    if let Some(d) = all.iter().find(|d| d.iface == iface.name) {
        return d;
    }
    let mut ibv = ibv_device {
        _ops: abi::_ibv_device_ops {
            _dummy1: None,
            _dummy2: None,
        },
        node_type: abi::IBV_NODE_CA,
        transport_type: abi::IBV_TRANSPORT_IB,
        name: [0; abi::SYSFS_NAME_MAX],
        dev_name: [0; abi::SYSFS_NAME_MAX],
        dev_path: [0; abi::SYSFS_PATH_MAX],
        ibdev_path: [0; abi::SYSFS_PATH_MAX],
    };
    let name = format!("{PREFIX}{}", iface.name);
    copy_cstr(&mut ibv.name, &name);
    copy_cstr(&mut ibv.dev_name, &name);
    // No sysfs entries exist; the paths name where rdma-core would look, under a directory
    // that does not exist, so a program reading them finds nothing rather than another device.
    copy_cstr(
        &mut ibv.dev_path,
        &format!("/sys/class/infiniband_verbs/{name}"),
    );
    copy_cstr(
        &mut ibv.ibdev_path,
        &format!("/sys/class/infiniband/{name}"),
    );
    let d: &'static Device = Box::leak(Box::new(Device {
        ibv,
        iface: iface.name.clone(),
        guid: guid(iface.mac),
        engine: Mutex::new(Weak::new()),
    }));
    handle::register(&d.ibv, Kind::Device);
    all.push(d);
    d
}

/// Copies `s` into a C char array, truncated, NUL-terminated.
pub fn copy_cstr(dst: &mut [core::ffi::c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = *b as core::ffi::c_char;
    }
    if let Some(end) = dst.get_mut(n) {
        *end = 0;
    }
}

/// Whether an interface becomes a device: up, with a global address.
pub fn usable(iface: &Interface) -> bool {
    iface.up && iface.addrs.iter().any(|a| !a.link_local)
}

/// The devices of the current network namespace, in interface order.
pub fn list() -> Vec<&'static Device> {
    Interface::names()
        .unwrap_or_default()
        .iter()
        .filter_map(|n| Interface::by_name(n).ok())
        .filter(usable)
        .map(|i| device(&i))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_is_the_eui64_in_network_order() {
        let g = guid([0x52, 0x54, 0x00, 0x77, 0x00, 0x0a]);
        assert_eq!(u64::from_be(g), 0x5054_00ff_fe77_000a);
    }

    #[test]
    fn names_are_truncated_and_terminated() {
        let mut buf = [1 as core::ffi::c_char; 4];
        copy_cstr(&mut buf, "abcdef");
        assert_eq!(buf, [b'a' as _, b'b' as _, b'c' as _, 0]);
    }
}
