//! The common header's tests, and the capture MADs every file of this module tests against.

use super::*;
use crate::wire::{Error, Header};

/// `rping_cm.pcap` (rdma_rxe, kernel 6.1; see `../shared/captures/README.md`): the UD payload of
/// frame 1, the client's REQ. Also the fuzz seed of the same name.
pub(crate) static REQ: [u8; MAD_LEN] =
    *include_bytes!("../../../fuzz/seeds/mad/rping_cm-frame1-req");
/// Frame 2: the server's REP.
pub(crate) static REP: [u8; MAD_LEN] =
    *include_bytes!("../../../fuzz/seeds/mad/rping_cm-frame2-rep");
/// Frame 3: the client's RTU.
pub(crate) static RTU: [u8; MAD_LEN] =
    *include_bytes!("../../../fuzz/seeds/mad/rping_cm-frame3-rtu");
/// Frame 40: the client's DREQ.
pub(crate) static DREQ: [u8; MAD_LEN] =
    *include_bytes!("../../../fuzz/seeds/mad/rping_cm-frame40-dreq");
/// Frame 41: the server's DREP.
pub(crate) static DREP: [u8; MAD_LEN] =
    *include_bytes!("../../../fuzz/seeds/mad/rping_cm-frame41-drep");

/// The attribute data of a MAD.
pub(crate) fn data(mad: &[u8; MAD_LEN]) -> &[u8] {
    &mad[HEADER_LEN..]
}

/// The header every MAD of the capture carries, but for the attribute.
fn capture_header(attribute_id: u16) -> HeaderRepr {
    HeaderRepr {
        mgmt_class: mgmt_class::CM,
        class_version: 2,
        method: method::SEND,
        status: 0,
        class_specific: 0,
        transaction_id: 0x0000_0002_bc96_8467,
        attribute_id,
        attribute_modifier: 0,
    }
}

#[test]
fn header_four_ways() {
    // Bytes 0–23 of the REQ: 01 07 02 03 | 0000 0000 | TID 00000002bc968467 | 0010 0000 | 0.
    let p = Packet::new_checked(&REQ[..]).unwrap();
    assert_eq!(
        (
            p.base_version(),
            p.mgmt_class(),
            p.class_version(),
            p.method()
        ),
        (1, 0x07, 2, 0x03)
    );
    assert_eq!(p.transaction_id(), 0x0000_0002_bc96_8467);
    assert_eq!((p.attribute_id(), p.attribute_modifier()), (0x0010, 0));
    let h = HeaderRepr::parse(&p).unwrap();
    assert_eq!(h, capture_header(attribute::REQ));
    let mut buf = [0xffu8; HEADER_LEN];
    h.emit(&mut Packet::new_unchecked(&mut buf[..]));
    assert_eq!(buf[..], REQ[..HEADER_LEN]);
}

#[test]
fn capture_mads_parse_and_emit_byte_for_byte() {
    for (mad, attr) in [
        (&REQ, attribute::REQ),
        (&REP, attribute::REP),
        (&RTU, attribute::RTU),
        (&DREQ, attribute::DREQ),
        (&DREP, attribute::DREP),
    ] {
        let m = CmRepr::parse_bytes(mad).unwrap();
        assert_eq!(m.header(), capture_header(attr));
        let mut buf = [0xa5u8; MAD_LEN];
        m.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(&buf, mad, "{m}");
    }
}

#[test]
fn bit_field_reads_and_writes_only_its_bits() {
    // A 20-bit field from bit 4 of byte 1 spans bytes 1–3.
    const F: BitField = BitField::new(1, 4, 20);
    let mut b = [0xffu8; 5];
    F.set(&mut b, 0x0_1234);
    assert_eq!(b, [0xff, 0xf0, 0x12, 0x34, 0xff]);
    assert_eq!(F.get(&b), 0x0_1234);
    F.set(&mut b, 0xfff_ffff); // excess bits dropped
    assert_eq!(b, [0xff; 5]);
    const G: BitField = BitField::new(0, 5, 2);
    let mut c = [0u8; 1];
    G.set(&mut c, 3);
    assert_eq!(c, [0b0000_0110]);
}

#[test]
fn mad_short_is_truncated() {
    assert_eq!(
        Packet::new_checked(&REQ[..MAD_LEN - 1]),
        Err(Error::Truncated(Header::Mad))
    );
    assert_eq!(
        CmRepr::parse_bytes(&REQ[..HEADER_LEN]),
        Err(Error::Truncated(Header::Mad))
    );
}

#[test]
fn mad_bad_base_version_is_rejected() {
    let mut b = REQ;
    b[0] = 2;
    assert_eq!(
        CmRepr::parse_bytes(&b),
        Err(Error::BadMad(MadError::BaseVersion(2)))
    );
    assert_eq!(
        HeaderRepr::parse(&Packet::new_unchecked(&b[..])),
        Err(Error::BadMad(MadError::BaseVersion(2)))
    );
}

#[test]
fn mad_bad_class_version_is_rejected() {
    let mut b = REQ;
    b[2] = 1;
    assert_eq!(
        CmRepr::parse_bytes(&b),
        Err(Error::BadMad(MadError::ClassVersion(1)))
    );
}

#[test]
fn mad_other_class_is_rejected() {
    let mut b = REQ;
    b[1] = mgmt_class::SUBN_ADM;
    assert_eq!(
        CmRepr::parse_bytes(&b),
        Err(Error::BadMad(MadError::Class(0x03)))
    );
    // The common header alone is class-independent.
    assert!(HeaderRepr::parse(&Packet::new_unchecked(&b[..])).is_ok());
}

#[test]
fn mad_unknown_attribute_is_rejected() {
    let mut b = REQ;
    b[16..18].copy_from_slice(&0x0019u16.to_be_bytes()); // LAP: not implemented
    assert_eq!(
        CmRepr::parse_bytes(&b),
        Err(Error::BadMad(MadError::Attribute(0x0019)))
    );
}

#[test]
fn mad_reserved_header_bits_are_ignored_and_cleared() {
    let mut b = RTU;
    b[18] = 0xaa;
    let m = CmRepr::parse_bytes(&b).unwrap();
    let mut out = [0u8; MAD_LEN];
    m.emit(&mut Packet::new_unchecked(&mut out[..]));
    assert_eq!(out, RTU);
}
