//! Every struct the preloaded libraries read or fill has the size and field offsets of the
//! installed `<infiniband/verbs.h>` and `<rdma/rdma_cma.h>`: a C program compiled with `cc`
//! against the header prints `sizeof`/`offsetof` for each, and they are compared with Rust's
//! `size_of`/`offset_of!`.
//!
//! Needs `cc`, libibverbs-dev and librdmacm-dev (deploy/prereqs.sh installs them); without a
//! header the test fails naming the package, rather than passing silently.

use rocev2_verbs_abi::rdma_cma::*;
use rocev2_verbs_abi::verbs::*;
use std::fmt::Write as _;
use std::mem::{offset_of, size_of};
use std::process::Command;

/// One check: a label, the C expression, the Rust value.
type Check = (String, String, usize);

/// `sizeof` and every field's `offsetof` of `$c` (C spelling) against `$t`.
macro_rules! fields {
    ($out:ident, $c:literal, $t:ty, [$($f:ident $(= $cf:literal)?),* $(,)?]) => {{
        $out.push((format!("sizeof {}", $c), format!("sizeof({})", $c), size_of::<$t>()));
        $(
            #[allow(unused_variables)]
            let cf = stringify!($f);
            $(let cf = $cf;)?
            $out.push((
                format!("{}.{}", $c, stringify!($f)),
                format!("offsetof({}, {})", $c, cf),
                offset_of!($t, $f),
            ));
        )*
    }};
}

fn checks() -> Vec<Check> {
    let mut v = Vec::new();
    fields!(
        v,
        "struct ibv_device",
        ibv_device,
        [
            _ops,
            node_type,
            transport_type,
            name,
            dev_name,
            dev_path,
            ibdev_path
        ]
    );
    fields!(
        v,
        "struct ibv_context_ops",
        ibv_context_ops,
        [
            _slots0 = "_compat_query_device",
            poll_cq,
            req_notify_cq,
            _slots1 = "_compat_cq_event",
            post_srq_recv,
            _slots2 = "_compat_create_qp",
            post_send,
            post_recv,
            _slots3 = "_compat_create_ah",
        ]
    );
    fields!(
        v,
        "struct ibv_context",
        ibv_context,
        [
            device,
            ops,
            cmd_fd,
            async_fd,
            num_comp_vectors,
            mutex,
            abi_compat
        ]
    );
    fields!(
        v,
        "struct verbs_context",
        verbs_context,
        [
            query_port,
            _slots0 = "advise_mr",
            create_cq_ex,
            _priv = "priv",
            query_device_ex,
            _slots1 = "ibv_destroy_flow",
            create_qp_ex,
            _slots2 = "get_srq_num",
            sz,
            context
        ]
    );
    fields!(
        v,
        "struct ibv_device_attr_ex",
        ibv_device_attr_ex,
        [
            orig_attr,
            comp_mask,
            odp_caps,
            completion_timestamp_mask,
            hca_core_clock,
            device_cap_flags_ex,
            _caps = "tso_caps",
            phys_port_cnt_ex
        ]
    );
    fields!(
        v,
        "struct ibv_query_device_ex_input",
        ibv_query_device_ex_input,
        [comp_mask]
    );
    fields!(
        v,
        "struct ibv_cq_init_attr_ex",
        ibv_cq_init_attr_ex,
        [
            cqe,
            cq_context,
            channel,
            comp_vector,
            wc_flags,
            comp_mask,
            flags,
            parent_domain
        ]
    );
    fields!(v, "struct ibv_poll_cq_attr", ibv_poll_cq_attr, [comp_mask]);
    fields!(
        v,
        "struct ibv_cq_ex",
        ibv_cq_ex,
        [
            cq = "context",
            comp_mask,
            status,
            wr_id,
            start_poll,
            next_poll,
            end_poll,
            read_opcode,
            read_vendor_err,
            read_byte_len,
            read_imm_data,
            read_qp_num,
            read_src_qp,
            read_wc_flags,
            read_slid,
            read_sl,
            read_dlid_path_bits,
            _unsupported = "read_completion_ts"
        ]
    );
    fields!(
        v,
        "struct ibv_qp_ex",
        ibv_qp_ex,
        [
            qp_base,
            comp_mask,
            wr_id,
            wr_flags,
            wr_atomic_cmp_swp,
            wr_atomic_fetch_add,
            wr_bind_mw,
            wr_local_inv,
            wr_rdma_read,
            wr_rdma_write,
            wr_rdma_write_imm,
            wr_send,
            wr_send_imm,
            wr_send_inv,
            wr_send_tso,
            wr_set_ud_addr,
            wr_set_xrc_srqn,
            wr_set_inline_data,
            wr_set_inline_data_list,
            wr_set_sge,
            wr_set_sge_list,
            wr_start,
            wr_complete,
            wr_abort,
            wr_atomic_write
        ]
    );
    fields!(v, "struct ibv_data_buf", ibv_data_buf, [addr, length]);
    fields!(
        v,
        "struct ibv_qp_init_attr_ex",
        ibv_qp_init_attr_ex,
        [
            qp_context,
            send_cq,
            recv_cq,
            srq,
            cap,
            qp_type,
            sq_sig_all,
            comp_mask,
            pd,
            xrcd,
            create_flags,
            max_tso_header,
            rwq_ind_tbl,
            _rx_hash_conf = "rx_hash_conf",
            source_qpn,
            send_ops_flags
        ]
    );
    fields!(
        v,
        "struct ibv_device_attr",
        ibv_device_attr,
        [
            fw_ver,
            node_guid,
            sys_image_guid,
            max_mr_size,
            page_size_cap,
            vendor_id,
            vendor_part_id,
            hw_ver,
            max_qp,
            max_qp_wr,
            device_cap_flags,
            max_sge,
            max_sge_rd,
            max_cq,
            max_cqe,
            max_mr,
            max_pd,
            max_qp_rd_atom,
            max_ee_rd_atom,
            max_res_rd_atom,
            max_qp_init_rd_atom,
            max_ee_init_rd_atom,
            atomic_cap,
            max_ee,
            max_rdd,
            max_mw,
            max_raw_ipv6_qp,
            max_raw_ethy_qp,
            max_mcast_grp,
            max_mcast_qp_attach,
            max_total_mcast_qp_attach,
            max_ah,
            max_fmr,
            max_map_per_fmr,
            max_srq,
            max_srq_wr,
            max_srq_sge,
            max_pkeys,
            local_ca_ack_delay,
            phys_port_cnt
        ]
    );
    fields!(
        v,
        "struct ibv_port_attr",
        ibv_port_attr,
        [
            state,
            max_mtu,
            active_mtu,
            gid_tbl_len,
            port_cap_flags,
            max_msg_sz,
            bad_pkey_cntr,
            qkey_viol_cntr,
            pkey_tbl_len,
            lid,
            sm_lid,
            lmc,
            max_vl_num,
            sm_sl,
            subnet_timeout,
            init_type_reply,
            active_width,
            active_speed,
            phys_state,
            link_layer,
            flags,
            port_cap_flags2
        ]
    );
    fields!(v, "union ibv_gid", ibv_gid, [raw]);
    fields!(
        v,
        "struct ibv_gid_entry",
        ibv_gid_entry,
        [gid, gid_index, port_num, gid_type, ndev_ifindex]
    );
    fields!(v, "struct ibv_pd", ibv_pd, [context, handle]);
    fields!(
        v,
        "struct ibv_mr",
        ibv_mr,
        [context, pd, addr, length, handle, lkey, rkey]
    );
    fields!(
        v,
        "struct ibv_comp_channel",
        ibv_comp_channel,
        [context, fd, refcnt]
    );
    fields!(
        v,
        "struct ibv_cq",
        ibv_cq,
        [
            context,
            channel,
            cq_context,
            handle,
            cqe,
            mutex,
            cond,
            comp_events_completed,
            async_events_completed
        ]
    );
    fields!(
        v,
        "struct ibv_qp",
        ibv_qp,
        [
            context,
            qp_context,
            pd,
            send_cq,
            recv_cq,
            srq,
            handle,
            qp_num,
            state,
            qp_type,
            mutex,
            cond,
            events_completed
        ]
    );
    fields!(
        v,
        "struct ibv_qp_cap",
        ibv_qp_cap,
        [
            max_send_wr,
            max_recv_wr,
            max_send_sge,
            max_recv_sge,
            max_inline_data
        ]
    );
    fields!(
        v,
        "struct ibv_srq",
        ibv_srq,
        [
            context,
            srq_context,
            pd,
            handle,
            mutex,
            cond,
            events_completed
        ]
    );
    fields!(
        v,
        "struct ibv_srq_attr",
        ibv_srq_attr,
        [max_wr, max_sge, srq_limit]
    );
    fields!(
        v,
        "struct ibv_srq_init_attr",
        ibv_srq_init_attr,
        [srq_context, attr]
    );
    fields!(
        v,
        "struct ibv_qp_init_attr",
        ibv_qp_init_attr,
        [qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all]
    );
    fields!(
        v,
        "struct ibv_global_route",
        ibv_global_route,
        [dgid, flow_label, sgid_index, hop_limit, traffic_class]
    );
    fields!(
        v,
        "struct ibv_ah_attr",
        ibv_ah_attr,
        [
            grh,
            dlid,
            sl,
            src_path_bits,
            static_rate,
            is_global,
            port_num
        ]
    );
    fields!(
        v,
        "struct ibv_qp_attr",
        ibv_qp_attr,
        [
            qp_state,
            cur_qp_state,
            path_mtu,
            path_mig_state,
            qkey,
            rq_psn,
            sq_psn,
            dest_qp_num,
            qp_access_flags,
            cap,
            ah_attr,
            alt_ah_attr,
            pkey_index,
            alt_pkey_index,
            en_sqd_async_notify,
            sq_draining,
            max_rd_atomic,
            max_dest_rd_atomic,
            min_rnr_timer,
            port_num,
            timeout,
            retry_cnt,
            rnr_retry,
            alt_port_num,
            alt_timeout,
            rate_limit
        ]
    );
    fields!(v, "struct ibv_ah", ibv_ah, [context, pd, handle]);
    fields!(v, "struct ibv_sge", ibv_sge, [addr, length, lkey]);
    fields!(
        v,
        "struct ibv_send_wr",
        ibv_send_wr,
        [
            wr_id,
            next,
            sg_list,
            num_sge,
            opcode,
            send_flags,
            imm_data,
            wr,
            qp_type,
            _bind_mw_tso = "bind_mw"
        ]
    );
    let wr = offset_of!(ibv_send_wr, wr);
    for (c, r) in [
        (
            "wr.rdma.remote_addr",
            offset_of!(ibv_send_wr_rdma, remote_addr),
        ),
        ("wr.rdma.rkey", offset_of!(ibv_send_wr_rdma, rkey)),
        (
            "wr.atomic.remote_addr",
            offset_of!(ibv_send_wr_atomic, remote_addr),
        ),
        (
            "wr.atomic.compare_add",
            offset_of!(ibv_send_wr_atomic, compare_add),
        ),
        ("wr.atomic.swap", offset_of!(ibv_send_wr_atomic, swap)),
        ("wr.atomic.rkey", offset_of!(ibv_send_wr_atomic, rkey)),
        ("wr.ud.ah", offset_of!(ibv_send_wr_ud, ah)),
        ("wr.ud.remote_qpn", offset_of!(ibv_send_wr_ud, remote_qpn)),
        ("wr.ud.remote_qkey", offset_of!(ibv_send_wr_ud, remote_qkey)),
    ] {
        v.push((
            format!("struct ibv_send_wr.{c}"),
            format!("offsetof(struct ibv_send_wr, {c})"),
            wr + r,
        ));
    }
    v.push((
        "struct ibv_send_wr.invalidate_rkey".into(),
        "offsetof(struct ibv_send_wr, invalidate_rkey)".into(),
        offset_of!(ibv_send_wr, imm_data),
    ));
    fields!(
        v,
        "struct ibv_recv_wr",
        ibv_recv_wr,
        [wr_id, next, sg_list, num_sge]
    );
    fields!(
        v,
        "struct ibv_wc",
        ibv_wc,
        [
            wr_id,
            status,
            opcode,
            vendor_err,
            byte_len,
            imm_data,
            qp_num,
            src_qp,
            wc_flags,
            pkey_index,
            slid,
            sl,
            dlid_path_bits
        ]
    );
    fields!(
        v,
        "struct ibv_async_event",
        ibv_async_event,
        [element, event_type]
    );
    v
}

fn rdma_cma_checks() -> Vec<Check> {
    let mut v = Vec::new();
    fields!(v, "struct rdma_event_channel", rdma_event_channel, [fd]);
    fields!(v, "struct rdma_ib_addr", rdma_ib_addr, [sgid, dgid, pkey]);
    fields!(
        v,
        "struct rdma_addr",
        rdma_addr,
        [src_storage, dst_storage, ibaddr = "addr.ibaddr"]
    );
    fields!(
        v,
        "struct rdma_route",
        rdma_route,
        [addr, path_rec, num_paths]
    );
    fields!(
        v,
        "struct rdma_cm_id",
        rdma_cm_id,
        [
            verbs,
            channel,
            context,
            qp,
            route,
            ps,
            port_num,
            event,
            send_cq_channel,
            send_cq,
            recv_cq_channel,
            recv_cq,
            srq,
            pd,
            qp_type
        ]
    );
    fields!(
        v,
        "struct rdma_conn_param",
        rdma_conn_param,
        [
            private_data,
            private_data_len,
            responder_resources,
            initiator_depth,
            flow_control,
            retry_count,
            rnr_retry_count,
            srq,
            qp_num
        ]
    );
    fields!(
        v,
        "struct rdma_ud_param",
        rdma_ud_param,
        [private_data, private_data_len, ah_attr, qp_num, qkey]
    );
    fields!(
        v,
        "struct rdma_cm_event",
        rdma_cm_event,
        [id, listen_id, event, status, param]
    );
    fields!(
        v,
        "struct rdma_addrinfo",
        rdma_addrinfo,
        [
            ai_flags,
            ai_family,
            ai_qp_type,
            ai_port_space,
            ai_src_len,
            ai_dst_len,
            ai_src_addr,
            ai_dst_addr,
            ai_src_canonname,
            ai_dst_canonname,
            ai_route_len,
            ai_route,
            ai_connect_len,
            ai_connect,
            ai_next
        ]
    );
    v
}

#[test]
fn structs_match_installed_verbs_h() {
    compare("infiniband/verbs.h", "libibverbs-dev", &checks());
    assert_eq!(COMPAT_PORT_ATTR_LEN, offset_of!(ibv_port_attr, flags));
}

#[test]
fn structs_match_installed_rdma_cma_h() {
    compare("rdma/rdma_cma.h", "librdmacm-dev", &rdma_cma_checks());
}

/// Compiles a program printing each check's C value against `header` (of Debian `package`)
/// and compares them with the Rust values.
fn compare(header: &str, package: &str, checks: &[Check]) {
    let path = std::path::Path::new("/usr/include").join(header);
    assert!(
        path.exists(),
        "{} missing: install {package} (bash deploy/prereqs.sh)",
        path.display()
    );
    let mut src = format!(
        "#include <stddef.h>\n#include <stdio.h>\n#include <{header}>\nint main(void) {{\n"
    );
    for (_, expr, _) in checks {
        writeln!(src, "    printf(\"%zu\\n\", (size_t){expr});").unwrap();
    }
    src.push_str("    return 0;\n}\n");
    let dir = std::env::temp_dir().join(format!(
        "rocev2-layout-{}-{}",
        header.replace('/', "-"),
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let c = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&c, src).unwrap();
    let out = Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(&c)
        .output()
        .expect("cc runs (deploy/prereqs.sh installs gcc)");
    assert!(
        out.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe).output().expect("layout program runs");
    let _ = std::fs::remove_dir_all(&dir);
    let printed: Vec<usize> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(printed.len(), checks.len());
    let wrong: Vec<String> = checks
        .iter()
        .zip(&printed)
        .filter(|((_, _, rust), c)| *rust != **c)
        .map(|((label, _, rust), c)| format!("{label}: C {c}, Rust {rust}"))
        .collect();
    assert!(wrong.is_empty(), "layout mismatches:\n{}", wrong.join("\n"));
}
