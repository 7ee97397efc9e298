//! How applications attach to `rocev2d`: the pieces both sides of an attachment share.
//!
//! An application connects to the daemon's control socket ([`proto`], framed by [`frame`],
//! descriptors passed beside the frames); its memory regions are memfds it shares with the
//! daemon ([`shm`]); work requests and completions cross in shared-memory rings ([`ring`]) of
//! [`record`]s, with wake-ups through eventfds ([`notify`]). The
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

use std::io;
use std::os::linux::net::SocketAddrExt as _;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// The control socket of the daemon serving `iface`: the abstract Unix socket
/// `@rocev2d/IFACE`. Abstract sockets belong to a network namespace, so daemons of two
/// namespaces whose interfaces share a name (`eth0` in containers) never collide, and an
/// application finds the daemon of its own namespace.
pub fn default_socket(iface: &str) -> PathBuf {
    PathBuf::from(format!("@rocev2d/{iface}"))
}

/// The abstract name of a control socket written `@NAME`; `None` for a filesystem path.
fn abstract_name(path: &Path) -> Option<&[u8]> {
    use std::os::unix::ffi::OsStrExt as _;
    path.as_os_str().as_bytes().strip_prefix(b"@")
}

/// The address of control socket `path`: `@NAME` is the abstract socket NAME (of this network
/// namespace), anything else a filesystem path.
fn address(path: &Path) -> io::Result<SocketAddr> {
    match abstract_name(path) {
        Some(name) => SocketAddr::from_abstract_name(name),
        None => SocketAddr::from_pathname(path),
    }
}

/// Whether control socket `path` is an abstract socket (`@NAME`): it has no file, no file
/// mode, and is reachable from its network namespace only.
pub fn is_abstract(path: &Path) -> bool {
    abstract_name(path).is_some()
}

/// Connects to control socket `path` (`@NAME` or a filesystem path).
///
/// # Errors
/// As `connect(2)`: nobody listens there, or the path is too long.
pub fn connect(path: &Path) -> io::Result<UnixStream> {
    UnixStream::connect_addr(&address(path)?)
}

/// Listens on control socket `path` (`@NAME` or a filesystem path).
///
/// # Errors
/// As `bind(2)`: the address is taken, or the path is too long.
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    UnixListener::bind_addr(&address(path)?)
}

/// The control socket of the `rocev2d` serving `iface` in this network namespace on its
/// default socket, if one answers there: an in-process open of `iface` would compete with
/// the daemon's steering program for the interface's frames.
pub fn serving(iface: &str) -> Option<PathBuf> {
    let path = default_socket(iface);
    connect(&path).ok().map(|_| path)
}

/// The network namespace of the calling thread, as a descriptor: an application hands it to
/// the daemon with its Hello, and the daemon compares it with its own ([`same_netns`]).
///
/// # Errors
/// `/proc/thread-self/ns/net` could not be opened.
pub fn netns() -> io::Result<std::os::fd::OwnedFd> {
    std::fs::File::open("/proc/thread-self/ns/net").map(Into::into)
}

/// Whether namespace descriptor `ns` names the calling thread's network namespace. Unlike the
/// peer's PID, a descriptor cannot come to name another process's namespace by PID reuse.
///
/// # Errors
/// `fstat` of `ns` or of the calling thread's namespace failed.
pub fn same_netns(ns: std::os::fd::BorrowedFd<'_>) -> io::Result<bool> {
    let key = |st: rustix::fs::Stat| (st.st_dev, st.st_ino);
    let theirs = key(rustix::fs::fstat(ns)?);
    let ours = key(rustix::fs::fstat(netns()?)?);
    Ok(theirs == ours)
}

/// The default control sockets that daemons listen on in this network namespace (from
/// `/proc/self/net/unix`, which lists this namespace's sockets), sorted.
///
/// # Errors
/// `/proc/self/net/unix` could not be read.
pub fn daemons() -> io::Result<Vec<PathBuf>> {
    /// `__SO_ACCEPTCON`: the socket listens.
    const LISTENING: u32 = 1 << 16;
    let table = std::fs::read_to_string("/proc/self/net/unix")?;
    let prefix = default_socket("");
    let prefix = prefix.to_string_lossy();
    let mut found: Vec<PathBuf> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let flags = u32::from_str_radix(cols.get(3)?, 16).ok()?;
            let path = cols.get(7)?;
            (flags & LISTENING != 0 && path.starts_with(&*prefix)).then(|| PathBuf::from(path))
        })
        .collect();
    found.sort();
    found.dedup();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abstract_and_filesystem_sockets_connect_and_the_probe_sees_a_listener() {
        let iface = format!("probe{}", std::process::id());
        assert_eq!(serving(&iface), None);
        let l = bind(&default_socket(&iface)).unwrap();
        assert!(is_abstract(&default_socket(&iface)));
        assert_eq!(serving(&iface), Some(default_socket(&iface)));
        assert!(daemons().unwrap().contains(&default_socket(&iface)));
        // A second daemon for the same interface in this namespace is refused.
        assert_eq!(
            bind(&default_socket(&iface)).unwrap_err().kind(),
            io::ErrorKind::AddrInUse
        );
        drop(l);
        assert_eq!(serving(&iface), None);
        assert!(!daemons().unwrap().contains(&default_socket(&iface)));
        let file = std::env::temp_dir().join(format!("rocev2-ipc-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&file);
        let l = bind(&file).unwrap();
        assert!(!is_abstract(&file));
        assert!(file.exists());
        connect(&file).unwrap();
        drop(l);
        std::fs::remove_file(&file).unwrap();
    }

    #[test]
    fn a_threads_namespace_is_its_own_and_no_other_file_is() {
        use std::os::fd::AsFd as _;
        assert!(same_netns(netns().unwrap().as_fd()).unwrap());
        let other = std::fs::File::open("/proc/self/ns/ipc").unwrap();
        assert!(!same_netns(other.as_fd()).unwrap());
    }
}
