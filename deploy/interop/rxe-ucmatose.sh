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
ours() {
    local extra=()
    [ "$DP" = udp ] && extra=(--accept-unverified-icrc)
    ip netns exec rxetest "$UCMATOSE" --iface rxhost0 --datapath "$DP" "${extra[@]}" "$@"
}
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
run=$("$RXE" vm srv 192.168.77.10 --bg --cmd "ucmatose -b 192.168.77.10" | tail -1)
mine=/tmp/rxe-ucmatose-client.txt
rc=1
for _ in $(seq 40); do
    if ours -s 192.168.77.10 >"$mine" 2>&1; then
        rc=0
        break
    fi
    # The VM may still be booting (no ARP answer yet), then rxe's CM rejects (reason 8) until
    # its ucmatose listens.
    grep -q "REJ reason 8\|no neighbour entry" "$mine" || break
    sleep 2
done
# rxe's ucmatose exits after serving one client; after a failure it would wait until the
# VM's time limit (the cleanup on exit stops it).
[ $rc = 0 ] && wait_gone "$run/srv"
theirs=$run/srv/cmd.log
cat "$mine" "$theirs"
if [ $rc = 0 ] && in_order "$mine" "${CLIENT[@]}" &&
    [ "$(cat "$run/srv/cmd.rc" 2>/dev/null)" = 0 ] && in_order "$theirs" "${SERVER[@]}"; then
    echo "PASS A: 10 messages each way, server disconnected, both return status 0"
else
    echo "FAIL A: our client exit $rc, server rc $(cat "$run/srv/cmd.rc" 2>/dev/null || echo '?')"
    fail=1
fi

echo "== B: rocev2 ucmatose serves, rdma-core ucmatose -s (rxe) connects ($DP)"
ip netns exec rxetest sysctl -qw net.ipv4.conf.rxebr0.arp_ignore=1
mine=/tmp/rxe-ucmatose-server.txt
ours -b 192.168.77.1 >"$mine" 2>&1 &
srv=$!
run=$("$RXE" vm cli 192.168.77.11 --cmd "ucmatose -s 192.168.77.1" | tail -1)
wait $srv && rc=0 || rc=$?
theirs=$run/cli/cmd.log
cat "$mine" "$theirs"
if [ $rc = 0 ] && in_order "$mine" "${SERVER[@]}" &&
    [ "$(cat "$run/cli/cmd.rc" 2>/dev/null)" = 0 ] && in_order "$theirs" "${CLIENT[@]}"; then
    echo "PASS B: 10 messages each way, server disconnected, both return status 0"
else
    echo "FAIL B: our server exit $rc, client rc $(cat "$run/cli/cmd.rc" 2>/dev/null || echo '?')"
    fail=1
fi
exit $fail
