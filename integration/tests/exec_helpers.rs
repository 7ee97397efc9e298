//! Scenario: the helpers for running programs inside a host. Readiness by a printed line and
//! by a bound port (and a timeout when nothing binds), JSON collected from a command's stdout,
//! a failing command's stderr in the error, and a dropped `Process` killed inside the host.

mod common;

use common::{BIN, TIMEOUT, need_root, running};
use rocev2_testbed::exec::{Proto, run, wait_for_port};
use rocev2_testbed::probe::PingReport;
use rocev2_testbed::{Error, IfCounters, LinkParams, Process, Testbed, Topology, collect_json};
use std::time::{Duration, Instant};

#[test]
fn helpers_run_wait_and_collect_inside_hosts() {
    if !need_root("helpers_run_wait_and_collect_inside_hosts") {
        return;
    }
    let tb = Testbed::up_topology(&Topology::Pair {
        link: LinkParams::default(),
    })
    .unwrap();
    let h1 = tb.node("h1").unwrap().clone();

    // Nothing bound yet: the port wait times out, quickly.
    let t = Instant::now();
    let e = wait_for_port(&h1.netns, Proto::Udp, 4791, Duration::from_millis(200));
    assert!(matches!(e, Err(Error::Timeout { .. })), "{e:?}");
    assert!(t.elapsed() < Duration::from_secs(5));

    let mut echo = Process::spawn(
        tb.command("h1", BIN)
            .unwrap()
            .args(["probe", "echo", "--port", "4791"]),
    )
    .unwrap();
    wait_for_port(&h1.netns, Proto::Udp, 4791, TIMEOUT).unwrap();
    // Bound in h1 only: h0's namespace has no such socket.
    let h0_ns = &tb.node("h0").unwrap().netns;
    assert!(wait_for_port(h0_ns, Proto::Udp, 4791, Duration::from_millis(100)).is_err());
    echo.wait_for_line(|l| l == "ready", TIMEOUT).unwrap();

    // JSON from a command inside h0, checked against h1's counters.
    let before = tb.counters("h1", "h0").unwrap();
    let report: PingReport = collect_json(
        tb.command("h0", BIN).unwrap().args([
            "probe",
            "ping",
            "--target",
            "10.0.0.2:4791",
            "--count",
            "5",
        ]),
        TIMEOUT,
    )
    .unwrap();
    assert_eq!((report.results[0].sent, report.results[0].received), (5, 5));
    let got = tb.counters("h1", "h0").unwrap().since(&before);
    assert!(got.rx_packets >= 5, "{got:?}");
    // The same counters through the free function, by namespace and interface name.
    let direct = IfCounters::read(&h1.netns, &h1.ports[0].ifname).unwrap();
    assert!(direct.rx_packets >= before.rx_packets + 5);

    // A failing command: its stderr is in the error.
    let e = run(
        tb.command("h0", "sh")
            .unwrap()
            .args(["-c", "echo boom >&2; exit 3"]),
        TIMEOUT,
    );
    assert!(
        matches!(&e, Err(Error::Failed { stderr, .. }) if stderr == "boom"),
        "{e:?}"
    );

    // Dropping the Process kills the server inside h1.
    let pid = echo.id();
    assert!(running(pid));
    drop(echo);
    assert!(!running(pid));
    tb.down().unwrap();
}
