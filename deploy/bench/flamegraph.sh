#!/usr/bin/env bash
# Flame graphs of write_bw's sender and receiver on a pair testbed, as root:
#
#   deploy/bench/flamegraph.sh after                  # this tree's binaries
#   git worktree add /tmp/base 065251a
#   deploy/bench/flamegraph.sh before /tmp/base       # another checkout's (pair.sh's TREE)
#
# write_bw over DATAPATH (default xdp), 64 KiB RDMA WRITEs x WRITES (default 65536 = 4 GiB, one
# QP), each side under `perf record -F FREQ --call-graph dwarf` (user and kernel stacks, the
# whole process from start to exit); then `perf script` | inferno-collapse-perf |
# inferno-flamegraph, frames narrower than MINWIDTH pixels left out, to
# docs/flame/send-LABEL.svg (h0, the requester) and docs/flame/recv-LABEL.svg (h1, the
# responder).
#
# DWARF unwinding, not frame pointers: the release profile keeps line tables (debug = 1 in
# Cargo.toml) and every object has .eh_frame, so stacks unwind through rocev2 and std alike
# without a rebuild; `--call-graph fp` on the same binaries stops at the first frame built
# without a frame pointer (most of them), leaving a flat graph.
set -euo pipefail
cd "$(dirname "$0")/../.."

LABEL=${1:?usage: $0 LABEL [TREE]}
[ -z "${2:-}" ] || TREE=$2
DATAPATH=${DATAPATH:-xdp}
WRITES=${WRITES:-65536}
FREQ=${FREQ:-499}
MINWIDTH=${MINWIDTH:-1}
# shellcheck source=pair.sh
. deploy/bench/pair.sh flm
need perf
need inferno-collapse-perf
need inferno-flamegraph

WRAP0=(perf record -q -F "$FREQ" --call-graph dwarf -o "$OUT/send.data" --)
WRAP1=(perf record -q -F "$FREQ" --call-graph dwarf -o "$OUT/recv.data" --)
rev=$(git -C "${TREE:-.}" rev-parse --short HEAD)
gbps=$(write_bw_run "$DATAPATH" "$WRITES" | awk '$1 == 65536 { print $4 }')
load=$(cut -d' ' -f1-3 /proc/loadavg)
mkdir -p docs/flame
for side in send recv; do
    what=$([ "$side" = send ] && echo "sender (requester, h0)" || echo "receiver (responder, h1)")
    perf script -i "$OUT/$side.data" 2>/dev/null |
        inferno-collapse-perf |
        inferno-flamegraph --minwidth "$MINWIDTH" \
            --title "write_bw $what, $DATAPATH, $LABEL ($rev)" \
            --subtitle "64 KiB WRITEs x $WRITES, $gbps Gbit/s, perf record -F $FREQ --call-graph dwarf, load $load" \
            >"docs/flame/$side-$LABEL.svg"
    echo "docs/flame/$side-$LABEL.svg: $(du -k "docs/flame/$side-$LABEL.svg" | cut -f1) KiB"
done
