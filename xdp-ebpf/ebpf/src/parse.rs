//! Header walking for XDP and TC programs.
//!
//! Every read goes through [`load`], which compares the end of the read with the end of the
//! packet before dereferencing: that comparison is what lets the verifier accept the access,
//! and it makes a truncated frame an ordinary `None` instead of undefined behaviour.

use rocev2_ebpf_common::steer::ROCEV2_PORT;

const ETH_HLEN: usize = 14;
const VLAN_HLEN: usize = 4;
const ETH_P_IPV4: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88a8;
const IPPROTO_UDP: u8 = 17;
const IPV6_HLEN: usize = 40;
const UDP_HLEN: usize = 8;

/// Reads a `T` at `start + offset` if it lies wholly before `end`.
///
/// # Safety
/// `start..end` must be the packet's data as given by the program context.
#[inline(always)]
pub unsafe fn load<T: Copy>(start: usize, end: usize, offset: usize) -> Option<T> {
    let at = start + offset;
    if at + core::mem::size_of::<T>() > end {
        return None;
    }
    // SAFETY: in bounds by the check above; packet data has no alignment guarantee.
    Some(unsafe { core::ptr::read_unaligned(at as *const T) })
}

/// The IP and UDP layout of a frame, as [`headers`] finds it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Ip {
    /// Offset of the IPv4/IPv6 header.
    pub l3: usize,
    /// Offset of the transport header.
    pub l4: usize,
    /// IPv6 (else IPv4).
    pub ipv6: bool,
    /// The ECN field (RFC 3168 §5): 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE.
    pub ecn: u8,
    /// UDP to the RoCEv2 port with a whole UDP header: the BTH starts at `l4 + 8`.
    pub roce: bool,
}

/// What [`headers`] found in a frame.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Headers {
    /// IPv4 or IPv6.
    Ip(Ip),
    /// Another ethertype (ARP, LLDP, …).
    NotIp,
    /// Shorter than the headers it announces.
    Truncated,
}

/// Walks Ethernet, up to two VLAN tags, IPv4 (with options) or IPv6 (no extension headers,
/// which RoCEv2 does not use) and finds the IP header, its ECN field, the transport header and
/// whether the frame is RoCEv2. Used by every program: the steering program needs only `roce`.
///
/// # Safety
/// `start..end` must be the packet's data as given by the program context.
#[inline(always)]
pub unsafe fn headers(start: usize, end: usize) -> Headers {
    let mut off = ETH_HLEN - 2;
    let mut ethertype = match unsafe { load::<u16>(start, end, off) } {
        Some(t) => u16::from_be(t),
        None => return Headers::Truncated,
    };
    for _ in 0..2 {
        if ethertype != ETH_P_8021Q && ethertype != ETH_P_8021AD {
            break;
        }
        off += VLAN_HLEN;
        ethertype = match unsafe { load::<u16>(start, end, off) } {
            Some(t) => u16::from_be(t),
            None => return Headers::Truncated,
        };
    }
    let l3 = off + 2;
    // IPv4: version/IHL, TOS (DSCP | ECN); IPv6: version/TC-high, TC-low/flow label.
    let (Some(b0), Some(b1)) = (unsafe { load::<u8>(start, end, l3) }, unsafe {
        load::<u8>(start, end, l3 + 1)
    }) else {
        return Headers::Truncated;
    };
    let (ecn, proto, l4) = match ethertype {
        ETH_P_IPV4 => {
            let Some(proto) = (unsafe { load::<u8>(start, end, l3 + 9) }) else {
                return Headers::Truncated;
            };
            (b1 & 0x03, proto, l3 + usize::from(b0 & 0x0f) * 4)
        }
        ETH_P_IPV6 => {
            let Some(next) = (unsafe { load::<u8>(start, end, l3 + 6) }) else {
                return Headers::Truncated;
            };
            ((b1 >> 4) & 0x03, next, l3 + IPV6_HLEN)
        }
        _ => return Headers::NotIp,
    };
    // One load of the whole UDP header: its own pointer comparison is what the verifier
    // needs (a separate length test on integers can let LLVM drop that comparison).
    let roce = proto == IPPROTO_UDP
        && matches!(unsafe { load::<[u8; UDP_HLEN]>(start, end, l4) },
            Some(udp) if u16::from_be_bytes([udp[2], udp[3]]) == ROCEV2_PORT);
    Headers::Ip(Ip {
        l3,
        l4,
        ipv6: ethertype == ETH_P_IPV6,
        ecn,
        roce,
    })
}
