//! Requests on an attachment's RC QPs: creation with its rings, connection, stepwise modify,
//! ERROR, destruction and queries.

use super::*;
use rocev2_ipc::proto::ModifySpec;

impl Host {
    /// `Request::CreateQp`.
    pub(super) fn create_qp(&mut self, c: Call<'_>, spec: QpSpec) -> Result<Reply, Refusal> {
        let Call {
            ep, mem, now, app, ..
        } = c;
        let limits = self.limits;
        let a = app_of(&mut self.apps, app)?;
        if a.qps.len() >= limits.max_qps as usize {
            return Err(limit("QPs", limits.max_qps, "max_qps"));
        }
        let cfg = qp_config(&spec, a, self.cc)?;
        let (sq, rq, fds) = qp_rings(&cfg, a, &limits)?;
        let qpn = ep.create_qp(cfg)?;
        if let Err(e) = ep.modify_qp(qpn, QpState::Init, &QpAttr::init_all_access(), now, mem) {
            let _ = ep.destroy_qp(qpn);
            return Err(e.into());
        }
        let response = Response::Qp {
            qpn: qpn.value(),
            sq_slots: sq.slots(),
            rq_slots: rq.slots(),
        };
        a.insert_qp(qpn, QpShare::new(sq, rq, &cfg));
        Ok(Reply {
            response,
            fds,
            announce: None,
        })
    }

    /// `Request::Connect`.
    pub(super) fn connect(
        &mut self,
        c: Call<'_>,
        qpn: u32,
        spec: ConnectSpec,
    ) -> Result<Reply, Refusal> {
        let Call {
            ep, mem, now, app, ..
        } = c;
        let a = app_of(&mut self.apps, app)?;
        let qpn = owned_qp(a, qpn)?;
        let attr = connect_attr(&self.iface, qpn, &spec)?;
        ep.connect_qp(qpn, &attr, now, mem)?;
        Ok(Reply {
            response: Response::Done,
            fds: Vec::new(),
            announce: Some(attr.path),
        })
    }

    /// `Request::ModifyQp`.
    pub(super) fn modify_qp(
        &mut self,
        c: Call<'_>,
        qpn: u32,
        spec: ModifySpec,
    ) -> Result<Reply, Refusal> {
        let Call {
            ep, mem, now, app, ..
        } = c;
        let a = app_of(&mut self.apps, app)?;
        let qpn = owned_qp(a, qpn)?;
        if let Some(q) = spec.q_key {
            controlled_qkey(q, a.creds.uid)?;
        }
        let current = match (ep.qp(qpn), ep.ud_qp(qpn)) {
            (Some(qp), _) => qp.state(),
            (None, Some(ud)) => ud.state(),
            (None, None) => return Err(unknown("QP")),
        };
        // The control plane resolved the next hop before the request came here.
        let hop = |d: &Destination| NextHop::new(d.mac, std::time::Duration::ZERO);
        let (to, attr) =
            host::modify_attr(&self.iface, qpn, &spec, current, hop).map_err(path_refusal)?;
        ep.modify_qp(qpn, to, &attr, now, mem)?;
        Ok(Reply {
            response: Response::QpStatus {
                state: to.as_ibv(),
                multipath: ep.qp(qpn).is_some_and(|q| q.mode() == QpMode::MultiPath),
                error: ep
                    .qp(qpn)
                    .and_then(|q| q.error_cause())
                    .map(|c| c.to_parts()),
            },
            fds: Vec::new(),
            announce: attr.path,
        })
    }

    /// `Request::ModifyToError`.
    pub(super) fn modify_to_error(&mut self, c: Call<'_>, qpn: u32) -> Result<Reply, Refusal> {
        let Call {
            ep, mem, now, app, ..
        } = c;
        let a = app_of(&mut self.apps, app)?;
        let qpn = owned_qp(a, qpn)?;
        ep.modify_qp(qpn, QpState::Error, &QpAttr::default(), now, mem)?;
        Ok(Reply::ok(Response::Done))
    }

    /// `Request::DestroyQp`.
    pub(super) fn destroy_qp(&mut self, c: Call<'_>, qpn: u32) -> Result<Reply, Refusal> {
        let Call { ep, app, .. } = c;
        let a = app_of(&mut self.apps, app)?;
        let qpn = owned_qp(a, qpn)?;
        ep.destroy_qp(qpn)?;
        a.remove_qp(qpn);
        Ok(Reply::ok(Response::Done))
    }

    /// `Request::QueryQp`.
    pub(super) fn query_qp(&mut self, c: Call<'_>, qpn: u32) -> Result<Reply, Refusal> {
        let Call { ep, app, .. } = c;
        let a = app_of(&mut self.apps, app)?;
        let qpn = owned_qp(a, qpn)?;
        let (state, multipath) = match (ep.qp(qpn), ep.ud_qp(qpn)) {
            (Some(qp), _) => (qp.state(), qp.mode() == QpMode::MultiPath),
            (None, Some(ud)) => (ud.state(), false),
            (None, None) => return Err(unknown("QP")),
        };
        let error = ep
            .qp(qpn)
            .and_then(|q| q.error_cause())
            .map(|c| c.to_parts());
        Ok(Reply::ok(Response::QpStatus {
            state: state.as_ibv(),
            multipath,
            error,
        }))
    }

    /// `Request::MpSnapshot`.
    pub(super) fn mp_snapshot(&mut self, c: Call<'_>, qpn: u32) -> Result<Reply, Refusal> {
        let Call { ep, app, .. } = c;
        let a = app_of(&mut self.apps, app)?;
        let qpn = owned_qp(a, qpn)?;
        let snap = ep.qp(qpn).and_then(|q| q.mp_snapshot());
        Ok(Reply::ok(Response::MpState(
            snap.as_ref().map(MpState::from),
        )))
    }
}
