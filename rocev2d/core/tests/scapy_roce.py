#!/usr/bin/env python3
"""Scapy's RoCEv2 (scapy.contrib.roce) as an independent implementation, for interop_scapy.rs.

scapy.contrib.roce knows the BTH, the AETH (bound to RC/RD ACKNOWLEDGE), the CNP's 16 reserved
bytes (CNPPadding, cnp()) and computes the ICRC itself (BTH.compute_icrc, for IPv4 and IPv6). It
has no RETH, DETH, ImmDt, IETH or AtomicETH classes, so those headers are packed here with
struct, byte for byte as IBA Vol. 1 §9.3 lays them out.

Two modes, both line-oriented with `key=value` tokens so the Rust side needs no JSON parser:

  build   print frames built by scapy (ICRC by scapy), one per line, each with the field
          values that went into it and `frame=<hex>`;
  check   read `<name> <hex>` lines (frames built by rocev2) on stdin and print, per frame,
          what scapy dissects, the ICRC stored in the frame and the ICRC scapy computes.
"""

import struct
import sys

# The layers needed, not scapy.all: importing everything triples the start-up time.
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw
from scapy.contrib.roce import AETH, BTH, CNPPadding, cnp

SRC_MAC = "52:54:00:77:00:0b"
DST_MAC = "52:54:00:77:00:0a"
ROCE_PORT = 4791


def payload(n, seed):
    """n bytes that make a shifted or truncated copy visible."""
    return bytes(((k * 31 + seed) & 0xFF) | 0x80 for k in range(n))


def pad(data):
    """The pad bytes IBA §9.2 requires after a payload, and their count."""
    n = (4 - len(data) % 4) % 4
    return b"\x00" * n, n


def reth(va, rkey, dmalen):
    return struct.pack("!QII", va, rkey, dmalen)


def deth(qkey, srcqp):
    # Q_Key, one reserved byte, 24-bit source QP.
    return struct.pack("!II", qkey, srcqp & 0xFFFFFF)


def atomic_eth(va, rkey, swap_add, compare):
    return struct.pack("!QIQQ", va, rkey, swap_add, compare)


def ipv4(**kw):
    kw.setdefault("src", "192.168.77.11")
    kw.setdefault("dst", "192.168.77.10")
    return IP(**kw)


def ipv6(**kw):
    kw.setdefault("src", "fd00:77::b")
    kw.setdefault("dst", "fd00:77::a")
    return IPv6(**kw)


def built_frames():
    """(name, scapy packet, facts) for every frame of `build` mode.

    `facts` holds what the Rust side must find after parsing; BTH fields are read back from the
    packet itself, so they cannot drift from what was built.
    """
    out = []

    def add(name, l3, bth, body=b"", data=b"", vlan=None, sport=0xC001, csum=None, facts=None):
        eth = Ether(src=SRC_MAC, dst=DST_MAC)
        if vlan is not None:
            eth = eth / Dot1Q(prio=vlan[0], vlan=vlan[1])
        pad_bytes, n = pad(data)
        if bth.opcode != 0x81 and "padcount" not in bth.fields:
            bth.padcount = n
        udp = UDP(sport=sport, dport=ROCE_PORT)
        if csum is not None:
            udp.chksum = csum
        pkt = eth / l3 / udp / bth
        rest = body + data + pad_bytes
        if rest:
            pkt = pkt / Raw(rest)
        f = dict(facts or {})
        f["payload"] = data.hex()
        out.append((name, pkt, f))

    # RC SEND Only: odd payload (pad 3), SE and AckReq, a PSN just before the 2^24 wrap, the UDP
    # checksum computed by scapy and a non-zero TOS (masked from the ICRC, covered by the IP
    # checksum).
    add(
        "v4_send_only",
        ipv4(id=0x1234, flags="DF", ttl=64, tos=0x6A),
        BTH(opcode=0x04, solicited=1, ackreq=1, pkey=0x8001, dqpn=0xABCDEF, psn=0xFFFFFE),
        data=b"hello, rocev2",
    )
    # RC RDMA WRITE First with RETH (packed by hand), an MTU-sized payload, UDP checksum 0 as
    # rxe sends.
    add(
        "v4_write_first",
        ipv4(id=0x0001, flags="DF"),
        BTH(opcode=0x06, dqpn=0x000011, psn=0x37CF8A),
        body=reth(0x00007F0012345678, 0x000002BA, 8192),
        data=payload(1024, 1),
        csum=0,
        facts={"reth_va": 0x00007F0012345678, "reth_rkey": 0x2BA, "reth_len": 8192},
    )
    # RC RDMA READ Request: RETH, no payload.
    add(
        "v4_read_request",
        ipv4(id=0x0002),
        BTH(opcode=0x0C, ackreq=1, dqpn=0x800001, psn=0x000000),
        body=reth(0xFFFFFFFFFFFF0000, 0x80000001, 0x7FFFFFFF),
        csum=0,
        facts={"reth_va": 0xFFFFFFFFFFFF0000, "reth_rkey": 0x80000001, "reth_len": 0x7FFFFFFF},
    )
    # ACKs with scapy's AETH: the captured rxe ACK (syndrome 0x1f, MSN 5), an RNR NAK (timer
    # code 14) and a remote access NAK.
    add(
        "v4_ack",
        ipv4(id=0xD9C7, flags="DF", ttl=64),
        BTH(opcode=0x11, dqpn=0x11, psn=0x7D2AB1) / AETH(syndrome=0x1F, msn=5),
        sport=0xC121,
        csum=0,
        facts={"syndrome": 0x1F, "msn": 5},
    )
    add(
        "v4_rnr_nak",
        ipv4(id=0x0003),
        BTH(opcode=0x11, dqpn=0xFEDCBA, psn=0x123456) / AETH(syndrome=0x2E, msn=0xABCDEF),
        facts={"syndrome": 0x2E, "msn": 0xABCDEF},
    )
    add(
        "v4_nak_access",
        ipv4(id=0x0004),
        BTH(opcode=0x11, dqpn=0x000100, psn=0x800000) / AETH(syndrome=0x62, msn=1),
        csum=0,
        facts={"syndrome": 0x62, "msn": 1},
    )
    # FETCH_ADD and its ATOMIC ACKNOWLEDGE (AETH + AtomicAckETH packed by hand: scapy binds AETH
    # to opcode 0x11 only).
    add(
        "v4_fetch_add",
        ipv4(id=0x0005),
        BTH(opcode=0x14, ackreq=1, dqpn=0x000011, psn=0x49F45E),
        body=atomic_eth(0x000055909726C000, 0x208, 0x8000000000000001, 0),
        csum=0,
        facts={
            "atomic_va": 0x000055909726C000,
            "atomic_rkey": 0x208,
            "atomic_swap_add": 0x8000000000000001,
            "atomic_compare": 0,
        },
    )
    add(
        "v4_atomic_ack",
        ipv4(id=0x0006),
        BTH(opcode=0x12, dqpn=0x000012, psn=0x49F45E),
        body=struct.pack("!IQ", 0x1F000007, 0xFEDCBA9876543210),
        facts={"syndrome": 0x1F, "msn": 7, "orig_data": 0xFEDCBA9876543210},
    )
    # A CNP as scapy builds it (BECN set), with DSCP 48 as ConnectX sends CNPs.
    add("v4_cnp", ipv4(id=0x0007, tos=48 << 2), cnp(0x000042), csum=0)
    # IPv6: non-zero traffic class, flow label and hop limit, all masked from the ICRC; UDP
    # checksum computed by scapy (IPv6 requires one).
    add(
        "v6_send_only_imm",
        ipv6(tc=0x6A, fl=0x12345, hlim=64),
        BTH(opcode=0x05, dqpn=0x000022, psn=0x000100),
        body=struct.pack("!I", 0xDEADBEEF),
        data=b"abcdef",
        facts={"imm": 0xDEADBEEF},
    )
    # IPv6 ACK with FECN and BECN set: BTH byte 4 is masked, the ICRC must still verify.
    add(
        "v6_ack_fecn_becn",
        ipv6(tc=0x03, fl=0xFFFFF, hlim=1),
        BTH(opcode=0x11, fecn=1, becn=1, dqpn=0x000033, psn=0xFFFFFF) / AETH(syndrome=0x60, msn=0xFFFFFF),
        facts={"syndrome": 0x60, "msn": 0xFFFFFF},
    )
    # 802.1Q-tagged UD SEND Only with DETH, to a non-GSI QP.
    add(
        "vlan_v4_ud_send",
        ipv4(id=0x0008, flags="DF"),
        BTH(opcode=0x64, dqpn=0x010203, psn=0x000005),
        body=deth(0x11111111, 0x123456),
        data=payload(256, 9),
        vlan=(3, 0x123),
        csum=0,
        facts={"deth_qkey": 0x11111111, "deth_srcqp": 0x123456, "vlan": 0x123, "pcp": 3},
    )
    # 802.1Q-tagged IPv6 RC SEND Only with Invalidate (IETH).
    add(
        "vlan_v6_send_inv",
        ipv6(tc=0, fl=0, hlim=255),
        BTH(opcode=0x17, dqpn=0x000044, psn=0x000200),
        body=struct.pack("!I", 0xCAFEF00D),
        data=payload(3, 4),
        vlan=(5, 0xFFE),
        facts={"ieth_rkey": 0xCAFEF00D, "vlan": 0xFFE, "pcp": 5},
    )
    return out


def bth_facts(b):
    return {
        "opcode": b.opcode,
        "se": b.solicited,
        "migreq": b.migreq,
        "padcount": b.padcount,
        "tver": b.version,
        "pkey": b.pkey,
        "fecn": b.fecn,
        "becn": b.becn,
        "resv6": b.resv6,
        "dqpn": b.dqpn,
        "ackreq": b.ackreq,
        "psn": b.psn,
    }


def line(pairs):
    return " ".join(f"{k}={v}" for k, v in pairs.items())


def build():
    for name, pkt, facts in built_frames():
        raw = bytes(pkt)
        # Read the built frame back so the reported values are the ones on the wire.
        back = Ether(raw)
        f = {"name": name}
        f.update(bth_facts(back[BTH]))
        f["ip"] = 6 if IPv6 in back else 4
        f["sport"] = back[UDP].sport
        f["udp_csum"] = back[UDP].chksum
        f.update(facts)
        f["frame"] = raw.hex()
        print(line(f))


def check():
    for text in sys.stdin:
        text = text.strip()
        if not text:
            continue
        name, hexed = text.split()
        raw = bytes.fromhex(hexed)
        pkt = Ether(raw)
        f = {"name": name}
        if BTH not in pkt:
            f["error"] = "scapy found no BTH"
            print(line(f))
            continue
        b = pkt[BTH]
        f["layers"] = "/".join(layer.__name__ for layer in pkt.layers())
        f.update(bth_facts(b))
        if AETH in pkt:
            f["syndrome"] = pkt[AETH].syndrome
            f["msn"] = pkt[AETH].msn
        # Everything scapy puts between the BTH and the ICRC (extension headers, payload, pad):
        # shows whether it delimits the packet where we do.
        f["body"] = bytes(b.payload).hex() or "-"
        f["icrc_frame"] = raw[-4:].hex()
        # compute_icrc ignores its argument and rebuilds the pseudo-header from the dissected
        # layers (IP or IPv6, UDP, BTH, payload), masking the variant fields itself.
        f["icrc_scapy"] = b.compute_icrc(None).hex()
        # Let scapy recompute the UDP checksum (when one is present) and the IPv4 header
        # checksum, and compare with the frame's.
        udp = pkt[UDP]
        if udp.chksum == 0:
            f["udp_csum"] = "zero"
        else:
            again = pkt.copy()
            again[UDP].chksum = None
            f["udp_csum"] = "ok" if Ether(bytes(again))[UDP].chksum == udp.chksum else "bad"
        if IP in pkt:
            again = pkt.copy()
            again[IP].chksum = None
            f["ip_csum"] = "ok" if Ether(bytes(again))[IP].chksum == pkt[IP].chksum else "bad"
        # Scapy's own rebuild of its dissection must give our bytes back: nothing we wrote
        # was outside what it understood.
        f["rebuild_same"] = int(bytes(pkt) == raw)
        print(line(f))


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "build":
        build()
    elif mode == "check":
        check()
    else:
        sys.exit(f"usage: {sys.argv[0]} build|check")
