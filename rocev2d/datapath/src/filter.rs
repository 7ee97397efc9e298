//! Which frames an AF_PACKET (or AF_XDP) socket hands to rocev2: untagged IPv4 or IPv6 UDP to port 4791,
//! IPv4 not fragmented. The same rule twice: a classic BPF socket filter, so the kernel copies
//! nothing else to us, and [`is_roce`], the userspace check behind it (a frame can arrive
//! between `socket()` and `SO_ATTACH_FILTER`, and attaching can fail).
//!
//! The program is the one `tcpdump -dd 'udp dst port 4791 and not ip[6:2] & 0x3fff != 0'`
//! would generate, written out by hand with its listing, and checked against [`is_roce`] by a
//! small cBPF interpreter in the tests.
//!
//! Deviations: 802.1Q-tagged frames are not accepted (on Linux the tag is usually stripped into
//! packet metadata before the filter runs; rocev2 does not reinsert it yet).

use rocev2_core::wire::frame::Ecn;

/// One classic BPF instruction (`struct sock_filter`).
pub type SockFilter = libc::sock_filter;

const fn ins(code: u16, jt: u8, jf: u8, k: u32) -> SockFilter {
    SockFilter { code, jt, jf, k }
}

/// Accept (return the whole frame) for RoCEv2, drop (return 0) for everything else.
///
/// ```text
///  0  ldh  [12]                   ethertype
///  1  jeq  #0x86dd     jt 10  jf 2
///  2  jeq  #0x0800     jt 3   jf 15
///  3  ldb  [23]                   IPv4 protocol
///  4  jeq  #17         jt 5   jf 15
///  5  ldh  [20]                   flags + fragment offset
///  6  jset #0x3fff     jt 15  jf 7    MF or offset: a fragment
///  7  ldxb 4*([14]&0xf)           IPv4 header length
///  8  ldh  [x+16]                 UDP destination port
///  9  jeq  #4791       jt 14  jf 15
/// 10  ldb  [20]                   IPv6 next header
/// 11  jeq  #17         jt 12  jf 15
/// 12  ldh  [56]                   UDP destination port
/// 13  jeq  #4791       jt 14  jf 15
/// 14  ret  #262144
/// 15  ret  #0
/// ```
pub const ROCE_FILTER: [SockFilter; 16] = [
    ins(0x28, 0, 0, 12),
    ins(0x15, 8, 0, 0x86dd),
    ins(0x15, 0, 12, 0x0800),
    ins(0x30, 0, 0, 23),
    ins(0x15, 0, 10, 17),
    ins(0x28, 0, 0, 20),
    ins(0x45, 8, 0, 0x3fff),
    ins(0xb1, 0, 0, 14),
    ins(0x48, 0, 0, 16),
    ins(0x15, 4, 5, 4791),
    ins(0x30, 0, 0, 20),
    ins(0x15, 0, 3, 17),
    ins(0x28, 0, 0, 56),
    ins(0x15, 0, 1, 4791),
    ins(0x06, 0, 0, 0x40000),
    ins(0x06, 0, 0, 0),
];

/// Drops everything: attached to the UDP socket the AF_PACKET datapath binds on port 4791 so
/// that the kernel neither queues RoCEv2 datagrams nor answers them with ICMP port unreachable.
pub const DROP_ALL: [SockFilter; 1] = [ins(0x06, 0, 0, 0)];

/// The userspace twin of [`ROCE_FILTER`].
pub fn is_roce(frame: &[u8]) -> bool {
    let be16 = |at: usize| {
        frame
            .get(at..at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    match be16(12) {
        Some(0x0800) => {
            let (Some(&vihl), Some(&proto), Some(frag)) = (frame.get(14), frame.get(23), be16(20))
            else {
                return false;
            };
            let ihl = usize::from(vihl & 0x0f) * 4;
            proto == 17 && frag & 0x3fff == 0 && be16(14 + ihl + 2) == Some(4791)
        }
        Some(0x86dd) => frame.get(20) == Some(&17) && be16(56) == Some(4791),
        _ => false,
    }
}

/// Where the UDP header of an untagged IPv4/IPv6 frame starts.
pub(crate) fn udp_at(f: &[u8]) -> Option<usize> {
    match f.get(12..14) {
        Some([0x08, 0x00]) => f.get(14).map(|b| 14 + usize::from(b & 0x0f) * 4),
        Some([0x86, 0xdd]) => Some(14 + 40),
        _ => None,
    }
}

/// The destination QP of an untagged IPv4/IPv6 RoCEv2 frame: the 24-bit field at bytes 5..8 of
/// the BTH right after the UDP header (IBA 9.2, figure 104), read without checking anything
/// else ([`is_roce`] decides what the frame is; the core validates the rest). `None` when the
/// frame is too short for it.
pub(crate) fn dest_qpn(f: &[u8]) -> Option<u32> {
    let bth = udp_at(f)? + 8;
    match f.get(bth + 5..bth + 8)? {
        [a, b, c] => Some(u32::from_be_bytes([0, *a, *b, *c])),
        _ => None,
    }
}

/// The UD payload of an untagged IPv4/IPv6 RoCEv2 frame whose BTH opcode is UD SEND Only
/// (a MAD to QP1, IBA §13.5): the bytes after the BTH and the DETH, ICRC included (the MAD is
/// its first 256 bytes). Read without checking anything else, as [`dest_qpn`]; `None` for
/// another opcode or a frame too short for the headers.
pub(crate) fn ud_send_payload(f: &[u8]) -> Option<&[u8]> {
    use rocev2_core::wire::{BthRepr, DethRepr, Opcode, Operation, Transport};
    let bth = udp_at(f)? + 8;
    let send_only = Opcode::new(Transport::Ud, Operation::SendOnly).0;
    match *f.get(bth)? == send_only {
        true => f.get(bth + BthRepr::LEN + DethRepr::LEN..),
        false => None,
    }
}

/// Zeroes the UDP checksum of an untagged IPv4/IPv6 UDP frame; `false` if it is not one.
/// IPv4 and IPv6 RoCEv2 receivers accept a zero checksum, and the ICRC masks the field.
pub(crate) fn zero_udp_checksum(f: &mut [u8]) -> bool {
    match udp_at(f).and_then(|u| f.get_mut(u + 6..u + 8)) {
        Some(c) => {
            c.fill(0);
            true
        }
        None => false,
    }
}

/// True when the UDP checksum of an untagged IPv4/IPv6 frame holds exactly the folded
/// pseudo-header sum: the value Linux writes when it leaves the checksum to offload
/// (`CHECKSUM_PARTIAL`: `uh->check = ~csum_tcpudp_magic(…, 0)`, or `~csum_ipv6_magic`), which a
/// frame crossing a local veth keeps. Used where no checksum status comes with the frame (XDP).
#[cfg(any(feature = "xdp", test))]
pub(crate) fn udp_checksum_unfinished(f: &[u8]) -> bool {
    let Some(u) = udp_at(f) else { return false };
    let (Some(len), Some(check)) = (f.get(u + 4..u + 6), f.get(u + 6..u + 8)) else {
        return false;
    };
    let check = u16::from_be_bytes([check[0], check[1]]);
    if check == 0 {
        return false;
    }
    let addrs = match f.get(12..14) {
        Some([0x08, 0x00]) => f.get(26..34),
        _ => f.get(22..54),
    };
    let Some(addrs) = addrs else { return false };
    let mut sum: u32 = addrs
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum();
    sum += 17 + u32::from(u16::from_be_bytes([len[0], len[1]]));
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    u32::from(check) == sum
}

/// The ECN bits of an untagged IPv4/IPv6 frame.
pub(crate) fn frame_ecn(f: &[u8]) -> Ecn {
    match f.get(12..14) {
        Some([0x08, 0x00]) => f.get(15).map_or(Ecn::NotEct, |t| Ecn::from_bits(*t)),
        Some([0x86, 0xdd]) => f.get(15).map_or(Ecn::NotEct, |b| Ecn::from_bits(b >> 4)),
        _ => Ecn::NotEct,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rocev2_core::wire::frame::FrameRepr;

    /// The subset of classic BPF the filters use, with the kernel's rule that a load past the
    /// end of the packet returns 0.
    fn run(prog: &[SockFilter], pkt: &[u8]) -> u32 {
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        loop {
            let i = prog[pc];
            let load = |at: usize, n: usize| -> Option<u32> {
                let b = pkt.get(at..at + n)?;
                Some(b.iter().fold(0u32, |v, &c| (v << 8) | u32::from(c)))
            };
            pc += 1;
            match i.code {
                0x28 => match load(i.k as usize, 2) {
                    Some(v) => a = v,
                    None => return 0,
                },
                0x30 => match load(i.k as usize, 1) {
                    Some(v) => a = v,
                    None => return 0,
                },
                0x48 => match load(x as usize + i.k as usize, 2) {
                    Some(v) => a = v,
                    None => return 0,
                },
                0xb1 => match load(i.k as usize, 1) {
                    Some(v) => x = (v & 0xf) * 4,
                    None => return 0,
                },
                0x15 => pc += usize::from(if a == i.k { i.jt } else { i.jf }),
                0x45 => pc += usize::from(if a & i.k != 0 { i.jt } else { i.jf }),
                0x06 => return i.k,
                c => panic!("opcode {c:#x} not in the interpreter"),
            }
        }
    }

    fn v4_udp(dport: u16, frag: u16, ihl: u8) -> Vec<u8> {
        let mut f = vec![0u8; 14 + usize::from(ihl) * 4 + 8 + 16];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x40 | ihl;
        f[20..22].copy_from_slice(&frag.to_be_bytes());
        f[23] = 17;
        let u = 14 + usize::from(ihl) * 4;
        f[u + 2..u + 4].copy_from_slice(&dport.to_be_bytes());
        f
    }

    fn v6_udp(dport: u16, next: u8) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 40 + 8 + 16];
        f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        f[14] = 0x60;
        f[20] = next;
        f[56..58].copy_from_slice(&dport.to_be_bytes());
        f
    }

    #[test]
    fn filter_accepts_roce_v4_and_v6() {
        for f in [
            v4_udp(4791, 0x4000, 5),
            v4_udp(4791, 0, 6),
            v6_udp(4791, 17),
        ] {
            assert!(is_roce(&f));
            assert_eq!(run(&ROCE_FILTER, &f), 0x40000);
        }
    }

    #[test]
    fn filter_rejects_other_ports_protocols_fragments() {
        let mut tcp = v4_udp(4791, 0, 5);
        tcp[23] = 6;
        let mut arp = v4_udp(4791, 0, 5);
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        let mut vlan = v4_udp(4791, 0, 5);
        vlan[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
        for f in [
            v4_udp(4790, 0, 5),
            v4_udp(4791, 0x2000, 5), // MF: first fragment
            v4_udp(4791, 0x0001, 5), // later fragment
            tcp,
            arp,
            vlan,
            v6_udp(4791, 6),
            v6_udp(53, 17),
            vec![0; 10],
        ] {
            assert!(!is_roce(&f), "{f:02x?}");
            assert_eq!(run(&ROCE_FILTER, &f), 0, "{f:02x?}");
        }
        assert_eq!(run(&DROP_ALL, &v4_udp(4791, 0, 5)), 0);
    }

    proptest! {
        /// The kernel program and the userspace check agree on arbitrary frames, including
        /// frames shaped like IPv4/IPv6 with random bytes elsewhere.
        #[test]
        fn filter_bpf_and_userspace_agree(
            mut f in proptest::collection::vec(any::<u8>(), 0..120),
            kind in 0u8..3,
            port in prop_oneof![Just(4791u16), any::<u16>()],
        ) {
            if f.len() >= 58 {
                match kind {
                    0 => {
                        f[12] = 0x08; f[13] = 0x00; f[23] = 17;
                        let ihl = usize::from(f[14] & 0xf) * 4;
                        if 14 + ihl + 4 <= f.len() {
                            f[14 + ihl + 2..14 + ihl + 4].copy_from_slice(&port.to_be_bytes());
                        }
                    }
                    1 => {
                        f[12] = 0x86; f[13] = 0xdd; f[20] = 17;
                        f[56..58].copy_from_slice(&port.to_be_bytes());
                    }
                    _ => {}
                }
            }
            prop_assert_eq!(run(&ROCE_FILTER, &f) != 0, is_roce(&f));
        }
    }

    #[test]
    fn filter_zero_udp_checksum_keeps_frame_valid() {
        let ip = crate::test_frames::v6(0, Ecn::Ce, 7);
        let mut f = crate::test_frames::ack(ip, 1000);
        assert_ne!(
            f[14 + 40 + 6..14 + 40 + 8],
            [0, 0],
            "IPv6 frames carry a checksum"
        );
        // A checksum "left for the NIC" is garbage to the core...
        f[14 + 40 + 6] ^= 0x55;
        assert_eq!(
            FrameRepr::parse(&f).err(),
            Some(rocev2_core::wire::Error::BadUdpChecksum)
        );
        // ...and zeroing it is what the datapath does with TP_STATUS_CSUMNOTREADY.
        assert!(zero_udp_checksum(&mut f));
        assert!(FrameRepr::parse(&f).is_ok());
        assert_eq!(frame_ecn(&f), Ecn::Ce);
        assert!(!zero_udp_checksum(&mut [0u8; 20]));
    }

    #[test]
    fn filter_dest_qpn_after_ipv4_or_ipv6() {
        let v4 = crate::test_frames::v4(0, Ecn::NotEct);
        let v6 = crate::test_frames::v6(0, Ecn::NotEct, 0);
        for ip in [v4, v6] {
            let f = crate::test_frames::ack(ip, 1000);
            assert_eq!(dest_qpn(&f), Some(0x11), "{ip:?}");
            let bth = udp_at(&f).unwrap() + 8;
            assert_eq!(dest_qpn(&f[..bth + 7]), None, "one byte short");
        }
        assert_eq!(dest_qpn(&[0u8; 10]), None);
    }

    #[test]
    fn filter_ud_send_payload_after_bth_and_deth() {
        let v4 = crate::test_frames::v4(0, Ecn::NotEct);
        let v6 = crate::test_frames::v6(0, Ecn::NotEct, 0);
        let mad: Vec<u8> = (0..=255).collect();
        for ip in [v4, v6] {
            let f = crate::test_frames::mad(ip, &mad);
            assert_eq!(dest_qpn(&f), Some(1));
            let p = ud_send_payload(&f).unwrap();
            assert_eq!(
                (&p[..256], p.len()),
                (&mad[..], 256 + 4),
                "{ip:?}: MAD, ICRC"
            );
            assert_eq!(
                ud_send_payload(&crate::test_frames::ack(ip, 1000)),
                None,
                "RC"
            );
            let bth = udp_at(&f).unwrap() + 8;
            assert_eq!(ud_send_payload(&f[..bth]), None);
        }
    }

    #[test]
    fn filter_frame_ecn_v4() {
        let ip = crate::test_frames::v4(26, Ecn::Ect0);
        let f = crate::test_frames::ack(ip, 1000);
        assert_eq!(frame_ecn(&f), Ecn::Ect0);
        assert_eq!(frame_ecn(&[]), Ecn::NotEct);
    }

    #[test]
    fn filter_unfinished_checksum_recognised_by_value() {
        use rocev2_core::wire::frame::IpRepr;
        for ip in [
            crate::test_frames::v4(0, Ecn::NotEct),
            crate::test_frames::v6(0, Ecn::NotEct, 0),
        ] {
            let mut f = crate::test_frames::ack(ip, 0xc001);
            let u = udp_at(&f).unwrap();
            let len = u16::from_be_bytes([f[u + 4], f[u + 5]]);
            // What Linux leaves for offload, computed independently: the folded one's-complement
            // sum of the pseudo-header (addresses, protocol 17, UDP length).
            let (a, b) = match ip {
                IpRepr::V4 { .. } => (26, 34),
                IpRepr::V6 { .. } => (22, 54),
            };
            let mut sum: u32 = f[a..b]
                .chunks(2)
                .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
                .sum::<u32>()
                + 17
                + u32::from(len);
            sum = (sum & 0xffff) + (sum >> 16);
            sum = (sum & 0xffff) + (sum >> 16);
            f[u + 6..u + 8].copy_from_slice(&(sum as u16).to_be_bytes());
            assert!(udp_checksum_unfinished(&f), "{ip:?}");
            f[u + 7] ^= 1;
            assert!(
                !udp_checksum_unfinished(&f),
                "another value is a real checksum"
            );
            f[u + 6..u + 8].fill(0);
            assert!(!udp_checksum_unfinished(&f), "zero means no checksum");
        }
        assert!(!udp_checksum_unfinished(&[0u8; 20]));
    }
}
