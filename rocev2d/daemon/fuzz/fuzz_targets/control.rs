//! Hostile applications on the control protocol and their rings: arbitrary bytes are cut into
//! frames and carried out on a [`Host`] as the requests of two attachments, in turn (the first
//! byte of a frame's request picks which). A `RegMr` comes with a descriptor the input chooses:
//! a sealed memfd of the announced length, one of another length, a pipe, a socket, or this
//! process's `/proc/self/mem` (memory registered in place), and one more of those per piece of
//! moved pages an in-place registration announces. The rest of the input is pushed as
//! records into every ring of the attachments' QPs, and the ring headers of some get scribbled
//! on, while the host serves them; nobody reads a CQ ring (a stalled consumer). CM requests
//! reach the daemon's CM. The host never panics; closing both attachments leaves no QP in the
//! engine and no region backed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rocev2_core::Endpoint;
use rocev2_core::time::Instant;
use rocev2_datapath::Interface;
use rocev2_datapath::host::{HostMemory, ProcessMemory};
use rocev2_datapath::iface::IfAddr;
use rocev2_ipc::frame::Decoder;
use rocev2_ipc::proto::{Request, Response, SLOT_SIZE};
use rocev2_ipc::ring::{End, Ring};
use rocev2_ipc::shm::Region;
use rocev2d::host::{Creds, Host, Limits};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;

/// The descriptor a `RegMr` of `len` bytes comes with, picked by `pick`.
fn descriptor(pick: u8, len: u64) -> Option<OwnedFd> {
    let small = usize::try_from(len).ok().filter(|l| *l <= 65536)?;
    Some(match pick % 5 {
        0 => Region::create("fuzz", small).ok()?.fd().try_clone_to_owned().ok()?,
        1 => Region::create("fuzz", small + 4096).ok()?.fd().try_clone_to_owned().ok()?,
        2 => {
            let (r, _w) = rustix::pipe::pipe().ok()?;
            r
        }
        3 => UnixStream::pair().ok()?.0.into(),
        _ => ProcessMemory::open_own().ok()?,
    })
}

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
        max_mrs: 8,
        max_mr_bytes: 1 << 20,
        ..Limits::default()
    };
    let mut host = Host::new(iface, limits, None);
    let mut ep = Endpoint::new(7);
    // The daemon's CM, so the CM requests reach the engine too.
    ep.enable_cm(rocev2_core::endpoint::GsiConfig {
        mac: [2, 0, 0, 0, 0, 1],
        cm: rocev2_core::cm::CmConfig { local_ca_guid: 1 },
        seed: 7,
        link_mtu: 1500,
    });
    let mut mem = HostMemory::default();
    let mut apps = Vec::new();
    let mut ends = Vec::new();
    for uid in [0, 1000] {
        let (conn, app_end) = UnixStream::pair().unwrap();
        let (app, _bell) = host.attach(Creds { pid: 1, uid }, conn.into()).unwrap();
        apps.push(app);
        ends.push(app_end);
    }
    let mut dec = Decoder::default();
    dec.extend(frames);
    let mut rings = Vec::new();
    let mut turn = 0usize;
    while let Ok(Some((req, _))) = dec.next_frame::<Request>() {
        turn += 1;
        let fds = match &req {
            Request::RegMr { len, access, at, .. } => {
                let mut fds: Vec<OwnedFd> = descriptor(*access as u8, *len).into_iter().collect();
                for p in at.iter().flat_map(|a| &a.pages) {
                    fds.extend(descriptor(p.file_offset as u8, p.file_len));
                }
                fds
            }
            _ => Vec::new(),
        };
        let app = apps[turn % apps.len()];
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
            if chunk.len() >= 4 && chunk[0] % 7 == 0 {
                // A scribbled header: the producer's index (the ring's first word) jumps.
                if let Some(head) = ring.region().atomic_u32(0) {
                    let v = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
                    head.store(v, std::sync::atomic::Ordering::Release);
                }
            } else {
                let _ = ring.push(chunk);
            }
        }
        host.service(&mut ep, &mut mem, Instant::ZERO);
    }
    for app in apps {
        host.detach(&mut ep, &mut mem, Instant::ZERO, app);
    }
    assert_eq!(ep.qps().count(), 0);
    assert_eq!(ep.ud_qps().count(), 0);
    assert!(mem.is_empty());
});
