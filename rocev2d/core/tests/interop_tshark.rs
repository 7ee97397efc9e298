//! Wireshark as an independent decoder: frames for every verb, built with our `FrameRepr::emit`,
//! are written to a pcap and dissected by `tshark`; every header field Wireshark decodes must
//! equal what we put in.
//!
//! Wireshark's InfiniBand dissector (`epan/dissectors/packet-infiniband.c`) claims UDP port
//! 4791 as RoCEv2 by default (`tshark -G decodes` lists `udp.port 4791 infiniband`), so no
//! "decode as" is needed. Its payload heuristics (SMB Direct, NVMe-oF, RPC-over-RDMA, …) are
//! switched off, because they would try to parse our synthetic payloads as their protocols and
//! flag them malformed; the payload then shows up as plain `data.data`.
//!
//! What this cannot check: Wireshark 4.0 displays the Invariant CRC but does not verify it
//! (there is no `infiniband.invariant.crc.status` field), so the ICRC's *value* is checked by
//! `interop_scapy` and `interop_captures`; here we only check that Wireshark finds the ICRC
//! where we put it, i.e. that our lengths (IP, UDP, PadCnt) frame the packet correctly.
//!
//! Skipped with a loud message when `tshark` is missing, unless `ROCEV2_REQUIRE_TOOLS=1`.

use crate::interop_util;

use interop_util::{Case, every_verb, tool_available};
use pcap_file::pcap::{PcapPacket, PcapWriter};
use rocev2_core::wire::{IpRepr, Opcode, Syndrome};
use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// The fields we ask tshark for, in output order.
const FIELDS: &[&str] = &[
    "frame.number",
    "infiniband.bth.opcode",
    "infiniband.bth.se",
    "infiniband.bth.m",
    "infiniband.bth.padcnt",
    "infiniband.bth.tver",
    "infiniband.bth.p_key",
    // BTH byte 4 (FECN, BECN, Resv6a): Wireshark 4.0 shows it as a reserved byte.
    "infiniband.reserved",
    "infiniband.bth.destqp",
    "infiniband.bth.a",
    "infiniband.bth.psn",
    // Wireshark uses the RETH's VA and R_Key fields for the AtomicETH's too.
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.atomiceth.swapdt",
    "infiniband.atomiceth.cmpdt",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.aeth.syndrome.opcode",
    "infiniband.aeth.syndrome.credit_count",
    "infiniband.aeth.syndrome.timer",
    "infiniband.aeth.syndrome.error_code",
    "infiniband.atomicacketh.origremdt",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "infiniband.immdt",
    "infiniband.ieth",
    "infiniband.invariant.crc",
    // A CNP is unknown to Wireshark 4.0: its 16 reserved bytes and ICRC are "vendor data".
    "infiniband.vendor",
    "data.data",
    "udp.dstport",
    "_ws.expert.message",
];

/// A scratch directory removed on drop, named after the process so parallel runs don't clash.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("rocev2-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn write_pcap(path: &std::path::Path, cases: &[Case]) {
    let mut w = PcapWriter::new(File::create(path).unwrap()).unwrap();
    for (i, c) in cases.iter().enumerate() {
        let ts = Duration::from_millis(i as u64);
        w.write_packet(&PcapPacket::new(ts, c.bytes.len() as u32, &c.bytes))
            .unwrap();
    }
}

/// `--disable-protocol` for every payload heuristic registered on `infiniband.payload` (the
/// list differs between Wireshark versions, so it is asked for rather than hard-coded). The
/// `ethertype` entry is the raw-Ethernet-over-IB path, which Wireshark needs for itself.
fn heuristics_off() -> Vec<String> {
    let out = Command::new("tshark")
        .args(["-G", "heuristic-decodes"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut cols = l.split('\t');
            (cols.next() == Some("infiniband.payload"))
                .then(|| cols.next())
                .flatten()
        })
        .filter(|p| *p != "ethertype")
        .flat_map(|p| ["--disable-protocol".to_owned(), p.to_owned()])
        .collect()
}

/// One dissected frame: field name → all its occurrences.
type Decoded = BTreeMap<&'static str, Vec<String>>;

fn run_tshark(pcap: &std::path::Path) -> Vec<Decoded> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-n")
        .arg("-r")
        .arg(pcap)
        .args(heuristics_off())
        .args(["-T", "fields", "-E", "separator=\t", "-E", "occurrence=a"])
        .args(["-E", "aggregator=;"]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let cols: Vec<&str> = line.split('\t').collect();
            assert_eq!(cols.len(), FIELDS.len(), "unexpected tshark line {line:?}");
            FIELDS
                .iter()
                .zip(cols)
                .map(|(f, v)| {
                    let vals = if v.is_empty() {
                        Vec::new()
                    } else {
                        v.split(';').map(str::to_owned).collect()
                    };
                    (*f, vals)
                })
                .collect()
        })
        .collect()
}

/// A tshark number: `0x…` hex (fields displayed in hex) or decimal.
fn num(s: &str) -> u64 {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    }
    .unwrap_or_else(|e| panic!("not a number: {s:?}: {e}"))
}

/// A tshark boolean (`1`/`0`, or `True`/`False` in some versions).
fn flag(s: &str) -> bool {
    matches!(s, "1" | "True" | "true")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Compares one decoded frame with its case; returns every disagreement.
fn compare(c: &Case, d: &Decoded) -> Vec<String> {
    let mut bad = Vec::new();
    // The one value of a field, or a note that it is missing or repeated with different values
    // (Wireshark 4.0 adds ImmDt and IETH to the tree twice, with the same value).
    let one = |bad: &mut Vec<String>, f: &str| -> Option<String> {
        let vals = &d[f];
        match vals.first() {
            None => {
                bad.push(format!("{f}: missing"));
                None
            }
            Some(v) if vals.iter().all(|x| x == v) => Some(v.clone()),
            Some(_) => {
                bad.push(format!("{f}: conflicting values {vals:?}"));
                None
            }
        }
    };
    let check_num = |bad: &mut Vec<String>, f: &str, want: u64| {
        if let Some(v) = one(bad, f)
            && num(&v) != want
        {
            bad.push(format!(
                "{f}: tshark {v} ({:#x}), we built {want:#x}",
                num(&v)
            ));
        }
    };
    let r = &c.repr.roce;
    let bth = &r.bth;
    check_num(&mut bad, "udp.dstport", 4791);
    check_num(&mut bad, "infiniband.bth.opcode", u64::from(bth.opcode.0));
    check_num(&mut bad, "infiniband.bth.padcnt", u64::from(bth.pad_cnt));
    check_num(&mut bad, "infiniband.bth.tver", u64::from(bth.tver));
    check_num(&mut bad, "infiniband.bth.p_key", u64::from(bth.p_key));
    check_num(
        &mut bad,
        "infiniband.bth.destqp",
        u64::from(bth.dest_qp.value()),
    );
    check_num(&mut bad, "infiniband.bth.psn", u64::from(bth.psn.value()));
    for (f, want) in [
        ("infiniband.bth.se", bth.solicited),
        ("infiniband.bth.m", bth.mig_req),
        ("infiniband.bth.a", bth.ack_req),
    ] {
        if let Some(v) = one(&mut bad, f)
            && flag(&v) != want
        {
            bad.push(format!("{f}: tshark {v}, we built {want}"));
        }
    }
    let byte4 = (u8::from(bth.fecn) << 7) | (u8::from(bth.becn) << 6) | bth.deflection_tokens;
    match d["infiniband.reserved"].first() {
        Some(v) if *v == format!("{byte4:02x}") => {}
        other => bad.push(format!(
            "BTH byte 4: tshark {other:?}, we built {byte4:02x}"
        )),
    }
    let reth_or_atomic = r
        .reth
        .map(|h| (h.va, h.r_key))
        .or(r.atomic_eth.map(|h| (h.va, h.r_key)));
    match reth_or_atomic {
        Some((va, r_key)) => {
            check_num(&mut bad, "infiniband.reth.va", va);
            check_num(&mut bad, "infiniband.reth.r_key", u64::from(r_key));
        }
        None => {
            if !d["infiniband.reth.va"].is_empty() {
                bad.push("tshark decoded a RETH/AtomicETH we did not build".into());
            }
        }
    }
    if let Some(h) = r.reth {
        check_num(&mut bad, "infiniband.reth.dmalen", u64::from(h.dma_len));
    }
    if let Some(h) = r.atomic_eth {
        check_num(&mut bad, "infiniband.atomiceth.swapdt", h.swap_add);
        check_num(&mut bad, "infiniband.atomiceth.cmpdt", h.compare);
    }
    match r.aeth {
        Some(h) => {
            check_num(
                &mut bad,
                "infiniband.aeth.syndrome",
                u64::from(h.syndrome.to_byte()),
            );
            check_num(&mut bad, "infiniband.aeth.msn", u64::from(h.msn.value()));
            // Wireshark's reading of the syndrome (IBA §9.7.5.2): type in bits 6-5, and the
            // low five bits as credit count, RNR timer or NAK code accordingly.
            let b = h.syndrome.to_byte();
            let (kind, value) = (b >> 5 & 3, u64::from(b & 0x1f));
            check_num(&mut bad, "infiniband.aeth.syndrome.opcode", kind.into());
            let sub = match kind {
                0 => "infiniband.aeth.syndrome.credit_count",
                1 => "infiniband.aeth.syndrome.timer",
                _ => "infiniband.aeth.syndrome.error_code",
            };
            check_num(&mut bad, sub, value);
        }
        None => {
            if !d["infiniband.aeth.syndrome"].is_empty() {
                bad.push("tshark decoded an AETH we did not build".into());
            }
        }
    }
    if let Some(h) = r.atomic_ack_eth {
        check_num(&mut bad, "infiniband.atomicacketh.origremdt", h.orig_data);
    }
    if let Some(h) = r.deth {
        check_num(&mut bad, "infiniband.deth.q_key", u64::from(h.q_key));
        check_num(
            &mut bad,
            "infiniband.deth.srcqp",
            u64::from(h.src_qp.value()),
        );
    }
    for (f, want) in [
        ("infiniband.immdt", r.immdt.map(|h| h.imm)),
        ("infiniband.ieth", r.ieth.map(|h| h.r_key)),
    ] {
        match want {
            Some(w) => {
                if let Some(v) = one(&mut bad, f)
                    && v != format!("{w:08x}")
                {
                    bad.push(format!("{f}: tshark {v}, we built {w:08x}"));
                }
            }
            None => {
                if !d[f].is_empty() {
                    bad.push(format!("tshark decoded {f} we did not build"));
                }
            }
        }
    }
    let n = c.bytes.len();
    let trailer = &c.bytes[n - 4..];
    if bth.opcode == Opcode::CNP {
        // 16 reserved zero bytes, then the ICRC.
        let want = format!("{}{}", "00".repeat(16), hex(trailer));
        if d["infiniband.vendor"].last() != Some(&want) {
            bad.push(format!(
                "CNP body: tshark {:?}, we built {want}",
                d["infiniband.vendor"]
            ));
        }
    } else {
        // Wireshark reads the ICRC as a big-endian number.
        let want = u32::from_be_bytes(trailer.try_into().unwrap());
        check_num(&mut bad, "infiniband.invariant.crc", u64::from(want));
        // The payload as Wireshark delimits it: ours plus the pad bytes before the ICRC.
        let pad = usize::from(bth.pad_cnt);
        let want = hex(&c.bytes[n - 4 - pad - c.payload.len()..n - 4]);
        let got = d["data.data"].concat();
        if got != want && !(c.payload.is_empty() && got.is_empty()) {
            bad.push(format!(
                "payload: tshark {} bytes, we built {} (+{pad} pad)",
                got.len() / 2,
                c.payload.len()
            ));
        }
    }
    // Wireshark follows RFC 8200 and calls a zero UDP checksum over IPv6 illegal; RoCEv2 peers
    // (rxe, ConnectX) send zero anyway and rely on the ICRC, as RFC 6935 allows for tunnels, so
    // that one remark is expected on our IPv6 frames without a UDP checksum. Anything else is
    // a finding.
    let zero_csum_v6 = matches!(c.repr.ip, IpRepr::V6 { .. }) && !c.repr.udp.checksum;
    let expert: Vec<&String> = d["_ws.expert.message"]
        .iter()
        .filter(|m| !(zero_csum_v6 && m.as_str() == "Illegal checksum value (0)"))
        .collect();
    if !expert.is_empty() {
        bad.push(format!("tshark expert info: {expert:?}"));
    }
    bad
}

#[test]
fn tshark_decodes_every_verb_as_built() {
    if !tool_available("tshark", Command::new("tshark").arg("-v")) {
        return;
    }
    let cases = every_verb();
    let dir = TempDir::new("tshark");
    let pcap = dir.0.join("every_verb.pcap");
    write_pcap(&pcap, &cases);
    let decoded = run_tshark(&pcap);
    assert_eq!(decoded.len(), cases.len(), "tshark lost frames");
    let mut failures = Vec::new();
    for (c, d) in cases.iter().zip(&decoded) {
        assert_eq!(num(&d["frame.number"][0]) as usize, failures.len() + 1);
        failures.push((c.name.clone(), compare(c, d)));
    }
    let failures: Vec<_> = failures
        .into_iter()
        .filter(|(_, b)| !b.is_empty())
        .collect();
    assert!(
        failures.is_empty(),
        "tshark disagrees with what we built:\n{}",
        failures
            .iter()
            .map(|(n, b)| format!("  {n}: {}", b.join("; ")))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The catalogue really covers what it claims: every NAK kind and RNR NAK went through.
    let syndromes: Vec<Syndrome> = cases
        .iter()
        .filter_map(|c| c.repr.roce.aeth.map(|a| a.syndrome))
        .collect();
    assert!(syndromes.iter().any(|s| matches!(s, Syndrome::RnrNak(_))));
    assert_eq!(
        syndromes
            .iter()
            .filter(|s| matches!(s, Syndrome::Nak(_)))
            .count(),
        4
    );
}

/// The comparison is live: a frame whose PSN we corrupt after building it is reported.
#[test]
fn tshark_comparison_catches_a_wrong_field() {
    if !tool_available("tshark", Command::new("tshark").arg("-v")) {
        return;
    }
    let mut cases = every_verb();
    cases.truncate(1);
    // The first case is IPv4 without VLAN: the BTH starts at 14 + 20 + 8, PSN at BTH byte 11.
    assert!(cases[0].repr.eth.vlan.is_none() && matches!(cases[0].repr.ip, IpRepr::V4 { .. }));
    cases[0].bytes[14 + 20 + 8 + 11] ^= 0x01;
    let dir = TempDir::new("tshark-neg");
    let pcap = dir.0.join("wrong.pcap");
    write_pcap(&pcap, &cases);
    let decoded = run_tshark(&pcap);
    let bad = compare(&cases[0], &decoded[0]);
    assert!(
        bad.iter().any(|b| b.starts_with("infiniband.bth.psn")),
        "{bad:?}"
    );
}
