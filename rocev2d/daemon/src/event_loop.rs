//! `rocev2d run`: serve one interface until SIGINT or SIGTERM, as the host's RoCE device.
//!
//! The interface is served by one or more **engine shards** (`--queues N`, docs/daemon.md
//! "Several queues"). A shard is a thread owning one datapath (over AF_XDP bound to rx queue k
//! alone), one engine (QPN block k when there are several) and the objects of the
//! applications placed on it ([`rocev2d::host::Host`]); with several, each datapath is wrapped
//! in a [`handoff::Shard`], so frames and CM MADs that reach the wrong shard are handed to
//! their owner, and the hosts share one roster of attachments, register their listens in
//! the interface's listen registry and exchange their engines' receiver-side congestion
//! summaries on one [`CcBoard`]. A shard's loop is [`rocev2_datapath::Driver`]'s
//! `poll`/`wait` pair plus a pass over its applications' rings, with more descriptors in the
//! wait set: a self-pipe written by the signal handler (signal-hook), so a signal ends the wait
//! at once even in a long sleep; an eventfd any shard signals when it stops, so the others stop
//! too; the eventfd the control plane ([`crate::control`]) signals when it forwards a request;
//! and every attachment's doorbell, so a posted request wakes it. The metrics endpoint runs on
//! a thread of its own and asks the shards for their snapshots as `rocev2d stats` does.
//! Shutdown: stop polling, log the final counters, remove the socket file; attached
//! applications see their connection close.
//!
//! Deviations: none.

use crate::control::{self, Cmd};
use crate::metrics::Metrics;
use anyhow::{Context as _, bail};
use rocev2_core::Endpoint;
use rocev2_core::cc::CcScheme;
use rocev2_core::cm::CmConfig;
use rocev2_core::endpoint::GsiConfig;
use rocev2_datapath::entropy::os_seed;
use rocev2_datapath::host::HostMemory;
use rocev2_datapath::iface::node_guid;
use rocev2_datapath::{Datapath, Driver, DriverConfig, Interface, Mode, auto, handoff, neigh};
use rocev2_ipc::notify::EventFd;
use rocev2_ipc::proto::{ErrorKind, Request, Response};
use rocev2d::config::Config;
use rocev2d::host::{CcBoard, Host, Roster};
use rocev2d::mac;
use rocev2d::stats::{self, Identity};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::Duration;
use tokio::sync::oneshot;

/// The daemon's driver: its datapath and every attached application's memory.
type HostDriver = Driver<Box<dyn Datapath + Send>, HostMemory>;

/// The driver settings a configuration asks for.
pub fn driver_config(cfg: &Config) -> DriverConfig {
    DriverConfig {
        rx_batch: cfg.rx_batch,
        tx_batch: cfg.tx_batch,
        wait: cfg.wait,
        ..DriverConfig::default()
    }
}

/// Binds the control socket: an abstract one (`@NAME`, reachable from this network
/// namespace only, no file) as it is; a filesystem one with file mode `mode` and group
/// `group`, replacing a stale file no daemon answers on.
fn bind_control(path: &Path, mode: u32, group: Option<u32>) -> anyhow::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt as _;
    let taken = || {
        anyhow::anyhow!(
            "{} is served by another running rocev2d in this network namespace; stop it or choose another `socket`",
            path.display()
        )
    };
    if rocev2_ipc::is_abstract(path) {
        let l = rocev2_ipc::bind(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::AddrInUse => taken(),
            _ => anyhow::Error::new(e).context(format!("binding {}", path.display())),
        })?;
        l.set_nonblocking(true)?;
        return Ok(l);
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    if path.exists() {
        if rocev2_ipc::connect(path).is_ok() {
            return Err(taken());
        }
        std::fs::remove_file(path).with_context(|| format!("removing stale {}", path.display()))?;
    }
    let l = rocev2_ipc::bind(path).with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {mode:o} {}", path.display()))?;
    if let Some(g) = group {
        std::os::unix::fs::chown(path, None, Some(g))
            .with_context(|| format!("chgrp {g} {}", path.display()))?;
    }
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Removes a filesystem control socket's file when the loop ends, however it ends (an
/// abstract socket has none).
struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        if !rocev2_ipc::is_abstract(&self.0) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// A drain request waiting for an attachment's QPs to go idle.
struct Drain {
    app: u32,
    until: std::time::Instant,
    reply: oneshot::Sender<(Response, Vec<OwnedFd>)>,
}

/// How many engine shards `cfg` asks for on `iface`: `queues`, or one per rx queue for 0.
///
/// # Errors
/// More shards than the interface has rx queues (or the steering program's map holds).
pub fn shard_count(cfg: &Config, iface: &Interface) -> anyhow::Result<u32> {
    let queues = iface.rx_queues.clamp(1, rocev2_core::endpoint::QPN_BLOCKS);
    match cfg.queues {
        0 => Ok(queues),
        n if n <= queues => Ok(n),
        n => bail!(
            "--queues {n}: {} has {} rx queue(s) (at most {} shards); `ethtool -L` or a veth's numrxqueues give it more",
            iface.name,
            iface.rx_queues,
            queues
        ),
    }
}

/// One shard's datapath and engine, opened before the shard's thread starts (so a refusal
/// stops the daemon before it says it serves).
struct Opened {
    datapath: Box<dyn Datapath + Send>,
    reason: String,
    ep: Endpoint,
    /// Its handle on the interface's listen registry, when there are several shards.
    listens: Option<handoff::Listens>,
}

/// Opens shard `k` of `n` on `iface` with datapath `mode`: with one, the datapath of the whole
/// interface and an engine of every QPN, as ever; with several, the datapath of rx queue `k`
/// joined to the others ([`handoff::Shard`]) and an engine of QPN block `k`.
fn open_shard(
    cfg: &Config,
    iface: &Interface,
    mode: Mode,
    k: u32,
    n: u32,
) -> anyhow::Result<Opened> {
    let seed = os_seed().context("reading /dev/urandom")?;
    let mut options = cfg.options;
    if n > 1 {
        options.xdp.queue = Some(k);
    }
    let opened = auto::open(iface, mode, &options)?;
    let (datapath, reason, ep, listens): (Box<dyn Datapath + Send>, _, _, _) = if n > 1 {
        let name = opened.datapath.name();
        if name != "xdp" && name != "packet" {
            bail!(
                "--queues {n}: the {name} datapath serves an interface once; shards need xdp or packet"
            );
        }
        let shard = handoff::Shard::join(iface, k, opened.datapath)?;
        let reason = format!("{}; {}", opened.reason, shard.describe());
        let listens = shard.listens();
        (
            Box::new(shard),
            reason,
            Endpoint::with_qpn_block(seed, k),
            Some(listens),
        )
    } else {
        (opened.datapath, opened.reason, Endpoint::new(seed), None)
    };
    let mut ep = ep;
    // Several shards make one host's receiver: they exchange their summaries ([`CcBoard`]).
    ep.set_receiver_cc(match n {
        1 => cfg.cc.receiver(),
        _ => cfg.cc.receiver().with_shard(k as usize),
    });
    // QP1 and the CM, shared out to the attached applications by `Host`; on a shard of
    // several, its Communication IDs are of its block.
    ep.enable_cm(GsiConfig {
        mac: iface.mac,
        cm: CmConfig {
            local_ca_guid: node_guid(iface.mac),
        },
        seed: os_seed().context("reading /dev/urandom")?,
        link_mtu: iface.mtu,
    });
    Ok(Opened {
        datapath,
        reason,
        ep,
        listens,
    })
}

/// Runs the daemon on `cfg.iface` until a signal.
///
/// # Errors
/// Setup failures (no interface, datapath refused, socket path taken) and datapath failures.
pub fn run(cfg: &Config) -> anyhow::Result<()> {
    let Some(name) = cfg.iface.as_deref() else {
        bail!("no interface: pass --iface or set `iface` in the config file");
    };
    let iface = Interface::by_name(name)?;
    if !iface.up {
        tracing::warn!(iface = name, "interface is down or has no carrier");
    }
    let n = shard_count(cfg, &iface)?;
    let started = std::time::Instant::now();
    let first = open_shard(cfg, &iface, cfg.mode, 0, n)?;
    let datapath = first.datapath.name().to_string();
    // The other shards take the datapath the first got: `auto` must not mix two.
    let mode = datapath.parse().unwrap_or(cfg.mode);
    let mut opened = vec![first];
    for k in 1..n {
        opened.push(open_shard(cfg, &iface, mode, k, n)?);
    }
    let path = cfg
        .stats_socket
        .clone()
        .unwrap_or_else(|| rocev2_ipc::default_socket(name));
    let listener = bind_control(&path, cfg.control.mode, cfg.control.group)?;
    let _cleanup = SocketFile(path.clone());
    let (sig_rx, sig_tx) = UnixStream::pair()?;
    sig_rx.set_nonblocking(true)?;
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::low_level::pipe::register(sig, sig_tx.try_clone()?)?;
    }
    let roster = Arc::new(Roster::default());
    let cc_board = Arc::new(CcBoard::default());
    let mut shards = Vec::new();
    let mut links = Vec::new();
    for (k, o) in (0..).zip(opened) {
        let wake = Arc::new(EventFd::new().context("eventfd")?);
        let (tx, rx) = std::sync::mpsc::channel();
        links.push(control::ShardLink::new(tx, Arc::clone(&wake)));
        let id = Identity {
            iface: name.to_string(),
            datapath: o.datapath.name().to_string(),
            reason: o.reason.clone(),
            started,
        };
        let cc = cfg.cc.scheme;
        shards.push((
            o,
            Shard {
                k,
                id,
                cc,
                rx,
                wake,
            },
        ));
    }
    let mut uids = cfg.control.allow_uids.clone();
    uids.push(rustix::process::geteuid().as_raw());
    let link = control::Link::new(
        links,
        Arc::new(control::GateCounters::default()),
        rocev2d::closer::Closer::start().context("starting the closing thread")?,
    );
    control::spawn(
        listener,
        iface.clone(),
        control::Access {
            uids,
            group: cfg.control.group,
        },
        link.clone(),
    )?;
    if let Some(addr) = cfg.metrics {
        let m = Metrics::bind(addr).with_context(|| format!("metrics on {addr}"))?;
        tracing::info!(addr = %m.local_addr()?, "serving Prometheus metrics at /metrics");
        m.spawn(move || {
            link.snapshot_blocking()
                .map(|s| stats::render_prometheus(&s))
                .unwrap_or_default()
        })
        .context("starting the metrics thread")?;
    }
    tracing::info!(
        iface = name,
        mac = %mac(iface.mac),
        mtu = iface.mtu,
        gids = ?iface.gids(),
        socket = %path.display(),
        wait = %cfg.wait,
        shards = n,
        "serving; SIGINT or SIGTERM stops"
    );
    // Printed on stdout for scripts and tests that wait for readiness.
    match n {
        1 => println!("rocev2d: serving {name} with datapath {datapath}"),
        n => println!("rocev2d: serving {name} with datapath {datapath}, {n} engine shards"),
    }
    let stop = EventFd::new().context("eventfd")?;
    let (sig_rx, stop) = (&sig_rx, &stop);
    let results: Vec<anyhow::Result<()>> = std::thread::scope(|scope| {
        let threads: Vec<_> = shards
            .into_iter()
            .map(|(o, shard)| {
                let host = Host::new(iface.clone(), cfg.limits, cfg.cc.qp_config());
                let host = match o.listens {
                    Some(l) => host.sharing(Arc::clone(&roster), l, Arc::clone(&cc_board)),
                    None => host,
                };
                std::thread::Builder::new()
                    .name(format!("rocev2d-shard{}", shard.k))
                    .spawn_scoped(scope, move || {
                        let driver = Driver::new(
                            o.ep,
                            HostMemory::default(),
                            o.datapath,
                            driver_config(cfg),
                        );
                        let r = serve(&shard, driver, host, sig_rx, stop);
                        // However this shard ended, the others end too.
                        stop.signal();
                        r
                    })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| match t {
                Ok(t) => t
                    .join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a shard's thread panicked"))),
                Err(e) => {
                    stop.signal();
                    Err(anyhow::Error::new(e).context("starting a shard's thread"))
                }
            })
            .collect()
    });
    for r in results {
        r?;
    }
    println!("rocev2d: stopped");
    Ok(())
}

/// What a shard's thread gets besides its engine and applications.
struct Shard {
    /// Its number: rx queue and QPN block.
    k: u32,
    /// What its snapshots and welcomes say.
    id: Identity,
    /// The congestion-control scheme of its QPs, which welcomes name.
    cc: CcScheme,
    /// The control plane's commands for it.
    rx: Receiver<Cmd>,
    /// Signalled when a command is sent.
    wake: Arc<EventFd>,
}

/// A shard's loop until a signal or another shard stops (`stop`): its datapath and engine
/// (`driver`), its applications (`host`), the control plane's commands.
fn serve(
    shard: &Shard,
    mut driver: HostDriver,
    mut host: Host,
    sig_rx: &UnixStream,
    stop: &EventFd,
) -> anyhow::Result<()> {
    let Shard {
        k,
        id,
        cc,
        rx,
        wake,
    } = shard;
    let mut drains: Vec<Drain> = Vec::new();
    loop {
        driver.poll()?;
        let now = driver.now();
        let mut busy = host.service(&mut driver.ep, &mut driver.mem, now);
        while let Ok(cmd) = rx.try_recv() {
            busy = true;
            match cmd {
                Cmd::Attach { creds, conn, reply } => {
                    let _ = reply.send(host.attach(creds, conn));
                }
                Cmd::Detach { app } => {
                    let now = driver.now();
                    host.detach(&mut driver.ep, &mut driver.mem, now, app);
                    drains.retain(|d| d.app != app);
                }
                Cmd::Snapshot { reply } => {
                    let _ = reply.send(snapshot(id, &driver, &host));
                }
                Cmd::Request {
                    app,
                    req,
                    fds,
                    reply,
                } => match req {
                    Request::Hello { .. } => {
                        let welcome = Response::Welcome {
                            app,
                            iface: host.iface_info(),
                            datapath: id.datapath.clone(),
                            reason: id.reason.clone(),
                            cc: cc.name().to_string(),
                        };
                        let _ = reply.send((welcome, Vec::new()));
                    }
                    Request::Drain { timeout_ms } => drains.push(Drain {
                        app,
                        until: std::time::Instant::now()
                            + Duration::from_millis(u64::from(timeout_ms)),
                        reply,
                    }),
                    req => {
                        let now = driver.now();
                        let r = host.request(&mut driver.ep, &mut driver.mem, now, app, req, fds);
                        if let Some(path) = &r.announce {
                            neigh::announce(driver.datapath_mut(), path);
                        }
                        let _ = reply.send((r.response, r.fds));
                    }
                },
            }
        }
        if !drains.is_empty() {
            let now = driver.now();
            let wall = std::time::Instant::now();
            let mut i = 0;
            while i < drains.len() {
                let d = &drains[i];
                let answer = match host.is_idle(&driver.ep, d.app, now) {
                    Some(true) => Some(Response::Done),
                    None => Some(Response::Error {
                        kind: ErrorKind::UnknownHandle,
                        message: "attachment closed".into(),
                    }),
                    Some(false) if wall >= d.until => Some(Response::Error {
                        kind: ErrorKind::Timeout,
                        message: "QPs still had unacknowledged work".into(),
                    }),
                    Some(false) => None,
                };
                match answer {
                    Some(a) => {
                        let _ = drains.swap_remove(i).reply.send((a, Vec::new()));
                    }
                    None => i += 1,
                }
            }
        }
        // Work just entered the engine: send it before sleeping. Otherwise tell the applications
        // a post must ring the doorbell, unless one arrived meanwhile.
        if busy || host.set_asleep(true) {
            host.set_asleep(false);
            continue;
        }
        let mut fds = vec![sig_rx.as_fd(), stop.as_fd(), wake.as_fd()];
        let fixed = fds.len();
        fds.extend(host.doorbells());
        let ready = driver.wait(&fds)?;
        drop(fds);
        host.set_asleep(false);
        if ready.iter().take(2).any(|r| *r) {
            break;
        }
        if ready.iter().skip(fixed).any(|r| *r) {
            host.clear_doorbells();
        }
        if ready.get(2).copied().unwrap_or(false) {
            wake.clear();
        }
    }
    let snap = snapshot(id, &driver, &host);
    tracing::info!(
        shard = k,
        rx_packets = snap.packets.get("rx_packets").copied().unwrap_or(0),
        tx_packets = snap.packets.get("tx_packets").copied().unwrap_or(0),
        drops = snap.drops.values().sum::<u64>(),
        "stopped"
    );
    Ok(())
}

/// A shard's counters snapshot with its attached applications (the control plane merges the
/// shards' and adds its own counters).
fn snapshot(id: &Identity, driver: &HostDriver, host: &Host) -> stats::Snapshot {
    let mut snap = stats::snapshot(
        id,
        &driver.ep,
        rocev2_datapath::clock::now(),
        &driver.datapath_stats(),
    );
    snap.apps = host.snapshot();
    snap.host = host.counters();
    snap
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_count_is_the_asked_queues_within_the_interfaces() {
        let iface = |rx_queues| Interface {
            name: "t0".into(),
            index: 1,
            mac: [2, 0, 0, 0, 0, 1],
            mtu: 1500,
            up: true,
            addrs: Vec::new(),
            rx_queues,
        };
        let count = |queues, rx| {
            shard_count(
                &Config {
                    queues,
                    ..Config::default()
                },
                &iface(rx),
            )
        };
        assert_eq!(count(1, 1).unwrap(), 1, "the default: one engine");
        assert_eq!(count(2, 4).unwrap(), 2);
        assert_eq!(count(0, 4).unwrap(), 4, "0: one per rx queue");
        assert_eq!(count(0, 100).unwrap(), 64, "no more than QPN blocks");
        let e = count(3, 2).unwrap_err().to_string();
        assert!(
            e.contains("--queues 3") && e.contains("2 rx queue(s)"),
            "{e}"
        );
    }
}
