//! Which frames an AF_PACKET socket hands to rocev2: untagged IPv4 or IPv6 UDP to port 4791,
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
}
