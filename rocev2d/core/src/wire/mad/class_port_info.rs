//! ClassPortInfo (IBA Vol. 1 §13.4.8.1): what a management class on a port supports and where
//! to redirect or send traps. The CM answers a Get(ClassPortInfo) with it, so a peer that asks
//! can be told; rdma_cm itself never asks.
//!
//! A view over the first 72 of the 232 data bytes of a MAD (the rest is reserved):
//!
//! ```text
//!  0 BaseVersion | 1 ClassVersion | 2 CapabilityMask(16) | 4 CapabilityMask2(27) RespTimeValue(5)
//!  8 RedirectGID (16) | 24 RedirectTC | 25 RedirectSL(4) RedirectFL(20) | 28 RedirectLID(16)
//! 30 RedirectP_Key(16) | 32 Rsvd | 33 RedirectQP(24) | 36 RedirectQ_Key
//! 40 TrapGID (16) | 56 TrapTC | 57 TrapSL(4) TrapFL(20) | 60 TrapLID(16) | 62 TrapP_Key(16)
//! 64 TrapHL | 65 TrapQP(24) | 68 TrapQ_Key
//! ```
//!
//! BaseVersion and ClassVersion here are data (what the class supports), not checked.
//!
//! Deviations: none.

use super::gid;
use crate::wire::{Error, Qpn};
use core::fmt;
use core::net::Ipv6Addr;

/// Bytes of the data area ClassPortInfo uses.
pub const LEN: usize = 72;

mad_view!(
    Packet,
    LEN,
    "A read/write view of a ClassPortInfo attribute (§13.4.8.1)."
);

mad_fields!(Packet {
    /// BaseVersion (byte 0): the MAD base version the class supports.
    base_version, set_base_version: u8 = (0, 0, 8);
    /// ClassVersion (byte 1): the class version supported.
    class_version, set_class_version: u8 = (1, 0, 8);
    /// CapabilityMask (bytes 2–3): class-independent bits 0–7, class-specific 8–15.
    capability_mask, set_capability_mask: u16 = (2, 0, 16);
    /// CapabilityMask2 (bytes 4–7, bits 0–26).
    capability_mask2, set_capability_mask2: u32 = (4, 0, 27);
    /// RespTimeValue (byte 7, bits 3–7): the class's response time, 4.096 µs · 2^value.
    resp_time_value, set_resp_time_value: u8 = (7, 3, 5);
    /// RedirectTC (byte 24).
    redirect_tc, set_redirect_tc: u8 = (24, 0, 8);
    /// RedirectSL (byte 25, bits 0–3).
    redirect_sl, set_redirect_sl: u8 = (25, 0, 4);
    /// RedirectFL (bytes 25–27, 20 bits from bit 4).
    redirect_fl, set_redirect_fl: u32 = (25, 4, 20);
    /// RedirectLID (bytes 28–29): 0 when not redirected.
    redirect_lid, set_redirect_lid: u16 = (28, 0, 16);
    /// RedirectP_Key (bytes 30–31).
    redirect_p_key, set_redirect_p_key: u16 = (30, 0, 16);
    /// RedirectQP (bytes 33–35).
    redirect_qp, set_redirect_qp: Qpn = (33, 0, 24);
    /// RedirectQ_Key (bytes 36–39).
    redirect_q_key, set_redirect_q_key: u32 = (36, 0, 32);
    /// TrapTC (byte 56).
    trap_tc, set_trap_tc: u8 = (56, 0, 8);
    /// TrapSL (byte 57, bits 0–3).
    trap_sl, set_trap_sl: u8 = (57, 0, 4);
    /// TrapFL (bytes 57–59, 20 bits from bit 4).
    trap_fl, set_trap_fl: u32 = (57, 4, 20);
    /// TrapLID (bytes 60–61).
    trap_lid, set_trap_lid: u16 = (60, 0, 16);
    /// TrapP_Key (bytes 62–63).
    trap_p_key, set_trap_p_key: u16 = (62, 0, 16);
    /// TrapHL (byte 64): hop limit for traps.
    trap_hl, set_trap_hl: u8 = (64, 0, 8);
    /// TrapQP (bytes 65–67).
    trap_qp, set_trap_qp: Qpn = (65, 0, 24);
    /// TrapQ_Key (bytes 68–71).
    trap_q_key, set_trap_q_key: u32 = (68, 0, 32);
});

impl<T: AsRef<[u8]>> Packet<T> {
    /// RedirectGID (bytes 8–23).
    pub fn redirect_gid(&self) -> Ipv6Addr {
        gid(&self.buffer.as_ref()[8..24])
    }
    /// TrapGID (bytes 40–55).
    pub fn trap_gid(&self) -> Ipv6Addr {
        gid(&self.buffer.as_ref()[40..56])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets [`Self::redirect_gid`].
    pub fn set_redirect_gid(&mut self, v: Ipv6Addr) {
        self.buffer.as_mut()[8..24].copy_from_slice(&v.octets());
    }
    /// Sets [`Self::trap_gid`].
    pub fn set_trap_gid(&mut self, v: Ipv6Addr) {
        self.buffer.as_mut()[40..56].copy_from_slice(&v.octets());
    }
}

/// The meaning of a ClassPortInfo. Field meanings are on [`Packet`]'s getters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct ClassPortInfoRepr {
    pub base_version: u8,
    pub class_version: u8,
    pub capability_mask: u16,
    pub capability_mask2: u32,
    pub resp_time_value: u8,
    pub redirect_gid: Ipv6Addr,
    pub redirect_tc: u8,
    pub redirect_sl: u8,
    pub redirect_fl: u32,
    pub redirect_lid: u16,
    pub redirect_p_key: u16,
    pub redirect_qp: Qpn,
    pub redirect_q_key: u32,
    pub trap_gid: Ipv6Addr,
    pub trap_tc: u8,
    pub trap_sl: u8,
    pub trap_fl: u32,
    pub trap_lid: u16,
    pub trap_p_key: u16,
    pub trap_hl: u8,
    pub trap_qp: Qpn,
    pub trap_q_key: u32,
}

impl ClassPortInfoRepr {
    /// Reads a ClassPortInfo.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self, Error> {
        Ok(ClassPortInfoRepr {
            base_version: p.base_version(),
            class_version: p.class_version(),
            capability_mask: p.capability_mask(),
            capability_mask2: p.capability_mask2(),
            resp_time_value: p.resp_time_value(),
            redirect_gid: p.redirect_gid(),
            redirect_tc: p.redirect_tc(),
            redirect_sl: p.redirect_sl(),
            redirect_fl: p.redirect_fl(),
            redirect_lid: p.redirect_lid(),
            redirect_p_key: p.redirect_p_key(),
            redirect_qp: p.redirect_qp(),
            redirect_q_key: p.redirect_q_key(),
            trap_gid: p.trap_gid(),
            trap_tc: p.trap_tc(),
            trap_sl: p.trap_sl(),
            trap_fl: p.trap_fl(),
            trap_lid: p.trap_lid(),
            trap_p_key: p.trap_p_key(),
            trap_hl: p.trap_hl(),
            trap_qp: p.trap_qp(),
            trap_q_key: p.trap_q_key(),
        })
    }
    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }
    /// Writes a ClassPortInfo over zeroed bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_base_version(self.base_version);
        p.set_class_version(self.class_version);
        p.set_capability_mask(self.capability_mask);
        p.set_capability_mask2(self.capability_mask2);
        p.set_resp_time_value(self.resp_time_value);
        p.set_redirect_gid(self.redirect_gid);
        p.set_redirect_tc(self.redirect_tc);
        p.set_redirect_sl(self.redirect_sl);
        p.set_redirect_fl(self.redirect_fl);
        p.set_redirect_lid(self.redirect_lid);
        p.set_redirect_p_key(self.redirect_p_key);
        p.set_redirect_qp(self.redirect_qp);
        p.set_redirect_q_key(self.redirect_q_key);
        p.set_trap_gid(self.trap_gid);
        p.set_trap_tc(self.trap_tc);
        p.set_trap_sl(self.trap_sl);
        p.set_trap_fl(self.trap_fl);
        p.set_trap_lid(self.trap_lid);
        p.set_trap_p_key(self.trap_p_key);
        p.set_trap_hl(self.trap_hl);
        p.set_trap_qp(self.trap_qp);
        p.set_trap_q_key(self.trap_q_key);
    }
}

impl fmt::Display for ClassPortInfoRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ClassPortInfo base=v{} class=v{} cap={:#06x} resp_time={}",
            self.base_version, self.class_version, self.capability_mask, self.resp_time_value
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Built by hand from the §13.4.8.1 layout: every field a distinct value with its top bit
    /// set, so a shifted or narrowed field shows.
    fn bytes() -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[0] = 1; // BaseVersion
        b[1] = 2; // ClassVersion
        b[2..4].copy_from_slice(&[0x81, 0x02]); // CapabilityMask
        // CapabilityMask2 = 0x4_0000_03 (27 bits) then RespTimeValue = 0x13 (5 bits).
        b[4..8].copy_from_slice(&((0x400_0003u32 << 5) | 0x13).to_be_bytes());
        b[8..24].copy_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01]);
        b[24] = 0xb8; // RedirectTC
        // RedirectSL = 0xa (4 bits), RedirectFL = 0x8_1234 (20 bits).
        b[25..28].copy_from_slice(&[0xa8, 0x12, 0x34]);
        b[28..30].copy_from_slice(&[0x80, 0x07]); // RedirectLID
        b[30..32].copy_from_slice(&[0xff, 0xff]); // RedirectP_Key
        b[33..36].copy_from_slice(&[0x80, 0x00, 0x11]); // RedirectQP
        b[36..40].copy_from_slice(&[0x80, 0x01, 0x00, 0x00]); // RedirectQ_Key
        b[40..56].copy_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02]);
        b[56] = 0x88; // TrapTC
        b[57..60].copy_from_slice(&[0x98, 0x76, 0x54]); // TrapSL 9, TrapFL 0x8_7654
        b[60..62].copy_from_slice(&[0x80, 0x09]); // TrapLID
        b[62..64].copy_from_slice(&[0x80, 0x01]); // TrapP_Key
        b[64] = 0x40; // TrapHL
        b[65..68].copy_from_slice(&[0x80, 0x00, 0x01]); // TrapQP
        b[68..72].copy_from_slice(&[0x80, 0x01, 0x00, 0x01]); // TrapQ_Key
        b
    }

    fn repr() -> ClassPortInfoRepr {
        ClassPortInfoRepr {
            base_version: 1,
            class_version: 2,
            capability_mask: 0x8102,
            capability_mask2: 0x400_0003,
            resp_time_value: 0x13,
            redirect_gid: "fe80::1".parse().unwrap(),
            redirect_tc: 0xb8,
            redirect_sl: 0xa,
            redirect_fl: 0x8_1234,
            redirect_lid: 0x8007,
            redirect_p_key: 0xffff,
            redirect_qp: Qpn::new(0x80_0011),
            redirect_q_key: 0x8001_0000,
            trap_gid: "fe80::2".parse().unwrap(),
            trap_tc: 0x88,
            trap_sl: 9,
            trap_fl: 0x8_7654,
            trap_lid: 0x8009,
            trap_p_key: 0x8001,
            trap_hl: 0x40,
            trap_qp: Qpn::new(0x80_0001),
            trap_q_key: 0x8001_0001,
        }
    }

    #[test]
    fn class_port_info_four_ways() {
        let b = bytes();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.resp_time_value(), 0x13);
        assert_eq!(p.capability_mask2(), 0x400_0003);
        assert_eq!((p.redirect_sl(), p.redirect_fl()), (0xa, 0x8_1234));
        assert_eq!((p.trap_sl(), p.trap_fl()), (9, 0x8_7654));
        assert_eq!(ClassPortInfoRepr::parse(&p), Ok(repr()));
        let mut out = [0u8; LEN];
        repr().emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
    }

    #[test]
    fn class_port_info_in_a_get_resp_round_trips() {
        use crate::wire::mad::{CmAttribute, CmRepr, MAD_LEN, Packet as Mad, method};
        let m = CmRepr {
            method: method::GET_RESP,
            status: 0,
            class_specific: 0,
            transaction_id: 0x1234,
            attribute_modifier: 0,
            attribute: CmAttribute::ClassPortInfo(repr()),
        };
        let mut buf = [0xa5u8; MAD_LEN];
        m.emit(&mut Mad::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[24..24 + LEN], &bytes()[..]);
        assert!(buf[24 + LEN..].iter().all(|&b| b == 0), "reserved tail");
        assert_eq!(CmRepr::parse_bytes(&buf), Ok(m));
    }

    #[test]
    fn class_port_info_short_is_truncated() {
        assert_eq!(
            Packet::new_checked(&bytes()[..LEN - 1]),
            Err(Error::Truncated(crate::wire::Header::Mad))
        );
    }
}
