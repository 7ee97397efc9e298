//! In-place IP arithmetic on whole Ethernet frames, as a router or switch does it: the IPv4
//! header checksum, where the IP header starts, and the ECN field read and marked.
//!
//! Source: RFC 1071 (ones' complement sum), RFC 791 §3.1 (header checksum), RFC 3168 §5 (ECN
//! field in the IPv4 TOS byte and the IPv6 traffic class), IEEE 802.1Q (one optional tag).
//! These work on raw bytes rather than through [`super::frame`]'s checked parse because their
//! callers (the seeded test link, the network model's switches, the UDP datapath) edit frames
//! that are on their way, not frames being received: a frame they cannot read is left alone.
//!
//! Deviations: none.

use super::frame::Ecn;

/// The RFC 1071 checksum of an IPv4 header as it stands: the complement of the ones'
/// complement sum of its 16-bit words (an odd trailing byte is padded with zero).
///
/// With the checksum field zeroed this is the value to store; over a header whose stored
/// checksum is right it is 0.
#[inline]
pub fn ipv4_header_checksum(header: &[u8]) -> u16 {
    // RFC 1071 §2 (C): the sum may be taken over 32-bit words and folded back to 16 bits, which
    // halves the additions on every received frame's path. A header is at most 60 bytes, so the
    // 64-bit sum cannot overflow. A short tail (an odd byte included) is padded with zeros on
    // the right, as RFC 1071 pads an odd byte.
    let words = header.chunks_exact(4);
    let rest = words.remainder();
    let mut tail = [0u8; 4];
    tail[..rest.len()].copy_from_slice(rest);
    let mut sum: u64 = u64::from(u32::from_be_bytes(tail))
        + words
            .map(|w| u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]])))
            .sum::<u64>();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Where the IP header starts in an Ethernet frame (after one optional 802.1Q tag), and the IP
/// version (4 or 6); `None` for anything else or a frame too short to say.
pub fn ip_header(frame: &[u8]) -> Option<(usize, u8)> {
    let mut at = 12;
    if frame.get(at..at + 2)? == [0x81, 0x00] {
        at += 4;
    }
    let ethertype = frame.get(at..at + 2)?;
    let ip = at + 2;
    match ethertype {
        [0x08, 0x00] => Some((ip, 4)),
        [0x86, 0xdd] => Some((ip, 6)),
        _ => None,
    }
}

/// The ECN field of an IP frame.
pub fn ecn(frame: &[u8]) -> Option<Ecn> {
    let (ip, v) = ip_header(frame)?;
    let bits = match v {
        4 => frame.get(ip + 1)? & 3,
        _ => (frame.get(ip + 1)? >> 4) & 3,
    };
    Some(Ecn::from_bits(bits))
}

/// Marks an IP frame Congestion Experienced and, for IPv4, rewrites the header checksum (in
/// full: RFC 1624's incremental update saves nothing on ten words). The ICRC masks the TOS and
/// traffic-class bytes (RoCEv2 Annex A17.8), so it stays valid. Returns false, leaving the frame
/// as it was, when it has no complete IP header.
pub fn mark_ce(frame: &mut [u8]) -> bool {
    let Some((ip, v)) = ip_header(frame) else {
        return false;
    };
    if v == 6 {
        return match frame.get_mut(ip + 1) {
            Some(b) => {
                *b |= 0x30;
                true
            }
            None => false,
        };
    }
    let ihl = frame.get(ip).map_or(0, |b| usize::from(b & 0x0f) * 4);
    let Some(hdr) = frame.get_mut(ip..ip + ihl).filter(|h| h.len() >= 20) else {
        return false;
    };
    hdr[1] |= 3;
    hdr[10..12].fill(0);
    let sum = ipv4_header_checksum(hdr);
    hdr[10..12].copy_from_slice(&sum.to_be_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    /// RFC 1071 §3's worked example sums 00 01 f2 03 f4 f5 f6 f7 to 0xddf2; the checksum is its
    /// complement.
    #[test]
    fn ipv4_header_checksum_rfc1071_example() {
        assert_eq!(
            ipv4_header_checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            !0xddf2
        );
    }

    proptest::proptest! {
        /// The 32-bit-word sum agrees with RFC 1071's 16-bit-word sum for every length.
        #[test]
        fn ipv4_header_checksum_matches_16_bit_sum(h in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let mut sum: u32 = h
                .chunks(2)
                .map(|w| u32::from(w[0]) << 8 | u32::from(*w.get(1).unwrap_or(&0)))
                .sum();
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            proptest::prop_assert_eq!(ipv4_header_checksum(&h), !(sum as u16));
        }
    }

    /// rc_pingpong.pcap frame 50's IPv4 header, whose stored checksum is 0x458f.
    #[test]
    fn ipv4_header_checksum_matches_rxe_capture() {
        let mut h = [
            0x45, 0x00, 0x00, 0x30, 0xd9, 0xc7, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x4d, 0x0b, 0xc0, 0xa8, 0x4d, 0x0a,
        ];
        assert_eq!(ipv4_header_checksum(&h), 0x458f);
        h[10..12].copy_from_slice(&0x458fu16.to_be_bytes());
        assert_eq!(ipv4_header_checksum(&h), 0);
    }

    /// A 20-byte IPv4 header (ECT(0), 10.0.0.1 → 10.0.0.2, UDP) with its checksum stored.
    fn frame_v4(vlan: bool) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let mut ip = [
            0x45, 0x02, 0x00, 0x3c, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0, 0, 10, 0, 0, 1, 10, 0,
            0, 2,
        ];
        let c = ipv4_header_checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
        f
    }

    #[test]
    fn ipv4_header_checksum_of_valid_header_is_zero() {
        let f = frame_v4(false);
        assert_eq!(ipv4_header_checksum(&f[14..34]), 0);
        // By hand: 4502 + 003c + 4000 + 4011 + 0a00 + 0001 + 0a00 + 0002 = d952, complement 26ad.
        assert_eq!(u16::from_be_bytes([f[24], f[25]]), 0x26ad);
    }

    #[test]
    fn mark_ce_ipv4_keeps_checksum_valid() {
        for vlan in [false, true] {
            let mut f = frame_v4(vlan);
            let ip = if vlan { 18 } else { 14 };
            assert_eq!(ecn(&f), Some(Ecn::Ect0));
            assert!(mark_ce(&mut f));
            assert_eq!(ecn(&f), Some(Ecn::Ce));
            assert_eq!(ipv4_header_checksum(&f[ip..ip + 20]), 0);
        }
    }

    #[test]
    fn mark_ce_ipv6_sets_traffic_class_bits() {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x86, 0xdd, 0x60, 0x20, 0, 0]); // traffic class 0x02: ECT(0)
        assert_eq!(ecn(&f), Some(Ecn::Ect0));
        assert!(mark_ce(&mut f));
        assert_eq!(f[15], 0x30 | 0x20);
        assert_eq!(ecn(&f), Some(Ecn::Ce));
    }

    #[test]
    fn mark_ce_leaves_short_or_foreign_frames_alone() {
        let mut arp = vec![0u8; 12];
        arp.extend_from_slice(&[0x08, 0x06, 0, 1]);
        let before = arp.clone();
        assert!(!mark_ce(&mut arp));
        assert_eq!(arp, before);
        let mut cut = frame_v4(false);
        cut.truncate(30);
        assert!(!mark_ce(&mut cut));
        assert_eq!(ecn(&[0u8; 5]), None);
    }
}
