//! `rc_pingpong` server in one namespace, client in the other, over each datapath: both print
//! ibv_rc_pingpong's address lines and completion lines with the right byte and iteration
//! counts, and each side's remote QPN/PSN is the other's local one.

mod common;
use common::*;
use rocev2_testbed::exec::run_server_client;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_rc_pingpong");

/// `(qpn, psn)` of a `  local address:` / `  remote address:` line.
fn qpn_psn(out: &str, which: &str) -> String {
    let l = out
        .lines()
        .find(|l| l.starts_with(which))
        .unwrap_or_else(|| panic!("no {which:?} line in\n{out}"));
    assert!(l.contains("LID 0x0000, QPN 0x"), "{l}");
    assert!(l.contains(", GID ::ffff:10.0.0."), "{l}");
    let s = l.find("QPN").unwrap();
    l[s..l.find(", GID").unwrap()].to_string()
}

fn pingpong(test: &str, mode: &str) {
    if !need_root(test) {
        return;
    }
    let tb = pair();
    let (s, c) = run_pair(
        &tb,
        BIN,
        &["--datapath", mode, "-s", "4096", "-n", "1000"],
        Duration::from_secs(120),
    );
    for out in [&s.stdout, &c.stdout] {
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 4, "{out}");
        assert!(
            lines[2].starts_with("8192000 bytes in ") && lines[2].ends_with(" Mbit/sec"),
            "{out}"
        );
        assert!(
            lines[3].starts_with("1000 iters in ") && lines[3].ends_with(" usec/iter"),
            "{out}"
        );
    }
    assert_eq!(
        qpn_psn(&s.stdout, "  local address:  "),
        qpn_psn(&c.stdout, "  remote address: ")
    );
    assert_eq!(
        qpn_psn(&c.stdout, "  local address:  "),
        qpn_psn(&s.stdout, "  remote address: ")
    );
}

#[test]
fn rc_pingpong_udp_completes() {
    pingpong("rc_pingpong_udp_completes", "udp");
}

#[test]
fn rc_pingpong_packet_completes() {
    pingpong("rc_pingpong_packet_completes", "packet");
}

#[test]
fn rc_pingpong_xdp_completes() {
    pingpong("rc_pingpong_xdp_completes", "xdp");
}

/// `-c` as rdma-core's `ibv_rc_pingpong` means it: the client zeroes the first byte of each
/// page it sends once, and the server checks, after the loop, that every page it received
/// starts with 0 (buffers start as 0x7b). A client without `-c` sends 0x7b there, so the
/// server reports both pages of an 8 KiB message; with `-c` on both sides it reports none.
/// Both sides pass `-g 1`, which is the IPv4-mapped GID as on rdma_rxe (0 is link-local).
#[test]
fn rc_pingpong_chk_validates_like_rdma_core() {
    if !need_root("rc_pingpong_chk_validates_like_rdma_core") {
        return;
    }
    let tb = pair();
    let args = ["--datapath", "udp", "-s", "8192", "-n", "20", "-g", "1"];
    let chk: Vec<&str> = args.iter().copied().chain(["-c"]).collect();
    let (s, c) = run_pair_args(&tb, BIN, &chk, &chk, Duration::from_secs(60));
    for out in [&s.stdout, &c.stdout] {
        // Asserts the IPv4-mapped GID on both address lines.
        qpn_psn(out, "  local address:  ");
        qpn_psn(out, "  remote address: ");
    }
    assert!(!s.stdout.contains("invalid data"), "{}", s.stdout);
    assert_eq!(s.stdout.lines().count(), 4, "{}", s.stdout);

    let (s, c) = run_pair_args(&tb, BIN, &chk, &args, Duration::from_secs(60));
    let invalid: Vec<&str> = s
        .stdout
        .lines()
        .filter(|l| l.starts_with("invalid data in page"))
        .collect();
    assert_eq!(
        invalid,
        ["invalid data in page 0", "invalid data in page 1"],
        "{}",
        s.stdout
    );
    // Only the server validates, as in rdma-core.
    assert!(!c.stdout.contains("invalid data"), "{}", c.stdout);
}

/// Two namespaces joined as rxe-vm joins its VMs to the host: the server's veth `s0` is a
/// port of a bridge that lives in the server's own namespace, and the bridge device (Linux's
/// default `arp_ignore=0`) answers ARP for the server's address too. Dropped: both go.
struct ArpFlux {
    server: String,
    client: String,
}

impl ArpFlux {
    fn up() -> ArpFlux {
        let id = std::process::id();
        let f = ArpFlux {
            server: format!("rv2fl{id}s"),
            client: format!("rv2fl{id}c"),
        };
        let (s, c) = (f.server.as_str(), f.client.as_str());
        for line in [
            format!("netns add {s}"),
            format!("netns add {c}"),
            format!("-n {s} link set lo up"),
            format!("-n {c} link set lo up"),
            format!("-n {s} link add br0 type bridge"),
            format!("-n {s} link set br0 up"),
            format!("-n {s} link add s0 type veth peer name s0b"),
            format!("-n {s} link set s0b master br0 up"),
            format!("-n {s} addr add 10.77.0.1/24 dev s0"),
            format!("-n {s} link set s0 up"),
            format!("-n {s} link add c0b type veth peer name c0 netns {c}"),
            format!("-n {s} link set c0b master br0 up"),
            format!("-n {c} addr add 10.77.0.2/24 dev c0"),
            format!("-n {c} link set c0 up"),
        ] {
            let mut cmd = std::process::Command::new("ip");
            cmd.args(line.split(' '));
            rocev2_testbed::exec::run(&mut cmd, Duration::from_secs(10)).expect("ip");
        }
        f
    }

    fn mac(ns: &str, dev: &str) -> String {
        let mut cmd = std::process::Command::new("ip");
        cmd.args(["-n", ns, "-br", "link", "show", dev]);
        let out = rocev2_testbed::exec::run(&mut cmd, Duration::from_secs(10)).expect("ip");
        out.stdout
            .split_whitespace()
            .nth(2)
            .expect("MAC")
            .to_string()
    }

    /// The MAC the client's kernel holds for the server's address.
    fn client_entry(&self) -> String {
        let mut cmd = std::process::Command::new("ip");
        cmd.args([
            "-n",
            &self.client,
            "neigh",
            "show",
            "10.77.0.1",
            "dev",
            "c0",
        ]);
        let out = rocev2_testbed::exec::run(&mut cmd, Duration::from_secs(10)).expect("ip");
        let words: Vec<&str> = out.stdout.split_whitespace().collect();
        let at = words.iter().position(|w| *w == "lladdr").expect("an entry");
        words[at + 1].to_string()
    }
}

impl Drop for ArpFlux {
    fn drop(&mut self) {
        for ns in [&self.server, &self.client] {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", ns])
                .status();
        }
    }
}

/// An rdma_rxe client whose first messages were lost for 5 s: its kernel had
/// cached the server namespace's *bridge* MAC for the server's address (the bridge answered
/// its ARP first), so its frames never reached the interface our datapath serves. The client
/// here starts from that state (its entry set to the bridge's MAC, as the first ARP reply
/// leaves it) and sends first; the server announces its MAC when its QP connects (gratuitous
/// ARP), before it sends its address, so the client's QP is built toward the right MAC. Without
/// the announcement the client sends to the bridge and ends in RETRY_EXC_ERR.
#[test]
fn rc_pingpong_server_behind_arp_flux() {
    if !need_root("rc_pingpong_server_behind_arp_flux") {
        return;
    }
    let f = ArpFlux::up();
    let (bridge, s0) = (
        ArpFlux::mac(&f.server, "br0"),
        ArpFlux::mac(&f.server, "s0"),
    );
    // What the client's ARP left: the client holds the bridge's MAC, and the server learned the
    // client's from that ARP request, so the server's kernel has no reason to ARP (which would
    // correct the client as the kernel's delayed probe did after 5 s on rxe-vm).
    let c0 = ArpFlux::mac(&f.client, "c0");
    for (ns, ip, mac, dev, nud) in [
        (&f.client, "10.77.0.1", &bridge, "c0", "stale"),
        (&f.server, "10.77.0.2", &c0, "s0", "permanent"),
    ] {
        let mut cmd = std::process::Command::new("ip");
        cmd.args(["-n", ns, "neigh", "replace", ip, "lladdr", mac]);
        cmd.args(["dev", dev, "nud", nud]);
        rocev2_testbed::exec::run(&mut cmd, Duration::from_secs(10)).expect("ip neigh");
    }
    assert_eq!(f.client_entry(), bridge);

    let args = ["--datapath", "packet", "-s", "4096", "-n", "20"];
    // One CPU for the server, so its announcement and its TCP reply reach the client in order.
    let mut cmd = rocev2_testbed::exec::netns_command(&f.server, "taskset");
    cmd.args(["-c", "0", BIN, "-d", "s0"]).args(args);
    let mut client = rocev2_testbed::exec::netns_command(&f.client, BIN);
    client.args(["-d", "c0"]).args(args).arg("10.77.0.1");
    run_server_client(
        &mut cmd,
        &f.server,
        PORT,
        &mut client,
        Duration::from_secs(60),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        f.client_entry(),
        s0,
        "the announcement moved the client to s0's MAC"
    );
}
