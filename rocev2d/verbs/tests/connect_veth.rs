//! Connect in one call ([`rocev2::connect`]) between two [`rocev2::Device`]s on the ends of a
//! veth pair over the UDP datapath: the client learns the server's region from the exchange
//! and runs a WRITE, a SEND, a READ and two atomics against it, every byte checked; once with
//! the blocking calls over IPv6, once with both sides' exchange on tokio over IPv4. Then the
//! failures name their step: a peer that sends garbage, one that never answers, one whose
//! bring-up fails.
//!
//! Needs root: each test re-runs itself inside a fresh network namespace.

use rocev2::connect::{self, ConnectConfig, ConnectError, Connection};
use rocev2::{
    AccessFlags, DatapathKind, Device, EndpointFormatError, Mr, Pd, Qp, RecvWr, RemoteMr, SendOp,
    SendWr, WcOpcode, WcStatus,
};
use rocev2_testbed::exec::Namespace;
use rocev2_testbed::{VethEnd, veth_pair};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsFd;
use std::time::Duration;

const SERVER: &str = "10.9.4.2";
const SERVER6: &str = "fd00:9:4::2";
const CLIENT: &str = "10.9.4.1";
const CLIENT6: &str = "fd00:9:4::1";

/// A device on `iface` with one QP and a 64 KiB region granting every right.
fn open(iface: &str) -> (Device, Pd, Qp, rocev2::Cq, Mr) {
    let d = Device::open(iface, DatapathKind::Udp).unwrap();
    let pd = d.alloc_pd().unwrap();
    let all = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let mr = d.register(pd, vec![0u8; 65536], all).unwrap();
    let cq = d.create_cq(16).unwrap();
    let qp = d.create_rc_qp(pd, cq, cq).unwrap();
    (d, pd, qp, cq, mr)
}

/// The server's side, in namespace `ns` (a thread of its own entered it): serves the main
/// exchange on one listener, then fails to connect its QP (in RTS already) on the second and
/// returns that error.
fn server(
    ns: &str,
    main_ip: &str,
    accept: Accept,
    tx: std::sync::mpsc::Sender<[SocketAddr; 2]>,
) -> ConnectError {
    let f = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
    rustix::thread::move_into_link_name_space(
        f.as_fd(),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )
    .unwrap();
    let (d, _, qp, cq, mr) = open("cnb");
    let l = [main_ip, SERVER].map(|ip| TcpListener::bind((ip, 0)).unwrap());
    tx.send(l.each_ref().map(|l| l.local_addr().unwrap()))
        .unwrap();
    let [main, again] = l;
    let (d, qp) = serve(d, qp, cq, mr, main, accept);
    connect::accept(&d, qp, &again, &ConnectConfig::default()).unwrap_err()
}

/// How the server accepts: [`accept_blocking`] or [`accept_tokio`].
type Accept = fn(&Device, Qp, TcpListener, &ConnectConfig) -> Connection;

fn accept_blocking(d: &Device, qp: Qp, l: TcpListener, cfg: &ConnectConfig) -> Connection {
    connect::accept(d, qp, &l, cfg).unwrap()
}

/// `connect::tokio::accept` on a runtime of its own; the stream goes back to blocking.
#[cfg(feature = "tokio")]
fn accept_tokio(d: &Device, qp: Qp, l: TcpListener, cfg: &ConnectConfig) -> Connection {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let c = rt.block_on(async {
        l.set_nonblocking(true).unwrap();
        let l = tokio::net::TcpListener::from_std(l).unwrap();
        connect::tokio::accept(d, qp, &l, cfg).await.unwrap()
    });
    let stream = c.stream.into_std().unwrap();
    stream.set_nonblocking(false).unwrap();
    Connection {
        local: c.local,
        peer: c.peer,
        stream,
    }
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 13 + 5) as u8).collect()
}

/// The server: offers its region, receives one SEND, serves the client's one-sided
/// operations until the client's byte on the TCP connection, then checks its memory.
fn serve(
    d: Device,
    qp: Qp,
    cq: rocev2::Cq,
    mr: Mr,
    l: TcpListener,
    accept: Accept,
) -> (Device, Qp) {
    d.post_recv(
        qp,
        RecvWr {
            wr_id: 9,
            sg_list: vec![mr.sge(32768, 1000).unwrap()],
        },
    )
    .unwrap();
    let mut c = accept(&d, qp, l, &ConnectConfig::default().mr(&mr));
    assert_eq!(c.local.mrs, [RemoteMr::from(&mr)]);
    let mut wcs = Vec::new();
    d.wait_cq(cq, &mut wcs, 4, Duration::from_secs(20)).unwrap();
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status, wcs[0].opcode),
        (9, WcStatus::Success, WcOpcode::Recv)
    );
    // The progress thread serves the client's one-sided operations meanwhile.
    let mut done = [0u8];
    c.stream.read_exact(&mut done).unwrap();
    d.drain(Duration::from_secs(5)).unwrap();
    {
        let m = d.mr_guard(&mr).unwrap();
        assert_eq!(&m[..4096], &pattern(4096)[..], "WRITE landed");
        assert_eq!(&m[32768..33768], &pattern(1000)[..], "SEND landed");
        assert_eq!(u64::from_ne_bytes(m[8192..8200].try_into().unwrap()), 42);
    }
    c.stream.write_all(&[1]).unwrap();
    (d, qp)
}

/// The client's work against the server's region: a WRITE, a SEND, a READ of what was
/// written, a FetchAdd and a CompareSwap on one word.
fn work(mr: &Mr, peer: &RemoteMr) -> Vec<SendWr> {
    let at = |off, len| peer.addr_at(off, len).unwrap();
    vec![
        SendWr::new(
            1,
            SendOp::Write {
                remote_addr: at(0, 4096),
                rkey: peer.rkey,
            },
        )
        .sge(mr.sge(0, 4096).unwrap()),
        SendWr::new(2, SendOp::Send).sge(mr.sge(0, 1000).unwrap()),
        SendWr::new(
            3,
            SendOp::Read {
                remote_addr: at(0, 4096),
                rkey: peer.rkey,
            },
        )
        .sge(mr.sge(16384, 4096).unwrap()),
        SendWr::new(
            4,
            SendOp::FetchAdd {
                remote_addr: at(8192, 8),
                rkey: peer.rkey,
                add: 7,
            },
        )
        .sge(mr.sge(20480, 8).unwrap()),
        SendWr::new(
            5,
            SendOp::CompareSwap {
                remote_addr: at(8192, 8),
                rkey: peer.rkey,
                compare: 7,
                swap: 42,
            },
        )
        .sge(mr.sge(20488, 8).unwrap()),
    ]
}

/// What the READ and the atomics brought back.
fn check_client(d: &Device, mr: &Mr) {
    let m = d.mr_guard(mr).unwrap();
    assert_eq!(&m[16384..20480], &pattern(4096)[..], "READ came back");
    let word = |o: usize| u64::from_ne_bytes(m[o..o + 8].try_into().unwrap());
    assert_eq!(
        (word(20480), word(20488)),
        (0, 7),
        "atomics' original values"
    );
}

/// The client's connection and work, with the blocking calls.
fn client_blocking(a: &Device, qa: Qp, cq_a: rocev2::Cq, mr_a: &Mr, addr: SocketAddr) {
    let mut c = connect::connect(a, qa, addr, &ConnectConfig::default()).unwrap();
    assert_eq!(c.peer.ip, addr.ip());
    let me = if addr.is_ipv6() { CLIENT6 } else { CLIENT };
    assert_eq!(c.local.ip.to_string(), me);
    assert_eq!(c.peer.mrs.len(), 1);
    assert_eq!(c.peer.mrs[0].len, 65536);
    for wr in work(mr_a, &c.peer.mrs[0]) {
        let id = wr.wr_id;
        a.post_send(qa, wr).unwrap();
        let mut wcs = Vec::new();
        a.wait_cq(cq_a, &mut wcs, 1, Duration::from_secs(20))
            .unwrap();
        assert_eq!((wcs[0].wr_id, wcs[0].status), (id, WcStatus::Success));
    }
    c.stream.write_all(&[0]).unwrap();
    let mut ok = [0u8];
    c.stream.read_exact(&mut ok).unwrap();
    assert_eq!(ok, [1]);
}

/// The client's connection and work on tokio.
#[cfg(feature = "tokio")]
fn client_tokio(a: &Device, qa: Qp, cq_a: rocev2::Cq, mr_a: &Mr, addr: SocketAddr) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut c = connect::tokio::connect(a, qa, addr, &ConnectConfig::default())
            .await
            .unwrap();
        assert_eq!(c.peer.ip, addr.ip());
        for wr in work(mr_a, &c.peer.mrs[0]) {
            let id = wr.wr_id;
            a.post_send(qa, wr).unwrap();
            let wc = a.next_completion(cq_a).await.unwrap();
            assert_eq!((wc.wr_id, wc.status), (id, WcStatus::Success));
        }
        c.stream.write_all(&[0]).await.unwrap();
        assert_eq!(c.stream.read_u8().await.unwrap(), 1);
    });
}

/// The client side ([`client_blocking`] or [`client_tokio`]) against [`server`] accepting
/// with `accept` in namespace `ns`, then the failures.
fn body(client: Client, accept: Accept, main_ip: &'static str, ns: &str) {
    let _ns = Namespace::add(ns).unwrap();
    veth_pair(
        VethEnd {
            addrs: &["10.9.4.1/24", "fd00:9:4::1/64"],
            ..VethEnd::new("cna")
        },
        VethEnd {
            netns: Some(ns),
            addrs: &["10.9.4.2/24", "fd00:9:4::2/64"],
            ..VethEnd::new("cnb")
        },
    )
    .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let ns_b = ns.to_string();
    let server = std::thread::spawn(move || server(&ns_b, main_ip, accept, tx));
    let [addr, again] = rx.recv().unwrap();
    let (a, pd_a, qa, cq_a, mr_a) = open("cna");
    a.mr_guard(&mr_a).unwrap()[..4096].copy_from_slice(&pattern(4096));
    let cfg = ConnectConfig::default();
    client(&a, qa, cq_a, &mr_a, addr);
    check_client(&a, &mr_a);
    a.drain(Duration::from_secs(5)).unwrap();
    // A peer whose bring-up fails: the server's QP is connected already; our fresh QP
    // reaches RTS and hears why the peer's did not.
    let fresh = a.create_rc_qp(pd_a, cq_a, cq_a).unwrap();
    let e = connect::connect(&a, fresh, again, &cfg).unwrap_err();
    let server_err = server.join().unwrap();
    let ConnectError::Local(local) = &server_err else {
        panic!("{server_err}")
    };
    let ConnectError::Peer(why) = &e else {
        panic!("{e}")
    };
    // The peer hears the server's whole reason, every cause of it.
    assert_eq!(why, &rocev2::report(local), "{server_err}");
    failures(&a, fresh);
}

/// A peer that is no rocev2 program: the error names the step.
fn failures(a: &Device, qa: Qp) {
    let quick = ConnectConfig {
        timeout: Duration::from_millis(300),
        ..ConnectConfig::default()
    };
    // A peer that sends something else.
    let l = TcpListener::bind((CLIENT, 0)).unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.write_all(b"HELLO, this is no endpoint\n").unwrap();
        let _ = s.read(&mut [0; 64]);
    });
    let e = connect::connect(a, qa, addr, &quick).unwrap_err();
    assert!(
        matches!(e, ConnectError::Format(EndpointFormatError::Version(b'H'))),
        "{e}"
    );
    let why = std::error::Error::source(&e).map(|c| c.to_string());
    assert!(
        why.as_deref()
            .is_some_and(|w| w.contains("version 72 is not supported")),
        "{e}: {why:?}"
    );
    t.join().unwrap();
    // A peer that accepts and says nothing.
    let l = TcpListener::bind((CLIENT, 0)).unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let _ = s.read(&mut [0; 4096]);
        std::thread::sleep(Duration::from_millis(600));
    });
    let e = connect::connect(a, qa, addr, &quick).unwrap_err();
    assert!(
        matches!(e, ConnectError::Timeout { step, .. } if step.contains("peer's endpoint")),
        "{e}"
    );
    t.join().unwrap();
}

type Client = fn(&Device, Qp, rocev2::Cq, &Mr, SocketAddr);

fn in_netns(test: &str, tag: &str, client: Client, accept: Accept, main_ip: &'static str) {
    let ns = format!("rv2cn{}{tag}", std::process::id());
    if rocev2_testbed::exec::in_fresh_netns(test, &ns, Duration::from_secs(300))
        .expect("re-run in a fresh namespace")
    {
        body(client, accept, main_ip, &format!("{ns}b"));
    }
}
#[test]
fn connect_in_one_call_blocking_ipv6() {
    in_netns(
        "connect_in_one_call_blocking_ipv6",
        "s",
        client_blocking,
        accept_blocking,
        SERVER6,
    );
}

#[cfg(feature = "tokio")]
#[test]
fn connect_in_one_call_tokio() {
    in_netns(
        "connect_in_one_call_tokio",
        "t",
        client_tokio,
        accept_tokio,
        SERVER,
    );
}
