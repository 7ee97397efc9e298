//! An incast into one receiver counts its senders there: three clients `tx0`…`tx2` of a bridge
//! star write to one `--qps 3` server in `rx` under Dart, and each sender must have been told
//! N = 3 by the receiver's DASR (seed 000 §III-A/B: the receiver counts the unique senders with
//! a message in flight and piggybacks N on its ACKs). With one server per client (one endpoint
//! per QP, as the experiment runner had it) every receiver sees one sender and N stays 1.
//!
//! Not a timing test: the clients start their transfers together (`--wait-for-all`, the
//! server's `all` answer once all three connected) and each is paced by its controller at
//! 20 Mbit/s / N, so 1 MiB takes at least 0.4 s, during which all three have messages in flight;
//! there are no ECN marks on the bridge, so DASR stays in "no congestion", where N = |AUSS|.

mod common;
use common::*;
use rocev2_testbed::Testbed;
use rocev2_testbed::topology::{LinkParams, SwitchKind, Topology};
use std::time::Duration;

const SENDERS: usize = 3;

#[test]
fn wire_incast_dart_receiver_counts_every_sender() {
    if !need_root("wire_incast_dart_receiver_counts_every_sender") {
        return;
    }
    let tb = Testbed::up_topology(&Topology::Star {
        senders: SENDERS,
        switch: SwitchKind::Bridge,
        link: LinkParams::new().mtu(1500),
    })
    .expect("star testbed");
    let config = std::env::temp_dir().join(format!("wire_incast_{}.toml", std::process::id()));
    std::fs::write(&config, "[cc]\nscheme = \"dart\"\nline_gbps = 0.02\n").expect("config");
    let config = config.to_str().expect("utf-8 path").to_owned();
    let common = [
        "--datapath",
        "packet",
        "--bulk-mib",
        "1",
        "--config",
        &config,
    ];
    let qps = SENDERS.to_string();
    let srv = server_in(&tb, "rx", &[], &[&common[..], &["--qps", &qps]].concat());
    let clients: Vec<_> = (0..SENDERS)
        .map(|i| {
            let args = [
                "--workload",
                "bulk",
                "--msg-bytes",
                "65536",
                "--wait-for-all",
            ];
            client_in(
                &tb,
                &format!("tx{i}"),
                "rx",
                false,
                &[&common[..], &args].concat(),
            )
        })
        .collect();
    let results: Vec<_> = clients
        .into_iter()
        .map(|c| result(&c.wait(Duration::from_secs(120)).expect("client finished")))
        .collect();
    let s = srv.wait(SETUP).expect("server exits after three quits");
    assert!(s.status.success(), "server:\n{}\n{}", s.stdout, s.stderr);
    std::fs::remove_file(&config).expect("remove config");
    for r in &results {
        assert_eq!(r["bytes"], 1 << 20, "{r}");
        assert_eq!(
            r["dasr_n_max"], SENDERS,
            "each sender was given N = {SENDERS} by the one receiver: {r}"
        );
    }
    // The first client to ask for the server's counters did so before any other quit: one
    // endpoint held all three QPs.
    let most = results
        .iter()
        .map(|r| {
            r["server"]["snapshot"]["qps"]
                .as_object()
                .map_or(0, |q| q.len())
        })
        .max();
    assert_eq!(most, Some(SENDERS), "{results:?}");
}
