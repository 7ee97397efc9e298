#!/usr/bin/env bash
# Opt-in interop check against a real rdma_rxe peer (not in CI: it boots a QEMU VM per case):
# Debian's own ibv_rc_pingpong and perftest tools on this host, unmodified, with
# librocev2_ibverbs.so preloaded, against the same tools on Linux soft-RoCE (Debian bookworm's
# rdma-core and perftest in ../shared/tools/rxe-vm's image), in both roles:
#
#   A. the tool on rxe serves, the preloaded tool connects from the netns;
#   B. the preloaded tool serves in the netns, the tool on rxe connects.
#
# ibv_rc_pingpong runs with -c (data checked by the server) and passes, as ibv_ud_pingpong does,
# when both sides print their byte count and neither reports invalid data; a perftest tool passes
# when both sides exit 0 and print a result row of the size asked for. ibv_ud_pingpong runs in
# role A only: in role B both sides printed each other's addresses and then waited forever, and
# a capture on rxhost0 showed ARP both ways but no datagram from the rxe client at all (not yet
# explained; rxe-vm's clients are also known to lose their first packets to a server in the
# netns, examples/src/bin/rc_pingpong.rs).
# As root, with ../shared/tools/rxe-vm beside the repository (RXE_VM=path overrides); DATAPATH
# (default packet: it verifies every ICRC, whatever IPv4 Identification rxe sends) picks our
# datapath. Uses the namespace `rxetest` that rxe-vm creates and removes; prints PASS or FAIL per
# case. All 13 cases passed on 2026-11-25.
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
TOOLS=${TOOLS:-"ibv_rc_pingpong ibv_ud_pingpong ib_write_bw ib_read_bw ib_send_bw ib_send_lat ib_atomic_bw"}
interop_build rocev2-ibverbs
LIB=$REL/librocev2_ibverbs.so
rxe_up

# Arguments after the device (ours: rocev2_rxhost0; rxe: $RXE_DEV), the same on both sides.
args_for() {
    case $1 in
        ibv_rc_pingpong) echo "-g 1 -s 4096 -n 50 -c" ;;
        # UD messages fit rxe's active MTU (1024).
        ibv_ud_pingpong) echo "-g 1 -s 1024 -n 50" ;;
        ib_atomic_bw) echo "-x 1 -F -n 50" ;;
        *_bw) echo "-x 1 -F -s 4096 -n 50" ;;
        *) echo "-x 1 -F -s 64 -n 50" ;;
    esac
}
# The tool's result in file $2 is there.
result() {
    case $1 in
        ibv_rc_pingpong) grep -q "^409600 bytes in" "$2" && ! grep -q "invalid data" "$2" ;;
        ibv_ud_pingpong) grep -q "^102400 bytes in" "$2" ;;
        ib_atomic_bw) grep -qE "^ 8 +50 " "$2" ;;
        *_bw) grep -qE "^ 4096 +50 " "$2" ;;
        *) grep -qE "^ 64 +50 " "$2" ;;
    esac
}
ours() { ip netns exec rxetest env LD_PRELOAD="$LIB" ROCEV2_DATAPATH="$DP" "$@"; }

for t in $TOOLS; do
    a=$(args_for "$t")
    rxe_args=${a/-g 1/-g \$RXE_GID_INDEX}
    rxe_args=${rxe_args/-x 1/-x \$RXE_GID_INDEX}

    echo "== A: $t: rxe serves, the preloaded tool connects"
    run=$("$RXE" vm srv 192.168.77.10 --bg --cmd "$t -d \$RXE_DEV $rxe_args" | tail -1)
    mine=/tmp/rxe-ibverbs-$t-client.txt
    rc=1
    for _ in $(seq 40); do
        # shellcheck disable=SC2086 # one word per argument
        if ours "$t" -d rocev2_rxhost0 $a 192.168.77.10 >"$mine" 2>&1; then
            rc=0
            break
        fi
        grep -q "Couldn't connect" "$mine" || break
        sleep 2
    done
    wait_gone "$run/srv"
    theirs=$run/srv/cmd.log
    cat "$mine" "$theirs"
    if [ $rc = 0 ] && result "$t" "$mine" && [ "$(cat "$run/srv/cmd.rc" 2>/dev/null)" = 0 ] &&
        result "$t" "$theirs"; then
        echo "PASS A $t"
    else
        echo "FAIL A $t: our client exit $rc, server rc $(cat "$run/srv/cmd.rc" 2>/dev/null || echo '?')"
        fail=1
    fi

    [ "$t" = ibv_ud_pingpong ] && continue
    echo "== B: $t: the preloaded tool serves, rxe connects"
    mine=/tmp/rxe-ibverbs-$t-server.txt
    # shellcheck disable=SC2086 # one word per argument
    ours "$t" -d rocev2_rxhost0 $a >"$mine" 2>&1 &
    srv=$!
    run=$("$RXE" vm cli 192.168.77.11 --cmd "sleep 2; $t -d \$RXE_DEV $rxe_args 192.168.77.1" | tail -1)
    wait $srv && rc=0 || rc=$?
    theirs=$run/cli/cmd.log
    cat "$mine" "$theirs"
    if [ $rc = 0 ] && result "$t" "$mine" && [ "$(cat "$run/cli/cmd.rc" 2>/dev/null)" = 0 ] &&
        result "$t" "$theirs"; then
        echo "PASS B $t"
    else
        echo "FAIL B $t: our server exit $rc, client rc $(cat "$run/cli/cmd.rc" 2>/dev/null || echo '?')"
        fail=1
    fi
done
exit $fail
