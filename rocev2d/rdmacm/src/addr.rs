//! Addresses: `sockaddr` ↔ [`SocketAddr`], ephemeral ports, and `rdma_getaddrinfo` /
//! `rdma_freeaddrinfo` (numeric and host names, through libc's `getaddrinfo`).

use crate::abi::{self, rdma_addrinfo};
use crate::call_or;
use core::ffi::{c_char, c_int};
use rocev2_verbs_abi::verbs::{IBV_QPT_RC, IBV_QPT_UD};
use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::Mutex;

/// The address at `sa` (`AF_INET` or `AF_INET6`).
///
/// # Errors
/// `EINVAL` for NULL; `EAFNOSUPPORT` for another family (`AF_IB`).
pub fn from_sockaddr(sa: *const libc::sockaddr) -> Result<SocketAddr, c_int> {
    if sa.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: non-NULL; every sockaddr starts with its family.
    let family = c_int::from(unsafe { (*sa).sa_family });
    match family {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in (the caller's contract).
            let s = unsafe { &*sa.cast::<libc::sockaddr_in>() };
            Ok(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)),
                u16::from_be(s.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6 (the caller's contract).
            let s = unsafe { &*sa.cast::<libc::sockaddr_in6>() };
            Ok(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(s.sin6_addr.s6_addr),
                u16::from_be(s.sin6_port),
                s.sin6_flowinfo,
                s.sin6_scope_id,
            )))
        }
        _ => Err(libc::EAFNOSUPPORT),
    }
}

/// `a` as a `sockaddr_storage`, and its length.
pub fn to_storage(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_storage is a valid (AF_UNSPEC) value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            let s = unsafe { &mut *(&raw mut ss).cast::<libc::sockaddr_in>() };
            s.sin_family = libc::AF_INET as libc::sa_family_t;
            s.sin_port = v4.port().to_be();
            s.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            let s = unsafe { &mut *(&raw mut ss).cast::<libc::sockaddr_in6>() };
            s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            s.sin6_port = v6.port().to_be();
            s.sin6_addr.s6_addr = v6.ip().octets();
            s.sin6_flowinfo = v6.flowinfo();
            s.sin6_scope_id = v6.scope_id();
            size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// An ephemeral port (49152–65535) no ID of this process holds, as the kernel's rdma_cm binds
/// one for an unbound ID.
pub fn ephemeral_port(taken: &HashSet<u16>) -> u16 {
    let start = (crate::random_u32() % 16384) as u16;
    (0..16384u16)
        .map(|i| 49152 + (start + i) % 16384)
        .find(|p| !taken.contains(p))
        .unwrap_or(49152)
}

/// The `rdma_addrinfo`s this library handed out, so `rdma_freeaddrinfo` frees only those.
static INFOS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// An `rdma_addrinfo` and what its pointers point to, freed together.
#[repr(C)]
struct Info {
    ai: rdma_addrinfo,
    src: libc::sockaddr_storage,
    dst: libc::sockaddr_storage,
}

/// What `rdma_getaddrinfo` answers for `node`/`service` with `hints`.
fn resolve(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
) -> Result<*mut rdma_addrinfo, c_int> {
    // SAFETY: NULL or the caller's hints.
    let hints = unsafe { hints.as_ref() };
    let flags = hints.map_or(0, |h| h.ai_flags);
    let passive = flags & abi::RAI_PASSIVE != 0;
    // The port space and QP type go together: RDMA_PS_TCP over RC, RDMA_PS_UDP over UD;
    // either one of the hints picks the other.
    let (ps, qp_type) = match hints.map_or((0, 0), |h| (h.ai_port_space, h.ai_qp_type)) {
        (0 | abi::RDMA_PS_TCP, 0 | IBV_QPT_RC) => (abi::RDMA_PS_TCP, IBV_QPT_RC),
        (0, IBV_QPT_UD) | (abi::RDMA_PS_UDP, 0 | IBV_QPT_UD) => (abi::RDMA_PS_UDP, IBV_QPT_UD),
        _ => {
            return Err(crate::unsupported(
                "rdma_getaddrinfo: a port space other than RDMA_PS_TCP over RC or RDMA_PS_UDP over UD",
            ));
        }
    };
    if node.is_null() && service.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: an all-zero addrinfo is a valid value of the plain C struct.
    let mut h: libc::addrinfo = unsafe { std::mem::zeroed() };
    h.ai_family = hints.map_or(0, |h| h.ai_family);
    h.ai_socktype = libc::SOCK_STREAM;
    if passive {
        h.ai_flags |= libc::AI_PASSIVE;
    }
    if flags & abi::RAI_NUMERICHOST != 0 {
        h.ai_flags |= libc::AI_NUMERICHOST;
    }
    let mut res = std::ptr::null_mut();
    // SAFETY: NULL or the caller's strings; out pointer to a local.
    let r = unsafe { libc::getaddrinfo(node, service, &h, &mut res) };
    if r != 0 || res.is_null() {
        return Err(libc::EADDRNOTAVAIL);
    }
    // SAFETY: getaddrinfo's first result.
    let found = from_sockaddr(unsafe { (*res).ai_addr });
    // SAFETY: freed once.
    unsafe { libc::freeaddrinfo(res) };
    let found = found?;
    // SAFETY: an all-zero Info is a valid value (NULL pointers, AF_UNSPEC addresses).
    let mut info: Box<Info> = Box::new(unsafe { std::mem::zeroed() });
    info.ai.ai_flags = flags;
    info.ai.ai_family = if found.is_ipv6() {
        libc::AF_INET6
    } else {
        libc::AF_INET
    };
    info.ai.ai_qp_type = qp_type;
    info.ai.ai_port_space = ps;
    let (ss, len) = to_storage(found);
    if passive {
        info.src = ss;
        info.ai.ai_src_len = len;
        info.ai.ai_src_addr = (&raw mut info.src).cast();
    } else {
        info.dst = ss;
        info.ai.ai_dst_len = len;
        info.ai.ai_dst_addr = (&raw mut info.dst).cast();
        // The hints' source address, if any, is where the active side binds.
        if let Some(src) = hints.filter(|h| !h.ai_src_addr.is_null()) {
            let (ss, len) = to_storage(from_sockaddr(src.ai_src_addr)?);
            info.src = ss;
            info.ai.ai_src_len = len;
            info.ai.ai_src_addr = (&raw mut info.src).cast();
        }
    }
    let p = Box::into_raw(info);
    INFOS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(p as usize);
    Ok(p.cast())
}

#[unsafe(no_mangle)]
/// `rdma_getaddrinfo(3)`: one result, RDMA_PS_TCP over RC or RDMA_PS_UDP over UD; no route or
/// connect data.
pub extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    crate::call(|| {
        if res.is_null() {
            return Err(libc::EINVAL);
        }
        let ai = resolve(node, service, hints)?;
        // SAFETY: non-NULL, the caller's out pointer.
        unsafe { *res = ai };
        Ok(())
    })
}

#[unsafe(no_mangle)]
/// `rdma_freeaddrinfo(3)`: frees what `rdma_getaddrinfo` made; ignores anything else.
pub extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    call_or((), || {
        let mut infos = INFOS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = infos.iter().position(|p| *p == res as usize) {
            infos.swap_remove(i);
            // SAFETY: made by Box::into_raw in `resolve` (`rdma_addrinfo` first), now out of
            // the list.
            drop(unsafe { Box::from_raw(res.cast::<Info>()) });
        }
        Ok(())
    })
}

/// `ip` as a GID's bytes (IPv4-mapped for IPv4).
pub fn gid_bytes(ip: IpAddr) -> [u8; 16] {
    rocev2_core::wire::gid::gid(ip).octets()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddrs_round_trip() {
        for a in ["10.0.0.2:7174", "[fd00::2]:18515"] {
            let a: SocketAddr = a.parse().unwrap();
            let (ss, _) = to_storage(a);
            assert_eq!(from_sockaddr((&raw const ss).cast()), Ok(a));
        }
        assert_eq!(from_sockaddr(std::ptr::null()), Err(libc::EINVAL));
    }

    #[test]
    fn ephemeral_ports_avoid_taken_ones() {
        let taken: HashSet<u16> = (49152..65535).collect();
        assert_eq!(ephemeral_port(&taken), 65535);
    }
}
