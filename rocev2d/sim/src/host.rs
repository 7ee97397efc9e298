//! Hosts: the real `rocev2_core::Endpoint` behind a modelled NIC.
//!
//! The NIC has one port. When the port is free it takes the next frame: first any queued
//! ACK/NAK, atomic ACK or CNP (the RC Acknowledge and ATOMIC Acknowledge opcodes and the CNP's;
//! seed 000 §VI-A: high priority for ACKs), then data. Frames are pulled from the engine with
//! `poll_transmit` only when the port can send, so the engine's own scheduling (round robin over
//! QPs, and per-QP pacing once congestion control lands) decides the order of data; a pull that
//! yields a control frame queues it and pulls again, so a control frame waits at most for one
//! data frame already on the wire. The engine's deadlines (`poll_timeout`: retransmission, RNR
//! and pacer timers) become `HostWake` events. The NIC itself lives in `sim/host_path.rs`.
//!
//! Memory: `NullMemory` for runs at scale (payload bytes are never written or read: a frame
//! carries whatever its buffer held), `VecMemory` when a test checks the data (one region per
//! host, `verify_mr_bytes` long).
//!
//! Deviations: the NIC has no DMA, PCIe or processing delay, and receives at any rate (it never
//! sends PFC); control frames pulled while data is paused wait with it (one queue per priority,
//! no per-priority engine pull).

use rocev2_core::Endpoint;
use rocev2_core::cc::{CcConfig, CcScheme, CcTuning, ReceiverCc};
use rocev2_core::mprdma::MpConfig;
use rocev2_core::mr::{AtomicOp, Memory, MrId, MrInfo, NullMemory, PdId, VecMemory};
use rocev2_core::qp::{CqId, ExtCaps, IofdTokens};
use rocev2_core::time::{Duration, Rate};
use serde::de::{Error as _, Expected, Unexpected};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// `[host]`: QP and NIC settings of every host.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostSpec {
    /// Path MTU, bytes (256, 512, 1024, 2048 or 4096).
    pub mtu: u32,
    /// Local ACK timeout code: 4.096 µs · 2^timeout (IBA §9.7.6.1.3).
    pub timeout: u8,
    /// Retries after a timeout or NAK (0–7).
    pub retry_cnt: u8,
    /// PSNs the requester keeps outstanding.
    pub max_inflight_psns: u32,
    /// AckReq every this many packets.
    pub ack_req_every: u32,
    /// Largest WRITE per work request; longer flows post several.
    pub wr_bytes: u32,
    /// Work requests a flow keeps posted.
    pub wr_depth: u32,
    /// DSCP of every packet.
    pub dscp: u8,
    /// Send data as ECT(0) (so switches mark) or Not-ECT.
    pub ect: bool,
    /// Back each host with a `VecMemory` region of this many bytes and check data (tests);
    /// 0 = `NullMemory`.
    pub verify_mr_bytes: u32,
    /// Congestion control of every QP, and the matching receiver side (docs/congestion.md).
    pub cc: HostCc,
    /// R_l of the congestion control, Gbit/s (0.001–1000): where flows start, the ceiling of
    /// every increase and DASR's line; none = the host's link rate. The daemon's `[cc]
    /// line_gbps`, so a testbed variant carries over unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line_gbps: Option<f64>,
    /// DCQCN's R_min, Mbit/s (0.001–1000000), for `dcqcn`, `dcqcn_cx4` and `dart`'s fall-back;
    /// none = the paper's 100 Mbit/s, the whole of a 100 Mbit/s testbed port. The daemon's
    /// `[cc] min_rate_mbps`, ignored as there by schemes without it (DCQCN+'s R_min is
    /// R_l/10000, eq. (15)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_rate_mbps: Option<f64>,
    /// DCQCN+'s eq. (19) step scale (0.01–100; none = 1, the equation as written), for the
    /// sensitivity grid (`dcqcn_plus_grid`) (`DcqcnPlusParams::ai_scale`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dcqcn_plus_ai_scale: Option<f64>,
    /// DCQCN+'s CNP generation interval δ, ns (1–1000000; none = 1 µs, seed 004's CX4 rate):
    /// the notification point's tick, which sets τ = l·δ (eq. (11)) and with it the senders'
    /// timers K = λ·τ (eq. (17)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dcqcn_plus_delta_ns: Option<u64>,
    /// MP-RDMA parameters, used when `cc` is [`HostCc::MpRdma`].
    pub mp: MpSpec,
    /// Every flow's last work request carries MP-RDMA's synchronise flag (seed 001 §3.4): it
    /// updates memory only after all earlier ones, as a "data, then flag" pair.
    pub synchronise_last_wr: bool,
    /// IOFD deflection tokens on short messages (seed 000 §IV-A, `QpConfig::iofd_tokens`);
    /// none = every packet carries 0, as a standard sender's. Flows are split into WRITEs of
    /// `wr_bytes`, so a message is short when its WRITE is.
    pub iofd: Option<IofdHostSpec>,
}

/// `[host.iofd]`: which messages carry deflection tokens, and how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IofdHostSpec {
    /// Tokens per packet, 1–63 (the paper: 4).
    pub tokens: u8,
    /// Largest message (bytes) that carries them.
    pub max_message_bytes: u32,
}

impl IofdHostSpec {
    /// The QP option.
    pub fn tokens(self) -> IofdTokens {
        IofdTokens {
            tokens: self.tokens,
            max_message_bytes: self.max_message_bytes,
        }
    }
}

/// `[host.mp]`: MP-RDMA parameters (seed 001 §3; docs/multipath.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MpSpec {
    /// Initial window, packets (§3.2; the paper's testbed uses one BDP).
    pub iw: u32,
    /// L: receive tracking bitmap slots (§3.3).
    pub bitmap_len: u16,
    /// Δ: allowed out-of-order degree (§3.3).
    pub delta: u16,
}

impl Default for MpSpec {
    /// The paper's L = 64 and Δ = 32 (seed 001 §5.1) with an IW of 16 packets.
    fn default() -> Self {
        let p = MpConfig::paper();
        MpSpec {
            iw: p.iw,
            bitmap_len: p.bitmap_len,
            delta: p.delta,
        }
    }
}

impl MpSpec {
    /// The QP parameters, with VPs drawn from a generator seeded with `seed`.
    pub fn config(self, seed: u64) -> MpConfig {
        MpConfig {
            iw: self.iw,
            bitmap_len: self.bitmap_len,
            delta: self.delta,
            seed,
            ..MpConfig::paper()
        }
    }
}

/// The congestion control every host runs: one of the core's rate-based schemes (the same
/// controllers and receivers as the daemon's, at each host's line rate), or MP-RDMA, whose
/// multipath QP window is its congestion control. A scenario names it as a string: the core's
/// [`CcScheme::names`] or `mp_rdma`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostCc {
    /// A rate-based scheme of `rocev2_core::cc` (`none`: unpaced, as the engine without a
    /// controller).
    Rate(CcScheme),
    /// MP-RDMA (seed 001 §3): multipath QPs whose window is their congestion control.
    MpRdma,
}

impl HostCc {
    /// MP-RDMA's name in scenarios.
    pub const MP_RDMA: &'static str = "mp_rdma";

    /// The name a scenario gives it.
    pub fn name(self) -> &'static str {
        match self {
            HostCc::Rate(c) => c.name(),
            HostCc::MpRdma => Self::MP_RDMA,
        }
    }

    /// The scheme called `name`, if any.
    pub fn from_name(name: &str) -> Option<HostCc> {
        if name == Self::MP_RDMA {
            return Some(HostCc::MpRdma);
        }
        CcScheme::from_name(name).map(HostCc::Rate)
    }

    /// The sender controller of a QP on a host of `line` rate and path MTU `mtu`.
    pub fn qp_config(self, line: Rate, mtu: u32, tuning: &CcTuning) -> Option<CcConfig> {
        match self {
            HostCc::Rate(c) => c.qp_config(line, mtu, tuning),
            HostCc::MpRdma => None,
        }
    }

    /// The receiver side of a host.
    pub fn receiver(self, line: Rate, mtu: u32, tuning: &CcTuning) -> ReceiverCc {
        match self {
            HostCc::Rate(c) => c.receiver(line, mtu, tuning),
            HostCc::MpRdma => ReceiverCc::default(),
        }
    }

    /// The REXT fields both ends of a connection announce.
    pub fn peer_ext(self) -> ExtCaps {
        match self {
            HostCc::Rate(c) => c.peer_ext(),
            HostCc::MpRdma => ExtCaps {
                multipath: true,
                ..ExtCaps::default()
            },
        }
    }
}

impl Default for HostCc {
    /// No congestion control.
    fn default() -> HostCc {
        HostCc::Rate(CcScheme::None)
    }
}

impl From<CcScheme> for HostCc {
    fn from(c: CcScheme) -> HostCc {
        HostCc::Rate(c)
    }
}

impl Serialize for HostCc {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for HostCc {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<HostCc, D::Error> {
        /// What a scenario may write, for the error message.
        struct Names;
        impl Expected for Names {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "one of ")?;
                for n in CcScheme::names() {
                    write!(f, "`{n}`, ")?;
                }
                write!(f, "`{}`", HostCc::MP_RDMA)
            }
        }
        let name = String::deserialize(d)?;
        HostCc::from_name(&name)
            .ok_or_else(|| D::Error::invalid_value(Unexpected::Str(&name), &Names))
    }
}

impl Default for HostSpec {
    /// MTU 1024 (seed 003 slide 14 uses a 1000-byte MTU; seed 000's set-up uses 1 KB packets),
    /// timeout code 10 (4.2 ms), 7 retries, the engine's 1024 PSNs in flight and AckReq every 16,
    /// 1 MiB per work request with 4 posted, DSCP 26, ECT(0), no data checking.
    fn default() -> Self {
        HostSpec {
            mtu: 1024,
            timeout: 10,
            retry_cnt: 7,
            max_inflight_psns: 1024,
            ack_req_every: 16,
            wr_bytes: 1 << 20,
            wr_depth: 4,
            dscp: 26,
            ect: true,
            verify_mr_bytes: 0,
            cc: HostCc::Rate(CcScheme::None),
            line_gbps: None,
            min_rate_mbps: None,
            dcqcn_plus_ai_scale: None,
            dcqcn_plus_delta_ns: None,
            mp: MpSpec::default(),
            synchronise_last_wr: false,
            iofd: None,
        }
    }
}

impl HostSpec {
    /// The congestion control's line rate R_l on a host whose link runs at `link`.
    pub fn cc_line(&self, link: Rate) -> Rate {
        self.line_gbps
            .map_or(link, |g| Rate::from_bps((g * 1e9).round() as u64))
    }

    /// What `min_rate_mbps`, `dcqcn_plus_ai_scale` and `dcqcn_plus_delta_ns` change from the
    /// scheme's paper parameters.
    pub fn cc_tuning(&self) -> CcTuning {
        CcTuning {
            r_min: self
                .min_rate_mbps
                .map(|m| Rate::from_bps((m * 1e6).round() as u64)),
            dcqcn_plus_ai_scale: self.dcqcn_plus_ai_scale,
            dcqcn_plus_delta: self.dcqcn_plus_delta_ns.map(Duration::from_nanos),
            // The model runs at the paper's RTTs, where DASR's paper interval is one RTT.
            dasr_interval: None,
        }
    }

    /// The sender controller of a QP on a host whose link runs at `link`, with `line_gbps` and
    /// [`HostSpec::cc_tuning`] applied.
    pub fn qp_cc(&self, link: Rate) -> Option<CcConfig> {
        self.cc
            .qp_config(self.cc_line(link), self.mtu, &self.cc_tuning())
    }

    /// The receiver side of a host whose link runs at `link`, tuned as its QPs.
    pub fn receiver_cc(&self, link: Rate) -> ReceiverCc {
        self.cc
            .receiver(self.cc_line(link), self.mtu, &self.cc_tuning())
    }

    /// The first key out of range, with its range.
    pub fn check_rates(&self) -> Option<(&'static str, &'static str)> {
        if self
            .line_gbps
            .is_some_and(|g| !(0.001..=1000.0).contains(&g))
        {
            return Some(("host.line_gbps", "must be in 0.001..=1000"));
        }
        if self
            .min_rate_mbps
            .is_some_and(|m| !(0.001..=1_000_000.0).contains(&m))
        {
            return Some(("host.min_rate_mbps", "must be in 0.001..=1000000"));
        }
        if self
            .dcqcn_plus_ai_scale
            .is_some_and(|a| !(0.01..=100.0).contains(&a))
        {
            return Some(("host.dcqcn_plus_ai_scale", "must be in 0.01..=100"));
        }
        if self
            .dcqcn_plus_delta_ns
            .is_some_and(|d| !(1..=1_000_000).contains(&d))
        {
            return Some(("host.dcqcn_plus_delta_ns", "must be in 1..=1000000"));
        }
        None
    }
}

/// A host's memory: nothing (at scale) or real bytes (data checks).
#[derive(Debug, Clone)]
pub enum HostMemory {
    /// Zeros in, nothing out.
    Null(NullMemory),
    /// Real bytes.
    Vec(VecMemory),
}

impl Memory for HostMemory {
    fn read(&self, mr: MrId, offset: u64, buf: &mut [u8]) {
        match self {
            HostMemory::Null(m) => m.read(mr, offset, buf),
            HostMemory::Vec(m) => m.read(mr, offset, buf),
        }
    }
    fn write(&mut self, mr: MrId, offset: u64, data: &[u8]) {
        match self {
            HostMemory::Null(m) => m.write(mr, offset, data),
            HostMemory::Vec(m) => m.write(mr, offset, data),
        }
    }
    fn atomic(&mut self, mr: MrId, offset: u64, op: AtomicOp) -> u64 {
        match self {
            HostMemory::Null(m) => m.atomic(mr, offset, op),
            HostMemory::Vec(m) => m.atomic(mr, offset, op),
        }
    }
}

/// One host.
#[derive(Debug)]
pub struct Host {
    /// The RoCE device.
    pub ep: Endpoint,
    /// Its memory.
    pub mem: HostMemory,
    /// Its protection domain.
    pub pd: PdId,
    /// Its one CQ (send and receive of every QP).
    pub cq: CqId,
    /// Its one registered region (all flows read from / write to it).
    pub mr: MrInfo,
    /// Its IPv4 address.
    pub ip: [u8; 4],
    /// The pending `HostWake` time (`u64::MAX`: none).
    pub wake_at: u64,
    /// The IPv4 identification of the next frame the NIC sends: one counter per port, one step
    /// per frame, retransmissions included, as the RNICs whose IP IDs seed 001 §5.1.1's drop rule
    /// reads. The engine writes 0 (docs/wire.md), and the ICRC covers the field, so the model
    /// keeps the value beside the frame instead of in it.
    pub ip_id: u16,
}

/// Base virtual address of every host's region.
pub const MR_BASE: u64 = 0x1000_0000;

/// Host `h`'s IPv4 address: 10.0.0.0/8 with `h + 1` in the low 24 bits.
pub const fn host_ip(h: u32) -> [u8; 4] {
    let v = h + 1;
    [10, (v >> 16) as u8, (v >> 8) as u8, v as u8]
}

/// DASR's 16-bit id of host `h` as a sender: the low 16 bits of its address, as the core's
/// receiver counts it (`rocev2_core::cc::dasr`), and as look-ahead groups list it.
pub const fn sender_id(h: u32) -> u16 {
    let ip = host_ip(h);
    u16::from_be_bytes([ip[2], ip[3]])
}

/// The host an IPv4 address belongs to.
pub const fn ip_host(ip: [u8; 4]) -> u32 {
    (((ip[1] as u32) << 16) | ((ip[2] as u32) << 8) | ip[3] as u32).wrapping_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_ip_round_trips() {
        for h in [0, 1, 255, 256, 1023, 70_000] {
            assert_eq!(ip_host(host_ip(h)), h);
        }
        assert_eq!(host_ip(0), [10, 0, 0, 1]);
    }

    /// `[host] cc` takes the names it always took: the core's schemes and `mp_rdma`.
    #[test]
    fn host_cc_parses_every_scheme_name() {
        let parse = |v: &str| toml::from_str::<HostSpec>(&format!("cc = \"{v}\"")).map(|h| h.cc);
        let want = [
            ("none", HostCc::Rate(CcScheme::None)),
            ("dcqcn", HostCc::Rate(CcScheme::Dcqcn)),
            ("dcqcn_cx4", HostCc::Rate(CcScheme::DcqcnCx4)),
            ("dcqcn_plus", HostCc::Rate(CcScheme::DcqcnPlus)),
            ("dart", HostCc::Rate(CcScheme::Dart)),
            ("timely", HostCc::Rate(CcScheme::Timely)),
            ("mp_rdma", HostCc::MpRdma),
        ];
        for (name, cc) in want {
            assert_eq!(parse(name).unwrap(), cc, "{name}");
            assert_eq!(cc.name(), name);
        }
        for bad in ["hpcc", "MpRdma", "Dcqcn", ""] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains("mp_rdma"), "{bad}: {e}");
        }
        assert_eq!(HostSpec::default().cc, HostCc::Rate(CcScheme::None));
        let text = toml::to_string(&HostSpec::default()).unwrap();
        assert!(text.contains("cc = \"none\""), "{text}");
    }

    /// Every row of the core's scheme table is a `[host] cc` name, and the host it configures
    /// builds that row's controller at its line rate (or none where the row leaves QPs unpaced)
    /// and the REXT fields the row announces, so a new row needs nothing from the model.
    #[test]
    fn host_cc_builds_every_row_of_the_scheme_table() {
        let link = Rate::from_gbps(40);
        for row in &rocev2_core::cc::SCHEMES {
            let h: HostSpec = toml::from_str(&format!("cc = \"{}\"", row.name)).unwrap();
            assert_eq!(h.cc, HostCc::Rate(row.id), "{}", row.name);
            let want = row.id.qp_config(link, h.mtu, &CcTuning::default());
            assert_eq!(h.qp_cc(link), want, "{}", row.name);
            let unpaced = matches!(row.sender, rocev2_core::cc::Sender::Unpaced);
            assert_eq!(want.is_none(), unpaced, "{}", row.name);
            if let Some(cfg) = want {
                let c = cfg.build();
                let rate = c.as_dyn().rate();
                assert!(
                    rate > Rate::from_bps(0) && rate <= link,
                    "{}: {rate}",
                    row.name
                );
            }
            assert_eq!(h.cc.peer_ext(), row.peer_ext, "{}", row.name);
        }
    }
}
