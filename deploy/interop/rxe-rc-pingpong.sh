#!/usr/bin/env bash
# Opt-in interop check against a real rdma_rxe peer (not in CI: it boots QEMU VMs, ~5 min):
# rocev2's `rc_pingpong` and rdma-core's `ibv_rc_pingpong` on Linux soft-RoCE, in both roles,
# with `-c` (rdma-core's data validation) and `-g 1` (rxe's IPv4-mapped GID index).
#
#   1. ours serves, `ibv_rc_pingpong` on rxe connects: 50 round trips must take well under a
#      second (they took 5.2 s while the client's first packets were lost to ARP flux, issue
#      20) and the server must find no invalid data;
#   2. `ibv_rc_pingpong` on rxe serves, ours connects: both exit 0 and the rxe server reports no
#      "invalid data in page".
#
# As root, with ../shared/tools/rxe-vm beside the repository (RXE_VM=path overrides). Uses the
# namespace `rxetest` that rxe-vm creates and removes; prints PASS or FAIL per case.
# rdma-core's and perftest's programs run only inside the VMs, whose image `rxe-vm.sh build`
# installs them in (`rxe-vm.sh deps` installs QEMU on the host); the host runs only our binaries.
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
ITERS=50
interop_build rocev2-examples
PP=$REL/rc_pingpong
rxe_up

echo "== 1: rocev2 rc_pingpong serves on rxhost0, ibv_rc_pingpong (rxe) connects"
ip netns exec rxetest "$PP" -d rxhost0 -g 1 -n $ITERS -c >/tmp/rxe-pp-server.txt 2>&1 &
srv=$!
run=$("$RXE" vm cli 192.168.77.11 --cmd "ibv_rc_pingpong -d \$RXE_DEV -g \$RXE_GID_INDEX -n $ITERS -c 192.168.77.1")
wait $srv && srv_rc=0 || srv_rc=$?
cli_log=$run/cli/cmd.log
cat "$cli_log"
cat /tmp/rxe-pp-server.txt
secs=$(awk '/ iters in / { print $4 }' "$cli_log" | head -1)
if [ "$srv_rc" = 0 ] && [ -n "$secs" ] && awk -v s="$secs" 'BEGIN { exit !(s < 1.0) }' &&
    ! grep -q "invalid data" /tmp/rxe-pp-server.txt; then
    echo "PASS 1: $ITERS iters in $secs s, data valid"
else
    echo "FAIL 1: server exit $srv_rc, client took '${secs:-?}' s"
    fail=1
fi

echo "== 2: ibv_rc_pingpong (rxe) serves, rocev2 rc_pingpong connects"
out=$("$RXE" serve pingpong --count 1 --args "-n $ITERS -c" --bg)
echo "$out"
srv_log=$(sed -n 's/.*output: \(.*cmd\.log\).*/\1/p' <<<"$out")
cli_rc=1
for _ in $(seq 30); do
    if ip netns exec rxetest "$PP" -d rxhost0 -g 1 -n $ITERS -c 192.168.77.10 \
        >/tmp/rxe-pp-client.txt 2>&1; then
        cli_rc=0
        break
    fi
    grep -q "onnection refused\|connect" /tmp/rxe-pp-client.txt || break
    sleep 2
done
cat /tmp/rxe-pp-client.txt
for _ in $(seq 60); do grep -q "=== rc=" "$srv_log" 2>/dev/null && break; sleep 1; done
cat "$srv_log"
if [ "$cli_rc" = 0 ] && grep -q "=== rc=0" "$srv_log" && ! grep -q "invalid data" "$srv_log"; then
    echo "PASS 2: both sides exit 0, no invalid data"
else
    echo "FAIL 2: our client exit $cli_rc"
    fail=1
fi
exit $fail
