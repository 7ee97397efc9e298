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
interop_build rocev2-examples
RPING=$REL/rping
rxe_up
ours() {
    local extra=()
    [ "$DP" = udp ] && extra=(--accept-unverified-icrc)
    ip netns exec rxetest "$RPING" --iface rxhost0 --datapath "$DP" "${extra[@]}" "$@"
}
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

echo "== A: rdma-core rping -s (rxe) serves, rocev2 rping -c connects ($DP)"
run=$("$RXE" vm srv 192.168.77.10 --bg --cmd "rping -s -a 192.168.77.10 -C $PINGS -v" | tail -1)
mine=/tmp/rxe-rping-client.txt
rc=1
for _ in $(seq 40); do
    if ours -c -a 192.168.77.10 -C $PINGS -v -V >"$mine" 2>&1; then
        rc=0
        break
    fi
    # The VM may still be booting (no ARP answer yet), then rxe's CM rejects (reason 8) until
    # its rping listens.
    grep -q "REJ reason 8\|no neighbour entry" "$mine" || break
    sleep 2
done
# rxe's rping -s exits after serving one client; after a failure it would wait until the VM's
# time limit (the cleanup on exit stops it).
[ $rc = 0 ] && wait_gone "$run/srv"
theirs=$run/srv/cmd.log
cat "$mine" "$theirs"
if [ $rc = 0 ] && pinged "ping data: " "$mine" && [ "$(cat "$run/srv/cmd.rc" 2>/dev/null)" = 0 ] &&
    pinged "server ping data: " "$theirs"; then
    echo "PASS A: $PINGS pings, both sides print the same data"
else
    echo "FAIL A: our client exit $rc, server rc $(cat "$run/srv/cmd.rc" 2>/dev/null || echo '?')"
    fail=1
fi

echo "== B: rocev2 rping -s serves, rdma-core rping -c (rxe) connects ($DP)"
ip netns exec rxetest sysctl -qw net.ipv4.conf.rxebr0.arp_ignore=1
mine=/tmp/rxe-rping-server.txt
ours -s -a 192.168.77.1 -C $PINGS -v >"$mine" 2>&1 &
srv=$!
run=$("$RXE" vm cli 192.168.77.11 --cmd "rping -c -a 192.168.77.1 -C $PINGS -v" | tail -1)
wait $srv && rc=0 || rc=$?
theirs=$run/cli/cmd.log
cat "$mine" "$theirs"
if [ $rc = 0 ] && pinged "server ping data: " "$mine" &&
    [ "$(cat "$run/cli/cmd.rc" 2>/dev/null)" = 0 ] && pinged "ping data: " "$theirs"; then
    echo "PASS B: $PINGS pings, both sides print the same data"
else
    echo "FAIL B: our server exit $rc, client rc $(cat "$run/cli/cmd.rc" 2>/dev/null || echo '?')"
    fail=1
fi
exit $fail
