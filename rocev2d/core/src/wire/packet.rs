//! A whole RoCEv2 transport packet: the UDP payload from the BTH to the ICRC.
//!
//! Source: IBA Vol. 1 §9.2–§9.3 (header order), §9.2 PadCnt, RoCEv2 Annex A17.4 (the UDP
//! payload is the IB transport packet without LRH/GRH, followed by the ICRC).
//!
//! [`Packet`] proves every header of the opcode's [`Layout`] in bounds and splits off payload,
//! pad and ICRC; [`Repr`] is the meaning of all headers together. Neither computes the ICRC,
//! which also covers the IP and UDP headers: that is [`super::frame`]'s job (or
//! [`super::datagram`]'s, for packets whose headers a UDP socket stripped).
//!
//! Deviations: none.

use super::{
    AethPacket, AethRepr, AtomicAckEthPacket, AtomicAckEthRepr, AtomicEthPacket, AtomicEthRepr,
    BthPacket, BthRepr, CnpPacket, DethPacket, DethRepr, Error, ExtPacket, ExtRepr, IethPacket,
    IethRepr, ImmDtPacket, ImmDtRepr, Layout, RethPacket, RethRepr, ext,
};
use core::fmt;
use core::ops::Range;

/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

/// Offsets of each header present in a packet, from the opcode's layout and the REXT length.
///
/// A [`Packet`] keeps neither a copy of this nor a pointer to it: the checked view is moved
/// through every parse layer of the receive path, where a stored table (160 bytes of
/// `Option<usize>` at first, then 36 of `u16`) cost more to copy, and to read back across the
/// narrow stores that built it, than looking it up. Its accessors read one field of the
/// opcode's entry in [`OFFSETS`] (indexed by the checked opcode byte) and add the REXT length;
/// building the whole struct per accessor, as an out-of-line call returning it through memory,
/// was 7–9% of the receive path's header work. No offset exceeds `u16`: the REXT is at most
/// 255 · 4 bytes and the other headers add up to 128.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Offsets {
    /// Length of the REXT header, which follows the BTH; 0 without one.
    ext_len: u16,
    deth: Option<u16>,
    reth: Option<u16>,
    atomic_eth: Option<u16>,
    aeth: Option<u16>,
    atomic_ack_eth: Option<u16>,
    immdt: Option<u16>,
    ieth: Option<u16>,
    cnp: Option<u16>,
    payload: u16,
}

#[inline]
const fn offsets(layout: &Layout, ext_len: usize) -> Offsets {
    /// The next header's offset when it is present, moving `at` past it.
    const fn place(at: &mut u16, present: bool, len: usize) -> Option<u16> {
        if !present {
            return None;
        }
        let here = *at;
        *at += len as u16;
        Some(here)
    }
    // Lossless: `ext_len` is a REXT length (at most 1020, see `ExtPacket::header_len`).
    let ext_len = ext_len as u16;
    let mut at = BthRepr::LEN as u16 + ext_len;
    Offsets {
        ext_len,
        deth: place(&mut at, layout.deth, DethRepr::LEN),
        reth: place(&mut at, layout.reth, RethRepr::LEN),
        atomic_eth: place(&mut at, layout.atomic_eth, AtomicEthRepr::LEN),
        aeth: place(&mut at, layout.aeth, AethRepr::LEN),
        atomic_ack_eth: place(&mut at, layout.atomic_ack_eth, AtomicAckEthRepr::LEN),
        immdt: place(&mut at, layout.immdt, ImmDtRepr::LEN),
        ieth: place(&mut at, layout.ieth, IethRepr::LEN),
        cnp: place(&mut at, layout.cnp, 16),
        payload: at,
    }
}

/// Every opcode byte's [`Offsets`] without a REXT, computed at compile time (zeros for the
/// opcodes [`Packet::new_checked`] refuses, which never reach a lookup).
static OFFSETS: [Offsets; 256] = {
    let none = Offsets {
        ext_len: 0,
        deth: None,
        reth: None,
        atomic_eth: None,
        aeth: None,
        atomic_ack_eth: None,
        immdt: None,
        ieth: None,
        cnp: None,
        payload: 0,
    };
    let mut t = [none; 256];
    let mut i = 0;
    while i < 256 {
        if let Ok(l) = super::Opcode(i as u8).layout() {
            t[i] = offsets(&l, 0);
        }
        i += 1;
    }
    t
};

/// A checked view of a transport packet (BTH … ICRC).
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
    /// Length of the REXT header (0 without one).
    ext_len: u16,
    /// The opcode byte as checked, which indexes [`OFFSETS`] (kept rather than read back from
    /// the buffer, so the offsets always belong to the checked layout).
    opcode: u8,
    layout: &'static Layout,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks that the opcode is known, its headers are present, the pad fits the payload and an
    /// ICRC trailer follows. The ICRC itself is not verified here.
    ///
    /// Always inlined: called out of line (as `#[inline]` left it), its result went through
    /// memory, stored field by field and read back by the caller in one 16-byte load, which
    /// waited on those stores: half of `Frame::new_checked`'s samples.
    #[inline(always)]
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let b = buffer.as_ref();
        let bth = BthPacket::new_checked(b)?;
        let bth_repr = BthRepr::parse(&bth)?;
        let layout = bth_repr.opcode.layout_ref()?;
        let ext_len = if bth_repr.tver == ext::TVER {
            ExtPacket::new_checked(&b[BthRepr::LEN..])?.header_len()
        } else {
            0
        };
        // The opcode's entry, shifted by the REXT: the whole `Offsets` is built only to name
        // the header a short packet ends in.
        let min = usize::from(OFFSETS[usize::from(bth_repr.opcode.0)].payload) + ext_len + ICRC_LEN;
        if b.len() < min {
            let offsets = offsets(layout, ext_len);
            return Err(Error::Truncated(truncated_header(&offsets, b.len())));
        }
        let body = b.len() - min; // payload + pad
        let pad = bth_repr.pad_cnt as usize;
        if !layout.payload && body != 0 {
            return Err(Error::UnexpectedPayload);
        }
        // Every header is a multiple of 4 bytes and PadCnt aligns the payload to 4 (IBA §9.2),
        // so a well-formed transport packet is a multiple of 4 long, and PadCnt is the one
        // value that makes it so.
        if pad > body || b.len() % 4 != 0 {
            return Err(Error::BadPadCount);
        }
        Ok(Packet {
            buffer,
            // Lossless: a REXT length, at most 1020 (`ExtPacket::header_len`).
            ext_len: ext_len as u16,
            opcode: bth_repr.opcode.0,
            layout,
        })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// The opcode's entry in [`OFFSETS`]; its offsets are shifted by the REXT length
    /// ([`Self::at`]).
    #[inline]
    fn offsets(&self) -> &'static Offsets {
        &OFFSETS[usize::from(self.opcode)]
    }
    /// Where a header lies, from the opcode's entry without a REXT.
    #[inline]
    fn at(&self, at: Option<u16>) -> Option<usize> {
        at.map(|at| usize::from(at) + usize::from(self.ext_len))
    }
    /// The opcode's header layout.
    pub fn layout(&self) -> Layout {
        *self.layout
    }
    /// The BTH.
    pub fn bth(&self) -> BthPacket<&[u8]> {
        BthPacket::new_unchecked(&self.b()[..BthRepr::LEN])
    }
    /// The REXT header, when BTH.TVer is 1.
    pub fn ext(&self) -> Option<ExtPacket<&[u8]>> {
        let len = usize::from(self.ext_len);
        (len > 0).then(|| ExtPacket::new_unchecked(&self.b()[BthRepr::LEN..BthRepr::LEN + len]))
    }
    /// The DETH, for UD opcodes.
    pub fn deth(&self) -> Option<DethPacket<&[u8]>> {
        self.at(self.offsets().deth)
            .map(|at| DethPacket::new_unchecked(&self.b()[at..]))
    }
    /// The RETH, for RDMA WRITE First/Only and READ requests.
    pub fn reth(&self) -> Option<RethPacket<&[u8]>> {
        self.at(self.offsets().reth)
            .map(|at| RethPacket::new_unchecked(&self.b()[at..]))
    }
    /// The AtomicETH, for CmpSwap and FetchAdd.
    pub fn atomic_eth(&self) -> Option<AtomicEthPacket<&[u8]>> {
        self.at(self.offsets().atomic_eth)
            .map(|at| AtomicEthPacket::new_unchecked(&self.b()[at..]))
    }
    /// The AETH, for ACKs and READ responses First/Last/Only.
    pub fn aeth(&self) -> Option<AethPacket<&[u8]>> {
        self.at(self.offsets().aeth)
            .map(|at| AethPacket::new_unchecked(&self.b()[at..]))
    }
    /// The AtomicAckETH, for ATOMIC Acknowledge.
    pub fn atomic_ack_eth(&self) -> Option<AtomicAckEthPacket<&[u8]>> {
        self.at(self.offsets().atomic_ack_eth)
            .map(|at| AtomicAckEthPacket::new_unchecked(&self.b()[at..]))
    }
    /// The ImmDt, for the with-immediate opcodes.
    pub fn immdt(&self) -> Option<ImmDtPacket<&[u8]>> {
        self.at(self.offsets().immdt)
            .map(|at| ImmDtPacket::new_unchecked(&self.b()[at..]))
    }
    /// The IETH, for SEND with Invalidate.
    pub fn ieth(&self) -> Option<IethPacket<&[u8]>> {
        self.at(self.offsets().ieth)
            .map(|at| IethPacket::new_unchecked(&self.b()[at..]))
    }
    /// Where the payload (without pad bytes) lies in the buffer.
    fn payload_range(&self) -> Range<usize> {
        let end = self.b().len() - ICRC_LEN - self.bth().pad_cnt() as usize;
        usize::from(self.offsets().payload) + usize::from(self.ext_len)..end
    }
    /// The payload without pad bytes.
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.payload_range()]
    }
    /// Gives back the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Everything the ICRC covers within the UDP payload: BTH up to the ICRC.
    pub fn icrc_covered(&self) -> &[u8] {
        &self.b()[..self.b().len() - ICRC_LEN]
    }
    /// The stored ICRC.
    pub fn icrc(&self) -> u32 {
        let b = self.b();
        let n = b.len();
        u32::from_le_bytes([b[n - 4], b[n - 3], b[n - 2], b[n - 1]])
    }
}

impl<'a> Packet<&'a [u8]> {
    /// The payload, borrowed for as long as the underlying bytes.
    pub fn payload_slice(&self) -> &'a [u8] {
        &self.buffer[self.payload_range()]
    }
}

/// Which header a short buffer ends in, for a precise `Truncated` reason.
fn truncated_header(o: &Offsets, len: usize) -> super::Header {
    use super::Header as H;
    let headers = [
        (o.deth, DethRepr::LEN, H::Deth),
        (o.reth, RethRepr::LEN, H::Reth),
        (o.atomic_eth, AtomicEthRepr::LEN, H::AtomicEth),
        (o.aeth, AethRepr::LEN, H::Aeth),
        (o.atomic_ack_eth, AtomicAckEthRepr::LEN, H::AtomicAckEth),
        (o.immdt, ImmDtRepr::LEN, H::ImmDt),
        (o.ieth, IethRepr::LEN, H::Ieth),
        (o.cnp, 16, H::Cnp),
    ];
    headers
        .into_iter()
        .find_map(|(at, n, h)| at.filter(|&at| len < usize::from(at) + n).map(|_| h))
        .unwrap_or(H::Icrc)
}

/// The meaning of every header of a transport packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Base transport header.
    pub bth: BthRepr,
    /// rocev2 extension (only with BTH.TVer = 1).
    pub ext: Option<ExtRepr>,
    /// Datagram ETH (UD).
    pub deth: Option<DethRepr>,
    /// RDMA ETH.
    pub reth: Option<RethRepr>,
    /// Atomic ETH.
    pub atomic_eth: Option<AtomicEthRepr>,
    /// ACK ETH.
    pub aeth: Option<AethRepr>,
    /// Atomic ACK ETH.
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    /// Immediate data.
    pub immdt: Option<ImmDtRepr>,
    /// Invalidate ETH.
    pub ieth: Option<IethRepr>,
}

impl Repr {
    /// A packet with just this BTH; add extension headers with struct update syntax.
    pub const fn new(bth: BthRepr) -> Repr {
        Repr {
            bth,
            ext: None,
            deth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            immdt: None,
            ieth: None,
        }
    }

    /// Reads all headers of a checked packet.
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, Error> {
        Ok(Repr {
            bth: BthRepr::parse(&p.bth())?,
            ext: p.ext().map(|e| ExtRepr::parse(&e)).transpose()?,
            deth: p.deth().map(|h| DethRepr::parse(&h)).transpose()?,
            reth: p.reth().map(|h| RethRepr::parse(&h)).transpose()?,
            atomic_eth: p
                .atomic_eth()
                .map(|h| AtomicEthRepr::parse(&h))
                .transpose()?,
            aeth: p.aeth().map(|h| AethRepr::parse(&h)).transpose()?,
            atomic_ack_eth: p
                .atomic_ack_eth()
                .map(|h| AtomicAckEthRepr::parse(&h))
                .transpose()?,
            immdt: p.immdt().map(|h| ImmDtRepr::parse(&h)).transpose()?,
            ieth: p.ieth().map(|h| IethRepr::parse(&h)).transpose()?,
        })
    }

    /// The opcode's layout, after checking that exactly its headers are present and that the
    /// TVer agrees with the presence of a REXT header.
    #[inline(always)]
    pub fn layout(&self) -> Result<Layout, Error> {
        let l = self.bth.opcode.layout().map_err(|_| Error::BadRepr)?;
        let matches = l.deth == self.deth.is_some()
            && l.reth == self.reth.is_some()
            && l.atomic_eth == self.atomic_eth.is_some()
            && l.aeth == self.aeth.is_some()
            && l.atomic_ack_eth == self.atomic_ack_eth.is_some()
            && l.immdt == self.immdt.is_some()
            && l.ieth == self.ieth.is_some()
            && (self.bth.tver == ext::TVER) == self.ext.is_some();
        // Values the wire fields cannot carry are refused rather than truncated.
        let in_range = self.bth.deflection_tokens <= 0x3f
            && self.bth.tver <= ext::TVER
            && !matches!(self.aeth.map(|a| a.syndrome), Some(super::Syndrome::Nak(super::NakCode::Reserved(c))) if !(5..=0x1f).contains(&c))
            && self
                .ext
                .and_then(|e| e.lookahead)
                .is_none_or(|l| (l.member_count as usize) <= ext::MAX_LOOKAHEAD);
        if matches && in_range {
            Ok(l)
        } else {
            Err(Error::BadRepr)
        }
    }

    /// Length of the headers before the payload.
    pub fn header_len(&self) -> Result<usize, Error> {
        let l = self.layout()?;
        Ok(self.header_len_for(&l))
    }

    #[inline]
    fn header_len_for(&self, l: &Layout) -> usize {
        BthRepr::LEN + self.ext.as_ref().map_or(0, |e| e.buffer_len()) + l.headers_len()
    }

    /// Pad bytes a payload of `payload_len` needs (IBA §9.2: align to 4 bytes).
    pub const fn pad_for(payload_len: usize) -> usize {
        (4 - payload_len % 4) % 4
    }

    /// Bytes [`Self::emit`] writes for a payload of `payload_len`, ICRC included; an error when
    /// the repr cannot be emitted ([`Self::layout`]) or its opcode carries no payload.
    #[inline]
    pub fn buffer_len(&self, payload_len: usize) -> Result<usize, Error> {
        let l = self.layout()?;
        if !l.payload && payload_len != 0 {
            return Err(Error::BadRepr);
        }
        Ok(self.header_len_for(&l) + payload_len + Self::pad_for(payload_len) + ICRC_LEN)
    }

    /// Writes the headers into `buf` (exactly `buffer_len(payload_len)` long), sets PadCnt from
    /// the payload length, zeroes pad and ICRC, and returns the range where the caller puts
    /// the payload. This lets the engine copy payload straight from memory into the frame.
    pub fn emit_headers(&self, buf: &mut [u8], payload_len: usize) -> Result<Range<usize>, Error> {
        let total = self.buffer_len(payload_len)?;
        self.emit_sized(buf, payload_len, total)
    }

    /// [`Self::emit_headers`] for a caller that already validated this repr and took `total`
    /// from [`Self::buffer_len`] (the frame builder, which needs the length first for the IP
    /// and UDP headers). The offsets are read from the opcode's entry in [`OFFSETS`], as the
    /// receive path reads them, rather than handed over or computed again from the layout:
    /// moving the returned `Layout` out of its `Result` stalled on store forwarding.
    #[inline]
    pub(super) fn emit_sized(
        &self,
        buf: &mut [u8],
        payload_len: usize,
        total: usize,
    ) -> Result<Range<usize>, Error> {
        if buf.len() != total {
            return Err(Error::BadRepr);
        }
        // Refused by `buffer_len` already; checked again so this never reads a zero entry.
        self.bth.opcode.layout_ref().map_err(|_| Error::BadRepr)?;
        let mut bth = self.bth;
        bth.pad_cnt = Self::pad_for(payload_len) as u8;
        bth.emit(&mut BthPacket::new_unchecked(&mut buf[..BthRepr::LEN]));
        let ext_len = self.ext.as_ref().map_or(0, |e| e.buffer_len());
        if let Some(e) = &self.ext {
            e.emit(&mut ExtPacket::new_unchecked(
                &mut buf[BthRepr::LEN..BthRepr::LEN + ext_len],
            ));
        }
        let o = &OFFSETS[usize::from(self.bth.opcode.0)];
        let at = |h: Option<u16>| h.map(|a| usize::from(a) + ext_len);
        if let (Some(at), Some(h)) = (at(o.deth), &self.deth) {
            h.emit(&mut DethPacket::new_unchecked(
                &mut buf[at..at + DethRepr::LEN],
            ));
        }
        if let (Some(at), Some(h)) = (at(o.reth), &self.reth) {
            h.emit(&mut RethPacket::new_unchecked(
                &mut buf[at..at + RethRepr::LEN],
            ));
        }
        if let (Some(at), Some(h)) = (at(o.atomic_eth), &self.atomic_eth) {
            h.emit(&mut AtomicEthPacket::new_unchecked(
                &mut buf[at..at + AtomicEthRepr::LEN],
            ));
        }
        if let (Some(at), Some(h)) = (at(o.aeth), &self.aeth) {
            h.emit(&mut AethPacket::new_unchecked(
                &mut buf[at..at + AethRepr::LEN],
            ));
        }
        if let (Some(at), Some(h)) = (at(o.atomic_ack_eth), &self.atomic_ack_eth) {
            h.emit(&mut AtomicAckEthPacket::new_unchecked(
                &mut buf[at..at + AtomicAckEthRepr::LEN],
            ));
        }
        if let (Some(at), Some(h)) = (at(o.immdt), &self.immdt) {
            h.emit(&mut ImmDtPacket::new_unchecked(
                &mut buf[at..at + ImmDtRepr::LEN],
            ));
        }
        if let (Some(at), Some(h)) = (at(o.ieth), &self.ieth) {
            h.emit(&mut IethPacket::new_unchecked(
                &mut buf[at..at + IethRepr::LEN],
            ));
        }
        if let Some(at) = at(o.cnp) {
            buf[at..at + CnpPacket::<&[u8]>::LEN].fill(0);
        }
        let at = usize::from(o.payload) + ext_len;
        let payload = at..at + payload_len;
        // Pad (0–3 bytes) and ICRC, zeroed as the last eight bytes when the payload covers the
        // rest (the caller writes it afterwards): a fill of a length known only at run time is
        // a call to `memset`.
        match total.checked_sub(8) {
            Some(from) if from >= payload.start => buf[from..].copy_from_slice(&[0; 8]),
            _ => buf[payload.end..].fill(0),
        }
        Ok(payload)
    }

    /// Writes headers and payload; the ICRC bytes are left zero for the frame layer.
    pub fn emit(&self, buf: &mut [u8], payload: &[u8]) -> Result<(), Error> {
        let range = self.emit_headers(buf, payload.len())?;
        buf[range].copy_from_slice(payload);
        Ok(())
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bth)?;
        if let Some(h) = &self.ext {
            write!(f, " | {h}")?;
        }
        if let Some(h) = &self.deth {
            write!(f, " | {h}")?;
        }
        if let Some(h) = &self.reth {
            write!(f, " | {h}")?;
        }
        if let Some(h) = &self.atomic_eth {
            write!(f, " | {h}")?;
        }
        if let Some(h) = &self.aeth {
            write!(f, " | {h}")?;
        }
        if let Some(h) = &self.atomic_ack_eth {
            write!(f, " | AtomicAckETH orig={:#x}", h.orig_data)?;
        }
        if let Some(h) = &self.immdt {
            write!(f, " | ImmDt {:#010x}", h.imm)?;
        }
        if let Some(h) = &self.ieth {
            write!(f, " | IETH rkey={:#010x}", h.r_key)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{
        Credits, Header, Msn, Opcode, Operation, Psn, Qpn, Syndrome, Transport, cnp,
        ext::MultipathAck,
    };

    fn bth(op: Opcode) -> BthRepr {
        BthRepr {
            ack_req: true,
            ..BthRepr::new(op, 0xffff, Qpn::new(0x11), Psn::new(0x37cf8a))
        }
    }

    fn round_trip(repr: Repr, payload: &[u8]) -> std::vec::Vec<u8> {
        let mut buf = std::vec![0xeeu8; repr.buffer_len(payload.len()).unwrap()];
        repr.emit(&mut buf, payload).unwrap();
        let p = Packet::new_checked(&buf[..]).unwrap();
        let mut want = repr;
        want.bth.pad_cnt = Repr::pad_for(payload.len()) as u8;
        assert_eq!(Repr::parse(&p).unwrap(), want);
        assert_eq!(p.payload(), payload);
        buf
    }

    #[test]
    fn packet_write_only_with_imm_round_trip() {
        let repr = Repr {
            reth: Some(RethRepr {
                va: 0x1000,
                r_key: 0x2ba,
                dma_len: 5,
            }),
            immdt: Some(ImmDtRepr { imm: 7 }),
            ..Repr::new(bth(Opcode::rc(Operation::RdmaWriteOnlyWithImmediate)))
        };
        let buf = round_trip(repr, b"hello");
        // 12 BTH + 16 RETH + 4 ImmDt + 5 payload + 3 pad + 4 ICRC.
        assert_eq!(buf.len(), 44);
        assert_eq!(buf[1] & 0x30, 0x30, "PadCnt = 3");
        assert_eq!(&buf[37..], &[0u8; 7][..], "pad and ICRC zeroed");
    }

    #[test]
    fn packet_ack_with_ext_round_trip() {
        let mut b = bth(Opcode::rc(Operation::Acknowledge));
        b.tver = ext::TVER;
        let repr = Repr {
            ext: Some(ExtRepr {
                dasr_n: Some(4),
                multipath: Some(MultipathAck {
                    vp: 1,
                    sack_psn: Psn::new(9),
                    aack_psn: Psn::new(5),
                }),
                ece: true,
                ..ExtRepr::default()
            }),
            aeth: Some(AethRepr {
                syndrome: Syndrome::Ack(Credits::UNLIMITED),
                msn: Msn::new(3),
            }),
            ..Repr::new(b)
        };
        let buf = round_trip(repr, &[]);
        assert_eq!(buf.len(), 12 + 20 + 4 + 4);
    }

    #[test]
    fn packet_cnp_and_ud_round_trip() {
        let buf = round_trip(Repr::new(cnp::bth(Qpn::new(0x42), 0xffff)), &[]);
        assert_eq!(buf.len(), 12 + 16 + 4);
        let ud = Repr {
            deth: Some(DethRepr {
                q_key: 0x8001_0000,
                src_qp: Qpn::GSI,
            }),
            ..Repr::new(bth(Opcode::new(Transport::Ud, Operation::SendOnly)))
        };
        round_trip(ud, &[1, 2, 3, 4]);
    }

    #[test]
    fn packet_repr_inconsistent_with_layout_rejected() {
        let missing_reth = Repr::new(bth(Opcode::rc(Operation::RdmaWriteFirst)));
        assert_eq!(missing_reth.buffer_len(0), Err(Error::BadRepr));
        let ack = Repr {
            aeth: Some(AethRepr {
                syndrome: Syndrome::Ack(Credits::UNLIMITED),
                msn: Msn::new(0),
            }),
            ..Repr::new(bth(Opcode::rc(Operation::Acknowledge)))
        };
        assert_eq!(
            ack.buffer_len(1),
            Err(Error::BadRepr),
            "ACKs carry no payload"
        );
        let mut tver_without_ext = ack;
        tver_without_ext.bth.tver = 1;
        assert_eq!(tver_without_ext.buffer_len(0), Err(Error::BadRepr));
        let mut buf = [0u8; 10];
        assert_eq!(
            ack.emit(&mut buf, &[]),
            Err(Error::BadRepr),
            "wrong buffer length"
        );
    }

    #[test]
    fn packet_malformations_rejected() {
        let ack = Repr {
            aeth: Some(AethRepr {
                syndrome: Syndrome::Ack(Credits::UNLIMITED),
                msn: Msn::new(0),
            }),
            ..Repr::new(bth(Opcode::rc(Operation::Acknowledge)))
        };
        let mut buf = [0u8; 20];
        ack.emit(&mut buf, &[]).unwrap();
        assert!(Packet::new_checked(&buf[..]).is_ok());
        assert_eq!(
            Packet::new_checked(&buf[..15]).err(),
            Some(Error::Truncated(Header::Aeth))
        );
        assert_eq!(
            Packet::new_checked(&buf[..19]).err(),
            Some(Error::Truncated(Header::Icrc))
        );
        let mut longer = [0u8; 24];
        longer[..20].copy_from_slice(&buf);
        assert_eq!(
            Packet::new_checked(&longer[..]).err(),
            Some(Error::UnexpectedPayload)
        );
        let mut bad_op = buf;
        bad_op[0] = 0x15;
        assert_eq!(
            Packet::new_checked(&bad_op[..]).err(),
            Some(Error::UnknownOpcode(0x15))
        );
        let mut bad_pad = [0u8; 18];
        bad_pad[0] = Opcode::rc(Operation::SendOnly).0;
        bad_pad[1] = 0x30; // pad 3, but only 2 payload bytes
        assert_eq!(
            Packet::new_checked(&bad_pad[..]).err(),
            Some(Error::BadPadCount)
        );
        let mut bad_ext = buf;
        bad_ext[1] = 0x01; // TVer 1 announces a REXT that isn't there
        assert!(matches!(
            Packet::new_checked(&bad_ext[..]).err(),
            Some(Error::BadExtension | Error::Truncated(_))
        ));
    }

    #[test]
    fn packet_not_4_byte_aligned_rejected() {
        // A 19-byte SEND Only with PadCnt 0 and a 3-byte payload (found by the wire property
        // tests): IBA §9.2 pads the payload to 4 bytes, so this cannot be a valid packet.
        let b = [
            0x04, 0x00, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 1, 1, 2, 3, 0, 0, 0, 0,
        ];
        assert_eq!(Packet::new_checked(&b[..]).err(), Some(Error::BadPadCount));
        let mut pad1 = [0u8; 18];
        pad1[..12].copy_from_slice(&b[..12]);
        pad1[1] = 0x10; // PadCnt 1 with a 2-byte payload: 18 bytes, still misaligned
        assert_eq!(
            Packet::new_checked(&pad1[..]).err(),
            Some(Error::BadPadCount)
        );
    }

    #[test]
    fn packet_values_the_wire_cannot_carry_rejected() {
        let ack = Repr {
            aeth: Some(AethRepr {
                syndrome: Syndrome::Ack(Credits::UNLIMITED),
                msn: Msn::new(0),
            }),
            ..Repr::new(bth(Opcode::rc(Operation::Acknowledge)))
        };
        assert!(ack.buffer_len(0).is_ok());
        let mut tokens = ack;
        tokens.bth.deflection_tokens = 64;
        assert_eq!(tokens.buffer_len(0), Err(Error::BadRepr), "6-bit field");
        let mut nak = ack;
        nak.aeth = Some(AethRepr {
            syndrome: Syndrome::Nak(crate::wire::NakCode::Reserved(2)),
            msn: Msn::new(0),
        });
        assert_eq!(
            nak.buffer_len(0),
            Err(Error::BadRepr),
            "code 2 is RemoteAccessError, not reserved"
        );
    }
}
