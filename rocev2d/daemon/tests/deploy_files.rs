//! The deployment files stay valid: the systemd unit passes `systemd-analyze verify` (pointed
//! at the freshly built binary), and the example configuration and the Kubernetes ConfigMap's
//! configuration load as `rocev2d run --config` files.

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_rocev2d");

fn repo(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

#[test]
fn deploy_systemd_unit_verifies() {
    rocev2_testbed::tools::require("systemd-analyze".as_ref()).expect("systemd-analyze");
    let unit = std::fs::read_to_string(repo("deploy/systemd/rocev2d@.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/local/bin/rocev2d run --iface %i"));
    let dir = std::env::temp_dir().join(format!("rocev2d-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // An instance of the template, its binary where this build put it.
    let instance = dir.join("rocev2d@lo.service");
    std::fs::write(&instance, unit.replace("/usr/local/bin/rocev2d", BIN)).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&instance)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // verify exits 0 on a directive it ignores; its warning names our file.
    assert!(
        out.status.success() && !stderr.contains("rocev2d@lo.service"),
        "{}\n{stderr}",
        out.status
    );
}

#[test]
fn deploy_example_configs_load() {
    let c = rocev2d::config::Config::load(&repo("deploy/etc/rocev2d/example.toml")).unwrap();
    assert_eq!(c.metrics, Some("127.0.0.1:9464".parse().unwrap()));
    // The DaemonSet's ConfigMap carries a configuration as a YAML block scalar.
    let yaml = std::fs::read_to_string(repo("deploy/kubernetes/rocev2d-daemonset.yaml")).unwrap();
    let block: String = yaml
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("rocev2d.toml: |"))
        .skip(1)
        .take_while(|l| l.starts_with("    "))
        .map(|l| format!("{}\n", &l[4..]))
        .collect();
    assert!(block.contains("[cc]"), "{block}");
    let c = rocev2d::config::Config::parse(&block).unwrap();
    assert_eq!(c.metrics, Some("0.0.0.0:9464".parse().unwrap()));
}
