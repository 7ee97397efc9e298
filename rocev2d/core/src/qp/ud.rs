//! Unreliable Datagram queue pairs: connectionless SEND and RECV with a DETH.
//!
//! Source: IBA Vol. 1 §9.8 and §9.3.2 (UD: every message is one SEND Only packet of at most
//! the path MTU, carrying a DETH with the Q_Key and the source QP; no acknowledgements, and the
//! receiver accepts any PSN), §10.2.4 (Q_Keys: a send work request's Q_Key with the high bit set
//! means the QP's own), §10.3.1 (QP states; a UD send error moves the QP to SQE, which flushes
//! the send queue and leaves the receive queue working), §11.2.4.2 (UD attributes, see
//! [`super::state::validate_ud`]), §11.4.1 (the 40-byte GRH area at the head of every receive
//! buffer, [`crate::wire::grh`]) and §11.4.2 (UD completions name the source QP and carry the
//! GRH). Drop rules follow Linux rdma_rxe (`rxe_recv.c` `check_keys`, `rxe_resp.c`): a P_Key or
//! Q_Key mismatch, a message longer than the MTU or the receive buffer, and a missing receive
//! WQE are silent drops (IBA's class D), counted by [`DropReason`].
//!
//! A [`UdQp`] owns its queues and does all its work in its own methods; the endpoint creates it
//! ([`crate::Endpoint::create_ud_qp`]), hands it the packets whose BTH names it, and polls it
//! for frames like an RC QP.
//!
//! Deviations:
//! * the MTU is given at creation (the port's, as verbs UD QPs take it), not per path;
//! * a send longer than the MTU completes with `LOC_LEN_ERR` and moves the QP to SQE rather
//!   than being refused at post time;
//! * posting to a QP in SQE or Error is refused ([`PostError::WrongState`]) instead of
//!   completing the request with a flush error, as for RC QPs;
//! * Q_Keys with the high bit set (IBA's controlled Q_Keys) are not reserved for privileged
//!   consumers: any Q_Key can be set;
//! * completions report P_Key index 0: a rocev2 port's P_Key table has one entry;
//! * QP1 (the GSI) is not a [`UdQp`]: the endpoint serves it itself for the CM
//!   (`endpoint/gsi.rs`), with no application buffers;
//! * NOT IMPLEMENTED (IBA ch. 10 multicast; Annex A17.9 CNPs): UD multicast and congestion
//!   control (UD QPs send no CNPs and drop those they receive).

use super::framing::PathHead;
use super::sgl::{gather, resolve_local, scatter};
use super::state::validate_ud;
use super::{
    CqId, Env, ModifyError, Mtu, Path, PostError, QpAttr, QpConfig, QpCounters, QpState, RecvWr,
    SendOp, SendWr, UdDest, wc,
};
use crate::cq::{UdSource, WcOpcode, WcStatus, WorkCompletion};
use crate::drop_reason::{DropReason, pkey_match};
use crate::mr::AccessFlags;
use crate::wire::FrameBuf;
use crate::wire::grh::GRH_LEN;
use crate::wire::{
    BthRepr, DethRepr, ImmDtRepr, Opcode, Operation, Psn, Qpn, RoceRepr, Transport, gid,
};
use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::net::IpAddr;

/// The high bit of a work request's Q_Key: send with the QP's own Q_Key (IBA §10.2.4).
const QKEY_USE_QP: u32 = 0x8000_0000;

/// An address handle: the resolved path to a UD destination's port (`ibv_ah`; IBA §11.2.2). It
/// is a checked value, copied into each work request, so it can never dangle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressHandle {
    path: Path,
    /// The path's frame headers, built here once for every packet sent through the handle.
    head: PathHead,
}

impl AddressHandle {
    /// An address handle for `path`.
    ///
    /// # Errors
    /// [`ModifyError::OutOfRange`] naming the field that does not fit its header (see
    /// [`Path::check`]).
    pub fn new(path: Path) -> Result<AddressHandle, ModifyError> {
        path.check()?;
        let head = PathHead::new(&path).ok_or(ModifyError::OutOfRange {
            name: "path",
            range: "a path that can be framed",
        })?;
        Ok(AddressHandle { path, head })
    }

    /// The path packets sent through this handle take.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A received UD packet as the endpoint hands it over, its ICRC checked.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UdInbound<'a> {
    pub roce: &'a RoceRepr,
    pub payload: &'a [u8],
    /// The IP source address: the sender's GID.
    pub src: IpAddr,
    /// The GRH area for the receive buffer ([`crate::wire::grh`]).
    pub grh: [u8; GRH_LEN],
}

/// A send work request on a UD QP, its destination and length checked at post time.
#[derive(Debug)]
struct UdWqe {
    wr: SendWr,
    dest: UdDest,
    len: u32,
}

/// An Unreliable Datagram queue pair.
#[derive(Debug)]
pub struct UdQp {
    qpn: Qpn,
    cfg: QpConfig,
    mtu: Mtu,
    state: QpState,
    p_key: u16,
    q_key: u32,
    /// PSN of the next packet; the receiver does not check it (IBA §9.8).
    next_psn: Psn,
    sq: VecDeque<UdWqe>,
    rq: VecDeque<RecvWr>,
    counters: QpCounters,
}

impl UdQp {
    /// A UD QP in the Reset state whose messages are at most `mtu` bytes. Of `cfg` it uses the
    /// PD, the CQs and the queue, SGE and inline limits; the rest are RC options.
    pub fn new(qpn: Qpn, cfg: QpConfig, mtu: Mtu) -> UdQp {
        UdQp {
            qpn,
            cfg,
            mtu,
            state: QpState::Reset,
            p_key: 0xffff,
            q_key: 0,
            next_psn: Psn::new(0),
            sq: VecDeque::new(),
            rq: VecDeque::new(),
            counters: QpCounters::default(),
        }
    }

    /// The QP number.
    pub fn qpn(&self) -> Qpn {
        self.qpn
    }
    /// The current state.
    pub fn state(&self) -> QpState {
        self.state
    }
    /// The creation-time configuration.
    pub fn config(&self) -> &QpConfig {
        &self.cfg
    }
    /// The largest message.
    pub fn mtu(&self) -> Mtu {
        self.mtu
    }
    /// The partition key.
    pub fn p_key(&self) -> u16 {
        self.p_key
    }
    /// The Q_Key received packets must carry.
    pub fn q_key(&self) -> u32 {
        self.q_key
    }
    /// Counters (`tx_packets`, `rx_packets`; the RC ones stay 0).
    pub fn counters(&self) -> &QpCounters {
        &self.counters
    }

    /// Moves the QP to `to` with `attr` (IBA §11.2.4.2, UD column). Entering Error flushes both
    /// queues; Reset empties them without completions.
    pub(crate) fn modify(
        &mut self,
        to: QpState,
        attr: &QpAttr,
        env: &mut Env<'_>,
    ) -> Result<(), ModifyError> {
        validate_ud(self.state, to, attr)?;
        if let Some(v) = attr.p_key {
            self.p_key = v;
        }
        if let Some(v) = attr.q_key {
            self.q_key = v;
        }
        if let Some(v) = attr.sq_psn {
            self.next_psn = Psn::new(v);
        }
        match to {
            QpState::Error => self.enter_error(env),
            QpState::Reset => *self = UdQp::new(self.qpn, self.cfg, self.mtu),
            _ => self.state = to,
        }
        Ok(())
    }

    /// Posts a UD send (`ibv_post_send`): SEND or SEND with immediate, with a [`UdDest`].
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), PostError> {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) {
            return Err(PostError::WrongState(self.state));
        }
        if self.sq.len() >= self.cfg.max_send_wr as usize {
            return Err(PostError::QueueFull);
        }
        if wr.sg_list.len() > self.cfg.max_send_sge as usize {
            return Err(PostError::TooManySge);
        }
        let dest = match (wr.op, wr.ud) {
            (SendOp::Send | SendOp::SendWithImm { .. }, Some(d))
                if d.remote_qpn != Qpn::MULTICAST =>
            {
                d
            }
            _ => return Err(PostError::Unsupported),
        };
        let len: u64 = match &wr.inline_data {
            Some(d) if d.len() > self.cfg.max_inline_data as usize => {
                return Err(PostError::BadInline);
            }
            Some(d) => d.len() as u64,
            None => wr.sg_list.iter().map(|s| u64::from(s.length)).sum(),
        };
        // Longer than the MTU is a completion error when the request runs; longer than IBA's
        // largest message cannot even be represented.
        let len = u32::try_from(len)
            .ok()
            .filter(|l| *l <= 1 << 31)
            .ok_or(PostError::MessageTooLong)?;
        self.sq.push_back(UdWqe { wr, dest, len });
        Ok(())
    }

    /// Posts a receive buffer (`ibv_post_recv`), allowed from Init on. A UD message lands
    /// [`GRH_LEN`] bytes into it, after the GRH area.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), PostError> {
        if matches!(self.state, QpState::Reset | QpState::Error) {
            return Err(PostError::WrongState(self.state));
        }
        if self.cfg.srq.is_some() {
            return Err(PostError::UsesSrq);
        }
        if self.rq.len() >= self.cfg.max_recv_wr as usize {
            return Err(PostError::QueueFull);
        }
        if wr.sg_list.len() > self.cfg.max_recv_sge as usize {
            return Err(PostError::TooManySge);
        }
        let total: u64 = wr.sg_list.iter().map(|s| u64::from(s.length)).sum();
        if total > 1 << 31 {
            return Err(PostError::MessageTooLong);
        }
        self.rq.push_back(wr);
        Ok(())
    }

    /// True when a send request may leave now: in RTS only, since SQD starts no new request
    /// and a UD request is done once its one packet is out.
    pub(crate) fn wants_to_send(&self) -> bool {
        self.state == QpState::Rts && !self.sq.is_empty()
    }

    /// Sends the oldest send request as one packet into `buf` and completes it. `None` with
    /// nothing to send, or when the request failed (the QP is then in SQE).
    pub(crate) fn poll_transmit(
        &mut self,
        env: &mut Env<'_>,
        buf: &mut dyn FrameBuf,
    ) -> Option<usize> {
        if self.state != QpState::Rts {
            return None;
        }
        let w = self.sq.pop_front()?;
        if w.len > self.mtu.bytes() {
            self.enter_sqe(env, &w, WcStatus::LocLenErr);
            return None;
        }
        let segs = match &w.wr.inline_data {
            Some(_) => Vec::new(),
            None => {
                match resolve_local(env.mrs, self.cfg.pd, &w.wr.sg_list, AccessFlags::empty()) {
                    Ok(s) => s,
                    Err(_) => {
                        self.enter_sqe(env, &w, WcStatus::LocProtErr);
                        return None;
                    }
                }
            }
        };
        let q_key = if w.dest.remote_qkey & QKEY_USE_QP != 0 {
            self.q_key
        } else {
            w.dest.remote_qkey
        };
        let (op, immdt) = match w.wr.op {
            SendOp::SendWithImm { imm } => {
                (Operation::SendOnlyWithImmediate, Some(ImmDtRepr { imm }))
            }
            _ => (Operation::SendOnly, None),
        };
        let bth = BthRepr {
            solicited: w.wr.solicited,
            ..BthRepr::new(
                Opcode::new(Transport::Ud, op),
                self.p_key,
                w.dest.remote_qpn,
                self.next_psn,
            )
        };
        let roce = RoceRepr {
            deth: Some(DethRepr {
                q_key,
                src_qp: self.qpn,
            }),
            immdt,
            ..RoceRepr::new(bth)
        };
        let mem = &*env.mem;
        let fill = |dst: &mut [u8]| match &w.wr.inline_data {
            Some(d) => dst.copy_from_slice(d),
            None => gather(mem, &segs, 0, dst),
        };
        let Some(n) = super::framing::emit(&w.dest.ah.head, &roce, w.len as usize, buf, fill)
        else {
            // The handle and the length were checked, so the frame always fits; should it not,
            // the request fails rather than vanish.
            self.enter_sqe(env, &w, WcStatus::LocQpOpErr);
            return None;
        };
        self.next_psn = self.next_psn.next();
        self.counters.tx_packets += 1;
        if w.wr.signaled {
            let c = wc(
                w.wr.wr_id,
                WcStatus::Success,
                WcOpcode::Send,
                w.len,
                self.qpn,
                w.dest.remote_qpn,
            );
            self.complete(env, self.cfg.send_cq, c);
        }
        Some(n)
    }

    /// Handles a UD packet whose BTH names this QP. Packets this QP must not accept are dropped
    /// for the reason returned; IBA makes every UD receive error but a bad receive buffer a
    /// silent drop (class D), and that one completes in error and moves the QP to Error.
    pub(crate) fn handle_packet(
        &mut self,
        env: &mut Env<'_>,
        pkt: &UdInbound<'_>,
    ) -> Result<(), DropReason> {
        let roce = pkt.roce;
        if !matches!(
            self.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            return Err(DropReason::QpNotReady);
        }
        if !pkey_match(roce.bth.p_key, self.p_key) {
            return Err(DropReason::BadPkey);
        }
        // Every UD opcode carries a DETH (wire::opcode's layout table).
        let deth = roce.deth.ok_or(DropReason::Malformed)?;
        if deth.q_key != self.q_key {
            return Err(DropReason::BadQkey);
        }
        if pkt.payload.len() > self.mtu.bytes() as usize {
            return Err(DropReason::TooLong);
        }
        let taken = match self.cfg.srq {
            Some(id) => env.srqs.take(id),
            None => self.rq.pop_front(),
        };
        let Some(wr) = taken else {
            return Err(DropReason::NoRecvWqe);
        };
        let Ok(segs) = resolve_local(env.mrs, self.cfg.pd, &wr.sg_list, AccessFlags::LOCAL_WRITE)
        else {
            let c = wc(
                wr.wr_id,
                WcStatus::LocProtErr,
                WcOpcode::Recv,
                0,
                self.qpn,
                deth.src_qp,
            );
            self.complete(env, self.cfg.recv_cq, c);
            self.enter_error(env);
            return Ok(());
        };
        let cap: u64 = segs.iter().map(|s| u64::from(s.len)).sum();
        let byte_len = GRH_LEN + pkt.payload.len();
        if byte_len as u64 > cap {
            // As rdma_rxe, the WQE stays posted for the next message, which may fit.
            match self.cfg.srq {
                Some(id) => env.srqs.untake(id, wr),
                None => self.rq.push_front(wr),
            }
            return Err(DropReason::TooLong);
        }
        scatter(env.mem, &segs, 0, &pkt.grh);
        scatter(env.mem, &segs, GRH_LEN as u64, pkt.payload);
        self.counters.rx_packets += 1;
        let c = WorkCompletion {
            imm_data: roce.immdt.map(|i| i.imm),
            ud: Some(UdSource {
                sgid: gid::gid(pkt.src),
                pkey_index: 0,
            }),
            ..wc(
                wr.wr_id,
                WcStatus::Success,
                WcOpcode::Recv,
                byte_len as u32,
                self.qpn,
                deth.src_qp,
            )
        };
        self.complete(env, self.cfg.recv_cq, c);
        Ok(())
    }

    /// Delivers a completion; a full CQ is an overrun, fatal for the QP (IBA §11.4.2.1).
    fn complete(&mut self, env: &mut Env<'_>, cq: CqId, c: WorkCompletion) {
        if !(env.complete)(cq, c) && self.state != QpState::Error {
            self.enter_error(env);
        }
    }

    /// A send request failed: it completes with `status`, the rest of the send queue flushes,
    /// and the QP enters SQE; the receive queue keeps working (IBA §10.3.1).
    fn enter_sqe(&mut self, env: &mut Env<'_>, failed: &UdWqe, status: WcStatus) {
        self.state = QpState::Sqe;
        let qpn = self.qpn;
        let c = wc(
            failed.wr.wr_id,
            status,
            WcOpcode::Send,
            0,
            qpn,
            failed.dest.remote_qpn,
        );
        self.complete(env, self.cfg.send_cq, c);
        self.flush_sq(env);
    }

    /// Enters Error: every outstanding request completes with `WR_FLUSH_ERR`, unsignaled ones
    /// included (IBA §10.3.1, §11.4.2.1).
    fn enter_error(&mut self, env: &mut Env<'_>) {
        self.state = QpState::Error;
        self.flush_sq(env);
        let (qpn, cq) = (self.qpn, self.cfg.recv_cq);
        for wr in core::mem::take(&mut self.rq) {
            let c = wc(
                wr.wr_id,
                WcStatus::WrFlushErr,
                WcOpcode::Recv,
                0,
                qpn,
                Qpn::new(0),
            );
            (env.complete)(cq, c);
        }
    }

    fn flush_sq(&mut self, env: &mut Env<'_>) {
        let (qpn, cq) = (self.qpn, self.cfg.send_cq);
        for w in core::mem::take(&mut self.sq) {
            let c = wc(
                w.wr.wr_id,
                WcStatus::WrFlushErr,
                WcOpcode::Send,
                0,
                qpn,
                w.dest.remote_qpn,
            );
            if !(env.complete)(cq, c) && self.state != QpState::Error {
                self.enter_error(env);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::ReceiverCc;
    use crate::mr::{MrInfo, MrTable, VecMemory};
    use crate::qp::Sge;
    use crate::time::Instant;
    use crate::wire::frame::Ecn;
    use crate::wire::{FrameRepr, grh};
    use alloc::vec;
    use core::net::Ipv4Addr;
    use rand_chacha::ChaCha12Rng;
    use rand_core::SeedableRng;

    const QKEY: u32 = 0x1111_1111;

    /// One UD QP in RTS with a registered buffer, and what its environment collects.
    struct Rig {
        qp: UdQp,
        mrs: MrTable,
        mem: VecMemory,
        mr: MrInfo,
        rx_cc: ReceiverCc,
        srqs: crate::srq::SrqTable,
        wcs: Vec<WorkCompletion>,
    }

    impl Rig {
        fn new(mtu: Mtu) -> Rig {
            let mut mrs = MrTable::new(ChaCha12Rng::seed_from_u64(7));
            let pd = mrs.alloc_pd();
            let mr = mrs
                .register(pd, 0x1000, 8192, AccessFlags::LOCAL_WRITE)
                .unwrap();
            let mut mem = VecMemory::new();
            mem.insert(mr.id, vec![0; 8192]);
            let cfg = QpConfig::new(pd, CqId(0), CqId(0));
            let mut rig = Rig {
                qp: UdQp::new(Qpn::new(0x11), cfg, mtu),
                mrs,
                mem,
                mr,
                rx_cc: ReceiverCc::default(),
                srqs: crate::srq::SrqTable::default(),
                wcs: Vec::new(),
            };
            let init = QpAttr {
                p_key: Some(0xffff),
                q_key: Some(QKEY),
                ..QpAttr::default()
            };
            rig.modify(QpState::Init, &init).unwrap();
            rig.modify(QpState::Rtr, &QpAttr::default()).unwrap();
            let rts = QpAttr {
                sq_psn: Some(0xffffff),
                ..QpAttr::default()
            };
            rig.modify(QpState::Rts, &rts).unwrap();
            rig
        }

        fn with_env<R>(&mut self, f: impl FnOnce(&mut UdQp, &mut Env<'_>) -> R) -> R {
            let wcs = &mut self.wcs;
            let mut complete = |_: CqId, c: WorkCompletion| {
                wcs.push(c);
                true
            };
            let mut env = Env {
                now: Instant::ZERO,
                mrs: &self.mrs,
                mem: &mut self.mem,
                complete: &mut complete,
                rx_cc: &mut self.rx_cc,
                srqs: &mut self.srqs,
            };
            f(&mut self.qp, &mut env)
        }

        fn modify(&mut self, to: QpState, attr: &QpAttr) -> Result<(), ModifyError> {
            self.with_env(|qp, env| qp.modify(to, attr, env))
        }

        fn transmit(&mut self) -> Option<Vec<u8>> {
            let mut buf = Vec::new();
            let n = self.with_env(|qp, env| qp.poll_transmit(env, &mut buf))?;
            buf.truncate(n);
            Some(buf)
        }

        fn sge(&self, off: u64, len: u32) -> Sge {
            Sge {
                addr: self.mr.addr + off,
                length: len,
                lkey: self.mr.lkey,
            }
        }

        fn recv(&mut self, wr_id: u64, off: u64, len: u32) {
            let sg_list = vec![self.sge(off, len)];
            self.qp.post_recv(RecvWr { wr_id, sg_list }).unwrap();
        }

        fn deliver(&mut self, roce: &RoceRepr, payload: &[u8]) -> Result<(), DropReason> {
            let pkt = UdInbound {
                roce,
                payload,
                src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                grh: [0x47; GRH_LEN],
            };
            self.with_env(|qp, env| qp.handle_packet(env, &pkt))
        }

        fn bytes(&self, off: usize, len: usize) -> &[u8] {
            &self.mem.get(self.mr.id).unwrap()[off..off + len]
        }
    }

    fn dest(q_key: u32) -> UdDest {
        let path = Path {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            vlan: None,
            src_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            dst_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            dscp: 0,
            ecn: Ecn::NotEct,
            hop_limit: 64,
            udp_src_port: 0xdf94,
            flow_label: 0,
        };
        UdDest {
            ah: AddressHandle::new(path).unwrap(),
            remote_qpn: Qpn::new(0x12),
            remote_qkey: q_key,
        }
    }

    /// A UD SEND Only (with immediate `imm`) to this rig's QP.
    fn packet(q_key: u32, imm: Option<u32>) -> RoceRepr {
        let op = match imm {
            Some(_) => Operation::SendOnlyWithImmediate,
            None => Operation::SendOnly,
        };
        RoceRepr {
            deth: Some(DethRepr {
                q_key,
                src_qp: Qpn::new(0x33),
            }),
            immdt: imm.map(|imm| ImmDtRepr { imm }),
            ..RoceRepr::new(BthRepr::new(
                Opcode::new(Transport::Ud, op),
                0xffff,
                Qpn::new(0x11),
                Psn::new(5),
            ))
        }
    }

    #[test]
    fn ud_modify_takes_qkey_and_no_connection() {
        let mut r = Rig::new(Mtu::Mtu1024);
        assert_eq!(r.qp.q_key(), QKEY);
        r.modify(QpState::Reset, &QpAttr::default()).unwrap();
        let no_qkey = QpAttr {
            p_key: Some(0xffff),
            ..QpAttr::default()
        };
        assert_eq!(
            r.modify(QpState::Init, &no_qkey),
            Err(ModifyError::Missing("q_key"))
        );
        let init = QpAttr {
            q_key: Some(7),
            ..no_qkey
        };
        r.modify(QpState::Init, &init).unwrap();
        let rc_only = QpAttr {
            dest_qpn: Some(Qpn::new(0x12)),
            ..QpAttr::default()
        };
        assert_eq!(
            r.modify(QpState::Rtr, &rc_only),
            Err(ModifyError::NotAllowed("dest_qpn"))
        );
        r.modify(QpState::Rtr, &QpAttr::default()).unwrap();
        assert_eq!(
            r.modify(QpState::Rts, &QpAttr::default()),
            Err(ModifyError::Missing("sq_psn"))
        );
        let new_qkey = QpAttr {
            sq_psn: Some(1),
            q_key: Some(9),
            ..QpAttr::default()
        };
        r.modify(QpState::Rts, &new_qkey).unwrap();
        assert_eq!((r.qp.state(), r.qp.q_key()), (QpState::Rts, 9));
    }

    #[test]
    fn ud_post_send_refuses_what_ud_cannot_carry() {
        let mut r = Rig::new(Mtu::Mtu1024);
        let send = |op| SendWr::new(1, op).inline(vec![1, 2, 3]);
        assert_eq!(
            r.qp.post_send(send(SendOp::Send)),
            Err(PostError::Unsupported),
            "no destination"
        );
        let write = SendOp::Write {
            remote_addr: 0,
            rkey: crate::mr::Rkey::new(1),
        };
        assert_eq!(
            r.qp.post_send(send(write).ud(dest(QKEY))),
            Err(PostError::Unsupported)
        );
        let mut multicast = dest(QKEY);
        multicast.remote_qpn = Qpn::MULTICAST;
        assert_eq!(
            r.qp.post_send(send(SendOp::Send).ud(multicast)),
            Err(PostError::Unsupported)
        );
        let long_inline = SendWr::new(2, SendOp::Send)
            .inline(vec![0; 65])
            .ud(dest(QKEY));
        assert_eq!(r.qp.post_send(long_inline), Err(PostError::BadInline));
        assert!(r.qp.post_send(send(SendOp::Send).ud(dest(QKEY))).is_ok());
    }

    /// IBA §9.3.2, Table 38: SEND Only with Immediate of the UD class (0x65) with a DETH
    /// naming this QP and the Q_Key; the PSN wraps and AckReq stays clear.
    #[test]
    fn ud_send_is_one_send_only_packet_with_deth() {
        let mut r = Rig::new(Mtu::Mtu1024);
        r.mem.get_mut(r.mr.id).unwrap()[..4].copy_from_slice(b"ping");
        let wr = SendWr::new(1, SendOp::SendWithImm { imm: 0xfeed })
            .sge(r.sge(0, 4))
            .ud(dest(0x1234));
        r.qp.post_send(wr).unwrap();
        let own = SendWr::new(2, SendOp::Send)
            .inline(vec![9; 3])
            .unsignaled()
            .ud(dest(0x8000_0000));
        r.qp.post_send(own).unwrap();
        let f = r.transmit().unwrap();
        let (frame, payload) = FrameRepr::parse(&f).unwrap();
        let roce = frame.roce;
        assert_eq!(roce.bth.opcode.0, 0x65);
        assert_eq!(roce.bth.dest_qp, Qpn::new(0x12));
        assert_eq!(roce.bth.psn, Psn::new(0xffffff));
        assert!(!roce.bth.ack_req);
        assert_eq!(
            roce.deth,
            Some(DethRepr {
                q_key: 0x1234,
                src_qp: Qpn::new(0x11)
            })
        );
        assert_eq!(roce.immdt, Some(ImmDtRepr { imm: 0xfeed }));
        assert_eq!(payload, b"ping");
        let f = r.transmit().unwrap();
        let (frame, payload) = FrameRepr::parse(&f).unwrap();
        assert_eq!(frame.roce.bth.opcode.0, 0x64);
        assert_eq!(frame.roce.bth.psn, Psn::new(0), "PSN wraps");
        assert_eq!(frame.roce.deth.unwrap().q_key, QKEY, "high bit: own Q_Key");
        assert_eq!(payload, [9, 9, 9]);
        assert_eq!(r.transmit(), None);
        assert_eq!(r.wcs.len(), 1, "the unsignaled send completes silently");
        let c = r.wcs[0];
        assert_eq!(
            (c.wr_id, c.status, c.opcode),
            (1, WcStatus::Success, WcOpcode::Send)
        );
        assert_eq!(r.qp.counters().tx_packets, 2);
    }

    #[test]
    fn ud_send_error_enters_sqe_and_flushes_the_send_queue() {
        let mut r = Rig::new(Mtu::Mtu256);
        r.recv(9, 0, 512);
        let long = SendWr::new(1, SendOp::Send)
            .sge(r.sge(0, 257))
            .ud(dest(QKEY));
        r.qp.post_send(long).unwrap();
        let bad_lkey = SendWr::new(2, SendOp::Send)
            .sge(Sge {
                lkey: crate::mr::Lkey::new(0xdead),
                ..r.sge(0, 8)
            })
            .ud(dest(QKEY));
        r.qp.post_send(bad_lkey.clone()).unwrap();
        assert_eq!(r.transmit(), None);
        assert_eq!(r.qp.state(), QpState::Sqe);
        let got: Vec<_> = r.wcs.iter().map(|c| (c.wr_id, c.status)).collect();
        assert_eq!(got, [(1, WcStatus::LocLenErr), (2, WcStatus::WrFlushErr)]);
        // The receive queue still works in SQE.
        assert_eq!(r.deliver(&packet(QKEY, None), &[1; 4]), Ok(()));
        assert_eq!(r.wcs[2].wr_id, 9);
        // SQE -> RTS resumes sending; a bad L_Key is a local protection error.
        assert_eq!(
            r.qp.post_send(bad_lkey.clone()),
            Err(PostError::WrongState(QpState::Sqe))
        );
        r.modify(QpState::Rts, &QpAttr::default()).unwrap();
        r.qp.post_send(bad_lkey).unwrap();
        assert_eq!(r.transmit(), None);
        assert_eq!(r.wcs[3].status, WcStatus::LocProtErr);
        assert_eq!(r.qp.state(), QpState::Sqe);
    }

    /// The GRH area fills the first 40 bytes, the payload follows, and byte_len counts both
    /// (as libibverbs reports it); the completion names the DETH's source QP and the sender.
    #[test]
    fn ud_receive_places_grh_area_then_payload() {
        let mut r = Rig::new(Mtu::Mtu1024);
        r.recv(7, 100, 40 + 64);
        assert_eq!(r.deliver(&packet(QKEY, Some(0xabcd)), b"hello"), Ok(()));
        assert_eq!(r.bytes(100, 40), [0x47; 40]);
        assert_eq!(r.bytes(140, 5), b"hello");
        let c = r.wcs[0];
        assert_eq!(
            (c.wr_id, c.status, c.opcode),
            (7, WcStatus::Success, WcOpcode::Recv)
        );
        assert_eq!(c.byte_len, 45);
        assert_eq!(c.imm_data, Some(0xabcd));
        assert_eq!(c.src_qp, Qpn::new(0x33));
        assert!(c.with_grh());
        assert_eq!(
            c.ud,
            Some(UdSource {
                sgid: Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped(),
                pkey_index: 0
            })
        );
        assert_eq!(grh::source_gid(&[0; 40]), core::net::Ipv6Addr::UNSPECIFIED);
    }

    #[test]
    fn ud_receive_drops_by_reason_and_keeps_the_wqe() {
        let mut r = Rig::new(Mtu::Mtu256);
        let ok = packet(QKEY, None);
        assert_eq!(r.deliver(&ok, &[0; 8]), Err(DropReason::NoRecvWqe));
        r.recv(1, 0, 40 + 8);
        assert_eq!(
            r.deliver(&packet(QKEY ^ 1, None), &[0; 8]),
            Err(DropReason::BadQkey)
        );
        let mut bad_pkey = ok;
        bad_pkey.bth.p_key = 0x8001;
        assert_eq!(r.deliver(&bad_pkey, &[0; 8]), Err(DropReason::BadPkey));
        assert_eq!(r.deliver(&ok, &[0; 257]), Err(DropReason::TooLong), "MTU");
        assert_eq!(r.deliver(&ok, &[0; 9]), Err(DropReason::TooLong), "buffer");
        assert!(r.wcs.is_empty());
        assert_eq!(r.deliver(&ok, &[0; 8]), Ok(()), "the WQE stayed posted");
        assert_eq!(r.wcs[0].byte_len, 48);
        assert_eq!(r.qp.counters().rx_packets, 1);
        r.modify(QpState::Error, &QpAttr::default()).unwrap();
        assert_eq!(r.deliver(&ok, &[0; 8]), Err(DropReason::QpNotReady));
    }

    #[test]
    fn ud_bad_receive_buffer_completes_in_error_and_flushes() {
        let mut r = Rig::new(Mtu::Mtu1024);
        let sg_list = vec![Sge {
            lkey: crate::mr::Lkey::new(0xdead),
            ..r.sge(0, 64)
        }];
        r.qp.post_recv(RecvWr { wr_id: 1, sg_list }).unwrap();
        r.recv(2, 0, 64);
        r.qp.post_send(SendWr::new(3, SendOp::Send).ud(dest(QKEY)))
            .unwrap();
        assert_eq!(r.deliver(&packet(QKEY, None), &[0; 4]), Ok(()));
        assert_eq!(r.qp.state(), QpState::Error);
        let got: Vec<_> = r.wcs.iter().map(|c| (c.wr_id, c.status)).collect();
        assert_eq!(
            got,
            [
                (1, WcStatus::LocProtErr),
                (3, WcStatus::WrFlushErr),
                (2, WcStatus::WrFlushErr)
            ]
        );
        assert_eq!(
            r.qp.post_recv(RecvWr {
                wr_id: 4,
                sg_list: Vec::new()
            }),
            Err(PostError::WrongState(QpState::Error))
        );
    }

    #[test]
    fn ud_address_handle_checks_the_path() {
        let mut p = *dest(0).ah.path();
        p.dscp = 64;
        assert_eq!(
            AddressHandle::new(p),
            Err(ModifyError::OutOfRange {
                name: "path.dscp",
                range: "0..=63"
            })
        );
        p.dscp = 0;
        p.dst_ip = IpAddr::V6(core::net::Ipv6Addr::LOCALHOST);
        assert!(AddressHandle::new(p).is_err(), "mixed IP versions");
    }
}
