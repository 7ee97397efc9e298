//! Scapy's RoCEv2 (`scapy.contrib.roce`) as an independent implementation of the wire format
//! and, above all, of the ICRC (RoCEv2 Annex A17.8), in both directions:
//!
//! * scapy builds frames with its own ICRC (`scapy_roce.py build`); we must parse them
//!   (ICRC verified), find exactly the fields scapy says it wrote, and re-emit the same bytes;
//! * we build frames for every verb (`interop_util::every_verb`, plus REXT frames); scapy
//!   recomputes the ICRC (`scapy_roce.py check`), which must equal ours, and its dissection
//!   must give back our BTH and AETH fields and accept our IP and UDP checksums.
//!
//! Skipped with a loud message when python3 or scapy is missing, unless
//! `ROCEV2_REQUIRE_TOOLS=1`. The interpreter is `$ROCEV2_PYTHON`, default `python3`.

use crate::interop_util;

use interop_util::{Case, Encap, build, every_verb, payload, tool_available};
use rocev2_core::wire::{
    AethRepr, BthRepr, Credits, Error, ExtRepr, FrameRepr, IpRepr, Msn, NakCode, Opcode, Operation,
    Psn, Qpn, RoceRepr, Syndrome, ext::MultipathAck,
};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

fn python() -> String {
    std::env::var("ROCEV2_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/scapy_roce.py")
}

/// Probed once per test binary: importing scapy takes a second or two, and the tests here run in
/// parallel. A panic under `ROCEV2_REQUIRE_TOOLS=1` leaves the cell empty, so every test fails.
fn scapy_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        tool_available(
            "python3 with scapy (pip install scapy)",
            Command::new(python()).args(["-c", "import scapy.contrib.roce"]),
        )
    })
}

/// One `key=value …` line of the script's output.
type Facts = BTreeMap<String, String>;

fn parse_lines(out: &[u8]) -> Vec<Facts> {
    String::from_utf8(out.to_vec())
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            l.split_whitespace()
                .map(|kv| {
                    let (k, v) = kv
                        .split_once('=')
                        .unwrap_or_else(|| panic!("bad token {kv:?} in {l:?}"));
                    (k.to_owned(), v.to_owned())
                })
                .collect()
        })
        .collect()
}

/// Runs the script in `mode`, feeding it `input`, and returns its lines.
fn run_script(mode: &str, input: String) -> Vec<Facts> {
    let mut child = Command::new(python())
        .arg(script())
        .arg(mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Written from another thread so a chatty script cannot deadlock us on a full pipe.
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        out.status.success(),
        "scapy_roce.py {mode} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse_lines(&out.stdout)
}

fn n(f: &Facts, k: &str) -> u64 {
    let v = f
        .get(k)
        .unwrap_or_else(|| panic!("{}: no {k} in {f:?}", f["name"]));
    v.parse()
        .unwrap_or_else(|e| panic!("{}: {k}={v}: {e}", f["name"]))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The BTH fields as scapy names them, from our repr.
fn bth_facts(b: &BthRepr) -> [(&'static str, u64); 12] {
    [
        ("opcode", b.opcode.0.into()),
        ("se", b.solicited.into()),
        ("migreq", b.mig_req.into()),
        ("padcount", b.pad_cnt.into()),
        ("tver", b.tver.into()),
        ("pkey", b.p_key.into()),
        ("fecn", b.fecn.into()),
        ("becn", b.becn.into()),
        ("resv6", b.deflection_tokens.into()),
        ("dqpn", b.dest_qp.value().into()),
        ("ackreq", b.ack_req.into()),
        ("psn", b.psn.value().into()),
    ]
}

/// The syndrome byte of IBA Vol. 1 §9.7.5.2 (Table 43), written out here rather than taken
/// from `Syndrome::to_byte`, so that a code point mixed up the same way in parse and emit
/// shows against scapy's frames.
fn iba_syndrome(s: Syndrome) -> u8 {
    match s {
        Syndrome::Ack(c) => c.code(),
        Syndrome::RnrNak(t) => 0b001_00000 | t.code(),
        Syndrome::Nak(NakCode::PsnSequenceError) => 0b011_00000,
        Syndrome::Nak(NakCode::InvalidRequest) => 0b011_00001,
        Syndrome::Nak(NakCode::RemoteAccessError) => 0b011_00010,
        Syndrome::Nak(NakCode::RemoteOperationalError) => 0b011_00011,
        Syndrome::Nak(NakCode::InvalidRdRequest) => 0b011_00100,
        Syndrome::Nak(NakCode::Reserved(c)) => 0b011_00000 | c,
    }
}

/// Everything scapy says it built must be what we parse; returns the disagreements.
fn compare_built(f: &Facts, repr: &FrameRepr, payload: &[u8]) -> Vec<String> {
    let r = &repr.roce;
    let mut want: Vec<(&str, u64)> = bth_facts(&r.bth).to_vec();
    want.push((
        "ip",
        match repr.ip {
            IpRepr::V4 { .. } => 4,
            IpRepr::V6 { .. } => 6,
        },
    ));
    want.push(("sport", repr.udp.src_port.into()));
    if let Some(h) = r.aeth {
        want.extend([
            ("syndrome", iba_syndrome(h.syndrome).into()),
            ("msn", h.msn.value().into()),
        ]);
    }
    if let Some(h) = r.reth {
        want.extend([
            ("reth_va", h.va),
            ("reth_rkey", h.r_key.into()),
            ("reth_len", h.dma_len.into()),
        ]);
    }
    if let Some(h) = r.atomic_eth {
        want.extend([
            ("atomic_va", h.va),
            ("atomic_rkey", h.r_key.into()),
            ("atomic_swap_add", h.swap_add),
            ("atomic_compare", h.compare),
        ]);
    }
    if let Some(h) = r.atomic_ack_eth {
        want.push(("orig_data", h.orig_data));
    }
    if let Some(h) = r.deth {
        want.extend([
            ("deth_qkey", h.q_key.into()),
            ("deth_srcqp", h.src_qp.value().into()),
        ]);
    }
    if let Some(h) = r.immdt {
        want.push(("imm", h.imm.into()));
    }
    if let Some(h) = r.ieth {
        want.push(("ieth_rkey", h.r_key.into()));
    }
    if let Some(v) = repr.eth.vlan {
        want.extend([("vlan", v.vid.into()), ("pcp", v.pcp.into())]);
    }
    let mut bad = Vec::new();
    for (k, ours) in &want {
        match f.get(*k) {
            Some(_) if n(f, k) == *ours => {}
            theirs => bad.push(format!("{k}: scapy built {theirs:?}, we parsed {ours:#x}")),
        }
    }
    // Every header scapy built must have been found by us (a key we did not compare is a
    // header we missed).
    let known = ["name", "frame", "payload", "udp_csum"];
    for k in f.keys() {
        if !known.contains(&k.as_str()) && !want.iter().any(|(w, _)| w == k) {
            bad.push(format!(
                "scapy built {k}={} but we parsed no such field",
                f[k]
            ));
        }
    }
    if f["payload"] != hex(payload) {
        bad.push(format!(
            "payload: scapy built {} bytes, we parsed {}",
            f["payload"].len() / 2,
            payload.len()
        ));
    }
    if repr.udp.checksum != (n(f, "udp_csum") != 0) {
        bad.push("UDP checksum presence differs".into());
    }
    bad
}

#[test]
fn scapy_built_frames_parse_with_the_fields_scapy_wrote() {
    if !scapy_available() {
        return;
    }
    let built = run_script("build", String::new());
    assert!(built.len() >= 13, "scapy built only {} frames", built.len());
    let mut failures = Vec::new();
    for f in &built {
        let name = &f["name"];
        let bytes = unhex(&f["frame"]);
        let (repr, payload) = match FrameRepr::parse(&bytes) {
            Ok(x) => x,
            Err(e) => {
                failures.push(format!("{name}: we reject scapy's frame: {e}"));
                continue;
            }
        };
        for b in compare_built(f, &repr, payload) {
            failures.push(format!("{name}: {b}"));
        }
        // Scapy writes reserved bits as zero, so our emit must reproduce its bytes exactly,
        // ICRC and UDP checksum included.
        let mut again = vec![0u8; repr.buffer_len(payload.len()).unwrap()];
        repr.emit(&mut again, payload).unwrap();
        if again != bytes {
            failures.push(format!("{name}: re-emitted bytes differ from scapy's"));
        }
        // A wrong ICRC must be refused (the ICRC check is live). The UDP checksum, which
        // covers the ICRC, is zeroed first so that the ICRC check is what gets reached; since
        // the ICRC masks the UDP checksum, the frame with only that change must still parse.
        let l2 = 14 + repr.eth.vlan.map_or(0, |_| 4);
        let udp_csum =
            l2 + if matches!(repr.ip, IpRepr::V4 { .. }) {
                20
            } else {
                40
            } + 6;
        let mut corrupt = bytes.clone();
        corrupt[udp_csum..udp_csum + 2].fill(0);
        if let Err(e) = FrameRepr::parse(&corrupt) {
            failures.push(format!(
                "{name}: rejected once the UDP checksum is zeroed: {e}"
            ));
        }
        *corrupt.last_mut().unwrap() ^= 0x80;
        if FrameRepr::parse(&corrupt).map(|_| ()) != Err(Error::BadIcrc) {
            failures.push(format!(
                "{name}: a corrupted ICRC was not reported as BadIcrc"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "disagreements with scapy:\n  {}",
        failures.join("\n  ")
    );
    // The frames scapy built covered what this test claims.
    let ops: Vec<u64> = built.iter().map(|f| n(f, "opcode")).collect();
    for op in [0x04, 0x05, 0x06, 0x0c, 0x11, 0x12, 0x14, 0x17, 0x64, 0x81] {
        assert!(ops.contains(&op), "no scapy frame with opcode {op:#x}");
    }
    assert!(built.iter().any(|f| f["ip"] == "6"));
}

/// Frames with our REXT header (BTH.TVer = 1): scapy knows nothing of it, which is the point
/// of the ICRC check, since the ICRC must cover it as ordinary transport bytes.
fn rext_cases() -> Vec<Case> {
    let bth = |op: Opcode, psn: u32| BthRepr {
        opcode: op,
        solicited: false,
        mig_req: false,
        pad_cnt: 0,
        tver: 1,
        p_key: 0xffff,
        fecn: false,
        becn: false,
        deflection_tokens: 5,
        dest_qp: Qpn::new(0xd0_0d00),
        ack_req: true,
        psn: Psn::new(psn),
    };
    let ack = RoceRepr {
        ext: Some(ExtRepr {
            dasr_n: Some(17),
            multipath: Some(MultipathAck {
                vp: 0xc0de,
                sack_psn: Psn::new(0x80_0001),
                aack_psn: Psn::new(0x7f_ffff),
            }),
            ece: true,
            retx: true,
            ..ExtRepr::default()
        }),
        aeth: Some(AethRepr {
            syndrome: Syndrome::Ack(Credits::from_code(20)),
            msn: Msn::new(0x12_3456),
        }),
        ..RoceRepr::new(bth(Opcode::rc(Operation::Acknowledge), 0x80_0001))
    };
    let data = RoceRepr {
        ext: Some(ExtRepr {
            tau_ns: Some(55_000),
            synchronise: true,
            ..ExtRepr::default()
        }),
        ..RoceRepr::new(bth(Opcode::rc(Operation::SendMiddle), 0x00_0002))
    };
    vec![
        build("rext_ack", Encap::V4, 200, ack, Vec::new()),
        build(
            "rext_send_middle",
            Encap::V6Csum,
            201,
            data,
            payload(1024, 3),
        ),
    ]
}

fn check_with_scapy(cases: &[Case]) -> Vec<Facts> {
    let input: String = cases
        .iter()
        .map(|c| format!("{} {}\n", c.name, hex(&c.bytes)))
        .collect();
    let out = run_script("check", input);
    assert_eq!(out.len(), cases.len(), "scapy answered for fewer frames");
    out
}

/// What scapy found in one of our frames that disagrees with what we built.
fn compare_checked(c: &Case, f: &Facts) -> Vec<String> {
    let mut bad = Vec::new();
    if f["name"] != c.name {
        return vec![format!("scapy answered for {} instead", f["name"])];
    }
    if let Some(e) = f.get("error") {
        return vec![e.clone()];
    }
    if f["icrc_scapy"] != f["icrc_frame"] {
        bad.push(format!(
            "ICRC: ours {}, scapy computes {}",
            f["icrc_frame"], f["icrc_scapy"]
        ));
    }
    for (k, ours) in bth_facts(&c.repr.roce.bth) {
        if n(f, k) != ours {
            bad.push(format!("BTH {k}: scapy reads {}, we built {ours:#x}", f[k]));
        }
    }
    // Scapy binds its AETH to RC ACKNOWLEDGE only.
    if c.repr.roce.bth.opcode == Opcode::rc(Operation::Acknowledge) && c.repr.roce.ext.is_none() {
        let a = c.repr.roce.aeth.unwrap();
        if n(f, "syndrome") != u64::from(a.syndrome.to_byte())
            || n(f, "msn") != a.msn.value().into()
        {
            bad.push(format!(
                "AETH: scapy reads {}/{}, we built {:#x}/{:#x}",
                f["syndrome"],
                f["msn"],
                a.syndrome.to_byte(),
                a.msn.value()
            ));
        }
    }
    // Scapy's view of what follows the BTH must end with our payload and pad, and be exactly
    // as long as our extension headers + payload + pad.
    let pad = usize::from(c.repr.roce.bth.pad_cnt);
    let after_bth = c.repr.roce.buffer_len(c.payload.len()).unwrap() - 12 - 4;
    let body = f["body"].trim_start_matches('-');
    let tail = format!("{}{}", hex(&c.payload), "00".repeat(pad));
    if body.len() != 2 * after_bth || !body.ends_with(&tail) {
        bad.push(format!(
            "scapy sees {} bytes after the BTH, we built {after_bth} ending in our payload",
            body.len() / 2
        ));
    }
    let want_udp = if c.repr.udp.checksum { "ok" } else { "zero" };
    if f["udp_csum"] != want_udp {
        bad.push(format!("UDP checksum: scapy says {}", f["udp_csum"]));
    }
    if matches!(c.repr.ip, IpRepr::V4 { .. }) && f["ip_csum"] != "ok" {
        bad.push(format!("IPv4 header checksum: scapy says {}", f["ip_csum"]));
    }
    if f["rebuild_same"] != "1" {
        bad.push(format!("scapy's rebuild differs (layers {})", f["layers"]));
    }
    bad
}

#[test]
fn scapy_computes_our_icrc_and_reads_our_fields() {
    if !scapy_available() {
        return;
    }
    let mut cases = every_verb();
    cases.extend(rext_cases());
    let out = check_with_scapy(&cases);
    let failures: Vec<String> = cases
        .iter()
        .zip(&out)
        .flat_map(|(c, f)| {
            compare_checked(c, f)
                .into_iter()
                .map(move |b| format!("{}: {b}", c.name))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "scapy disagrees with our frames:\n  {}",
        failures.join("\n  ")
    );
}

/// The comparison is live: a frame whose ICRC we damage, and one whose PSN we change after the
/// ICRC was computed, are both reported.
#[test]
fn scapy_check_catches_wrong_icrc_and_wrong_field() {
    if !scapy_available() {
        return;
    }
    let mut cases: Vec<Case> = every_verb().into_iter().take(2).collect();
    let n = cases[0].bytes.len();
    cases[0].bytes[n - 2] ^= 0x04;
    // The second case is 802.1Q + IPv4: the BTH starts at 18 + 20 + 8; the PSN's low byte is
    // BTH byte 11. A changed PSN also breaks the UDP checksum and our ICRC.
    assert!(cases[1].repr.eth.vlan.is_some());
    cases[1].bytes[18 + 20 + 8 + 11] ^= 0x01;
    let out = check_with_scapy(&cases);
    let bad0 = compare_checked(&cases[0], &out[0]);
    assert!(bad0.iter().any(|b| b.starts_with("ICRC")), "{bad0:?}");
    let bad1 = compare_checked(&cases[1], &out[1]);
    assert!(bad1.iter().any(|b| b.starts_with("BTH psn")), "{bad1:?}");
    assert!(bad1.iter().any(|b| b.starts_with("ICRC")), "{bad1:?}");
}
