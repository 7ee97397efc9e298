//! Preloaded programs attached to `rocev2d` (one daemon per namespace of a pair, AF_XDP, the
//! default per-namespace control socket, so the library finds it without flags):
//!
//! - Debian's `ibv_rc_pingpong -c` (data checked) and `ib_write_bw` attached to the same
//!   daemons at once; `rocev2d stats` lists both servers as applications.
//! - Debian's `ibv_srq_pingpong -c` attached: shared receive queues through the daemons.
//! - `ib_write_bw` and `ib_read_bw` on perftest's `ibv_wr_*` post path, attached.
//! - `ib_write_bw` killed with SIGKILL mid-transfer: the daemon frees its QPs, regions and
//!   handles, and `ibv_rc_pingpong` running beside it completes.
//! - A hostile program (this test, through the same device the library is built on) that
//!   registers memory it does not have (refused at once) and unmaps a registered buffer while
//!   a QP uses it: the daemon counts a memory fault and moves that program's QPs to ERROR, and
//!   serves on.
//!
//! Needs root (namespaces, AF_XDP); skipped loudly otherwise.

mod common;
use common::*;
use rocev2::{AccessFlags, CallerRange, ConnectOptions, Device, RemoteQp, SendOp, SendWr};
use rocev2_testbed::{Process, Testbed, exec, need_root};
use std::time::{Duration, Instant};

/// Set-up steps: a daemon coming up, a server listening.
const SETUP: Duration = Duration::from_secs(60);

/// `host`'s interface toward the other host.
fn ifname(tb: &Testbed, host: &str) -> String {
    device(tb, host).trim_start_matches("rocev2_").to_string()
}

/// A pair with `rocev2d run --datapath xdp` serving each host's interface on its default
/// socket. Fields drop in order: the daemons, then the testbed.
struct Rig {
    _daemons: [Process; 2],
    tb: Testbed,
}

impl Rig {
    fn new(test: &str) -> Option<Rig> {
        if !need_root(test) {
            return None;
        }
        let tb = pair();
        let d = ["h0", "h1"].map(|h| {
            tb.daemon(h, &ifname(&tb, h), "xdp", SETUP)
                .expect("daemon serving")
        });
        Some(Rig { _daemons: d, tb })
    }

    /// `rocev2d stats --json` in `host`'s namespace (no flags: its own daemon).
    fn stats(&self, host: &str) -> serde_json::Value {
        let bin = exec::built_binary("rocev2d").expect("rocev2d built");
        let mut cmd = self.tb.command(host, bin).expect("command");
        let out = exec::run(cmd.args(["stats", "--json"]), SETUP).expect("stats");
        assert!(out.status.success(), "{}", out.stderr);
        serde_json::from_str(&out.stdout).expect("stats JSON")
    }

    /// The pids of the applications `host`'s daemon lists, once `done` accepts them (or the
    /// set-up bound passes).
    fn apps_until(&self, host: &str, done: impl Fn(&[u64]) -> bool) -> Vec<u64> {
        let start = Instant::now();
        loop {
            let s = self.stats(host);
            let pids: Vec<u64> = s["apps"]
                .as_array()
                .expect("apps")
                .iter()
                .filter_map(|a| a["pid"].as_u64())
                .collect();
            if done(&pids) || start.elapsed() > SETUP {
                return pids;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A preloaded server in h1 (default datapath: the daemon serves the interface), once it
    /// listens on TCP `port`.
    fn server(&self, program: &str, args: &[&str], port: u16) -> Process {
        self.server_with(program, args, port, &[])
    }

    /// [`Rig::server`] with environment variables `envs`.
    fn server_with(
        &self,
        program: &str,
        args: &[&str],
        port: u16,
        envs: &[(&str, &str)],
    ) -> Process {
        let mut cmd = preloaded_with(&self.tb, "h1", "auto", program);
        cmd.args(args).envs(envs.iter().copied());
        let p = Process::spawn(&mut cmd).expect("spawn server");
        let ns = &self.tb.node("h1").expect("h1").netns;
        exec::wait_for_port(ns, exec::Proto::Tcp, port, SETUP).expect("server listening");
        p
    }

    /// A preloaded client in h0, of h1.
    fn client(&self, program: &str, args: &[&str]) -> Process {
        self.client_with(program, args, &[])
    }

    /// [`Rig::client`] with environment variables `envs`.
    fn client_with(&self, program: &str, args: &[&str], envs: &[(&str, &str)]) -> Process {
        let mut cmd = preloaded_with(&self.tb, "h0", "attach", program);
        cmd.args(args)
            .arg(h1_ip(&self.tb))
            .envs(envs.iter().copied());
        Process::spawn(&mut cmd).expect("spawn client")
    }
}

fn pingpong_args(tb: &Testbed, host: &str, iters: &str) -> Vec<String> {
    let dev = device(tb, host);
    [
        "-d", &dev, "-g", "1", "-s", "4096", "-c", "-p", "18516", "-n", iters,
    ]
    .map(String::from)
    .to_vec()
}

fn write_bw_args(tb: &Testbed, host: &str, more: &[&str]) -> Vec<String> {
    let dev = device(tb, host);
    let mut v: Vec<String> = ["-d", &dev, "-x", "1", "-F", "-p", "18515"]
        .map(String::from)
        .to_vec();
    v.extend(more.iter().map(|s| s.to_string()));
    v
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn two_preloaded_programs_share_each_daemon_over_af_xdp() {
    let Some(rig) = Rig::new("two_preloaded_programs_share_each_daemon_over_af_xdp") else {
        return;
    };
    let tb = &rig.tb;
    let (pp1, wb1) = (
        pingpong_args(tb, "h1", "1000"),
        write_bw_args(tb, "h1", &["-n", "2000"]),
    );
    let pp_server = rig.server("ibv_rc_pingpong", &strs(&pp1), 18516);
    let wb_server = rig.server("ib_write_bw", &strs(&wb1), 18515);
    let pids = rig.apps_until("h1", |p| p.len() >= 2);
    for p in [&pp_server, &wb_server] {
        assert!(
            pids.contains(&u64::from(p.pid())),
            "{pids:?} lists both servers"
        );
    }
    let (pp0, wb0) = (
        pingpong_args(tb, "h0", "1000"),
        write_bw_args(tb, "h0", &["-n", "2000"]),
    );
    let pp_client = rig.client("ibv_rc_pingpong", &strs(&pp0));
    let wb_client = rig.client("ib_write_bw", &strs(&wb0));
    for p in [pp_client, pp_server] {
        let out = p.finish(TIMEOUT).expect("ibv_rc_pingpong succeeds");
        assert!(out.stdout.contains("1000 iters in "), "{}", show(&out));
        let all = format!("{}{}", out.stdout, out.stderr);
        assert!(!all.contains("invalid data"), "{}", show(&out));
    }
    for p in [wb_client, wb_server] {
        let out = p.finish(TIMEOUT).expect("ib_write_bw succeeds");
        assert!(out.stdout.contains(" 65536      2000 "), "{}", show(&out));
    }
    let pids = rig.apps_until("h1", <[u64]>::is_empty);
    assert!(pids.is_empty(), "both detached: {pids:?}");
}

/// perftest's `ibv_wr_*` post path (see netns_tools.rs) attached: `ib_write_bw` and
/// `ib_read_bw` build every request with `ibv_wr_*`, each posted to the daemon.
#[test]
fn perftest_wr_api_attached_to_the_daemons() {
    let Some(rig) = Rig::new("perftest_wr_api_attached_to_the_daemons") else {
        return;
    };
    let tb = &rig.tb;
    let envs = [("ROCEV2_VENDOR_PART_ID", "61344")];
    for program in ["ib_write_bw", "ib_read_bw"] {
        let args = |host| write_bw_args(tb, host, &["-n", "500"]);
        let server = rig.server_with(program, &strs(&args("h1")), 18515, &envs);
        let client = rig.client_with(program, &strs(&args("h0")), &envs);
        for p in [client, server] {
            let out = p.finish(TIMEOUT).expect("perftest succeeds");
            assert!(
                out.stdout.contains(" ibv_wr* API     : ON"),
                "{}",
                show(&out)
            );
            assert!(out.stdout.contains(" 65536      500 "), "{}", show(&out));
        }
    }
}

/// Shared receive queues through the daemons: Debian's `ibv_srq_pingpong -c` (sixteen QPs on
/// one SRQ each side, each receive matched to its QP by `qp_num`, data validated), every
/// `ibv_post_srq_recv` a record in the SRQ's ring.
#[test]
fn srq_pingpong_attached_to_the_daemons() {
    let Some(rig) = Rig::new("srq_pingpong_attached_to_the_daemons") else {
        return;
    };
    let tb = &rig.tb;
    let server = rig.server(
        "ibv_srq_pingpong",
        &strs(&pingpong_args(tb, "h1", "200")),
        18516,
    );
    let client = rig.client("ibv_srq_pingpong", &strs(&pingpong_args(tb, "h0", "200")));
    for p in [client, server] {
        let out = p.finish(TIMEOUT).expect("ibv_srq_pingpong succeeds");
        // Both directions of 200 exchanges of 4096 bytes: 2 · 4096 · 200.
        assert!(out.stdout.contains("1638400 bytes in "), "{}", show(&out));
        assert!(out.stdout.contains("200 iters in "), "{}", show(&out));
        assert!(!out.stderr.contains("nvalid"), "{}", show(&out));
    }
}

#[test]
fn a_sigkilled_preloaded_program_is_freed_and_the_other_goes_on() {
    let Some(rig) = Rig::new("a_sigkilled_preloaded_program_is_freed_and_the_other_goes_on") else {
        return;
    };
    let tb = &rig.tb;
    let (pp1, wb1) = (
        pingpong_args(tb, "h1", "3000"),
        write_bw_args(tb, "h1", &["-D", "30"]),
    );
    let pp_server = rig.server("ibv_rc_pingpong", &strs(&pp1), 18516);
    let mut wb_server = rig.server("ib_write_bw", &strs(&wb1), 18515);
    let (pp0, wb0) = (
        pingpong_args(tb, "h0", "3000"),
        write_bw_args(tb, "h0", &["-D", "30"]),
    );
    let mut wb_client = rig.client("ib_write_bw", &strs(&wb0));
    // Mid-transfer: its QP is connected once the daemon counts its posts.
    let start = Instant::now();
    while rig.stats("h0")["apps"]
        .as_array()
        .is_none_or(|a| a.iter().all(|x| x["posted"].as_u64().unwrap_or(0) == 0))
    {
        assert!(start.elapsed() < SETUP, "ib_write_bw never posted");
        std::thread::sleep(Duration::from_millis(50));
    }
    // perftest's buffers are whole pages of its heap: moved onto memfds, the daemon maps them.
    let s = rig.stats("h0");
    let mut apps = s["apps"].as_array().into_iter().flatten();
    let wb = apps
        .find(|a| a["pid"].as_u64() == Some(u64::from(wb_client.pid())))
        .expect("ib_write_bw's attachment");
    let (bytes, mapped) = (wb["mr_bytes"].as_u64(), wb["mr_mapped_bytes"].as_u64());
    assert!(bytes > Some(0) && mapped == bytes, "{wb}");
    let pp_client = rig.client("ibv_rc_pingpong", &strs(&pp0));
    let both = rig.apps_until("h0", |p| p.len() >= 2);
    assert!(both.contains(&u64::from(pp_client.pid())), "{both:?}");
    let killed = wb_client.kill();
    assert!(!killed.status.success(), "{}", show(&killed));
    let left = rig.apps_until("h0", |p| p.len() <= 1);
    assert_eq!(
        left,
        [u64::from(pp_client.pid())],
        "the killed program's attachment is gone, the other's stays"
    );
    let s = rig.stats("h0");
    let app = &s["apps"][0];
    assert_eq!(app["qps"].as_array().map(Vec::len), Some(1), "{s}");
    for p in [pp_client, pp_server] {
        let out = p
            .finish(TIMEOUT)
            .expect("ibv_rc_pingpong succeeds beside the kill");
        assert!(out.stdout.contains("3000 iters in "), "{}", show(&out));
    }
    wb_server.kill();
    let gone = rig.apps_until("h0", <[u64]>::is_empty);
    assert!(gone.is_empty(), "nothing left in h0's daemon: {gone:?}");
}

/// `f`'s result, run on a thread in `host`'s network namespace (the daemon refuses an
/// application of another namespace).
fn in_netns<T: Send>(tb: &Testbed, host: &str, f: impl FnOnce() -> T + Send) -> T {
    let ns = format!("/run/netns/{}", tb.node(host).expect("host").netns);
    std::thread::scope(|s| {
        s.spawn(|| {
            let file = std::fs::File::open(&ns).expect("namespace file");
            // SAFETY: setns on this thread only, with a namespace descriptor we own.
            let rc =
                unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&file), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns");
            f()
        })
        .join()
        .expect("namespace thread")
    })
}

/// An anonymous mapping of `pages` pages of this process.
fn map(pages: usize) -> *mut u8 {
    // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            pages * 4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    p.cast()
}

#[test]
fn a_hostile_program_is_refused_or_loses_its_own_qps_only() {
    let Some(rig) = Rig::new("a_hostile_program_is_refused_or_loses_its_own_qps_only") else {
        return;
    };
    let tb = &rig.tb;
    let (h0, h1) = (ifname(tb, "h0"), ifname(tb, "h1"));
    let peer = in_netns(tb, "h1", || Device::attach(&h1).expect("attach h1"));
    let dev = in_netns(tb, "h0", || Device::attach(&h0).expect("attach h0"));
    let pd = dev.alloc_pd().unwrap();
    // Memory it does not have: a page it unmapped, refused at registration.
    let hole = map(1);
    // SAFETY: unmaps our own page; the range below only names its address.
    assert_eq!(unsafe { libc::munmap(hole.cast(), 4096) }, 0);
    // SAFETY: the range is not memory of ours; the daemon must refuse it, never touch it.
    let bogus = unsafe { CallerRange::new(hole, 4096) };
    let refused = dev.register_caller(pd, bogus, hole as u64, AccessFlags::LOCAL_WRITE);
    assert!(refused.is_err(), "an unmapped range is refused");
    // A buffer registered, a QP connected, then the buffer unmapped under the QP. Its first
    // page is partial, so the daemon reaches that part through /proc/self/mem, which then
    // fails; the whole page after it was moved onto a memfd the daemon maps, which stays
    // (as an HCA's pinned pages stay).
    let buf = map(2);
    // SAFETY: our own two pages, unmapped below behind the daemon's back on purpose.
    let range = unsafe { CallerRange::new(buf.wrapping_add(8), 8184) };
    let mr = dev
        .register_caller(pd, range, buf as u64, AccessFlags::LOCAL_WRITE)
        .expect("a mapped buffer registers");
    let cq = dev.create_cq(16).unwrap();
    let qp = dev.create_rc_qp(pd, cq, cq).unwrap();
    let ppd = peer.alloc_pd().unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let target = peer.register(ppd, vec![0u8; 8192], access).unwrap();
    let pcq = peer.create_cq(16).unwrap();
    let pqp = peer.create_rc_qp(ppd, pcq, pcq).unwrap();
    let (ip0, ip1) = (
        dev.source_ip(false).unwrap(),
        peer.source_ip(false).unwrap(),
    );
    let opts = ConnectOptions::default();
    let to = |qpn, psn, ip| RemoteQp {
        qpn,
        psn,
        ip,
        mac: None,
    };
    dev.connect(qp, &to(pqp.qpn(), opts.local_psn, ip1), &opts)
        .unwrap();
    peer.connect(pqp, &to(qp.qpn(), opts.local_psn, ip0), &opts)
        .unwrap();
    // SAFETY: our own mapping; the daemon holds only its memfd's mapping of the second page.
    assert_eq!(unsafe { libc::munmap(buf.cast(), 8192) }, 0);
    let write = SendOp::Write {
        remote_addr: target.addr(),
        rkey: target.rkey(),
    };
    dev.post_send(qp, SendWr::new(1, write).sge(mr.sge(0, 8184).unwrap()))
        .unwrap();
    let start = Instant::now();
    while dev.qp_state(qp) != Some(rocev2::QpState::Error) {
        assert!(start.elapsed() < SETUP, "the QP never failed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let s = rig.stats("h0");
    assert!(s["host"]["memory_faults"].as_u64() >= Some(1), "{s}");
    // The daemon serves on: the peer's device (another application) still works, and a new
    // post of the faulted program completes in error rather than moving anything.
    assert!(peer.qp_state(pqp).is_some());
    let _ = dev.post_send(qp, SendWr::new(2, write).sge(mr.sge(0, 8).unwrap()));
    let mut wcs = Vec::new();
    let deadline = Instant::now() + SETUP;
    while wcs.iter().all(|w: &rocev2::WorkCompletion| w.wr_id != 2) && Instant::now() < deadline {
        dev.poll_cq(cq, &mut wcs, 16);
    }
    let second = wcs
        .iter()
        .find(|w| w.wr_id == 2)
        .expect("the later post completes");
    assert!(!second.status.is_success(), "{second:?}");
}
