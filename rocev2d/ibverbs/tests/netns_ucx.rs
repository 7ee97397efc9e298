//! UCX (Debian's `ucx-utils`, unmodified) over `librocev2_ibverbs.so` in a pair testbed:
//! `ucx_info -d` lists the device with the `rc_verbs` and `ud_verbs` transports, and
//! `ucx_perftest` runs `tag_bw` and `tag_lat` with 4 KiB messages between the namespaces over
//! `rc_verbs` (UCX's `rc_v`: `ud_verbs` only to set up the connection) and over `ud_verbs`, each
//! client's log naming the transport its endpoint uses.
//!
//! What UCX needs beyond the verbs (docs/ibverbs.md, "UCX"): a character device at
//! `/dev/infiniband/<dev_name>` it may read and write, which it only checks for, made here as
//! a copy of `/dev/null` and removed after; `UCX_IB_GID_INDEX=1` (UCX 1.13 reads GID types from
//! sysfs, and probes the others with address handles to the device's own addresses); and
//! `UCX_UD_VERBS_ETH_DGID_CHECK=n` (UCX reads an IPv4 packet's destination from the GRH area
//! only when the completion's `sl` carries mlx5's packet type).
//!
//! UCX keeps a device's name to 15 characters (`UCT_MD_NAME_MAX`), fewer than
//! `rocev2_<iface>` takes with the testbed's interface names, so each test renames its two
//! interfaces `u<pid><test><host>` first (8 characters at most, unique per test).
//!
//! UDP datapath, as in `netns_tools.rs`. Needs root (namespaces, the device node); skipped
//! loudly otherwise.

mod common;
use common::{h1_ip, pair, preloaded, run_pair, show};
use rocev2_testbed::{Testbed, need_root};
use std::path::PathBuf;
use std::process::Command;

/// `/dev/infiniband/<device>`, a character device with `/dev/null`'s numbers, removed on drop.
struct DeviceNode(PathBuf);

impl DeviceNode {
    fn new(device: &str) -> DeviceNode {
        let dir = std::path::Path::new("/dev/infiniband");
        std::fs::create_dir_all(dir).expect("/dev/infiniband");
        let path = dir.join(device);
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path; mknod reads it and creates the node.
        let r = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
        assert_eq!(
            r,
            0,
            "mknod {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
        DeviceNode(path)
    }
}

impl Drop for DeviceNode {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Renames `host`'s interface to `u<pid in base 36><test><host digit>` (see the module docs)
/// and returns its device name.
fn short_device(tb: &Testbed, host: &str, test: u8) -> String {
    let peer = if host == "h0" { "h1" } else { "h0" };
    let old = tb
        .node(host)
        .unwrap()
        .port_toward(peer)
        .unwrap()
        .ifname
        .clone();
    let mut pid = std::process::id();
    let mut digits = Vec::new();
    while pid > 0 {
        digits.push(char::from_digit(pid % 36, 36).unwrap());
        pid /= 36;
    }
    let pid: String = digits.iter().rev().collect();
    let new = format!("u{pid}{test}{}", &host[1..]);
    for args in [
        vec!["link", "set", "dev", &old, "down"],
        vec!["link", "set", "dev", &old, "name", &new],
        vec!["link", "set", "dev", &new, "up"],
    ] {
        let out = tb
            .command(host, "ip")
            .unwrap()
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ip {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    format!("rocev2_{new}")
}

/// A UCX program in `host` with the library preloaded, the settings above, its one network
/// device `rocev2_<iface>:1` and transports `tls`.
fn ucx(tb: &Testbed, host: &str, dev: &str, program: &str, tls: &str) -> Command {
    let mut cmd = preloaded(tb, host, program);
    cmd.env("UCX_TLS", tls)
        .env("UCX_NET_DEVICES", format!("{dev}:1"))
        .env("UCX_IB_GID_INDEX", "1")
        .env("UCX_UD_VERBS_ETH_DGID_CHECK", "n");
    cmd
}

#[test]
fn ucx_info_lists_the_verbs_transports() {
    if !need_root("ucx_info_lists_the_verbs_transports") {
        return;
    }
    let tb = pair();
    let dev = short_device(&tb, "h0", 0);
    let _node = DeviceNode::new(&dev);
    let mut info = ucx(&tb, "h0", &dev, "ucx_info", "all");
    let out = info.arg("-d").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let md = text
        .split("# Memory domain: ")
        .find(|s| s.starts_with(&format!("{dev}\n")))
        .unwrap_or_else(|| panic!("no memory domain {dev} in\n{text}"));
    for tl in ["rc_verbs", "ud_verbs"] {
        assert!(
            md.contains(&format!(
                "#      Transport: {tl}\n#         Device: {dev}:1"
            )),
            "no {tl} in\n{md}"
        );
    }
}

/// `ucx_perftest -t test -s 4096 -n 1000` with transports `tls`, the server in h1 and the
/// client in h0; returns the client's `Final:` row, after checking that it ran 1000 iterations
/// and that the client's endpoint used `transport`.
fn ucx_perftest(test: &str, index: u8, tls: &str, transport: &str, kind: &str) -> Option<Vec<f64>> {
    if !need_root(test) {
        return None;
    }
    let tb = pair();
    let devs = [
        short_device(&tb, "h0", index),
        short_device(&tb, "h1", index),
    ];
    let _nodes = devs.each_ref().map(|d| DeviceNode::new(d));
    let port = 13337;
    let n = "1000";
    let args = ["-t", kind, "-s", "4096", "-n", n, "-p", &port.to_string()];
    let mut server = ucx(&tb, "h1", &devs[1], "ucx_perftest", tls);
    server.args(args);
    let mut client = ucx(&tb, "h0", &devs[0], "ucx_perftest", tls);
    client
        .args(args)
        .arg(h1_ip(&tb))
        .env("UCX_LOG_LEVEL", "info");
    let (_, c) = run_pair(&tb, server, client, port);
    let all = format!("{}{}", c.stdout, c.stderr);
    let lane = format!("tag({transport}/{}:1)", devs[0]);
    assert!(all.contains(&lane), "no {lane} in\n{}", show(&c));
    let row: Vec<f64> = c
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("Final:"))
        .unwrap_or_else(|| panic!("no Final row in\n{}", show(&c)))
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(row[0], 1000.0, "iterations\n{}", show(&c));
    Some(row)
}

/// Columns of the `Final:` row after the iteration count: overhead 50th percentile, average,
/// overall (µs); bandwidth average, overall (MB/s); message rate average, overall.
const BW_OVERALL: usize = 5;

#[test]
fn ucx_tag_bw_over_rc_verbs() {
    if let Some(row) = ucx_perftest("ucx_tag_bw_over_rc_verbs", 1, "rc_v", "rc_verbs", "tag_bw") {
        assert!(row[BW_OVERALL] > 0.0, "{row:?}");
    }
}

#[test]
fn ucx_tag_lat_over_rc_verbs() {
    if let Some(row) = ucx_perftest(
        "ucx_tag_lat_over_rc_verbs",
        2,
        "rc_v",
        "rc_verbs",
        "tag_lat",
    ) {
        assert!(row[BW_OVERALL] > 0.0, "{row:?}");
    }
}

#[test]
fn ucx_tag_bw_over_ud_verbs() {
    if let Some(row) = ucx_perftest("ucx_tag_bw_over_ud_verbs", 3, "ud_v", "ud_verbs", "tag_bw") {
        assert!(row[BW_OVERALL] > 0.0, "{row:?}");
    }
}

#[test]
fn ucx_tag_lat_over_ud_verbs() {
    if let Some(row) = ucx_perftest(
        "ucx_tag_lat_over_ud_verbs",
        4,
        "ud_v",
        "ud_verbs",
        "tag_lat",
    ) {
        assert!(row[BW_OVERALL] > 0.0, "{row:?}");
    }
}
