//! Soak: one seeded connection of mixed verbs over two faulty links, checked byte for byte.
//!
//! A seed decides everything: the links' loss, duplication, reordering and corruption (each
//! 0–10%), the path MTU, the start PSNs (near the 2^24 wrap half the time), whether the QPs are
//! RC or MP-RDMA (seed 001 §3; one in four), and up to 48 work requests in both directions:
//! SEND, SEND with immediate, RDMA WRITE, WRITE with immediate, and on RC also RDMA READ,
//! FetchAdd and CmpSwap. [`run`] drives the pair until idle and checks the transport's
//! guarantees (IBA §9.7 and §10.8.3):
//!
//! - every work request completes successfully, in posting order on each side, and every
//!   receive in the order its messages were sent, with the right immediate data;
//! - every destination byte equals its source, and no byte outside the targets changes;
//! - every atomic executes exactly once even when its request or response is duplicated or
//!   retransmitted: the FetchAdd counter is the sum of the adds and each returned original is
//!   the running sum before it; each CmpSwap in a chain `k → k+1` finds `k` and the chain's
//!   word ends at its length.
//!
//! At these fault rates a work request can legitimately lose all eight of its attempts and
//! complete with `RETRY_EXC_ERR` (about one seed in 10^5: a READ of twelve 256-byte responses
//! at 20% faults per frame loses an attempt with probability ~0.9). Such a seed is replayed
//! with its events recorded and counts as [`Outcome::exhausted`] only when
//! [`super::retry_budget::check`] finds the link spoiled every attempt; otherwise it fails.
//!
//! A failure is reported with its seed, so `cargo run -p rocev2-core --example soak --features
//! testing -- --from SEED --seeds 1` replays it bit for bit.
//!
//! Source: IBA Vol. 1 §9.7 (reliable service), §9.4.5 (atomics), §10.8.3 (completion order);
//! seed 001 §3 for the multipath mode. Deviations: none.

use super::{ConnectOptions, Event, LinkConfig, Pair, retry_budget};
use crate::cq::WcStatus;
use crate::mprdma::MpConfig;
use crate::mr::MrInfo;
use crate::qp::{ExtCaps, Mtu, QpConfig, RecvWr, SendOp, SendWr, Sge};
use crate::time::{Duration, Rate};
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// Layout of each side's 64 KiB buffer.
const PATTERN: usize = 0; // [0, 16K): a known pattern, the source of every WRITE, SEND, READ
const PATTERN_LEN: usize = 16 << 10;
const SLOTS: usize = 16 << 10; // [16K, 56K): destinations, handed out in order
const SLOTS_END: usize = 56 << 10;
const FADD_WORD: usize = 56 << 10; // the FetchAdd counter the peer adds to
const CSWAP_WORD: usize = FADD_WORD + 8; // the CmpSwap chain's word
const RESULTS: usize = 57 << 10; // originals returned by this side's atomics, 8 bytes each
const MAX_ATOMICS: usize = (64 << 10) - RESULTS;
const MR_LEN: usize = 64 << 10;

/// A bound on a round trip over the soak's links: 2 µs each way, 7 µs more for a reordered
/// frame, ~3.5 µs to serialize a 4 KiB frame at 10 Gbit/s, with room for queueing behind a
/// burst. Shorter than the local ACK timeout (4.096 µs · 2^5).
const ANSWER_WITHIN: Duration = Duration::from_micros(50);

/// Steps [`Pair::drive`] may take before the run counts as hung.
const MAX_STEPS: usize = 4_000_000;

/// What one seed ran, for the soak's totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Whether the QPs ran MP-RDMA.
    pub multipath: bool,
    /// Work requests posted (both sides).
    pub work_requests: usize,
    /// Payload bytes moved (both sides).
    pub bytes: u64,
    /// Frames the two links lost, duplicated, reordered or corrupted.
    pub faults: u64,
    /// A work request gave up with `RETRY_EXC_ERR` after the link spoiled every one of its
    /// attempts ([`super::retry_budget::check`]); the data checks were not run.
    pub exhausted: bool,
}

/// Why a seed failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The seed, which replays the run.
    pub seed: u64,
    /// What went wrong.
    pub what: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    FetchAdd,
    CmpSwap,
}

/// What a run must find at the end.
#[derive(Default)]
struct Expect {
    /// (on side A?, offset, bytes).
    bytes: Vec<(bool, usize, Vec<u8>)>,
    /// Per side: send-queue wr_ids in posting order.
    sends: [Vec<u64>; 2],
    /// Per side: (wr_id, immediate data) of receives in completion order.
    recvs: [Vec<(u64, Option<u32>)>; 2],
    /// Per side: this side's atomics in posting order.
    atomics: [Vec<Atomic>; 2],
}

/// An atomic as posted.
#[derive(Debug, Clone, Copy)]
enum Atomic {
    /// FetchAdd of this value.
    FetchAdd(u64),
    /// The CmpSwap `n → n + 1` of the chain.
    CmpSwap(u64),
}

/// The pattern each side's buffer starts with.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u64).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 7) as u8)
        .collect()
}

fn sge(mr: &MrInfo, off: usize, len: usize) -> Sge {
    Sge {
        addr: mr.addr + off as u64,
        length: len as u32,
        lkey: mr.lkey,
    }
}

/// A probability in [0, max).
fn chance(rng: &mut ChaCha8Rng, max: f64) -> f64 {
    (rng.next_u32() as f64 / 4_294_967_296.0) * max
}

fn multipath_caps(pd: crate::mr::PdId, cq: crate::qp::CqId) -> QpConfig {
    QpConfig::new(pd, cq, cq).with_multipath(MpConfig::paper())
}

/// Runs seed `seed` and checks it; see the module docs.
///
/// # Errors
/// The first broken guarantee, with the seed.
pub fn run(seed: u64) -> Result<Outcome, Failure> {
    run_traced(seed, &mut None)
}

/// [`run`], recording into `events` (when `Some`) every frame sent and every frame delivered
/// with what the receiver did with it ([`Pair::events`]), to replay a failure frame by frame.
///
/// # Errors
/// As [`run`].
pub fn run_traced(seed: u64, events: &mut Option<Vec<Event>>) -> Result<Outcome, Failure> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (loss, dup, reorder, corrupt) = (
        chance(&mut rng, 0.1),
        chance(&mut rng, 0.1),
        chance(&mut rng, 0.1),
        chance(&mut rng, 0.1),
    );
    let link = |s| {
        LinkConfig::default()
            .delay(Duration::from_micros(2))
            .rate(Rate::from_gbps(10))
            .loss(loss)
            .duplicate(dup)
            .reorder(reorder, Duration::from_micros(7))
            .corrupt(corrupt)
            .seed(s)
    };
    let multipath = rng.next_u32() % 4 == 0;
    let mtu = [Mtu::Mtu256, Mtu::Mtu1024, Mtu::Mtu4096][rng.next_u32() as usize % 3];
    let near_wrap = rng.next_u32() % 2 == 0;
    let fail = |what: String| Failure {
        seed,
        what: format!(
            "{} MTU {}, loss {:.1}% dup {:.1}% reorder {:.1}% corrupt {:.1}%: {what}",
            if multipath { "multipath" } else { "RC" },
            mtu.bytes(),
            loss * 100.0,
            dup * 100.0,
            reorder * 100.0,
            corrupt * 100.0
        ),
    };
    let psn = |rng: &mut ChaCha8Rng| {
        if near_wrap {
            0xff_ff00 + rng.next_u32() % 0x100
        } else {
            rng.next_u32() & 0xff_ffff
        }
    };
    let mut p = Pair::new(link(rng.next_u64()), link(rng.next_u64()));
    p.events = events.take();
    let mut options = ConnectOptions {
        mr_len: MR_LEN,
        mtu,
        psn_a: psn(&mut rng),
        psn_b: psn(&mut rng),
        timeout: 5,
        retry_cnt: 7,
        rnr_retry: 7,
        ..ConnectOptions::default()
    };
    if multipath {
        options.caps = multipath_caps;
        options.peer_ext = ExtCaps {
            multipath: true,
            ..ExtCaps::default()
        };
    }
    let c = p
        .connect(options)
        .map_err(|e| fail(format!("connect: {e:?}")))?;
    let mr = [c.mr_a, c.mr_b];
    let qp = [c.qa, c.qb];
    let patterns = [pattern(seed, PATTERN_LEN), pattern(!seed, PATTERN_LEN)];
    let mut e = Expect::default();
    for (side, h) in [&mut p.a, &mut p.b].into_iter().enumerate() {
        let m = h
            .mem
            .get_mut(mr[side].id)
            .ok_or_else(|| fail("no MR".into()))?;
        m[PATTERN..PATTERN + PATTERN_LEN].copy_from_slice(&patterns[side]);
        e.bytes.push((side == 0, PATTERN, patterns[side].clone()));
    }

    let kinds: &[Kind] = if multipath {
        &[Kind::Send, Kind::SendImm, Kind::Write, Kind::WriteImm]
    } else {
        &[
            Kind::Send,
            Kind::SendImm,
            Kind::Write,
            Kind::WriteImm,
            Kind::Read,
            Kind::FetchAdd,
            Kind::CmpSwap,
        ]
    };
    let mut next_slot = [SLOTS, SLOTS];
    let mut bytes = 0u64;
    let ops = 1 + rng.next_u32() as usize % 48;
    for i in 0..ops {
        let id = i as u64;
        let s = (rng.next_u32() % 2) as usize; // the side that posts
        let d = 1 - s;
        let kind = kinds[rng.next_u32() as usize % kinds.len()];
        let len = rng.next_u32() as usize % 3000;
        let from = rng.next_u32() as usize % (PATTERN_LEN - len);
        let imm = rng.next_u32();
        let wr = match kind {
            Kind::Send | Kind::SendImm | Kind::Write | Kind::WriteImm | Kind::Read => {
                // READ lands on the poster, everything else on the peer.
                let (dst, src) = if kind == Kind::Read { (s, d) } else { (d, s) };
                let at = next_slot[dst];
                if at + len > SLOTS_END {
                    continue;
                }
                next_slot[dst] += len;
                bytes += len as u64;
                e.bytes
                    .push((dst == 0, at, patterns[src][from..from + len].to_vec()));
                let consumes_recv = matches!(kind, Kind::Send | Kind::SendImm | Kind::WriteImm);
                if consumes_recv {
                    // A WRITE with immediate consumes a receive but places nothing through it.
                    let sg_list = if kind == Kind::WriteImm {
                        vec![]
                    } else {
                        vec![sge(&mr[d], at, len)]
                    };
                    let host = if d == 0 { &mut p.a } else { &mut p.b };
                    host.ep
                        .post_recv(qp[d], RecvWr { wr_id: id, sg_list })
                        .map_err(|err| fail(format!("post_recv #{i}: {err:?}")))?;
                    let want_imm = matches!(kind, Kind::SendImm | Kind::WriteImm).then_some(imm);
                    e.recvs[d].push((id, want_imm));
                }
                let remote_at = |off: usize| mr[d].addr + off as u64;
                let op = match kind {
                    Kind::Send => SendOp::Send,
                    Kind::SendImm => SendOp::SendWithImm { imm },
                    Kind::Write => SendOp::Write {
                        remote_addr: remote_at(at),
                        rkey: mr[d].rkey,
                    },
                    Kind::WriteImm => SendOp::WriteWithImm {
                        remote_addr: remote_at(at),
                        rkey: mr[d].rkey,
                        imm,
                    },
                    _ => SendOp::Read {
                        remote_addr: remote_at(PATTERN + from),
                        rkey: mr[d].rkey,
                    },
                };
                let local = if kind == Kind::Read {
                    sge(&mr[s], at, len)
                } else {
                    sge(&mr[s], PATTERN + from, len)
                };
                SendWr::new(id, op).sge(local)
            }
            Kind::FetchAdd | Kind::CmpSwap => {
                let k = e.atomics[s].len();
                if (k + 1) * 8 > MAX_ATOMICS {
                    continue;
                }
                let op = if kind == Kind::FetchAdd {
                    let add = u64::from(imm) + 1;
                    e.atomics[s].push(Atomic::FetchAdd(add));
                    SendOp::FetchAdd {
                        remote_addr: mr[d].addr + FADD_WORD as u64,
                        rkey: mr[d].rkey,
                        add,
                    }
                } else {
                    let n = chain_len(&e.atomics[s]);
                    e.atomics[s].push(Atomic::CmpSwap(n));
                    SendOp::CompareSwap {
                        remote_addr: mr[d].addr + CSWAP_WORD as u64,
                        rkey: mr[d].rkey,
                        compare: n,
                        swap: n + 1,
                    }
                };
                SendWr::new(id, op).sge(sge(&mr[s], RESULTS + 8 * k, 8))
            }
        };
        let host = if s == 0 { &mut p.a } else { &mut p.b };
        host.ep
            .post_send(qp[s], wr)
            .map_err(|err| fail(format!("post_send #{i} {kind:?}: {err:?}")))?;
        e.sends[s].push(id);
    }
    let work_requests = e.sends[0].len() + e.sends[1].len();

    let idle = p.drive(MAX_STEPS);
    *events = p.events.take();
    let events: &Option<Vec<Event>> = events;
    if !idle {
        return Err(fail(format!("not idle after {MAX_STEPS} steps")));
    }
    let wcs = [p.completions(true, c.cq_a), p.completions(false, c.cq_b)];
    let errors: Vec<String> = (0..2)
        .filter_map(|side| {
            let bad = wcs[side].iter().find(|w| w.status != WcStatus::Success)?;
            let host = if side == 0 { &p.a } else { &p.b };
            let counters = host.ep.qp(qp[side]).map(|q| *q.counters());
            Some(format!(
                "side {side}: first error {bad:?}; QP counters {counters:?}"
            ))
        })
        .collect();
    if !errors.is_empty() {
        return match spent_on_link(seed, &wcs, multipath, mtu, events) {
            Ok(_) => Ok(Outcome {
                multipath,
                work_requests,
                bytes: 0,
                faults: link_faults(&p),
                exhausted: true,
            }),
            Err(why) => Err(fail(format!("{}; {why}", errors.join("; ")))),
        };
    }
    for (side, wcs) in wcs.iter().enumerate() {
        let sends: Vec<u64> = wcs
            .iter()
            .filter(|w| !w.opcode.is_recv())
            .map(|w| w.wr_id)
            .collect();
        if sends != e.sends[side] {
            return Err(fail(format!(
                "side {side}: sends completed {sends:?}, posted {:?}",
                e.sends[side]
            )));
        }
        let recvs: Vec<(u64, Option<u32>)> = wcs
            .iter()
            .filter(|w| w.opcode.is_recv())
            .map(|w| (w.wr_id, w.imm_data))
            .collect();
        if recvs != e.recvs[side] {
            return Err(fail(format!(
                "side {side}: receives completed {recvs:?}, expected {:?}",
                e.recvs[side]
            )));
        }
    }

    let mut touched = [vec![false; MR_LEN], vec![false; MR_LEN]];
    for (on_a, at, want) in &e.bytes {
        let side = usize::from(!*on_a);
        let host = if *on_a { &p.a } else { &p.b };
        let m = host
            .mem
            .get(mr[side].id)
            .ok_or_else(|| fail("no MR".into()))?;
        if m[*at..*at + want.len()] != want[..] {
            return Err(fail(format!(
                "side {side}: bytes at {at}..{} differ from their source",
                at + want.len()
            )));
        }
        touched[side][*at..*at + want.len()].fill(true);
    }
    for side in 0..2 {
        let host = if side == 0 { &p.a } else { &p.b };
        let m = host
            .mem
            .get(mr[side].id)
            .ok_or_else(|| fail("no MR".into()))?;
        let atomic_area = FADD_WORD..RESULTS + 8 * e.atomics[side].len();
        if let Some(i) =
            (0..MR_LEN).find(|&i| !touched[side][i] && !atomic_area.contains(&i) && m[i] != 0)
        {
            return Err(fail(format!(
                "side {side}: byte {i} written outside any target"
            )));
        }
        // Exactly once, at the target: the peer's adds sum into our counter, the peer's chain
        // of swaps ends at its length.
        let peer = &e.atomics[1 - side];
        let sum = peer.iter().fold(0u64, |a, op| match op {
            Atomic::FetchAdd(add) => a.wrapping_add(*add),
            Atomic::CmpSwap(_) => a,
        });
        if word(m, FADD_WORD) != sum {
            return Err(fail(format!(
                "side {side}: FetchAdd counter {} after adds summing to {sum}",
                word(m, FADD_WORD)
            )));
        }
        if word(m, CSWAP_WORD) != chain_len(peer) {
            return Err(fail(format!(
                "side {side}: CmpSwap word {} after a chain of {}",
                word(m, CSWAP_WORD),
                chain_len(peer)
            )));
        }
        // Exactly once, at the requester: each original is the word before this atomic alone.
        let mut counter = 0u64;
        for (k, op) in e.atomics[side].iter().enumerate() {
            let (want, name) = match *op {
                Atomic::FetchAdd(add) => {
                    let before = counter;
                    counter = counter.wrapping_add(add);
                    (before, "FetchAdd")
                }
                Atomic::CmpSwap(n) => (n, "CmpSwap"),
            };
            let got = word(m, RESULTS + 8 * k);
            if got != want {
                return Err(fail(format!(
                    "side {side}: {name} #{k} returned {got}, expected {want}"
                )));
            }
        }
    }
    Ok(Outcome {
        multipath,
        work_requests,
        bytes,
        faults: link_faults(&p),
        exhausted: false,
    })
}

/// Frames the two links lost, duplicated, reordered or corrupted.
fn link_faults(p: &Pair) -> u64 {
    [p.ab.stats(), p.ba.stats()]
        .iter()
        .map(|s| s.lost + s.duplicated + s.reordered + s.corrupted)
        .sum()
}

/// Whether the error completions are retry budgets the link spent: on each side with an
/// error, the first is `RETRY_EXC_ERR` and the rest are flushes, and replaying the seed with
/// its events recorded shows every attempt spoiled ([`retry_budget::check`]). Returns the
/// attempts checked. `events` holds the run's events when the caller recorded them.
fn spent_on_link(
    seed: u64,
    wcs: &[Vec<crate::cq::WorkCompletion>; 2],
    multipath: bool,
    mtu: Mtu,
    events: &Option<Vec<Event>>,
) -> Result<usize, String> {
    if multipath {
        return Err("multipath QPs retry per path (seed 001 §3.4), not checked here".into());
    }
    let failed: Vec<bool> = wcs
        .iter()
        .map(|w| w.iter().any(|c| c.status != WcStatus::Success))
        .collect();
    for (side, w) in wcs.iter().enumerate() {
        let mut bad = w.iter().filter(|c| c.status != WcStatus::Success);
        if let Some(first) = bad.next()
            && (first.status != WcStatus::RetryExcErr
                || bad.any(|c| c.status != WcStatus::WrFlushErr))
        {
            return Err(format!("side {side}: not a retry budget spent and flushed"));
        }
    }
    let replayed;
    let events = match events {
        Some(e) => e,
        None => {
            let mut log = Some(Vec::new());
            let _ = run_traced(seed, &mut log);
            replayed = log.unwrap_or_default();
            &replayed
        }
    };
    let mut attempts = 0;
    for side in (0..2).filter(|&s| failed[s]) {
        attempts += retry_budget::check(events, side == 0, mtu.bytes(), ANSWER_WITHIN)
            .map_err(|why| format!("side {side}: {why}"))?;
    }
    Ok(attempts)
}

/// How many CmpSwaps `atomics` holds: the chain's next compare value.
fn chain_len(atomics: &[Atomic]) -> u64 {
    atomics
        .iter()
        .filter(|a| matches!(a, Atomic::CmpSwap(_)))
        .count() as u64
}

/// The native-endian 64-bit word at `at` (atomics operate in the host's order, as the
/// `Memory` implementations of the core do).
fn word(m: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&m[at..at + 8]);
    u64::from_ne_bytes(b)
}
