//! Shared by the interop tests that run an external tool (scapy, tshark): whether the tool is
//! there, and one catalogue of frames built with our code that covers every verb.
//!
//! The catalogue is deliberately hostile to a sloppy decoder: every QPN, PSN, key and address
//! has bits set in its top byte (a 16-bit or little-endian read shows up as a wrong value), the
//! PSNs run across the 2^24 wrap, consecutive cases use different encapsulations (IPv4/IPv6,
//! 802.1Q, UDP checksum on/off) and several set the ICRC-masked BTH byte 4 (FECN, BECN,
//! deflection tokens).

/// The soft-RoCE captures, read in place (the capture and CM-MAD tests need no tool).
pub mod captures;

use rocev2_core::wire::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, Credits, DethRepr, EthRepr, FrameRepr,
    IethRepr, ImmDtRepr, IpRepr, Msn, NakCode, Opcode, Operation, Psn, Qpn, ROCEV2_UDP_PORT,
    RethRepr, RnrTimer, RoceRepr, Syndrome, Transport, UdpRepr, VlanRepr, cnp, frame::Ecn,
};
use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::Command;

/// Whether an interop tool answered `probe` successfully. When it did not, the test is skipped
/// with a loud line on stderr, unless `ROCEV2_REQUIRE_TOOLS=1` (set by `deploy/test.sh` on CI,
/// where the tools are installed), in which case a missing tool is a failure: a silently
/// skipped interop test would otherwise look exactly like a passing one.
pub fn tool_available(name: &str, probe: &mut Command) -> bool {
    let why = match probe.output() {
        Ok(out) if out.status.success() => return true,
        Ok(out) => format!(
            "{:?} exited with {}: {}",
            probe,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => format!("cannot run {probe:?}: {e}"),
    };
    if std::env::var("ROCEV2_REQUIRE_TOOLS").as_deref() == Ok("1") {
        panic!("{name} is required (ROCEV2_REQUIRE_TOOLS=1) but not usable: {why}");
    }
    // Straight to the stderr handle: the test harness captures `eprintln!` of passing tests,
    // which would hide the skip exactly when it matters.
    let _ = writeln!(
        std::io::stderr(),
        "\n*** SKIPPED: {name} not installed ({why}) ***\n"
    );
    false
}

/// A frame built with our code, with what went into it.
#[derive(Debug, Clone)]
pub struct Case {
    /// Short unique name, used by the tools' reports to point back at the case.
    pub name: String,
    /// The headers the frame was built from (PadCnt as emitted).
    pub repr: FrameRepr,
    /// The message payload (without pad).
    pub payload: Vec<u8>,
    /// The emitted frame, ICRC included.
    pub bytes: Vec<u8>,
}

/// Where a frame travels; cycled through by the catalogue.
#[derive(Debug, Clone, Copy)]
pub enum Encap {
    /// IPv4, no VLAN, UDP checksum 0 (as rxe sends).
    V4,
    /// IPv4 in an 802.1Q tag, with a UDP checksum.
    V4VlanCsum,
    /// IPv6 with a UDP checksum and non-zero traffic class and flow label.
    V6Csum,
    /// IPv6 in an 802.1Q tag, UDP checksum 0.
    V6Vlan,
}

impl Encap {
    const ALL: [Encap; 4] = [Encap::V4, Encap::V4VlanCsum, Encap::V6Csum, Encap::V6Vlan];
}

/// Builds a whole frame around `roce` and emits it.
pub fn build(name: &str, encap: Encap, i: u16, roce: RoceRepr, payload: Vec<u8>) -> Case {
    let vlan = matches!(encap, Encap::V4VlanCsum | Encap::V6Vlan).then_some(VlanRepr {
        pcp: 3,
        dei: false,
        vid: 0x123,
    });
    let ip = match encap {
        Encap::V4 | Encap::V4VlanCsum => IpRepr::V4 {
            src: Ipv4Addr::new(192, 168, 77, 11),
            dst: Ipv4Addr::new(192, 168, 77, 10),
            dscp: 26,
            ecn: Ecn::Ect0,
            identification: 0xd9c0 ^ i,
            dont_fragment: true,
            ttl: 64,
        },
        Encap::V6Csum | Encap::V6Vlan => IpRepr::V6 {
            src: Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 0x0b),
            dst: Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 0x0a),
            dscp: 26,
            ecn: Ecn::Ce,
            flow_label: 0x8_1234 ^ u32::from(i),
            hop_limit: 63,
        },
    };
    let repr = FrameRepr {
        eth: EthRepr {
            src: [0x52, 0x54, 0x00, 0x77, 0x00, 0x0b],
            dst: [0x52, 0x54, 0x00, 0x77, 0x00, 0x0a],
            vlan,
        },
        ip,
        udp: UdpRepr {
            src_port: 0xc000 | i,
            dst_port: ROCEV2_UDP_PORT,
            checksum: matches!(encap, Encap::V4VlanCsum | Encap::V6Csum),
        },
        roce,
    };
    let mut bytes = vec![0u8; repr.buffer_len(payload.len()).unwrap()];
    repr.emit(&mut bytes, &payload).unwrap();
    // PadCnt as IBA §9.2 defines it: the bytes that align the payload to 4.
    let mut repr = repr;
    repr.roce.bth.pad_cnt = ((4 - payload.len() % 4) % 4) as u8;
    Case {
        name: name.to_owned(),
        repr,
        payload,
        bytes,
    }
}

/// A payload of `len` bytes that no payload heuristic of a dissector recognises and in which a
/// shifted or truncated copy is visible.
pub fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|k| (k as u8).wrapping_mul(31).wrapping_add(seed) | 0x80)
        .collect()
}

/// One frame per RC verb (and UC, UD, CNP), with all the fields a decoder must get right.
///
/// Each row also gives the opcode byte from IBA Vol. 1 Table 38, and each AETH the syndrome
/// byte from §9.7.5.2 (Table 43), as literals: the catalogue asserts that our `Opcode` and
/// `Syndrome` encode to them, and the tools' decodings are compared with the literals, so a
/// wrong code point in `opcode.rs` or `aeth.rs` cannot hide behind a matching parse.
pub fn every_verb() -> Vec<Case> {
    use Operation::*;
    fn reth(i: u32) -> RethRepr {
        RethRepr {
            va: 0xfedc_ba98_7654_3000 + u64::from(i) * 0x40,
            r_key: 0x8000_0000 | (i << 8) | 0x2b,
            dma_len: 0x8000_0000 | (i * 1000),
        }
    }
    /// An AETH whose syndrome must encode to the IBA byte `iba`.
    fn aeth(syndrome: Syndrome, iba: u8, i: u32) -> AethRepr {
        assert_eq!(syndrome.to_byte(), iba, "{syndrome:?}: IBA §9.7.5.2");
        AethRepr {
            syndrome,
            msn: Msn::new(0xab_cd00 | i),
        }
    }
    fn immdt(i: u32) -> Option<ImmDtRepr> {
        Some(ImmDtRepr {
            imm: 0xdead_be00 | i,
        })
    }
    fn atomic(i: u32, swap_add: u64, compare: u64) -> Option<AtomicEthRepr> {
        Some(AtomicEthRepr {
            va: 0x8000_7f00_1234_5600 + u64::from(i) * 8,
            r_key: 0x9000_0000 | i,
            swap_add,
            compare,
        })
    }
    fn deth(i: u32) -> Option<DethRepr> {
        Some(DethRepr {
            q_key: 0x8765_4300 | i,
            src_qp: Qpn::new(0xa5_0000 | i),
        })
    }
    let (rc, uc, ud) = (
        Opcode::rc,
        |op| Opcode::new(Transport::Uc, op),
        |op| Opcode::new(Transport::Ud, op),
    );
    // (name, IBA opcode byte, our opcode, payload length, headers besides the BTH)
    type Extra = fn(u32, &mut RoceRepr);
    let none: Extra = |_, _| {};
    let cases: Vec<(&str, u8, Opcode, usize, Extra)> = vec![
        ("rc_send_first", 0x00, rc(SendFirst), 1024, none),
        ("rc_send_middle", 0x01, rc(SendMiddle), 1024, none),
        ("rc_send_last", 0x02, rc(SendLast), 37, none),
        (
            "rc_send_last_imm",
            0x03,
            rc(SendLastWithImmediate),
            6,
            |i, r| r.immdt = immdt(i),
        ),
        ("rc_send_only", 0x04, rc(SendOnly), 13, none),
        (
            "rc_send_only_imm",
            0x05,
            rc(SendOnlyWithImmediate),
            0,
            |i, r| r.immdt = immdt(i),
        ),
        ("rc_write_first", 0x06, rc(RdmaWriteFirst), 1024, |i, r| {
            r.reth = Some(reth(i))
        }),
        ("rc_write_middle", 0x07, rc(RdmaWriteMiddle), 1024, none),
        ("rc_write_last", 0x08, rc(RdmaWriteLast), 3, none),
        (
            "rc_write_last_imm",
            0x09,
            rc(RdmaWriteLastWithImmediate),
            2,
            |i, r| r.immdt = immdt(i),
        ),
        ("rc_write_only", 0x0a, rc(RdmaWriteOnly), 255, |i, r| {
            r.reth = Some(reth(i))
        }),
        (
            "rc_write_only_imm",
            0x0b,
            rc(RdmaWriteOnlyWithImmediate),
            1,
            |i, r| {
                r.reth = Some(reth(i));
                r.immdt = immdt(i);
            },
        ),
        ("rc_read_request", 0x0c, rc(RdmaReadRequest), 0, |i, r| {
            r.reth = Some(reth(i))
        }),
        (
            "rc_read_resp_first",
            0x0d,
            rc(RdmaReadResponseFirst),
            1024,
            |i, r| r.aeth = Some(aeth(Syndrome::Ack(Credits::UNLIMITED), 0x1f, i)),
        ),
        (
            "rc_read_resp_middle",
            0x0e,
            rc(RdmaReadResponseMiddle),
            1024,
            none,
        ),
        (
            "rc_read_resp_last",
            0x0f,
            rc(RdmaReadResponseLast),
            7,
            |i, r| r.aeth = Some(aeth(Syndrome::Ack(Credits::from_code(9)), 0x09, i)),
        ),
        (
            "rc_read_resp_only",
            0x10,
            rc(RdmaReadResponseOnly),
            8,
            |i, r| r.aeth = Some(aeth(Syndrome::Ack(Credits::from_code(0)), 0x00, i)),
        ),
        ("rc_ack", 0x11, rc(Acknowledge), 0, |i, r| {
            r.aeth = Some(aeth(Syndrome::Ack(Credits::from_code(7)), 0x07, i))
        }),
        ("rc_nak_psn_seq", 0x11, rc(Acknowledge), 0, |i, r| {
            r.aeth = Some(aeth(Syndrome::Nak(NakCode::PsnSequenceError), 0x60, i))
        }),
        ("rc_nak_inv_req", 0x11, rc(Acknowledge), 0, |i, r| {
            r.aeth = Some(aeth(Syndrome::Nak(NakCode::InvalidRequest), 0x61, i))
        }),
        ("rc_nak_rem_access", 0x11, rc(Acknowledge), 0, |i, r| {
            r.aeth = Some(aeth(Syndrome::Nak(NakCode::RemoteAccessError), 0x62, i))
        }),
        ("rc_nak_rem_op", 0x11, rc(Acknowledge), 0, |i, r| {
            r.aeth = Some(aeth(
                Syndrome::Nak(NakCode::RemoteOperationalError),
                0x63,
                i,
            ))
        }),
        ("rc_rnr_nak", 0x11, rc(Acknowledge), 0, |i, r| {
            r.aeth = Some(aeth(Syndrome::RnrNak(RnrTimer::from_code(14)), 0x2e, i))
        }),
        ("rc_atomic_ack", 0x12, rc(AtomicAcknowledge), 0, |i, r| {
            r.aeth = Some(aeth(Syndrome::Ack(Credits::UNLIMITED), 0x1f, i));
            r.atomic_ack_eth = Some(AtomicAckEthRepr {
                orig_data: 0x8877_6655_4433_2200 | u64::from(i),
            });
        }),
        ("rc_cmp_swap", 0x13, rc(CompareSwap), 0, |i, r| {
            r.atomic_eth = atomic(i, 0xf1f2_f3f4_f5f6_f7f8, 0x8182_8384_8586_8788)
        }),
        ("rc_fetch_add", 0x14, rc(FetchAdd), 0, |i, r| {
            r.atomic_eth = atomic(i, 0x8000_0000_0000_0001, 0)
        }),
        (
            "rc_send_last_inv",
            0x16,
            rc(SendLastWithInvalidate),
            5,
            |i, r| {
                r.ieth = Some(IethRepr {
                    r_key: 0xcafe_f000 | i,
                })
            },
        ),
        (
            "rc_send_only_inv",
            0x17,
            rc(SendOnlyWithInvalidate),
            64,
            |i, r| {
                r.ieth = Some(IethRepr {
                    r_key: 0xcafe_f000 | i,
                })
            },
        ),
        ("uc_send_only", 0x24, uc(SendOnly), 10, none),
        ("uc_write_first", 0x26, uc(RdmaWriteFirst), 256, |i, r| {
            r.reth = Some(reth(i))
        }),
        ("ud_send_only", 0x64, ud(SendOnly), 256, |i, r| {
            r.deth = deth(i)
        }),
        (
            "ud_send_only_imm",
            0x65,
            ud(SendOnlyWithImmediate),
            9,
            |i, r| {
                r.deth = deth(i);
                r.immdt = immdt(i);
            },
        ),
    ];
    let mut out = Vec::new();
    for (i, (name, iba, opcode, len, extra)) in cases.into_iter().enumerate() {
        assert_eq!(opcode.0, iba, "{name}: IBA Table 38");
        let i = i as u32;
        let bth = BthRepr {
            opcode,
            solicited: i.is_multiple_of(3),
            mig_req: i % 7 == 1,
            pad_cnt: 0,
            tver: 0,
            p_key: if i.is_multiple_of(2) { 0xffff } else { 0x8001 },
            fecn: i % 5 == 2,
            becn: i % 4 == 3,
            deflection_tokens: if i % 6 == 4 { 0x2a } else { 0 },
            dest_qp: Qpn::new(0xc0_0000 | (i << 12) | 0x345),
            ack_req: i % 2 == 1,
            psn: Psn::new(0xff_fff0).add(i),
        };
        let mut roce = RoceRepr::new(bth);
        extra(i, &mut roce);
        let encap = Encap::ALL[i as usize % Encap::ALL.len()];
        out.push(build(name, encap, i as u16, roce, payload(len, i as u8)));
    }
    // A CNP as a ConnectX NP sends it: opcode 0x81, BECN set, everything else zero (Annex
    // A17.9.1).
    let cnp_roce = RoceRepr::new(cnp::bth(Qpn::new(0xc5_4321), 0xffff));
    assert_eq!(cnp_roce.bth.opcode.0, 0x81);
    out.push(build("cnp", Encap::V4, 99, cnp_roce, Vec::new()));
    out
}
