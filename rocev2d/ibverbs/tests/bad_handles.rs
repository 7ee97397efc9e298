//! NULL pointers and handles the library did not make (or already destroyed) fail with
//! `EINVAL` (or NULL and `errno`), never crash: the exported functions called directly, as a
//! C program would.

use rocev2_ibverbs::abi::*;
use rocev2_ibverbs::context::*;
use rocev2_ibverbs::cq::*;
use rocev2_ibverbs::mr::*;
use rocev2_ibverbs::qp::*;
use rocev2_ibverbs::srq::*;
use std::ffi::CStr;
use std::ptr::null_mut;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

#[test]
fn null_and_foreign_handles_are_refused() {
    // A readable, writable block that is not one of ours: its contents must not be trusted.
    let mut junk = vec![0xa5u8; 4096];
    let j = junk.as_mut_ptr();

    assert!(ibv_open_device(null_mut()).is_null());
    assert_eq!(errno(), libc::EINVAL);
    assert!(ibv_open_device(j.cast()).is_null());
    assert_eq!(errno(), libc::EINVAL);
    assert!(ibv_get_device_name(j.cast()).is_null());
    assert_eq!(ibv_get_device_guid(j.cast()), 0);
    ibv_free_device_list(j.cast());
    ibv_free_device_list(null_mut());

    assert_eq!(ibv_close_device(j.cast()), libc::EINVAL);
    assert_eq!(ibv_query_device(j.cast(), j.cast()), libc::EINVAL);
    assert_eq!(ibv_query_port(null_mut(), 1, j.cast()), libc::EINVAL);
    assert_eq!(ibv_query_gid(j.cast(), 1, 0, j.cast()), -1);
    assert_eq!(errno(), libc::EINVAL);
    assert!(ibv_alloc_pd(j.cast()).is_null());
    assert_eq!(errno(), libc::EINVAL);
    assert_eq!(ibv_dealloc_pd(j.cast()), libc::EINVAL);
    assert!(ibv_reg_mr(j.cast(), j.cast(), 16, 1).is_null());
    assert_eq!(errno(), libc::EINVAL);
    assert_eq!(ibv_dereg_mr(j.cast()), libc::EINVAL);
    assert!(ibv_create_comp_channel(null_mut()).is_null());
    assert_eq!(ibv_destroy_comp_channel(j.cast()), libc::EINVAL);
    assert!(ibv_create_cq(j.cast(), 16, null_mut(), null_mut(), 0).is_null());
    assert_eq!(errno(), libc::EINVAL);
    assert_eq!(ibv_destroy_cq(j.cast()), libc::EINVAL);
    let mut cq = null_mut();
    let mut cq_ctx = null_mut();
    assert_eq!(ibv_get_cq_event(j.cast(), &mut cq, &mut cq_ctx), -1);
    assert_eq!(errno(), libc::EINVAL);
    ibv_ack_cq_events(j.cast(), 1);
    assert!(ibv_create_qp(j.cast(), j.cast()).is_null());
    assert_eq!(errno(), libc::EINVAL);
    assert!(ibv_create_qp(null_mut(), null_mut()).is_null());
    assert_eq!(
        ibv_modify_qp(j.cast(), j.cast(), IBV_QP_STATE),
        libc::EINVAL
    );
    assert_eq!(ibv_query_qp(j.cast(), j.cast(), 0, j.cast()), libc::EINVAL);
    assert_eq!(ibv_destroy_qp(j.cast()), libc::EINVAL);
    assert!(ibv_create_ah(j.cast(), j.cast()).is_null());
    assert_eq!(errno(), libc::EINVAL);
    assert_eq!(ibv_destroy_ah(j.cast()), libc::EINVAL);
    assert!(ibv_create_ah_from_wc(j.cast(), j.cast(), j.cast(), 1).is_null());
    assert_eq!(errno(), libc::EINVAL);
    assert_eq!(
        ibv_init_ah_from_wc(j.cast(), 1, j.cast(), j.cast(), j.cast()),
        -1
    );
    assert_eq!(errno(), libc::EINVAL);
    assert!(ibv_create_srq(j.cast(), j.cast()).is_null());
    assert_eq!(errno(), libc::EINVAL);
    assert!(ibv_create_srq(null_mut(), null_mut()).is_null());
    assert_eq!(
        ibv_modify_srq(j.cast(), j.cast(), IBV_SRQ_LIMIT),
        libc::EINVAL
    );
    assert_eq!(ibv_query_srq(j.cast(), j.cast()), libc::EINVAL);
    assert_eq!(ibv_destroy_srq(j.cast()), libc::EINVAL);
    assert_eq!(ibv_get_async_event(j.cast(), j.cast()), -1);
    assert_eq!(errno(), libc::EINVAL);
    let mut ev = ibv_async_event {
        element: j.cast(),
        event_type: IBV_EVENT_SRQ_LIMIT_REACHED,
    };
    ibv_ack_async_event(&mut ev);
    ibv_ack_async_event(null_mut());
    assert!(
        junk.iter().all(|b| *b == 0xa5),
        "nothing written through foreign handles"
    );
}

/// The `ibv_wr_*` functions of an extended QP, called with one that is not ours, write nothing,
/// and its `ibv_wr_complete` fails with `EINVAL`.
#[test]
fn extended_qp_functions_refuse_foreign_qps() {
    let mut junk = vec![0xa5u8; 4096];
    let j = junk.as_mut_ptr();
    assert!(ibv_qp_to_qp_ex(j.cast()).is_null());
    assert!(ibv_qp_to_qp_ex(null_mut()).is_null());
    assert_eq!(ibv_get_device_index(j.cast()), -1);
    // SAFETY: all-zero bytes are a valid `ibv_qp` (integers, NULL pointers, glibc's static
    // initializers of its mutex and condition variable).
    let x = rocev2_ibverbs::wr::qp_ex(unsafe { std::mem::zeroed() });
    let f = j.cast::<ibv_qp_ex>();
    // SAFETY: the functions check the QP against the live ones before touching anything.
    unsafe {
        (x.wr_start)(f);
        (x.wr_send)(f);
        (x.wr_rdma_write)(f, 1, 0);
        (x.wr_set_sge)(f, 1, 0, 8);
        (x.wr_set_sge_list)(f, 1, j.cast());
        (x.wr_set_inline_data)(f, j.cast(), 8);
        (x.wr_set_ud_addr)(f, j.cast(), 1, 1);
        (x.wr_local_inv)(f, 1);
        assert_eq!((x.wr_complete)(f), libc::EINVAL);
        (x.wr_abort)(f);
        assert_eq!((x.wr_complete)(null_mut()), libc::EINVAL);
    }
    assert!(
        junk.iter().all(|b| *b == 0xa5),
        "nothing written through foreign handles"
    );
}

#[test]
fn status_strings_cover_every_value() {
    // SAFETY: the functions return static NUL-terminated strings.
    let s = |p| unsafe { CStr::from_ptr(p) }.to_str().unwrap();
    assert_eq!(s(ibv_wc_status_str(0)), "success");
    assert_eq!(s(ibv_wc_status_str(5)), "Work Request Flushed Error");
    assert_eq!(s(ibv_wc_status_str(12)), "transport retry counter exceeded");
    assert_eq!(s(ibv_wc_status_str(-1)), "unknown");
    assert_eq!(s(ibv_wc_status_str(99)), "unknown");
    assert_eq!(s(ibv_port_state_str(4)), "PORT_ACTIVE");
    assert_eq!(s(ibv_event_type_str(1000)), "unknown");
}
