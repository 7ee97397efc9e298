//! Address handles by number, as `ibv_create_ah` hands them out.

use rocev2_core::qp::AddressHandle;
use std::collections::BTreeMap;

/// Address handles by number: never 0, and never one still in use, even after the numbers wrap.
#[derive(Debug)]
pub struct AhTable {
    ahs: BTreeMap<u32, AddressHandle>,
    /// The number tried first by the next [`AhTable::insert`].
    next: u32,
}

impl Default for AhTable {
    fn default() -> Self {
        AhTable {
            ahs: BTreeMap::new(),
            next: 1,
        }
    }
}

impl AhTable {
    /// Keeps `ah` and returns its number.
    pub fn insert(&mut self, ah: AddressHandle) -> u32 {
        while self.ahs.contains_key(&self.next) {
            self.next = self.next.wrapping_add(1).max(1);
        }
        let id = self.next;
        self.next = self.next.wrapping_add(1).max(1);
        self.ahs.insert(id, ah);
        id
    }

    /// The handle numbered `id`.
    pub fn get(&self, id: u32) -> Option<&AddressHandle> {
        self.ahs.get(&id)
    }

    /// Forgets the handle numbered `id`, returning it.
    pub fn remove(&mut self, id: u32) -> Option<AddressHandle> {
        self.ahs.remove(&id)
    }

    /// How many handles are kept.
    pub fn len(&self) -> usize {
        self.ahs.len()
    }

    /// Whether no handle is kept.
    pub fn is_empty(&self) -> bool {
        self.ahs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::path::{NextHop, address_handle, tests::v4_only};
    use std::net::{IpAddr, Ipv4Addr};

    fn ah(last: u8) -> AddressHandle {
        let dst = IpAddr::V4(Ipv4Addr::new(10, 0, 0, last));
        address_handle(&v4_only(), dst, NextHop::Mac([2; 6]), 0).unwrap()
    }

    #[test]
    fn numbers_start_at_one_and_skip_zero_and_those_in_use_when_wrapping() {
        let mut t = AhTable::default();
        assert_eq!(t.insert(ah(1)), 1);
        assert_eq!(t.insert(ah(2)), 2);
        t.next = u32::MAX;
        assert_eq!(t.insert(ah(3)), u32::MAX);
        // 0 is skipped, 1 and 2 are in use.
        assert_eq!(t.insert(ah(4)), 3);
        assert_eq!(t.len(), 4);
        assert_eq!(t.get(2).unwrap().path().dst_ip, ah(2).path().dst_ip);
        assert!(t.remove(2).is_some());
        assert!(t.remove(2).is_none());
        assert!(t.get(2).is_none());
        assert!(!t.is_empty());
    }
}
