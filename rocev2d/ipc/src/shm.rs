//! Sealed shared memory: a memfd mapped into the daemon and into one application.
//!
//! Both kinds of shared memory, an application's registered regions and the rings, are a
//! [`Region`]. The daemon maps memory another process also writes, and that process may be
//! hostile, so the rules are:
//! - the file is a memfd sealed against shrinking and growing (`F_SEAL_SHRINK | F_SEAL_GROW`,
//!   checked with `F_GET_SEALS` before mapping): an mmap'd file that shrinks makes the next
//!   access raise SIGBUS, which would kill the daemon;
//! - it is an ordinary memfd, on the kernel's shmem (tmpfs), checked with `fstatfs`: a hugetlb
//!   memfd passes the seal check too, but a hole its owner punches in it (`fallocate`, which
//!   the seals allow) leaves a mapped page that raises SIGBUS when no huge page is free to
//!   back it again. A hole punched in a shmem memfd reads as zeros and is backed again on the
//!   next access; the one way that access can still fail is strict overcommit
//!   (`vm.overcommit_memory=2`) with memory exhausted, a host-wide condition the daemon's
//!   documentation names (docs/security.md);
//! - the daemon never forms a Rust reference to the bytes: it copies in and out with bounds
//!   checks ([`Mapping::read`], [`Mapping::write`]) and uses atomics for indexes and for RDMA
//!   atomics, so whatever the other process does concurrently, the daemon only ever sees
//!   some bytes, never undefined behaviour of its own code.
//!
//! The application, which trusts the daemon, also gets slices ([`Mapping::bytes`],
//! [`Mapping::bytes_mut`]) over its own regions, as libibverbs hands an HCA a buffer the
//! application keeps using.
//!
//! Deviations: none.
#![allow(unsafe_code)]

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};
use std::ffi::c_void;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// Why a descriptor was refused as shared memory.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// A system call failed.
    #[error("{0}: {1}")]
    Sys(&'static str, std::io::Error),
    /// Not a memfd sealed with `F_SEAL_SHRINK | F_SEAL_GROW`: the owner could shrink it under
    /// the daemon's mapping.
    #[error("shared memory must be a memfd sealed against shrinking and growing")]
    NotSealed,
    /// A memfd on another file system than shmem (hugetlbfs): see the module docs.
    #[error(
        "shared memory must be an ordinary memfd (file system type {fs_type:#x} refused: a \
         hugetlb memfd's punched hole raises SIGBUS)"
    )]
    NotShmem {
        /// `fstatfs`'s `f_type`.
        fs_type: u64,
    },
    /// The file's size is not the size announced with it.
    #[error("shared memory of {actual} bytes where {expected} were announced")]
    WrongSize {
        /// Announced.
        expected: u64,
        /// Found by fstat.
        actual: u64,
    },
}

/// `TMPFS_MAGIC` (linux/magic.h): the file system of an ordinary memfd.
const TMPFS_MAGIC: u64 = 0x0102_1994;

fn sys(what: &'static str) -> impl FnOnce(rustix::io::Errno) -> ShmError {
    move |e| ShmError::Sys(what, e.into())
}

/// A shared mapping of a sealed memfd, with the memfd; see the module docs. Its bytes are
/// reached through the [`Mapping`] it derefs to.
#[derive(Debug)]
pub struct Region {
    fd: OwnedFd,
    map: Mapping,
}

/// The mapping of a [`Region`] without its descriptor ([`Region::into_mapping`]): what the
/// daemon keeps of memory it only reads and writes, so the descriptors it holds stay few.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value until drop; every access goes through
// bounds-checked copies, atomics, or borrows tied to `&self`/`&mut self`, so moving the handle
// to, or sharing it with, another thread adds no aliasing the methods don't already handle.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&self` methods only copy or use atomics.
unsafe impl Sync for Mapping {}

impl Region {
    /// A new zero-filled memfd of `len` bytes (at least 1), sealed, mapped read-write.
    ///
    /// # Errors
    /// `memfd_create`, `ftruncate`, sealing or `mmap` failed (e.g. out of memory).
    pub fn create(name: &str, len: usize) -> Result<Region, ShmError> {
        let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
            .map_err(sys("memfd_create"))?;
        let len = len.max(1);
        rustix::fs::ftruncate(&fd, len as u64).map_err(sys("ftruncate"))?;
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
            .map_err(sys("F_ADD_SEALS"))?;
        Region::map(fd, len)
    }

    /// Maps a memfd received from another process, after checking that it is sealed against
    /// shrinking and growing and holds exactly `len` bytes (at least 1).
    ///
    /// # Errors
    /// [`ShmError::NotSealed`], [`ShmError::NotShmem`], [`ShmError::WrongSize`], or a failed
    /// `fstat`/`fstatfs`/`mmap`.
    pub fn from_fd(fd: OwnedFd, len: u64) -> Result<Region, ShmError> {
        let seals = rustix::fs::fcntl_get_seals(&fd).map_err(|_| ShmError::NotSealed)?;
        if !seals.contains(SealFlags::SHRINK | SealFlags::GROW) {
            return Err(ShmError::NotSealed);
        }
        let fs_type = rustix::fs::fstatfs(&fd).map_err(sys("fstatfs"))?.f_type as u64;
        if fs_type != TMPFS_MAGIC {
            return Err(ShmError::NotShmem { fs_type });
        }
        let expected = len.max(1);
        let actual = rustix::fs::fstat(&fd).map_err(sys("fstat"))?.st_size as u64;
        if actual != expected {
            return Err(ShmError::WrongSize { expected, actual });
        }
        let len =
            usize::try_from(expected).map_err(|_| ShmError::WrongSize { expected, actual })?;
        Region::map(fd, len)
    }

    fn map(fd: OwnedFd, len: usize) -> Result<Region, ShmError> {
        // SAFETY: a fresh shared mapping at an address the kernel picks overlaps no Rust
        // object; `len` is the file's sealed size and the file is shmem, so every page of it
        // is backed or backed again on access (module docs: strict overcommit aside).
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                &fd,
                0,
            )
        }
        .map_err(sys("mmap"))?;
        let ptr = NonNull::new(ptr.cast::<u8>())
            .ok_or(ShmError::Sys("mmap", std::io::Error::other("null mapping")))?;
        Ok(Region {
            fd,
            map: Mapping { ptr, len },
        })
    }

    /// The memfd, to send to the other process.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The mapping alone, the memfd closed (the mapping keeps the memory).
    pub fn into_mapping(self) -> Mapping {
        self.map
    }
}

impl std::ops::Deref for Region {
    type Target = Mapping;

    fn deref(&self) -> &Mapping {
        &self.map
    }
}

impl std::ops::DerefMut for Region {
    fn deref_mut(&mut self) -> &mut Mapping {
        &mut self.map
    }
}

/// The longest piece [`copy`] hands to `memcpy` at once: below the size from which glibc's
/// `memcpy` turns to `rep movsb` on x86-64 (2112 bytes on CPUs with fast short `rep movsb`,
/// 4096 or more on others with AVX2).
const PIECE: usize = 2048;

/// Copies `len` bytes from `src` to `dst` in pieces of at most 2 KiB (`PIECE`): the copies of
/// payloads in and out of regions and the datapaths' frame buffers (a frame built or
/// received, a region's bytes read or written) go through here.
///
/// Why pieces: above ~2 KiB glibc copies with `rep movsb`, which an AMD EPYC runs ~35 times
/// slower when the destination lies 1 to 31 bytes past the source modulo 4096. A frame's
/// payload starts 54 or 70 bytes into its buffer, so WRITEs from an MR at 31 of the 4096 page
/// offsets hit it, and cut `write_bw` by a third. Pieces below the threshold take glibc's
/// vector loop, which is about as fast at every offset (BENCHMARKS.md, "Copies in pieces").
///
/// # Safety
/// As [`std::ptr::copy_nonoverlapping`]: `src` readable and `dst` writable for `len` bytes,
/// the two not overlapping.
pub unsafe fn copy(src: *const u8, dst: *mut u8, len: usize) {
    let mut at = 0;
    while at < len {
        let n = PIECE.min(len - at);
        // SAFETY: `at + n <= len`, inside both ranges the caller vouches for.
        unsafe { std::ptr::copy_nonoverlapping(src.add(at), dst.add(at), n) };
        at += n;
    }
}

/// [`copy`] between two slices of equal length (panics otherwise, as `copy_from_slice`).
pub fn copy_slice(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_slice: lengths differ");
    // SAFETY: two live slices of `dst.len()` bytes; `dst` is exclusive, so they do not overlap.
    unsafe { copy(src.as_ptr(), dst.as_mut_ptr(), dst.len()) }
}

impl Mapping {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: a region has at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    fn in_bounds(&self, offset: usize, n: usize) -> bool {
        offset.checked_add(n).is_some_and(|end| end <= self.len)
    }

    /// Copies `buf.len()` bytes at `offset` into `buf`; false (and nothing copied) when the
    /// range is not inside the region.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> bool {
        if !self.in_bounds(offset, buf.len()) {
            return false;
        }
        // SAFETY: the range is inside the live mapping (checked above) and `buf` is a distinct
        // Rust allocation. The other process may write the bytes meanwhile: the copy then
        // reads some mix of old and new bytes, all valid `u8`s.
        unsafe { copy(self.ptr.as_ptr().add(offset), buf.as_mut_ptr(), buf.len()) };
        true
    }

    /// Copies `data` to `offset`; false (and nothing written) when the range is not inside the
    /// region.
    pub fn write(&self, offset: usize, data: &[u8]) -> bool {
        if !self.in_bounds(offset, data.len()) {
            return false;
        }
        // SAFETY: as in `read`, with the roles swapped; no Rust reference to the mapping
        // exists in this process except the application's own `bytes`/`bytes_mut` views,
        // which a region it also hands the daemon shares with the daemon's writes anyway.
        unsafe { copy(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len()) };
        true
    }

    /// The 32-bit word at `offset` as an atomic, if 4-byte aligned and inside.
    pub fn atomic_u32(&self, offset: usize) -> Option<&AtomicU32> {
        if !offset.is_multiple_of(4) || !self.in_bounds(offset, 4) {
            return None;
        }
        // SAFETY: in bounds and aligned (the mapping is page aligned); the mapping lives as
        // long as `&self`; any bit pattern is a valid u32; other processes touch the word only
        // with atomic instructions or plain stores, which are single-copy atomic on the
        // architectures Linux runs RDMA on.
        Some(unsafe { AtomicU32::from_ptr(self.ptr.as_ptr().add(offset).cast()) })
    }

    /// The 64-bit word at `offset` as an atomic, if 8-byte aligned and inside: RDMA atomics
    /// on an application's region are real atomics, so they also hold against its threads.
    pub fn atomic_u64(&self, offset: usize) -> Option<&AtomicU64> {
        if !offset.is_multiple_of(8) || !self.in_bounds(offset, 8) {
            return None;
        }
        // SAFETY: as in `atomic_u32`.
        Some(unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(offset).cast()) })
    }

    /// The bytes, for the application that owns the region. The daemon writes into them what
    /// posted receives, READ responses and the peer's WRITEs place, as an HCA does by DMA:
    /// read them after the completion that says they arrived.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` initialised bytes (memfd pages read as zeros until
        // written) living as long as `&self`. The daemon process may store into them while the
        // slice exists; that is outside Rust's model as it is for any DMA buffer, and every bit
        // pattern is a valid `u8`, so no value of the slice can be invalid.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, mutably, for the application that owns the region (see [`Self::bytes`]).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; `&mut self` makes this the only slice in this process.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `map` with this address and length and no slice of
        // it outlives `self` (they borrow it).
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast::<c_void>(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_in_pieces_move_every_byte_at_every_length_and_offset() {
        let src: Vec<u8> = (0..3 * PIECE + 200)
            .map(|i| (i * 7 + i / 251) as u8)
            .collect();
        for len in [
            0,
            1,
            PIECE - 1,
            PIECE,
            PIECE + 1,
            2 * PIECE,
            4096,
            3 * PIECE + 77,
        ] {
            for (from, to) in [(0, 0), (54, 0), (0, 13), (31, 70)] {
                let mut dst = vec![0xeeu8; len + 100];
                copy_slice(&mut dst[to..to + len], &src[from..from + len]);
                assert_eq!(&dst[to..to + len], &src[from..from + len], "len {len}");
                assert!(dst[..to].iter().chain(&dst[to + len..]).all(|&b| b == 0xee));
            }
        }
    }

    #[test]
    #[should_panic(expected = "lengths differ")]
    fn copies_between_slices_of_unequal_lengths_refuse() {
        copy_slice(&mut [0; 3], &[1; 4]);
    }

    #[test]
    fn created_regions_map_again_from_their_fd_and_share_bytes() {
        let a = Region::create("t", 100).unwrap();
        let fd = a.fd().try_clone_to_owned().unwrap();
        let b = Region::from_fd(fd, 100).unwrap();
        assert!(a.write(10, b"hello"));
        let mut got = [0u8; 5];
        assert!(b.read(10, &mut got));
        assert_eq!(&got, b"hello");
        b.atomic_u64(16)
            .unwrap()
            .fetch_add(7, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            a.atomic_u64(16)
                .unwrap()
                .load(std::sync::atomic::Ordering::SeqCst),
            7
        );
    }

    /// A sealed hugetlb memfd passes the seal check but is refused for its file system. The
    /// kernel gives one out with no huge page reserved, so this runs on any Linux with
    /// hugetlbfs; where `memfd_create(MFD_HUGETLB)` itself fails the test says so and stops.
    #[test]
    fn hugetlb_memfd_is_refused_even_sealed() {
        use rustix::fs::{MemfdFlags, SealFlags};
        let fd = match rustix::fs::memfd_create(
            "t",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING | MemfdFlags::HUGETLB,
        ) {
            Ok(fd) => fd,
            Err(e) => {
                eprintln!("SKIPPED hugetlb_memfd_is_refused_even_sealed: memfd_create: {e}");
                return;
            }
        };
        let huge = 2 << 20;
        rustix::fs::ftruncate(&fd, huge).unwrap();
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW).unwrap();
        match Region::from_fd(fd, huge) {
            Err(ShmError::NotShmem { fs_type }) => assert_eq!(fs_type, 0x9584_58f6),
            other => panic!("a hugetlb memfd was {other:?}"),
        }
    }

    #[test]
    fn accesses_outside_or_misaligned_are_refused() {
        let r = Region::create("t", 64).unwrap();
        let mut buf = [0u8; 8];
        assert!(!r.read(60, &mut buf));
        assert!(!r.read(usize::MAX, &mut buf));
        assert!(!r.write(57, &buf));
        assert!(r.atomic_u64(4).is_none());
        assert!(r.atomic_u64(64).is_none());
        assert!(r.atomic_u32(62).is_none());
        assert!(r.read(56, &mut buf));
    }

    #[test]
    fn unsealed_or_resized_memory_is_refused() {
        let fd = rustix::fs::memfd_create("t", MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, 4096).unwrap();
        assert!(matches!(
            Region::from_fd(fd, 4096),
            Err(ShmError::NotSealed)
        ));
        let r = Region::create("t", 4096).unwrap();
        let fd = r.fd().try_clone_to_owned().unwrap();
        // The seals hold against the peer too.
        assert!(rustix::fs::ftruncate(&fd, 0).is_err());
        assert!(matches!(
            Region::from_fd(fd, 8192),
            Err(ShmError::WrongSize {
                expected: 8192,
                actual: 4096
            })
        ));
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        assert!(Region::from_fd(file.into(), 1).is_err());
    }
}
