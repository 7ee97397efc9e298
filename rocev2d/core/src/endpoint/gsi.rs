//! QP1, the General Services Interface (IBA Vol. 1 §13.5), as far as the Communication Manager
//! needs it: CM MADs in and out as UD SEND Only packets between QP1s, and the CM's events wired
//! to the endpoint's RC QPs.
//!
//! The endpoint owns an optional [`Gsi`] ([`Endpoint::enable_cm`]). A UD packet to QP1 is
//! checked here (SEND Only, default P_Key, the GSI Q_Key 0x80010000, from the peer's QP1, a
//! 256-byte MAD of the CM class) and handed to the [`Cm`] with the frame's GIDs; every MAD the
//! CM emits leaves as a frame to the peer's QP1 through [`Endpoint::poll_transmit`], ahead of
//! the QPs' traffic. The CM stays the one owner of connection state; this module only keeps, per
//! connection, which QP it drives and the peer's MAC, and moves that QP as the CM's events say:
//!
//! * passive side: [`Endpoint::cm_accept`] moves the QP INIT → RTR with the REQ's QPN, PSN, MTU
//!   and path before the REP leaves, and [`Event::Established`] (the RTU, or the peer's first
//!   packet on the QP in RTR, which stands in for a lost RTU) moves it to RTS;
//! * active side: [`Endpoint::cm_connect`] sends the REQ for a QP in INIT, and
//!   [`Event::Established`] (the REP) moves it to RTR and RTS before the RTU leaves;
//! * [`Event::Rejected`], [`Event::TimedOut`] and [`Event::Disconnected`] move it to ERROR, as
//!   does [`Endpoint::cm_disconnect`] before its DREQ leaves (what rdma_cm's `rdma_disconnect`
//!   does); after [`Event::TimeWaitExit`] the QP is the application's again (to reset or
//!   destroy).
//!
//! * SIDR ([`Endpoint::cm_sidr_request`], [`Endpoint::cm_sidr_reply`]) moves no QP: the
//!   endpoint only remembers the peer's MAC (given, or learnt from the SIDR_REQ's frame) until
//!   the request is answered or over.
//!
//! Every event then reaches the application through [`Endpoint::poll_cm_event`].
//!
//! Deviations:
//! * only the CM class is served on QP1; MADs of other classes are dropped
//!   ([`DropReason::BadMad`]), and so are MADs from a QP other than the peer's QP1 (every answer
//!   goes to QP1) and UD packets other than a plain SEND Only (with immediate data, say);
//! * MADs leave with rdma_rxe's QP1 header values (`rping_cm.pcap`): UDP source port 0xd872,
//!   TTL 64, traffic class 0, AckReq set, PSNs counting from 0;
//! * the peer's MAC is learnt from the frame that carried its REQ, or given to
//!   [`Endpoint::cm_connect`]; a datagram datapath has none (its kernel resolves it), so its
//!   frames carry zeros there;
//! * a QP transition the CM's event asks for that the QP refuses (the application moved or
//!   destroyed it meanwhile) disconnects the connection: the DREQ tells the peer, and
//!   [`Event::Disconnected`] follows.

use alloc::collections::{BTreeMap, VecDeque};
use core::net::Ipv6Addr;

use super::{DropReason, Endpoint, EndpointError};
use crate::cm::{
    AcceptParams, Cm, CmConfig, CmError, ConnId, ConnectParams, Event, QpParams, RejectReason,
    ServiceId, SidrId, SidrParams, SidrReplyParams, Transmit,
};
use crate::drop_reason::pkey_match;
use crate::mr::Memory;
use crate::qp::state::MAX_RD_ATOMIC;
use crate::qp::{ConnectAttr, ExtCaps, Mtu, Path, QpAttr, QpState, framing};
use crate::time::Instant;
use crate::wire::FrameBuf;
use crate::wire::frame::Ecn;
use crate::wire::gid::gid_to_ip;
use crate::wire::mad::{BASE_VERSION, CM_CLASS_VERSION, DEFAULT_P_KEY, mgmt_class};
use crate::wire::{
    BthRepr, DethRepr, GSI_Q_KEY, MAD_LEN, MadPacket, Opcode, Operation, Psn, Qpn, RoceRepr,
    Transport,
};

/// The UDP source port of every MAD frame: the one rdma_rxe sends QP1 traffic from
/// (`rping_cm.pcap`), so our MADs look like its.
pub const GSI_UDP_SRC_PORT: u16 = 0xd872;

/// The RNR NAK timer code a CM-connected QP sends its peer: the REQ and REP carry none, so the
/// responder picks it; 12 is 0.64 ms (IBA §9.7's encoding, `wire::aeth`).
const MIN_RNR_TIMER: u8 = 12;

/// What [`Endpoint::enable_cm`] needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GsiConfig {
    /// Our MAC address: the source of the MAD frames and of the connections' paths.
    pub mac: [u8; 6],
    /// The CM's own configuration.
    pub cm: CmConfig,
    /// Seed of the CM's Communication and transaction IDs (production: from the OS).
    pub seed: u64,
    /// The interface's IP MTU. A REQ proposes the largest path MTU that fits it
    /// ([`Mtu::largest_within`]), as Linux's rdma_cm proposes its netdev's, unless the caller
    /// asks for less; a REQ received runs at the smaller of its own and that.
    pub link_mtu: u32,
}

/// What the endpoint knows of one connection beyond the CM's state: the QP it drives and the
/// peer's MAC.
#[derive(Debug, Clone, Copy)]
struct Binding {
    /// The QP; `None` on the passive side until it accepts.
    qpn: Option<Qpn>,
    peer_gid: Ipv6Addr,
    peer_mac: [u8; 6],
    /// The path MTU the connection's QP runs at: the REQ's, at most what our link carries;
    /// `None` for a REQ whose code is no MTU, refused on accepting.
    path_mtu: Option<Mtu>,
}

/// QP1 and the CM behind it.
#[derive(Debug)]
pub(super) struct Gsi {
    mac: [u8; 6],
    link_mtu: u32,
    cm: Cm,
    /// PSN of QP1's next packet.
    psn: Psn,
    /// MADs to send, with the peer's MAC.
    out: VecDeque<(Transmit, [u8; 6])>,
    bindings: BTreeMap<ConnId, Binding>,
    /// The peer GID and MAC of each SIDR request in progress, either side.
    sidr_macs: BTreeMap<SidrId, (Ipv6Addr, [u8; 6])>,
    events: VecDeque<Event>,
}

impl Gsi {
    /// QP1 of an endpoint; with a QPN `block` (an engine shard), its CM allocates the
    /// Communication IDs of that block.
    fn new(cfg: GsiConfig, block: Option<u32>) -> Gsi {
        let cm = Cm::new(cfg.cm, cfg.seed);
        Gsi {
            mac: cfg.mac,
            link_mtu: cfg.link_mtu,
            cm: match block {
                Some(b) => cm.with_comm_id_block(b),
                None => cm,
            },
            psn: Psn::new(0),
            out: VecDeque::new(),
            bindings: BTreeMap::new(),
            sidr_macs: BTreeMap::new(),
            events: VecDeque::new(),
        }
    }

    pub(super) fn is_idle(&self) -> bool {
        self.out.is_empty() && self.cm.poll_timeout().is_none()
    }

    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.cm.poll_timeout()
    }

    /// Writes the next MAD frame into `buf`.
    pub(super) fn poll_transmit(&mut self, buf: &mut dyn FrameBuf) -> Option<usize> {
        // A MAD whose GIDs are of different IP families cannot be framed; `cm_connect` refuses
        // such parameters and received frames have one family, so none is ever queued.
        let (t, dst_mac) = self.out.pop_front()?;
        let path = Path {
            src_mac: self.mac,
            dst_mac,
            vlan: None,
            src_ip: gid_to_ip(t.local_gid),
            dst_ip: gid_to_ip(t.peer_gid),
            dscp: 0,
            ecn: Ecn::NotEct,
            hop_limit: 64,
            udp_src_port: GSI_UDP_SRC_PORT,
            flow_label: 0,
        };
        let bth = BthRepr {
            ack_req: true,
            ..BthRepr::new(
                Opcode::new(Transport::Ud, Operation::SendOnly),
                DEFAULT_P_KEY,
                Qpn::GSI,
                self.psn,
            )
        };
        let roce = RoceRepr {
            deth: Some(DethRepr {
                q_key: GSI_Q_KEY,
                src_qp: Qpn::GSI,
            }),
            ..RoceRepr::new(bth)
        };
        let n = framing::emit(&framing::PathHead::new(&path)?, &roce, MAD_LEN, buf, |d| {
            d.copy_from_slice(&t.mad)
        })?;
        self.psn = self.psn.next();
        Some(n)
    }

    /// The MAC a MAD for `peer_gid` goes to: the frame being answered's, else the one learnt
    /// for a connection or SIDR request with that peer, else none (zeros: a datagram datapath
    /// resolves it).
    fn mac_for(&self, peer_gid: Ipv6Addr, answering: Option<(Ipv6Addr, [u8; 6])>) -> [u8; 6] {
        if let Some((_, mac)) = answering.filter(|(g, _)| *g == peer_gid) {
            return mac;
        }
        let conns = self.bindings.values().map(|b| (b.peer_gid, b.peer_mac));
        conns
            .chain(self.sidr_macs.values().copied())
            .find(|(g, _)| *g == peer_gid)
            .map_or([0; 6], |(_, mac)| mac)
    }

    /// The path MTU of a connection with `peer_gid` whose REQ carries `code`: at most what
    /// our link carries to that IP family; `None` when either is no MTU.
    fn path_mtu(&self, peer_gid: Ipv6Addr, code: u8) -> Option<Mtu> {
        let link = Mtu::largest_within(self.link_mtu, gid_to_ip(peer_gid).is_ipv6())?;
        Mtu::from_code(code).map(|m| m.min(link))
    }
}

/// Checks a UD packet to QP1 before its payload goes to the CM.
fn check_mad(roce: &RoceRepr, payload: &[u8]) -> Result<(), DropReason> {
    if roce.bth.opcode.transport() != Transport::Ud {
        return Err(DropReason::WrongTransport);
    }
    if !pkey_match(roce.bth.p_key, DEFAULT_P_KEY) {
        return Err(DropReason::BadPkey);
    }
    let deth = roce.deth.ok_or(DropReason::Malformed)?;
    if deth.q_key != GSI_Q_KEY {
        return Err(DropReason::BadQkey);
    }
    let mad = MadPacket::new_checked(payload).map_err(|_| DropReason::BadMad)?;
    let is_cm = payload.len() == MAD_LEN
        && mad.base_version() == BASE_VERSION
        && mad.mgmt_class() == mgmt_class::CM
        && mad.class_version() == CM_CLASS_VERSION;
    let send_only = roce.bth.opcode == Opcode::new(Transport::Ud, Operation::SendOnly);
    if deth.src_qp != Qpn::GSI || !send_only || !is_cm {
        return Err(DropReason::BadMad);
    }
    Ok(())
}

/// The INIT→RTR and RTR→RTS attributes of a connection's QP, from what the CM negotiated and
/// the path MTU the endpoint settled on.
fn qp_attrs(qp: &QpParams, mtu: Mtu, src_mac: [u8; 6], dst_mac: [u8; 6]) -> (QpAttr, QpAttr) {
    let attr = ConnectAttr {
        path: Path {
            src_mac,
            dst_mac,
            vlan: None,
            src_ip: gid_to_ip(qp.local_gid),
            dst_ip: gid_to_ip(qp.peer_gid),
            dscp: qp.traffic_class >> 2,
            // ECN-capable, as every rocev2 QP, so switches mark instead of dropping.
            ecn: Ecn::Ect0,
            hop_limit: qp.hop_limit,
            // Per-QP ECMP entropy, as the datapath's own bring-up picks it.
            udp_src_port: 0xc000 | (qp.local_qpn.value() as u16 & 0x3fff),
            flow_label: qp.flow_label,
        },
        mtu,
        dest_qpn: qp.peer_qpn,
        rq_psn: qp.rq_psn.value(),
        sq_psn: qp.sq_psn.value(),
        rd_atomic: qp.max_rd_atomic.min(MAX_RD_ATOMIC),
        min_rnr_timer: MIN_RNR_TIMER,
        timeout: qp.local_ack_timeout,
        retry_cnt: qp.retry_count,
        rnr_retry: qp.rnr_retry_count,
        // A standard peer: rocev2's extensions are offered through private data.
        peer_ext: ExtCaps::default(),
    };
    let rtr = QpAttr {
        max_dest_rd_atomic: Some(qp.max_dest_rd_atomic.min(MAX_RD_ATOMIC)),
        ..attr.rtr()
    };
    (rtr, attr.rts())
}

impl Endpoint {
    /// Opens QP1 with a Communication Manager behind it: from now on CM MADs to QP1 are
    /// answered, and the `cm_*` calls connect RC QPs to peers. Calling it again replaces the
    /// CM and forgets its connections. On an engine shard ([`Endpoint::with_qpn_block`]) the
    /// CM's Communication IDs carry the shard's block ([`Cm::with_comm_id_block`]), so the
    /// datapath can bring each MAD to the shard that owns its connection ([`crate::cm::route`]).
    pub fn enable_cm(&mut self, cfg: GsiConfig) {
        self.gsi = Some(alloc::boxed::Box::new(Gsi::new(cfg, self.qpn_block)));
    }

    /// The CM, if [`Self::enable_cm`] was called: its counters and connection states.
    pub fn cm(&self) -> Option<&Cm> {
        self.gsi.as_ref().map(|g| &g.cm)
    }

    fn gsi_mut(&mut self) -> Result<&mut Gsi, EndpointError> {
        self.gsi.as_deref_mut().ok_or(EndpointError::CmNotEnabled)
    }

    /// Accepts REQs for `service_id` ([`ServiceId::rdma_cm`] for rdma_cm peers); they come out
    /// of [`Self::poll_cm_event`] as [`Event::ConnectRequest`].
    pub fn cm_listen(&mut self, service_id: ServiceId) -> Result<(), EndpointError> {
        Ok(self.gsi_mut()?.cm.listen(service_id)?)
    }

    /// Stops accepting REQs for `service_id`; returns whether anyone listened.
    pub fn cm_unlisten(&mut self, service_id: ServiceId) -> Result<bool, EndpointError> {
        Ok(self.gsi_mut()?.cm.unlisten(service_id))
    }

    /// Active side: sends a REQ for `params.local_qpn`, an RC QP in INIT, to the peer at
    /// `params.peer_gid` whose MAC is `peer_mac`. When the REP comes the QP is moved to RTR and
    /// RTS and [`Event::Established`] is reported. With `params.moves_qp` false no QP is
    /// checked or moved: the REQ only announces `local_qpn`, for the application to move.
    ///
    /// # Errors
    /// [`EndpointError::CmNotEnabled`]; [`EndpointError::UnknownQp`] unless the QP is RC;
    /// [`EndpointError::InUse`] while another connection (time-wait included) drives it;
    /// [`EndpointError::Modify`] (`BadTransition`) unless it is in INIT; [`EndpointError::Cm`]
    /// for parameters the REQ cannot carry (a path MTU code that is none, a link too small
    /// for the smallest MTU) or GIDs of different IP families.
    pub fn cm_connect(
        &mut self,
        now: Instant,
        params: ConnectParams,
        peer_mac: [u8; 6],
    ) -> Result<ConnId, EndpointError> {
        if params.moves_qp {
            self.expect_init(params.local_qpn)?;
        }
        if gid_to_ip(params.local_gid).is_ipv4() != gid_to_ip(params.peer_gid).is_ipv4() {
            return Err(CmError::InvalidParams.into());
        }
        let (qpn, peer_gid) = (params.moves_qp.then_some(params.local_qpn), params.peer_gid);
        let gsi = self.gsi_mut()?;
        // The REQ proposes what the link carries, or the caller's smaller MTU.
        let mtu = gsi
            .path_mtu(peer_gid, params.path_mtu)
            .ok_or(CmError::InvalidParams)?;
        let params = ConnectParams {
            path_mtu: mtu.code(),
            ..params
        };
        let conn = gsi.cm.connect(now, params)?;
        let b = Binding {
            qpn,
            peer_gid,
            peer_mac,
            path_mtu: Some(mtu),
        };
        gsi.bindings.insert(conn, b);
        self.drain_cm(None);
        Ok(conn)
    }

    /// Passive side: accepts an [`Event::ConnectRequest`] with `params.local_qpn`, an RC QP in
    /// INIT, which moves to RTR at once (so the peer's first packets find it) and to RTS when
    /// the connection is established (with `params.moves_qp` false, the application's to move:
    /// the REP only announces it).
    ///
    /// # Errors
    /// As [`Self::cm_connect`]; [`EndpointError::Cm`] also for an unknown connection, one not
    /// waiting for an answer, or a REQ whose path MTU code is not an MTU.
    pub fn cm_accept(
        &mut self,
        now: Instant,
        conn: ConnId,
        params: AcceptParams,
        mem: &mut dyn Memory,
    ) -> Result<(), EndpointError> {
        let (qpn, moves_qp) = (params.local_qpn, params.moves_qp);
        if moves_qp {
            self.expect_init(qpn)?;
        }
        let gsi = self.gsi_mut()?;
        let b = gsi.bindings.get_mut(&conn).ok_or(CmError::UnknownConn)?;
        let mtu = b.path_mtu.ok_or(CmError::InvalidParams)?;
        gsi.cm.accept(now, conn, params)?;
        if !moves_qp {
            self.drain_cm(None);
            return Ok(());
        }
        b.qpn = Some(qpn);
        let (src_mac, dst_mac) = (gsi.mac, b.peer_mac);
        let rtr = gsi
            .cm
            .qp_params(conn)
            .map(|qp| qp_attrs(&qp, mtu, src_mac, dst_mac).0)
            .ok_or(CmError::InvalidParams)?;
        let moved = self.modify_qp(qpn, QpState::Rtr, &rtr, now, mem);
        self.drain_cm(None);
        moved
    }

    /// Passive side: refuses an [`Event::ConnectRequest`] with a REJ.
    ///
    /// # Errors
    /// [`EndpointError::CmNotEnabled`], [`EndpointError::Cm`].
    pub fn cm_reject(
        &mut self,
        now: Instant,
        conn: ConnId,
        reason: RejectReason,
        private_data: &[u8],
    ) -> Result<(), EndpointError> {
        self.gsi_mut()?.cm.reject(now, conn, reason, private_data)?;
        self.drain_cm(None);
        Ok(())
    }

    /// Passive side: tells the active side, with an MRA, that the answer to its REQ will take
    /// up to `service_timeout` (an exponent: 4.096 µs · 2^value), so it waits instead of
    /// resending; then [`Self::cm_accept`] or [`Self::cm_reject`].
    ///
    /// # Errors
    /// [`EndpointError::CmNotEnabled`], [`EndpointError::Cm`].
    pub fn cm_send_mra(&mut self, conn: ConnId, service_timeout: u8) -> Result<(), EndpointError> {
        self.gsi_mut()?.cm.send_mra(conn, service_timeout)?;
        self.drain_cm(None);
        Ok(())
    }

    /// Either side of an established connection: moves its QP to ERROR (its outstanding work
    /// completes flushed) and sends a DREQ; [`Event::Disconnected`] follows.
    ///
    /// # Errors
    /// [`EndpointError::CmNotEnabled`], [`EndpointError::Cm`].
    pub fn cm_disconnect(
        &mut self,
        now: Instant,
        conn: ConnId,
        private_data: &[u8],
        mem: &mut dyn Memory,
    ) -> Result<(), EndpointError> {
        let gsi = self.gsi_mut()?;
        gsi.cm.disconnect(now, conn, private_data)?;
        let qpn = gsi.bindings.get(&conn).and_then(|b| b.qpn);
        if let Some(qpn) = qpn {
            // A QP already destroyed has nothing left to stop.
            let _ = self.modify_qp(qpn, QpState::Error, &QpAttr::default(), now, mem);
        }
        self.drain_cm(None);
        Ok(())
    }

    /// Requester: sends a SIDR_REQ for the QPN and Q_Key of `params.service_id` to the peer at
    /// `params.peer_gid` whose MAC is `peer_mac`; [`Event::SidrReply`] or
    /// [`Event::SidrTimedOut`] follows. No QP is touched: the application sends its datagrams
    /// with what the reply says.
    ///
    /// # Errors
    /// [`EndpointError::CmNotEnabled`]; [`EndpointError::Cm`] for parameters the SIDR_REQ
    /// cannot carry or GIDs of different IP families.
    pub fn cm_sidr_request(
        &mut self,
        now: Instant,
        params: &SidrParams,
        peer_mac: [u8; 6],
    ) -> Result<SidrId, EndpointError> {
        if gid_to_ip(params.local_gid).is_ipv4() != gid_to_ip(params.peer_gid).is_ipv4() {
            return Err(CmError::InvalidParams.into());
        }
        let gsi = self.gsi_mut()?;
        let id = gsi.cm.sidr_request(now, params)?;
        gsi.sidr_macs.insert(id, (params.peer_gid, peer_mac));
        self.drain_cm(None);
        Ok(id)
    }

    /// Responder: answers an [`Event::SidrRequest`] with a SIDR_REP.
    ///
    /// # Errors
    /// [`EndpointError::CmNotEnabled`], [`EndpointError::Cm`].
    pub fn cm_sidr_reply(
        &mut self,
        id: SidrId,
        params: &SidrReplyParams,
    ) -> Result<(), EndpointError> {
        let gsi = self.gsi_mut()?;
        gsi.cm.sidr_reply(id, params)?;
        self.drain_cm(None);
        if let Some(g) = self.gsi.as_deref_mut() {
            g.sidr_macs.remove(&id);
        }
        Ok(())
    }

    /// The next CM event, after the endpoint has moved the connection's QP for it.
    pub fn poll_cm_event(&mut self) -> Option<Event> {
        self.gsi.as_mut()?.events.pop_front()
    }

    /// A QP the CM may connect: RC, in INIT (else the RTR it will need is refused now), and
    /// not another connection's.
    fn expect_init(&self, qpn: Qpn) -> Result<(), EndpointError> {
        let from = self.qp(qpn).ok_or(EndpointError::UnknownQp)?.state();
        let bound = self
            .gsi
            .as_ref()
            .is_some_and(|g| g.bindings.values().any(|b| b.qpn == Some(qpn)));
        if bound {
            return Err(EndpointError::InUse);
        }
        if from == QpState::Init {
            Ok(())
        } else {
            let to = QpState::Rtr;
            Err(crate::qp::ModifyError::BadTransition { from, to }.into())
        }
    }

    /// A UD packet to QP1: checked, then given to the CM. `local` and `peer` are the frame's
    /// destination and source GIDs, `peer_mac` its source MAC when there is a frame.
    pub(super) fn handle_gsi(
        &mut self,
        now: Instant,
        roce: &RoceRepr,
        payload: &[u8],
        (local, peer, peer_mac): (Ipv6Addr, Ipv6Addr, Option<[u8; 6]>),
        mem: &mut dyn Memory,
    ) -> Result<(), DropReason> {
        let gsi = self.gsi.as_deref_mut().ok_or(DropReason::UnknownQp)?;
        check_mad(roce, payload)?;
        gsi.cm.handle_mad(now, local, peer, payload);
        self.run_cm_events(now, Some((peer, peer_mac.unwrap_or([0; 6]))), mem);
        Ok(())
    }

    /// A packet reached `qpn` while it waited in RTR: if its connection waits for the RTU, the
    /// peer is connected and the QP may go to RTS.
    pub(super) fn qp_saw_peer(&mut self, now: Instant, qpn: Qpn, mem: &mut dyn Memory) {
        let Some(gsi) = self.gsi.as_deref_mut() else {
            return;
        };
        let conn = gsi
            .bindings
            .iter()
            .find(|(_, b)| b.qpn == Some(qpn))
            .map(|(c, _)| *c);
        if let Some(conn) = conn
            && gsi.cm.established(conn).is_ok()
        {
            self.run_cm_events(now, None, mem);
        }
    }

    /// Runs the CM's timers.
    pub(super) fn gsi_timeout(&mut self, now: Instant, mem: &mut dyn Memory) {
        let Some(gsi) = self.gsi.as_deref_mut() else {
            return;
        };
        if gsi.cm.poll_timeout().is_some_and(|t| t <= now) {
            gsi.cm.handle_timeout(now);
            self.run_cm_events(now, None, mem);
        }
    }

    /// Moves the CM's MADs to QP1's queue, with the MAC each goes to.
    fn drain_cm(&mut self, answering: Option<(Ipv6Addr, [u8; 6])>) {
        let Some(gsi) = self.gsi.as_deref_mut() else {
            return;
        };
        while let Some(t) = gsi.cm.poll_transmit() {
            let mac = gsi.mac_for(t.peer_gid, answering);
            gsi.out.push_back((t, mac));
        }
    }

    /// Acts on the CM's events (moves QPs, records and forgets connections) and queues them
    /// for the application, then queues the MADs they released: the RTU after a REP and the
    /// DREP after a DREQ leave only once the QP has moved.
    fn run_cm_events(
        &mut self,
        now: Instant,
        answering: Option<(Ipv6Addr, [u8; 6])>,
        mem: &mut dyn Memory,
    ) {
        while let Some(ev) = self.gsi.as_deref_mut().and_then(|g| g.cm.poll_event()) {
            self.on_cm_event(now, &ev, answering, mem);
            if let Some(g) = self.gsi.as_deref_mut() {
                g.events.push_back(ev);
            }
        }
        self.drain_cm(answering);
    }

    fn on_cm_event(
        &mut self,
        now: Instant,
        ev: &Event,
        answering: Option<(Ipv6Addr, [u8; 6])>,
        mem: &mut dyn Memory,
    ) {
        let Some(gsi) = self.gsi.as_deref_mut() else {
            return;
        };
        match ev {
            Event::ConnectRequest(r) => {
                let b = Binding {
                    qpn: None,
                    peer_gid: r.peer_gid,
                    peer_mac: gsi.mac_for(r.peer_gid, answering),
                    path_mtu: gsi.path_mtu(r.peer_gid, r.req.path_packet_payload_mtu),
                };
                gsi.bindings.insert(r.conn, b);
            }
            Event::Established { conn, qp, .. } => {
                let Some(b) = gsi.bindings.get(conn).copied() else {
                    return;
                };
                let Some(qpn) = b.qpn else { return };
                let attrs = b.path_mtu.map(|m| qp_attrs(qp, m, gsi.mac, b.peer_mac));
                let moved = match (attrs, self.qp(qpn).map(|q| q.state())) {
                    (Some((rtr, rts)), Some(QpState::Init)) => self
                        .modify_qp(qpn, QpState::Rtr, &rtr, now, mem)
                        .and_then(|()| self.modify_qp(qpn, QpState::Rts, &rts, now, mem)),
                    (Some((_, rts)), Some(QpState::Rtr)) => {
                        self.modify_qp(qpn, QpState::Rts, &rts, now, mem)
                    }
                    _ => Err(EndpointError::UnknownQp),
                };
                if moved.is_err() {
                    let _ = self.modify_qp(qpn, QpState::Error, &QpAttr::default(), now, mem);
                    if let Some(g) = self.gsi.as_deref_mut() {
                        // Established, so the DREQ can always be sent.
                        let _ = g.cm.disconnect(now, *conn, &[]);
                    }
                }
            }
            Event::Rejected { conn, .. }
            | Event::TimedOut { conn }
            | Event::Disconnected { conn, .. } => {
                if let Some(qpn) = gsi.bindings.get(conn).and_then(|b| b.qpn) {
                    let _ = self.modify_qp(qpn, QpState::Error, &QpAttr::default(), now, mem);
                }
            }
            Event::TimeWaitExit { conn } => {
                gsi.bindings.remove(conn);
            }
            Event::SidrRequest(r) => {
                let mac = gsi.mac_for(r.peer_gid, answering);
                gsi.sidr_macs.insert(r.id, (r.peer_gid, mac));
            }
            Event::SidrReply { id, .. } | Event::SidrTimedOut { id } => {
                gsi.sidr_macs.remove(id);
            }
        }
    }
}
