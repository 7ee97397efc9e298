//! Control sockets per network namespace (docs/daemon.md): two namespaces whose interfaces
//! share the name `eth0`, each with a `rocev2d` on its default socket.
//!
//! - Both daemons start, an application in each namespace attaches to its own (a checked
//!   ping-pong between them), and `rocev2d stats` without flags reads its own namespace's.
//! - A tool opening the served interface in-process attaches to the daemon instead.
//! - An application from another network namespace is refused by name.
//! - `rocev2d devices` lists each namespace's own `eth0` with its GID table, probes AF_XDP
//!   before a daemon serves it, and names the daemon after.

mod common;
use common::*;
use rocev2_testbed::netns::{VethEnd, veth_pair};
use rocev2_testbed::{Process, exec};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

const SETUP: Duration = Duration::from_secs(30);
const IFACE: &str = "eth0";
const ADDRS: [&str; 2] = ["10.77.0.1", "10.77.0.2"];

/// Two namespaces joined by a veth pair whose ends are both named `eth0`, deleted on drop.
struct Namespaces([String; 2]);

impl Namespaces {
    fn new(test: &str) -> Namespaces {
        let ns = ["a", "b"].map(|s| format!("rv2{test}-{}-{s}", std::process::id()));
        for n in &ns {
            let out = exec::run(Command::new("ip").args(["netns", "add", n]), SETUP).unwrap();
            assert!(out.status.success(), "ip netns add {n}: {}", out.stderr);
        }
        let made = Namespaces(ns);
        let addrs = [[format!("{}/24", ADDRS[0])], [format!("{}/24", ADDRS[1])]];
        let addrs = addrs.each_ref().map(|a| [a[0].as_str()]);
        let end = |i: usize| VethEnd {
            netns: Some(&made.0[i]),
            addrs: &addrs[i],
            ..VethEnd::new(IFACE)
        };
        veth_pair(end(0), end(1)).expect("veth pair");
        made
    }

    fn command(&self, i: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0[i]]).arg(program);
        c
    }

    /// A daemon on `eth0` of namespace `i`, on its default socket unless `socket` is given.
    fn daemon(&self, i: usize, socket: Option<&str>) -> Process {
        let mut cmd = self.command(i, BIN);
        cmd.args(["run", "--iface", IFACE, "--datapath", "packet"]);
        if let Some(s) = socket {
            cmd.args(["--socket", s]);
        }
        let mut d = Process::spawn(&mut cmd).expect("spawn daemon");
        d.wait_for_line(|l| l.starts_with("rocev2d: serving"), SETUP)
            .expect("daemon serving");
        d
    }

    /// `rocev2d stats --json` in namespace `i`, without `--iface` or `--socket`.
    fn stats(&self, i: usize) -> serde_json::Value {
        let out = exec::run(self.command(i, BIN).args(["stats", "--json"]), SETUP).expect("stats");
        assert!(out.status.success(), "{}", out.stderr);
        serde_json::from_str(&out.stdout).expect("stats JSON")
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// Removes a socket file when the test ends, however it ends: a daemon killed with SIGKILL
/// leaves its file behind.
struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A checked ping-pong (`rc_pingpong -c`) from namespace 0 to namespace 1, each side with
/// `args` before its own.
fn pingpong(ns: &Namespaces, args: [&[&str]; 2], port: u16) {
    let port_s = port.to_string();
    let pp = ["-d", IFACE, "-c", "-s", "4096", "-n", "200", "-p", &port_s];
    let mut server = ns.command(1, example("rc_pingpong"));
    server.args(pp).args(args[1]);
    let server = Process::spawn(&mut server).expect("spawn server");
    exec::wait_for_port(&ns.0[1], exec::Proto::Tcp, port, SETUP).expect("server listening");
    let mut client = ns.command(0, example("rc_pingpong"));
    client.args(pp).args(args[0]).arg(ADDRS[1]);
    let client = Process::spawn(&mut client).expect("spawn client");
    for p in [client, server] {
        let out = p
            .finish(Duration::from_secs(60))
            .expect("ping-pong succeeds");
        assert!(out.stdout.contains("200 iters in"), "{}", out.stdout);
    }
}

#[test]
fn same_interface_name_in_two_namespaces_each_daemon_serves_its_own() {
    let test = "samename";
    if !need_root(test) {
        return;
    }
    let ns = Namespaces::new(test);
    // The second daemon would have been refused while both used one socket path.
    let _d = [ns.daemon(0, None), ns.daemon(1, None)];
    pingpong(&ns, [&["--attach"], &["--attach"]], 18620);
    for i in 0..2 {
        let s = ns.stats(i);
        assert_eq!(s["iface"], IFACE, "{s}");
        // Each daemon carried its own side's frames: an application that reached the other
        // namespace's daemon would leave this one silent.
        assert!(s["packets"]["tx_packets"].as_u64().unwrap() >= 200, "{s}");
        assert!(s["packets"]["rx_packets"].as_u64().unwrap() >= 200, "{s}");
    }
}

/// `rocev2d devices --json` in namespace `i`.
fn devices(ns: &Namespaces, i: usize) -> serde_json::Value {
    let out = exec::run(ns.command(i, BIN).args(["devices", "--json"]), SETUP).expect("devices");
    assert!(out.status.success(), "{}", out.stderr);
    serde_json::from_str(&out.stdout).expect("devices JSON")
}

#[test]
fn devices_lists_each_namespaces_interface_and_its_daemon() {
    let test = "devices";
    if !need_root(test) {
        return;
    }
    let ns = Namespaces::new(test);
    let before = devices(&ns, 1);
    let d = &before["devices"][0];
    assert_eq!(
        before["devices"].as_array().map(Vec::len),
        Some(1),
        "{before}"
    );
    assert_eq!(d["name"], "rocev2_eth0", "{before}");
    assert_eq!(
        d["gids"][1]["gid"],
        format!("::ffff:{}", ADDRS[1]),
        "{before}"
    );
    assert_eq!(
        d["gids"][1]["ipv4"], ADDRS[1],
        "GID 1 is this namespace's: {before}"
    );
    assert!(
        d["gids"][0]["gid"].as_str().unwrap().starts_with("fe80::"),
        "{before}"
    );
    // A veth takes AF_XDP in copy mode only.
    assert_eq!(d["af_xdp"], "copy", "{before}");
    assert!(d["served_by"].is_null(), "{before}");
    assert_eq!(before["skipped"][0]["iface"], "lo", "{before}");
    let _d = ns.daemon(1, None);
    let after = devices(&ns, 1);
    let d = &after["devices"][0];
    assert_eq!(d["served_by"], "@rocev2d/eth0", "{after}");
    assert_eq!(d["af_xdp"], "not probed (served)", "{after}");
    assert!(
        devices(&ns, 0)["devices"][0]["served_by"].is_null(),
        "the other namespace's"
    );
}

#[test]
fn an_in_process_open_of_a_served_interface_attaches() {
    let test = "inproc";
    if !need_root(test) {
        return;
    }
    let ns = Namespaces::new(test);
    let _d = [ns.daemon(0, None), ns.daemon(1, None)];
    // Neither side asks for --attach: an engine of its own would lose the frames to the
    // daemon's steering (RETRY_EXC_ERR on both sides); the open attaches instead.
    pingpong(&ns, [&[], &[]], 18621);
    for i in 0..2 {
        let s = ns.stats(i);
        assert!(s["packets"]["tx_packets"].as_u64().unwrap() >= 200, "{s}");
    }
}

#[test]
fn an_application_from_another_namespace_is_refused() {
    let test = "othernet";
    if !need_root(test) {
        return;
    }
    let ns = Namespaces::new(test);
    // A filesystem socket: reachable from this test's namespace, unlike the abstract default.
    let socket = format!("/tmp/rocev2d-{test}-{}.sock", std::process::id());
    let _file = SocketFile(PathBuf::from(&socket));
    let _d = ns.daemon(0, Some(&socket));
    let e = match rocev2::Device::attach_socket(socket.as_ref()) {
        Ok(_) => panic!("attached from another network namespace"),
        Err(e) => e,
    };
    assert!(
        matches!(&e, rocev2::Error::Refused { message, .. }
            if message.contains("another network namespace")),
        "{e}"
    );
    // From the daemon's namespace, through the same socket, an application attaches.
    let mut tool = ns.command(0, example("rc_pingpong"));
    tool.args(["-d", IFACE, "--attach", "--socket", &socket, "-p", "18622"]);
    let mut server = Process::spawn(&mut tool).expect("spawn");
    exec::wait_for_port(&ns.0[0], exec::Proto::Tcp, 18622, SETUP).expect("attached and listening");
    server.kill();
}
