//! The endpoint: one RoCE device's QPs, memory regions and completion queues, and the demux of
//! received frames with a counted reason for every drop.
//!
//! This is the object the daemon, the verbs API and the network model drive, in the style of
//! quinn-proto's `Endpoint`/`Connection`: feed it frames with [`Endpoint::handle_frame`], pull
//! frames with [`Endpoint::poll_transmit`], and call [`Endpoint::handle_timeout`] at
//! [`Endpoint::poll_timeout`]. A datapath whose kernel writes and strips the IP and UDP headers
//! (UDP sockets) uses [`Endpoint::handle_datagram`] and [`Endpoint::poll_transmit_datagram`]
//! instead, with a [`DatagramMeta`] beside each UDP payload. It never reads a clock and holds no application memory; bytes move
//! through the [`Memory`] passed to each call.
//!
//! Deviations: none.

mod gsi;
mod qp_table;

pub use gsi::{GSI_UDP_SRC_PORT, GsiConfig};
use qp_table::{AnyQp, QpTable};

use crate::cc::ReceiverCc;
use crate::cm::CmError;
use crate::cq::{Cq, WcOpcode, WorkCompletion};
pub use crate::drop_reason::DropReason;
use crate::drop_reason::pkey_match;
use crate::mr::{AccessFlags, Memory, MrError, MrId, MrInfo, MrTable, PdId};
use crate::qp::{
    ConnectAttr, CqId, Env, ModifyError, Mtu, PostError, Qp, QpAttr, QpConfig, QpState, RecvWr,
    SendWr, UdInbound, UdQp,
};
pub use crate::qpn_block::{QPN_BLOCK_SHIFT, QPN_BLOCKS};
use crate::srq::{SrqAttr, SrqError, SrqId, SrqTable};
use crate::time::{Duration, Instant};
use crate::wire::FrameBuf;
use crate::wire::{
    self, DatagramMeta, IpRepr, Qpn, ROCEV2_UDP_PORT, RocePacket, RoceRepr, frame::Frame, gid::gid,
    grh,
};
use alloc::vec::Vec;
use core::net::IpAddr;
use rand_chacha::ChaCha12Rng;
use rand_core::SeedableRng;

/// Endpoint-wide counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// Frames handed to [`Endpoint::handle_frame`] and datagrams to
    /// [`Endpoint::handle_datagram`].
    pub rx_frames: u64,
    /// Their bytes (a datagram counts as the untagged frame that carried it).
    pub rx_bytes: u64,
    /// Frames produced by [`Endpoint::poll_transmit`].
    pub tx_frames: u64,
    /// Their bytes.
    pub tx_bytes: u64,
    /// Drops, indexed like [`DropReason::ALL`].
    pub drops: [u64; DropReason::ALL.len()],
}

impl EndpointStats {
    /// The drop counter for `reason`.
    pub fn drops(&self, reason: DropReason) -> u64 {
        self.drops[reason.index()]
    }
    /// All drops.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }
}

/// Errors of endpoint-level calls (the caller's mistakes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// No QP with this number.
    #[error("unknown QP")]
    UnknownQp,
    /// No CQ with this id.
    #[error("unknown CQ")]
    UnknownCq,
    /// The protection domain does not exist.
    #[error("unknown protection domain")]
    UnknownPd,
    /// A CQ, PD or SRQ that a QP still uses.
    #[error("still in use by a QP")]
    InUse,
    /// No shared receive queue with this id in the QP's protection domain (or one asked for by
    /// a multipath QP, which cannot take one).
    #[error("unknown shared receive queue (or not in this protection domain)")]
    UnknownSrq,
    /// All the endpoint's QP numbers are in use (2^24 − 3, or its block's).
    #[error("no QP number left")]
    QpnsExhausted,
    /// A QP refused the transition.
    #[error(transparent)]
    Modify(#[from] ModifyError),
    /// A QP refused the work request.
    #[error(transparent)]
    Post(#[from] PostError),
    /// Memory registration failed.
    #[error(transparent)]
    Mr(#[from] MrError),
    /// A shared receive queue refused a modification.
    #[error(transparent)]
    Srq(#[from] SrqError),
    /// A `cm_*` call before [`Endpoint::enable_cm`].
    #[error("the connection manager is not enabled")]
    CmNotEnabled,
    /// The connection manager refused the call.
    #[error(transparent)]
    Cm(#[from] CmError),
}

/// One RoCE device: its QPs, memory regions and completion queues.
#[derive(Debug)]
pub struct Endpoint {
    mrs: MrTable,
    /// Completion queues by id; a destroyed one leaves a hole its id is reused for.
    cqs: Vec<Option<Cq>>,
    qps: QpTable,
    /// The QPNs this endpoint hands out, `qpns.0 ..= qpns.1`, and the block they form if it
    /// was given one ([`Endpoint::with_qpn_block`]).
    qpns: (u32, u32),
    qpn_block: Option<u32>,
    next_qpn: u32,
    /// QPN after which the transmit scheduler looks first (round robin).
    rr: Qpn,
    stats: EndpointStats,
    /// Receiver-side congestion control: notification point and DASR.
    rx_cc: ReceiverCc,
    /// Shared receive queues ([`crate::srq`]).
    srqs: SrqTable,
    /// QP1 and its connection manager, once [`Endpoint::enable_cm`] opened it.
    gsi: Option<alloc::boxed::Box<gsi::Gsi>>,
}

/// Why a frame for `qpn`, which names no QP of an endpoint with QPN block `block`, is dropped.
fn missing_qp(block: Option<u32>, qpn: Qpn) -> DropReason {
    match block {
        Some(b) if qpn.value() >> QPN_BLOCK_SHIFT != b => DropReason::MisSteered,
        _ => DropReason::UnknownQp,
    }
}

/// The first QP number handed out: QP0 and QP1 are special (IBA §3.5.3), and rdma_rxe also
/// starts at 0x11, which keeps traces comparable.
const FIRST_QPN: u32 = 0x11;
/// The last QP number handed out: 0xFFFFFF is the multicast QPN (IBA §10.5.1.1).
const LAST_QPN: u32 = 0x00ff_fffe;

impl Endpoint {
    /// An endpoint whose keys come from a ChaCha12 generator seeded with `seed`. Production
    /// passes a seed from the OS so that keys are unpredictable; tests pass a fixed one.
    pub fn new(seed: u64) -> Endpoint {
        Endpoint {
            mrs: MrTable::new(ChaCha12Rng::seed_from_u64(seed)),
            cqs: Vec::new(),
            qps: QpTable::default(),
            qpns: (2, LAST_QPN),
            qpn_block: None,
            next_qpn: FIRST_QPN,
            rr: Qpn::new(0),
            stats: EndpointStats::default(),
            rx_cc: ReceiverCc::default(),
            srqs: SrqTable::default(),
            gsi: None,
        }
    }

    /// An endpoint as [`Endpoint::new`] that is one shard of an interface served by several
    /// (one engine per receive queue): its QPNs all lie in block `block` (`block · 2^18 ..
    /// (block + 1) · 2^18`, QPNs 0, 1 and 0xFFFFFF excepted; `block` is taken modulo
    /// [`QPN_BLOCKS`]), so the shards' QPNs are disjoint and a frame for a QPN of another
    /// block, which only a steering mistake brings here, counts as
    /// [`DropReason::MisSteered`] instead of reaching a QP that happens to have its number.
    pub fn with_qpn_block(seed: u64, block: u32) -> Endpoint {
        let block = block % QPN_BLOCKS;
        let first = (block << QPN_BLOCK_SHIFT).max(2);
        let last = (((block + 1) << QPN_BLOCK_SHIFT) - 1).min(LAST_QPN);
        Endpoint {
            qpns: (first, last),
            qpn_block: Some(block),
            next_qpn: first.max(FIRST_QPN),
            ..Endpoint::new(seed)
        }
    }

    /// The QPN block of a sharded endpoint ([`Endpoint::with_qpn_block`]).
    pub fn qpn_block(&self) -> Option<u32> {
        self.qpn_block
    }

    /// Sets how this endpoint turns CE marks into CNPs and whether it runs Dart's DASR
    /// receiver (seed 002 §II-B, §IV-B; seed 000 §III).
    pub fn set_receiver_cc(&mut self, rx: ReceiverCc) {
        self.rx_cc = rx;
    }

    /// The receiver-side congestion state.
    pub fn receiver_cc(&self) -> &ReceiverCc {
        &self.rx_cc
    }

    /// The receiver-side congestion state, for exchanging its summaries with the host's other
    /// engine shards ([`crate::cc::shards`]).
    pub fn receiver_cc_mut(&mut self) -> &mut ReceiverCc {
        &mut self.rx_cc
    }

    /// PFC paused or resumed the priority of QP `qpn`.
    /// UD QPs run no congestion control, so pausing them holds nothing.
    pub fn set_paused(&mut self, qpn: Qpn, paused: bool) -> Result<(), EndpointError> {
        match &mut *self.qps.get_mut(qpn).ok_or(EndpointError::UnknownQp)? {
            AnyQp::Rc(q) => q.set_paused(paused),
            AnyQp::Ud(_) => {}
        }
        Ok(())
    }

    /// Counters.
    pub fn stats(&self) -> &EndpointStats {
        &self.stats
    }
    /// The memory region table.
    pub fn mrs(&self) -> &MrTable {
        &self.mrs
    }
    /// Allocates a protection domain.
    pub fn alloc_pd(&mut self) -> PdId {
        self.mrs.alloc_pd()
    }
    /// Registers `[addr, addr + len)` with `access` in `pd`.
    pub fn register_mr(
        &mut self,
        pd: PdId,
        addr: u64,
        len: u64,
        access: AccessFlags,
    ) -> Result<MrInfo, EndpointError> {
        Ok(self.mrs.register(pd, addr, len, access)?)
    }
    /// Deregisters a region; its keys stop working immediately.
    pub fn deregister_mr(&mut self, id: MrId) -> Result<MrInfo, EndpointError> {
        Ok(self.mrs.deregister(id)?)
    }
    /// Frees a protection domain (`ibv_dealloc_pd`).
    ///
    /// # Errors
    /// [`EndpointError::Mr`] when it is unknown or regions remain in it;
    /// [`EndpointError::InUse`] while a QP belongs to it.
    pub fn dealloc_pd(&mut self, pd: PdId) -> Result<(), EndpointError> {
        if self.qps.values().any(|q| q.config().pd == pd) {
            return Err(EndpointError::InUse);
        }
        Ok(self.mrs.dealloc_pd(pd)?)
    }
    /// Creates a completion queue holding up to `capacity` completions.
    pub fn create_cq(&mut self, capacity: usize) -> CqId {
        let cq = Some(Cq::new(capacity));
        match self.cqs.iter().position(Option::is_none) {
            Some(i) => {
                self.cqs[i] = cq;
                CqId(i as u32)
            }
            None => {
                self.cqs.push(cq);
                CqId(self.cqs.len() as u32 - 1)
            }
        }
    }
    /// Destroys a completion queue and the completions in it (`ibv_destroy_cq`).
    ///
    /// # Errors
    /// [`EndpointError::UnknownCq`]; [`EndpointError::InUse`] while a QP completes into it
    /// (`EBUSY` in verbs).
    pub fn destroy_cq(&mut self, id: CqId) -> Result<(), EndpointError> {
        if self.cq(id).is_none() {
            return Err(EndpointError::UnknownCq);
        }
        if self
            .qps
            .values()
            .any(|q| q.config().send_cq == id || q.config().recv_cq == id)
        {
            return Err(EndpointError::InUse);
        }
        self.cqs[id.0 as usize] = None;
        Ok(())
    }
    /// The completion queue `id`.
    pub fn cq(&self, id: CqId) -> Option<&Cq> {
        self.cqs.get(id.0 as usize).and_then(Option::as_ref)
    }
    /// Moves up to `max` completions from `cq` into `out`.
    pub fn poll_cq(&mut self, cq: CqId, out: &mut Vec<WorkCompletion>, max: usize) -> usize {
        self.cqs
            .get_mut(cq.0 as usize)
            .and_then(Option::as_mut)
            .map_or(0, |c| c.poll(out, max))
    }

    /// Creates an RC QP in the Reset state.
    pub fn create_qp(&mut self, cfg: QpConfig) -> Result<Qpn, EndpointError> {
        let qpn = self.alloc_qpn(&cfg)?;
        self.qps.insert(qpn, AnyQp::Rc(Qp::new(qpn, cfg)));
        Ok(qpn)
    }

    /// Creates a UD QP in the Reset state whose messages are at most `mtu` bytes (the port's
    /// MTU: verbs UD QPs have no path MTU). It shares the QPN space with RC QPs and is driven
    /// by the same calls: [`Self::modify_qp`] (with [`QpAttr::q_key`]), [`Self::post_send`]
    /// (with a [`crate::qp::UdDest`]), [`Self::post_recv`], [`Self::destroy_qp`].
    pub fn create_ud_qp(&mut self, cfg: QpConfig, mtu: Mtu) -> Result<Qpn, EndpointError> {
        let qpn = self.alloc_qpn(&cfg)?;
        self.qps.insert(qpn, AnyQp::Ud(UdQp::new(qpn, cfg, mtu)));
        Ok(qpn)
    }

    /// Checks a new QP's PD and CQs and picks its number.
    fn alloc_qpn(&mut self, cfg: &QpConfig) -> Result<Qpn, EndpointError> {
        if self.cq(cfg.send_cq).is_none() || self.cq(cfg.recv_cq).is_none() {
            return Err(EndpointError::UnknownCq);
        }
        if !self.mrs.has_pd(cfg.pd) {
            return Err(EndpointError::UnknownPd);
        }
        if let Some(srq) = cfg.srq {
            match self.srqs.pd(srq) {
                None => return Err(EndpointError::UnknownSrq),
                Some(pd) if pd != cfg.pd => return Err(EndpointError::UnknownSrq),
                Some(_) if cfg.multipath.is_some() => return Err(EndpointError::UnknownSrq),
                Some(_) => {}
            }
        }
        let (first, last) = self.qpns;
        let mut qpn = None;
        for _ in first..=last {
            let candidate = Qpn::new(self.next_qpn);
            self.next_qpn = if self.next_qpn >= last {
                first
            } else {
                self.next_qpn + 1
            };
            if !self.qps.contains(candidate) {
                qpn = Some(candidate);
                break;
            }
        }
        qpn.ok_or(EndpointError::QpnsExhausted)
    }

    /// Creates a shared receive queue in `pd` (`ibv_create_srq`) of `max_wr` requests of
    /// `max_sge` SGEs; QPs take from it when created with [`QpConfig::srq`].
    ///
    /// # Errors
    /// [`EndpointError::UnknownPd`].
    pub fn create_srq(
        &mut self,
        pd: PdId,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<SrqId, EndpointError> {
        if !self.mrs.has_pd(pd) {
            return Err(EndpointError::UnknownPd);
        }
        Ok(self.srqs.create(pd, max_wr, max_sge))
    }

    /// Posts a receive request to a shared receive queue (`ibv_post_srq_recv`).
    ///
    /// # Errors
    /// [`EndpointError::UnknownSrq`]; [`EndpointError::Post`] (full, too many SGEs).
    pub fn post_srq_recv(&mut self, srq: SrqId, wr: RecvWr) -> Result<(), EndpointError> {
        self.srqs
            .post(srq, wr)
            .map_err(|e| e.map_or(EndpointError::UnknownSrq, EndpointError::Post))
    }

    /// `ibv_modify_srq`: a new capacity and/or an armed limit ([`crate::srq`]).
    ///
    /// # Errors
    /// [`EndpointError::Srq`].
    pub fn modify_srq(
        &mut self,
        srq: SrqId,
        max_wr: Option<u32>,
        limit: Option<u32>,
    ) -> Result<(), EndpointError> {
        Ok(self.srqs.modify(srq, max_wr, limit)?)
    }

    /// `ibv_query_srq`.
    pub fn query_srq(&self, srq: SrqId) -> Option<SrqAttr> {
        self.srqs.query(srq)
    }

    /// Destroys a shared receive queue no QP uses (`ibv_destroy_srq`); the requests it held
    /// are dropped uncompleted, as with verbs.
    ///
    /// # Errors
    /// [`EndpointError::UnknownSrq`]; [`EndpointError::InUse`].
    pub fn destroy_srq(&mut self, srq: SrqId) -> Result<(), EndpointError> {
        if self.srqs.query(srq).is_none() {
            return Err(EndpointError::UnknownSrq);
        }
        if self.qps.values().any(|q| q.config().srq == Some(srq)) {
            return Err(EndpointError::InUse);
        }
        self.srqs.destroy(srq);
        Ok(())
    }

    /// The next shared receive queue whose limit was reached since the last call
    /// (`IBV_EVENT_SRQ_LIMIT_REACHED`).
    pub fn poll_srq_limit(&mut self) -> Option<SrqId> {
        self.srqs.pop_limit_event()
    }

    /// Destroys a QP; its outstanding work is dropped without completions (as `ibv_destroy_qp`).
    pub fn destroy_qp(&mut self, qpn: Qpn) -> Result<(), EndpointError> {
        self.qps.remove(qpn).ok_or(EndpointError::UnknownQp)
    }

    /// The RC QP `qpn`.
    pub fn qp(&self, qpn: Qpn) -> Option<&Qp> {
        match self.qps.get(qpn)? {
            AnyQp::Rc(q) => Some(q),
            AnyQp::Ud(_) => None,
        }
    }

    /// Every RC QP, in QPN order (for stats and traces).
    pub fn qps(&self) -> impl Iterator<Item = &Qp> {
        self.qps.values().filter_map(|q| match q {
            AnyQp::Rc(q) => Some(q),
            AnyQp::Ud(_) => None,
        })
    }

    /// The UD QP `qpn`.
    pub fn ud_qp(&self, qpn: Qpn) -> Option<&UdQp> {
        match self.qps.get(qpn)? {
            AnyQp::Ud(q) => Some(q),
            AnyQp::Rc(_) => None,
        }
    }

    /// Every UD QP, in QPN order.
    pub fn ud_qps(&self) -> impl Iterator<Item = &UdQp> {
        self.qps.values().filter_map(|q| match q {
            AnyQp::Ud(q) => Some(q),
            AnyQp::Rc(_) => None,
        })
    }

    /// Moves a QP to `to` with `attr` (`ibv_modify_qp`). Entering Error flushes its work
    /// requests into their CQs.
    pub fn modify_qp(
        &mut self,
        qpn: Qpn,
        to: QpState,
        attr: &QpAttr,
        now: Instant,
        mem: &mut dyn Memory,
    ) -> Result<(), EndpointError> {
        let Endpoint {
            mrs,
            cqs,
            qps,
            rx_cc,
            srqs,
            ..
        } = self;
        let result = match &mut *qps.get_mut(qpn).ok_or(EndpointError::UnknownQp)? {
            AnyQp::Rc(qp) => drive(qp, now, mrs, cqs, rx_cc, srqs, mem, |qp, env| {
                qp.modify(to, attr, env)
            }),
            AnyQp::Ud(qp) => drive(qp, now, mrs, cqs, rx_cc, srqs, mem, |qp, env| {
                qp.modify(to, attr, env)
            }),
        };
        Ok(result?)
    }

    /// Connects a QP in INIT to its peer: INIT→RTR then RTR→RTS with `attr` (the one bring-up
    /// path every user shares).
    ///
    /// # Errors
    /// The first transition the QP refused ([`EndpointError::Modify`]); after a refused RTS the
    /// QP stays in RTR.
    pub fn connect_qp(
        &mut self,
        qpn: Qpn,
        attr: &ConnectAttr,
        now: Instant,
        mem: &mut dyn Memory,
    ) -> Result<(), EndpointError> {
        self.modify_qp(qpn, QpState::Rtr, &attr.rtr(), now, mem)?;
        self.modify_qp(qpn, QpState::Rts, &attr.rts(), now, mem)
    }

    /// Brings a UD QP from RESET to RTS (IBA §11.2.4.2, UD column): INIT with the default
    /// P_Key 0xffff and Q_Key `q_key`, RTR, then RTS sending from PSN `sq_psn` (24 bits; the
    /// receiver does not check it). The one UD bring-up of the API and the daemon, as
    /// [`Self::connect_qp`] is for RC.
    ///
    /// # Errors
    /// The first transition the QP refused ([`EndpointError::Modify`]), or
    /// [`EndpointError::UnknownQp`].
    pub fn activate_ud_qp(
        &mut self,
        qpn: Qpn,
        q_key: u32,
        sq_psn: u32,
        now: Instant,
        mem: &mut dyn Memory,
    ) -> Result<(), EndpointError> {
        let init = QpAttr {
            p_key: Some(0xffff),
            q_key: Some(q_key),
            ..QpAttr::default()
        };
        let rts = QpAttr {
            sq_psn: Some(sq_psn & 0xff_ffff),
            ..QpAttr::default()
        };
        self.modify_qp(qpn, QpState::Init, &init, now, mem)?;
        self.modify_qp(qpn, QpState::Rtr, &QpAttr::default(), now, mem)?;
        self.modify_qp(qpn, QpState::Rts, &rts, now, mem)
    }

    /// Posts a send work request. On a QP in ERROR it completes at once with
    /// [`WcStatus::WrFlushErr`](crate::cq::WcStatus::WrFlushErr), as an HCA flushes it (the
    /// QP's [`Qp::error_cause`] says why it failed).
    pub fn post_send(&mut self, qpn: Qpn, wr: SendWr) -> Result<(), EndpointError> {
        let flushed = {
            let q = &mut *self.qps.get_mut(qpn).ok_or(EndpointError::UnknownQp)?;
            match q.flushed(wr.wr_id, wr.op.wc_opcode(), true) {
                Some(f) => f,
                None => {
                    return Ok(match q {
                        AnyQp::Rc(q) => q.post_send(wr),
                        AnyQp::Ud(q) => q.post_send(wr),
                    }?);
                }
            }
        };
        self.complete_flushed(flushed)
    }

    /// Posts a receive work request; on a QP in ERROR, flushed as [`Self::post_send`].
    pub fn post_recv(&mut self, qpn: Qpn, wr: RecvWr) -> Result<(), EndpointError> {
        let flushed = {
            let q = &mut *self.qps.get_mut(qpn).ok_or(EndpointError::UnknownQp)?;
            match q.flushed(wr.wr_id, WcOpcode::Recv, false) {
                Some(f) => f,
                None => {
                    return Ok(match q {
                        AnyQp::Rc(q) => q.post_recv(wr),
                        AnyQp::Ud(q) => q.post_recv(wr),
                    }?);
                }
            }
        };
        self.complete_flushed(flushed)
    }

    /// Completes a request posted to a QP in ERROR, flushed; a full CQ refuses the post.
    fn complete_flushed(&mut self, (cq, c): (CqId, WorkCompletion)) -> Result<(), EndpointError> {
        if push_wc(&mut self.cqs, cq, c) {
            Ok(())
        } else {
            Err(PostError::QueueFull.into())
        }
    }

    /// Handles one received Ethernet frame. Anything that is not a valid RoCEv2 packet for one
    /// of our ready QPs from its peer is dropped and counted by reason, never an error for the
    /// caller to handle.
    pub fn handle_frame(
        &mut self,
        now: Instant,
        bytes: &[u8],
        mem: &mut dyn Memory,
    ) -> Result<(), DropReason> {
        let result = self.deliver_frame(now, bytes, mem);
        self.count_rx(bytes.len(), result)
    }

    /// Handles one received UDP payload (BTH … ICRC) whose IP and UDP headers the kernel
    /// stripped, described by `meta`: the UDP-socket datapath's entry point. Everything after
    /// L2–L4 parsing is [`Self::handle_frame`]'s; the ICRC is checked over the headers `meta`
    /// stands for ([`DatagramMeta::verify_icrc`]). Counted as the frame that carried it.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        meta: &DatagramMeta,
        payload: &[u8],
        mem: &mut dyn Memory,
    ) -> Result<(), DropReason> {
        let result = self.deliver_datagram(now, meta, payload, mem);
        self.count_rx(meta.frame_len(payload.len()), result)
    }

    fn count_rx(&mut self, len: usize, result: Result<(), DropReason>) -> Result<(), DropReason> {
        self.stats.rx_frames += 1;
        self.stats.rx_bytes += len as u64;
        if let Err(reason) = result {
            self.stats.drops[reason.index()] += 1;
        }
        result
    }

    fn deliver_frame(
        &mut self,
        now: Instant,
        bytes: &[u8],
        mem: &mut dyn Memory,
    ) -> Result<(), DropReason> {
        let frame = Frame::new_checked(bytes)?;
        frame.verify_icrc()?;
        // Only the transport headers' meaning is built; the L2–L4 fields are read from the
        // checked frame in place, so no whole `FrameRepr` is assembled per packet. The repr
        // (272 bytes with its REXT) is borrowed where `parse` wrote it: moving it out of the
        // `Result` was a `memmove` that waited on the narrow stores that had just built it.
        let parsed = RoceRepr::parse(frame.transport());
        let roce = parsed.as_ref().map_err(|e| *e)?;
        let ip = frame.ip_repr();
        let (src, dst): (IpAddr, IpAddr) = match ip {
            IpRepr::V4 { src, dst, .. } => (src.into(), dst.into()),
            IpRepr::V6 { src, dst, .. } => (src.into(), dst.into()),
        };
        let rx = Received {
            src,
            dst,
            src_mac: Some(frame.eth_repr().src),
            sport: frame.udp_repr().src_port,
            ecn: ip.ecn(),
            roce,
            payload: frame.payload(),
            len: bytes.len(),
            ip: IpHeader::Frame(frame.ip_header()),
        };
        self.deliver(now, rx, mem)
    }

    fn deliver_datagram(
        &mut self,
        now: Instant,
        meta: &DatagramMeta,
        payload: &[u8],
        mem: &mut dyn Memory,
    ) -> Result<(), DropReason> {
        if meta.dst.port() != ROCEV2_UDP_PORT {
            return Err(DropReason::NotRoce);
        }
        let packet = RocePacket::new_checked(payload)?;
        meta.verify_icrc(payload)?;
        let parsed = RoceRepr::parse(&packet);
        let roce = parsed.as_ref().map_err(|e| *e)?;
        let rx = Received {
            src: meta.src.ip(),
            dst: meta.dst.ip(),
            src_mac: None,
            sport: meta.src.port(),
            ecn: meta.ecn,
            roce,
            payload: packet.payload_slice(),
            len: meta.frame_len(payload.len()),
            ip: IpHeader::Datagram(meta, payload.len()),
        };
        self.deliver(now, rx, mem)
    }

    /// The demux shared by frames and datagrams, once L2–L4 are read and the ICRC checked.
    fn deliver(
        &mut self,
        now: Instant,
        rx: Received<'_>,
        mem: &mut dyn Memory,
    ) -> Result<(), DropReason> {
        let roce = rx.roce;
        if roce.bth.dest_qp == Qpn::GSI {
            let addrs = (gid(rx.dst), gid(rx.src), rx.src_mac);
            return self.handle_gsi(now, roce, rx.payload, addrs, mem);
        }
        let transport = roce.bth.opcode.transport();
        let Endpoint {
            mrs,
            cqs,
            qps,
            rx_cc,
            srqs,
            qpn_block,
            ..
        } = self;
        let mut guard = qps
            .get_mut(roce.bth.dest_qp)
            .ok_or_else(|| missing_qp(*qpn_block, roce.bth.dest_qp))?;
        let qp = match &mut *guard {
            AnyQp::Ud(qp) if transport == wire::Transport::Ud => {
                let pkt = UdInbound {
                    roce,
                    payload: rx.payload,
                    src: rx.src,
                    grh: rx.ip.grh_area()?,
                };
                return drive(qp, now, mrs, cqs, rx_cc, srqs, mem, |qp, env| {
                    qp.handle_packet(env, &pkt)
                });
            }
            AnyQp::Rc(qp) if matches!(transport, wire::Transport::Rc | wire::Transport::Cnp) => qp,
            _ => return Err(DropReason::WrongTransport),
        };
        let Some(path) = qp.path() else {
            return Err(DropReason::QpNotReady);
        };
        if matches!(qp.state(), QpState::Reset | QpState::Init) {
            return Err(DropReason::QpNotReady);
        }
        if rx.src != path.dst_ip {
            return Err(DropReason::WrongSource);
        }
        if !pkey_match(roce.bth.p_key, qp.p_key()) {
            return Err(DropReason::BadPkey);
        }
        if transport == wire::Transport::Cnp {
            // A CNP tells this QP's sender to slow down; τ rides in REXT (DCQCN+).
            let tau = roce
                .ext
                .and_then(|e| e.tau_ns)
                .map(|t| Duration::from_nanos(t as u64));
            qp.on_cnp(now, tau);
            return Ok(());
        }
        let waiting = qp.state() == QpState::Rtr;
        drive(qp, now, mrs, cqs, rx_cc, srqs, mem, |qp, env| {
            qp.handle_packet(env, roce, rx.payload, rx.ecn, rx.len, rx.sport)
        });
        drop(guard);
        if waiting {
            self.qp_saw_peer(now, roce.bth.dest_qp, mem);
        }
        Ok(())
    }

    /// Writes the next frame to send into `buf` ([`FrameBuf::frame_mut`] of its length) and
    /// returns its length.
    /// QP1's MADs go first; then QPs take turns; within a QP, responses and requests alternate.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        mem: &mut dyn Memory,
        buf: &mut dyn FrameBuf,
    ) -> Option<usize> {
        if let Some(n) = self.gsi.as_mut().and_then(|g| g.poll_transmit(buf)) {
            self.stats.tx_frames += 1;
            self.stats.tx_bytes += n as u64;
            return Some(n);
        }
        let Endpoint {
            mrs,
            cqs,
            qps,
            rr,
            stats,
            rx_cc,
            srqs,
            ..
        } = self;
        // Every QP gets a turn in QPN order after the last one that sent; one that wanted to
        // send but produced nothing (a request that failed and completed in error) passes the
        // turn on instead of ending the poll. Only QPs that may have work are visited.
        let mut cursor = *rr;
        for _ in 0..qps.len() {
            let next = qps.next_wanting(cursor, now)?;
            let sent = match &mut *qps.get_mut(next)? {
                AnyQp::Rc(qp) => drive(qp, now, mrs, cqs, rx_cc, srqs, mem, |qp, env| {
                    qp.poll_transmit(env, buf)
                }),
                AnyQp::Ud(qp) => drive(qp, now, mrs, cqs, rx_cc, srqs, mem, |qp, env| {
                    qp.poll_transmit(env, buf)
                }),
            };
            if let Some(n) = sent {
                *rr = next;
                stats.tx_frames += 1;
                stats.tx_bytes += n as u64;
                return Some(n);
            }
            cursor = next;
        }
        None
    }

    /// [`Self::poll_transmit`] for a datapath whose kernel writes the IP and UDP headers: leaves
    /// only the UDP payload (BTH … ICRC) in `buf` and returns it with the header fields the
    /// socket calls need. The ICRC in it was computed over the headers the metadata stands for,
    /// so the bytes on the wire are the same as in every other mode.
    pub fn poll_transmit_datagram(
        &mut self,
        now: Instant,
        mem: &mut dyn Memory,
        buf: &mut Vec<u8>,
    ) -> Option<(DatagramMeta, usize)> {
        let n = self.poll_transmit(now, mem, buf)?;
        // The QPs frame every packet whole; the headers go here until they can write the
        // transport alone.
        let (meta, payload) = DatagramMeta::split_frame(&buf[..n]).ok()?;
        let len = payload.len();
        buf.copy_within(payload, 0);
        buf.truncate(len);
        Some((meta, len))
    }

    /// The earliest timer deadline of any QP, of the notification point or of the CM.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let qps = self.qps.next_deadline();
        let cm = self.gsi.as_ref().and_then(|g| g.poll_timeout());
        [qps, self.rx_cc.poll_timeout(), cm]
            .into_iter()
            .flatten()
            .min()
    }

    /// Runs every QP timer that is due at `now`, DCQCN+'s CNP list walk and the CM's timers.
    pub fn handle_timeout(&mut self, now: Instant, mem: &mut dyn Memory) {
        self.gsi_timeout(now, mem);
        if self.rx_cc.poll_timeout().is_some_and(|t| t <= now)
            && let Some((qpn, tau)) = self.rx_cc.handle_timeout(now)
            && let Some(mut guard) = self.qps.get_mut(qpn)
            && let AnyQp::Rc(qp) = &mut *guard
        {
            qp.queue_cnp(Some(tau));
        }
        let Endpoint {
            mrs,
            cqs,
            qps,
            rx_cc,
            srqs,
            ..
        } = self;
        // The due QPs run in QPN order, as the scan ran them; running one moves no other
        // QP's deadline, so the list taken first is the list the scan would have found.
        let due = qps.take_due(now);
        for &qpn in &due {
            let Some(mut guard) = qps.get_mut(qpn) else {
                continue;
            };
            let AnyQp::Rc(qp) = &mut *guard else { continue };
            if qp.poll_timeout().is_some_and(|t| t <= now) {
                drive(qp, now, mrs, cqs, rx_cc, srqs, mem, |qp, env| {
                    qp.handle_timeout(env)
                });
            }
        }
        qps.recycle(due);
    }

    /// True when no QP (QP1 included) has anything to send or any timer pending.
    pub fn is_idle(&self, now: Instant) -> bool {
        self.qps.is_idle(now) && self.gsi.as_ref().is_none_or(|g| g.is_idle())
    }
}

/// A received packet once its L2–L4 headers are read and its ICRC checked: what the demux and
/// the QP need from either entry point.
struct Received<'a> {
    /// IP source: must be the QP's peer.
    src: IpAddr,
    /// IP destination: our GID, for the CM.
    dst: IpAddr,
    /// Ethernet source, when the packet came in a whole frame: where the CM's answers go.
    src_mac: Option<[u8; 6]>,
    /// UDP source port (multipath: the path it came by).
    sport: u16,
    ecn: wire::frame::Ecn,
    roce: &'a RoceRepr,
    payload: &'a [u8],
    /// The carrying frame's length, for byte accounting.
    len: usize,
    /// The IP header, for a UD receive buffer's GRH area.
    ip: IpHeader<'a>,
}

/// Where a received packet's IP header comes from.
#[derive(Clone, Copy)]
enum IpHeader<'a> {
    /// The header bytes of a whole frame, as received.
    Frame(&'a [u8]),
    /// Rebuilt from a datagram's metadata and its UDP payload's length.
    Datagram(&'a DatagramMeta, usize),
}

impl IpHeader<'_> {
    /// The GRH area a UD receive buffer starts with ([`grh`]); computed only for UD packets.
    fn grh_area(self) -> Result<[u8; grh::GRH_LEN], DropReason> {
        Ok(match self {
            IpHeader::Frame(ip) => grh::area(ip)?,
            IpHeader::Datagram(meta, len) => meta.grh_area(len)?,
        })
    }
}

/// Runs `f` on `qp` with the environment it needs: time, keys, memory, the CQs its completions
/// go to, and the receiver-side congestion state.
#[allow(clippy::too_many_arguments)] // The environment's parts, each a disjoint field.
fn drive<Q, R>(
    qp: &mut Q,
    now: Instant,
    mrs: &MrTable,
    cqs: &mut [Option<Cq>],
    rx_cc: &mut ReceiverCc,
    srqs: &mut SrqTable,
    mem: &mut dyn Memory,
    f: impl FnOnce(&mut Q, &mut Env<'_>) -> R,
) -> R {
    let mut complete = |cq: CqId, wc| push_wc(cqs, cq, wc);
    let mut env = Env {
        now,
        mrs,
        mem,
        complete: &mut complete,
        rx_cc,
        srqs,
    };
    f(qp, &mut env)
}

fn push_wc(cqs: &mut [Option<Cq>], cq: CqId, wc: WorkCompletion) -> bool {
    cqs.get_mut(cq.0 as usize)
        .and_then(Option::as_mut)
        .is_some_and(|c| c.push(wc).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each block is its 2^18 QPNs, QPNs 0, 1 and the multicast 0xFFFFFF excepted; block 0
    /// starts at 0x11 as an unsharded endpoint does; a block number wraps modulo 64.
    #[test]
    fn qpn_blocks_bound_the_qpns() {
        let b0 = Endpoint::with_qpn_block(1, 0);
        assert_eq!((b0.qpns, b0.next_qpn), ((2, 0x3_ffff), FIRST_QPN));
        let b5 = Endpoint::with_qpn_block(1, 5);
        assert_eq!((b5.qpns, b5.next_qpn), ((0x14_0000, 0x17_ffff), 0x14_0000));
        let b63 = Endpoint::with_qpn_block(1, 63);
        assert_eq!(b63.qpns, (0xfc_0000, 0xff_fffe));
        assert_eq!(Endpoint::with_qpn_block(1, 64 + 5).qpn_block(), Some(5));
        assert_eq!(Endpoint::new(1).qpns, (2, LAST_QPN));
        assert_eq!(
            missing_qp(Some(5), Qpn::new(0x14_0001)),
            DropReason::UnknownQp
        );
        assert_eq!(
            missing_qp(Some(5), Qpn::new(0x18_0000)),
            DropReason::MisSteered
        );
        assert_eq!(missing_qp(None, Qpn::new(0x18_0000)), DropReason::UnknownQp);
    }

    /// A shard's CM allocates Communication IDs of the shard's block; an unsharded one has none.
    #[test]
    fn enable_cm_gives_the_cm_the_qpn_block() {
        let cfg = GsiConfig {
            mac: [2, 0, 0, 0, 0, 1],
            cm: crate::cm::CmConfig { local_ca_guid: 1 },
            seed: 7,
            link_mtu: 1500,
        };
        let mut shard = Endpoint::with_qpn_block(1, 9);
        shard.enable_cm(cfg);
        assert_eq!(shard.cm().and_then(crate::cm::Cm::comm_id_block), Some(9));
        let mut whole = Endpoint::new(1);
        whole.enable_cm(cfg);
        assert_eq!(whole.cm().and_then(crate::cm::Cm::comm_id_block), None);
    }

    /// A WRITE whose packets travel as (metadata, UDP payload) both ways completes, and the
    /// counters see each datagram as the frame that would have carried it.
    #[test]
    fn datagram_entry_points_carry_a_write() {
        use crate::cq::WcStatus;
        use crate::qp::{SendOp, Sge};
        use crate::testing::{ConnectOptions, Pair};
        let mut p = Pair::new(Default::default(), Default::default());
        let c = p
            .connect(ConnectOptions {
                mr_len: 64 << 10,
                ..ConnectOptions::default()
            })
            .unwrap();
        let data: Vec<u8> = (0..64u32 << 10).map(|i| (i * 7 + 3) as u8).collect();
        p.a.mem.get_mut(c.mr_a.id).unwrap().copy_from_slice(&data);
        let write = SendOp::Write {
            remote_addr: c.mr_b.addr,
            rkey: c.mr_b.rkey,
        };
        let sge = Sge {
            addr: c.mr_a.addr,
            length: 64 << 10,
            lkey: c.mr_a.lkey,
        };
        p.a.ep
            .post_send(c.qa, SendWr::new(1, write).sge(sge))
            .unwrap();
        let (now, mut buf, mut wcs) = (p.now, Vec::new(), Vec::new());
        let mut frame_bytes = 0;
        for _ in 0..1000 {
            while let Some((m, n)) = p.a.ep.poll_transmit_datagram(now, &mut p.a.mem, &mut buf) {
                assert_eq!(m.dst.port(), ROCEV2_UDP_PORT);
                frame_bytes += m.frame_len(n) as u64;
                assert_eq!(
                    p.b.ep.handle_datagram(now, &m, &buf[..n], &mut p.b.mem),
                    Ok(())
                );
            }
            while let Some((m, n)) = p.b.ep.poll_transmit_datagram(now, &mut p.b.mem, &mut buf) {
                assert_eq!(
                    p.a.ep.handle_datagram(now, &m, &buf[..n], &mut p.a.mem),
                    Ok(())
                );
            }
            if p.a.ep.poll_cq(c.cq_a, &mut wcs, 1) > 0 {
                break;
            }
        }
        assert_eq!(wcs.first().map(|w| w.status), Some(WcStatus::Success));
        assert_eq!(p.b.mem.get(c.mr_b.id).unwrap(), &data[..]);
        let s = p.b.ep.stats();
        assert_eq!((s.rx_bytes, s.total_drops()), (frame_bytes, 0));
        assert_eq!(s.rx_bytes, p.a.ep.stats().tx_bytes);
    }

    /// Paced WRITEs on three QPs over a lossy link (retransmit timers, pacer gates, QPs
    /// created and destroyed mid-traffic, so the endpoint goes from one QP, which keeps no
    /// indexes, to several and back): after every step each endpoint's scheduler and timer
    /// indexes agree with a scan of all its QPs, so they find the same QP and deadline a scan
    /// would.
    #[test]
    fn qp_indexes_match_a_scan_through_paced_lossy_traffic() {
        use crate::cc::CcConfig;
        use crate::qp::{SendOp, Sge};
        use crate::testing::{Conn, ConnectOptions, LinkConfig, Pair};
        use crate::time::Rate;
        let link = |seed| LinkConfig {
            loss: 0.05,
            seed,
            ..LinkConfig::default()
        };
        let mut p = Pair::new(link(1), link(2));
        let opts = || ConnectOptions {
            mr_len: 64 << 10,
            cc: Some(CcConfig::LineRate(Rate::from_gbps(1))),
            ..ConnectOptions::default()
        };
        let post = |p: &mut Pair, c: &Conn, i: u32| {
            let write = SendOp::Write {
                remote_addr: c.mr_b.addr,
                rkey: c.mr_b.rkey,
            };
            let sge = Sge {
                addr: c.mr_a.addr,
                length: (16 << 10) * (i + 1),
                lkey: c.mr_a.lkey,
            };
            p.a.ep
                .post_send(c.qa, SendWr::new(i as u64, write).sge(sge))
                .unwrap();
        };
        let mut conns = alloc::vec![p.connect(opts()).unwrap()];
        post(&mut p, &conns[0], 0);
        let mut idle = None;
        let mut steps = 0;
        while p.step() {
            for ep in [&p.a.ep, &p.b.ep] {
                ep.qps.assert_indexes_match_scan(p.now);
            }
            steps += 1;
            assert!(steps < 100_000, "never idle");
            match steps {
                // A second QP while the first has packets, timers and a pacer gate in flight.
                5 => idle = Some(p.connect(opts()).unwrap()),
                // Back to one QP, then to three with work.
                15 => p.a.ep.destroy_qp(idle.take().unwrap().qa).unwrap(),
                25 => {
                    for i in 1..3 {
                        conns.push(p.connect(opts()).unwrap());
                        post(&mut p, &conns[i], i as u32);
                    }
                }
                _ => continue,
            }
            p.a.ep.qps.assert_indexes_match_scan(p.now);
            assert_eq!(p.a.ep.qps.len() == 1, steps == 15);
        }
        for c in &conns {
            let wcs = p.completions(true, c.cq_a);
            assert_eq!(wcs.len(), 1);
            assert_eq!(wcs[0].status, crate::cq::WcStatus::Success);
        }
        assert!(p.a.ep.is_idle(p.now) && p.b.ep.is_idle(p.now));
        assert!(p.b.ep.stats().drops(DropReason::UnknownQp) == 0 && steps > 25);
    }

    #[test]
    fn drop_reason_names_unique_and_snake_case() {
        let mut names: Vec<&str> = DropReason::ALL.iter().map(|r| r.name()).collect();
        assert!(
            names
                .iter()
                .all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        );
        names.sort();
        names.dedup();
        assert_eq!(names.len(), DropReason::ALL.len());
    }

    #[test]
    fn cqs_and_pds_in_use_are_refused_and_freed_ids_reused() {
        let mut ep = Endpoint::new(1);
        let pd = ep.alloc_pd();
        let (a, b) = (ep.create_cq(4), ep.create_cq(4));
        let qpn = ep.create_qp(QpConfig::new(pd, a, a)).unwrap();
        assert_eq!(ep.destroy_cq(a), Err(EndpointError::InUse));
        assert_eq!(ep.dealloc_pd(pd), Err(EndpointError::InUse));
        ep.destroy_qp(qpn).unwrap();
        ep.destroy_cq(a).unwrap();
        assert_eq!(ep.destroy_cq(a), Err(EndpointError::UnknownCq));
        assert_eq!(ep.poll_cq(a, &mut Vec::new(), 1), 0);
        assert_eq!(ep.create_cq(2), a);
        assert_ne!(a, b);
        ep.dealloc_pd(pd).unwrap();
        assert!(ep.create_qp(QpConfig::new(pd, a, b)).is_err());
    }
}
