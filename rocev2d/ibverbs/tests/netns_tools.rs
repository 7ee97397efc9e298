//! Debian's own rdma-core and perftest binaries, unmodified, with `librocev2_ibverbs.so`
//! preloaded, in a pair testbed (two namespaces, one veth link, MTU 4200): the device list,
//! `ibv_rc_pingpong -c` (data validated) with polling and with completion events,
//! `ibv_srq_pingpong -c` (sixteen QPs sharing one SRQ, data validated, each completion
//! matched to its QP by `qp_num`), and `ib_write_bw`, `ib_read_bw`, `ib_send_lat`,
//! `ib_atomic_bw`, `ib_send_bw --use-srq` between the namespaces on perftest's `ibv_post_send`
//! path, and `ib_write_bw`, `ib_send_bw` (RC and UD), `ib_read_bw` on its `ibv_wr_*` path; and
//! `tests/programs/verbs_checks.c`, built here against libibverbs, for what no tool calls: the
//! SRQ limit event through `ibv_get_async_event`, `ibv_create_ah_from_wc`, and the extended CQ
//! and QP verbs with their errors.
//!
//! The UDP datapath is used (`ROCEV2_DATAPATH=udp`): it needs no privilege and no XDP program,
//! so it behaves the same in any namespace. Needs root (namespaces); skipped loudly otherwise.

mod common;
use common::*;
use rocev2_testbed::{Captured, need_root};

#[test]
fn devices_are_listed_and_queried() {
    if !need_root("devices_are_listed_and_queried") {
        return;
    }
    let tb = pair();
    let dev = device(&tb, "h0");
    let out = preloaded(&tb, "h0", "ibv_devices").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let names: Vec<&str> = text
        .lines()
        .skip(2)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(names, [dev.as_str()], "only the veth (not lo):\n{text}");
    let out = preloaded(&tb, "h0", "ibv_devinfo")
        .args(["-v", "-d", &dev])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let ip = tb.node("h0").unwrap().ipv4().unwrap();
    for want in [
        format!("hca_id:\t{dev}"),
        "PORT_ACTIVE".into(),
        "link_layer:\t\tEthernet".into(),
        "active_mtu:\t\t4096 (5)".into(),
        format!("GID[  1]:\t\t::ffff:{ip}, RoCE v2"),
    ] {
        assert!(text.contains(&want), "no {want:?} in\n{text}");
    }
    assert!(text.contains("GID[  0]:\t\tfe80:"), "{text}");
}

/// An rdma-core pingpong `program` on both sides with `-d DEVICE -g 1` and `args`, the client
/// connecting to h1's address; both must succeed. `None` when not root (skipped loudly).
fn pingpong(test: &str, program: &str, args: &[&str]) -> Option<(Captured, Captured)> {
    if !need_root(test) {
        return None;
    }
    let tb = pair();
    let mut server = preloaded(&tb, "h1", program);
    server
        .args(["-d", &device(&tb, "h1"), "-g", "1"])
        .args(args);
    let mut client = preloaded(&tb, "h0", program);
    client
        .args(["-d", &device(&tb, "h0"), "-g", "1"])
        .args(args)
        .arg(h1_ip(&tb));
    Some(run_pair(&tb, server, client, 18515))
}

/// `ibv_rc_pingpong -g 1 -n 1000 -s 4096 -c` (plus `extra`) on both sides: both print the
/// throughput lines, neither reports invalid data.
fn rc_pingpong(test: &str, extra: &[&str]) {
    let args = [&["-n", "1000", "-s", "4096", "-c"], extra].concat();
    let Some((s, c)) = pingpong(test, "ibv_rc_pingpong", &args) else {
        return;
    };
    for out in [&s, &c] {
        assert!(out.stdout.contains("8192000 bytes in "), "{}", show(out));
        assert!(out.stdout.contains("1000 iters in "), "{}", show(out));
        let all = format!("{}{}", out.stdout, out.stderr);
        assert!(!all.contains("invalid data"), "{}", show(out));
    }
}

#[test]
fn rc_pingpong_validates_data_between_namespaces() {
    rc_pingpong("rc_pingpong_validates_data_between_namespaces", &[]);
}

/// The check can fail: a client without `-c` leaves its pages at 0x7b, and the preloaded
/// server finds exactly the two pages of an 8 KiB message in its own buffer.
#[test]
fn rc_pingpong_check_sees_the_peers_bytes() {
    if !need_root("rc_pingpong_check_sees_the_peers_bytes") {
        return;
    }
    let tb = pair();
    let args = |host: &str| {
        [
            "-d".to_string(),
            device(&tb, host),
            "-g".into(),
            "1".into(),
            "-n".into(),
            "20".into(),
            "-s".into(),
            "8192".into(),
        ]
    };
    let mut server = preloaded(&tb, "h1", "ibv_rc_pingpong");
    server.args(args("h1")).arg("-c");
    let mut client = preloaded(&tb, "h0", "ibv_rc_pingpong");
    client.args(args("h0")).arg(h1_ip(&tb));
    let (s, _) = run_pair(&tb, server, client, 18515);
    let invalid: Vec<&str> = s
        .stdout
        .lines()
        .filter(|l| l.starts_with("invalid data in page"))
        .collect();
    assert_eq!(
        invalid,
        ["invalid data in page 0", "invalid data in page 1"],
        "{}",
        show(&s)
    );
}

#[test]
fn rc_pingpong_with_completion_events() {
    rc_pingpong("rc_pingpong_with_completion_events", &["-e"]);
}

/// A perftest program on both sides (`-x 1`: the IPv4-mapped GID; `-F`: no CPU-frequency
/// warning), `args` added; returns the client's output, which must hold the result table.
///
/// perftest takes its `ibv_wr_*` post path only on devices whose `vendor_part_id` is in its list
/// (mlx5, EFA): with `wr_api`, both sides run with `ROCEV2_VENDOR_PART_ID` naming EFA's, and the
/// banner must say `ibv_wr* API : ON`; without, the library's own part id (0) keeps perftest on
/// `ibv_post_send`, and the banner must say `OFF`.
fn perftest(test: &str, program: &str, wr_api: bool, args: &[&str]) -> Option<String> {
    if !need_root(test) {
        return None;
    }
    let tb = pair();
    let port = 18515;
    let side = |host: &str| {
        let mut cmd = preloaded(&tb, host, program);
        cmd.args(["-d", &device(&tb, host), "-x", "1", "-F"])
            .args(args);
        if wr_api {
            cmd.env("ROCEV2_VENDOR_PART_ID", EFA_PART_ID);
        }
        cmd
    };
    let server = side("h1");
    let mut client = side("h0");
    client.arg(h1_ip(&tb));
    let (_, c) = run_pair(&tb, server, client, port);
    let banner = format!(" ibv_wr* API     : {}", if wr_api { "ON" } else { "OFF" });
    assert!(c.stdout.contains(&banner), "no {banner:?} in\n{}", c.stdout);
    Some(c.stdout)
}

/// A part id perftest knows as an EFA device, one of those it takes the `ibv_wr_*` path on.
const EFA_PART_ID: &str = "61344";

/// The first number of the result line under the header containing `header`.
fn result(out: &str, header: &str, col: usize) -> f64 {
    let mut lines = out.lines().skip_while(|l| !l.contains(header));
    lines.next();
    let row = lines
        .next()
        .unwrap_or_else(|| panic!("no result row in\n{out}"));
    row.split_whitespace()
        .nth(col)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no column {col} in {row:?}"))
}

#[test]
fn ib_write_bw_between_namespaces() {
    if let Some(out) = perftest(
        "ib_write_bw_between_namespaces",
        "ib_write_bw",
        false,
        &["-n", "500"],
    ) {
        assert_eq!(result(&out, "#bytes", 1), 500.0, "{out}");
        assert!(result(&out, "#bytes", 3) > 0.0, "average bandwidth\n{out}");
    }
}

#[test]
fn ib_read_bw_between_namespaces() {
    if let Some(out) = perftest(
        "ib_read_bw_between_namespaces",
        "ib_read_bw",
        false,
        &["-n", "500"],
    ) {
        assert_eq!(result(&out, "#bytes", 1), 500.0, "{out}");
        assert!(result(&out, "#bytes", 3) > 0.0, "average bandwidth\n{out}");
    }
}

#[test]
fn ib_send_lat_between_namespaces() {
    if let Some(out) = perftest(
        "ib_send_lat_between_namespaces",
        "ib_send_lat",
        false,
        &["-n", "500"],
    ) {
        assert_eq!(result(&out, "#bytes", 1), 500.0, "{out}");
        assert!(result(&out, "#bytes", 2) > 0.0, "t_min\n{out}");
    }
}

#[test]
fn ib_atomic_bw_between_namespaces() {
    if let Some(out) = perftest(
        "ib_atomic_bw_between_namespaces",
        "ib_atomic_bw",
        false,
        &["-n", "500"],
    ) {
        assert_eq!(result(&out, "#bytes", 1), 500.0, "{out}");
        assert!(result(&out, "#bytes", 3) > 0.0, "average bandwidth\n{out}");
    }
}

/// perftest's `-e`: both sides sleep in `ibv_get_cq_event` on the channel's fd.
#[test]
fn ib_send_bw_with_completion_events() {
    if let Some(out) = perftest(
        "ib_send_bw_with_completion_events",
        "ib_send_bw",
        false,
        &["-e", "-n", "200"],
    ) {
        assert_eq!(result(&out, "#bytes", 1), 200.0, "{out}");
        assert!(result(&out, "#bytes", 3) > 0.0, "average bandwidth\n{out}");
    }
}

/// `ib_send_bw --use-srq`: the receiving side posts to a shared receive queue (its depth
/// `--rx-depth`), through the context's `post_srq_recv` entry.
#[test]
fn ib_send_bw_with_an_srq() {
    if let Some(out) = perftest(
        "ib_send_bw_with_an_srq",
        "ib_send_bw",
        false,
        &["--use-srq", "-r", "64", "-n", "500"],
    ) {
        assert_eq!(result(&out, "#bytes", 1), 500.0, "{out}");
        assert!(result(&out, "#bytes", 3) > 0.0, "average bandwidth\n{out}");
    }
}

/// `ibv_srq_pingpong -c`: the default sixteen QPs of each side take their receives from one
/// SRQ; each receive completion is matched to its QP by `qp_num` (a wrong one makes the program
/// fail), and the received buffers are validated.
#[test]
fn srq_pingpong_validates_data_between_namespaces() {
    let args = ["-n", "200", "-s", "4096", "-c"];
    let test = "srq_pingpong_validates_data_between_namespaces";
    let Some((s, c)) = pingpong(test, "ibv_srq_pingpong", &args) else {
        return;
    };
    for out in [&s, &c] {
        // Both directions of 200 exchanges of 4096 bytes: 2 · 4096 · 200.
        assert!(out.stdout.contains("1638400 bytes in "), "{}", show(out));
        assert!(out.stdout.contains("200 iters in "), "{}", show(out));
        assert!(!out.stderr.contains("nvalid"), "{}", show(out));
    }
}

/// `tests/programs/verbs_checks.c` in `mode` (`srq` or `ud`), compiled against the installed
/// libibverbs and run preloaded, the server in h1 and the client in h0; the program checks
/// each step and fails on the first wrong one. Returns (server, client).
fn verbs_checks(test: &str, mode: &str) -> Option<(Captured, Captured)> {
    if !need_root(test) {
        return None;
    }
    let src =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/verbs_checks.c");
    let exe =
        std::env::temp_dir().join(format!("rocev2-verbs-checks-{}-{mode}", std::process::id()));
    let cc = std::process::Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg("-libverbs")
        .output()
        .expect("cc runs (deploy/prereqs.sh installs gcc and libibverbs-dev)");
    assert!(
        cc.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let tb = pair();
    let port = "18515";
    let h0_ip = tb.node("h0").unwrap().ipv4().unwrap().to_string();
    let exe_s = exe.display().to_string();
    let mut server = preloaded(&tb, "h1", &exe_s);
    let role = |r: &str| format!("{mode}-{r}");
    server.args([device(&tb, "h1"), h0_ip, role("server"), port.into()]);
    let mut client = preloaded(&tb, "h0", &exe_s);
    client.args([device(&tb, "h0"), h1_ip(&tb), role("client"), port.into()]);
    let out = run_pair(&tb, server, client, 18515);
    let _ = std::fs::remove_file(&exe);
    Some(out)
}

/// The server's SRQ of four receives, limit armed at two, takes the client's three Sends; it
/// gets `IBV_EVENT_SRQ_LIMIT_REACHED` for its SRQ from `ibv_get_async_event` once, and cannot
/// destroy the SRQ while its QP lives.
#[test]
fn srq_limit_event_reaches_ibv_get_async_event() {
    let test = "srq_limit_event_reaches_ibv_get_async_event";
    if let Some((s, c)) = verbs_checks(test, "srq") {
        assert!(s.stdout.contains("server: limit event ok"), "{}", show(&s));
        assert!(c.stdout.contains("client: sent 3"), "{}", show(&c));
    }
}

/// The server answers a datagram through `ibv_create_ah_from_wc` (and checks what
/// `ibv_init_ah_from_wc` fills: the sender's GID, the local GID's index); the client gets the
/// answer.
#[test]
fn ud_answer_through_an_address_handle_from_the_completion() {
    let test = "ud_answer_through_an_address_handle_from_the_completion";
    if let Some((s, c)) = verbs_checks(test, "ud") {
        assert!(
            s.stdout.contains("server: answered through"),
            "{}",
            show(&s)
        );
        assert!(c.stdout.contains("client: pong"), "{}", show(&c));
    }
}

/// UD: `ibv_ud_pingpong` (address handles, Q_Keys, the GRH area of every receive).
#[test]
fn ud_pingpong_between_namespaces() {
    let args = ["-n", "500", "-s", "2048"];
    let test = "ud_pingpong_between_namespaces";
    let Some((s, c)) = pingpong(test, "ibv_ud_pingpong", &args) else {
        return;
    };
    for out in [&s, &c] {
        // ibv_ud_pingpong counts both directions: 2 · 2048 · 500.
        assert!(out.stdout.contains("2048000 bytes in "), "{}", show(out));
        assert!(out.stdout.contains("500 iters in "), "{}", show(out));
    }
}

/// perftest's default post path: `ib_write_bw`, `ib_send_bw` and `ib_read_bw` build every request
/// with `ibv_wr_*` on QPs from `ibv_create_qp_ex` (banner `ibv_wr* API : ON`).
#[test]
fn ib_write_bw_through_wr_api() {
    if let Some(out) = perftest(
        "ib_write_bw_through_wr_api",
        "ib_write_bw",
        true,
        &["-n", "500"],
    ) {
        assert_eq!(result(&out, "#bytes", 1), 500.0, "{out}");
        assert!(result(&out, "#bytes", 3) > 0.0, "average bandwidth\n{out}");
    }
}

/// See [`ib_write_bw_through_wr_api`].
#[test]
fn ib_send_bw_through_wr_api() {
    if let Some(out) = perftest(
        "ib_send_bw_through_wr_api",
        "ib_send_bw",
        true,
        &["-n", "500"],
    ) {
        assert_eq!(result(&out, "#bytes", 1), 500.0, "{out}");
        assert!(result(&out, "#bytes", 3) > 0.0, "average bandwidth\n{out}");
    }
}

/// See [`ib_write_bw_through_wr_api`].
#[test]
fn ib_read_bw_through_wr_api() {
    if let Some(out) = perftest(
        "ib_read_bw_through_wr_api",
        "ib_read_bw",
        true,
        &["-n", "500"],
    ) {
        assert_eq!(result(&out, "#bytes", 1), 500.0, "{out}");
        assert!(result(&out, "#bytes", 3) > 0.0, "average bandwidth\n{out}");
    }
}

/// UD through `ibv_wr_*`: every Send names its destination with `ibv_wr_set_ud_addr`.
#[test]
fn ib_send_bw_ud_through_wr_api() {
    if let Some(out) = perftest(
        "ib_send_bw_ud_through_wr_api",
        "ib_send_bw",
        true,
        &["-c", "UD", "-n", "500"],
    ) {
        assert_eq!(result(&out, "#bytes", 1), 500.0, "{out}");
        assert!(result(&out, "#bytes", 3) > 0.0, "average bandwidth\n{out}");
    }
}

/// `tests/programs/verbs_checks.c` `ex`: the extended CQ (`ibv_start_poll`, `ibv_next_poll`,
/// `ibv_wc_read_*`) and QP (`ibv_create_qp_ex`, `ibv_qp_to_qp_ex`, every `ibv_wr_*` operation and
/// setter this library implements, and the errors `ibv_wr_complete` returns), with the data
/// checked on both sides.
#[test]
fn extended_cq_and_wr_api_between_namespaces() {
    let test = "extended_cq_and_wr_api_between_namespaces";
    if let Some((s, c)) = verbs_checks(test, "ex") {
        assert!(
            s.stdout
                .contains("server: wr_* requests and extended completions ok"),
            "{}",
            show(&s)
        );
        assert!(
            c.stdout.contains("client: wr_* path ok, errors ok"),
            "{}",
            show(&c)
        );
    }
}
