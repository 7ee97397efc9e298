//! The sweeper: removes what a crashed run left behind, and only that.
//!
//! A testbed's Drop runs on panic, but not when the process is killed (SIGKILL, a CI timeout,
//! an abort). Its namespaces then stay, and with them their veths and qdiscs. The sweeper looks
//! only at namespaces whose names parse as ours ([`Owner::parse_netns`]):
//!
//! - `rv2-PID-COUNTER-NODE` is removed when process PID no longer exists. A live PID keeps it:
//!   it is a running test's, or (rarely) the pid was reused, and then it waits for a later
//!   sweep.
//! - `rv2-NAME-NODE` (a named testbed) is removed when no state file `NAME.json` records it: a
//!   named testbed that is up is never swept, `rocev2-testbed down NAME` removes it.
//!
//! State files whose namespaces are all gone are removed too. Links never live outside the
//! namespaces (they are created inside them), so removing the namespaces removes everything.
//!
//! Deviations: none.

use crate::Error;
use crate::netns::{NETNS_DIR, TestbedState, delete_netns};
use crate::plan::Owner;
use std::fs;
use std::path::{Path, PathBuf};

/// What a sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Leftover namespaces removed.
    pub removed_netns: Vec<String>,
    /// Our namespaces kept: their owner is alive, or their named testbed is up.
    pub kept_netns: Vec<String>,
    /// Stale state files removed.
    pub removed_state_files: Vec<PathBuf>,
}

/// Whether process `pid` exists (a zombie counts: its parent has not reaped it yet).
pub fn pid_alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// Remove leftovers of crashed runs; see the module doc for what counts as one.
///
/// # Errors
/// The first failing removal; the sweep goes on with the rest.
pub fn sweep(state_dir: &Path) -> Result<SweepReport, Error> {
    let mut report = SweepReport::default();
    let mut first = None;
    let mut names: Vec<String> = match fs::read_dir(NETNS_DIR) {
        Ok(entries) => entries
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    for netns in names {
        let Some((owner, _node)) = Owner::parse_netns(&netns) else {
            continue;
        };
        let leftover = match &owner {
            Owner::Process { pid, .. } => !pid_alive(*pid),
            Owner::Named(name) => !state_dir.join(format!("{name}.json")).exists(),
        };
        if !leftover {
            report.kept_netns.push(netns);
            continue;
        }
        tracing::info!(%netns, "sweeping leftover namespace");
        match delete_netns(&netns) {
            Ok(()) => report.removed_netns.push(netns),
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    for state in TestbedState::list(state_dir)? {
        if state.live_netns().is_empty() {
            let path = state_dir.join(format!("{}.json", state.name));
            match fs::remove_file(&path) {
                Ok(()) => report.removed_state_files.push(path),
                Err(source) => {
                    first.get_or_insert(Error::Io { path, source });
                }
            }
        }
    }
    first.map_or(Ok(report), Err)
}
