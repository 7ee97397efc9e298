//! `tests/programs/rdmacm_checks.c`, built here with `cc` against librdmacm's header and run
//! with both libraries preloaded in one namespace of a pair testbed: NULL, foreign and
//! destroyed channels, IDs and events, private data over the limits, unsupported port spaces
//! and options, answers without a request each fail with their errno (the program names any
//! that does not), a resolved ID carries its device's PD (a UD QP made in it, as UCX makes
//! one), an RDMA_PS_UDP ID's QP is UD in RTS with rdma_cm's Q_Key, and nothing crashes.
//!
//! Needs root (namespaces) and `cc` with librdmacm-dev (deploy/prereqs.sh installs them).

mod common;
use common::*;
use rocev2_testbed::{Process, need_root};
use std::process::Command;

#[test]
fn hostile_calls_fail_with_their_errno() {
    if !need_root("hostile_calls_fail_with_their_errno") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("rocev2-rdmacm-checks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("rdmacm_checks");
    let src = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/programs/rdmacm_checks.c"
    );
    let out = Command::new("cc")
        .args(["-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(src)
        .args(["-lrdmacm", "-libverbs"])
        .output()
        .expect("cc runs (deploy/prereqs.sh installs gcc)");
    assert!(
        out.status.success(),
        "cc failed (librdmacm-dev installed?):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tb = pair();
    let mut cmd = tb.command("h0", "env").expect("command");
    cmd.arg(preload())
        .arg("ROCEV2_DATAPATH=udp")
        .arg(&exe)
        .args([ip(&tb, "h0"), ip(&tb, "h1")]);
    let c = Process::spawn(&mut cmd)
        .expect("spawn")
        .wait(TIMEOUT)
        .expect("exits");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(c.status.success(), "{}", show(&c));
    assert_eq!(c.stdout.trim(), "all checks passed", "{}", show(&c));
}
