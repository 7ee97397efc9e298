//! The control socket: applications attach here, and `rocev2d stats` asks here.
//!
//! A tokio runtime on a thread of its own accepts connections and runs one task per
//! connection: it checks the peer's credentials (SO_PEERCRED: root, the daemon's user, or a
//! user of `[control] allow_uids`) before reading anything, and refuses the connection when
//! [`MAX_UNGREETED`] others have not said hello yet; it then expects, within [`HELLO_WITHIN`],
//! [`Request::Hello`] with this build's protocol version (or [`Request::Stats`] from an
//! observer, answered once without attaching), then places the application on an engine
//! shard ([`Placement`]: the one with the fewest attachments) and forwards each of its
//! requests as a [`Cmd`] to that shard's datapath thread, which owns the shard's engine and
//! answers through a oneshot channel. A datapath thread is woken by an eventfd it waits on
//! beside its datapath, so a request costs it no polling. `rocev2d stats` (and the metrics
//! endpoint) get one snapshot from every shard and merge them ([`rocev2d::stats::merge`]). Resolving a peer's MAC
//! can take seconds (ARP): the task does it on tokio's blocking pool before forwarding a
//! connect (of a QP, or of a CM connection), so the data path never waits for a neighbour.
//!
//! When a connection ends, however the application ended, the task tells the datapath thread
//! to detach it ([`Cmd::Detach`]).
//!
//! Deviations: none.

use rocev2_core::wire::gid::gid_to_ip;
use rocev2_datapath::{Interface, neigh};
use rocev2_ipc::frame::{self, Decoder};
use rocev2_ipc::notify::EventFd;
use rocev2_ipc::proto::{Destination, ErrorKind, Request, Response, VERSION};
use rocev2d::closer::Closer;
use rocev2d::host::{Creds, Refusal};
use rocev2d::stats::{self, Snapshot};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::time::Duration;
use tokio::io::Interest;
use tokio::net::UnixStream;
use tokio::sync::oneshot;

/// What the control plane asks the datapath thread.
#[derive(Debug)]
pub enum Cmd {
    /// Open an attachment; answered with its id and the application's doorbell.
    Attach {
        /// Who.
        creds: Creds,
        /// A duplicate of the connection, to shut down if the attachment misbehaves.
        conn: OwnedFd,
        /// The answer: the attachment's id and the application's doorbell, or the refusal.
        reply: oneshot::Sender<Result<(u32, OwnedFd), Refusal>>,
    },
    /// One request of an attachment.
    Request {
        /// The attachment.
        app: u32,
        /// The request.
        req: Request,
        /// Its descriptors.
        fds: Vec<OwnedFd>,
        /// The answer.
        reply: oneshot::Sender<(Response, Vec<OwnedFd>)>,
    },
    /// The connection ended.
    Detach {
        /// The attachment.
        app: u32,
    },
    /// The shard's counters, QPs and attachments, for `rocev2d stats` and the metrics.
    Snapshot {
        /// The answer.
        reply: oneshot::Sender<Snapshot>,
    },
}

/// How long a connection may take to say hello (or ask for stats) before it is closed.
pub const HELLO_WITHIN: Duration = Duration::from_secs(5);

/// Connections that have not said hello yet, at most: another is refused at once, so a local
/// user holding connections open cannot exhaust the daemon's descriptors or tasks.
pub const MAX_UNGREETED: usize = 64;

/// Connections of one user that have not said hello yet, at most: one user holding its share
/// open leaves room for the others.
pub const MAX_UNGREETED_PER_USER: usize = 16;

/// The connections that have not said hello yet, by user.
#[derive(Debug, Default)]
struct Ungreeted(std::sync::Mutex<std::collections::HashMap<u32, usize>>);

/// One connection's place among the [`Ungreeted`], given back when dropped.
struct Greeting {
    set: Arc<Ungreeted>,
    uid: u32,
}

impl Ungreeted {
    /// A place for a connection of `uid`, unless [`MAX_UNGREETED`] or
    /// [`MAX_UNGREETED_PER_USER`] are taken.
    fn enter(self: &Arc<Self>, uid: u32) -> Option<Greeting> {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let total: usize = m.values().sum();
        let mine = m.get(&uid).copied().unwrap_or(0);
        if total >= MAX_UNGREETED || mine >= MAX_UNGREETED_PER_USER {
            return None;
        }
        m.insert(uid, mine + 1);
        Some(Greeting {
            set: Arc::clone(self),
            uid,
        })
    }
}

impl Drop for Greeting {
    fn drop(&mut self) {
        let mut m = self.set.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.uid);
            }
        }
    }
}

/// What the control plane refused before anything reached the datapath thread (`rocev2d
/// stats`).
#[derive(Debug, Default)]
pub struct GateCounters {
    /// Connections of a user that may not attach.
    pub refused_users: AtomicU64,
    /// Connections refused because [`MAX_UNGREETED`] others (or [`MAX_UNGREETED_PER_USER`] of
    /// the same user) had not said hello.
    pub refused_busy: AtomicU64,
    /// Connections closed for not saying hello within [`HELLO_WITHIN`].
    pub hello_timeouts: AtomicU64,
}

/// Which engine shard an attaching application goes to: the one with the fewest live
/// attachments, the lowest-numbered among equals. An application's objects all live on its
/// shard, so this spreads applications, not QPs: one application with many QPs stays on one
/// core.
#[derive(Debug)]
pub struct Placement(std::sync::Mutex<Vec<usize>>);

impl Placement {
    /// No attachments yet on `shards` shards.
    pub fn new(shards: usize) -> Placement {
        Placement(std::sync::Mutex::new(vec![0; shards.max(1)]))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<usize>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Picks the shard of a new attachment and counts it there.
    pub fn enter(&self) -> usize {
        let mut live = self.lock();
        let (k, _) = live
            .iter()
            .enumerate()
            .min_by_key(|(k, n)| (**n, *k))
            .unwrap_or((0, &0));
        if let Some(n) = live.get_mut(k) {
            *n += 1;
        }
        k
    }

    /// An attachment of shard `k` ended (or was refused).
    pub fn leave(&self, k: usize) {
        if let Some(n) = self.lock().get_mut(k) {
            *n = n.saturating_sub(1);
        }
    }
}

/// An application's place on its shard, given back however its connection ends.
struct Placed<'a> {
    placement: &'a Placement,
    shard: usize,
}

impl Drop for Placed<'_> {
    fn drop(&mut self) {
        self.placement.leave(self.shard);
    }
}

/// One shard's datapath thread as the control plane reaches it: its command channel and the
/// eventfd it waits on.
#[derive(Debug)]
pub struct ShardLink {
    tx: Sender<Cmd>,
    wake: Arc<EventFd>,
}

impl ShardLink {
    /// Joins a command channel and the eventfd its receiver waits on.
    pub fn new(tx: Sender<Cmd>, wake: Arc<EventFd>) -> ShardLink {
        ShardLink { tx, wake }
    }
}

/// The datapath threads' side of the control plane.
#[derive(Debug, Clone)]
pub struct Link {
    shards: Arc<[ShardLink]>,
    placement: Arc<Placement>,
    gate: Arc<GateCounters>,
    closer: Closer,
}

impl Link {
    /// Joins the shards' datapath threads (shard k at index k); the control plane counts its
    /// own refusals in `gate` and closes applications' descriptors on `closer`.
    pub fn new(shards: Vec<ShardLink>, gate: Arc<GateCounters>, closer: Closer) -> Link {
        Link {
            placement: Arc::new(Placement::new(shards.len())),
            shards: shards.into(),
            gate,
            closer,
        }
    }

    fn send(&self, shard: usize, cmd: Cmd) -> bool {
        let Some(s) = self.shards.get(shard) else {
            return false;
        };
        let ok = s.tx.send(cmd).is_ok();
        s.wake.signal();
        ok
    }

    /// Asks every shard for its snapshot; the answers, shard k's at index k (`None`: the
    /// daemon is stopping).
    fn ask_snapshots(&self) -> Option<Vec<oneshot::Receiver<Snapshot>>> {
        (0..self.shards.len())
            .map(|k| {
                let (reply, answer) = oneshot::channel();
                self.send(k, Cmd::Snapshot { reply }).then_some(answer)
            })
            .collect()
    }

    /// The host's document from the shards' answers, with the control plane's own counters.
    fn merged(&self, parts: Vec<Snapshot>) -> Option<Snapshot> {
        let mut snap = stats::merge(parts)?;
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        snap.host.refused_users = read(&self.gate.refused_users);
        snap.host.refused_busy = read(&self.gate.refused_busy);
        snap.host.hello_timeouts = read(&self.gate.hello_timeouts);
        Some(snap)
    }

    /// The host's snapshot: every shard's, merged.
    pub async fn snapshot(&self) -> Option<Snapshot> {
        let mut parts = Vec::new();
        for a in self.ask_snapshots()? {
            parts.push(a.await.ok()?);
        }
        self.merged(parts)
    }

    /// [`Link::snapshot`] for a thread outside the runtime (the metrics endpoint's).
    pub fn snapshot_blocking(&self) -> Option<Snapshot> {
        let parts = self
            .ask_snapshots()?
            .into_iter()
            .map(|a| a.blocking_recv().ok())
            .collect::<Option<Vec<_>>>()?;
        self.merged(parts)
    }
}

/// Who may attach besides root.
#[derive(Debug, Clone)]
pub struct Access {
    /// The daemon's effective user and `[control] allow_uids`.
    pub uids: Vec<u32>,
    /// `[control] group`: peers whose primary group it is.
    pub group: Option<u32>,
}

impl Access {
    fn allows(&self, uid: u32, gid: u32) -> bool {
        uid == 0 || self.uids.contains(&uid) || self.group == Some(gid)
    }
}

/// Serves `listener` on a new thread until the process exits.
///
/// # Errors
/// The runtime could not be built.
pub fn spawn(
    listener: std::os::unix::net::UnixListener,
    iface: Interface,
    access: Access,
    link: Link,
) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("rocev2d-control".into())
        .spawn(move || {
            rt.block_on(async move {
                let listener = match tokio::net::UnixListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!(error = %e, "control socket");
                        return;
                    }
                };
                let iface = Arc::new(iface);
                let ungreeted = Arc::new(Ungreeted::default());
                loop {
                    match listener.accept().await {
                        Ok((stream, _)) => {
                            let (iface, access, link) =
                                (iface.clone(), access.clone(), link.clone());
                            let ungreeted = Arc::clone(&ungreeted);
                            tokio::spawn(async move {
                                if let Err(e) =
                                    serve(stream, &iface, &access, &link, &ungreeted).await
                                {
                                    tracing::debug!(error = %e, "control connection ended");
                                }
                            });
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "accepting on the control socket");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
            });
        })?;
    Ok(())
}

async fn read_frame(s: &UnixStream, dec: &mut Decoder) -> std::io::Result<(Request, Vec<OwnedFd>)> {
    loop {
        match dec.next_frame::<Request>() {
            Ok(Some(f)) => return Ok(f),
            Ok(None) => {}
            Err(e) => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
        }
        if dec.queued_fds() > 2 * frame::MAX_FDS {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "descriptors without frames",
            ));
        }
        s.readable().await?;
        match s.try_io(Interest::READABLE, || frame::recv(s, dec)) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
}

async fn write_frame(s: &UnixStream, msg: &Response, fds: &[OwnedFd]) -> std::io::Result<()> {
    let bytes = frame::encode(msg, fds.len());
    let borrowed: Vec<_> = fds.iter().map(AsFd::as_fd).collect();
    let mut sent = 0;
    while sent < bytes.len() {
        s.writable().await?;
        let with = if sent == 0 { &borrowed[..] } else { &[][..] };
        match s.try_io(Interest::WRITABLE, || frame::send(s, &bytes[sent..], with)) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn refusal(kind: ErrorKind, message: impl Into<String>) -> Response {
    Response::Error {
        kind,
        message: message.into(),
    }
}

/// One connection, start to end; whatever descriptors it sent and nothing claimed are closed
/// on the closing thread ([`Closer`], counted per connection). At the end the connection is
/// shut down and what is still queued in it read, so no descriptor in flight is closed by the
/// socket's own last close (on this thread, or on the datapath thread that holds a duplicate).
async fn serve(
    s: UnixStream,
    iface: &Interface,
    access: &Access,
    link: &Link,
    ungreeted: &Arc<Ungreeted>,
) -> std::io::Result<()> {
    let link = &Link {
        closer: link.closer.for_connection(),
        ..link.clone()
    };
    let mut dec = Decoder::default();
    let result = greet(&s, &mut dec, iface, access, link, ungreeted).await;
    let _ = rustix::net::shutdown(&s, rustix::net::Shutdown::Both);
    loop {
        link.closer.close(dec.take_fds());
        dec = Decoder::default();
        // Non-blocking: after the shutdown, what is queued, then the end.
        match frame::recv(&s, &mut dec) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
    result
}

async fn greet(
    s: &UnixStream,
    dec: &mut Decoder,
    iface: &Interface,
    access: &Access,
    link: &Link,
    ungreeted: &Arc<Ungreeted>,
) -> std::io::Result<()> {
    // tokio reads SO_PEERCRED into a plain struct: a peer of another PID namespace, which the
    // kernel reports as PID 0, is PID 0 here too.
    let cred = s.peer_cred()?;
    let creds = Creds {
        pid: cred.pid().and_then(|p| u32::try_from(p).ok()).unwrap_or(0),
        uid: cred.uid(),
    };
    // Before reading anything: a user who may not attach costs one write.
    if !access.allows(creds.uid, cred.gid()) {
        link.gate.refused_users.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            pid = creds.pid,
            uid = creds.uid,
            "refused a control connection"
        );
        let m = format!(
            "user {} may not use this rocev2d: add it to [control] allow_uids",
            creds.uid
        );
        return write_frame(s, &refusal(ErrorKind::Invalid, m), &[]).await;
    }
    let Some(greeting) = ungreeted.enter(creds.uid) else {
        link.gate.refused_busy.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            uid = creds.uid,
            "refused a control connection: too many not greeted yet"
        );
        return Ok(());
    };
    let first = tokio::time::timeout(HELLO_WITHIN, read_frame(s, dec)).await;
    let Ok(first) = first else {
        link.gate.hello_timeouts.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            pid = creds.pid,
            "closed a control connection that said nothing"
        );
        return Ok(());
    };
    let (hello, hello_fds) = first?;
    drop(greeting);
    // The Hello's descriptor is only looked at (below); the closing thread closes it.
    let hello_fds = link.closer.hold(hello_fds);
    match hello {
        // An observer (`rocev2d stats`): one answer, no attachment.
        Request::Stats => return answer_stats(s, link).await,
        Request::Hello { version } if version == VERSION => {}
        Request::Hello { version } => {
            let m = format!(
                "protocol version {version}; this rocev2d speaks {VERSION}: rebuild the application against the same rocev2"
            );
            return write_frame(s, &refusal(ErrorKind::Invalid, m), &[]).await;
        }
        _ => {
            return write_frame(
                s,
                &refusal(ErrorKind::Invalid, "the first request must be Hello"),
                &[],
            )
            .await;
        }
    }
    if let Err(m) = same_netns(hello_fds.fds()) {
        tracing::warn!(pid = creds.pid, "refused an attachment: {m}");
        return write_frame(s, &refusal(ErrorKind::Invalid, m), &[]).await;
    }
    let (reply, answer) = oneshot::channel();
    let conn = s.as_fd().try_clone_to_owned()?;
    let placed = Placed {
        placement: &link.placement,
        shard: link.placement.enter(),
    };
    let shard = placed.shard;
    if !link.send(shard, Cmd::Attach { creds, conn, reply }) {
        return Ok(());
    }
    let Ok(attached) = answer.await else {
        return Ok(());
    };
    let (app, bell) = match attached {
        Ok(a) => a,
        Err(Refusal(kind, m)) => return write_frame(s, &refusal(kind, m), &[]).await,
    };
    tracing::info!(
        app,
        shard,
        pid = creds.pid,
        uid = creds.uid,
        "application attached"
    );
    let to = To { link, shard, app };
    let result = attachment(s, dec, iface, &to, bell).await;
    link.send(shard, Cmd::Detach { app });
    drop(placed);
    result
}

/// Answers `rocev2d stats` (or an application's [`Request::Stats`]): the host's document, in
/// parts when longer than a frame.
async fn answer_stats(s: &UnixStream, link: &Link) -> std::io::Result<()> {
    let Some(snap) = link.snapshot().await else {
        return Ok(());
    };
    let json = serde_json::to_string(&snap).unwrap_or_default();
    for p in &rocev2_ipc::proto::stats_responses(json) {
        write_frame(s, p, &[]).await?;
    }
    Ok(())
}

/// Where an attachment's requests go: its shard, and its (host-wide) attachment id.
struct To<'a> {
    link: &'a Link,
    shard: usize,
    app: u32,
}

/// `Ok` when a Hello's descriptor names this daemon's network namespace; otherwise why not.
/// An application of another namespace sees other interfaces, addresses and neighbours than
/// the daemon it would attach to (a filesystem socket can be reached across namespaces).
fn same_netns(fds: &[OwnedFd]) -> Result<(), String> {
    let [ns] = fds else {
        return Err("Hello carries one descriptor, the application's network namespace".into());
    };
    match rocev2_ipc::same_netns(ns.as_fd()) {
        Ok(true) => Ok(()),
        Ok(false) => Err(
            "this application is in another network namespace than this rocev2d: run it in the daemon's namespace, or a rocev2d in its own".into(),
        ),
        Err(e) => Err(format!("reading the application's network namespace: {e}")),
    }
}

async fn attachment(
    s: &UnixStream,
    dec: &mut Decoder,
    iface: &Interface,
    to: &To<'_>,
    bell: OwnedFd,
) -> std::io::Result<()> {
    let link = to.link;
    // The datapath thread fills the welcome's variable parts through a request of its own.
    let welcome = forward(to, Request::Hello { version: VERSION }, Vec::new()).await;
    let Some((welcome, _)) = welcome else {
        return Ok(());
    };
    write_frame(s, &welcome, &[bell]).await?;
    loop {
        link.closer.below_limit().await;
        let (req, fds) = read_frame(s, dec).await?;
        if let Request::Stats = req {
            link.closer.close(fds);
            answer_stats(s, link).await?;
            continue;
        }
        // The datapath thread gets duplicates: the originals, closed on the closing thread once
        // it answered (or the request was refused here), are the last references to whatever
        // it did not keep.
        let held = link.closer.hold(fds);
        let resolved = match req {
            Request::Connect { qpn, mut spec } if spec.mac.is_none() => {
                resolve(iface, spec.ip, spec.resolve_timeout_ms)
                    .await?
                    .map(|mac| {
                        spec.mac = Some(mac);
                        Request::Connect { qpn, spec }
                    })
            }
            Request::CmConnect {
                qpn,
                spec,
                mac: None,
                resolve_timeout_ms,
            } => resolve(iface, gid_to_ip(spec.peer_gid), resolve_timeout_ms)
                .await?
                .map(|mac| Request::CmConnect {
                    qpn,
                    spec,
                    mac: Some(mac),
                    resolve_timeout_ms,
                }),
            Request::CmSidrRequest {
                spec,
                mac: None,
                resolve_timeout_ms,
            } => resolve(iface, gid_to_ip(spec.peer_gid), resolve_timeout_ms)
                .await?
                .map(|mac| Request::CmSidrRequest {
                    spec,
                    mac: Some(mac),
                    resolve_timeout_ms,
                }),
            Request::CreateAh {
                ip,
                mac: None,
                dscp,
                resolve_timeout_ms,
            } => resolve(iface, ip, resolve_timeout_ms)
                .await?
                .map(|mac| Request::CreateAh {
                    ip,
                    mac: Some(mac),
                    dscp,
                    resolve_timeout_ms,
                }),
            Request::ModifyQp { qpn, mut spec } => match spec.dest {
                Some(d) if d.mac.is_none() => resolve(iface, d.ip, d.resolve_timeout_ms)
                    .await?
                    .map(|mac| {
                        spec.dest = Some(Destination {
                            mac: Some(mac),
                            ..d
                        });
                        Request::ModifyQp { qpn, spec }
                    }),
                _ => Ok(Request::ModifyQp { qpn, spec }),
            },
            other => Ok(other),
        };
        let req = match resolved {
            Ok(req) => req,
            Err(e) => {
                write_frame(s, &refusal(ErrorKind::Path, e.to_string()), &[]).await?;
                continue;
            }
        };
        let Some((response, fds)) = forward(to, req, held.dup()?).await else {
            return Ok(());
        };
        write_frame(s, &response, &fds).await?;
    }
}

/// The MAC of neighbour `ip`, resolved off the runtime's threads (the kernel may take up to
/// `timeout_ms`, bounded at 30 s): the control plane's step before a request that needs a
/// next hop (connect, a modify to RTR, CM connect, address handle) reaches the engine. `Err` when the task
/// failed; `Ok(Err)` when the neighbour could not be resolved.
async fn resolve(
    iface: &Interface,
    ip: std::net::IpAddr,
    timeout_ms: u32,
) -> std::io::Result<Result<[u8; 6], rocev2_datapath::Error>> {
    let iface = iface.clone();
    let wait = Duration::from_millis(u64::from(timeout_ms.min(30_000)));
    tokio::task::spawn_blocking(move || neigh::resolve(&iface, ip, wait))
        .await
        .map_err(std::io::Error::other)
}

/// Hands a request to the attachment's datapath thread and waits for its answer (`None`: it
/// has stopped).
async fn forward(to: &To<'_>, req: Request, fds: Vec<OwnedFd>) -> Option<(Response, Vec<OwnedFd>)> {
    let (reply, answer) = oneshot::channel();
    if !to.link.send(
        to.shard,
        Cmd::Request {
            app: to.app,
            req,
            fds,
            reply,
        },
    ) {
        return None;
    }
    answer.await.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_takes_the_shard_with_fewest_attachments_lowest_first() {
        let p = Placement::new(3);
        let first: Vec<usize> = (0..3).map(|_| p.enter()).collect();
        assert_eq!(first, [0, 1, 2], "one each, in order");
        assert_eq!(p.enter(), 0, "all even: the lowest");
        p.leave(1);
        p.leave(1);
        assert_eq!(p.enter(), 1, "the emptiest, whichever");
        assert_eq!(p.enter(), 1, "still the emptiest");
        assert_eq!(p.enter(), 2);
        assert_eq!(*p.lock(), [2, 2, 2]);
        p.leave(7);
        assert_eq!(*p.lock(), [2, 2, 2], "an unknown shard is ignored");
        let one = Placement::new(1);
        assert_eq!((one.enter(), one.enter()), (0, 0), "one shard takes all");
        let held = Placed {
            placement: &one,
            shard: 0,
        };
        drop(held);
        assert_eq!(*one.lock(), [1], "given back when dropped");
    }

    #[test]
    fn ungreeted_connections_are_capped_per_user_and_in_all() {
        let set = Arc::new(Ungreeted::default());
        let mine: Vec<Greeting> = (0..MAX_UNGREETED_PER_USER)
            .map(|_| set.enter(7).expect("within the user's share"))
            .collect();
        assert!(set.enter(7).is_none(), "the user's share is taken");
        let others: Vec<Greeting> = (0..MAX_UNGREETED - MAX_UNGREETED_PER_USER)
            .map(|i| set.enter(100 + i as u32 % 8).expect("room for other users"))
            .collect();
        assert!(set.enter(999).is_none(), "all taken");
        drop(mine);
        assert!(
            set.enter(7).is_some(),
            "given back when the connections greet or go"
        );
        drop(others);
        assert!(set.0.lock().unwrap().is_empty());
    }
}
