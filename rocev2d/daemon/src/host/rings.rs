//! The rings' traffic: work requests an application pushed, moved into the engine (a request
//! the engine refuses completes with an error the daemon makes, at most a ring's worth held),
//! and the engine's completions moved into the application's CQ rings.

use super::*;

/// The error completion of a work request the engine refused at post time.
fn refused(wr_id: u64, qpn: Qpn, opcode: cq::WcOpcode, e: &EndpointError) -> WorkCompletion {
    let status = match e {
        EndpointError::Post(
            PostError::TooManySge | PostError::BadInline | PostError::MessageTooLong,
        ) => WcStatus::LocLenErr,
        _ => WcStatus::LocQpOpErr,
    };
    WorkCompletion {
        wr_id,
        status,
        opcode,
        byte_len: 0,
        imm_data: None,
        invalidated_rkey: None,
        qp_num: qpn,
        src_qp: qpn,
        ud: None,
    }
}

/// What differs between a send and a receive queue for [`take`].
trait WorkRequest: Clone {
    /// Decodes a ring record; a UD send's address handle is looked up in `ahs`.
    fn decode(bytes: &[u8], ahs: &AhTable) -> Result<Self, record::RecordError>;
    /// The id and completion opcode an error completion of this request carries.
    fn completes_as(&self) -> (u64, cq::WcOpcode);
}

impl WorkRequest for SendWr {
    /// An address handle the application does not hold (destroyed before the daemon took the
    /// request) leaves the request without a destination, which the engine refuses
    /// ([`PostError::Unsupported`]): it completes with an error, as any refused request.
    fn decode(bytes: &[u8], ahs: &AhTable) -> Result<Self, record::RecordError> {
        let rec = record::decode::<SendRecord>(bytes)?;
        let ud = rec.ud()?;
        let mut wr = SendWr::try_from(rec)?;
        wr.ud = ud.and_then(|(ah, remote_qpn, remote_qkey)| {
            Some(UdDest {
                ah: *ahs.get(ah)?,
                remote_qpn,
                remote_qkey,
            })
        });
        Ok(wr)
    }
    fn completes_as(&self) -> (u64, cq::WcOpcode) {
        (self.wr_id, self.op.wc_opcode())
    }
}

impl WorkRequest for RecvWr {
    fn decode(bytes: &[u8], _ahs: &AhTable) -> Result<Self, record::RecordError> {
        record::decode::<RecvRecord>(bytes).map(RecvWr::from)
    }
    fn completes_as(&self) -> (u64, cq::WcOpcode) {
        (self.wr_id, cq::WcOpcode::Recv)
    }
}

/// Moves up to [`BUDGET`] requests of one queue into the engine with `post`: first the one it
/// had no room for (`waiting`), then records of `ring`, a UD send's address handle looked up in
/// `ahs`. A request the engine refuses completes with an error on the CQ of `errors` (a QP's
/// queue: its CQ and QPN); an SRQ has no CQ of its own, so a refused SRQ request (one the
/// application's library would have refused before pushing it) is only counted. Returns how
/// many were posted or refused; `Err` when the ring or a record is corrupt.
fn take<W: WorkRequest>(
    ep: &mut Endpoint,
    (ring, waiting): (&mut Ring, &mut Option<W>),
    ahs: &AhTable,
    mut errors: Option<(&mut CqShare, Qpn)>,
    post: impl Fn(&mut Endpoint, W) -> Result<(), EndpointError>,
    buf: &mut Vec<u8>,
    c: &mut HostCounters,
) -> Result<u64, ()> {
    let mut n = 0;
    for _ in 0..BUDGET {
        let wr = match waiting.take() {
            Some(wr) => wr,
            None => match ring.pop(buf) {
                Ok(false) => break,
                Ok(true) => W::decode(buf, ahs).map_err(|_| ())?,
                Err(_) => return Err(()),
            },
        };
        let (wr_id, opcode) = wr.completes_as();
        match post(ep, wr.clone()) {
            Ok(()) => n += 1,
            Err(EndpointError::Post(PostError::QueueFull)) => {
                *waiting = Some(wr);
                break;
            }
            Err(e) => {
                // An application that reads none of its completions cannot grow the daemon:
                // with a ring's worth of error completions undelivered, its requests stay
                // where they are until it reads some (the producer stops, it is not queued).
                if let Some((cq, qpn)) = errors.as_mut() {
                    if cq.made.len() >= cq.ring.slots() as usize {
                        *waiting = Some(wr);
                        break;
                    }
                    cq.made.push_back(refused(wr_id, *qpn, opcode, &e));
                }
                n += 1;
                c.refused_work_requests += 1;
            }
        }
    }
    Ok(n)
}

/// Moves work requests from `a`'s rings (its QPs' queues and its SRQs) into the engine; marks
/// `a` corrupt on a bad ring.
pub(super) fn take_work(
    ep: &mut Endpoint,
    a: &mut App,
    buf: &mut Vec<u8>,
    c: &mut HostCounters,
) -> bool {
    let mut moved = 0;
    for (&qpn, q) in a.qps.iter_mut() {
        let send_cq = a.cqs.get_mut(&q.send_cq).map(|cq| (cq, qpn));
        let sq = (&mut q.sq, &mut q.send_wait);
        let send = |ep: &mut Endpoint, wr| ep.post_send(qpn, wr);
        let sent = take(ep, sq, &a.ahs, send_cq, send, buf, c);
        let recv_cq = a.cqs.get_mut(&q.recv_cq).map(|cq| (cq, qpn));
        let rq = (&mut q.rq, &mut q.recv_wait);
        let recv = |ep: &mut Endpoint, wr| ep.post_recv(qpn, wr);
        let received = take(ep, rq, &a.ahs, recv_cq, recv, buf, c);
        match (sent, received) {
            (Ok(s), Ok(r)) => moved += s + r,
            _ => a.corrupt = true,
        }
    }
    for (&srq, s) in a.srqs.iter_mut() {
        match take_srq(ep, srq, s, &a.ahs, buf, c) {
            Ok(n) => moved += n,
            Err(()) => a.corrupt = true,
        }
    }
    a.posted += moved;
    moved > 0
}

/// Moves SRQ `srq`'s requests from its ring into the engine (see [`take`]; `ahs` is unused
/// by receive requests).
pub(super) fn take_srq(
    ep: &mut Endpoint,
    srq: SrqId,
    s: &mut SrqShare,
    ahs: &AhTable,
    buf: &mut Vec<u8>,
    c: &mut HostCounters,
) -> Result<u64, ()> {
    let post = |ep: &mut Endpoint, wr| ep.post_srq_recv(srq, wr);
    take(ep, (&mut s.ring, &mut s.waiting), ahs, None, post, buf, c)
}

/// Moves completions from the engine's CQs (and the daemon's own) into `a`'s CQ rings, and
/// signals each CQ that got some.
pub(super) fn deliver(
    ep: &mut Endpoint,
    a: &mut App,
    wcs: &mut Vec<WorkCompletion>,
    buf: &mut Vec<u8>,
) -> bool {
    let mut moved = false;
    for (id, cq) in &mut a.cqs {
        let Ok(used) = cq.ring.len() else {
            a.corrupt = true;
            continue;
        };
        let mut room = (cq.ring.slots() - used) as usize;
        let mut pushed = 0;
        while room > 0 {
            let Some(wc) = cq.made.pop_front() else { break };
            record::encode_into(&CompletionRecord::from(&wc), buf);
            if cq.ring.push(buf) != Ok(true) {
                break;
            }
            room -= 1;
            pushed += 1;
        }
        wcs.clear();
        ep.poll_cq(*id, wcs, room);
        for wc in wcs.iter() {
            record::encode_into(&CompletionRecord::from(wc), buf);
            if cq.ring.push(buf) != Ok(true) {
                a.corrupt = true;
                break;
            }
            pushed += 1;
        }
        if pushed > 0 {
            a.completed += pushed;
            if cq.ring.consumer_asleep() {
                cq.event.signal();
            }
            moved = true;
        }
    }
    moved
}
