//! Two endpoints joined by two seeded [`Link`]s, stepped on a virtual clock (quinn-proto's
//! `Pair`, grown up): [`Pair::step`] jumps straight to the next event instead of sleeping, and
//! [`Pair::drive`] runs until nothing is left to do or a step budget runs out.
//!
//! Each side owns a [`VecMemory`]; [`Pair::connect`] registers one buffer per side, creates a
//! CQ and an RC QP on each, and moves both QPs to RTS pointed at each other
//! ([`Endpoint::connect_qp`]), so a test can go
//! straight to posting work requests. [`Pair::ud`] does the same for a UD QP on each side, with
//! an address handle towards the other.
//!
//! [`Pair::trace`] records every frame sent; [`Pair::events`] records, in time order, every
//! frame sent and every frame delivered with what the receiver did with it (accepted, or the
//! endpoint's drop reason) and the receiving QP's counters afterwards, so a failing run shows
//! whether a frame was lost on the link or dropped by the peer, and why.

use super::{Fate, Link, LinkConfig};
use crate::cc::CcConfig;
use crate::cq::WorkCompletion;
use crate::endpoint::{DropReason, Endpoint, EndpointError};
use crate::mr::{AccessFlags, MrInfo, PdId, VecMemory};
use crate::qp::{
    AddressHandle, ConnectAttr, CqId, ExtCaps, Mtu, Path, QpAttr, QpConfig, QpCounters, QpState,
};
use crate::time::Instant;
use crate::wire::frame::Ecn;
use crate::wire::{FrameRepr, Qpn};
use alloc::vec;
use alloc::vec::Vec;
use core::net::{IpAddr, Ipv4Addr};

/// One side of a [`Pair`].
#[derive(Debug)]
pub struct Host {
    /// The RoCE device.
    pub ep: Endpoint,
    /// Its registered memory.
    pub mem: VecMemory,
    /// Its MAC address.
    pub mac: [u8; 6],
    /// Its IP address.
    pub ip: IpAddr,
}

/// A connected RC QP on each side of a [`Pair`], with one registered buffer each.
#[derive(Debug, Clone, Copy)]
pub struct Conn {
    /// QP on side A.
    pub qa: Qpn,
    /// QP on side B.
    pub qb: Qpn,
    /// A's protection domain.
    pub pd_a: PdId,
    /// B's protection domain.
    pub pd_b: PdId,
    /// A's CQ (send and receive).
    pub cq_a: CqId,
    /// B's CQ (send and receive).
    pub cq_b: CqId,
    /// A's buffer.
    pub mr_a: MrInfo,
    /// B's buffer.
    pub mr_b: MrInfo,
}

/// A UD QP in RTS on each side of a [`Pair`], with one registered buffer each (local write
/// only) and an address handle towards the other side.
#[derive(Debug, Clone, Copy)]
pub struct UdConn {
    /// QP on side A.
    pub qa: Qpn,
    /// QP on side B.
    pub qb: Qpn,
    /// A's CQ (send and receive).
    pub cq_a: CqId,
    /// B's CQ (send and receive).
    pub cq_b: CqId,
    /// A's buffer.
    pub mr_a: MrInfo,
    /// B's buffer.
    pub mr_b: MrInfo,
    /// The path from A to B.
    pub ah_ab: AddressHandle,
    /// The path from B to A.
    pub ah_ba: AddressHandle,
    /// The Q_Key both QPs were given.
    pub q_key: u32,
}

/// Options for [`Pair::connect`].
#[derive(Debug, Clone, Copy)]
pub struct ConnectOptions {
    /// Bytes of registered memory on each side.
    pub mr_len: usize,
    /// Path MTU.
    pub mtu: Mtu,
    /// First PSN A sends (B's expected PSN).
    pub psn_a: u32,
    /// First PSN B sends (A's expected PSN).
    pub psn_b: u32,
    /// Local ACK timeout code of both QPs.
    pub timeout: u8,
    /// Retry count of both QPs.
    pub retry_cnt: u8,
    /// RNR retry count of both QPs (7 = infinite).
    pub rnr_retry: u8,
    /// RNR timer code both QPs advertise.
    pub min_rnr_timer: u8,
    /// Outstanding READ/atomics in each direction.
    pub rd_atomic: u8,
    /// Remote rights both QPs grant.
    pub qp_access: AccessFlags,
    /// Rights of both registered buffers.
    pub mr_access: AccessFlags,
    /// QP creation settings (PD and CQs are filled in).
    pub caps: fn(PdId, CqId) -> QpConfig,
    /// CQ capacity.
    pub cq_len: usize,
    /// Congestion control of both QPs (`None`: unpaced).
    pub cc: Option<CcConfig>,
    /// Extensions each side announces to the other.
    pub peer_ext: ExtCaps,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        let all = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        ConnectOptions {
            mr_len: 1 << 16,
            mtu: Mtu::Mtu1024,
            psn_a: 0x37cf8a,
            psn_b: 0x7d2a9e,
            timeout: 8,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            rd_atomic: 16,
            qp_access: all,
            mr_access: all,
            caps: |pd, cq| QpConfig::new(pd, cq, cq),
            cq_len: 4096,
            cc: None,
            peer_ext: ExtCaps::default(),
        }
    }
}

/// One entry of [`Pair::events`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A frame left side A (`from_a`) or B at `at`.
    Sent {
        /// Virtual time.
        at: Instant,
        /// Sent by side A.
        from_a: bool,
        /// The frame.
        frame: Vec<u8>,
        /// What the link did to it (lost when the test's `lose` dropped it).
        fate: Fate,
    },
    /// A frame the link delivered to side A (`to_a`) or B at `at`.
    Received {
        /// Virtual time.
        at: Instant,
        /// Delivered to side A.
        to_a: bool,
        /// The frame as delivered (a corrupted one differs from what was sent).
        frame: Vec<u8>,
        /// What the endpoint did: accepted, or why it dropped the frame.
        result: Result<(), DropReason>,
        /// The counters of the RC QP the frame was addressed to, after it was handled (where
        /// a QP accepted the frame, these say whether it was a duplicate, out of sequence or
        /// unexpected).
        counters: Option<QpCounters>,
    },
}

/// Two hosts and the links between them.
#[derive(Debug)]
pub struct Pair {
    /// Side A.
    pub a: Host,
    /// Side B.
    pub b: Host,
    /// Link from A to B.
    pub ab: Link,
    /// Link from B to A.
    pub ba: Link,
    /// Virtual time.
    pub now: Instant,
    /// When set, every frame sent is recorded here with `true` for frames from A.
    pub trace: Option<Vec<(bool, Vec<u8>)>>,
    /// When set, every frame sent and every frame delivered, in time order ([`Event`]).
    pub events: Option<Vec<Event>>,
    buf: Vec<u8>,
}

impl Pair {
    /// Two fresh endpoints (key seeds 1 and 2) joined by links with these configurations.
    pub fn new(ab: LinkConfig, ba: LinkConfig) -> Pair {
        let host = |seed, last: u8| Host {
            ep: Endpoint::new(seed),
            mem: VecMemory::new(),
            mac: [0x02, 0, 0, 0, 0, last],
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, last)),
        };
        Pair {
            a: host(1, 1),
            b: host(2, 2),
            ab: Link::new(ab),
            ba: Link::new(ba),
            now: Instant::ZERO,
            trace: None,
            events: None,
            buf: Vec::new(),
        }
    }

    fn path(from: &Host, to: &Host, sport: u16) -> Path {
        Path {
            src_mac: from.mac,
            dst_mac: to.mac,
            vlan: None,
            src_ip: from.ip,
            dst_ip: to.ip,
            dscp: 26,
            ecn: Ecn::Ect0,
            hop_limit: 64,
            udp_src_port: sport,
            flow_label: 0,
        }
    }

    /// Creates and connects an RC QP on each side; see the module docs.
    ///
    /// # Errors
    /// The first verb that failed, which means the options are out of range.
    pub fn connect(&mut self, o: ConnectOptions) -> Result<Conn, EndpointError> {
        let now = self.now;
        let setup = |h: &mut Host| -> Result<_, EndpointError> {
            let pd = h.ep.alloc_pd();
            let cq = h.ep.create_cq(o.cq_len);
            let mr =
                h.ep.register_mr(pd, 0x1000_0000, o.mr_len as u64, o.mr_access)?;
            h.mem.insert(mr.id, vec![0; o.mr_len]);
            let mut cfg = (o.caps)(pd, cq);
            cfg.cc = o.cc.or(cfg.cc);
            let qpn = h.ep.create_qp(cfg)?;
            let init = QpAttr {
                p_key: Some(0xffff),
                access: Some(o.qp_access),
                ..QpAttr::default()
            };
            h.ep.modify_qp(qpn, QpState::Init, &init, now, &mut h.mem)?;
            Ok((pd, cq, mr, qpn))
        };
        let (pd_a, cq_a, mr_a, qa) = setup(&mut self.a)?;
        let (pd_b, cq_b, mr_b, qb) = setup(&mut self.b)?;
        self.connect_qps(qa, qb, &o)?;
        Ok(Conn {
            qa,
            qb,
            pd_a,
            pd_b,
            cq_a,
            cq_b,
            mr_a,
            mr_b,
        })
    }

    /// Connects QP `qa` of A and `qb` of B, both in INIT, with the path, PSNs and timers of
    /// `o` (what [`Pair::connect`] does after creating them): for QPs a test made itself.
    ///
    /// # Errors
    /// The first verb that failed.
    pub fn connect_qps(
        &mut self,
        qa: Qpn,
        qb: Qpn,
        o: &ConnectOptions,
    ) -> Result<(), EndpointError> {
        let now = self.now;
        let path_ab = Self::path(&self.a, &self.b, 49152);
        let path_ba = Self::path(&self.b, &self.a, 49153);
        for (h, path, qpn, dest, rq_psn, sq_psn) in [
            (&mut self.a, path_ab, qa, qb, o.psn_b, o.psn_a),
            (&mut self.b, path_ba, qb, qa, o.psn_a, o.psn_b),
        ] {
            let attr = ConnectAttr {
                path,
                mtu: o.mtu,
                dest_qpn: dest,
                rq_psn,
                sq_psn,
                rd_atomic: o.rd_atomic,
                min_rnr_timer: o.min_rnr_timer,
                timeout: o.timeout,
                retry_cnt: o.retry_cnt,
                rnr_retry: o.rnr_retry,
                peer_ext: o.peer_ext,
            };
            h.ep.connect_qp(qpn, &attr, now, &mut h.mem)?;
        }
        Ok(())
    }

    /// Creates a UD QP on each side with `mr_len` bytes of registered memory, messages of at
    /// most `mtu` and Q_Key `q_key`, and brings both to RTS; see the module docs.
    ///
    /// # Errors
    /// The first verb that failed, which means the arguments are out of range.
    pub fn ud(&mut self, mr_len: usize, mtu: Mtu, q_key: u32) -> Result<UdConn, EndpointError> {
        let now = self.now;
        let setup = |h: &mut Host, sq_psn: u32| -> Result<_, EndpointError> {
            let pd = h.ep.alloc_pd();
            let cq = h.ep.create_cq(4096);
            let mr =
                h.ep.register_mr(pd, 0x2000_0000, mr_len as u64, AccessFlags::LOCAL_WRITE)?;
            h.mem.insert(mr.id, vec![0; mr_len]);
            let qpn = h.ep.create_ud_qp(QpConfig::new(pd, cq, cq), mtu)?;
            h.ep.activate_ud_qp(qpn, q_key, sq_psn, now, &mut h.mem)?;
            Ok((cq, mr, qpn))
        };
        // The send PSNs of ../shared/captures/ud_pingpong.tool-output.txt.
        let (cq_a, mr_a, qa) = setup(&mut self.a, 0xd81928)?;
        let (cq_b, mr_b, qb) = setup(&mut self.b, 0x537e9d)?;
        Ok(UdConn {
            qa,
            qb,
            cq_a,
            cq_b,
            mr_a,
            mr_b,
            ah_ab: AddressHandle::new(Self::path(&self.a, &self.b, 49152))?,
            ah_ba: AddressHandle::new(Self::path(&self.b, &self.a, 49153))?,
            q_key,
        })
    }

    /// Runs everything that is due now; moves the clock to the next event when nothing is.
    /// Returns `false` when there is no next event (the pair is idle).
    pub fn step(&mut self) -> bool {
        self.step_losing(|_, _| false)
    }

    /// [`Self::step`], but a frame for which `lose(from_a, frame)` is true never reaches its
    /// link: a loss chosen by the test rather than by the link's generator.
    pub fn step_losing(&mut self, mut lose: impl FnMut(bool, &[u8]) -> bool) -> bool {
        let now = self.now;
        let mut busy = false;
        for (from_a, h, link) in [
            (true, &mut self.a, &mut self.ab),
            (false, &mut self.b, &mut self.ba),
        ] {
            while let Some(n) = h.ep.poll_transmit(now, &mut h.mem, &mut self.buf) {
                if let Some(t) = &mut self.trace {
                    t.push((from_a, self.buf[..n].to_vec()));
                }
                let fate = if lose(from_a, &self.buf[..n]) {
                    Fate {
                        lost: true,
                        ..Fate::default()
                    }
                } else {
                    link.send(now, self.buf[..n].to_vec())
                };
                if let Some(e) = &mut self.events {
                    e.push(Event::Sent {
                        at: now,
                        from_a,
                        frame: self.buf[..n].to_vec(),
                        fate,
                    });
                }
                busy = true;
            }
        }
        for (to_a, link, h) in [
            (false, &mut self.ab, &mut self.b),
            (true, &mut self.ba, &mut self.a),
        ] {
            while let Some(frame) = link.poll_deliver(now) {
                // Drops are counted by the endpoint; tests read its stats.
                let result = h.ep.handle_frame(now, &frame, &mut h.mem);
                if let Some(e) = &mut self.events {
                    let counters = FrameRepr::parse(&frame)
                        .ok()
                        .and_then(|(f, _)| h.ep.qp(f.roce.bth.dest_qp))
                        .map(|q| *q.counters());
                    e.push(Event::Received {
                        at: now,
                        to_a,
                        frame,
                        result,
                        counters,
                    });
                }
                busy = true;
            }
        }
        for h in [&mut self.a, &mut self.b] {
            if h.ep.poll_timeout().is_some_and(|t| t <= now) {
                h.ep.handle_timeout(now, &mut h.mem);
                busy = true;
            }
        }
        if busy {
            return true;
        }
        let next = [
            self.ab.next_delivery(),
            self.ba.next_delivery(),
            self.a.ep.poll_timeout(),
            self.b.ep.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min();
        match next {
            Some(t) => {
                self.now = self.now.max(t);
                true
            }
            None => false,
        }
    }

    /// Steps until idle; `false` if `max_steps` ran out first.
    pub fn drive(&mut self, max_steps: usize) -> bool {
        (0..max_steps).any(|_| !self.step())
    }

    /// Every completion on `cq` of side A (`a == true`) or B.
    pub fn completions(&mut self, a: bool, cq: CqId) -> Vec<WorkCompletion> {
        let h = if a { &mut self.a } else { &mut self.b };
        let mut out = Vec::new();
        h.ep.poll_cq(cq, &mut out, usize::MAX);
        out
    }
}
