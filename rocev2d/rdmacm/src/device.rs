//! The devices: every device of the verbs library, opened once (as librdmacm opens them all)
//! with its CM enabled, its addresses read from its GID table, and a thread that takes its CM
//! events and hands them to the IDs ([`crate::id::dispatch`]), as the kernel's `rdma_cm`
//! queues them for librdmacm.

use crate::verbs::{self, ops};
use core::ffi::c_int;
use rocev2_core::wire::gid::gid_to_ip;
use rocev2_verbs_abi::ucma;
use rocev2_verbs_abi::verbs::{ibv_ah_attr, ibv_context, ibv_gid, ibv_global_route, ibv_pd};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::OnceLock;

/// One opened device.
pub struct Dev {
    /// Its context (an `ibv_context` of the verbs library), as an address.
    pub ctx: usize,
    /// Its protection domain for IDs (an `ibv_pd` of the verbs library, as an address): every
    /// ID on the device gets it as `pd`, and `rdma_create_qp` without a PD uses it, as
    /// librdmacm's per-device PD. Programs make their own objects in it (UCX a UD QP that
    /// reserves the QPN it announces).
    pub pd: usize,
    /// Its global addresses with their GID-table indices, in table order.
    pub ips: Vec<(u8, IpAddr)>,
    /// RDMA READ/atomic depth the device allows (`max_qp_rd_atom`).
    pub max_rd_atomic: u8,
}

impl Dev {
    /// The context as the verbs library's pointer.
    pub fn verbs(&self) -> *mut ibv_context {
        self.ctx as *mut ibv_context
    }

    /// The device's PD as the verbs library's pointer.
    pub fn pd(&self) -> *mut ibv_pd {
        self.pd as *mut ibv_pd
    }

    /// The address vector from local address `local` to GID `peer` (a UD ID's `ah_attr`), as
    /// the kernel's rdma_cm makes it for RoCE: global, hop limit 64, port 1.
    pub fn ah_to(&self, local: IpAddr, peer: [u8; 16]) -> ibv_ah_attr {
        let sgid_index = self
            .ips
            .iter()
            .find_map(|&(i, ip)| (ip == local).then_some(i))
            .unwrap_or(0);
        ibv_ah_attr {
            grh: ibv_global_route {
                dgid: ibv_gid { raw: peer },
                flow_label: 0,
                sgid_index,
                hop_limit: 64,
                traffic_class: 0,
            },
            dlid: 0,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            is_global: 1,
            port_num: 1,
        }
    }
}

static DEVS: OnceLock<Vec<Dev>> = OnceLock::new();

/// The devices, opened on first use.
///
/// # Errors
/// `ENODEV`: no verbs library with the CM interface, or no device.
pub fn devices() -> Result<&'static [Dev], c_int> {
    let ops = ops()?;
    let d = DEVS.get_or_init(|| open_all(ops));
    if d.is_empty() {
        Err(libc::ENODEV)
    } else {
        Ok(d)
    }
}

/// The GID table entries a device may have; rxe's holds a link-local, IPv4 and IPv6 entries.
const MAX_GIDS: c_int = 16;

fn open_all(ops: &'static ucma::Ops) -> Vec<Dev> {
    let mut n = 0;
    // SAFETY: an out pointer to a local.
    let list = unsafe { verbs::ibv_get_device_list(&mut n) };
    if list.is_null() {
        return Vec::new();
    }
    let mut devs = Vec::new();
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: the list holds `n` devices.
        let ctx = unsafe { verbs::ibv_open_device(*list.add(i)) };
        if ctx.is_null() {
            continue;
        }
        // SAFETY: a context of the verbs library.
        let r = unsafe { (ops.enable)(ctx.cast()) };
        if r != 0 {
            eprintln!(
                "rocev2_rdmacm: cannot open the connection manager: {}",
                std::io::Error::from_raw_os_error(r)
            );
            continue;
        }
        // SAFETY: a live context of the verbs library.
        let pd = unsafe { verbs::ibv_alloc_pd(ctx) };
        if pd.is_null() {
            eprintln!(
                "rocev2_rdmacm: cannot allocate the device's protection domain: {}",
                std::io::Error::last_os_error()
            );
            continue;
        }
        let ips = (0..MAX_GIDS)
            .map_while(|index| {
                let mut g = ibv_gid { raw: [0; 16] };
                // SAFETY: a live context and an out pointer to a local.
                let r = unsafe { verbs::ibv_query_gid(ctx, 1, index, &mut g) };
                (r == 0).then(|| (index as u8, gid_to_ip(Ipv6Addr::from(g.raw))))
            })
            .filter(|&(_, ip)| usable(ip))
            .collect();
        // SAFETY: an all-zero ibv_device_attr is a valid value of the plain C struct.
        let mut attr = unsafe { std::mem::zeroed() };
        // SAFETY: a live context and an out pointer to a local.
        let rd = if unsafe { verbs::ibv_query_device(ctx, &mut attr) } == 0 {
            u8::try_from(attr.max_qp_rd_atom).unwrap_or(u8::MAX)
        } else {
            1
        };
        let ctx = ctx as usize;
        std::thread::Builder::new()
            .name("rocev2-rdmacm".into())
            .spawn(move || pump(ops, ctx))
            .ok();
        devs.push(Dev {
            ctx,
            pd: pd as usize,
            ips,
            max_rd_atomic: rd.max(1),
        });
    }
    // SAFETY: the list from ibv_get_device_list; the contexts outlive it.
    unsafe { verbs::ibv_free_device_list(list) };
    devs
}

/// An address connections can use: not unspecified, not link-local.
fn usable(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => !v4.is_unspecified(),
        IpAddr::V6(v6) => !v6.is_unspecified() && !v6.is_unicast_link_local(),
    }
}

/// The device that has `ip`.
pub fn with_ip(ip: IpAddr) -> Option<&'static Dev> {
    devices()
        .ok()?
        .iter()
        .find(|d| d.ips.iter().any(|&(_, a)| a == ip))
}

/// The first device with an address of `ip`'s family, and that address: where a connection
/// to `ip` leaves from.
pub fn toward(ip: IpAddr) -> Option<(&'static Dev, IpAddr)> {
    devices().ok()?.iter().find_map(|d| {
        d.ips
            .iter()
            .find(|(_, a)| a.is_ipv6() == ip.is_ipv6())
            .map(|&(_, a)| (d, a))
    })
}

/// The device of context `ctx`.
pub fn by_ctx(ctx: usize) -> Option<&'static Dev> {
    devices().ok()?.iter().find(|d| d.ctx == ctx)
}

/// How long one wait for a CM event lasts before the thread looks again.
const WAIT_MS: u32 = 1000;

/// Takes the device's CM events for the life of the process.
fn pump(ops: &'static ucma::Ops, ctx: usize) {
    // SAFETY: an all-zero Event is a valid value of the plain C struct.
    let mut ev: ucma::Event = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: a live context (never closed) and an out pointer to a local.
        match unsafe { (ops.next_event)(ctx as *mut _, WAIT_MS, &mut ev) } {
            0 => crate::id::dispatch(ctx, &ev),
            libc::ETIMEDOUT => {}
            e => {
                eprintln!(
                    "rocev2_rdmacm: the device's CM failed, no more CM events: {}",
                    std::io::Error::from_raw_os_error(e)
                );
                return;
            }
        }
    }
}
