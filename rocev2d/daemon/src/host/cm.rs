//! Requests on the connection manager: the daemon's CM (QP1) shared out, a service ID to the
//! application listening on it, a connection to the application that started or was offered
//! it.

use super::*;
use rocev2_core::cm::SidrReplyParams;
use rocev2_core::wire::Qpn;

impl Host {
    /// `Request::CmEnable`.
    pub(super) fn cm_enable(&mut self, c: Call<'_>) -> Result<Reply, Refusal> {
        let Call { app, .. } = c;
        let a = app_of(&mut self.apps, app)?;
        if a.cm_event.is_none() {
            a.cm_event =
                Some(EventFd::new().map_err(|e| Refusal(ErrorKind::Invalid, e.to_string()))?);
        }
        let event = a.cm_event.as_ref().map(|e| dup(e.as_fd())).transpose()?;
        if !a.cm_events.is_empty()
            && let Some(e) = &a.cm_event
        {
            e.signal();
        }
        Ok(Reply {
            response: Response::CmEnabled,
            fds: event.into_iter().collect(),
            announce: None,
        })
    }

    /// `Request::CmListen`.
    pub(super) fn cm_listen(&mut self, c: Call<'_>, service_id: u64) -> Result<Reply, Refusal> {
        let Call { ep, app, .. } = c;
        let limits = self.limits;
        let a = app_of(&mut self.apps, app)?;
        let service = ServiceId(service_id);
        // As the kernel's rdma_cm binds a port: below 1024 only for the privileged.
        if let Some((_, port)) = service.rdma_cm_parts()
            && port < 1024
            && a.creds.uid != 0
        {
            return Err(Refusal(
                ErrorKind::Invalid,
                format!("port {port} is below 1024: only root may listen on it"),
            ));
        }
        let held = self.listeners.values().filter(|o| **o == app).count();
        if held >= limits.max_listens as usize {
            return Err(limit("listens", limits.max_listens, "max_listens"));
        }
        if let Some(owner) = self.listeners.get(&service) {
            let whose = if *owner == app {
                "this application listens on it already"
            } else {
                "another application listens on it"
            };
            return Err(Refusal(
                ErrorKind::InUse,
                format!("service ID {service_id:#018x} is taken: {whose}"),
            ));
        }
        // Another shard's application may hold it: the interface's registry says.
        if let Some(l) = &self.listens
            && !l.listen(service)
        {
            return Err(Refusal(
                ErrorKind::InUse,
                format!(
                    "service ID {service_id:#018x} is taken: an application of another engine shard listens on it"
                ),
            ));
        }
        if let Err(e) = ep.cm_listen(service) {
            if let Some(l) = &self.listens {
                l.unlisten(service);
            }
            return Err(e.into());
        }
        self.listeners.insert(service, app);
        Ok(Reply::ok(Response::Done))
    }

    /// `Request::CmUnlisten`.
    pub(super) fn cm_unlisten(&mut self, c: Call<'_>, service_id: u64) -> Result<Reply, Refusal> {
        let Call { ep, app, .. } = c;
        let service = ServiceId(service_id);
        let ours = self.listeners.get(&service) == Some(&app);
        if ours {
            self.listeners.remove(&service);
            if let Some(l) = &self.listens {
                l.unlisten(service);
            }
            ep.cm_unlisten(service)?;
        }
        Ok(Reply::ok(Response::Listened(ours)))
    }

    /// `Request::CmConnect`.
    pub(super) fn cm_connect(
        &mut self,
        c: Call<'_>,
        qpn: u32,
        spec: rocev2_ipc::cm::ConnectSpec,
        mac: Option<[u8; 6]>,
    ) -> Result<Reply, Refusal> {
        let Call { ep, now, app, .. } = c;
        let a = app_of(&mut self.apps, app)?;
        let qpn = owned_qp(a, qpn)?;
        let mac = self.next_hop(spec.local_gid, spec.peer_gid, mac)?;
        let conn = ep.cm_connect(now, spec.params(qpn), mac)?;
        self.conns.insert(conn, app);
        Ok(Reply::ok(Response::CmConn(conn.comm_id())))
    }

    /// `Request::CmAccept`.
    pub(super) fn cm_accept(
        &mut self,
        c: Call<'_>,
        comm_id: u32,
        spec: rocev2_ipc::cm::AcceptSpec,
    ) -> Result<Reply, Refusal> {
        let Call {
            ep, mem, now, app, ..
        } = c;
        let a = app_of(&mut self.apps, app)?;
        let conn = owned_conn(&self.conns, app, comm_id)?;
        let params = AcceptParams::from(spec);
        owned_qp(a, params.local_qpn.value())?;
        ep.cm_accept(now, conn, params, mem)?;
        Ok(Reply::ok(Response::Done))
    }

    /// `Request::CmReject`.
    pub(super) fn cm_reject(
        &mut self,
        c: Call<'_>,
        comm_id: u32,
        reason: u16,
        private_data: Vec<u8>,
    ) -> Result<Reply, Refusal> {
        let Call { ep, now, app, .. } = c;
        let conn = owned_conn(&self.conns, app, comm_id)?;
        ep.cm_reject(now, conn, RejectReason(reason), &private_data)?;
        Ok(Reply::ok(Response::Done))
    }

    /// `Request::CmSendMra`.
    pub(super) fn cm_send_mra(
        &mut self,
        c: Call<'_>,
        comm_id: u32,
        service_timeout: u8,
    ) -> Result<Reply, Refusal> {
        let Call { ep, app, .. } = c;
        let conn = owned_conn(&self.conns, app, comm_id)?;
        ep.cm_send_mra(conn, service_timeout)?;
        Ok(Reply::ok(Response::Done))
    }

    /// `Request::CmDisconnect`.
    pub(super) fn cm_disconnect(
        &mut self,
        c: Call<'_>,
        comm_id: u32,
        private_data: Vec<u8>,
    ) -> Result<Reply, Refusal> {
        let Call {
            ep, mem, now, app, ..
        } = c;
        let conn = owned_conn(&self.conns, app, comm_id)?;
        ep.cm_disconnect(now, conn, &private_data, mem)?;
        Ok(Reply::ok(Response::Done))
    }

    /// `Request::CmPoll`.
    /// The next hop's MAC for a CM message from `local_gid` (one of the interface's) to
    /// `peer_gid`, as the control plane resolved it.
    fn next_hop(
        &self,
        local_gid: std::net::Ipv6Addr,
        peer_gid: std::net::Ipv6Addr,
        mac: Option<[u8; 6]>,
    ) -> Result<[u8; 6], Refusal> {
        if !self.iface.gids().contains(&local_gid) {
            return Err(Refusal(
                ErrorKind::Path,
                format!("{local_gid} is not a GID of interface {}", self.iface.name),
            ));
        }
        mac.ok_or_else(|| {
            Refusal(
                ErrorKind::Path,
                format!("no neighbour entry for {peer_gid}"),
            )
        })
    }

    pub(super) fn cm_poll(&mut self, c: Call<'_>, max: u32) -> Result<Reply, Refusal> {
        let Call { app, .. } = c;
        let a = app_of(&mut self.apps, app)?;
        let n = a.cm_events.len().min(max as usize);
        let events = a.cm_events.drain(..n).map(|e| EventRecord::from(&e));
        Ok(Reply::ok(Response::CmEvents(events.collect())))
    }

    /// `Request::CmSidrRequest`.
    pub(super) fn cm_sidr_request(
        &mut self,
        c: Call<'_>,
        spec: rocev2_ipc::cm::SidrSpec,
        mac: Option<[u8; 6]>,
    ) -> Result<Reply, Refusal> {
        let Call { ep, now, app, .. } = c;
        app_of(&mut self.apps, app)?;
        let mac = self.next_hop(spec.local_gid, spec.peer_gid, mac)?;
        let id = ep.cm_sidr_request(now, &spec.into(), mac)?;
        self.sidrs.insert(id, app);
        Ok(Reply::ok(Response::CmSidr(id.value())))
    }

    /// `Request::CmSidrReply`.
    pub(super) fn cm_sidr_reply(
        &mut self,
        c: Call<'_>,
        id: u32,
        spec: rocev2_ipc::cm::SidrReplySpec,
    ) -> Result<Reply, Refusal> {
        let Call { ep, app, .. } = c;
        let id = SidrId::from_value(id);
        if self.sidrs.get(&id) != Some(&app) {
            return Err(unknown("SIDR request"));
        }
        let params = SidrReplyParams::try_from(spec)
            .map_err(|e| Refusal(ErrorKind::Invalid, e.to_string()))?;
        ep.cm_sidr_reply(id, &params)?;
        self.sidrs.remove(&id);
        Ok(Reply::ok(Response::Done))
    }

    /// Hands the engine's CM events to the applications they belong to: a connect or SIDR
    /// request to the service's listener, any other event to its connection's or SIDR
    /// request's application. A SIDR request nobody's application can answer (it detached) is
    /// answered "service ID not supported". Returns whether there were any.
    pub(super) fn route_cm_events(
        &mut self,
        ep: &mut Endpoint,
        mem: &mut HostMemory,
        now: Instant,
    ) -> bool {
        let mut any = false;
        while let Some(ev) = ep.poll_cm_event() {
            any = true;
            let Some(conn) = ev.conn() else {
                self.route_sidr_event(ep, ev);
                continue;
            };
            let owner = match &ev {
                CmEvent::ConnectRequest(r) => {
                    let owner = self.listeners.get(&ServiceId(r.req.service_id)).copied();
                    if let Some(app) = owner {
                        self.conns.insert(conn, app);
                    }
                    owner
                }
                _ => self.conns.get(&conn).copied(),
            };
            if matches!(
                ev,
                CmEvent::TimeWaitExit { .. } | CmEvent::Rejected { .. } | CmEvent::TimedOut { .. }
            ) {
                // The connection is over: nothing more will be said of it.
                self.conns.remove(&conn);
            }
            let Some(a) = owner.and_then(|app| self.apps.get_mut(&app)) else {
                // Nobody's (its application went while it was being set up).
                if matches!(ev, CmEvent::ConnectRequest(_) | CmEvent::Established { .. }) {
                    self.close_orphan(ep, mem, now, conn);
                }
                continue;
            };
            if a.cm_events.len() >= MAX_CM_EVENTS {
                a.cm_events.pop_front();
                self.counters.cm_events_dropped += 1;
            }
            a.cm_events.push_back(ev);
            self.counters.cm_events += 1;
            if let Some(e) = &a.cm_event {
                e.signal();
            }
        }
        any
    }

    /// [`Self::route_cm_events`] for a SIDR event.
    fn route_sidr_event(&mut self, ep: &mut Endpoint, ev: CmEvent) {
        let owner = match &ev {
            CmEvent::SidrRequest(r) => {
                let owner = self.listeners.get(&ServiceId(r.req.service_id)).copied();
                if let Some(app) = owner {
                    self.sidrs.insert(r.id, app);
                }
                owner
            }
            // The request is over.
            _ => ev.sidr().and_then(|id| self.sidrs.remove(&id)),
        };
        let Some(a) = owner.and_then(|app| self.apps.get_mut(&app)) else {
            if let CmEvent::SidrRequest(r) = &ev {
                self.sidrs.remove(&r.id);
                let _ = ep.cm_sidr_reply(r.id, &sidr_answer(SidrStatus::UNSUPPORTED));
            }
            return;
        };
        if a.cm_events.len() >= MAX_CM_EVENTS {
            a.cm_events.pop_front();
            self.counters.cm_events_dropped += 1;
        }
        a.cm_events.push_back(ev);
        self.counters.cm_events += 1;
        if let Some(e) = &a.cm_event {
            e.signal();
        }
    }

    /// Tears down a connection no application owns: a DREQ if it is established, else a REJ
    /// (Consumer) if it is a request not yet answered; otherwise it is on its way down already.
    pub(super) fn close_orphan(
        &mut self,
        ep: &mut Endpoint,
        mem: &mut HostMemory,
        now: Instant,
        conn: ConnId,
    ) {
        let closed = ep.cm_disconnect(now, conn, &[], mem).is_ok()
            || ep.cm_reject(now, conn, RejectReason::CONSUMER, &[]).is_ok();
        if closed {
            self.counters.cm_orphans_closed += 1;
        }
    }
}

/// A SIDR_REP with `status` and nothing else: the daemon's answer for applications that
/// cannot give theirs.
pub(super) fn sidr_answer(status: SidrStatus) -> SidrReplyParams {
    SidrReplyParams {
        status,
        qpn: Qpn::new(0),
        q_key: 0,
        private_data: Vec::new(),
    }
}

/// Connection `comm_id` if it is `app`'s.
fn owned_conn(conns: &BTreeMap<ConnId, u32>, app: u32, comm_id: u32) -> Result<ConnId, Refusal> {
    let conn = ConnId::from_comm_id(comm_id);
    if conns.get(&conn) == Some(&app) {
        Ok(conn)
    } else {
        Err(unknown("connection"))
    }
}
