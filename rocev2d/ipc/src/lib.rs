//! How applications attach to `rocev2d`: the pieces both sides of an attachment share.
//!
//! An application connects to the daemon's control socket ([`proto`], framed by [`frame`],
//! descriptors passed beside the frames); its memory regions are memfds it shares with the
//! daemon ([`shm`]); work requests and completions cross in shared-memory rings ([`ring`]) of
//! [`record`]s, with wake-ups through a doorbell socket and eventfds ([`notify`]). The
//! connection manager runs in the daemon; its parameters and events cross as [`cm`] records.
//! docs/daemon.md draws the whole picture.
//!
//! Deviations: none.

pub mod cm;
pub mod frame;
pub mod notify;
pub mod proto;
pub mod record;
pub mod ring;
pub mod shm;

use std::path::PathBuf;

/// The control socket of the daemon serving `iface`.
pub fn default_socket(iface: &str) -> PathBuf {
    PathBuf::from(format!("/run/rocev2d/{iface}.sock"))
}
