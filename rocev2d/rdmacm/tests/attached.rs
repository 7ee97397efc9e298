//! Preloaded Debian `rping` attached to `rocev2d` (`ROCEV2_DATAPATH=attach`, one daemon per
//! namespace of a pair, UDP datapath): the daemons' CMs make the connection, and 20 pings come
//! back validated and printed as rping prints them.
//!
//! The daemon binary must be built beside the tests (`cargo build -p rocev2d`). Needs root
//! (namespaces); skipped loudly otherwise.

mod common;
use common::*;
use rocev2_testbed::{Process, need_root};
use std::path::PathBuf;

/// The daemon binary, beside this test's binary in the target directory.
fn daemon_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile = exe.parent().and_then(|d| d.parent()).expect("profile dir");
    let p = profile.join("rocev2d");
    assert!(
        p.is_file(),
        "{} not found: build it with `cargo build -p rocev2d`",
        p.display()
    );
    p
}

#[test]
fn rping_attached_to_rocev2d() {
    if !need_root("rping_attached_to_rocev2d") {
        return;
    }
    let tb = pair();
    let daemon = |host: &str| {
        let iface = device(&tb, host).trim_start_matches("rocev2_").to_string();
        let mut cmd = tb.command(host, daemon_bin()).expect("command");
        cmd.args(["run", "--iface", &iface, "--datapath", "udp"]);
        let mut d = Process::spawn(&mut cmd).expect("spawn daemon");
        d.wait_for_line(|l| l.contains("serving"), TIMEOUT)
            .expect("daemon serving");
        d
    };
    let mut daemons = [daemon("h0"), daemon("h1")];
    let mut s = preloaded(&tb, "h1", "attach", "rping");
    s.args(["-s", "-v", "-a", &ip(&tb, "h1"), "-C", "20"]);
    let mut c = preloaded(&tb, "h0", "attach", "rping");
    c.args(["-c", "-v", "-V", "-a", &ip(&tb, "h1"), "-C", "20"]);
    let (s, c) = run_pair(s, c);
    for d in &mut daemons {
        d.kill();
    }
    for out in [&s, &c] {
        assert!(out.stderr.contains("attached to rocev2d"), "{}", show(out));
    }
    assert_eq!(
        lines_with(&c.stdout, "ping data: "),
        ping_lines("ping data: ", 20),
        "{}",
        show(&c)
    );
    assert_eq!(
        lines_with(&s.stdout, "server ping data: "),
        ping_lines("server ping data: ", 20),
        "{}",
        show(&s)
    );
}
