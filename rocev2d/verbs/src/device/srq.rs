//! Shared receive queues (`ibv_create_srq` and its family, [`rocev2_core::srq`]): one queue of
//! receive requests that several QPs of a protection domain take from, so a server with many
//! connections posts its buffers once. A QP takes from an SRQ when created with
//! [`QpConfig::srq`](rocev2_core::qp::QpConfig::srq) naming [`Srq::id`]; its receive
//! completions carry its own QP number ([`crate::WorkCompletion::qp_num`]), as `ibv_wc.qp_num`
//! does, so the application learns which connection a message came on.
//!
//! The limit event (`IBV_EVENT_SRQ_LIMIT_REACHED`) is reported as the API reports a QP's
//! error ([`Device::qp_error`]): asked for ([`Device::srq_limit_reached`]), with a descriptor
//! to sleep on ([`Device::srq_event_fd`]).
//!
//! Deviations: none beyond the core's.

use super::Device;
use crate::error::Result;
use crate::mr::Pd;
use crate::qp::Srq;
use rocev2_core::qp::RecvWr;
use rocev2_core::srq::SrqAttr;
use std::os::fd::OwnedFd;

impl Device {
    /// Creates a shared receive queue in `pd` holding `max_wr` receive requests of up to
    /// `max_sge` SGEs each (`ibv_create_srq`; at least one of each).
    ///
    /// # Errors
    /// [`crate::Error::Verb`] for an unknown PD; [`crate::Error::WrongDevice`]; [`crate::Error::Io`]
    /// (no eventfd); attached, the daemon's refusals.
    pub fn create_srq(&self, pd: Pd, max_wr: u32, max_sge: u32) -> Result<Srq> {
        self.own(pd.1, "protection domain")?;
        Ok(Srq(
            self.ops().create_srq(pd.0, max_wr, max_sge)?,
            self.id(),
        ))
    }

    /// Posts a receive request to a shared receive queue (`ibv_post_srq_recv`). Attached, each
    /// post is one request to the daemon (an SRQ has no shared ring), a round trip that a QP's
    /// [`Device::post_recv`] does not make.
    ///
    /// # Errors
    /// [`crate::Error::Verb`]: the SRQ is full, the request has more SGEs than it takes, or the
    /// SRQ is unknown; [`crate::Error::WrongDevice`].
    pub fn post_srq_recv(&self, srq: Srq, wr: RecvWr) -> Result<()> {
        self.own(srq.1, "SRQ")?;
        self.ops().post_srq_recv(srq.0, wr)
    }

    /// `ibv_modify_srq`: a new capacity (`IBV_SRQ_MAX_WR`, not below the requests it holds)
    /// and/or a limit to arm (`IBV_SRQ_LIMIT`, not above its capacity; 0 disarms). Once armed,
    /// the first time the SRQ holds fewer requests than the limit, its limit event fires
    /// ([`Device::srq_limit_reached`]) and the limit disarms.
    ///
    /// # Errors
    /// [`crate::Error::Verb`] for a value out of range or an unknown SRQ;
    /// [`crate::Error::WrongDevice`].
    pub fn modify_srq(&self, srq: Srq, max_wr: Option<u32>, limit: Option<u32>) -> Result<()> {
        self.own(srq.1, "SRQ")?;
        self.ops().modify_srq(srq.0, max_wr, limit)
    }

    /// `ibv_query_srq`: its capacity, SGEs per request, armed limit (0: disarmed) and the
    /// requests it holds now.
    ///
    /// # Errors
    /// [`crate::Error::Verb`] for an unknown SRQ; [`crate::Error::WrongDevice`].
    pub fn query_srq(&self, srq: Srq) -> Result<SrqAttr> {
        self.own(srq.1, "SRQ")?;
        self.ops().query_srq(srq.0)
    }

    /// Destroys a shared receive queue no QP uses (`ibv_destroy_srq`); the requests it held
    /// are dropped without completions, as with verbs.
    ///
    /// # Errors
    /// [`crate::Error::Verb`] ([`rocev2_core::EndpointError::InUse`]) while a QP uses it;
    /// attached, [`crate::Error::Refused`] with [`crate::ErrorKind::InUse`];
    /// [`crate::Error::WrongDevice`].
    pub fn destroy_srq(&self, srq: Srq) -> Result<()> {
        self.own(srq.1, "SRQ")?;
        self.ops().destroy_srq(srq.0)
    }

    /// Takes the SRQ's limit event (`IBV_EVENT_SRQ_LIMIT_REACHED`): true once after the armed
    /// limit was reached ([`Device::modify_srq`]), false otherwise.
    ///
    /// # Errors
    /// [`crate::Error::Verb`] for an unknown SRQ; [`crate::Error::WrongDevice`].
    pub fn srq_limit_reached(&self, srq: Srq) -> Result<bool> {
        self.own(srq.1, "SRQ")?;
        self.ops().take_srq_limit(srq.0)
    }

    /// A descriptor readable from the moment the SRQ's limit is reached until
    /// [`Device::srq_limit_reached`] takes the event, for `poll(2)` or an epoll set (the C
    /// ABI's asynchronous-event descriptor).
    ///
    /// # Errors
    /// [`crate::Error::Verb`] for an unknown SRQ; [`crate::Error::Io`];
    /// [`crate::Error::WrongDevice`].
    pub fn srq_event_fd(&self, srq: Srq) -> Result<OwnedFd> {
        self.own(srq.1, "SRQ")?;
        self.ops().srq_event_fd(srq.0)
    }
}
