#!/usr/bin/env bash
# Opt-in interop check against a real rdma_rxe peer (not in CI: it boots two QEMU VMs, ~3 min):
# rocev2's `ucmatose` (examples/src/bin/ucmatose.rs, connected through the CM on QP1) and
# rdma-core's `ucmatose` (librdmacm) on Linux soft-RoCE, in both roles, with the defaults of
# both (one connection, ten 100-byte SENDs each way, the server sends first and disconnects):
#
#   A. rdma-core `ucmatose` on rxe serves, ours connects from the netns;
#   B. ours serves in the netns, rdma-core `ucmatose -s` on rxe connects.
#
# A case passes when both sides exit 0 and both print ucmatose's progress through
# `data transfers complete` and `return status 0` (the server also `disconnected`).
#
# Before B the script sets `arp_ignore=1` on rxe-vm's bridge, for the reason rxe-rping.sh
# gives (the bridge would answer ARP for rxhost0's address).
#
# As root. DATAPATH picks our datapath (default packet; udp adds --accept-unverified-icrc, as
# in rxe-rping.sh). Uses the namespace `rxetest` that rxe-vm creates and removes; prints PASS or
# FAIL per case.
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
interop_build rocev2-examples
UCMATOSE=$REL/ucmatose
rxe_up
ours() { in_ns "$UCMATOSE" --iface rxhost0 "$@"; }
# File $2 has each of the lines after $1, in that order, among others.
in_order() {
    local f=$1 want
    shift
    diff <(printf '%s\n' "$@") <(grep -Fx -f <(printf '%s\n' "$@") "$f") >/dev/null
}
SERVER=("cmatose: starting server" "initiating data transfers" "completing sends"
    "receiving data transfers" "data transfers complete" "cmatose: disconnecting" "disconnected"
    "test complete" "return status 0")
CLIENT=("cmatose: starting client" "cmatose: connecting" "receiving data transfers"
    "sending replies" "data transfers complete" "test complete" "return status 0")

echo "== A: rdma-core ucmatose (rxe) serves, rocev2 ucmatose -s connects ($DP)"
mine=/tmp/rxe-ucmatose-client.txt
rxe_serves "ucmatose -b 192.168.77.10" "REJ reason 8\|no neighbour entry" -s 192.168.77.10
both() { in_order "$mine" "${CLIENT[@]}" && in_order "$theirs" "${SERVER[@]}"; }
verdict A "10 messages each way, server disconnected, both return status 0" both

echo "== B: rocev2 ucmatose serves, rdma-core ucmatose -s (rxe) connects ($DP)"
mine=/tmp/rxe-ucmatose-server.txt
rxe_connects "ucmatose -s 192.168.77.1" -b 192.168.77.1
both() { in_order "$mine" "${SERVER[@]}" && in_order "$theirs" "${CLIENT[@]}"; }
verdict B "10 messages each way, server disconnected, both return status 0" both
exit $fail
