//! Frame tour: one RoCEv2 frame for every verb and packet kind rocev2 speaks.
//!
//! Each frame is built with `rocev2_core::wire` (`FrameRepr::emit` computes pad, ICRC and
//! checksums), parsed back with `FrameRepr::parse` (which checks every layer and verifies the
//! ICRC), compared with what was built, and printed as the parser decoded it. `--pcap FILE`
//! writes the frames for Wireshark or tshark. Nothing is sent on a network.
//!
//! The frames tell one plausible story: a client 10.0.0.1 (QP 0x000011) talks to a server
//! 10.0.0.2 (QP 0x000012) over RC with a 1024-byte path MTU; a second pair of QPs runs over
//! IPv6, a third over an 802.1Q VLAN, a fourth is UD. Addresses, keys and PSNs are made up
//! but consistent: responses carry the PSNs of the requests they answer.

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use pcap_file::pcap::{PcapPacket, PcapWriter};
use rocev2_core::wire::frame::{Ecn, Frame};
use rocev2_core::wire::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, Credits, DethRepr, EthRepr, ExtRepr,
    FrameRepr, IethRepr, ImmDtRepr, IpRepr, Msn, NakCode, Opcode, Operation, Psn, Qpn,
    ROCEV2_UDP_PORT, RethRepr, RnrTimer, RoceRepr, Syndrome, Transport, UdpRepr, VlanRepr, cnp,
    ext,
};
use std::fs::File;
use std::io::BufWriter;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::time::Duration;

/// Build, parse back and print one RoCEv2 frame per verb and packet kind.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Also write the frames to this pcap file (Ethernet link type), e.g. for Wireshark.
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    /// Only the frames of this verb.
    #[arg(long, value_enum, value_name = "NAME")]
    verb: Option<Verb>,
    /// How many leading bytes of each frame to hexdump (0: none).
    #[arg(long, value_name = "N", default_value_t = 64)]
    dump_bytes: usize,
}

/// The groups `--verb` selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Verb {
    /// RC SEND First/Middle/Last/Only, with Immediate, with Invalidate, over IPv6.
    Send,
    /// RC RDMA WRITE First/Middle/Last/Only, with Immediate, VLAN-tagged.
    Write,
    /// RC RDMA READ Request and Responses.
    Read,
    /// ACK, NAKs and RNR NAK.
    Ack,
    /// CmpSwap, FetchAdd and ATOMIC Acknowledge.
    Atomic,
    /// UD SEND Only with DETH.
    Ud,
    /// Congestion Notification Packet.
    Cnp,
    /// rocev2's negotiated REXT extension header (BTH.TVer = 1).
    Ext,
}

/// One end of a connection.
#[derive(Clone, Copy)]
struct Host {
    mac: [u8; 6],
    ip: IpAddrs,
    qpn: Qpn,
}

#[derive(Clone, Copy)]
enum IpAddrs {
    V4(Ipv4Addr),
    V6(Ipv6Addr),
}

/// A pair of QPs and how their frames are framed.
#[derive(Clone, Copy)]
struct Conn {
    client: Host,
    server: Host,
    vlan: Option<VlanRepr>,
}

const CLIENT_MAC: [u8; 6] = [0x02, 0x00, 0x0a, 0x00, 0x00, 0x01];
const SERVER_MAC: [u8; 6] = [0x02, 0x00, 0x0a, 0x00, 0x00, 0x02];
const P_KEY: u16 = 0xffff;
/// DSCP 26 (AF31) for RoCE data, the usual lossless class; 48 (CS6) for CNPs, as ConnectX
/// defaults to, so notifications overtake the data they report on.
const DSCP_DATA: u8 = 26;
const DSCP_CNP: u8 = 48;
/// The remote buffer the client writes to and reads from, and its key.
const REMOTE_VA: u64 = 0x7f3a_2c40_0000;
const REMOTE_RKEY: u32 = 0x0000_02ba;
const MTU: usize = 1024;

fn host(last: u8, qpn: u32) -> Host {
    Host {
        mac: if last == 1 { CLIENT_MAC } else { SERVER_MAC },
        ip: IpAddrs::V4(Ipv4Addr::new(10, 0, 0, last)),
        qpn: Qpn::new(qpn),
    }
}

impl Conn {
    /// A frame from `from` to `to` carrying `roce`.
    fn frame(&self, from: Host, to: Host, roce: RoceRepr) -> FrameRepr {
        let cnp = roce.bth.opcode == Opcode::CNP;
        let (dscp, ecn) = if cnp {
            (DSCP_CNP, Ecn::NotEct)
        } else {
            (DSCP_DATA, Ecn::Ect0)
        };
        let ip = match (from.ip, to.ip) {
            (IpAddrs::V4(src), IpAddrs::V4(dst)) => IpRepr::V4 {
                src,
                dst,
                dscp,
                ecn,
                // What a Linux UDP socket sends with DF and no connect(): see docs/wire.md,
                // "ICRC in each datapath mode".
                identification: 0,
                dont_fragment: true,
                ttl: 64,
            },
            (IpAddrs::V6(src), IpAddrs::V6(dst)) => IpRepr::V6 {
                src,
                dst,
                dscp,
                ecn,
                flow_label: 0,
                hop_limit: 64,
            },
            _ => unreachable!("both ends of a connection use the same IP version"),
        };
        FrameRepr {
            eth: EthRepr {
                src: from.mac,
                dst: to.mac,
                vlan: self.vlan,
            },
            ip,
            udp: UdpRepr {
                // Per-QP ECMP entropy from the dynamic port range (rxe hashes the QPN into
                // 0xc000-0xffff; here the QPN's low bits are used as they are).
                src_port: 0xc000 | (from.qpn.value() as u16 & 0x3fff),
                dst_port: ROCEV2_UDP_PORT,
                // IPv4 RoCEv2 senders leave it zero (the ICRC protects the data); over IPv6 a
                // zero UDP checksum is not allowed, so it is computed.
                checksum: matches!(ip, IpRepr::V6 { .. }),
            },
            roce,
        }
    }
}

/// A BTH from `to`'s point of view: destination QP and PSN.
fn bth(op: Opcode, to: Host, psn: u32, ack_req: bool) -> BthRepr {
    BthRepr {
        ack_req,
        ..BthRepr::new(op, P_KEY, to.qpn, Psn::new(psn))
    }
}

fn rc(op: Operation) -> Opcode {
    Opcode::rc(op)
}

/// `len` bytes of readable text, so the hexdump shows where the payload starts.
fn payload(len: usize) -> Vec<u8> {
    b"rocev2 frame tour: payload bytes "
        .iter()
        .copied()
        .cycle()
        .take(len)
        .collect()
}

/// One frame of the tour.
struct Sample {
    id: &'static str,
    verb: Verb,
    frame: FrameRepr,
    payload: Vec<u8>,
}

/// Collects the tour's frames.
struct Tour {
    samples: Vec<Sample>,
}

impl Tour {
    /// A frame from `conn`'s client to its server.
    fn request(&mut self, id: &'static str, verb: Verb, conn: &Conn, roce: RoceRepr, len: usize) {
        self.push(id, verb, conn.frame(conn.client, conn.server, roce), len);
    }
    /// A frame from `conn`'s server back to its client.
    fn response(&mut self, id: &'static str, verb: Verb, conn: &Conn, roce: RoceRepr, len: usize) {
        self.push(id, verb, conn.frame(conn.server, conn.client, roce), len);
    }
    fn push(&mut self, id: &'static str, verb: Verb, frame: FrameRepr, len: usize) {
        self.samples.push(Sample {
            id,
            verb,
            frame,
            payload: payload(len),
        });
    }
}

fn samples() -> Vec<Sample> {
    use Operation::*;
    use Verb::{Ack, Atomic, Cnp, Ext, Read, Send, Ud, Write};
    let v4 = Conn {
        client: host(1, 0x11),
        server: host(2, 0x12),
        vlan: None,
    };
    let v6 = Conn {
        client: Host {
            mac: CLIENT_MAC,
            ip: IpAddrs::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)),
            qpn: Qpn::new(0x13),
        },
        server: Host {
            mac: SERVER_MAC,
            ip: IpAddrs::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2)),
            qpn: Qpn::new(0x14),
        },
        vlan: None,
    };
    // PCP 3: the priority PFC keeps lossless on a typical RoCE fabric.
    let vlan = Conn {
        client: host(1, 0x15),
        server: host(2, 0x16),
        vlan: Some(VlanRepr {
            pcp: 3,
            dei: false,
            vid: 100,
        }),
    };
    let ud = Conn {
        client: host(1, 0x20),
        server: host(2, 0x21),
        vlan: None,
    };
    // Requests go to the server's QP, responses to the client's.
    let to_s = |op, psn, ack_req| RoceRepr::new(bth(rc(op), v4.server, psn, ack_req));
    let to_c = |op, psn| RoceRepr::new(bth(rc(op), v4.client, psn, false));
    let reth = |dma_len| {
        Some(RethRepr {
            va: REMOTE_VA,
            r_key: REMOTE_RKEY,
            dma_len,
        })
    };
    let aeth = |syndrome, msn| {
        Some(AethRepr {
            syndrome,
            msn: Msn::new(msn),
        })
    };
    let acked = |msn| aeth(Syndrome::Ack(Credits::UNLIMITED), msn);
    let mut t = Tour {
        samples: Vec::new(),
    };

    // A 2557-byte SEND at MTU 1024: First, Middle, Last (509 bytes, so 3 pad bytes).
    t.request("send-first", Send, &v4, to_s(SendFirst, 0x1000, false), MTU);
    let r = to_s(SendMiddle, 0x1001, false);
    t.request("send-middle", Send, &v4, r, MTU);
    t.request("send-last", Send, &v4, to_s(SendLast, 0x1002, true), 509);
    t.request("send-only", Send, &v4, to_s(SendOnly, 0x1003, true), 64);
    let imm = RoceRepr {
        immdt: Some(ImmDtRepr { imm: 0x1234_5678 }),
        ..to_s(SendOnlyWithImmediate, 0x1004, true)
    };
    t.request("send-only-imm", Send, &v4, imm, 32);
    let inv = RoceRepr {
        ieth: Some(IethRepr { r_key: 0x0000_2cf1 }),
        ..to_s(SendOnlyWithInvalidate, 0x1005, true)
    };
    t.request("send-only-inv", Send, &v4, inv, 16);
    let send6 = RoceRepr::new(bth(rc(SendOnly), v6.server, 0x0100, true));
    t.request("send-only-ipv6", Send, &v6, send6, 48);

    // A 2560-byte RDMA WRITE (First carries the RETH), then single-packet WRITEs.
    let first = RoceRepr {
        reth: reth(2560),
        ..to_s(RdmaWriteFirst, 0x1006, false)
    };
    t.request("write-first", Write, &v4, first, MTU);
    let r = to_s(RdmaWriteMiddle, 0x1007, false);
    t.request("write-middle", Write, &v4, r, MTU);
    let r = to_s(RdmaWriteLast, 0x1008, true);
    t.request("write-last", Write, &v4, r, 512);
    let only = RoceRepr {
        reth: reth(256),
        ..to_s(RdmaWriteOnly, 0x1009, true)
    };
    t.request("write-only", Write, &v4, only, 256);
    let only_imm = RoceRepr {
        reth: reth(100),
        immdt: Some(ImmDtRepr { imm: 0xcafe_0001 }),
        ..to_s(RdmaWriteOnlyWithImmediate, 0x100a, true)
    };
    t.request("write-only-imm", Write, &v4, only_imm, 100);
    let tagged = RoceRepr {
        reth: reth(128),
        ..RoceRepr::new(bth(rc(RdmaWriteOnly), vlan.server, 0x0200, true))
    };
    t.request("write-only-vlan", Write, &vlan, tagged, 128);

    // A 2560-byte READ takes PSNs 0x100b-0x100d, answered First/Middle/Last; a 64-byte READ
    // at 0x100e is answered by one Response Only. First, Last and Only carry an AETH.
    let read = RoceRepr {
        reth: reth(2560),
        ..to_s(RdmaReadRequest, 0x100b, true)
    };
    t.request("read-request", Read, &v4, read, 0);
    let resp = |op, psn, aeth| RoceRepr {
        aeth,
        ..to_c(op, psn)
    };
    let r = resp(RdmaReadResponseFirst, 0x100b, acked(7));
    t.response("read-resp-first", Read, &v4, r, MTU);
    let r = resp(RdmaReadResponseMiddle, 0x100c, None);
    t.response("read-resp-middle", Read, &v4, r, MTU);
    let r = resp(RdmaReadResponseLast, 0x100d, acked(8));
    t.response("read-resp-last", Read, &v4, r, 512);
    let r = resp(RdmaReadResponseOnly, 0x100e, acked(9));
    t.response("read-resp-only", Read, &v4, r, 64);

    // The responder's verdicts: an ACK with end-to-end credits, two NAKs, an RNR NAK.
    let verdict = |psn, syndrome, msn| resp(Acknowledge, psn, aeth(syndrome, msn));
    let ack = verdict(0x1002, Syndrome::Ack(Credits::at_most(16)), 1);
    t.response("ack", Ack, &v4, ack, 0);
    let nak = verdict(0x1004, Syndrome::Nak(NakCode::PsnSequenceError), 3);
    t.response("nak-psn-seq", Ack, &v4, nak, 0);
    let nak = verdict(0x1009, Syndrome::Nak(NakCode::RemoteAccessError), 5);
    t.response("nak-remote-access", Ack, &v4, nak, 0);
    let rnr = verdict(0x1003, Syndrome::RnrNak(RnrTimer::from_code(14)), 1);
    t.response("rnr-nak", Ack, &v4, rnr, 0);

    // Atomics on an 8-byte-aligned counter in the remote buffer.
    let atomic = |op, psn, swap_add, compare| RoceRepr {
        atomic_eth: Some(AtomicEthRepr {
            va: REMOTE_VA + 0x40,
            r_key: REMOTE_RKEY,
            swap_add,
            compare,
        }),
        ..to_s(op, psn, true)
    };
    let r = atomic(CompareSwap, 0x100f, 1, 0);
    t.request("cmp-swap", Atomic, &v4, r, 0);
    t.request("fetch-add", Atomic, &v4, atomic(FetchAdd, 0x1010, 5, 0), 0);
    let atomic_ack = RoceRepr {
        atomic_ack_eth: Some(AtomicAckEthRepr { orig_data: 1 }),
        ..resp(AtomicAcknowledge, 0x1010, acked(11))
    };
    t.response("atomic-ack", Atomic, &v4, atomic_ack, 0);

    // UD: Q_Key 0x11111111 as ibv_ud_pingpong uses; the source QP travels in the DETH.
    let ud_send = RoceRepr {
        deth: Some(DethRepr {
            q_key: 0x1111_1111,
            src_qp: ud.client.qpn,
        }),
        ..RoceRepr::new(bth(
            Opcode::new(Transport::Ud, SendOnly),
            ud.server,
            0x0300,
            false,
        ))
    };
    t.request("ud-send-only", Ud, &ud, ud_send, 256);

    // The server saw CE-marked packets from the client's QP and notifies that QP.
    let r = RoceRepr::new(cnp::bth(v4.client.qpn, P_KEY));
    t.response("cnp", Cnp, &v4, r, 0);

    // REXT, for negotiated peers only (TVer = 1): an ACK carrying DASR's N and MP-RDMA's
    // per-packet ACK fields, and a CNP carrying DCQCN+'s period tau.
    let mut ext_ack = resp(Acknowledge, 0x100a, acked(6));
    ext_ack.bth.tver = ext::TVER;
    ext_ack.ext = Some(ExtRepr {
        dasr_n: Some(8),
        multipath: Some(ext::MultipathAck {
            vp: 0xc000 | 0x11,
            sack_psn: Psn::new(0x100a),
            aack_psn: Psn::new(0x1009),
        }),
        ece: true,
        ..ExtRepr::default()
    });
    t.response("ack-rext", Ext, &v4, ext_ack, 0);
    let mut ext_cnp = RoceRepr::new(cnp::bth(v4.client.qpn, P_KEY));
    ext_cnp.bth.tver = ext::TVER;
    ext_cnp.ext = Some(ExtRepr {
        tau_ns: Some(50_000),
        ..ExtRepr::default()
    });
    t.response("cnp-rext", Ext, &v4, ext_cnp, 0);
    t.samples
}

/// Emits a frame into a fresh buffer.
fn emit(frame: &FrameRepr, payload: &[u8]) -> Result<Vec<u8>> {
    let mut bytes = vec![0u8; frame.buffer_len(payload.len())?];
    frame.emit(&mut bytes, payload)?;
    Ok(bytes)
}

/// The ICRC stored in a frame's last four bytes (little-endian on the wire).
fn icrc_of(bytes: &[u8]) -> Result<u32> {
    Ok(Frame::new_checked(bytes)?.transport().icrc())
}

fn hexdump(bytes: &[u8], indent: &str) -> String {
    let mut s = String::new();
    for (row, chunk) in bytes.chunks(16).enumerate() {
        let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
        let ascii: String = chunk
            .iter()
            .map(|&b| {
                if b.is_ascii_graphic() || b == b' ' {
                    b as char
                } else {
                    '.'
                }
            })
            .collect();
        s += &format!(
            "{indent}{:04x}  {:<47}  |{ascii}|\n",
            row * 16,
            hex.join(" ")
        );
    }
    s
}

/// Builds, parses and checks one sample; returns its bytes.
fn tour_one(n: usize, sample: &Sample, dump_bytes: usize) -> Result<Vec<u8>> {
    let bytes =
        emit(&sample.frame, &sample.payload).with_context(|| format!("emitting {}", sample.id))?;
    let (parsed, parsed_payload) =
        FrameRepr::parse(&bytes).with_context(|| format!("parsing {} back", sample.id))?;
    // The parser reports the pad count emit derived from the payload length.
    let mut want = sample.frame;
    want.roce.bth.pad_cnt = RoceRepr::pad_for(sample.payload.len()) as u8;
    if parsed != want || parsed_payload != sample.payload.as_slice() {
        bail!(
            "{}: parsed frame differs from the one built\n built: {want}\nparsed: {parsed}",
            sample.id
        );
    }
    let icrc = icrc_of(&bytes)?;
    let wire = &bytes[bytes.len() - 4..];
    println!("[{n:2}] {:<18} {}", sample.id, parsed.roce.bth.opcode);
    println!("     {parsed}");
    println!(
        "     {} bytes (payload {}, pad {}), ICRC {icrc:#010x} verified (on the wire LE: {:02x} {:02x} {:02x} {:02x})",
        bytes.len(),
        parsed_payload.len(),
        parsed.roce.bth.pad_cnt,
        wire[0],
        wire[1],
        wire[2],
        wire[3]
    );
    let shown = dump_bytes.min(bytes.len());
    if shown > 0 {
        print!("{}", hexdump(&bytes[..shown], "     "));
    }
    Ok(bytes)
}

/// Shows which fields the ICRC covers, by re-emitting a frame with one field changed.
fn icrc_coverage(base: &Sample) -> Result<()> {
    println!(
        "ICRC coverage, shown on {} (re-emitted with one field changed):",
        base.id
    );
    let before = icrc_of(&emit(&base.frame, &base.payload)?)?;
    let mut variants: Vec<(&str, FrameRepr)> = Vec::new();
    let mut f = base.frame;
    if let IpRepr::V4 { ecn, ttl, .. } = &mut f.ip {
        *ecn = Ecn::Ce;
        *ttl = 63;
    }
    variants.push(("a switch marks ECN CE and a router decrements TTL", f));
    let mut f = base.frame;
    f.roce.bth.deflection_tokens = 3;
    f.roce.bth.fecn = true;
    variants.push((
        "a switch writes BTH byte 4 (FECN, IOFD tokens in Resv6a)",
        f,
    ));
    let mut f = base.frame;
    if let IpRepr::V4 { identification, .. } = &mut f.ip {
        *identification = 1;
    }
    variants.push(("the sender uses IPv4 Identification 1 instead of 0", f));
    let mut f = base.frame;
    f.roce.bth.psn = f.roce.bth.psn.next();
    variants.push(("the PSN is one higher", f));
    for (what, frame) in variants {
        let after = icrc_of(&emit(&frame, &base.payload)?)?;
        let verdict = if after == before {
            "unchanged: masked"
        } else {
            "changed: covered"
        };
        println!("  {what:<58} ICRC {before:#010x} -> {after:#010x} {verdict}");
    }
    let mut bytes = emit(&base.frame, &base.payload)?;
    let at = bytes.len() - 5;
    bytes[at] ^= 0x01;
    match FrameRepr::parse(&bytes) {
        Ok(_) => bail!("a corrupted frame was accepted"),
        Err(e) => println!(
            "  one bit flipped in the last payload byte in flight          parse -> rejected: {e}"
        ),
    }
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
    let all = samples();
    let chosen: Vec<&Sample> = all
        .iter()
        .filter(|s| args.verb.is_none_or(|v| v == s.verb))
        .collect();
    let mut frames = Vec::with_capacity(chosen.len());
    for (i, sample) in chosen.iter().enumerate() {
        frames.push(tour_one(i + 1, sample, args.dump_bytes)?);
        println!();
    }
    let n = frames.len();
    let plural = if n == 1 { "" } else { "s" };
    println!("{n} frame{plural} built with rocev2_core::wire, parsed back, ICRC verified.");
    if args.verb.is_none() {
        let base = all
            .iter()
            .find(|s| s.id == "send-only")
            .context("the tour has a send-only frame")?;
        println!();
        icrc_coverage(base)?;
    }
    if let Some(path) = &args.pcap {
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut w = PcapWriter::new(BufWriter::new(file))?;
        // Fixed timestamps (2025-01-01, 1 us apart) so the file is the same on every run.
        let t0 = Duration::from_secs(1_735_689_600);
        for (i, bytes) in frames.iter().enumerate() {
            let ts = t0 + Duration::from_micros(i as u64);
            w.write_packet(&PcapPacket::new(ts, bytes.len() as u32, bytes))?;
        }
        w.into_writer().into_inner().map_err(|e| e.into_error())?;
        println!();
        println!("wrote {n} frame{plural} to {}", path.display());
    }
    Ok(())
}
