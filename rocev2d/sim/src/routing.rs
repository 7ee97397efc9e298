//! Shortest-path routing with ECMP.
//!
//! For every destination host a breadth-first search over the link graph gives each node's hop
//! distance; a switch's next hops towards that host are the ports whose neighbour is one hop
//! closer. The equal-cost sets are interned (a ToR has one set, "all uplinks", for every remote
//! host), and so are the per-destination columns of set ids: a host with one port hangs off one
//! switch, where its route is its own link; everywhere else its route is the route to that
//! switch, the same for every host behind it. So the table holds a `u16` set id per (switch,
//! group of hosts behind one switch) plus each host's own link: 18 KB instead of 295 KB for the
//! 1024-host Clos, as its lookup is a cache miss per hop when it does not fit in the cache.
//!
//! Among equal-cost ports a switch picks by hashing the packet's 5-tuple with a per-switch salt,
//! as ECMP hardware does: one flow keeps one path, the UDP source port (the QP's entropy) picks
//! it, and the salt keeps consecutive switches from making correlated choices (hash
//! polarisation).
//!
//! Deviations: the hash is a 64-bit integer mixer rather than a switch ASIC's CRC; routes are
//! static (no failures, no adaptive routing; IOFD deflection, `switch_node.rs`, picks among the same
//! equal-cost sets).

use crate::dist::mix64;
use crate::event::PortId;
use std::collections::{BTreeMap, VecDeque};

/// The table entry of a (switch, destination) with no route.
const UNREACHABLE: u16 = u16::MAX;

/// The most distinct equal-cost sets a topology may have: a set id is a `u16` below
/// `u16::MAX`, which marks "no route".
pub const MAX_SETS: usize = UNREACHABLE as usize;

/// ECMP next-hop tables of every switch.
#[derive(Debug, Clone, Default)]
pub struct Routes {
    switches: u32,
    /// Per destination host: its column and its own link.
    dests: Vec<Dest>,
    /// `set id` per (column, switch ordinal), column-major; [`UNREACHABLE`] for none.
    columns: Vec<u16>,
    /// (start, len) into `ports` per interned set.
    sets: Vec<(u32, u32)>,
    ports: Vec<PortId>,
}

/// Where a destination host's routes are.
#[derive(Debug, Clone, Copy)]
struct Dest {
    /// Its column in [`Routes::columns`].
    column: u32,
    /// The switch ordinal it hangs off (`u32::MAX` when it has other than one port) ...
    switch: u32,
    /// ... and that switch's set towards it (its link), which its column leaves out.
    set: u16,
}

impl Routes {
    /// Builds the tables. `adj[n]` lists node `n`'s ports as (port id, neighbour node); nodes
    /// `0..hosts` are hosts and `switch_of[n]` is the switch ordinal of node `n` (hosts: unused).
    ///
    /// `None` when the topology has more than [`MAX_SETS`] distinct equal-cost sets.
    pub fn build(hosts: u32, adj: &[Vec<(PortId, u32)>]) -> Option<Routes> {
        let n = adj.len();
        let switches = n - hosts as usize;
        // Set ids per (switch, destination host), compressed into columns at the end.
        let mut table = vec![UNREACHABLE; switches * hosts as usize];
        let mut interned: BTreeMap<Vec<PortId>, usize> = BTreeMap::new();
        let mut sets = Vec::new();
        let mut ports = Vec::new();
        let mut dist = vec![u32::MAX; n];
        let mut queue = VecDeque::new();
        let mut hop = Vec::new();
        for dst in 0..hosts as usize {
            dist.fill(u32::MAX);
            dist[dst] = 0;
            queue.clear();
            queue.push_back(dst);
            while let Some(u) = queue.pop_front() {
                // Hosts other than the destination do not forward.
                if u != dst && u < hosts as usize {
                    continue;
                }
                for &(_, v) in &adj[u] {
                    let v = v as usize;
                    if dist[v] == u32::MAX {
                        dist[v] = dist[u] + 1;
                        queue.push_back(v);
                    }
                }
            }
            for s in hosts as usize..n {
                if dist[s] == u32::MAX {
                    continue;
                }
                hop.clear();
                hop.extend(
                    adj[s]
                        .iter()
                        .filter(|&&(_, v)| dist[v as usize].wrapping_add(1) == dist[s])
                        .map(|&(p, _)| p),
                );
                let id = *interned.entry(hop.clone()).or_insert_with(|| {
                    sets.push((ports.len() as u32, hop.len() as u32));
                    ports.extend_from_slice(&hop);
                    sets.len() - 1
                });
                table[(s - hosts as usize) * hosts as usize + dst] =
                    u16::try_from(id).ok().filter(|&i| i != UNREACHABLE)?;
            }
        }
        let mut dests = Vec::with_capacity(hosts as usize);
        let mut columns = Vec::new();
        let mut interned_columns: BTreeMap<Vec<u16>, u32> = BTreeMap::new();
        let mut column = vec![UNREACHABLE; switches];
        for (dst, links) in adj.iter().enumerate().take(hosts as usize) {
            for (sw, c) in column.iter_mut().enumerate() {
                *c = table[sw * hosts as usize + dst];
            }
            let (switch, set) = match links.as_slice() {
                &[(_, a)] if a >= hosts => {
                    let sw = (a - hosts) as usize;
                    (sw as u32, std::mem::replace(&mut column[sw], UNREACHABLE))
                }
                _ => (u32::MAX, UNREACHABLE),
            };
            let next = interned_columns.len() as u32;
            let id = *interned_columns.entry(column.clone()).or_insert_with(|| {
                columns.extend_from_slice(&column);
                next
            });
            dests.push(Dest {
                column: id,
                switch,
                set,
            });
        }
        Some(Routes {
            switches: switches as u32,
            dests,
            columns,
            sets,
            ports,
        })
    }

    /// The equal-cost egress ports of switch ordinal `switch` towards host `dst` (empty when
    /// unreachable).
    pub fn next_hops(&self, switch: u32, dst: u32) -> &[PortId] {
        let set = match self.dests.get(dst as usize) {
            Some(d) if d.switch == switch => d.set,
            Some(d) if switch < self.switches => {
                self.columns[d.column as usize * self.switches as usize + switch as usize]
            }
            _ => UNREACHABLE,
        };
        match self.sets.get(set as usize) {
            Some(&(start, len)) => &self.ports[start as usize..(start + len) as usize],
            None => &[],
        }
    }

    /// Number of distinct next-hop sets (a size check for tests and logs).
    pub fn interned_sets(&self) -> usize {
        self.sets.len()
    }

    /// Number of distinct per-destination columns (a size check for tests and logs).
    pub fn interned_columns(&self) -> usize {
        self.columns.len() / self.switches.max(1) as usize
    }
}

/// Picks one of `hops` for a packet whose 5-tuple hashes to `flow_hash`, at a switch with
/// `salt`.
pub fn ecmp_pick(hops: &[PortId], flow_hash: u64, salt: u64) -> Option<PortId> {
    match hops.len() {
        0 => None,
        1 => Some(hops[0]),
        n => {
            let h = mix64(flow_hash ^ salt);
            // Multiply-shift maps the high bits evenly onto 0..n.
            Some(hops[(((h >> 32) * n as u64) >> 32) as usize])
        }
    }
}

/// The 5-tuple hash of a RoCEv2 packet (protocol UDP and destination port 4791 are constant).
pub fn five_tuple_hash(src_ip: [u8; 4], dst_ip: [u8; 4], src_port: u16) -> u64 {
    let a = u32::from_be_bytes(src_ip) as u64;
    let b = u32::from_be_bytes(dst_ip) as u64;
    mix64((a << 32 | b) ^ mix64(((src_port as u64) << 16) | 4791 | (17 << 32)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dumbbell_routes_one_path() {
        // hosts 0,1 on switch 2; host 3? no: hosts 0,1,2; 0,1 on s3, 2 on s4; s3–s4.
        // ports: 0:h0→s3, 1:s3→h0, 2:h1→s3, 3:s3→h1, 4:h2→s4, 5:s4→h2, 6:s3→s4, 7:s4→s3
        let adj = vec![
            vec![(0, 3)],
            vec![(2, 3)],
            vec![(4, 4)],
            vec![(1, 0), (3, 1), (6, 4)],
            vec![(5, 2), (7, 3)],
        ];
        let r = Routes::build(3, &adj).unwrap();
        assert_eq!(r.next_hops(0, 0), &[1]);
        assert_eq!(r.next_hops(0, 2), &[6]);
        assert_eq!(r.next_hops(1, 0), &[7]);
        assert_eq!(r.next_hops(1, 2), &[5]);
    }

    #[test]
    fn leaf_spine_hosts_behind_one_leaf_share_a_column() {
        // hosts 0,1 on leaf 4, hosts 2,3 on leaf 5; spines 6, 7. Ports: host h's uplink 2h,
        // its leaf's downlink 2h+1; leaf→spine and back 8..15.
        let adj = vec![
            vec![(0, 4)],
            vec![(2, 4)],
            vec![(4, 5)],
            vec![(6, 5)],
            vec![(1, 0), (3, 1), (8, 6), (10, 7)],
            vec![(5, 2), (7, 3), (12, 6), (14, 7)],
            vec![(9, 4), (13, 5)],
            vec![(11, 4), (15, 5)],
        ];
        let r = Routes::build(4, &adj).unwrap();
        let expect: [[&[PortId]; 4]; 4] = [
            [&[1], &[3], &[8, 10], &[8, 10]],
            [&[12, 14], &[12, 14], &[5], &[7]],
            [&[9], &[9], &[13], &[13]],
            [&[11], &[11], &[15], &[15]],
        ];
        for (sw, row) in expect.iter().enumerate() {
            for (dst, hops) in row.iter().enumerate() {
                assert_eq!(
                    r.next_hops(sw as u32, dst as u32),
                    *hops,
                    "switch {sw} → {dst}"
                );
            }
        }
        assert_eq!(r.next_hops(4, 0), &[] as &[PortId], "no such switch");
        assert_eq!(r.next_hops(0, 4), &[] as &[PortId], "no such host");
        assert_eq!(r.interned_columns(), 2, "one column per leaf");
    }

    #[test]
    fn ecmp_pick_uses_every_port_and_is_stable() {
        let hops = [10, 11, 12, 13];
        let mut seen = [0u32; 4];
        for sport in 0..4000u16 {
            let h = five_tuple_hash([10, 0, 0, 1], [10, 0, 0, 2], 49152 + sport);
            let p = ecmp_pick(&hops, h, 99).unwrap();
            assert_eq!(Some(p), ecmp_pick(&hops, h, 99));
            seen[(p - 10) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| (900..1100).contains(&c)), "{seen:?}");
    }
}
