//! Helpers shared by the scenarios that run `rocev2-wiretest`: the loud root skip, a pair
//! testbed, and running a server and a client (in `h1` and `h0` of the pair, or any two hosts).
//!
//! Each scenario runs the real binary inside the testbed's namespaces through the testbed's
//! exec helpers (`ip netns exec`), one process per side, so every packet crosses the veth pair
//! and the kernels on both sides exactly as in production.
//!
//! The wire-test tool's scenarios and the daemon's switch scenarios (`#[path]`) both include
//! this file; each says where the tool is with its own `super::wiretest()`.

use super::wiretest;
use rocev2_testbed::topology::{LinkParams, Topology};
use rocev2_testbed::{Captured, Process, Testbed};
use serde_json::Value;
use std::time::Duration;

/// Out-of-band TCP port of the server peer.
pub const OOB_PORT: &str = "18515";
/// Bound for setting up one side.
pub const SETUP: Duration = Duration::from_secs(30);

pub use rocev2_testbed::need_root;

/// Whether `bin` can be run as user `nobody` (`setpriv --reuid=65534 …`): setpriv is there and
/// the binary is world-executable (a target directory under a private home is not). Says
/// SKIPPED loudly when not.
pub fn can_run_as_nobody(test: &str, bin: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    let executable = std::fs::metadata(bin).is_ok_and(|m| m.permissions().mode() & 0o001 != 0);
    let setpriv = std::process::Command::new("setpriv")
        .arg("--help")
        .output()
        .is_ok();
    if executable && setpriv {
        return true;
    }
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "\nSKIPPED (needs setpriv and a world-executable binary): {test}"
    );
    false
}

/// Two hosts on one veth link with a 9000-byte MTU (IBA path MTU 4096).
pub fn pair() -> Testbed {
    Testbed::up_topology(&Topology::Pair {
        link: LinkParams::new().mtu(9000),
    })
    .expect("pair testbed")
}

/// MiB moved by a bulk scenario: `ROCEV2_WIRE_BULK_MIB` if set, else `default` (1024 for
/// AF_XDP, the fastest datapath, so CI moves 1 GiB; 64 for the others).
pub fn bulk_mib(default: u64) -> u64 {
    std::env::var("ROCEV2_WIRE_BULK_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `host`'s interface (a host has one port, toward its switch or the other host).
pub fn ifname(tb: &Testbed, host: &str) -> String {
    tb.node(host).expect("host").ports[0].ifname.clone()
}

/// The OOB address of a server in `host` as a client connects to it.
fn oob_addr(tb: &Testbed, host: &str, ipv6: bool) -> String {
    let h = tb.node(host).expect("server host");
    if ipv6 {
        format!("[{}]:{OOB_PORT}", h.ipv6().expect("v6"))
    } else {
        format!("{}:{OOB_PORT}", h.ipv4().expect("v4"))
    }
}

/// Starts the server peer in `h1` and waits until it listens.
pub fn server(tb: &Testbed, args: &[&str]) -> Process {
    server_via(tb, &[], args)
}

/// [`server`] run through a wrapper command (`setpriv …` to drop privileges).
pub fn server_via(tb: &Testbed, wrapper: &[&str], args: &[&str]) -> Process {
    server_in(tb, "h1", wrapper, args)
}

/// Starts a server peer in `host`, through `wrapper` if not empty, and waits until it listens.
pub fn server_in(tb: &Testbed, host: &str, wrapper: &[&str], args: &[&str]) -> Process {
    let mut cmd = match wrapper.split_first() {
        Some((prog, rest)) => {
            let mut c = tb.command(host, prog).expect("command");
            c.args(rest).arg(wiretest());
            c
        }
        None => tb.command(host, wiretest()).expect("command"),
    };
    cmd.args(["--iface", &ifname(tb, host), "--listen", OOB_PORT])
        .args(args);
    let mut p = Process::spawn(&mut cmd).expect("spawn server");
    p.wait_for_line(|l| l.starts_with("LISTENING"), SETUP)
        .expect("server listening");
    p
}

/// Starts the client peer in `h0`.
pub fn client(tb: &Testbed, ipv6: bool, args: &[&str]) -> Process {
    client_in(tb, "h0", "h1", ipv6, args)
}

/// Starts a client peer in `host` toward the server in `server_host`.
pub fn client_in(
    tb: &Testbed,
    host: &str,
    server_host: &str,
    ipv6: bool,
    args: &[&str],
) -> Process {
    let mut cmd = tb.command(host, wiretest()).expect("command");
    cmd.args([
        "--iface",
        &ifname(tb, host),
        "--connect",
        &oob_addr(tb, server_host, ipv6),
    ])
    .args(args);
    if ipv6 {
        cmd.arg("--ipv6");
    }
    Process::spawn(&mut cmd).expect("spawn client")
}

/// The JSON after `RESULT ` in a finished peer's stdout; panics with its output otherwise.
pub fn result(c: &Captured) -> Value {
    assert!(
        c.status.success(),
        "{} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        c.cmd,
        c.status,
        c.stdout,
        c.stderr
    );
    let line = c
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("no RESULT line:\n{}\n{}", c.stdout, c.stderr));
    serde_json::from_str(line).expect("RESULT is JSON")
}

/// Runs a server with `server_args` and a client with `client_args` to completion and returns
/// the client's result; the server must exit cleanly too.
pub fn run(
    tb: &Testbed,
    ipv6: bool,
    server_args: &[&str],
    client_args: &[&str],
    limit: Duration,
) -> Value {
    run_between(tb, ("h0", "h1"), ipv6, server_args, client_args, limit)
}

/// [`run`] with the client and server in the given hosts (`(client, server)`).
pub fn run_between(
    tb: &Testbed,
    (client_host, server_host): (&str, &str),
    ipv6: bool,
    server_args: &[&str],
    client_args: &[&str],
    limit: Duration,
) -> Value {
    let mut s_args = server_args.to_vec();
    if ipv6 {
        s_args.push("--ipv6");
    }
    let srv = server_in(tb, server_host, &[], &s_args);
    let cli = client_in(tb, client_host, server_host, ipv6, client_args);
    let out = cli.wait(limit).expect("client finished in time");
    let r = result(&out);
    let s = srv.wait(SETUP).expect("server exits after quit");
    assert!(
        s.status.success(),
        "server failed:\n{}\n{}",
        s.stdout,
        s.stderr
    );
    r
}

/// A drop counter of the server's snapshot in a client result.
pub fn drop_count(r: &Value, reason: &str) -> u64 {
    r["server"]["snapshot"]["drops"][reason]
        .as_u64()
        .unwrap_or_else(|| panic!("no drop counter {reason} in {r}"))
}
