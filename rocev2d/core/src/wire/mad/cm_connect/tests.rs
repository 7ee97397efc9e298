use super::super::tests::{REP, REQ, RTU, data};
use super::*;
use crate::wire::Header;
use crate::wire::mad::{CmAttribute, CmRepr, MAD_LEN, Packet as Mad, method};
use core::net::Ipv4Addr;

fn v4(a: u8, b: u8, c: u8, d: u8) -> Ipv6Addr {
    Ipv4Addr::new(a, b, c, d).to_ipv6_mapped()
}

/// rping_cm.pcap frame 1, read by hand from the hex dump (Table 106 offsets).
fn capture_req() -> ReqRepr {
    let mut private_data = [0u8; 92];
    // rdma_cm's IP private data (version 0.0, IPv4, source port 0xbf31, then the addresses).
    private_data[1] = 0x40;
    private_data[2..4].copy_from_slice(&[0xbf, 0x31]);
    private_data[16..20].copy_from_slice(&[192, 168, 77, 11]);
    private_data[32..36].copy_from_slice(&[192, 168, 77, 10]);
    ReqRepr {
        local_comm_id: 0x6784_96bc,
        vendor_id: 0,
        // RDMA_PS_TCP (0x06) port 7174 (0x1c06).
        service_id: 0x0000_0000_0106_1c06,
        local_ca_guid: 0x5054_00ff_fe77_000b,
        local_q_key: 0,
        local_qpn: Qpn::new(0x11),
        responder_resources: 1,
        local_eecn: 0,
        initiator_depth: 1,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport_service_type: 0,
        end_to_end_flow_control: false,
        starting_psn: Psn::new(0x9e_1675),
        local_cm_response_timeout: 20,
        retry_count: 7,
        partition_key: 0xffff,
        path_packet_payload_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport_type: 0,
        primary_path: PathRepr {
            local_port_lid: 0xffff,
            remote_port_lid: 0xffff,
            local_port_gid: v4(192, 168, 77, 11),
            remote_port_gid: v4(192, 168, 77, 10),
            flow_label: 0x7_42f5,
            packet_rate: 0,
            traffic_class: 0,
            hop_limit: 64,
            sl: 0,
            subnet_local: false,
            local_ack_timeout: 19,
        },
        alternate_path: PathRepr::NONE,
        sap_supported: false,
        private_data,
    }
}

#[test]
fn req_four_ways() {
    let p = ReqPacket::new_checked(data(&REQ)).unwrap();
    assert_eq!(p.local_qpn(), Qpn::new(0x11));
    assert_eq!(p.starting_psn(), Psn::new(0x9e_1675));
    // Byte 43 = 0xa0: timeout 0b10100 = 20, then RC (0), no flow control.
    assert_eq!(p.remote_cm_response_timeout(), 20);
    // Byte 47 = 0xa7: 20, retry 7. Byte 50 = 0x37: MTU 1024 (3), RNR retry 7. Byte 51 = 0xf0.
    assert_eq!((p.local_cm_response_timeout(), p.retry_count()), (20, 7));
    assert_eq!((p.path_packet_payload_mtu(), p.rnr_retry_count()), (3, 7));
    assert_eq!(p.max_cm_retries(), 15);
    assert_eq!(p.primary_path().flow_label(), 0x7_42f5);
    assert_eq!(p.primary_path().local_ack_timeout(), 19);
    let r = ReqRepr::parse(&p).unwrap();
    assert_eq!(r, capture_req());
    let mut buf = [0u8; DATA_LEN];
    capture_req().emit(&mut ReqPacket::new_unchecked(&mut buf[..]));
    assert_eq!(&buf[..], data(&REQ));
}

#[test]
fn req_sub_byte_fields_land_at_their_table_106_bits() {
    let mut r = capture_req();
    r.transport_service_type = 2;
    r.end_to_end_flow_control = true;
    r.rdc_exists = true;
    r.srq = true;
    r.extended_transport_type = 3;
    r.alternate_path.packet_rate = 0x3f;
    r.alternate_path.sl = 0xf;
    r.alternate_path.subnet_local = true;
    r.alternate_path.local_ack_timeout = 0x1f;
    r.sap_supported = true;
    let mut buf = [0u8; DATA_LEN];
    r.emit(&mut ReqPacket::new_unchecked(&mut buf[..]));
    assert_eq!(buf[43], 0b1010_0101); // 20 | RD | EE flow control
    assert_eq!(buf[50], 0b0011_1111); // MTU 3 | RDC | RNR 7
    assert_eq!(buf[51], 0b1111_1011); // 15 | SRQ | XRC
    assert_eq!(buf[96 + 39], 0x3f);
    assert_eq!(buf[96 + 42], 0b1111_1000);
    assert_eq!(buf[96 + 43], 0b1111_1100); // timeout 31 | SAP Supported
    assert_eq!(ReqRepr::parse(&ReqPacket::new_unchecked(&buf[..])), Ok(r));
}

fn capture_rep() -> RepRepr {
    RepRepr {
        local_comm_id: 0x2c50_252f,
        remote_comm_id: 0x6784_96bc,
        local_q_key: 0,
        local_qpn: Qpn::new(0x11),
        local_ee_context_number: 0,
        vendor_id: 0,
        starting_psn: Psn::new(0xd2_ba60),
        responder_resources: 1,
        initiator_depth: 1,
        target_ack_delay: 15,
        failover_accepted: 0,
        end_to_end_flow_control: false,
        rnr_retry_count: 7,
        srq: false,
        local_ca_guid: 0x5054_00ff_fe77_000a,
        private_data: [0; 196],
    }
}

#[test]
fn rep_four_ways() {
    let p = RepPacket::new_checked(data(&REP)).unwrap();
    assert_eq!(
        (
            p.local_comm_id(),
            p.remote_comm_id(),
            p.local_qpn(),
            p.starting_psn()
        ),
        (
            0x2c50_252f,
            0x6784_96bc,
            Qpn::new(0x11),
            Psn::new(0xd2_ba60)
        )
    );
    // Byte 26 = 0x78: target ACK delay 15, failover 0, no flow control; byte 27 = 0xe0.
    assert_eq!((p.target_ack_delay(), p.rnr_retry_count()), (15, 7));
    assert_eq!(RepRepr::parse(&p), Ok(capture_rep()));
    let mut buf = [0u8; DATA_LEN];
    capture_rep().emit(&mut RepPacket::new_unchecked(&mut buf[..]));
    assert_eq!(&buf[..], data(&REP));
}

#[test]
fn rep_vendor_id_is_split_over_three_reserved_bytes() {
    let mut r = capture_rep();
    r.vendor_id = 0x00_abcdef;
    let mut buf = [0u8; DATA_LEN];
    r.emit(&mut RepPacket::new_unchecked(&mut buf[..]));
    assert_eq!((buf[15], buf[19], buf[23]), (0xab, 0xcd, 0xef));
    assert_eq!(buf[12..15], [0, 0, 0x11]);
    assert_eq!(RepRepr::parse(&RepPacket::new_unchecked(&buf[..])), Ok(r));
}

#[test]
fn rtu_four_ways() {
    let p = RtuPacket::new_checked(data(&RTU)).unwrap();
    assert_eq!(
        (p.local_comm_id(), p.remote_comm_id()),
        (0x6784_96bc, 0x2c50_252f)
    );
    let want = RtuRepr {
        local_comm_id: 0x6784_96bc,
        remote_comm_id: 0x2c50_252f,
        private_data: [0; 224],
    };
    assert_eq!(RtuRepr::parse(&p), Ok(want));
    let mut buf = [0xffu8; DATA_LEN];
    want.emit(&mut RtuPacket::new_unchecked(&mut buf[..]));
    assert_eq!(&buf[..], data(&RTU));
}

/// An MRA built by hand from Table 107: lcid, rcid, MessageMRAed = 1 (REP) in the top two bits
/// of byte 8, ServiceTimeout = 0x15 in the top five bits of byte 9, private data from byte 10.
fn mra_bytes() -> [u8; DATA_LEN] {
    let mut b = [0u8; DATA_LEN];
    b[..8].copy_from_slice(&[0x81, 0x02, 0x03, 0x04, 0x85, 0x06, 0x07, 0x08]);
    b[8] = 0b0100_0000;
    b[9] = 0b1010_1000;
    b[10..].fill(0xc3);
    b
}

#[test]
fn mra_four_ways() {
    let b = mra_bytes();
    let p = MraPacket::new_checked(&b[..]).unwrap();
    assert_eq!((p.message_mraed(), p.service_timeout()), (1, 0x15));
    let want = MraRepr {
        local_comm_id: 0x8102_0304,
        remote_comm_id: 0x8506_0708,
        message_mraed: 1,
        service_timeout: 0x15,
        private_data: [0xc3; 222],
    };
    assert_eq!(MraRepr::parse(&p), Ok(want));
    let mut out = [0u8; DATA_LEN];
    want.emit(&mut MraPacket::new_unchecked(&mut out[..]));
    assert_eq!(out, b);
}

/// A REJ built by hand from Table 108: MessageRejected = 0 (REQ), RejectInfoLength = 8 in the
/// top seven bits of byte 9, reason 8 (invalid ServiceID), ARI at 12, private data at 84.
fn rej_bytes() -> [u8; DATA_LEN] {
    let mut b = [0u8; DATA_LEN];
    b[..8].copy_from_slice(&[0x8a, 0, 0, 1, 0, 0, 0, 0]);
    b[9] = 8 << 1;
    b[10..12].copy_from_slice(&[0, 8]);
    b[12..20].copy_from_slice(&[0xa0, 1, 2, 3, 4, 5, 6, 7]);
    b[84..].fill(0x3c);
    b
}

#[test]
fn rej_four_ways() {
    let b = rej_bytes();
    let p = RejPacket::new_checked(&b[..]).unwrap();
    assert_eq!(
        (p.message_rejected(), p.reject_info_length(), p.reason()),
        (0, 8, 8)
    );
    let mut ari = [0u8; 72];
    ari[..8].copy_from_slice(&[0xa0, 1, 2, 3, 4, 5, 6, 7]);
    let want = RejRepr {
        local_comm_id: 0x8a00_0001,
        remote_comm_id: 0,
        message_rejected: 0,
        reject_info_length: 8,
        reason: 8,
        ari,
        private_data: [0x3c; 148],
    };
    assert_eq!(RejRepr::parse(&p), Ok(want));
    let mut out = [0xffu8; DATA_LEN];
    out.fill(0);
    want.emit(&mut RejPacket::new_unchecked(&mut out[..]));
    assert_eq!(out, b);
    // Whole MAD: AttributeID 0x0012, Send().
    let m = CmRepr {
        method: method::SEND,
        status: 0,
        class_specific: 0,
        transaction_id: 7,
        attribute_modifier: 0,
        attribute: CmAttribute::Rej(want),
    };
    let mut mad = [0u8; MAD_LEN];
    m.emit(&mut Mad::new_unchecked(&mut mad[..]));
    assert_eq!(mad[16..18], [0x00, 0x12]);
    assert_eq!(CmRepr::parse_bytes(&mad), Ok(m));
}

#[test]
fn cm_messages_short_are_truncated() {
    let short = &data(&REQ)[..DATA_LEN - 1];
    let t = Err(Error::Truncated(Header::Mad));
    assert_eq!(ReqPacket::new_checked(short).map(|_| ()), t);
    assert_eq!(MraPacket::new_checked(short).map(|_| ()), t);
    assert_eq!(RejPacket::new_checked(short).map(|_| ()), t);
    assert_eq!(RepPacket::new_checked(short).map(|_| ()), t);
    assert_eq!(RtuPacket::new_checked(short).map(|_| ()), t);
}
