//! Management Datagrams (MADs) of the Communication Management class: the 256-byte messages
//! rdma_cm exchanges to connect and disconnect RC QPs.
//!
//! Source: IBA Vol. 1 §13.4.2–§13.4.3 (MAD format and common header), §13.4.5 (methods),
//! §13.4.8.1 (ClassPortInfo), §12.6 (CM messages; REQ Table 106, MRA Table 107, REJ Table 108,
//! REP Table 110, RTU Table 111, DREQ Table 112, DREP Table 113), §12.11 (Service ID
//! Resolution: SIDR_REQ Table 115, SIDR_REP Table 116; the CM class is management class 0x07,
//! class version 2).
//!
//! # Where a MAD sits
//!
//! On RoCEv2 a CM MAD is the whole payload of a UD SEND Only packet (opcode 100) to QP1, the
//! General Services Interface:
//!
//! ```text
//! Ethernet | IP | UDP 4791 | BTH (DestQP 1, P_Key) | DETH (Q_Key 0x80010000, SrcQP 1) | MAD (256) | ICRC
//! ```
//!
//! [`super::packet`] and [`super::frame`] already parse that frame; [`super::RocePacket::payload`]
//! is the MAD. This module only reads and writes the 256 bytes; it holds no CM logic (state
//! machine, retries, timeouts: `crate::cm`).
//!
//! # Layout
//!
//! ```text
//!  0 BaseVersion | 1 MgmtClass | 2 ClassVersion | 3 R|Method
//!  4..6 Status | 6..8 ClassSpecific | 8..16 TransactionID
//! 16..18 AttributeID | 18..20 Reserved | 20..24 AttributeModifier | 24..256 Data (232 bytes)
//! ```
//!
//! Every attribute is a view over the 232 data bytes; its field offsets are those of the IBA
//! tables (byte 0 is the first data byte). Sub-byte fields are read and written by one
//! mechanism, `BitField`, declared once per field by the `mad_fields!` macro below: a byte
//! offset, a bit offset counted from the most significant bit (IBA's `Byte[Bit]` notation) and a
//! width.
//!
//! # What parsing rejects
//!
//! * fewer than 256 bytes: [`Error::Truncated`]`(`[`Header::Mad`](crate::wire::Header::Mad)`)`;
//! * BaseVersion other than 1: [`MadError::BaseVersion`];
//! * for [`CmRepr`]: MgmtClass other than 0x07 ([`MadError::Class`]), ClassVersion other than 2
//!   ([`MadError::ClassVersion`]), an AttributeID that is not ClassPortInfo or REQ … DREP
//!   ([`MadError::Attribute`]).
//!
//! The method is data, not checked: answering a REQ sent with the wrong method is the CM's job.
//! Reserved fields are ignored on receipt and written as zero.
//!
//! Deviations: none. Not implemented: LAP/APR (§12.8) attributes.

use super::{Error, Psn, Qpn};
use core::fmt;

/// Length of every MAD on QP0/QP1 (IBA §13.4.2).
pub const MAD_LEN: usize = 256;
/// Length of the MAD common header.
pub const HEADER_LEN: usize = 24;
/// Length of the data that follows the common header.
pub const DATA_LEN: usize = MAD_LEN - HEADER_LEN;
/// The only BaseVersion of IBA MADs (§13.4.3).
pub const BASE_VERSION: u8 = 1;
/// The CM class version rdma_cm and this module speak (§12.11).
pub const CM_CLASS_VERSION: u8 = 2;
/// Q_Key of QP1, the GSI (IBA §13.5; Linux `IB_QP1_QKEY`): a CM MAD's DETH carries it, and its
/// high bit means it is a controlled Q_Key.
pub const GSI_Q_KEY: u32 = 0x8001_0000;
/// The default partition's full-member P_Key, which QP1 uses when no other partition applies
/// (the BTH P_Key of every MAD in `rping_cm.pcap`).
pub const DEFAULT_P_KEY: u16 = 0xffff;

/// Management classes (MgmtClass, §13.4.4).
pub mod mgmt_class {
    /// Subnet management, LID-routed.
    pub const SUBN_LID_ROUTED: u8 = 0x01;
    /// Subnet administration.
    pub const SUBN_ADM: u8 = 0x03;
    /// Performance management.
    pub const PERF: u8 = 0x04;
    /// Communication management.
    pub const CM: u8 = 0x07;
    /// Subnet management, directed route.
    pub const SUBN_DIRECTED_ROUTE: u8 = 0x81;
}

/// Methods (Method, §13.4.5); the top bit R marks a response.
pub mod method {
    /// Get(): read an attribute (ClassPortInfo).
    pub const GET: u8 = 0x01;
    /// Set(): write an attribute.
    pub const SET: u8 = 0x02;
    /// Send(): every CM message (REQ … DREP) travels with it.
    pub const SEND: u8 = 0x03;
    /// GetResp(): the answer to Get() and Set().
    pub const GET_RESP: u8 = 0x81;
}

/// Attribute IDs of the CM class (§12.6, §13.4.8.1).
pub mod attribute {
    /// ClassPortInfo.
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// ConnectRequest (REQ).
    pub const REQ: u16 = 0x0010;
    /// MsgRcptAck (MRA).
    pub const MRA: u16 = 0x0011;
    /// ConnectReject (REJ).
    pub const REJ: u16 = 0x0012;
    /// ConnectReply (REP).
    pub const REP: u16 = 0x0013;
    /// ReadyToUse (RTU).
    pub const RTU: u16 = 0x0014;
    /// DisconnectRequest (DREQ).
    pub const DREQ: u16 = 0x0015;
    /// DisconnectReply (DREP).
    pub const DREP: u16 = 0x0016;
    /// ServiceIDResolutionRequest (SIDR_REQ).
    pub const SIDR_REQ: u16 = 0x0017;
    /// ServiceIDResolutionResponse (SIDR_REP).
    pub const SIDR_REP: u16 = 0x0018;
}

/// Why bytes are not a MAD this module understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MadError {
    /// BaseVersion is not 1.
    #[error("MAD base version {0} (not 1)")]
    BaseVersion(u8),
    /// MgmtClass is not Communication Management (0x07).
    #[error("MAD class {0:#04x} is not CM (0x07)")]
    Class(u8),
    /// The CM ClassVersion is not 2.
    #[error("CM class version {0} (not 2)")]
    ClassVersion(u8),
    /// The AttributeID is none of ClassPortInfo, REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ,
    /// SIDR_REP.
    #[error("unsupported CM attribute {0:#06x}")]
    Attribute(u16),
}

// ---------------------------------------------------------------------------------------------
// The one bit-field mechanism

/// A field of at most 32 bits, big-endian, that starts `bit` bits (0 = most significant) into
/// byte `byte` and spans `width` bits: IBA's `Byte[Bit]` offset and length.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BitField {
    byte: usize,
    bit: u32,
    width: u32,
}

impl BitField {
    /// A field; evaluated in const context, so a bad declaration fails the build.
    pub(crate) const fn new(byte: usize, bit: u32, width: u32) -> Self {
        assert!(bit < 8 && width >= 1 && bit + width <= 32);
        BitField { byte, bit, width }
    }
    const fn span(self) -> usize {
        (self.bit + self.width).div_ceil(8) as usize
    }
    const fn shift(self) -> u32 {
        self.span() as u32 * 8 - self.bit - self.width
    }
    const fn mask(self) -> u64 {
        (1u64 << self.width) - 1
    }
    fn load(self, b: &[u8]) -> u64 {
        b[self.byte..self.byte + self.span()]
            .iter()
            .fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
    }
    /// Reads the field; the caller's view has proved `b` long enough.
    pub(crate) fn get(self, b: &[u8]) -> u32 {
        ((self.load(b) >> self.shift()) & self.mask()) as u32
    }
    /// Writes the low `width` bits of `v`, leaving the neighbouring bits as they were.
    pub(crate) fn set(self, b: &mut [u8], v: u32) {
        let acc = (self.load(b) & !(self.mask() << self.shift()))
            | ((u64::from(v) & self.mask()) << self.shift());
        let span = self.span();
        for (k, out) in b[self.byte..self.byte + span].iter_mut().enumerate() {
            *out = (acc >> (8 * (span - 1 - k))) as u8;
        }
    }
}

/// A type a [`BitField`] holds.
pub(crate) trait FieldValue: Copy {
    fn from_bits(v: u32) -> Self;
    fn to_bits(self) -> u32;
}

impl FieldValue for u8 {
    fn from_bits(v: u32) -> Self {
        v as u8
    }
    fn to_bits(self) -> u32 {
        self.into()
    }
}
impl FieldValue for u16 {
    fn from_bits(v: u32) -> Self {
        v as u16
    }
    fn to_bits(self) -> u32 {
        self.into()
    }
}
impl FieldValue for u32 {
    fn from_bits(v: u32) -> Self {
        v
    }
    fn to_bits(self) -> u32 {
        self
    }
}
impl FieldValue for bool {
    fn from_bits(v: u32) -> Self {
        v != 0
    }
    fn to_bits(self) -> u32 {
        self.into()
    }
}
impl FieldValue for Qpn {
    fn from_bits(v: u32) -> Self {
        Qpn::new(v)
    }
    fn to_bits(self) -> u32 {
        self.value()
    }
}
impl FieldValue for Psn {
    fn from_bits(v: u32) -> Self {
        Psn::new(v)
    }
    fn to_bits(self) -> u32 {
        self.value()
    }
}

/// A view over a MAD's attribute data (or a part of it) of a fixed length.
macro_rules! mad_view {
    ($name:ident, $len:expr, $doc:literal) => {
        #[doc = $doc]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Length of the bytes this view reads.
            pub const LEN: usize = $len;

            /// Wraps a buffer without checking its length; getters may then panic.
            pub const fn new_unchecked(buffer: T) -> Self {
                $name { buffer }
            }

            /// Wraps a buffer after [`Self::check_len`]; use this on received bytes.
            pub fn new_checked(buffer: T) -> Result<Self, crate::wire::Error> {
                let p = Self::new_unchecked(buffer);
                p.check_len()?;
                Ok(p)
            }

            /// Ensures every getter is in bounds.
            pub fn check_len(&self) -> Result<(), crate::wire::Error> {
                if self.buffer.as_ref().len() < Self::LEN {
                    Err(crate::wire::Error::Truncated(crate::wire::Header::Mad))
                } else {
                    Ok(())
                }
            }

            /// Gives back the underlying buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}

/// Getters and setters of bit fields, each declared once as `(byte, bit, width)`.
macro_rules! mad_fields {
    ($view:ident { $( $(#[$doc:meta])* $get:ident, $set:ident: $ty:ty = ($byte:expr, $bit:expr, $width:expr); )* }) => {
        impl<T: AsRef<[u8]>> $view<T> {
            $(
                $(#[$doc])*
                pub fn $get(&self) -> $ty {
                    const F: crate::wire::mad::BitField =
                        crate::wire::mad::BitField::new($byte, $bit, $width);
                    <$ty as crate::wire::mad::FieldValue>::from_bits(F.get(self.buffer.as_ref()))
                }
            )*
        }
        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            $(
                #[doc = concat!("Sets [`Self::", stringify!($get), "`] (excess high bits are dropped).")]
                pub fn $set(&mut self, v: $ty) {
                    const F: crate::wire::mad::BitField =
                        crate::wire::mad::BitField::new($byte, $bit, $width);
                    F.set(self.buffer.as_mut(), crate::wire::mad::FieldValue::to_bits(v));
                }
            )*
        }
    };
}

/// Getters and setters of byte-aligned fields: 64-bit integers and byte arrays (GIDs, private
/// data), declared once as a byte range.
macro_rules! mad_bytes {
    ($view:ident { $( $(#[$doc:meta])* $get:ident, $set:ident: u64 = $start:expr; )* } { $( $(#[$adoc:meta])* $aget:ident, $aset:ident: [u8; $n:expr] = $astart:expr; )* }) => {
        impl<T: AsRef<[u8]>> $view<T> {
            $(
                $(#[$doc])*
                pub fn $get(&self) -> u64 {
                    crate::wire::field::u64_at(self.buffer.as_ref(), $start..$start + 8)
                }
            )*
            $(
                $(#[$adoc])*
                pub fn $aget(&self) -> &[u8] {
                    &self.buffer.as_ref()[$astart..$astart + $n]
                }
            )*
        }
        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            $(
                #[doc = concat!("Sets [`Self::", stringify!($get), "`].")]
                pub fn $set(&mut self, v: u64) {
                    crate::wire::field::set_u64(self.buffer.as_mut(), $start..$start + 8, v);
                }
            )*
            $(
                #[doc = concat!("Sets [`Self::", stringify!($aget), "`].")]
                pub fn $aset(&mut self, v: &[u8; $n]) {
                    self.buffer.as_mut()[$astart..$astart + $n].copy_from_slice(v);
                }
            )*
        }
    };
}

/// Copies a fixed-size field out of a view's slice (its length is the view's declaration).
pub(crate) fn array<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&s[..N]);
    a
}

/// Reads a GID (an IPv6 address on RoCEv2, Annex A17.3.1) from 16 bytes.
pub(crate) fn gid(s: &[u8]) -> core::net::Ipv6Addr {
    core::net::Ipv6Addr::from(array::<16>(s))
}

pub mod class_port_info;
pub mod cm_connect;
pub mod cm_disconnect;
pub mod cm_sidr;

use class_port_info::ClassPortInfoRepr;
use cm_connect::{MraRepr, RejRepr, RepRepr, ReqRepr, RtuRepr};
use cm_disconnect::{DrepRepr, DreqRepr};
use cm_sidr::{SidrRepRepr, SidrReqRepr};

// ---------------------------------------------------------------------------------------------
// The common header

mad_view!(
    Packet,
    MAD_LEN,
    "A read/write view of a whole 256-byte MAD: the common header and the attribute data."
);

mad_fields!(Packet {
    /// BaseVersion (byte 0): the MAD format version, 1.
    base_version, set_base_version: u8 = (0, 0, 8);
    /// MgmtClass (byte 1): the management class, 0x07 for CM ([`mgmt_class`]).
    mgmt_class, set_mgmt_class: u8 = (1, 0, 8);
    /// ClassVersion (byte 2): the class's version, 2 for CM.
    class_version, set_class_version: u8 = (2, 0, 8);
    /// Method (byte 3, with the response bit R at bit 0): what to do with the attribute
    /// ([`method`]).
    method, set_method: u8 = (3, 0, 8);
    /// Status (bytes 4–5): 0 on requests; the outcome on responses (§13.4.7).
    status, set_status: u16 = (4, 0, 16);
    /// ClassSpecific (bytes 6–7): 0 for CM.
    class_specific, set_class_specific: u16 = (6, 0, 16);
    /// AttributeID (bytes 16–17): which attribute the data holds ([`attribute`]).
    attribute_id, set_attribute_id: u16 = (16, 0, 16);
    /// Reserved (bytes 18–19): ignored on receipt.
    reserved, set_reserved: u16 = (18, 0, 16);
    /// AttributeModifier (bytes 20–23): 0 for every CM attribute.
    attribute_modifier, set_attribute_modifier: u32 = (20, 0, 32);
});

mad_bytes!(Packet {
    /// TransactionID (bytes 8–15): chosen by the requester, echoed by the responder; the CM
    /// keeps one per connection attempt.
    transaction_id, set_transaction_id: u64 = 8;
} {
    /// The attribute data (bytes 24–255).
    data, set_data: [u8; DATA_LEN] = HEADER_LEN;
});

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// The attribute data, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..MAD_LEN]
    }
}

/// The meaning of a MAD common header, of any class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderRepr {
    /// MgmtClass.
    pub mgmt_class: u8,
    /// ClassVersion.
    pub class_version: u8,
    /// Method (R bit included).
    pub method: u8,
    /// Status.
    pub status: u16,
    /// ClassSpecific.
    pub class_specific: u16,
    /// TransactionID.
    pub transaction_id: u64,
    /// AttributeID.
    pub attribute_id: u16,
    /// AttributeModifier.
    pub attribute_modifier: u32,
}

impl HeaderRepr {
    /// Reads the common header; rejects a BaseVersion other than 1.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self, Error> {
        if p.base_version() != BASE_VERSION {
            return Err(Error::BadMad(MadError::BaseVersion(p.base_version())));
        }
        Ok(HeaderRepr {
            mgmt_class: p.mgmt_class(),
            class_version: p.class_version(),
            method: p.method(),
            status: p.status(),
            class_specific: p.class_specific(),
            transaction_id: p.transaction_id(),
            attribute_id: p.attribute_id(),
            attribute_modifier: p.attribute_modifier(),
        })
    }
    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the common header (BaseVersion 1, Reserved 0); leaves the data alone.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_base_version(BASE_VERSION);
        p.set_mgmt_class(self.mgmt_class);
        p.set_class_version(self.class_version);
        p.set_method(self.method);
        p.set_status(self.status);
        p.set_class_specific(self.class_specific);
        p.set_transaction_id(self.transaction_id);
        p.set_attribute_id(self.attribute_id);
        p.set_reserved(0);
        p.set_attribute_modifier(self.attribute_modifier);
    }
}

impl fmt::Display for HeaderRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MAD class={:#04x} v{} method={:#04x} status={:#06x} tid={:#018x} attr={:#06x} mod={:#x}",
            self.mgmt_class,
            self.class_version,
            self.method,
            self.status,
            self.transaction_id,
            self.attribute_id,
            self.attribute_modifier
        )
    }
}

// ---------------------------------------------------------------------------------------------
// A whole CM MAD

/// The attribute a CM MAD carries.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum CmAttribute {
    ClassPortInfo(ClassPortInfoRepr),
    Req(ReqRepr),
    Mra(MraRepr),
    Rej(RejRepr),
    Rep(RepRepr),
    Rtu(RtuRepr),
    Dreq(DreqRepr),
    Drep(DrepRepr),
    SidrReq(SidrReqRepr),
    SidrRep(SidrRepRepr),
}

impl CmAttribute {
    /// Its AttributeID.
    pub const fn attribute_id(&self) -> u16 {
        match self {
            CmAttribute::ClassPortInfo(_) => attribute::CLASS_PORT_INFO,
            CmAttribute::Req(_) => attribute::REQ,
            CmAttribute::Mra(_) => attribute::MRA,
            CmAttribute::Rej(_) => attribute::REJ,
            CmAttribute::Rep(_) => attribute::REP,
            CmAttribute::Rtu(_) => attribute::RTU,
            CmAttribute::Dreq(_) => attribute::DREQ,
            CmAttribute::Drep(_) => attribute::DREP,
            CmAttribute::SidrReq(_) => attribute::SIDR_REQ,
            CmAttribute::SidrRep(_) => attribute::SIDR_REP,
        }
    }
}

/// The meaning of a whole CM MAD: MgmtClass 0x07, ClassVersion 2, and one attribute. The
/// AttributeID is the attribute's; the other header fields are data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmRepr {
    /// Method: [`method::SEND`] for REQ … SIDR_REP, Get/Set/GetResp for ClassPortInfo.
    pub method: u8,
    /// Status.
    pub status: u16,
    /// ClassSpecific.
    pub class_specific: u16,
    /// TransactionID.
    pub transaction_id: u64,
    /// AttributeModifier.
    pub attribute_modifier: u32,
    /// The attribute.
    pub attribute: CmAttribute,
}

impl CmRepr {
    /// Reads a CM MAD; see the module doc for what it rejects.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self, Error> {
        let h = HeaderRepr::parse(p)?;
        if h.mgmt_class != mgmt_class::CM {
            return Err(Error::BadMad(MadError::Class(h.mgmt_class)));
        }
        if h.class_version != CM_CLASS_VERSION {
            return Err(Error::BadMad(MadError::ClassVersion(h.class_version)));
        }
        let d = p.data();
        let attribute = match h.attribute_id {
            attribute::CLASS_PORT_INFO => CmAttribute::ClassPortInfo(ClassPortInfoRepr::parse(
                &class_port_info::Packet::new_checked(d)?,
            )?),
            attribute::REQ => {
                CmAttribute::Req(ReqRepr::parse(&cm_connect::ReqPacket::new_checked(d)?)?)
            }
            attribute::MRA => {
                CmAttribute::Mra(MraRepr::parse(&cm_connect::MraPacket::new_checked(d)?)?)
            }
            attribute::REJ => {
                CmAttribute::Rej(RejRepr::parse(&cm_connect::RejPacket::new_checked(d)?)?)
            }
            attribute::REP => {
                CmAttribute::Rep(RepRepr::parse(&cm_connect::RepPacket::new_checked(d)?)?)
            }
            attribute::RTU => {
                CmAttribute::Rtu(RtuRepr::parse(&cm_connect::RtuPacket::new_checked(d)?)?)
            }
            attribute::DREQ => CmAttribute::Dreq(DreqRepr::parse(
                &cm_disconnect::DreqPacket::new_checked(d)?,
            )?),
            attribute::DREP => CmAttribute::Drep(DrepRepr::parse(
                &cm_disconnect::DrepPacket::new_checked(d)?,
            )?),
            attribute::SIDR_REQ => CmAttribute::SidrReq(SidrReqRepr::parse(
                &cm_sidr::SidrReqPacket::new_checked(d)?,
            )?),
            attribute::SIDR_REP => CmAttribute::SidrRep(SidrRepRepr::parse(
                &cm_sidr::SidrRepPacket::new_checked(d)?,
            )?),
            other => return Err(Error::BadMad(MadError::Attribute(other))),
        };
        Ok(CmRepr {
            method: h.method,
            status: h.status,
            class_specific: h.class_specific,
            transaction_id: h.transaction_id,
            attribute_modifier: h.attribute_modifier,
            attribute,
        })
    }

    /// Reads a CM MAD from bytes (a UD payload): [`Packet::new_checked`] then [`Self::parse`].
    pub fn parse_bytes(bytes: &[u8]) -> Result<Self, Error> {
        Self::parse(&Packet::new_checked(bytes)?)
    }

    /// The common header this MAD is sent with.
    pub const fn header(&self) -> HeaderRepr {
        HeaderRepr {
            mgmt_class: mgmt_class::CM,
            class_version: CM_CLASS_VERSION,
            method: self.method,
            status: self.status,
            class_specific: self.class_specific,
            transaction_id: self.transaction_id,
            attribute_id: self.attribute.attribute_id(),
            attribute_modifier: self.attribute_modifier,
        }
    }

    /// Bytes [`Self::emit`] writes: always 256.
    pub const fn buffer_len(&self) -> usize {
        MAD_LEN
    }

    /// Writes the whole MAD, reserved bits and unused data zero.
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than [`Self::buffer_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        self.header().emit(p);
        let d = p.data_mut();
        d.fill(0);
        match &self.attribute {
            CmAttribute::ClassPortInfo(r) => r.emit(&mut class_port_info::Packet::new_unchecked(d)),
            CmAttribute::Req(r) => r.emit(&mut cm_connect::ReqPacket::new_unchecked(d)),
            CmAttribute::Mra(r) => r.emit(&mut cm_connect::MraPacket::new_unchecked(d)),
            CmAttribute::Rej(r) => r.emit(&mut cm_connect::RejPacket::new_unchecked(d)),
            CmAttribute::Rep(r) => r.emit(&mut cm_connect::RepPacket::new_unchecked(d)),
            CmAttribute::Rtu(r) => r.emit(&mut cm_connect::RtuPacket::new_unchecked(d)),
            CmAttribute::Dreq(r) => r.emit(&mut cm_disconnect::DreqPacket::new_unchecked(d)),
            CmAttribute::Drep(r) => r.emit(&mut cm_disconnect::DrepPacket::new_unchecked(d)),
            CmAttribute::SidrReq(r) => r.emit(&mut cm_sidr::SidrReqPacket::new_unchecked(d)),
            CmAttribute::SidrRep(r) => r.emit(&mut cm_sidr::SidrRepPacket::new_unchecked(d)),
        }
    }
}

impl fmt::Display for CmRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.header())?;
        match &self.attribute {
            CmAttribute::ClassPortInfo(r) => write!(f, "{r}"),
            CmAttribute::Req(r) => write!(f, "{r}"),
            CmAttribute::Mra(r) => write!(f, "{r}"),
            CmAttribute::Rej(r) => write!(f, "{r}"),
            CmAttribute::Rep(r) => write!(f, "{r}"),
            CmAttribute::Rtu(r) => write!(f, "{r}"),
            CmAttribute::Dreq(r) => write!(f, "{r}"),
            CmAttribute::Drep(r) => write!(f, "{r}"),
            CmAttribute::SidrReq(r) => write!(f, "{r}"),
            CmAttribute::SidrRep(r) => write!(f, "{r}"),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
