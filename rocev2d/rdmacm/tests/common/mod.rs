//! What the scenarios with preloaded rdma_cm programs share: the two libraries under test, a
//! pair testbed, and starting a program preloaded in a namespace and waiting until it listens.
// Each scenario file compiles this module separately and uses only part of it.
#![allow(dead_code)]

use rocev2_testbed::topology::{LinkParams, Topology};
use rocev2_testbed::{Captured, Process, Testbed};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Generous: debug builds of the engine, on a shared 2-vCPU machine.
pub const TIMEOUT: Duration = Duration::from_secs(180);

/// A library built beside this test's binary (`target/<profile>/deps/`; the copy one level
/// up is only refreshed by `cargo build`, so it may be stale). librocev2_ibverbs.so is built
/// as a dev-dependency.
pub fn library(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps dir");
    [deps, deps.parent().expect("profile dir")]
        .iter()
        .map(|d| d.join(name))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{name} built beside the tests"))
}

/// `LD_PRELOAD` with both libraries.
pub fn preload() -> String {
    format!(
        "LD_PRELOAD={}:{}",
        library("librocev2_rdmacm.so").display(),
        library("librocev2_ibverbs.so").display()
    )
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

/// `program` in `host`'s namespace with both libraries preloaded and
/// `ROCEV2_DATAPATH=datapath`; `ROCEV2_VERBOSE` makes the library say when it listens.
pub fn preloaded(tb: &Testbed, host: &str, datapath: &str, program: &str) -> Command {
    let mut cmd = tb.command(host, "env").expect("command");
    cmd.arg(preload())
        .arg(format!("ROCEV2_DATAPATH={datapath}"))
        .arg("ROCEV2_VERBOSE=1")
        .arg(program);
    cmd
}

/// Starts `server` and waits until it listens (the library's `listening on` line).
pub fn listening(server: &mut Command) -> Process {
    let mut p = Process::spawn(server).expect("spawn server");
    p.wait_for_line(|l| l.contains("rocev2_rdmacm: listening on"), TIMEOUT)
        .unwrap_or_else(|e| panic!("server never listened: {e}"));
    p
}

/// Runs `server` (until it listens) then `client`; both must succeed. Returns both.
pub fn run_pair(server: Command, client: Command) -> (Captured, Captured) {
    try_pair(server, client).unwrap_or_else(|e| panic!("{e}"))
}

/// [`run_pair`], with what went wrong as the error: a client that fails ends the server at
/// once (it would wait for the client's connection until [`TIMEOUT`]).
pub fn try_pair(mut server: Command, mut client: Command) -> Result<(Captured, Captured), String> {
    let mut s = listening(&mut server);
    let mut c = Process::spawn(&mut client).expect("spawn client");
    let Some(c) = finish(&mut c) else {
        return Err(format!(
            "client still running after {TIMEOUT:?}:\nserver {}\nclient {}",
            show(&s.kill()),
            show(&c.kill())
        ));
    };
    if !c.status.success() {
        return Err(format!("server {}\nclient {}", show(&s.kill()), show(&c)));
    }
    let Some(s) = finish(&mut s) else {
        return Err(format!(
            "server still running after {TIMEOUT:?}:\nserver {}\nclient {}",
            show(&s.kill()),
            show(&c)
        ));
    };
    if !s.status.success() {
        return Err(format!("server {}\nclient {}", show(&s), show(&c)));
    }
    Ok((s, c))
}

/// Waits up to [`TIMEOUT`] for `p` to exit; its output, or `None` if it still runs.
fn finish(p: &mut Process) -> Option<Captured> {
    let deadline = std::time::Instant::now() + TIMEOUT;
    while p.is_running() {
        if std::time::Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(p.kill())
}

pub fn show(c: &Captured) -> String {
    format!("{} ({}):\n{}\n{}", c.cmd, c.status, c.stdout, c.stderr)
}

pub fn ip(tb: &Testbed, host: &str) -> String {
    tb.node(host).unwrap().ipv4().unwrap().to_string()
}

/// What rping prints for ping `n` of 64 bytes: `rdma-ping-N: ` then letters from the N-th
/// after 'A' (wrapping after 'z' to 'A'), 63 characters before the NUL.
pub fn ping_text(n: u32) -> String {
    let mut s = format!("rdma-ping-{n}: ");
    let mut c = b'A' + (n % 58) as u8;
    while s.len() < 63 {
        s.push(c as char);
        c = if c >= b'z' { b'A' } else { c + 1 };
    }
    s
}

/// The `prefix`ed ping lines of pings 0..count.
pub fn ping_lines(prefix: &str, count: u32) -> Vec<String> {
    (0..count)
        .map(|n| format!("{prefix}{}", ping_text(n)))
        .collect()
}

/// The lines of `out` starting with `prefix`.
pub fn lines_with(out: &str, prefix: &str) -> Vec<String> {
    out.lines()
        .filter(|l| l.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

/// `rping` between the pair, each side's command made by `rping(host)` (the program and
/// whatever runs it): `-s -v` in h1, `-c -v -V` in h0 (the client validates each ping), `count`
/// pings of 64 bytes; both sides must print every ping as rping prints it. Returns both
/// outputs.
pub fn rping_pair(
    tb: &Testbed,
    rping: impl Fn(&str) -> Command,
    count: u32,
) -> (Captured, Captured) {
    let (h1, n) = (ip(tb, "h1"), count.to_string());
    let mut s = rping("h1");
    s.args(["-s", "-v", "-a", &h1, "-C", &n]);
    let mut c = rping("h0");
    c.args(["-c", "-v", "-V", "-a", &h1, "-C", &n]);
    let (s, c) = run_pair(s, c);
    for (out, prefix) in [(&c, "ping data: "), (&s, "server ping data: ")] {
        assert_eq!(
            lines_with(&out.stdout, prefix),
            ping_lines(prefix, count),
            "{}",
            show(out)
        );
    }
    (s, c)
}
