use alloc::collections::BTreeSet;
use alloc::vec;
use alloc::vec::Vec;

use rand_core::{RngCore, SeedableRng};

use super::*;

const RW: AccessFlags = AccessFlags::LOCAL_WRITE;

fn table() -> MrTable {
    MrTable::new(ChaCha12Rng::seed_from_u64(7))
}

/// A "CSPRNG" that returns a script, then counts up from `after`: lets a test force key
/// collisions deterministically.
struct Script {
    values: Vec<u32>,
    after: u32,
}

impl Script {
    fn new(values: &[u32]) -> Self {
        Script {
            values: values.iter().rev().copied().collect(),
            after: 0x1000_0000,
        }
    }
}

impl RngCore for Script {
    fn next_u32(&mut self) -> u32 {
        self.values.pop().unwrap_or_else(|| {
            self.after += 1;
            self.after
        })
    }
    fn next_u64(&mut self) -> u64 {
        u64::from(self.next_u32())
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        for b in dst {
            *b = self.next_u32() as u8;
        }
    }
}

impl CryptoRng for Script {}

#[test]
fn access_flags_match_libibverbs_bits() {
    assert_eq!(AccessFlags::LOCAL_WRITE.bits(), 1);
    assert_eq!(AccessFlags::REMOTE_WRITE.bits(), 2);
    assert_eq!(AccessFlags::REMOTE_READ.bits(), 4);
    assert_eq!(AccessFlags::REMOTE_ATOMIC.bits(), 8);
    let a = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
    assert!(a.contains(AccessFlags::REMOTE_READ));
    assert!(!a.contains(AccessFlags::REMOTE_WRITE));
    assert!(a.contains(AccessFlags::empty()));
    assert!(AccessFlags::empty().is_empty());
    assert_eq!(
        alloc::format!("{a:?}"),
        "AccessFlags(LOCAL_WRITE | REMOTE_READ)"
    );
    assert_eq!(
        alloc::format!("{:?}", AccessFlags::from_bits_retain(0x21)),
        "AccessFlags(LOCAL_WRITE | 0x20)"
    );
}

#[test]
fn access_flags_have_full_set_operations() {
    let all = AccessFlags::all();
    assert_eq!(all.bits(), 0xf);
    let remote = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    assert_eq!(all - remote, AccessFlags::LOCAL_WRITE);
    assert_eq!(all.difference(AccessFlags::LOCAL_WRITE), remote);
    assert_eq!(remote & AccessFlags::REMOTE_READ, AccessFlags::REMOTE_READ);
    assert_eq!(!remote & all, AccessFlags::LOCAL_WRITE);
    let mut a = AccessFlags::empty();
    a.insert(AccessFlags::REMOTE_READ);
    a.toggle(AccessFlags::LOCAL_WRITE);
    a.remove(AccessFlags::REMOTE_READ);
    assert_eq!(a, AccessFlags::LOCAL_WRITE);
    assert_eq!(remote.iter().count(), 3);
    // Unknown bits: refused by `from_bits`, kept by `from_bits_retain` (registration fails).
    assert_eq!(AccessFlags::from_bits(0x10), None);
    assert_eq!(AccessFlags::from_bits_retain(0x10).bits(), 0x10);
}

#[test]
fn register_remote_write_without_local_write_is_rejected() {
    let mut t = table();
    let pd = t.alloc_pd();
    for access in [
        AccessFlags::REMOTE_WRITE,
        AccessFlags::REMOTE_ATOMIC,
        AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
    ] {
        assert_eq!(
            t.register(pd, 0x1000, 64, access),
            Err(MrError::RemoteWriteWithoutLocalWrite)
        );
    }
    // REMOTE_READ alone is fine: the peer cannot change the bytes.
    assert!(t.register(pd, 0x1000, 64, AccessFlags::REMOTE_READ).is_ok());
    assert!(
        t.register(
            pd,
            0x1000,
            64,
            RW | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC
        )
        .is_ok()
    );
}

#[test]
fn register_unsupported_flag_is_rejected() {
    let mut t = table();
    let pd = t.alloc_pd();
    // 0x10 is IBV_ACCESS_MW_BIND.
    assert_eq!(
        t.register(pd, 0, 64, AccessFlags::from_bits_retain(0x11)),
        Err(MrError::UnsupportedAccess(0x10))
    );
}

#[test]
fn register_address_overflow_is_rejected() {
    let mut t = table();
    let pd = t.alloc_pd();
    assert_eq!(
        t.register(pd, u64::MAX - 9, 11, RW),
        Err(MrError::AddressOverflow)
    );
    // Ending exactly at 2^64 − 1 is fine.
    assert!(t.register(pd, u64::MAX - 9, 9, RW).is_ok());
}

#[test]
fn register_unknown_pd_is_rejected() {
    let mut t = table();
    assert_eq!(t.register(PdId::new(42), 0, 1, RW), Err(MrError::UnknownPd));
}

#[test]
fn register_zero_length_is_allowed() {
    let mut t = table();
    let pd = t.alloc_pd();
    let mr = t.register(pd, 0x2000, 0, AccessFlags::REMOTE_READ).unwrap();
    assert_eq!(mr.len, 0);
    assert_eq!(
        t.check_remote(pd, mr.rkey, 0x2000, 0, AccessFlags::REMOTE_READ),
        Ok((mr.id, 0))
    );
    assert_eq!(
        t.check_remote(pd, mr.rkey, 0x2000, 1, AccessFlags::REMOTE_READ),
        Err(AccessError::OutOfBounds)
    );
}

#[test]
fn keys_are_nonzero_distinct_and_not_sequential() {
    let mut t = table();
    let pd = t.alloc_pd();
    let mut seen = BTreeSet::new();
    let mut lkeys = Vec::new();
    for i in 0..1000u64 {
        let mr = t.register(pd, i * 4096, 4096, RW).unwrap();
        assert_ne!(mr.lkey.value(), mr.rkey.value());
        assert_ne!(mr.lkey.value(), 0);
        assert_ne!(mr.rkey.value(), 0);
        assert!(seen.insert(mr.lkey.value()));
        assert!(seen.insert(mr.rkey.value()));
        lkeys.push(mr.lkey.value());
    }
    // Consecutive keys of a counter differ by a constant; random ones almost never repeat a
    // step, and spread over the whole 32 bits (top bit set about half the time).
    let steps: BTreeSet<u32> = lkeys.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
    assert!(steps.len() > 990, "{} distinct steps", steps.len());
    let high = lkeys.iter().filter(|k| *k & 0x8000_0000 != 0).count();
    assert!(
        (400..600).contains(&high),
        "{high} keys with the top bit set"
    );
}

#[test]
fn keys_same_seed_reproduce_and_other_seed_differs() {
    let keys = |seed| {
        let mut t = MrTable::new(ChaCha12Rng::seed_from_u64(seed));
        let pd = t.alloc_pd();
        let mr = t.register(pd, 0, 8, RW).unwrap();
        (mr.lkey, mr.rkey)
    };
    assert_eq!(keys(1), keys(1));
    assert_ne!(keys(1), keys(2));
}

#[test]
fn draw_key_skips_zero_live_and_equal_keys() {
    // lkey draws 0 (rejected) then 5; rkey draws 5 (== lkey, rejected) then 6. The second
    // region's lkey draws 5 and 6 (live) before 7.
    let mut t = MrTable::new(Script::new(&[0, 5, 5, 6, 5, 6, 7, 8]));
    let pd = t.alloc_pd();
    let a = t.register(pd, 0, 8, RW).unwrap();
    assert_eq!((a.lkey.value(), a.rkey.value()), (5, 6));
    let b = t.register(pd, 0, 8, RW).unwrap();
    assert_eq!((b.lkey.value(), b.rkey.value()), (7, 8));
}

#[test]
fn draw_key_skips_quarantined_key_after_deregistration() {
    let mut t = MrTable::new(Script::new(&[5, 6, 5, 6, 9, 10]));
    let pd = t.alloc_pd();
    let a = t.register(pd, 0, 8, RW).unwrap();
    t.deregister(a.id).unwrap();
    let b = t.register(pd, 0, 8, RW).unwrap();
    assert_eq!((b.lkey.value(), b.rkey.value()), (9, 10));
}

#[test]
fn quarantine_forgets_oldest_key_when_full() {
    let mut t = MrTable::new(Script::new(&[5, 6]));
    let pd = t.alloc_pd();
    let a = t.register(pd, 0, 8, RW).unwrap();
    t.deregister(a.id).unwrap();
    // Retire KEY_QUARANTINE more keys (the script now counts up, never 5 or 6).
    for _ in 0..KEY_QUARANTINE / 2 {
        let m = t.register(pd, 0, 8, RW).unwrap();
        t.deregister(m.id).unwrap();
    }
    assert_eq!(t.retired.len(), KEY_QUARANTINE);
    assert!(!t.quarantined.contains(&5));
    assert!(!t.quarantined.contains(&6));
    t.rng.values = vec![6, 5];
    let b = t.register(pd, 0, 8, RW).unwrap();
    assert_eq!((b.lkey.value(), b.rkey.value()), (5, 6));
}

#[test]
fn draw_key_broken_generator_is_an_error_not_a_hang() {
    let mut t = MrTable::new(Script::new(&[0; 64]));
    let pd = t.alloc_pd();
    assert_eq!(t.register(pd, 0, 8, RW), Err(MrError::KeysExhausted));
    assert_eq!(
        t.dealloc_pd(pd),
        Ok(()),
        "a failed registration leaves no region"
    );
}

#[test]
fn check_local_returns_offset_in_region() {
    let mut t = table();
    let pd = t.alloc_pd();
    let mr = t.register(pd, 0x10_000, 0x1000, RW).unwrap();
    assert_eq!(
        t.check_local(pd, mr.lkey, 0x10_100, 0x100, AccessFlags::empty()),
        Ok((mr.id, 0x100))
    );
    assert_eq!(
        t.check_local(pd, mr.lkey, 0x10_000, 0x1000, RW),
        Ok((mr.id, 0)),
        "the whole region"
    );
}

#[test]
fn check_local_bounds_reject_outside_and_overflow() {
    let mut t = table();
    let pd = t.alloc_pd();
    let mr = t.register(pd, 0x10_000, 0x1000, RW).unwrap();
    let none = AccessFlags::empty();
    for (addr, len) in [
        (0x0f_fff, 1),        // starts one byte below
        (0x10_fff, 2),        // ends one byte past the end
        (0x11_001, 0),        // empty, but past the end
        (0x10_001, u64::MAX), // addr + len overflows
        (u64::MAX, 1),        // far above
    ] {
        assert_eq!(
            t.check_local(pd, mr.lkey, addr, len, none),
            Err(AccessError::OutOfBounds),
            "{addr:#x}+{len:#x}"
        );
    }
    // An empty range exactly at the end is inside.
    assert_eq!(
        t.check_local(pd, mr.lkey, 0x11_000, 0, none),
        Ok((mr.id, 0x1000))
    );
}

#[test]
fn check_local_without_local_write_is_permission_error() {
    let mut t = table();
    let pd = t.alloc_pd();
    let mr = t.register(pd, 0, 64, AccessFlags::REMOTE_READ).unwrap();
    assert_eq!(
        t.check_local(pd, mr.lkey, 0, 64, AccessFlags::empty()),
        Ok((mr.id, 0)),
        "local read is always allowed"
    );
    assert_eq!(
        t.check_local(pd, mr.lkey, 0, 64, RW),
        Err(AccessError::Permission)
    );
}

#[test]
fn check_wrong_pd_is_rejected() {
    let mut t = table();
    let pd = t.alloc_pd();
    let other = t.alloc_pd();
    let mr = t
        .register(pd, 0, 64, RW | AccessFlags::REMOTE_READ)
        .unwrap();
    assert_eq!(
        t.check_local(other, mr.lkey, 0, 8, AccessFlags::empty()),
        Err(AccessError::WrongPd)
    );
    assert_eq!(
        t.check_remote(other, mr.rkey, 0, 8, AccessFlags::REMOTE_READ),
        Err(AccessError::WrongPd)
    );
}

#[test]
fn check_key_of_other_kind_is_unknown() {
    let mut t = table();
    let pd = t.alloc_pd();
    let mr = t
        .register(pd, 0, 64, RW | AccessFlags::REMOTE_READ)
        .unwrap();
    // A peer that learned our L_Key cannot use it as an R_Key, and vice versa.
    assert_eq!(
        t.check_remote(
            pd,
            Rkey::new(mr.lkey.value()),
            0,
            8,
            AccessFlags::REMOTE_READ
        ),
        Err(AccessError::UnknownKey)
    );
    assert_eq!(
        t.check_local(pd, Lkey::new(mr.rkey.value()), 0, 8, AccessFlags::empty()),
        Err(AccessError::UnknownKey)
    );
    assert_eq!(
        t.check_local(pd, Lkey::new(0), 0, 8, AccessFlags::empty()),
        Err(AccessError::UnknownKey)
    );
}

#[test]
fn check_remote_permission_follows_access_flags() {
    let mut t = table();
    let pd = t.alloc_pd();
    let ro = t.register(pd, 0, 64, AccessFlags::REMOTE_READ).unwrap();
    let wo = t
        .register(pd, 0, 64, RW | AccessFlags::REMOTE_WRITE)
        .unwrap();
    let (r, w) = (AccessFlags::REMOTE_READ, AccessFlags::REMOTE_WRITE);
    assert_eq!(t.check_remote(pd, ro.rkey, 8, 8, r), Ok((ro.id, 8)));
    assert_eq!(
        t.check_remote(pd, ro.rkey, 8, 8, w),
        Err(AccessError::Permission)
    );
    assert_eq!(t.check_remote(pd, wo.rkey, 8, 8, w), Ok((wo.id, 8)));
    assert_eq!(
        t.check_remote(pd, wo.rkey, 8, 8, r),
        Err(AccessError::Permission)
    );
    assert_eq!(
        t.check_remote_atomic(pd, wo.rkey, 8),
        Err(AccessError::Permission)
    );
}

#[test]
fn check_remote_atomic_requires_alignment_and_eight_bytes() {
    let mut t = table();
    let pd = t.alloc_pd();
    let mr = t
        .register(pd, 0x1000, 24, RW | AccessFlags::REMOTE_ATOMIC)
        .unwrap();
    assert_eq!(t.check_remote_atomic(pd, mr.rkey, 0x1010), Ok((mr.id, 16)));
    assert_eq!(
        t.check_remote_atomic(pd, mr.rkey, 0x1004),
        Err(AccessError::Misaligned)
    );
    // The last word would end past the region: bounds before alignment.
    assert_eq!(
        t.check_remote_atomic(pd, mr.rkey, 0x1018),
        Err(AccessError::OutOfBounds)
    );
    assert_eq!(
        t.check_remote_atomic(pd, mr.rkey, 0x1014),
        Err(AccessError::OutOfBounds)
    );
    assert_eq!(
        t.check_remote_atomic(pd, Rkey::new(mr.rkey.value() ^ 1), 0x1004),
        Err(AccessError::UnknownKey),
        "a bad key is an access error even when misaligned"
    );
}

#[test]
fn deregister_invalidates_both_keys_immediately() {
    let mut t = table();
    let pd = t.alloc_pd();
    let all =
        RW | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    let mr = t.register(pd, 0, 64, all).unwrap();
    let keep = t.register(pd, 0, 64, all).unwrap();
    assert_eq!(t.deregister(mr.id), Ok(mr));
    assert_eq!(t.get(mr.id), None);
    assert_eq!(
        t.check_local(pd, mr.lkey, 0, 8, AccessFlags::empty()),
        Err(AccessError::UnknownKey)
    );
    assert_eq!(
        t.check_remote(pd, mr.rkey, 0, 8, AccessFlags::REMOTE_WRITE),
        Err(AccessError::UnknownKey)
    );
    assert_eq!(
        t.check_remote_atomic(pd, mr.rkey, 0),
        Err(AccessError::UnknownKey)
    );
    assert_eq!(t.deregister(mr.id), Err(MrError::UnknownMr));
    // The other region is untouched.
    assert_eq!(
        t.check_remote(pd, keep.rkey, 0, 8, AccessFlags::REMOTE_WRITE),
        Ok((keep.id, 0))
    );
}

#[test]
fn dealloc_pd_with_regions_is_busy() {
    let mut t = table();
    let pd = t.alloc_pd();
    let a = t.register(pd, 0, 8, RW).unwrap();
    let b = t.register(pd, 0, 8, RW).unwrap();
    assert_eq!(t.dealloc_pd(pd), Err(MrError::Busy));
    t.deregister(a.id).unwrap();
    assert_eq!(t.dealloc_pd(pd), Err(MrError::Busy));
    t.deregister(b.id).unwrap();
    assert_eq!(t.dealloc_pd(pd), Ok(()));
    assert_eq!(t.dealloc_pd(pd), Err(MrError::UnknownPd));
    assert_eq!(t.register(pd, 0, 8, RW), Err(MrError::UnknownPd));
}

#[test]
fn ids_are_unique_and_never_zero() {
    let mut t = table();
    let pds: BTreeSet<PdId> = (0..10).map(|_| t.alloc_pd()).collect();
    assert_eq!(pds.len(), 10);
    assert!(!pds.contains(&PdId::new(0)));
    let pd = *pds.iter().next().unwrap();
    let a = t.register(pd, 0, 8, RW).unwrap();
    let b = t.register(pd, 0, 8, RW).unwrap();
    assert_ne!(a.id, b.id);
    assert_ne!(a.id, MrId::new(0));
}

#[test]
fn next_free_skips_zero_and_taken_across_wrap() {
    let mut next = u32::MAX;
    assert_eq!(next_free(&mut next, |v| v == 1), u32::MAX);
    assert_eq!(
        next_free(&mut next, |v| v == 1),
        2,
        "skips 0 after the wrap, and taken 1"
    );
}

#[test]
fn atomic_op_apply_follows_iba_semantics() {
    let cs = AtomicOp::CompareSwap {
        compare: 5,
        swap: 9,
    };
    assert_eq!(cs.apply(5), 9);
    assert_eq!(cs.apply(6), 6);
    assert_eq!(
        AtomicOp::FetchAdd { add: 3 }.apply(u64::MAX),
        2,
        "modulo 2^64"
    );
}

#[test]
fn memory_atomic_returns_original_and_uses_native_order() {
    let mut m = VecMemory::new();
    let id = MrId::new(1);
    let mut bytes = vec![0u8; 16];
    bytes[8..].copy_from_slice(&41u64.to_ne_bytes());
    m.insert(id, bytes);
    assert_eq!(m.atomic(id, 8, AtomicOp::FetchAdd { add: 1 }), 41);
    assert_eq!(m.get(id).unwrap()[8..], 42u64.to_ne_bytes());
    let miss = AtomicOp::CompareSwap {
        compare: 0,
        swap: 7,
    };
    assert_eq!(m.atomic(id, 8, miss), 42);
    assert_eq!(
        m.get(id).unwrap()[8..],
        42u64.to_ne_bytes(),
        "a missed CmpSwap writes nothing"
    );
    let hit = AtomicOp::CompareSwap {
        compare: 42,
        swap: 7,
    };
    assert_eq!(m.atomic(id, 8, hit), 42);
    assert_eq!(m.get(id).unwrap()[8..], 7u64.to_ne_bytes());
    assert_eq!(
        m.get(id).unwrap()[..8],
        [0; 8],
        "neighbouring word untouched"
    );
}

#[test]
fn vec_memory_read_write_round_trip() {
    let mut m = VecMemory::new();
    let id = MrId::new(3);
    assert_eq!(m.insert(id, vec![0; 8]), None);
    m.write(id, 2, &[1, 2, 3]);
    let mut buf = [0xff; 4];
    m.read(id, 1, &mut buf);
    assert_eq!(buf, [0, 1, 2, 3]);
    m.get_mut(id).unwrap()[7] = 9;
    assert_eq!(m.remove(id), Some(vec![0, 0, 1, 2, 3, 0, 0, 9]));
    assert_eq!(m.get(id), None);
}

#[test]
fn vec_memory_clamp_keeps_inside_part() {
    assert_eq!(clamp(8, 6, 4), (6..8, 2));
    assert_eq!(clamp(8, 9, 4), (8..8, 0));
    assert_eq!(clamp(8, u64::MAX, usize::MAX), (8..8, 0));
    assert_eq!(clamp(8, 0, 8), (0..8, 8));
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "read past the end")]
fn vec_memory_read_past_end_asserts_in_debug() {
    let mut m = VecMemory::new();
    m.insert(MrId::new(1), vec![0; 8]);
    m.read(MrId::new(1), 6, &mut [0; 4]);
}

#[test]
#[cfg(not(debug_assertions))]
fn vec_memory_read_past_end_zero_fills_in_release() {
    let mut m = VecMemory::new();
    m.insert(MrId::new(1), vec![7; 8]);
    let mut buf = [0xff; 4];
    m.read(MrId::new(1), 6, &mut buf);
    assert_eq!(buf, [7, 7, 0, 0]);
    m.write(MrId::new(2), 0, &[1]);
}

#[test]
fn null_memory_leaves_reads_and_discards_writes() {
    let mut m = NullMemory;
    m.write(MrId::new(1), 0, &[1, 2, 3]);
    let mut buf = [0xff; 3];
    m.read(MrId::new(1), 0, &mut buf);
    assert_eq!(buf, [0xff; 3], "the buffer is not touched");
    assert_eq!(m.atomic(MrId::new(1), 0, AtomicOp::FetchAdd { add: 1 }), 0);
}

#[test]
fn mr_table_debug_hides_generator_state() {
    let mut t = MrTable::new(Script::new(&[0x1234_5678]));
    let pd = t.alloc_pd();
    let s = alloc::format!("{t:?}");
    assert!(s.starts_with("MrTable {"), "{s}");
    assert!(!s.contains("Script") && !s.contains("305419896"), "{s}");
    assert!(s.contains(&alloc::format!("{pd:?}")));
}
