//! The library's tables, under one lock: event channels and their queued events, IDs, events
//! handed out and not yet acknowledged, connections and listened services. Every handle a
//! caller passes is looked up here before it is dereferenced, so a destroyed or foreign one
//! fails with `EINVAL`.

use crate::abi::{rdma_cm_event, rdma_cm_event_param, rdma_cm_id, rdma_conn_param, rdma_ud_param};
use core::ffi::{c_int, c_void};
use rocev2_verbs_abi::ucma::MAX_PRIVATE_DATA;
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{LazyLock, Mutex, MutexGuard};

/// An event as handed out: `rdma_cm_event` first (its address is the handle), then the
/// serials of the IDs it names (so one queued for an ID destroyed since is dropped) and the
/// private data its `param.conn.private_data` points to.
#[repr(C)]
pub struct Ev {
    /// What the caller sees.
    pub ev: rdma_cm_event,
    id_serial: u64,
    listen_serial: u64,
    data: [u8; MAX_PRIVATE_DATA],
}

/// What an event says besides its ID.
#[derive(Default)]
pub struct EvSpec {
    /// The listener of a `CONNECT_REQUEST`.
    pub listen: usize,
    /// `RDMA_CM_EVENT_*`.
    pub event: c_int,
    /// `status`.
    pub status: c_int,
    /// The message's private data (the application's part).
    pub data: Vec<u8>,
    /// `param.conn`'s fields.
    pub responder_resources: u8,
    /// See `responder_resources`.
    pub initiator_depth: u8,
    /// See `responder_resources`.
    pub rnr_retry_count: u8,
    /// See `responder_resources`.
    pub qp_num: u32,
    /// An event of a UD ID: `param.ud` instead of `param.conn`.
    pub ud: Option<UdParam>,
}

/// `param.ud`'s fields besides the private data.
#[derive(Clone, Copy)]
pub struct UdParam {
    /// The address vector toward the peer.
    pub ah_attr: rocev2_verbs_abi::verbs::ibv_ah_attr,
    /// The peer's UD QP and Q_Key (a resolved service; 0 in a request).
    pub qp_num: u32,
    /// See `qp_num`.
    pub qkey: u32,
}

/// An event channel's state.
pub struct Chan {
    /// Its eventfd (semaphore mode: readable while events are queued, one count each).
    pub fd: c_int,
    /// Events not yet taken.
    pub queue: VecDeque<Box<Ev>>,
}

/// The CQs and completion channels `rdma_create_qp` made for an ID (freed with its QP).
pub struct OwnCqs {
    /// `ibv_cq`s.
    pub cqs: Vec<usize>,
    /// `ibv_comp_channel`s.
    pub channels: Vec<usize>,
}

/// The connection request an ID was made for (passive side).
#[derive(Clone, Copy)]
pub struct Request {
    /// The REQ's responder resources and initiator depth.
    pub responder_resources: u8,
    /// See `responder_resources`.
    pub initiator_depth: u8,
    /// The REQ's RNR retry count.
    pub rnr_retry_count: u8,
}

/// What a connection's QP runs with, for `rdma_init_qp_attr` to hand a program that moves its
/// own QP: known on the passive side from the request on, on the active side once established.
#[derive(Clone, Copy, Default)]
pub struct ConnAttrs {
    /// The peer's QP.
    pub dest_qpn: u32,
    /// Path MTU code.
    pub path_mtu: u8,
    /// The first PSN this side sends, and the first it receives.
    pub sq_psn: u32,
    /// See `sq_psn`.
    pub rq_psn: u32,
    /// Local ACK Timeout exponent, transport and RNR retries.
    pub timeout: u8,
    /// See `timeout`.
    pub retry_count: u8,
    /// See `timeout`.
    pub rnr_retry_count: u8,
    /// READ/atomic requests this side issues, and accepts, in flight.
    pub max_rd_atomic: u8,
    /// See `max_rd_atomic`.
    pub max_dest_rd_atomic: u8,
}

/// An ID's state.
#[derive(Default)]
pub struct IdState {
    /// Never reused: events name it.
    pub serial: u64,
    /// Its channel's address (the private one of a synchronous ID).
    pub channel: usize,
    /// Made with no channel: calls wait for their outcome.
    pub sync: bool,
    /// Its device's context (0: not bound to one).
    pub ctx: usize,
    /// Where it is bound or connects from, and the peer.
    pub src: Option<SocketAddr>,
    /// See `src`.
    pub dst: Option<SocketAddr>,
    /// The connection (its local communication ID).
    pub conn: Option<u32>,
    /// Passive side: the request it answers.
    pub request: Option<Request>,
    /// The service it listens on, and on which contexts.
    pub service: Option<u64>,
    /// See `service`.
    pub listen_ctxs: Vec<usize>,
    /// The connection is up.
    pub established: bool,
    /// The first PSN this side receives, chosen when it connects or is asked to accept.
    pub psn: u32,
    /// What the connection's QP runs with, once known.
    pub attrs: Option<ConnAttrs>,
    /// Either side disconnected (a DREQ left or came).
    pub disconnected: bool,
    /// `rdma_create_qp`'s CQs.
    pub own_cqs: Option<OwnCqs>,
    /// `rdma_create_ep` (passive): the PD and QP attributes `rdma_get_request` creates each
    /// request's QP with.
    pub ep_qp: Option<(usize, Box<rocev2_verbs_abi::verbs::ibv_qp_init_attr>)>,
}

// SAFETY: the raw pointers an IdState holds are addresses of objects of the verbs library,
// used only through its thread-safe calls.
unsafe impl Send for IdState {}

/// The tables.
#[derive(Default)]
pub struct State {
    serial: u64,
    /// Channels by address.
    pub channels: HashMap<usize, Chan>,
    /// IDs by address.
    pub ids: HashMap<usize, IdState>,
    /// Events handed out, by address.
    pub events: HashSet<usize>,
    /// Connections: (context, communication ID) → ID.
    pub conns: HashMap<(usize, u32), usize>,
    /// Listened services → listening ID.
    pub listeners: HashMap<u64, usize>,
}

// SAFETY: the queued events' pointers point into their own boxes or at IDs of the tables.
unsafe impl Send for State {}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(Default::default);

/// Locks the tables (a panicking holder's state is taken over: every call catches panics).
pub fn lock() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

impl State {
    /// A new serial.
    pub fn serial(&mut self) -> u64 {
        self.serial += 1;
        self.serial
    }

    /// The live ID at `id`.
    pub fn id(&mut self, id: *const rdma_cm_id) -> Result<&mut IdState, c_int> {
        self.ids.get_mut(&(id as usize)).ok_or(libc::EINVAL)
    }

    /// Queues an event for ID `id` on its channel; dropped if the ID or channel is gone.
    pub fn push(&mut self, id: usize, spec: EvSpec) {
        let Some(s) = self.ids.get(&id) else { return };
        let id_serial = s.serial;
        let listen_serial = self.ids.get(&spec.listen).map_or(0, |l| l.serial);
        let channel = if spec.listen != 0 {
            self.ids.get(&spec.listen).map_or(0, |l| l.channel)
        } else {
            s.channel
        };
        let Some(ch) = self.channels.get_mut(&channel) else {
            return;
        };
        let n = spec.data.len().min(MAX_PRIVATE_DATA);
        let param = match spec.ud {
            Some(u) => rdma_cm_event_param {
                ud: rdma_ud_param {
                    private_data: std::ptr::null(),
                    private_data_len: n as u8,
                    ah_attr: u.ah_attr,
                    qp_num: u.qp_num,
                    qkey: u.qkey,
                },
            },
            None => rdma_cm_event_param {
                conn: rdma_conn_param {
                    private_data: std::ptr::null(),
                    private_data_len: n as u8,
                    responder_resources: spec.responder_resources,
                    initiator_depth: spec.initiator_depth,
                    flow_control: 0,
                    retry_count: 0,
                    rnr_retry_count: spec.rnr_retry_count,
                    srq: 0,
                    qp_num: spec.qp_num,
                },
            },
        };
        let mut ev = Box::new(Ev {
            ev: rdma_cm_event {
                id: id as *mut rdma_cm_id,
                listen_id: spec.listen as *mut rdma_cm_id,
                event: spec.event,
                status: spec.status,
                param,
            },
            id_serial,
            listen_serial,
            data: [0; MAX_PRIVATE_DATA],
        });
        ev.data[..n].copy_from_slice(&spec.data[..n]);
        if n > 0 {
            let data = ev.data.as_ptr().cast::<c_void>();
            // Both members start with the private data pointer; write the one the event has.
            match spec.ud {
                Some(_) => ev.ev.param.ud.private_data = data,
                None => ev.ev.param.conn.private_data = data,
            }
        }
        ch.queue.push_back(ev);
        let one = 1u64;
        // SAFETY: the channel's eventfd, 8 readable bytes.
        unsafe { libc::write(ch.fd, (&raw const one).cast(), 8) };
    }

    /// Whether a queued event still names live IDs.
    pub fn current(&self, ev: &Ev) -> bool {
        let live = |p: *mut rdma_cm_id, serial| {
            self.ids
                .get(&(p as usize))
                .is_some_and(|s| s.serial == serial)
        };
        live(ev.ev.id, ev.id_serial)
            && (ev.ev.listen_id.is_null() || live(ev.ev.listen_id, ev.listen_serial))
    }
}
