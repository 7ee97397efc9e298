//! What the scenarios with preloaded programs share: the library under test, a pair
//! testbed, device names, and running a program preloaded in a namespace.
// Each scenario file compiles this module separately and uses only part of it.
#![allow(dead_code)]

use rocev2_testbed::exec::run_server_client;
use rocev2_testbed::topology::{LinkParams, Topology};
use rocev2_testbed::{Captured, Testbed};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Generous: debug builds of the engine, on a shared 2-vCPU machine.
pub const TIMEOUT: Duration = Duration::from_secs(180);

/// `lib<name>.so` (`rocev2_ibverbs`, `rocev2_rdmacm`), built beside this test's binary
/// (`target/<profile>/deps/` first: the copy one level up is only refreshed by `cargo build`,
/// so it may be stale).
pub fn library(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps dir");
    let file = format!("lib{name}.so");
    [deps, deps.parent().expect("profile dir")]
        .iter()
        .map(|d| d.join(&file))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{file} not built beside the tests"))
}

pub fn pair() -> Testbed {
    Testbed::up_topology(&Topology::Pair {
        link: LinkParams::new().mtu(4200),
    })
    .expect("pair testbed")
}

/// `host`'s device name, `rocev2_<its interface toward the other host>`.
pub fn device(tb: &Testbed, host: &str) -> String {
    let peer = if host == "h0" { "h1" } else { "h0" };
    let port = tb.node(host).unwrap().port_toward(peer).unwrap();
    format!("rocev2_{}", port.ifname)
}

/// `program` in `host`'s namespace with the library preloaded, on the UDP datapath.
pub fn preloaded(tb: &Testbed, host: &str, program: &str) -> Command {
    preloaded_with(tb, host, "udp", program)
}

/// `program` in `host`'s namespace with the library preloaded and `ROCEV2_DATAPATH=datapath`.
pub fn preloaded_with(tb: &Testbed, host: &str, datapath: &str, program: &str) -> Command {
    preloading(tb, host, &["rocev2_ibverbs"], datapath, program)
}

/// `program` in `host`'s namespace with the libraries `libs` preloaded (`library`'s names)
/// and `ROCEV2_DATAPATH=datapath`.
pub fn preloading(
    tb: &Testbed,
    host: &str,
    libs: &[&str],
    datapath: &str,
    program: &str,
) -> Command {
    let paths: Vec<String> = libs
        .iter()
        .map(|l| library(l).display().to_string())
        .collect();
    let mut cmd = tb.command(host, "env").expect("command");
    cmd.arg(format!("LD_PRELOAD={}", paths.join(":")))
        .arg(format!("ROCEV2_DATAPATH={datapath}"))
        .arg(program);
    cmd
}

pub fn show(c: &Captured) -> String {
    format!("{} ({}):\n{}\n{}", c.cmd, c.status, c.stdout, c.stderr)
}

/// Runs `server` in h1 (waiting for it to listen on TCP `port`) and `client` in h0; both
/// must succeed. Returns (server, client).
pub fn run_pair(
    tb: &Testbed,
    mut server: Command,
    mut client: Command,
    port: u16,
) -> (Captured, Captured) {
    let h1 = &tb.node("h1").unwrap().netns;
    run_server_client(&mut server, h1, port, &mut client, TIMEOUT).unwrap_or_else(|e| panic!("{e}"))
}

pub fn h1_ip(tb: &Testbed) -> String {
    tb.node("h1").unwrap().ipv4().unwrap().to_string()
}
