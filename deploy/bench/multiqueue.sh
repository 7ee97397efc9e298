#!/usr/bin/env bash
# Goodput with several queues and cores, as root: on a pair testbed whose veth ends
# have QPS queues each (default 2, one per vCPU here), `write_bw -q QPS` over DATAPATH (default
# xdp: QPS engine shards per side, each its own thread, AF_XDP socket and queue, 64 KiB RDMA
# WRITEs x WRITES per QP, default 8192 = 512 MiB) against two kernel TCP references of QPS
# streams, 5 s each: `iperf3 -P QPS` and QPS iperf3 processes side by side (ports 5201 + k,
# receivers summed), because iperf3 before 3.16 runs all the streams of `-P` in one thread, so
# `-P` alone is a one-core reference. All three alternate, RUNS times (default 3). Prints each
# run's Gbit/s and ratios, then the medians, as a Markdown table for BENCHMARKS.md, with the
# load average before and after.
#
# CROSSED=1 (AF_XDP, QPS >= 2) adds a column: the same write_bw with the client's steering crossed
# (`--cross-queues`: shard k bound to queue k + 1 mod QPS), so every data frame and every ACK
# lands on another shard's queue and is forwarded to its shard (the RSS case), and its
# ratio to the straight run: the cost of the hop.
set -euo pipefail
cd "$(dirname "$0")/../.."

QPS=${QPS:-2}
DATAPATH=${DATAPATH:-xdp}
WRITES=${WRITES:-8192}
RUNS=${RUNS:-3}
# shellcheck source=pair.sh
. deploy/bench/pair.sh mq
need iperf3

# QPS iperf3 clients in parallel, one stream each, to QPS servers; prints the summed Gbit/s.
iperf3_procs() {
    local k pids=()
    for k in $(seq 0 $((QPS - 1))); do
        in_h1 iperf3 -s -1 -p $((5201 + k)) >/dev/null &
        pids+=($!)
    done
    for k in $(seq 0 $((QPS - 1))); do
        wait_port $((5201 + k))
    done
    for k in $(seq 0 $((QPS - 1))); do
        in_h0 iperf3 -c "${PEER:-10.0.0.2}" -p $((5201 + k)) -t 5 -f g >"$OUT/iperf$k" &
        pids+=($!)
    done
    wait "${pids[@]}"
    cat "$OUT"/iperf* | awk '/receiver/ { s += $(NF-2) } END { print s }'
    rm -f "$OUT"/iperf*
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

CROSSED=${CROSSED:-0}
# write_bw with the client's steering crossed; prints its Gbit/s (run in a subshell: the
# arguments stay there).
crossed_run() {
    # shellcheck disable=SC2034 # read by pair.sh's write_bw_run
    CLIENT_ARGS=(--cross-queues)
    write_bw_run "$DATAPATH" "$WRITES" | awk '$1 == 65536 { print $4 }'
}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
rdma=()
tcp=()
procs=()
cross=()
xhead="" xrule="" xcell=""
if [ "$CROSSED" = 1 ]; then
    xhead=" crossed steering, Gbit/s | crossed / straight |"
    xrule="---|---|"
fi
echo "| run | write_bw -q $QPS, $DATAPATH, Gbit/s | iperf3 -P $QPS, Gbit/s | $QPS iperf3 processes, Gbit/s | ratio to -P | ratio to processes |$xhead"
echo "|---|---|---|---|---|---|$xrule"
for run in $(seq "$RUNS"); do
    bw=$(write_bw_run "$DATAPATH" "$WRITES" | awk '$1 == 65536 { print $4 }')
    t=$(iperf3_run -t 5 -f g -P "$QPS" | awk '/receiver/ { v = $(NF-2) } END { print v }')
    p=$(iperf3_procs)
    rdma+=("$bw")
    tcp+=("$t")
    procs+=("$p")
    if [ "$CROSSED" = 1 ]; then
        x=$(crossed_run)
        cross+=("$x")
        xcell=" $x | $(ratio "$x" "$bw")x |"
    fi
    echo "| $run | $bw | $t | $p | $(ratio "$bw" "$t")x | $(ratio "$bw" "$p")x |$xcell"
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
mr=$(median "${rdma[@]}")
mt=$(median "${tcp[@]}")
mp=$(median "${procs[@]}")
if [ "$CROSSED" = 1 ]; then
    mx=$(median "${cross[@]}")
    xcell=" $mx | $(ratio "$mx" "$mr")x |"
fi
echo "| median | $mr | $mt | $mp | $(ratio "$mr" "$mt")x | $(ratio "$mr" "$mp")x |$xcell"
echo
echo "load average before: $load_before; after: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) vCPUs"
