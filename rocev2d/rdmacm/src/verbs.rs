//! What this library calls of the verbs library: the public `ibv_*` functions (resolved at
//! load time to the preloaded `librocev2_ibverbs.so`, which comes before rdma-core's
//! libibverbs in the global scope) and its private CM interface ([`rocev2_verbs_abi::ucma`]),
//! looked up once by name and version.

use core::ffi::{c_int, c_void};
use rocev2_verbs_abi::ucma::{self, Ops};
use rocev2_verbs_abi::verbs::{
    VERBS_ABI_IS_EXTENDED, ibv_comp_channel, ibv_context, ibv_cq, ibv_device, ibv_device_attr,
    ibv_gid, ibv_pd, ibv_qp, ibv_qp_attr, ibv_qp_init_attr_ex, verbs_context,
};
use std::sync::OnceLock;

// Each is the libibverbs call of the same name (its man page).
#[allow(missing_docs)]
#[link(name = "ibverbs")]
unsafe extern "C" {
    pub fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device;
    pub fn ibv_free_device_list(list: *mut *mut ibv_device);
    pub fn ibv_open_device(dev: *mut ibv_device) -> *mut ibv_context;
    pub fn ibv_query_device(ctx: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int;
    pub fn ibv_query_gid(ctx: *mut ibv_context, port: u8, index: c_int, gid: *mut ibv_gid)
    -> c_int;
    pub fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd;
    pub fn ibv_create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel;
    pub fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int;
    pub fn ibv_create_cq(
        ctx: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
    ) -> *mut ibv_cq;
    pub fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int;
    pub fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int;
    pub fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int;
}

/// `ibv_create_qp_ex(3)`, verbs.h's inline: the `create_qp_ex` op of the `verbs_context` the
/// context sits in; NULL with `EOPNOTSUPP` for a context without one.
///
/// # Safety
/// `ctx` is a live context of the verbs library and `attr` the caller's writable attributes.
pub unsafe fn ibv_create_qp_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    // SAFETY: a live context (the contract).
    if unsafe { (*ctx).abi_compat } != VERBS_ABI_IS_EXTENDED {
        crate::set_errno(libc::EOPNOTSUPP);
        return std::ptr::null_mut();
    }
    // SAFETY: an extended context is the last field of its `verbs_context` (verbs.h's
    // `verbs_get_ctx`), which lives as long as the context.
    let v = unsafe {
        &*ctx
            .byte_sub(std::mem::offset_of!(verbs_context, context))
            .cast::<verbs_context>()
    };
    match v.create_qp_ex {
        // SAFETY: the verbs library's op, called with its context and the caller's attributes.
        Some(f) => unsafe { f(ctx, attr) },
        None => {
            crate::set_errno(libc::EOPNOTSUPP);
            std::ptr::null_mut()
        }
    }
}

static OPS: OnceLock<Option<&'static Ops>> = OnceLock::new();

/// The CM interface of the preloaded verbs library; `ENODEV` (said once on stderr) when it is
/// missing or of another version.
pub fn ops() -> Result<&'static Ops, c_int> {
    OPS.get_or_init(find).ok_or(libc::ENODEV)
}

fn find() -> Option<&'static Ops> {
    // SAFETY: a NUL-terminated name looked up in the global scope.
    let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, ucma::ENTRY.as_ptr()) };
    if sym.is_null() {
        eprintln!(
            "rocev2_rdmacm: librocev2_ibverbs.so is not loaded: preload both libraries \
             (LD_PRELOAD=librocev2_rdmacm.so:librocev2_ibverbs.so)"
        );
        return None;
    }
    // SAFETY: the symbol is the verbs library's entry point, of type `EntryFn`.
    let entry: ucma::EntryFn = unsafe { std::mem::transmute::<*mut c_void, ucma::EntryFn>(sym) };
    // SAFETY: the entry point takes a version and returns a static table or NULL.
    let ops = unsafe { entry(ucma::VERSION) };
    // SAFETY: non-NULL, the verbs library's static table.
    match unsafe { ops.as_ref() } {
        Some(o) if o.version == ucma::VERSION && o.size as usize == size_of::<Ops>() => Some(o),
        _ => {
            eprintln!(
                "rocev2_rdmacm: the preloaded librocev2_ibverbs.so does not serve version {} of \
                 the rocev2 CM interface: preload the two libraries of one build",
                ucma::VERSION
            );
            None
        }
    }
}
