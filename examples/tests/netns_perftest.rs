//! The six perftest tools (`ib_{write,read,send}_{bw,lat}`) each pair with themselves across a
//! pair testbed over the packet datapath: perftest's exchange runs to the end on both sides,
//! every completion succeeds, the tables carry the sizes and iteration counts asked for, and
//! with the hidden `--check` the bytes a bw test moved are the ones the sender had.

mod common;
use common::*;
use std::time::Duration;

/// The numbers of the first table row starting with `size`.
fn row(out: &str, size: u64) -> Vec<f64> {
    out.lines()
        .find(|l| l.split_whitespace().next() == Some(&size.to_string()))
        .unwrap_or_else(|| panic!("no row for {size} in\n{out}"))
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect()
}

fn pair_run(test: &str, bin: &str, args: &[&str]) -> Option<(String, String)> {
    if !need_root(test) {
        return None;
    }
    let tb = pair();
    let mut a = vec!["--datapath", "packet", "-F"];
    a.extend_from_slice(args);
    let (s, c) = run_pair(&tb, bin, &a, Duration::from_secs(60));
    for out in [&s.stdout, &c.stdout] {
        assert!(out.contains(" local address: LID 0000 QPN 0x"), "{out}");
        assert!(out.contains(" remote address: LID 0000 QPN 0x"), "{out}");
        assert!(
            out.contains(" GID: 00:00:00:00:00:00:00:00:00:00:255:255:"),
            "{out}"
        );
    }
    Some((s.stdout, c.stdout))
}

fn bw(test: &str, bin: &str, title: &str, client_checks: bool) {
    let Some((s, c)) = pair_run(test, bin, &["--check", "-s", "8192", "-n", "2000"]) else {
        return;
    };
    for out in [&s, &c] {
        assert!(out.contains(&format!("{title} BW Test")), "{out}");
        assert!(
            out.contains("BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"),
            "{out}"
        );
    }
    // Both sides print a row for 8192 bytes × 2000: the WRITE/READ server shows the client's
    // (exchanged) figures, the SEND server its own receive count.
    let (rs, rc) = (row(&s, 8192), row(&c, 8192));
    assert_eq!(rs[1], 2000.0, "{s}");
    assert_eq!(rc[1], 2000.0, "{c}");
    assert!(rc[3] > 0.0 && rc[2] >= rc[3] * 0.99, "peak ≥ average: {c}");
    let checker = if client_checks { &c } else { &s };
    assert!(checker.contains("check: OK (8192 bytes"), "{checker}");
}

fn lat(test: &str, bin: &str, title: &str) {
    let Some((s, c)) = pair_run(test, bin, &["-s", "64", "-n", "200"]) else {
        return;
    };
    assert!(c.contains(&format!("{title} Latency Test")), "{c}");
    assert!(
        c.contains("t_min[usec]    t_max[usec]  t_typical[usec]"),
        "{c}"
    );
    let r = row(&c, 64);
    assert_eq!(r[1], 200.0, "{c}");
    // min ≤ typical ≤ max, min ≤ average ≤ max, percentiles within [min, max].
    assert!(r[2] > 0.0 && r[2] <= r[4] && r[4] <= r[3], "{c}");
    assert!(
        r[2] <= r[5] && r[5] <= r[3] && r[7] <= r[3] && r[8] <= r[3],
        "{c}"
    );
    if title != "RDMA_Read" {
        assert_eq!(row(&s, 64)[1], 200.0, "{s}");
    }
}

#[test]
fn ib_write_bw_pairs_and_data_lands() {
    bw(
        "ib_write_bw_pairs_and_data_lands",
        env!("CARGO_BIN_EXE_ib_write_bw"),
        "RDMA_Write",
        false,
    );
}

#[test]
fn ib_read_bw_pairs_and_data_lands() {
    bw(
        "ib_read_bw_pairs_and_data_lands",
        env!("CARGO_BIN_EXE_ib_read_bw"),
        "RDMA_Read",
        true,
    );
}

#[test]
fn ib_send_bw_pairs_and_data_lands() {
    bw(
        "ib_send_bw_pairs_and_data_lands",
        env!("CARGO_BIN_EXE_ib_send_bw"),
        "Send",
        false,
    );
}

#[test]
fn ib_write_lat_pairs() {
    lat(
        "ib_write_lat_pairs",
        env!("CARGO_BIN_EXE_ib_write_lat"),
        "RDMA_Write",
    );
}

#[test]
fn ib_read_lat_pairs() {
    lat(
        "ib_read_lat_pairs",
        env!("CARGO_BIN_EXE_ib_read_lat"),
        "RDMA_Read",
    );
}

#[test]
fn ib_send_lat_pairs() {
    lat(
        "ib_send_lat_pairs",
        env!("CARGO_BIN_EXE_ib_send_lat"),
        "Send",
    );
}

#[test]
fn refused_flags_name_themselves() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ib_write_bw"))
        .args(["-d", "lo", "-R"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("-R/--rdma_cm: not implemented"), "{err}");
}
