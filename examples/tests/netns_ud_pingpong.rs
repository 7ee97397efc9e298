//! `ud_pingpong` server in one namespace, client in the other, over the packet and UDP
//! datapaths: both print ibv_ud_pingpong's address lines (the local one with `: GID`) and
//! completion lines with the right byte and iteration counts, and each side's remote QPN is the
//! other's local one, so every datagram reached the QP named in the exchange. A message larger
//! than the UD MTU is refused before the exchange, as rdma-core refuses it. With `--rdma-cm`
//! the peers find each other through SIDR (no TCP): the client's remote QPN is the server's
//! local one, and the server's the client's, and the ping-pong completes.

mod common;
use common::*;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_ud_pingpong");

/// The `QPN 0x…` of an address line starting with `which`, after checking its shape.
fn qpn(out: &str, which: &str, sep: char) -> String {
    let l = out
        .lines()
        .find(|l| l.starts_with(which))
        .unwrap_or_else(|| panic!("no {which:?} line in\n{out}"));
    assert!(l.contains("LID 0x0000, QPN 0x"), "{l}");
    assert!(l.contains(&format!("{sep} GID ::ffff:10.0.0.")), "{l}");
    let s = l.find("QPN").unwrap();
    l[s..s + "QPN 0x000000".len()].to_string()
}

fn pingpong(test: &str, mode: &str) {
    if !need_root(test) {
        return;
    }
    let tb = pair();
    // 2048 bytes (rdma-core's default) and the whole UD MTU of the 4200-byte link.
    for size in ["2048", "4096"] {
        let (s, c) = run_pair(
            &tb,
            BIN,
            &["--datapath", mode, "-s", size, "-n", "500"],
            Duration::from_secs(120),
        );
        let bytes = size.parse::<u64>().unwrap() * 500 * 2;
        for out in [&s.stdout, &c.stdout] {
            let lines: Vec<&str> = out.lines().collect();
            assert_eq!(lines.len(), 4, "{out}");
            assert!(
                lines[2].starts_with(&format!("{bytes} bytes in "))
                    && lines[2].ends_with(" Mbit/sec"),
                "{out}"
            );
            assert!(
                lines[3].starts_with("500 iters in ") && lines[3].ends_with(" usec/iter"),
                "{out}"
            );
        }
        assert_eq!(
            qpn(&s.stdout, "  local address:  ", ':'),
            qpn(&c.stdout, "  remote address: ", ',')
        );
        assert_eq!(
            qpn(&c.stdout, "  local address:  ", ':'),
            qpn(&s.stdout, "  remote address: ", ',')
        );
    }
}

#[test]
fn ud_pingpong_packet_completes() {
    pingpong("ud_pingpong_packet_completes", "packet");
}

#[test]
fn ud_pingpong_udp_completes() {
    pingpong("ud_pingpong_udp_completes", "udp");
}

#[test]
fn ud_pingpong_refuses_a_message_over_the_mtu() {
    if !need_root("ud_pingpong_refuses_a_message_over_the_mtu") {
        return;
    }
    let tb = pair();
    let mut server = tb.command("h1", BIN).expect("command");
    server.args(["-d", &ifname(&tb, "h1"), "--datapath", "udp", "-s", "4097"]);
    let out = server.output().expect("run ud_pingpong");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Requested size larger than port MTU (4096)"),
        "{err}"
    );
}

#[test]
fn ud_pingpong_rdma_cm_resolves_the_server_through_sidr() {
    let test = "ud_pingpong_rdma_cm_resolves_the_server_through_sidr";
    if !need_root(test) {
        return;
    }
    let tb = pair();
    let args = |host: &str| -> Vec<String> {
        [
            "-d",
            &ifname(&tb, host),
            "--datapath",
            "packet",
            "--rdma-cm",
            "-n",
            "200",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let timeout = Duration::from_secs(120);
    let mut server = tb.command("h1", BIN).expect("command");
    server.args(args("h1"));
    let mut server = rocev2_testbed::Process::spawn(&mut server).expect("server");
    // The server prints its address once its UD listener is bound.
    server
        .wait_for_line(|l| l.starts_with("  local address:"), timeout)
        .expect("server listening");
    let mut client = tb.command("h0", BIN).expect("command");
    let h1 = tb.node("h1").expect("h1").ipv4().expect("v4").to_string();
    client.args(args("h0")).arg(h1);
    let c = rocev2_testbed::Process::spawn(&mut client)
        .expect("client")
        .wait(timeout)
        .expect("client exits");
    let s = server.wait(timeout).expect("server exits");
    assert!(
        c.status.success() && s.status.success(),
        "{}\n{}\n{}\n{}",
        c.stdout,
        c.stderr,
        s.stdout,
        s.stderr
    );
    for out in [&s.stdout, &c.stdout] {
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 4, "{out}");
        assert!(lines[3].starts_with("200 iters in "), "{out}");
    }
    assert_eq!(
        qpn(&s.stdout, "  local address:  ", ':'),
        qpn(&c.stdout, "  remote address: ", ',')
    );
    assert_eq!(
        qpn(&c.stdout, "  local address:  ", ':'),
        qpn(&s.stdout, "  remote address: ", ',')
    );
}
