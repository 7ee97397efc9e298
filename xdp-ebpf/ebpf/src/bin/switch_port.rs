//! Switch port: a tc classifier on a port's egress (a router namespace's veth or a Linux
//! bridge port) that plays the port's egress queue in front of the shaper (HTB/TBF) the loader
//! installs at the port's rate.
//!
//! Per packet, in order (policy in `rocev2_ebpf_common`, STYLE.md §2):
//! 1. fault injection, RoCEv2 frames only (`fault`): blackhole, loss, one flipped bit after the
//!    BTH (covered by the ICRC, so the receiver must count an ICRC error), duplication by
//!    `bpf_clone_redirect` to the same egress;
//! 2. the queue model (`queue`): drain at the port rate to `bpf_ktime_get_ns()`;
//! 3. IOFD (`iofd`, seed 000 §IV), when configured: a short message's packets may leave by an
//!    alternate port (`bpf_redirect_neigh`) instead of joining this queue;
//! 4. DVL (`dvl`, seed 003), when configured: the two queues (normal, congested-flow) drain by
//!    strict priority; a flow in the congested-flow table, or whose packet finds the normal
//!    queue at the threshold, goes to the congested-flow queue (`skb->priority` selects the
//!    lowest band of the pfifo_fast below the shaper); on isolation, and periodically while
//!    isolated, a copy of the packet goes back to the previous hop as a congestion
//!    notification ([`notify`]);
//! 5. tail drop if the packet does not fit in the buffer (one per queue), else RED/ECN
//!    on the modelled queue it joins (`red`): CE by `bpf_skb_ecn_set_ce` on ECT packets; the
//!    packet joins the queue.
//!
//! A second classifier, [`rocev2_dvl_rx`], on the ingress of a port configured to accept
//! notifications, puts the notified flow into that port's congested-flow table (the maps are
//! shared: both programs come from one loaded object).
//!
//! Fails open: no config, a frame it cannot parse, a helper error — the packet passes
//! (counted).
//!
//! Races: the queue state is one map entry shared by all CPUs, updated without a lock
//! (`bpf_spin_lock` needs a BTF-described map value; the legacy `#[map]` definitions used here
//! have none — aya-ebpf 0.2.1's `btf_maps` might allow it, not tried). When two CPUs send on
//! the port at the same instant, one's update can be lost: the queue then misses one packet's
//! bytes (or drains one interval twice). Counters are per-CPU and exact. The IOFD table is a
//! hash map whose insert-if-absent is atomic, as is the congested-flow table's. docs/switch.md measures the model against the
//! shaper's backlog.
//!
//! Deviations: see docs/switch.md (DVL: notification format, no markings).
#![no_std]
#![no_main]

use aya_ebpf::{
    bindings::{BPF_ANY, BPF_NOEXIST, TC_ACT_OK, TC_ACT_SHOT, bpf_fib_lookup},
    helpers::{
        bpf_fib_lookup as fib_lookup, bpf_get_prandom_u32, bpf_get_smp_processor_id,
        bpf_ktime_get_ns, bpf_redirect_neigh, bpf_skb_ecn_set_ce,
    },
    macros::{classifier, map},
    maps::{Array, HashMap, PerCpuArray},
    programs::TcContext,
};
use rocev2_ebpf::parse::{Headers, Ip, headers};
use rocev2_ebpf_common::{
    dvl::{self, CFT_ENTRIES, Cft, Class, Event, FlowKey, NOTIFY_ETHERTYPE},
    fault::Fault,
    iofd::{self, Action, DFT_ENTRIES, Dft, MessageKey, Position, Refusal},
    queue::QueueState,
    switch_port::{
        Admit, CFQ_PRIORITY, Counter, DEFLECTED_MARK, DUPLICATE_MARK, FLAG_DVL, FLAG_DVL_ACCEPT,
        FLAG_ENABLED, FLAG_IOFD, HIST_BUCKETS, PortConfig, admit,
    },
};

/// The port's configuration (`switch_port::CONFIG_MAP`).
#[map(name = "RV2_SW_CONFIG")]
static CONFIG: Array<PortConfig> = Array::with_max_entries(1, 0);

/// The modelled queue (`switch_port::QUEUE_MAP`).
#[map(name = "RV2_SW_QUEUE")]
static QUEUE: Array<QueueState> = Array::with_max_entries(1, 0);

/// Per-CPU counters indexed by [`Counter`] (`switch_port::COUNTERS_MAP`).
#[map(name = "RV2_SW_COUNTERS")]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(Counter::COUNT, 0);

/// Per-CPU queue histogram (`switch_port::HIST_MAP`).
#[map(name = "RV2_SW_HIST")]
static HIST: PerCpuArray<u64> = PerCpuArray::with_max_entries(3 * HIST_BUCKETS, 0);

/// The port's deflected-flow table (`switch_port::DFT_MAP`): insert-if-absent is atomic in the
/// kernel, so a live entry is never overwritten and a full table refuses.
#[map(name = "RV2_SW_DFT")]
static DFT: HashMap<MessageKey, u32> = HashMap::with_max_entries(DFT_ENTRIES, 0);

/// The modelled congested-flow queue (`switch_port::CFQ_MAP`), DVL only.
#[map(name = "RV2_SW_CFQ")]
static CFQ: Array<QueueState> = Array::with_max_entries(1, 0);

/// The port's congested-flow table (`switch_port::CFT_MAP`): insert-if-absent and delete are atomic
/// in the kernel, so CPUs racing on one flow agree.
#[map(name = "RV2_SW_CFT")]
static CFT: HashMap<FlowKey, u64> = HashMap::with_max_entries(CFT_ENTRIES, 0);

/// When this port last notified upstream for each isolated flow (`switch_port::NOTIFIED_MAP`).
#[map(name = "RV2_SW_NOTIFIED")]
static NOTIFIED: HashMap<FlowKey, u64> = HashMap::with_max_entries(CFT_ENTRIES, 0);

/// Per-CPU scratch space of [`notify`].
#[map(name = "RV2_SW_SCRATCH")]
static SCRATCH: PerCpuArray<Scratch> = PerCpuArray::with_max_entries(1, 0);

/// [`notify`]'s FIB lookup and the Ethernet header it restores.
#[repr(C)]
struct Scratch {
    fib: bpf_fib_lookup,
    original: [u8; ETH_HLEN],
}

const ETH_HLEN: usize = 14;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
/// `skb->priority` of a notification: linux/pkt_sched.h `TC_PRIO_CONTROL`, band 0 of
/// pfifo_fast, ahead of the normal queue of a DVL port on the way back.
const TC_PRIO_CONTROL: u32 = 7;

/// BTH length: the corruptible range starts after it, so that a flipped bit is never in BTH
/// byte 4, the one transport byte the ICRC masks (docs/wire.md).
const BTH_LEN: usize = 12;
const UDP_LEN: usize = 8;
/// Bytes pulled into the linear area when the headers are not there yet.
const PULL_LEN: u32 = 128;

#[classifier]
pub fn rocev2_switch(ctx: TcContext) -> i32 {
    match try_switch(&ctx) {
        Ok(action) | Err(action) => action,
    }
}

fn try_switch(ctx: &TcContext) -> Result<i32, i32> {
    let cfg = match CONFIG.get(0) {
        Some(c) if c.flags & FLAG_ENABLED != 0 => *c,
        _ => return Ok(TC_ACT_OK),
    };
    let len = u64::from(ctx.len());
    // SAFETY: the context's skb pointer is valid for the whole program run.
    let mark = unsafe { (*ctx.skb.skb).mark };
    // Our own duplicate: queued, never faulted again. A packet another port deflected here:
    // an ordinary arrival, except that it is never deflected again at this switch.
    let ours = mark == DUPLICATE_MARK;
    let deflected_here = mark == DEFLECTED_MARK;
    if deflected_here {
        add(Counter::IofdReceived, 1);
    }
    let sequence = if ours {
        add(Counter::Duplicates, 1)
    } else {
        add(Counter::Bytes, len);
        add(Counter::Packets, 1)
    };

    let mut parsed = parse(ctx);
    if parsed == Headers::Truncated && ctx.len() > (ctx.data_end() - ctx.data()) as u32 {
        // Headers in paged data: pull them into the linear area and look again.
        if ctx.pull_data(PULL_LEN.min(ctx.len())).is_ok() {
            parsed = parse(ctx);
        }
    }
    let ip = match parsed {
        Headers::Ip(ip) => Some(ip),
        Headers::NotIp => {
            add(Counter::NotIp, 1);
            None
        }
        Headers::Truncated => {
            add(Counter::Truncated, 1);
            None
        }
    };
    let ect = ip.is_some_and(|ip| ip.ecn != 0);

    if let Some(ip) = ip
        && ip.roce
        && !ours
    {
        add(Counter::Roce, 1);
        let start = ip.l4 + UDP_LEN + BTH_LEN;
        let range_bits = (len as usize).saturating_sub(start).min(1 << 16) as u32 * 8;
        // SAFETY: plain helper call.
        let cpu = unsafe { bpf_get_smp_processor_id() };
        match cfg.faults().decide(cpu, sequence, range_bits) {
            Fault::None => {}
            Fault::Blackhole => {
                add(Counter::FaultBlackhole, 1);
                return Ok(TC_ACT_SHOT);
            }
            Fault::Loss => {
                add(Counter::FaultLoss, 1);
                return Ok(TC_ACT_SHOT);
            }
            Fault::Corrupt { bit, duplicate } => {
                if corrupt(ctx, start, bit).is_ok() {
                    add(Counter::FaultCorrupt, 1);
                } else {
                    add(Counter::HelperError, 1);
                }
                if duplicate {
                    duplicate_packet(ctx, &cfg, mark);
                }
            }
            Fault::Duplicate => duplicate_packet(ctx, &cfg, mark),
        }
    }
    if ect {
        add(Counter::EcnCapable, 1);
    }

    let queue = QUEUE.get_ptr_mut(0).ok_or(TC_ACT_OK)?;
    let cfq = CFQ.get_ptr_mut(0).ok_or(TC_ACT_OK)?;
    let dvl_on = cfg.flags & FLAG_DVL != 0;
    // SAFETY: plain helper calls.
    let (now, rand) = unsafe { (bpf_ktime_get_ns(), bpf_get_prandom_u32()) };
    // SAFETY: valid map values; concurrent updates race as documented above.
    let (found, found_cfq) = unsafe {
        if dvl_on {
            dvl::drain(&mut *queue, &mut *cfq, cfg.rate_bps, now)
        } else {
            ((*queue).drain(cfg.rate_bps, now), 0)
        }
    };
    if cfg.flags & FLAG_IOFD != 0
        && let Some(ip) = ip
        && ip.roce
        && !ours
        && !deflected_here
        && let Some(action) = deflect(ctx, &cfg, &ip, found, rand)
    {
        return Ok(action);
    }
    let class = match ip {
        Some(ip) if dvl_on => isolate(ctx, &cfg, &ip, found, found_cfq, now),
        _ => Class::Normal,
    };
    // Each queue has the buffer to itself and RED acts on the queue the packet joins: a
    // shared buffer would let a backlogged CFQ (no PFC here to hold its flow back) take the
    // normal queue's room (docs/switch.md, DVL).
    let joins = match class {
        Class::Normal => found,
        Class::Congested => found_cfq,
    };
    let bucket = cfg.bucket(joins);
    hist(bucket);
    let admitted = admit(&cfg.red(), cfg.buffer_bytes, joins, len, ect, rand);
    if ect && !matches!(admitted, Admit::DropBuffer) {
        hist(HIST_BUCKETS + bucket);
    }
    match admitted {
        Admit::DropBuffer => {
            add(Counter::DropBuffer, 1);
            return Ok(TC_ACT_SHOT);
        }
        Admit::DropNonEct => {
            add(Counter::DropNonEct, 1);
            return Ok(TC_ACT_SHOT);
        }
        Admit::Mark => {
            // SAFETY: the context's skb; the helper checks the protocol itself.
            if unsafe { bpf_skb_ecn_set_ce(ctx.skb.skb) } == 1 {
                add(Counter::CeMarked, 1);
                hist(2 * HIST_BUCKETS + bucket);
            }
        }
        Admit::Pass => {}
    }
    match class {
        // SAFETY: as above.
        Class::Normal => unsafe { (*queue).enqueue(len) },
        Class::Congested => {
            add(Counter::DvlCongested, 1);
            // SAFETY: as above; `priority` is writable from a tc program.
            unsafe {
                (*cfq).enqueue(len);
                (*ctx.skb.skb).priority = CFQ_PRIORITY;
            }
        }
    }
    Ok(TC_ACT_OK)
}

/// The port's table as the policy sees it.
struct MapDft;

impl Dft for MapDft {
    fn get(&self, key: &MessageKey) -> Option<u32> {
        // SAFETY: the value is copied out at once; a concurrent delete frees it only after an
        // RCU grace period, which this program run is inside.
        unsafe { DFT.get(key).copied() }
    }

    fn insert_new(&mut self, key: &MessageKey, port: u32) -> bool {
        DFT.insert(key, port, u64::from(BPF_NOEXIST)).is_ok()
    }

    fn remove(&mut self, key: &MessageKey) {
        let _ = DFT.remove(key);
    }
}

/// The port's congested-flow table as the policy sees it.
struct MapCft;

impl Cft for MapCft {
    fn since(&self, key: &FlowKey) -> Option<u64> {
        // SAFETY: the value is copied out at once (RCU, as for the DFT).
        unsafe { CFT.get(key).copied() }
    }

    fn insert(&mut self, key: &FlowKey, now_ns: u64) -> bool {
        CFT.insert(key, now_ns, u64::from(BPF_NOEXIST)).is_ok()
    }

    fn remove(&mut self, key: &FlowKey) {
        let _ = CFT.remove(key);
    }
}

/// DVL (seed 003): the queue this packet joins; isolates or releases its flow.
#[inline(always)]
fn isolate(
    ctx: &TcContext,
    cfg: &PortConfig,
    ip: &Ip,
    normal_bytes: u64,
    congested_bytes: u64,
    now: u64,
) -> Class {
    let Some(key) = flow_key(ctx, cfg, ip) else {
        return Class::Normal;
    };
    let (class, event) = dvl::decide(
        &mut MapCft,
        &cfg.dvl(),
        &key,
        normal_bytes,
        congested_bytes,
        now,
    );
    match event {
        Event::Isolated => add(Counter::DvlIsolated, 1),
        Event::Released => {
            let _ = NOTIFIED.remove(key);
            add(Counter::DvlReleased, 1)
        }
        Event::TableFull => add(Counter::DvlTableFull, 1),
        Event::None => 0,
    };
    if class == Class::Congested {
        // SAFETY: copied out at once (RCU, as for the DFT).
        let last = unsafe { NOTIFIED.get(key).copied() };
        if dvl::notify_due(class, event, last, now) {
            // Recorded before sending, failed or not: a missing route is retried a period
            // later, not on every packet; if it cannot be recorded nothing is sent, for the same
            // reason. Two CPUs may both find the notification due and send two.
            let sent =
                NOTIFIED.insert(key, now, u64::from(BPF_ANY)).is_ok() && notify(ctx, cfg, ip, &key);
            add(
                if sent {
                    Counter::DvlNotifySent
                } else {
                    Counter::DvlNotifyFailed
                },
                1,
            );
        }
    }
    class
}

/// Seed 003 slide 10 #5, "congestion information sent upstream": sends a copy of this packet
/// of an isolated flow back to the previous hop as a congestion notification, and leaves the
/// packet itself byte for byte as it was. The previous hop is the route back to the packet's
/// source (`bpf_fib_lookup` from this port as input, source and destination swapped), which
/// gives the interface and both MAC addresses; the copy gets those addresses and the EtherType
/// [`NOTIFY_ETHERTYPE`] in place of the Ethernet header (the IP packet, hence the flow's
/// 5-tuple, unchanged), `skb->priority` `TC_PRIO_CONTROL` (band 0 of a DVL port's pfifo_fast)
/// and no mark, and leaves by `bpf_clone_redirect` to that interface's egress. False when no
/// route or neighbour is known (a neighbour is learnt from traffic the other way) or a helper
/// failed. Only untagged frames: behind VLAN tags the IP header is not at byte 14.
#[inline(always)]
fn notify(ctx: &TcContext, cfg: &PortConfig, ip: &Ip, key: &FlowKey) -> bool {
    if ip.l3 != ETH_HLEN {
        return false;
    }
    // The lookup's 64 bytes and the saved header live in a per-CPU map: the program's 512-byte
    // stack has no room left for them.
    let Some(scratch) = SCRATCH.get_ptr_mut(0) else {
        return false;
    };
    // SAFETY: this CPU's slot, used by nobody else during this program run.
    let scratch = unsafe { &mut *scratch };
    let Ok(original) = ctx.load::<[u8; ETH_HLEN]>(0) else {
        return false;
    };
    scratch.original = original;
    let fib = &mut scratch.fib;
    // Every input field is written: the slot holds the previous lookup's results.
    fib.l4_protocol = key.protocol as u8;
    fib.sport = key.dst_port.to_be();
    fib.dport = key.src_port.to_be();
    fib.__bindgen_anon_1.tot_len = 0;
    // The ingress interface of the reverse lookup: this port (forwarding must be on, as on
    // any router port).
    fib.ifindex = cfg.ifindex;
    fib.__bindgen_anon_2.flowinfo = 0;
    fib.__bindgen_anon_5.tbid = 0;
    if ip.ipv6 {
        fib.family = AF_INET6;
        fib.__bindgen_anon_3.ipv6_src = words(&key.dst);
        fib.__bindgen_anon_4.ipv6_dst = words(&key.src);
    } else {
        fib.family = AF_INET;
        fib.__bindgen_anon_3.ipv4_src =
            u32::from_ne_bytes([key.dst[12], key.dst[13], key.dst[14], key.dst[15]]);
        fib.__bindgen_anon_4.ipv4_dst =
            u32::from_ne_bytes([key.src[12], key.src[13], key.src[14], key.src[15]]);
    }
    // SAFETY: the context's skb and a map value of the size passed.
    let rc = unsafe {
        fib_lookup(
            ctx.skb.skb.cast(),
            fib,
            core::mem::size_of::<bpf_fib_lookup>() as i32,
            0,
        )
    };
    if rc != 0 {
        return false;
    }
    if ctx.store(0, &fib.dmac, 0).is_err()
        || ctx.store(6, &fib.smac, 0).is_err()
        || ctx.store(12, &NOTIFY_ETHERTYPE.to_be_bytes(), 0).is_err()
    {
        restore(ctx, &scratch.original);
        return false;
    }
    // SAFETY: the context's skb; priority and mark are writable from a tc program.
    let (priority, mark) = unsafe { ((*ctx.skb.skb).priority, (*ctx.skb.skb).mark) };
    // SAFETY: as above.
    unsafe {
        (*ctx.skb.skb).priority = TC_PRIO_CONTROL;
    }
    ctx.set_mark(0);
    let sent = ctx.clone_redirect(fib.ifindex, 0).is_ok();
    // SAFETY: as above.
    unsafe {
        (*ctx.skb.skb).priority = priority;
    }
    ctx.set_mark(mark);
    restore(ctx, &scratch.original);
    sent
}

/// Puts the packet's original Ethernet header back: it continues as if nothing happened. A
/// failing store of bytes just written would forward a mangled frame; it cannot fail short of
/// a kernel bug and is counted as a helper error if it does.
#[inline(always)]
fn restore(ctx: &TcContext, original: &[u8; ETH_HLEN]) {
    if ctx.store(0, original, 0).is_err() {
        add(Counter::HelperError, 1);
    }
}

/// 16 address bytes as the four network-order words `bpf_fib_lookup` holds.
#[inline(always)]
fn words(a: &[u8; 16]) -> [u32; 4] {
    [
        u32::from_ne_bytes([a[0], a[1], a[2], a[3]]),
        u32::from_ne_bytes([a[4], a[5], a[6], a[7]]),
        u32::from_ne_bytes([a[8], a[9], a[10], a[11]]),
        u32::from_ne_bytes([a[12], a[13], a[14], a[15]]),
    ]
}

/// DVL, the upstream side of seed 003 slide 10 #5: on the ingress of a port configured to
/// accept notifications ([`FLAG_DVL_ACCEPT`]), a frame of [`NOTIFY_ETHERTYPE`] puts its flow
/// into this port's congested-flow table — inserted, or its time refreshed (as
/// `rocev2d switch isolate`), so the hold counts from the last notification — and is dropped:
/// it is addressed to this switch and goes no further. A notification frame whose IP header or
/// ports cannot be read is counted and dropped as well. Every other frame passes untouched.
#[classifier]
pub fn rocev2_dvl_rx(ctx: TcContext) -> i32 {
    match try_accept(&ctx) {
        Ok(action) | Err(action) => action,
    }
}

fn try_accept(ctx: &TcContext) -> Result<i32, i32> {
    let cfg = match CONFIG.get(0) {
        Some(c) if c.flags & (FLAG_ENABLED | FLAG_DVL_ACCEPT) == FLAG_ENABLED | FLAG_DVL_ACCEPT => {
            *c
        }
        _ => return Ok(TC_ACT_OK),
    };
    let ethertype: u16 = ctx.load(ETH_HLEN - 2).map_err(|_| TC_ACT_OK)?;
    if u16::from_be(ethertype) != NOTIFY_ETHERTYPE {
        return Ok(TC_ACT_OK);
    }
    let Some(key) = notified_flow(ctx, &cfg) else {
        add(Counter::DvlNotifyMalformed, 1);
        return Ok(TC_ACT_SHOT);
    };
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_ns() };
    if CFT.insert(key, now, u64::from(BPF_ANY)).is_ok() {
        add(Counter::DvlNotifyAccepted, 1);
    } else {
        add(Counter::DvlNotifyTableFull, 1);
    }
    Ok(TC_ACT_SHOT)
}

/// The flow a notification names, keyed for this port: the IP header right after the
/// Ethernet header (IPv4 with a valid header length, or IPv6), as [`flow_key`] reads it.
#[inline(always)]
fn notified_flow(ctx: &TcContext, cfg: &PortConfig) -> Option<FlowKey> {
    let first: u8 = ctx.load(ETH_HLEN).ok()?;
    let (ipv6, l4) = match first >> 4 {
        4 if first & 0x0f >= 5 => (false, ETH_HLEN + usize::from(first & 0x0f) * 4),
        6 => (true, ETH_HLEN + 40),
        _ => return None,
    };
    let ip = Ip {
        l3: ETH_HLEN,
        l4,
        ipv6,
        ecn: 0,
        roce: false,
    };
    flow_key(ctx, cfg, &ip)
}

/// The packet's 5-tuple on this port; ports are read for UDP and TCP only.
#[inline(always)]
fn flow_key(ctx: &TcContext, cfg: &PortConfig, ip: &Ip) -> Option<FlowKey> {
    let mut key = FlowKey {
        port: cfg.ifindex,
        ..FlowKey::default()
    };
    let protocol: u8 = if ip.ipv6 {
        key.src = ctx.load(ip.l3 + 8).ok()?;
        key.dst = ctx.load(ip.l3 + 24).ok()?;
        // The next header of the fixed header; extension headers are not walked (the flow is
        // then keyed by that header's number and no ports).
        ctx.load(ip.l3 + 6).ok()?
    } else {
        let src: [u8; 4] = ctx.load(ip.l3 + 12).ok()?;
        let dst: [u8; 4] = ctx.load(ip.l3 + 16).ok()?;
        key.src[10] = 0xff;
        key.src[11] = 0xff;
        key.dst[10] = 0xff;
        key.dst[11] = 0xff;
        key.src[12..].copy_from_slice(&src);
        key.dst[12..].copy_from_slice(&dst);
        ctx.load(ip.l3 + 9).ok()?
    };
    key.protocol = u32::from(protocol);
    if protocol == 6 || protocol == 17 {
        let ports: [u8; 4] = ctx.load(ip.l4).ok()?;
        key.src_port = u16::from_be_bytes([ports[0], ports[1]]);
        key.dst_port = u16::from_be_bytes([ports[2], ports[3]]);
    }
    Some(key)
}

/// IOFD (seed 000 §IV): `Some(action)` when the packet leaves by an alternate port.
#[inline(always)]
fn deflect(ctx: &TcContext, cfg: &PortConfig, ip: &Ip, queue_bytes: u64, rand: u32) -> Option<i32> {
    let bth = ip.l4 + UDP_LEN;
    let head: [u8; 8] = ctx.load(bth).ok()?;
    let opcode = head[0];
    let position = Position::of_opcode(opcode);
    if position == Position::None {
        return None;
    }
    let mut key = MessageKey {
        dest_qp: u32::from_be_bytes([0, head[5], head[6], head[7]]),
        ..MessageKey::default()
    };
    if ip.ipv6 {
        key.src = ctx.load(ip.l3 + 8).ok()?;
        key.dst = ctx.load(ip.l3 + 24).ok()?;
    } else {
        // v4-mapped: ::ffff:a.b.c.d.
        let src: [u8; 4] = ctx.load(ip.l3 + 12).ok()?;
        let dst: [u8; 4] = ctx.load(ip.l3 + 16).ok()?;
        key.src[10] = 0xff;
        key.src[11] = 0xff;
        key.dst[10] = 0xff;
        key.dst[11] = 0xff;
        key.src[12..].copy_from_slice(&src);
        key.dst[12..].copy_from_slice(&dst);
    }
    let message_bytes = if Position::has_reth(opcode) {
        // RETH: VA (8), R_Key (4), DMA Length (4), right after the BTH.
        let len: [u8; 4] = ctx.load(bth + BTH_LEN + 12).ok()?;
        Some(u64::from(u32::from_be_bytes(len)))
    } else if position == Position::Only {
        Some(u64::from(ctx.len()))
    } else {
        None
    };
    let pkt = iofd::Packet {
        key,
        position,
        message_bytes,
        tokens: head[4] & 0x3f,
    };
    let alternate = cfg.alternate(rand);
    if alternate == 0 {
        return None;
    }
    let (action, refusal) = iofd::decide(&mut MapDft, &cfg.iofd(), &pkt, queue_bytes, alternate);
    match refusal {
        Some(Refusal::TableFull) => add(Counter::IofdTableFull, 1),
        Some(Refusal::Long) => add(Counter::IofdLong, 1),
        Some(Refusal::NoTokens) => add(Counter::IofdNoTokens, 1),
        None => 0,
    };
    let Action::Deflect { port } = action else {
        return None;
    };
    if matches!(position, Position::First | Position::Only) {
        add(Counter::IofdMessages, 1);
    }
    // Spend a token (BTH byte 4, bits 5-0; the ICRC masks the byte). The UDP checksum is 0
    // for RoCEv2 senders that leave it off; otherwise patch it for the changed 16-bit word.
    if pkt.tokens > 0 {
        let new4 = head[4] - 1;
        let udp_csum: u16 = ctx.load(ip.l4 + 6).unwrap_or(0);
        if udp_csum != 0 {
            let old = u64::from(u16::from_be_bytes([head[4], head[5]]));
            let new = u64::from(u16::from_be_bytes([new4, head[5]]));
            if ctx
                .l4_csum_replace(ip.l4 + 6, old.to_be(), new.to_be(), 2)
                .is_err()
            {
                add(Counter::HelperError, 1);
            }
        }
        if ctx.store(bth + 4, &new4, 0).is_err() {
            add(Counter::HelperError, 1);
        }
    }
    ctx.set_mark(DEFLECTED_MARK);
    add(Counter::IofdDeflected, 1);
    // The kernel fills the L2 header from the alternate link's neighbour entry (a FIB lookup
    // restricted to that interface), then the packet enters that port's egress (and this
    // program there, which queues it and does not deflect it again).
    // SAFETY: plain helper call; no neighbour parameters.
    let action = unsafe { bpf_redirect_neigh(port, core::ptr::null_mut(), 0, 0) };
    Some(action as i32)
}

#[inline(always)]
fn parse(ctx: &TcContext) -> Headers {
    // SAFETY: data..data_end is this packet's linear area as handed to us by the kernel.
    unsafe { headers(ctx.data(), ctx.data_end()) }
}

/// Flips bit `bit` (MSB first) of the range starting at `start`.
#[inline(always)]
fn corrupt(ctx: &TcContext, start: usize, bit: u32) -> Result<(), i64> {
    let at = start + (bit / 8) as usize;
    let byte: u8 = ctx.load(at)?;
    ctx.store(at, &(byte ^ (0x80 >> (bit % 8))), 0)
}

/// Sends a copy of the packet out of the same port; the copy carries [`DUPLICATE_MARK`] so
/// that it is queued but not faulted when it comes through this program again.
#[inline(always)]
fn duplicate_packet(ctx: &TcContext, cfg: &PortConfig, mark: u32) {
    ctx.set_mark(DUPLICATE_MARK);
    let ok = ctx.clone_redirect(cfg.ifindex, 0).is_ok();
    ctx.set_mark(mark);
    add(
        if ok {
            Counter::FaultDuplicate
        } else {
            Counter::HelperError
        },
        1,
    );
}

/// Adds `n` to a per-CPU counter and returns its previous value (this CPU's sequence number).
#[inline(always)]
fn add(counter: Counter, n: u64) -> u64 {
    match COUNTERS.get_ptr_mut(counter as u32) {
        // SAFETY: a per-CPU slot; nothing else runs on this CPU meanwhile.
        Some(slot) => unsafe {
            let before = *slot;
            *slot = before + n;
            before
        },
        None => 0,
    }
}

#[inline(always)]
fn hist(slot: u32) {
    if let Some(p) = HIST.get_ptr_mut(slot) {
        // SAFETY: a per-CPU slot, as in `add`.
        unsafe { *p += 1 };
    }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
