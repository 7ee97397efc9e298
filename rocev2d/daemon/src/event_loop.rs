//! `rocev2d run`: serve one interface until SIGINT or SIGTERM.
//!
//! The loop is [`rocev2_datapath::Driver`]'s `poll`/`wait` pair with two more descriptors in
//! the wait set: the stats socket (a connection gets one JSON snapshot, [`rocev2d::stats`])
//! and a self-pipe written by the signal handler (signal-hook), so a signal ends the wait at
//! once even in a long sleep. Shutdown: stop polling, log the final counters, remove the socket
//! file. Applications run their QPs through the verbs API (`rocev2`), which drives an endpoint
//! of its own inside the application's process; until applications can attach to the daemon,
//! it creates no QP of its own: it receives, counts every frame by drop reason, and answers
//! nothing, which is already what an RoCE device without QPs does.
//!
//! Deviations: none.

use crate::metrics::Metrics;
use anyhow::{Context as _, bail};
use rocev2_core::Endpoint;
use rocev2_core::mr::VecMemory;
use rocev2_datapath::entropy::os_seed;
use rocev2_datapath::{Driver, DriverConfig, Interface, auto};
use rocev2d::config::{self, Config};
use rocev2d::mac;
use rocev2d::stats::{self, Identity};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// The driver settings a configuration asks for.
pub fn driver_config(cfg: &Config) -> DriverConfig {
    DriverConfig {
        rx_batch: cfg.rx_batch,
        tx_batch: cfg.tx_batch,
        wait: cfg.wait,
        ..DriverConfig::default()
    }
}

/// Binds the stats socket, replacing a stale file no daemon answers on.
fn bind_stats(path: &Path) -> anyhow::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            bail!(
                "{} is served by another running rocev2d; stop it or choose another --stats-socket",
                path.display()
            );
        }
        std::fs::remove_file(path).with_context(|| format!("removing stale {}", path.display()))?;
    }
    let l = UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Removes the socket file when the loop ends, however it ends.
struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
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
        .unwrap_or_else(|| config::default_stats_socket(name));
    let listener = bind_stats(&path)?;
    let _cleanup = SocketFile(path.clone());
    let (sig_rx, sig_tx) = UnixStream::pair()?;
    sig_rx.set_nonblocking(true)?;
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::low_level::pipe::register(sig, sig_tx.try_clone()?)?;
    }
    let mut ep = Endpoint::new(os_seed().context("reading /dev/urandom")?);
    ep.set_receiver_cc(cfg.cc.receiver());
    let mut driver = Driver::new(ep, VecMemory::new(), opened.datapath, driver_config(cfg));
    tracing::info!(
        iface = name,
        mac = %mac(iface.mac),
        mtu = iface.mtu,
        gids = ?iface.gids(),
        stats = %path.display(),
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
    loop {
        driver.poll()?;
        let mut fds = vec![listener.as_fd(), sig_rx.as_fd()];
        if let Some(m) = &metrics {
            fds.extend(m.fds());
        }
        let ready = driver.wait(&fds)?;
        drop(fds);
        if ready.get(1).copied().unwrap_or(false) {
            break;
        }
        let snap = || {
            stats::snapshot(
                &id,
                &driver.ep,
                rocev2_datapath::clock::now(),
                &driver.datapath_stats(),
            )
        };
        if ready.first().copied().unwrap_or(false) {
            while let Ok((mut client, _)) = listener.accept() {
                if let Err(e) = stats::send(&mut client, &snap()) {
                    tracing::debug!(error = %e, "stats client went away");
                }
            }
        }
        if let Some(m) = &mut metrics {
            if ready.iter().skip(2).any(|r| *r) {
                m.serve(|| stats::render_prometheus(&snap()));
            }
        }
    }
    let snap = stats::snapshot(
        &id,
        &driver.ep,
        rocev2_datapath::clock::now(),
        &driver.datapath_stats(),
    );
    tracing::info!(
        rx_packets = snap.packets.get("rx_packets").copied().unwrap_or(0),
        tx_packets = snap.packets.get("tx_packets").copied().unwrap_or(0),
        drops = snap.drops.values().sum::<u64>(),
        "stopped by signal"
    );
    println!("rocev2d: stopped");
    Ok(())
}
