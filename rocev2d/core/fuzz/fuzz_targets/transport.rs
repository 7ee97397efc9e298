//! Transport packets (BTH … ICRC, as a UDP-socket datapath receives them) on arbitrary bytes:
//! `RocePacket::new_checked`, every header accessor, `RoceRepr::parse`, and the REXT view on
//! whatever follows the first 12 bytes.
//!
//! Nothing may panic; a packet that parses re-emits to one that parses to the same repr
//! (PadCnt re-derived from the payload) and payload.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rocev2_core::wire::{ExtPacket, ExtRepr, RocePacket, RoceRepr};

fuzz_target!(|data: &[u8]| {
    if let Some(rest) = data.get(12..) {
        if let Ok(p) = ExtPacket::new_checked(rest) {
            let _ = (p.dasr_n(), p.multipath(), p.tau_ns(), p.header_len());
            if let Some((_, ids)) = p.lookahead() {
                let _ = ids.count();
            }
            let _ = ExtRepr::parse(&p);
        }
    }
    let Ok(p) = RocePacket::new_checked(data) else {
        return;
    };
    let _ = (p.icrc(), p.icrc_covered(), p.layout(), p.payload());
    let _ = (p.deth(), p.reth(), p.atomic_eth(), p.aeth());
    let _ = (p.atomic_ack_eth(), p.immdt(), p.ieth(), p.ext());
    let Ok(repr) = RoceRepr::parse(&p) else {
        return;
    };
    let payload = p.payload();
    let len = repr
        .buffer_len(payload.len())
        .expect("a parsed repr has an emittable length");
    let mut buf = vec![0xa5; len];
    repr.emit(&mut buf, payload).expect("a parsed repr must emit");
    let p2 = RocePacket::new_checked(&buf[..]).expect("re-emitted packet must be valid");
    let mut want = repr;
    want.bth.pad_cnt = RoceRepr::pad_for(payload.len()) as u8;
    assert_eq!(RoceRepr::parse(&p2), Ok(want));
    assert_eq!(p2.payload(), payload);
});
