//! The RC engine fed hostile frame sequences against live QPs.
//!
//! Random bytes almost never pass the ICRC and never name a live QP, so they test the parser,
//! not the QP. Here two engines (`testing::Pair`) run real traffic in both directions (SEND,
//! WRITE with immediate, READ, FetchAdd), and the fuzzer interleaves normal progress with
//! injected frames: copies of frames already sent, with the PSN moved, the opcode replaced (the
//! headers its layout needs filled in), flags, RETH/AETH/AtomicETH fields and the payload
//! length changed, then re-emitted with a valid ICRC and delivered to the other side.
//!
//! Invariants: nothing panics; afterwards both endpoints go idle within a bounded number of
//! steps (every retry budget is finite), and every completion carries the wr_id of a posted
//! work request.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use rocev2_core::mr::MrInfo;
use rocev2_core::qp::{RecvWr, SendOp, SendWr, Sge};
use rocev2_core::testing::{ConnectOptions, LinkConfig, Pair};
use rocev2_core::wire::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, FrameRepr, IethRepr, ImmDtRepr, Opcode, Psn,
    RethRepr, Syndrome,
};

#[derive(Debug, Arbitrary)]
enum Step {
    /// Let the pair run this many steps.
    Run(u8),
    /// Re-send a recorded frame, changed.
    Inject(Inject),
}

#[derive(Debug, Arbitrary)]
struct Inject {
    frame: u16,
    psn_delta: i16,
    opcode: Option<u8>,
    ack_req: Option<bool>,
    solicited: bool,
    reth: Option<(u64, u32, u32)>,
    syndrome: Option<u8>,
    msn: Option<u32>,
    atomic: Option<(u64, u64, u64, u32)>,
    imm: u32,
    /// New payload length (bytes of the old payload, then 0x5a).
    payload_len: Option<u16>,
}

fn sge(mr: &MrInfo, off: u64, len: u32) -> Sge {
    Sge {
        addr: mr.addr + off,
        length: len,
        lkey: mr.lkey,
    }
}

/// `frame` with `m` applied, re-emitted with a valid ICRC; `None` when the result cannot be
/// emitted (a length the opcode does not allow, say).
fn mutate(frame: &[u8], m: &Inject) -> Option<Vec<u8>> {
    let (mut repr, payload) = FrameRepr::parse(frame).ok()?;
    let r = &mut repr.roce;
    r.bth.psn = Psn::new(r.bth.psn.value().wrapping_add_signed(i32::from(m.psn_delta)));
    r.bth.solicited = m.solicited;
    if let Some(a) = m.ack_req {
        r.bth.ack_req = a;
    }
    if let Some(op) = m.opcode {
        r.bth.opcode = Opcode(op);
    }
    let layout = r.bth.opcode.layout().ok()?;
    let reth = m.reth.map(|(va, r_key, dma_len)| RethRepr { va, r_key, dma_len });
    r.reth = layout.reth.then(|| reth.or(r.reth)).flatten();
    if layout.aeth {
        let syndrome = match m.syndrome {
            Some(b) => Syndrome::from_byte(b).ok()?,
            None => r.aeth.map_or(Syndrome::from_byte(0).ok()?, |a| a.syndrome),
        };
        let msn = m
            .msn
            .map(rocev2_core::wire::Msn::new)
            .or(r.aeth.map(|a| a.msn))?;
        r.aeth = Some(AethRepr { syndrome, msn });
    } else {
        r.aeth = None;
    }
    r.atomic_eth = layout.atomic_eth.then(|| {
        let (va, swap_add, compare, r_key) = m.atomic.unwrap_or_default();
        AtomicEthRepr {
            va,
            r_key,
            swap_add,
            compare,
        }
    });
    r.atomic_ack_eth = layout.atomic_ack_eth.then(|| AtomicAckEthRepr {
        orig_data: m.atomic.map_or(0, |a| a.0),
    });
    r.immdt = layout.immdt.then_some(ImmDtRepr { imm: m.imm });
    r.ieth = layout.ieth.then_some(IethRepr { r_key: m.imm });
    if layout.deth || layout.cnp {
        return None;
    }
    let mut body = payload.to_vec();
    if let Some(n) = m.payload_len {
        body.resize(usize::from(n) % 4200, 0x5a);
    }
    if !layout.payload {
        body.clear();
    }
    let len = repr.buffer_len(body.len()).ok()?;
    let mut out = vec![0; len];
    repr.emit(&mut out, &body).ok()?;
    Some(out)
}

fuzz_target!(|steps: Vec<Step>| {
    let mut p = Pair::new(LinkConfig::default(), LinkConfig::default());
    p.trace = Some(Vec::new());
    let Ok(c) = p.connect(ConnectOptions {
        timeout: 4,
        retry_cnt: 3,
        rnr_retry: 3,
        ..ConnectOptions::default()
    }) else {
        return;
    };
    // Real traffic both ways, so every kind of request and response is on record to mutate.
    let mut posted = [Vec::new(), Vec::new()];
    for (side, (h, qp, mr, peer_mr)) in [
        (&mut p.a, c.qa, c.mr_a, c.mr_b),
        (&mut p.b, c.qb, c.mr_b, c.mr_a),
    ]
    .into_iter()
    .enumerate()
    {
        let wrs = [
            SendWr::new(1, SendOp::Send).sge(sge(&mr, 0, 3000)),
            SendWr::new(
                2,
                SendOp::WriteWithImm {
                    remote_addr: peer_mr.addr + 8192,
                    rkey: peer_mr.rkey,
                    imm: 7,
                },
            )
            .sge(sge(&mr, 0, 2500)),
            SendWr::new(
                3,
                SendOp::Read {
                    remote_addr: peer_mr.addr,
                    rkey: peer_mr.rkey,
                },
            )
            .sge(sge(&mr, 16384, 2048)),
            SendWr::new(
                4,
                SendOp::FetchAdd {
                    remote_addr: peer_mr.addr + 32768,
                    rkey: peer_mr.rkey,
                    add: 5,
                },
            )
            .sge(sge(&mr, 40960, 8)),
        ];
        for wr in wrs {
            posted[side].push(wr.wr_id);
            let _ = h.ep.post_send(qp, wr);
        }
        for id in [11, 12, 13] {
            posted[side].push(id);
            let _ = h.ep.post_recv(
                qp,
                RecvWr {
                    wr_id: id,
                    sg_list: vec![sge(&mr, 20480, 4096)],
                },
            );
        }
    }
    for step in steps.iter().take(256) {
        match step {
            Step::Run(n) => {
                for _ in 0..*n {
                    p.step();
                }
            }
            Step::Inject(m) => {
                let Some(trace) = p.trace.as_ref().filter(|t| !t.is_empty()) else {
                    p.step();
                    continue;
                };
                let (from_a, frame) = &trace[usize::from(m.frame) % trace.len()];
                let from_a = *from_a;
                let Some(bad) = mutate(frame, m) else {
                    continue;
                };
                let now = p.now;
                let h = if from_a { &mut p.b } else { &mut p.a };
                let _ = h.ep.handle_frame(now, &bad, &mut h.mem);
            }
        }
    }
    p.trace = None;
    assert!(p.drive(2_000_000), "the pair never went idle after the injected frames");
    for (side, cq) in [c.cq_a, c.cq_b].into_iter().enumerate() {
        for wc in p.completions(side == 0, cq) {
            assert!(
                posted[side].contains(&wc.wr_id),
                "side {side}: completion for a wr_id never posted: {wc:?}"
            );
        }
    }
});
