//! Synchronous IDs (made with no channel, as `rdma_create_ep` makes them): each call waits for
//! its outcome on the ID's private channel, as librdmacm does; and `rdma_create_ep`,
//! `rdma_destroy_ep`, `rdma_get_request`.

use crate::abi::{self, rdma_addrinfo, rdma_cm_id};
use crate::channel::{ack, take};
use crate::state::lock;
use crate::{call, id, qp};
use core::ffi::c_int;
use rocev2_verbs_abi::verbs::{ibv_pd, ibv_qp_init_attr};

/// For a synchronous ID, waits for event `want` on its channel; the event that came instead
/// fails the call: `ECONNREFUSED` (rejected), `ETIMEDOUT` (unreachable, or an address that did
/// not resolve), else `EINVAL`.
///
/// # Errors
/// As said; `EINVAL` for an ID that is not live.
pub fn complete(p: *mut rdma_cm_id, want: c_int) -> Result<(), c_int> {
    let (sync, channel) = {
        let mut st = lock();
        let s = st.id(p)?;
        (s.sync, s.channel)
    };
    if !sync {
        return Ok(());
    }
    let ev = take(channel as *mut _)?;
    // SAFETY: an event just handed out by `take`, not yet acknowledged.
    let got = unsafe { (*ev).event };
    ack(ev)?;
    match got {
        g if g == want => Ok(()),
        abi::RDMA_CM_EVENT_REJECTED => Err(libc::ECONNREFUSED),
        abi::RDMA_CM_EVENT_UNREACHABLE | abi::RDMA_CM_EVENT_ADDR_ERROR => Err(libc::ETIMEDOUT),
        _ => Err(libc::EINVAL),
    }
}

#[unsafe(no_mangle)]
/// `rdma_create_ep(3)`: a synchronous ID; passive (`RAI_PASSIVE`): bound to the source address,
/// `qp_init_attr` kept for the QPs `rdma_get_request` makes; active: address and route
/// resolved, and the QP made when `qp_init_attr` is given.
pub extern "C" fn rdma_create_ep(
    out: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    call(|| {
        if out.is_null() || res.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: non-NULL, the caller's addrinfo.
        let r = unsafe { &*res };
        let ps = if r.ai_port_space == 0 {
            abi::RDMA_PS_TCP
        } else {
            r.ai_port_space
        };
        let p = id::create(std::ptr::null_mut(), std::ptr::null_mut(), ps)?;
        let made = (|| {
            if r.ai_flags & abi::RAI_PASSIVE != 0 {
                if crate::id::rdma_bind_addr(p, r.ai_src_addr) != 0 {
                    return Err(crate::errno());
                }
                if !qp_init_attr.is_null() {
                    // SAFETY: non-NULL, the caller's attributes (plain C struct, copied).
                    let a = unsafe { std::ptr::read(qp_init_attr) };
                    lock().id(p)?.ep_qp = Some((pd as usize, Box::new(a)));
                }
                return Ok(());
            }
            if crate::id::rdma_resolve_addr(p, r.ai_src_addr, r.ai_dst_addr, 2000) != 0
                || crate::id::rdma_resolve_route(p, 2000) != 0
            {
                return Err(crate::errno());
            }
            if !qp_init_attr.is_null() {
                qp::create(p, pd, qp_init_attr)?;
            }
            Ok(())
        })();
        match made {
            Ok(()) => {
                // SAFETY: non-NULL, the caller's out pointer.
                unsafe { *out = p };
                Ok(())
            }
            Err(e) => {
                let _ = id::destroy(p);
                Err(e)
            }
        }
    })
}

#[unsafe(no_mangle)]
/// `rdma_destroy_ep(3)`: the ID's QP (and the CQs made for it), then the ID.
pub extern "C" fn rdma_destroy_ep(p: *mut rdma_cm_id) {
    call(|| {
        qp::destroy(p)?;
        id::destroy(p)
    });
}

#[unsafe(no_mangle)]
/// `rdma_get_request(3)`: for a synchronous listener, waits for a connection request; the new
/// ID gets a QP when `rdma_create_ep` was given QP attributes.
pub extern "C" fn rdma_get_request(listen: *mut rdma_cm_id, out: *mut *mut rdma_cm_id) -> c_int {
    call(|| {
        if out.is_null() {
            return Err(libc::EINVAL);
        }
        let (sync, channel, ep_qp) = {
            let mut st = lock();
            let s = st.id(listen)?;
            let ep = s
                .ep_qp
                .as_ref()
                .map(|(pd, a)| (*pd, std::ptr::from_ref(&**a)));
            (s.sync, s.channel, ep)
        };
        if !sync {
            return Err(libc::EINVAL);
        }
        loop {
            let ev = take(channel as *mut _)?;
            // SAFETY: an event just handed out by `take`, not yet acknowledged.
            let (kind, p) = unsafe { ((*ev).event, (*ev).id) };
            ack(ev)?;
            if kind != abi::RDMA_CM_EVENT_CONNECT_REQUEST {
                continue;
            }
            if let Some((pd, attr)) = ep_qp {
                // SAFETY: a copy of the listener's attributes (boxed in its state, alive while
                // the listener is), used for this one call.
                let mut a = unsafe { std::ptr::read(attr) };
                if let Err(e) = qp::create(p, pd as *mut ibv_pd, &mut a) {
                    let _ = crate::id::rdma_reject(p, std::ptr::null(), 0);
                    let _ = id::destroy(p);
                    return Err(e);
                }
            }
            // SAFETY: non-NULL, the caller's out pointer.
            unsafe { *out = p };
            return Ok(());
        }
    })
}
