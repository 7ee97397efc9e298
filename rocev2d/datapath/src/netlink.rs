//! A minimal synchronous rtnetlink client: one request, all replies (dumps included), typed by
//! `netlink-packet-route`. Used by [`crate::iface`] and [`crate::neigh`]; the socket is opened
//! in the calling thread's network namespace, which is what callers want (a thread that entered
//! a namespace sees that namespace's links, addresses and neighbours).
//!
//! Deviations: none.

use crate::Error;
use netlink_packet_core::{
    NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};

/// An rtnetlink socket.
pub(crate) struct Rtnl {
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl Rtnl {
    /// Opens and binds a route netlink socket.
    pub(crate) fn new() -> Result<Rtnl, Error> {
        let mut sock = Socket::new(NETLINK_ROUTE).map_err(|e| Error::io("netlink socket", e))?;
        sock.bind_auto().map_err(|e| Error::io("netlink bind", e))?;
        sock.connect(&SocketAddr::new(0, 0))
            .map_err(|e| Error::io("netlink connect", e))?;
        Ok(Rtnl {
            sock,
            seq: 0,
            buf: Vec::with_capacity(1 << 16),
        })
    }

    /// A dump request (`NLM_F_DUMP`): every object of the kind.
    pub(crate) fn dump(
        &mut self,
        msg: RouteNetlinkMessage,
    ) -> Result<Vec<RouteNetlinkMessage>, Error> {
        self.request(msg, NLM_F_REQUEST | NLM_F_DUMP)
    }

    /// A single-object request (`RTM_GETROUTE` for one destination), with an ACK.
    pub(crate) fn get(
        &mut self,
        msg: RouteNetlinkMessage,
    ) -> Result<Vec<RouteNetlinkMessage>, Error> {
        self.request(msg, NLM_F_REQUEST | NLM_F_ACK)
    }

    fn request(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<Vec<RouteNetlinkMessage>, Error> {
        self.seq = self.seq.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = flags;
        header.sequence_number = self.seq;
        let mut req = NetlinkMessage::new(header, NetlinkPayload::from(msg));
        req.finalize();
        let mut out = vec![0; req.buffer_len()];
        req.serialize(&mut out);
        self.sock
            .send(&out, 0)
            .map_err(|e| Error::io("netlink send", e))?;
        let mut replies = Vec::new();
        loop {
            self.buf.clear();
            let n = self
                .sock
                .recv(&mut self.buf, 0)
                .map_err(|e| Error::io("netlink recv", e))?;
            let mut at = 0;
            while at < n.min(self.buf.len()) {
                let bytes = &self.buf[at..n.min(self.buf.len())];
                let m: NetlinkMessage<RouteNetlinkMessage> = NetlinkMessage::deserialize(bytes)
                    .map_err(|e| Error::Netlink(e.to_string()))?;
                let len = m.header.length as usize;
                if m.header.sequence_number == self.seq {
                    match m.payload {
                        NetlinkPayload::Done(_) => return Ok(replies),
                        NetlinkPayload::Error(e) => {
                            return match e.code {
                                None => Ok(replies),
                                Some(code) => Err(Error::io(
                                    "netlink request",
                                    std::io::Error::from_raw_os_error(-code.get()),
                                )),
                            };
                        }
                        NetlinkPayload::InnerMessage(inner) => {
                            replies.push(inner);
                            if flags & NLM_F_DUMP == 0 && flags & NLM_F_ACK == 0 {
                                return Ok(replies);
                            }
                        }
                        _ => {}
                    }
                }
                if len == 0 {
                    break;
                }
                at += len.div_ceil(4) * 4;
            }
        }
    }
}
