//! The API's promises, between two in-process [`Device`]s on the two ends of a veth pair over
//! the UDP datapath (root: each test re-runs itself in a fresh namespace):
//!
//! - a passive server, making no call at all, serves its peer's READs and atomics (its
//!   progress thread answers them);
//! - two tokio tasks on a multi-thread runtime, one posting and one reaping, move 10,000
//!   messages, every byte checked at the receiver;
//! - random sequences of calls, with handles of both devices mixed, never panic, and a handle
//!   used with the wrong device is an error (on a `Device::pair`, without root).

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use rocev2::{
    AccessFlags, ConnectOptions, Cq, DatapathKind, Device, DeviceConfig, DriverConfig, Error, Mr,
    Pd, Qp, RecvWr, RemoteQp, SendOp, SendWr, WaitMode, WcStatus,
};
use rocev2_datapath::clock::cpu_time;
use rocev2_testbed::{VethEnd, veth_pair};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn sh(args: &[&str]) {
    let st = Command::new(args[0]).args(&args[1..]).status().unwrap();
    assert!(st.success(), "{args:?}: {st}");
}

/// One side: device, PD, one region, one CQ, one connected QP.
struct Side {
    dev: Device,
    mr: Mr,
    cq: Cq,
    qp: Qp,
}

/// Deletes a namespace when dropped.
struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// A veth pair `tag`a/`tag`b, `tag`b in a namespace of its own (UDP between two addresses of
/// one namespace would never leave it), a device on each end with a region of `len` bytes
/// (`access`), connected. The namespace goes when the returned guard is dropped (after the
/// devices).
fn pair(tag: &str, len: usize, access: AccessFlags) -> (Side, Side, Netns) {
    pair_with(tag, len, access, DeviceConfig::default())
}

/// [`pair`] with both devices opened with `cfg`.
fn pair_with(tag: &str, len: usize, access: AccessFlags, cfg: DeviceConfig) -> (Side, Side, Netns) {
    let (na, nb) = (format!("{tag}a"), format!("{tag}b"));
    let ns = Netns(format!("{tag}{}", std::process::id()));
    sh(&["ip", "netns", "add", &ns.0]);
    veth_pair(
        VethEnd {
            addrs: &["10.77.0.1/24"],
            ..VethEnd::new(&na)
        },
        VethEnd {
            netns: Some(&ns.0),
            addrs: &["10.77.0.2/24"],
            ..VethEnd::new(&nb)
        },
    )
    .unwrap();
    let open = move |name: &str| {
        let dev = Device::open_with(name, DatapathKind::Udp, cfg).unwrap();
        let pd = dev.alloc_pd().unwrap();
        let mr = dev.register(pd, vec![0u8; len], access).unwrap();
        let cq = dev.create_cq(4096).unwrap();
        let qp = dev.create_rc_qp(pd, cq, cq).unwrap();
        Side { dev, mr, cq, qp }
    };
    let a = open(&na);
    let path = format!("/run/netns/{}", ns.0);
    // The peer's sockets belong to the namespace of the thread that opens them.
    let b = std::thread::spawn(move || {
        let f = std::fs::File::open(&path).unwrap();
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&f),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .unwrap();
        open(&nb)
    })
    .join()
    .unwrap();
    let (psn_a, psn_b) = (rocev2::random_psn(), rocev2::random_psn());
    for (me, peer, ip, mine, theirs) in [
        (&a, &b, "10.77.0.2", psn_a, psn_b),
        (&b, &a, "10.77.0.1", psn_b, psn_a),
    ] {
        let remote = RemoteQp {
            qpn: peer.qp.qpn(),
            psn: theirs,
            ip: ip.parse().unwrap(),
            mac: Some(peer.dev.interface().mac),
        };
        let opts = ConnectOptions {
            local_psn: mine,
            ..ConnectOptions::default()
        };
        me.dev.connect(me.qp, &remote, &opts).unwrap();
    }
    (a, b, ns)
}

/// Runs `body` in a fresh namespace (this test binary re-runs `test` inside it).
fn in_netns(test: &str, tag: &str, body: impl FnOnce()) {
    let ns = format!("rv2api{tag}{}", std::process::id());
    if rocev2_testbed::exec::in_fresh_netns(test, &ns, Duration::from_secs(600))
        .expect("re-run in a fresh namespace")
    {
        body();
    }
}

fn byte(i: u64) -> u8 {
    (i.wrapping_mul(0x9e37_79b9) >> 7) as u8
}

#[test]
fn api_passive_server_serves_reads_and_atomics_without_calls() {
    in_netns(
        "api_passive_server_serves_reads_and_atomics_without_calls",
        "ps",
        || passive_body("vps", WaitMode::default()),
    );
}

/// The same with the progress threads in interrupt mode (always sleeping between passes)
/// and in busy-poll mode.
#[test]
fn api_passive_server_serves_in_interrupt_and_busy_poll_modes() {
    in_netns(
        "api_passive_server_serves_in_interrupt_and_busy_poll_modes",
        "pm",
        || {
            passive_body("vpi", WaitMode::Sleep);
            passive_body("vpb", WaitMode::Spin);
        },
    );
}

fn passive_body(tag: &str, wait: WaitMode) {
    const N: u64 = 1000;
    const LEN: usize = 64 * 1024;
    let rights = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    let cfg = DeviceConfig {
        driver: DriverConfig {
            wait,
            ..DriverConfig::default()
        },
        ..DeviceConfig::default()
    };
    let (a, b, _ns) = pair_with(tag, LEN, rights, cfg);
    // The server fills its region and sets the counter, then makes no call until the end.
    {
        let mut g = b.dev.mr_guard(&b.mr).unwrap();
        for (i, x) in g.iter_mut().enumerate() {
            *x = byte(i as u64);
        }
    }
    b.dev.write_u64(&b.mr, 0, 5).unwrap();
    let passive_since = Instant::now();
    let rkey = b.mr.rkey();
    let mut wcs = Vec::new();
    // 1,000 READs of 64 bytes at offsets spread over the region, each checked.
    for i in 0..N {
        let off = 64 + (i * 4160) % (LEN as u64 - 128);
        let read = SendOp::Read {
            remote_addr: b.mr.remote_addr(off, 64).unwrap(),
            rkey,
        };
        a.dev
            .post_send(a.qp, SendWr::new(i, read).sge(a.mr.sge(8, 64).unwrap()))
            .unwrap();
        wcs.clear();
        a.dev
            .wait_cq(a.cq, &mut wcs, 1, Duration::from_secs(10))
            .unwrap();
        assert_eq!((wcs[0].wr_id, wcs[0].status), (i, WcStatus::Success));
        let g = a.dev.mr_guard(&a.mr).unwrap();
        let want: Vec<u8> = (off..off + 64).map(byte).collect();
        assert_eq!(&g[8..72], &want[..], "READ {i} at {off}");
    }
    // 1,000 Fetch&Adds on the counter: each returns the value before it, in host order.
    for i in 0..N {
        let add = SendOp::FetchAdd {
            remote_addr: b.mr.remote_addr(0, 8).unwrap(),
            rkey,
            add: 3,
        };
        a.dev
            .post_send(a.qp, SendWr::new(N + i, add).sge(a.mr.sge(0, 8).unwrap()))
            .unwrap();
        wcs.clear();
        a.dev
            .wait_cq(a.cq, &mut wcs, 1, Duration::from_secs(10))
            .unwrap();
        assert_eq!(wcs[0].status, WcStatus::Success);
        assert_eq!(a.dev.read_u64(&a.mr, 0).unwrap(), 5 + 3 * i);
    }
    // The server stays silent for 2 s in all.
    std::thread::sleep(Duration::from_secs(2).saturating_sub(passive_since.elapsed()));
    assert_eq!(b.dev.read_u64(&b.mr, 0).unwrap(), 5 + 3 * N);
    // Every request reached the server's engine, driven by its progress thread alone.
    assert!(b.dev.engine().unwrap().stats().rx_frames >= 2 * N);
}

#[test]
fn api_two_tokio_tasks_post_and_reap_10000_messages() {
    in_netns(
        "api_two_tokio_tasks_post_and_reap_10000_messages",
        "tt",
        tasks_body,
    );
}

fn tasks_body() {
    const N: u64 = 10_000;
    const SLOTS: u64 = 32;
    const MSG: u64 = 256;
    let (a, b, _ns) = pair("vtt", (SLOTS * MSG) as usize, AccessFlags::LOCAL_WRITE);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // The receiver keeps a receive posted in every slot, reposting each as it is reaped.
    for s in 0..SLOTS {
        let wr = RecvWr {
            wr_id: s,
            sg_list: vec![b.mr.sge(s * MSG, MSG as u32).unwrap()],
        };
        b.dev.post_recv(b.qp, wr).unwrap();
    }
    let credits = Arc::new(tokio::sync::Semaphore::new(SLOTS as usize));
    let (dev, mr, qp, c) = (a.dev.clone(), a.mr, a.qp, Arc::clone(&credits));
    let poster = rt.spawn(async move {
        for i in 0..N {
            c.acquire().await.unwrap().forget();
            let slot = i % SLOTS;
            {
                let mut g = dev.mr_guard(&mr).unwrap();
                let m = &mut g[(slot * MSG) as usize..((slot + 1) * MSG) as usize];
                m[..8].copy_from_slice(&i.to_ne_bytes());
                for (k, x) in m[8..].iter_mut().enumerate() {
                    *x = byte(i + k as u64);
                }
            }
            let wr = SendWr::new(i, SendOp::Send).sge(mr.sge(slot * MSG, MSG as u32).unwrap());
            dev.post_send(qp, wr).unwrap();
        }
    });
    let (dev, cq) = (a.dev.clone(), a.cq);
    let reaper = rt.spawn(async move {
        let mut wcs = dev.completions(cq);
        for i in 0..N {
            let wc = wcs.next().await.unwrap();
            assert_eq!((wc.wr_id, wc.status), (i, WcStatus::Success));
            credits.add_permits(1);
        }
    });
    let Side { dev, mr, cq, qp } = b;
    let receiver = rt.spawn(async move {
        let mut wcs = dev.completions(cq);
        for i in 0..N {
            let wc = wcs.next().await.unwrap();
            assert_eq!(wc.status, WcStatus::Success);
            assert_eq!(wc.byte_len, MSG as u32);
            let slot = wc.wr_id;
            {
                let g = dev.mr_guard(&mr).unwrap();
                let m = &g[(slot * MSG) as usize..((slot + 1) * MSG) as usize];
                assert_eq!(m[..8], i.to_ne_bytes(), "message {i} in slot {slot}");
                assert!(
                    m[8..]
                        .iter()
                        .enumerate()
                        .all(|(k, &x)| x == byte(i + k as u64)),
                    "message {i}'s bytes"
                );
            }
            let wr = RecvWr {
                wr_id: slot,
                sg_list: vec![mr.sge(slot * MSG, MSG as u32).unwrap()],
            };
            dev.post_recv(qp, wr).unwrap();
        }
    });
    rt.block_on(async {
        let all = async {
            poster.await.unwrap();
            reaper.await.unwrap();
            receiver.await.unwrap();
        };
        tokio::time::timeout(Duration::from_secs(120), all)
            .await
            .expect("10,000 messages within 120 s");
    });
}

/// One call of the random sequences; indices pick a handle from the pools (both devices').
#[derive(Debug, Clone)]
enum Call {
    AllocPd(usize),
    Register(usize, usize, u16, u32),
    Deregister(usize, usize),
    CreateCq(usize, u16),
    CreateQp(usize, usize, usize),
    DestroyQp(usize, usize),
    PostSend(usize, usize, usize, u64, u32),
    PostRecv(usize, usize, usize, u64, u32),
    PollCq(usize, usize),
    Guard(usize, usize),
    ReadU64(usize, usize, u64),
    ResetToError(usize, usize),
}

fn call() -> impl Strategy<Value = Call> {
    let d = 0..2usize;
    let i = 0..8usize;
    prop_oneof![
        d.clone().prop_map(Call::AllocPd),
        (d.clone(), i.clone(), 0..5000u16, 0..32u32)
            .prop_map(|(a, b, c, e)| Call::Register(a, b, c, e)),
        (d.clone(), i.clone()).prop_map(|(a, b)| Call::Deregister(a, b)),
        (d.clone(), 0..64u16).prop_map(|(a, b)| Call::CreateCq(a, b)),
        (d.clone(), i.clone(), i.clone()).prop_map(|(a, b, c)| Call::CreateQp(a, b, c)),
        (d.clone(), i.clone()).prop_map(|(a, b)| Call::DestroyQp(a, b)),
        (d.clone(), i.clone(), i.clone(), 0..6000u64, 0..6000u32)
            .prop_map(|(a, b, c, o, l)| Call::PostSend(a, b, c, o, l)),
        (d.clone(), i.clone(), i.clone(), 0..6000u64, 0..6000u32)
            .prop_map(|(a, b, c, o, l)| Call::PostRecv(a, b, c, o, l)),
        (d.clone(), i.clone()).prop_map(|(a, b)| Call::PollCq(a, b)),
        (d.clone(), i.clone()).prop_map(|(a, b)| Call::Guard(a, b)),
        (d.clone(), i.clone(), 0..6000u64).prop_map(|(a, b, o)| Call::ReadU64(a, b, o)),
        (d, i).prop_map(|(a, b)| Call::ResetToError(a, b)),
    ]
}

/// Handles made so far, each with the index of the device that made it.
#[derive(Default)]
struct Pools {
    pds: Vec<(usize, Pd)>,
    mrs: Vec<(usize, Mr)>,
    cqs: Vec<(usize, Cq)>,
    qps: Vec<(usize, Qp)>,
}

fn pick<T: Copy>(v: &[(usize, T)], i: usize) -> Option<(usize, T)> {
    (!v.is_empty()).then(|| v[i % v.len()])
}

/// A handle of the other device must be refused.
fn foreign<T: std::fmt::Debug>(what: &str, r: Result<T, Error>) {
    assert!(
        matches!(r, Err(Error::WrongDevice(_) | Error::UnknownMr)),
        "{what} with another device's handle: {r:?}"
    );
}

fn run_calls(devs: &[Device; 2], calls: &[Call]) {
    let mut p = Pools::default();
    for c in calls {
        match *c {
            Call::AllocPd(d) => p.pds.push((d, devs[d].alloc_pd().unwrap())),
            Call::Register(d, i, len, access) => {
                if let Some((o, pd)) = pick(&p.pds, i) {
                    let r = devs[d].register(
                        pd,
                        vec![1u8; len.into()],
                        AccessFlags::from_bits_retain(access),
                    );
                    match (o == d, r) {
                        (true, Ok(mr)) => p.mrs.push((d, mr)),
                        (true, Err(e)) => assert!(matches!(e, Error::Verb(_)), "{e}"),
                        (false, r) => foreign("register", r),
                    }
                }
            }
            Call::Deregister(d, i) => {
                if let Some((o, mr)) = pick(&p.mrs, i) {
                    let r = devs[d].deregister(mr);
                    if o != d {
                        foreign("deregister", r);
                    } else if r.is_ok() {
                        // Once more: already gone.
                        foreign("deregister twice", devs[d].deregister(mr));
                    }
                }
            }
            Call::CreateCq(d, n) => p.cqs.push((d, devs[d].create_cq(n.into()).unwrap())),
            Call::CreateQp(d, i, j) => {
                if let (Some((o1, pd)), Some((o2, cq))) = (pick(&p.pds, i), pick(&p.cqs, j)) {
                    let r = devs[d].create_rc_qp(pd, cq, cq);
                    if o1 == d && o2 == d {
                        // Zero-capacity CQs and the like may be refused, never with a panic.
                        if let Ok(qp) = r {
                            p.qps.push((d, qp));
                        }
                    } else {
                        foreign("create_rc_qp", r);
                    }
                }
            }
            Call::DestroyQp(d, i) => {
                if let Some((o, qp)) = pick(&p.qps, i) {
                    let r = devs[d].destroy_qp(qp);
                    if o != d {
                        foreign("destroy_qp", r);
                    }
                }
            }
            Call::PostSend(d, i, j, off, len) | Call::PostRecv(d, i, j, off, len) => {
                if let (Some((o1, qp)), Some((o2, mr))) = (pick(&p.qps, i), pick(&p.mrs, j)) {
                    let Ok(sge) = mr.sge(off, len) else {
                        assert!(off + u64::from(len) > mr.len());
                        continue;
                    };
                    let r = if matches!(c, Call::PostSend(..)) {
                        devs[d].post_send(qp, SendWr::new(1, SendOp::Send).sge(sge))
                    } else {
                        devs[d].post_recv(
                            qp,
                            RecvWr {
                                wr_id: 1,
                                sg_list: vec![sge],
                            },
                        )
                    };
                    // A QP of the other device is refused; an MR's key of the other device is
                    // the engine's to refuse (an error now or an error completion later).
                    if o1 != d {
                        foreign("post", r);
                    }
                    let _ = o2;
                }
            }
            Call::PollCq(d, i) => {
                if let Some((o, cq)) = pick(&p.cqs, i) {
                    let mut out = Vec::new();
                    let n = devs[d].poll_cq(cq, &mut out, 16);
                    if o != d {
                        assert_eq!(n, 0);
                    }
                }
            }
            Call::Guard(d, i) => {
                if let Some((o, mr)) = pick(&p.mrs, i) {
                    let r = devs[d].mr_guard(&mr).map(|g| g.len());
                    if o != d {
                        foreign("mr_guard", r);
                    }
                }
            }
            Call::ReadU64(d, i, off) => {
                if let Some((o, mr)) = pick(&p.mrs, i) {
                    let r = devs[d].read_u64(&mr, off);
                    if o != d {
                        if off + 8 <= mr.len() {
                            foreign("read_u64", r);
                        }
                    } else if off + 8 > mr.len() {
                        assert!(matches!(r, Err(Error::OutOfRange { .. })), "{r:?}");
                    }
                }
            }
            Call::ResetToError(d, i) => {
                if let Some((o, qp)) = pick(&p.qps, i) {
                    let r = devs[d].reset_to_error(qp);
                    if o != d {
                        foreign("reset_to_error", r);
                    }
                }
            }
        }
    }
}

#[test]
fn api_random_calls_never_panic_and_refuse_foreign_handles() {
    // No root needed: the two devices are joined in memory.
    let (a, b) = Device::pair().unwrap();
    owned_memory(&a);
    let devs = [a, b];
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&proptest::collection::vec(call(), 1..60), |calls| {
            run_calls(&devs, &calls);
            Ok(())
        })
        .unwrap();
}

#[test]
fn api_async_wait_sleeps_on_the_cq_eventfd() {
    in_netns("api_async_wait_sleeps_on_the_cq_eventfd", "as", || {
        let (a, b, _ns) = pair("vas", 4096, AccessFlags::LOCAL_WRITE);
        let wr = RecvWr {
            wr_id: 9,
            sg_list: vec![b.mr.sge(0, 64).unwrap()],
        };
        b.dev.post_recv(b.qp, wr).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(600));
            let wr = SendWr::new(1, SendOp::Send).sge(a.mr.sge(0, 64).unwrap());
            a.dev.post_send(a.qp, wr).unwrap();
            let mut wcs = Vec::new();
            a.dev
                .wait_cq(a.cq, &mut wcs, 1, Duration::from_secs(10))
                .unwrap();
            assert_eq!(wcs[0].status, WcStatus::Success);
        });
        let (cpu0, wall0) = (Duration::from(cpu_time()), Instant::now());
        let wc = rt.block_on(b.dev.next_completion(b.cq)).unwrap();
        let (cpu, wall) = (Duration::from(cpu_time()) - cpu0, wall0.elapsed());
        assert_eq!((wc.wr_id, wc.status), (9, WcStatus::Success));
        sender.join().unwrap();
        // Busy polling would burn the whole wait; both progress threads and the waiter sleep.
        assert!(wall >= Duration::from_millis(500), "{wall:?}");
        assert!(cpu < wall / 3, "{cpu:?} of CPU over {wall:?} of waiting");
    });
}

/// Every kind of caller-owned buffer registers, and comes back with its bytes.
fn owned_memory(dev: &Device) {
    let pd = dev.alloc_pd().unwrap();
    let rw = AccessFlags::LOCAL_WRITE;
    let boxed: Box<[u8]> = vec![7u8; 100].into_boxed_slice();
    let mut bm = bytes::BytesMut::with_capacity(64);
    bm.extend_from_slice(b"bytes");
    for (mr, want) in [
        (dev.register(pd, vec![1u8; 10], rw).unwrap(), vec![1u8; 10]),
        (dev.register(pd, boxed, rw).unwrap(), vec![7u8; 100]),
        (dev.register(pd, bm, rw).unwrap(), b"bytes".to_vec()),
    ] {
        assert_eq!(&dev.mr_guard(&mr).unwrap()[..], &want[..]);
        assert_eq!(dev.deregister(mr).unwrap(), want);
    }
    for align in [8usize, 4096, 1 << 16] {
        let layout = std::alloc::Layout::from_size_align(24, align).unwrap();
        let mr = dev.register_layout(pd, layout, rw).unwrap();
        assert_eq!(mr.addr() % align as u64, 0, "{align}");
        assert_eq!(mr.len(), 24);
        dev.write_u64(&mr, 16, 0x0102_0304_0506_0708).unwrap();
        // Host byte order in memory.
        assert_eq!(
            dev.mr_guard(&mr).unwrap()[16..24],
            0x0102_0304_0506_0708u64.to_ne_bytes()
        );
        assert!(matches!(
            dev.read_u64(&mr, 17),
            Err(Error::OutOfRange { .. })
        ));
    }
}

/// Threads of this process named `rocev2-progress`.
fn progress_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|c| c.trim() == "rocev2-progress")
        .count()
}

/// [`progress_threads`] once it is `n` (or after 10 s): a new thread takes its name when it
/// first runs, and a joined one leaves `/proc` when the kernel has reaped it.
fn progress_threads_become(n: usize) -> usize {
    let end = Instant::now() + Duration::from_secs(10);
    while progress_threads() != n && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
    }
    progress_threads()
}

#[test]
fn api_progress_thread_stops_with_the_last_handle() {
    in_netns(
        "api_progress_thread_stops_with_the_last_handle",
        "pt",
        || {
            let (a, b, _ns) = pair("vpt", 64, AccessFlags::LOCAL_WRITE);
            assert_eq!(progress_threads_become(2), 2);
            let a2 = a.dev.clone();
            drop(a);
            // A clone keeps the device, and its thread, alive.
            assert_eq!(progress_threads(), 2);
            assert!(a2.alloc_pd().is_ok());
            drop(a2);
            // Joined, a thread may still be listed for a moment while the kernel reaps it.
            assert_eq!(progress_threads_become(1), 1);
            drop(b);
            assert_eq!(progress_threads_become(0), 0);
        },
    );
}

#[test]
fn api_caller_driven_server_answers_only_inside_its_calls() {
    in_netns(
        "api_caller_driven_server_answers_only_inside_its_calls",
        "cd",
        || {
            let cfg = DeviceConfig {
                progress: rocev2::ProgressMode::Caller,
                ..DeviceConfig::default()
            };
            let rights = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
            let (a, b, _ns) = pair_with("vcd", 4096, rights, cfg);
            assert_eq!(a.dev.progress_mode(), Some(rocev2::ProgressMode::Caller));
            b.dev.mr_guard(&b.mr).unwrap()[..4].copy_from_slice(b"read");
            let read = SendOp::Read {
                remote_addr: b.mr.addr(),
                rkey: b.mr.rkey(),
            };
            a.dev
                .post_send(a.qp, SendWr::new(1, read).sge(a.mr.sge(0, 4).unwrap()))
                .unwrap();
            // Nothing drives the server: no answer, however long the client waits.
            let mut wcs = Vec::new();
            let r = a.dev.wait_cq(a.cq, &mut wcs, 1, Duration::from_millis(300));
            assert!(matches!(r, Err(Error::Timeout)), "{r:?}");
            // Once the server is inside a call, it answers the request waiting in its socket.
            let server = std::thread::spawn(move || {
                let _ = b.dev.drain(Duration::from_secs(5));
                b
            });
            a.dev
                .wait_cq(a.cq, &mut wcs, 1, Duration::from_secs(10))
                .unwrap();
            assert_eq!(wcs[0].status, WcStatus::Success);
            assert_eq!(&a.dev.mr_guard(&a.mr).unwrap()[..4], b"read");
            drop(server.join().unwrap());
        },
    );
}
