//! [`Testbed`]: bring a [`Plan`] up as namespaces, veth pairs, addresses, routes and qdiscs,
//! and take it down again, also when the test that built it panics.
//!
//! Bring-up order, each step batched per namespace (`ip -n NETNS -batch -`) to keep the number
//! of processes small:
//!
//! 1. one namespace per node, and its sysctls (forwarding on routers; multipath hash policy 1
//!    so the UDP source port chooses among ECMP paths; rp_filter off, since ECMP return paths
//!    are asymmetric; no IPv6 DAD, so addresses are usable at once);
//! 2. every veth pair, created with each end directly in its namespace;
//! 3. per namespace: loopback, bridge, ports up, addresses (`nodad`);
//! 4. per namespace: egress qdiscs;
//! 5. per namespace: routes, once every interface they go through is up;
//! 6. wait until every port is operationally up and every bridge port forwards. The kernel
//!    applies a veth's carrier change through linkwatch, which batches events it deems not
//!    urgent for up to a second (a veth whose ifindex equals its peer's, as index 2 in two fresh
//!    namespaces often does, is such a case); until then a bridge keeps the port disabled and
//!    the first ARP across it is lost, costing a 1 s retransmit. Measured: up to ~1 s.
//!
//! Teardown kills every process still in the namespaces (a live process would keep a deleted
//! namespace, and its veths, alive unseen) and deletes the namespaces, which removes all links
//! and qdiscs with them. A testbed owned by the process ([`Testbed::up`]) is torn down by
//! [`Testbed::down`] or on drop, panicking or not; a named one ([`Testbed::up_named`]) stays
//! up after the process exits, recorded in a state file, until [`Testbed::down`].
//!
//! Deviations: none.

use crate::exec::{netns_command, run, run_with_input};
use crate::link::{TOOL_TIMEOUT, shaping_commands, veth_add};
use crate::plan::{Destination, NodePlan, Owner, Plan, Route};
use crate::ports::{PortSelection, SwitchPort};
use crate::topology::{Network, Role, Topology};
use crate::{Error, IfCounters};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Where named testbeds record themselves: a tmpfs, so a reboot (which also drops every
/// namespace) forgets them too.
pub const DEFAULT_STATE_DIR: &str = "/run/rocev2-testbed";
/// Where `ip netns add` mounts named namespaces.
pub(crate) const NETNS_DIR: &str = "/run/netns";

/// Numbers the testbeds of this process, so several can be up at once.
static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Whether this process runs as root (effective uid 0), which creating namespaces needs.
/// Read from `/proc/self/status`, since `unsafe` (and so `geteuid`) is forbidden here.
pub fn running_as_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// For tests: true when running as root; otherwise print the loud `SKIPPED (needs root): test`
/// line and return false, so that a skipped test never passes silently.
pub fn need_root(test: &str) -> bool {
    if running_as_root() {
        return true;
    }
    use std::io::Write as _;
    // Straight to the stderr handle: the harness hides `eprintln!` of passing tests, which
    // would hide the skip exactly when it matters.
    let _ = writeln!(std::io::stderr(), "\nSKIPPED (needs root): {test}");
    false
}

/// What a named testbed's state file (`STATE_DIR/NAME.json`) records: enough to exec into it
/// and to tear it down from another process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestbedState {
    /// The testbed's name.
    pub name: String,
    /// The process that brought it up (informational: it has usually exited).
    pub created_by_pid: u32,
    /// The graph it was built from.
    pub network: Network,
    /// Its names, addresses and routes.
    pub plan: Plan,
}

impl TestbedState {
    /// Read every state file in `state_dir`, sorted by name; a missing directory is empty.
    ///
    /// # Errors
    /// [`Error::Io`] or [`Error::State`] on an unreadable file.
    pub fn list(state_dir: &Path) -> Result<Vec<TestbedState>, Error> {
        let entries = match fs::read_dir(state_dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(Error::Io {
                    path: state_dir.to_owned(),
                    source,
                });
            }
        };
        let mut states = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "json") {
                states.push(Self::read(&path)?);
            }
        }
        states.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(states)
    }

    /// Read one state file.
    ///
    /// # Errors
    /// [`Error::Io`] or [`Error::State`].
    pub fn read(path: &Path) -> Result<TestbedState, Error> {
        let text = fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_owned(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|source| Error::State {
            path: path.to_owned(),
            source,
        })
    }

    /// The namespaces of this testbed that exist right now.
    pub fn live_netns(&self) -> Vec<&str> {
        self.plan
            .nodes
            .iter()
            .map(|n| n.netns.as_str())
            .filter(|ns| netns_exists(ns))
            .collect()
    }
}

/// A testbed: the namespaces, links, addresses, routes and qdiscs of one [`Plan`].
#[derive(Debug)]
pub struct Testbed {
    network: Network,
    plan: Plan,
    /// Namespaces teardown must remove, in creation order.
    created: Vec<String>,
    /// A named testbed's state file.
    state_file: Option<PathBuf>,
    /// Whether Drop leaves it up (a named testbed that came up completely).
    keep_on_drop: bool,
}

impl Testbed {
    /// Bring up `network` as a testbed owned by this process (namespaces
    /// `rv2-PID-COUNTER-NODE`), torn down on [`down`](Self::down) or drop.
    ///
    /// # Errors
    /// [`Error::NotRoot`]; a [`topology::Error`](crate::topology::Error) from the plan; any
    /// failing `ip`/`tc`/`sysctl` command (what was built so far is removed again).
    pub fn up(network: &Network) -> Result<Testbed, Error> {
        let owner = Owner::Process {
            pid: std::process::id(),
            counter: COUNTER.fetch_add(1, Ordering::Relaxed),
        };
        let plan = Plan::new(network, owner)?;
        if !running_as_root() {
            return Err(Error::NotRoot);
        }
        let mut tb = Testbed::new(network.clone(), plan, None);
        tb.build()?;
        Ok(tb)
    }

    /// [`up`](Self::up) for one of the standard shapes.
    ///
    /// # Errors
    /// As [`up`](Self::up), and an out-of-range parameter.
    pub fn up_topology(topology: &Topology) -> Result<Testbed, Error> {
        Self::up(&topology.network()?)
    }

    /// Bring up `network` as the named testbed `name` (namespaces `rv2-NAME-NODE`) that stays
    /// up after this process exits; its state file `state_dir/NAME.json` is written first, so
    /// even a bring-up cut short can be removed with [`Testbed::open`] + [`down`](Self::down).
    ///
    /// # Errors
    /// [`Error::Exists`] if a testbed of that name is up; otherwise as [`up`](Self::up).
    pub fn up_named(network: &Network, name: &str, state_dir: &Path) -> Result<Testbed, Error> {
        let plan = Plan::new(network, Owner::Named(name.to_owned()))?;
        if !running_as_root() {
            return Err(Error::NotRoot);
        }
        let path = state_path(state_dir, name);
        if path.exists() || plan.nodes.iter().any(|n| netns_exists(&n.netns)) {
            return Err(Error::Exists(name.to_owned()));
        }
        let state = TestbedState {
            name: name.to_owned(),
            created_by_pid: std::process::id(),
            network: network.clone(),
            plan: plan.clone(),
        };
        fs::create_dir_all(state_dir).map_err(|source| Error::Io {
            path: state_dir.to_owned(),
            source,
        })?;
        let json = serde_json::to_string_pretty(&state).map_err(|source| Error::State {
            path: path.clone(),
            source,
        })?;
        fs::write(&path, json).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        let mut tb = Testbed::new(network.clone(), plan, Some(path));
        tb.build()?;
        tb.keep_on_drop = true;
        Ok(tb)
    }

    /// Open the named testbed `name` from its state file, to exec into it or take it down.
    /// Dropping the result leaves the testbed up.
    ///
    /// # Errors
    /// [`Error::NotFound`] without a state file; [`Error::Io`]/[`Error::State`] if unreadable.
    pub fn open(name: &str, state_dir: &Path) -> Result<Testbed, Error> {
        crate::plan::check_testbed_name(name)?;
        let path = state_path(state_dir, name);
        if !path.exists() {
            return Err(Error::NotFound(name.to_owned()));
        }
        let state = TestbedState::read(&path)?;
        let created = state.plan.nodes.iter().map(|n| n.netns.clone()).collect();
        Ok(Testbed {
            network: state.network,
            plan: state.plan,
            created,
            state_file: Some(path),
            keep_on_drop: true,
        })
    }

    fn new(network: Network, plan: Plan, state_file: Option<PathBuf>) -> Testbed {
        Testbed {
            network,
            plan,
            created: Vec::new(),
            state_file,
            keep_on_drop: false,
        }
    }

    /// The graph this testbed was built from.
    pub fn network(&self) -> &Network {
        &self.network
    }

    /// Its names, addresses and routes.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The node named `name`.
    ///
    /// # Errors
    /// [`topology::Error::UnknownNode`](crate::topology::Error::UnknownNode).
    pub fn node(&self, name: &str) -> Result<&NodePlan, Error> {
        self.plan
            .node(name)
            .ok_or_else(|| crate::topology::Error::UnknownNode(name.to_owned()).into())
    }

    /// All hosts, in node order.
    pub fn hosts(&self) -> impl Iterator<Item = &NodePlan> {
        self.plan.hosts()
    }

    /// A command running `program` inside node `node`'s namespace; add arguments, then run it
    /// with [`crate::exec::run`], [`crate::Process::spawn`] or [`crate::collect_json`].
    ///
    /// # Errors
    /// [`topology::Error::UnknownNode`](crate::topology::Error::UnknownNode).
    pub fn command(
        &self,
        node: &str,
        program: impl AsRef<std::ffi::OsStr>,
    ) -> Result<Command, Error> {
        Ok(netns_command(&self.node(node)?.netns, program))
    }

    /// `rocev2d run` serving interface `iface` of node `node` over `datapath` on its default
    /// control socket, once it says it serves (within `timeout`). The daemon is the one built
    /// beside the running test ([`crate::exec::built_binary`]); dropping the [`crate::Process`]
    /// kills it, so hold it in a variable declared after the testbed's.
    ///
    /// # Errors
    /// An unknown node, no `rocev2d` built, or a daemon that exits or stays silent.
    pub fn daemon(
        &self,
        node: &str,
        iface: &str,
        datapath: &str,
        timeout: Duration,
    ) -> Result<crate::Process, Error> {
        let mut cmd = self.command(node, crate::exec::built_binary("rocev2d")?)?;
        cmd.args(["run", "--iface", iface, "--datapath", datapath]);
        let mut d = crate::Process::spawn(&mut cmd)?;
        d.wait_for_line(|l| l.starts_with("rocev2d: serving"), timeout)?;
        Ok(d)
    }

    /// The switch ports `selection` picks, where switch programs attach; see [`PortSelection`].
    pub fn switch_ports(&self, selection: &PortSelection) -> Vec<SwitchPort> {
        crate::ports::select(&self.plan, selection)
    }

    /// The counters of `node`'s port toward `peer`.
    ///
    /// # Errors
    /// [`topology::Error::UnknownNode`](crate::topology::Error::UnknownNode) if no link joins
    /// them; as [`IfCounters::read`].
    pub fn counters(&self, node: &str, peer: &str) -> Result<IfCounters, Error> {
        let n = self.node(node)?;
        let port = n
            .port_toward(peer)
            .ok_or_else(|| crate::topology::Error::UnknownNode(format!("{node}->{peer}")))?;
        IfCounters::read(&n.netns, &port.ifname)
    }

    /// Tear the testbed down: kill what runs inside, delete every namespace (and with them
    /// every link and qdisc), remove the state file of a named testbed.
    ///
    /// # Errors
    /// The first failing command; the rest of the teardown is still attempted.
    pub fn down(mut self) -> Result<(), Error> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<(), Error> {
        let mut first = None;
        while let Some(ns) = self.created.pop() {
            if let Err(e) = delete_netns(&ns) {
                tracing::warn!(netns = %ns, error = %e, "teardown");
                first.get_or_insert(e);
            }
        }
        if let Some(path) = self.state_file.take()
            && let Err(source) = fs::remove_file(&path)
            && source.kind() != std::io::ErrorKind::NotFound
        {
            first.get_or_insert(Error::Io { path, source });
        }
        first.map_or(Ok(()), Err)
    }

    /// Steps 1–5 of the module doc. On error, everything built so far is removed again, and
    /// so is a named testbed's state file: a failed `up` leaves nothing to clean up.
    fn build(&mut self) -> Result<(), Error> {
        let result = self.build_steps();
        if let Err(e) = &result {
            tracing::warn!(error = %e, "bring-up failed, tearing down");
            if let Err(e) = self.teardown() {
                tracing::warn!(error = %e, "teardown after failed bring-up incomplete");
            }
        }
        result
    }

    fn build_steps(&mut self) -> Result<(), Error> {
        let plan = self.plan.clone();
        tracing::info!(prefix = %plan.owner.netns_prefix(), nodes = plan.nodes.len(), "testbed up");
        for node in &plan.nodes {
            run(
                Command::new("ip").args(["netns", "add", &node.netns]),
                TOOL_TIMEOUT,
            )?;
            self.created.push(node.netns.clone());
            run(
                netns_command(&node.netns, "sysctl").args(sysctls(node.role)),
                TOOL_TIMEOUT,
            )?;
        }

        let mut links = String::new();
        for node in &plan.nodes {
            for port in &node.ports {
                // Each link once, from the side listed first in the network.
                let Some(peer) = plan.node(&port.peer) else {
                    continue;
                };
                if self.network.links[port.link].ends[0] == node.name {
                    let line = veth_add(
                        (&node.netns, &port.ifname),
                        (&peer.netns, &port.peer_ifname),
                        port.mtu,
                        port.queues,
                    );
                    let _ = writeln!(links, "{line}");
                }
            }
        }
        if !links.is_empty() {
            run_with_input(
                Command::new("ip").args(["-batch", "-"]),
                &links,
                TOOL_TIMEOUT,
            )?;
        }

        for node in &plan.nodes {
            ip_batch(&node.netns, &interfaces_script(node))?;
        }
        for node in &plan.nodes {
            let mut script = String::new();
            for port in &node.ports {
                if let Some(shaping) = &port.egress {
                    for line in shaping_commands(&port.ifname, shaping, port.mtu) {
                        let _ = writeln!(script, "{line}");
                    }
                }
            }
            if !script.is_empty() {
                run_with_input(
                    Command::new("tc").args(["-n", &node.netns, "-batch", "-"]),
                    &script,
                    TOOL_TIMEOUT,
                )?;
            }
        }
        for node in &plan.nodes {
            let script = routes_script(&node.routes);
            if !script.is_empty() {
                ip_batch(&node.netns, &script)?;
            }
        }
        let deadline = Instant::now() + OPERATIONAL_TIMEOUT;
        for node in &plan.nodes {
            await_operational(Some(&node.netns), deadline, || node_operational(node))?;
        }
        Ok(())
    }
}

/// How long bring-up waits for linkwatch to report every port up (step 6).
const OPERATIONAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether every port of `node` (and its bridge) is operationally up, and every bridge port
/// forwarding.
fn node_operational(node: &NodePlan) -> Result<bool, Error> {
    let names = node
        .ports
        .iter()
        .map(|p| p.ifname.as_str())
        .chain(node.bridge.as_deref());
    if !links_up(Some(&node.netns), names)? {
        return Ok(false);
    }
    if node.bridge.is_some() {
        let ports: Vec<serde_json::Value> = crate::exec::collect_json(
            Command::new("bridge").args(["-j", "-n", &node.netns, "link", "show"]),
            TOOL_TIMEOUT,
        )?;
        if ports.len() != node.ports.len() || ports.iter().any(|p| p["state"] != "forwarding") {
            tracing::debug!(netns = %node.netns, "bridge ports not forwarding yet");
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether every link of `names` in `netns` (`None`: the caller's namespace) is operationally
/// up.
fn links_up<'a>(
    netns: Option<&str>,
    names: impl IntoIterator<Item = &'a str>,
) -> Result<bool, Error> {
    let links: Vec<serde_json::Value> =
        crate::exec::collect_json(ip(netns).args(["-j", "link", "show"]), TOOL_TIMEOUT)?;
    for name in names {
        let state = links
            .iter()
            .find(|l| l["ifname"] == name)
            .and_then(|l| l["operstate"].as_str());
        if state != Some("UP") {
            tracing::debug!(?netns, ifname = name, ?state, "not up yet");
            return Ok(false);
        }
    }
    Ok(true)
}

/// Polls `ready` until it holds, or fails at `deadline` naming `netns`'s links.
fn await_operational(
    netns: Option<&str>,
    deadline: Instant,
    mut ready: impl FnMut() -> Result<bool, Error>,
) -> Result<(), Error> {
    while !ready()? {
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                cmd: format!("{:?}", ip(netns).args(["link", "show"])),
                what: "every port operationally up".to_owned(),
                after: OPERATIONAL_TIMEOUT,
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// `ip`, in `netns` when given.
fn ip(netns: Option<&str>) -> Command {
    let mut c = Command::new("ip");
    if let Some(ns) = netns {
        c.args(["-n", ns]);
    }
    c
}

/// One end of a [`veth_pair`]: `VethEnd { addrs: &["10.9.0.1/24"], ..VethEnd::new("va") }`.
#[derive(Debug, Clone, Copy)]
pub struct VethEnd<'a> {
    /// The interface's name.
    pub ifname: &'a str,
    /// The namespace it goes into; `None`: the caller's.
    pub netns: Option<&'a str>,
    /// Its addresses with their prefix lengths (`10.9.0.1/24`, `fd00::1/64`); IPv6 ones are
    /// added without duplicate address detection, so they are usable at once.
    pub addrs: &'a [&'a str],
    /// Its MTU; `None`: the kernel's default (1500).
    pub mtu: Option<u32>,
    /// Its MAC address (`02:00:00:00:00:01`); `None`: a random one.
    pub mac: Option<&'a str>,
    /// Its transmit and receive queues; `None`: one each.
    pub queues: Option<u32>,
}

impl<'a> VethEnd<'a> {
    /// An end named `ifname` in the caller's namespace, without addresses, all else default.
    pub fn new(ifname: &'a str) -> VethEnd<'a> {
        VethEnd {
            ifname,
            netns: None,
            addrs: &[],
            mtu: None,
            mac: None,
            queues: None,
        }
    }

    /// Its part of `ip link add`: name, namespace, MTU, MAC and queues.
    fn link_args(&self) -> Vec<String> {
        let mut a = vec!["name".to_owned(), self.ifname.to_owned()];
        let opt = |k: &str, v: Option<String>| v.map(|v| [k.to_owned(), v]).into_iter().flatten();
        a.extend(opt("netns", self.netns.map(str::to_owned)));
        a.extend(opt("mtu", self.mtu.map(|m| m.to_string())));
        a.extend(opt("address", self.mac.map(str::to_owned)));
        a.extend(opt("numtxqueues", self.queues.map(|q| q.to_string())));
        a.extend(opt("numrxqueues", self.queues.map(|q| q.to_string())));
        a
    }
}

/// A veth pair for a test that makes its own namespaces (a [`Testbed`] brings up its ports the
/// same way): both ends addressed and up, with their namespaces' loopbacks, returned once both
/// ends are operationally up. Before that a frame may be dropped unseen and the first ARP is
/// retransmitted only a second later (module doc, step 6): longer than an RC QP's default
/// retries last.
///
/// # Errors
/// An `ip` command failed, or the ends were not up within 10 s.
pub fn veth_pair(a: VethEnd<'_>, b: VethEnd<'_>) -> Result<(), Error> {
    let mut add = ip(None);
    add.args(["link", "add"])
        .args(a.link_args())
        .args(["type", "veth", "peer"])
        .args(b.link_args());
    run(&mut add, TOOL_TIMEOUT)?;
    for end in [a, b] {
        let mut script = format!("link set dev lo up\nlink set dev {} up\n", end.ifname);
        for addr in end.addrs {
            let nodad = if addr.contains(':') { " nodad" } else { "" };
            let _ = writeln!(script, "address add {addr} dev {}{nodad}", end.ifname);
        }
        run_with_input(ip(end.netns).args(["-batch", "-"]), &script, TOOL_TIMEOUT)?;
    }
    let deadline = Instant::now() + OPERATIONAL_TIMEOUT;
    for end in [a, b] {
        await_operational(end.netns, deadline, || links_up(end.netns, [end.ifname]))?;
    }
    Ok(())
}

impl Drop for Testbed {
    /// Tear down unless this is a named testbed that is meant to stay up. Never panics, also
    /// not while the thread is already panicking: errors are reported on stderr.
    fn drop(&mut self) {
        if self.keep_on_drop || self.created.is_empty() {
            return;
        }
        if let Err(e) = self.teardown() {
            eprintln!(
                "rocev2-testbed: teardown of {} incomplete: {e}",
                self.plan.owner.netns_prefix()
            );
        }
    }
}

fn state_path(state_dir: &Path, name: &str) -> PathBuf {
    state_dir.join(format!("{name}.json"))
}

/// Whether the named namespace exists (is mounted under `/run/netns`).
pub(crate) fn netns_exists(netns: &str) -> bool {
    Path::new(NETNS_DIR).join(netns).exists()
}

/// Kill every process inside `netns`, then delete it. A namespace that is already gone is fine.
pub(crate) fn delete_netns(netns: &str) -> Result<(), Error> {
    if !netns_exists(netns) {
        return Ok(());
    }
    let pids = run(
        Command::new("ip").args(["netns", "pids", netns]),
        TOOL_TIMEOUT,
    )?
    .stdout;
    let pids: Vec<&str> = pids.split_whitespace().collect();
    if !pids.is_empty() {
        // A process may exit on its own meanwhile: kill's failure for it is no error of ours.
        let _ = run(Command::new("kill").arg("-KILL").args(&pids), TOOL_TIMEOUT);
    }
    run(
        Command::new("ip").args(["netns", "delete", netns]),
        TOOL_TIMEOUT,
    )?;
    Ok(())
}

/// The sysctls of a node of `role`, as `sysctl` arguments.
fn sysctls(role: Role) -> Vec<&'static str> {
    let mut s = vec![
        "-q",
        "-w",
        // ECMP: hash on the 5-tuple, so the UDP source port of a RoCEv2 flow picks its path.
        "net.ipv4.fib_multipath_hash_policy=1",
        "net.ipv6.fib_multipath_hash_policy=1",
        // ECMP makes paths asymmetric; strict reverse-path filtering would drop replies.
        "net.ipv4.conf.all.rp_filter=0",
        "net.ipv4.conf.default.rp_filter=0",
        // Addresses usable at once (link-local ones too), not after a second of DAD.
        "net.ipv6.conf.all.accept_dad=0",
        "net.ipv6.conf.default.accept_dad=0",
    ];
    if role == Role::Router {
        s.extend(["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"]);
    }
    s
}

fn ip_batch(netns: &str, script: &str) -> Result<(), Error> {
    run_with_input(
        Command::new("ip").args(["-n", netns, "-batch", "-"]),
        script,
        TOOL_TIMEOUT,
    )?;
    Ok(())
}

/// Loopback, bridge, ports and addresses of one node.
fn interfaces_script(node: &NodePlan) -> String {
    let mut s = String::from("link set dev lo up\n");
    if let Some(br) = &node.bridge {
        // No STP (the planner rejects bridge loops), so ports forward at once; no multicast
        // snooping, so IPv6 neighbour discovery floods without an MLD querier.
        let _ = writeln!(
            s,
            "link add name {br} type bridge stp_state 0 mcast_snooping 0"
        );
    }
    for port in &node.ports {
        let p = &port.ifname;
        let _ = writeln!(s, "link set dev {p} alias to-{}", port.peer);
        if let Some(br) = &node.bridge {
            let _ = writeln!(s, "link set dev {p} master {br}");
        }
        let _ = writeln!(s, "link set dev {p} up");
        if let Some(v4) = port.ipv4 {
            let _ = writeln!(
                s,
                "address add {v4}/{} dev {p}",
                crate::plan::Segment::IPV4_PREFIX_LEN
            );
        }
        if let Some(v6) = port.ipv6 {
            let _ = writeln!(
                s,
                "address add {v6}/{} dev {p} nodad",
                crate::plan::Segment::IPV6_PREFIX_LEN
            );
        }
    }
    if let Some(br) = &node.bridge {
        let _ = writeln!(s, "link set dev {br} up");
    }
    s
}

/// `route add` lines, IPv4 then IPv6 for each route; the family follows from the prefix.
fn routes_script(routes: &[Route]) -> String {
    let mut s = String::new();
    for route in routes {
        let (v4, v6) = match route.destination {
            Destination::Default => ("0.0.0.0/0".to_owned(), "::/0".to_owned()),
            Destination::Segment(seg) => (seg.ipv4_subnet(), seg.ipv6_subnet()),
        };
        let mut line4 = format!("route add {v4}");
        let mut line6 = format!("route add {v6}");
        if let [hop] = &route.nexthops[..] {
            let _ = write!(line4, " via {} dev {}", hop.ipv4, hop.ifname);
            let _ = write!(line6, " via {} dev {}", hop.ipv6, hop.ifname);
        } else {
            for hop in &route.nexthops {
                let _ = write!(line4, " nexthop via {} dev {}", hop.ipv4, hop.ifname);
                let _ = write!(line6, " nexthop via {} dev {}", hop.ipv6, hop.ifname);
            }
        }
        let _ = writeln!(s, "{line4}\n{line6}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{LinkParams, Topology};

    fn plan(t: Topology) -> Plan {
        Plan::new(&t.network().unwrap(), Owner::Named("t".into())).unwrap()
    }

    #[test]
    fn leaf_routes_are_ecmp_groups() {
        let p = plan(Topology::LeafSpine {
            leaves: 2,
            spines: 2,
            hosts_per_leaf: 1,
            link: LinkParams::default(),
            fabric: None,
        });
        let script = routes_script(&p.node("l0").unwrap().routes);
        // l1h0 is segment 1; l0's fabric ports are p1 (to s0, segment 2) and p2 (to s1,
        // segment 3), where l0 (first in link order) is .254 and the spine .253.
        assert!(script.contains(
            "route add 10.0.1.0/24 nexthop via 10.0.2.253 dev rv2tp1 nexthop via 10.0.3.253 dev rv2tp2\n"
        ), "{script}");
        assert!(script.contains(
            "route add fd00:0:0:1::/64 nexthop via fd00:0:0:2::fd dev rv2tp1 nexthop via fd00:0:0:3::fd dev rv2tp2\n"
        ), "{script}");
        // s1's segment 5 (l1–s1) is reached only through s1.
        assert!(
            script.contains("route add 10.0.5.0/24 via 10.0.3.253 dev rv2tp2\n"),
            "{script}"
        );
    }

    #[test]
    fn host_routes_are_defaults() {
        let p = plan(Topology::LeafSpine {
            leaves: 2,
            spines: 2,
            hosts_per_leaf: 1,
            link: LinkParams::default(),
            fabric: None,
        });
        let script = routes_script(&p.node("l1h0").unwrap().routes);
        assert_eq!(
            script,
            "route add 0.0.0.0/0 via 10.0.1.254 dev rv2tp0\nroute add ::/0 via fd00:0:0:1::fe dev rv2tp0\n"
        );
    }

    #[test]
    fn bridge_script_enslaves_ports_without_addresses() {
        let p = plan(Topology::Star {
            senders: 1,
            switch: crate::SwitchKind::Bridge,
            link: LinkParams::default(),
        });
        let s = interfaces_script(p.node("sw").unwrap());
        assert!(s.contains("link add name rv2tbr type bridge"));
        assert!(s.contains("link set dev rv2tp1 master rv2tbr"));
        assert!(!s.contains("address"));
        let s = interfaces_script(p.node("rx").unwrap());
        assert!(s.contains("address add 10.0.0.2/24 dev rv2tp0\n"));
        assert!(s.contains("address add fd00::2/64 dev rv2tp0 nodad\n"));
    }

    #[test]
    fn only_routers_forward() {
        assert!(sysctls(Role::Router).contains(&"net.ipv4.ip_forward=1"));
        assert!(!sysctls(Role::Host).iter().any(|s| s.contains("forward")));
        assert!(sysctls(Role::Bridge).contains(&"net.ipv6.fib_multipath_hash_policy=1"));
    }
}
