//! Applications attached to `rocev2d run` (docs/daemon.md): one daemon per namespace of a pair,
//! the example tools with `--attach` as its applications.
//!
//! - Two applications on each side at once (a verified WRITE stream and a checked ping-pong).
//! - SIGKILL: an application killed mid-transfer leaves the other running, and 100
//!   attach/kill cycles leave the daemon's descriptors, mappings and memory where they were.
//! - The daemon killed under a running application: the application fails at once with the
//!   daemon's death as the reason; a restarted daemon serves new applications.
//! - Garbage on the control socket: the connection is closed, the daemon serves on.
//! - Descriptors whose last close blocks (lingering TCP sockets that cannot drain), sent with
//!   requests: the daemon's closing thread waits on the first while other requests are
//!   answered and a verified stream completes; the sender's connection is read only until
//!   `MAX_CLOSING` of its descriptors wait to be closed.
//! - A hostile application at every per-application limit at once beside a verified stream:
//!   refusals name the limits, the stream completes, the daemon's descriptors stay bounded.
//! - The connection manager through the daemons: `rping --attach` against `rping --attach`,
//!   with another application listening on another port of the same daemon at once (a second
//!   listen on a taken port refused); an application killed with a connected CM ID: its peer
//!   gets the daemon's DREQ, and the port is free again.
//! - UD through the daemons: a datagram with the wrong Q_Key dropped and counted, a ping and a
//!   reply addressed from its completion (GRH area and source QPN checked), a send through a
//!   destroyed address handle completing in error.
//! - MP-RDMA through the daemons: a multipath QP on each side, a WRITE between them, and each
//!   application reads its QP's per-VP counters from its daemon (`Device::mp_snapshot`).
//! - A shared receive queue through the daemons: two QPs of one application take the Sends of
//!   two peers from one SRQ, the limit event fires, an SRQ in use is not destroyed (the
//!   scenario the API's in-process test runs, `rocev2d/verbs/tests/scenarios/srq.rs`).
//! - An MRA through the daemons: the passive application answers a REQ with an MRA, then
//!   accepts, and both ends are established; another application cannot send an MRA for it,
//!   and a second one after the accept is refused by the engine.
//! - Service ID Resolution through the daemons: an application resolves another's UD service
//!   (SIDR_REQ with the CMA header, SIDR_REP with its QPN and rdma_cm's Q_Key) and a datagram
//!   sent there arrives; a third application cannot answer the request; a service nobody
//!   listens on is answered "not supported".
//! - Sharded daemons (`--queues 2` over AF_XDP, and AF_PACKET for the streams, a veth of two
//!   queues per end): applications
//!   are placed on the shard with the fewest attachments, as stats show (each application and
//!   QP with its shard); two verified WRITE streams run at once through both shards; an RDMA
//!   CM connection whose REQ reaches the shard that does not listen is forwarded to the one
//!   that does (and its REP back), a Service ID held on one shard is refused on the other,
//!   and a connection between applications of the same shard works beside it.
//! - Applications of one host talking over its own address (`--queues 2`, AF_XDP and
//!   AF_PACKET): a verified WRITE stream and `rping` between the two shards, every frame looped
//!   back inside the daemon and forwarded to its shard, none reaching the peer host.
//! - Dart on both daemons: applications connected through `rocev2::connect` with its default
//!   configuration offer each other N and the look-ahead (the daemons name their scheme when
//!   an application attaches), and a sender's look-ahead comes back as N in the ACKs;
//!   `rc_pingpong --rext` offers them in its exchange, and a plain client still completes.
//! - Dart through a sharded receiver (`--queues 2`, AF_PACKET, a star of two senders): the
//!   senders' streams reach applications on the receiver's two shards, and a sender is told
//!   N = 2, which only the shards' exchange of DASR's sender sets can count.

mod common;
#[path = "../../verbs/tests/scenarios/sidr.rs"]
mod sidr;
#[path = "../../verbs/tests/scenarios/srq.rs"]
mod srq;
use common::*;
use rocev2_datapath::clock::cpu_time;
use rocev2_testbed::topology::{LinkParams, Topology};
use rocev2_testbed::{Process, Testbed, exec};
use std::io::Read;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// This process attached to the daemon of `host` in test `test`, from a thread in `host`'s
/// network namespace: the daemon refuses an application of another namespace.
fn attach(tb: &Testbed, test: &str, host: &str) -> rocev2::Device {
    in_netns(tb, host, || {
        rocev2::Device::attach_socket(socket(test, host).as_ref()).expect("attach")
    })
}

/// `f`'s result, run on a thread in `host`'s network namespace.
fn in_netns<T: Send>(tb: &Testbed, host: &str, f: impl FnOnce() -> T + Send) -> T {
    let ns = format!("/run/netns/{}", tb.node(host).expect("host").netns);
    std::thread::scope(|s| {
        s.spawn(|| {
            let file = std::fs::File::open(&ns).expect("namespace file");
            rustix::thread::move_into_link_name_space(
                std::os::fd::AsFd::as_fd(&file),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .expect("setns");
            f()
        })
        .join()
        .expect("attaching thread")
    })
}

/// The control socket of the daemon of `host` in test `test`.
fn socket(test: &str, host: &str) -> String {
    format!("/tmp/rocev2d-{test}-{}-{host}.sock", std::process::id())
}

/// Removes a test's socket files (of its hosts) when it ends, however it ends: a daemon killed
/// with SIGKILL leaves its file behind.
struct Sockets(&'static str, &'static [&'static str]);

/// The hosts of a pair testbed.
const PAIR: &[&str] = &["h0", "h1"];

impl Drop for Sockets {
    fn drop(&mut self) {
        for host in self.1 {
            let _ = std::fs::remove_file(socket(self.0, host));
        }
    }
}

/// Most tests' set-up: a pair testbed with a daemon on each host. Fields drop in order: the
/// daemons, the testbed, then the socket files.
struct Rig {
    d: [Process; 2],
    tb: Testbed,
    test: &'static str,
    _sockets: Sockets,
}

impl Rig {
    /// `None` when not root (the test then skips, saying so).
    fn new(test: &'static str) -> Option<Rig> {
        if !need_root(test) {
            return None;
        }
        Some(Rig::with(test, pair(), &["--datapath", "packet"]))
    }

    /// Daemons of two engine shards over `datapath`, on a pair whose veth ends have two queues.
    fn sharded(test: &'static str, datapath: &str) -> Option<Rig> {
        if !need_root(test) {
            return None;
        }
        let tb = Testbed::up_topology(&Topology::Pair {
            link: LinkParams::new().mtu(9000).queues(2),
        })
        .expect("pair testbed of two queues");
        Some(Rig::with(
            test,
            tb,
            &["--datapath", datapath, "--queues", "2"],
        ))
    }

    /// A daemon on each host of `tb`, with these arguments.
    fn with(test: &'static str, tb: Testbed, args: &[&str]) -> Rig {
        let _sockets = Sockets(test, PAIR);
        let d = [
            daemon_on(&tb, test, "h0", args),
            daemon_on(&tb, test, "h1", args),
        ];
        Rig {
            d,
            tb,
            test,
            _sockets,
        }
    }

    /// This process attached to `host`'s daemon.
    fn attach(&self, host: &str) -> rocev2::Device {
        attach(&self.tb, self.test, host)
    }
}

fn daemon(tb: &Testbed, test: &str, host: &str) -> Process {
    daemon_with(tb, test, host, &[])
}

/// [`daemon`] with more arguments.
fn daemon_with(tb: &Testbed, test: &str, host: &str, more: &[&str]) -> Process {
    daemon_on(tb, test, host, &[&["--datapath", "packet"], more].concat())
}

/// The daemon of `host` with these arguments besides its interface and socket (a datapath
/// among them).
fn daemon_on(tb: &Testbed, test: &str, host: &str, args: &[&str]) -> Process {
    let mut cmd = tb.command(host, BIN).expect("command");
    cmd.args([
        "run",
        "--iface",
        &ifname(tb, host),
        "--socket",
        &socket(test, host),
    ])
    .args(args);
    let mut d = Process::spawn(&mut cmd).expect("spawn daemon");
    d.wait_for_line(|l| l.starts_with("rocev2d: serving"), SETUP)
        .expect("daemon serving");
    d
}

/// `tool --attach` in `host`, as server (no peer) or client of `peer`'s IPv4 address.
fn tool(
    tb: &Testbed,
    test: &str,
    host: &str,
    tool: &str,
    args: &[&str],
    peer: Option<&str>,
) -> Process {
    let mut cmd = tb.command(host, example(tool)).expect("command");
    cmd.args([
        "-d",
        &ifname(tb, host),
        "--attach",
        "--socket",
        &socket(test, host),
    ])
    .args(args);
    if let Some(p) = peer {
        cmd.arg(tb.node(p).expect("peer").ipv4().expect("v4").to_string());
    }
    Process::spawn(&mut cmd).expect("spawn tool")
}

fn server(tb: &Testbed, test: &str, bin: &str, args: &[&str], port: u16) -> Process {
    let p = tool(tb, test, "h1", bin, args, None);
    exec::wait_for_port(
        &tb.node("h1").expect("h1").netns,
        exec::Proto::Tcp,
        port,
        SETUP,
    )
    .expect("server listening");
    p
}

fn stats(test: &str, host: &str) -> serde_json::Value {
    let out = exec::run(
        std::process::Command::new(BIN).args(["stats", "--json", "--socket", &socket(test, host)]),
        SETUP,
    )
    .expect("stats");
    assert!(out.status.success(), "{}", out.stderr);
    serde_json::from_str(&out.stdout).expect("stats JSON")
}

/// Waits until the daemon lists no application (detaching runs on its own loop).
fn wait_detached(test: &str, host: &str) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let s = stats(test, host);
        if s["apps"].as_array().is_some_and(Vec::is_empty) || start.elapsed() > SETUP {
            return s;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn attach_two_applications_share_each_daemon() {
    let test = "attach_two_apps";
    let Some(rig) = Rig::new(test) else {
        return;
    };
    let tb = &rig.tb;
    let wb = ["--verify", "-s", "65536", "-n", "256", "-p", "18515"];
    let pp = ["-c", "--lat", "-s", "4096", "-n", "500", "-p", "18516"];
    let wb_server = server(tb, test, "write_bw", &wb, 18515);
    let pp_server = server(tb, test, "rc_pingpong", &pp, 18516);
    let wb_client = tool(tb, test, "h0", "write_bw", &wb, Some("h1"));
    let pp_client = tool(tb, test, "h0", "rc_pingpong", &pp, Some("h1"));
    let limit = Duration::from_secs(120);
    for p in [wb_client, pp_client, wb_server, pp_server] {
        let out = p.finish(limit).expect("tool succeeds");
        if out.cmd.contains("write_bw") {
            assert!(out.stdout.contains("verify: OK"), "{}", out.stdout);
        } else {
            assert!(out.stdout.contains("500 iters in"), "{}", out.stdout);
            // A lost wake-up costs the sleeper its whole 100 ms poll bound, every round trip;
            // no load makes a median round trip of a veth pair take half of that.
            let median: f64 = out
                .stdout
                .lines()
                .find_map(|l| l.strip_prefix("round trip: median "))
                .and_then(|r| r.split_whitespace().next()?.parse().ok())
                .expect("median");
            assert!(
                median < 50_000.0,
                "median round trip {median} µs: {}",
                out.stdout
            );
        }
    }
    for host in ["h0", "h1"] {
        let s = wait_detached(test, host);
        assert_eq!(s["host"]["attached"], 2, "{s}");
        assert_eq!(s["host"]["detached"], 2, "{s}");
        assert_eq!(s["host"]["closed_corrupt"], 0, "{s}");
        assert_eq!(s["qps"].as_object().map(|q| q.len()), Some(0), "{s}");
    }
}

/// Descriptors, mappings and resident kilobytes of process `pid`.
fn footprint(pid: u32) -> (usize, usize, u64) {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fds")
        .count();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS");
    (fds, maps.lines().count(), rss)
}

#[test]
fn attach_sigkill_frees_everything_and_spares_the_others() {
    let test = "attach_sigkill";
    let Some(rig) = Rig::new(test) else {
        return;
    };
    let tb = &rig.tb;
    // A long stream, killed mid-transfer, beside a verified one that must finish.
    let long = ["-s", "65536", "-n", "1000000", "-p", "18515"];
    let checked = ["--verify", "-s", "65536", "-n", "512", "-p", "18516"];
    let mut long_server = server(tb, test, "write_bw", &long, 18515);
    let checked_server = server(tb, test, "write_bw", &checked, 18516);
    let mut long_client = tool(tb, test, "h0", "write_bw", &long, Some("h1"));
    std::thread::sleep(Duration::from_millis(300));
    let checked_client = tool(tb, test, "h0", "write_bw", &checked, Some("h1"));
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        long_client.is_running(),
        "the long stream ended early: {}",
        long_client.stderr()
    );
    long_client.kill();
    for p in [checked_client, checked_server] {
        let out = p
            .finish(Duration::from_secs(120))
            .expect("the other application goes on");
        assert!(out.stdout.contains("verify: OK"), "{}", out.stdout);
    }
    long_server.kill();
    let s = wait_detached(test, "h0");
    assert_eq!(s["qps"].as_object().map(|q| q.len()), Some(0), "{s}");

    // 100 attach/kill cycles on h1: an application with a region, a CQ and a QP, waiting for
    // its peer, killed.
    let cycle = || {
        let mut p = tool(
            tb,
            test,
            "h1",
            "write_bw",
            &["-s", "65536", "-n", "16", "-p", "18517"],
            None,
        );
        p.wait_for_line(|l| l.starts_with("waiting for a client"), SETUP)
            .expect("attached and waiting");
        p.kill();
    };
    cycle();
    wait_detached(test, "h1");
    let before = footprint(rig.d[1].id());
    for _ in 0..100 {
        cycle();
    }
    let s = wait_detached(test, "h1");
    let after = footprint(rig.d[1].id());
    assert!(s["host"]["attached"].as_u64() >= Some(103), "{s}");
    assert_eq!(s["host"]["attached"], s["host"]["detached"], "{s}");
    assert_eq!(after.0, before.0, "descriptors before and after 100 cycles");
    assert_eq!(after.1, before.1, "mappings before and after 100 cycles");
    // Every cycle maps a 1 MiB region and rings; none may stay. Allocator slack is allowed.
    assert!(
        after.2 <= before.2 + 8 * 1024,
        "RSS {} KiB after, {} KiB before",
        after.2,
        before.2
    );
}

/// One application pushes every per-application bound at once — regions (zero-length ones too)
/// to `max_mrs`, QPs until their rings fill `max_ring_bytes`, listens to `max_listens`, sends
/// on a QP whose CQ it never reads — while a verified stream runs beside it through the same
/// daemons: each refusal names its limit, the stream's data arrives intact, the daemon holds
/// no more descriptors than the limits allow, and all of it comes back at detach.
#[test]
fn attach_a_hostile_application_meets_its_limits_and_a_stream_beside_it_completes() {
    let test = "attach_hostile";
    if !need_root(test) {
        return;
    }
    let _sockets = Sockets(test, PAIR);
    let tb = pair();
    let (max_mrs, max_listens, max_ring_bytes) = (200usize, 8usize, 4u64 << 20);
    let config = std::env::temp_dir().join(format!("{test}-{}.toml", std::process::id()));
    std::fs::write(
        &config,
        format!(
            "[limits]\nmax_mrs = {max_mrs}\nmax_listens = {max_listens}\n\
             max_ring_bytes = {max_ring_bytes}\n"
        ),
    )
    .unwrap();
    let more = ["--config", config.to_str().unwrap()];
    let d = [
        daemon_with(&tb, test, "h0", &more),
        daemon_with(&tb, test, "h1", &more),
    ];
    let _ = std::fs::remove_file(&config);
    // A first stream touches the datapath's own buffers, so the daemon's resident memory
    // afterwards is its idle size under traffic.
    let warm = ["-s", "65536", "-n", "1024", "-p", "18514"];
    let warm_server = server(&tb, test, "write_bw", &warm, 18514);
    let warm_client = tool(&tb, test, "h0", "write_bw", &warm, Some("h1"));
    for p in [warm_client, warm_server] {
        p.finish(Duration::from_secs(120))
            .expect("the first stream");
    }
    wait_detached(test, "h0");
    let idle = footprint(d[0].id());
    let wb = ["--verify", "-s", "65536", "-n", "8192", "-p", "18515"];
    let wb_server = server(&tb, test, "write_bw", &wb, 18515);
    let wb_client = tool(&tb, test, "h0", "write_bw", &wb, Some("h1"));
    // The stream's own objects made first, so what the daemon gains next is the attacker's.
    let start = Instant::now();
    while stats(test, "h0")["apps"][0]["qps"]
        .as_array()
        .is_none_or(Vec::is_empty)
    {
        assert!(start.elapsed() < SETUP, "the stream never made its QP");
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = footprint(d[0].id());

    let dev = attach(&tb, test, "h0");
    let refusal = |e: rocev2::Error, key: &str| {
        let text = e.to_string();
        assert!(text.contains(key), "refused for another reason: {text}");
    };
    let pd = dev.alloc_pd().expect("pd");
    let mut mrs = Vec::new();
    let err = loop {
        let len = if mrs.len() % 2 == 0 { 0 } else { 4096 };
        match dev.register(pd, vec![0u8; len], rocev2::AccessFlags::LOCAL_WRITE) {
            Ok(mr) => mrs.push(mr),
            Err(e) => break e,
        }
        assert!(mrs.len() <= max_mrs, "more regions than max_mrs");
    };
    assert_eq!(mrs.len(), max_mrs);
    refusal(err, "max_mrs");
    let cq = dev.create_cq(64).expect("cq");
    let mut qps = Vec::new();
    let err = loop {
        let mut cfg = rocev2::QpConfig::new(pd.id(), cq.id(), cq.id());
        (cfg.max_send_wr, cfg.max_recv_wr) = (1024, 1024);
        match dev.create_qp(cfg) {
            Ok(qp) => qps.push(qp),
            Err(e) => break e,
        }
        assert!(qps.len() <= 16, "rings past max_ring_bytes");
    };
    refusal(err, "max_ring_bytes");
    let mut ports = 0..;
    let err = loop {
        let port = 20000 + ports.next().unwrap();
        let id = rocev2::ServiceId::rdma_cm(rocev2::PortSpace::TCP, port);
        if let Err(e) = dev.cm_listen(id) {
            break e;
        }
        assert!(
            port < 20000 + max_listens as u16,
            "listens past max_listens"
        );
    };
    refusal(err, "max_listens");
    // Sends on a QP in INIT: each one refused into a CQ nobody reads, until the rings are
    // full and the post itself fails; the daemon queues no more than the CQ holds.
    let mr = &mrs[1];
    let mut posted = 0;
    while posted < 100_000 {
        let wr = rocev2::SendWr::new(posted, rocev2::SendOp::Send).sge(mr.sge(0, 64).unwrap());
        if dev.post_send(qps[0], wr).is_err() {
            break;
        }
        posted += 1;
    }
    assert!(posted < 100_000, "the send ring never filled");
    let during = footprint(d[0].id());
    // Per region at most one descriptor, per QP and CQ two, and the attachment's own few.
    let allowed = max_mrs + 2 * (qps.len() + 1) + 8;
    assert!(
        during.0 <= before.0 + allowed,
        "{} descriptors during the attack, {} before, {allowed} allowed",
        during.0,
        before.0
    );

    // Resident memory: at most what the applications registered and their rings (the daemon
    // maps both and touches the stream's region as it sends), beyond its idle size under
    // traffic, and allocator slack.
    let apps = stats(test, "h0")["apps"].clone();
    let mapped: u64 = apps
        .as_array()
        .expect("apps")
        .iter()
        .map(|a| a["mr_bytes"].as_u64().unwrap() + a["ring_bytes"].as_u64().unwrap())
        .sum();
    assert!(
        during.2 <= idle.2 + mapped / 1024 + 16 * 1024,
        "RSS {} KiB during the attack, {} KiB idle, {} KiB mapped: {apps}",
        during.2,
        idle.2,
        mapped / 1024
    );
    for p in [wb_client, wb_server] {
        let out = p
            .finish(Duration::from_secs(120))
            .expect("the stream beside the attack");
        assert!(out.stdout.contains("verify: OK"), "{}", out.stdout);
    }
    let s = stats(test, "h0");
    assert!(s["host"]["refused_requests"].as_u64() >= Some(3), "{s}");
    drop((mrs, qps, cq, pd));
    drop(dev);
    let s = wait_detached(test, "h0");
    assert_eq!(s["qps"].as_object().map(|q| q.len()), Some(0), "{s}");
    let after = footprint(d[0].id());
    assert_eq!(after.0, idle.0, "descriptors after both detached");
    assert!(
        after.2 <= idle.2 + 16 * 1024,
        "RSS {} KiB after, {} KiB idle",
        after.2,
        idle.2
    );
}

#[test]
fn attach_daemon_death_fails_the_application_and_a_restart_serves_again() {
    let test = "attach_death";
    let Some(mut rig) = Rig::new(test) else {
        return;
    };
    let tb = &rig.tb;
    let long = ["-s", "65536", "-n", "1000000", "-p", "18515"];
    let mut long_server = server(tb, test, "write_bw", &long, 18515);
    let mut client = tool(tb, test, "h0", "write_bw", &long, Some("h1"));
    std::thread::sleep(Duration::from_millis(300));
    assert!(client.is_running(), "{}", client.stderr());
    rig.d[0].kill();
    let killed = Instant::now();
    let out = client
        .wait(Duration::from_secs(20))
        .expect("the application exits");
    let took = killed.elapsed();
    assert!(!out.status.success(), "{}", out.stdout);
    assert!(
        out.stderr.contains("daemon closed the attachment"),
        "{}",
        out.stderr
    );
    // Bounded: the application learns of the death from its socket, not from a timeout.
    assert!(took < Duration::from_secs(10), "{took:?}");
    long_server.kill();
    // A new daemon on the same socket path (the dead one's file is stale) serves new
    // applications.
    let _d0 = daemon(tb, test, "h0");
    let short = ["--verify", "-s", "4096", "-n", "64", "-p", "18516"];
    let s = server(tb, test, "write_bw", &short, 18516);
    let c = tool(tb, test, "h0", "write_bw", &short, Some("h1"));
    assert!(
        c.finish(Duration::from_secs(60))
            .expect("client")
            .stdout
            .contains("verify: OK")
    );
    assert!(
        s.finish(Duration::from_secs(60))
            .expect("server")
            .stdout
            .contains("verify: OK")
    );
}

#[test]
fn attach_garbage_on_the_control_socket_closes_only_that_connection() {
    let test = "attach_garbage";
    if !need_root(test) {
        return;
    }
    let _sockets = Sockets(test, PAIR);
    let tb = pair();
    let _d = daemon(&tb, test, "h0");
    let path = socket(test, "h0");
    let hello = {
        let mut v = Vec::new();
        // Request::Hello { version } in postcard (variant 0, a one-byte varint), with one
        // descriptor: the network namespace.
        let body = [0u8, u8::try_from(rocev2_ipc::proto::VERSION).unwrap()];
        v.extend_from_slice(&(body.len() as u32).to_le_bytes());
        v.push(1);
        v.extend_from_slice(&body);
        v
    };
    let cases: Vec<Vec<u8>> = vec![
        // Not a frame at all: a length past the limit.
        vec![0xff; 64],
        // A frame whose body is no request.
        vec![3, 0, 0, 0, 0, 0xee, 0xee, 0xee],
        // A frame announcing descriptors that never come.
        [&[2u8, 0, 0, 0, 3, 0, 1][..]].concat(),
        // Hello, then a request naming objects this connection does not own, then garbage.
        [&hello[..], &[2, 0, 0, 0, 0, 11, 7][..], &[0xff; 16][..]].concat(),
    ];
    // From h0's namespace, whose descriptor goes with the Hello.
    in_netns(&tb, "h0", || {
        let ns = rocev2_ipc::netns().expect("namespace");
        for bytes in cases {
            let mut s = UnixStream::connect(&path).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let fds = if bytes.starts_with(&hello) {
                vec![std::os::fd::AsFd::as_fd(&ns)]
            } else {
                Vec::new()
            };
            rocev2_ipc::frame::send_all(&s, &bytes, &fds).expect("write");
            let mut rest = Vec::new();
            // The daemon answers what it can and closes the connection: read to the end.
            let _ = s.read_to_end(&mut rest);
        }
    });
    let snap = wait_detached(test, "h0");
    assert_eq!(snap["host"]["attached"], 1, "{snap}");
    assert_eq!(snap["host"]["detached"], 1, "{snap}");
    assert!(
        snap["host"]["refused_requests"].as_u64() >= Some(1),
        "{snap}"
    );
}

#[test]
fn attach_descriptors_sent_with_requests_are_closed_and_not_kept() {
    let test = "attach_fds";
    if !need_root(test) {
        return;
    }
    let _sockets = Sockets(test, PAIR);
    let tb = pair();
    let _d = daemon(&tb, test, "h0");
    let path = socket(test, "h0");
    let frame = |body: &[u8], nfds: u8| {
        let mut v = (body.len() as u32).to_le_bytes().to_vec();
        v.push(nfds);
        v.extend_from_slice(body);
        v
    };
    // Request::Hello { version } (variant 0) and Request::AllocPd (variant 2) in postcard.
    let hello = frame(&[0, u8::try_from(rocev2_ipc::proto::VERSION).unwrap()], 1);
    // Sockets whose other ends tell when the daemon closed them.
    let (ours, theirs): (Vec<UnixStream>, Vec<UnixStream>) =
        (0..3).map(|_| UnixStream::pair().unwrap()).unzip();
    in_netns(&tb, "h0", || {
        let ns = rocev2_ipc::netns().expect("namespace");
        let s = UnixStream::connect(&path).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        rocev2_ipc::frame::send_all(&s, &hello, &[std::os::fd::AsFd::as_fd(&ns)]).unwrap();
        // AllocPd, which takes no descriptor, with three.
        let fds: Vec<_> = theirs.iter().map(std::os::fd::AsFd::as_fd).collect();
        rocev2_ipc::frame::send_all(&s, &frame(&[2], 3), &fds).unwrap();
        let mut dec = rocev2_ipc::frame::Decoder::default();
        let mut answers = 0;
        while answers < 2 {
            match dec.next_frame::<rocev2_ipc::proto::Response>().unwrap() {
                Some((r, _)) => {
                    answers += 1;
                    if answers == 2 {
                        assert!(matches!(r, rocev2_ipc::proto::Response::Pd(_)), "{r:?}");
                    }
                }
                None => {
                    assert!(rocev2_ipc::frame::recv(&s, &mut dec).unwrap() > 0);
                }
            }
        }
        drop(theirs);
        // The daemon kept none of the three: each one's peer sees the stream end.
        for mut o in ours {
            o.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut rest = Vec::new();
            assert_eq!(o.read_to_end(&mut rest).expect("closed by the daemon"), 0);
        }
    });
}

/// A TCP connection over `lo` whose receiver never reads, its sender's buffers full and its
/// linger 60 s: the last close of the sender (returned first) waits for a FIN that cannot
/// leave, up to a minute, as a hostile application's descriptor would make the daemon's wait.
fn stuck_tcp() -> (std::net::TcpStream, std::net::TcpStream) {
    use rustix::net::sockopt;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    sockopt::set_socket_recv_buffer_size(&listener, 4096).expect("SO_RCVBUF");
    let sender = std::net::TcpStream::connect(listener.local_addr().unwrap()).expect("connect");
    let (receiver, _) = listener.accept().expect("accept");
    sockopt::set_socket_send_buffer_size(&sender, 4096).expect("SO_SNDBUF");
    sender.set_nonblocking(true).unwrap();
    let block = [0x5au8; 4096];
    loop {
        match std::io::Write::write(&mut &sender, &block) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("filling the connection: {e}"),
        }
    }
    sockopt::set_socket_linger(&sender, Some(Duration::from_secs(60))).expect("SO_LINGER");
    (sender, receiver)
}

/// The kernel stack of the daemon's thread named `name` (empty when it has none).
fn thread_stack(pid: u32, name: &str) -> String {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks");
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == name {
            return std::fs::read_to_string(t.path().join("stack")).unwrap_or_default();
        }
    }
    String::new()
}

#[test]
fn attach_descriptors_whose_last_close_blocks_stop_neither_requests_nor_traffic() {
    let test = "attach_linger";
    let Some(rig) = Rig::new(test) else {
        return;
    };
    let tb = &rig.tb;
    let pid = rig.d[0].id();
    let idle = footprint(pid).0;
    // More lingering connections than the daemon lets one connection queue for closing.
    let n = rocev2d::closer::MAX_CLOSING + 36;
    let (senders, receivers): (Vec<_>, Vec<_>) =
        in_netns(tb, "h0", || (0..n).map(|_| stuck_tcp()).unzip());
    // Request::Hello { version } (variant 0), then Request::AllocPd (variant 2), each carrying
    // a connection the daemon does not keep: its close is the last once ours are gone.
    let frame = |body: &[u8], nfds: u8| {
        let mut v = (body.len() as u32).to_le_bytes().to_vec();
        v.push(nfds);
        v.extend_from_slice(body);
        v
    };
    let hello = frame(&[0, u8::try_from(rocev2_ipc::proto::VERSION).unwrap()], 1);
    let control = in_netns(tb, "h0", || {
        let ns = rocev2_ipc::netns().expect("namespace");
        let s = UnixStream::connect(socket(test, "h0")).expect("connect");
        rocev2_ipc::frame::send_all(&s, &hello, &[std::os::fd::AsFd::as_fd(&ns)]).unwrap();
        for sender in &senders {
            let fd = std::os::fd::AsFd::as_fd(sender);
            rocev2_ipc::frame::send_all(&s, &frame(&[2], 1), &[fd]).unwrap();
        }
        s
    });
    drop(senders);
    // The daemon's closing thread comes to wait in the kernel for the first socket.
    let start = Instant::now();
    while !thread_stack(pid, "rocev2d-closer").contains("sk_stream_wait_close") {
        assert!(
            start.elapsed() < SETUP,
            "the closing thread never waited on a socket: {}",
            thread_stack(pid, "rocev2d-closer")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Answers to the attacker: the welcome, then one per request the daemon read.
    let mut dec = rocev2_ipc::frame::Decoder::default();
    let mut answers = 0;
    let mut read_answers = |wait: Duration| {
        control.set_read_timeout(Some(wait)).unwrap();
        loop {
            while dec
                .next_frame::<rocev2_ipc::proto::Response>()
                .unwrap()
                .is_some()
            {
                answers += 1;
            }
            match rocev2_ipc::frame::recv(&control, &mut dec) {
                Ok(0) => panic!("the daemon closed the attacker's connection"),
                Ok(_) => {}
                Err(_) => return answers,
            }
        }
    };
    // Meanwhile another application's requests are answered and a verified stream between
    // the daemons completes.
    let dev = rig.attach("h0");
    let pd = dev
        .alloc_pd()
        .expect("a request answered while closes block");
    let wb = ["--verify", "-s", "65536", "-n", "1024"];
    let wb_server = server(tb, test, "write_bw", &wb, 18515);
    let wb_client = tool(tb, test, "h0", "write_bw", &wb, Some("h1"));
    for p in [wb_client, wb_server] {
        let out = p
            .finish(Duration::from_secs(40))
            .expect("a stream while closes block");
        assert!(out.stdout.contains("verify: OK"), "{}", out.stdout);
    }
    // The attacker's connection was read only until its descriptors waiting to be closed
    // reached the bound; the rest of its requests wait in its socket, not in the daemon.
    let read = read_answers(Duration::from_secs(1)) - 1;
    assert!(
        read <= rocev2d::closer::MAX_CLOSING,
        "{read} requests with descriptors read while the first close blocked"
    );
    let during = footprint(pid).0;
    assert!(
        during <= idle + rocev2d::closer::MAX_CLOSING + 16,
        "{during} descriptors while closes block, {idle} idle"
    );
    assert!(
        thread_stack(pid, "rocev2d-closer").contains("sk_stream_wait_close"),
        "the close ended before the stream did (the test would prove nothing)"
    );
    // The receivers gone, the connections reset: the closes finish and the rest is read.
    drop(receivers);
    let start = Instant::now();
    while read_answers(Duration::from_millis(100)) < n + 1 {
        assert!(
            start.elapsed() < SETUP,
            "the attacker's requests never resumed"
        );
    }
    drop((pd, dev, control));
}

#[test]
fn attach_from_outside_the_daemons_pid_namespace_reads_pid_zero_and_works() {
    let test = "attach_pidns";
    if !need_root(test) {
        return;
    }
    let _sockets = Sockets(test, PAIR);
    let tb = pair();
    // The daemon in a PID namespace of its own, as in a container: this test's process is
    // outside it, so SO_PEERCRED gives the daemon PID 0 for it.
    let mut cmd = tb.command("h0", "unshare").expect("command");
    cmd.args(["--pid", "--fork", "--kill-child"])
        .arg(BIN)
        .args(["run", "--iface", &ifname(&tb, "h0"), "--datapath", "packet"])
        .args(["--socket", &socket(test, "h0")]);
    let mut d = Process::spawn(&mut cmd).expect("spawn daemon");
    d.wait_for_line(|l| l.starts_with("rocev2d: serving"), SETUP)
        .expect("daemon serving");
    let dev = attach(&tb, test, "h0");
    let pd = dev.alloc_pd().expect("the attachment works");
    let mr = dev.register(pd, vec![0u8; 4096], rocev2::AccessFlags::LOCAL_WRITE);
    assert!(mr.is_ok());
    let s = stats(test, "h0");
    assert_eq!(s["apps"][0]["pid"], 0, "{s}");
}

#[test]
fn attach_silent_connections_are_capped_and_closed_and_an_application_attaches_after() {
    let test = "attach_silent";
    if !need_root(test) {
        return;
    }
    let _sockets = Sockets(test, PAIR);
    let tb = pair();
    let _d = daemon(&tb, test, "h0");
    let path = socket(test, "h0");
    // One user's share of connections that never say hello.
    let silent: Vec<UnixStream> = (0..16)
        .map(|_| UnixStream::connect(&path).expect("connect"))
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    // One more of the same user is closed at once, before the daemon reads anything.
    let mut extra = UnixStream::connect(&path).expect("connect");
    extra
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let started = Instant::now();
    let mut rest = Vec::new();
    assert_eq!(
        extra.read_to_end(&mut rest).expect("closed, not timed out"),
        0
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused at once"
    );
    // The silent ones are closed by the daemon within its deadline (5 s).
    for mut s in silent {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        assert_eq!(s.read_to_end(&mut rest).expect("closed by the daemon"), 0);
    }
    let snap = stats(test, "h0");
    assert!(snap["host"]["refused_busy"].as_u64() >= Some(1), "{snap}");
    assert_eq!(snap["host"]["hello_timeouts"], 16, "{snap}");
    // The daemon serves on.
    let dev = attach(&tb, test, "h0");
    assert!(dev.alloc_pd().is_ok());
}

#[test]
fn attach_async_completion_sleeps_on_tokio_and_sees_the_daemon_die() {
    use rocev2::{
        AccessFlags, ConnectOptions, Device, Qpn, RecvWr, RemoteQp, SendOp, SendWr, WcOpcode,
    };
    let test = "attach_async";
    if !need_root(test) {
        return;
    }
    let _sockets = Sockets(test, PAIR);
    let tb = pair();
    let _d0 = daemon(&tb, test, "h0");
    let mut d1 = daemon(&tb, test, "h1");
    // The control sockets are files, reached from each daemon's namespace.
    let a = attach(&tb, test, "h0");
    let b = attach(&tb, test, "h1");
    let ip = |h: &str| std::net::IpAddr::V4(tb.node(h).expect("host").ipv4().expect("v4"));
    let side = |d: &Device| {
        let pd = d.alloc_pd().unwrap();
        let mr = d
            .register(pd, vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
            .unwrap();
        let cq = d.create_cq(16).unwrap();
        let qp = d.create_rc_qp(pd, cq, cq).unwrap();
        (mr, cq, qp)
    };
    let (mr_a, cq_a, qp_a) = side(&a);
    let (mr_b, cq_b, qp_b) = side(&b);
    let remote = |qp: rocev2::Qp, ip| RemoteQp {
        qpn: Qpn::new(qp.qpn().value()),
        psn: 0,
        ip,
        mac: None,
    };
    a.connect(qp_a, &remote(qp_b, ip("h1")), &ConnectOptions::default())
        .expect("connect a");
    b.connect(qp_b, &remote(qp_a, ip("h0")), &ConnectOptions::default())
        .expect("connect b");
    a.mr_guard(&mr_a).unwrap()[..5].copy_from_slice(b"async");
    b.post_recv(
        qp_b,
        RecvWr {
            wr_id: 7,
            sg_list: vec![mr_b.sge(0, 4096).unwrap()],
        },
    )
    .unwrap();
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(400));
        a.post_send(
            qp_a,
            SendWr::new(1, SendOp::Send).sge(mr_a.sge(0, 5).unwrap()),
        )
        .unwrap();
        let mut wcs = Vec::new();
        a.wait_cq(cq_a, &mut wcs, 1, Duration::from_secs(10))
            .unwrap();
        assert!(wcs[0].status.is_success(), "{:?}", wcs[0]);
        a
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (cpu0, wall0) = (Duration::from(cpu_time()), Instant::now());
    let wc = rt.block_on(b.next_completion(cq_b)).expect("completion");
    let (cpu, wall) = (Duration::from(cpu_time()) - cpu0, wall0.elapsed());
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.byte_len),
        (7, WcOpcode::Recv, 5),
        "{wc:?}"
    );
    assert_eq!(&b.mr_guard(&mr_b).unwrap()[..5], b"async");
    // Busy polling would have burnt the whole wait; sleeping on the eventfd burns almost none.
    assert!(wall >= Duration::from_millis(350), "{wall:?}");
    assert!(cpu < wall / 3, "{cpu:?} of CPU over {wall:?} of waiting");
    let a = sender.join().unwrap();
    // The blocking wait wakes on a completion too, not only at its 100 ms bound (a missed
    // wake-up costs that whole bound; a veth round trip takes a millisecond even loaded).
    b.post_recv(
        qp_b,
        RecvWr {
            wr_id: 8,
            sg_list: vec![mr_b.sge(0, 4096).unwrap()],
        },
    )
    .unwrap();
    a.post_send(
        qp_a,
        SendWr::new(2, SendOp::Send).sge(mr_a.sge(0, 5).unwrap()),
    )
    .unwrap();
    let mut wcs = Vec::new();
    let start = Instant::now();
    while b.poll_cq(cq_b, &mut wcs, 1) == 0 {
        b.wait(&[]).expect("wait");
    }
    assert_eq!(wcs[0].wr_id, 8);
    assert!(
        start.elapsed() < Duration::from_millis(90),
        "{:?}",
        start.elapsed()
    );
    // Two tasks await the same CQ: one waking does not take the ring's "asleep" flag away from
    // the other, so the second completion, sent later, still wakes its waiter.
    for id in [10, 11] {
        let wr = RecvWr {
            wr_id: id,
            sg_list: vec![mr_b.sge(0, 4096).unwrap()],
        };
        b.post_recv(qp_b, wr).unwrap();
    }
    let ids = rt.block_on(async {
        let wait = |d: Device| tokio::spawn(async move { d.next_completion(cq_b).await });
        let tasks = [wait(b.clone()), wait(b.clone())];
        for n in 0..2 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let wr = SendWr::new(20 + n, SendOp::Send).sge(mr_a.sge(0, 5).unwrap());
            a.post_send(qp_a, wr).unwrap();
        }
        let mut ids = Vec::new();
        for t in tasks {
            let wc = tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .expect("both waiters wake")
                .unwrap()
                .unwrap();
            ids.push(wc.wr_id);
        }
        ids.sort_unstable();
        ids
    });
    assert_eq!(ids, [10, 11]);
    // Waiting again, the daemon dies: the future ends with that error.
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        d1.kill();
    });
    let err = rt
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(10), b.next_completion(cq_b)).await
        })
        .expect("the future ends, not the timeout")
        .expect_err("no completion can come");
    assert!(matches!(err, rocev2::Error::DaemonGone), "{err}");
    killer.join().unwrap();
}

#[test]
fn attach_credentials_are_checked_whatever_the_socket_mode() {
    let test = "attach_creds";
    if !need_root(test) {
        return;
    }
    if !can_run_as_nobody(test, BIN.as_ref()) {
        return;
    }
    let _sockets = Sockets(test, PAIR);
    let tb = pair();
    let stats_as_nobody = |sock: &str| {
        std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN])
            .args(["stats", "--json", "--socket", sock])
            .output()
            .expect("stats as nobody")
    };
    // Nobody is refused, then allowed by user, then by the socket's group.
    for (allow, name) in [
        ("allow_uids = []", "h0"),
        ("allow_uids = [65534]", "h1"),
        ("group = 65534", "h0"),
    ] {
        let cfg = format!("/tmp/rocev2d-{test}-{}-{name}.toml", std::process::id());
        std::fs::write(&cfg, format!("[control]\nmode = 0o666\n{allow}\n")).unwrap();
        let mut cmd = tb.command(name, BIN).expect("command");
        let sock = socket(test, name);
        cmd.args([
            "run",
            "--iface",
            &ifname(&tb, name),
            "--datapath",
            "udp",
            "--socket",
            &sock,
        ])
        .args(["--config", &cfg]);
        let mut d = Process::spawn(&mut cmd).expect("spawn daemon");
        d.wait_for_line(|l| l.starts_with("rocev2d: serving"), SETUP)
            .expect("daemon serving");
        let out = stats_as_nobody(&sock);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if allow.starts_with("group") {
            use std::os::unix::fs::MetadataExt as _;
            assert_eq!(
                std::fs::metadata(&sock).unwrap().gid(),
                65534,
                "the socket's group"
            );
        }
        if allow == "allow_uids = []" {
            assert!(!out.status.success());
            assert!(
                stderr.contains("user 65534 may not use this rocev2d"),
                "{stderr}"
            );
        } else {
            assert!(out.status.success(), "{stderr}");
        }
        d.kill();
        let _ = std::fs::remove_file(&cfg);
    }
}

/// `rping --attach` in `host`: `-s` or `-c` towards `addr`, port `port`, plus `args`.
fn rping(tb: &Testbed, test: &str, host: &str, side: &str, addr: &str, args: &[&str]) -> Process {
    let mut cmd = tb.command(host, example("rping")).expect("command");
    cmd.args([side, "-a", addr, "--iface", &ifname(tb, host)])
        .args(["--attach", "--socket", &socket(test, host)])
        .args(args);
    Process::spawn(&mut cmd).expect("spawn rping")
}

/// `rping --attach` from h0 to `server` (listening on `port` of `h1`): five pings, each
/// checked (-V) and printed (-v), then both ends finished.
fn rping_five_pings(tb: &Testbed, test: &str, h1: &str, port: &str, server: Process) {
    rping_five_pings_from(tb, test, "h0", h1, port, server);
}

/// [`rping_five_pings`] with the client in `host`, to `addr`.
fn rping_five_pings_from(
    tb: &Testbed,
    test: &str,
    host: &str,
    addr: &str,
    port: &str,
    server: Process,
) {
    let client = rping(
        tb,
        test,
        host,
        "-c",
        addr,
        &["-p", port, "-C", "5", "-V", "-v"],
    );
    let out = client
        .finish(Duration::from_secs(60))
        .expect("rping client");
    let pings = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("ping data: rdma-ping-"));
    assert_eq!(pings.count(), 5, "{}", out.stdout);
    server
        .finish(Duration::from_secs(30))
        .expect("rping server");
}

/// A PD, a 4 KiB region, a CQ and an RC QP on `dev`.
fn cm_side(dev: &rocev2::Device) -> (rocev2::Mr, rocev2::Cq, rocev2::Qp) {
    let pd = dev.alloc_pd().expect("pd");
    let mr = dev
        .register(pd, vec![0u8; 4096], rocev2::AccessFlags::LOCAL_WRITE)
        .expect("mr");
    let cq = dev.create_cq(16).expect("cq");
    let qp = dev.create_rc_qp(pd, cq, cq).expect("qp");
    (mr, cq, qp)
}

/// `a` connects through the CM to `listener` (of `b`, listening at `to`) with private data
/// both ways, then Sends 14 bytes that `b` receives (compared): the connection's two ends,
/// and the listener.
fn cm_hello(
    a: &rocev2::Device,
    b: &rocev2::Device,
    listener: rdmacm_shim::cm::CmListener,
    to: std::net::SocketAddr,
) -> (
    rdmacm_shim::cm::CmId,
    rdmacm_shim::cm::CmId,
    rdmacm_shim::cm::CmListener,
) {
    use rdmacm_shim::cm::CmId;
    use rocev2::{RecvWr, SendOp, SendWr, WcOpcode};
    let (mr_a, cq_a, qp_a) = cm_side(a);
    let (mr_b, cq_b, qp_b) = cm_side(b);
    b.post_recv(
        qp_b,
        RecvWr {
            wr_id: 9,
            sg_list: vec![mr_b.sge(0, 4096).unwrap()],
        },
    )
    .unwrap();
    let accept = std::thread::spawn(move || {
        let got = listener.accept(qp_b, b"welcome", Duration::from_secs(20));
        (listener, got)
    });
    let id = CmId::connect(a, qp_a, to, b"hello", Duration::from_secs(20)).expect("connect");
    let (listener, got) = accept.join().unwrap();
    let (server_id, hello) = got.expect("accept");
    assert_eq!(&hello[..5], b"hello");
    assert_eq!(&id.peer_private_data()[..7], b"welcome");
    a.mr_guard(&mr_a).unwrap()[..14].copy_from_slice(b"attached CM ok");
    a.post_send(
        qp_a,
        SendWr::new(1, SendOp::Send).sge(mr_a.sge(0, 14).unwrap()),
    )
    .unwrap();
    let mut wcs = Vec::new();
    b.wait_cq(cq_b, &mut wcs, 1, Duration::from_secs(10))
        .expect("receive");
    assert_eq!(
        (wcs[0].wr_id, wcs[0].opcode, wcs[0].byte_len),
        (9, WcOpcode::Recv, 14)
    );
    assert_eq!(&b.mr_guard(&mr_b).unwrap()[..14], b"attached CM ok");
    wcs.clear();
    a.wait_cq(cq_a, &mut wcs, 1, Duration::from_secs(10))
        .expect("send completion");
    assert!(wcs[0].status.is_success(), "{:?}", wcs[0]);
    (id, server_id, listener)
}

fn refused_in_use(r: &Result<rdmacm_shim::cm::CmListener, rdmacm_shim::cm::CmApiError>) -> bool {
    matches!(
        r,
        Err(rdmacm_shim::cm::CmApiError::Device(
            rocev2::Error::Refused {
                kind: rocev2_ipc::proto::ErrorKind::InUse,
                ..
            }
        ))
    )
}

#[test]
fn attach_cm_rping_and_a_second_listener_through_two_daemons() {
    use rdmacm_shim::cm::CmListener;
    let test = "attach_cm_rping";
    let Some(rig) = Rig::new(test) else {
        return;
    };
    let tb = &rig.tb;
    let h1 = tb.node("h1").expect("h1").ipv4().expect("v4").to_string();
    let mut server = rping(tb, test, "h1", "-s", &h1, &["-p", "7174", "-C", "5", "-d"]);
    server
        .wait_for_line(|l| l.contains("rdma_listen"), SETUP)
        .expect("rping server listening");
    // This process attaches to both daemons: a second application on h1's, listening on
    // another port while rping listens on its own; the port rping holds is refused.
    let a = rig.attach("h0");
    let b = rig.attach("h1");
    let taken = CmListener::bind(&b, format!("{h1}:7174").parse().unwrap());
    assert!(refused_in_use(&taken), "{taken:?}");
    let listener = CmListener::bind(&b, format!("{h1}:7175").parse().unwrap()).expect("bind");
    let to = format!("{h1}:7175").parse().unwrap();
    let (id, server_id, _listener) = cm_hello(&a, &b, listener, to);
    // The connection runs at the largest path MTU the 9000-byte link carries, on both ends:
    // the REQ proposes the link's, not a fixed 1024.
    for host in PAIR {
        let s = stats(test, host);
        let qps = s["qps"].as_object().expect("qps");
        let rts: Vec<_> = qps.values().filter(|q| q["state"] == "rts").collect();
        assert!(
            !rts.is_empty() && rts.iter().all(|q| q["path_mtu"] == 4096),
            "{s}"
        );
    }
    // Meanwhile rping's own connection, through the same two daemons, with every ping
    // checked (-V) and printed (-v).
    rping_five_pings(tb, test, &h1, "7174", server);
    // Our connection is still up after rping's went; it ends with a DREQ/DREP.
    id.disconnect(Duration::from_secs(10)).expect("disconnect");
    server_id
        .wait_disconnect(Duration::from_secs(10))
        .expect("the passive side sees the disconnect");
}

#[test]
fn attach_cm_sigkilled_application_disconnects_its_peer_and_frees_its_port() {
    use rdmacm_shim::cm::{CmId, CmListener};

    let test = "attach_cm_kill";
    let Some(rig) = Rig::new(test) else {
        return;
    };
    let tb = &rig.tb;
    let h1 = tb.node("h1").expect("h1").ipv4().expect("v4").to_string();
    let mut server = rping(tb, test, "h1", "-s", &h1, &["-p", "7176", "-C", "1", "-d"]);
    server
        .wait_for_line(|l| l.contains("rdma_listen"), SETUP)
        .expect("rping server listening");
    // A client that speaks no rping: the server accepts, then waits for our advertisement.
    let a = rig.attach("h0");
    let (_mr, _cq, qp) = cm_side(&a);
    let to = format!("{h1}:7176").parse().unwrap();
    let id = CmId::connect(&a, qp, to, b"", Duration::from_secs(20)).expect("connect");
    server
        .wait_for_line(|l| l.contains("ESTABLISHED"), SETUP)
        .expect("rping server connected");
    server.kill();
    // h1's daemon tears the dead application's connection down with a DREQ.
    id.wait_disconnect(Duration::from_secs(15))
        .expect("the peer of a killed application sees a disconnect");
    let s = wait_detached(test, "h1");
    assert_eq!(s["host"]["cm_orphans_closed"], 1, "{s}");
    // Its port is free again.
    let b = rig.attach("h1");
    let again = CmListener::bind(&b, format!("{h1}:7176").parse().unwrap());
    assert!(again.is_ok(), "{again:?}");
}

/// rdmacm-shim's async calls on attached devices, with a blocking CM waiter on the passive
/// device all along (it waits for an event nobody sends): the accept and the disconnect are
/// awaited on one-thread runtimes while the daemon's CM eventfd is shared by both waiters, and
/// each gets what is its own.
#[test]
fn attach_cm_async_accept_connect_disconnect_beside_a_blocking_waiter() {
    use rdmacm_shim::cm::{CmId, CmListener};
    use rocev2::CmEvent;
    let test = "attach_cm_async";
    let Some(rig) = Rig::new(test) else {
        return;
    };
    let tb = &rig.tb;
    let h1 = tb.node("h1").expect("h1").ipv4().expect("v4").to_string();
    let a = rig.attach("h0");
    let b = rig.attach("h1");
    let listener = CmListener::bind(&b, format!("{h1}:7177").parse().unwrap()).expect("bind");
    let b2 = b.clone();
    let blocking = std::thread::spawn(move || {
        b2.next_cm_event(
            |ev| matches!(ev, CmEvent::Rejected { .. }),
            Duration::from_secs(10),
        )
    });
    let (_mr_a, _cq_a, qp_a) = cm_side(&a);
    let (_mr_b, _cq_b, qp_b) = cm_side(&b);
    let rt = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    };
    let server = std::thread::spawn(move || {
        rt().block_on(async move {
            let (id, hello) = tokio::time::timeout(
                Duration::from_secs(20),
                listener.accept_async(qp_b, b"welcome"),
            )
            .await
            .expect("accept in time")
            .expect("accept");
            let dreq = tokio::time::timeout(Duration::from_secs(20), id.wait_disconnect_async())
                .await
                .expect("disconnect seen in time");
            (hello, dreq.map(drop))
        })
    });
    let to = format!("{h1}:7177").parse().unwrap();
    rt().block_on(async {
        let id = tokio::time::timeout(
            Duration::from_secs(20),
            CmId::connect_async(&a, qp_a, to, b"hello"),
        )
        .await
        .expect("connect in time")
        .expect("connect");
        assert_eq!(&id.peer_private_data()[..7], b"welcome");
        tokio::time::timeout(Duration::from_secs(20), id.disconnect_async())
            .await
            .expect("disconnect in time")
            .expect("disconnect");
    });
    let (hello, dreq) = server.join().unwrap();
    assert_eq!(&hello[..5], b"hello");
    dreq.expect("the passive side's disconnect event");
    assert_eq!(a.qp_state(qp_a), Some(rocev2::QpState::Error));
    let left = blocking.join().unwrap();
    assert!(
        matches!(left, Err(rocev2::Error::Timeout)),
        "the blocking waiter picked only its own: {left:?}"
    );
}

#[test]
fn attach_ud_ping_reply_and_wrong_qkey_through_two_daemons() {
    use rocev2::{
        AccessFlags, AhAttr, Device, GRH_LEN, QpState, RecvWr, SendOp, SendWr, UdAddress, WcOpcode,
        WcStatus, gid_to_ip,
    };
    let test = "attach_ud";
    let Some(rig) = Rig::new(test) else {
        return;
    };
    let tb = &rig.tb;
    let a = rig.attach("h0");
    let b = rig.attach("h1");
    let ip = |h: &str| tb.node(h).expect("host").ipv4().expect("v4");
    let side = |d: &Device, q_key| {
        let pd = d.alloc_pd().unwrap();
        let mr = d
            .register(pd, vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
            .unwrap();
        let cq = d.create_cq(16).unwrap();
        let qp = d.create_ud_qp(pd, cq, cq, q_key).unwrap();
        assert_eq!(d.qp_state(qp), Some(QpState::Rts));
        (pd, mr, cq, qp)
    };
    let (pd_a, mr_a, cq_a, qp_a) = side(&a, 0x11);
    let (pd_b, mr_b, cq_b, qp_b) = side(&b, 0x22);
    assert!(a.ud_mtu(qp_a).is_some());
    let recv = |d: &Device, mr: &rocev2::Mr, qp, wr_id| {
        let sge = mr.sge(2048, 1024).unwrap();
        d.post_recv(
            qp,
            RecvWr {
                wr_id,
                sg_list: vec![sge],
            },
        )
        .unwrap();
    };
    let wait = |d: &Device, cq| {
        let mut wcs = Vec::new();
        d.wait_cq(cq, &mut wcs, 1, SETUP).expect("completion");
        wcs[0]
    };
    recv(&b, &mr_b, qp_b, 1);
    // The daemon resolves the MAC and builds the path from its own interface.
    let ah = a.create_ah(pd_a, &AhAttr::new(ip("h1").into())).unwrap();
    let mut to_b = UdAddress {
        ah,
        qpn: qp_b.qpn(),
        q_key: 0x23,
    };
    a.mr_guard(&mr_a).unwrap()[..8].copy_from_slice(b"datagram");
    let send = |wr_id| SendWr::new(wr_id, SendOp::Send).sge(mr_a.sge(0, 8).unwrap());
    a.post_send_to(qp_a, to_b, send(1)).unwrap();
    assert!(wait(&a, cq_a).status.is_success());
    to_b.q_key = 0x22;
    a.post_send_to(qp_a, to_b, send(2)).unwrap();
    assert!(wait(&a, cq_a).status.is_success());
    let got = wait(&b, cq_b);
    assert_eq!(
        (got.wr_id, got.status, got.opcode),
        (1, WcStatus::Success, WcOpcode::Recv)
    );
    assert_eq!(got.byte_len as usize, GRH_LEN + 8);
    assert_eq!(got.src_qp, qp_a.qpn());
    let src = gid_to_ip(got.ud.expect("UD source").sgid);
    assert_eq!(src, std::net::IpAddr::V4(ip("h0")));
    {
        let m = b.mr_guard(&mr_b).unwrap();
        assert_eq!(m[2048 + 20], 0x45, "IPv4 header at byte 20 of the GRH area");
        assert_eq!(&m[2048 + 32..2048 + 36], &ip("h0").octets());
        assert_eq!(&m[2048 + 36..2048 + 40], &ip("h1").octets());
        assert_eq!(&m[2048 + GRH_LEN..2048 + GRH_LEN + 8], b"datagram");
    }
    // The first datagram's Q_Key was wrong: dropped and counted by h1's daemon.
    let s = stats(test, "h1");
    assert_eq!(s["drops"]["bad_qkey"], 1, "{s}");

    // The reply goes where the completion says the datagram came from.
    recv(&a, &mr_a, qp_a, 3);
    let back = b.create_ah(pd_b, &AhAttr::new(src)).unwrap();
    let to_a = UdAddress {
        ah: back,
        qpn: got.src_qp,
        q_key: 0x11,
    };
    b.mr_guard(&mr_b).unwrap()[..5].copy_from_slice(b"reply");
    let wr = SendWr::new(4, SendOp::Send).sge(mr_b.sge(0, 5).unwrap());
    b.post_send_to(qp_b, to_a, wr).unwrap();
    assert!(wait(&b, cq_b).status.is_success());
    let r = wait(&a, cq_a);
    assert_eq!((r.wr_id, r.byte_len as usize), (3, GRH_LEN + 5));
    assert_eq!(r.src_qp, qp_b.qpn());
    assert_eq!(
        &a.mr_guard(&mr_a).unwrap()[2048 + GRH_LEN..2048 + GRH_LEN + 5],
        b"reply"
    );

    // Through a destroyed handle, the daemon refuses the request: an error completion.
    b.destroy_ah(back).unwrap();
    assert!(matches!(b.destroy_ah(back), Err(rocev2::Error::UnknownAh)));
    let wr = SendWr::new(5, SendOp::Send).sge(mr_b.sge(0, 5).unwrap());
    b.post_send_to(qp_b, to_a, wr).unwrap();
    let e = wait(&b, cq_b);
    assert_eq!((e.wr_id, e.status), (5, WcStatus::LocQpOpErr));
}

#[test]
fn attach_mp_snapshot_of_a_multipath_write_through_two_daemons() {
    use rocev2::{
        AccessFlags, ConnectOptions, Device, ExtCaps, MpConfig, QpConfig, QpMode, RemoteQp, SendOp,
        SendWr,
    };
    let test = "attach_mp";
    let Some(rig) = Rig::new(test) else {
        return;
    };
    let tb = &rig.tb;
    let a = rig.attach("h0");
    let b = rig.attach("h1");
    const LEN: usize = 64 * 1024;
    let side = |d: &Device| {
        let pd = d.alloc_pd().unwrap();
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let mr = d.register(pd, vec![0u8; LEN], access).unwrap();
        let cq = d.create_cq(16).unwrap();
        let cfg = QpConfig::new(pd.id(), cq.id(), cq.id()).with_multipath(MpConfig::paper());
        let qp = d.create_qp(cfg).unwrap();
        let rc = d.create_rc_qp(pd, cq, cq).unwrap();
        (mr, cq, qp, rc)
    };
    let (mr_a, cq_a, qp_a, rc_a) = side(&a);
    let (mr_b, _cq_b, qp_b, _) = side(&b);
    let opts = ConnectOptions {
        peer_ext: ExtCaps {
            multipath: true,
            ..ExtCaps::default()
        },
        ..ConnectOptions::default()
    };
    let remote = |qp: rocev2::Qp, h: &str| RemoteQp {
        qpn: qp.qpn(),
        psn: 0,
        ip: tb.node(h).expect("host").ipv4().expect("v4").into(),
        mac: None,
    };
    a.connect(qp_a, &remote(qp_b, "h1"), &opts)
        .expect("connect a");
    b.connect(qp_b, &remote(qp_a, "h0"), &opts)
        .expect("connect b");
    assert_eq!(a.qp_mode(qp_a), Some(QpMode::MultiPath));
    assert_eq!(b.qp_mode(qp_b), Some(QpMode::MultiPath));
    // Before any traffic: the initial window, nothing sent on any VP.
    let before = a.mp_snapshot(qp_a).expect("multipath state of a's QP");
    assert_eq!(before.cwnd, f64::from(MpConfig::paper().iw));
    assert!(before.tx_vps.iter().all(|(_, c)| c.packets == 0));
    assert_eq!(a.mp_snapshot(rc_a), None, "an RC QP has no multipath state");

    for (i, x) in a.mr_guard(&mr_a).unwrap().iter_mut().enumerate() {
        *x = (i % 251) as u8;
    }
    let wr = SendWr::new(
        1,
        SendOp::Write {
            remote_addr: mr_b.remote_addr(0, LEN as u64).unwrap(),
            rkey: mr_b.rkey(),
        },
    )
    .sge(mr_a.sge(0, LEN as u32).unwrap());
    a.post_send(qp_a, wr).unwrap();
    let mut wcs = Vec::new();
    a.wait_cq(cq_a, &mut wcs, 1, SETUP)
        .expect("WRITE completion");
    assert!(wcs[0].status.is_success(), "{:?}", wcs[0]);
    assert_eq!(
        &b.mr_guard(&mr_b).unwrap()[..],
        &a.mr_guard(&mr_a).unwrap()[..]
    );

    // 64 KiB at MTU 1024: at least 64 data packets left over the sender's VPs and arrived over
    // the receiver's, as each daemon's engine counted them.
    let tx = a.mp_snapshot(qp_a).expect("a's state");
    let rx = b.mp_snapshot(qp_b).expect("b's state");
    let sent: u64 = tx.tx_vps.iter().map(|(_, c)| c.packets).sum();
    let got: u64 = rx.rx_vps.iter().map(|(_, c)| c.packets).sum();
    assert!(sent >= 64, "{tx:?}");
    assert!(got >= 64, "{rx:?}");
    assert!(tx.tx_vps.len() > 1, "one VP only: {tx:?}");
}

#[test]
fn attach_sidr_resolves_a_ud_service_and_a_datagram_reaches_it_through_two_daemons() {
    use rocev2_ipc::proto::ErrorKind;
    let test = "attach_sidr";
    let Some(rig) = Rig::new(test) else {
        return;
    };
    let tb = &rig.tb;
    let a = rig.attach("h0");
    let b = rig.attach("h1");
    let other = rig.attach("h1");
    let ip = |h: &str| std::net::IpAddr::V4(tb.node(h).expect("host").ipv4().expect("v4"));
    // Another application of B's daemon may not answer B's request.
    let others_answer = |req: &rocev2::SidrRequest, answer: &rocev2::SidrReplyParams| {
        let r = other.cm_sidr_reply(req.id, answer.clone());
        assert!(
            matches!(
                &r,
                Err(rocev2::Error::Refused {
                    kind: ErrorKind::UnknownHandle,
                    ..
                })
            ),
            "{r:?}"
        );
    };
    sidr::resolve_and_send((&a, ip("h0")), (&b, ip("h1")), 7179, SETUP, others_answer);
    sidr::unlistened_is_unsupported(&a, ip("h0"), ip("h1"), SETUP);
}

#[test]
fn attach_cm_mra_then_accept_through_two_daemons() {
    use rocev2::{AcceptParams, CmEvent, ConnectParams, Device, PortSpace, Psn, ServiceId, gid};
    use rocev2_ipc::proto::ErrorKind;
    let test = "attach_mra";
    let Some(rig) = Rig::new(test) else {
        return;
    };
    let tb = &rig.tb;
    let a = rig.attach("h0");
    let other = rig.attach("h0");
    let b = rig.attach("h1");
    let ip = |h: &str| std::net::IpAddr::V4(tb.node(h).expect("host").ipv4().expect("v4"));
    let service = ServiceId::rdma_cm(PortSpace::TCP, 7178);
    a.cm_listen(service).expect("listen");
    let (_mr_a, _cq_a, qp_a) = cm_side(&a);
    let (_mr_b, _cq_b, qp_b) = cm_side(&b);
    let params = ConnectParams::new(
        service,
        gid(ip("h1")),
        gid(ip("h0")),
        qp_b.qpn(),
        Psn::new(1),
    );
    let conn_b = b.cm_connect(qp_b, params, SETUP).expect("cm_connect");
    let ev = a
        .next_cm_event(|e| matches!(e, CmEvent::ConnectRequest(_)), SETUP)
        .expect("REQ");
    let CmEvent::ConnectRequest(req) = ev else {
        unreachable!()
    };
    let refused = |r: rocev2::Result<()>, want: ErrorKind| {
        assert!(
            matches!(&r, Err(rocev2::Error::Refused { kind, .. }) if *kind == want),
            "{r:?}"
        );
    };
    refused(other.cm_send_mra(req.conn, 24), ErrorKind::UnknownHandle);
    a.cm_send_mra(req.conn, 24).expect("MRA");
    a.cm_accept(req.conn, AcceptParams::new(qp_a.qpn(), Psn::new(2)))
        .expect("accept");
    let up = |d: &Device| {
        d.next_cm_event(|e| matches!(e, CmEvent::Established { .. }), SETUP)
            .expect("established")
    };
    assert!(matches!(up(&b), CmEvent::Established { conn, .. } if conn == conn_b));
    up(&a);
    refused(a.cm_send_mra(req.conn, 24), ErrorKind::Verb);
}

#[test]
fn attach_srq_two_peers_share_one_queue_through_two_daemons() {
    let Some(rig) = Rig::new("attach_srq") else {
        return;
    };
    let server = rig.attach("h0");
    let client = rig.attach("h1");
    srq::two_peers_share_one_srq(&server, &client);
}

/// The shards of `host`'s daemon its applications and QPs are on, from stats: (application
/// shards, by application id; (QPN, shard) of every QP).
fn shards_of(test: &str, host: &str) -> (Vec<u64>, Vec<(u32, u64)>) {
    let s = stats(test, host);
    assert_eq!(s["shards"], 2, "{s}");
    let apps = s["apps"].as_array().expect("apps");
    let qps = s["qps"].as_object().expect("qps");
    // Each QP is listed under its application and sits on its application's shard.
    for a in apps {
        for q in a["qps"].as_array().expect("app's qps") {
            let q = q.as_str().expect("qpn");
            let listed = qps.keys().find(|k| {
                u32::from_str_radix(&k[2..], 16).ok() == u32::from_str_radix(&q[2..], 16).ok()
            });
            let listed = listed.unwrap_or_else(|| panic!("{q} under qps: {s}"));
            assert_eq!(qps[listed]["shard"], a["shard"], "{s}");
        }
    }
    let qpns = qps
        .iter()
        .map(|(k, v)| {
            let qpn = u32::from_str_radix(&k[2..], 16).expect("hex QPN");
            (qpn, v["shard"].as_u64().expect("shard"))
        })
        .collect();
    (
        apps.iter().map(|a| a["shard"].as_u64().unwrap()).collect(),
        qpns,
    )
}

#[test]
fn attach_sharded_daemons_place_applications_and_stream_through_both_shards() {
    sharded_streams("attach_shards_bw", "xdp");
}

/// The same over AF_PACKET, where every shard's socket sees every frame and keeps its own.
#[test]
fn attach_sharded_packet_daemons_place_applications_and_stream_through_both_shards() {
    sharded_streams("attach_shards_bw_packet", "packet");
}

/// Two applications of one host placed on shards 0 and 1 (stats and the applications agree),
/// then two verified WRITE streams at once through `--queues 2` daemons of `datapath`.
fn sharded_streams(test: &'static str, datapath: &str) {
    let Some(rig) = Rig::sharded(test, datapath) else {
        return;
    };
    let tb = &rig.tb;
    // Two applications of this process on h0: one per shard, each told which.
    let devs = [rig.attach("h0"), rig.attach("h0")];
    let mut qpns = Vec::new();
    for (k, d) in (0u32..).zip(&devs) {
        assert!(
            d.datapath_reason()
                .contains(&format!("engine shard of QPN block {k}")),
            "{}",
            d.datapath_reason()
        );
        let (_mr, _cq, qp) = cm_side(d);
        assert_eq!(qp.qpn().value() >> 18, k, "QPN block = shard");
        qpns.push((qp.qpn().value(), u64::from(k)));
    }
    let (apps, qps) = shards_of(test, "h0");
    assert_eq!(apps, [0, 1]);
    assert_eq!(qps, qpns);
    drop(devs);
    wait_detached(test, "h0");
    // Two verified WRITE streams at once: the servers on h1 wait on shards 0 and 1, the
    // clients on h0 take shards 0 and 1 the same way.
    let wb = |port: &'static str| ["--verify", "-s", "65536", "-n", "512", "-p", port];
    let servers = [
        server(tb, test, "write_bw", &wb("18525"), 18525),
        server(tb, test, "write_bw", &wb("18526"), 18526),
    ];
    let (apps, _) = shards_of(test, "h1");
    assert_eq!(apps, [0, 1], "one server on each shard");
    let clients = [
        tool(tb, test, "h0", "write_bw", &wb("18525"), Some("h1")),
        tool(tb, test, "h0", "write_bw", &wb("18526"), Some("h1")),
    ];
    for p in clients.into_iter().chain(servers) {
        let out = p.finish(Duration::from_secs(120)).expect("write_bw");
        assert!(out.stdout.contains("verify: OK"), "{}", out.stdout);
    }
    for (host, attached) in [("h0", 4), ("h1", 2)] {
        let s = wait_detached(test, host);
        assert_eq!(s["host"]["attached"], attached, "{s}");
        assert_eq!(s["host"]["detached"], attached, "{s}");
        assert_eq!(s["host"]["closed_corrupt"], 0, "{s}");
        assert_eq!(s["drops"]["mis_steered"], 0, "{s}");
        assert_eq!(s["datapath_counters"]["steer_no_socket"], 0, "{s}");
        assert!(s["datapath"] == datapath, "{s}");
    }
}

/// Applications of one host talking over its own address, as through a NIC or rdma_rxe: the
/// frames never leave the host (`tx_looped`), and between the two shards of a `--queues 2`
/// daemon of `datapath` they are forwarded to the shard owning their QP or CM connection.
fn own_address(test: &'static str, datapath: &str) {
    let Some(rig) = Rig::sharded(test, datapath) else {
        return;
    };
    let tb = &rig.tb;
    let h1 = tb.node("h1").expect("h1").ipv4().expect("v4").to_string();
    // A verified WRITE stream: the server takes shard 0, the client shard 1 (the forwarded
    // frames below show it).
    let wb = ["--verify", "-s", "65536", "-n", "256", "-p", "18527"];
    let server = server(tb, test, "write_bw", &wb, 18527);
    let client = tool(tb, test, "h1", "write_bw", &wb, Some("h1"));
    for p in [client, server] {
        let out = p.finish(Duration::from_secs(120)).expect("write_bw");
        assert!(out.stdout.contains("verify: OK"), "{}", out.stdout);
    }
    wait_detached(test, "h1");
    // The connection manager: the REQ reaches the listener's shard, the REP the client's.
    let mut rping_server = rping(tb, test, "h1", "-s", &h1, &["-p", "7186", "-C", "5", "-d"]);
    rping_server
        .wait_for_line(|l| l.contains("rdma_listen"), SETUP)
        .expect("rping server listening");
    rping_five_pings_from(tb, test, "h1", &h1, "7186", rping_server);
    let s = wait_detached(test, "h1");
    let dp = &s["datapath_counters"];
    // 256 messages of 64 KiB are at least 4096 frames of 4 KiB each way.
    assert!(dp["tx_looped"].as_u64() > Some(4096), "{s}");
    assert!(dp["rx_forwarded"].as_u64() > Some(4096), "{s}");
    assert!(dp["rx_cm_forwarded"].as_u64() > Some(0), "{s}");
    assert_eq!(s["drops"]["mis_steered"], 0, "{s}");
    assert_eq!(s["host"]["closed_corrupt"], 0, "{s}");
    // Nothing went to the peer host.
    let peer = stats(test, "h0");
    assert_eq!(peer["datapath_counters"]["rx_packets"], 0, "{peer}");
}

#[test]
fn attach_applications_of_one_host_talk_over_its_own_address() {
    own_address("attach_own_addr", "xdp");
}

/// The same over AF_PACKET, whose shards drop each other's frames from the wire but forward
/// the ones this host looped back (no other socket saw them).
#[test]
fn attach_applications_of_one_host_talk_over_its_own_address_packet() {
    own_address("attach_own_addr_packet", "packet");
}

#[test]
fn attach_sharded_daemons_forward_a_cm_req_to_the_listening_shard() {
    use rdmacm_shim::cm::CmListener;
    let test = "attach_shards_cm";
    let Some(rig) = Rig::sharded(test, "xdp") else {
        return;
    };
    let tb = &rig.tb;
    let h1 = tb.node("h1").expect("h1").ipv4().expect("v4").to_string();
    // An application of this process takes h1's shard 0, so rping listens on shard 1.
    let b = rig.attach("h1");
    assert!(
        b.datapath_reason().contains("QPN block 0"),
        "{}",
        b.datapath_reason()
    );
    let mut server = rping(tb, test, "h1", "-s", &h1, &["-p", "7184", "-C", "5", "-d"]);
    server
        .wait_for_line(|l| l.contains("rdma_listen"), SETUP)
        .expect("rping server listening");
    assert_eq!(shards_of(test, "h1").0, [0, 1]);
    // Its port is held on the other shard: refused here too.
    let taken = CmListener::bind(&b, format!("{h1}:7184").parse().unwrap());
    assert!(refused_in_use(&taken), "{taken:?}");
    let listener = CmListener::bind(&b, format!("{h1}:7185").parse().unwrap()).expect("bind");
    // rping's client takes h0's shard 0, whose frames (the REQ first) reach h1's shard 0 on
    // queue 0: its REQ is forwarded to shard 1, which listens, and the REP comes back to h0 on
    // queue 1, to be forwarded to shard 0.
    rping_five_pings(tb, test, &h1, "7184", server);
    for host in ["h0", "h1"] {
        let s = stats(test, host);
        let forwarded = s["datapath_counters"]["rx_cm_forwarded"].as_u64();
        assert!(forwarded > Some(0), "{host}: {s}");
        assert_eq!(s["drops"]["mis_steered"], 0, "{s}");
    }
    // A connection to the listener of shard 0, from whichever shard of h0.
    let a = rig.attach("h0");
    let (id, server_id, _listener) =
        cm_hello(&a, &b, listener, format!("{h1}:7185").parse().unwrap());
    id.disconnect(Duration::from_secs(10)).expect("disconnect");
    server_id
        .wait_disconnect(Duration::from_secs(10))
        .expect("the passive side sees the disconnect");
}

/// `client`'s QP `cq` and `server`'s QP `sq` connected through `rocev2::connect` with its
/// default configuration, over TCP on loopback in this process: each side's connection.
fn exchange(
    client: &rocev2::Device,
    cq: rocev2::Qp,
    server: &rocev2::Device,
    sq: rocev2::Qp,
) -> (rocev2::connect::Connection, rocev2::connect::Connection) {
    use rocev2::connect::{self, ConnectConfig};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let addr = listener.local_addr().expect("address");
    std::thread::scope(|scope| {
        let accepted =
            scope.spawn(|| connect::accept(server, sq, &listener, &ConnectConfig::default()));
        let c = connect::connect(client, cq, addr, &ConnectConfig::default()).expect("connect");
        let a = accepted.join().expect("accepting thread").expect("accept");
        (c, a)
    })
}

/// A pair testbed whose daemons run Dart (`[cc] scheme = "dart"`); `None` when not root.
fn dart_rig(test: &'static str) -> Option<Rig> {
    if !need_root(test) {
        return None;
    }
    let cfg = std::env::temp_dir().join(format!("rocev2-{test}-{}.toml", std::process::id()));
    std::fs::write(&cfg, "[cc]\nscheme = \"dart\"\n").expect("config");
    let path = cfg.to_str().expect("utf-8 path").to_owned();
    let rig = Rig::with(test, pair(), &["--datapath", "packet", "--config", &path]);
    let _ = std::fs::remove_file(&cfg);
    Some(rig)
}

/// `rc_pingpong --attach` on Dart daemons: a `--rext` client and server offer each other the
/// scheme's fields in the exchange's extension message (N and the look-ahead); a client that
/// offers nothing still gets the standard exchange from a server whose scheme makes it offer
/// (it waits `oob::EXT_WAIT` for an extension that does not come) and completes.
#[test]
fn attach_rc_pingpong_offers_the_daemons_scheme() {
    use rocev2::CcScheme;
    let test = "attach_pp_rext";
    let Some(rig) = dart_rig(test) else {
        return;
    };
    let tb = &rig.tb;
    let limit = Duration::from_secs(60);
    let word = format!("{:#010x}", CcScheme::Dart.peer_ext().to_word());
    let rext = ["-s", "4096", "-n", "50", "-p", "18517", "--rext"];
    let srv = server(tb, test, "rc_pingpong", &rext, 18517);
    let cli = tool(tb, test, "h0", "rc_pingpong", &rext, Some("h1"));
    for p in [cli, srv] {
        let out = p.finish(limit).expect("rc_pingpong --rext succeeds");
        let both = format!("extensions: offered {word}, peer {word}");
        assert!(out.stdout.contains(&both), "{}", out.stdout);
        assert!(out.stdout.contains("50 iters in"), "{}", out.stdout);
    }
    let plain = ["-s", "4096", "-n", "50", "-p", "18518"];
    let srv = server(tb, test, "rc_pingpong", &plain, 18518);
    let cli = tool(tb, test, "h0", "rc_pingpong", &plain, Some("h1"));
    for p in [cli, srv] {
        let out = p.finish(limit).expect("plain rc_pingpong succeeds");
        assert!(out.stdout.contains("50 iters in"), "{}", out.stdout);
        assert!(!out.stdout.contains("extensions:"), "{}", out.stdout);
    }
}

/// Dart on both daemons (`[cc] scheme = "dart"`): applications connected through
/// `rocev2::connect` with its default configuration offer each other the scheme's extensions,
/// as the daemons' answer to the attachment names it. The sender's look-ahead of an incast of
/// 4 senders reaches the receiver, whose ACKs carry N = 4 back to the sender's controller
/// (`cc.n` in its daemon's stats); without the offers neither field would leave a host.
#[test]
fn attach_dart_applications_offer_n_and_the_look_ahead_by_default() {
    use rocev2::{AccessFlags, CcScheme, SendOp, SendWr};
    let test = "attach_dart_offer";
    let Some(rig) = dart_rig(test) else {
        return;
    };
    let (a, b) = (rig.attach("h0"), rig.attach("h1"));
    assert_eq!(
        (a.cc_scheme(), b.cc_scheme()),
        (CcScheme::Dart, CcScheme::Dart)
    );
    const LEN: usize = 64 * 1024;
    let pd_a = a.alloc_pd().unwrap();
    let mr_a = a
        .register(pd_a, vec![7u8; LEN], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let cq_a = a.create_cq(4).unwrap();
    let qp_a = a.create_rc_qp(pd_a, cq_a, cq_a).unwrap();
    let pd_b = b.alloc_pd().unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mr_b = b.register(pd_b, vec![0u8; LEN], access).unwrap();
    let cq_b = b.create_cq(4).unwrap();
    let qp_b = b.create_rc_qp(pd_b, cq_b, cq_b).unwrap();
    let (to_b, to_a) = exchange(&a, qp_a, &b, qp_b);
    let dart = CcScheme::Dart.peer_ext();
    assert_eq!((to_b.peer.ext, to_a.peer.ext), (dart, dart));

    // The receiver knows the sender by its address's last 16 bits; the sender announces an
    // incast of 4 listing itself and two others.
    let std::net::IpAddr::V4(ip) = to_b.local.ip else {
        panic!("an IPv4 pair: {:?}", to_b.local)
    };
    let me = u16::from_be_bytes([ip.octets()[2], ip.octets()[3]]);
    let write = SendOp::Write {
        remote_addr: mr_b.remote_addr(0, LEN as u64).unwrap(),
        rkey: mr_b.rkey(),
    };
    let wr = SendWr::new(1, write)
        .sge(mr_a.sge(0, LEN as u32).unwrap())
        .lookahead(4, &[me, me.wrapping_add(1), me.wrapping_add(2)]);
    a.post_send(qp_a, wr).unwrap();
    let mut wcs = Vec::new();
    a.wait_cq(cq_a, &mut wcs, 1, SETUP)
        .expect("WRITE completion");
    assert!(wcs[0].status.is_success(), "{:?}", wcs[0]);
    assert_eq!(b.mr_guard(&mr_b).unwrap()[LEN - 1], 7);
    let s = stats(test, "h0");
    let n = s["qps"]
        .as_object()
        .and_then(|qps| qps.values().find_map(|q| q["cc"]["n"].as_u64()));
    assert_eq!(n, Some(4), "{s}");
}

/// Dart with the receiver's two engine shards: `tx0` and `tx1` WRITE at once to applications
/// on `rx`'s shards 0 and 1 (this process, attached to each daemon, its QPs connected through
/// `rocev2::connect` with its default configuration, so they offer each other DASR's N as their
/// daemons' scheme uses it), and a sender's QP is told N = 2 (`cc.n` in its daemon's stats):
/// each shard sees one sender, so only the shards' exchange of DASR's sender sets counts both
/// (docs/daemon.md).
#[test]
fn attach_sharded_dart_receiver_counts_the_senders_of_both_shards() {
    use rocev2::{AccessFlags, Device, SendOp, SendWr};
    use rocev2_testbed::SwitchKind;
    let test = "attach_shards_dart";
    if !need_root(test) {
        return;
    }
    let _sockets = Sockets(test, &["rx", "tx0", "tx1"]);
    let tb = Testbed::up_topology(&Topology::Star {
        senders: 2,
        switch: SwitchKind::Bridge,
        link: LinkParams::new().mtu(9000).queues(2),
    })
    .expect("star testbed of two queues");
    let cfg = std::env::temp_dir().join(format!("rocev2-{test}-{}.toml", std::process::id()));
    std::fs::write(&cfg, "[cc]\nscheme = \"dart\"\nline_gbps = 10\n").expect("config");
    let path = cfg.to_str().expect("utf-8 path").to_owned();
    let one = ["--datapath", "packet", "--config", &path];
    let _daemons = [
        daemon_on(&tb, test, "rx", &[&one[..], &["--queues", "2"]].concat()),
        daemon_on(&tb, test, "tx0", &one),
        daemon_on(&tb, test, "tx1", &one),
    ];
    let _ = std::fs::remove_file(&cfg);
    const LEN: usize = 1 << 20;
    let side = |d: &Device| {
        let pd = d.alloc_pd().unwrap();
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let mr = d.register(pd, vec![0u8; LEN], access).unwrap();
        let cq = d.create_cq(16).unwrap();
        let qp = d.create_rc_qp(pd, cq, cq).unwrap();
        (mr, cq, qp)
    };
    // The receiver's applications take shards 0 and 1; its QPs piggyback N for the senders.
    let mut senders = Vec::new();
    for tx in ["tx0", "tx1"] {
        let (r, s) = (attach(&tb, test, "rx"), attach(&tb, test, tx));
        let (mr_r, _cq_r, qp_r) = side(&r);
        let (mr_s, cq_s, qp_s) = side(&s);
        let (to_r, _) = exchange(&s, qp_s, &r, qp_r);
        assert!(
            to_r.peer.ext.dasr_n,
            "the receiver offers N: {:?}",
            to_r.peer
        );
        let wr = SendWr::new(
            1,
            SendOp::Write {
                remote_addr: mr_r.remote_addr(0, LEN as u64).unwrap(),
                rkey: mr_r.rkey(),
            },
        )
        .sge(mr_s.sge(0, LEN as u32).unwrap());
        senders.push((r, s, mr_r, mr_s, cq_s, qp_s, wr));
    }
    assert_eq!(
        shards_of(test, "rx").0,
        [0, 1],
        "one receiver on each shard"
    );
    let told = |host| {
        let s = stats(test, host);
        let qps = s["qps"].as_object().cloned().unwrap_or_default();
        qps.values().filter_map(|q| q["cc"]["n"].as_u64()).max()
    };
    // Rounds of one 1 MiB WRITE from each sender at once, until a sender's last ACK said 2.
    let mut seen = (None, None);
    let mut wcs = Vec::new();
    for _ in 0..200 {
        for (_, s, _, _, _, qp, wr) in &senders {
            s.post_send(*qp, wr.clone()).expect("post WRITE");
        }
        for (_, s, _, _, cq, _, _) in &senders {
            wcs.clear();
            s.wait_cq(*cq, &mut wcs, 1, SETUP)
                .expect("WRITE completion");
            assert!(wcs[0].status.is_success(), "{:?}", wcs[0]);
        }
        seen = (told("tx0"), told("tx1"));
        if seen.0 == Some(2) || seen.1 == Some(2) {
            break;
        }
    }
    assert!(
        seen.0 == Some(2) || seen.1 == Some(2),
        "no sender told N = 2 while both wrote: {seen:?}; rx: {}",
        stats(test, "rx")
    );
    let s = stats(test, "rx");
    assert_eq!(s["drops"]["mis_steered"], 0, "{s}");
}
