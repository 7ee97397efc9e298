//! A hostile application on the control protocol and its rings: arbitrary bytes are cut into
//! frames and carried out on a [`Host`] as one attachment's requests (a `RegMr` gets a real
//! sealed memfd of its announced length when that is small), then the rest of the input is
//! pushed as records into every ring of the attachment's QPs and the host serves them. CM
//! requests (listen, connect, accept, reject, MRA, disconnect, poll) reach the daemon's CM; UD QPs
//! and address handles are made like RC QPs, and their rings get the same records. The host
//! never panics; closing the attachment leaves no QP in the engine and no region mapped.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rocev2_core::Endpoint;
use rocev2_core::time::Instant;
use rocev2_datapath::Interface;
use rocev2_datapath::iface::IfAddr;
use rocev2_ipc::frame::Decoder;
use rocev2_ipc::proto::{Request, Response, SLOT_SIZE};
use rocev2_ipc::ring::{End, Ring};
use rocev2_ipc::shm::Region;
use rocev2d::host::memory::HostMemory;
use rocev2d::host::{Creds, Host, Limits};
use std::os::unix::net::UnixStream;

fuzz_target!(|data: &[u8]| {
    let (frames, records) = data.split_at(data.len() / 2);
    let iface = Interface {
        name: "f0".into(),
        index: 1,
        mac: [2, 0, 0, 0, 0, 1],
        mtu: 1500,
        up: true,
        addrs: vec![IfAddr {
            ip: "10.0.0.1".parse().unwrap(),
            prefix_len: 24,
            link_local: false,
        }],
        rx_queues: 1,
    };
    let limits = Limits {
        max_qps: 8,
        max_cqs: 8,
        max_ahs: 8,
        max_mr_bytes: 1 << 20,
    };
    let mut host = Host::new(iface, limits, None);
    let mut ep = Endpoint::new(7);
    // The daemon's CM, so the CM requests reach the engine too.
    ep.enable_cm(rocev2_core::endpoint::GsiConfig {
        mac: [2, 0, 0, 0, 0, 1],
        cm: rocev2_core::cm::CmConfig { local_ca_guid: 1 },
        seed: 7,
    });
    let mut mem = HostMemory::default();
    let (conn, _app_end) = UnixStream::pair().unwrap();
    let (app, _bell) = host.attach(Creds { pid: 1, uid: 0 }, conn.into()).unwrap();
    let mut dec = Decoder::default();
    dec.extend(frames);
    let mut rings = Vec::new();
    while let Ok(Some((req, _))) = dec.next_frame::<Request>() {
        let fds = match &req {
            Request::RegMr { len, .. } if *len <= 65536 => {
                let r = Region::create("fuzz", *len as usize).unwrap();
                vec![r.fd().try_clone_to_owned().unwrap()]
            }
            _ => Vec::new(),
        };
        let reply = host.request(&mut ep, &mut mem, Instant::ZERO, app, req, fds);
        if let Response::Qp {
            sq_slots, rq_slots, ..
        }
        | Response::UdQp {
            sq_slots, rq_slots, ..
        } = reply.response
        {
            for (fd, slots) in reply.fds.into_iter().zip([sq_slots, rq_slots]) {
                let len = Ring::region_len(slots, SLOT_SIZE) as u64;
                let region = Region::from_fd(fd, len).unwrap();
                rings.push(Ring::open(region, slots, SLOT_SIZE, End::Producer).unwrap());
            }
        }
    }
    let n = rings.len().max(1);
    for (i, chunk) in records.chunks(48).enumerate() {
        if let Some(ring) = rings.get_mut(i % n) {
            let _ = ring.push(chunk);
        }
        host.service(&mut ep, &mut mem, Instant::ZERO);
    }
    host.detach(&mut ep, &mut mem, Instant::ZERO, app);
    assert_eq!(ep.qps().count(), 0);
    assert_eq!(ep.ud_qps().count(), 0);
    assert!(mem.is_empty());
});
