//! The API's costs, for deploy/bench/api-async.sh: one process, device A on interface `--a` in
//! its own namespace, device B on `--b` opened from a thread moved into namespace `--b-netns`,
//! UDP datapath, 64-byte SEND ping-pongs.
//!
//! 1. idle: B awaits a completion that never comes (its CQ's `Completions` stream on a tokio
//!    runtime) for
//!    `--idle-secs`; the process's CPU time over that wait, in % of one core (both progress
//!    threads included, in the default adaptive mode);
//! 2. async against blocking, busy-polling (`WaitMode::Spin` progress threads): the ping-pong's
//!    median round trip with A reaping by `Device::wait_cq`, then by `next_completion`;
//! 3. progress thread against caller-driven, busy-polling: the same blocking ping-pong with
//!    `ProgressMode::Thread` and with `ProgressMode::Caller`.
//!
//! Prints one `key value` line per number.

use rocev2::{
    AccessFlags, ConnectOptions, Cq, DatapathKind, Device, DeviceConfig, DriverConfig, Mr,
    ProgressMode, Qp, RecvWr, RemoteQp, SendOp, SendWr, WaitMode, WcOpcode, WorkCompletion,
};
use std::time::{Duration, Instant};

struct Side {
    dev: Device,
    mr: Mr,
    cq: Cq,
    qp: Qp,
}

struct Args {
    a: String,
    b: String,
    b_netns: String,
    iters: usize,
    idle_secs: u64,
}

fn args() -> Args {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        a: String::new(),
        b: String::new(),
        b_netns: String::new(),
        iters: 20_000,
        idle_secs: 5,
    };
    while let Some(k) = it.next() {
        let v = it.next().unwrap_or_default();
        match k.as_str() {
            "--a" => a.a = v,
            "--b" => a.b = v,
            "--b-netns" => a.b_netns = v,
            "--iters" => a.iters = v.parse().expect("--iters N"),
            "--idle-secs" => a.idle_secs = v.parse().expect("--idle-secs S"),
            _ => {
                panic!("usage: api_bench --a IF --b IF --b-netns NAME [--iters N] [--idle-secs S]")
            }
        }
    }
    a
}

fn open(name: &str, cfg: DeviceConfig) -> Side {
    let dev = Device::open_with(name, DatapathKind::Udp, cfg).expect("open");
    let pd = dev.alloc_pd().unwrap();
    let mr = dev
        .register(pd, vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let cq = dev.create_cq(256).unwrap();
    let qp = dev.create_rc_qp(pd, cq, cq).unwrap();
    Side { dev, mr, cq, qp }
}

/// Both sides with `cfg`, connected, a receive posted on each.
fn pair(a: &Args, cfg: DeviceConfig) -> (Side, Side) {
    let sa = open(&a.a, cfg);
    let (b, ns) = (a.b.clone(), format!("/run/netns/{}", a.b_netns));
    let sb = std::thread::spawn(move || {
        let f = std::fs::File::open(&ns).expect("--b-netns");
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&f),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .expect("setns");
        open(&b, cfg)
    })
    .join()
    .unwrap();
    let ip = |s: &Side| s.dev.source_ip(false).unwrap();
    for (me, peer) in [(&sa, &sb), (&sb, &sa)] {
        let remote = RemoteQp {
            qpn: peer.qp.qpn(),
            psn: 0,
            ip: ip(peer),
            mac: Some(peer.dev.interface().mac),
        };
        me.dev
            .connect(me.qp, &remote, &ConnectOptions::default())
            .unwrap();
        post_recv(me);
    }
    (sa, sb)
}

fn post_recv(s: &Side) {
    let wr = RecvWr {
        wr_id: 0,
        sg_list: vec![s.mr.sge(0, 64).unwrap()],
    };
    s.dev.post_recv(s.qp, wr).unwrap();
}

fn send(s: &Side) {
    let wr = SendWr::new(1, SendOp::Send).sge(s.mr.sge(64, 64).unwrap());
    s.dev.post_send(s.qp, wr).unwrap();
}

/// Blocks until a receive completes (send completions are passed over).
fn wait_recv(s: &Side, wcs: &mut Vec<WorkCompletion>) {
    loop {
        wcs.clear();
        s.dev
            .wait_cq(s.cq, wcs, 16, Duration::from_secs(10))
            .unwrap();
        if wcs.iter().any(|w| w.opcode == WcOpcode::Recv) {
            return;
        }
    }
}

/// B echoes `n` messages in a thread; returns A's median round trip in µs.
fn pingpong(a: &Side, b: Side, n: usize, async_a: bool) -> f64 {
    let echo = std::thread::spawn(move || {
        let mut wcs = Vec::new();
        for _ in 0..n {
            wait_recv(&b, &mut wcs);
            post_recv(&b);
            send(&b);
        }
        // Caller-driven, the last echo leaves only while B is driven.
        let _ = b.dev.drain(Duration::from_secs(2));
        b
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut rtts = Vec::with_capacity(n);
    let mut wcs = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        send(a);
        if async_a {
            rt.block_on(async {
                loop {
                    let wc = a.dev.next_completion(a.cq).await.unwrap();
                    if wc.opcode == WcOpcode::Recv {
                        break;
                    }
                }
            });
        } else {
            wait_recv(a, &mut wcs);
        }
        rtts.push(t.elapsed().as_secs_f64() * 1e6);
        post_recv(a);
    }
    let _ = a.dev.drain(Duration::from_secs(1));
    drop(echo.join().unwrap());
    rtts.sort_by(f64::total_cmp);
    rtts[n / 2]
}

fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split(' ')
        .skip(11)
        .take(2)
        .map(|v| v.parse::<u64>().unwrap())
        .sum()
}

fn main() {
    let a = args();
    let spin = |progress| DeviceConfig {
        driver: DriverConfig {
            wait: WaitMode::Spin,
            ..DriverConfig::default()
        },
        progress,
        ..DeviceConfig::default()
    };

    let (_sa, sb) = pair(&a, DeviceConfig::default());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (c0, t0) = (cpu_ticks(), Instant::now());
    let mut stream = sb.dev.completions(sb.cq);
    let waited = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(a.idle_secs), stream.next()).await
    });
    assert!(waited.is_err(), "nothing should complete while idle");
    // Clock ticks are 10 ms.
    let idle = (cpu_ticks() - c0) as f64 * 0.01 / t0.elapsed().as_secs_f64() * 100.0;
    println!("idle_async_wait_cpu_pct {idle:.2}");
    drop((stream, _sa, sb));

    let (sa, sb) = pair(&a, spin(ProgressMode::Thread));
    let blocking = pingpong(&sa, sb, a.iters, false);
    drop(sa);
    let (sa, sb) = pair(&a, spin(ProgressMode::Thread));
    let asynch = pingpong(&sa, sb, a.iters, true);
    drop(sa);
    println!("spin_thread_blocking_rtt_us {blocking:.2}");
    println!("spin_thread_async_rtt_us {asynch:.2}");
    println!("async_minus_blocking_us {:.2}", asynch - blocking);

    let (sa, sb) = pair(&a, spin(ProgressMode::Caller));
    let caller = pingpong(&sa, sb, a.iters, false);
    drop(sa);
    println!("spin_caller_blocking_rtt_us {caller:.2}");
    println!("thread_over_caller_rtt_ratio {:.3}", blocking / caller);
}
