//! Requests on an attachment's objects: protection domains, memory regions (its memfd, or
//! memory it keeps in place behind its `/proc/self/mem`), completion queues and shared
//! receive queues (their number bounded by `[limits] max_qps`, as each serves QPs).

use super::*;

impl Host {
    /// `Request::AllocPd`.
    pub(super) fn alloc_pd(&mut self, c: Call<'_>) -> Result<Reply, Refusal> {
        let Call { ep, app, .. } = c;
        let a = app_of(&mut self.apps, app)?;
        let pd = ep.alloc_pd();
        a.pds.insert(pd);
        Ok(Reply::ok(Response::Pd(pd.value())))
    }

    /// `Request::DeallocPd`.
    pub(super) fn dealloc_pd(&mut self, c: Call<'_>, pd: u32) -> Result<Reply, Refusal> {
        let Call { ep, app, .. } = c;
        let a = app_of(&mut self.apps, app)?;
        let pd = PdId::new(pd);
        if !a.pds.contains(&pd) {
            return Err(unknown("PD"));
        }
        ep.dealloc_pd(pd)?;
        a.pds.remove(&pd);
        Ok(Reply::ok(Response::Done))
    }

    /// `Request::RegMr`.
    pub(super) fn reg_mr(
        &mut self,
        c: Call<'_>,
        pd: u32,
        len: u64,
        access: u32,
        at: Option<InPlace>,
    ) -> Result<Reply, Refusal> {
        let Call {
            ep,
            mem,
            mut fds,
            app,
            ..
        } = c;
        let limits = self.limits;
        let a = app_of(&mut self.apps, app)?;
        let pd = PdId::new(pd);
        if !a.pds.contains(&pd) {
            return Err(unknown("PD"));
        }
        if a.mrs.len() >= limits.max_mrs as usize {
            return Err(limit("memory regions", limits.max_mrs, "max_mrs"));
        }
        if a.mr_bytes.saturating_add(len) > limits.max_mr_bytes {
            return Err(Refusal(
                ErrorKind::Limit,
                format!(
                    "registering {len} bytes would exceed this application's limit of \
                     {} bytes ([limits] max_mr_bytes)",
                    limits.max_mr_bytes
                ),
            ));
        }
        let wanted = 1 + at.as_ref().map_or(0, |p| p.pages.len());
        if fds.len() != wanted {
            return Err(Refusal(
                ErrorKind::Invalid,
                format!("RegMr needs {wanted} descriptors, {} came", fds.len()),
            ));
        }
        let mut fds = std::mem::take(&mut fds).into_iter();
        let fd = fds
            .next()
            .ok_or_else(|| Refusal(ErrorKind::Invalid, "no descriptor".into()))?;
        let invalid = |e: &dyn std::fmt::Display| Refusal(ErrorKind::Invalid, e.to_string());
        let access = AccessFlags::from_bits_retain(access);
        let (info, backing) = match at {
            // The application's memfd: the daemon picks the region's address.
            None => {
                let region = Region::from_fd(fd, len).map_err(|e| invalid(&e))?;
                let addr = self.addresses.alloc(len, 1);
                let info = ep.register_mr(pd, addr, len, access).inspect_err(|_| {
                    self.addresses.free(addr, len);
                })?;
                (info, Backing::Shared(region.into_mapping()))
            }
            // Its own memory in place, through its /proc/self/mem, except the pages it moved
            // onto memfds, which are mapped.
            Some(InPlace { addr, iova, pages }) => {
                let mem = ProcessMemory::from_fd(fd).map_err(|e| invalid(&e))?;
                let mut range = mem.range(addr, len).map_err(|e| invalid(&e))?;
                for (p, fd) in pages.into_iter().zip(fds) {
                    let region = Region::from_fd(fd, p.file_len).map_err(|e| invalid(&e))?;
                    range
                        .map_pages(p.offset, p.len, p.file_offset, region.into_mapping())
                        .map_err(|e| invalid(&e))?;
                }
                (
                    ep.register_mr(pd, iova, len, access)?,
                    Backing::Process(range),
                )
            }
        };
        let mapped = match &backing {
            Backing::Process(r) => r.mapped_bytes() as u64,
            _ => len,
        };
        mem.insert(info.id, backing);
        a.mrs.insert(info.id, (len, mapped));
        a.mr_bytes += len;
        a.mr_mapped_bytes += mapped;
        Ok(Reply::ok(Response::Mr(MrSpec {
            id: info.id.value(),
            lkey: info.lkey.value(),
            rkey: info.rkey.value(),
            addr: info.addr,
            len: info.len,
            access: info.access.bits(),
            pd: info.pd.value(),
        })))
    }

    /// `Request::DeregMr`.
    pub(super) fn dereg_mr(&mut self, c: Call<'_>, mr: u32) -> Result<Reply, Refusal> {
        let Call { ep, mem, app, .. } = c;
        let a = app_of(&mut self.apps, app)?;
        let mr = MrId::new(mr);
        let (len, mapped) = *a.mrs.get(&mr).ok_or_else(|| unknown("region"))?;
        if ep.mrs().get(mr).is_none() {
            return Err(unknown("region"));
        }
        release(ep, mem, &mut self.addresses, mr);
        a.mrs.remove(&mr);
        a.mr_bytes -= len;
        a.mr_mapped_bytes -= mapped;
        Ok(Reply::ok(Response::Done))
    }

    /// `Request::CreateCq`.
    pub(super) fn create_cq(&mut self, c: Call<'_>, capacity: u32) -> Result<Reply, Refusal> {
        let Call { ep, app, .. } = c;
        let limits = self.limits;
        let a = app_of(&mut self.apps, app)?;
        if a.cqs.len() >= limits.max_cqs as usize {
            return Err(limit("CQs", limits.max_cqs, "max_cqs"));
        }
        let slots = depth(capacity, "CQ capacity")?;
        ring_room(a, &limits, &[slots])?;
        let ring = Ring::create(
            "rocev2d-cq",
            slots,
            rocev2_ipc::proto::SLOT_SIZE,
            End::Producer,
        )
        .map_err(|e| Refusal(ErrorKind::Invalid, e.to_string()))?;
        let event = EventFd::new().map_err(|e| Refusal(ErrorKind::Invalid, e.to_string()))?;
        let fds = vec![dup(ring.region().fd())?, dup(event.as_fd())?];
        let id = ep.create_cq(slots as usize);
        a.insert_cq(
            id,
            CqShare {
                ring,
                event,
                made: VecDeque::new(),
            },
        );
        Ok(Reply {
            response: Response::Cq { id: id.0, slots },
            fds,
            announce: None,
        })
    }

    /// `Request::DestroyCq`.
    pub(super) fn destroy_cq(&mut self, c: Call<'_>, cq: u32) -> Result<Reply, Refusal> {
        let Call { ep, app, .. } = c;
        let a = app_of(&mut self.apps, app)?;
        let cq = CqId(cq);
        if !a.cqs.contains_key(&cq) {
            return Err(unknown("CQ"));
        }
        ep.destroy_cq(cq)?;
        a.remove_cq(cq);
        Ok(Reply::ok(Response::Done))
    }

    /// `Request::CreateSrq`.
    pub(super) fn create_srq(
        &mut self,
        c: Call<'_>,
        pd: u32,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<Reply, Refusal> {
        let Call { ep, app, .. } = c;
        let limits = self.limits;
        let a = app_of(&mut self.apps, app)?;
        let pd = PdId::new(pd);
        if !a.pds.contains(&pd) {
            return Err(unknown("PD"));
        }
        if a.srqs.len() >= limits.max_qps as usize {
            return Err(limit("shared receive queues", limits.max_qps, "max_qps"));
        }
        let max_wr = depth(max_wr, "SRQ depth")?;
        if max_sge > MAX_SGE {
            return Err(Refusal(
                ErrorKind::Invalid,
                format!("at most {MAX_SGE} SGEs per request"),
            ));
        }
        ring_room(a, &limits, &[max_wr])?;
        let ring = work_ring(max_wr)?;
        let event = EventFd::new().map_err(|e| Refusal(ErrorKind::Invalid, e.to_string()))?;
        let fds = vec![dup(event.as_fd())?, dup(ring.region().fd())?];
        let id = ep.create_srq(pd, max_wr, max_sge)?;
        let share = SrqShare {
            event,
            ring,
            waiting: None,
        };
        a.insert_srq(id, share);
        Ok(Reply {
            response: Response::Srq {
                id: id.0,
                slots: max_wr,
            },
            fds,
            announce: None,
        })
    }

    /// Moves the requests waiting in SRQ `srq`'s ring into the engine first, so what the
    /// application asks next (a query's count, a limit to arm) sees every request it posted.
    fn drain_srq(&mut self, ep: &mut Endpoint, app: u32, srq: u32) -> Result<SrqId, Refusal> {
        let a = app_of(&mut self.apps, app)?;
        let srq = owned_srq(a, srq)?;
        if let Some(s) = a.srqs.get_mut(&srq) {
            let n = rings::take_srq(ep, srq, s, &a.ahs, &mut self.scratch, &mut self.counters);
            match n {
                Ok(n) => a.posted += n,
                Err(()) => a.corrupt = true,
            }
        }
        Ok(srq)
    }

    /// `Request::ModifySrq`.
    pub(super) fn modify_srq(
        &mut self,
        c: Call<'_>,
        srq: u32,
        max_wr: Option<u32>,
        limit: Option<u32>,
    ) -> Result<Reply, Refusal> {
        let Call { ep, app, .. } = c;
        let srq = self.drain_srq(ep, app, srq)?;
        let max_wr = max_wr.map(|n| depth(n, "SRQ depth")).transpose()?;
        ep.modify_srq(srq, max_wr, limit)?;
        Ok(Reply::ok(Response::Done))
    }

    /// `Request::QuerySrq`.
    pub(super) fn query_srq(&mut self, c: Call<'_>, srq: u32) -> Result<Reply, Refusal> {
        let Call { ep, app, .. } = c;
        let srq = self.drain_srq(ep, app, srq)?;
        let attr = ep.query_srq(srq).ok_or_else(|| unknown("SRQ"))?;
        Ok(Reply::ok(Response::SrqAttr {
            pd: attr.pd.value(),
            max_wr: attr.max_wr,
            max_sge: attr.max_sge,
            limit: attr.limit,
            len: attr.len,
        }))
    }

    /// `Request::DestroySrq`: refused ([`ErrorKind::InUse`]) while a QP uses it.
    pub(super) fn destroy_srq(&mut self, c: Call<'_>, srq: u32) -> Result<Reply, Refusal> {
        let Call { ep, app, .. } = c;
        let a = app_of(&mut self.apps, app)?;
        let srq = owned_srq(a, srq)?;
        ep.destroy_srq(srq).map_err(|e| match e {
            EndpointError::InUse => Refusal(ErrorKind::InUse, e.to_string()),
            e => Refusal::from(e),
        })?;
        a.remove_srq(srq);
        Ok(Reply::ok(Response::Done))
    }
}

/// Shared receive queue `srq`, if attachment `a` owns it.
fn owned_srq(a: &App, srq: u32) -> Result<SrqId, Refusal> {
    let srq = SrqId(srq);
    if a.srqs.contains_key(&srq) {
        Ok(srq)
    } else {
        Err(unknown("SRQ"))
    }
}
