#!/usr/bin/env bash
# ib_write_bw through librocev2_ibverbs.so against rocev2's own write_bw, between the two
# namespaces of a pair testbed (one veth link, MTU 4200), in the same run, as root, for every
# datapath in DATAPATHS (default "udp packet xdp"): ITERS (default 16384) 64 KiB RDMA WRITEs on
# one QP each, the average Gbit/s of each, and the ratio library / native (issue 17's goal: 0.8
# or more). Debian's ib_write_bw (perftest) runs unmodified on both sides with the library
# preloaded and ROCEV2_DATAPATH set; write_bw runs with its defaults (adaptive polling).
# Prints a Markdown table for BENCHMARKS.md. The testbed goes away on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."

DATAPATHS=${DATAPATHS:-udp packet xdp}
ITERS=${ITERS:-16384}
cargo build --release -q -p rocev2-ibverbs
PACKAGES="-p rocev2-examples"
# shellcheck source=pair.sh
. deploy/bench/pair.sh ibv
LIB="$(realpath "$BIN")/librocev2_ibverbs.so"

# write_bw's Gbit/s over datapath $1.
native() {
    in_h1 "$BIN/write_bw" -d "$IF1" --datapath "$1" >/dev/null &
    wait_port 18515
    in_h0 "$BIN/write_bw" -d "$IF0" --datapath "$1" -s 65536 -n "$ITERS" 10.0.0.2 |
        awk '$1 == 65536 { print $4 }'
    wait %%
}

# ib_write_bw's Gbit/s through the library over datapath $1.
library() {
    local args=(-s 65536 -n "$ITERS" -x 1 -F --report_gbits)
    in_h1 env LD_PRELOAD="$LIB" ROCEV2_DATAPATH="$1" ib_write_bw -d "rocev2_$IF1" "${args[@]}" >/dev/null &
    wait_port 18515
    in_h0 env LD_PRELOAD="$LIB" ROCEV2_DATAPATH="$1" ib_write_bw -d "rocev2_$IF0" "${args[@]}" 10.0.0.2 |
        awk '$1 == 65536 { print $4 }'
    wait %%
}

echo "| datapath | write_bw (native) Gbit/s | ib_write_bw (librocev2_ibverbs.so) Gbit/s | ratio |"
echo "|---|---|---|---|"
for dp in $DATAPATHS; do
    n=$(native "$dp")
    l=$(library "$dp")
    echo "| $dp | $n | $l | $(awk -v l="$l" -v n="$n" 'BEGIN { printf "%.2f", l / n }') |"
done
