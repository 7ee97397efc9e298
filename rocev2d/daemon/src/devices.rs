//! `rocev2d devices`: every interface of this network namespace usable as a RoCE device, as
//! rdma-core's `ibv_devices`, `ibv_devinfo` and `show_gids` would show a soft-RoCE device: its
//! name (`rocev2_IFACE`, as `librocev2_ibverbs.so` names it), GID table (index, GID, IPv4,
//! type; the index is what every tool's `-g`/`-x` takes), MTU, queues, what AF_XDP can do on
//! it, and whether a `rocev2d` serves it.
//!
//! AF_XDP is probed by binding a socket to queue 0 and closing it at once (zero-copy first):
//! it needs root, and a served interface is not probed (the daemon holds the queue).
//!
//! Deviations: none.

use rocev2_datapath::Interface;
use serde::Serialize;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv6Addr};

/// One GID table entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gid {
    /// Its index (`-g`/`-x`).
    pub index: usize,
    /// The GID.
    pub gid: Ipv6Addr,
    /// The IPv4 address of an IPv4-mapped GID.
    pub ipv4: Option<IpAddr>,
}

/// One usable interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Device {
    /// The verbs device name (`rocev2_IFACE`).
    pub name: String,
    /// The interface.
    pub iface: String,
    /// The interface's IP MTU.
    pub mtu: u32,
    /// The largest IBA MTU it carries (IPv4), bytes.
    pub active_mtu: Option<u32>,
    /// Receive queues.
    pub queues: u32,
    /// The GID table (type RoCE v2 throughout).
    pub gids: Vec<Gid>,
    /// `zero-copy`, `copy`, `not probed (served)`, or why AF_XDP cannot be used.
    pub af_xdp: String,
    /// The control socket of the `rocev2d` serving it.
    pub served_by: Option<String>,
}

/// An interface that is not a usable device, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The interface.
    pub iface: String,
    /// Why.
    pub why: String,
}

/// What `rocev2d devices` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Usable interfaces, in index order.
    pub devices: Vec<Device>,
    /// The others.
    pub skipped: Vec<Skipped>,
}

/// The report for this network namespace.
///
/// # Errors
/// Netlink failures listing the interfaces.
pub fn report() -> Result<Report, rocev2_datapath::Error> {
    let mut r = Report {
        devices: Vec::new(),
        skipped: Vec::new(),
    };
    for name in Interface::names()? {
        let skip = |why: String| Skipped {
            iface: name.clone(),
            why,
        };
        match Interface::by_name(&name) {
            Err(e) => r.skipped.push(skip(e.to_string())),
            Ok(i) if !i.up => r.skipped.push(skip("down".into())),
            Ok(i) if i.addrs.iter().all(|a| a.link_local) => {
                r.skipped
                    .push(skip("no global IPv4 or IPv6 address".into()));
            }
            Ok(i) => r.devices.push(device(&i)),
        }
    }
    Ok(r)
}

fn device(i: &Interface) -> Device {
    let served_by = rocev2_ipc::serving(&i.name).map(|p| p.display().to_string());
    let af_xdp = match (&served_by, rocev2_datapath::xdp::probe(i)) {
        (Some(_), _) => "not probed (served)".to_string(),
        (None, Ok(rocev2_datapath::xdp::XdpSupport::ZeroCopy)) => "zero-copy".to_string(),
        (None, Ok(rocev2_datapath::xdp::XdpSupport::Copy)) => "copy".to_string(),
        (None, Err(e)) => format!("unavailable ({e})"),
    };
    let gids = i
        .gids()
        .into_iter()
        .enumerate()
        .map(|(index, gid)| Gid {
            index,
            gid,
            ipv4: gid.to_ipv4_mapped().map(IpAddr::V4),
        })
        .collect();
    Device {
        name: format!("rocev2_{}", i.name),
        iface: i.name.clone(),
        mtu: i.mtu,
        active_mtu: i.path_mtu(false).map(|m| m.bytes()),
        queues: i.rx_queues,
        gids,
        af_xdp,
        served_by,
    }
}

/// The report as text: `show_gids`' table, then one line per device.
pub fn text(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<16} {:>4} {:>5} {:<40} {:<15} {:>3}  DEV",
        "DEV", "PORT", "INDEX", "GID", "IPv4", "VER"
    );
    for d in &r.devices {
        for g in &d.gids {
            let v4 = g.ipv4.map(|a| a.to_string()).unwrap_or_default();
            let _ = writeln!(
                o,
                "{:<16} {:>4} {:>5} {:<40} {:<15} {:>3}  {}",
                d.name,
                1,
                g.index,
                g.gid.to_string(),
                v4,
                "v2",
                d.iface
            );
        }
    }
    for d in &r.devices {
        let mtu = d
            .active_mtu
            .map_or("too small for RoCE".to_string(), |m| m.to_string());
        let served = d
            .served_by
            .as_deref()
            .map_or("not served".to_string(), |s| {
                format!("served by rocev2d ({s})")
            });
        let _ = writeln!(
            o,
            "{}: {}, MTU {} (active {mtu}), {} queue(s), AF_XDP {}, {served}",
            d.name, d.iface, d.mtu, d.queues, d.af_xdp
        );
    }
    for s in &r.skipped {
        let _ = writeln!(o, "skipped {}: {}", s.iface, s.why);
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_shows_the_gid_table_and_each_device() {
        let r = Report {
            devices: vec![Device {
                name: "rocev2_eth0".into(),
                iface: "eth0".into(),
                mtu: 1500,
                active_mtu: Some(1024),
                queues: 2,
                gids: vec![
                    Gid {
                        index: 0,
                        gid: "fe80::1".parse().unwrap(),
                        ipv4: None,
                    },
                    Gid {
                        index: 1,
                        gid: "::ffff:10.0.0.1".parse().unwrap(),
                        ipv4: Some("10.0.0.1".parse().unwrap()),
                    },
                ],
                af_xdp: "copy".into(),
                served_by: Some("@rocev2d/eth0".into()),
            }],
            skipped: vec![Skipped {
                iface: "lo".into(),
                why: "not an Ethernet link".into(),
            }],
        };
        let t = text(&r);
        let rows: Vec<&str> = t.lines().collect();
        assert!(rows[0].starts_with("DEV"), "{t}");
        assert!(
            rows[2].contains("::ffff:10.0.0.1") && rows[2].contains("10.0.0.1"),
            "{t}"
        );
        assert!(
            rows[2].split_whitespace().nth(2) == Some("1"),
            "index column: {t}"
        );
        assert!(
            rows[3].contains("MTU 1500 (active 1024), 2 queue(s), AF_XDP copy"),
            "{t}"
        );
        assert!(rows[3].contains("served by rocev2d (@rocev2d/eth0)"), "{t}");
        assert_eq!(rows[4], "skipped lo: not an Ethernet link");
    }
}
