//! Properties of the wire module over generated inputs (proptest):
//!
//! * every header `Repr` round-trips (emit → parse gives it back) and its emitted bytes sit at
//!   the IBA offsets, big-endian, computed here independently of the header files (a symmetric
//!   bug in emit and parse would survive a round trip, not this);
//! * whole transport packets (`RoceRepr`, any valid opcode with exactly its headers, optional
//!   REXT, any payload) and whole frames (`FrameRepr`, IPv4/IPv6, with or without 802.1Q and
//!   UDP checksum) round-trip, the ICRC verifies and equals an ICRC computed here from the
//!   Annex A17.8 masking rules, and emitting does not depend on what the buffer held before;
//! * no parser panics, on arbitrary bytes or on valid frames that were flipped, overwritten,
//!   truncated or extended; whatever parses re-emits to something that parses the same;
//! * frames built from a header template (`FrameRepr::emit`, and a template kept across frames
//!   with other transport headers, ECN and UDP source port, as the engine keeps one per path)
//!   are byte for byte what an independent builder writes with etherparse's own headers and
//!   checksums, `RoceRepr::emit` and `icrc::compute`;
//! * a single-bit flip anywhere the ICRC covers (outside the masked fields) is rejected, and a
//!   change confined to the masked fields leaves the ICRC valid.

use proptest::prelude::*;
use proptest::sample::Index;
use rocev2_core::wire::{
    AethPacket, AethRepr, AtomicAckEthPacket, AtomicAckEthRepr, AtomicEthPacket, AtomicEthRepr,
    BthPacket, BthRepr, CmRepr, CnpPacket, Credits, DethPacket, DethRepr, EthRepr, ExtPacket,
    ExtRepr, FrameRepr, IethPacket, IethRepr, ImmDtPacket, ImmDtRepr, IpRepr, MAD_LEN, MadPacket,
    Msn, NakCode, Opcode, Psn, Qpn, ROCEV2_UDP_PORT, RethPacket, RethRepr, RnrTimer, RocePacket,
    RoceRepr, Syndrome, UdpRepr, VlanRepr, cnp,
    ext::{self, Lookahead, MAX_LOOKAHEAD, MultipathAck, Placement},
    frame::{Ecn, Frame},
    icrc, mad,
};
use std::net::{Ipv4Addr, Ipv6Addr};

// ---------------------------------------------------------------------------------------------
// Strategies

/// Every opcode rocev2 implements (RC, UC, UD, CNP), from the one opcode table.
fn valid_opcodes() -> Vec<Opcode> {
    (0..=255u8)
        .map(Opcode)
        .filter(|o| o.layout().is_ok())
        .collect()
}

fn bth_with(opcode: impl Strategy<Value = Opcode>) -> impl Strategy<Value = BthRepr> {
    (
        opcode,
        any::<[bool; 6]>(),
        0u8..4,
        0u8..=ext::TVER,
        any::<u16>(),
        0u8..64,
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(
            |(opcode, [se, m, fecn, becn, a, _], pad_cnt, tver, p_key, tokens, qp, psn)| BthRepr {
                opcode,
                solicited: se,
                mig_req: m,
                pad_cnt,
                tver,
                p_key,
                fecn,
                becn,
                deflection_tokens: tokens,
                dest_qp: Qpn::new(qp),
                ack_req: a,
                psn: Psn::new(psn),
            },
        )
}

fn reth() -> impl Strategy<Value = RethRepr> {
    any::<(u64, u32, u32)>().prop_map(|(va, r_key, dma_len)| RethRepr { va, r_key, dma_len })
}

fn atomic_eth() -> impl Strategy<Value = AtomicEthRepr> {
    any::<(u64, u32, u64, u64)>().prop_map(|(va, r_key, swap_add, compare)| AtomicEthRepr {
        va,
        r_key,
        swap_add,
        compare,
    })
}

/// Every syndrome the AETH can carry (IBA §9.7): ACK with any credit code, RNR NAK with any
/// timer code, and every NAK code, reserved ones included.
fn syndrome() -> impl Strategy<Value = Syndrome> {
    prop_oneof![
        (0u8..32).prop_map(|c| Syndrome::Ack(Credits::from_code(c))),
        (0u8..32).prop_map(|c| Syndrome::RnrNak(RnrTimer::from_code(c))),
        prop_oneof![
            Just(NakCode::PsnSequenceError),
            Just(NakCode::InvalidRequest),
            Just(NakCode::RemoteAccessError),
            Just(NakCode::RemoteOperationalError),
            Just(NakCode::InvalidRdRequest),
            (5u8..32).prop_map(NakCode::Reserved),
        ]
        .prop_map(Syndrome::Nak),
    ]
}

fn aeth() -> impl Strategy<Value = AethRepr> {
    (syndrome(), any::<u32>()).prop_map(|(syndrome, msn)| AethRepr {
        syndrome,
        msn: Msn::new(msn),
    })
}

fn deth() -> impl Strategy<Value = DethRepr> {
    any::<(u32, u32)>().prop_map(|(q_key, qp)| DethRepr {
        q_key,
        src_qp: Qpn::new(qp),
    })
}

/// A REXT with any combination of blocks; look-ahead lists of 0 to MAX_LOOKAHEAD ids (unused
/// slots zero, as parse leaves them).
fn rext() -> impl Strategy<Value = ExtRepr> {
    let lookahead = (
        any::<u16>(),
        prop::collection::vec(any::<u16>(), 0..=MAX_LOOKAHEAD),
    )
        .prop_map(|(group_size, ids)| {
            let mut members = [0u16; MAX_LOOKAHEAD];
            members[..ids.len()].copy_from_slice(&ids);
            Lookahead {
                group_size,
                member_count: ids.len() as u8,
                members,
            }
        });
    let multipath = any::<(u16, u32, u32)>().prop_map(|(vp, s, a)| MultipathAck {
        vp,
        sack_psn: Psn::new(s),
        aack_psn: Psn::new(a),
    });
    let placement = (
        any::<(u32, u32)>(),
        prop::option::of(any::<(u64, u32, u32)>()),
    )
        .prop_map(|((msn, ipsn), reth)| Placement {
            msn: msn & 0xff_ffff,
            ipsn: ipsn & 0xff_ffff,
            reth: reth.map(|(va, r_key, dma_len)| RethRepr { va, r_key, dma_len }),
        });
    (
        prop::option::of(any::<u16>()),
        prop::option::of(lookahead),
        prop::option::of(multipath),
        prop::option::of(any::<u32>()),
        prop::option::of(placement),
        any::<[bool; 3]>(),
    )
        .prop_map(
            |(dasr_n, lookahead, multipath, tau_ns, placement, [synchronise, retx, ece])| ExtRepr {
                dasr_n,
                lookahead,
                multipath,
                tau_ns,
                placement,
                synchronise,
                retx,
                ece,
            },
        )
}

/// A transport packet: a valid opcode, exactly the headers its layout asks for, a REXT exactly
/// when TVer is 1, and a payload (0–300 bytes) only where the opcode carries one.
fn roce() -> impl Strategy<Value = (RoceRepr, Vec<u8>)> {
    let headers = (
        deth(),
        reth(),
        atomic_eth(),
        aeth(),
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
    );
    (
        bth_with(prop::sample::select(valid_opcodes())),
        headers,
        rext(),
        prop::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|(bth, (d, r, a, ae, orig, imm, inv), x, mut payload)| {
            let l = bth.opcode.layout().unwrap();
            if !l.payload {
                payload.clear();
            }
            let repr = RoceRepr {
                bth,
                ext: (bth.tver == ext::TVER).then_some(x),
                deth: l.deth.then_some(d),
                reth: l.reth.then_some(r),
                atomic_eth: l.atomic_eth.then_some(a),
                aeth: l.aeth.then_some(ae),
                atomic_ack_eth: l
                    .atomic_ack_eth
                    .then_some(AtomicAckEthRepr { orig_data: orig }),
                immdt: l.immdt.then_some(ImmDtRepr { imm }),
                ieth: l.ieth.then_some(IethRepr { r_key: inv }),
            };
            (repr, payload)
        })
}

fn ecn() -> impl Strategy<Value = Ecn> {
    prop_oneof![
        Just(Ecn::NotEct),
        Just(Ecn::Ect1),
        Just(Ecn::Ect0),
        Just(Ecn::Ce)
    ]
}

fn ip() -> impl Strategy<Value = IpRepr> {
    prop_oneof![
        (
            any::<([u8; 4], [u8; 4])>(),
            0u8..64,
            ecn(),
            any::<(u16, bool, u8)>()
        )
            .prop_map(
                |((s, d), dscp, ecn, (identification, df, ttl))| IpRepr::V4 {
                    src: Ipv4Addr::from(s),
                    dst: Ipv4Addr::from(d),
                    dscp,
                    ecn,
                    identification,
                    dont_fragment: df,
                    ttl,
                }
            ),
        (
            any::<([u8; 16], [u8; 16])>(),
            0u8..64,
            ecn(),
            0u32..(1 << 20),
            any::<u8>()
        )
            .prop_map(|((s, d), dscp, ecn, flow_label, hop_limit)| IpRepr::V6 {
                src: Ipv6Addr::from(s),
                dst: Ipv6Addr::from(d),
                dscp,
                ecn,
                flow_label,
                hop_limit,
            }),
    ]
}

fn frame() -> impl Strategy<Value = (FrameRepr, Vec<u8>)> {
    let vlan =
        (0u8..8, any::<bool>(), 0u16..4096).prop_map(|(pcp, dei, vid)| VlanRepr { pcp, dei, vid });
    (
        any::<([u8; 6], [u8; 6])>(),
        prop::option::of(vlan),
        ip(),
        any::<(u16, bool)>(),
        roce(),
    )
        .prop_map(
            |((src, dst), vlan, ip, (src_port, checksum), (roce, payload))| {
                let repr = FrameRepr {
                    eth: EthRepr { src, dst, vlan },
                    ip,
                    udp: UdpRepr {
                        src_port,
                        dst_port: ROCEV2_UDP_PORT,
                        checksum,
                    },
                    roce,
                };
                (repr, payload)
            },
        )
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// Emits a frame into a buffer pre-filled with `fill`, so leftovers would show.
fn emit_frame(repr: &FrameRepr, payload: &[u8], fill: u8) -> Vec<u8> {
    let mut buf = vec![fill; repr.buffer_len(payload.len()).unwrap()];
    repr.emit(&mut buf, payload).unwrap();
    buf
}

/// The frame built without the header template: etherparse's Ethernet, 802.1Q, IPv4 (its own
/// header checksum) or IPv6 and UDP headers (its own checksum), the transport packet from
/// `RoceRepr::emit`, and the ICRC from `icrc::compute` over the separate headers.
fn reference_frame(repr: &FrameRepr, payload: &[u8]) -> Vec<u8> {
    use etherparse::{
        EtherType, Ethernet2Header, IpDscp, IpEcn, IpNumber, Ipv4Header, Ipv6FlowLabel, Ipv6Header,
        SingleVlanHeader, UdpHeader, VlanId, VlanPcp,
    };
    let mut transport = vec![0u8; repr.roce.buffer_len(payload.len()).unwrap()];
    repr.roce.emit(&mut transport, payload).unwrap();
    let udp_len = u16::try_from(8 + transport.len()).unwrap();
    let (ether_type, ip_bytes, v4, v6) = match repr.ip {
        IpRepr::V4 {
            src,
            dst,
            dscp,
            ecn,
            identification,
            dont_fragment,
            ttl,
        } => {
            let mut h =
                Ipv4Header::new(udp_len, ttl, IpNumber::UDP, src.octets(), dst.octets()).unwrap();
            h.dscp = IpDscp::try_new(dscp).unwrap();
            h.ecn = IpEcn::try_new(ecn.bits()).unwrap();
            h.identification = identification;
            h.dont_fragment = dont_fragment;
            h.header_checksum = h.calc_header_checksum();
            (EtherType::IPV4, h.to_bytes().to_vec(), Some(h), None)
        }
        IpRepr::V6 {
            src,
            dst,
            dscp,
            ecn,
            flow_label,
            hop_limit,
        } => {
            let h = Ipv6Header {
                traffic_class: (dscp << 2) | ecn.bits(),
                flow_label: Ipv6FlowLabel::try_new(flow_label).unwrap(),
                payload_length: udp_len,
                next_header: IpNumber::UDP,
                hop_limit,
                source: src.octets(),
                destination: dst.octets(),
            };
            (EtherType::IPV6, h.to_bytes().to_vec(), None, Some(h))
        }
    };
    let mut udp = UdpHeader {
        source_port: repr.udp.src_port,
        destination_port: repr.udp.dst_port,
        length: udp_len,
        checksum: 0,
    };
    let n = transport.len();
    let crc = icrc::compute(&ip_bytes, &udp.to_bytes(), &transport[..n - 4]).unwrap();
    transport[n - 4..].copy_from_slice(&crc.to_le_bytes());
    if repr.udp.checksum {
        udp.checksum = match (v4, v6) {
            (Some(h), _) => udp.calc_checksum_ipv4(&h, &transport).unwrap(),
            (_, Some(h)) => udp.calc_checksum_ipv6(&h, &transport).unwrap(),
            _ => unreachable!(),
        };
    }
    let mut out = Ethernet2Header {
        source: repr.eth.src,
        destination: repr.eth.dst,
        ether_type: if repr.eth.vlan.is_some() {
            EtherType::VLAN_TAGGED_FRAME
        } else {
            ether_type
        },
    }
    .to_bytes()
    .to_vec();
    if let Some(v) = repr.eth.vlan {
        let tag = SingleVlanHeader {
            pcp: VlanPcp::try_new(v.pcp).unwrap(),
            drop_eligible_indicator: v.dei,
            vlan_id: VlanId::try_new(v.vid).unwrap(),
            ether_type,
        };
        out.extend_from_slice(&tag.to_bytes());
    }
    out.extend_from_slice(&ip_bytes);
    out.extend_from_slice(&udp.to_bytes());
    out.extend_from_slice(&transport);
    out
}

/// What parse must give back: the repr with PadCnt as emit derives it from the payload.
fn with_pad(mut repr: FrameRepr, payload_len: usize) -> FrameRepr {
    repr.roce.bth.pad_cnt = RoceRepr::pad_for(payload_len) as u8;
    repr
}

/// Where the layers of an emitted frame start.
struct Layout {
    l3: usize,
    v6: bool,
    udp: usize,
    bth: usize,
}

fn layout(repr: &FrameRepr) -> Layout {
    let l3 = 14 + repr.eth.vlan.map_or(0, |_| 4);
    let v6 = matches!(repr.ip, IpRepr::V6 { .. });
    let udp = l3 + if v6 { 40 } else { 20 };
    Layout {
        l3,
        v6,
        udp,
        bth: udp + 8,
    }
}

/// Whether bit `bit` (0 = MSB) of frame byte `at` is one the ICRC masks (Annex A17.8.2): IPv4
/// TOS, TTL and header checksum; IPv6 traffic class, flow label and hop limit; the UDP
/// checksum; BTH byte 4 (FECN, BECN, Resv6a).
fn icrc_masked(l: &Layout, at: usize, bit: u8) -> bool {
    if at >= l.l3 && at < l.udp {
        let i = at - l.l3;
        return if l.v6 {
            (i == 0 && bit >= 4) || (1..=3).contains(&i) || i == 7
        } else {
            [1, 8, 10, 11].contains(&i)
        };
    }
    at == l.udp + 6 || at == l.udp + 7 || at == l.bth + 4
}

/// The ICRC computed straight from the masking rules, without `wire::icrc`.
fn reference_icrc(frame: &[u8], l: &Layout) -> u32 {
    let mut covered = vec![0xffu8; 8];
    for (at, b) in frame.iter().enumerate().take(frame.len() - 4).skip(l.l3) {
        let mask = (0..8u8)
            .filter(|bit| icrc_masked(l, at, *bit))
            .fold(0u8, |m, bit| m | (0x80 >> bit));
        covered.push(b | mask);
    }
    crc32fast::hash(&covered)
}

/// Runs every parser on `bytes`; none may panic. Whatever `FrameRepr::parse` accepts must
/// re-emit to a frame that parses to the same repr and payload, and likewise for a bare
/// transport packet. Returns the frame parse result for further checks.
fn exercise(bytes: &[u8]) -> Option<(FrameRepr, Vec<u8>)> {
    if let Ok(f) = Frame::new_checked(bytes) {
        let _ = f.verify_icrc();
        let _ = FrameRepr::parse_frame(&f);
        let _ = (
            f.payload(),
            f.ip_header(),
            f.udp_header(),
            f.transport().icrc(),
        );
    }
    exercise_transport(bytes);
    // The same bytes as they would look after an Ethernet + IPv4 + UDP prefix are covered by
    // `mutated_frames_never_panic`; here, every header parser also sees them raw.
    let _ = BthPacket::new_checked(bytes).map(|p| BthRepr::parse(&p));
    let _ = RethPacket::new_checked(bytes).map(|p| RethRepr::parse(&p));
    let _ = AethPacket::new_checked(bytes).map(|p| AethRepr::parse(&p));
    let _ = AtomicEthPacket::new_checked(bytes).map(|p| AtomicEthRepr::parse(&p));
    let _ = AtomicAckEthPacket::new_checked(bytes).map(|p| AtomicAckEthRepr::parse(&p));
    let _ = DethPacket::new_checked(bytes).map(|p| DethRepr::parse(&p));
    let _ = ImmDtPacket::new_checked(bytes).map(|p| ImmDtRepr::parse(&p));
    let _ = IethPacket::new_checked(bytes).map(|p| IethRepr::parse(&p));
    let _ = CnpPacket::new_checked(bytes).map(|p| cnp::parse(&p));
    if let Ok(p) = ExtPacket::new_checked(bytes) {
        let _ = (p.dasr_n(), p.multipath(), p.tau_ns(), p.header_len());
        if let Some((_, ids)) = p.lookahead() {
            let _ = ids.count();
        }
        let _ = ExtRepr::parse(&p);
    }
    let (repr, payload) = FrameRepr::parse(bytes).ok()?;
    let again = emit_frame(&repr, payload, 0xa5);
    assert!(again.len() <= bytes.len(), "re-emitted frame grew");
    let (repr2, payload2) = FrameRepr::parse(&again).expect("re-emitted frame must parse");
    assert_eq!(payload2, payload);
    assert_eq!(repr2, normalise_pad(repr, payload.len()));
    Some((repr, payload.to_vec()))
}

/// A received packet may carry a PadCnt that does not align it to 4 bytes (the parser only
/// checks PadCnt against the payload length); emit always aligns, so after a re-emit PadCnt
/// is the aligned one and everything else must be unchanged.
fn normalise_pad(repr: FrameRepr, payload_len: usize) -> FrameRepr {
    with_pad(repr, payload_len)
}

fn exercise_transport(bytes: &[u8]) {
    let Ok(p) = RocePacket::new_checked(bytes) else {
        return;
    };
    let _ = (p.payload(), p.icrc(), p.icrc_covered(), p.layout());
    let _ = (p.deth(), p.reth(), p.atomic_eth(), p.aeth());
    let _ = (p.atomic_ack_eth(), p.immdt(), p.ieth(), p.ext());
    let Ok(repr) = RoceRepr::parse(&p) else {
        return;
    };
    let payload = p.payload();
    let mut again = vec![0u8; repr.buffer_len(payload.len()).unwrap()];
    repr.emit(&mut again, payload).unwrap();
    let p2 = RocePacket::new_checked(&again[..]).expect("re-emitted packet must be valid");
    let mut want = repr;
    want.bth.pad_cnt = RoceRepr::pad_for(payload.len()) as u8;
    assert_eq!(RoceRepr::parse(&p2), Ok(want));
    assert_eq!(p2.payload(), payload);
}

/// A damage done to a valid frame.
#[derive(Debug, Clone)]
enum Mutation {
    /// XOR one byte with a non-zero mask.
    Flip(Index, u8),
    /// Overwrite a run of bytes (keeps lengths, so parsing reaches the transport headers).
    Overwrite(Index, Vec<u8>),
    /// Cut the frame short.
    Truncate(Index),
    /// Append bytes, as Ethernet padding or garbage would.
    Extend(Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<Index>(), 1u8..=255).prop_map(|(i, m)| Mutation::Flip(i, m)),
        3 => (any::<Index>(), prop::collection::vec(any::<u8>(), 1..64))
            .prop_map(|(i, b)| Mutation::Overwrite(i, b)),
        1 => any::<Index>().prop_map(Mutation::Truncate),
        1 => prop::collection::vec(any::<u8>(), 1..64).prop_map(Mutation::Extend),
    ]
}

fn apply(frame: &mut Vec<u8>, m: &Mutation) {
    match m {
        Mutation::Flip(i, mask) if !frame.is_empty() => {
            let at = i.index(frame.len());
            frame[at] ^= mask;
        }
        Mutation::Overwrite(i, b) if !frame.is_empty() => {
            let at = i.index(frame.len());
            let n = b.len().min(frame.len() - at);
            frame[at..at + n].copy_from_slice(&b[..n]);
        }
        Mutation::Truncate(i) => {
            let n = i.index(frame.len() + 1);
            frame.truncate(n);
        }
        Mutation::Extend(b) => frame.extend_from_slice(b),
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Properties

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// BTH: every field round-trips and lands at IBA §9.2's bit positions.
    #[test]
    fn bth_round_trip_and_layout(b in bth_with(any::<u8>().prop_map(Opcode))) {
        let mut buf = [0x5au8; 12];
        b.emit(&mut BthPacket::new_unchecked(&mut buf[..]));
        let q = b.dest_qp.value().to_be_bytes();
        let p = b.psn.value().to_be_bytes();
        let want = [
            b.opcode.0,
            (u8::from(b.solicited) << 7) | (u8::from(b.mig_req) << 6) | (b.pad_cnt << 4) | b.tver,
            (b.p_key >> 8) as u8,
            b.p_key as u8,
            (u8::from(b.fecn) << 7) | (u8::from(b.becn) << 6) | b.deflection_tokens,
            q[1], q[2], q[3],
            u8::from(b.ack_req) << 7,
            p[1], p[2], p[3],
        ];
        prop_assert_eq!(buf, want);
        prop_assert_eq!(BthRepr::parse(&BthPacket::new_checked(&buf[..]).unwrap()), Ok(b));
    }

    /// RETH (IBA §9.3.3): VA, R_Key, DMA Length, big-endian.
    #[test]
    fn reth_round_trip_and_layout(h in reth()) {
        let mut buf = [0x5au8; 16];
        h.emit(&mut RethPacket::new_unchecked(&mut buf[..]));
        prop_assert_eq!(&buf[..8], &h.va.to_be_bytes()[..]);
        prop_assert_eq!(&buf[8..12], &h.r_key.to_be_bytes()[..]);
        prop_assert_eq!(&buf[12..], &h.dma_len.to_be_bytes()[..]);
        prop_assert_eq!(RethRepr::parse(&RethPacket::new_checked(&buf[..]).unwrap()), Ok(h));
    }

    /// AETH (IBA §9.3.5, §9.7.5): syndrome type in bits 6–5, value in bits 4–0, 24-bit MSN.
    #[test]
    fn aeth_round_trip_and_layout(h in aeth()) {
        let mut buf = [0x5au8; 4];
        h.emit(&mut AethPacket::new_unchecked(&mut buf[..]));
        let syndrome = match h.syndrome {
            Syndrome::Ack(c) => c.code(),
            Syndrome::RnrNak(t) => 0b0010_0000 | t.code(),
            Syndrome::Nak(NakCode::PsnSequenceError) => 0b0110_0000,
            Syndrome::Nak(NakCode::InvalidRequest) => 0b0110_0001,
            Syndrome::Nak(NakCode::RemoteAccessError) => 0b0110_0010,
            Syndrome::Nak(NakCode::RemoteOperationalError) => 0b0110_0011,
            Syndrome::Nak(NakCode::InvalidRdRequest) => 0b0110_0100,
            Syndrome::Nak(NakCode::Reserved(c)) => 0b0110_0000 | c,
        };
        let m = h.msn.value().to_be_bytes();
        prop_assert_eq!(buf, [syndrome, m[1], m[2], m[3]]);
        prop_assert_eq!(AethRepr::parse(&AethPacket::new_checked(&buf[..]).unwrap()), Ok(h));
    }

    /// AtomicETH (IBA §9.3.4): VA, R_Key, Swap/Add, Compare.
    #[test]
    fn atomic_eth_round_trip_and_layout(h in atomic_eth()) {
        let mut buf = [0x5au8; 28];
        h.emit(&mut AtomicEthPacket::new_unchecked(&mut buf[..]));
        let want: Vec<u8> = [&h.va.to_be_bytes()[..], &h.r_key.to_be_bytes(),
            &h.swap_add.to_be_bytes(), &h.compare.to_be_bytes()].concat();
        prop_assert_eq!(&buf[..], &want[..]);
        prop_assert_eq!(
            AtomicEthRepr::parse(&AtomicEthPacket::new_checked(&buf[..]).unwrap()),
            Ok(h)
        );
    }

    /// AtomicAckETH, ImmDt, IETH (IBA §9.3.6–§9.3.8): one big-endian value each.
    #[test]
    fn small_headers_round_trip_and_layout(orig in any::<u64>(), imm in any::<u32>(),
                                           rkey in any::<u32>()) {
        let mut a = [0x5au8; 8];
        AtomicAckEthRepr { orig_data: orig }.emit(&mut AtomicAckEthPacket::new_unchecked(&mut a[..]));
        prop_assert_eq!(a, orig.to_be_bytes());
        prop_assert_eq!(
            AtomicAckEthRepr::parse(&AtomicAckEthPacket::new_checked(&a[..]).unwrap()),
            Ok(AtomicAckEthRepr { orig_data: orig })
        );
        let mut i = [0x5au8; 4];
        ImmDtRepr { imm }.emit(&mut ImmDtPacket::new_unchecked(&mut i[..]));
        prop_assert_eq!(i, imm.to_be_bytes());
        prop_assert_eq!(ImmDtRepr::parse(&ImmDtPacket::new_checked(&i[..]).unwrap()),
            Ok(ImmDtRepr { imm }));
        let mut v = [0x5au8; 4];
        IethRepr { r_key: rkey }.emit(&mut IethPacket::new_unchecked(&mut v[..]));
        prop_assert_eq!(v, rkey.to_be_bytes());
        prop_assert_eq!(IethRepr::parse(&IethPacket::new_checked(&v[..]).unwrap()),
            Ok(IethRepr { r_key: rkey }));
    }

    /// DETH (IBA §9.3.2): Q_Key, a reserved byte written as zero, 24-bit source QP.
    #[test]
    fn deth_round_trip_and_layout(h in deth()) {
        let mut buf = [0x5au8; 8];
        h.emit(&mut DethPacket::new_unchecked(&mut buf[..]));
        let q = h.src_qp.value().to_be_bytes();
        let k = h.q_key.to_be_bytes();
        prop_assert_eq!(buf, [k[0], k[1], k[2], k[3], 0, q[1], q[2], q[3]]);
        prop_assert_eq!(DethRepr::parse(&DethPacket::new_checked(&buf[..]).unwrap()), Ok(h));
    }

    /// SIDR_REQ and SIDR_REP (IBA §12.11, Tables 115–116) round-trip and sit at their table
    /// offsets, big-endian; the reserved bytes (REQ 6–7, REP 6–7 and 11) stay zero (the MAD
    /// attributes are emitted over zeroed data, as `CmRepr::emit` provides).
    #[test]
    fn sidr_round_trip_and_layout(
        (rid, pkey, sid, qkey) in any::<(u32, u16, u64, u32)>(),
        (status, info_len, qpn) in (any::<u8>(), any::<u8>(), 0u32..1 << 24),
        fill in any::<u8>(),
    ) {
        use mad::cm_sidr::*;
        let req = SidrReqRepr {
            request_id: rid,
            partition_key: pkey,
            service_id: sid,
            private_data: [fill; 216],
        };
        let mut buf = [0u8; mad::DATA_LEN];
        req.emit(&mut SidrReqPacket::new_unchecked(&mut buf[..]));
        prop_assert_eq!(&buf[0..4], &rid.to_be_bytes()[..]);
        prop_assert_eq!(&buf[4..8], &[(pkey >> 8) as u8, pkey as u8, 0, 0][..]);
        prop_assert_eq!(&buf[8..16], &sid.to_be_bytes()[..]);
        prop_assert!(buf[16..].iter().all(|&b| b == fill));
        prop_assert_eq!(SidrReqRepr::parse(&SidrReqPacket::new_checked(&buf[..]).unwrap()), Ok(req));
        let rep = SidrRepRepr {
            request_id: rid,
            status: SidrStatus(status),
            additional_info_length: info_len,
            qpn: Qpn::new(qpn),
            service_id: sid,
            q_key: qkey,
            additional_info: [fill ^ 1; 72],
            private_data: [fill; 136],
        };
        let mut buf = [0u8; mad::DATA_LEN];
        rep.emit(&mut SidrRepPacket::new_unchecked(&mut buf[..]));
        prop_assert_eq!(&buf[0..8], &[rid.to_be_bytes()[..].to_vec(), vec![status, info_len, 0, 0]].concat()[..]);
        prop_assert_eq!(&buf[8..12], &[(qpn >> 16) as u8, (qpn >> 8) as u8, qpn as u8, 0][..]);
        prop_assert_eq!(&buf[12..20], &sid.to_be_bytes()[..]);
        prop_assert_eq!(&buf[20..24], &qkey.to_be_bytes()[..]);
        prop_assert!(buf[24..96].iter().all(|&b| b == fill ^ 1));
        prop_assert!(buf[96..].iter().all(|&b| b == fill));
        prop_assert_eq!(SidrRepRepr::parse(&SidrRepPacket::new_checked(&buf[..]).unwrap()), Ok(rep));
    }

    /// REXT with any combination of blocks: round-trips, its length byte counts 4-byte words,
    /// and a buffer longer than the header does not change what is read.
    #[test]
    fn rext_round_trip(h in rext(), extra in prop::collection::vec(any::<u8>(), 0..8)) {
        let len = h.buffer_len();
        prop_assert_eq!(len % 4, 0);
        let mut buf = vec![0x5au8; len];
        h.emit(&mut ExtPacket::new_unchecked(&mut buf[..]));
        prop_assert_eq!(usize::from(buf[1]) * 4, len);
        prop_assert_eq!(&buf[2..4], &[0u8, 0][..], "reserved bytes zero");
        let p = ExtPacket::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(p.header_len(), len);
        prop_assert_eq!(ExtRepr::parse(&p), Ok(h));
        buf.extend_from_slice(&extra);
        prop_assert_eq!(ExtRepr::parse(&ExtPacket::new_checked(&buf[..]).unwrap()), Ok(h));
    }

    /// A whole transport packet: parse gives back the repr (PadCnt derived from the payload),
    /// the payload, the opcode's layout, and zeroed pad and ICRC bytes.
    #[test]
    fn roce_repr_round_trip((repr, payload) in roce()) {
        let len = repr.buffer_len(payload.len()).unwrap();
        let pad = RoceRepr::pad_for(payload.len());
        prop_assert_eq!(len % 4, 0, "transport packets are 4-byte aligned");
        let mut buf = vec![0x5au8; len];
        repr.emit(&mut buf, &payload).unwrap();
        prop_assert_eq!(&buf[len - 4 - pad..], &vec![0u8; 4 + pad][..]);
        let p = RocePacket::new_checked(&buf[..]).unwrap();
        let mut want = repr;
        want.bth.pad_cnt = pad as u8;
        prop_assert_eq!(RoceRepr::parse(&p), Ok(want));
        prop_assert_eq!(p.payload(), &payload[..]);
        prop_assert_eq!(p.layout(), repr.bth.opcode.layout().unwrap());
    }

    /// A whole frame: parse (ICRC verified) gives back repr and payload, the ICRC equals the
    /// one computed from the masking rules, and the bytes do not depend on the buffer's
    /// previous contents.
    #[test]
    fn frame_repr_round_trip((repr, payload) in frame()) {
        let buf = emit_frame(&repr, &payload, 0x00);
        prop_assert_eq!(&emit_frame(&repr, &payload, 0xff), &buf);
        let (got, got_payload) = FrameRepr::parse(&buf).unwrap();
        prop_assert_eq!(got, with_pad(repr, payload.len()));
        prop_assert_eq!(got_payload, &payload[..]);
        let l = layout(&repr);
        let stored = u32::from_le_bytes(buf[buf.len() - 4..].try_into().unwrap());
        prop_assert_eq!(stored, reference_icrc(&buf, &l));
        let f = Frame::new_checked(&buf).unwrap();
        prop_assert_eq!(f.verify_icrc(), Ok(()));
        prop_assert_eq!(f.transport().icrc(), stored);
    }

    /// A frame from the header template (`FrameRepr::emit` builds one per frame) is byte for
    /// byte the independent builder's.
    #[test]
    fn frame_from_template_matches_reference((repr, payload) in frame()) {
        prop_assert_eq!(emit_frame(&repr, &payload, 0xa5), reference_frame(&repr, &payload));
    }

    /// A template kept across frames, as the engine keeps one per path, builds each frame as
    /// if it had been built for that frame alone: other transport headers and payloads, the
    /// ECN of each frame, another UDP source port (a multipath virtual path). The template is
    /// built from one ECN and DSCP-only bytes, so leftovers of a previous frame would show.
    #[test]
    fn template_reused_across_frames_matches_reference(
        (repr, first) in frame(),
        others in prop::collection::vec((roce(), ecn(), prop::option::of(any::<u16>())), 1..4),
    ) {
        let mut template = repr.template().unwrap();
        let mut seen = repr;
        let frames = std::iter::once(((repr.roce, first), repr.ip.ecn(), None)).chain(others);
        for ((roce, payload), ecn, port) in frames {
            if let Some(p) = port {
                template.set_src_port(p);
                seen.udp.src_port = p;
            }
            let mut want = FrameRepr { roce, ..seen };
            match &mut want.ip {
                IpRepr::V4 { ecn: e, .. } | IpRepr::V6 { ecn: e, .. } => *e = ecn,
            }
            let mut buf = vec![0x5a; template.buffer_len(&roce, payload.len()).unwrap()];
            template
                .emit_with(&roce, ecn, &mut buf, payload.len(), |d| d.copy_from_slice(&payload))
                .unwrap();
            prop_assert_eq!(&buf, &reference_frame(&want, &payload));
            // And through a `FrameBuf`, as the engine sends.
            let mut v = vec![0xc3; 3];
            let n = template.emit_into(&roce, ecn, &mut v, payload.len(), |d| d.copy_from_slice(&payload)).unwrap();
            prop_assert_eq!(n, buf.len());
            prop_assert_eq!(&v, &buf);
        }
    }

    /// Rewriting only ICRC-masked fields (what routers and switches may do: DSCP/ECN, TTL, hop
    /// limit, flow label, FECN/BECN, deflection tokens, the UDP checksum) keeps the ICRC valid.
    #[test]
    fn frame_masked_fields_do_not_affect_icrc((repr, payload) in frame(), noise in any::<[u8; 8]>()) {
        let mut buf = emit_frame(&repr, &payload, 0);
        let l = layout(&repr);
        let mut k = 0;
        for (at, b) in buf.iter_mut().enumerate().take(l.bth + 12).skip(l.l3) {
            let mask = (0..8u8)
                .filter(|bit| icrc_masked(&l, at, *bit))
                .fold(0u8, |m, bit| m | (0x80 >> bit));
            if mask != 0 {
                *b ^= noise[k % noise.len()] & mask;
                k += 1;
            }
        }
        prop_assert_eq!(icrc::verify(&buf[l.l3..l.udp], &buf[l.udp..l.bth], &buf[l.bth..]), Ok(()));
    }

    /// A single flipped bit anywhere the ICRC covers is rejected: by the ICRC, or earlier by
    /// a length, checksum or opcode check.
    #[test]
    fn frame_single_bit_flip_outside_masks_rejected((repr, payload) in frame(), pick in any::<Index>()) {
        let buf = emit_frame(&repr, &payload, 0);
        let l = layout(&repr);
        let covered: Vec<(usize, u8)> = (l.l3..buf.len())
            .flat_map(|at| (0..8u8).map(move |bit| (at, bit)))
            .filter(|(at, bit)| !icrc_masked(&l, *at, *bit))
            .collect();
        let (at, bit) = *pick.get(&covered);
        let mut bad = buf.clone();
        bad[at] ^= 0x80 >> bit;
        prop_assert!(FrameRepr::parse(&bad).is_err(), "flip of byte {} bit {} accepted", at, bit);
    }

    /// Bytes after the IP packet (Ethernet padding) are ignored; any truncation is rejected.
    #[test]
    fn frame_padding_ignored_truncation_rejected(
        (repr, payload) in frame(),
        tail in prop::collection::vec(any::<u8>(), 1..64),
        cut in any::<Index>(),
    ) {
        let buf = emit_frame(&repr, &payload, 0);
        let mut padded = buf.clone();
        padded.extend_from_slice(&tail);
        let (got, got_payload) = FrameRepr::parse(&padded).unwrap();
        prop_assert_eq!(got, with_pad(repr, payload.len()));
        prop_assert_eq!(got_payload, &payload[..]);
        let n = cut.index(buf.len());
        prop_assert!(FrameRepr::parse(&buf[..n]).is_err(), "frame cut to {} bytes accepted", n);
    }

    /// No parser panics on arbitrary bytes.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        exercise(&bytes);
    }

    /// No MAD parser panics on arbitrary bytes, including bytes shaped like a CM MAD (BaseVersion
    /// 1, class 0x07 version 2, a supported attribute) so the attribute parsers are reached; what
    /// parses re-emits to 256 bytes that parse to the same repr.
    #[test]
    fn arbitrary_mads_never_panic(
        shape in any::<bool>(),
        attr in prop::sample::select(vec![0x0001u16, 0x0010, 0x0011, 0x0012, 0x0013, 0x0014, 0x0015, 0x0016, 0x0017, 0x0018, 0x0019]),
        mut bytes in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        if shape && bytes.len() >= 18 {
            bytes[..3].copy_from_slice(&[1, mad::mgmt_class::CM, mad::CM_CLASS_VERSION]);
            bytes[16..18].copy_from_slice(&attr.to_be_bytes());
        }
        if let Ok(p) = MadPacket::new_checked(&bytes[..]) {
            let _ = mad::HeaderRepr::parse(&p);
            let _ = (p.attribute_id(), p.transaction_id(), p.data());
        }
        if let Ok(r) = CmRepr::parse_bytes(&bytes) {
            let mut out = [0u8; MAD_LEN];
            r.emit(&mut MadPacket::new_unchecked(&mut out[..]));
            prop_assert_eq!(CmRepr::parse_bytes(&out), Ok(r));
        }
    }

    /// Arbitrary bytes behind a valid BTH opcode and TVer (0 or 1 with a plausible REXT length)
    /// reach the transport layout and REXT code, not just the first check.
    #[test]
    fn arbitrary_transport_never_panics(
        op in prop::sample::select(valid_opcodes()),
        flags in any::<u8>(),
        rext_words in 0u8..32,
        rest in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut bytes = vec![op.0, flags & 0xf1];
        bytes.extend_from_slice(&rest);
        if bytes.len() > 13 && flags & 1 == 1 {
            bytes[13] = rext_words;
        }
        exercise(&bytes);
    }

    /// No parser panics on a valid frame after a few flips, overwrites, cuts or extensions, and
    /// whatever still parses re-emits consistently (checked inside `exercise`).
    #[test]
    fn mutated_frames_never_panic(
        (repr, payload) in frame(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let mut buf = emit_frame(&repr, &payload, 0);
        for m in &mutations {
            apply(&mut buf, m);
        }
        exercise(&buf);
        // The transport part alone, as a UDP-socket datapath would hand it over.
        let l = layout(&repr);
        if buf.len() > l.bth {
            exercise_transport(&buf[l.bth..]);
        }
    }
}
