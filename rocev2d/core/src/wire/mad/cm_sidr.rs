//! Service ID Resolution (IBA Vol. 1 §12.11): SIDR_REQ and SIDR_REP, with which a UD
//! requester learns the QPN and Q_Key a service runs on.
//!
//! Views over the 232 data bytes of a CM MAD (see [`super`]):
//!
//! ```text
//! SIDR_REQ (Table 115): 0 RequestID | 4 P_Key(16) | 6 Rsvd | 8 ServiceID(64) | 16 PrivateData (216)
//! SIDR_REP (Table 116): 0 RequestID | 4 Status | 5 AddInfoLength | 6 Rsvd | 8 QPN(24) 11 Rsvd
//!   12 ServiceID(64) | 20 Q_Key | 24 ClassPortInfo / AdditionalInfo (72) | 96 PrivateData (136)
//! ```
//!
//! The Status is data ([`SidrStatus`], an unknown value included); the Additional Information is
//! carried as bytes (a redirecting responder's ClassPortInfo), its length not checked against the
//! 72 bytes it has: a REP is read whatever it claims, and nothing here interprets redirection.
//! Reserved bits are ignored on receipt and written as zero.
//!
//! Deviations: none.

use super::{DATA_LEN, array};
use crate::wire::{Error, Qpn};
use core::fmt;

/// A SIDR_REP's Status (§12.11.2, Table 116; Linux `enum ib_cm_sidr_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SidrStatus(pub u8);

impl SidrStatus {
    /// The QPN and Q_Key are valid.
    pub const SUCCESS: SidrStatus = SidrStatus(0);
    /// Nobody serves the Service ID.
    pub const UNSUPPORTED: SidrStatus = SidrStatus(1);
    /// The service refused the request.
    pub const REJECT: SidrStatus = SidrStatus(2);
    /// The service has no QP to give.
    pub const NO_QP: SidrStatus = SidrStatus(3);
    /// Ask the port the Additional Information's ClassPortInfo names.
    pub const REDIRECT: SidrStatus = SidrStatus(4);
    /// The service does not speak the version the private data asks for.
    pub const UNSUPPORTED_VERSION: SidrStatus = SidrStatus(5);
}

impl fmt::Display for SidrStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match *self {
            SidrStatus::SUCCESS => "success",
            SidrStatus::UNSUPPORTED => "service ID not supported",
            SidrStatus::REJECT => "rejected",
            SidrStatus::NO_QP => "no QP",
            SidrStatus::REDIRECT => "redirect",
            SidrStatus::UNSUPPORTED_VERSION => "unsupported version",
            SidrStatus(n) => return write!(f, "status {n}"),
        };
        f.write_str(name)
    }
}

mad_view!(
    SidrReqPacket,
    DATA_LEN,
    "A read/write view of a ServiceIDResolutionRequest (SIDR_REQ, §12.11.1, Table 115)."
);

mad_fields!(SidrReqPacket {
    /// Request ID (bytes 0–3): the requester's handle, echoed by the SIDR_REP.
    request_id, set_request_id: u32 = (0, 0, 32);
    /// P_Key (bytes 4–5): the partition the requester's UD QP is in.
    partition_key, set_partition_key: u16 = (4, 0, 16);
});

mad_bytes!(SidrReqPacket {
    /// ServiceID (bytes 8–15): the service whose QP is asked for.
    service_id, set_service_id: u64 = 8;
} {
    /// PrivateData (bytes 16–231): 216 bytes (rdma_cm: its CMA header first).
    private_data, set_private_data: [u8; 216] = 16;
});

/// The meaning of a SIDR_REQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct SidrReqRepr {
    pub request_id: u32,
    pub partition_key: u16,
    pub service_id: u64,
    pub private_data: [u8; 216],
}

impl SidrReqRepr {
    /// Reads a SIDR_REQ.
    pub fn parse<T: AsRef<[u8]>>(p: &SidrReqPacket<T>) -> Result<Self, Error> {
        Ok(SidrReqRepr {
            request_id: p.request_id(),
            partition_key: p.partition_key(),
            service_id: p.service_id(),
            private_data: array(p.private_data()),
        })
    }
    /// Bytes [`Self::emit`] writes (the whole data area).
    pub const fn buffer_len(&self) -> usize {
        DATA_LEN
    }
    /// Writes a SIDR_REQ over zeroed bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut SidrReqPacket<T>) {
        p.set_request_id(self.request_id);
        p.set_partition_key(self.partition_key);
        p.set_service_id(self.service_id);
        p.set_private_data(&self.private_data);
    }
}

impl fmt::Display for SidrReqRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CM SIDR_REQ rid={:#010x} pkey={:#06x} sid={:#018x}",
            self.request_id, self.partition_key, self.service_id
        )
    }
}

mad_view!(
    SidrRepPacket,
    DATA_LEN,
    "A read/write view of a ServiceIDResolutionResponse (SIDR_REP, §12.11.2, Table 116)."
);

mad_fields!(SidrRepPacket {
    /// Request ID (bytes 0–3): the SIDR_REQ's.
    request_id, set_request_id: u32 = (0, 0, 32);
    /// Status (byte 4): [`SidrStatus`]; QPN and Q_Key mean something only on success.
    status, set_status: u8 = (4, 0, 8);
    /// Additional Information Length (byte 5): bytes of the Additional Information in use.
    additional_info_length, set_additional_info_length: u8 = (5, 0, 8);
    /// QPN (bytes 8–10): the service's UD QP.
    qpn, set_qpn: Qpn = (8, 0, 24);
    /// Q_Key (bytes 20–23): the Q_Key datagrams to that QP carry.
    q_key, set_q_key: u32 = (20, 0, 32);
});

mad_bytes!(SidrRepPacket {
    /// ServiceID (bytes 12–19): the SIDR_REQ's.
    service_id, set_service_id: u64 = 12;
} {
    /// ClassPortInfo / Additional Information (bytes 24–95): 72 bytes.
    additional_info, set_additional_info: [u8; 72] = 24;
    /// PrivateData (bytes 96–231): 136 bytes.
    private_data, set_private_data: [u8; 136] = 96;
});

/// The meaning of a SIDR_REP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct SidrRepRepr {
    pub request_id: u32,
    pub status: SidrStatus,
    pub additional_info_length: u8,
    pub qpn: Qpn,
    pub service_id: u64,
    pub q_key: u32,
    pub additional_info: [u8; 72],
    pub private_data: [u8; 136],
}

impl SidrRepRepr {
    /// Reads a SIDR_REP.
    pub fn parse<T: AsRef<[u8]>>(p: &SidrRepPacket<T>) -> Result<Self, Error> {
        Ok(SidrRepRepr {
            request_id: p.request_id(),
            status: SidrStatus(p.status()),
            additional_info_length: p.additional_info_length(),
            qpn: p.qpn(),
            service_id: p.service_id(),
            q_key: p.q_key(),
            additional_info: array(p.additional_info()),
            private_data: array(p.private_data()),
        })
    }
    /// Bytes [`Self::emit`] writes (the whole data area).
    pub const fn buffer_len(&self) -> usize {
        DATA_LEN
    }
    /// Writes a SIDR_REP over zeroed bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut SidrRepPacket<T>) {
        p.set_request_id(self.request_id);
        p.set_status(self.status.0);
        p.set_additional_info_length(self.additional_info_length);
        p.set_qpn(self.qpn);
        p.set_service_id(self.service_id);
        p.set_q_key(self.q_key);
        p.set_additional_info(&self.additional_info);
        p.set_private_data(&self.private_data);
    }
}

impl fmt::Display for SidrRepRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CM SIDR_REP rid={:#010x} status={} qpn={} qkey={:#010x} sid={:#018x}",
            self.request_id, self.status, self.qpn, self.q_key, self.service_id
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::mad::{CmAttribute, CmRepr, MAD_LEN, Packet, method};

    /// A SIDR_REQ as rdma_cm sends it for `udaddy`'s port 7174 (RDMA_PS_UDP 0x0111), built by
    /// hand from Table 115: request ID, P_Key 0xffff, the service ID, then the CMA header.
    fn req_bytes() -> [u8; DATA_LEN] {
        let mut b = [0u8; DATA_LEN];
        b[0..4].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        b[4..6].copy_from_slice(&0xffffu16.to_be_bytes());
        b[6..8].copy_from_slice(&[0xee, 0xee]); // reserved: ignored
        b[8..16].copy_from_slice(&0x0000_0000_0111_1c06u64.to_be_bytes());
        b[16] = 0x00; // CMA version
        b[17] = 0x40; // IPv4
        b[231] = 0x77;
        b
    }

    /// A successful SIDR_REP from Table 116: QPN 0x000abc, Q_Key 0x01234567.
    fn rep_bytes() -> [u8; DATA_LEN] {
        let mut b = [0u8; DATA_LEN];
        b[0..4].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        b[4] = 0; // success
        b[5] = 0;
        b[8..11].copy_from_slice(&[0x00, 0x0a, 0xbc]);
        b[12..20].copy_from_slice(&0x0000_0000_0111_1c06u64.to_be_bytes());
        b[20..24].copy_from_slice(&0x0123_4567u32.to_be_bytes());
        b[96] = 0x42;
        b[231] = 0x43;
        b
    }

    #[test]
    fn sidr_req_four_ways() {
        let bytes = req_bytes();
        let p = SidrReqPacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(
            (p.request_id(), p.partition_key(), p.service_id()),
            (0x1234_5678, 0xffff, 0x0111_1c06)
        );
        let r = SidrReqRepr::parse(&p).unwrap();
        let mut pd = [0u8; 216];
        pd[1] = 0x40;
        pd[215] = 0x77;
        let want = SidrReqRepr {
            request_id: 0x1234_5678,
            partition_key: 0xffff,
            service_id: 0x0111_1c06,
            private_data: pd,
        };
        assert_eq!(r, want);
        let mut buf = [0u8; DATA_LEN];
        want.emit(&mut SidrReqPacket::new_unchecked(&mut buf[..]));
        let mut expect = bytes;
        expect[6..8].fill(0); // reserved written as zero
        assert_eq!(buf, expect);
    }

    #[test]
    fn sidr_rep_four_ways() {
        let bytes = rep_bytes();
        let p = SidrRepPacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(
            (p.request_id(), p.status(), p.qpn(), p.q_key()),
            (0x1234_5678, 0, Qpn::new(0xabc), 0x0123_4567)
        );
        let mut pd = [0u8; 136];
        pd[0] = 0x42;
        pd[135] = 0x43;
        let want = SidrRepRepr {
            request_id: 0x1234_5678,
            status: SidrStatus::SUCCESS,
            additional_info_length: 0,
            qpn: Qpn::new(0xabc),
            service_id: 0x0111_1c06,
            q_key: 0x0123_4567,
            additional_info: [0; 72],
            private_data: pd,
        };
        assert_eq!(SidrRepRepr::parse(&p).unwrap(), want);
        let mut buf = [0u8; DATA_LEN];
        want.emit(&mut SidrRepPacket::new_unchecked(&mut buf[..]));
        assert_eq!(buf, bytes);
    }

    #[test]
    fn sidr_rep_qpn_keeps_its_reserved_byte_clear() {
        let mut bytes = rep_bytes();
        bytes[11] = 0xff; // reserved after the QPN
        let r = SidrRepRepr::parse(&SidrRepPacket::new_unchecked(&bytes[..])).unwrap();
        assert_eq!(r.qpn, Qpn::new(0xabc));
        let mut buf = [0u8; DATA_LEN];
        r.emit(&mut SidrRepPacket::new_unchecked(&mut buf[..]));
        assert_eq!(buf[8..12], [0x00, 0x0a, 0xbc, 0x00]);
    }

    #[test]
    fn sidr_through_the_whole_mad() {
        for attr in [
            CmAttribute::SidrReq(
                SidrReqRepr::parse(&SidrReqPacket::new_unchecked(&req_bytes()[..])).unwrap(),
            ),
            CmAttribute::SidrRep(
                SidrRepRepr::parse(&SidrRepPacket::new_unchecked(&rep_bytes()[..])).unwrap(),
            ),
        ] {
            let m = CmRepr {
                method: method::SEND,
                status: 0,
                class_specific: 0,
                transaction_id: 7,
                attribute_modifier: 0,
                attribute: attr,
            };
            let mut mad = [0u8; MAD_LEN];
            m.emit(&mut Packet::new_unchecked(&mut mad[..]));
            assert_eq!(CmRepr::parse_bytes(&mad), Ok(m.clone()), "{m}");
        }
    }

    #[test]
    fn sidr_short_is_truncated() {
        assert_eq!(
            SidrReqPacket::new_checked(&req_bytes()[..DATA_LEN - 1]),
            Err(Error::Truncated(crate::wire::Header::Mad))
        );
        assert_eq!(
            SidrRepPacket::new_checked(&rep_bytes()[..10]),
            Err(Error::Truncated(crate::wire::Header::Mad))
        );
    }

    #[test]
    fn sidr_status_unknown_is_data() {
        let mut bytes = rep_bytes();
        bytes[4] = 0xc8;
        let r = SidrRepRepr::parse(&SidrRepPacket::new_unchecked(&bytes[..])).unwrap();
        assert_eq!(r.status, SidrStatus(0xc8));
        assert_eq!(alloc::format!("{}", r.status), "status 200");
        assert_eq!(
            alloc::format!("{}", SidrStatus::UNSUPPORTED),
            "service ID not supported"
        );
    }
}
