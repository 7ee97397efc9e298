//! [`SharedPages`]: the pages of an attached C program's registered buffer moved onto memfds
//! the daemon maps, so the daemon copies to and from them directly.
//!
//! Why: `ibv_reg_mr` takes any buffer, and an attached program's buffers are not shared with
//! the daemon. Through the program's `/proc/PID/mem` ([`super::ProcessRange`]) every access is
//! a system call and a page-table walk: about 2.2 µs per 4 KiB, against 0.1 µs from a mapping
//! (`cargo bench -p rocev2-datapath --bench process_memory`). That capped qperf and perftest,
//! attached, at about two thirds of what the Rust API's shared regions move.
//!
//! How: at registration, the whole pages inside the buffer that are private anonymous memory
//! (the heap, `malloc`'s and `memalign`'s mappings, `mmap(MAP_ANONYMOUS)`) are copied into a
//! sealed memfd ([`Region`]), which is then mapped over them in place (`MAP_FIXED`, one swap of
//! page-table entries): the program keeps its pointers and its bytes, and the daemon maps the
//! same file. Pages a segment moved for an earlier registration are reused by later ones that
//! cover them. What is left on `/proc/PID/mem`: the partial pages at the buffer's ends (they
//! hold other data too), memory of any other kind (files, shared mappings, the stack), and
//! pieces beyond [`SharedPages::share`]'s limit. When the last registration holding a segment
//! ends, its pages are copied back onto private anonymous memory, unless the program unmapped
//! or replaced them meanwhile.
//!
//! Deviations from registering on an HCA:
//! - a write another thread makes to the pages during the registration, between the copy and
//!   the swap, is lost (programs fill a buffer before or after registering it, not during); so
//!   is one made while the last registration's pages go back, which only a program that freed
//!   the buffer before deregistering it and reused the memory meanwhile can make;
//! - a child of `fork` does not inherit the moved pages while they are registered
//!   (`MADV_DONTFORK`, what rdma-core's `ibv_fork_init` does to every region): inherited, the
//!   shared mapping would carry the child's writes into the parent's buffer.
//!
//! One registry of segments per process, behind one lock: registrations are set-up work, and
//! the lock keeps two of them from moving the same pages twice.

use rocev2_ipc::proto::PagePiece;
use rocev2_ipc::shm::Region;
use rustix::mm::{Advice, MapFlags, MprotectFlags, MremapFlags, ProtFlags};
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::os::fd::BorrowedFd;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::CallerRange;

/// Moved pages, by their address in this process.
static SEGMENTS: Mutex<BTreeMap<usize, Weak<Segment>>> = Mutex::new(BTreeMap::new());

fn segments() -> MutexGuard<'static, BTreeMap<usize, Weak<Segment>>> {
    SEGMENTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Pages at `addr` moved onto `region`'s memfd (file offset 0 at `addr`).
#[derive(Debug)]
struct Segment {
    region: Region,
    addr: usize,
    len: usize,
    /// The memfd's inode: how `/proc/self/maps` shows the pages are still this segment's.
    ino: u64,
}

/// Part of a registration that lies on a segment.
#[derive(Debug)]
struct Piece {
    offset: usize,
    len: usize,
    file_offset: usize,
    segment: Arc<Segment>,
}

/// One registration's share of moved pages; see the module docs. Dropping it after the daemon
/// forgot the region lets the pages go back to private memory once no registration holds them.
#[derive(Debug, Default)]
pub struct SharedPages {
    pieces: Vec<Piece>,
}

impl SharedPages {
    /// Moves the whole private anonymous pages of `range` onto memfds (reusing segments that
    /// hold some already), in at most `max` pieces. Never fails: pages that cannot be moved
    /// (a failed system call, memory of another kind) stay where they are, reached through
    /// `/proc/PID/mem`.
    pub fn share(range: &CallerRange, max: usize) -> SharedPages {
        let page = rustix::param::page_size();
        let start = range.addr().next_multiple_of(page);
        let end = (range.addr() + range.len()) / page * page;
        let mut pieces = Vec::new();
        if start >= end || max == 0 {
            return SharedPages { pieces };
        }
        // Segments looked at but not used: dropped after the lock (declared before its guard),
        // since the last holder's drop takes the lock to restore the pages.
        let mut unused = Vec::new();
        let mut reg = segments();
        reg.retain(|_, s| s.strong_count() > 0);
        for vma in Vma::covering(start, end) {
            let mut at = vma.start.max(start);
            let stop = vma.end.min(end);
            while at < stop && pieces.len() < max {
                let piece = match ours(&reg, &vma, at, &mut unused) {
                    Some(segment) => {
                        let len = (segment.addr + segment.len).min(stop) - at;
                        let file_offset = at - segment.addr;
                        Some((segment, file_offset, len))
                    }
                    None if vma.private_anonymous() => Segment::moving(at, stop - at, vma.prot())
                        .map(|s| {
                            let s = Arc::new(s);
                            reg.insert(at, Arc::downgrade(&s));
                            (s, 0, stop - at)
                        }),
                    None => None,
                };
                let Some((segment, file_offset, len)) = piece else {
                    break;
                };
                pieces.push(Piece {
                    offset: at - range.addr(),
                    len,
                    file_offset,
                    segment,
                });
                at += len;
            }
        }
        SharedPages { pieces }
    }

    /// The pieces as the daemon learns them ([`PagePiece`]), in order of offset, each with the
    /// memfd to send beside it.
    pub fn pieces(&self) -> impl Iterator<Item = (PagePiece, BorrowedFd<'_>)> {
        self.pieces.iter().map(|p| {
            let spec = PagePiece {
                offset: p.offset as u64,
                len: p.len as u64,
                file_offset: p.file_offset as u64,
                file_len: p.segment.region.len() as u64,
            };
            (spec, p.segment.region.fd())
        })
    }

    /// Bytes of the range that lie on moved pages.
    pub fn shared_bytes(&self) -> usize {
        self.pieces.iter().map(|p| p.len).sum()
    }
}

/// The live segment whose pages `vma` still maps at `at`, if any; one found but not matching
/// goes to `unused`.
fn ours(
    reg: &BTreeMap<usize, Weak<Segment>>,
    vma: &Vma,
    at: usize,
    unused: &mut Vec<Arc<Segment>>,
) -> Option<Arc<Segment>> {
    let (_, w) = reg.range(..=at).next_back()?;
    let s = w.upgrade()?;
    let file_offset = vma.offset + (at - vma.start) as u64;
    if at < s.addr + s.len && vma.ino == s.ino && file_offset == (at - s.addr) as u64 {
        Some(s)
    } else {
        unused.push(s);
        None
    }
}

impl Segment {
    /// Copies the `len` bytes at `addr` (whole pages of private anonymous memory with
    /// protection `prot`) into a new memfd and maps it over them. None, with the pages left as
    /// they were, when a step fails.
    fn moving(addr: usize, len: usize, prot: ProtFlags) -> Option<Segment> {
        let mut region = Region::create("rocev2-mr", len).ok()?;
        let ino = rustix::fs::fstat(region.fd()).ok()?.st_ino;
        // SAFETY: `addr..addr + len` is mapped readable memory of this process (the maps
        // entry said so under the registry's lock), and the program registering it promises
        // it stays mapped; the destination is our own fresh mapping of exactly `len` bytes.
        // The source is read raw, never as a Rust reference: other threads may store into it.
        unsafe {
            std::ptr::copy_nonoverlapping(addr as *const u8, region.bytes_mut().as_mut_ptr(), len)
        };
        // SAFETY: replaces whole pages the registration covers (no other data lives on them)
        // with the same bytes, shared; nothing in this process holds a Rust reference into a
        // C program's registered buffer. MAP_FIXED's swap is atomic for the program's threads.
        let mapped = unsafe {
            rustix::mm::mmap(
                addr as *mut c_void,
                len,
                prot,
                MapFlags::SHARED | MapFlags::FIXED,
                region.fd(),
                0,
            )
        };
        if mapped.ok()? as usize != addr {
            return None;
        }
        // SAFETY: advice on the pages just mapped; it changes only what fork copies.
        let _ = unsafe { rustix::mm::madvise(addr as *mut c_void, len, Advice::LinuxDontFork) };
        Some(Segment {
            region,
            addr,
            len,
            ino,
        })
    }
}

impl Drop for Segment {
    /// Puts the pages back on private anonymous memory, where the program still maps this
    /// segment's memfd (it may have unmapped or replaced some meanwhile).
    fn drop(&mut self) {
        let mut reg = segments();
        if reg.get(&self.addr).is_some_and(|w| w.strong_count() == 0) {
            reg.remove(&self.addr);
        }
        for vma in Vma::covering(self.addr, self.addr + self.len) {
            let at = vma.start.max(self.addr);
            let len = vma.end.min(self.addr + self.len) - at;
            if vma.ino != self.ino
                || vma.offset + (at - vma.start) as u64 != (at - self.addr) as u64
            {
                continue;
            }
            restore(at, len, vma.prot());
        }
    }
}

/// Maps fresh private anonymous pages holding the bytes at `at` over them.
fn restore(at: usize, len: usize, prot: ProtFlags) {
    // SAFETY: a fresh private mapping the kernel places; nothing else refers to it.
    let Ok(fresh) = (unsafe {
        rustix::mm::mmap_anonymous(
            std::ptr::null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE,
        )
    }) else {
        return;
    };
    // SAFETY: `at..at + len` is still this segment's mapping (the caller checked under the
    // registry's lock) and readable (`prot`); `fresh` is ours and `len` long. Pages the program
    // made unreadable come back without their bytes rather than fault here.
    if prot.contains(ProtFlags::READ) {
        unsafe { std::ptr::copy_nonoverlapping(at as *const u8, fresh.cast::<u8>(), len) };
    }
    // SAFETY: `fresh` is ours; giving it the program's protection and moving it over the
    // segment's pages replaces them atomically (the old mapping is unmapped by the move).
    unsafe {
        let flags = MprotectFlags::from_bits_retain(prot.bits());
        let moved = rustix::mm::mprotect(fresh, len, flags).and_then(|()| {
            rustix::mm::mremap_fixed(fresh, len, len, MremapFlags::MAYMOVE, at as *mut c_void)
        });
        if moved.is_err() {
            let _ = rustix::mm::munmap(fresh, len);
        }
    }
}

/// One line of `/proc/self/maps`.
#[derive(Debug)]
struct Vma {
    start: usize,
    end: usize,
    perms: [u8; 4],
    offset: u64,
    ino: u64,
    path: String,
}

impl Vma {
    /// The mappings that overlap `start..end`, in address order (none when maps is unreadable).
    fn covering(start: usize, end: usize) -> Vec<Vma> {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        maps.lines()
            .filter_map(Vma::parse)
            .filter(|v| v.start < end && v.end > start)
            .collect()
    }

    fn parse(line: &str) -> Option<Vma> {
        let mut f = line.splitn(6, ' ');
        let (s, e) = f.next()?.split_once('-')?;
        let perms = f.next()?.as_bytes().try_into().ok()?;
        let offset = u64::from_str_radix(f.next()?, 16).ok()?;
        let _dev = f.next()?;
        let ino = f.next()?.parse().ok()?;
        Some(Vma {
            start: usize::from_str_radix(s, 16).ok()?,
            end: usize::from_str_radix(e, 16).ok()?,
            perms,
            offset,
            ino,
            path: f.next().unwrap_or("").trim().to_string(),
        })
    }

    /// Readable, writable, private and backed by no file: memory whose pages only this
    /// process sees, which moving onto a memfd cannot change the meaning of. Not the stack,
    /// which grows and which the kernel treats apart.
    fn private_anonymous(&self) -> bool {
        &self.perms == b"rw-p"
            && self.ino == 0
            && (self.path.is_empty() || self.path == "[heap]" || self.path.starts_with("[anon:"))
    }

    fn prot(&self) -> ProtFlags {
        let mut p = ProtFlags::empty();
        p.set(ProtFlags::READ, self.perms[0] == b'r');
        p.set(ProtFlags::WRITE, self.perms[1] == b'w');
        p.set(ProtFlags::EXEC, self.perms[2] == b'x');
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;

    /// A fresh private anonymous mapping of `pages` pages.
    fn anonymous(pages: usize) -> *mut u8 {
        // SAFETY: a fresh mapping the kernel places.
        unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                pages * PAGE,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }
        .unwrap()
        .cast()
    }

    fn mapping_at(addr: usize) -> Vma {
        Vma::covering(addr, addr + 1).pop().unwrap()
    }

    fn range(p: *mut u8, off: usize, len: usize) -> CallerRange {
        // SAFETY: inside a mapping the test keeps for as long as the range is used.
        unsafe { CallerRange::new(p.add(off), len) }
    }

    #[test]
    fn whole_pages_move_keep_their_bytes_and_come_back() {
        let p = anonymous(6);
        for i in 0..6 * PAGE {
            // SAFETY: inside our mapping.
            unsafe { *p.add(i) = (i % 251) as u8 };
        }
        // Pages 1..5 are whole inside; pages 0 and 5 are partial ends.
        let r = range(p, 100, 5 * PAGE);
        let shared = SharedPages::share(&r, 4);
        let pieces: Vec<_> = shared.pieces().map(|(s, _)| s).collect();
        assert_eq!(
            pieces,
            [PagePiece {
                offset: (PAGE - 100) as u64,
                len: 4 * PAGE as u64,
                file_offset: 0,
                file_len: 4 * PAGE as u64
            }]
        );
        let base = p as usize;
        assert!(mapping_at(base + PAGE).path.contains("rocev2-mr"));
        assert_eq!(mapping_at(base).ino, 0, "the partial first page stays");
        // The bytes are the same, and both views are one: a write through the memfd (the
        // daemon's side) is the program's, and the program's is the memfd's.
        let (spec, fd) = shared.pieces().next().unwrap();
        let dup = fd.try_clone_to_owned().unwrap();
        let daemon = Region::from_fd(dup, spec.file_len).unwrap();
        let mut b = [0u8; 3];
        daemon.read(10, &mut b);
        assert_eq!(
            b,
            [PAGE + 10, PAGE + 11, PAGE + 12].map(|i| (i % 251) as u8)
        );
        daemon.write(20, b"abc");
        // SAFETY: inside our mapping.
        unsafe {
            assert_eq!(std::slice::from_raw_parts(p.add(PAGE + 20), 3), b"abc");
            *p.add(2 * PAGE) = 0xee;
        }
        daemon.read(PAGE, &mut b[..1]);
        assert_eq!(b[0], 0xee);
        // A later registration over part of the same pages reuses the segment.
        let again = SharedPages::share(&range(p, 2 * PAGE, 2 * PAGE), 4);
        let (spec2, _) = again.pieces().next().unwrap();
        assert_eq!((spec2.offset, spec2.file_offset), (0, PAGE as u64));
        drop(shared);
        assert!(
            mapping_at(base + PAGE).path.contains("rocev2-mr"),
            "still held"
        );
        drop(again);
        let back = mapping_at(base + PAGE);
        assert!(back.private_anonymous(), "{back:?}");
        // SAFETY: inside our mapping.
        unsafe {
            assert_eq!(std::slice::from_raw_parts(p.add(PAGE + 20), 3), b"abc");
            assert_eq!(*p.add(2 * PAGE), 0xee);
            assert_eq!(*p.add(4 * PAGE + 7), ((4 * PAGE + 7) % 251) as u8);
            rustix::mm::munmap(p.cast(), 6 * PAGE).unwrap();
        }
    }

    #[test]
    fn other_memory_stays_and_unmapped_pages_are_not_restored() {
        // A file mapping is not moved.
        let f = tempfile_like();
        // SAFETY: a fresh shared mapping of our own file.
        let m = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                2 * PAGE,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                &f,
                0,
            )
        }
        .unwrap();
        let s = SharedPages::share(&range(m.cast(), 0, 2 * PAGE), 4);
        assert_eq!(s.shared_bytes(), 0);
        // Moved pages the program unmaps while registered are left alone at the end, and
        // what it maps there meanwhile is not touched.
        let p = anonymous(2);
        let s = SharedPages::share(&range(p, 0, 2 * PAGE), 4);
        assert_eq!(s.shared_bytes(), 2 * PAGE);
        // SAFETY: our own mapping, replaced by a fresh one at the same place.
        unsafe {
            rustix::mm::munmap(p.cast(), 2 * PAGE).unwrap();
            let again = rustix::mm::mmap_anonymous(
                p.cast(),
                2 * PAGE,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::FIXED,
            )
            .unwrap();
            *again.cast::<u8>() = 9;
        }
        drop(s);
        let after = mapping_at(p as usize);
        assert!(after.private_anonymous());
        // SAFETY: our mapping.
        unsafe {
            assert_eq!(*p, 9);
            rustix::mm::munmap(p.cast(), 2 * PAGE).unwrap();
            rustix::mm::munmap(m, 2 * PAGE).unwrap();
        }
    }

    #[test]
    fn a_child_of_fork_does_not_inherit_moved_pages() {
        let p = anonymous(2);
        let shared = SharedPages::share(&range(p, 0, 2 * PAGE), 4);
        assert_eq!(shared.shared_bytes(), 2 * PAGE);
        // SAFETY: the child only calls msync and _exit (async-signal-safe) before exiting.
        let child = unsafe { libc::fork() };
        if child == 0 {
            // ENOMEM: the pages are not mapped in the child.
            // SAFETY: msync only inspects the mapping at `p`.
            let rc = unsafe { libc::msync(p.cast(), PAGE, libc::MS_ASYNC) };
            let gone =
                rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOMEM);
            // SAFETY: ends the child at once, running nothing of the parent's.
            unsafe { libc::_exit(if gone { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{status:#x}"
        );
        drop(shared);
        // Back on private memory, a child inherits them again.
        // SAFETY: as above.
        let child = unsafe { libc::fork() };
        if child == 0 {
            // SAFETY: as above.
            let rc = unsafe { libc::msync(p.cast(), PAGE, libc::MS_ASYNC) };
            // SAFETY: as above.
            unsafe { libc::_exit(if rc == 0 { 0 } else { 1 }) };
        }
        // SAFETY: as above.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{status:#x}"
        );
        // SAFETY: our own mapping.
        unsafe { rustix::mm::munmap(p.cast(), 2 * PAGE).unwrap() };
    }

    #[test]
    fn the_limit_and_small_ranges_leave_pages_in_place() {
        let p = anonymous(3);
        assert_eq!(SharedPages::share(&range(p, 1, PAGE), 4).shared_bytes(), 0);
        assert_eq!(
            SharedPages::share(&range(p, 0, 3 * PAGE), 0).shared_bytes(),
            0
        );
        // SAFETY: our own mapping.
        unsafe { rustix::mm::munmap(p.cast(), 3 * PAGE).unwrap() };
    }

    fn tempfile_like() -> std::os::fd::OwnedFd {
        let fd = rustix::fs::memfd_create("t", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, 2 * PAGE as u64).unwrap();
        fd
    }
}
