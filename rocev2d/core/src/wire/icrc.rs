//! Invariant CRC: the end-to-end CRC-32 that covers every RoCEv2 field a router cannot change.
//!
//! Source: RoCEv2 Annex A17.8 (ICRC for RoCEv2) and Linux `drivers/infiniband/sw/rxe/rxe_icrc.c`,
//! checked byte for byte against `../shared/captures/*.pcap`. The CRC is the ordinary CRC-32
//! (polynomial 0x04C11DB7 reflected, as zlib computes it) over:
//!
//! 1. eight bytes of `0xFF` standing in for the InfiniBand LRH that RoCEv2 has no use for;
//! 2. the IP header with its variant fields set to all ones: IPv4 TOS (DSCP+ECN), TTL and
//!    header checksum; IPv6 traffic class, flow label and hop limit;
//! 3. the UDP header with its checksum set to all ones;
//! 4. the BTH with byte 4 (FECN, BECN, Resv6a) set to all ones;
//! 5. the rest of the packet up to the ICRC, pad bytes included.
//!
//! The result is stored in the last four bytes in little-endian order. The IPv4 Identification
//! is *not* masked, so it is covered: whoever writes the IP header must know the ID before the
//! ICRC is computed (`docs/wire.md` explains what that means for each datapath).
//!
//! One masking rule (`head_mask`: an OR mask, since every variant field becomes all ones),
//! two ways to run the CRC over a head it masks. [`compute`]/[`verify`] gather the IP, UDP and
//! BTH headers from separate slices (a UDP datagram's headers, rebuilt from what the socket
//! reported); [`compute_frame`]/[`verify_frame`] read a whole frame's bytes where they lie, the
//! form both the frame builder and the receive path use: the masked head is copied out in
//! 16-byte words (one load, one OR, one store each) and the CRC runs over that copy, then on over
//! the rest of the frame in place, so the payload is read once and the frame is never written.
//!
//! Why words: `crc32fast` reads its input 16 bytes at a time. A head masked byte by byte (in a
//! copy or in the frame) makes its first loads wait for several narrow stores, which the CPU
//! cannot forward into one wide load; that stall, not the second CRC call, made verifying a
//! 4 KiB frame cost ~20 ns more than a plain CRC over it (BENCHMARKS.md, "Receive verify in one
//! pass"). A whole-word store is forwarded to the equally wide load that reads it back.
//!
//! Deviations: none.

use super::{Error, Header};

/// The LRH stand-in: eight bytes of 0xFF before the IP header.
const LRH_LEN: usize = 8;
const BTH_LEN: usize = 12;
const UDP_LEN: usize = 8;
/// IPv4 with the largest IHL (60) or IPv6 (40), whichever is larger.
const MAX_IP_LEN: usize = 60;
/// The longest masked head: LRH stand-in, IP, UDP and BTH.
const MAX_HEAD_LEN: usize = LRH_LEN + MAX_IP_LEN + UDP_LEN + BTH_LEN;
/// The CRC's load width, the unit the frame path masks and copies in.
const WORD: usize = 16;
/// A head's mask and its copy, in whole words.
const MASK_LEN: usize = MAX_HEAD_LEN.div_ceil(WORD) * WORD;

/// The Annex A17.8 masks as an OR mask over a head laid out as the CRC reads it: eight bytes
/// for the LRH, the IP header of `ip_len` bytes (IPv6 when `v6`), the UDP header, then the BTH.
/// This is the one place that knows which fields are variant: IPv4 TOS (DSCP+ECN), TTL and
/// header checksum; IPv6 traffic class, flow label and hop limit; the UDP checksum; BTH byte 4
/// (FECN, BECN, Resv6a). Bytes past the head are not masked.
const fn build_mask(ip_len: usize, v6: bool) -> [u8; MASK_LEN] {
    let mut m = [0u8; MASK_LEN];
    let mut i = 0;
    while i < LRH_LEN {
        m[i] = 0xff;
        i += 1;
    }
    let ip = LRH_LEN;
    if v6 {
        m[ip] = 0x0f; // traffic class (high nibble) ...
        m[ip + 1] = 0xff; // ... traffic class (low nibble) and flow label
        m[ip + 2] = 0xff;
        m[ip + 3] = 0xff;
        m[ip + 7] = 0xff; // hop limit
    } else {
        m[ip + 1] = 0xff; // TOS
        m[ip + 8] = 0xff; // TTL
        m[ip + 10] = 0xff; // header checksum
        m[ip + 11] = 0xff;
    }
    let udp = ip + ip_len;
    m[udp + 6] = 0xff; // UDP checksum
    m[udp + 7] = 0xff;
    m[udp + UDP_LEN + 4] = 0xff; // BTH byte 4
    m
}

/// Every head the ICRC is defined for: IPv4 of each IHL (20, 24, … 60 bytes), then IPv6.
static MASKS: [[u8; MASK_LEN]; 12] = {
    let mut t = [[0u8; MASK_LEN]; 12];
    let mut k = 0;
    while k < 11 {
        t[k] = build_mask(20 + 4 * k, false);
        k += 1;
    }
    t[11] = build_mask(40, true);
    t
};

/// The mask for a head whose IP header, of `ip_len` bytes, starts with `ip_first` (version and
/// IHL or traffic class), or the error for an IP header the ICRC is not defined for.
fn head_mask(ip_first: u8, ip_len: usize) -> Result<&'static [u8; MASK_LEN], Error> {
    match ip_first >> 4 {
        4 if (20..=MAX_IP_LEN).contains(&ip_len) && ip_len.is_multiple_of(4) => {
            Ok(&MASKS[(ip_len - 20) / 4])
        }
        6 if ip_len == 40 => Ok(&MASKS[11]),
        6 => Err(Error::Malformed(Header::Ipv6)),
        _ => Err(Error::Malformed(Header::Ipv4)),
    }
}

/// Computes the ICRC from its three parts: the IP header (IPv4 of any IHL, or the 40-byte IPv6
/// header), the UDP header, and the UDP payload from the BTH up to (excluding) the ICRC.
///
/// This is the form for headers that are not in front of the transport packet (a UDP
/// datagram's, rebuilt by [`super::DatagramMeta::verify_icrc`]): the masked head (at most 88
/// bytes) is gathered into a buffer and the CRC runs over it, then on over the rest of the
/// transport packet in place.
pub fn compute(ip_header: &[u8], udp_header: &[u8], transport: &[u8]) -> Result<u32, Error> {
    if transport.len() < BTH_LEN {
        return Err(Error::Truncated(Header::Bth));
    }
    if udp_header.len() < UDP_LEN {
        return Err(Error::Truncated(Header::Udp));
    }
    let ip_len = ip_header.len();
    let mask = head_mask(ip_header.first().copied().unwrap_or(0), ip_len)?;
    let udp_at = LRH_LEN + ip_len;
    let bth_at = udp_at + UDP_LEN;
    let head_len = bth_at + BTH_LEN;
    let mut head = [0u8; MASK_LEN];
    head[LRH_LEN..udp_at].copy_from_slice(ip_header);
    head[udp_at..bth_at].copy_from_slice(&udp_header[..UDP_LEN]);
    head[bth_at..head_len].copy_from_slice(&transport[..BTH_LEN]);
    for (b, m) in head.iter_mut().zip(mask) {
        *b |= m;
    }
    let mut h = crc32fast::Hasher::new();
    h.update(&head[..head_len]);
    h.update(&transport[BTH_LEN..]);
    Ok(h.finalize())
}

/// Computes the ICRC of a frame's bytes where they lie, in one pass over the payload.
///
/// `bytes` runs from eight bytes before the IP header (the end of the Ethernet or 802.1Q
/// header, which stands in for the LRH) up to, excluding, the ICRC; the IP header is `ip_len`
/// long. The frame builder calls this right after it copied the payload, while the payload is
/// in the cache; the receive path through [`verify_frame`].
pub fn compute_frame(bytes: &[u8], ip_len: usize) -> Result<u32, Error> {
    let head_len = LRH_LEN + ip_len + UDP_LEN + BTH_LEN;
    if ip_len > MAX_IP_LEN || bytes.len() < head_len {
        return Err(Error::BadRepr);
    }
    let mask = head_mask(bytes[LRH_LEN], ip_len)?;
    let words = head_len.div_ceil(WORD);
    let mut head = [0u8; MASK_LEN];
    let copied = bytes.len().min(words * WORD);
    if copied == words * WORD {
        // One wide load, OR and store per word: see the module docs for why not bytes.
        for w in 0..words {
            let at = w * WORD..(w + 1) * WORD;
            let word = u128::from_le_bytes(bytes[at.clone()].try_into().unwrap_or_default())
                | u128::from_le_bytes(mask[at.clone()].try_into().unwrap_or_default());
            head[at].copy_from_slice(&word.to_le_bytes());
        }
    } else {
        // A frame that ends inside the head's last word (an IPv6 ACK): bytes, as `compute`.
        for ((h, b), m) in head.iter_mut().zip(bytes).zip(mask) {
            *h = b | m;
        }
    }
    let mut h = crc32fast::Hasher::new();
    h.update(&head[..copied]);
    h.update(&bytes[copied..]);
    Ok(h.finalize())
}

/// Checks the ICRC stored in the last four bytes of `bytes`, which runs from eight bytes before
/// the IP header (of `ip_len` bytes) to the end of the ICRC; see [`compute_frame`].
pub fn verify_frame(bytes: &[u8], ip_len: usize) -> Result<(), Error> {
    let n = bytes.len();
    if n < LRH_LEN + ip_len + UDP_LEN + BTH_LEN + 4 {
        return Err(Error::Truncated(Header::Icrc));
    }
    let (covered, stored) = bytes.split_at(n - 4);
    check(compute_frame(covered, ip_len)?, stored)
}

/// Checks the ICRC stored in the last four bytes of `transport_with_icrc`.
pub fn verify(
    ip_header: &[u8],
    udp_header: &[u8],
    transport_with_icrc: &[u8],
) -> Result<(), Error> {
    let n = transport_with_icrc.len();
    if n < BTH_LEN + 4 {
        return Err(Error::Truncated(Header::Icrc));
    }
    let (body, stored) = transport_with_icrc.split_at(n - 4);
    check(compute(ip_header, udp_header, body)?, stored)
}

fn check(want: u32, stored: &[u8]) -> Result<(), Error> {
    if stored == want.to_le_bytes() {
        Ok(())
    } else {
        Err(Error::BadIcrc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// rc_pingpong.pcap frame 50 (the last ACK, 192.168.77.11 -> .10, MSN 5), from the IP
    /// header on; the last four bytes are rxe's ICRC.
    const ACK: [u8; 48] = [
        0x45, 0x00, 0x00, 0x30, 0xd9, 0xc7, 0x40, 0x00, 0x40, 0x11, 0x45, 0x8f, 0xc0, 0xa8, 0x4d,
        0x0b, 0xc0, 0xa8, 0x4d, 0x0a, 0xc1, 0x21, 0x12, 0xb7, 0x00, 0x1c, 0x00, 0x00, 0x11, 0x00,
        0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x00, 0x7d, 0x2a, 0xb1, 0x1f, 0x00, 0x00, 0x05, 0xf7,
        0xd2, 0x3f, 0x9b,
    ];

    #[test]
    fn icrc_matches_rxe_on_captured_ack() {
        assert_eq!(
            compute(&ACK[..20], &ACK[20..28], &ACK[28..44]),
            Ok(0x9b3f_d2f7)
        );
        assert_eq!(verify(&ACK[..20], &ACK[20..28], &ACK[28..]), Ok(()));
        let mut bad = ACK;
        bad[43] ^= 1; // MSN 5 -> 4
        assert_eq!(
            verify(&bad[..20], &bad[20..28], &bad[28..]),
            Err(Error::BadIcrc)
        );
    }

    #[test]
    fn icrc_masks_variant_fields_only() {
        let ip = &ACK[..20];
        let udp = &ACK[20..28];
        let body = &ACK[28..44];
        let base = compute(ip, udp, body).unwrap();
        // Changing TOS, TTL, IP checksum, UDP checksum or FECN/BECN leaves the ICRC alone.
        for (i, v) in [(1usize, 0x02u8), (8, 3), (10, 0), (11, 0)] {
            let mut ip2 = [0u8; 20];
            ip2.copy_from_slice(ip);
            ip2[i] = v;
            assert_eq!(
                compute(&ip2, udp, body).unwrap(),
                base,
                "IPv4 byte {i} must be masked"
            );
        }
        let mut udp2 = [0u8; 8];
        udp2.copy_from_slice(udp);
        udp2[6] = 0x12;
        assert_eq!(compute(ip, &udp2, body).unwrap(), base);
        let mut body2 = [0u8; 16];
        body2.copy_from_slice(body);
        body2[4] = 0xc0;
        assert_eq!(compute(ip, udp, &body2).unwrap(), base);
        // The Identification is covered.
        let mut ip3 = [0u8; 20];
        ip3.copy_from_slice(ip);
        ip3[5] ^= 1;
        assert_ne!(compute(&ip3, udp, body).unwrap(), base);
    }

    /// The captured ACK behind eight bytes standing where a frame's Ethernet header ends.
    fn ack_in_frame() -> [u8; 56] {
        let mut f = [0u8; 56];
        f[..8].copy_from_slice(&[0x52, 0x54, 0x00, 0x77, 0x00, 0x0b, 0x08, 0x00]);
        f[8..].copy_from_slice(&ACK);
        f
    }

    #[test]
    fn icrc_on_frame_matches_rxe() {
        let mut f = ack_in_frame();
        assert_eq!(compute_frame(&f[..52], 20), Ok(0x9b3f_d2f7));
        assert_eq!(verify_frame(&f, 20), Ok(()));
        // Variant fields do not change it; a covered one does.
        f[8 + 1] = 0x03; // TOS
        f[8 + 8] = 1; // TTL
        f[8 + 28 + 4] = 0xc0; // FECN, BECN
        f[0] = 0; // the MAC bytes standing in for the LRH
        assert_eq!(verify_frame(&f, 20), Ok(()));
        f[8 + 28 + 11] ^= 1; // PSN
        assert_eq!(verify_frame(&f, 20), Err(Error::BadIcrc));
    }

    /// Bytes that are not all alike, so a misplaced mask or a skipped byte changes the CRC.
    fn varied(len: usize, seed: u8) -> alloc::vec::Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(151).wrapping_add(seed) ^ (i >> 8) as u8)
            .collect()
    }

    #[test]
    fn frame_and_gathered_agree() {
        // IPv4 without and with options, IPv6; payloads from none (the head's last word runs
        // past the frame for IPv6) to 4 KiB, around crc32fast's kernel switches.
        for (first, ip_len) in [(0x45u8, 20usize), (0x46, 24), (0x4f, 60), (0x6a, 40)] {
            for payload in [0usize, 4, 8, 12, 116, 1024, 2036, 2048, 4096] {
                let mut f = varied(8 + ip_len + 8 + 12 + payload, first);
                f[8] = first;
                let (ip, rest) = f[8..].split_at(ip_len);
                let want = compute(ip, &rest[..8], &rest[8..]).unwrap();
                assert_eq!(
                    compute_frame(&f, ip_len),
                    Ok(want),
                    "ip {ip_len} payload {payload}"
                );
                f.extend_from_slice(&want.to_le_bytes());
                assert_eq!(verify_frame(&f, ip_len), Ok(()));
            }
        }
    }

    /// The ICRC the straightforward way, as Annex A17.8 words it: a copy of the covered bytes
    /// (from eight bytes before the IP header, of `ip_len` bytes) with the LRH stand-in and the
    /// variant fields set to ones, hashed in one call.
    fn masked_copy(bytes: &[u8], ip_len: usize) -> u32 {
        let mut m = bytes.to_vec();
        m[..8].fill(0xff);
        let ip = 8;
        if m[ip] >> 4 == 6 {
            m[ip] |= 0x0f; // traffic class, high nibble
            m[ip + 1..ip + 4].fill(0xff); // the rest of it and the flow label
            m[ip + 7] = 0xff; // hop limit
        } else {
            m[ip + 1] = 0xff; // TOS
            m[ip + 8] = 0xff; // TTL
            m[ip + 10..ip + 12].fill(0xff); // header checksum
        }
        let udp = ip + ip_len;
        m[udp + 6..udp + 8].fill(0xff); // UDP checksum
        m[udp + 8 + 4] = 0xff; // BTH byte 4
        crc32fast::hash(&m)
    }

    proptest::proptest! {
        /// Both forms equal masking a copy of the covered bytes, for every IP header the ICRC is
        /// defined for and payloads from none to jumbo frames, on random bytes.
        #[test]
        fn icrc_equals_masked_copy(
            ihl in 5usize..16,
            v6 in proptest::bool::ANY,
            payload in proptest::prop_oneof![0usize..64, 64usize..9000],
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 9100 + 80),
        ) {
            let ip_len = if v6 { 40 } else { 4 * ihl };
            let len = 8 + ip_len + 8 + 12 + payload;
            let mut f = bytes[..len].to_vec();
            f[8] = if v6 { 0x60 | (f[8] & 0x0f) } else { 0x40 | ihl as u8 };
            let want = masked_copy(&f, ip_len);
            proptest::prop_assert_eq!(compute_frame(&f, ip_len), Ok(want));
            let (ip_h, rest) = f[8..].split_at(ip_len);
            proptest::prop_assert_eq!(compute(ip_h, &rest[..8], &rest[8..]), Ok(want));
        }
    }

    #[test]
    fn icrc_on_frame_rejects() {
        let mut f = ack_in_frame();
        f[8] = 0x55;
        assert_eq!(
            compute_frame(&f[..52], 20),
            Err(Error::Malformed(Header::Ipv4))
        );
        f[8] = 0x65;
        assert_eq!(
            compute_frame(&f[..52], 20),
            Err(Error::Malformed(Header::Ipv6))
        );
        f = ack_in_frame();
        assert_eq!(compute_frame(&f[..47], 20), Err(Error::BadRepr));
        assert_eq!(compute_frame(&f, 64), Err(Error::BadRepr));
        assert_eq!(compute_frame(&f, 22), Err(Error::Malformed(Header::Ipv4)));
        assert_eq!(
            verify_frame(&f[..51], 20),
            Err(Error::Truncated(Header::Icrc))
        );
    }

    #[test]
    fn icrc_rejects_short_or_non_ip() {
        assert_eq!(
            compute(&ACK[..20], &ACK[20..28], &ACK[28..39]),
            Err(Error::Truncated(Header::Bth))
        );
        assert_eq!(
            compute(&[0x55; 20], &ACK[20..28], &ACK[28..44]),
            Err(Error::Malformed(Header::Ipv4))
        );
        assert_eq!(
            compute(&[0x60; 20], &ACK[20..28], &ACK[28..44]),
            Err(Error::Malformed(Header::Ipv6))
        );
        assert_eq!(
            verify(&ACK[..20], &ACK[20..28], &ACK[28..40]),
            Err(Error::Truncated(Header::Icrc))
        );
    }
}
