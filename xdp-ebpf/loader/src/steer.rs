//! The AF_XDP steering program: attach it to an interface, register (and unregister) one
//! AF_XDP socket per rx queue, read its counters. See `rocev2_ebpf_common::steer` for what it does per frame.

use std::os::fd::AsRawFd;

use aya::{
    Ebpf,
    maps::{MapData, PerCpuArray, XskMap},
    programs::{Xdp, XdpMode},
};
use rocev2_ebpf_common::steer::{COUNTERS_MAP, XSKS_MAP};
pub use rocev2_ebpf_common::steer::{Counter, MAX_QUEUES};

use crate::Error;

const PROGRAM: &str = "rocev2_steer";
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/steer"));

/// Where the program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachMode {
    /// Native XDP, in the driver (veth and most NIC drivers); needed for zero-copy AF_XDP.
    Driver,
    /// Generic XDP, on the socket buffer after the driver: works on every interface, slower.
    Skb,
}

impl AttachMode {
    /// `"driver"` or `"skb"`, for logs.
    pub const fn name(self) -> &'static str {
        match self {
            AttachMode::Driver => "driver",
            AttachMode::Skb => "skb",
        }
    }
}

impl From<AttachMode> for XdpMode {
    fn from(m: AttachMode) -> XdpMode {
        match m {
            AttachMode::Driver => XdpMode::Driver,
            AttachMode::Skb => XdpMode::Skb,
        }
    }
}

/// The steering program attached to one interface; detached when dropped.
pub struct Steering {
    // Field order matters for drop: the maps close before the object that owns the link.
    xsks: XskMap<MapData>,
    counters: PerCpuArray<MapData, u64>,
    _ebpf: Ebpf,
}

impl Steering {
    /// Loads the program and attaches it to interface `ifindex` in `mode` (veths and most
    /// drivers accept [`AttachMode::Driver`]; [`AttachMode::Skb`] works everywhere, slower).
    /// The attachment is a BPF link owned by this process: it goes away when the handle is
    /// dropped or the process dies, however it dies.
    ///
    /// # Errors
    /// [`Error::Load`] (verifier, no privileges), [`Error::Program`] (the interface refuses the
    /// mode, or already has an XDP program), [`Error::Map`]/[`Error::Missing`].
    pub fn attach(ifindex: u32, mode: AttachMode) -> Result<Steering, Error> {
        let mut ebpf = Ebpf::load(OBJECT)?;
        let program: &mut Xdp = ebpf
            .program_mut(PROGRAM)
            .ok_or(Error::Missing("steering program"))?
            .try_into()
            .map_err(|source| Error::Program {
                name: PROGRAM,
                source,
            })?;
        program.load().map_err(|source| Error::Program {
            name: PROGRAM,
            source,
        })?;
        program
            .attach_to_if_index(ifindex, mode.into())
            .map_err(|source| Error::Program {
                name: PROGRAM,
                source,
            })?;
        let xsks = ebpf.take_map(XSKS_MAP).ok_or(Error::Missing(XSKS_MAP))?;
        let xsks = XskMap::try_from(xsks).map_err(|source| Error::Map {
            name: XSKS_MAP,
            source,
        })?;
        let counters = ebpf
            .take_map(COUNTERS_MAP)
            .ok_or(Error::Missing(COUNTERS_MAP))?;
        let counters = PerCpuArray::try_from(counters).map_err(|source| Error::Map {
            name: COUNTERS_MAP,
            source,
        })?;
        Ok(Steering {
            xsks,
            counters,
            _ebpf: ebpf,
        })
    }

    /// Sends RoCEv2 frames arriving on rx `queue` to `socket` (an AF_XDP socket bound to that
    /// queue of this interface).
    ///
    /// # Errors
    /// [`Error::Map`]: `queue` is not below [`MAX_QUEUES`] or `socket` is not an AF_XDP socket.
    pub fn register(&mut self, queue: u32, socket: &impl AsRawFd) -> Result<(), Error> {
        self.xsks
            .set(queue, socket.as_raw_fd(), 0)
            .map_err(|source| Error::Map {
                name: XSKS_MAP,
                source,
            })
    }

    /// Stops sending frames arriving on rx `queue` to the socket registered for it (they go to
    /// the kernel and count as `no_socket`); a queue without a socket is left as it is.
    ///
    /// # Errors
    /// [`Error::Map`]: `queue` is not below [`MAX_QUEUES`].
    pub fn unregister(&mut self, queue: u32) -> Result<(), Error> {
        match self.xsks.unset(queue) {
            Err(aya::maps::MapError::SyscallError(e))
                if e.io_error.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(())
            }
            r => r.map_err(|source| Error::Map {
                name: XSKS_MAP,
                source,
            }),
        }
    }

    /// The program's counters, summed over CPUs, in [`Counter::ALL`] order.
    ///
    /// # Errors
    /// [`Error::Map`] when the kernel refuses the lookup.
    pub fn counters(&self) -> Result<[(Counter, u64); Counter::ALL.len()], Error> {
        let mut out = Counter::ALL.map(|c| (c, 0));
        for (counter, total) in &mut out {
            let per_cpu =
                self.counters
                    .get(&(*counter as u32), 0)
                    .map_err(|source| Error::Map {
                        name: COUNTERS_MAP,
                        source,
                    })?;
            *total = per_cpu.iter().sum();
        }
        Ok(out)
    }
}
