# The preamble every deploy/interop/rxe-*.sh shares; sourced, never run. It leaves the shell in
# the repository root with `set -euo pipefail`, checks root and finds rxe-vm
# (../shared/tools/rxe-vm beside the repository; RXE_VM=path overrides), and gives:
#   DP                   our datapath (DATAPATH, default packet: it verifies every ICRC, whatever
#                        IPv4 Identification rxe sends)
#   interop_build PKG    a release build of the crate; REL is the directory of its outputs
#   interop_preload      release builds of both C-ABI libraries; PRELOAD lists them for LD_PRELOAD
#   preloaded PROG ARGS… Debian's PROG in the netns with both libraries preloaded, on our datapath
#   RETRY_CM             what a preloaded rdma_cm client prints while rxe's server is not yet up
#   rxe_up               QEMU and the image installed if missing (`rxe-vm.sh deps`, `build`: the
#                        host runs only our binaries, rdma-core's programs run only inside the
#                        VMs), the netns `rxetest` with rxhost0 = 192.168.77.1, removed on exit
#   wait_gone RUN/VM     waits until that VM has powered off
#   in_ns BIN ARGS…      our example binary in the netns, on our datapath
#   rxe_serves CMD RETRY ARGS…, rxe_connects CMD ARGS…, verdict NAME MSG CHECK…
#                        the two cases every script runs and its PASS/FAIL line (below)
#   fail=0               verdict sets it to 1 on a FAIL line; each script exits with it
set -euo pipefail
cd "$(dirname "$0")/../.."

[ "$(id -u)" = 0 ] || { echo "needs root (QEMU, network namespaces)" >&2; exit 1; }
RXE=${RXE_VM:-../shared/tools/rxe-vm/rxe-vm.sh}
[ -x "$RXE" ] || { echo "rxe-vm not found at $RXE (set RXE_VM)" >&2; exit 1; }
DP=${DATAPATH:-packet}
REL=$PWD/${CARGO_TARGET_DIR:-target}/release
fail=0

interop_build() { cargo build --release -q -p "$1"; }

interop_preload() {
    cargo build --release -q -p rocev2-ibverbs -p rocev2-rdmacm
    PRELOAD=$REL/librocev2_rdmacm.so:$REL/librocev2_ibverbs.so
}

# Both libraries, so that one program may use verbs and rdma_cm alike (docs/rdmacm.md). On
# udp, rxe's ICRCs cannot be verified and the libraries take no option to accept them: use
# packet or xdp.
preloaded() { ip netns exec rxetest env LD_PRELOAD="$PRELOAD" ROCEV2_DATAPATH="$DP" "$@"; }

rxe_up() {
    "$RXE" deps >/dev/null
    "$RXE" build >/dev/null
    trap '"$RXE" cleanup >/dev/null 2>&1 || true' EXIT
    "$RXE" host-veth >/dev/null
}

wait_gone() { local pid; pid=$(cat "$1/qemu.pid"); while [ -d "/proc/$pid" ]; do sleep 1; done; }

# What a preloaded rdma_cm client prints when it connected too early to try again: the VM has
# not answered ARP yet (`rdma_resolve_addr`'s event: rping prints "RDMA_CM_EVENT_ADDR_ERROR")
# or nothing listens there yet (REJ reason 8: rping "RDMA_CM_EVENT_REJECTED, error 8"; perftest
# -R fails its first connection, the exchange, with "Unable to perform rdma_client function").
# Not perftest's "RDMA_CM_EVENT_REJECTED; error: 8" on its second connection: by then the
# server took the first, and a new client would meet a server past its exchange.
RETRY_CM="RDMA_CM_EVENT_ADDR_ERROR\|RDMA_CM_EVENT_REJECTED, error 8\|Unable to perform rdma_client function"

# Our binary BIN with ARGS in the netns on DP (over UDP sockets with --accept-unverified-icrc:
# rxe's IPv4 Identifications make its ICRCs unverifiable there, docs/wire.md).
in_ns() {
    local bin=$1 extra=()
    shift
    [ "$DP" = udp ] && extra=(--accept-unverified-icrc)
    ip netns exec rxetest "$bin" --datapath "$DP" "${extra[@]}" "$@"
}

# Case "rxe serves": the VM `srv` (192.168.77.10) runs CMD in the background while `ours ARGS…`
# runs into $mine until it succeeds or its output stops matching RETRY (the VM still booting,
# its server not yet listening: 40 tries, 2 s apart); then waits for the VM to power off (rxe's
# servers exit after one client; after a failure the cleanup on exit stops it). Sets rc (ours),
# theirs (the VM's output) and theirs_rc.
rxe_serves() {
    local cmd=$1 retry=$2 run
    shift 2
    run=$("$RXE" vm srv 192.168.77.10 --bg --cmd "$cmd" | tail -1)
    rc=1
    for _ in $(seq 40); do
        if ours "$@" >"$mine" 2>&1; then
            rc=0
            break
        fi
        grep -q "$retry" "$mine" || break
        sleep 2
    done
    [ $rc = 0 ] && wait_gone "$run/srv"
    theirs=$run/srv/cmd.log
    theirs_rc=$(cat "$run/srv/cmd.rc" 2>/dev/null || echo '?')
    cat "$mine" "$theirs"
}

# Case "rxe connects": `ours ARGS…` serves into $mine while the VM `cli` (192.168.77.11) runs
# CMD. First sets arp_ignore=1 on rxe-vm's bridge: in the netns rxebr0 also answers ARP for
# rxhost0's address, and the VM would send everything to the bridge's MAC, which our datapath
# never sees (docs/cm.md, "Interoperable now, and not"). Sets rc, theirs and theirs_rc.
rxe_connects() {
    local cmd=$1 run srv
    shift
    ip netns exec rxetest sysctl -qw net.ipv4.conf.rxebr0.arp_ignore=1
    ours "$@" >"$mine" 2>&1 &
    srv=$!
    run=$("$RXE" vm cli 192.168.77.11 --cmd "$cmd" | tail -1)
    wait $srv && rc=0 || rc=$?
    theirs=$run/cli/cmd.log
    theirs_rc=$(cat "$run/cli/cmd.rc" 2>/dev/null || echo '?')
    cat "$mine" "$theirs"
}

# "PASS NAME: MSG" when both sides exited 0 and CHECK… succeeds, else a FAIL line (fail=1).
verdict() {
    local name=$1 msg=$2
    shift 2
    if [ "$rc" = 0 ] && [ "$theirs_rc" = 0 ] && "$@"; then
        echo "PASS $name: $msg"
    else
        echo "FAIL $name: our side exit $rc, rxe side exit $theirs_rc"
        fail=1
    fi
}
