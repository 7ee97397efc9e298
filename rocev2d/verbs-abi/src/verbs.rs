//! The structs and constants of rdma-core's `<infiniband/verbs.h>` (libibverbs 1.1 ABI) that the
//! library reads or fills, written by hand as `#[repr(C)]`.
//!
//! tests/layout.rs compiles a C program against the installed header and checks every size
//! and field offset here against it, so a mismatch fails the build's tests rather than
//! corrupting a caller's memory. Names keep the C spelling so the two can be read side by side.
//!
//! Deviations: fields the library never touches are opaque padding of the right size (the
//! `_compat_*` slots of `ibv_context_ops`, the memory-window and TSO arms of `ibv_send_wr`).
#![allow(non_camel_case_types, missing_docs)]

use core::ffi::{c_char, c_int, c_uint, c_void};

/// `IBV_SYSFS_NAME_MAX`.
pub const SYSFS_NAME_MAX: usize = 64;
/// `IBV_SYSFS_PATH_MAX`.
pub const SYSFS_PATH_MAX: usize = 256;

/// A slot of a function table that the library leaves empty (NULL).
pub type Slot = Option<unsafe extern "C" fn()>;

#[repr(C)]
pub struct _ibv_device_ops {
    pub _dummy1: Slot,
    pub _dummy2: Slot,
}

#[repr(C)]
pub struct ibv_device {
    pub _ops: _ibv_device_ops,
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; SYSFS_NAME_MAX],
    pub dev_name: [c_char; SYSFS_NAME_MAX],
    pub dev_path: [c_char; SYSFS_PATH_MAX],
    pub ibdev_path: [c_char; SYSFS_PATH_MAX],
}

pub type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
pub type ReqNotifyCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
pub type PostSendFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
pub type PostRecvFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
pub type PostSrqRecvFn =
    unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;

/// `struct ibv_context_ops`: the table through which verbs.h's inline `ibv_poll_cq`,
/// `ibv_req_notify_cq`, `ibv_post_send`, `ibv_post_recv` and `ibv_post_srq_recv` call. An empty slot makes the
/// inline wrappers that check for it (`ibv_alloc_mw`, …) fail with `EOPNOTSUPP`/`ENOSYS`.
#[repr(C)]
pub struct ibv_context_ops {
    /// `_compat_query_device` … `_compat_create_cq`, `alloc_mw`, `bind_mw`, `dealloc_mw`.
    pub _slots0: [Slot; 11],
    pub poll_cq: Option<PollCqFn>,
    pub req_notify_cq: Option<ReqNotifyCqFn>,
    /// `_compat_cq_event` … `_compat_destroy_srq`.
    pub _slots1: [Slot; 7],
    pub post_srq_recv: Option<PostSrqRecvFn>,
    /// `_compat_create_qp` … `_compat_destroy_qp`.
    pub _slots2: [Slot; 4],
    pub post_send: Option<PostSendFn>,
    pub post_recv: Option<PostRecvFn>,
    /// `_compat_create_ah` … `_compat_async_event`.
    pub _slots3: [Slot; 5],
}

#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: libc::pthread_mutex_t,
    /// [`VERBS_ABI_IS_EXTENDED`]: the context is the last field of a [`verbs_context`].
    pub abi_compat: *mut c_void,
}

/// `__VERBS_ABI_IS_EXTENDED`: `ibv_context.abi_compat` of a context inside a `verbs_context`,
/// which verbs.h's `verbs_get_ctx` then finds in memory just before it.
pub const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

pub type QueryPortFn =
    unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int;
pub type CreateCqExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex;
pub type QueryDeviceExFn = unsafe extern "C" fn(
    *mut ibv_context,
    *const ibv_query_device_ex_input,
    *mut ibv_device_attr_ex,
    usize,
) -> c_int;
pub type CreateQpExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp;

/// `struct verbs_context`: the extended ops verbs.h's inline extended verbs call through
/// (`verbs_get_ctx_op`), with `context` last. An empty slot makes the wrapper fall back to the
/// 1.1 call or fail with `EOPNOTSUPP`, as for a provider without the op.
#[repr(C)]
pub struct verbs_context {
    pub query_port: Option<QueryPortFn>,
    /// `advise_mr` … `query_rt_values`.
    pub _slots0: [Slot; 24],
    pub create_cq_ex: Option<CreateCqExFn>,
    /// `priv`: libibverbs' own, NULL (no libibverbs code runs on our contexts).
    pub _priv: *mut c_void,
    pub query_device_ex: Option<QueryDeviceExFn>,
    /// `ibv_destroy_flow` … `open_qp`.
    pub _slots1: [Slot; 5],
    pub create_qp_ex: Option<CreateQpExFn>,
    /// `get_srq_num` … `close_xrcd`, `_ABI_placeholder3`.
    pub _slots2: [Slot; 5],
    /// The struct's size: verbs.h ignores ops beyond it.
    pub sz: usize,
    pub context: ibv_context,
}

#[repr(C)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_int,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

#[repr(C)]
pub struct ibv_query_device_ex_input {
    pub comp_mask: u32,
}

/// `struct ibv_device_attr_ex`; the capability groups we report as absent (all zero) are
/// opaque.
#[repr(C)]
pub struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    /// `odp_caps`: no on-demand paging.
    pub odp_caps: [u64; 3],
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    /// `tso_caps` … `xrc_odp_caps`.
    pub _caps: [u8; 108],
    pub phys_port_cnt_ex: u32,
}

#[repr(C)]
pub struct ibv_port_attr {
    pub state: c_int,
    pub max_mtu: c_int,
    pub active_mtu: c_int,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// The part of [`ibv_port_attr`] that the exported `ibv_query_port` (whose argument is the
/// 1.1 `struct _compat_ibv_port_attr`) may write: everything before `flags`.
pub const COMPAT_PORT_ATTR_LEN: usize = core::mem::offset_of!(ibv_port_attr, flags);

/// `union ibv_gid`, 8-byte aligned as its `global` arm.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct ibv_gid {
    pub raw: [u8; 16],
}

#[repr(C)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_poll_cq_attr`.
#[repr(C)]
pub struct ibv_poll_cq_attr {
    pub comp_mask: u32,
}

#[repr(C)]
pub struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

pub type StartPollFn = unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_poll_cq_attr) -> c_int;
pub type CqExFn<T> = unsafe extern "C" fn(*mut ibv_cq_ex) -> T;

/// `struct ibv_cq_ex`: `ibv_cq`, then the state of the completion being read and the
/// functions verbs.h's `ibv_start_poll`, `ibv_next_poll`, `ibv_end_poll` and `ibv_wc_read_*`
/// call (without checking them: a field asked for at creation has its function).
#[repr(C)]
pub struct ibv_cq_ex {
    pub cq: ibv_cq,
    pub comp_mask: u32,
    pub status: c_int,
    pub wr_id: u64,
    pub start_poll: Option<StartPollFn>,
    pub next_poll: Option<CqExFn<c_int>>,
    pub end_poll: Option<CqExFn<()>>,
    pub read_opcode: Option<CqExFn<c_int>>,
    pub read_vendor_err: Option<CqExFn<u32>>,
    pub read_byte_len: Option<CqExFn<u32>>,
    pub read_imm_data: Option<CqExFn<u32>>,
    pub read_qp_num: Option<CqExFn<u32>>,
    pub read_src_qp: Option<CqExFn<u32>>,
    pub read_wc_flags: Option<CqExFn<c_uint>>,
    pub read_slid: Option<CqExFn<u32>>,
    pub read_sl: Option<CqExFn<u8>>,
    pub read_dlid_path_bits: Option<CqExFn<u8>>,
    /// `read_completion_ts` … `read_completion_wallclock_ns`: never asked for (refused at
    /// creation).
    pub _unsupported: [Slot; 5],
}

#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_int,
    pub qp_type: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_qp_ex`: `ibv_qp`, then the request being built and the functions of verbs.h's
/// `ibv_wr_*` post path (called unchecked: every slot is filled).
#[repr(C)]
pub struct ibv_qp_ex {
    pub qp_base: ibv_qp,
    pub comp_mask: u64,
    pub wr_id: u64,
    pub wr_flags: c_uint,
    pub wr_atomic_cmp_swp: unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64, u64),
    pub wr_atomic_fetch_add: unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64),
    pub wr_bind_mw: unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, u32, *const c_void),
    pub wr_local_inv: unsafe extern "C" fn(*mut ibv_qp_ex, u32),
    pub wr_rdma_read: unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64),
    pub wr_rdma_write: unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64),
    pub wr_rdma_write_imm: unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32),
    pub wr_send: unsafe extern "C" fn(*mut ibv_qp_ex),
    pub wr_send_imm: unsafe extern "C" fn(*mut ibv_qp_ex, u32),
    pub wr_send_inv: unsafe extern "C" fn(*mut ibv_qp_ex, u32),
    pub wr_send_tso: unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, u16, u16),
    pub wr_set_ud_addr: unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_ah, u32, u32),
    pub wr_set_xrc_srqn: unsafe extern "C" fn(*mut ibv_qp_ex, u32),
    pub wr_set_inline_data: unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, usize),
    pub wr_set_inline_data_list: unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_data_buf),
    pub wr_set_sge: unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32),
    pub wr_set_sge_list: unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_sge),
    pub wr_start: unsafe extern "C" fn(*mut ibv_qp_ex),
    pub wr_complete: unsafe extern "C" fn(*mut ibv_qp_ex) -> c_int,
    pub wr_abort: unsafe extern "C" fn(*mut ibv_qp_ex),
    pub wr_atomic_write: unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, *const c_void),
}

/// `struct ibv_data_buf` (`ibv_wr_set_inline_data_list`).
#[repr(C)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

/// `struct ibv_qp_init_attr_ex`; the RSS hash configuration, which we refuse, is opaque.
#[repr(C)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    /// `rx_hash_conf`.
    pub _rx_hash_conf: [u64; 3],
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

#[repr(C)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

#[repr(C)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

#[repr(C)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

#[repr(C)]
pub struct ibv_qp_attr {
    pub qp_state: c_int,
    pub cur_qp_state: c_int,
    pub path_mtu: c_int,
    pub path_mig_state: c_int,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

#[repr(C)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

#[repr(C)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_ud {
    pub ah: *mut c_void,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// The `wr` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    pub rdma: ibv_send_wr_rdma,
    pub atomic: ibv_send_wr_atomic,
    pub ud: ibv_send_wr_ud,
}

#[repr(C)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: c_int,
    pub send_flags: c_uint,
    /// `imm_data` (network order) or `invalidate_rkey`.
    pub imm_data: u32,
    pub wr: ibv_send_wr_wr,
    /// The `qp_type` union (`xrc.remote_srqn`).
    pub qp_type: u32,
    /// The `bind_mw`/`tso` union.
    pub _bind_mw_tso: [u64; 6],
}

#[repr(C)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

#[repr(C)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: c_int,
    pub opcode: c_int,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// `imm_data` (network order) or `invalidated_rkey`.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

#[repr(C)]
pub struct ibv_async_event {
    /// The `element` union (a CQ, QP, SRQ or WQ pointer, or a port number).
    pub element: *mut c_void,
    pub event_type: c_int,
}

// enum values
pub const IBV_NODE_CA: c_int = 1;
pub const IBV_TRANSPORT_IB: c_int = 0;
pub const IBV_PORT_ACTIVE: c_int = 4;
pub const IBV_PORT_DOWN: c_int = 1;
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;
pub const IBV_ATOMIC_HCA: c_int = 1;
pub const IBV_GID_TYPE_ROCE_V2: u32 = 2;
pub const IBV_EVENT_SRQ_LIMIT_REACHED: c_int = 15;
pub const IBV_DEVICE_SRQ_RESIZE: c_uint = 1 << 13;
pub const IBV_SRQ_MAX_WR: c_int = 1 << 0;
pub const IBV_SRQ_LIMIT: c_int = 1 << 1;
pub const IBV_QPT_RC: c_int = 2;
pub const IBV_QPT_UD: c_int = 4;

pub const IBV_QP_INIT_ATTR_PD: u32 = 1 << 0;
pub const IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;
pub const IBV_QP_EX_WITH_RDMA_WRITE: u64 = 1 << 0;
pub const IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
pub const IBV_QP_EX_WITH_SEND: u64 = 1 << 2;
pub const IBV_QP_EX_WITH_SEND_WITH_IMM: u64 = 1 << 3;
pub const IBV_QP_EX_WITH_RDMA_READ: u64 = 1 << 4;
pub const IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
pub const IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
pub const IBV_QP_EX_WITH_SEND_WITH_INV: u64 = 1 << 9;

/// `IBV_WC_STANDARD_FLAGS`: the `ibv_cq_ex` fields of a `struct ibv_wc` (byte length,
/// immediate, QP numbers, SLID, SL, path bits).
pub const IBV_WC_STANDARD_FLAGS: u64 = 0x7f;
pub const IBV_CQ_INIT_ATTR_MASK_FLAGS: u32 = 1 << 0;
pub const IBV_CREATE_CQ_ATTR_SINGLE_THREADED: u32 = 1 << 0;
pub const IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: u32 = 1 << 1;

pub const IBV_QP_STATE: c_int = 1 << 0;
pub const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
pub const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
pub const IBV_QP_QKEY: c_int = 1 << 6;
pub const IBV_QP_AV: c_int = 1 << 7;
pub const IBV_QP_PATH_MTU: c_int = 1 << 8;
pub const IBV_QP_TIMEOUT: c_int = 1 << 9;
pub const IBV_QP_RETRY_CNT: c_int = 1 << 10;
pub const IBV_QP_RNR_RETRY: c_int = 1 << 11;
pub const IBV_QP_RQ_PSN: c_int = 1 << 12;
pub const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
pub const IBV_QP_MIN_RNR_TIMER: c_int = 1 << 15;
pub const IBV_QP_SQ_PSN: c_int = 1 << 16;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
pub const IBV_QP_DEST_QPN: c_int = 1 << 20;

pub const IBV_WR_RDMA_WRITE: c_int = 0;
pub const IBV_WR_RDMA_WRITE_WITH_IMM: c_int = 1;
pub const IBV_WR_SEND: c_int = 2;
pub const IBV_WR_SEND_WITH_IMM: c_int = 3;
pub const IBV_WR_RDMA_READ: c_int = 4;
pub const IBV_WR_ATOMIC_CMP_AND_SWP: c_int = 5;
pub const IBV_WR_ATOMIC_FETCH_AND_ADD: c_int = 6;
pub const IBV_WR_SEND_WITH_INV: c_int = 9;

pub const IBV_SEND_FENCE: c_uint = 1;
pub const IBV_SEND_SIGNALED: c_uint = 2;
pub const IBV_SEND_SOLICITED: c_uint = 4;
pub const IBV_SEND_INLINE: c_uint = 8;

pub const IBV_WC_GRH: c_uint = 1;
pub const IBV_WC_WITH_IMM: c_uint = 2;
pub const IBV_WC_WITH_INV: c_uint = 4;

/// `IBV_ACCESS_OPTIONAL_RANGE`: access bits a device may ignore (relaxed ordering and later).
pub const IBV_ACCESS_OPTIONAL_RANGE: c_uint = 0x3ff0_0000;
