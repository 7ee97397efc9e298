#!/usr/bin/env bash
# ib_write_bw through librocev2_ibverbs.so against rocev2's own write_bw, between the two
# namespaces of a pair testbed (one veth link, MTU 4200), in the same run, as root, for every
# datapath in DATAPATHS (default "udp packet xdp"): ITERS (default 16384) 64 KiB RDMA WRITEs on
# one QP per run, REPEAT (default 5) runs of each tool, alternating, so both see the same
# machine; the median Gbit/s of each, every run's value, and the ratio of the medians library /
# native (goal: 0.8 or more). Debian's ib_write_bw (perftest) runs unmodified on both
# sides with the library preloaded and ROCEV2_DATAPATH set; write_bw runs with its defaults
# (adaptive polling). Prints a Markdown table for BENCHMARKS.md. The testbed goes away on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."

DATAPATHS=${DATAPATHS:-udp packet xdp}
ITERS=${ITERS:-16384}
REPEAT=${REPEAT:-5}
cargo build --release -q -p rocev2-ibverbs -p rocev2-rdmacm
PACKAGES="-p rocev2-examples"
# shellcheck source=rows.sh
. deploy/bench/rows.sh
# shellcheck source=pair.sh
. deploy/bench/pair.sh ibv
LIB="$(realpath "$BIN")/librocev2_ibverbs.so"

# write_bw's Gbit/s over datapath $1.
native() {
    write_bw_run "$1" "$ITERS" | awk '$1 == 65536 { print $4 }'
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

echo "| datapath | write_bw (native) median Gbit/s | ib_write_bw (librocev2_ibverbs.so) median Gbit/s | ratio | runs native / library |"
echo "|---|---|---|---|---|"
for dp in $DATAPATHS; do
    ns=() ls=()
    for _ in $(seq "$REPEAT"); do
        ns+=("$(native "$dp")")
        ls+=("$(library "$dp")")
    done
    n=$(median "${ns[@]}")
    l=$(median "${ls[@]}")
    echo "| $dp | $n | $l | $(awk -v l="$l" -v n="$n" 'BEGIN { printf "%.2f", l / n }') | ${ns[*]} / ${ls[*]} |"
done
