//! Requests on UD QPs and the address handles their sends name.

use super::*;

impl Host {
    /// `Request::CreateUdQp`.
    pub(super) fn create_ud_qp(
        &mut self,
        c: Call<'_>,
        spec: QpSpec,
        q_key: u32,
        sq_psn: u32,
    ) -> Result<Reply, Refusal> {
        let Call {
            ep, mem, now, app, ..
        } = c;
        let limits = self.limits;
        let a = app_of(&mut self.apps, app)?;
        if a.qps.len() >= limits.max_qps as usize {
            return Err(limit("QPs", limits.max_qps, "max_qps"));
        }
        controlled_qkey(q_key, a.creds.uid)?;
        let cfg = qp_config(&spec, a, None)?;
        let mtu = self.iface.path_mtu(false).ok_or_else(|| {
            Refusal(
                ErrorKind::Path,
                format!("interface {} MTU is too small for RoCE", self.iface.name),
            )
        })?;
        let (sq, rq, fds) = qp_rings(&cfg, a, &limits)?;
        let qpn = ep.create_ud_qp(cfg, mtu)?;
        if let Err(e) = ep.activate_ud_qp(qpn, q_key, sq_psn, now, mem) {
            let _ = ep.destroy_qp(qpn);
            return Err(e.into());
        }
        let response = Response::UdQp {
            qpn: qpn.value(),
            sq_slots: sq.slots(),
            rq_slots: rq.slots(),
            mtu: mtu.bytes(),
        };
        a.insert_qp(qpn, QpShare::new(sq, rq, &cfg));
        Ok(Reply {
            response,
            fds,
            announce: None,
        })
    }

    /// `Request::CreateAh`.
    pub(super) fn create_ah(
        &mut self,
        c: Call<'_>,
        ip: std::net::IpAddr,
        mac: Option<[u8; 6]>,
        dscp: u8,
    ) -> Result<Reply, Refusal> {
        let Call { app, .. } = c;
        let limits = self.limits;
        let a = app_of(&mut self.apps, app)?;
        if a.ahs.len() >= limits.max_ahs as usize {
            return Err(limit("address handles", limits.max_ahs, "max_ahs"));
        }
        let ah = address_handle(&self.iface, ip, mac, dscp)?;
        let id = a.ahs.insert(ah);
        Ok(Reply::ok(Response::Ah(id)))
    }

    /// `Request::DestroyAh`.
    pub(super) fn destroy_ah(&mut self, c: Call<'_>, ah: u32) -> Result<Reply, Refusal> {
        let Call { app, .. } = c;
        let a = app_of(&mut self.apps, app)?;
        a.ahs.remove(ah).ok_or_else(|| unknown("address handle"))?;
        Ok(Reply::ok(Response::Done))
    }
}
