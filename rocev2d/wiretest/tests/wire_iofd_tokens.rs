//! `rocev2-wiretest --iofd-tokens` on a real veth pair: the client's short messages leave with
//! IOFD deflection tokens in BTH Resv6a (seen on the wire by tcpdump in the server's
//! namespace), and the server, which verifies every ICRC, accepts them: the `verbs` workload
//! (SENDs and WRITEs of 1–5000 bytes, all short) completes and checks every byte.

mod common;
use common::*;
use rocev2_testbed::Process;
use std::time::Duration;

#[test]
fn wire_iofd_tokens_on_short_messages_accepted_by_peer() {
    if !need_root("wire_iofd_tokens_on_short_messages_accepted_by_peer") {
        return;
    }
    let tb = pair();
    // UDP header 8 bytes, so BTH byte 4 is udp[12]; its low six bits are the tokens.
    let mut dump = tb.command("h1", "tcpdump").expect("command");
    dump.args([
        "-l",
        "-n",
        "-i",
        &ifname(&tb, "h1"),
        "-c",
        "3",
        "udp dst port 4791 and (udp[12] & 0x3f) = 4",
    ]);
    let mut dump = Process::spawn(&mut dump).expect("tcpdump");
    dump.wait_for_line(|l| l.contains("listening on"), SETUP)
        .ok();
    let args = ["--datapath", "packet"];
    let r = run(
        &tb,
        false,
        &args,
        &[&args[..], &["--iofd-tokens", "4", "--iofd-max-msg", "8192"]].concat(),
        Duration::from_secs(120),
    );
    assert_eq!(drop_count(&r, "icrc_error"), 0, "{r}");
    let out = dump
        .wait(Duration::from_secs(10))
        .expect("tcpdump saw 3 frames with 4 tokens");
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    tb.down().expect("down");
}
