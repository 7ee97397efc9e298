//! The seam between a `Device` and where its verbs are carried out: the in-process engine
//! (`local.rs`) or a `rocev2d` daemon (`attached.rs`), chosen once when the device opens.
//!
//! Each backend implements [`Backend`]; a public `Device` method (in `device/`) checks its
//! handles and delegates. A new verb is one method here, one in each backend, and the public
//! method (plus, attached, the request and the daemon's handler).
//!
//! This module imports only the crate's vocabulary (errors, handles, the UD and CM-wait types,
//! wake-ups, the engine's state and guard); the backends import it and the vocabulary, never
//! each other nor the device; the device imports them all (`tests/layering.rs`).

use crate::cm_wait::Look;
use crate::engine::{EngineGuard, ProgressMode};
use crate::error::Result;
use crate::qp::{ConnectOptions, RemoteQp};
use crate::ud::{AhAttr, UdAddress};
use crate::wakeup::Waitable;
use rocev2_core::cm::{
    AcceptParams, ConnId, ConnectParams, Event, RejectReason, ServiceId, SidrId, SidrParams,
    SidrReplyParams,
};
use rocev2_core::cq::WorkCompletion;
use rocev2_core::mr::{AccessFlags, MrInfo, PdId};
use rocev2_core::qp::{CqId, ErrorCause, Mtu, QpConfig, QpMode, QpState, RecvWr, SendWr};
use rocev2_core::srq::{SrqAttr, SrqId};
use rocev2_core::wire::Qpn;
use rocev2_datapath::Progress;
use rocev2_datapath::host::CallerRange;
use rocev2_ipc::notify::EventFd;
use rocev2_ipc::proto::ModifySpec;
use std::ops::DerefMut;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::sync::Arc;
use std::time::Duration;

/// What a wait on a CQ does next ([`Backend::step`]), decided under the backend's lock and
/// carried out without it.
pub(crate) enum Step {
    /// This many completions were taken.
    Done(usize),
    /// Look again at once.
    Again,
    /// Busy-polling: yield, then look again.
    Yield,
    /// Caller-driven: let the driver wait for frames or timers ([`Backend::drive_wait`]),
    /// then look again.
    Drive,
    /// Sleep until `event` (the CQ's wake-up) or `watch` (attached: the control socket, which
    /// a dying daemon closes) is readable, then [`Backend::disarm`] and [`Backend::alive`].
    Sleep {
        event: Arc<Waitable<EventFd>>,
        watch: Option<Arc<Waitable<OwnedFd>>>,
    },
}

/// An application thread driving the engine in a wait ([`Backend::driving`]), until dropped
/// or handed back.
pub(crate) trait Drive {
    /// Ends the drive because the waiter is about to sleep.
    fn hand_back(self: Box<Self>);
}

/// A region's bytes with the backend locked ([`Backend::region`]).
pub(crate) type RegionBytes<'a> =
    Box<dyn DerefMut<Target = [u8]> + UnwindSafe + RefUnwindSafe + 'a>;

/// The verbs a backend carries out, on the engine's ids (the device has checked that the
/// handles are its own).
pub(crate) trait Backend: Send + Sync {
    /// `ibv_alloc_pd`.
    fn alloc_pd(&self) -> Result<PdId>;
    /// Registers `buf` in `pd` at an address that is a multiple of `align`.
    fn register(&self, pd: PdId, buf: Vec<u8>, align: u64, access: AccessFlags) -> Result<MrInfo>;
    /// Deregisters `mr` and returns its bytes.
    fn deregister(&self, mr: &MrInfo) -> Result<Vec<u8>>;
    /// Registers bytes the caller keeps at their own address, named `iova` (the C ABI's
    /// `ibv_reg_mr`).
    fn register_caller(
        &self,
        pd: PdId,
        range: CallerRange,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrInfo>;
    /// `ibv_dealloc_pd`.
    fn dealloc_pd(&self, pd: PdId) -> Result<()>;
    /// `ibv_create_cq`, with the CQ's wake-up.
    fn create_cq(&self, capacity: usize) -> Result<CqId>;
    /// `ibv_destroy_cq`.
    fn destroy_cq(&self, cq: CqId) -> Result<()>;
    /// `ibv_req_notify_cq`: the CQ's wake-up ([`Backend::cq_event_fd`]) becomes readable at
    /// its next completion, at once when it holds one.
    fn arm_cq(&self, cq: CqId) -> Result<()>;
    /// Takes the wake-up an armed CQ gave ([`Backend::arm_cq`]).
    fn ack_cq_event(&self, cq: CqId);
    /// A descriptor of the CQ's wake-up, for `poll(2)` or epoll.
    fn cq_event_fd(&self, cq: CqId) -> Result<OwnedFd>;
    /// The application thread that drove the engine ([`Backend::poll_cq_driving`]) is about
    /// to sleep: the progress thread takes over at once (attached: nothing, the daemon drives).
    fn hand_back(&self);
    /// `ibv_poll_cq` as a busy-polling program calls it: an empty CQ first gets one pass of
    /// the engine (in-process; the daemon drives its own), and the progress thread backs off
    /// while the polls go on.
    fn poll_cq_driving(&self, cq: CqId, out: &mut Vec<WorkCompletion>, max: usize)
    -> Result<usize>;
    /// An RC QP in INIT with every remote right.
    fn create_qp(&self, cfg: QpConfig) -> Result<Qpn>;
    /// INIT→RTR→RTS towards `remote`.
    fn connect(&self, qp: Qpn, remote: &RemoteQp, opts: &ConnectOptions) -> Result<()>;
    /// `ibv_modify_qp`, one step; the state reached.
    fn modify_qp(&self, qp: Qpn, spec: &ModifySpec) -> Result<QpState>;
    /// An RC QP's transport mode.
    fn qp_mode(&self, qp: Qpn) -> Option<QpMode>;
    /// A multipath QP's state ([`crate::MpSnapshot`]).
    fn mp_snapshot(&self, qp: Qpn) -> Option<crate::MpSnapshot>;
    /// An RC or UD QP's state.
    fn qp_state(&self, qp: Qpn) -> Option<QpState>;
    /// Why an RC QP entered ERROR ([`ErrorCause`]); `None` while it has not.
    fn qp_error(&self, qp: Qpn) -> Option<ErrorCause>;
    /// Moves a QP to ERROR.
    fn reset_to_error(&self, qp: Qpn) -> Result<()>;
    /// `ibv_destroy_qp`.
    fn destroy_qp(&self, qp: Qpn) -> Result<()>;
    /// `ibv_post_send` on an RC QP.
    fn post_send(&self, qp: Qpn, wr: SendWr) -> Result<()>;
    /// `ibv_post_recv`.
    fn post_recv(&self, qp: Qpn, wr: RecvWr) -> Result<()>;
    /// `ibv_poll_cq`, without driving the engine.
    fn poll_cq(&self, cq: CqId, out: &mut Vec<WorkCompletion>, max: usize) -> usize;
    /// A UD QP in RTS with `q_key`.
    fn create_ud_qp(&self, cfg: QpConfig, q_key: u32) -> Result<Qpn>;
    /// A UD QP's MTU; `None` for an RC QP or an unknown one.
    fn ud_mtu(&self, qp: Qpn) -> Option<Mtu>;
    /// `ibv_create_ah`: the handle's number.
    fn create_ah(&self, attr: &AhAttr) -> Result<u32>;
    /// `ibv_destroy_ah`.
    fn destroy_ah(&self, ah: u32) -> Result<()>;
    /// `ibv_post_send` on a UD QP, to `to`.
    fn post_send_to(&self, qp: Qpn, to: UdAddress, wr: SendWr) -> Result<()>;

    /// `ibv_create_srq`, with the wake-up its limit event signals.
    fn create_srq(&self, pd: PdId, max_wr: u32, max_sge: u32) -> Result<SrqId>;
    /// `ibv_post_srq_recv`.
    fn post_srq_recv(&self, srq: SrqId, wr: RecvWr) -> Result<()>;
    /// `ibv_modify_srq`: a new capacity and/or an armed limit.
    fn modify_srq(&self, srq: SrqId, max_wr: Option<u32>, limit: Option<u32>) -> Result<()>;
    /// `ibv_query_srq`.
    fn query_srq(&self, srq: SrqId) -> Result<SrqAttr>;
    /// `ibv_destroy_srq`.
    fn destroy_srq(&self, srq: SrqId) -> Result<()>;
    /// A descriptor of the SRQ's wake-up, readable once its limit was reached until
    /// [`Backend::take_srq_limit`].
    fn srq_event_fd(&self, srq: SrqId) -> Result<OwnedFd>;
    /// Takes the SRQ's limit event: whether its limit was reached since the last call.
    fn take_srq_limit(&self, srq: SrqId) -> Result<bool>;

    /// Opens QP1 with a CM behind it, once (attached: asks for this application's events).
    fn cm_enable(&self) -> Result<()>;
    /// Accepts REQs for `service` (the CM enabled).
    fn cm_listen(&self, service: ServiceId) -> Result<()>;
    /// Stops accepting REQs for `service`; whether anyone listened.
    fn cm_unlisten(&self, service: ServiceId) -> Result<bool>;
    /// Sends a REQ with `params` (checked and completed by the device), resolving the peer
    /// within `resolve_timeout`.
    fn cm_connect(&self, params: ConnectParams, resolve_timeout: Duration) -> Result<ConnId>;
    /// Accepts a connection request.
    fn cm_accept(&self, conn: ConnId, params: AcceptParams) -> Result<()>;
    /// Refuses a connection request with a REJ.
    fn cm_reject(&self, conn: ConnId, reason: RejectReason, private_data: &[u8]) -> Result<()>;
    /// Answers a connection request with an MRA.
    fn cm_send_mra(&self, conn: ConnId, service_timeout: u8) -> Result<()>;
    /// Sends a DREQ.
    fn cm_disconnect(&self, conn: ConnId, private_data: &[u8]) -> Result<()>;
    /// Sends a SIDR_REQ with `params`, resolving the peer within `resolve_timeout`.
    fn cm_sidr_request(&self, params: SidrParams, resolve_timeout: Duration) -> Result<SidrId>;
    /// Answers a SIDR request with a SIDR_REP.
    fn cm_sidr_reply(&self, id: SidrId, params: SidrReplyParams) -> Result<()>;
    /// One look of a CM waiter whose wake-up is `own` (registered with the device's CM waiters
    /// on the first look, which sets `registered`): the first event `pick` accepts, else what to
    /// sleep on. Clears `own` under the lock events are queued under, after taking them.
    fn cm_look(
        &self,
        own: &Arc<Waitable<EventFd>>,
        registered: &mut bool,
        pick: &mut dyn FnMut(&Event) -> bool,
    ) -> Result<Look>;
    /// A CM or caller-driven CQ waiter's blocking wait: the driver waits for frames or timers
    /// (attached: nothing, the daemon drives).
    fn drive_wait(&self) -> Result<()>;
    /// After a CM waiter's sleep: reports the daemon's death (waking the other waiters).
    fn cm_check_alive(&self) -> Result<()>;

    /// Who drives the engine: `Some` in-process, `None` attached (the daemon).
    fn progress_mode(&self) -> Option<ProgressMode>;
    /// The in-process engine, locked; `None` attached.
    fn engine(&self) -> Option<EngineGuard<'_>>;
    /// `mr`'s bytes, with the backend locked.
    fn region(&self, mr: &MrInfo) -> Result<RegionBytes<'_>>;
    /// One pass of the engine (attached: a check that the daemon lives).
    fn poll(&self) -> Result<Progress>;
    /// Sleeps until something happened since the last [`Backend::poll`] or one of `extra` is
    /// readable; which of `extra` are.
    fn wait(&self, extra: &[BorrowedFd<'_>]) -> Result<Vec<bool>>;
    /// One look at `cq` for a wait: takes up to `max` completions, or says how to wait;
    /// `spin`: inside the wait's busy-polling window.
    fn step(&self, cq: CqId, out: &mut Vec<WorkCompletion>, max: usize, spin: bool)
    -> Result<Step>;
    /// After a CQ sleep: reports the daemon's death.
    fn alive(&self) -> Result<()>;
    /// Ends a sleep on `cq` (attached: disarms its wake-up).
    fn disarm(&self, cq: CqId);
    /// Marks a busy-polling wait that drives the engine while the progress thread backs off;
    /// `None` when waits do not drive (attached, or no drive window).
    fn driving(&self) -> Option<Box<dyn Drive + Send + '_>>;
    /// How long a wait busy-polls before sleeping.
    fn spin_window(&self) -> Duration;
    /// Waits until nothing is left to send and no timer is pending.
    fn drain(&self, timeout: Duration) -> Result<()>;
    /// The progress thread's passes (tests of its back-off); `None` attached.
    #[cfg(test)]
    fn passes(&self) -> Option<u64>;
}
