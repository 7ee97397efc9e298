//! The records of the rings: send and receive work requests, and work completions.
//!
//! They mirror the core's [`SendWr`], [`RecvWr`] and [`WorkCompletion`] field for field, but are
//! a format of their own (postcard over serde): the rings are an interface between two
//! programs that may be built at different times, and the core's types may grow without it.
//! Decoding is total: any bytes give a record or an error, and a record that names something
//! the core cannot express (a 25-bit QPN, a status libibverbs does not have) is an error too.
//!
//! Deviations: none.

use rocev2_core::cq::{UdSource, WcOpcode, WcStatus, WorkCompletion};
use rocev2_core::mr::{Lkey, Rkey};
use rocev2_core::qp::{RecvWr, SendOp, SendWr, Sge};
use rocev2_core::wire::Qpn;
use rocev2_core::wire::ext::{Lookahead, MAX_LOOKAHEAD};
use serde::{Deserialize, Serialize};

/// A record that does not decode to a work request or completion.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordError {
    /// Not a postcard encoding of the record type.
    #[error("malformed record")]
    Malformed,
    /// A field out of its range.
    #[error("record field {0} out of range")]
    Range(&'static str),
}

/// One scatter/gather element.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct SgeRecord {
    addr: u64,
    length: u32,
    lkey: u32,
}

/// The operation of a send work request ([`SendOp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum OpRecord {
    Send,
    SendWithImm {
        imm: u32,
    },
    SendWithInv {
        rkey: u32,
    },
    Write {
        remote_addr: u64,
        rkey: u32,
    },
    WriteWithImm {
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    },
    Read {
        remote_addr: u64,
        rkey: u32,
    },
    CompareSwap {
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    },
    FetchAdd {
        remote_addr: u64,
        rkey: u32,
        add: u64,
    },
}

const SIGNALED: u8 = 1;
const FENCE: u8 = 2;
const SOLICITED: u8 = 4;
const SYNCHRONISE: u8 = 8;

/// A send work request on a QP's send ring.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendRecord {
    wr_id: u64,
    op: OpRecord,
    sges: Vec<SgeRecord>,
    inline: Option<Vec<u8>>,
    flags: u8,
    /// Dart's look-ahead: group size and member ids.
    lookahead: Option<(u16, Vec<u16>)>,
    /// A UD send's destination; the core's `UdDest` holds a path, which only the daemon
    /// builds, so the record names the application's address handle instead.
    ud: Option<UdRecord>,
}

/// The destination of a UD send (`ibv_send_wr.wr.ud`): one of the application's address
/// handles (`proto::Request::CreateAh`), the peer's QP and the Q_Key to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UdRecord {
    /// The address handle's id.
    pub ah: u32,
    /// The peer's QPN, 24 bits.
    pub remote_qpn: u32,
    /// The Q_Key (high bit set: the sending QP's own).
    pub remote_qkey: u32,
}

/// A receive work request on a QP's receive ring.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecvRecord {
    wr_id: u64,
    sges: Vec<SgeRecord>,
}

/// A work completion on a CQ's ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletionRecord {
    wr_id: u64,
    status: u32,
    opcode: u32,
    byte_len: u32,
    imm: Option<u32>,
    invalidated_rkey: Option<u32>,
    qp_num: u32,
    src_qp: u32,
    /// UD: the sender's GID and the P_Key index.
    ud: Option<(std::net::Ipv6Addr, u16)>,
}

fn sges(list: &[Sge]) -> Vec<SgeRecord> {
    list.iter()
        .map(|s| SgeRecord {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey.value(),
        })
        .collect()
}

fn sge_list(list: Vec<SgeRecord>) -> Vec<Sge> {
    list.into_iter()
        .map(|s| Sge {
            addr: s.addr,
            length: s.length,
            lkey: Lkey::new(s.lkey),
        })
        .collect()
}

fn qpn(v: u32, field: &'static str) -> Result<Qpn, RecordError> {
    if v > 0xff_ffff {
        return Err(RecordError::Range(field));
    }
    Ok(Qpn::new(v))
}

/// Encodes a record for a ring slot.
pub fn encode<T: Serialize>(record: &T) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(record, &mut out);
    out
}

/// Encodes a record into `out` (replacing its contents), reusing its allocation: the daemon and
/// the application encode one record per work request or completion.
pub fn encode_into<T: Serialize>(record: &T, out: &mut Vec<u8>) {
    out.clear();
    // Serialising these plain structs into a growable vector cannot fail.
    *out = postcard::to_extend(record, std::mem::take(out)).unwrap_or_default();
}

/// Decodes a record copied out of a ring slot.
///
/// # Errors
/// [`RecordError::Malformed`].
pub fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, RecordError> {
    postcard::from_bytes(bytes).map_err(|_| RecordError::Malformed)
}

impl From<&SendWr> for SendRecord {
    fn from(wr: &SendWr) -> SendRecord {
        let op = match wr.op {
            SendOp::Send => OpRecord::Send,
            SendOp::SendWithImm { imm } => OpRecord::SendWithImm { imm },
            SendOp::SendWithInv { rkey } => OpRecord::SendWithInv { rkey: rkey.value() },
            SendOp::Write { remote_addr, rkey } => OpRecord::Write {
                remote_addr,
                rkey: rkey.value(),
            },
            SendOp::WriteWithImm {
                remote_addr,
                rkey,
                imm,
            } => OpRecord::WriteWithImm {
                remote_addr,
                rkey: rkey.value(),
                imm,
            },
            SendOp::Read { remote_addr, rkey } => OpRecord::Read {
                remote_addr,
                rkey: rkey.value(),
            },
            SendOp::CompareSwap {
                remote_addr,
                rkey,
                compare,
                swap,
            } => OpRecord::CompareSwap {
                remote_addr,
                rkey: rkey.value(),
                compare,
                swap,
            },
            SendOp::FetchAdd {
                remote_addr,
                rkey,
                add,
            } => OpRecord::FetchAdd {
                remote_addr,
                rkey: rkey.value(),
                add,
            },
        };
        let flag = |on: bool, bit: u8| if on { bit } else { 0 };
        SendRecord {
            wr_id: wr.wr_id,
            op,
            sges: sges(&wr.sg_list),
            inline: wr.inline_data.clone(),
            flags: flag(wr.signaled, SIGNALED)
                | flag(wr.fence, FENCE)
                | flag(wr.solicited, SOLICITED)
                | flag(wr.synchronise, SYNCHRONISE),
            lookahead: wr.lookahead.map(|l| {
                let n = usize::from(l.member_count).min(MAX_LOOKAHEAD);
                (l.group_size, l.members[..n].to_vec())
            }),
            ud: None,
        }
    }
}

impl TryFrom<SendRecord> for SendWr {
    type Error = RecordError;
    fn try_from(r: SendRecord) -> Result<SendWr, RecordError> {
        let op = match r.op {
            OpRecord::Send => SendOp::Send,
            OpRecord::SendWithImm { imm } => SendOp::SendWithImm { imm },
            OpRecord::SendWithInv { rkey } => SendOp::SendWithInv {
                rkey: Rkey::new(rkey),
            },
            OpRecord::Write { remote_addr, rkey } => SendOp::Write {
                remote_addr,
                rkey: Rkey::new(rkey),
            },
            OpRecord::WriteWithImm {
                remote_addr,
                rkey,
                imm,
            } => SendOp::WriteWithImm {
                remote_addr,
                rkey: Rkey::new(rkey),
                imm,
            },
            OpRecord::Read { remote_addr, rkey } => SendOp::Read {
                remote_addr,
                rkey: Rkey::new(rkey),
            },
            OpRecord::CompareSwap {
                remote_addr,
                rkey,
                compare,
                swap,
            } => SendOp::CompareSwap {
                remote_addr,
                rkey: Rkey::new(rkey),
                compare,
                swap,
            },
            OpRecord::FetchAdd {
                remote_addr,
                rkey,
                add,
            } => SendOp::FetchAdd {
                remote_addr,
                rkey: Rkey::new(rkey),
                add,
            },
        };
        let lookahead = match r.lookahead {
            None => None,
            Some((group_size, ids)) => {
                if ids.len() > MAX_LOOKAHEAD {
                    return Err(RecordError::Range("lookahead"));
                }
                let mut members = [0u16; MAX_LOOKAHEAD];
                members[..ids.len()].copy_from_slice(&ids);
                Some(Lookahead {
                    group_size,
                    member_count: ids.len() as u8,
                    members,
                })
            }
        };
        if r.flags & !(SIGNALED | FENCE | SOLICITED | SYNCHRONISE) != 0 {
            return Err(RecordError::Range("flags"));
        }
        let mut wr = SendWr::new(r.wr_id, op);
        wr.sg_list = sge_list(r.sges);
        wr.inline_data = r.inline;
        wr.signaled = r.flags & SIGNALED != 0;
        wr.fence = r.flags & FENCE != 0;
        wr.solicited = r.flags & SOLICITED != 0;
        wr.synchronise = r.flags & SYNCHRONISE != 0;
        wr.lookahead = lookahead;
        Ok(wr)
    }
}

impl SendRecord {
    /// The request's id, for an error completion when the record is refused.
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }

    /// The same request sent to `ud` (a UD QP's send).
    pub fn with_ud(mut self, ud: UdRecord) -> SendRecord {
        self.ud = Some(ud);
        self
    }

    /// A UD send's destination, its QPN checked; the address handle is the daemon's to look
    /// up (converting to [`SendWr`] leaves `ud` empty).
    ///
    /// # Errors
    /// [`RecordError::Range`] for a QPN past 24 bits.
    pub fn ud(&self) -> Result<Option<(u32, Qpn, u32)>, RecordError> {
        self.ud
            .map(|u| Ok((u.ah, qpn(u.remote_qpn, "remote_qpn")?, u.remote_qkey)))
            .transpose()
    }
}

impl From<&RecvWr> for RecvRecord {
    fn from(wr: &RecvWr) -> RecvRecord {
        RecvRecord {
            wr_id: wr.wr_id,
            sges: sges(&wr.sg_list),
        }
    }
}

impl From<RecvRecord> for RecvWr {
    fn from(r: RecvRecord) -> RecvWr {
        RecvWr {
            wr_id: r.wr_id,
            sg_list: sge_list(r.sges),
        }
    }
}

impl RecvRecord {
    /// The request's id, for an error completion when the record is refused.
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }
}

impl From<&WorkCompletion> for CompletionRecord {
    fn from(wc: &WorkCompletion) -> CompletionRecord {
        CompletionRecord {
            wr_id: wc.wr_id,
            status: wc.status.as_ibv(),
            opcode: wc.opcode.as_ibv(),
            byte_len: wc.byte_len,
            imm: wc.imm_data,
            invalidated_rkey: wc.invalidated_rkey,
            qp_num: wc.qp_num.value(),
            src_qp: wc.src_qp.value(),
            ud: wc.ud.map(|u| (u.sgid, u.pkey_index)),
        }
    }
}

impl TryFrom<CompletionRecord> for WorkCompletion {
    type Error = RecordError;
    fn try_from(r: CompletionRecord) -> Result<WorkCompletion, RecordError> {
        Ok(WorkCompletion {
            wr_id: r.wr_id,
            status: WcStatus::from_ibv(r.status).ok_or(RecordError::Range("status"))?,
            opcode: WcOpcode::from_ibv(r.opcode).ok_or(RecordError::Range("opcode"))?,
            byte_len: r.byte_len,
            imm_data: r.imm,
            invalidated_rkey: r.invalidated_rkey,
            qp_num: qpn(r.qp_num, "qp_num")?,
            src_qp: qpn(r.src_qp, "src_qp")?,
            ud: r.ud.map(|(sgid, pkey_index)| UdSource { sgid, pkey_index }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn work_requests_and_completions_round_trip() {
        let mut wr = SendWr::new(
            7,
            SendOp::CompareSwap {
                remote_addr: 0x1000,
                rkey: Rkey::new(0xabc),
                compare: 1,
                swap: 2,
            },
        )
        .sge(Sge {
            addr: 0x2000,
            length: 8,
            lkey: Lkey::new(5),
        });
        wr.fence = true;
        wr.signaled = false;
        let back = SendWr::try_from(decode::<SendRecord>(&encode(&SendRecord::from(&wr))).unwrap());
        assert_eq!(back.unwrap(), wr);
        // A UD send: the destination crosses as the address handle's id.
        let ud = UdRecord {
            ah: 3,
            remote_qpn: 0xff_fffe,
            remote_qkey: 0x8001_0000,
        };
        let send = SendWr::new(8, SendOp::SendWithImm { imm: 5 }).inline(vec![1, 2, 3]);
        let rec = SendRecord::from(&send).with_ud(ud);
        let back = decode::<SendRecord>(&encode(&rec)).unwrap();
        assert_eq!(back, rec);
        assert_eq!(back.ud(), Ok(Some((3, Qpn::new(0xff_fffe), 0x8001_0000))));
        assert_eq!(SendWr::try_from(back).unwrap(), send);
        let bad = SendRecord::from(&send).with_ud(UdRecord {
            remote_qpn: 1 << 24,
            ..ud
        });
        assert_eq!(bad.ud(), Err(RecordError::Range("remote_qpn")));
        assert_eq!(SendRecord::from(&send).ud(), Ok(None));
        // The largest UD send (200 bytes inline, every field at its widest) fits a ring slot.
        let widest =
            SendWr::new(u64::MAX, SendOp::SendWithImm { imm: u32::MAX }).inline(vec![0xff; 200]);
        let rec = SendRecord::from(&widest).with_ud(UdRecord {
            ah: u32::MAX,
            remote_qpn: 0xff_ffff,
            remote_qkey: u32::MAX,
        });
        assert!(encode(&rec).len() + 4 <= crate::proto::SLOT_SIZE);
        let rwr = RecvWr {
            wr_id: 9,
            sg_list: wr.sg_list.clone(),
        };
        assert_eq!(
            RecvWr::from(decode::<RecvRecord>(&encode(&RecvRecord::from(&rwr))).unwrap()),
            rwr
        );
        let wc = WorkCompletion {
            wr_id: 3,
            status: WcStatus::RemAccessErr,
            opcode: WcOpcode::RecvRdmaWithImm,
            byte_len: 12,
            imm_data: Some(4),
            invalidated_rkey: None,
            qp_num: Qpn::new(0x11),
            src_qp: Qpn::new(0x12),
            ud: Some(UdSource {
                sgid: "::ffff:10.0.0.1".parse().unwrap(),
                pkey_index: 0,
            }),
        };
        let rec = decode::<CompletionRecord>(&encode(&CompletionRecord::from(&wc))).unwrap();
        assert_eq!(WorkCompletion::try_from(rec).unwrap(), wc);
    }

    #[test]
    fn out_of_range_fields_are_errors() {
        let mut rec = CompletionRecord::from(&WorkCompletion {
            wr_id: 3,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            byte_len: 0,
            imm_data: None,
            invalidated_rkey: None,
            qp_num: Qpn::new(0x11),
            src_qp: Qpn::new(0x11),
            ud: None,
        });
        rec.qp_num = 1 << 24;
        assert_eq!(
            WorkCompletion::try_from(rec),
            Err(RecordError::Range("qp_num"))
        );
        let mut s = SendRecord::from(&SendWr::new(1, SendOp::Send));
        s.flags = 0x80;
        assert_eq!(
            SendWr::try_from(s.clone()),
            Err(RecordError::Range("flags"))
        );
        s.flags = 0;
        s.lookahead = Some((3, vec![1; MAX_LOOKAHEAD + 1]));
        assert_eq!(SendWr::try_from(s), Err(RecordError::Range("lookahead")));
    }

    proptest! {
        /// Arbitrary bytes decode to a record or an error, never a panic.
        #[test]
        fn any_bytes_decode_or_fail(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(r) = decode::<SendRecord>(&bytes) { let _ = SendWr::try_from(r); }
            if let Ok(r) = decode::<RecvRecord>(&bytes) { let _ = RecvWr::from(r); }
            if let Ok(r) = decode::<CompletionRecord>(&bytes) { let _ = WorkCompletion::try_from(r); }
        }
    }
}
