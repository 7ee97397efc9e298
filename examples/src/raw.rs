//! Raw RoCEv2 frames through a rocev2 datapath with no engine above it: what `dp_pingpong`
//! (the floor under a busy-polled round trip) and `dp_stream` (the ceiling over goodput)
//! measure. No QP, no PSN, no ICRC check, no completion: only the kernel's path (the `sendto`
//! kick, veth, the steering program, the copies in AF_XDP copy mode) and the datapath's rings.
//!
//! Both sides open the datapath (`--datapath xdp|packet|udp`) as the engine would. The server
//! listens on a TCP port for the client's connection, which says the server's datapath is open
//! and gives each side the other's address; MACs come from the neighbour table (resolved if
//! missing). Every frame is a UD SEND Only of the asked payload to a QP nothing else uses.

use anyhow::{Context, Result, bail};
use rocev2_core::wire::{
    BthRepr, DethRepr, EthRepr, FrameRepr, IpRepr, Opcode, Operation, Psn, Qpn, ROCEV2_UDP_PORT,
    RoceRepr, Transport, UdpRepr, frame::Ecn,
};
use rocev2_datapath::auto::{self, Mode, Options};
use rocev2_datapath::{Datapath, Interface, TxBatch, neigh};
use std::net::{IpAddr, TcpStream};
use std::time::Duration;

/// The options both tools take (each adds its frames' size and count).
#[derive(clap::Args, Debug, Clone)]
pub struct RawArgs {
    /// Interface to open.
    #[arg(short = 'd', long = "ib-dev")]
    pub iface: String,
    /// Datapath: xdp (AF_XDP, root), packet (AF_PACKET) or udp.
    #[arg(long = "datapath", default_value = "xdp")]
    pub datapath: Mode,
    /// TCP port of the set-up connection.
    #[arg(short = 'p', long = "port", default_value_t = 18517)]
    pub port: u16,
    /// Server to connect to; none: be the server.
    pub servername: Option<IpAddr>,
}

/// One side, set up: its datapath, the set-up connection and both addresses.
pub struct RawPeer {
    /// The open datapath.
    pub dp: Box<dyn Datapath + Send>,
    /// The set-up connection, open until the client is done.
    pub ctl: TcpStream,
    /// This side connected (it is the client).
    pub client: bool,
    mac: [u8; 6],
    peer_mac: [u8; 6],
    local: IpAddr,
    peer: IpAddr,
}

/// The UD QP number every frame names; nothing receives on it but these tools.
const QPN: Qpn = Qpn::new(0x00ab_cdef);

impl RawArgs {
    /// Opens the datapath, then meets the peer over TCP; `tool` names the tool in the line that
    /// says which datapath opened (stderr).
    ///
    /// # Errors
    /// No such interface, the datapath does not open, the peer does not connect or answer, or
    /// its MAC does not resolve.
    pub fn open(&self, tool: &str) -> Result<RawPeer> {
        let iface =
            Interface::by_name(&self.iface).with_context(|| format!("interface {}", self.iface))?;
        let opened = auto::open(&iface, self.datapath, &Options::default())
            .with_context(|| format!("opening the {} datapath on {}", self.datapath, iface.name))?;
        eprintln!("{tool}: {}", opened.reason);
        let ctl = match self.servername {
            None => crate::listen(self.port)?.accept()?.0,
            Some(ip) => TcpStream::connect((ip, self.port))
                .with_context(|| format!("connecting to {ip}:{}", self.port))?,
        };
        let local = ctl.local_addr()?.ip().to_canonical();
        let peer = ctl.peer_addr()?.ip().to_canonical();
        let peer_mac = neigh::resolve(&iface, peer, Duration::from_secs(3))
            .with_context(|| format!("the MAC of {peer}"))?;
        Ok(RawPeer {
            dp: opened.datapath,
            ctl,
            client: self.servername.is_some(),
            mac: iface.mac,
            peer_mac,
            local,
            peer,
        })
    }
}

impl RawPeer {
    /// The peer's address.
    pub fn peer(&self) -> IpAddr {
        self.peer
    }

    /// A UD SEND Only of `size` payload bytes to the peer, ICRC and all.
    ///
    /// # Errors
    /// The two addresses are of different IP versions, or the frame does not fit the wire
    /// format.
    pub fn frame(&self, size: usize) -> Result<Vec<u8>> {
        let repr = self.repr()?;
        let payload = vec![0x5a; size];
        let mut buf = vec![0; repr.buffer_len(size)?];
        repr.emit(&mut buf, &payload)?;
        Ok(buf)
    }

    /// Every frame's headers: this side to its peer, a UD SEND Only to [`QPN`].
    fn repr(&self) -> Result<FrameRepr> {
        let ip = match (self.local, self.peer) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => IpRepr::V4 {
                src,
                dst,
                dscp: 0,
                ecn: Ecn::Ect0,
                identification: 0,
                dont_fragment: true,
                ttl: 64,
            },
            (IpAddr::V6(src), IpAddr::V6(dst)) => IpRepr::V6 {
                src,
                dst,
                dscp: 0,
                ecn: Ecn::Ect0,
                flow_label: 0,
                hop_limit: 64,
            },
            (src, dst) => bail!("{src} and {dst} are not of one IP version"),
        };
        Ok(FrameRepr {
            eth: EthRepr {
                src: self.mac,
                dst: self.peer_mac,
                vlan: None,
            },
            ip,
            udp: UdpRepr {
                src_port: 0xc000,
                dst_port: ROCEV2_UDP_PORT,
                checksum: false,
            },
            roce: RoceRepr {
                deth: Some(DethRepr {
                    q_key: 0x1111_1111,
                    src_qp: QPN,
                }),
                ..RoceRepr::new(BthRepr::new(
                    Opcode::new(Transport::Ud, Operation::SendOnly),
                    0xffff,
                    QPN,
                    Psn::new(0),
                ))
            },
        })
    }

    /// Whether a received buffer of `len` bytes is `frame` as this side's peer built it: the
    /// whole frame, or its UDP payload (BTH onwards) from a datapath that hands in datagrams.
    /// A function of its own, so it can be used while the datapath is borrowed.
    ///
    /// # Errors
    /// As [`Self::frame`].
    pub fn matcher(&self) -> Result<impl Fn(usize, &[u8]) -> bool + Copy + use<>> {
        // Ethernet, IP and UDP: the whole frame's length less its transport's (BTH … ICRC).
        let repr = self.repr()?;
        let headers = repr.buffer_len(0)? - repr.roce.buffer_len(0)?;
        Ok(move |len, frame: &[u8]| len == frame.len() || len + headers == frame.len())
    }

    /// Sends `frames` in order, in one batch if the datapath takes them at once (it kicks the
    /// kernel in each `send`); waits for room in its transmit ring.
    ///
    /// # Errors
    /// The datapath's.
    pub fn send(&mut self, tx: &mut TxBatch, frames: &[&[u8]]) -> Result<()> {
        for f in frames {
            tx.push(f);
        }
        while !tx.is_empty() {
            let n = self.dp.send(tx)?;
            tx.consume(n);
            if n == 0 {
                std::thread::yield_now();
            }
        }
        Ok(())
    }
}
