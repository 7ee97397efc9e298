//! Network-namespace testbeds for rocev2: declare a topology, bring it up, run programs on its
//! hosts, read its counters, tear it down.
//!
//! Every node is a network namespace and every link a veth pair created directly inside the
//! two namespaces, so nothing ever appears in the caller's namespace and deleting the
//! namespaces removes everything (links, addresses, routes, qdiscs). Switches are Linux
//! bridges or routers (forwarding on, static routes, ECMP hashed on the L4 ports). Links can be
//! shaped to a rate with a bounded buffer (tc htb or tbf). See [`topology`] for the shapes and
//! node names, [`plan`] for names, addresses and routes.
//!
//! ```no_run
//! use rocev2_testbed::{Process, Testbed, exec, topology::{LinkParams, Topology}};
//! use std::time::Duration;
//! let tb = Testbed::up_topology(&Topology::Pair { link: LinkParams::new().mtu(4200) })?;
//! let h1 = tb.node("h1")?.ipv4().expect("hosts have addresses"); // 10.0.0.2
//! // A server in h1, ready once it prints its listening line…
//! let mut server = Process::spawn(tb.command("h1", "my-server")?.args(["--port", "4791"]))?;
//! server.wait_for_line(|l| l.contains("listening"), Duration::from_secs(5))?;
//! // …a client in h0, and the server's stats as JSON.
//! exec::run(tb.command("h0", "my-client")?.arg(h1.to_string()), Duration::from_secs(30))?;
//! let stats: serde_json::Value =
//!     rocev2_testbed::collect_json(tb.command("h1", "my-server")?.arg("--stats-json"), Duration::from_secs(5))?;
//! println!("{stats}");
//! tb.down()?; // or just drop it, also when a test panics
//! # Ok::<(), rocev2_testbed::Error>(())
//! ```
//!
//! Why shell out to `ip` and `tc` rather than speak netlink: the crate forbids `unsafe` (so no
//! `setns`), and the commands it runs are exactly what a researcher would type to rebuild the
//! testbed by hand (`RUST_LOG=debug` prints them).
//!
//! Deviations: none known. Caveats: traffic that bypasses the qdisc layer
//! (AF_XDP transmit, `XDP_REDIRECT`/`XDP_TX` in a switch program) is not shaped by tc; the
//! sweeper trusts a live pid (a reused pid keeps a crashed run's leftovers until it exits).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::todo,
        clippy::unimplemented
    )
)]

pub mod exec;
pub mod experiment;
pub mod link;
pub mod netns;
pub mod plan;
pub mod ports;
pub mod probe;
pub mod sweep;
pub mod tools;
pub mod topology;

pub use exec::{Captured, Process, collect_json};
pub use link::IfCounters;
pub use netns::{
    DEFAULT_STATE_DIR, Testbed, TestbedState, VethEnd, need_root, running_as_root, veth_pair,
};
pub use plan::{NodePlan, Owner, Plan, PortPlan};
pub use ports::{PortSelection, SwitchPort};
pub use topology::{LinkParams, Network, Role, Shaper, SwitchKind, Topology, TopologyFile};

use std::path::PathBuf;
use std::time::Duration;

/// What can go wrong while building, using or removing a testbed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The topology is invalid (names the TOML key where there is one).
    #[error(transparent)]
    Topology(#[from] topology::Error),
    /// A topology file that is not valid TOML or does not match the schema.
    #[error("topology file: {0}")]
    Toml(String),
    /// A command could not be started (missing binary, say).
    #[error("cannot run `{cmd}`: {source}")]
    Spawn {
        /// The command line.
        cmd: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A program a command runs is not installed.
    #[error("`{program}` is not installed: {install}")]
    MissingTool {
        /// The program.
        program: String,
        /// How to install it.
        install: String,
    },
    /// A command exited unsuccessfully.
    #[error("`{cmd}` failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        cmd: String,
        /// Its exit status.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A command did not finish, or did not print the awaited line, in time.
    #[error("`{cmd}`: {what} not seen within {after:?}")]
    Timeout {
        /// The command line.
        cmd: String,
        /// What was awaited.
        what: String,
        /// The time limit.
        after: Duration,
    },
    /// A command exited before printing the awaited line.
    #[error("`{cmd}` exited ({status}) before printing the awaited line; stderr: {stderr}")]
    Exited {
        /// The command line.
        cmd: String,
        /// Its exit status.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A command's output is not the JSON expected.
    #[error("`{cmd}` printed no valid JSON ({source}); stdout: {stdout}")]
    Json {
        /// The command line.
        cmd: String,
        /// What was wrong.
        #[source]
        source: serde_json::Error,
        /// What it printed.
        stdout: String,
    },
    /// A command's output could not be read as expected.
    #[error("`{cmd}` printed unexpected output: {output}")]
    Parse {
        /// The command line.
        cmd: String,
        /// What it printed.
        output: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A state file that is not valid JSON.
    #[error("{path}: invalid state file: {source}")]
    State {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// A named testbed that is already up (its state file or a namespace exists).
    #[error("testbed {0:?} is already up (rocev2-testbed down {0} removes it)")]
    Exists(String),
    /// No state file for this named testbed.
    #[error("no testbed named {0:?} (rocev2-testbed list shows the testbeds that are up)")]
    NotFound(String),
    /// A plot could not be drawn or written.
    #[error("plot {path}: {why}")]
    Plot {
        /// The file (or `(font)`).
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// Creating namespaces needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN).
    #[error("network namespaces need root")]
    NotRoot,
}
