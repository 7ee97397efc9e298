//! CM MADs on arbitrary bytes: `MadPacket::new_checked`, `HeaderRepr::parse`, `CmRepr::parse`.
//!
//! Nothing may panic. For accepted input (byte-exact re-emission does not hold: reserved bits
//! and bytes past 256 are accepted on receipt but not reproduced):
//!
//! * the repr re-emits to 256 bytes that parse to the same repr;
//! * emission is then a fixed point.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rocev2_core::wire::{CmRepr, MAD_LEN, MadPacket, mad::HeaderRepr};

fn emit(repr: &CmRepr) -> [u8; MAD_LEN] {
    let mut buf = [0xa5; MAD_LEN];
    repr.emit(&mut MadPacket::new_unchecked(&mut buf[..]));
    buf
}

fuzz_target!(|data: &[u8]| {
    let Ok(p) = MadPacket::new_checked(data) else {
        return;
    };
    let _ = HeaderRepr::parse(&p);
    let Ok(repr) = CmRepr::parse(&p) else {
        return;
    };
    let again = emit(&repr);
    let repr2 = CmRepr::parse_bytes(&again).expect("a re-emitted MAD must parse");
    assert_eq!(repr2, repr);
    assert_eq!(emit(&repr2), again, "emission is not a fixed point");
});
