//! Devices and contexts: `ibv_get_device_list` … `ibv_close_device`, the query verbs (and the
//! extended `query_port` and `query_device_ex` ops), async events and the `*_str` helpers.
//!
//! A context is the `ibv_context` at the end of a `struct verbs_context` whose ops are the
//! extended verbs this library implements (device and port queries, `ibv_create_cq_ex`,
//! `ibv_create_qp_ex`); the others are empty, so verbs.h's wrappers fail with `EOPNOTSUPP` or
//! `ENOSYS`, or fall back to the 1.1 call, as for a provider without them. Nothing of
//! libibverbs runs on it (its private part is NULL).
//!
//! Port attributes describe a RoCE port the way rdma_rxe does (Ethernet link layer, LID 0, one
//! P_Key 0xffff, GID table of the interface), with the active MTU the interface's IP MTU allows.
//! Device limits are what the engine accepts.
//!
//! The context's `async_fd` is an epoll set of its SRQs' limit wake-ups
//! ([`rocev2::Device::srq_event_fd`]): readable while an SRQ's limit event waits, so a program
//! may `poll(2)` it; `ibv_get_async_event` waits on it and reports
//! `IBV_EVENT_SRQ_LIMIT_REACHED` for the SRQ (or fails with `EAGAIN` on a non-blocking
//! `async_fd`).
//!
//! Deviations: the SRQ limit is the only asynchronous event: port changes are not watched and
//! QP errors complete work requests (their cause is [`rocev2::Device::qp_error`]), so without
//! SRQs `ibv_get_async_event` blocks for ever.

use crate::abi::{
    self, ibv_context, ibv_device, ibv_device_attr, ibv_gid, ibv_port_attr, verbs_context,
};
use crate::device::{self, Device};
use crate::engine::Engine;
use crate::epoll;
use crate::handle::{self, Kind, guard, set_errno};
use core::ffi::{c_char, c_int};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

/// A context: a `verbs_context` first, whose last field, the `ibv_context`, is what the caller
/// sees; its pointer is the handle, and verbs.h's `verbs_get_ctx` finds the extended ops just
/// before it.
#[repr(C)]
pub struct Context {
    /// The extended ops, then the `ibv_context`.
    pub vctx: verbs_context,
    /// Its device.
    pub device: &'static Device,
    /// The device's engine.
    pub engine: Arc<Engine>,
    /// `async_fd`: the epoll set of its SRQs' limit wake-ups, each carrying its `ibv_srq`.
    pub(crate) async_fd: OwnedFd,
}

/// Where a `Context`'s `ibv_context` sits in it.
const IBV_OFFSET: usize =
    core::mem::offset_of!(Context, vctx) + core::mem::offset_of!(verbs_context, context);

/// The context behind `ctx`, if it is a live one.
pub fn context<'a>(ctx: *const ibv_context) -> Option<&'a Context> {
    // SAFETY: a registered context pointer is the `vctx.context` field of a Context that stays
    // valid until ibv_close_device unregisters it, so stepping back to its start stays inside it.
    handle::check(ctx, Kind::Context)
        .then(|| unsafe { &*ctx.byte_sub(IBV_OFFSET).cast::<Context>() })
}

/// The most work requests per queue, completions per CQ and SGEs per request we accept.
pub const MAX_QP_WR: u32 = 16 * 1024;
/// See [`MAX_QP_WR`].
pub const MAX_CQE: u32 = 64 * 1024;
/// See [`MAX_QP_WR`].
pub const MAX_SGE: u32 = 32;
/// The most inline data per send.
pub const MAX_INLINE: u32 = 1024;

#[unsafe(no_mangle)]
/// `ibv_get_device_list(3)`.
pub extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    guard(std::ptr::null_mut(), || {
        let devs = device::list();
        if !num_devices.is_null() {
            // SAFETY: the caller passes NULL or a writable int.
            unsafe { *num_devices = devs.len() as c_int };
        }
        let list: Box<[*mut ibv_device]> = devs
            .iter()
            .map(|d| (&d.ibv as *const ibv_device).cast_mut())
            .chain(std::iter::once(std::ptr::null_mut()))
            .collect();
        let p = Box::into_raw(list).cast::<*mut ibv_device>();
        handle::register(p, Kind::DeviceList);
        p
    })
}

#[unsafe(no_mangle)]
/// `ibv_free_device_list(3)`.
pub extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    guard((), || {
        if !handle::unregister(list, Kind::DeviceList) {
            return;
        }
        // SAFETY: `list` is a NULL-terminated array made by ibv_get_device_list (registered
        // until now), so counting to its NULL stays inside it and rebuilds its exact box.
        unsafe {
            let mut n = 0;
            while !(*list.add(n)).is_null() {
                n += 1;
            }
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                list,
                n + 1,
            )));
        }
    })
}

/// The device behind `dev`, if it is one of ours.
fn device_of<'a>(dev: *const ibv_device) -> Option<&'a Device> {
    // SAFETY: registered devices are leaked, so valid for the process's life.
    handle::check(dev, Kind::Device).then(|| unsafe { &*dev.cast::<Device>() })
}

#[unsafe(no_mangle)]
/// `ibv_get_device_name(3)`.
pub extern "C" fn ibv_get_device_name(dev: *mut ibv_device) -> *const c_char {
    guard(std::ptr::null(), || match device_of(dev) {
        Some(d) => d.ibv.name.as_ptr(),
        None => {
            set_errno(libc::EINVAL);
            std::ptr::null()
        }
    })
}

#[unsafe(no_mangle)]
/// `ibv_get_device_guid(3)`: big-endian, as in the header.
pub extern "C" fn ibv_get_device_guid(dev: *mut ibv_device) -> u64 {
    guard(0, || device_of(dev).map_or(0, |d| d.guid))
}

#[unsafe(no_mangle)]
/// `ibv_get_device_index(3)`: -1, the answer for a device without a kernel index (there is no
/// kernel device); librdmacm then tells devices apart by GUID.
pub extern "C" fn ibv_get_device_index(_dev: *mut ibv_device) -> c_int {
    -1
}

#[unsafe(no_mangle)]
/// `ibv_open_device(3)`: opens (or shares) the device's engine.
pub extern "C" fn ibv_open_device(dev: *mut ibv_device) -> *mut ibv_context {
    guard(std::ptr::null_mut(), || {
        let Some(d) = device_of(dev) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        let engine = match d.engine() {
            Ok(e) => e,
            Err(msg) => {
                eprintln!("rocev2_ibverbs: cannot open {}: {msg}", d.iface);
                set_errno(libc::ENODEV);
                return std::ptr::null_mut();
            }
        };
        let async_fd = match epoll::create() {
            Ok(fd) => fd,
            Err(e) => {
                set_errno(e);
                return std::ptr::null_mut();
            }
        };
        let ctx = Box::new(Context {
            vctx: verbs_context {
                query_port: Some(query_port_ex),
                _slots0: [None; 24],
                create_cq_ex: Some(crate::cq::create_cq_ex),
                _priv: std::ptr::null_mut(),
                query_device_ex: Some(query_device_ex),
                _slots1: [None; 5],
                create_qp_ex: Some(crate::qp::create_qp_ex),
                _slots2: [None; 5],
                sz: size_of::<verbs_context>(),
                context: ibv_context {
                    device: dev,
                    ops: crate::cq::ops(),
                    cmd_fd: -1,
                    async_fd: async_fd.as_raw_fd(),
                    num_comp_vectors: 1,
                    mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                    abi_compat: abi::VERBS_ABI_IS_EXTENDED,
                },
            },
            device: d,
            engine,
            async_fd,
        });
        let p = Box::into_raw(ctx);
        // SAFETY: `p` is the live box just made; the field's address is the handle.
        let ibv = unsafe { &raw mut (*p).vctx.context };
        handle::register(ibv, Kind::Context);
        ibv
    })
}

#[unsafe(no_mangle)]
/// `ibv_close_device(3)`: the engine stops with the device's last context.
pub extern "C" fn ibv_close_device(ctx: *mut ibv_context) -> c_int {
    guard(libc::EIO, || {
        if !handle::unregister(ctx, Kind::Context) {
            return libc::EINVAL;
        }
        // SAFETY: registered until now, so the context field of a live Context made by
        // Box::into_raw; stepping back gives the box's own pointer.
        drop(unsafe { Box::from_raw(ctx.byte_sub(IBV_OFFSET).cast::<Context>()) });
        0
    })
}

/// Writes `value` through `out` when `ctx` is live and `out` not NULL; `EINVAL` otherwise.
fn query<T>(ctx: *mut ibv_context, out: *mut T, f: impl FnOnce(&Context) -> Option<T>) -> c_int {
    let Some(c) = context(ctx) else {
        return libc::EINVAL;
    };
    if out.is_null() {
        return libc::EINVAL;
    }
    match f(c) {
        Some(v) => {
            // SAFETY: the caller passes a writable T (checked not NULL).
            unsafe { out.write(v) };
            0
        }
        None => libc::EINVAL,
    }
}

#[unsafe(no_mangle)]
/// `ibv_query_device(3)`.
pub extern "C" fn ibv_query_device(ctx: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int {
    guard(libc::EIO, || {
        query(ctx, attr, |c| Some(device_attr(c.device)))
    })
}

/// Where `ROCEV2_VENDOR_PART_ID` sets the `vendor_part_id` the device reports (default 0).
///
/// A program may choose its code path by the part id instead of by the device's ops: perftest
/// uses its `ibv_wr_*` post path only for the part ids of a fixed list (mlx5 and EFA devices).
/// Naming one here is the user's own claim; nothing else in the library depends on it.
pub const VENDOR_PART_ID_ENV: &str = "ROCEV2_VENDOR_PART_ID";

/// `ROCEV2_VENDOR_PART_ID`, decimal or `0x` hexadecimal; 0 when unset or not a number.
fn vendor_part_id() -> u32 {
    let Ok(v) = std::env::var(VENDOR_PART_ID_ENV) else {
        return 0;
    };
    match v.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
    .unwrap_or(0)
}

/// `verbs_context.query_device_ex` (verbs.h's inline `ibv_query_device_ex`): the 1.1
/// attributes, `device_cap_flags_ex` their flags, one port; no on-demand paging, TSO, RSS,
/// tag matching, timestamps or other extended capabilities (all zero). Writes at most
/// `attr_size` bytes, zeroing what it does not fill.
unsafe extern "C" fn query_device_ex(
    ctx: *mut ibv_context,
    input: *const abi::ibv_query_device_ex_input,
    attr: *mut abi::ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    guard(libc::EIO, || {
        let Some(c) = context(ctx) else {
            return libc::EINVAL;
        };
        // SAFETY: the caller passes NULL or a readable input.
        if attr.is_null() || (!input.is_null() && unsafe { (*input).comp_mask } != 0) {
            return libc::EINVAL;
        }
        let orig = size_of::<ibv_device_attr>();
        if attr_size < orig {
            return libc::EINVAL;
        }
        let orig_attr = device_attr(c.device);
        let a = abi::ibv_device_attr_ex {
            device_cap_flags_ex: u64::from(orig_attr.device_cap_flags),
            orig_attr,
            comp_mask: 0,
            odp_caps: [0; 3],
            completion_timestamp_mask: 0,
            hca_core_clock: 0,
            _caps: [0; 108],
            phys_port_cnt_ex: 1,
        };
        let n = attr_size.min(size_of::<abi::ibv_device_attr_ex>());
        // SAFETY: the caller's attr holds `attr_size` writable bytes (checked not NULL); we
        // zero them and copy at most our struct's size from a local.
        unsafe {
            std::ptr::write_bytes(attr.cast::<u8>(), 0, attr_size);
            std::ptr::copy_nonoverlapping(
                (&a as *const abi::ibv_device_attr_ex).cast::<u8>(),
                attr.cast::<u8>(),
                n,
            );
        }
        0
    })
}

fn device_attr(d: &Device) -> ibv_device_attr {
    let mut fw_ver = [0; 64];
    device::copy_cstr(&mut fw_ver, env!("CARGO_PKG_VERSION"));
    let max_wr = MAX_QP_WR as c_int;
    let rd = c_int::from(rocev2_core::qp::state::MAX_RD_ATOMIC);
    ibv_device_attr {
        fw_ver,
        node_guid: d.guid,
        sys_image_guid: d.guid,
        max_mr_size: u64::MAX,
        page_size_cap: 4096,
        vendor_id: 0,
        vendor_part_id: vendor_part_id(),
        hw_ver: 0,
        max_qp: 1 << 16,
        max_qp_wr: max_wr,
        // IBV_DEVICE_RC_RNR_NAK_GEN
        device_cap_flags: 1 << 12 | abi::IBV_DEVICE_SRQ_RESIZE,
        max_sge: MAX_SGE as c_int,
        max_sge_rd: MAX_SGE as c_int,
        max_cq: 1 << 16,
        max_cqe: MAX_CQE as c_int,
        max_mr: 1 << 20,
        max_pd: 1 << 16,
        max_qp_rd_atom: rd,
        max_ee_rd_atom: 0,
        max_res_rd_atom: rd << 16,
        max_qp_init_rd_atom: rd,
        max_ee_init_rd_atom: 0,
        atomic_cap: abi::IBV_ATOMIC_HCA,
        max_ee: 0,
        max_rdd: 0,
        max_mw: 0,
        max_raw_ipv6_qp: 0,
        max_raw_ethy_qp: 0,
        max_mcast_grp: 0,
        max_mcast_qp_attach: 0,
        max_total_mcast_qp_attach: 0,
        max_ah: 0,
        max_fmr: 0,
        max_map_per_fmr: 0,
        max_srq: 1 << 16,
        max_srq_wr: max_wr,
        max_srq_sge: MAX_SGE as c_int,
        max_pkeys: 1,
        local_ca_ack_delay: 15,
        phys_port_cnt: 1,
    }
}

/// The port's attributes (see the module docs).
fn port_attr(c: &Context) -> ibv_port_attr {
    let iface = c.engine.interface();
    let mtu = iface.path_mtu(false).map_or(1, |m| c_int::from(m.code()));
    ibv_port_attr {
        state: if iface.up {
            abi::IBV_PORT_ACTIVE
        } else {
            abi::IBV_PORT_DOWN
        },
        max_mtu: 5,
        active_mtu: mtu,
        gid_tbl_len: iface.gids().len() as c_int,
        port_cap_flags: 0,
        max_msg_sz: 1 << 31,
        bad_pkey_cntr: 0,
        qkey_viol_cntr: 0,
        pkey_tbl_len: 1,
        lid: 0,
        sm_lid: 0,
        lmc: 0,
        max_vl_num: 1,
        sm_sl: 0,
        subnet_timeout: 0,
        init_type_reply: 0,
        // 4X, 10 Gb/s per lane (FDR10-like): the values rxe reports.
        active_width: 2,
        active_speed: 4,
        // LinkUp
        phys_state: if iface.up { 5 } else { 3 },
        link_layer: abi::IBV_LINK_LAYER_ETHERNET,
        flags: 0,
        port_cap_flags2: 0,
    }
}

/// Copies the first `len` bytes of port `port`'s attributes to `attr`.
fn write_port_attr(ctx: *mut ibv_context, port: u8, attr: *mut ibv_port_attr, len: usize) -> c_int {
    let Some(c) = context(ctx) else {
        return libc::EINVAL;
    };
    if port != 1 || attr.is_null() {
        return libc::EINVAL;
    }
    let a = port_attr(c);
    // SAFETY: the caller's attr holds `len` writable bytes (checked not NULL); we zero them
    // and copy at most the size of the local we copy from.
    unsafe {
        std::ptr::write_bytes(attr.cast::<u8>(), 0, len);
        std::ptr::copy_nonoverlapping(
            (&a as *const ibv_port_attr).cast::<u8>(),
            attr.cast::<u8>(),
            len.min(size_of::<ibv_port_attr>()),
        )
    };
    0
}

#[unsafe(no_mangle)]
/// `ibv_query_port(3)`, the exported 1.1 call (a program built before the extended op, or one
/// calling the symbol directly): writes the 1.1 part of the struct,
/// `struct _compat_ibv_port_attr`.
pub extern "C" fn ibv_query_port(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    guard(libc::EIO, || {
        write_port_attr(ctx, port, attr, abi::COMPAT_PORT_ATTR_LEN)
    })
}

/// `verbs_context.query_port` (verbs.h's inline `ibv_query_port`): the whole struct, as much
/// of it as the caller's `len` holds.
unsafe extern "C" fn query_port_ex(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    guard(libc::EIO, || {
        if len < abi::COMPAT_PORT_ATTR_LEN {
            return libc::EINVAL;
        }
        write_port_attr(ctx, port, attr, len)
    })
}

/// GID `index` of `c`'s interface.
fn gid_at(c: &Context, port: u32, index: c_int) -> Option<std::net::Ipv6Addr> {
    if port != 1 {
        return None;
    }
    let i = usize::try_from(index).ok()?;
    c.engine.interface().gids().get(i).copied()
}

#[unsafe(no_mangle)]
/// `ibv_query_gid(3)`: rdma_rxe's table (0 link-local, then IPv4-mapped, then IPv6).
pub extern "C" fn ibv_query_gid(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    guard(-1, || {
        let r = query(ctx, gid, |c| {
            gid_at(c, u32::from(port), index).map(|g| ibv_gid { raw: g.octets() })
        });
        if r != 0 {
            set_errno(r);
            return -1;
        }
        0
    })
}

#[unsafe(no_mangle)]
/// `ibv_query_gid_ex(3)` (verbs.h's inline wrapper passes the entry's size).
pub extern "C" fn _ibv_query_gid_ex(
    ctx: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut abi::ibv_gid_entry,
    _flags: u32,
    entry_size: usize,
) -> c_int {
    guard(libc::EIO, || {
        if entry_size < size_of::<abi::ibv_gid_entry>() {
            return libc::EINVAL;
        }
        query(ctx, entry, |c| {
            let g = gid_at(c, port, c_int::try_from(index).ok()?)?;
            Some(abi::ibv_gid_entry {
                gid: ibv_gid { raw: g.octets() },
                gid_index: index,
                port_num: port,
                gid_type: abi::IBV_GID_TYPE_ROCE_V2,
                ndev_ifindex: c.engine.interface().index,
            })
        })
    })
}

#[unsafe(no_mangle)]
/// `ibv_query_gid_type` (rdma-core's private export `ibv_devinfo` uses): every GID is RoCE v2
/// (`IBV_GID_TYPE_SYSFS_ROCE_V2`, 1).
pub extern "C" fn ibv_query_gid_type(
    ctx: *mut ibv_context,
    port: u8,
    index: u32,
    gid_type: *mut c_int,
) -> c_int {
    guard(-1, || {
        let r = query(ctx, gid_type, |c| {
            gid_at(c, u32::from(port), c_int::try_from(index).ok()?).map(|_| 1)
        });
        if r != 0 {
            set_errno(r);
            return -1;
        }
        0
    })
}

#[unsafe(no_mangle)]
/// `ibv_query_pkey(3)`: one entry, the default P_Key, big-endian.
pub extern "C" fn ibv_query_pkey(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    guard(-1, || {
        let r = query(ctx, pkey, |_| {
            (port == 1 && index == 0).then(|| 0xffffu16.to_be())
        });
        if r != 0 {
            set_errno(r);
            return -1;
        }
        0
    })
}

#[unsafe(no_mangle)]
/// `ibv_get_async_event(3)`: the next SRQ whose limit was reached (see the module docs).
pub extern "C" fn ibv_get_async_event(
    ctx: *mut ibv_context,
    event: *mut abi::ibv_async_event,
) -> c_int {
    guard(-1, || {
        let (Some(c), false) = (context(ctx), event.is_null()) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        loop {
            let p = match epoll::next::<abi::ibv_srq>(&c.async_fd, || ()) {
                Ok(p) => p,
                Err(e) => {
                    set_errno(e);
                    return -1;
                }
            };
            // An SRQ destroyed with its event pending left the set with it; another thread
            // may have taken the event first.
            let Some(s) = crate::srq::srq(p) else {
                continue;
            };
            if !s.limit_reached() {
                continue;
            }
            // SAFETY: the caller's writable event (checked not NULL).
            unsafe {
                event.write(abi::ibv_async_event {
                    element: p.cast(),
                    event_type: abi::IBV_EVENT_SRQ_LIMIT_REACHED,
                })
            };
            return 0;
        }
    })
}

#[unsafe(no_mangle)]
/// `ibv_ack_async_event(3)`: counts an SRQ's event in its `events_completed`, as libibverbs
/// does.
pub extern "C" fn ibv_ack_async_event(event: *mut abi::ibv_async_event) {
    guard((), || {
        if event.is_null() {
            return;
        }
        // SAFETY: the caller's event, as ibv_get_async_event filled it (checked not NULL).
        let ev = unsafe { &*event };
        if ev.event_type == abi::IBV_EVENT_SRQ_LIMIT_REACHED {
            crate::srq::ack_event(ev.element.cast());
        }
    })
}

#[unsafe(no_mangle)]
/// `ibv_fork_init(3)`: nothing to prepare. No page is pinned; attached, the pages a registration
/// moved onto memfds are never inherited by a child (`MADV_DONTFORK`, what this call makes
/// rdma-core do), whether or not it was called.
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

#[unsafe(no_mangle)]
/// `ibv_wc_status_str(3)`.
pub extern "C" fn ibv_wc_status_str(status: c_int) -> *const c_char {
    const NAMES: [&std::ffi::CStr; 22] = [
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
    ];
    usize::try_from(status)
        .ok()
        .and_then(|i| NAMES.get(i))
        .map_or(c"unknown".as_ptr(), |s| s.as_ptr())
}

#[unsafe(no_mangle)]
/// `ibv_node_type_str(3)`.
pub extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    match node_type {
        1 => c"InfiniBand channel adapter",
        2 => c"InfiniBand switch",
        3 => c"InfiniBand router",
        4 => c"iWARP NIC",
        _ => c"unknown",
    }
    .as_ptr()
}

#[unsafe(no_mangle)]
/// `ibv_port_state_str(3)`.
pub extern "C" fn ibv_port_state_str(state: c_int) -> *const c_char {
    match state {
        0 => c"PORT_NOP",
        1 => c"PORT_DOWN",
        2 => c"PORT_INIT",
        3 => c"PORT_ARMED",
        4 => c"PORT_ACTIVE",
        5 => c"PORT_ACTIVE_DEFER",
        _ => c"invalid state",
    }
    .as_ptr()
}

#[unsafe(no_mangle)]
/// `ibv_event_type_str(3)`.
pub extern "C" fn ibv_event_type_str(event: c_int) -> *const c_char {
    const NAMES: [&std::ffi::CStr; 20] = [
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
    ];
    usize::try_from(event)
        .ok()
        .and_then(|i| NAMES.get(i))
        .map_or(c"unknown".as_ptr(), |s| s.as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The extended ops refuse what is not a live context, writing nothing.
    #[test]
    fn extended_ops_refuse_foreign_contexts() {
        let mut junk = vec![0xa5u8; 1024];
        let j = junk.as_mut_ptr();
        // SAFETY: each op checks the context before dereferencing anything.
        unsafe {
            assert_eq!(
                query_device_ex(j.cast(), std::ptr::null(), j.cast(), 400),
                libc::EINVAL
            );
            assert_eq!(query_port_ex(j.cast(), 1, j.cast(), 52), libc::EINVAL);
            assert!(crate::qp::create_qp_ex(j.cast(), std::ptr::null_mut()).is_null());
        }
        assert!(junk.iter().all(|b| *b == 0xa5));
    }
}
