//! Base Transport Header, 12 bytes, first in every RoCEv2 UDP payload.
//!
//! Source: IBA Vol. 1 §9.2 (BTH); RoCEv2 Annex A17.4.5.1 (FECN/BECN take the
//! first two bits of the IB `Resv8a` byte in RoCEv2).
//!
//! ```text
//!  byte 0   | 1                  | 2..4   | 4                     | 5..8    | 8           | 9..12
//!  OpCode   | SE M PadCnt TVer   | P_Key  | FECN BECN Resv6a       | DestQP  | A Resv7     | PSN
//!                                         (IOFD tokens, negotiated)
//!           | 1  1  2      4     |        | 1    1    6            | 24      | 1 7         | 24
//! ```
//!
//! Reserved bits are written as zero and ignored on receipt (IBA §9.2). One exception, agreed
//! per QP at connection time: the six Resv6a bits carry rocev2's IOFD deflection tokens (seed
//! 000 §IV-A), because byte 4 is the one transport byte the ICRC masks out, precisely so that
//! switches may rewrite it; a switch can spend a token without recomputing the ICRC. A standard
//! peer never receives non-zero tokens (see `docs/wire.md`).
//!
//! Deviations: none.

use super::field::{self, Field};
use super::{Error, Header, Opcode, Psn};
use core::fmt;

mod offs {
    use super::Field;
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const P_KEY: Field = 2..4;
    pub const FECN_BECN: usize = 4;
    pub const DEST_QP: usize = 5;
    pub const ACK_REQ: usize = 8;
    pub const PSN: usize = 9;
}

/// A 24-bit queue pair number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Qpn(u32);

impl Qpn {
    /// QP1, the General Services Interface QP that carries CM MADs (IBA §13.5.1.2).
    pub const GSI: Qpn = Qpn(1);
    /// The 24-bit value `0xFFFFFF`, reserved for multicast (IBA §9.2).
    pub const MULTICAST: Qpn = Qpn(0x00ff_ffff);

    /// The low 24 bits of `v`.
    pub const fn new(v: u32) -> Self {
        Qpn(v & 0x00ff_ffff)
    }
    /// The 24-bit value.
    pub const fn value(self) -> u32 {
        self.0
    }
}

impl fmt::Display for Qpn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#08x}", self.0)
    }
}

header_view!(Header::Bth, 12, "A read/write view of a BTH.");

impl<T: AsRef<[u8]>> Packet<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// OpCode: transport service and operation (IBA Table 38).
    pub fn opcode(&self) -> Opcode {
        Opcode(self.b()[offs::OPCODE])
    }
    /// SE, Solicited Event: the responder should raise a completion event (bit 7 of byte 1).
    pub fn solicited(&self) -> bool {
        self.b()[offs::FLAGS] & 0x80 != 0
    }
    /// M, MigReq: APM migration state (bit 6 of byte 1); rocev2 never migrates.
    pub fn mig_req(&self) -> bool {
        self.b()[offs::FLAGS] & 0x40 != 0
    }
    /// PadCnt: 0–3 pad bytes before the ICRC that align the payload to 4 bytes (bits 5–4).
    pub fn pad_cnt(&self) -> u8 {
        (self.b()[offs::FLAGS] >> 4) & 0x3
    }
    /// TVer: transport header version; 0 per IBA, 1 when our REXT header follows (bits 3–0).
    pub fn tver(&self) -> u8 {
        self.b()[offs::FLAGS] & 0x0f
    }
    /// P_Key: partition key; 0xFFFF is the default full-member partition.
    pub fn p_key(&self) -> u16 {
        field::u16_at(self.b(), offs::P_KEY)
    }
    /// FECN: forward explicit congestion notification (RoCEv2: bit 7 of byte 4). RoCEv2 marks
    /// congestion in the IP ECN field instead; this bit is masked out of the ICRC.
    pub fn fecn(&self) -> bool {
        self.b()[offs::FECN_BECN] & 0x80 != 0
    }
    /// BECN: backward explicit congestion notification, set on CNPs (bit 6 of byte 4).
    pub fn becn(&self) -> bool {
        self.b()[offs::FECN_BECN] & 0x40 != 0
    }
    /// Resv6a (bits 5–0 of byte 4): reserved by IBA; rocev2's IOFD deflection tokens when
    /// negotiated, otherwise zero.
    pub fn deflection_tokens(&self) -> u8 {
        self.b()[offs::FECN_BECN] & 0x3f
    }
    /// DestQP: the destination queue pair (24 bits).
    #[inline(always)]
    pub fn dest_qp(&self) -> Qpn {
        Qpn::new(field::u24_at(self.b(), offs::DEST_QP))
    }
    /// A, AckReq: the requester asks for an acknowledgement of this packet (bit 7 of byte 8).
    pub fn ack_req(&self) -> bool {
        self.b()[offs::ACK_REQ] & 0x80 != 0
    }
    /// Resv7: seven reserved bits of byte 8.
    pub fn resv7(&self) -> u8 {
        self.b()[offs::ACK_REQ] & 0x7f
    }
    /// PSN: packet sequence number (24 bits).
    #[inline(always)]
    pub fn psn(&self) -> Psn {
        Psn::new(field::u24_at(self.b(), offs::PSN))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    fn set_bit(&mut self, at: usize, mask: u8, on: bool) {
        let b = &mut self.bm()[at];
        *b = if on { *b | mask } else { *b & !mask };
    }
    /// Sets OpCode.
    pub fn set_opcode(&mut self, v: Opcode) {
        self.bm()[offs::OPCODE] = v.0;
    }
    /// Sets SE.
    pub fn set_solicited(&mut self, v: bool) {
        self.set_bit(offs::FLAGS, 0x80, v);
    }
    /// Sets M.
    pub fn set_mig_req(&mut self, v: bool) {
        self.set_bit(offs::FLAGS, 0x40, v);
    }
    /// Sets PadCnt (low two bits of `v`).
    pub fn set_pad_cnt(&mut self, v: u8) {
        let b = &mut self.bm()[offs::FLAGS];
        *b = (*b & !0x30) | ((v & 0x3) << 4);
    }
    /// Sets TVer (low four bits of `v`).
    pub fn set_tver(&mut self, v: u8) {
        let b = &mut self.bm()[offs::FLAGS];
        *b = (*b & !0x0f) | (v & 0x0f);
    }
    /// Sets P_Key.
    pub fn set_p_key(&mut self, v: u16) {
        field::set_u16(self.bm(), offs::P_KEY, v);
    }
    /// Sets FECN.
    pub fn set_fecn(&mut self, v: bool) {
        self.set_bit(offs::FECN_BECN, 0x80, v);
    }
    /// Sets BECN.
    pub fn set_becn(&mut self, v: bool) {
        self.set_bit(offs::FECN_BECN, 0x40, v);
    }
    /// Sets the IOFD deflection tokens (low six bits of `v`) in Resv6a.
    pub fn set_deflection_tokens(&mut self, v: u8) {
        let b = &mut self.bm()[offs::FECN_BECN];
        *b = (*b & 0xc0) | (v & 0x3f);
    }
    /// Sets DestQP.
    pub fn set_dest_qp(&mut self, v: Qpn) {
        field::set_u24(self.bm(), offs::DEST_QP, v.value());
    }
    /// Sets A (AckReq) and clears Resv7.
    pub fn set_ack_req(&mut self, v: bool) {
        self.bm()[offs::ACK_REQ] = if v { 0x80 } else { 0 };
    }
    /// Sets PSN.
    pub fn set_psn(&mut self, v: Psn) {
        field::set_u24(self.bm(), offs::PSN, v.value());
    }
}

/// The meaning of a BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Transport service and operation.
    pub opcode: Opcode,
    /// SE: ask the responder for a solicited event.
    pub solicited: bool,
    /// M: migration request bit (always false from rocev2).
    pub mig_req: bool,
    /// Pad bytes before the ICRC (0–3). [`super::RoceRepr::emit`] derives it from the payload.
    pub pad_cnt: u8,
    /// Transport header version: 0, or 1 when a REXT header follows.
    pub tver: u8,
    /// Partition key.
    pub p_key: u16,
    /// Forward ECN.
    pub fecn: bool,
    /// Backward ECN (set on CNPs).
    pub becn: bool,
    /// IOFD deflection tokens in Resv6a (0–63); zero unless negotiated.
    pub deflection_tokens: u8,
    /// Destination QP.
    pub dest_qp: Qpn,
    /// Acknowledge request.
    pub ack_req: bool,
    /// Packet sequence number.
    pub psn: Psn,
}

impl Repr {
    /// Length of a BTH.
    pub const LEN: usize = 12;

    /// A BTH for `opcode` to `dest_qp` at `psn` in partition `p_key`, every flag clear, TVer 0
    /// and no deflection tokens: what most packets start from; set the rest with struct update
    /// syntax.
    pub const fn new(opcode: Opcode, p_key: u16, dest_qp: Qpn, psn: Psn) -> Repr {
        Repr {
            opcode,
            solicited: false,
            mig_req: false,
            pad_cnt: 0,
            tver: 0,
            p_key,
            fecn: false,
            becn: false,
            deflection_tokens: 0,
            dest_qp,
            ack_req: false,
            psn,
        }
    }

    /// Reads a BTH. Only the version is validated here; whether the opcode is known is decided
    /// with its layout by [`super::RoceRepr::parse`].
    ///
    /// Always inlined: called out of line, its 20-byte result went through memory, written
    /// field by field and read back in words by the caller, a store-forwarding stall that was
    /// 40% of `RoceRepr::parse`'s samples; inlined, the fields stay in registers.
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, Error> {
        let tver = p.tver();
        if tver > super::ext::TVER {
            return Err(Error::BadTver(tver));
        }
        Ok(Repr {
            opcode: p.opcode(),
            solicited: p.solicited(),
            mig_req: p.mig_req(),
            pad_cnt: p.pad_cnt(),
            tver,
            p_key: p.p_key(),
            fecn: p.fecn(),
            becn: p.becn(),
            deflection_tokens: p.deflection_tokens(),
            dest_qp: p.dest_qp(),
            ack_req: p.ack_req(),
            psn: p.psn(),
        })
    }

    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        Self::LEN
    }

    /// Writes this BTH; Resv7 becomes zero.
    ///
    /// # Panics
    /// If `p` is shorter than [`Self::buffer_len`].
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        // The same bits the setters write, assembled in a local array and stored once: every
        // packet sent writes a BTH, and zeroing it then read-modify-writing six of its bytes
        // field by field cost more than the twelve bytes themselves.
        let flag = |v: bool, bit: u8| u8::from(v) << bit;
        let [k0, k1] = self.p_key.to_be_bytes();
        let [_, q0, q1, q2] = self.dest_qp.value().to_be_bytes();
        let [_, s0, s1, s2] = self.psn.value().to_be_bytes();
        let h = [
            self.opcode.0,
            flag(self.solicited, 7)
                | flag(self.mig_req, 6)
                | ((self.pad_cnt & 0x3) << 4)
                | (self.tver & 0x0f),
            k0,
            k1,
            flag(self.fecn, 7) | flag(self.becn, 6) | (self.deflection_tokens & 0x3f),
            q0,
            q1,
            q2,
            flag(self.ack_req, 7), // Resv7 zero
            s0,
            s1,
            s2,
        ];
        p.bm()[..Self::LEN].copy_from_slice(&h);
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "BTH {} qp={} psn={} pkey={:#06x}",
            self.opcode, self.dest_qp, self.psn, self.p_key
        )?;
        for (on, name) in [
            (self.solicited, " SE"),
            (self.mig_req, " M"),
            (self.ack_req, " A"),
            (self.fecn, " FECN"),
            (self.becn, " BECN"),
        ] {
            if on {
                f.write_str(name)?;
            }
        }
        if self.pad_cnt != 0 {
            write!(f, " pad={}", self.pad_cnt)?;
        }
        if self.tver != 0 {
            write!(f, " tver={}", self.tver)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Operation;

    // rc_pingpong.pcap frame 1 (client -> server), UDP payload bytes 0..12:
    // RC SEND First to QP 0x11, PSN 0x37cf8a, P_Key 0xffff.
    static CAPTURED: [u8; 12] = [
        0x00, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x00, 0x37, 0xcf, 0x8a,
    ];

    // Every flag set: RC RDMA WRITE Last with Immediate, SE, M, pad 3, P_Key 0x8001, FECN, BECN,
    // DestQP 0xabcdef, AckReq, PSN 0xfffffe.
    static ALL_FLAGS: [u8; 12] = [
        0x09, 0xf0, 0x80, 0x01, 0xc0, 0xab, 0xcd, 0xef, 0x80, 0xff, 0xff, 0xfe,
    ];

    fn all_flags_repr() -> Repr {
        Repr {
            opcode: Opcode::rc(Operation::RdmaWriteLastWithImmediate),
            solicited: true,
            mig_req: true,
            pad_cnt: 3,
            tver: 0,
            p_key: 0x8001,
            fecn: true,
            becn: true,
            deflection_tokens: 0,
            dest_qp: Qpn::new(0xabcdef),
            ack_req: true,
            psn: Psn::new(0xfffffe),
        }
    }

    #[test]
    fn bth_deconstruct() {
        let p = Packet::new_checked(&CAPTURED[..]).unwrap();
        assert_eq!(p.opcode(), Opcode::rc(Operation::SendFirst));
        assert!(!p.solicited() && !p.mig_req() && !p.ack_req() && !p.fecn() && !p.becn());
        assert_eq!(p.pad_cnt(), 0);
        assert_eq!(p.tver(), 0);
        assert_eq!(p.p_key(), 0xffff);
        assert_eq!(p.dest_qp(), Qpn::new(0x11));
        assert_eq!(p.psn(), Psn::new(0x37cf8a));
        let p = Packet::new_checked(&ALL_FLAGS[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap(), all_flags_repr());
    }

    #[test]
    fn bth_construct() {
        let mut buf = [0xaau8; 12];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        all_flags_repr().emit(&mut p);
        assert_eq!(buf, ALL_FLAGS);
    }

    #[test]
    fn bth_parse_emit_round_trip_captured() {
        let repr = Repr::parse(&Packet::new_checked(&CAPTURED[..]).unwrap()).unwrap();
        let mut buf = [0u8; 12];
        repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, CAPTURED);
    }

    #[test]
    fn bth_truncated() {
        assert_eq!(
            Packet::new_checked(&CAPTURED[..11]),
            Err(Error::Truncated(Header::Bth))
        );
    }

    #[test]
    fn bth_unknown_tver_rejected() {
        let mut b = CAPTURED;
        b[1] = 0x02;
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&b[..])),
            Err(Error::BadTver(2))
        );
    }

    #[test]
    fn bth_resv7_ignored_and_cleared() {
        let mut b = CAPTURED;
        b[8] = 0x7f;
        let p = Packet::new_unchecked(&b[..]);
        assert_eq!(p.resv7(), 0x7f);
        let repr = Repr::parse(&p).unwrap();
        let mut out = [0u8; 12];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, CAPTURED);
    }

    #[test]
    fn bth_deflection_tokens_live_beside_fecn_becn() {
        let mut b = CAPTURED;
        b[4] = 0x80 | 0x04;
        let mut p = Packet::new_unchecked(&mut b[..]);
        assert_eq!(p.deflection_tokens(), 4);
        assert!(p.fecn() && !p.becn());
        p.set_deflection_tokens(3);
        assert_eq!(
            p.into_inner()[4],
            0x83,
            "spending a token leaves FECN/BECN alone"
        );
    }
}
