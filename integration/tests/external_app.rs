//! An application crate outside the workspace (`examples/external-app`, its own workspace,
//! depending on `rocev2` by path with the default features off) builds on stable with no
//! bpf-linker on `PATH`, then moves SEND, WRITE, READ and atomics between the two hosts of a
//! pair testbed over the UDP datapath, its QPs connected in one call (`rocev2::connect`).
//!
//! The build uses the toolchain running this test (its `cargo`, and the `rustc` beside it),
//! with `PATH` stripped of every directory holding a `bpf-linker`, and a target directory of
//! its own beside this workspace's (`target/external-app`). Needs root for the testbed; the
//! build alone would not, but a build without a run proves too little to pass on its own.

use rocev2_testbed::exec::{Proto, run, wait_for_port};
use rocev2_testbed::topology::{LinkParams, Topology};
use rocev2_testbed::{Process, Testbed, need_root};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const PORT: u16 = 18620;

/// The directories of `path` without those holding a `bpf-linker`, after `first`.
fn path_without_bpf_linker(first: &Path, path: &str) -> String {
    let mut dirs = vec![first.to_path_buf()];
    dirs.extend(std::env::split_paths(path).filter(|d| !d.join("bpf-linker").exists()));
    std::env::join_paths(dirs)
        .expect("PATH entries")
        .into_string()
        .expect("UTF-8 PATH")
}

/// Builds the application as a user on stable would; returns the binary.
fn build(root: &Path) -> PathBuf {
    let cargo = PathBuf::from(env!("CARGO"));
    let bin_dir = cargo.parent().expect("cargo's directory");
    let rustc = bin_dir.join("rustc");
    let version = run(Command::new(&rustc).arg("-V"), Duration::from_secs(30)).expect("rustc -V");
    assert!(
        !version.stdout.contains("nightly"),
        "the toolchain running this test is nightly ({}): run it with stable",
        version.stdout.trim()
    );
    let path = path_without_bpf_linker(bin_dir, &std::env::var("PATH").unwrap_or_default());
    assert!(
        std::env::split_paths(&path).all(|d| !d.join("bpf-linker").exists()),
        "bpf-linker still on PATH {path}"
    );
    // The test binary is TARGET/debug/deps/external_app-HASH.
    let exe = std::env::current_exe().expect("test binary");
    let target = exe.ancestors().nth(3).expect("target directory");
    let app_target = target.join("external-app");
    let manifest = root.join("examples/external-app/Cargo.toml");
    let mut cmd = Command::new(&cargo);
    cmd.arg("build")
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&app_target)
        .env("PATH", &path)
        .env("RUSTC", &rustc)
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO_TARGET_DIR");
    let out = run(&mut cmd, Duration::from_secs(1500)).expect("the application builds");
    assert!(
        !out.stderr.contains("rocev2-ebpf"),
        "the build touched the eBPF crates:\n{}",
        out.stderr
    );
    app_target.join("debug/rocev2-external-app")
}

#[test]
fn external_app_builds_on_stable_and_runs_between_namespaces() {
    if !need_root("external_app_builds_on_stable_and_runs_between_namespaces") {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo");
    let bin = build(root);
    let tb = Testbed::up_topology(&Topology::Pair {
        link: LinkParams::new().mtu(4200),
    })
    .expect("pair testbed");
    let iface = |host: &str, peer: &str| {
        tb.node(host)
            .expect("host")
            .port_toward(peer)
            .expect("port")
            .ifname
            .clone()
    };
    let mut cmd = tb.command("h1", &bin).expect("command");
    cmd.args(["server", &iface("h1", "h0"), &PORT.to_string()]);
    let server = Process::spawn(&mut cmd).expect("spawn server");
    let h1 = tb.node("h1").expect("h1");
    wait_for_port(&h1.netns, Proto::Tcp, PORT, Duration::from_secs(30)).expect("listening");
    let to = format!("{}:{PORT}", h1.ipv4().expect("h1's IPv4"));
    let mut cmd = tb.command("h0", &bin).expect("command");
    cmd.args(["client", &iface("h0", "h1"), &to]);
    let limit = Duration::from_secs(60);
    let client = Process::spawn(&mut cmd)
        .expect("spawn client")
        .wait(limit)
        .expect("client exits");
    let server = server.wait(limit).expect("server exits");
    for c in [&server, &client] {
        assert!(
            c.status.success() && c.stdout.contains("PASS"),
            "{} ({}):\n{}\n{}",
            c.cmd,
            c.status,
            c.stdout,
            c.stderr
        );
    }
}
