#!/usr/bin/env bash
# Opt-in interop check against a real rdma_rxe peer (not in CI: it boots 12 QEMU VMs, ~10 min):
# rocev2's perftest tools (ib_{write,read,send}_{bw,lat}) against linux-rdma/perftest 6.06
# (Debian bookworm's perftest) on Linux soft-RoCE, in both roles, with `-x 1` (rxe's
# IPv4-mapped GID index) and small runs (the VM is emulated):
#
#   A. perftest on rxe serves, ours connects from the netns;
#   B. ours serves in the netns, perftest on rxe connects.
#
# A case passes when both sides exit 0 and both print a result row for the size asked for
# (read_lat's server prints none, in perftest as in ours). As root, with ../shared/tools/rxe-vm
# beside the repository (RXE_VM=path overrides); DATAPATH (default packet) picks our datapath.
# Uses the namespace `rxetest` that rxe-vm creates and removes; prints PASS or FAIL per case.
# rdma-core's and perftest's programs run only inside the VMs, whose image `rxe-vm.sh build`
# installs them in (`rxe-vm.sh deps` installs QEMU on the host); the host runs only our binaries.
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
TOOLS=${TOOLS:-"ib_write_bw ib_read_bw ib_send_bw ib_write_lat ib_read_lat ib_send_lat"}
interop_build rocev2-examples
BIN=$REL
rxe_up

args_for() { case $1 in *_bw) echo "-s 4096 -n 50" ;; *) echo "-s 64 -n 50" ;; esac; }
size_of() { case $1 in *_bw) echo 4096 ;; *) echo 64 ;; esac; }
has_row() { grep -qE "^ $2 +50 " "$1"; }

for t in $TOOLS; do
    a=$(args_for "$t"); s=$(size_of "$t")
    echo "== A: $t: perftest (rxe) serves, ours connects"
    run=$("$RXE" vm srv 192.168.77.10 --bg --cmd "$t -d \$RXE_DEV -x \$RXE_GID_INDEX -F $a" | tail -1)
    ours=/tmp/rxe-perftest-$t-client.txt
    rc=1
    for _ in $(seq 40); do
        if ip netns exec rxetest "$BIN/$t" -d rxhost0 -x 1 -F --datapath "$DP" $a 192.168.77.10 \
            >"$ours" 2>&1; then
            rc=0
            break
        fi
        grep -q "Couldn't connect" "$ours" || break
        sleep 2
    done
    wait_gone "$run/srv"
    theirs=$run/srv/cmd.log
    cat "$ours" "$theirs"
    if [ $rc = 0 ] && has_row "$ours" "$s" && [ "$(cat "$run/srv/cmd.rc" 2>/dev/null)" = 0 ] &&
        { [ "$t" = ib_read_lat ] || has_row "$theirs" "$s"; }; then
        echo "PASS A $t"
    else
        echo "FAIL A $t: our client exit $rc, server rc $(cat "$run/srv/cmd.rc" 2>/dev/null || echo '?')"
        fail=1
    fi

    echo "== B: $t: ours serves, perftest (rxe) connects"
    ours=/tmp/rxe-perftest-$t-server.txt
    ip netns exec rxetest "$BIN/$t" -d rxhost0 -x 1 -F --datapath "$DP" $a >"$ours" 2>&1 &
    srv=$!
    run=$("$RXE" vm cli 192.168.77.11 --cmd "$t -d \$RXE_DEV -x \$RXE_GID_INDEX -F $a 192.168.77.1" | tail -1)
    wait $srv && rc=0 || rc=$?
    theirs=$run/cli/cmd.log
    cat "$ours" "$theirs"
    if [ $rc = 0 ] && has_row "$theirs" "$s" && [ "$(cat "$run/cli/cmd.rc" 2>/dev/null)" = 0 ] &&
        { [ "$t" = ib_read_lat ] || has_row "$ours" "$s"; }; then
        echo "PASS B $t"
    else
        echo "FAIL B $t: our server exit $rc, client rc $(cat "$run/cli/cmd.rc" 2>/dev/null || echo '?')"
        fail=1
    fi
done
exit $fail
