//! Mixed: Debian's rdma_cm programs with `librocev2_rdmacm.so` and `librocev2_ibverbs.so`
//! preloaded against rocev2's own (their CM through `rdmacm_shim::cm`), in both roles, over the
//! UDP datapath: `rping`, 20 pings validated by the client (`-V`) and printed by both sides
//! exactly as rdma-core's rping prints them; `ucmatose`, 2 connections with 10 messages each
//! way on each, both sides printing `return status 0`.

mod common;
use common::*;
use rocev2_testbed::{Captured, Process, Testbed};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

const RPING: &str = env!("CARGO_BIN_EXE_rping");
const UCMATOSE: &str = env!("CARGO_BIN_EXE_ucmatose");
const TIMEOUT: Duration = Duration::from_secs(120);
const COUNT: u32 = 20;

/// A preloaded library, built as a dev-dependency into `target/<profile>/deps/`.
fn library(name: &str) -> PathBuf {
    let dir = PathBuf::from(RPING)
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

/// Debian's `program` in `host`, preloaded; `ROCEV2_VERBOSE` makes the library say when it
/// listens.
fn debian(tb: &Testbed, host: &str, program: &str, args: &[&str]) -> Command {
    let mut cmd = tb.command(host, "env").expect("command");
    cmd.arg(format!(
        "LD_PRELOAD={}:{}",
        library("librocev2_rdmacm.so").display(),
        library("librocev2_ibverbs.so").display()
    ))
    .args(["ROCEV2_DATAPATH=udp", "ROCEV2_VERBOSE=1", program])
    .args(args);
    cmd
}

/// rocev2's tool `bin` in `host` on the UDP datapath.
fn ours(tb: &Testbed, host: &str, bin: &str, args: &[&str]) -> Command {
    let mut cmd = tb.command(host, bin).expect("command");
    cmd.args(["--datapath", "udp", "--iface", &ifname(tb, host)])
        .args(args);
    cmd
}

fn show(c: &Captured) -> String {
    format!("{} ({}):\n{}\n{}", c.cmd, c.status, c.stdout, c.stderr)
}

/// Server (until its `listening` line) then client, again while the client is refused for
/// want of a listener (REJ reason 8: a server that says it starts before it listens, as
/// rdma-core's ucmatose does); both must succeed.
fn run(mut server: Command, listening: &str, mut client: impl FnMut() -> Command) -> [Captured; 2] {
    let mut s = Process::spawn(&mut server).expect("spawn server");
    s.wait_for_line(|l| l.contains(listening), TIMEOUT)
        .expect("server listening");
    let mut c;
    for tries in 1.. {
        c = Process::spawn(&mut client())
            .expect("spawn client")
            .wait(TIMEOUT)
            .expect("client exits");
        let refused = c.stdout.contains("RDMA_CM_EVENT_REJECTED, error: 8")
            || c.stderr.contains("REJ reason 8");
        if c.status.success() || !refused || tries == 20 {
            let s = s.wait(TIMEOUT).expect("server exits");
            assert!(
                s.status.success() && c.status.success(),
                "server {}\nclient {}",
                show(&s),
                show(&c)
            );
            return [s, c];
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    unreachable!()
}

/// Checks both sides printed every ping.
fn pings(s: &Captured, c: &Captured) {
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
        show(c)
    );
    assert_eq!(
        lines(&s.stdout, "server ping data: "),
        want("server ping data: "),
        "{}",
        show(s)
    );
}

#[test]
fn preloaded_rping_against_rocev2_rping() {
    if !need_root("preloaded_rping_against_rocev2_rping") {
        return;
    }
    let tb = pair();
    let (h1, count) = (h1(&tb), COUNT.to_string());
    let server = ["-s", "-v", "-a", &h1, "-C", &count];
    let client = ["-c", "-v", "-V", "-a", &h1, "-C", &count];
    // Debian's server, our client (`-d`: ours says `rdma_listen` when it listens); then ours
    // as server and Debian's as client.
    let [s, c] = run(
        debian(&tb, "h1", "rping", &server),
        "rocev2_rdmacm: listening on",
        || ours(&tb, "h0", RPING, &client),
    );
    pings(&s, &c);
    let mut ours_server = ours(&tb, "h1", RPING, &server);
    ours_server.arg("-d");
    let [s, c] = run(ours_server, "rdma_listen", || {
        debian(&tb, "h0", "rping", &client)
    });
    pings(&s, &c);
}

#[test]
fn preloaded_ucmatose_against_rocev2_ucmatose() {
    if !need_root("preloaded_ucmatose_against_rocev2_ucmatose") {
        return;
    }
    let tb = pair();
    let h1 = h1(&tb);
    let server = ["-b", &h1, "-c", "2", "-C", "10"];
    let client = ["-s", &h1, "-c", "2", "-C", "10"];
    let both = [
        run(
            debian(&tb, "h1", "ucmatose", &server),
            "rocev2_rdmacm: listening on",
            || ours(&tb, "h0", UCMATOSE, &client),
        ),
        run(
            ours(&tb, "h1", UCMATOSE, &server),
            "starting server",
            || debian(&tb, "h0", "ucmatose", &client),
        ),
    ];
    for out in both.iter().flatten() {
        assert!(
            out.stdout.contains("data transfers complete"),
            "{}",
            show(out)
        );
        assert!(out.stdout.contains("return status 0"), "{}", show(out));
    }
}
