//! Scenario: the CLI as a researcher uses it. `up` a topology file and the testbed outlives
//! the command; `list` shows it; `exec` runs an echo server in one host and a ping in the
//! other, and passes exit codes on; a second `up` of the same name is refused; `down` removes
//! namespaces, processes and the state file. A bad file is rejected naming its key.

mod common;

use common::{BIN, TIMEOUT, need_root, netns_list};
use rocev2_testbed::Process;
use rocev2_testbed::probe::PingReport;
use std::path::PathBuf;
use std::process::{Command, Output};

fn cli(state_dir: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--state-dir")
        .arg(state_dir)
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn cli_up_exec_down() {
    if !need_root("cli_up_exec_down") {
        return;
    }
    let me = std::process::id();
    let name = format!("c{me:x}");
    let state_dir = std::env::temp_dir().join(format!("rv2-cli-{me}"));
    let dir = state_dir.to_str().unwrap();
    let pair = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/testbeds/pair.toml");
    let pair = pair.to_str().unwrap();

    let out = cli(dir, &["up", pair, "--name", &name]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(&format!("rv2-{name}-h1")),
        "{}",
        text(&out.stdout)
    );
    // The command has exited; the testbed is still up.
    let live = netns_list();
    assert!(live.contains(&format!("rv2-{name}-h0")) && live.contains(&format!("rv2-{name}-h1")));
    assert!(state_dir.join(format!("{name}.json")).exists());

    let out = cli(dir, &["list"]);
    assert!(
        text(&out.stdout).contains(&format!("testbed {name} (up)")),
        "{}",
        text(&out.stdout)
    );

    let out = cli(dir, &["up", pair, "--name", &name]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("already up"),
        "{}",
        text(&out.stderr)
    );

    let mut echo = Process::spawn(Command::new(BIN).args([
        "--state-dir",
        dir,
        "exec",
        &name,
        "h1",
        "--",
        BIN,
        "probe",
        "echo",
        "--port",
        "4791",
    ]))
    .unwrap();
    echo.wait_for_line(|l| l == "ready", TIMEOUT).unwrap();
    let out = cli(
        dir,
        &[
            "exec",
            &name,
            "h0",
            "--",
            BIN,
            "probe",
            "ping",
            "--target",
            "10.0.0.2:4791",
            "--target",
            "[fd00::2]:4791",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: PingReport = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report.results.len(), 2);
    assert_eq!(report.lossy().count(), 0, "{report:?}");

    let out = cli(dir, &["exec", &name, "h0", "--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    let out = cli(dir, &["exec", &name, "nosuch", "--", "true"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("nosuch"),
        "{}",
        text(&out.stderr)
    );

    let out = cli(dir, &["down", &name]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let live = netns_list();
    assert!(
        !live.iter().any(|n| n.starts_with(&format!("rv2-{name}-"))),
        "{live:?}"
    );
    assert!(!state_dir.join(format!("{name}.json")).exists());
    // `down` killed the echo server that was running inside.
    let echo_out = echo.wait(TIMEOUT).unwrap();
    assert!(!echo_out.status.success());
    let out = cli(dir, &["down", &name]);
    assert!(
        text(&out.stderr).contains("no testbed named"),
        "{}",
        text(&out.stderr)
    );
    let _ = std::fs::remove_dir(&state_dir);
}

#[test]
fn cli_rejects_bad_file_naming_the_key() {
    // Parsing needs no root: the file is rejected before anything is created.
    let me = std::process::id();
    let file = std::env::temp_dir().join(format!("rv2-bad-{me}.toml"));
    std::fs::write(
        &file,
        "name = \"bad\"\n[topology]\nkind = \"pair\"\n[topology.link]\nmtu = 70000\n",
    )
    .unwrap();
    let out = cli("/nonexistent", &["up", file.to_str().unwrap()]);
    let _ = std::fs::remove_file(&file);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("topology.link.mtu") && err.contains("1280..=9216"),
        "{err}"
    );
}
