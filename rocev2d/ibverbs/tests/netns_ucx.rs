//! UCX (Debian's `ucx-utils`, unmodified) over `librocev2_ibverbs.so` in a pair testbed:
//! `ucx_info -d` lists the device with the `rc_verbs` and `ud_verbs` transports, `ucx_info -e`
//! connects an endpoint to its own worker over the device (the frames loop back), and
//! `ucx_perftest` runs `tag_bw` and `tag_lat` with 4 KiB messages between the namespaces over
//! `rc_verbs` (UCX's `rc_v`: `ud_verbs` only to set up the connection) and over `ud_verbs`, each
//! client's log naming the transport its endpoint uses; `io_demo` runs UCX's client-server
//! connections through `librocev2_rdmacm.so`, in-process and attached to a `rocev2d` in each
//! namespace, with its data checks.
//!
//! What UCX needs beyond the verbs (docs/ibverbs.md, "UCX"): a character device at
//! `/dev/infiniband/<dev_name>` it may read and write, which it only checks for, made here as
//! a copy of `/dev/null` and removed after; and `UCX_UD_VERBS_ETH_DGID_CHECK=n` (UCX reads an
//! IPv4 packet's destination from the GRH area only when the completion's `sl` carries mlx5's
//! packet type). No GID index is set: UCX 1.13, finding no GID types in sysfs, probes each GID
//! with an address handle to the device's own address and takes the IPv4 one, which the
//! tests' endpoints then use.
//!
//! UCX keeps a device's name to 15 characters (`UCT_MD_NAME_MAX`), fewer than
//! `rocev2_<iface>` takes with the testbed's interface names, so each test renames its two
//! interfaces `u<pid><test><host>` first (8 characters at most, unique per test).
//!
//! UDP datapath (the programs', or the daemons' when attached), as in `netns_tools.rs`. Needs root (namespaces, the device node); skipped
//! loudly otherwise.

mod common;
use common::{TIMEOUT, h1_ip, pair, preloaded, preloading, run_pair, show};
use rocev2_testbed::{Process, Testbed, need_root};
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
    ucx_with(preloaded(tb, host, program), dev, tls)
}

/// `cmd` (a UCX program) with the settings above, device `dev` and transports `tls`.
fn ucx_with(mut cmd: Command, dev: &str, tls: &str) -> Command {
    cmd.env("UCX_TLS", tls)
        .env("UCX_NET_DEVICES", format!("{dev}:1"))
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
    // An endpoint to its own worker: UCX wires it up over `rc_verbs`, through the device's
    // own address.
    let mut ep = ucx(&tb, "h0", &dev, "ucx_info", "rc_v");
    let out = ep.args(["-e", "-u", "t"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!("rc_verbs/{dev}:1")),
        "no rc_verbs lane in\n{text}"
    );
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

/// UCX's client-server connection (`ucp_ep_create` to a socket address, as ucx-py and Dask
/// make them) through its `rdmacm` connection manager, the only one allowed here, with
/// `librocev2_rdmacm.so` preloaded too: `io_demo` with its data and transaction checks (`-q`),
/// 1000 READs and WRITEs of 1–64 KiB over `rc_verbs`. UCX announces a UD QP of its own as the
/// connection's (`conn_param.qp_num`), reads the peer's address with `rdma_init_qp_attr`, and
/// connects its `rc_verbs` QPs itself over what the private data carried.
#[test]
fn ucx_client_server_over_rdmacm() {
    io_demo_pair("ucx_client_server_over_rdmacm", 5, "udp");
}

/// The same attached to a `rocev2d` in each namespace: UCX's buffers and memory pools are
/// registered in place, their pages moved onto memfds the daemons map (docs/ibverbs.md,
/// "Memory"), and UCX's checks see every byte the daemons placed.
#[test]
fn ucx_client_server_attached_to_rocev2d() {
    io_demo_pair("ucx_client_server_attached_to_rocev2d", 6, "attach");
}

/// `io_demo` server in h1 and client in h0 (see the tests above) with `ROCEV2_DATAPATH=datapath`
/// (`attach`: a daemon serves each renamed interface over UDP); `index` tells the tests'
/// interface names apart.
fn io_demo_pair(test: &str, index: u8, datapath: &str) {
    if !need_root(test) {
        return;
    }
    let tb = pair();
    let devs = [
        short_device(&tb, "h0", index),
        short_device(&tb, "h1", index),
    ];
    let _nodes = devs.each_ref().map(|d| DeviceNode::new(d));
    let _daemons = (datapath == "attach").then(|| {
        [("h0", &devs[0]), ("h1", &devs[1])]
            .map(|(h, d)| tb.daemon(h, d.trim_start_matches("rocev2_"), "udp", TIMEOUT))
            .map(|d| d.expect("daemon serving"))
    });
    let port = 13999 - u16::from(index);
    let io_demo = |host: &str, dev: &str| {
        let libs = ["rocev2_rdmacm", "rocev2_ibverbs"];
        let mut cmd = ucx_with(
            preloading(&tb, host, &libs, datapath, "io_demo"),
            dev,
            "rc_v,ud_v,self",
        );
        cmd.env("UCX_SOCKADDR_TLS_PRIORITY", "rdmacm").args([
            "-p",
            &port.to_string(),
            "-q",
            "-d",
            "1024:65536",
            "-c",
            "2",
        ]);
        cmd
    };
    let mut server = Process::spawn(&mut io_demo("h1", &devs[1])).expect("io_demo server");
    // An rdma_cm listener has no socket to wait for: the server says when it listens.
    server
        .wait_for_line(|l| l.contains("started listener"), TIMEOUT)
        .expect("io_demo server listening");
    let mut client = io_demo("h0", &devs[0]);
    client.args(["-o", "read,write", "-i", "1000", &h1_ip(&tb)]);
    let c = Process::spawn(&mut client)
        .expect("io_demo client")
        .wait(TIMEOUT)
        .expect("io_demo client exits");
    let s = server.kill();
    assert!(c.status.success(), "{}\nserver {}", show(&c), show(&s));
    assert!(
        c.stdout.contains("Client exit with status 'OK'"),
        "{}\nserver {}",
        show(&c),
        show(&s)
    );
    // Each report counts the requests since the one before (one a second): together, the
    // READs and WRITEs, 1000 in all.
    let reports: Vec<&str> = c
        .stdout
        .lines()
        .filter(|l| l.contains("[DEMO] total min:"))
        .collect();
    let total: u32 = reports
        .iter()
        .map(|l| {
            l.split("total:")
                .nth(1)
                .and_then(|t| t.split_whitespace().next()?.parse::<u32>().ok())
                .unwrap_or_else(|| panic!("no total in {l}"))
        })
        .sum();
    assert!(total >= 990, "{total} in {reports:?}\n{}", show(&c));
    // The server saw the client go (`Connection reset by remote peer`, its forced close) and
    // nothing worse: no UCX error, no failed check of its own.
    let server_log = format!("{}{}", s.stdout, s.stderr);
    for bad in ["UCX  ERROR", "Fatal", "Assertion"] {
        assert!(!server_log.contains(bad), "{bad}: {}", show(&s));
    }
}
