//! QP states, the attributes that move a QP between them, and their validation.
//!
//! Source: IBA Vol. 1 §10.3 (QP state machine: Reset, Init, RTR, RTS, SQD, SQE, Error) and
//! §11.2.4.2 (Modify QP: which attributes each transition requires and allows). The required and
//! optional sets below are those of the IBA table for RC, as `ibv_modify_qp(3)` documents them;
//! a missing required attribute or a present disallowed one is an error, like the `EINVAL` of
//! `ibv_modify_qp`.
//!
//! ```text
//!   Reset ──> Init ──> RTR ──> RTS <──> SQD
//!     ^        │ ^       │      │  ^
//!     │        └─┘       │      v  │
//!   (any)              (any)   SQE ┘        any state ──> Error ──> Reset
//! ```
//!
//! UD QPs (IBA §11.2.4.2's UD column) have their own table, [`validate_ud`]: no path, peer or
//! retry attributes, a Q_Key from RESET→INIT on, and only the send PSN at RTR→RTS.
//!
//! Deviations: alternate paths (APM), port numbers and P_Key *indices* do not exist here: the
//! QP carries the P_Key value itself, and its path is a [`Path`] of Ethernet/IP addresses.

use crate::mr::AccessFlags;
use crate::time::Duration;
use crate::wire::ext::ExtCaps;
use crate::wire::frame::Ecn;
use crate::wire::{Psn, Qpn, VlanRepr};
use core::net::IpAddr;

/// QP state (IBA §10.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Just created or reset: no packet is sent or accepted.
    Reset,
    /// Receive WQEs may be posted; nothing is sent or accepted yet.
    Init,
    /// Ready to receive: the responder works, the requester does not.
    Rtr,
    /// Ready to send: both halves work.
    Rts,
    /// Send queue drain: no new send WQE starts; outstanding ones finish.
    Sqd,
    /// Send queue error (UC/UD after a send error); RC goes to Error instead.
    Sqe,
    /// Error: every WQE is flushed with `WR_FLUSH_ERR`; no packet is sent or accepted.
    Error,
}

impl QpState {
    /// ibverbs' number for the state (`enum ibv_qp_state`: RESET 0 … ERR 6).
    pub const fn as_ibv(self) -> u8 {
        match self {
            QpState::Reset => 0,
            QpState::Init => 1,
            QpState::Rtr => 2,
            QpState::Rts => 3,
            QpState::Sqd => 4,
            QpState::Sqe => 5,
            QpState::Error => 6,
        }
    }

    /// The state ibverbs numbers `v`, if any.
    pub const fn from_ibv(v: u8) -> Option<QpState> {
        Some(match v {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::Sqd,
            5 => QpState::Sqe,
            6 => QpState::Error,
            _ => return None,
        })
    }
}

/// RoCE path MTU (IBA §9.6.3 / the `ibv_mtu` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256,
    /// 512 bytes.
    Mtu512,
    /// 1024 bytes.
    Mtu1024,
    /// 2048 bytes.
    Mtu2048,
    /// 4096 bytes.
    Mtu4096,
}

impl Mtu {
    /// Payload bytes per packet.
    pub const fn bytes(self) -> u32 {
        match self {
            Mtu::Mtu256 => 256,
            Mtu::Mtu512 => 512,
            Mtu::Mtu1024 => 1024,
            Mtu::Mtu2048 => 2048,
            Mtu::Mtu4096 => 4096,
        }
    }
    /// The IBA path MTU code (IBA §9.6.3, `enum ibv_mtu`): 256 → 1 … 4096 → 5, as REQs and
    /// the verbs ABI carry it.
    pub const fn code(self) -> u8 {
        self as u8 + 1
    }
    /// The MTU of a path MTU code, if it is one of the five.
    pub const fn from_code(code: u8) -> Option<Mtu> {
        match code {
            1..=5 => Mtu::from_bytes(128 << code),
            _ => None,
        }
    }
    /// The largest MTU whose packets fit a link of IP MTU `ip_mtu`: RoCEv2 adds IP (20, or 40
    /// for IPv6), UDP (8), BTH (12), the largest extended header (AtomicETH, 28), up to 3 pad
    /// bytes and the ICRC (4) to the payload, as rxe's `rxe_mtu_int_to_enum` accounts it.
    /// `None` when not even 256 bytes fit.
    pub fn largest_within(ip_mtu: u32, v6: bool) -> Option<Mtu> {
        let overhead = if v6 { 40 } else { 20 } + 8 + 12 + 28 + 3 + 4;
        [
            Mtu::Mtu4096,
            Mtu::Mtu2048,
            Mtu::Mtu1024,
            Mtu::Mtu512,
            Mtu::Mtu256,
        ]
        .into_iter()
        .find(|m| m.bytes() + overhead <= ip_mtu)
    }
    /// The MTU of exactly `bytes`, if it is one of the five IBA values.
    pub const fn from_bytes(bytes: u32) -> Option<Mtu> {
        match bytes {
            256 => Some(Mtu::Mtu256),
            512 => Some(Mtu::Mtu512),
            1024 => Some(Mtu::Mtu1024),
            2048 => Some(Mtu::Mtu2048),
            4096 => Some(Mtu::Mtu4096),
            _ => None,
        }
    }
}

/// Where a QP's packets go: the RoCEv2 address vector, resolved to Ethernet and IP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Path {
    /// Our MAC address.
    pub src_mac: [u8; 6],
    /// The next hop's MAC address.
    pub dst_mac: [u8; 6],
    /// Optional 802.1Q tag (its PCP selects the PFC priority).
    pub vlan: Option<VlanRepr>,
    /// Our IP address (the GID, IPv4-mapped or IPv6).
    pub src_ip: IpAddr,
    /// The peer's IP address; packets from any other source are dropped.
    pub dst_ip: IpAddr,
    /// DSCP for every packet of this QP.
    pub dscp: u8,
    /// ECN codepoint for data packets (ECT(0) lets switches mark instead of drop).
    pub ecn: Ecn,
    /// IPv4 TTL or IPv6 hop limit.
    pub hop_limit: u8,
    /// UDP source port: the QP's ECMP entropy.
    pub udp_src_port: u16,
    /// IPv6 flow label (ignored for IPv4).
    pub flow_label: u32,
}

/// Attributes for [`super::Qp`] state transitions; `None` means "not in the attribute mask".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpAttr {
    /// Partition key (RESET→INIT; optional later).
    pub p_key: Option<u16>,
    /// Remote operations the responder allows (RESET→INIT; optional later).
    pub access: Option<AccessFlags>,
    /// Address vector (INIT→RTR).
    pub path: Option<Path>,
    /// Path MTU (INIT→RTR).
    pub path_mtu: Option<Mtu>,
    /// The peer's QP number (INIT→RTR).
    pub dest_qpn: Option<Qpn>,
    /// First PSN the responder expects (INIT→RTR), 24 bits.
    pub rq_psn: Option<u32>,
    /// READ/atomic requests the responder accepts at once (INIT→RTR), at most
    /// [`MAX_RD_ATOMIC`].
    pub max_dest_rd_atomic: Option<u8>,
    /// RNR NAK timer code sent to the requester (INIT→RTR; optional later), 0–31.
    pub min_rnr_timer: Option<u8>,
    /// First PSN the requester sends (RTR→RTS), 24 bits.
    pub sq_psn: Option<u32>,
    /// Local ACK timeout code: 4.096 µs · 2^timeout, 0 = infinite (RTR→RTS), 0–31.
    pub timeout: Option<u8>,
    /// Retries after a timeout or sequence NAK (RTR→RTS), 0–7.
    pub retry_cnt: Option<u8>,
    /// Retries after an RNR NAK, 7 = infinite (RTR→RTS), 0–7.
    pub rnr_retry: Option<u8>,
    /// READ/atomic requests the requester has outstanding at once (RTR→RTS), at most
    /// [`MAX_RD_ATOMIC`].
    pub max_rd_atomic: Option<u8>,
    /// rocev2 extensions the peer announced (optional at INIT→RTR).
    pub peer_ext: Option<ExtCaps>,
    /// Q_Key a UD QP accepts and sends with when a work request asks for it (UD only:
    /// RESET→INIT, optional later; IBA §10.2.4).
    pub q_key: Option<u32>,
}

impl QpAttr {
    /// RESET→INIT as every rocev2 user creates a QP: the default partition (0xffff) and every
    /// right (local write, remote write, read, atomic), as `ibv_rc_pingpong` grants; what a
    /// peer may actually do is then decided by each region's own rights.
    pub fn init_all_access() -> QpAttr {
        QpAttr {
            p_key: Some(0xffff),
            access: Some(
                AccessFlags::LOCAL_WRITE
                    | AccessFlags::REMOTE_WRITE
                    | AccessFlags::REMOTE_READ
                    | AccessFlags::REMOTE_ATOMIC,
            ),
            ..QpAttr::default()
        }
    }
}

/// Everything INIT→RTR→RTS needs, in one value: the peer's QP and the path to it, the PSNs of
/// both directions, the timers and limits (IBA §11.2.4.2's required attributes of both
/// transitions). Every bring-up (tests, the `rocev2` API, the model, tools) goes through
/// [`crate::Endpoint::connect_qp`] with one of these, so the two transitions are written once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectAttr {
    /// Address vector towards the peer.
    pub path: Path,
    /// Path MTU.
    pub mtu: Mtu,
    /// The peer's QP number.
    pub dest_qpn: Qpn,
    /// First PSN we expect from the peer (its first send PSN), 24 bits.
    pub rq_psn: u32,
    /// First PSN we send, 24 bits.
    pub sq_psn: u32,
    /// READ/atomic requests outstanding in each direction (`max_dest_rd_atomic` and
    /// `max_rd_atomic`).
    pub rd_atomic: u8,
    /// RNR NAK timer code we send to the peer, 0–31.
    pub min_rnr_timer: u8,
    /// Local ACK timeout code, 0 = infinite, 0–31.
    pub timeout: u8,
    /// Retries after a timeout or sequence NAK, 0–7.
    pub retry_cnt: u8,
    /// Retries after an RNR NAK, 7 = infinite.
    pub rnr_retry: u8,
    /// rocev2 extensions the peer announced.
    pub peer_ext: ExtCaps,
}

impl ConnectAttr {
    /// The INIT→RTR attributes.
    pub fn rtr(&self) -> QpAttr {
        QpAttr {
            path: Some(self.path),
            path_mtu: Some(self.mtu),
            dest_qpn: Some(self.dest_qpn),
            rq_psn: Some(self.rq_psn),
            max_dest_rd_atomic: Some(self.rd_atomic),
            min_rnr_timer: Some(self.min_rnr_timer),
            peer_ext: Some(self.peer_ext),
            ..QpAttr::default()
        }
    }

    /// The RTR→RTS attributes.
    pub fn rts(&self) -> QpAttr {
        QpAttr {
            sq_psn: Some(self.sq_psn),
            timeout: Some(self.timeout),
            retry_cnt: Some(self.retry_cnt),
            rnr_retry: Some(self.rnr_retry),
            max_rd_atomic: Some(self.rd_atomic),
            ..QpAttr::default()
        }
    }
}

/// The most READ/atomic requests a QP keeps outstanding in either direction (the device's
/// `max_qp_rd_atom`, 16 as for rxe and ConnectX).
pub const MAX_RD_ATOMIC: u8 = 16;

/// Why a modify was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ModifyError {
    /// IBA does not allow this transition.
    #[error("transition {from:?} -> {to:?} is not allowed")]
    BadTransition {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
    },
    /// A required attribute is missing.
    #[error("attribute {0} is required for this transition")]
    Missing(&'static str),
    /// An attribute this transition does not accept was given.
    #[error("attribute {0} is not allowed in this transition")]
    NotAllowed(&'static str),
    /// An attribute is out of range.
    #[error("attribute {name} out of range ({range})")]
    OutOfRange {
        /// The attribute.
        name: &'static str,
        /// The accepted range.
        range: &'static str,
    },
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum A {
    PKey,
    Access,
    Path,
    PathMtu,
    DestQpn,
    RqPsn,
    MaxDestRdAtomic,
    MinRnrTimer,
    SqPsn,
    Timeout,
    RetryCnt,
    RnrRetry,
    MaxRdAtomic,
    PeerExt,
    QKey,
}

impl A {
    const fn name(self) -> &'static str {
        match self {
            A::PKey => "p_key",
            A::Access => "access",
            A::Path => "path",
            A::PathMtu => "path_mtu",
            A::DestQpn => "dest_qpn",
            A::RqPsn => "rq_psn",
            A::MaxDestRdAtomic => "max_dest_rd_atomic",
            A::MinRnrTimer => "min_rnr_timer",
            A::SqPsn => "sq_psn",
            A::Timeout => "timeout",
            A::RetryCnt => "retry_cnt",
            A::RnrRetry => "rnr_retry",
            A::MaxRdAtomic => "max_rd_atomic",
            A::PeerExt => "peer_ext",
            A::QKey => "q_key",
        }
    }
}

impl QpAttr {
    fn present(&self) -> impl Iterator<Item = A> {
        [
            (self.p_key.is_some(), A::PKey),
            (self.access.is_some(), A::Access),
            (self.path.is_some(), A::Path),
            (self.path_mtu.is_some(), A::PathMtu),
            (self.dest_qpn.is_some(), A::DestQpn),
            (self.rq_psn.is_some(), A::RqPsn),
            (self.max_dest_rd_atomic.is_some(), A::MaxDestRdAtomic),
            (self.min_rnr_timer.is_some(), A::MinRnrTimer),
            (self.sq_psn.is_some(), A::SqPsn),
            (self.timeout.is_some(), A::Timeout),
            (self.retry_cnt.is_some(), A::RetryCnt),
            (self.rnr_retry.is_some(), A::RnrRetry),
            (self.max_rd_atomic.is_some(), A::MaxRdAtomic),
            (self.peer_ext.is_some(), A::PeerExt),
            (self.q_key.is_some(), A::QKey),
        ]
        .into_iter()
        .filter_map(|(on, a)| on.then_some(a))
    }

    fn check_ranges(&self) -> Result<(), ModifyError> {
        let bad = |name, range| Err(ModifyError::OutOfRange { name, range });
        if self.rq_psn.is_some_and(|p| p > Psn::MAX.value()) {
            return bad("rq_psn", "0..=0xffffff");
        }
        if self.sq_psn.is_some_and(|p| p > Psn::MAX.value()) {
            return bad("sq_psn", "0..=0xffffff");
        }
        if self
            .dest_qpn
            .is_some_and(|q| q == Qpn::new(0) || q == Qpn::MULTICAST)
        {
            return bad("dest_qpn", "1..=0xfffffe");
        }
        if self.timeout.is_some_and(|t| t > 31) {
            return bad("timeout", "0..=31");
        }
        if self.min_rnr_timer.is_some_and(|t| t > 31) {
            return bad("min_rnr_timer", "0..=31");
        }
        if self.retry_cnt.is_some_and(|t| t > 7) {
            return bad("retry_cnt", "0..=7");
        }
        if self.rnr_retry.is_some_and(|t| t > 7) {
            return bad("rnr_retry", "0..=7");
        }
        if self.max_rd_atomic.is_some_and(|t| t > MAX_RD_ATOMIC) {
            return bad("max_rd_atomic", "0..=16");
        }
        if self.max_dest_rd_atomic.is_some_and(|t| t > MAX_RD_ATOMIC) {
            return bad("max_dest_rd_atomic", "0..=16");
        }
        match &self.path {
            Some(p) => p.check(),
            None => Ok(()),
        }
    }
}

impl Path {
    /// Checks that every field fits its header field and that both addresses are of one IP
    /// version, so that framing a packet on this path cannot fail.
    pub fn check(&self) -> Result<(), ModifyError> {
        let bad = |name, range| Err(ModifyError::OutOfRange { name, range });
        if self.src_ip.is_ipv4() != self.dst_ip.is_ipv4() {
            return bad("path", "source and destination of the same IP version");
        }
        if self.dscp > 63 {
            return bad("path.dscp", "0..=63");
        }
        if self.flow_label > 0xf_ffff {
            return bad("path.flow_label", "0..=0xfffff");
        }
        if self.vlan.is_some_and(|v| v.pcp > 7 || v.vid > 4095) {
            return bad("path.vlan", "pcp 0..=7, vid 0..=4095");
        }
        Ok(())
    }
}

/// Checks a transition and its attributes against IBA §11.2.4.2 for RC.
pub fn validate(from: QpState, to: QpState, attr: &QpAttr) -> Result<(), ModifyError> {
    use A::*;
    use QpState::*;
    let (required, optional): (&[A], &[A]) = match (from, to) {
        (_, Reset) | (_, Error) => (&[], &[]),
        (Reset, Init) => (&[PKey, Access], &[]),
        (Init, Init) => (&[], &[PKey, Access]),
        (Init, Rtr) => (
            &[Path, PathMtu, DestQpn, RqPsn, MaxDestRdAtomic, MinRnrTimer],
            &[PKey, Access, PeerExt],
        ),
        (Rtr, Rts) => (
            &[SqPsn, Timeout, RetryCnt, RnrRetry, MaxRdAtomic],
            &[MinRnrTimer, Access],
        ),
        (Rts, Rts) | (Sqe, Rts) => (&[], &[MinRnrTimer, Access]),
        (Rts, Sqd) | (Sqd, Rts) => (&[], &[]),
        (Sqd, Sqd) => (
            &[],
            &[
                MinRnrTimer,
                Access,
                Timeout,
                RetryCnt,
                RnrRetry,
                MaxRdAtomic,
                MaxDestRdAtomic,
            ],
        ),
        _ => return Err(ModifyError::BadTransition { from, to }),
    };
    check_attrs(required, optional, attr)
}

/// Checks a transition and its attributes against IBA §11.2.4.2 for UD: RESET→INIT takes the
/// P_Key and Q_Key (the port is implicit), RTR needs nothing, RTS the send PSN, and the Q_Key
/// may change in every later transition.
pub fn validate_ud(from: QpState, to: QpState, attr: &QpAttr) -> Result<(), ModifyError> {
    use A::*;
    use QpState::*;
    let (required, optional): (&[A], &[A]) = match (from, to) {
        (_, Reset) | (_, Error) => (&[], &[]),
        (Reset, Init) => (&[PKey, QKey], &[]),
        (Init, Init) | (Init, Rtr) | (Sqd, Sqd) => (&[], &[PKey, QKey]),
        (Rtr, Rts) => (&[SqPsn], &[QKey]),
        (Rts, Rts) | (Sqe, Rts) | (Sqd, Rts) => (&[], &[QKey]),
        (Rts, Sqd) => (&[], &[]),
        _ => return Err(ModifyError::BadTransition { from, to }),
    };
    check_attrs(required, optional, attr)
}

/// A missing required or a present disallowed attribute is an error (`EINVAL` of
/// `ibv_modify_qp`); then every given attribute must be in range.
fn check_attrs(required: &[A], optional: &[A], attr: &QpAttr) -> Result<(), ModifyError> {
    let given: alloc::vec::Vec<A> = attr.present().collect();
    if let Some(missing) = required.iter().find(|a| !given.contains(a)) {
        return Err(ModifyError::Missing(missing.name()));
    }
    if let Some(extra) = given
        .iter()
        .find(|a| !required.contains(a) && !optional.contains(a))
    {
        return Err(ModifyError::NotAllowed(extra.name()));
    }
    attr.check_ranges()
}

/// The local ACK timeout for a timeout code: 4.096 µs · 2^code; `None` for code 0, which IBA
/// defines as "infinite" (no retransmission timer).
pub fn ack_timeout(code: u8) -> Option<Duration> {
    (code != 0).then(|| Duration::from_nanos(4_096u64 << code.min(31)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_codes_are_ibas() {
        for (code, bytes) in [(1, 256), (2, 512), (3, 1024), (4, 2048), (5, 4096)] {
            let m = Mtu::from_code(code).unwrap();
            assert_eq!((m.bytes(), m.code()), (bytes, code));
        }
        assert_eq!(Mtu::from_code(0), None);
        assert_eq!(Mtu::from_code(6), None);
        assert_eq!(Mtu::from_code(255), None);
    }

    #[test]
    fn qp_states_keep_their_ibverbs_numbers() {
        for v in 0..=6 {
            assert_eq!(QpState::from_ibv(v).map(QpState::as_ibv), Some(v));
        }
        assert_eq!(QpState::Rts.as_ibv(), 3);
        assert_eq!(QpState::from_ibv(7), None);
    }
    use core::net::Ipv4Addr;

    fn path() -> Path {
        Path {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            vlan: None,
            src_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            dst_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            dscp: 26,
            ecn: Ecn::Ect0,
            hop_limit: 64,
            udp_src_port: 49152,
            flow_label: 0,
        }
    }

    fn rtr() -> QpAttr {
        QpAttr {
            path: Some(path()),
            path_mtu: Some(Mtu::Mtu1024),
            dest_qpn: Some(Qpn::new(0x11)),
            rq_psn: Some(0x7d2a9e),
            max_dest_rd_atomic: Some(1),
            min_rnr_timer: Some(12),
            ..QpAttr::default()
        }
    }

    #[test]
    fn modify_full_ladder_accepted() {
        let init = QpAttr {
            p_key: Some(0xffff),
            access: Some(AccessFlags::REMOTE_WRITE),
            ..QpAttr::default()
        };
        validate(QpState::Reset, QpState::Init, &init).unwrap();
        validate(QpState::Init, QpState::Rtr, &rtr()).unwrap();
        let rts = QpAttr {
            sq_psn: Some(0x37cf8a),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(1),
            ..QpAttr::default()
        };
        validate(QpState::Rtr, QpState::Rts, &rts).unwrap();
        validate(QpState::Rts, QpState::Sqd, &QpAttr::default()).unwrap();
        validate(QpState::Sqd, QpState::Rts, &QpAttr::default()).unwrap();
        validate(QpState::Rts, QpState::Error, &QpAttr::default()).unwrap();
        validate(QpState::Error, QpState::Reset, &QpAttr::default()).unwrap();
    }

    #[test]
    fn modify_skipping_states_rejected() {
        assert_eq!(
            validate(QpState::Reset, QpState::Rts, &QpAttr::default()),
            Err(ModifyError::BadTransition {
                from: QpState::Reset,
                to: QpState::Rts
            })
        );
        assert!(validate(QpState::Rtr, QpState::Init, &QpAttr::default()).is_err());
        assert!(validate(QpState::Error, QpState::Rts, &QpAttr::default()).is_err());
    }

    #[test]
    fn modify_missing_and_extra_attributes_rejected() {
        let mut a = rtr();
        a.path_mtu = None;
        assert_eq!(
            validate(QpState::Init, QpState::Rtr, &a),
            Err(ModifyError::Missing("path_mtu"))
        );
        let mut a = rtr();
        a.sq_psn = Some(1);
        assert_eq!(
            validate(QpState::Init, QpState::Rtr, &a),
            Err(ModifyError::NotAllowed("sq_psn"))
        );
    }

    /// IBA §11.2.4.2: the Q_Key is a UD attribute, the path and PSNs of the peer RC ones.
    #[test]
    fn modify_ud_and_rc_tables_keep_their_attributes() {
        let init = QpAttr {
            p_key: Some(0xffff),
            q_key: Some(0x1111_1111),
            ..QpAttr::default()
        };
        validate_ud(QpState::Reset, QpState::Init, &init).unwrap();
        assert_eq!(
            validate(QpState::Reset, QpState::Init, &init),
            Err(ModifyError::Missing("access"))
        );
        let rc_init = QpAttr {
            access: Some(AccessFlags::REMOTE_WRITE),
            ..init
        };
        assert_eq!(
            validate(QpState::Reset, QpState::Init, &rc_init),
            Err(ModifyError::NotAllowed("q_key"))
        );
        assert_eq!(
            validate_ud(QpState::Init, QpState::Rtr, &rtr()),
            Err(ModifyError::NotAllowed("path"))
        );
        validate_ud(QpState::Sqe, QpState::Rts, &QpAttr::default()).unwrap();
        assert!(validate_ud(QpState::Init, QpState::Rts, &QpAttr::default()).is_err());
    }

    #[test]
    fn modify_out_of_range_named() {
        let mut a = rtr();
        a.rq_psn = Some(1 << 24);
        assert_eq!(
            validate(QpState::Init, QpState::Rtr, &a),
            Err(ModifyError::OutOfRange {
                name: "rq_psn",
                range: "0..=0xffffff"
            })
        );
        let mut a = rtr();
        a.max_dest_rd_atomic = Some(17);
        assert!(matches!(
            validate(QpState::Init, QpState::Rtr, &a),
            Err(ModifyError::OutOfRange { .. })
        ));
        let mut a = rtr();
        let mut p = path();
        p.dst_ip = IpAddr::V6(core::net::Ipv6Addr::LOCALHOST);
        a.path = Some(p);
        assert!(matches!(
            validate(QpState::Init, QpState::Rtr, &a),
            Err(ModifyError::OutOfRange { name: "path", .. })
        ));
    }

    #[test]
    fn mtu_only_iba_values() {
        assert_eq!(Mtu::from_bytes(4096), Some(Mtu::Mtu4096));
        assert_eq!(Mtu::from_bytes(1500), None);
        assert_eq!(Mtu::from_bytes(128), None);
    }

    #[test]
    fn ack_timeout_formula() {
        assert_eq!(ack_timeout(0), None);
        assert_eq!(ack_timeout(1), Some(Duration::from_nanos(8_192)));
        // ibv_rc_pingpong's default timeout 14: 4.096 us * 2^14 = 67.108864 ms.
        assert_eq!(ack_timeout(14), Some(Duration::from_nanos(67_108_864)));
    }
}
