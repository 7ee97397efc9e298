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
//! One masking rule (`mask_head`), two ways to run the CRC over it: [`compute`]/[`verify`]
//! gather the masked head (at most 88 bytes) beside bytes they may not change (a received frame,
//! a UDP datagram's headers); [`compute_in_place`] masks a frame being built where it lies and
//! runs one CRC pass over it, which is how `FrameRepr::emit_with` computes the ICRC right after
//! it copied the payload.
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

/// Applies the Annex A17.8 masks to a head laid out as the CRC reads it: `head[..8]` for the
/// LRH, the IP header of `ip_len` bytes, the UDP header, then the BTH. This is the one place
/// that knows which fields are variant; both ways of computing the ICRC go through it. Nothing
/// is written unless the IP header is one the ICRC is defined for. `head` is exactly
/// `8 + ip_len + 8 + 12` bytes long (both callers check).
fn mask_head(head: &mut [u8], ip_len: usize) -> Result<(), Error> {
    let version = head.get(LRH_LEN).filter(|_| ip_len > 0).map(|b| b >> 4);
    let (lrh, rest) = head.split_at_mut(LRH_LEN);
    let (ip, rest) = rest.split_at_mut(ip_len);
    match version {
        Some(4) if (20..=MAX_IP_LEN).contains(&ip_len) => {
            ip[1] = 0xff; // TOS
            ip[8] = 0xff; // TTL
            ip[10] = 0xff; // header checksum
            ip[11] = 0xff;
        }
        Some(6) if ip_len == 40 => {
            ip[0] |= 0x0f; // traffic class (high nibble) ...
            ip[1] = 0xff; // ... traffic class (low nibble) and flow label
            ip[2] = 0xff;
            ip[3] = 0xff;
            ip[7] = 0xff; // hop limit
        }
        Some(6) => return Err(Error::Malformed(Header::Ipv6)),
        _ => return Err(Error::Malformed(Header::Ipv4)),
    }
    lrh.fill(0xff);
    rest[6] = 0xff; // UDP checksum
    rest[7] = 0xff;
    rest[UDP_LEN + 4] = 0xff; // BTH byte 4: FECN, BECN, Resv6a
    Ok(())
}

/// Computes the ICRC from its three parts: the IP header (IPv4 of any IHL, or the 40-byte IPv6
/// header), the UDP header, and the UDP payload from the BTH up to (excluding) the ICRC.
///
/// This is the receive side's form, for bytes it may not change: the masked head (at most 88
/// bytes) is gathered into a buffer and the CRC runs over it, then on over the rest of the
/// transport packet in place. Packets whose IP header was never seen (UDP sockets) go through
/// [`super::DatagramMeta::verify_icrc`], which builds the headers and calls this.
pub fn compute(ip_header: &[u8], udp_header: &[u8], transport: &[u8]) -> Result<u32, Error> {
    if transport.len() < BTH_LEN {
        return Err(Error::Truncated(Header::Bth));
    }
    if udp_header.len() < UDP_LEN {
        return Err(Error::Truncated(Header::Udp));
    }
    let ip_len = ip_header.len();
    if ip_len > MAX_IP_LEN {
        return Err(Error::Malformed(match ip_header[0] >> 4 {
            6 => Header::Ipv6,
            _ => Header::Ipv4,
        }));
    }
    let udp_at = LRH_LEN + ip_len;
    let bth_at = udp_at + UDP_LEN;
    let head_len = bth_at + BTH_LEN;
    let mut head = [0u8; MAX_HEAD_LEN];
    head[LRH_LEN..udp_at].copy_from_slice(ip_header);
    head[udp_at..bth_at].copy_from_slice(&udp_header[..UDP_LEN]);
    head[bth_at..head_len].copy_from_slice(&transport[..BTH_LEN]);
    mask_head(&mut head[..head_len], ip_len)?;
    let mut h = crc32fast::Hasher::new();
    h.update(&head[..head_len]);
    h.update(&transport[BTH_LEN..]);
    Ok(h.finalize())
}

/// Computes the ICRC of a packet being built in one CRC pass over its bytes, where they lie.
///
/// `bytes` runs from eight bytes before the IP header (the end of the Ethernet or 802.1Q
/// header, which stands in for the LRH) up to, excluding, the ICRC; the IP header is `ip_len`
/// long. The head's variant fields are masked in place, the CRC runs once over the whole
/// range, and the head is put back as it was: no second pass over a separate copy of the
/// headers, and the payload is read once, right after the frame builder wrote it, while it is
/// still in the cache (a frame of at most 4096 bytes of payload fits in L1 whole).
pub fn compute_in_place(bytes: &mut [u8], ip_len: usize) -> Result<u32, Error> {
    let head_len = LRH_LEN + ip_len + UDP_LEN + BTH_LEN;
    if ip_len > MAX_IP_LEN || bytes.len() < head_len {
        return Err(Error::BadRepr);
    }
    let mut saved = [0u8; MAX_HEAD_LEN];
    saved[..head_len].copy_from_slice(&bytes[..head_len]);
    mask_head(&mut bytes[..head_len], ip_len)?;
    let crc = crc32fast::hash(bytes);
    bytes[..head_len].copy_from_slice(&saved[..head_len]);
    Ok(crc)
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
    let want = compute(ip_header, udp_header, body)?;
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
    fn icrc_in_place_matches_rxe_and_restores_head() {
        let mut f = ack_in_frame();
        let before = f;
        assert_eq!(compute_in_place(&mut f[..52], 20), Ok(0x9b3f_d2f7));
        assert_eq!(f, before, "the masked head must be put back");
        // Variant fields do not change it; a covered one does.
        f[8 + 1] = 0x03; // TOS
        f[8 + 28 + 4] = 0xc0; // FECN, BECN
        f[0] = 0; // the MAC bytes standing in for the LRH
        assert_eq!(compute_in_place(&mut f[..52], 20), Ok(0x9b3f_d2f7));
        f[8 + 28 + 11] ^= 1; // PSN
        assert_ne!(compute_in_place(&mut f[..52], 20), Ok(0x9b3f_d2f7));
    }

    #[test]
    fn icrc_in_place_agrees_with_gathered_ipv6() {
        // An IPv6 head (version 6, traffic class and flow label set) with a 4-byte payload.
        let mut f = [0u8; 8 + 40 + 8 + 12 + 4];
        for (i, b) in f.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(37).wrapping_add(11);
        }
        f[8] = 0x6a;
        let want = compute(&f[8..48], &f[48..56], &f[56..]).unwrap();
        let before = f;
        assert_eq!(compute_in_place(&mut f, 40), Ok(want));
        assert_eq!(f, before);
    }

    #[test]
    fn icrc_in_place_rejects_without_writing() {
        let mut f = ack_in_frame();
        let before = f;
        f[8] = 0x55;
        let bad = f;
        assert_eq!(
            compute_in_place(&mut f[..52], 20),
            Err(Error::Malformed(Header::Ipv4))
        );
        assert_eq!(f, bad);
        f = before;
        assert_eq!(compute_in_place(&mut f[..47], 20), Err(Error::BadRepr));
        assert_eq!(compute_in_place(&mut f, 64), Err(Error::BadRepr));
        assert_eq!(f, before);
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
