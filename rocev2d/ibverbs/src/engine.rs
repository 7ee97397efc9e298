//! The device behind every context of one interface: a [`rocev2::Device`], opened by the
//! first `ibv_open_device` as `ROCEV2_DATAPATH` says and shared until the last context closes.
//!
//! It is the same device a Rust application opens, so the library runs in-process or attached
//! to `rocev2d` with the same code: `ROCEV2_DATAPATH=attach` attaches (and fails when no
//! daemon serves the interface); `auto` (the default), `xdp`, `packet` and `udp` open an
//! engine in this process, except that an interface a `rocev2d` serves is always attached to
//! (its steering program takes the interface's frames, so an engine here would never see its
//! peer's).
//!
//! In-process, the device's progress thread answers peers whatever the program does (the
//! passive side of `ib_read_bw` makes no call at all); a program that busy-polls drives the
//! engine itself from `ibv_poll_cq` ([`rocev2::Device::poll_cq_driving`]) while the thread
//! backs off, and hands it back before sleeping in `ibv_get_cq_event`. Attached, the daemon
//! drives; the program's memory is reached in place through its `/proc/self/mem`.

use rocev2::{DatapathKind, Device};
use std::sync::{Mutex, MutexGuard};

/// Where `ROCEV2_DATAPATH` picks the datapath: `xdp`, `packet`, `udp`, `auto` (default) or
/// `attach`.
pub const DATAPATH_ENV: &str = "ROCEV2_DATAPATH";

/// The device of every context of one interface.
pub type Engine = Device;

/// Opens interface `name` as `ROCEV2_DATAPATH` asks; with `ROCEV2_VERBOSE` set, says which
/// datapath (or daemon) and why on stderr.
///
/// # Errors
/// A bad `ROCEV2_DATAPATH`, no such interface, the datapath's failure to open, or no daemon to
/// attach to; as text.
pub fn open(name: &str) -> Result<Engine, String> {
    let wanted = std::env::var(DATAPATH_ENV).unwrap_or_default();
    let dev = match wanted.as_str() {
        "attach" => Device::attach(name),
        "" => Device::open(name, DatapathKind::Auto),
        s => {
            let kind: DatapathKind = s
                .parse()
                .map_err(|e| format!("{DATAPATH_ENV}={s}: {e} (or `attach`)"))?;
            Device::open(name, kind)
        }
    }
    .map_err(|e| crate::report(&e))?;
    if std::env::var_os("ROCEV2_VERBOSE").is_some() {
        eprintln!("rocev2_ibverbs: {name}: {}", dev.describe());
    }
    Ok(dev)
}

/// Locks a mutex, taking over the data of one a panicking holder left (every extern fn
/// catches panics, so the state stays usable).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
