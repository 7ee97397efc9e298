//! Scenario: a port shaped to R delivers R. A UDP flood paced at 1.5 R crosses a routed
//! dumbbell whose switch-to-switch link is limited to R = 100 Mbit/s; the receiver measures
//! within 15 % of R (Ethernet frame bytes, as tc counts them), for the htb and the tbf shaper,
//! and the flood really was throttled (the sender sent more than arrived). The tolerance is
//! this 2-core VM's: on a quiet host the shapers deliver within 1 % (docs/switch.md), but on
//! some days their dequeue runs late for seconds (a CI run measured TBF at 90.0 %, HTB at
//! 96.8 %; `switch_port` saw HTB at 82–98 % the same day).

mod common;

use common::{BIN, TIMEOUT, need_root};
use rocev2_testbed::probe::{BlastReport, SinkReport};
use rocev2_testbed::{LinkParams, Process, Shaper, SwitchKind, Testbed, Topology};
use std::net::{IpAddr, SocketAddr};

const RATE_BPS: u64 = 100_000_000;
const BUFFER_BYTES: u64 = 64 * 1024;
const PAYLOAD_BYTES: usize = 1400;
const DURATION_MS: u64 = 2000;

/// Flood `b0` from `a0` through the bottleneck; returns (sent, received).
fn flood(tb: &Testbed) -> (BlastReport, SinkReport) {
    let mut sink_cmd = tb.command("b0", BIN).unwrap();
    sink_cmd.args([
        "probe",
        "sink",
        "--port",
        "5201",
        "--idle-ms",
        "300",
        "--max-ms",
        "10000",
    ]);
    let mut sink = Process::spawn(&mut sink_cmd).unwrap();
    sink.wait_for_line(|l| l == "ready", TIMEOUT).unwrap();
    let target = SocketAddr::new(IpAddr::V4(tb.node("b0").unwrap().ipv4().unwrap()), 5201);
    let sent: BlastReport = rocev2_testbed::collect_json(
        tb.command("a0", BIN).unwrap().args([
            "probe",
            "blast",
            "--target",
            &target.to_string(),
            "--payload-bytes",
            &PAYLOAD_BYTES.to_string(),
            "--duration-ms",
            &DURATION_MS.to_string(),
            "--rate-bps",
            &(RATE_BPS * 3 / 2).to_string(),
        ]),
        TIMEOUT,
    )
    .unwrap();
    let got: SinkReport = sink.finish(TIMEOUT).unwrap().json().unwrap();
    (sent, got)
}

#[test]
fn shaped_port_delivers_its_rate() {
    if !need_root("shaped_port_delivers_its_rate") {
        return;
    }
    for shaper in [Shaper::Htb, Shaper::Tbf] {
        let tb = Testbed::up_topology(&Topology::Dumbbell {
            left: 1,
            right: 1,
            switch: SwitchKind::Router,
            link: LinkParams::new().mtu(1500),
            bottleneck: Some(
                LinkParams::new()
                    .mtu(1500)
                    .rate(RATE_BPS, BUFFER_BYTES)
                    .shaper(shaper),
            ),
        })
        .unwrap();
        let bottleneck = tb.node("swa").unwrap().port_toward("swb").unwrap().clone();
        let before = tb.counters("swa", "swb").unwrap();
        let (sent, got) = flood(&tb);
        let through = tb.counters("swa", "swb").unwrap().since(&before);

        let rate = got.frame_rate_bps(false);
        let error = (rate - RATE_BPS as f64).abs() / RATE_BPS as f64;
        eprintln!(
            "{shaper:?}: sent {} datagrams, received {} over {} ms: {:.1} Mbit/s ({:.1} % off); \
             {} sent on {}",
            sent.packets,
            got.packets,
            got.first_to_last_ns / 1_000_000,
            rate / 1e6,
            error * 100.0,
            through.tx_packets,
            bottleneck.ifname
        );
        assert!(
            error < 0.15,
            "{shaper:?}: {rate} bit/s is not within 15 % of {RATE_BPS}"
        );
        // The shaper, not the sender, set the pace: a fifth or more of the flood was dropped.
        assert!(
            got.packets * 5 < sent.packets * 4,
            "{shaper:?}: {sent:?} {got:?}"
        );
        // What arrived went through the shaped port (plus at most a little ARP).
        assert!(
            through.tx_packets >= got.packets && through.tx_packets <= got.packets + 4,
            "{shaper:?}: {through:?} vs {got:?}"
        );
        assert!(
            got.first_to_last_ns > DURATION_MS * 1_000_000 * 9 / 10,
            "{got:?}"
        );
        tb.down().unwrap();
    }
}
