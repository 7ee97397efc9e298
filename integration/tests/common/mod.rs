//! Helpers shared by the netns scenarios: the root check that skips loudly, the probe binary,
//! topology files, echo servers on every host and the all-pairs UDP check.
// Each scenario file compiles this module separately and uses only part of it.
#![allow(dead_code)]

use rocev2_testbed::probe::PingReport;
use rocev2_testbed::{NodePlan, Process, Testbed, TopologyFile};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// This crate's binary: the CLI, whose `probe` subcommands run inside the hosts.
pub const BIN: &str = env!("CARGO_BIN_EXE_rocev2-testbed");
/// Generous bound for one probe or tool run; a healthy one takes milliseconds.
pub const TIMEOUT: Duration = Duration::from_secs(20);
/// RoCEv2's UDP port, and another one: the testbed must not care which.
pub const PORTS: [u16; 2] = [4791, 5001];

pub use rocev2_testbed::need_root;

pub mod experiment;

/// Read and check `deploy/testbeds/FILE`.
pub fn topology_file(file: &str) -> TopologyFile {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/testbeds")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    TopologyFile::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Start a UDP echo server on `ports` in every host and wait until each is bound.
pub fn echo_on_every_host(tb: &Testbed, ports: &[u16]) -> Vec<Process> {
    tb.hosts().map(|h| echo_on(tb, &h.name, ports)).collect()
}

/// Start a UDP echo server on `ports` in `host` and wait until it is bound.
pub fn echo_on(tb: &Testbed, host: &str, ports: &[u16]) -> Process {
    let mut cmd = tb.command(host, BIN).unwrap();
    cmd.args(["probe", "echo"]);
    for p in ports {
        cmd.args(["--port", &p.to_string()]);
    }
    let mut p = Process::spawn(&mut cmd).unwrap();
    p.wait_for_line(|l| l == "ready", TIMEOUT).unwrap();
    p
}

/// Both addresses of `host` with `port`.
pub fn targets(host: &NodePlan, port: u16) -> [SocketAddr; 2] {
    [
        SocketAddr::new(IpAddr::V4(host.ipv4().unwrap()), port),
        SocketAddr::new(IpAddr::V6(host.ipv6().unwrap()), port),
    ]
}

/// Run `probe ping` in `host` with extra arguments; return the report, whatever the exit code.
pub fn ping_from(tb: &Testbed, host: &str, args: &[String]) -> PingReport {
    let mut cmd = tb.command(host, BIN).unwrap();
    cmd.args(["probe", "ping"]).args(args);
    Process::spawn(&mut cmd)
        .unwrap()
        .wait(TIMEOUT)
        .unwrap()
        .json()
        .unwrap()
}

/// From every host, ping every other host on both addresses and every port in `ports`, two
/// datagrams each; all senders run at once. Panics naming every lossy pair. Returns the number
/// of (source, target address, port) combinations checked.
pub fn all_pairs_reachable(tb: &Testbed, ports: &[u16]) -> usize {
    let hosts: Vec<&NodePlan> = tb.hosts().collect();
    let mut runs = Vec::new();
    for src in &hosts {
        let mut cmd = tb.command(&src.name, BIN).unwrap();
        cmd.args(["probe", "ping", "--count", "2", "--timeout-ms", "1000"]);
        let mut expected = 0;
        for dst in hosts.iter().filter(|d| d.name != src.name) {
            for &port in ports {
                for t in targets(dst, port) {
                    cmd.args(["--target", &t.to_string()]);
                    expected += 1;
                }
            }
        }
        runs.push((
            src.name.clone(),
            expected,
            Process::spawn(&mut cmd).unwrap(),
        ));
    }
    let mut checked = 0;
    let mut lossy = Vec::new();
    for (src, expected, p) in runs {
        let report: PingReport = p.wait(TIMEOUT).unwrap().json().unwrap();
        assert_eq!(report.results.len(), expected, "{src}: {report:?}");
        for r in report.lossy() {
            lossy.push(format!(
                "{src} -> {} ({}/{} echoes)",
                r.target, r.received, r.sent
            ));
        }
        checked += expected;
    }
    assert!(lossy.is_empty(), "unreachable:\n{}", lossy.join("\n"));
    checked
}

/// Namespaces that exist now (`ip netns list`).
pub fn netns_list() -> Vec<String> {
    let out = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// Interface names in the caller's (root) namespace.
pub fn root_links() -> Vec<String> {
    std::fs::read_dir("/sys/class/net")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Whether `pid` is a live (not zombie) process.
pub fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the field after the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}
