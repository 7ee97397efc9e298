# The preamble every deploy/interop/rxe-*.sh shares; sourced, never run. It leaves the shell in
# the repository root with `set -euo pipefail`, checks root and finds rxe-vm
# (../shared/tools/rxe-vm beside the repository; RXE_VM=path overrides), and gives:
#   DP                   our datapath (DATAPATH, default packet: it verifies every ICRC, whatever
#                        IPv4 Identification rxe sends)
#   interop_build PKG    a release build of the crate; REL is the directory of its outputs
#   rxe_up               QEMU and the image installed if missing (`rxe-vm.sh deps`, `build`: the
#                        host runs only our binaries, rdma-core's programs run only inside the
#                        VMs), the netns `rxetest` with rxhost0 = 192.168.77.1, removed on exit
#   wait_gone RUN/VM     waits until that VM has powered off
#   fail=0               each script sets it to 1 on a FAIL line and exits with it
set -euo pipefail
cd "$(dirname "$0")/../.."

[ "$(id -u)" = 0 ] || { echo "needs root (QEMU, network namespaces)" >&2; exit 1; }
RXE=${RXE_VM:-../shared/tools/rxe-vm/rxe-vm.sh}
[ -x "$RXE" ] || { echo "rxe-vm not found at $RXE (set RXE_VM)" >&2; exit 1; }
DP=${DATAPATH:-packet}
REL=$PWD/${CARGO_TARGET_DIR:-target}/release
fail=0

interop_build() { cargo build --release -q -p "$1"; }

rxe_up() {
    "$RXE" deps >/dev/null
    "$RXE" build >/dev/null
    trap '"$RXE" cleanup >/dev/null 2>&1 || true' EXIT
    "$RXE" host-veth >/dev/null
}

wait_gone() { local pid; pid=$(cat "$1/qemu.pid"); while [ -d "/proc/$pid" ]; do sleep 1; done; }
