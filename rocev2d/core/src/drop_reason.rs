//! Why a received frame is dropped, and the P_Key rule behind one of the reasons: the
//! vocabulary the endpoint's demux, the UD QPs and the GSI share, kept here so those lower
//! layers need not import the endpoint.
//!
//! Source: IBA Vol. 1 §9.6 (packet checks, silent drops), §10.9.3 (P_Key matching). The
//! counter names are those `rocev2d stats` prints.
//!
//! Deviations: none.

use crate::wire;

/// Why a received frame was dropped; each has a counter named by [`DropReason::name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DropReason {
    /// Ended inside a header.
    Truncated,
    /// Inconsistent lengths or versions in L2–L4.
    Malformed,
    /// Not IPv4/IPv6.
    NotIp,
    /// Not unfragmented UDP.
    NotUdp,
    /// UDP destination port is not 4791.
    NotRoce,
    /// IPv4 options or IPv6 extension headers.
    IpOptions,
    /// Bad IPv4 header checksum.
    BadIpChecksum,
    /// Bad UDP checksum.
    BadUdpChecksum,
    /// Reserved or unimplemented opcode.
    UnknownOpcode,
    /// Unsupported BTH.TVer.
    BadTver,
    /// Malformed REXT header.
    BadExtension,
    /// PadCnt larger than the payload.
    BadPadCount,
    /// Payload on an opcode without one.
    UnexpectedPayload,
    /// Reserved AETH syndrome.
    ReservedSyndrome,
    /// ICRC mismatch.
    BadIcrc,
    /// No QP with the destination QPN.
    UnknownQp,
    /// The QP is in Reset, Init or Error and accepts no packet.
    QpNotReady,
    /// The packet's IP source is not the QP's peer.
    WrongSource,
    /// The BTH P_Key does not match the QP's.
    BadPkey,
    /// A packet of another transport than the QP's: UC or UD for an RC QP (CNPs are
    /// accepted), anything but UD for a UD QP.
    WrongTransport,
    /// A UD packet whose DETH Q_Key is not the QP's (IBA §10.2.4).
    BadQkey,
    /// A UD message longer than the QP's MTU or than the receive buffer at the head of its
    /// receive queue (IBA class D: silently dropped; the buffer stays posted).
    TooLong,
    /// A UD message found no receive buffer posted (IBA class D: silently dropped).
    NoRecvWqe,
    /// A UD packet to QP1 that is not a CM MAD from the peer's QP1: not a SEND Only of 256
    /// bytes, a MAD base version, class or class version the CM does not serve, or another
    /// source QP ([`crate::Endpoint::enable_cm`]).
    BadMad,
    /// No QP with the destination QPN, which lies outside this endpoint's QPN block
    /// ([`crate::Endpoint::with_qpn_block`]): a frame for another shard of the same interface that
    /// the steering delivered to this one's receive queue.
    MisSteered,
}

impl DropReason {
    /// Every reason, in counter order.
    pub const ALL: [DropReason; 25] = [
        DropReason::Truncated,
        DropReason::Malformed,
        DropReason::NotIp,
        DropReason::NotUdp,
        DropReason::NotRoce,
        DropReason::IpOptions,
        DropReason::BadIpChecksum,
        DropReason::BadUdpChecksum,
        DropReason::UnknownOpcode,
        DropReason::BadTver,
        DropReason::BadExtension,
        DropReason::BadPadCount,
        DropReason::UnexpectedPayload,
        DropReason::ReservedSyndrome,
        DropReason::BadIcrc,
        DropReason::UnknownQp,
        DropReason::QpNotReady,
        DropReason::WrongSource,
        DropReason::BadPkey,
        DropReason::WrongTransport,
        DropReason::BadQkey,
        DropReason::TooLong,
        DropReason::NoRecvWqe,
        DropReason::BadMad,
        DropReason::MisSteered,
    ];

    /// The counter name `rocev2d stats` prints.
    pub const fn name(self) -> &'static str {
        match self {
            DropReason::Truncated => "truncated",
            DropReason::Malformed => "malformed",
            DropReason::NotIp => "not_ip",
            DropReason::NotUdp => "not_udp",
            DropReason::NotRoce => "not_roce",
            DropReason::IpOptions => "ip_options",
            DropReason::BadIpChecksum => "bad_ip_checksum",
            DropReason::BadUdpChecksum => "bad_udp_checksum",
            DropReason::UnknownOpcode => "unknown_opcode",
            DropReason::BadTver => "bad_tver",
            DropReason::BadExtension => "bad_extension",
            DropReason::BadPadCount => "bad_pad_count",
            DropReason::UnexpectedPayload => "unexpected_payload",
            DropReason::ReservedSyndrome => "reserved_syndrome",
            DropReason::BadIcrc => "icrc_error",
            DropReason::UnknownQp => "unknown_qp",
            DropReason::QpNotReady => "qp_not_ready",
            DropReason::WrongSource => "wrong_source",
            DropReason::BadPkey => "bad_pkey",
            DropReason::WrongTransport => "wrong_transport",
            DropReason::BadQkey => "bad_qkey",
            DropReason::TooLong => "too_long",
            DropReason::NoRecvWqe => "no_recv_wqe",
            DropReason::BadMad => "bad_mad",
            DropReason::MisSteered => "mis_steered",
        }
    }

    pub(crate) fn index(self) -> usize {
        Self::ALL.iter().position(|r| *r == self).unwrap_or(0)
    }
}

impl From<wire::Error> for DropReason {
    fn from(e: wire::Error) -> Self {
        use wire::Error as E;
        match e {
            E::Truncated(_) => DropReason::Truncated,
            E::NotIp => DropReason::NotIp,
            E::NotUdp => DropReason::NotUdp,
            E::NotRoce(_) => DropReason::NotRoce,
            E::IpOptions => DropReason::IpOptions,
            E::BadIpChecksum => DropReason::BadIpChecksum,
            E::BadUdpChecksum => DropReason::BadUdpChecksum,
            E::UnknownOpcode(_) => DropReason::UnknownOpcode,
            E::BadTver(_) => DropReason::BadTver,
            E::BadExtension => DropReason::BadExtension,
            E::BadPadCount => DropReason::BadPadCount,
            E::UnexpectedPayload => DropReason::UnexpectedPayload,
            E::ReservedSyndrome(_) => DropReason::ReservedSyndrome,
            E::BadIcrc => DropReason::BadIcrc,
            _ => DropReason::Malformed,
        }
    }
}

/// P_Key matching (IBA §10.9.3): the low 15 bits must be equal and at least one side must be a
/// full member (bit 15).
pub(crate) fn pkey_match(a: u16, b: u16) -> bool {
    (a & 0x7fff) == (b & 0x7fff) && (a | b) & 0x8000 != 0 && (a & 0x7fff) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkey_match_rules() {
        assert!(pkey_match(0xffff, 0xffff));
        assert!(pkey_match(0xffff, 0x7fff), "one full member suffices");
        assert!(
            !pkey_match(0x7fff, 0x7fff),
            "two limited members may not talk"
        );
        assert!(!pkey_match(0x8001, 0x8002));
        assert!(!pkey_match(0x8000, 0x8000), "the invalid P_Key");
    }
}
