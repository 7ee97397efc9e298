//! Scenario: teardown leaves nothing behind, whether the testbed is taken down explicitly,
//! dropped, or dropped while a test panics: no namespace, no process left inside one, no
//! link or qdisc in the caller's namespace.

mod common;

use common::{need_root, netns_list, root_links, running};
use rocev2_testbed::{LinkParams, SwitchKind, Testbed, Topology};
use std::panic;
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// What a testbed consisted of, recorded while it was up.
#[derive(Debug, Default, Clone)]
struct Footprint {
    netns: Vec<String>,
    ifnames: Vec<String>,
    pid: u32,
}

/// A bridged and a routed switch with shaped ports, so there are bridges and qdiscs to remove,
/// and a process left running in a host (not a `Process`, so nothing but the teardown kills it).
fn build(switch: SwitchKind) -> (Testbed, Footprint) {
    let tb = Testbed::up_topology(&Topology::Dumbbell {
        left: 1,
        right: 1,
        switch,
        link: LinkParams::new().rate(100_000_000, 32_768),
        bottleneck: None,
    })
    .unwrap();
    let mut fp = Footprint::default();
    for node in &tb.plan().nodes {
        fp.netns.push(node.netns.clone());
        fp.ifnames
            .extend(node.ports.iter().map(|p| p.ifname.clone()));
        fp.ifnames.extend(node.bridge.clone());
        let qdiscs = Command::new("tc")
            .args(["-n", &node.netns, "qdisc", "show"])
            .output()
            .unwrap();
        let qdiscs = String::from_utf8_lossy(&qdiscs.stdout);
        assert!(qdiscs.contains("htb"), "{}: {qdiscs}", node.netns);
    }
    let child = tb
        .command("a0", "sleep")
        .unwrap()
        .arg("60")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    fp.pid = child.id();
    // Dropping a `Child` neither kills nor waits; the zombie left after the kill counts as gone.
    drop(child);
    let live = netns_list();
    assert!(
        fp.netns.iter().all(|n| live.contains(n)),
        "{fp:?} vs {live:?}"
    );
    assert!(running(fp.pid));
    (tb, fp)
}

fn assert_gone(fp: &Footprint) {
    let live = netns_list();
    let left: Vec<_> = fp.netns.iter().filter(|n| live.contains(n)).collect();
    assert!(left.is_empty(), "namespaces left: {left:?}");
    assert!(!running(fp.pid), "process {} survived the teardown", fp.pid);
    let links = root_links();
    let tag = fp
        .ifnames
        .first()
        .map(|i| &i[..i.len() - 2])
        .unwrap_or("rv2");
    assert!(
        !links
            .iter()
            .any(|l| fp.ifnames.contains(l) || l.starts_with(tag)),
        "{links:?}"
    );
    let qdiscs = Command::new("tc").args(["qdisc", "show"]).output().unwrap();
    let qdiscs = String::from_utf8_lossy(&qdiscs.stdout);
    assert!(
        !fp.ifnames
            .iter()
            .any(|i| qdiscs.contains(&format!("dev {i} "))),
        "{qdiscs}"
    );
}

#[test]
fn down_removes_everything() {
    if !need_root("down_removes_everything") {
        return;
    }
    let (tb, fp) = build(SwitchKind::Bridge);
    tb.down().unwrap();
    assert_gone(&fp);
}

#[test]
fn drop_removes_everything() {
    if !need_root("drop_removes_everything") {
        return;
    }
    let (tb, fp) = build(SwitchKind::Router);
    drop(tb);
    assert_gone(&fp);
}

#[test]
fn panic_removes_everything() {
    if !need_root("panic_removes_everything") {
        return;
    }
    let seen = Mutex::new(Footprint::default());
    let result = panic::catch_unwind(|| {
        let (_tb, fp) = build(SwitchKind::Bridge);
        *seen.lock().unwrap() = fp;
        panic!("deliberate panic with the testbed up");
    });
    let payload = result.expect_err("the closure panics");
    assert_eq!(
        payload.downcast_ref::<&str>(),
        Some(&"deliberate panic with the testbed up")
    );
    let fp = seen.into_inner().unwrap_or_else(|e| e.into_inner());
    assert_eq!(fp.netns.len(), 4, "{fp:?}");
    assert_gone(&fp);
}
