//! Virtual addresses for memory regions whose memory the engine owns.
//!
//! Each region gets its own page-aligned range, so a stray address never lands in another
//! region. A deregistered region's range is given out again: a peer still holding the old
//! region's rkey reaches the new region only if it guesses the new one's, because the engine
//! checks the key before the address and draws every registration's keys at random, so a stale
//! key is worth no more than a guessed one.

use std::collections::BTreeMap;

/// The granule of region ranges.
const PAGE: u64 = 4096;

/// Free and used region address ranges; see the module docs.
#[derive(Debug)]
pub struct RegionAddresses {
    /// Free ranges below `top`, start to end, none adjacent to another or to `top`.
    free: BTreeMap<u64, u64>,
    /// Everything from here up is free.
    top: u64,
}

impl RegionAddresses {
    /// Addresses from `first` (rounded up to a page) on.
    pub fn new(first: u64) -> RegionAddresses {
        RegionAddresses {
            free: BTreeMap::new(),
            top: first.next_multiple_of(PAGE),
        }
    }

    /// The address of a new region of `len` bytes, a multiple of `align` and of a page: the
    /// lowest free range that fits, else above every range given out.
    pub fn alloc(&mut self, len: u64, align: u64) -> u64 {
        let size = span(len);
        let align = align.max(PAGE).next_power_of_two();
        let fit = self.free.iter().find_map(|(&start, &end)| {
            let at = start.next_multiple_of(align);
            (at.checked_add(size)? <= end).then_some((start, end, at))
        });
        let (start, end, at) = fit.unwrap_or_else(|| {
            let at = self.top.next_multiple_of(align);
            (self.top, at + size, at)
        });
        if end > self.top {
            self.top = end;
        } else {
            self.free.remove(&start);
        }
        if start < at {
            self.free.insert(start, at);
        }
        if at + size < end {
            self.free.insert(at + size, end);
        }
        at
    }

    /// Gives back the range of a region of `len` bytes at `addr` (from [`Self::alloc`]).
    pub fn free(&mut self, addr: u64, len: u64) {
        let (mut start, mut end) = (addr, addr + span(len));
        if let Some((&s, &e)) = self.free.range(..start).next_back()
            && e == start
        {
            self.free.remove(&s);
            start = s;
        }
        if let Some(e) = self.free.remove(&end) {
            end = e;
        }
        if end == self.top {
            self.top = start;
        } else {
            self.free.insert(start, end);
        }
    }
}

/// The range a region of `len` bytes takes: whole pages, at least one.
fn span(len: u64) -> u64 {
    len.max(1).next_multiple_of(PAGE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn regions_take_whole_pages_in_order_from_the_first_address() {
        let mut a = RegionAddresses::new(0x10000);
        assert_eq!(a.alloc(0, 1), 0x10000);
        assert_eq!(a.alloc(5000, 1), 0x11000);
        assert_eq!(a.alloc(1, 64), 0x13000);
        assert_eq!(a.alloc(1, 0x10000), 0x20000);
    }

    #[test]
    fn a_freed_range_is_reused_and_merged_with_its_neighbours() {
        let mut a = RegionAddresses::new(0);
        let r: Vec<u64> = (0..4).map(|_| a.alloc(PAGE, 1)).collect();
        assert_eq!(r, [0, PAGE, 2 * PAGE, 3 * PAGE]);
        a.free(r[1], PAGE);
        a.free(r[2], PAGE);
        // The two freed pages are one range: a two-page region fits there.
        assert_eq!(a.alloc(2 * PAGE, 1), PAGE);
        a.free(r[3], PAGE);
        // The last range goes back to the top, not to the free list.
        assert!(a.free.is_empty());
        assert_eq!(a.alloc(1, 1), 3 * PAGE);
    }

    proptest! {
        /// Live regions never overlap, whatever the order of registrations and
        /// deregistrations, and freeing everything leaves one empty space from the start.
        #[test]
        fn live_regions_never_overlap(
            ops in proptest::collection::vec((any::<bool>(), 0u64..20_000, 0u32..14), 1..200)
        ) {
            let mut a = RegionAddresses::new(PAGE);
            let mut live: Vec<(u64, u64)> = Vec::new();
            for (register, len, align_log) in ops {
                if register || live.is_empty() {
                    let align = 1u64 << align_log;
                    let at = a.alloc(len, align);
                    prop_assert_eq!(at % align.max(PAGE), 0);
                    let end = at + span(len);
                    for &(s, l) in &live {
                        prop_assert!(end <= s || s + span(l) <= at, "{at:#x} overlaps {s:#x}");
                    }
                    live.push((at, len));
                } else {
                    let (s, l) = live.swap_remove(len as usize % live.len());
                    a.free(s, l);
                }
            }
            for (s, l) in live {
                a.free(s, l);
            }
            prop_assert!(a.free.is_empty());
            prop_assert_eq!(a.top, PAGE);
        }
    }
}
