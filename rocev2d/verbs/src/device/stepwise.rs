//! The verbs at libibverbs' own granularity, for programs written against it (the C ABI,
//! `librocev2_ibverbs`, is built on them): a QP moved one state at a time
//! ([`Device::modify_qp`]), memory registered where the caller keeps it
//! ([`Device::register_caller`]), completion events a completion channel can poll
//! ([`Device::arm_cq`]), a poll that drives the engine as a busy-polling program expects
//! ([`Device::poll_cq_driving`]), and the teardown of PDs and CQs.
//!
//! Each works in-process and attached alike: attached, the daemon reaches caller memory
//! through this process's `/proc/self/mem` (docs/security.md says what it may touch).

use super::Device;
use crate::error::Result;
use crate::mr::{Mr, Pd};
use crate::qp::{Cq, Qp};
use rocev2_core::cq::WorkCompletion;
use rocev2_core::mr::AccessFlags;
use rocev2_core::qp::QpState;
use rocev2_datapath::host::CallerRange;
use rocev2_ipc::proto::ModifySpec;
use std::os::fd::OwnedFd;

impl Device {
    /// Registers bytes the caller keeps at their own address (`ibv_reg_mr_iova` on any
    /// buffer): peers and work requests name the region by `iova` (the buffer's address, for
    /// `ibv_reg_mr`), and the engine (or the daemon) reads and writes the buffer in place. A
    /// range whose first or last byte is not mapped is refused.
    ///
    /// # Errors
    /// [`crate::Error::Io`] (`InvalidInput`) for memory this process does not have; as
    /// [`Device::register`].
    pub fn register_caller(
        &self,
        pd: Pd,
        range: CallerRange,
        iova: u64,
        access: AccessFlags,
    ) -> Result<Mr> {
        self.own(pd.1, "protection domain")?;
        Ok(Mr {
            info: self.ops().register_caller(pd.0, range, iova, access)?,
            device: self.id(),
        })
    }

    /// Frees a protection domain that holds no region or QP (`ibv_dealloc_pd`).
    ///
    /// # Errors
    /// [`crate::Error::Verb`] while it holds objects; [`crate::Error::WrongDevice`].
    pub fn dealloc_pd(&self, pd: Pd) -> Result<()> {
        self.own(pd.1, "protection domain")?;
        self.ops().dealloc_pd(pd.0)
    }

    /// Destroys a CQ no QP uses (`ibv_destroy_cq`).
    ///
    /// # Errors
    /// [`crate::Error::Verb`] while a QP uses it; [`crate::Error::WrongDevice`].
    pub fn destroy_cq(&self, cq: Cq) -> Result<()> {
        self.own(cq.1, "CQ")?;
        self.ops().destroy_cq(cq.0)
    }

    /// One `ibv_modify_qp`: moves `qp` to `spec.state` (or keeps its state) with the
    /// attributes `spec` sets, building the path to `spec.dest` as [`Device::connect`] does.
    /// Returns the state reached.
    ///
    /// # Errors
    /// As [`Device::connect`]; [`crate::Error::Verb`] for a transition or attribute IBA does not
    /// allow.
    pub fn modify_qp(&self, qp: Qp, spec: &ModifySpec) -> Result<QpState> {
        self.own(qp.1, "QP")?;
        self.ops().modify_qp(qp.0, spec)
    }

    /// Asks for one completion event of `cq` (`ibv_req_notify_cq`): the descriptor of
    /// [`Device::cq_event_fd`] becomes readable at the CQ's next completion, at once when it
    /// holds one; [`Device::ack_cq_event`] takes the event.
    ///
    /// # Errors
    /// [`crate::Error::Verb`] for an unknown CQ; [`crate::Error::WrongDevice`].
    pub fn arm_cq(&self, cq: Cq) -> Result<()> {
        self.own(cq.1, "CQ")?;
        self.ops().arm_cq(cq.0)
    }

    /// Takes the event an armed CQ gave ([`Device::arm_cq`]).
    pub fn ack_cq_event(&self, cq: Cq) {
        if self.own(cq.1, "CQ").is_ok() {
            self.ops().ack_cq_event(cq.0);
        }
    }

    /// A descriptor that is readable while `cq` has an event ([`Device::arm_cq`]), for
    /// `poll(2)` or an epoll set (a completion channel's).
    ///
    /// # Errors
    /// [`crate::Error::Verb`] for an unknown CQ; [`crate::Error::Io`].
    pub fn cq_event_fd(&self, cq: Cq) -> Result<OwnedFd> {
        self.own(cq.1, "CQ")?;
        self.ops().cq_event_fd(cq.0)
    }

    /// `ibv_poll_cq` as a busy-polling program calls it: up to `max` completions of `cq` into
    /// `out`; in-process an empty CQ first gets one pass of the engine on this thread (the
    /// busy-polled round trip then has no thread hand-off) and the progress thread backs off
    /// while such polls go on. Attached, the daemon drives; the poll reads the ring.
    ///
    /// # Errors
    /// [`crate::Error::ProgressStopped`] or [`crate::Error::DaemonGone`]; [`crate::Error::WrongDevice`].
    pub fn poll_cq_driving(
        &self,
        cq: Cq,
        out: &mut Vec<WorkCompletion>,
        max: usize,
    ) -> Result<usize> {
        self.own(cq.1, "CQ")?;
        self.ops().poll_cq_driving(cq.0, out, max)
    }

    /// The calling thread, which drove the engine through [`Device::poll_cq_driving`], is
    /// about to sleep (`ibv_get_cq_event`): the progress thread takes the engine back at once
    /// instead of at the end of its back-off.
    pub fn hand_back(&self) {
        self.ops().hand_back();
    }
}
