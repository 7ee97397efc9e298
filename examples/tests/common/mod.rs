//! Helpers shared by the netns scenarios of the perftest-style examples: the loud root skip, a
//! pair testbed, and running an example's server in `h1` and client in `h0`.
//!
//! Why these scenarios live here and not in `integration/tests/`: Cargo sets
//! `CARGO_BIN_EXE_<name>` only for the binaries of the crate under test, so tests in this
//! crate run the freshly built `rc_pingpong` and `write_bw` directly inside the testbed's
//! namespaces (`ip netns exec`, through `rocev2-testbed`'s exec helpers), with no path
//! guessing in the target directory. Each side is a separate process, so every frame crosses
//! the veth pair and both kernels.
// Each scenario file compiles this module separately and uses only part of it.
#![allow(dead_code)]

use rocev2_testbed::exec::run_server_client;
use rocev2_testbed::topology::{LinkParams, Topology};
use rocev2_testbed::{Captured, Testbed};
use std::time::Duration;

/// Out-of-band TCP port (the tools' default).
pub const PORT: u16 = 18515;

pub use rocev2_testbed::need_root;

/// Two hosts on one veth link, MTU 4200 (IBA path MTU 4096), as deploy/testbeds/pair.toml.
pub fn pair() -> Testbed {
    pair_with_queues(1)
}

/// [`pair`] with `queues` transmit and receive queues on each veth end.
pub fn pair_with_queues(queues: u32) -> Testbed {
    Testbed::up_topology(&Topology::Pair {
        link: LinkParams::new().mtu(4200).queues(queues),
    })
    .expect("pair testbed")
}

/// `host`'s interface toward the other host.
pub fn ifname(tb: &Testbed, host: &str) -> String {
    let peer = if host == "h0" { "h1" } else { "h0" };
    tb.node(host)
        .expect("host")
        .port_toward(peer)
        .expect("port")
        .ifname
        .clone()
}

/// Runs `bin args` as server in `h1` (waiting until it listens on [`PORT`]) and
/// `bin args <h1's IPv4>` as client in `h0`; returns (server, client) output, both checked for
/// success.
pub fn run_pair(tb: &Testbed, bin: &str, args: &[&str], timeout: Duration) -> (Captured, Captured) {
    run_pair_args(tb, bin, args, args, timeout)
}

/// [`run_pair`] with different arguments for the server and the client.
pub fn run_pair_args(
    tb: &Testbed,
    bin: &str,
    server_args: &[&str],
    client_args: &[&str],
    timeout: Duration,
) -> (Captured, Captured) {
    let with_iface = |host: &str, args: &[&str]| {
        let mut v: Vec<String> = vec!["-d".into(), ifname(tb, host)];
        v.extend(args.iter().map(|s| s.to_string()));
        v
    };
    let mut server = tb.command("h1", bin).expect("command");
    server.args(with_iface("h1", server_args));
    let h1 = tb.node("h1").expect("h1");
    let mut client = tb.command("h0", bin).expect("command");
    client
        .args(with_iface("h0", client_args))
        .arg(h1.ipv4().expect("v4").to_string());
    run_server_client(&mut server, &h1.netns, PORT, &mut client, timeout)
        .unwrap_or_else(|e| panic!("{e}"))
}
