#!/usr/bin/env bash
# Opt-in interop check against a real rdma_rxe peer (not in CI: it boots two QEMU VMs, ~3 min):
# rocev2's `ud_pingpong` (examples/src/bin/ud_pingpong.rs: UD QPs, address handles, Q_Key
# 0x11111111) and rdma-core's `ibv_ud_pingpong` on Linux soft-RoCE, in both roles, with
# `-g 1` (rxe's IPv4-mapped GID index) and `-s 1024` (rxe's active MTU is 1024 and both refuse
# a larger message):
#
#   1. `ibv_ud_pingpong` on rxe serves, ours connects from the netns;
#   2. ours serves in the netns, `ibv_ud_pingpong` on rxe connects.
#
# A case passes when both sides exit 0, both print `SIZE*ITERS*2 bytes in` and `ITERS iters in`,
# and each side's remote QPN is the other's local one (the datagrams went to the QPs the
# exchange named). Before 2 the script sets `arp_ignore=1` on rxe-vm's bridge, for the reason
# rxe-rping.sh gives (the bridge would answer ARP for rxhost0's address).
#
# As root. DATAPATH picks our datapath (default packet; udp adds --accept-unverified-icrc, as
# in rxe-rping.sh). Uses the namespace `rxetest` that rxe-vm creates and removes; prints PASS
# or FAIL per case.
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
ITERS=100
SIZE=1024
interop_build rocev2-examples
UD=$REL/ud_pingpong
rxe_up
ours() { in_ns "$UD" -d rxhost0 -g 1 -s $SIZE -n $ITERS "$@"; }
# The `QPN 0x…` of file $2's address line $1 (`local` or `remote`).
qpn() { sed -n "s/^  $1 address: *LID 0x[0-9a-f]*, \(QPN 0x[0-9a-f]*\),.*/\1/p" "$2" | head -1; }
# Files $1 (ours) and $2 (theirs) both show a complete run and name each other's QPs.
complete() {
    local f
    for f in "$1" "$2"; do
        grep -q "^$((SIZE * ITERS * 2)) bytes in " "$f" && grep -q "^$ITERS iters in " "$f" || return 1
    done
    [ -n "$(qpn local "$1")" ] && [ "$(qpn local "$1")" = "$(qpn remote "$2")" ] &&
        [ "$(qpn remote "$1")" = "$(qpn local "$2")" ]
}

echo "== 1: ibv_ud_pingpong (rxe) serves, rocev2 ud_pingpong connects ($DP)"
mine=/tmp/rxe-ud-pingpong-client.txt
rxe_serves "ibv_ud_pingpong -d \$RXE_DEV -g \$RXE_GID_INDEX -s $SIZE -n $ITERS" \
    "couldn't connect\|no neighbour entry" 192.168.77.10
verdict 1 "$ITERS round trips of $SIZE bytes, QPNs match" complete "$mine" "$theirs"

echo "== 2: rocev2 ud_pingpong serves, ibv_ud_pingpong (rxe) connects ($DP)"
mine=/tmp/rxe-ud-pingpong-server.txt
rxe_connects "ibv_ud_pingpong -d \$RXE_DEV -g \$RXE_GID_INDEX -s $SIZE -n $ITERS 192.168.77.1"
verdict 2 "$ITERS round trips of $SIZE bytes, QPNs match" complete "$mine" "$theirs"
exit $fail
