//! [`HostMemory`]: the engine's [`Memory`] on a host, whoever holds a region's bytes.
//!
//! A region is backed ([`Backing`]) by:
//! - bytes the device owns ([`Backing::Owned`]: the Rust API in-process);
//! - an attached application's memfd mapped into the daemon ([`Backing::Shared`]);
//! - this process's own buffer at its own address ([`Backing::Caller`]: the C ABI in-process,
//!   whose `ibv_reg_mr` takes any pointer);
//! - another process's buffer ([`Backing::Process`]: the C ABI attached to the daemon), reached
//!   through the `/proc/PID/mem` descriptor that process opened on itself and sent with the
//!   registration ([`ProcessMemory`]); the whole pages of that buffer the process moved onto
//!   memfds ([`super::SharedPages`]) are mapped here instead ([`ProcessRange::map_pages`]), so
//!   most of a region costs a copy, not a system call.
//!
//! Why a descriptor of the process's own memory, and not `process_vm_readv` on its PID: the
//! descriptor is bound to that process's address space when the process opens it, so a PID
//! reused after the process died can never be confused with it (accesses then fail), and the
//! daemon needs no ptrace right over its applications. The daemon reads and writes only the
//! ranges the core found inside a region that application registered, and forgets the
//! descriptor with the region.
//!
//! The core checks every access against the region's bounds; each backing checks again, so a
//! core bug reads zeros or drops bytes instead of reaching outside a region. A process region
//! whose pages the application unmapped cannot be read or written: the bytes read as zeros,
//! the write is dropped, and the region is recorded ([`HostMemory::take_faults`]) for its owner
//! to move the application's QPs to ERROR, as an HCA fails a QP on a protection fault.
//!
//! Deviations: atomics on the part of a process region reached through `/proc/PID/mem` are a
//! read and a write (atomic against the engine's other accesses, `IBV_ATOMIC_HCA`, not against
//! the application's own CPU atomics on the word); everywhere else they are a real atomic on
//! the word.

use rocev2_core::mr::{AtomicOp, Memory, MrId};
use rocev2_ipc::shm::Mapping;
#[cfg(test)]
use rocev2_ipc::shm::Region;
use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What holds a region's bytes; see the module docs.
#[derive(Debug)]
pub enum Backing {
    /// Bytes the device owns.
    Owned(Vec<u8>),
    /// An attached application's memfd, mapped here.
    Shared(Mapping),
    /// A buffer of this process.
    Caller(CallerRange),
    /// A range of another process's memory.
    Process(ProcessRange),
}

impl Backing {
    /// The 8-byte aligned word at `off` as a real atomic, when this backing has one.
    fn atomic_word(&self, off: usize) -> Option<&AtomicU64> {
        match self {
            Backing::Shared(r) => r.atomic_u64(off),
            Backing::Caller(c) => c.word(off),
            Backing::Process(p) => p.word(off),
            Backing::Owned(_) => None,
        }
    }
}

/// A buffer of this process registered at its own address (`ibv_reg_mr`'s pointer).
#[derive(Debug)]
pub struct CallerRange {
    ptr: usize,
    len: usize,
}

impl CallerRange {
    /// The `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr..ptr + len` must stay readable and writable memory of this process for as long as
    /// the range is held (the `ibv_reg_mr` contract: until `ibv_dereg_mr`), and nothing may
    /// hold a Rust reference into it meanwhile (the engine writes it as a NIC's DMA would).
    pub unsafe fn new(ptr: *mut u8, len: usize) -> CallerRange {
        CallerRange {
            ptr: ptr as usize,
            len,
        }
    }

    /// Its address.
    pub fn addr(&self) -> usize {
        self.ptr
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of `n` bytes at `off`, if they lie inside.
    fn span(&self, off: usize, n: usize) -> Option<usize> {
        (off.checked_add(n)? <= self.len).then(|| self.ptr + off)
    }

    fn read(&self, off: usize, buf: &mut [u8]) -> bool {
        let Some(p) = self.span(off, buf.len()) else {
            return false;
        };
        // SAFETY: the bytes lie inside the range (checked), which `new`'s contract keeps
        // readable while held; `buf` is ours and distinct from it.
        unsafe { rocev2_ipc::shm::copy(p as *const u8, buf.as_mut_ptr(), buf.len()) };
        true
    }

    fn write(&self, off: usize, data: &[u8]) -> bool {
        let Some(p) = self.span(off, data.len()) else {
            return false;
        };
        // SAFETY: as in `read`, inside a live writable range no Rust reference points into.
        unsafe { rocev2_ipc::shm::copy(data.as_ptr(), p as *mut u8, data.len()) };
        true
    }

    fn word(&self, off: usize) -> Option<&AtomicU64> {
        let p = self.span(off, 8).filter(|p| p.is_multiple_of(8))?;
        // SAFETY: 8 aligned bytes inside the live range (checked); the engine reaches the word
        // only through atomics, and the application's threads racing it is the verbs contract
        // for atomics on host memory.
        Some(unsafe { AtomicU64::from_ptr(p as *mut u64) })
    }
}

/// An attached application's address space: the `/proc/PID/mem` descriptor it opened on
/// itself and sent to the daemon. Cheap to clone; every region of the application shares it.
#[derive(Debug, Clone)]
pub struct ProcessMemory {
    file: Arc<File>,
}

/// `PROC_SUPER_MAGIC`: the file system type of `/proc`.
const PROC_SUPER_MAGIC: i64 = 0x9fa0;

impl ProcessMemory {
    /// Takes `fd` after checking it is a process's `mem` file in `/proc`: reads and writes on
    /// anything else (a pipe, a socket) could block the daemon or mean something else.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] for another kind of descriptor.
    pub fn from_fd(fd: OwnedFd) -> io::Result<ProcessMemory> {
        let fs = rustix::fs::fstatfs(&fd)?;
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
        #[allow(clippy::unnecessary_cast)] // f_type's width differs between targets.
        if fs.f_type as i64 != PROC_SUPER_MAGIC || !link.ends_with("mem") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a process's memory", link.display()),
            ));
        }
        Ok(ProcessMemory {
            file: Arc::new(File::from(fd)),
        })
    }

    /// This process's own memory (what an application sends with a registration).
    ///
    /// # Errors
    /// Opening `/proc/self/mem`.
    pub fn open_own() -> io::Result<OwnedFd> {
        Ok(std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/proc/self/mem")?
            .into())
    }

    /// The `len` bytes at `addr`, after checking that their first and last byte are mapped
    /// (a registration of memory the process does not have fails at once; a hole in the
    /// middle, or an unmap later, faults on access).
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] for a range that wraps or whose ends are not mapped.
    pub fn range(&self, addr: u64, len: u64) -> io::Result<ProcessRange> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_string());
        let last = addr
            .checked_add(len.saturating_sub(1))
            .ok_or_else(|| bad("the range wraps"))?;
        let len = usize::try_from(len).map_err(|_| bad("the range is too long"))?;
        if len > 0 {
            let mut b = [0u8; 1];
            for at in [addr, last] {
                self.file
                    .read_exact_at(&mut b, at)
                    .map_err(|e| bad(&format!("address {at:#x} is not mapped: {e}")))?;
            }
        }
        Ok(ProcessRange {
            mem: self.clone(),
            addr,
            len,
            pages: Vec::new(),
        })
    }
}

/// `len` bytes at `addr` of an attached application ([`ProcessMemory::range`]), some of them
/// on pages the application moved onto memfds the daemon maps ([`ProcessRange::map_pages`]).
#[derive(Debug)]
pub struct ProcessRange {
    mem: ProcessMemory,
    addr: u64,
    len: usize,
    /// Mapped pieces, in order of offset, none overlapping.
    pages: Vec<MappedPiece>,
}

/// `len` bytes at `offset` into a [`ProcessRange`] that are `region`'s at `file_offset`.
#[derive(Debug)]
struct MappedPiece {
    offset: usize,
    len: usize,
    file_offset: usize,
    region: Mapping,
}

/// Where the bytes of one part of an access are.
enum Part<'a> {
    /// In the process, at this address.
    Process(u64),
    /// In a mapped memfd, at this offset.
    Mapped(&'a Mapping, usize),
}

impl ProcessRange {
    /// Takes `len` bytes at `offset` of the range to be `region`'s bytes at `file_offset`:
    /// the application moved those pages onto that memfd (`SharedPages`). Only the
    /// application's own accesses can be wrong if it lies about where the pages are.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] for a piece outside the range or the memfd, or
    /// overlapping one taken before.
    pub fn map_pages(
        &mut self,
        offset: u64,
        len: u64,
        file_offset: u64,
        region: Mapping,
    ) -> io::Result<()> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_string());
        let size = |v: u64| usize::try_from(v).map_err(|_| bad("a piece out of range"));
        let (offset, len, file_offset) = (size(offset)?, size(len)?, size(file_offset)?);
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.len && len > 0);
        let file_end = file_offset.checked_add(len).filter(|&e| e <= region.len());
        if end.is_none() || file_end.is_none() {
            return Err(bad("a mapped piece lies outside its range or its memfd"));
        }
        let i = self.pages.partition_point(|p| p.offset < offset);
        let after_prev = i == 0 || self.pages[i - 1].offset + self.pages[i - 1].len <= offset;
        let before_next = self.pages.get(i).is_none_or(|n| offset + len <= n.offset);
        if !(after_prev && before_next) {
            return Err(bad("mapped pieces overlap"));
        }
        self.pages.insert(
            i,
            MappedPiece {
                offset,
                len,
                file_offset,
                region,
            },
        );
        Ok(())
    }

    /// Bytes of the range on mapped pages.
    pub fn mapped_bytes(&self) -> usize {
        self.pages.iter().map(|p| p.len).sum()
    }

    /// Runs `op` on each part of the `n` bytes at `off`, with the part's place in the access;
    /// false when they are not all inside or `op` fails on one.
    fn parts(
        &self,
        off: usize,
        n: usize,
        mut op: impl FnMut(Part<'_>, Range<usize>) -> bool,
    ) -> bool {
        if off.checked_add(n).is_none_or(|end| end > self.len) {
            return false;
        }
        let mut done = 0;
        while done < n {
            let at = off + done;
            let i = self.pages.partition_point(|p| p.offset + p.len <= at);
            let (part, avail) = match self.pages.get(i) {
                Some(p) if p.offset <= at => (
                    Part::Mapped(&p.region, p.file_offset + at - p.offset),
                    p.offset + p.len - at,
                ),
                Some(p) => (Part::Process(self.addr + at as u64), p.offset - at),
                None => (Part::Process(self.addr + at as u64), n - done),
            };
            let take = avail.min(n - done);
            if !op(part, done..done + take) {
                return false;
            }
            done += take;
        }
        true
    }

    fn read(&self, off: usize, buf: &mut [u8]) -> bool {
        let file = &self.mem.file;
        self.parts(off, buf.len(), |part, r| match part {
            Part::Process(at) => file.read_exact_at(&mut buf[r], at).is_ok(),
            Part::Mapped(region, at) => region.read(at, &mut buf[r]),
        })
    }

    fn write(&self, off: usize, data: &[u8]) -> bool {
        let file = &self.mem.file;
        self.parts(off, data.len(), |part, r| match part {
            Part::Process(at) => file.write_all_at(&data[r], at).is_ok(),
            Part::Mapped(region, at) => region.write(at, &data[r]),
        })
    }

    /// The word at `off` as a real atomic, when it lies on a mapped piece.
    fn word(&self, off: usize) -> Option<&AtomicU64> {
        let i = self.pages.partition_point(|p| p.offset + p.len <= off);
        let p = self
            .pages
            .get(i)
            .filter(|p| p.offset <= off && off + 8 <= p.offset + p.len)?;
        p.region.atomic_u64(p.file_offset + off - p.offset)
    }
}

/// Every region's backing, by the engine's region id; see the module docs.
#[derive(Debug, Default)]
pub struct HostMemory {
    regions: BTreeMap<MrId, Backing>,
    /// Process regions an access failed on since the last [`HostMemory::take_faults`]
    /// (behind a lock because reads take `&self`; only a fault takes it).
    faults: Mutex<Vec<MrId>>,
}

impl HostMemory {
    /// Backs region `mr` with `backing`.
    pub fn insert(&mut self, mr: MrId, backing: Backing) {
        self.regions.insert(mr, backing);
    }

    /// Forgets region `mr`; its bytes are never touched again. Returns its backing.
    pub fn remove(&mut self, mr: MrId) -> Option<Backing> {
        self.regions.remove(&mr)
    }

    /// Region `mr`'s backing.
    pub fn get(&self, mr: MrId) -> Option<&Backing> {
        self.regions.get(&mr)
    }

    /// Region `mr`'s bytes, when the device owns them.
    pub fn owned(&self, mr: MrId) -> Option<&[u8]> {
        match self.regions.get(&mr) {
            Some(Backing::Owned(v)) => Some(v),
            _ => None,
        }
    }

    /// Region `mr`'s bytes, mutably, when the device owns them.
    pub fn owned_mut(&mut self, mr: MrId) -> Option<&mut [u8]> {
        match self.regions.get_mut(&mr) {
            Some(Backing::Owned(v)) => Some(v),
            _ => None,
        }
    }

    /// Regions backed.
    pub fn len(&self) -> usize {
        self.regions.len()
    }

    /// True when no region is backed.
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// The regions an access failed on since the last call, each once.
    pub fn take_faults(&mut self) -> Vec<MrId> {
        let mut f = std::mem::take(self.faults.get_mut().unwrap_or_else(|e| e.into_inner()));
        f.sort_unstable();
        f.dedup();
        f
    }

    fn fault(&self, mr: MrId) {
        if matches!(self.regions.get(&mr), Some(Backing::Process(_))) {
            let mut f = self.faults.lock().unwrap_or_else(|e| e.into_inner());
            f.push(mr);
        }
    }
}

/// `offset` as an index (out of range offsets fail every bounds check).
fn at(offset: u64) -> usize {
    usize::try_from(offset).unwrap_or(usize::MAX)
}

/// Copies `buf.len()` bytes at `off` of `b` into `buf`; false when they are not all there.
fn read(b: &Backing, off: usize, buf: &mut [u8]) -> bool {
    match b {
        Backing::Owned(v) => off
            .checked_add(buf.len())
            .and_then(|end| v.get(off..end))
            .map(|src| rocev2_ipc::shm::copy_slice(buf, src))
            .is_some(),
        Backing::Shared(r) => r.read(off, buf),
        Backing::Caller(c) => c.read(off, buf),
        Backing::Process(p) => p.read(off, buf),
    }
}

impl Memory for HostMemory {
    fn read(&self, mr: MrId, offset: u64, buf: &mut [u8]) {
        if !self
            .regions
            .get(&mr)
            .is_some_and(|b| read(b, at(offset), buf))
        {
            buf.fill(0);
            self.fault(mr);
        }
    }

    fn write(&mut self, mr: MrId, offset: u64, data: &[u8]) {
        let off = at(offset);
        let ok = match self.regions.get_mut(&mr) {
            Some(Backing::Owned(v)) => off
                .checked_add(data.len())
                .and_then(|end| v.get_mut(off..end))
                .map(|dst| rocev2_ipc::shm::copy_slice(dst, data))
                .is_some(),
            Some(Backing::Shared(r)) => r.write(off, data),
            Some(Backing::Caller(c)) => c.write(off, data),
            Some(Backing::Process(p)) => p.write(off, data),
            None => false,
        };
        if !ok {
            self.fault(mr);
        }
    }

    fn atomic(&mut self, mr: MrId, offset: u64, op: AtomicOp) -> u64 {
        let off = at(offset);
        let Some(b) = self.regions.get(&mr) else {
            return 0;
        };
        if let Some(word) = b.atomic_word(off) {
            return match op {
                AtomicOp::FetchAdd { add } => word.fetch_add(add, Ordering::SeqCst),
                AtomicOp::CompareSwap { compare, swap } => word
                    .compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst)
                    .unwrap_or_else(|current| current),
            };
        }
        let mut w = [0u8; 8];
        if !off.is_multiple_of(8) || !read(b, off, &mut w) {
            self.fault(mr);
            return 0;
        }
        let original = u64::from_ne_bytes(w);
        let new = op.apply(original);
        if new != original {
            self.write(mr, offset, &new.to_ne_bytes());
        }
        original
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process() -> ProcessMemory {
        ProcessMemory::from_fd(ProcessMemory::open_own().unwrap()).unwrap()
    }

    #[test]
    fn every_backing_reads_writes_and_stays_inside_its_region() {
        let mut caller = vec![0u8; 16];
        let mut far = vec![0u8; 16];
        let mut m = HostMemory::default();
        let ids = [1, 2, 3, 4].map(MrId::new);
        m.insert(ids[0], Backing::Owned(vec![0; 16]));
        m.insert(
            ids[1],
            Backing::Shared(Region::create("t", 16).unwrap().into_mapping()),
        );
        // SAFETY: `caller` outlives `m`'s uses and is not touched until they end.
        m.insert(
            ids[2],
            Backing::Caller(unsafe { CallerRange::new(caller.as_mut_ptr(), 16) }),
        );
        let p = process().range(far.as_mut_ptr() as u64, 16).unwrap();
        m.insert(ids[3], Backing::Process(p));
        for id in ids {
            m.write(id, 8, &5u64.to_ne_bytes());
            assert_eq!(m.atomic(id, 8, AtomicOp::FetchAdd { add: 2 }), 5, "{id}");
            let cs = AtomicOp::CompareSwap {
                compare: 7,
                swap: 9,
            };
            assert_eq!(m.atomic(id, 8, cs), 7, "{id}");
            let mut w = [0u8; 8];
            m.read(id, 8, &mut w);
            assert_eq!(u64::from_ne_bytes(w), 9, "{id}");
            // One byte past the end: the read is zeros and the write is dropped whole.
            m.write(id, 9, &[1; 8]);
            let mut out = [0xffu8; 8];
            m.read(id, 9, &mut out);
            assert_eq!(out, [0; 8], "{id}");
            assert_eq!(m.atomic(id, 4, AtomicOp::FetchAdd { add: 1 }), 0, "{id}");
        }
        assert_eq!(u64::from_ne_bytes(caller[8..].try_into().unwrap()), 9);
        assert_eq!(u64::from_ne_bytes(far[8..].try_into().unwrap()), 9);
        // Only process regions fault (the others' misses are core bugs caught by the bounds).
        assert_eq!(m.take_faults(), [ids[3]]);
        m.remove(ids[2]);
        m.write(ids[2], 0, &[7]);
        assert_eq!(caller[0], 0, "a removed region is not written");
    }

    #[test]
    fn a_process_range_must_be_mapped_and_faults_once_unmapped() {
        let mem = process();
        let page = 4096;
        // SAFETY: a fresh anonymous mapping of three pages, unmapped below by us alone.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                3 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: the third page of our own mapping, so the range below ends in a hole.
        assert_eq!(
            unsafe { libc::munmap(p.cast::<u8>().add(2 * page).cast(), page) },
            0
        );
        let addr = p as u64;
        let r = mem.range(addr, 2 * page as u64).unwrap();
        assert!(
            mem.range(addr, 3 * page as u64).is_err(),
            "past the mapping"
        );
        assert!(mem.range(u64::MAX - 2, 8).is_err(), "wraps");
        let mut m = HostMemory::default();
        let id = MrId::new(9);
        m.insert(id, Backing::Process(r));
        m.write(id, 10, b"x");
        assert!(m.take_faults().is_empty());
        // SAFETY: unmaps our own mapping; only the process range refers to it, through
        // /proc/self/mem, which then fails instead of touching anything.
        assert_eq!(unsafe { libc::munmap(p, 2 * page) }, 0);
        let mut b = [1u8; 4];
        m.read(id, 8, &mut b);
        assert_eq!(b, [0; 4]);
        m.write(id, 10, b"y");
        assert_eq!(m.take_faults(), [id]);
    }

    #[test]
    fn a_process_range_with_mapped_pages_splits_accesses_between_them() {
        let mut far = vec![0u8; 64];
        let mut r = process().range(far.as_mut_ptr() as u64, 64).unwrap();
        let piece = Region::create("t", 32).unwrap();
        let view = Region::from_fd(piece.fd().try_clone_to_owned().unwrap(), 32).unwrap();
        // Bytes 16..32 of the range are the memfd's 8..24.
        r.map_pages(16, 16, 8, piece.into_mapping()).unwrap();
        let refused = |r: &mut ProcessRange, o, l, f| {
            let p = Region::create("t", 32).unwrap().into_mapping();
            r.map_pages(o, l, f, p).is_err()
        };
        assert!(refused(&mut r, 24, 16, 0), "overlaps");
        assert!(refused(&mut r, 60, 8, 0), "past the range");
        assert!(refused(&mut r, 40, 8, 30), "past the memfd");
        assert!(refused(&mut r, 40, 0, 0), "empty");
        assert!(!refused(&mut r, 40, 8, 0), "a second piece");
        assert_eq!(r.mapped_bytes(), 24);
        let mut m = HostMemory::default();
        let id = MrId::new(3);
        m.insert(id, Backing::Process(r));
        // A write across process, mapped, process, mapped bytes lands in each place.
        let data: Vec<u8> = (1..=40).collect();
        m.write(id, 4, &data);
        let mut back = [0u8; 40];
        m.read(id, 4, &mut back);
        assert_eq!(back[..], data[..]);
        assert_eq!(
            far[4..16],
            data[..12],
            "before the piece: the process's own bytes"
        );
        assert_eq!(
            far[16..32],
            [0; 16],
            "the piece's bytes are the memfd's, not these"
        );
        assert_eq!(far[32..40], data[28..36]);
        let mut b = [0u8; 16];
        view.read(8, &mut b);
        assert_eq!(b[..], data[12..28]);
        // An atomic on a mapped word is a real one on the memfd.
        m.write(id, 24, &7u64.to_ne_bytes());
        assert_eq!(m.atomic(id, 24, AtomicOp::FetchAdd { add: 1 }), 7);
        let word = view.atomic_u64(16).unwrap();
        assert_eq!(word.load(Ordering::SeqCst), 8);
        assert!(m.take_faults().is_empty());
    }

    #[test]
    fn only_a_proc_mem_descriptor_is_taken() {
        let f: OwnedFd = File::open("/proc/self/status").unwrap().into();
        assert!(ProcessMemory::from_fd(f).is_err());
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(ProcessMemory::from_fd(a.into()).is_err());
    }
}
