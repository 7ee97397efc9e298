//! Killing one side: the client keeps RDMA WRITEs outstanding, the server process is killed
//! (SIGKILL), and the client's outstanding work must complete: the oldest with RETRY_EXC_ERR
//! after `retry_cnt` timeouts, the rest with WR_FLUSH_ERR, and the QP in Error.

mod common;
use common::*;
use std::time::Duration;

fn kill(test: &str, mode: &str) {
    if !need_root(test) {
        return;
    }
    let tb = pair();
    let mut srv = server(&tb, &["--datapath", mode]);
    // ACK timeout 4.096 us * 2^12 = 16.8 ms, 3 retries: the failure shows within ~70 ms.
    let mut cli = client(
        &tb,
        false,
        &[
            "--datapath",
            mode,
            "--workload",
            "outlive",
            "--timeout",
            "12",
            "--retry-cnt",
            "3",
        ],
    );
    cli.wait_for_line(|l| l == "STARTED", SETUP)
        .expect("WRITEs flowing");
    srv.kill();
    let out = cli.wait(Duration::from_secs(30)).expect("client finished");
    let r = result(&out);
    assert_eq!(r["first_error"], "RetryExcErr", "{r}");
    assert_eq!(r["qp_state"], "Some(Error)", "{r}");
    assert!(r["completed"].as_u64().unwrap_or(0) > 0, "{r}");
    eprintln!("{test}: {r}");
}

#[test]
fn wire_kill_server_udp_retry_exc_err() {
    kill("wire_kill_server_udp_retry_exc_err", "udp");
}

#[test]
fn wire_kill_server_packet_retry_exc_err() {
    kill("wire_kill_server_packet_retry_exc_err", "packet");
}

#[test]
fn wire_kill_server_xdp_retry_exc_err() {
    kill("wire_kill_server_xdp_retry_exc_err", "xdp");
}
