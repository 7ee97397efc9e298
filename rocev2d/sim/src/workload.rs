//! Workloads: which flows start when, between which hosts, and how large they are.
//!
//! A flow is one RDMA WRITE message stream on its own RC QP pair (see `docs/model.md`): the
//! model creates a QP on each host when the flow starts and destroys both when the last byte is
//! acknowledged. Flows are generated up front from the scenario's seed, sorted by start time, so
//! a workload is fully determined before the network runs.
//!
//! Generators:
//! * `flows`: an explicit list;
//! * `long_lived`: given pairs, each one endless flow from time 0;
//! * `permutation`: every host sends to a random derangement partner;
//! * `incast`: `degree` senders to one receiver, repeated `rounds` times every `period_ns`, each
//!   sender starting after a uniform jitter in `[0, jitter_ns]` (seed 000 §V testbed: 0–100 µs);
//! * `poisson`: per host, Poisson arrivals with a flow-size distribution at a given load;
//! * `dart_mix`: seed 000 §VI-A: background long flows from every server to random receivers plus
//!   foreground incasts of short flows of 2, 4 or 8 KB (uniform) from `incast_degree` (default 16)
//!   random servers to a random receiver, at a total load split between the two.
//!
//! Incasts are announced: the flows of one `incast` round or one `dart_mix` incast form a group
//! ([`FlowSpec::group`], members by [`incast_groups`]), and each flow's first WRITE carries the
//! group's size and sender ids through the core's `SendWr::lookahead`, Dart's look-ahead (seed
//! 000 §III-D: the application knows its static incast groups). The core sends the block only
//! to a peer that announced it (Dart); `lookahead = false` turns the announcement off.
//!
//! Load is the mean offered payload rate per host as a fraction of a reference capacity: the
//! host link rate (`load_reference = "access"`) or the host's share of the core, host rate divided
//! by the topology's oversubscription (`"bisection"`, the default, so that 40% load on seed 000's
//! 4:1 oversubscribed Clos does not overload the core 1.6 times).
//!
//! Size distributions: `web_search` is the DCTCP paper's web-search CDF (Alizadeh et al.,
//! "Data Center TCP", SIGCOMM 2010, Fig. 4), as tabulated in bytes by the HPCC artifact
//! (`traffic_gen/WebSearch_distribution.txt`); `data_mining` is VL2's data-mining CDF (Greenberg
//! et al., "VL2", SIGCOMM 2009, Fig. 2) as tabulated in 1460-byte packets by the pFabric ns-2
//! scripts and used since by HPCC and others; `dvl_classes` is the four traffic classes of seed
//! 003 slide 15 (from Roy et al., "Inside the Social Network's (Datacenter) Network", SIGCOMM
//! 2015): TC0 1–100 KB 69.52%, TC1 100 KB–1 MB 25.3%, TC2 1–10 MB 3%, TC3 10–30 MB 2.18%, with the
//! size uniform inside its class.
//!
//! Deviations and guesses (also in `docs/model.md`):
//! * seed 000 §VI-A's long-flow size did not survive in the seed's text; `dart_mix` defaults
//!   `long_bytes` to 1 MB;
//! * seed 003 says "% of overall traffic" without saying whether of flows or of bytes; we read it
//!   as the share of flows (messages);
//! * the percentages in seed 003 add up to 100%, so no renormalisation is needed; piecewise-linear
//!   interpolation between CDF points, as the HPCC generator does.

use crate::dist::{self, SimRng};
use serde::{Deserialize, Serialize};

/// One flow of the workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowSpec {
    /// Sending host.
    pub src: u32,
    /// Receiving host.
    pub dst: u32,
    /// Bytes to write (at least 1).
    pub size: u64,
    /// When the WRITE is posted, ns.
    pub start_ns: u64,
    /// Label for the outputs: the index of the `[[workload]]` entry, or the DVL traffic class.
    pub class: u8,
    /// The announced incast group this flow belongs to (numbered from 0 over the whole
    /// workload): its first packet carries the group's size and sender ids, Dart's look-ahead
    /// (seed 000 §III-D). `None` for flows sent without an announcement.
    pub group: Option<u32>,
}

/// A flow-size distribution (`sizes = { kind = "..." }`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SizeDist {
    /// Always `bytes`.
    Fixed {
        /// Size.
        bytes: u64,
    },
    /// One of `bytes`, uniformly.
    Choice {
        /// Candidates.
        bytes: Vec<u64>,
    },
    /// Uniform in `[min, max]`.
    Uniform {
        /// Smallest.
        min: u64,
        /// Largest.
        max: u64,
    },
    /// Piecewise-linear CDF through `points` = `[[bytes, cumulative probability], ...]`.
    Cdf {
        /// Points in increasing order; the last probability is 1.
        points: Vec<(f64, f64)>,
    },
    /// DCTCP web search (see the module doc).
    WebSearch,
    /// VL2 data mining (see the module doc).
    DataMining,
    /// Seed 003's four traffic classes (see the module doc).
    DvlClasses,
}

/// The web-search CDF in bytes (HPCC's table of the DCTCP distribution).
const WEB_SEARCH: [(f64, f64); 12] = [
    (0.0, 0.0),
    (10_000.0, 0.15),
    (20_000.0, 0.20),
    (30_000.0, 0.30),
    (50_000.0, 0.40),
    (80_000.0, 0.53),
    (200_000.0, 0.60),
    (1_000_000.0, 0.70),
    (2_000_000.0, 0.80),
    (5_000_000.0, 0.90),
    (10_000_000.0, 0.97),
    (30_000_000.0, 1.0),
];

/// The data-mining CDF in 1460-byte packets (pFabric's table of the VL2 distribution).
const DATA_MINING_PKTS: [(f64, f64); 9] = [
    (1.0, 0.0),
    (1.0, 0.5),
    (2.0, 0.6),
    (3.0, 0.7),
    (7.0, 0.8),
    (267.0, 0.9),
    (2107.0, 0.95),
    (66_667.0, 0.99),
    (666_667.0, 1.0),
];

/// Seed 003 slide 15: (min bytes, max bytes, share of flows).
const DVL_CLASSES: [(u64, u64, f64); 4] = [
    (1_000, 100_000, 0.6952),
    (100_000, 1_000_000, 0.253),
    (1_000_000, 10_000_000, 0.03),
    (10_000_000, 30_000_000, 0.0218),
];

impl SizeDist {
    fn cdf_points(&self) -> Option<Vec<(f64, f64)>> {
        match self {
            SizeDist::Cdf { points } => Some(points.clone()),
            SizeDist::WebSearch => Some(WEB_SEARCH.to_vec()),
            SizeDist::DataMining => Some(
                DATA_MINING_PKTS
                    .iter()
                    .map(|&(p, c)| (p * 1460.0, c))
                    .collect(),
            ),
            _ => None,
        }
    }

    /// Checks the parameters; the error names the offending key.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            SizeDist::Fixed { bytes } if *bytes == 0 => Err("sizes.bytes must be >= 1".into()),
            SizeDist::Choice { bytes } if bytes.is_empty() || bytes.contains(&0) => {
                Err("sizes.bytes must be a non-empty list of sizes >= 1".into())
            }
            SizeDist::Uniform { min, max } if *min == 0 || min > max => {
                Err("sizes.min must be >= 1 and <= sizes.max".into())
            }
            SizeDist::Cdf { points } => {
                let ok = points.len() >= 2
                    && points
                        .windows(2)
                        .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1)
                    && points.last().is_some_and(|p| p.1 == 1.0)
                    && points[0].1 >= 0.0;
                if ok {
                    Ok(())
                } else {
                    Err("sizes.points must be >= 2 non-decreasing [bytes, cdf] pairs ending at cdf 1".into())
                }
            }
            _ => Ok(()),
        }
    }

    /// Mean size in bytes.
    pub fn mean(&self) -> f64 {
        match self {
            SizeDist::Fixed { bytes } => *bytes as f64,
            SizeDist::Choice { bytes } => {
                bytes.iter().map(|&b| b as f64).sum::<f64>() / bytes.len().max(1) as f64
            }
            SizeDist::Uniform { min, max } => (*min as f64 + *max as f64) / 2.0,
            SizeDist::DvlClasses => DVL_CLASSES
                .iter()
                .map(|&(a, b, p)| p * (a as f64 + b as f64) / 2.0)
                .sum(),
            _ => {
                let pts = self.cdf_points().unwrap_or_default();
                pts.windows(2)
                    .map(|w| (w[1].1 - w[0].1) * (w[0].0 + w[1].0) / 2.0)
                    .sum::<f64>()
                    .max(1.0)
            }
        }
    }

    /// Draws a size (at least 1 byte) and the class label it implies (DVL class, else 0).
    pub fn sample(&self, rng: &mut SimRng) -> (u64, u8) {
        match self {
            SizeDist::Fixed { bytes } => (*bytes, 0),
            SizeDist::Choice { bytes } => (bytes[dist::below(rng, bytes.len() as u64) as usize], 0),
            SizeDist::Uniform { min, max } => (min + dist::below(rng, max - min + 1), 0),
            SizeDist::DvlClasses => {
                let u = dist::uniform(rng);
                let mut acc = 0.0;
                for (i, &(a, b, p)) in DVL_CLASSES.iter().enumerate() {
                    acc += p;
                    if u < acc || i == DVL_CLASSES.len() - 1 {
                        return (a + dist::below(rng, b - a + 1), i as u8);
                    }
                }
                (DVL_CLASSES[0].0, 0)
            }
            _ => {
                let pts = self.cdf_points().unwrap_or_default();
                let u = dist::uniform(rng);
                let mut size = pts.last().map_or(1.0, |p| p.0);
                for w in pts.windows(2) {
                    if u <= w[1].1 {
                        let span = w[1].1 - w[0].1;
                        size = if span > 0.0 {
                            w[0].0 + (u - w[0].1) / span * (w[1].0 - w[0].0)
                        } else {
                            w[1].0
                        };
                        break;
                    }
                }
                ((size.round() as u64).max(1), 0)
            }
        }
    }
}

/// What `load` is a fraction of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadReference {
    /// The host link rate.
    Access,
    /// The host link rate divided by the topology's oversubscription.
    #[default]
    Bisection,
}

/// One `[[workload]]` entry of a scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum WorkloadSpec {
    /// Explicit flows.
    Flows {
        /// `[[src, dst, size_bytes, start_ns], ...]`.
        flows: Vec<(u32, u32, u64, u64)>,
    },
    /// Endless flows between the given pairs, from `start_ns`.
    LongLived {
        /// `[[src, dst], ...]`.
        pairs: Vec<(u32, u32)>,
        /// Start time, ns (default 0).
        #[serde(default)]
        start_ns: u64,
    },
    /// Each host sends `size_bytes` (default: endless) to a random derangement partner.
    Permutation {
        /// Bytes per flow; endless when absent.
        #[serde(default)]
        size_bytes: Option<u64>,
        /// Start time, ns.
        #[serde(default)]
        start_ns: u64,
    },
    /// N:1 incast rounds.
    Incast {
        /// Receiving host.
        receiver: u32,
        /// Senders: explicit list, else the `degree` hosts after the receiver (wrapping).
        #[serde(default)]
        senders: Option<Vec<u32>>,
        /// Number of senders when `senders` is absent.
        #[serde(default)]
        degree: Option<u32>,
        /// Bytes per sender per round.
        size_bytes: u64,
        /// Uniform start jitter per sender, ns.
        #[serde(default)]
        jitter_ns: u64,
        /// Rounds (default 1).
        #[serde(default)]
        rounds: Option<u32>,
        /// Time between round starts, ns.
        #[serde(default)]
        period_ns: u64,
        /// First round, ns.
        #[serde(default)]
        start_ns: u64,
        /// Each round's messages announce the round as an incast group (Dart's look-ahead,
        /// seed 000 §III-D; default on, sent only to peers that take it).
        #[serde(default = "announce")]
        lookahead: bool,
    },
    /// Poisson arrivals at every host, uniform random destinations.
    Poisson {
        /// Offered load (fraction of the reference capacity).
        load: f64,
        /// Flow sizes.
        sizes: SizeDist,
        /// Reference capacity for `load`.
        #[serde(default)]
        load_reference: LoadReference,
    },
    /// Seed 000 §VI-A: background long flows plus foreground short-flow incasts.
    DartMix {
        /// Total offered load.
        load: f64,
        /// Fraction of the load (bytes) in short flows.
        short_fraction: f64,
        /// Short sizes, uniform (default 2, 4, 8 KB).
        #[serde(default)]
        short_bytes: Option<Vec<u64>>,
        /// Senders per incast (default 16).
        #[serde(default)]
        incast_degree: Option<u32>,
        /// Long flow size (default 1 MB; the seed's value is lost).
        #[serde(default)]
        long_bytes: Option<u64>,
        /// Start jitter of the senders of one incast, ns (default 0).
        #[serde(default)]
        jitter_ns: u64,
        /// Reference capacity for `load`.
        #[serde(default)]
        load_reference: LoadReference,
        /// Each incast's messages announce it as a group (Dart's look-ahead, seed 000 §III-D;
        /// default on, sent only to peers that take it).
        #[serde(default = "announce")]
        lookahead: bool,
    },
}

fn announce() -> bool {
    true
}

/// Size of an "endless" flow: more than any run can send.
pub const ENDLESS: u64 = 1 << 50;

/// What the generators need to know about the network.
#[derive(Debug, Clone, Copy)]
pub struct Capacity {
    /// Hosts.
    pub hosts: u32,
    /// Host link rate, bit/s.
    pub host_bps: f64,
    /// Topology oversubscription.
    pub oversubscription: f64,
}

impl Capacity {
    fn bytes_per_ns(&self, r: LoadReference) -> f64 {
        let bps = match r {
            LoadReference::Access => self.host_bps,
            LoadReference::Bisection => self.host_bps / self.oversubscription.max(1.0),
        };
        bps / 8e9
    }
}

/// A workload entry is inconsistent with the topology.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("workload[{index}]: {why}")]
pub struct WorkloadError {
    /// Which `[[workload]]` entry.
    pub index: usize,
    /// What is wrong, naming the key.
    pub why: String,
}

fn random_other(rng: &mut SimRng, hosts: u32, not: u32) -> u32 {
    let d = dist::below(rng, hosts as u64 - 1) as u32;
    if d >= not { d + 1 } else { d }
}

/// Generates every flow of `specs` that starts before `until_ns`, sorted by start time (ties
/// keep generation order).
///
/// # Errors
/// A host index out of range, a load outside (0, 1.5], a bad size distribution.
pub fn generate(
    specs: &[WorkloadSpec],
    cap: Capacity,
    until_ns: u64,
    seed: u64,
) -> Result<Vec<FlowSpec>, WorkloadError> {
    let mut out = Vec::new();
    let mut groups = 0u32;
    let h = cap.hosts;
    for (index, spec) in specs.iter().enumerate() {
        let err = |why: String| WorkloadError { index, why };
        let host_ok = |key: &str, x: u32| {
            if x < h {
                Ok(x)
            } else {
                Err(err(format!("{key} {x} is not a host (0..{h})")))
            }
        };
        let class = index.min(255) as u8;
        let mut rng = dist::rng(seed, 100 + index as u64);
        if h < 2 {
            return Err(err("needs at least 2 hosts".into()));
        }
        match spec {
            WorkloadSpec::Flows { flows } => {
                for &(s, d, size, t) in flows {
                    host_ok("src", s)?;
                    host_ok("dst", d)?;
                    if s == d || size == 0 {
                        return Err(err("flows need src != dst and size_bytes >= 1".into()));
                    }
                    out.push(FlowSpec {
                        src: s,
                        dst: d,
                        size,
                        start_ns: t,
                        class,
                        group: None,
                    });
                }
            }
            WorkloadSpec::LongLived { pairs, start_ns } => {
                for &(s, d) in pairs {
                    host_ok("src", s)?;
                    host_ok("dst", d)?;
                    if s == d {
                        return Err(err("pairs need src != dst".into()));
                    }
                    out.push(FlowSpec {
                        src: s,
                        dst: d,
                        size: ENDLESS,
                        start_ns: *start_ns,
                        class,
                        group: None,
                    });
                }
            }
            WorkloadSpec::Permutation {
                size_bytes,
                start_ns,
            } => {
                // Sattolo's algorithm: a uniformly random cyclic permutation has no fixed point.
                let mut p: Vec<u32> = (0..h).collect();
                for i in (1..h as usize).rev() {
                    let j = dist::below(&mut rng, i as u64) as usize;
                    p.swap(i, j);
                }
                for (s, &d) in p.iter().enumerate() {
                    out.push(FlowSpec {
                        src: s as u32,
                        dst: d,
                        size: size_bytes.unwrap_or(ENDLESS).max(1),
                        start_ns: *start_ns,
                        class,
                        group: None,
                    });
                }
            }
            WorkloadSpec::Incast {
                receiver,
                senders,
                degree,
                size_bytes,
                jitter_ns,
                rounds,
                period_ns,
                start_ns,
                lookahead,
            } => {
                let r = host_ok("receiver", *receiver)?;
                let list: Vec<u32> = match (senders, degree) {
                    (Some(l), _) => l.clone(),
                    (None, Some(d)) if *d < h => (1..=*d).map(|i| (r + i) % h).collect(),
                    _ => {
                        return Err(err(
                            "incast needs senders or a degree below the host count".into()
                        ));
                    }
                };
                for &s in &list {
                    host_ok("senders", s)?;
                    if s == r {
                        return Err(err("the receiver cannot be a sender".into()));
                    }
                }
                if *size_bytes == 0 {
                    return Err(err("size_bytes must be >= 1".into()));
                }
                for round in 0..rounds.unwrap_or(1) as u64 {
                    let t0 = start_ns + round * period_ns;
                    let group = lookahead.then(|| next_group(&mut groups));
                    for &s in &list {
                        let j = if *jitter_ns > 0 {
                            dist::below(&mut rng, jitter_ns + 1)
                        } else {
                            0
                        };
                        out.push(FlowSpec {
                            src: s,
                            dst: r,
                            size: *size_bytes,
                            start_ns: t0 + j,
                            class,
                            group,
                        });
                    }
                }
            }
            WorkloadSpec::Poisson {
                load,
                sizes,
                load_reference,
            } => {
                check_load(*load).map_err(err)?;
                sizes.validate().map_err(err)?;
                let mean_gap = sizes.mean() / (load * cap.bytes_per_ns(*load_reference));
                for s in 0..h {
                    let mut t = dist::exponential(&mut rng, mean_gap);
                    while (t as u64) < until_ns {
                        let (size, c) = sizes.sample(&mut rng);
                        let d = random_other(&mut rng, h, s);
                        let class = if matches!(sizes, SizeDist::DvlClasses) {
                            c
                        } else {
                            class
                        };
                        out.push(FlowSpec {
                            src: s,
                            dst: d,
                            size,
                            start_ns: t as u64,
                            class,
                            group: None,
                        });
                        t += dist::exponential(&mut rng, mean_gap);
                    }
                }
            }
            WorkloadSpec::DartMix {
                load,
                short_fraction,
                short_bytes,
                incast_degree,
                long_bytes,
                jitter_ns,
                load_reference,
                lookahead,
            } => {
                check_load(*load).map_err(err)?;
                if !(0.0..=1.0).contains(short_fraction) {
                    return Err(err("short_fraction must be in [0, 1]".into()));
                }
                let shorts = SizeDist::Choice {
                    bytes: short_bytes
                        .clone()
                        .unwrap_or_else(|| vec![2048, 4096, 8192]),
                };
                shorts.validate().map_err(err)?;
                let degree = incast_degree.unwrap_or(16).min(h - 1).max(1);
                let long = long_bytes.unwrap_or(1_000_000).max(1);
                let per_host = load * cap.bytes_per_ns(*load_reference);
                // Background: per host, Poisson long flows carrying (1 − f) of the load.
                let long_rate = per_host * (1.0 - short_fraction);
                if long_rate > 0.0 {
                    let gap = long as f64 / long_rate;
                    for s in 0..h {
                        let mut t = dist::exponential(&mut rng, gap);
                        while (t as u64) < until_ns {
                            let d = random_other(&mut rng, h, s);
                            out.push(FlowSpec {
                                src: s,
                                dst: d,
                                size: long,
                                start_ns: t as u64,
                                class: 1,
                                group: None,
                            });
                            t += dist::exponential(&mut rng, gap);
                        }
                    }
                }
                // Foreground: network-wide Poisson incasts carrying f of the load.
                let short_rate = per_host * short_fraction * h as f64;
                if short_rate > 0.0 {
                    let gap = degree as f64 * shorts.mean() / short_rate;
                    let mut t = dist::exponential(&mut rng, gap);
                    let mut picked = Vec::with_capacity(degree as usize);
                    while (t as u64) < until_ns {
                        let r = dist::below(&mut rng, h as u64) as u32;
                        picked.clear();
                        while picked.len() < degree as usize {
                            let s = random_other(&mut rng, h, r);
                            if !picked.contains(&s) {
                                picked.push(s);
                            }
                        }
                        let group = lookahead.then(|| next_group(&mut groups));
                        for &s in &picked {
                            let (size, _) = shorts.sample(&mut rng);
                            let j = if *jitter_ns > 0 {
                                dist::below(&mut rng, jitter_ns + 1)
                            } else {
                                0
                            };
                            out.push(FlowSpec {
                                src: s,
                                dst: r,
                                size,
                                start_ns: t as u64 + j,
                                class: 0,
                                group,
                            });
                        }
                        t += dist::exponential(&mut rng, gap);
                    }
                }
            }
        }
    }
    // Stable: equal start times keep generation order.
    out.sort_by_key(|f| f.start_ns);
    Ok(out)
}

/// The next incast group's number.
fn next_group(groups: &mut u32) -> u32 {
    let g = *groups;
    *groups += 1;
    g
}

/// The members of every announced incast group, indexed by [`FlowSpec::group`]: the sending
/// hosts of the group's flows, in workload order.
pub fn incast_groups(flows: &[FlowSpec]) -> Vec<Vec<u32>> {
    let mut groups: Vec<Vec<u32>> = Vec::new();
    for f in flows {
        if let Some(g) = f.group {
            let g = g as usize;
            if groups.len() <= g {
                groups.resize_with(g + 1, Vec::new);
            }
            groups[g].push(f.src);
        }
    }
    groups
}

fn check_load(load: f64) -> Result<(), String> {
    if load > 0.0 && load <= 1.5 {
        Ok(())
    } else {
        Err(format!("load {load} must be in (0, 1.5]"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: Capacity = Capacity {
        hosts: 64,
        host_bps: 10e9,
        oversubscription: 1.0,
    };

    #[test]
    fn poisson_offers_the_requested_load() {
        let until = 20_000_000; // 20 ms
        let f = generate(
            &[WorkloadSpec::Poisson {
                load: 0.4,
                sizes: SizeDist::WebSearch,
                load_reference: LoadReference::Access,
            }],
            CAP,
            until,
            3,
        )
        .unwrap();
        let bytes: u64 = f.iter().map(|f| f.size).sum();
        let offered = bytes as f64 * 8.0 / (until as f64 / 1e9) / (64.0 * 10e9);
        // Heavy-tailed sizes: a loose band.
        assert!((0.3..0.5).contains(&offered), "{offered}");
        assert!(f.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
        assert!(f.iter().all(|f| f.src != f.dst));
    }

    #[test]
    fn web_search_mean_matches_table() {
        // Sum over segments of Δp · midpoint, by hand from the table: 1,595,500 + ... ≈ 1.6 MB.
        let m = SizeDist::WebSearch.mean();
        assert!((1.5e6..1.8e6).contains(&m), "{m}");
    }

    #[test]
    fn dvl_classes_follow_slide_shares() {
        let mut rng = dist::rng(1, 1);
        let mut n = [0u32; 4];
        for _ in 0..100_000 {
            let (s, c) = SizeDist::DvlClasses.sample(&mut rng);
            n[c as usize] += 1;
            let (lo, hi, _) = DVL_CLASSES[c as usize];
            assert!((lo..=hi).contains(&s));
        }
        assert!((69_000..70_100).contains(&n[0]), "{n:?}");
        assert!((24_800..25_800).contains(&n[1]), "{n:?}");
    }

    #[test]
    fn permutation_has_no_fixed_point() {
        let f = generate(
            &[WorkloadSpec::Permutation {
                size_bytes: Some(1000),
                start_ns: 0,
            }],
            CAP,
            1,
            9,
        )
        .unwrap();
        assert_eq!(f.len(), 64);
        assert!(f.iter().all(|f| f.src != f.dst));
        let mut dsts: Vec<u32> = f.iter().map(|f| f.dst).collect();
        dsts.sort();
        dsts.dedup();
        assert_eq!(dsts.len(), 64);
    }

    #[test]
    fn dart_mix_splits_bytes() {
        let f = generate(
            &[WorkloadSpec::DartMix {
                load: 0.4,
                short_fraction: 0.5,
                short_bytes: None,
                incast_degree: None,
                long_bytes: Some(100_000),
                jitter_ns: 0,
                load_reference: LoadReference::Access,
                lookahead: true,
            }],
            CAP,
            10_000_000,
            5,
        )
        .unwrap();
        let short: u64 = f.iter().filter(|f| f.class == 0).map(|f| f.size).sum();
        let long: u64 = f.iter().filter(|f| f.class == 1).map(|f| f.size).sum();
        let ratio = short as f64 / (short + long) as f64;
        assert!((0.4..0.6).contains(&ratio), "{ratio}");
        assert!(
            f.iter()
                .filter(|f| f.class == 0)
                .all(|f| [2048, 4096, 8192].contains(&f.size))
        );
        // Every incast is one announced group of 16 distinct senders to one receiver; the long
        // flows announce nothing (seed 000 §III-D).
        assert!(f.iter().all(|f| (f.class == 0) == f.group.is_some()));
        let groups = incast_groups(&f);
        assert!(groups.len() > 10);
        for (g, members) in groups.iter().enumerate() {
            let mut m = members.clone();
            m.sort_unstable();
            m.dedup();
            assert_eq!(m.len(), 16, "group {g}");
            let dst: Vec<u32> = f
                .iter()
                .filter(|f| f.group == Some(g as u32))
                .map(|f| f.dst)
                .collect();
            assert!(dst.windows(2).all(|w| w[0] == w[1]), "group {g}");
        }
    }

    #[test]
    fn incast_rounds_are_groups_unless_told_not_to() {
        let spec = |lookahead| WorkloadSpec::Incast {
            receiver: 0,
            senders: None,
            degree: Some(4),
            size_bytes: 1000,
            jitter_ns: 50,
            rounds: Some(3),
            period_ns: 1000,
            start_ns: 0,
            lookahead,
        };
        let f = generate(&[spec(true)], CAP, 1, 2).unwrap();
        // One group per round: the four senders, whatever order the jitter put them in.
        let groups: Vec<Vec<u32>> = incast_groups(&f)
            .into_iter()
            .map(|mut g| {
                g.sort_unstable();
                g
            })
            .collect();
        assert_eq!(groups, vec![vec![1, 2, 3, 4]; 3]);
        let off = generate(&[spec(false)], CAP, 1, 2).unwrap();
        assert!(off.iter().all(|f| f.group.is_none()));
        assert!(incast_groups(&off).is_empty());
    }

    #[test]
    fn bad_host_names_key() {
        let e = generate(
            &[WorkloadSpec::Incast {
                receiver: 99,
                senders: None,
                degree: Some(8),
                size_bytes: 1,
                jitter_ns: 0,
                rounds: None,
                period_ns: 0,
                start_ns: 0,
                lookahead: true,
            }],
            CAP,
            1,
            1,
        )
        .unwrap_err();
        assert!(e.to_string().contains("receiver 99"), "{e}");
    }
}
