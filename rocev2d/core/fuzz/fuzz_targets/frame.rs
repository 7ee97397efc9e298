//! Whole frames on arbitrary bytes: `Frame::new_checked`, `verify_icrc`, `FrameRepr::parse`.
//!
//! Nothing may panic. Beyond that, what must really hold for accepted input (byte-exact
//! re-emission does not: reserved bits, Ethernet padding and a non-aligning PadCnt are accepted
//! on receipt but not reproduced):
//!
//! * a frame whose layers check out re-emits to a frame that parses, ICRC included, to the same
//!   repr (PadCnt re-derived from the payload) and payload, and is no longer than the input;
//! * emission is then a fixed point: emitting what the re-emitted frame parses to gives the
//!   same bytes;
//! * its IP header makes a UD receive buffer's GRH area, which names the frame's source address
//!   as the sender's GID.
//!
//! The ICRC is deliberately not required for the re-emission check, so the fuzzer reaches the
//! transport headers without having to forge a CRC.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rocev2_core::wire::{FrameRepr, IpRepr, RoceRepr, frame::Frame, gid, grh};

fn emit(repr: &FrameRepr, payload: &[u8]) -> Vec<u8> {
    let len = repr
        .buffer_len(payload.len())
        .expect("a parsed repr has an emittable length");
    let mut buf = vec![0xa5; len];
    repr.emit(&mut buf, payload)
        .expect("a parsed repr must emit");
    buf
}

fuzz_target!(|data: &[u8]| {
    let _ = FrameRepr::parse(data);
    let Ok(frame) = Frame::new_checked(data) else {
        return;
    };
    let _ = frame.verify_icrc();
    let _ = (frame.ip_header(), frame.udp_header(), frame.transport().icrc());
    let Ok(repr) = FrameRepr::parse_frame(&frame) else {
        return;
    };
    let area = grh::area(frame.ip_header()).expect("a checked frame's IP header fits the GRH area");
    let src = match repr.ip {
        IpRepr::V4 { src, .. } => src.into(),
        IpRepr::V6 { src, .. } => src.into(),
    };
    assert_eq!(grh::source_gid(&area), gid::gid(src));
    let payload = frame.payload();
    let again = emit(&repr, payload);
    assert!(again.len() <= data.len(), "re-emitted frame grew");
    let (repr2, payload2) = FrameRepr::parse(&again).expect("re-emitted frame must parse");
    let mut want = repr;
    want.roce.bth.pad_cnt = RoceRepr::pad_for(payload.len()) as u8;
    assert_eq!(repr2, want);
    assert_eq!(payload2, payload);
    assert_eq!(emit(&repr2, payload2), again, "emission is not a fixed point");
});
