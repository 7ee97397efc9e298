//! Protection domains and memory regions: the keys, bounds and permissions that guard every
//! byte the transport touches, and the [`Memory`] trait through which it touches them.
//!
//! Source: IBA Vol. 1 §10.2.3 (protection domains) and §10.6 (memory regions: L_Key, R_Key,
//! access rights, bounds); §9.4.5 for the atomic operations [`Memory::atomic`] performs. Names
//! and bit values follow libibverbs (`ibv_reg_mr(3)`, `enum ibv_access_flags`) so users see what
//! they know.
//!
//! # How the pieces fit
//!
//! The core never holds or dereferences application memory. [`MrTable`] only knows, per region,
//! its protection domain, its base virtual address and length *as the application and its peer
//! name them*, its access rights and its two keys. On the packet path the QP asks
//! [`MrTable::check_local`] (for its own scatter/gather entries) or [`MrTable::check_remote`] /
//! [`MrTable::check_remote_atomic`] (for an incoming RDMA WRITE, READ or atomic), gets back the
//! region's opaque [`MrId`] and an offset into it, and then copies bytes through the host's
//! [`Memory`] implementation. Both checks are a single `BTreeMap` lookup and a few comparisons:
//! no allocation.
//!
//! # Keys
//!
//! A key is the only thing standing between a remote peer and the application's memory, so keys
//! are drawn from a caller-supplied CSPRNG (the type bound is [`CryptoRng`]), never counted up.
//! Each registration gets an L_Key and an R_Key that differ from each other, from 0, from every
//! live key, and from the last [`KEY_QUARANTINE`] keys retired by deregistration.
//!
//! Hardware splits a key into a 24-bit table index and an 8-bit "key variant" that it rotates
//! when the index is reused, so that a stale key stops matching. That layout exists because a
//! HCA indexes an array with the upper bits, which makes those bits predictable. We look keys up
//! in a map, so all 32 bits can be random: guessing a live key takes about 2^32 / live tries
//! instead of 2^8 (sequential index) or 2^24 (random index, rotating variant). The rotating
//! variant's one real guarantee, "a key retired recently is not handed out again", is given
//! exactly and more strongly by the quarantine: it covers the last [`KEY_QUARANTINE`] retired
//! keys of the whole table, not 255 generations of one slot. Older stale keys collide with a new
//! key only with probability live / 2^32.
//!
//! # Deregistration while in use
//!
//! [`MrTable::deregister`] invalidates both keys at once. Because the core holds no pointer into
//! the region, nothing else needs to be revoked: every later check with those keys fails with
//! [`AccessError::UnknownKey`]. A peer's WRITE/READ/atomic that arrives afterwards is therefore
//! answered with a remote access error NAK, and a local work request still naming the L_Key
//! completes with a local protection error, exactly as if the key had never existed.
//!
//! For the host to free the buffer as soon as `deregister` returns, the QP must never keep a
//! checked ([`MrId`], offset) across calls into the core: it checks and copies in the same call,
//! packet by packet (each packet of a multi-packet WRITE, each segment of a SEND as it is built,
//! and again on retransmission). A region deregistered mid-message therefore fails the next
//! packet's check, which is the spec's outcome for an invalid key.
//!
//! Deviations:
//! - Keys are 32 random bits with a quarantine rather than IB's 24-bit index + 8-bit variant
//!   (reasoning above). An application never sees the difference: keys are opaque in verbs.
//! - NOT IMPLEMENTED (IBA §10.6): memory windows, fast registration work requests,
//!   zero-based regions and re-registration; `IBV_ACCESS_MW_BIND` and other libibverbs flags are
//!   rejected at registration.

use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::vec::Vec;
use core::fmt;

use rand_chacha::ChaCha12Rng;
use rand_core::CryptoRng;

/// How many retired keys [`MrTable`] refuses to hand out again (L_Keys and R_Keys together).
///
/// 4096 keys cost 16 KiB of `u32`s plus set overhead per table, and cover 2048 deregistrations:
/// far more than the packets a peer can have in flight with an old R_Key before its QP notices.
pub const KEY_QUARANTINE: usize = 4096;

/// A CSPRNG that draws this many keys in a row that are all 0, live or quarantined is broken.
const MAX_KEY_DRAWS: usize = 16;

bitflags::bitflags! {
    /// Memory access rights of a region, bit for bit `enum ibv_access_flags` of libibverbs, with
    /// the full set operations of the `bitflags` crate (`|`, `&`, `-` difference, `!`
    /// complement, `insert`/`remove`, iteration).
    ///
    /// Local read access is always granted (IBA §10.6: every region can be read by the local CA),
    /// so it has no bit. Bits this implementation does not know are kept
    /// ([`AccessFlags::from_bits_retain`]) so that registration fails on them rather than
    /// silently dropping them; [`AccessFlags::from_bits`] refuses them outright.
    #[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
    pub struct AccessFlags: u32 {
        /// `IBV_ACCESS_LOCAL_WRITE`: the local CA may write (receive buffers, READ responses,
        /// atomic results).
        const LOCAL_WRITE = 1;
        /// `IBV_ACCESS_REMOTE_WRITE`: a peer may RDMA WRITE into the region.
        const REMOTE_WRITE = 2;
        /// `IBV_ACCESS_REMOTE_READ`: a peer may RDMA READ from the region.
        const REMOTE_READ = 4;
        /// `IBV_ACCESS_REMOTE_ATOMIC`: a peer may perform atomic operations on the region.
        const REMOTE_ATOMIC = 8;
    }
}

impl AccessFlags {
    /// The flags this implementation understands; any other bit fails registration.
    const SUPPORTED: u32 = AccessFlags::all().bits();
}

impl fmt::Debug for AccessFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(AccessFlags, &str); 4] = [
            (AccessFlags::LOCAL_WRITE, "LOCAL_WRITE"),
            (AccessFlags::REMOTE_WRITE, "REMOTE_WRITE"),
            (AccessFlags::REMOTE_READ, "REMOTE_READ"),
            (AccessFlags::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
        ];
        write!(f, "AccessFlags(")?;
        let mut sep = "";
        for (flag, name) in NAMES {
            if self.contains(flag) {
                write!(f, "{sep}{name}")?;
                sep = " | ";
            }
        }
        let unknown = self.bits() & !Self::SUPPORTED;
        if unknown != 0 {
            write!(f, "{sep}{unknown:#x}")?;
        } else if sep.is_empty() {
            write!(f, "empty")?;
        }
        write!(f, ")")
    }
}

macro_rules! id32 {
    ($(#[$doc:meta])* $name:ident, $fmt:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(u32);

        impl $name {
            /// Wraps a raw value (for example one parsed from a packet or handed across the
            /// verbs API); it means nothing until a table lookup accepts it.
            pub const fn new(v: u32) -> Self {
                $name(v)
            }
            /// The raw value.
            pub const fn value(self) -> u32 {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, $fmt, self.0)
            }
        }
    };
}

id32! {
    /// A protection domain (IBA §10.2.3): QPs and regions may only be used together when they
    /// belong to the same one.
    PdId, "pd{}"
}
id32! {
    /// A memory region's local key (L_Key, IBA §10.6), named in the local QP's scatter/gather entries.
    Lkey, "{:#010x}"
}
id32! {
    /// A memory region's remote key (R_Key, IBA §10.6), carried by a peer's RETH or AtomicETH.
    Rkey, "{:#010x}"
}
id32! {
    /// A stable, opaque handle for a registered region: the host uses it to find its buffer in
    /// [`Memory`]. Unlike keys it is not secret and never travels on the wire.
    MrId, "mr{}"
}

/// Everything known about one registered region, as returned by [`MrTable::register`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrInfo {
    /// Handle for [`Memory`] calls and [`MrTable::deregister`].
    pub id: MrId,
    /// Key for the local QP's scatter/gather entries.
    pub lkey: Lkey,
    /// Key the peer puts in RDMA and atomic requests.
    pub rkey: Rkey,
    /// Virtual address of the first byte, as the application and its peer name it.
    pub addr: u64,
    /// Length in bytes; `addr + len` does not overflow.
    pub len: u64,
    /// Rights granted at registration.
    pub access: AccessFlags,
    /// The protection domain the region belongs to.
    pub pd: PdId,
}

impl MrInfo {
    /// Offset of `[addr, addr + len)` inside this region, if it lies entirely inside.
    fn offset_of(&self, addr: u64, len: u64) -> Option<u64> {
        let offset = addr.checked_sub(self.addr)?;
        let end = offset.checked_add(len)?;
        (end <= self.len).then_some(offset)
    }
}

/// Why a registration-time call failed: the caller's mistake, reported as `ibv_*` would report
/// `EINVAL`/`EBUSY`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MrError {
    /// The protection domain does not exist (never allocated, or already deallocated).
    #[error("unknown protection domain")]
    UnknownPd,
    /// The protection domain still has registered regions.
    #[error("protection domain still has memory regions")]
    Busy,
    /// No region with this id is registered.
    #[error("unknown memory region")]
    UnknownMr,
    /// REMOTE_WRITE or REMOTE_ATOMIC was requested without LOCAL_WRITE, which `ibv_reg_mr(3)`
    /// rejects with `EINVAL`: a region the peer may write must be writable locally too.
    #[error("remote write or atomic access requires local write access")]
    RemoteWriteWithoutLocalWrite,
    /// Access bits this implementation does not support (memory-window binding, zero-based,
    /// on-demand paging, …).
    #[error("unsupported access flags {0:#x}")]
    UnsupportedAccess(u32),
    /// `addr + len` overflows 64 bits.
    #[error("region address range overflows")]
    AddressOverflow,
    /// The random generator failed to produce a fresh key; only a broken generator does this.
    #[error("could not draw a fresh key")]
    KeysExhausted,
}

/// Why a packet-path access check failed.
///
/// For a remote request every variant except [`AccessError::Misaligned`] is what the responder
/// answers with the AETH NAK code "remote access error" (`IBV_WC_REM_ACCESS_ERR` at the
/// requester); for a local scatter/gather entry every variant is a local protection error
/// (`IBV_WC_LOC_PROT_ERR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// No live region has this key (never issued, deregistered, or an R_Key used as an L_Key and
    /// vice versa).
    #[error("unknown key")]
    UnknownKey,
    /// The region belongs to another protection domain than the QP.
    #[error("memory region belongs to another protection domain")]
    WrongPd,
    /// The range is not entirely inside the region (or `addr + len` overflows).
    #[error("access outside memory region bounds")]
    OutOfBounds,
    /// The region was not registered with the rights this access needs.
    #[error("access not permitted by memory region rights")]
    Permission,
    /// An atomic's virtual address is not 8-byte aligned (IBA §9.4.5). Unlike the others this is
    /// answered with NAK "invalid request" (`IBV_WC_REM_INV_REQ_ERR`), as rxe does.
    #[error("atomic address not 8-byte aligned")]
    Misaligned,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyKind {
    Local,
    Remote,
}

/// The protection domains and memory regions of one device.
///
/// `R` is the key generator: production passes a ChaCha seeded from the OS, tests and the model
/// a seeded one (keys are then reproducible, which the model needs and which is harmless there).
pub struct MrTable<R = ChaCha12Rng> {
    rng: R,
    /// PD → number of regions registered in it.
    pds: BTreeMap<PdId, u32>,
    next_pd: u32,
    mrs: BTreeMap<MrId, MrInfo>,
    next_mr: u32,
    /// Bumped by every deregistration, so holders of a checked range know to check again.
    generation: u64,
    /// Both keys of every live region → (which key it is, the region). A copy of the
    /// [`MrInfo`] rather than an [`MrId`], so the packet-path check is one lookup.
    keys: BTreeMap<u32, (KeyKind, MrInfo)>,
    /// Retired keys, oldest first, mirrored in `quarantined` for lookup.
    retired: VecDeque<u32>,
    quarantined: BTreeSet<u32>,
}

/// Leaves out the generator: its state would predict every future key.
impl<R> fmt::Debug for MrTable<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MrTable")
            .field("pds", &self.pds)
            .field("mrs", &self.mrs)
            .field("quarantined", &self.retired.len())
            .finish_non_exhaustive()
    }
}

impl<R: CryptoRng> MrTable<R> {
    /// An empty table drawing keys from `rng`.
    pub fn new(rng: R) -> Self {
        MrTable {
            rng,
            pds: BTreeMap::new(),
            next_pd: 1,
            mrs: BTreeMap::new(),
            next_mr: 1,
            generation: 0,
            keys: BTreeMap::new(),
            retired: VecDeque::new(),
            quarantined: BTreeSet::new(),
        }
    }

    /// Allocates a protection domain (IBA §10.2.3, `ibv_alloc_pd`).
    pub fn alloc_pd(&mut self) -> PdId {
        let id = next_free(&mut self.next_pd, |v| self.pds.contains_key(&PdId(v)));
        self.pds.insert(PdId(id), 0);
        PdId(id)
    }

    /// Deallocates a protection domain (`ibv_dealloc_pd`).
    ///
    /// # Errors
    ///
    /// [`MrError::UnknownPd`] if it does not exist; [`MrError::Busy`] while regions are still
    /// registered in it (as `ibv_dealloc_pd` returns `EBUSY`).
    pub fn dealloc_pd(&mut self, pd: PdId) -> Result<(), MrError> {
        match self.pds.get(&pd) {
            None => Err(MrError::UnknownPd),
            Some(&n) if n > 0 => Err(MrError::Busy),
            Some(_) => {
                self.pds.remove(&pd);
                Ok(())
            }
        }
    }

    /// Registers `[addr, addr + len)` in `pd` with rights `access` (IBA §10.6, `ibv_reg_mr`).
    ///
    /// `addr` is the virtual address the application and its peer will use to name the region's
    /// bytes; the core never dereferences it. A zero-length region is allowed, as in verbs.
    ///
    /// # Errors
    ///
    /// [`MrError::UnknownPd`], [`MrError::UnsupportedAccess`],
    /// [`MrError::RemoteWriteWithoutLocalWrite`], [`MrError::AddressOverflow`], or
    /// [`MrError::KeysExhausted`] if the generator is broken.
    pub fn register(
        &mut self,
        pd: PdId,
        addr: u64,
        len: u64,
        access: AccessFlags,
    ) -> Result<MrInfo, MrError> {
        if !self.pds.contains_key(&pd) {
            return Err(MrError::UnknownPd);
        }
        let unsupported = access.bits() & !AccessFlags::SUPPORTED;
        if unsupported != 0 {
            return Err(MrError::UnsupportedAccess(unsupported));
        }
        // ibv_reg_mr(3): "If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set, then
        // IBV_ACCESS_LOCAL_WRITE must be set too."
        let remote_modify = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
        if access.bits() & remote_modify.bits() != 0 && !access.contains(AccessFlags::LOCAL_WRITE) {
            return Err(MrError::RemoteWriteWithoutLocalWrite);
        }
        if addr.checked_add(len).is_none() {
            return Err(MrError::AddressOverflow);
        }
        let lkey = self.draw_key(None)?;
        let rkey = self.draw_key(Some(lkey))?;
        let id = MrId(next_free(&mut self.next_mr, |v| {
            self.mrs.contains_key(&MrId(v))
        }));
        let info = MrInfo {
            id,
            lkey: Lkey(lkey),
            rkey: Rkey(rkey),
            addr,
            len,
            access,
            pd,
        };
        self.mrs.insert(id, info);
        self.keys.insert(lkey, (KeyKind::Local, info));
        self.keys.insert(rkey, (KeyKind::Remote, info));
        if let Some(n) = self.pds.get_mut(&pd) {
            *n = n.saturating_add(1);
        }
        Ok(info)
    }

    /// Deregisters a region (`ibv_dereg_mr`): both keys stop working immediately and enter the
    /// quarantine. See the module docs for why nothing else needs revoking.
    ///
    /// # Errors
    ///
    /// [`MrError::UnknownMr`] if no such region is registered.
    pub fn deregister(&mut self, id: MrId) -> Result<MrInfo, MrError> {
        let info = self.mrs.remove(&id).ok_or(MrError::UnknownMr)?;
        for key in [info.lkey.0, info.rkey.0] {
            self.keys.remove(&key);
            self.retire(key);
        }
        if let Some(n) = self.pds.get_mut(&info.pd) {
            *n = n.saturating_sub(1);
        }
        self.generation += 1;
        Ok(info)
    }

    /// A number that changes whenever a region is deregistered. A QP that checked a range once
    /// (at the first packet of a message) reuses the result while this stays the same and checks
    /// again when it changed, so deregistration takes effect at the next packet without a
    /// table lookup per packet in the common case.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// True if `pd` is allocated.
    pub fn has_pd(&self, pd: PdId) -> bool {
        self.pds.contains_key(&pd)
    }

    /// The region registered as `id`, if any.
    pub fn get(&self, id: MrId) -> Option<&MrInfo> {
        self.mrs.get(&id)
    }

    /// Checks a local scatter/gather entry `[addr, addr + len)` under `lkey` for a QP in `pd`
    /// that needs rights `need` (empty for a gather the CA only reads, LOCAL_WRITE for a
    /// receive buffer or READ/atomic response target). Returns the region and the offset of
    /// `addr` in it, ready for [`Memory`].
    ///
    /// # Errors
    ///
    /// An [`AccessError`] the QP reports as a local protection error; checked in the order key,
    /// PD, rights, bounds.
    pub fn check_local(
        &self,
        pd: PdId,
        lkey: Lkey,
        addr: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<(MrId, u64), AccessError> {
        self.check(KeyKind::Local, lkey.0, pd, addr, len, need)
    }

    /// Checks an incoming RDMA WRITE or READ of `[addr, addr + len)` under `rkey` for a QP in
    /// `pd`; `need` is REMOTE_WRITE or REMOTE_READ. Returns the region and the offset of `addr`.
    ///
    /// A zero-length RDMA carries an R_Key and VA that IBA Vol. 1 ch. 9 says are not validated;
    /// applying that exemption is the responder's job (it should not call this for length 0). If
    /// called with `len` 0, the key must still be valid and `addr` within `[base, base + len]`.
    ///
    /// # Errors
    ///
    /// An [`AccessError`] the responder answers with NAK "remote access error"; checked in the
    /// order key, PD, rights, bounds (as rxe's `check_rkey`).
    pub fn check_remote(
        &self,
        pd: PdId,
        rkey: Rkey,
        addr: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<(MrId, u64), AccessError> {
        self.check(KeyKind::Remote, rkey.0, pd, addr, len, need)
    }

    /// Checks an incoming atomic (CmpSwap or FetchAdd) on the 8-byte word at `addr` under `rkey`
    /// (IBA §9.4.5): [`MrTable::check_remote`] with REMOTE_ATOMIC and length 8, then alignment.
    ///
    /// # Errors
    ///
    /// As [`MrTable::check_remote`], plus [`AccessError::Misaligned`] when `addr` is not a
    /// multiple of 8 (checked last, so a bad key is still reported as an access error).
    pub fn check_remote_atomic(
        &self,
        pd: PdId,
        rkey: Rkey,
        addr: u64,
    ) -> Result<(MrId, u64), AccessError> {
        let found = self.check(
            KeyKind::Remote,
            rkey.0,
            pd,
            addr,
            8,
            AccessFlags::REMOTE_ATOMIC,
        )?;
        if addr & 7 != 0 {
            return Err(AccessError::Misaligned);
        }
        Ok(found)
    }

    fn check(
        &self,
        kind: KeyKind,
        key: u32,
        pd: PdId,
        addr: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<(MrId, u64), AccessError> {
        let (k, mr) = self.keys.get(&key).ok_or(AccessError::UnknownKey)?;
        if *k != kind {
            return Err(AccessError::UnknownKey);
        }
        if mr.pd != pd {
            return Err(AccessError::WrongPd);
        }
        if !mr.access.contains(need) {
            return Err(AccessError::Permission);
        }
        let offset = mr.offset_of(addr, len).ok_or(AccessError::OutOfBounds)?;
        Ok((mr.id, offset))
    }

    /// A key that is not 0, not `other`, not live and not quarantined.
    fn draw_key(&mut self, other: Option<u32>) -> Result<u32, MrError> {
        for _ in 0..MAX_KEY_DRAWS {
            let k = self.rng.next_u32();
            if k != 0
                && Some(k) != other
                && !self.keys.contains_key(&k)
                && !self.quarantined.contains(&k)
            {
                return Ok(k);
            }
        }
        Err(MrError::KeysExhausted)
    }

    fn retire(&mut self, key: u32) {
        if self.retired.len() >= KEY_QUARANTINE
            && let Some(old) = self.retired.pop_front()
        {
            self.quarantined.remove(&old);
        }
        self.retired.push_back(key);
        self.quarantined.insert(key);
    }
}

/// The next value from `*next` (skipping 0 and values `taken` reports in use), advancing it.
/// Handles are not secret, so counting is fine; skipping taken ones keeps them unique after
/// 2^32 allocations.
fn next_free(next: &mut u32, taken: impl Fn(u32) -> bool) -> u32 {
    loop {
        let v = *next;
        *next = next.wrapping_add(1);
        if v != 0 && !taken(v) {
            return v;
        }
    }
}

/// An atomic operation on a 64-bit word (IBA §9.4.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    /// CmpSwap: if the word equals `compare`, replace it with `swap`.
    CompareSwap {
        /// Value the word must hold for the swap to happen.
        compare: u64,
        /// Value written when it does.
        swap: u64,
    },
    /// FetchAdd: add `add` to the word, modulo 2^64.
    FetchAdd {
        /// Addend.
        add: u64,
    },
}

impl AtomicOp {
    /// The word's new value given its original value (`original` when a CmpSwap misses).
    pub const fn apply(self, original: u64) -> u64 {
        match self {
            AtomicOp::CompareSwap { compare, swap } => {
                if original == compare {
                    swap
                } else {
                    original
                }
            }
            AtomicOp::FetchAdd { add } => original.wrapping_add(add),
        }
    }
}

/// The host's memory, as the core sees it: bytes of registered regions addressed by
/// ([`MrId`], offset).
///
/// # Contract
///
/// The core calls these only after an [`MrTable`] check succeeded, so `offset + len` lies inside
/// the region registered as `mr` and an implementation may rely on it. It must nevertheless stay
/// sound if the core is wrong: a safe-Rust implementation that panics on a bad slice index is
/// sound (acceptable for a test double, not for the daemon); one using raw pointers must bound
/// the access itself.
pub trait Memory {
    /// Copies `buf.len()` bytes at `offset` in region `mr` into `buf`.
    fn read(&self, mr: MrId, offset: u64, buf: &mut [u8]);

    /// Copies `data` to `offset` in region `mr`.
    fn write(&mut self, mr: MrId, offset: u64, data: &[u8]);

    /// Performs `op` on the 64-bit word at `offset` (8-byte aligned, checked by
    /// [`MrTable::check_remote_atomic`]) and returns its original value, which the responder
    /// sends back in the AtomicAckETH.
    ///
    /// The word is in the host's native byte order: the big-endian operands of the AtomicETH
    /// are converted by the wire layer, and the memory is then an ordinary `u64` of the
    /// application, as rxe reads it (`*(u64 *)vaddr`).
    ///
    /// The provided read-modify-write is atomic only with respect to other calls through the
    /// core, which serialises them; IBA guarantees no more by default (`IBV_ATOMIC_HCA`).
    /// Memory shared with CPU threads that race the HCA must override this with a real atomic.
    fn atomic(&mut self, mr: MrId, offset: u64, op: AtomicOp) -> u64 {
        let mut word = [0u8; 8];
        self.read(mr, offset, &mut word);
        let original = u64::from_ne_bytes(word);
        let new = op.apply(original);
        if new != original {
            self.write(mr, offset, &new.to_ne_bytes());
        }
        original
    }
}

/// A [`Memory`] of plain vectors, one per region: for tests, the network model and examples.
///
/// It never panics on a contract violation (unknown region, range past the end): in release
/// builds reads fill the missing part with zeros and writes drop it; debug builds assert, so a
/// core bug shows up in tests.
#[derive(Clone, Debug, Default)]
pub struct VecMemory {
    regions: BTreeMap<MrId, Vec<u8>>,
}

impl VecMemory {
    /// No regions.
    pub fn new() -> Self {
        Self::default()
    }
    /// Backs region `mr` with `bytes` (whose length should be the region's), returning the
    /// previous backing if any.
    pub fn insert(&mut self, mr: MrId, bytes: Vec<u8>) -> Option<Vec<u8>> {
        self.regions.insert(mr, bytes)
    }
    /// Removes and returns region `mr`'s bytes.
    pub fn remove(&mut self, mr: MrId) -> Option<Vec<u8>> {
        self.regions.remove(&mr)
    }
    /// Region `mr`'s bytes.
    pub fn get(&self, mr: MrId) -> Option<&[u8]> {
        self.regions.get(&mr).map(Vec::as_slice)
    }
    /// Region `mr`'s bytes, mutably.
    pub fn get_mut(&mut self, mr: MrId) -> Option<&mut [u8]> {
        self.regions.get_mut(&mr).map(Vec::as_mut_slice)
    }
}

/// The part of `[offset, offset + n)` that lies inside a region of `len` bytes, as a range of
/// the region, and how many of the `n` bytes that is.
fn clamp(len: usize, offset: u64, n: usize) -> (core::ops::Range<usize>, usize) {
    let start = usize::try_from(offset).unwrap_or(usize::MAX).min(len);
    let end = start.saturating_add(n).min(len);
    (start..end, end - start)
}

impl Memory for VecMemory {
    fn read(&self, mr: MrId, offset: u64, buf: &mut [u8]) {
        let Some(region) = self.regions.get(&mr) else {
            debug_assert!(false, "read from unbacked region {mr}");
            buf.fill(0);
            return;
        };
        let (range, n) = clamp(region.len(), offset, buf.len());
        debug_assert_eq!(n, buf.len(), "read past the end of {mr}");
        let (inside, outside) = buf.split_at_mut(n);
        inside.copy_from_slice(&region[range]);
        outside.fill(0);
    }

    fn write(&mut self, mr: MrId, offset: u64, data: &[u8]) {
        let Some(region) = self.regions.get_mut(&mr) else {
            debug_assert!(false, "write to unbacked region {mr}");
            return;
        };
        let (range, n) = clamp(region.len(), offset, data.len());
        debug_assert_eq!(n, data.len(), "write past the end of {mr}");
        region[range].copy_from_slice(&data[..n]);
    }
}

/// A [`Memory`] with no bytes at all: reads leave the buffer as it is (a frame's payload is
/// whatever its buffer held before) and writes vanish. For at-scale simulation, where only
/// packet sizes and timing matter, and for benches of the engine without its copies: filling
/// a 4 KiB payload with zeros would cost what a copy costs.
#[derive(Clone, Copy, Debug, Default)]
pub struct NullMemory;

impl Memory for NullMemory {
    fn read(&self, _mr: MrId, _offset: u64, _buf: &mut [u8]) {}
    fn write(&mut self, _mr: MrId, _offset: u64, _data: &[u8]) {}
}

#[cfg(test)]
mod tests;
