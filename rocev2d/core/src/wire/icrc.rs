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
//! Deviations: none.

use super::{Error, Header};

const BTH_LEN: usize = 12;
const UDP_LEN: usize = 8;
/// IPv4 with the largest IHL (60) or IPv6 (40), whichever is larger.
const MAX_IP_LEN: usize = 60;

/// Computes the ICRC from its three parts: the IP header (IPv4 of any IHL, or the 40-byte IPv6
/// header), the UDP header, and the UDP payload from the BTH up to (excluding) the ICRC.
///
/// Packets whose IP header was never seen (UDP sockets) go through
/// [`super::DatagramMeta::verify_icrc`], which builds the headers and calls this.
pub fn compute(ip_header: &[u8], udp_header: &[u8], transport: &[u8]) -> Result<u32, Error> {
    if transport.len() < BTH_LEN {
        return Err(Error::Truncated(Header::Bth));
    }
    if udp_header.len() < UDP_LEN {
        return Err(Error::Truncated(Header::Udp));
    }
    // The masked headers are gathered into one buffer so the CRC runs over them in a single
    // call: 8 + up to 60 + 8 + 12 bytes.
    let mut head = [0u8; 8 + MAX_IP_LEN + UDP_LEN + BTH_LEN];
    head[..8].fill(0xff);
    let ip_len = ip_header.len();
    let ip = &mut head[8..8 + ip_len];
    match ip_header.first().map(|b| b >> 4) {
        Some(4) if (20..=MAX_IP_LEN).contains(&ip_len) => {
            ip.copy_from_slice(ip_header);
            ip[1] = 0xff; // TOS
            ip[8] = 0xff; // TTL
            ip[10] = 0xff; // header checksum
            ip[11] = 0xff;
        }
        Some(6) if ip_len == 40 => {
            ip.copy_from_slice(ip_header);
            ip[0] |= 0x0f; // traffic class (high nibble) ...
            ip[1] = 0xff; // ... traffic class (low nibble) and flow label
            ip[2] = 0xff;
            ip[3] = 0xff;
            ip[7] = 0xff; // hop limit
        }
        Some(6) => return Err(Error::Malformed(Header::Ipv6)),
        _ => return Err(Error::Malformed(Header::Ipv4)),
    }
    let udp_at = 8 + ip_len;
    let udp = &mut head[udp_at..udp_at + UDP_LEN];
    udp.copy_from_slice(&udp_header[..UDP_LEN]);
    udp[6] = 0xff;
    udp[7] = 0xff;
    let bth_at = udp_at + UDP_LEN;
    let bth = &mut head[bth_at..bth_at + BTH_LEN];
    bth.copy_from_slice(&transport[..BTH_LEN]);
    bth[4] = 0xff;

    let mut h = crc32fast::Hasher::new();
    h.update(&head[..bth_at + BTH_LEN]);
    h.update(&transport[BTH_LEN..]);
    Ok(h.finalize())
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
