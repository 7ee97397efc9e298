//! Scenario: the sweeper removes what crashed runs left (namespaces of dead processes, named
//! namespaces without a state file, state files without namespaces) and nothing else: not a
//! live process's testbed, not a named testbed that is up, not a namespace that is not ours.

mod common;

use common::{need_root, netns_list, running};
use rocev2_testbed::sweep::sweep;
use rocev2_testbed::{LinkParams, Testbed, Topology};
use std::path::Path;
use std::process::{Command, Stdio};

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A pid that certainly belonged to a process and now belongs to none.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    pid
}

#[test]
fn sweep_removes_only_leftovers() {
    if !need_root("sweep_removes_only_leftovers") {
        return;
    }
    let me = std::process::id();
    let state_dir = Path::new(rocev2_testbed::DEFAULT_STATE_DIR);
    // Testbed names unique per run: a letter and the pid in hex (at most 7 characters).
    let named = format!("s{me:x}");
    let orphan_name = format!("o{me:x}");
    let stale_name = format!("t{me:x}");
    let mut cleanup = Cleanup::default();

    // A crashed run's testbed: its pid is dead; a process still runs inside.
    let crashed = format!("rv2-{}-0-h0", dead_pid());
    cleanup.netns.push(crashed.clone());
    ip(&["netns", "add", &crashed]);
    ip(&[
        "-n",
        &crashed,
        "link",
        "add",
        "rv2deadp0",
        "type",
        "veth",
        "peer",
        "name",
        "rv2deadp1",
    ]);
    let mut inside = Command::new("ip")
        .args(["netns", "exec", &crashed, "sleep", "60"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    // A live process's testbed (ours), and a real one to be sure.
    let alive = format!("rv2-{me}-9999-h0");
    cleanup.netns.push(alive.clone());
    ip(&["netns", "add", &alive]);
    let tb = Testbed::up_topology(&Topology::Pair {
        link: LinkParams::default(),
    })
    .unwrap();
    // A named namespace whose testbed has no state file: a `down` or `up` cut short.
    let orphan = format!("rv2-{orphan_name}-h0");
    cleanup.netns.push(orphan.clone());
    ip(&["netns", "add", &orphan]);
    // A named testbed that is up (state file present), and one whose namespaces vanished.
    let up = Testbed::up_named(
        &Topology::Pair {
            link: LinkParams::default(),
        }
        .network()
        .unwrap(),
        &named,
        state_dir,
    )
    .unwrap();
    cleanup.named.push(named.clone());
    cleanup.named.push(stale_name.clone());
    let stale = Testbed::up_named(
        &Topology::Pair {
            link: LinkParams::default(),
        }
        .network()
        .unwrap(),
        &stale_name,
        state_dir,
    )
    .unwrap();
    for node in &stale.plan().nodes {
        ip(&["netns", "delete", &node.netns]);
    }
    drop(stale);
    // Not ours at all.
    let foreign = format!("rv2x-{me}-0-h0");
    cleanup.netns.push(foreign.clone());
    ip(&["netns", "add", &foreign]);

    let report = sweep(state_dir).unwrap();
    let live = netns_list();

    assert!(report.removed_netns.contains(&crashed), "{report:?}");
    assert!(report.removed_netns.contains(&orphan), "{report:?}");
    assert!(
        !live.contains(&crashed) && !live.contains(&orphan),
        "{live:?}"
    );
    inside.wait().unwrap();
    assert!(!running(inside.id()));

    assert!(report.kept_netns.contains(&alive), "{report:?}");
    for node in tb.plan().nodes.iter().chain(&up.plan().nodes) {
        assert!(live.contains(&node.netns), "{} was swept", node.netns);
    }
    assert!(
        live.contains(&foreign),
        "a namespace that is not ours was swept"
    );
    let stale_file = state_dir.join(format!("{stale_name}.json"));
    assert!(
        report.removed_state_files.contains(&stale_file),
        "{report:?}"
    );
    assert!(!stale_file.exists());
    assert!(state_dir.join(format!("{named}.json")).exists());
    assert!(!state_dir.join(format!("{orphan_name}.json")).exists());

    // What the sweeper rightly kept goes now (and `cleanup` on any failure above).
    up.down().unwrap();
    tb.down().unwrap();
}

/// Removes this test's own namespaces and named testbeds, also when an assertion fails.
#[derive(Default)]
struct Cleanup {
    netns: Vec<String>,
    named: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let state_dir = Path::new(rocev2_testbed::DEFAULT_STATE_DIR);
        for name in &self.named {
            if let Ok(tb) = Testbed::open(name, state_dir) {
                let _ = tb.down();
            }
        }
        for ns in &self.netns {
            let _ = Command::new("ip")
                .args(["netns", "delete", ns])
                .stderr(Stdio::null())
                .status();
        }
    }
}
