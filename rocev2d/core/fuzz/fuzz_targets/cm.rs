//! The CM behind QP1, fed hostile MADs: an Endpoint with the CM enabled, a listener and RC QPs,
//! against a fuzzer that plays the peer. Each step is a MAD frame to QP1 (a CM header with a
//! chosen method and attribute, fuzzer bytes as the attribute data, and optionally the
//! Communication IDs of a live connection patched in, so messages reach real connections),
//! raw bytes as QP1's payload, an application call (connect, accept, reject, disconnect), or
//! time passing.
//!
//! Invariants: nothing panics; every frame the endpoint sends is a UD SEND Only to QP1 whose
//! payload parses as a CM MAD; and every CM timer chain ends (resends and time-waits are
//! finite), so once time runs on, no timer is left.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use rocev2_core::Endpoint;
use rocev2_core::cm::{
    AcceptParams, CmConfig, ConnId, ConnectParams, Event, PortSpace, RejectReason, ServiceId,
};
use rocev2_core::endpoint::GsiConfig;
use rocev2_core::mr::VecMemory;
use rocev2_core::qp::{QpAttr, QpConfig, QpState};
use rocev2_core::time::{Duration, Instant};
use rocev2_core::wire::frame::Ecn;
use rocev2_core::wire::mad::{BASE_VERSION, CM_CLASS_VERSION, HEADER_LEN, attribute, mgmt_class};
use rocev2_core::wire::{
    BthRepr, CmRepr, DethRepr, EthRepr, FrameRepr, GSI_Q_KEY, IpRepr, MAD_LEN, MadPacket, Opcode,
    Operation, Psn, Qpn, ROCEV2_UDP_PORT, RoceRepr, Transport, UdpRepr,
};
use std::net::Ipv4Addr;

const US: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const PEER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const PORT: u16 = 7174;
const ATTRIBUTES: [u16; 8] = [
    attribute::CLASS_PORT_INFO,
    attribute::REQ,
    attribute::MRA,
    attribute::REJ,
    attribute::REP,
    attribute::RTU,
    attribute::DREQ,
    attribute::DREP,
];

#[derive(Debug, Arbitrary)]
enum Step {
    /// A CM MAD from the peer's QP1.
    Mad {
        method: u8,
        attribute: u8,
        tid: u64,
        data: Vec<u8>,
        /// Put a live connection's IDs in (index into the connections seen), as the peer's
        /// Local and our Remote Communication ID.
        live: Option<(u8, u32)>,
    },
    /// Bytes as QP1's payload, with a chosen Q_Key and source QP.
    Raw {
        q_key: u32,
        src_qp: u32,
        payload: Vec<u8>,
    },
    /// Connect a fresh QP to the peer.
    Connect {
        psn: u32,
    },
    /// Accept, reject or disconnect a connection we know (index), with private data.
    Accept {
        conn: u8,
        psn: u32,
    },
    Reject {
        conn: u8,
        reason: u16,
    },
    Disconnect {
        conn: u8,
        data: Vec<u8>,
    },
    /// Time passes (milliseconds).
    Wait(u16),
}

fn frame(q_key: u32, src_qp: u32, payload: &[u8]) -> Option<Vec<u8>> {
    let bth = BthRepr::new(
        Opcode::new(Transport::Ud, Operation::SendOnly),
        0xffff,
        Qpn::GSI,
        Psn::new(0),
    );
    let repr = FrameRepr {
        eth: EthRepr {
            src: [2, 0, 0, 0, 0, 2],
            dst: [2, 0, 0, 0, 0, 1],
            vlan: None,
        },
        ip: IpRepr::V4 {
            src: PEER,
            dst: US,
            dscp: 0,
            ecn: Ecn::NotEct,
            identification: 0,
            dont_fragment: true,
            ttl: 64,
        },
        udp: UdpRepr {
            src_port: 0xd872,
            dst_port: ROCEV2_UDP_PORT,
            checksum: false,
        },
        roce: RoceRepr {
            deth: Some(DethRepr {
                q_key,
                src_qp: Qpn::new(src_qp & 0xff_ffff),
            }),
            ..RoceRepr::new(bth)
        },
    };
    let mut out = vec![0; repr.buffer_len(payload.len()).ok()?];
    repr.emit_with(&mut out, payload.len(), |d| d.copy_from_slice(payload))
        .ok()?;
    Some(out)
}

struct Host {
    ep: Endpoint,
    mem: VecMemory,
    now: Instant,
    /// Every connection an event or a call named, in order.
    conns: Vec<(ConnId, u32)>,
    buf: Vec<u8>,
}

impl Host {
    fn new_qp(&mut self) -> Option<Qpn> {
        let pd = self.ep.alloc_pd();
        let cq = self.ep.create_cq(16);
        let qpn = self.ep.create_qp(QpConfig::new(pd, cq, cq)).ok()?;
        let init = QpAttr::init_all_access();
        self.ep
            .modify_qp(qpn, QpState::Init, &init, self.now, &mut self.mem)
            .ok()?;
        Some(qpn)
    }

    fn conn(&self, i: u8) -> Option<ConnId> {
        let n = self.conns.len();
        (n > 0).then(|| self.conns[usize::from(i) % n].0)
    }

    /// Drains events (learning the peer's IDs from requests) and frames, checking each frame.
    fn drain(&mut self) {
        while let Some(e) = self.ep.poll_cm_event() {
            if let Event::ConnectRequest(r) = &e {
                self.conns.push((r.conn, r.req.local_comm_id));
            }
        }
        while let Some(n) = self
            .ep
            .poll_transmit(self.now, &mut self.mem, &mut self.buf)
        {
            let (repr, payload) = FrameRepr::parse(&self.buf[..n]).expect("our frame parses");
            assert_eq!(repr.roce.bth.dest_qp, Qpn::GSI);
            assert_eq!(repr.roce.deth.map(|d| d.q_key), Some(GSI_Q_KEY));
            CmRepr::parse_bytes(payload).expect("our MAD parses");
        }
    }
}

fuzz_target!(|steps: Vec<Step>| {
    let mut h = Host {
        ep: Endpoint::new(1),
        mem: VecMemory::new(),
        now: Instant::ZERO,
        conns: Vec::new(),
        buf: Vec::new(),
    };
    h.ep.enable_cm(GsiConfig {
        mac: [2, 0, 0, 0, 0, 1],
        cm: CmConfig { local_ca_guid: 1 },
        seed: 1,
        link_mtu: 1500,
    });
    let sid = ServiceId::rdma_cm(PortSpace::TCP, PORT);
    h.ep.cm_listen(sid).expect("first listen");
    for step in steps.iter().take(64) {
        let now = h.now;
        match step {
            Step::Mad {
                method,
                attribute,
                tid,
                data,
                live,
            } => {
                let mut mad = [0u8; MAD_LEN];
                let mut p = MadPacket::new_unchecked(&mut mad[..]);
                p.set_base_version(BASE_VERSION);
                p.set_mgmt_class(mgmt_class::CM);
                p.set_class_version(CM_CLASS_VERSION);
                p.set_method(*method);
                p.set_transaction_id(*tid);
                p.set_attribute_id(ATTRIBUTES[usize::from(*attribute) % ATTRIBUTES.len()]);
                let n = data.len().min(MAD_LEN - HEADER_LEN);
                mad[HEADER_LEN..HEADER_LEN + n].copy_from_slice(&data[..n]);
                if let Some((i, theirs)) = live {
                    if let Some(ours) = h.conn(*i) {
                        // Local Communication ID, then Remote, in every message but a REQ.
                        mad[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&theirs.to_be_bytes());
                        mad[HEADER_LEN + 4..HEADER_LEN + 8]
                            .copy_from_slice(&ours.comm_id().to_be_bytes());
                    }
                }
                if let Some(f) = frame(GSI_Q_KEY, 1, &mad) {
                    let _ = h.ep.handle_frame(now, &f, &mut h.mem);
                }
            }
            Step::Raw {
                q_key,
                src_qp,
                payload,
            } => {
                if let Some(f) = frame(*q_key, *src_qp, payload) {
                    let _ = h.ep.handle_frame(now, &f, &mut h.mem);
                }
            }
            Step::Connect { psn } => {
                if let Some(qpn) = h.new_qp() {
                    let params = ConnectParams::new(
                        sid,
                        US.to_ipv6_mapped(),
                        PEER.to_ipv6_mapped(),
                        qpn,
                        Psn::new(psn & 0xff_ffff),
                    );
                    if let Ok(c) = h.ep.cm_connect(now, params, [2, 0, 0, 0, 0, 2]) {
                        h.conns.push((c, 0));
                    }
                }
            }
            Step::Accept { conn, psn } => {
                if let (Some(c), Some(qpn)) = (h.conn(*conn), h.new_qp()) {
                    let accept = AcceptParams::new(qpn, Psn::new(psn & 0xff_ffff));
                    let _ = h.ep.cm_accept(now, c, accept, &mut h.mem);
                }
            }
            Step::Reject { conn, reason } => {
                if let Some(c) = h.conn(*conn) {
                    let _ = h.ep.cm_reject(now, c, RejectReason(*reason), &[]);
                }
            }
            Step::Disconnect { conn, data } => {
                if let Some(c) = h.conn(*conn) {
                    let _ = h.ep.cm_disconnect(now, c, data, &mut h.mem);
                }
            }
            Step::Wait(ms) => {
                h.now = now + Duration::from_millis(u64::from(*ms));
                h.ep.handle_timeout(h.now, &mut h.mem);
            }
        }
        h.drain();
    }
    // Every timer chain ends: at most 16 resends per message plus a time-wait each.
    for _ in 0..10_000 {
        let Some(cm_due) = h.ep.cm().and_then(|c| c.poll_timeout()) else {
            return;
        };
        h.now = h.now.max(cm_due);
        h.ep.handle_timeout(h.now, &mut h.mem);
        h.drain();
    }
    panic!("CM timers still pending after 10000 rounds");
});
