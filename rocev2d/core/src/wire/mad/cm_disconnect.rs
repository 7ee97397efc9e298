//! CM connection release (IBA Vol. 1 §12.6.10–§12.6.11): DREQ and DREP.
//!
//! Views over the 232 data bytes of a CM MAD (see [`super`]):
//!
//! ```text
//! DREQ (Table 112): 0 LocalCommID | 4 RemoteCommID | 8 RemoteQPN/EECN(24) 11 Rsvd | 12 PrivateData (220)
//! DREP (Table 113): 0 LocalCommID | 4 RemoteCommID | 8 PrivateData (224)
//! ```
//!
//! Reserved bits are ignored on receipt and written as zero.
//!
//! Deviations: none.

use super::{DATA_LEN, array};
use crate::wire::{Error, Qpn};
use core::fmt;

mad_view!(
    DreqPacket,
    DATA_LEN,
    "A read/write view of a DisconnectRequest (DREQ, §12.6.10, Table 112)."
);

mad_fields!(DreqPacket {
    /// Local Communication ID (bytes 0–3): the sender's.
    local_comm_id, set_local_comm_id: u32 = (0, 0, 32);
    /// Remote Communication ID (bytes 4–7): the receiver's.
    remote_comm_id, set_remote_comm_id: u32 = (4, 0, 32);
    /// Remote QPN/EECN (bytes 8–10): the receiver's QP, which the receiver checks.
    remote_qpn, set_remote_qpn: Qpn = (8, 0, 24);
});

mad_bytes!(DreqPacket {} {
    /// PrivateData (bytes 12–231): 220 bytes.
    private_data, set_private_data: [u8; 220] = 12;
});

/// The meaning of a DREQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct DreqRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub remote_qpn: Qpn,
    pub private_data: [u8; 220],
}

impl DreqRepr {
    /// Reads a DREQ.
    pub fn parse<T: AsRef<[u8]>>(p: &DreqPacket<T>) -> Result<Self, Error> {
        Ok(DreqRepr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            remote_qpn: p.remote_qpn(),
            private_data: array(p.private_data()),
        })
    }
    /// Bytes [`Self::emit`] writes (the whole data area).
    pub const fn buffer_len(&self) -> usize {
        DATA_LEN
    }
    /// Writes a DREQ over zeroed bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut DreqPacket<T>) {
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_remote_qpn(self.remote_qpn);
        p.set_private_data(&self.private_data);
    }
}

impl fmt::Display for DreqRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CM DREQ lcid={:#010x} rcid={:#010x} rqpn={}",
            self.local_comm_id, self.remote_comm_id, self.remote_qpn
        )
    }
}

mad_view!(
    DrepPacket,
    DATA_LEN,
    "A read/write view of a DisconnectReply (DREP, §12.6.11, Table 113)."
);

mad_fields!(DrepPacket {
    /// Local Communication ID (bytes 0–3): the sender's.
    local_comm_id, set_local_comm_id: u32 = (0, 0, 32);
    /// Remote Communication ID (bytes 4–7): the receiver's.
    remote_comm_id, set_remote_comm_id: u32 = (4, 0, 32);
});

mad_bytes!(DrepPacket {} {
    /// PrivateData (bytes 8–231): 224 bytes.
    private_data, set_private_data: [u8; 224] = 8;
});

/// The meaning of a DREP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct DrepRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: [u8; 224],
}

impl DrepRepr {
    /// Reads a DREP.
    pub fn parse<T: AsRef<[u8]>>(p: &DrepPacket<T>) -> Result<Self, Error> {
        Ok(DrepRepr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            private_data: array(p.private_data()),
        })
    }
    /// Bytes [`Self::emit`] writes (the whole data area).
    pub const fn buffer_len(&self) -> usize {
        DATA_LEN
    }
    /// Writes a DREP.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut DrepPacket<T>) {
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_private_data(&self.private_data);
    }
}

impl fmt::Display for DrepRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CM DREP lcid={:#010x} rcid={:#010x}",
            self.local_comm_id, self.remote_comm_id
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{DREP, DREQ, data};
    use super::*;
    use crate::wire::mad::{CmAttribute, CmRepr};

    #[test]
    fn dreq_four_ways() {
        // rping_cm.pcap frame 40: the client (lcid 0x678496bc) ends the connection to the
        // server's QP 0x11 (rcid 0x2c50252f).
        let p = DreqPacket::new_checked(data(&DREQ)).unwrap();
        assert_eq!(
            (p.local_comm_id(), p.remote_comm_id(), p.remote_qpn()),
            (0x6784_96bc, 0x2c50_252f, Qpn::new(0x11))
        );
        let r = DreqRepr::parse(&p).unwrap();
        let want = DreqRepr {
            local_comm_id: 0x6784_96bc,
            remote_comm_id: 0x2c50_252f,
            remote_qpn: Qpn::new(0x11),
            private_data: [0; 220],
        };
        assert_eq!(r, want);
        let mut buf = [0u8; DATA_LEN];
        want.emit(&mut DreqPacket::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[..], data(&DREQ));
        let m = CmRepr::parse_bytes(&DREQ).unwrap();
        assert_eq!(m.attribute, CmAttribute::Dreq(want));
    }

    #[test]
    fn drep_four_ways() {
        // rping_cm.pcap frame 41: the server's answer, the comm IDs swapped.
        let p = DrepPacket::new_checked(data(&DREP)).unwrap();
        assert_eq!(
            (p.local_comm_id(), p.remote_comm_id()),
            (0x2c50_252f, 0x6784_96bc)
        );
        let want = DrepRepr {
            local_comm_id: 0x2c50_252f,
            remote_comm_id: 0x6784_96bc,
            private_data: [0; 224],
        };
        assert_eq!(DrepRepr::parse(&p).unwrap(), want);
        let mut buf = [0xa5u8; DATA_LEN];
        want.emit(&mut DrepPacket::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[..], data(&DREP));
    }

    #[test]
    fn dreq_private_data_and_qpn_bits_stay_in_place() {
        let mut buf = [0u8; DATA_LEN];
        let r = DreqRepr {
            local_comm_id: 1,
            remote_comm_id: 2,
            remote_qpn: Qpn::new(0xab_cdef),
            private_data: [0x5a; 220],
        };
        r.emit(&mut DreqPacket::new_unchecked(&mut buf[..]));
        // Table 112: QPN in bytes 8–10, byte 11 reserved, private data from byte 12.
        assert_eq!(buf[8..12], [0xab, 0xcd, 0xef, 0x00]);
        assert!(buf[12..].iter().all(|&b| b == 0x5a));
        assert_eq!(DreqRepr::parse(&DreqPacket::new_unchecked(&buf[..])), Ok(r));
    }

    #[test]
    fn dreq_short_is_truncated() {
        assert_eq!(
            DreqPacket::new_checked(&data(&DREQ)[..DATA_LEN - 1]),
            Err(Error::Truncated(crate::wire::Header::Mad))
        );
    }
}
