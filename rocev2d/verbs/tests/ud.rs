//! UD QPs and address handles through the API on an in-memory `Device::pair` (no root): a
//! ping and its reply addressed from the completion, the Q_Key rule, and the verbs a UD QP
//! refuses.

use rocev2::{
    AccessFlags, AhAttr, ConnectOptions, Cq, Device, Error, GRH_LEN, Mr, Qp, RecvWr, RemoteQp,
    SendOp, SendWr, UdAddress, WcOpcode, WcStatus, WorkCompletion, gid_to_ip,
};
use rocev2_core::DropReason;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(5);

/// One side: a UD QP with Q_Key `q_key`, a 4 KiB region, one CQ.
struct Side {
    dev: Device,
    qp: Qp,
    cq: Cq,
    mr: Mr,
}

fn side(dev: Device, q_key: u32) -> Side {
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    let qp = dev.create_ud_qp(pd, cq, cq, q_key).unwrap();
    let mr = dev
        .register(pd, vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
        .unwrap();
    Side { dev, qp, cq, mr }
}

impl Side {
    /// Posts a receive of `len` bytes (GRH area included) at offset 2048.
    fn recv(&self, wr_id: u64, len: u32) {
        let wr = RecvWr {
            wr_id,
            sg_list: vec![self.mr.sge(2048, len).unwrap()],
        };
        self.dev.post_recv(self.qp, wr).unwrap();
    }

    /// Sends `data` (copied to offset 0 of the region) to `to`.
    fn send(&self, wr_id: u64, data: &[u8], to: UdAddress) {
        self.dev.mr_guard(&self.mr).unwrap()[..data.len()].copy_from_slice(data);
        let sge = self.mr.sge(0, data.len() as u32).unwrap();
        let wr = SendWr::new(wr_id, SendOp::Send).sge(sge);
        self.dev.post_send_to(self.qp, to, wr).unwrap();
    }

    fn wait(&self) -> WorkCompletion {
        let mut wcs = Vec::new();
        self.dev.wait_cq(self.cq, &mut wcs, 1, WAIT).unwrap();
        wcs[0]
    }

    fn received(&self, len: usize) -> Vec<u8> {
        self.dev.mr_guard(&self.mr).unwrap()[2048..2048 + len].to_vec()
    }

    fn drops(&self, reason: DropReason) -> u64 {
        self.dev.engine().unwrap().stats().drops(reason)
    }
}

#[test]
fn ud_ping_and_reply_addressed_from_the_completion() {
    let (a, b) = Device::pair().unwrap();
    let (a, b) = (side(a, 0x1234), side(b, 0x5678));
    b.recv(10, 256);
    let ah = a
        .dev
        .create_ah(
            a.dev.alloc_pd().unwrap(),
            &AhAttr::new(b.dev.source_ip(false).unwrap()),
        )
        .unwrap();
    let to_b = UdAddress {
        ah,
        qpn: b.qp.qpn(),
        q_key: 0x5678,
    };
    a.send(1, b"ping", to_b);
    let sent = a.wait();
    assert_eq!(
        (sent.wr_id, sent.status, sent.opcode),
        (1, WcStatus::Success, WcOpcode::Send)
    );

    let got = b.wait();
    assert_eq!((got.wr_id, got.status), (10, WcStatus::Success));
    assert_eq!(got.opcode, WcOpcode::Recv);
    assert_eq!(got.byte_len as usize, GRH_LEN + 4);
    assert_eq!(got.src_qp, a.qp.qpn());
    assert!(got.with_grh());
    let src = gid_to_ip(got.ud.unwrap().sgid);
    assert_eq!(src, a.dev.source_ip(false).unwrap());
    let buf = b.received(GRH_LEN + 4);
    // IPv4 in the GRH area: 20 zero bytes, then the header as received (libibverbs' layout).
    assert!(buf[..20].iter().all(|x| *x == 0));
    assert_eq!(buf[20], 0x45);
    assert_eq!(&buf[32..36], &[10, 77, 0, 1]);
    assert_eq!(&buf[36..40], &[10, 77, 0, 2]);
    assert_eq!(&buf[GRH_LEN..], b"ping");

    // The reply goes where the completion says the ping came from; a Q_Key with the high bit
    // set sends the QP's own, which the pinger does not expect, so name it.
    a.recv(20, 256);
    let back = b
        .dev
        .create_ah(b.dev.alloc_pd().unwrap(), &AhAttr::new(src))
        .unwrap();
    let to_a = UdAddress {
        ah: back,
        qpn: got.src_qp,
        q_key: 0x1234,
    };
    b.send(2, b"pong!", to_a);
    assert!(b.wait().status.is_success());
    let r = a.wait();
    assert_eq!((r.wr_id, r.byte_len as usize), (20, GRH_LEN + 5));
    assert_eq!(r.src_qp, b.qp.qpn());
    assert_eq!(&a.received(GRH_LEN + 5)[GRH_LEN..], b"pong!");
    b.dev.destroy_ah(back).unwrap();
    assert!(matches!(b.dev.destroy_ah(back), Err(Error::UnknownAh)));
}

#[test]
fn ud_wrong_qkey_is_dropped_and_counted_and_the_buffer_stays_posted() {
    let (a, b) = Device::pair().unwrap();
    let (a, b) = (side(a, 1), side(b, 0x2222));
    b.recv(10, 256);
    let ah = a
        .dev
        .create_ah(
            a.dev.alloc_pd().unwrap(),
            &AhAttr::new(b.dev.source_ip(false).unwrap()),
        )
        .unwrap();
    let mut to_b = UdAddress {
        ah,
        qpn: b.qp.qpn(),
        q_key: 0x2223,
    };
    let before = b.drops(DropReason::BadQkey);
    a.send(1, b"wrong", to_b);
    // The sender cannot tell: UD is unacknowledged.
    assert!(a.wait().status.is_success());
    to_b.q_key = 0x2222;
    a.send(2, b"right", to_b);
    assert!(a.wait().status.is_success());
    // The first message consumed nothing: the one buffer holds the second.
    let got = b.wait();
    assert_eq!((got.wr_id, got.status), (10, WcStatus::Success));
    assert_eq!(&b.received(GRH_LEN + 5)[GRH_LEN..], b"right");
    assert_eq!(b.drops(DropReason::BadQkey), before + 1);
    let mut more = Vec::new();
    assert_eq!(b.dev.poll_cq(b.cq, &mut more, 4), 0);
}

#[test]
fn ud_qp_refuses_rc_verbs_and_messages_over_its_mtu() {
    let (a, b) = Device::pair().unwrap();
    let (a, b) = (side(a, 7), side(b, 7));
    let pd = a.dev.alloc_pd().unwrap();
    let ah = a
        .dev
        .create_ah(pd, &AhAttr::new(b.dev.source_ip(false).unwrap()))
        .unwrap();
    let to = UdAddress {
        ah,
        qpn: b.qp.qpn(),
        q_key: 7,
    };
    let sge = a.mr.sge(0, 8).unwrap();
    let rc_ops = [
        SendOp::Write {
            remote_addr: 0,
            rkey: a.mr.rkey(),
        },
        SendOp::Read {
            remote_addr: 0,
            rkey: a.mr.rkey(),
        },
        SendOp::FetchAdd {
            remote_addr: 0,
            rkey: a.mr.rkey(),
            add: 1,
        },
    ];
    for op in rc_ops {
        let e = a
            .dev
            .post_send_to(a.qp, to, SendWr::new(1, op).sge(sge))
            .unwrap_err();
        assert!(matches!(e, Error::WrongQpType(_)), "{op:?}: {e}");
        assert!(e.to_string().contains("need an RC QP"), "{e}");
    }
    // A UD send needs an address; an RC QP takes none; a UD QP is not connected.
    let e = a
        .dev
        .post_send(a.qp, SendWr::new(1, SendOp::Send).sge(sge))
        .unwrap_err();
    assert!(e.to_string().contains("post_send_to"), "{e}");
    let cq = a.dev.create_cq(4).unwrap();
    let rc = a.dev.create_rc_qp(pd, cq, cq).unwrap();
    let e = a
        .dev
        .post_send_to(rc, to, SendWr::new(1, SendOp::Send))
        .unwrap_err();
    assert!(matches!(e, Error::WrongQpType(_)), "{e}");
    let remote = RemoteQp {
        qpn: b.qp.qpn(),
        psn: 0,
        ip: b.dev.source_ip(false).unwrap(),
        mac: Some(b.dev.interface().mac),
    };
    let e = a
        .dev
        .connect(a.qp, &remote, &ConnectOptions::default())
        .unwrap_err();
    assert!(matches!(e, Error::WrongQpType(_)), "{e}");

    // The pair's 1500-byte interfaces carry a 1024-byte MTU: one byte more is refused.
    let mtu = a.dev.ud_mtu(a.qp).unwrap().bytes();
    assert_eq!(mtu, 1024);
    assert_eq!(a.dev.ud_mtu(rc), None);
    let big = SendWr::new(1, SendOp::Send).sge(a.mr.sge(0, mtu + 1).unwrap());
    let e = a.dev.post_send_to(a.qp, to, big).unwrap_err();
    assert!(
        matches!(
            e,
            Error::UdTooLong {
                len: 1025,
                mtu: 1024
            }
        ),
        "{e}"
    );
    // Exactly the MTU goes through, into a buffer of MTU + GRH bytes.
    b.recv(1, mtu + GRH_LEN as u32);
    let full = SendWr::new(2, SendOp::Send).sge(a.mr.sge(0, mtu).unwrap());
    a.dev.post_send_to(a.qp, to, full).unwrap();
    assert!(a.wait().status.is_success());
    let got = b.wait();
    assert_eq!(got.byte_len, mtu + GRH_LEN as u32);
    assert_eq!(a.dev.qp_state(a.qp), Some(rocev2::QpState::Rts));
}

#[test]
fn ud_receive_without_room_for_the_grh_area_is_dropped_as_too_long() {
    let (a, b) = Device::pair().unwrap();
    let (a, b) = (side(a, 3), side(b, 3));
    // Room for the message but not for the 40 bytes before it.
    b.recv(1, 16);
    let ah = a
        .dev
        .create_ah(
            a.dev.alloc_pd().unwrap(),
            &AhAttr::new(b.dev.source_ip(false).unwrap()),
        )
        .unwrap();
    let to = UdAddress {
        ah,
        qpn: b.qp.qpn(),
        q_key: 3,
    };
    let before = b.drops(DropReason::TooLong);
    a.send(1, b"sixteen bytes!!!", to);
    assert!(a.wait().status.is_success());
    // Dropped once the peer's thread has seen it: wait for the counter, not for time.
    let deadline = std::time::Instant::now() + WAIT;
    while b.drops(DropReason::TooLong) == before {
        assert!(std::time::Instant::now() < deadline, "never dropped");
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut wcs = Vec::new();
    assert_eq!(b.dev.poll_cq(b.cq, &mut wcs, 4), 0);
}
