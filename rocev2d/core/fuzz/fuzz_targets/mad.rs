//! CM MADs on arbitrary bytes: `MadPacket::new_checked`, `HeaderRepr::parse`, `CmRepr::parse`,
//! and `cm::route` (where an engine shard's datapath sends a MAD).
//!
//! Nothing may panic; `route` names a REQ's or SIDR_REQ's Service ID, or a nonzero
//! Communication ID (a SIDR_REP: Request ID), only
//! for bytes that parse as such. For accepted input (byte-exact re-emission does not hold: reserved bits
//! and bytes past 256 are accepted on receipt but not reproduced):
//!
//! * the repr re-emits to 256 bytes that parse to the same repr;
//! * emission is then a fixed point.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rocev2_core::cm::{MadRoute, route};
use rocev2_core::wire::{CmAttribute, CmRepr, MAD_LEN, MadPacket, mad::HeaderRepr};

fn emit(repr: &CmRepr) -> [u8; MAD_LEN] {
    let mut buf = [0xa5; MAD_LEN];
    repr.emit(&mut MadPacket::new_unchecked(&mut buf[..]));
    buf
}

fuzz_target!(|data: &[u8]| {
    let routed = route(data);
    match (&routed, CmRepr::parse_bytes(data)) {
        (MadRoute::Req { service_id }, Ok(CmRepr { attribute: CmAttribute::Req(r), .. })) => {
            assert_eq!(service_id.0, r.service_id)
        }
        (
            MadRoute::Req { service_id },
            Ok(CmRepr {
                attribute: CmAttribute::SidrReq(r),
                ..
            }),
        ) => assert_eq!(service_id.0, r.service_id),
        (MadRoute::Req { .. }, _) => panic!("{routed:?} for bytes that are no REQ or SIDR_REQ"),
        (MadRoute::Ours(id), Ok(_)) => assert_ne!(*id, 0),
        (MadRoute::Ours(_), Err(_)) => panic!("{routed:?} for bytes that do not parse"),
        (MadRoute::Any, _) => {}
    }
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
