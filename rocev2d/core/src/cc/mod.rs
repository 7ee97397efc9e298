//! Congestion control: per-QP sender controllers, receiver-side notification, and the pacer.
//!
//! A QP's requester asks its controller for a rate and sends through a [`Pacer`] at that rate;
//! events flow in as plain method calls (ACK with piggybacked fields, CNP, packet sent, timer),
//! in the spirit of quinn-proto's `Controller`. The long-standing controllers live in an enum,
//! [`AnyController`], so 10^4 QPs in the network model cost no allocation or vtable; a scheme in
//! its own file (TIMELY) and an experiment's controller sit boxed in its
//! [`AnyController::Custom`] arm. The configuration ([`CcConfig`]) is the factory; [`SCHEMES`]
//! is the table of schemes by name, one row each.
//!
//! The receiver side ([`ReceiverCc`]) is per endpoint, because both DCQCN+'s notification point
//! (one CNP list per receiver) and Dart's AUSS (one per receiver and tenant) are. Where one
//! host's receiving is split over several endpoints (engine shards), each exports a summary per
//! period and takes the others' ([`shards`]), so they act as the host's one receiver.
//!
//! | scheme | sender | receiver |
//! |---|---|---|
//! | DCQCN (seed 002 §II-B) | [`dcqcn::Dcqcn`] | [`dcqcn::DcqcnNp`]: one CNP per N per QP |
//! | DCQCN+ (seed 002 §IV-B) | [`dcqcn_plus::DcqcnPlus`] | [`dcqcn_plus::DcqcnPlusNp`]: round robin, τ = l·δ |
//! | Dart = DASR + DCQCN (seed 000 §III) | [`dart::Dart`]: min(DCQCN, line/N) | [`dasr::DasrReceiver`] + DCQCN NP |
//! | TIMELY (SIGCOMM'15 §5.2 Alg. 1; no seed copy) | [`timely::Timely`]: RTT gradient | none (the requester's RTT samples) |

pub mod dart;
pub mod dasr;
pub mod dcqcn;
pub mod dcqcn_plus;
pub mod pacer;
pub mod shards;
pub mod timely;

use crate::time::{Duration, Instant, Rate};
use crate::wire::Qpn;
use crate::wire::ext::ExtCaps;
use alloc::boxed::Box;
use alloc::collections::BTreeMap;
pub use dart::Dart;
pub use dasr::{DartState, DasrParams, DasrReceiver, DasrSender, DasrSummary, DataArrival};
pub use dcqcn::{Dcqcn, DcqcnNp, DcqcnParams};
pub use dcqcn_plus::{DcqcnPlus, DcqcnPlusNp, DcqcnPlusParams};
pub use pacer::Pacer;
pub use shards::ShardSummary;
pub use timely::{Timely, TimelyParams};

/// α after the decay α = (1 − g)·α has been applied once per whole `period` since `since`
/// (seed 002 eqs. (10) and (23)), computed when needed instead of by a periodic timer, which
/// would keep an idle flow's timer running forever; the values are those the timer would give.
pub(crate) fn decayed_alpha(
    alpha: f64,
    g: f64,
    since: Option<Instant>,
    period: Duration,
    now: Instant,
) -> f64 {
    match since {
        Some(t) if period.as_nanos() > 0 => {
            let periods = ((now - t).as_nanos() / period.as_nanos()).min(i32::MAX as u64) as i32;
            alpha * (1.0 - g).powi(periods)
        }
        _ => alpha,
    }
}

/// What an ACK told the sender, beyond the acknowledgement itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct AckInfo {
    /// DASR's N from the REXT header, when the peer sends it.
    pub dasr_n: Option<u16>,
    /// The round trip of the newest packet this ACK covers that asked for an ACK and was sent
    /// once (TIMELY's RTT sample), when there is one.
    pub rtt: Option<Duration>,
}

impl AckInfo {
    /// An ACK carrying DASR's N (or not).
    pub fn new(dasr_n: Option<u16>) -> AckInfo {
        AckInfo { dasr_n, rtt: None }
    }
    /// The same ACK with an RTT sample.
    pub fn with_rtt(self, rtt: Duration) -> AckInfo {
        AckInfo {
            rtt: Some(rtt),
            ..self
        }
    }
}

/// What a CNP told the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CnpInfo {
    /// DCQCN+'s CNP period τ, when the peer sends it.
    pub tau: Option<Duration>,
}

impl CnpInfo {
    /// A CNP carrying τ (or not).
    pub fn new(tau: Option<Duration>) -> CnpInfo {
        CnpInfo { tau }
    }
}

/// A sender-side congestion controller of one QP.
pub trait CongestionController: core::fmt::Debug + Send {
    /// The rate the QP may send at now.
    fn rate(&self) -> Rate;
    /// A data packet of `bytes` left.
    fn on_packet_sent(&mut self, _now: Instant, _bytes: u64) {}
    /// An ACK arrived.
    fn on_ack(&mut self, _now: Instant, _ack: &AckInfo) {}
    /// Whether [`AckInfo::rtt`] is read: only then does the requester stamp the packets it
    /// sends, so the schemes that ignore RTT pay nothing for it per packet.
    fn wants_rtt(&self) -> bool {
        false
    }
    /// A CNP arrived.
    fn on_cnp(&mut self, _now: Instant, _cnp: &CnpInfo) {}
    /// PFC paused or resumed the QP's priority.
    fn set_paused(&mut self, _paused: bool) {}
    /// The controller's next timer.
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    /// Runs timers due at `now`; a spurious call does nothing.
    fn handle_timeout(&mut self, _now: Instant) {}
    /// Values for traces and `rocev2d stats`, as of `now`.
    fn snapshot(&self, now: Instant) -> CcSnapshot;
}

/// A controller's state for traces and stats.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CcSnapshot {
    /// Allowed rate.
    pub rate: Rate,
    /// Target rate R_T, where the scheme has one.
    pub target: Option<Rate>,
    /// α, where the scheme has one.
    pub alpha: Option<f64>,
    /// DASR's N, where the scheme uses it.
    pub n: Option<u16>,
    /// CNPs that reached the controller.
    pub cnps: u64,
}

/// No congestion control: always line rate (the pacer still enforces it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineRate(pub Rate);

impl CongestionController for LineRate {
    fn rate(&self) -> Rate {
        self.0
    }
    fn snapshot(&self, _now: Instant) -> CcSnapshot {
        CcSnapshot {
            rate: self.0,
            ..CcSnapshot::default()
        }
    }
}

/// Any controller, without boxing the built-in ones.
#[derive(Debug)]
pub enum AnyController {
    /// Line rate, no reaction.
    LineRate(LineRate),
    /// DCQCN.
    Dcqcn(Dcqcn),
    /// DCQCN+.
    DcqcnPlus(DcqcnPlus),
    /// Dart (DASR + DCQCN).
    Dart(Dart),
    /// A scheme's own controller ([`Sender::Own`]) or an experiment's.
    Custom(Box<dyn CongestionController>),
}

impl AnyController {
    /// The controller as a trait object.
    pub fn as_dyn(&self) -> &dyn CongestionController {
        match self {
            AnyController::LineRate(c) => c,
            AnyController::Dcqcn(c) => c,
            AnyController::DcqcnPlus(c) => c,
            AnyController::Dart(c) => c,
            AnyController::Custom(c) => c.as_ref(),
        }
    }
    /// The controller as a mutable trait object.
    pub fn as_dyn_mut(&mut self) -> &mut dyn CongestionController {
        match self {
            AnyController::LineRate(c) => c,
            AnyController::Dcqcn(c) => c,
            AnyController::DcqcnPlus(c) => c,
            AnyController::Dart(c) => c,
            AnyController::Custom(c) => c.as_mut(),
        }
    }
}

/// A QP's congestion control choice; it builds the controller.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CcConfig {
    /// No congestion control, paced at this line rate.
    LineRate(Rate),
    /// DCQCN with these parameters.
    Dcqcn(DcqcnParams),
    /// DCQCN+ with these parameters.
    DcqcnPlus(DcqcnPlusParams),
    /// Dart: DCQCN parameters for the fall-back; DASR uses the same line rate.
    Dart(DcqcnParams),
    /// A scheme's own controller, built by its row of [`SCHEMES`].
    Own(OwnCc),
}

/// The factory of a scheme's own controller ([`Sender::Own`]).
pub type OwnBuild =
    fn(line: Rate, mtu_bytes: u32, tuning: &CcTuning) -> Box<dyn CongestionController>;

/// A QP's choice of a scheme whose controller lives in its own file ([`Sender::Own`]): made by
/// [`CcScheme::qp_config`] only, so the factory always belongs to `scheme`.
#[derive(Debug, Clone, Copy)]
pub struct OwnCc {
    scheme: CcScheme,
    build: OwnBuild,
    line_rate: Rate,
    mtu_bytes: u32,
    tuning: CcTuning,
}

impl OwnCc {
    /// The scheme it builds.
    pub fn scheme(&self) -> CcScheme {
        self.scheme
    }
}

/// Equal when they build the same scheme with the same inputs; the factory follows the scheme.
impl PartialEq for OwnCc {
    fn eq(&self, other: &OwnCc) -> bool {
        (self.scheme, self.line_rate, self.mtu_bytes, self.tuning)
            == (other.scheme, other.line_rate, other.mtu_bytes, other.tuning)
    }
}

impl CcConfig {
    /// The line rate the scheme starts at.
    pub fn line_rate(&self) -> Rate {
        match self {
            CcConfig::LineRate(r) => *r,
            CcConfig::Dcqcn(p) | CcConfig::Dart(p) => p.line_rate,
            CcConfig::DcqcnPlus(p) => p.line_rate,
            CcConfig::Own(o) => o.line_rate,
        }
    }
    /// Builds the controller.
    pub fn build(&self) -> AnyController {
        match *self {
            CcConfig::LineRate(r) => AnyController::LineRate(LineRate(r)),
            CcConfig::Dcqcn(p) => AnyController::Dcqcn(Dcqcn::new(p)),
            CcConfig::DcqcnPlus(p) => AnyController::DcqcnPlus(DcqcnPlus::new(p)),
            CcConfig::Dart(p) => AnyController::Dart(Dart {
                dcqcn: Dcqcn::new(p),
                dasr: DasrSender::new(p.line_rate),
            }),
            CcConfig::Own(o) => {
                AnyController::Custom((o.build)(o.line_rate, o.mtu_bytes, &o.tuning))
            }
        }
    }
}

/// A congestion control scheme chosen by name (the daemon's `[cc] scheme`, the model's
/// `[host] cc`); its row of [`SCHEMES`] builds each QP's controller, the endpoint's receiver
/// side and the REXT fields both ends announce, so every user wires the three the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CcScheme {
    /// No congestion control: the QP sends unpaced.
    #[default]
    None,
    /// DCQCN with the paper's parameters (seed 002 Table I).
    Dcqcn,
    /// DCQCN with the Mellanox CX4 defaults (seed 002 Table I).
    DcqcnCx4,
    /// DCQCN+ (seed 002 §IV-B) with its notification point and τ in CNPs.
    DcqcnPlus,
    /// Dart: DASR at receivers, N on ACKs, DCQCN fall-back (seed 000 §III).
    Dart,
    /// TIMELY: RTT gradient, no receiver side (SIGCOMM'15, seed 000 §VI-A's other baseline).
    Timely,
}

/// One congestion-control scheme: the name configuration files use, the factory of a QP's
/// sender controller, the endpoint's receiver side (notification point, DASR) and the REXT fields
/// both ends announce. A scheme is its own file in this module, one row of [`SCHEMES`] and the
/// [`CcScheme`] value naming the row.
#[derive(Debug)]
pub struct Scheme {
    /// The enum value that names the row in code.
    pub id: CcScheme,
    /// The configuration name (the daemon's `[cc] scheme`, the model's `[host] cc`).
    pub name: &'static str,
    /// How a QP's sender controller is built.
    pub sender: Sender,
    /// The receiver side of an endpoint, with the same tuning as its QPs.
    pub receiver: fn(line: Rate, mtu_bytes: u32, tuning: &CcTuning) -> ReceiverCc,
    /// The REXT fields both ends of a connection announce.
    pub peer_ext: ExtCaps,
}

/// How a scheme builds the sender controller of a QP on a port of `line` rate with path MTU
/// `mtu_bytes`, the paper's parameters changed where the tuning says so.
#[derive(Debug, Clone, Copy)]
pub enum Sender {
    /// No controller: the QP sends unpaced.
    Unpaced,
    /// One of [`CcConfig`]'s controllers, held in [`AnyController`] without an allocation per QP
    /// (the model runs 10^4 QPs and more).
    Config(fn(line: Rate, mtu_bytes: u32, tuning: &CcTuning) -> CcConfig),
    /// The scheme's own controller, boxed per QP, so a scheme in its own file needs no variant
    /// of [`CcConfig`] or [`AnyController`]; one allocation when the QP is made and a virtual
    /// call per event.
    Own(OwnBuild),
}

/// No REXT field: the start of every row's [`Scheme::peer_ext`].
const NO_EXT: ExtCaps = ExtCaps {
    dasr_n: false,
    cnp_tau: false,
    lookahead: false,
    multipath: false,
};

/// DCQCN's notification point: one CNP per QP per `p.cnp_interval`.
fn dcqcn_np(p: DcqcnParams) -> NpConfig {
    NpConfig::Dcqcn {
        interval: p.cnp_interval,
    }
}

/// Every congestion-control scheme, one row each, in the order of [`CcScheme`]'s values (checked
/// when the crate compiles).
pub static SCHEMES: [Scheme; 6] = ROWS;

/// Row `i` is [`CcScheme`]'s value `i`, so [`CcScheme::row`] is an index.
const _: () = {
    let mut i = 0;
    while i < ROWS.len() {
        assert!(
            ROWS[i].id as usize == i,
            "SCHEMES rows follow CcScheme's order"
        );
        i += 1;
    }
};

/// The rows of [`SCHEMES`].
const ROWS: [Scheme; 6] = [
    Scheme {
        id: CcScheme::None,
        name: "none",
        sender: Sender::Unpaced,
        receiver: |_, _, _| ReceiverCc::default(),
        peer_ext: NO_EXT,
    },
    Scheme {
        id: CcScheme::Dcqcn,
        name: "dcqcn",
        sender: Sender::Config(|line, _, t| CcConfig::Dcqcn(t.dcqcn(DcqcnParams::paper(line)))),
        receiver: |line, _, _| ReceiverCc::new(dcqcn_np(DcqcnParams::paper(line)), None),
        peer_ext: NO_EXT,
    },
    Scheme {
        id: CcScheme::DcqcnCx4,
        name: "dcqcn_cx4",
        sender: Sender::Config(|line, _, t| CcConfig::Dcqcn(t.dcqcn(DcqcnParams::cx4(line)))),
        receiver: |line, _, _| ReceiverCc::new(dcqcn_np(DcqcnParams::cx4(line)), None),
        peer_ext: NO_EXT,
    },
    Scheme {
        id: CcScheme::DcqcnPlus,
        name: "dcqcn_plus",
        sender: Sender::Config(|line, mtu, t| {
            CcConfig::DcqcnPlus(t.dcqcn_plus(DcqcnPlusParams::paper(line, mtu)))
        }),
        receiver: |line, mtu, t| {
            ReceiverCc::new(
                NpConfig::DcqcnPlus(t.dcqcn_plus(DcqcnPlusParams::paper(line, mtu))),
                None,
            )
        },
        peer_ext: ExtCaps {
            cnp_tau: true,
            ..NO_EXT
        },
    },
    Scheme {
        id: CcScheme::Dart,
        name: "dart",
        sender: Sender::Config(|line, _, t| CcConfig::Dart(t.dcqcn(DcqcnParams::paper(line)))),
        receiver: |line, _, t| {
            ReceiverCc::new(
                dcqcn_np(DcqcnParams::paper(line)),
                Some(t.dasr(DasrParams::paper(line))),
            )
        },
        peer_ext: ExtCaps {
            dasr_n: true,
            lookahead: true,
            ..NO_EXT
        },
    },
    Scheme {
        id: CcScheme::Timely,
        name: "timely",
        sender: Sender::Own(|line, _, _| Box::new(Timely::new(TimelyParams::paper(line)))),
        receiver: |_, _, _| ReceiverCc::default(),
        peer_ext: NO_EXT,
    },
];

impl CcScheme {
    /// The scheme's row of [`SCHEMES`].
    pub fn row(self) -> &'static Scheme {
        &SCHEMES[self as usize]
    }
    /// Every scheme's configuration name, in table order.
    pub fn names() -> impl Iterator<Item = &'static str> {
        SCHEMES.iter().map(|s| s.name)
    }
    /// The scheme's configuration name.
    pub fn name(self) -> &'static str {
        self.row().name
    }
    /// The scheme called `name`, if any.
    pub fn from_name(name: &str) -> Option<CcScheme> {
        SCHEMES.iter().find(|s| s.name == name).map(|s| s.id)
    }
    /// The sender controller of a QP on a port of `line` rate with path MTU `mtu_bytes`, the
    /// paper's parameters changed where `tuning` says so.
    pub fn qp_config(self, line: Rate, mtu_bytes: u32, tuning: &CcTuning) -> Option<CcConfig> {
        match self.row().sender {
            Sender::Unpaced => None,
            Sender::Config(f) => Some(f(line, mtu_bytes, tuning)),
            Sender::Own(build) => Some(CcConfig::Own(OwnCc {
                scheme: self,
                build,
                line_rate: line,
                mtu_bytes,
                tuning: *tuning,
            })),
        }
    }
    /// The receiver side of an endpoint, with the same `tuning` as its QPs.
    pub fn receiver(self, line: Rate, mtu_bytes: u32, tuning: &CcTuning) -> ReceiverCc {
        (self.row().receiver)(line, mtu_bytes, tuning)
    }
    /// The REXT fields both ends of a connection announce.
    pub fn peer_ext(self) -> ExtCaps {
        self.row().peer_ext
    }
}

/// A device's congestion control: the scheme every QP of the device runs, on a port of `line`
/// rate and path MTU `mtu_bytes`, with the deployment's changes to the paper's parameters. The
/// daemon's `[cc]` section is one, and so is an in-process device's (`rocev2::DeviceConfig::cc`),
/// so both build their QPs' controllers, their endpoint's receiver side and the extensions their
/// QPs offer from the same row of [`SCHEMES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CcSettings {
    /// The scheme.
    pub scheme: CcScheme,
    /// The port's line rate, where flows start.
    pub line: Rate,
    /// Path MTU, bytes (M of DCQCN+'s eqs. (16), (17)).
    pub mtu_bytes: u32,
    /// DCQCN's R_min when set (seed 002 Table I: 100 Mbit/s otherwise).
    pub r_min: Option<Rate>,
    /// DASR's measurement interval when set ([`DasrParams::paper`]'s 10 µs otherwise).
    pub dasr_interval: Option<Duration>,
}

impl Default for CcSettings {
    /// No congestion control (the engine's behaviour without a controller), 10 Gbit/s, 1024.
    fn default() -> Self {
        CcSettings {
            scheme: CcScheme::None,
            line: Rate::from_gbps(10),
            mtu_bytes: 1024,
            r_min: None,
            dasr_interval: None,
        }
    }
}

impl CcSettings {
    /// The settings of `scheme` with the other values at their defaults.
    pub fn new(scheme: CcScheme) -> CcSettings {
        CcSettings {
            scheme,
            ..CcSettings::default()
        }
    }
    /// The controller configuration of a new QP (`None`: no congestion control).
    pub fn qp_config(&self) -> Option<CcConfig> {
        self.scheme
            .qp_config(self.line, self.mtu_bytes, &self.tuning())
    }
    /// The endpoint's receiver side.
    pub fn receiver(&self) -> ReceiverCc {
        self.scheme
            .receiver(self.line, self.mtu_bytes, &self.tuning())
    }
    /// What the settings change from the scheme's paper parameters.
    pub fn tuning(&self) -> CcTuning {
        CcTuning {
            r_min: self.r_min,
            dasr_interval: self.dasr_interval,
            ..CcTuning::default()
        }
    }
}

/// The parameters a deployment may move away from the paper's values, one place for every user
/// of [`CcScheme`] (the daemon's `[cc]`, the model's `[host]`); `Default` changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CcTuning {
    /// DCQCN's R_min (seed 002 Table I: 100 Mbit/s, the whole of a 100 Mbit/s testbed port) in
    /// the schemes with a DCQCN reaction point: `dcqcn`, `dcqcn_cx4` and Dart's fall-back.
    /// DCQCN+ keeps R_l/10000 (eq. (15)).
    pub r_min: Option<Rate>,
    /// DCQCN+: the scale of eq. (19)'s additive step ([`DcqcnPlusParams::ai_scale`]).
    pub dcqcn_plus_ai_scale: Option<f64>,
    /// DCQCN+: the notification point's CNP generation interval δ
    /// ([`DcqcnPlusParams::delta`]; seed 004: a NIC makes a CNP every 1–5 µs).
    pub dcqcn_plus_delta: Option<Duration>,
    /// Dart: DASR's measurement interval ([`DasrParams::measure_interval`]; §III-A asks for about
    /// one RTT, and a slow testbed's RTT is far above the paper's 10 µs).
    pub dasr_interval: Option<Duration>,
}

impl CcTuning {
    /// DCQCN's parameters `p` with this tuning applied.
    pub fn dcqcn(&self, mut p: DcqcnParams) -> DcqcnParams {
        if let Some(r) = self.r_min {
            p.r_min = r;
        }
        p
    }
    /// DASR's parameters `p` with this tuning applied.
    pub fn dasr(&self, mut p: DasrParams) -> DasrParams {
        if let Some(iv) = self.dasr_interval {
            p.measure_interval = iv;
        }
        p
    }
    /// DCQCN+'s parameters `p` with this tuning applied.
    pub fn dcqcn_plus(&self, mut p: DcqcnPlusParams) -> DcqcnPlusParams {
        if let Some(a) = self.dcqcn_plus_ai_scale {
            p.ai_scale = a;
        }
        if let Some(d) = self.dcqcn_plus_delta {
            p.delta = d;
        }
        p
    }
}

/// How a receiver turns CE marks into CNPs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NpConfig {
    /// Never send CNPs.
    Off,
    /// DCQCN: at most one CNP per QP per interval N (seed 002 §II-B 2).
    Dcqcn {
        /// N.
        interval: Duration,
    },
    /// DCQCN+: round-robin list with CNP period τ (seed 002 §IV-B 2).
    DcqcnPlus(DcqcnPlusParams),
}

/// Receiver-side congestion state of one endpoint.
#[derive(Debug, Clone)]
pub struct ReceiverCc {
    np: NpConfig,
    per_qp: BTreeMap<Qpn, DcqcnNp>,
    plus: DcqcnPlusNp<Qpn>,
    /// Dart's receiver, when DASR is on.
    pub dasr: Option<DasrReceiver>,
    /// CE-marked data packets seen.
    pub ce_marked: u64,
    /// The exchange with the host's other engine shards, when this is one of several.
    share: Option<shards::Share>,
}

/// What the receiver wants done after a data packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notify {
    /// Nothing.
    None,
    /// Send a CNP now (with τ for DCQCN+).
    Cnp(Option<Duration>),
}

impl ReceiverCc {
    /// A receiver with this notification point and, optionally, DASR.
    pub fn new(np: NpConfig, dasr: Option<DasrParams>) -> ReceiverCc {
        ReceiverCc {
            np,
            per_qp: BTreeMap::new(),
            plus: DcqcnPlusNp::default(),
            dasr: dasr.map(DasrReceiver::new),
            ce_marked: 0,
            share: None,
        }
    }

    /// A data packet reached `qpn`: feed DASR and, if it was CE-marked, the notification point.
    pub fn on_data(&mut self, now: Instant, qpn: Qpn, d: &DataArrival) -> Notify {
        let notify = self.notify(now, qpn, d);
        self.share_due(now);
        notify
    }

    fn notify(&mut self, now: Instant, qpn: Qpn, d: &DataArrival) -> Notify {
        if let Some(r) = &mut self.dasr {
            r.on_data(now, d);
        }
        if !d.ce {
            return Notify::None;
        }
        self.ce_marked += 1;
        // Dart suppresses the ECN echo in receiver congestion (seed 000 §III-C).
        if self.dasr.as_ref().is_some_and(|d| !d.allow_cnp()) {
            return Notify::None;
        }
        match self.np {
            NpConfig::Off => Notify::None,
            NpConfig::Dcqcn { interval } => {
                if self.per_qp.entry(qpn).or_default().on_ce(now, interval) {
                    Notify::Cnp(None)
                } else {
                    Notify::None
                }
            }
            NpConfig::DcqcnPlus(p) => {
                self.plus.on_ce(now, qpn, &p);
                Notify::None
            }
        }
    }

    /// DASR's N for an ACK to `sender` in tenant `p_key`, when DASR is on.
    pub fn dasr_n(&mut self, now: Instant, p_key: u16, sender: u16) -> Option<u16> {
        self.dasr.as_mut().map(|d| d.n(now, p_key, sender))
    }

    /// A look-ahead notification arrived (seed 000 §III-D).
    pub fn on_lookahead(
        &mut self,
        now: Instant,
        p_key: u16,
        sender: u16,
        group_size: u16,
        members: &[u16],
    ) {
        if let Some(d) = &mut self.dasr {
            d.on_lookahead(now, p_key, sender, group_size, members);
        }
        self.share_due(now);
    }

    /// The notification point's next check (DCQCN+), and the end of the period whose summary
    /// the host's other shards are due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let walk = match self.np {
            NpConfig::DcqcnPlus(_) => self.plus.poll_timeout(),
            _ => None,
        };
        [walk, self.share_timeout()].into_iter().flatten().min()
    }

    /// Runs the DCQCN+ list walk; returns the QP to send a CNP on, with τ. Closes a period due
    /// to the host's other shards.
    pub fn handle_timeout(&mut self, now: Instant) -> Option<(Qpn, Duration)> {
        if self.share.is_some()
            && let Some(d) = &mut self.dasr
        {
            d.tick(now);
        }
        let cnp = match self.np {
            NpConfig::DcqcnPlus(p) => {
                let allow = self.dasr.as_ref().is_none_or(|d| d.allow_cnp());
                self.plus.handle_timeout(now, &p).filter(|_| allow)
            }
            _ => None,
        };
        self.share_due(now);
        cnp
    }
}

impl Default for ReceiverCc {
    fn default() -> Self {
        ReceiverCc::new(NpConfig::Off, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An event the model applies to any controller (s2n-quic's congestion fuzz model).
    #[derive(Debug, Clone)]
    enum Op {
        Sent(u64),
        Ack(Option<u16>, Option<u64>),
        Cnp(Option<u64>),
        Advance(u64),
        Pause(bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (1u64..9000).prop_map(Op::Sent),
            (
                proptest::option::of(0u16..5000),
                proptest::option::of(1u64..2_000_000)
            )
                .prop_map(|(n, rtt)| Op::Ack(n, rtt)),
            proptest::option::of(1u64..5_000_000).prop_map(Op::Cnp),
            (1u64..2_000_000).prop_map(Op::Advance),
            any::<bool>().prop_map(Op::Pause),
        ]
    }

    /// Every controller: the schemes' own (TIMELY's through its row) and the parameter sets.
    fn configs() -> [CcConfig; 6] {
        let line = Rate::from_gbps(40);
        let timely = CcScheme::Timely.qp_config(line, 1024, &CcTuning::default());
        [
            timely.expect("TIMELY builds a sender"),
            CcConfig::Dcqcn(DcqcnParams::paper(line)),
            CcConfig::Dcqcn(DcqcnParams::cx4(line)),
            CcConfig::DcqcnPlus(DcqcnPlusParams::paper(line, 1024)),
            CcConfig::Dart(DcqcnParams::paper(line)),
            CcConfig::LineRate(line),
        ]
    }

    proptest! {
        /// Invariants for every controller under any event sequence: α ∈ [0, 1],
        /// R_min ≤ rate ≤ line rate, timers never in the past after handling.
        #[test]
        fn cc_invariants_hold_for_any_event_sequence(ops in proptest::collection::vec(op(), 1..300)) {
            for cfg in configs() {
                let line = cfg.line_rate();
                let mut c = cfg.build();
                let mut now = Instant::from_nanos(1);
                for o in &ops {
                    let cc = c.as_dyn_mut();
                    match *o {
                        Op::Sent(b) => cc.on_packet_sent(now, b),
                        Op::Ack(n, rtt) => {
                            let ack = AckInfo::new(n);
                            cc.on_ack(now, &rtt.map_or(ack, |r| ack.with_rtt(Duration::from_nanos(r))))
                        }
                        Op::Cnp(tau) => cc.on_cnp(now, &CnpInfo::new(tau.map(Duration::from_nanos))),
                        Op::Advance(ns) => {
                            now += Duration::from_nanos(ns);
                            while let Some(t) = cc.poll_timeout().filter(|t| *t <= now) {
                                cc.handle_timeout(t);
                                prop_assert!(cc.poll_timeout().is_none_or(|n| n > t), "timer did not advance");
                            }
                        }
                        Op::Pause(p) => cc.set_paused(p),
                    }
                    let s = cc.snapshot(now);
                    prop_assert!(s.rate <= line, "{cfg:?}: rate {} above line", s.rate);
                    prop_assert!(s.rate.as_bps() >= line.as_bps() / 10_000, "{cfg:?}: rate {} below any R_min", s.rate);
                    if let Some(a) = s.alpha {
                        prop_assert!((0.0..=1.0).contains(&a), "{cfg:?}: alpha {a}");
                    }
                    if let Some(t) = s.target {
                        prop_assert!(t <= line);
                    }
                }
            }
        }
    }

    #[test]
    fn cc_scheme_names_round_trip() {
        for row in &SCHEMES {
            assert!(core::ptr::eq(row.id.row(), row), "{} has one row", row.name);
            assert_eq!(CcScheme::from_name(row.name), Some(row.id));
        }
        assert_eq!(CcScheme::from_name("hpcc"), None);
        let line = Rate::from_gbps(10);
        assert!(
            CcScheme::None
                .qp_config(line, 1024, &CcTuning::default())
                .is_none()
        );
        assert!(matches!(
            CcScheme::DcqcnPlus.qp_config(line, 1024, &CcTuning::default()),
            Some(CcConfig::DcqcnPlus(p)) if p.mtu_bytes == 1024
        ));
        assert!(
            CcScheme::Dart
                .receiver(line, 1024, &CcTuning::default())
                .dasr
                .is_some()
        );
        assert!(CcScheme::DcqcnPlus.peer_ext().cnp_tau);
    }

    #[test]
    fn cc_tuning_r_min_applies_to_dcqcn_reaction_points_only() {
        let line = Rate::from_gbps(10);
        let r = Rate::from_bps(5_000_000);
        let tuned = CcTuning {
            r_min: Some(r),
            ..CcTuning::default()
        };
        let r_min = |s: CcScheme, t: &CcTuning| match s.qp_config(line, 1024, t) {
            Some(CcConfig::Dcqcn(p) | CcConfig::Dart(p)) => Some(p.r_min),
            _ => None,
        };
        for s in [CcScheme::Dcqcn, CcScheme::DcqcnCx4, CcScheme::Dart] {
            assert_eq!(r_min(s, &tuned), Some(r), "{s:?}");
            // seed 002 Table I: 100 Mbit/s untuned.
            assert_eq!(
                r_min(s, &CcTuning::default()),
                Some(Rate::from_bps(100_000_000)),
                "{s:?}"
            );
        }
        // DCQCN+ keeps eq. (15)'s R_l/10000.
        assert_eq!(
            CcScheme::DcqcnPlus.qp_config(line, 1024, &tuned),
            CcScheme::DcqcnPlus.qp_config(line, 1024, &CcTuning::default())
        );
        assert!(CcScheme::None.qp_config(line, 1024, &tuned).is_none());
    }

    #[test]
    fn cc_tuning_dcqcn_plus_reaches_sender_and_notification_point_alike() {
        let line = Rate::from_gbps(10);
        let t = CcTuning {
            dcqcn_plus_ai_scale: Some(0.5),
            dcqcn_plus_delta: Some(Duration::from_micros(5)),
            ..CcTuning::default()
        };
        let Some(CcConfig::DcqcnPlus(p)) = CcScheme::DcqcnPlus.qp_config(line, 1024, &t) else {
            panic!("DCQCN+ has a sender controller");
        };
        assert_eq!((p.ai_scale, p.delta), (0.5, Duration::from_micros(5)));
        // The NP walks its list with the same δ the sender's fair-share floor assumes.
        assert_eq!(
            CcScheme::DcqcnPlus.receiver(line, 1024, &t).np,
            NpConfig::DcqcnPlus(p)
        );
        let paper = DcqcnPlusParams::paper(line, 1024);
        assert_eq!(
            (paper.ai_scale, paper.delta),
            (1.0, Duration::from_micros(1))
        );
    }

    #[test]
    fn receiver_dcqcn_np_paces_cnps_per_qp() {
        let interval = Duration::from_micros(50);
        let mut r = ReceiverCc::new(NpConfig::Dcqcn { interval }, None);
        let (q1, q2) = (Qpn::new(0x11), Qpn::new(0x12));
        let t0 = Instant::from_nanos(1_000);
        let data = |sender, ce| DataArrival {
            p_key: 0xffff,
            sender,
            bytes: 1000,
            ce,
            ..DataArrival::default()
        };
        assert_eq!(r.on_data(t0, q1, &data(1, true)), Notify::Cnp(None));
        assert_eq!(r.on_data(t0, q1, &data(1, true)), Notify::None, "within N");
        assert_eq!(
            r.on_data(t0, q2, &data(2, true)),
            Notify::Cnp(None),
            "per QP"
        );
        assert_eq!(r.on_data(t0, q1, &data(1, false)), Notify::None);
        assert_eq!(r.ce_marked, 3);
    }
}
