//! The switch-port program: attach it to a port's egress with a shaper at the port's rate,
//! find it again from another process, read its counters and histogram, detach it.
//!
//! What the program does per packet is documented in `rocev2_ebpf_common::switch_port`; the queue
//! model and its accuracy in `docs/switch.md`.
//!
//! **Lifetime.** [`attach`] leaves the port configured after the process exits: the program
//! hangs off a netlink tc filter on the port's `clsact` egress hook, which holds the only
//! reference the program needs (the filter is not tied to a file descriptor, unlike a TCX
//! link), and the maps live as long as the program. Nothing is pinned, so nothing depends on
//! which bpffs mount a later process sees (`ip netns exec` remounts `/sys`): [`Port::open`]
//! finds the port's program among the loaded programs by name and the interface index and
//! network namespace recorded in its config map. [`Port::detach`] removes the filter, the
//! qdiscs the attach added, and waits until the kernel has released the program. Deleting the
//! namespace removes everything too.
//!
//! **DVL notifications.** With [`PortSpec::dvl_accept`] the object's second classifier,
//! [`ACCEPT_PROGRAM`], hangs off the same `clsact`'s ingress: loaded from the same object, it
//! shares the port's maps and puts the flows of congestion notifications arriving on the port
//! into its congested-flow table. [`Port::detach`] removes it too.
//!
//! **Shaping.** The loader replaces the port's root qdisc with HTB (one class and a bfifo; with
//! DVL a strict-priority pfifo_fast instead of the bfifo, its lowest band the congested-flow
//! queue) or TBF at the port rate, by running `tc` (the commands are logged at debug level, so a
//! researcher can rebuild the port by hand). The shaper's own limit is twice the buffer: the
//! model decides the drops; the shaper only paces. [`Shaper::None`] keeps a qdisc that is
//! already there (the testbed's shaping, say).
//!
//! Deviations: none (what the program does not implement is listed in docs/switch.md).

use std::{
    process::Command,
    thread,
    time::{Duration, Instant},
};

use aya::{
    Ebpf,
    maps::{Array, HashMap, Map, MapData, MapError, PerCpuArray},
    programs::{
        ProgramError, SchedClassifier, TcAttachType, TestRun, TestRunOptions,
        tc::{NlOptions, TcAttachOptions},
    },
};
use rocev2_ebpf_common::{
    dvl::{self, FlowKey},
    fault::FaultConfig,
    queue::QueueState,
    red::RedConfig,
    switch_port::{
        ACCEPT_PROGRAM, CFQ_MAP, CFT_MAP, CONFIG_MAP, COUNTERS_MAP, Counter, FLAG_BLACKHOLE,
        FLAG_DROP_NON_ECT, FLAG_DVL, FLAG_DVL_ACCEPT, FLAG_ENABLED, FLAG_IOFD, FLAG_OWNS_CLSACT,
        FLAG_OWNS_SHAPER, FLAG_UNATTACHED, HIST_BUCKETS, HIST_MAP, MAX_ALTERNATES, PROGRAM,
        PortConfig, QUEUE_MAP,
    },
};

use crate::Error;

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/switch_port"));

/// Bytes of Ethernet header tc counts on top of the IP MTU.
const ETHERNET_HEADER_BYTES: u64 = 14;
/// How long [`Port::detach`] waits for the kernel to release the program.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// The qdisc that plays the port's transmitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shaper {
    /// HTB, one class at the rate, a bfifo below it; with DVL a pfifo_fast instead, whose lowest
    /// band (skb->priority 1) is the congested-flow queue.
    Htb,
    /// A token-bucket filter at the rate.
    Tbf,
    /// Keep the port's root qdisc as it is (already shaped to the same rate).
    None,
}

/// What to configure on a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortSpec {
    /// Port rate, bit/s (> 0).
    pub rate_bps: u64,
    /// Port buffer, bytes (> 0).
    pub buffer_bytes: u64,
    /// RED/ECN thresholds.
    pub red: RedConfig,
    /// Histogram bucket width, bytes; 0 = `buffer / HIST_BUCKETS`.
    pub hist_bucket_bytes: u32,
    /// Fault injection.
    pub faults: FaultConfig,
    /// The shaper to install.
    pub shaper: Shaper,
    /// IOFD deflection (seed 000 §IV), if on.
    pub iofd: Option<IofdSpec>,
    /// DVL congestion isolation (seed 003): the detection threshold on the normal queue,
    /// bytes, if on. Needs the HTB shaper (its pfifo_fast's band 2 is the congested-flow queue).
    pub dvl_threshold_bytes: Option<u32>,
    /// DVL: accept congestion notifications arriving on this port (seed 003 slide 10 #5) —
    /// set it on a port facing a downstream switch. Needs `dvl_threshold_bytes`.
    pub dvl_accept: bool,
}

/// IOFD settings of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IofdSpec {
    /// Deflect only above this modelled queue, bytes (keep it below RED's K_min).
    pub threshold_bytes: u32,
    /// Messages up to this length are short (deflectable).
    pub max_message_bytes: u32,
    /// Interface indexes of the alternate ports, 0 = unused (at least one). Only fabric ports:
    /// deflecting toward a host would deliver to the wrong end node.
    pub alternates: [u32; MAX_ALTERNATES],
}

impl PortSpec {
    /// The config map record for interface `ifindex` in namespace `netns_ino`.
    pub fn record(&self, ifindex: u32, netns_ino: u64) -> PortConfig {
        let mut flags = FLAG_ENABLED;
        if self.red.drop_non_ect {
            flags |= FLAG_DROP_NON_ECT;
        }
        if self.faults.blackhole {
            flags |= FLAG_BLACKHOLE;
        }
        let bucket = if self.hist_bucket_bytes != 0 {
            self.hist_bucket_bytes
        } else {
            u32::try_from(self.buffer_bytes.div_ceil(u64::from(HIST_BUCKETS)))
                .unwrap_or(u32::MAX)
                .max(1)
        };
        let iofd = self.iofd.unwrap_or(IofdSpec {
            threshold_bytes: 0,
            max_message_bytes: 0,
            alternates: [0; MAX_ALTERNATES],
        });
        if self.iofd.is_some() {
            flags |= FLAG_IOFD;
        }
        if self.dvl_threshold_bytes.is_some() {
            flags |= FLAG_DVL;
        }
        if self.dvl_accept {
            flags |= FLAG_DVL_ACCEPT;
        }
        PortConfig {
            ifindex,
            flags,
            netns_ino,
            rate_bps: self.rate_bps,
            buffer_bytes: self.buffer_bytes,
            kmin_bytes: self.red.kmin_bytes,
            kmax_bytes: self.red.kmax_bytes,
            pmax: self.red.pmax,
            hist_bucket_bytes: bucket,
            loss: self.faults.loss,
            corrupt: self.faults.corrupt,
            duplicate: self.faults.duplicate,
            dvl_threshold_bytes: self.dvl_threshold_bytes.unwrap_or(0),
            seed: self.faults.seed,
            iofd_threshold_bytes: iofd.threshold_bytes,
            iofd_max_message_bytes: iofd.max_message_bytes,
            iofd_alternates: iofd.alternates,
        }
    }

    fn validate(&self) -> Result<(), Error> {
        if self.rate_bps == 0 {
            return Err(Error::Config("rate must be above 0"));
        }
        if self.buffer_bytes == 0 {
            return Err(Error::Config("buffer must be above 0"));
        }
        if let Some(iofd) = &self.iofd
            && iofd.alternates[0] == 0
        {
            return Err(Error::Config("IOFD needs at least one alternate port"));
        }
        if self.dvl_accept && self.dvl_threshold_bytes.is_none() {
            return Err(Error::Config(
                "accepting DVL notifications needs DVL on the port (a threshold)",
            ));
        }
        if self.dvl_threshold_bytes.is_some() && self.shaper == Shaper::Tbf {
            return Err(Error::Config(
                "DVL needs the HTB shaper (or none: a pfifo_fast below the shaper set up by hand)",
            ));
        }
        Ok(())
    }
}

/// The maps of one switch program.
struct Maps {
    config: Array<MapData, PortConfig>,
    queue: Array<MapData, QueueState>,
    counters: PerCpuArray<MapData, u64>,
    hist: PerCpuArray<MapData, u64>,
    cfq: Array<MapData, QueueState>,
    cft: HashMap<MapData, FlowKey, u64>,
}

impl Maps {
    fn take(ebpf: &mut Ebpf) -> Result<Maps, Error> {
        let mut take = |name: &'static str| ebpf.take_map(name).ok_or(Error::Missing(name));
        Ok(Maps {
            config: array(take(CONFIG_MAP)?, CONFIG_MAP)?,
            queue: array(take(QUEUE_MAP)?, QUEUE_MAP)?,
            counters: per_cpu(take(COUNTERS_MAP)?, COUNTERS_MAP)?,
            hist: per_cpu(take(HIST_MAP)?, HIST_MAP)?,
            cfq: array(take(CFQ_MAP)?, CFQ_MAP)?,
            cft: hash(take(CFT_MAP)?, CFT_MAP)?,
        })
    }

    /// The maps of a loaded program, by the map ids the kernel reports for it.
    fn of_program(ids: &[u32]) -> Result<Option<Maps>, Error> {
        let (mut config, mut queue, mut counters, mut hist) = (None, None, None, None);
        let (mut cfq, mut cft) = (None, None);
        let by_id = |source| Error::Map {
            name: "by id",
            source,
        };
        for &id in ids {
            let data = MapData::from_id(id).map_err(by_id)?;
            let name = data.info().map_err(by_id)?.name_as_str().map(str::to_owned);
            let slot = match name.as_deref() {
                Some(CONFIG_MAP) => CONFIG_MAP,
                Some(QUEUE_MAP) => QUEUE_MAP,
                Some(COUNTERS_MAP) => COUNTERS_MAP,
                Some(HIST_MAP) => HIST_MAP,
                Some(CFQ_MAP) => CFQ_MAP,
                Some(CFT_MAP) => CFT_MAP,
                _ => continue,
            };
            let map = Map::from_map_data(data).map_err(by_id)?;
            match slot {
                CONFIG_MAP => config = Some(array(map, CONFIG_MAP)?),
                QUEUE_MAP => queue = Some(array(map, QUEUE_MAP)?),
                COUNTERS_MAP => counters = Some(per_cpu(map, COUNTERS_MAP)?),
                CFQ_MAP => cfq = Some(array(map, CFQ_MAP)?),
                CFT_MAP => cft = Some(hash(map, CFT_MAP)?),
                _ => hist = Some(per_cpu(map, HIST_MAP)?),
            }
        }
        Ok(match (config, queue, counters, hist, cfq, cft) {
            (Some(config), Some(queue), Some(counters), Some(hist), Some(cfq), Some(cft)) => {
                Some(Maps {
                    config,
                    queue,
                    counters,
                    hist,
                    cfq,
                    cft,
                })
            }
            _ => None,
        })
    }

    fn config(&self) -> Result<PortConfig, Error> {
        self.config.get(&0, 0).map_err(|source| Error::Map {
            name: CONFIG_MAP,
            source,
        })
    }

    fn set_config(&mut self, cfg: &PortConfig) -> Result<(), Error> {
        self.config.set(0, cfg, 0).map_err(|source| Error::Map {
            name: CONFIG_MAP,
            source,
        })
    }

    fn stats(&self, cfg: PortConfig) -> Result<PortStats, Error> {
        let sum = |map: &PerCpuArray<MapData, u64>, name: &'static str, i: u32| {
            map.get(&i, 0)
                .map(|v| v.iter().sum::<u64>())
                .map_err(|source| Error::Map { name, source })
        };
        let mut counters = Counter::ALL.map(|c| (c, 0));
        for (c, total) in &mut counters {
            *total = sum(&self.counters, COUNTERS_MAP, *c as u32)?;
        }
        let mut hist = [[0u64; HIST_BUCKETS as usize]; 3];
        for (row, slots) in hist.iter_mut().enumerate() {
            for (b, slot) in slots.iter_mut().enumerate() {
                *slot = sum(&self.hist, HIST_MAP, row as u32 * HIST_BUCKETS + b as u32)?;
            }
        }
        let mut queue = self.queue.get(&0, 0).map_err(|source| Error::Map {
            name: QUEUE_MAP,
            source,
        })?;
        let mut cfq = self.cfq.get(&0, 0).map_err(|source| Error::Map {
            name: CFQ_MAP,
            source,
        })?;
        let (queue_max_bytes, cfq_max_bytes) = (queue.max_bytes, cfq.max_bytes);
        let (queue_bytes, cfq_bytes) = if cfg.flags & FLAG_DVL != 0 {
            dvl::drain(&mut queue, &mut cfq, cfg.rate_bps, monotonic_ns())
        } else {
            (queue.drain(cfg.rate_bps, monotonic_ns()), 0)
        };
        let isolated = self.isolated()?;
        Ok(PortStats {
            config: cfg,
            counters,
            queue_bytes,
            queue_max_bytes,
            cfq_bytes,
            cfq_max_bytes,
            isolated,
            hist,
        })
    }

    /// The flows in the congested-flow table, with the time each was isolated (ns).
    fn isolated(&self) -> Result<Vec<(FlowKey, u64)>, Error> {
        let mut out = self
            .cft
            .iter()
            .filter_map(|r| match r {
                // An entry deleted while iterating is simply gone.
                Err(MapError::KeyNotFound) => None,
                other => Some(other),
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| Error::Map {
                name: CFT_MAP,
                source,
            })?;
        out.sort();
        Ok(out)
    }

    /// Puts `key` into the congested-flow table, isolated since `now_ns` (refreshed if there).
    fn isolate(&mut self, key: &FlowKey, now_ns: u64) -> Result<(), Error> {
        // BPF_ANY: a notification refreshes the time, so the hold counts from the last one.
        match self.cft.insert(key, now_ns, 0) {
            Ok(()) => Ok(()),
            Err(source) => Err(Error::Map {
                name: CFT_MAP,
                source,
            }),
        }
    }
}

fn hash(map: Map, name: &'static str) -> Result<HashMap<MapData, FlowKey, u64>, Error> {
    HashMap::try_from(map).map_err(|source| Error::Map { name, source })
}

fn array<V: aya::Pod>(map: Map, name: &'static str) -> Result<Array<MapData, V>, Error> {
    Array::try_from(map).map_err(|source| Error::Map { name, source })
}

fn per_cpu(map: Map, name: &'static str) -> Result<PerCpuArray<MapData, u64>, Error> {
    PerCpuArray::try_from(map).map_err(|source| Error::Map { name, source })
}

/// A snapshot of one port's counters and queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortStats {
    /// The configuration the program runs with.
    pub config: PortConfig,
    /// Counters summed over CPUs, in [`Counter::ALL`] order.
    pub counters: [(Counter, u64); Counter::ALL.len()],
    /// The modelled queue now (drained to the present), bytes.
    pub queue_bytes: u64,
    /// The largest modelled queue since attach, bytes.
    pub queue_max_bytes: u64,
    /// DVL: the modelled congested-flow queue now, bytes (0 without DVL).
    pub cfq_bytes: u64,
    /// DVL: the largest congested-flow queue since attach, bytes.
    pub cfq_max_bytes: u64,
    /// DVL: the isolated flows and when each was isolated (`CLOCK_MONOTONIC` ns).
    pub isolated: Vec<(FlowKey, u64)>,
    /// Per histogram bucket (`config.hist_bucket_bytes` wide, the last open-ended) of the queue
    /// a packet found: all packets, ECN-capable ones that fit in the buffer (RED decided on
    /// them), and those marked CE.
    pub hist: [[u64; HIST_BUCKETS as usize]; 3],
}

impl PortStats {
    /// One counter's value.
    pub fn counter(&self, which: Counter) -> u64 {
        self.counters[which as usize].1
    }
}

/// The switch program loaded and configured but attached nowhere: for running it on
/// synthetic packets (`BPF_PROG_TEST_RUN`), which also proves it passes the verifier.
pub struct Unattached {
    maps: Maps,
    ebpf: Ebpf,
}

impl Unattached {
    /// Loads the program (the verifier runs here) and writes `spec`'s config for interface
    /// `ifindex` (where duplicates are sent).
    pub fn load(spec: &PortSpec, ifindex: u32) -> Result<Unattached, Error> {
        spec.validate()?;
        let mut ebpf = Ebpf::load(OBJECT)?;
        classifier(&mut ebpf, PROGRAM)?
            .load()
            .map_err(program_error)?;
        classifier(&mut ebpf, ACCEPT_PROGRAM)?
            .load()
            .map_err(program_error)?;
        let mut maps = Maps::take(&mut ebpf)?;
        let mut record = spec.record(ifindex, netns_ino()?);
        record.flags |= FLAG_UNATTACHED;
        maps.set_config(&record)?;
        Ok(Unattached { maps, ebpf })
    }

    /// Runs the program once on `frame`; returns its tc verdict (`TC_ACT_OK` = 0,
    /// `TC_ACT_SHOT` = 2) and the frame as it left the program.
    pub fn run(&mut self, frame: &[u8]) -> Result<(u32, Vec<u8>), Error> {
        self.run_program(PROGRAM, frame)
    }

    /// Runs the ingress program ([`ACCEPT_PROGRAM`]) once on `frame`, as [`Unattached::run`].
    pub fn run_accept(&mut self, frame: &[u8]) -> Result<(u32, Vec<u8>), Error> {
        self.run_program(ACCEPT_PROGRAM, frame)
    }

    fn run_program(&mut self, name: &'static str, frame: &[u8]) -> Result<(u32, Vec<u8>), Error> {
        let mut out = vec![0; frame.len() + 256];
        let result = classifier(&mut self.ebpf, name)?
            .test_run(TestRunOptions {
                data_in: Some(frame),
                data_out: Some(&mut out),
                repeat: 1,
                ..Default::default()
            })
            .map_err(program_error)?;
        out.truncate(result.data_size_out as usize);
        Ok((result.return_value, out))
    }

    /// Runs the program once on `frame`; returns its tc verdict and the `skb->priority` it left
    /// (DVL: `CFQ_PRIORITY` for a packet of an isolated flow).
    pub fn run_priority(&mut self, frame: &[u8]) -> Result<(u32, u32), Error> {
        // struct __sk_buff as the kernel copies it back; `priority` is its ninth u32.
        let mut ctx = [0u8; 256];
        let result = classifier(&mut self.ebpf, PROGRAM)?
            .test_run(TestRunOptions {
                data_in: Some(frame),
                ctx_out: Some(&mut ctx),
                repeat: 1,
                ..Default::default()
            })
            .map_err(program_error)?;
        let priority = u32::from_ne_bytes([ctx[32], ctx[33], ctx[34], ctx[35]]);
        Ok((result.return_value, priority))
    }

    /// Overwrites the modelled queue (tests set the queue a packet will find).
    pub fn set_queue(&mut self, state: &QueueState) -> Result<(), Error> {
        self.maps
            .queue
            .set(0, state, 0)
            .map_err(|source| Error::Map {
                name: QUEUE_MAP,
                source,
            })
    }

    /// Counters, queue and histogram.
    pub fn stats(&self) -> Result<PortStats, Error> {
        self.maps.stats(self.maps.config()?)
    }

    /// Overwrites the modelled congested-flow queue (DVL tests).
    pub fn set_cfq(&mut self, state: &QueueState) -> Result<(), Error> {
        self.maps.cfq.set(0, state, 0).map_err(|source| Error::Map {
            name: CFQ_MAP,
            source,
        })
    }
}

fn classifier<'a>(
    ebpf: &'a mut Ebpf,
    name: &'static str,
) -> Result<&'a mut SchedClassifier, Error> {
    ebpf.program_mut(name)
        .ok_or(Error::Missing(name))?
        .try_into()
        .map_err(program_error)
}

fn program_error(source: ProgramError) -> Error {
    Error::Program {
        name: PROGRAM,
        source,
    }
}

/// Configures `iface` (in the caller's network namespace) as a switch port: shaper, clsact,
/// the program on egress. Returns once the port is live; the configuration outlives the
/// process (see the module doc).
///
/// # Errors
/// [`Error::AlreadyAttached`] if the port has a switch program already; [`Error::Tc`] when a
/// qdisc command fails; load and attach errors otherwise. On error, what was added is removed.
pub fn attach(iface: &str, spec: &PortSpec) -> Result<Port, Error> {
    spec.validate()?;
    if Port::open(iface)?.is_some() {
        return Err(Error::AlreadyAttached(iface.to_owned()));
    }
    let ifindex = ifindex(iface)?;
    let mut ebpf = Ebpf::load(OBJECT)?;
    classifier(&mut ebpf, PROGRAM)?
        .load()
        .map_err(program_error)?;
    if spec.dvl_accept {
        classifier(&mut ebpf, ACCEPT_PROGRAM)?
            .load()
            .map_err(program_error)?;
    }
    let mut maps = Maps::take(&mut ebpf)?;
    let mut record = spec.record(ifindex, netns_ino()?);

    let undo = |record: &PortConfig| {
        if record.flags & FLAG_OWNS_CLSACT != 0 {
            let _ = tc(&["qdisc", "del", "dev", iface, "clsact"]);
        }
        if record.flags & FLAG_OWNS_SHAPER != 0 {
            let _ = tc(&["qdisc", "del", "dev", iface, "root"]);
        }
    };
    let result = (|| {
        if spec.shaper != Shaper::None {
            record.flags |= FLAG_OWNS_SHAPER;
            for cmd in shaper_commands(iface, spec, mtu(iface)) {
                tc(&cmd.iter().map(String::as_str).collect::<Vec<_>>())?;
            }
        }
        match tc(&["qdisc", "add", "dev", iface, "clsact"]) {
            Ok(()) => record.flags |= FLAG_OWNS_CLSACT,
            Err(Error::Tc { stderr, .. }) if stderr.contains("File exists") => {}
            Err(e) => return Err(e),
        }
        // Written before the filter exists, so the first packet sees the whole config.
        maps.set_config(&record)?;
        if spec.dvl_accept {
            hang(&mut ebpf, ACCEPT_PROGRAM, iface, TcAttachType::Ingress)?;
        }
        hang(&mut ebpf, PROGRAM, iface, TcAttachType::Egress)
    })();
    if let Err(e) = result {
        if spec.dvl_accept {
            let _ = aya::programs::tc::qdisc_detach_program(
                iface,
                TcAttachType::Ingress,
                ACCEPT_PROGRAM,
            );
        }
        undo(&record);
        return Err(e);
    }
    let prog_id = classifier(&mut ebpf, PROGRAM)?
        .info()
        .map_err(program_error)?
        .id();
    let accept_prog_id = if spec.dvl_accept {
        let id = classifier(&mut ebpf, ACCEPT_PROGRAM)?
            .info()
            .map_err(program_error)?
            .id();
        Some(id)
    } else {
        None
    };
    tracing::info!(iface, prog_id, ?accept_prog_id, "switch program attached");
    Ok(Port {
        iface: iface.to_owned(),
        prog_id,
        accept_prog_id,
        maps,
    })
}

/// Attaches the loaded classifier `name` to `iface`'s clsact hook `hook` by a netlink filter
/// that outlives this process.
fn hang(ebpf: &mut Ebpf, name: &'static str, iface: &str, hook: TcAttachType) -> Result<(), Error> {
    let program = classifier(ebpf, name)?;
    let link = program
        .attach_with_options(iface, hook, TcAttachOptions::Netlink(NlOptions::default()))
        .map_err(program_error)?;
    // The filter must outlive this process: dropping the link would remove it. A netlink
    // link holds no file descriptor, so forgetting it leaks nothing.
    let link = program.take_link(link).map_err(program_error)?;
    std::mem::forget(link);
    Ok(())
}

/// A port with the switch program attached, found by [`Port::open`] or made by [`attach`].
/// Dropping it leaves the port configured; [`Port::detach`] removes it.
pub struct Port {
    iface: String,
    prog_id: u32,
    /// The ingress program accepting DVL notifications, if the port has one.
    accept_prog_id: Option<u32>,
    maps: Maps,
}

impl Port {
    /// Finds the switch program attached to `iface` in the caller's network namespace.
    pub fn open(iface: &str) -> Result<Option<Port>, Error> {
        let ifindex = ifindex(iface)?;
        let netns = netns_ino()?;
        let mut accept = Vec::new();
        let mut found = None;
        for info in loaded_programs() {
            let info = info?;
            let ours = [Some(ACCEPT_PROGRAM), Some(PROGRAM)];
            if !ours.contains(&info.name_as_str()) {
                continue;
            }
            let ids = match info.map_ids() {
                Ok(Some(ids)) => ids,
                Ok(None) => continue,
                Err(e) if gone(&e) => continue,
                Err(e) => return Err(program_error(e)),
            };
            if info.name_as_str() == Some(ACCEPT_PROGRAM) {
                // Matched to the port below, by the maps it shares with the egress program.
                accept.push((info.id(), ids));
                continue;
            }
            // A program exiting meanwhile, or another tool's program of the same name, is not
            // ours: skip it.
            let Ok(Some(maps)) = Maps::of_program(&ids) else {
                continue;
            };
            let cfg = maps.config()?;
            if found.is_none()
                && cfg.flags & FLAG_ENABLED != 0
                && cfg.flags & FLAG_UNATTACHED == 0
                && cfg.ifindex == ifindex
                && cfg.netns_ino == netns
            {
                found = Some((info.id(), ids, maps));
            }
        }
        Ok(found.map(|(prog_id, ids, maps)| Port {
            iface: iface.to_owned(),
            prog_id,
            // The accepting program uses the config map too: the same map ids.
            accept_prog_id: accept
                .iter()
                .find(|(_, theirs)| theirs.iter().all(|m| ids.contains(m)))
                .map(|(id, _)| *id),
            maps,
        }))
    }

    /// The interface.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// The kernel's id of the attached program (`bpftool prog show id N`).
    pub fn prog_id(&self) -> u32 {
        self.prog_id
    }

    /// The kernel's id of the ingress program accepting DVL notifications, if attached.
    pub fn accept_prog_id(&self) -> Option<u32> {
        self.accept_prog_id
    }

    /// Counters, queue and histogram.
    pub fn stats(&self) -> Result<PortStats, Error> {
        self.maps.stats(self.maps.config()?)
    }

    /// DVL: isolates `key` on this port as a congestion notification from downstream does (a
    /// manual tool; the notifications themselves arrive as frames, docs/switch.md). The flow is
    /// released by the port's own rule, no sooner than `dvl::HOLD_NS` after the last call.
    /// `key.port` is set to this port.
    pub fn isolate(&mut self, key: &FlowKey) -> Result<(), Error> {
        let key = FlowKey {
            port: self.maps.config()?.ifindex,
            ..*key
        };
        self.maps.isolate(&key, monotonic_ns())
    }

    /// Removes the programs' filters, the qdiscs [`attach`] added, and waits until the kernel
    /// has released the programs.
    pub fn detach(self) -> Result<(), Error> {
        let cfg = self.maps.config()?;
        let mut hooks = vec![(TcAttachType::Egress, PROGRAM)];
        if self.accept_prog_id.is_some() {
            hooks.push((TcAttachType::Ingress, ACCEPT_PROGRAM));
        }
        for (hook, name) in hooks {
            aya::programs::tc::qdisc_detach_program(&self.iface, hook, name).map_err(|e| {
                Error::Program {
                    name,
                    source: ProgramError::from(e),
                }
            })?;
        }
        if cfg.flags & FLAG_OWNS_CLSACT != 0 {
            // Only if nobody else hung a filter there meanwhile.
            let others = ["ingress", "egress"].iter().any(|dir| {
                tc_output(&["filter", "show", "dev", &self.iface, dir])
                    .map(|s| !s.trim().is_empty())
                    .unwrap_or(true)
            });
            if others {
                tracing::warn!(iface = %self.iface, "other tc filters remain: clsact kept");
            } else {
                tc(&["qdisc", "del", "dev", &self.iface, "clsact"])?;
            }
        }
        if cfg.flags & FLAG_OWNS_SHAPER != 0 {
            tc(&["qdisc", "del", "dev", &self.iface, "root"])?;
        }
        let ids: Vec<u32> = [Some(self.prog_id), self.accept_prog_id]
            .into_iter()
            .flatten()
            .collect();
        drop(self);
        let deadline = Instant::now() + RELEASE_TIMEOUT;
        for id in ids {
            while program_loaded(id)? {
                if Instant::now() > deadline {
                    return Err(Error::StillLoaded(id));
                }
                thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }
}

/// True while the kernel still has program `id`.
pub fn program_loaded(id: u32) -> Result<bool, Error> {
    for info in loaded_programs() {
        if info?.id() == id {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The kernel's programs, less those released between listing their ids and opening them
/// (another port detached meanwhile).
fn loaded_programs() -> impl Iterator<Item = Result<aya::programs::ProgramInfo, Error>> {
    aya::programs::loaded_programs().filter_map(|info| match info {
        Err(e) if gone(&e) => None,
        other => Some(other.map_err(program_error)),
    })
}

/// The error of a program the kernel released before we could open it (`ENOENT`): not an
/// error of ours when looking through every loaded program.
fn gone(e: &ProgramError) -> bool {
    matches!(e, ProgramError::SyscallError(e) if e.io_error.kind() == std::io::ErrorKind::NotFound)
}

/// The `tc` argument lists that install `spec`'s shaper on `iface` (MTU `mtu`).
pub fn shaper_commands(iface: &str, spec: &PortSpec, mtu: u32) -> Vec<Vec<String>> {
    let rate = format!("{}bit", spec.rate_bps);
    let frame = u64::from(mtu) + ETHERNET_HEADER_BYTES;
    // One millisecond at the rate and at least two frames, as the testbed's shaping.
    let burst = (spec.rate_bps / 8 / 1000).max(2 * frame).to_string();
    let limit = spec.buffer_bytes.saturating_mul(2).to_string();
    let v = |s: &[&str]| s.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    match spec.shaper {
        Shaper::Htb => vec![
            v(&[
                "qdisc", "replace", "dev", iface, "root", "handle", "1:", "htb", "default", "1",
            ]),
            v(&[
                "class",
                "replace",
                "dev",
                iface,
                "parent",
                "1:",
                "classid",
                "1:1",
                "htb",
                "rate",
                &rate,
                "ceil",
                &rate,
                "burst",
                &burst,
                "cburst",
                &burst,
                "quantum",
                &frame.to_string(),
            ]),
            if spec.dvl_threshold_bytes.is_some() {
                // DVL: a pfifo_fast below the port class, three strict-priority bands chosen
                // by skb->priority through its priomap: 0 (best effort) to band 1, the normal
                // queue; 1 (TC_PRIO_FILLER, which the program writes for isolated flows) to
                // band 2, served only when bands 0 and 1 are empty: the congested-flow queue.
                // This kernel has no sch_prio or sch_ets; pfifo_fast is built in. Its limit is
                // the interface's txqueuelen, in packets per band (docs/switch.md).
                v(&[
                    "qdisc",
                    "replace",
                    "dev",
                    iface,
                    "parent",
                    "1:1",
                    "handle",
                    "10:",
                    "pfifo_fast",
                ])
            } else {
                v(&[
                    "qdisc", "replace", "dev", iface, "parent", "1:1", "handle", "10:", "bfifo",
                    "limit", &limit,
                ])
            },
        ],
        Shaper::Tbf => vec![v(&[
            "qdisc", "replace", "dev", iface, "root", "handle", "1:", "tbf", "rate", &rate,
            "burst", &burst, "limit", &limit,
        ])],
        Shaper::None => Vec::new(),
    }
}

fn tc_output(args: &[&str]) -> Result<String, Error> {
    tracing::debug!("tc {}", args.join(" "));
    let out = Command::new("tc")
        .args(args)
        .output()
        .map_err(|e| Error::Tc {
            cmd: format!("tc {}", args.join(" ")),
            stderr: e.to_string(),
        })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(Error::Tc {
            cmd: format!("tc {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

fn tc(args: &[&str]) -> Result<(), Error> {
    tc_output(args).map(drop)
}

/// The index of interface `iface` in the caller's network namespace.
pub fn ifindex(iface: &str) -> Result<u32, Error> {
    let path = format!("/sys/class/net/{iface}/ifindex");
    std::fs::read_to_string(&path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| Error::NoInterface(iface.to_owned()))
}

fn mtu(iface: &str) -> u32 {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/mtu"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1500)
}

/// The inode of the caller's network namespace.
fn netns_ino() -> Result<u64, Error> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self/ns/net")
        .map(|m| m.ino())
        .map_err(Error::Netns)
}

/// `CLOCK_MONOTONIC` in ns: the clock `bpf_ktime_get_ns()` reads.
fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}
