//! Mixed: Debian's `rping` with `librocev2_rdmacm.so` and `librocev2_ibverbs.so` preloaded
//! against rocev2's own `rping` (its CM through `rdmacm_shim::cm`), in both roles, over the UDP
//! datapath: 20 pings validated by the client (`-V`) and printed by both sides exactly as
//! rdma-core's rping prints them.

mod common;
use common::*;
use rocev2_testbed::{Captured, Process, Testbed};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_rping");
const TIMEOUT: Duration = Duration::from_secs(120);
const COUNT: u32 = 20;

/// A preloaded library, built as a dev-dependency into `target/<profile>/deps/`.
fn library(name: &str) -> PathBuf {
    let dir = PathBuf::from(BIN)
        .parent()
        .expect("target dir")
        .to_path_buf();
    [dir.join("deps").join(name), dir.join(name)]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{name} built (dev-dependency)"))
}

/// What rping prints for ping `n` of 64 bytes.
fn ping_text(n: u32) -> String {
    let mut s = format!("rdma-ping-{n}: ");
    let mut c = b'A' + (n % 58) as u8;
    while s.len() < 63 {
        s.push(c as char);
        c = if c >= b'z' { b'A' } else { c + 1 };
    }
    s
}

fn h1(tb: &Testbed) -> String {
    tb.node("h1").expect("h1").ipv4().expect("v4").to_string()
}

/// Debian's rping in `host`, preloaded; `ROCEV2_VERBOSE` makes the library say when it listens.
fn debian(tb: &Testbed, host: &str, args: &[&str]) -> Command {
    let mut cmd = tb.command(host, "env").expect("command");
    cmd.arg(format!(
        "LD_PRELOAD={}:{}",
        library("librocev2_rdmacm.so").display(),
        library("librocev2_ibverbs.so").display()
    ))
    .args(["ROCEV2_DATAPATH=udp", "ROCEV2_VERBOSE=1", "rping"])
    .args(["-a", &h1(tb)])
    .args(args);
    cmd
}

/// rocev2's rping in `host` (`-d`: it says `rdma_listen` when it listens).
fn ours(tb: &Testbed, host: &str, args: &[&str]) -> Command {
    let mut cmd = tb.command(host, BIN).expect("command");
    cmd.args(["-d", "-a", &h1(tb), "--datapath", "udp"])
        .args(["--iface", &ifname(tb, host)])
        .args(args);
    cmd
}

fn show(c: &Captured) -> String {
    format!("{} ({}):\n{}\n{}", c.cmd, c.status, c.stdout, c.stderr)
}

/// Server (until its `listening` line) then client; both succeed and print every ping.
fn run(mut server: Command, listening: &str, mut client: Command) {
    let mut s = Process::spawn(&mut server).expect("spawn server");
    s.wait_for_line(|l| l.contains(listening), TIMEOUT)
        .expect("server listening");
    let c = Process::spawn(&mut client)
        .expect("spawn client")
        .wait(TIMEOUT)
        .expect("client exits");
    let s = s.wait(TIMEOUT).expect("server exits");
    assert!(
        s.status.success() && c.status.success(),
        "server {}\nclient {}",
        show(&s),
        show(&c)
    );
    let want = |prefix: &str| -> Vec<String> {
        (0..COUNT)
            .map(|n| format!("{prefix}{}", ping_text(n)))
            .collect()
    };
    let lines = |out: &str, prefix: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.starts_with(prefix))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        lines(&c.stdout, "ping data: "),
        want("ping data: "),
        "{}",
        show(&c)
    );
    assert_eq!(
        lines(&s.stdout, "server ping data: "),
        want("server ping data: "),
        "{}",
        show(&s)
    );
}

#[test]
fn preloaded_rping_against_rocev2_rping() {
    if !need_root("preloaded_rping_against_rocev2_rping") {
        return;
    }
    let tb = pair();
    let count = COUNT.to_string();
    let server = ["-s", "-v", "-C", &count];
    let client = ["-c", "-v", "-V", "-C", &count];
    // Debian's server, our client; then ours as server and Debian's as client.
    run(
        debian(&tb, "h1", &server),
        "rocev2_rdmacm: listening on",
        ours(&tb, "h0", &client),
    );
    run(
        ours(&tb, "h1", &server),
        "rdma_listen",
        debian(&tb, "h0", &client),
    );
}
