//! Unreliable Datagram QPs and address handles: connectionless SEND and RECV
//! (`IBV_QPT_UD`, `ibv_create_ah`).
//!
//! Source: IBA Vol. 1 §9.8 (UD: each message is one packet of at most the MTU, with a DETH
//! naming the Q_Key and the source QP), §10.2.4 (Q_Keys), §11.2.2 (address handles), §11.4.1.2
//! (the 40-byte GRH area at the head of every UD receive buffer) and §11.4.2 (UD completions
//! name the source QP and carry the GRH). The engine's side is [`rocev2_core::qp::UdQp`].
//!
//! A UD QP is made with [`Device::create_ud_qp`] and is ready at once (RESET→INIT→RTR→RTS with
//! its Q_Key, as `ibv_ud_pingpong` does in three `ibv_modify_qp` calls). An address handle
//! ([`Device::create_ah`]) is the path to a peer's port, built from the peer's IP address (its
//! GID: IPv4-mapped GIDs as IPv4, [`crate::gid_to_ip`]) the way [`Device::connect`] builds an
//! RC path: our MAC and first global address of the peer's family, the next hop's MAC from the
//! neighbour table. Sends name (AH, remote QPN, remote Q_Key) in a [`UdAddress`]
//! ([`Device::post_send_to`]).
//!
//! # The GRH area
//!
//! As with libibverbs, every UD receive buffer starts with [`GRH_LEN`](crate::GRH_LEN) (40) bytes the device
//! fills before the message: the received IPv6 header, or 20 zero bytes then the received IPv4
//! header (RoCEv2's stand-in for the IB GRH, Annex A17.4). The message follows at byte 40, and
//! the completion's `byte_len` counts the 40 bytes too: post receive buffers 40 bytes longer
//! than the largest message. The completion names the sender: [`crate::WorkCompletion::src_qp`]
//! (the DETH's source QP) and [`crate::UdSource::sgid`] in [`crate::WorkCompletion::ud`].
//!
//! A message whose Q_Key is not the receiving QP's is dropped silently (IBA class D) and
//! counted under `bad_qkey` in the engine's drop counters (`rocev2d stats` when attached).
//!
//! Attached, the daemon holds the address handles: it builds each from its own interface (so an
//! application cannot send from an address that is not the interface's) and an application
//! names only its own.
//!
//! Deviations from libibverbs: the Q_Key is given at creation (no `ibv_modify_qp`); a send
//! longer than the MTU is refused at post time ([`Error::UdTooLong`]) rather than completing
//! with `IBV_WC_LOC_LEN_ERR`; every address handle sends from UDP source port 49152 (RoCEv2's
//! entropy port of QPN 0, as `librocev2_ibverbs` does); no multicast.

use super::Device;
use crate::error::{Error, Result};
use crate::mr::Pd;
use crate::qp::{Cq, Qp};
use crate::ud::{Ah, AhAttr, UdAddress};
use rocev2_core::qp::{Mtu, QpConfig, SendWr};

impl Device {
    /// Creates a UD QP with `ibv_rc_pingpong`-like sizes ([`QpConfig::new`]) whose received
    /// messages must carry `q_key`, and brings it to RTS; see [`Device::create_ud_qp_with`].
    ///
    /// ```
    /// use rocev2::{AccessFlags, AhAttr, Device, RecvWr, SendOp, SendWr, UdAddress, GRH_LEN};
    /// use std::time::Duration;
    /// # fn main() -> Result<(), rocev2::Error> {
    /// let (dev, peer) = Device::pair()?;
    /// let (pd, ppd) = (dev.alloc_pd()?, peer.alloc_pd()?);
    /// let (cq, pcq) = (dev.create_cq(16)?, peer.create_cq(16)?);
    /// let (qp, pqp) = (dev.create_ud_qp(pd, cq, cq, 0x1111)?, peer.create_ud_qp(ppd, pcq, pcq, 0x2222)?);
    /// // The receiver's buffer: the 40-byte GRH area, then the message.
    /// let rbuf = peer.register(ppd, vec![0u8; GRH_LEN + 64], AccessFlags::LOCAL_WRITE)?;
    /// peer.post_recv(pqp, RecvWr { wr_id: 7, sg_list: vec![rbuf.sge(0, (GRH_LEN + 64) as u32)?] })?;
    ///
    /// let sbuf = dev.register(pd, b"ping".to_vec(), AccessFlags::LOCAL_WRITE)?;
    /// let ah = dev.create_ah(pd, &rocev2::AhAttr::new(peer.source_ip(false)?))?;
    /// let to = UdAddress { ah, qpn: pqp.qpn(), q_key: 0x2222 };
    /// dev.post_send_to(qp, to, SendWr::new(1, SendOp::Send).sge(sbuf.sge(0, 4)?))?;
    ///
    /// let mut wcs = Vec::new();
    /// peer.wait_cq(pcq, &mut wcs, 1, Duration::from_secs(5))?;
    /// let wc = rocev2::check(wcs[0])?;
    /// assert_eq!(wc.byte_len as usize, GRH_LEN + 4); // the GRH area counts
    /// assert_eq!(wc.src_qp, qp.qpn()); // the DETH's source QP
    /// let sgid = wc.ud.expect("a UD receive names its sender").sgid;
    /// assert_eq!(rocev2::gid_to_ip(sgid), dev.source_ip(false)?);
    /// let got = peer.mr_guard(&rbuf)?;
    /// // IPv4: 20 zero bytes, then the IPv4 header (version 4, source address at +12).
    /// assert_eq!(got[20] >> 4, 4);
    /// assert_eq!(&got[32..36], &[10, 77, 0, 1]);
    /// assert_eq!(&got[GRH_LEN..GRH_LEN + 4], b"ping");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Device::create_ud_qp_with`]; [`Error::WrongDevice`].
    pub fn create_ud_qp(&self, pd: Pd, send_cq: Cq, recv_cq: Cq, q_key: u32) -> Result<Qp> {
        self.own(pd.1, "protection domain")?;
        self.own(send_cq.1, "CQ")?;
        self.own(recv_cq.1, "CQ")?;
        self.create_ud_qp_with(QpConfig::new(pd.0, send_cq.0, recv_cq.0), q_key)
    }

    /// Creates a UD QP (`ibv_create_qp` with `IBV_QPT_UD`) from a full configuration (of which
    /// it uses the PD, the CQs and the queue, SGE and inline limits) and brings it to RTS with
    /// Q_Key `q_key`, the default P_Key and a random first PSN. Its messages are at most
    /// [`Device::ud_mtu`] bytes: the largest IBA MTU the interface carries.
    ///
    /// # Errors
    /// [`Error::MtuTooSmall`]; [`Error::Verb`] (unknown PD or CQ); attached, [`Error::Refused`]
    /// (the daemon's QP limit, sizes the rings cannot carry).
    pub fn create_ud_qp_with(&self, cfg: QpConfig, q_key: u32) -> Result<Qp> {
        Ok(Qp(self.ops().create_ud_qp(cfg, q_key)?, self.id()))
    }

    /// The largest message UD QP `qp` sends or accepts (its MTU); `None` for an RC QP or an
    /// unknown one.
    pub fn ud_mtu(&self, qp: Qp) -> Option<Mtu> {
        self.own(qp.1, "QP").ok()?;
        self.ops().ud_mtu(qp.0)
    }

    /// Creates an address handle (`ibv_create_ah`): the path to the port of `attr.ip`, built
    /// from the interface (our MAC and first global address of the peer's family) and the
    /// neighbour table (the next hop's MAC, unless `attr.mac` gives it), as
    /// [`Device::connect`] builds an RC path. Attached, the daemon builds and keeps it.
    ///
    /// # Errors
    /// [`Error::NoAddress`] (no address of the peer's family to send from),
    /// [`Error::Datapath`] when the MAC cannot be resolved, [`Error::WrongDevice`]; attached,
    /// [`Error::Refused`] (the same reasons as the daemon reports them, or its limit of
    /// address handles).
    pub fn create_ah(&self, pd: Pd, attr: &AhAttr) -> Result<Ah> {
        self.own(pd.1, "protection domain")?;
        Ok(Ah(self.ops().create_ah(attr)?, self.id()))
    }

    /// Destroys an address handle (`ibv_destroy_ah`). Sends already posted through it still
    /// leave (they carry their own copy of the path).
    ///
    /// # Errors
    /// [`Error::UnknownAh`].
    pub fn destroy_ah(&self, ah: Ah) -> Result<()> {
        self.own(ah.1, "address handle")
            .map_err(|_| Error::UnknownAh)?;
        self.ops().destroy_ah(ah.0)
    }

    /// Posts a UD send work request to `to` (`ibv_post_send` with `wr.ud`): SEND or SEND with
    /// immediate, of at most [`Device::ud_mtu`] bytes.
    ///
    /// # Errors
    /// [`Error::WrongQpType`] for an RC QP or another operation; [`Error::UdTooLong`];
    /// [`Error::UnknownAh`]; otherwise as [`Device::post_send`].
    pub fn post_send_to(&self, qp: Qp, to: UdAddress, wr: SendWr) -> Result<()> {
        self.own(qp.1, "QP")?;
        self.own(to.ah.1, "address handle")
            .map_err(|_| Error::UnknownAh)?;
        self.ops().post_send_to(qp.0, to, wr)
    }
}
