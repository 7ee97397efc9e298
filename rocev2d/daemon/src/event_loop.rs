//! `rocev2d run`: serve one interface until SIGINT or SIGTERM, as the host's RoCE device.
//!
//! This thread owns the datapath, the engine and every attached application's objects
//! ([`rocev2d::host::Host`]). Its loop is [`rocev2_datapath::Driver`]'s `poll`/`wait` pair plus
//! a pass over the applications' rings, with more descriptors in the wait set: a self-pipe
//! written by the signal handler (signal-hook), so a signal ends the wait at once even in a
//! long sleep; the eventfd the control plane ([`crate::control`]) signals when it forwards a
//! request; the metrics listener; and every attachment's doorbell, so a posted request wakes
//! it. Shutdown: stop polling, log the final counters, remove the socket file; attached
//! applications see their connection close.
//!
//! Deviations: none.

use crate::control::{self, Cmd};
use crate::metrics::Metrics;
use anyhow::{Context as _, bail};
use rocev2_core::Endpoint;
use rocev2_core::cm::CmConfig;
use rocev2_core::endpoint::GsiConfig;
use rocev2_datapath::entropy::os_seed;
use rocev2_datapath::host::HostMemory;
use rocev2_datapath::iface::node_guid;
use rocev2_datapath::{Datapath, Driver, DriverConfig, Interface, auto, neigh};
use rocev2_ipc::notify::EventFd;
use rocev2_ipc::proto::{ErrorKind, Request, Response};
use rocev2d::config::Config;
use rocev2d::host::Host;
use rocev2d::mac;
use rocev2d::stats::{self, Identity};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
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
    let opened = auto::open(&iface, cfg.mode, &cfg.options)?;
    let id = Identity {
        iface: name.to_string(),
        datapath: opened.datapath.name().to_string(),
        reason: opened.reason.clone(),
        started: std::time::Instant::now(),
    };
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
    let mut ep = Endpoint::new(os_seed().context("reading /dev/urandom")?);
    ep.set_receiver_cc(cfg.cc.receiver());
    // QP1 and the CM, shared out to the attached applications by `Host`.
    ep.enable_cm(GsiConfig {
        mac: iface.mac,
        cm: CmConfig {
            local_ca_guid: node_guid(iface.mac),
        },
        seed: os_seed().context("reading /dev/urandom")?,
    });
    let mut host = Host::new(iface.clone(), cfg.limits, cfg.cc.qp_config());
    let mut driver = Driver::new(
        ep,
        HostMemory::default(),
        opened.datapath,
        driver_config(cfg),
    );
    let wake = Arc::new(EventFd::new().context("eventfd")?);
    let (tx, rx) = std::sync::mpsc::channel();
    let mut uids = cfg.control.allow_uids.clone();
    uids.push(rustix::process::geteuid().as_raw());
    let gate = Arc::new(control::GateCounters::default());
    control::spawn(
        listener,
        iface.clone(),
        control::Access {
            uids,
            group: cfg.control.group,
        },
        control::Link::new(
            tx,
            wake.clone(),
            Arc::clone(&gate),
            rocev2d::closer::Closer::start().context("starting the closing thread")?,
        ),
    )?;
    tracing::info!(
        iface = name,
        mac = %mac(iface.mac),
        mtu = iface.mtu,
        gids = ?iface.gids(),
        socket = %path.display(),
        wait = %cfg.wait,
        "serving; SIGINT or SIGTERM stops"
    );
    // Printed on stdout for scripts and tests that wait for readiness.
    println!("rocev2d: serving {name} with datapath {}", id.datapath);
    let mut metrics = match cfg.metrics {
        Some(addr) => {
            let m = Metrics::bind(addr).with_context(|| format!("metrics on {addr}"))?;
            tracing::info!(addr = %m.local_addr()?, "serving Prometheus metrics at /metrics");
            Some(m)
        }
        None => None,
    };
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
                        };
                        let _ = reply.send((welcome, Vec::new()));
                    }
                    Request::Stats => {
                        let snap = snapshot(&id, &driver, &host, &gate);
                        let json = serde_json::to_string(&snap).unwrap_or_default();
                        let _ = reply.send((Response::Stats(json), Vec::new()));
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
        let mut fds = vec![sig_rx.as_fd(), wake.as_fd()];
        let fixed = fds.len();
        if let Some(m) = &metrics {
            fds.extend(m.fds());
        }
        let metric_fds = fds.len() - fixed;
        fds.extend(host.doorbells());
        let ready = driver.wait(&fds)?;
        drop(fds);
        host.set_asleep(false);
        if ready.first().copied().unwrap_or(false) {
            break;
        }
        if ready.iter().skip(fixed + metric_fds).any(|r| *r) {
            host.clear_doorbells();
        }
        if ready.get(1).copied().unwrap_or(false) {
            wake.clear();
        }
        if let Some(m) = &mut metrics
            && ready.iter().skip(fixed).take(metric_fds).any(|r| *r)
        {
            m.serve(|| stats::render_prometheus(&snapshot(&id, &driver, &host, &gate)));
        }
    }
    let snap = snapshot(&id, &driver, &host, &gate);
    tracing::info!(
        rx_packets = snap.packets.get("rx_packets").copied().unwrap_or(0),
        tx_packets = snap.packets.get("tx_packets").copied().unwrap_or(0),
        drops = snap.drops.values().sum::<u64>(),
        "stopped by signal"
    );
    println!("rocev2d: stopped");
    Ok(())
}

/// The counters snapshot with the attached applications.
fn snapshot(
    id: &Identity,
    driver: &HostDriver,
    host: &Host,
    gate: &control::GateCounters,
) -> stats::Snapshot {
    let mut snap = stats::snapshot(
        id,
        &driver.ep,
        rocev2_datapath::clock::now(),
        &driver.datapath_stats(),
    );
    snap.apps = host.snapshot();
    snap.host = host.counters();
    let read = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    snap.host.refused_users = read(&gate.refused_users);
    snap.host.refused_busy = read(&gate.refused_busy);
    snap.host.hello_timeouts = read(&gate.hello_timeouts);
    snap
}
