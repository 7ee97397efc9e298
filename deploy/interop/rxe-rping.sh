#!/usr/bin/env bash
# Opt-in interop check against a real rdma_rxe peer (not in CI: it boots two QEMU VMs, ~3 min):
# rocev2's `rping` (examples/src/bin/rping.rs, connected through the CM on QP1) and rdma-core's
# `rping` (librdmacm) on Linux soft-RoCE, in both roles, ten pings with `-v` (each side prints
# the ping data it moved):
#
#   A. rdma-core `rping -s` on rxe serves, ours connects from the netns (`-V`: ours also checks
#      that the buffer the server wrote back is the one it read);
#   B. ours serves in the netns, rdma-core `rping -c` on rxe connects.
#
# PRELOADED=1 runs Debian's own `rping` in the netns as ours instead, unmodified, with
# librocev2_rdmacm.so and librocev2_ibverbs.so preloaded (packet or xdp: the libraries take no
# option to accept rxe's unverifiable ICRCs over UDP sockets). Both cases passed on 2026-11-29.
#
# A case passes when both sides exit 0 and both print the ten `ping data: rdma-ping-N: …` lines
# (`server ping data: …` on the server) that rping prints for ping data of 64 bytes.
#
# Before B the script sets `arp_ignore=1` on rxe-vm's bridge: in the netns `rxetest` the bridge
# device rxebr0 answers ARP for rxhost0's address as well (Linux's default `arp_ignore=0`), the rxe
# client's rdma_cm resolves 192.168.77.1 to whichever answer comes first (the bridge's), and every
# REQ it sends, resends included, goes to a MAC our datapath never sees; the namespace's kernel
# answers them with ICMP port unreachable. docs/cm.md, "Interoperable now, and not", has the
# evidence; a host whose other interfaces share the segment needs the same setting.
#
# As root. DATAPATH picks our datapath (default packet; udp adds --accept-unverified-icrc, since
# rxe's IPv4 Identifications make its ICRCs unverifiable over UDP sockets, docs/wire.md). Uses the
# namespace `rxetest` that rxe-vm creates and removes; prints PASS or FAIL per case.
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
PINGS=10
if [ "${PRELOADED:-0}" = 1 ]; then
    interop_preload
    ours() { preloaded rping "$@"; }
    OURS="Debian's rping (preloaded)"
    RETRY=$RETRY_CM
else
    interop_build rocev2-examples
    ours() { in_ns "$REL/rping" --iface rxhost0 "$@"; }
    OURS="rocev2 rping"
    RETRY="REJ reason 8\|no neighbour entry"
fi
rxe_up
# The ten lines rping -v prints for 64-byte pings, each after the prefix $1.
want() {
    local n c i s
    for ((n = 0; n < PINGS; n++)); do
        s="rdma-ping-$n: "
        c=$((65 + n % 58))
        for ((i = ${#s}; i < 63; i++)); do
            s+=$(printf "\\$(printf %03o "$c")")
            if [ "$c" -ge 122 ]; then c=65; else c=$((c + 1)); fi
        done
        echo "$1$s"
    done
}
# File $2 holds exactly the lines want $1 gives, in order, among others.
pinged() { diff <(want "$1") <(grep "^$1rdma-ping-" "$2") >/dev/null; }

echo "== A: rdma-core rping -s (rxe) serves, $OURS -c connects ($DP)"
mine=/tmp/rxe-rping-client.txt
rxe_serves "rping -s -a 192.168.77.10 -C $PINGS -v" "$RETRY" \
    -c -a 192.168.77.10 -C $PINGS -v -V
both() { pinged "ping data: " "$mine" && pinged "server ping data: " "$theirs"; }
verdict A "$PINGS pings, both sides print the same data" both

echo "== B: $OURS -s serves, rdma-core rping -c (rxe) connects ($DP)"
mine=/tmp/rxe-rping-server.txt
rxe_connects "rping -c -a 192.168.77.1 -C $PINGS -v" -s -a 192.168.77.1 -C $PINGS -v
both() { pinged "server ping data: " "$mine" && pinged "ping data: " "$theirs"; }
verdict B "$PINGS pings, both sides print the same data" both
exit $fail
