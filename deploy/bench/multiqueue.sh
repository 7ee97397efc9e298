#!/usr/bin/env bash
# Goodput with several queues and cores (issue 18), as root: on a pair testbed whose veth ends
# have QPS queues each (default 2, one per vCPU here), `write_bw -q QPS` over DATAPATH (default
# xdp: QPS engine shards per side, each its own thread, AF_XDP socket and queue, 64 KiB RDMA
# WRITEs x WRITES per QP, default 8192 = 512 MiB) against `iperf3 -P QPS` (QPS TCP streams,
# 5 s), alternately, RUNS times (default 3). Prints each run's Gbit/s and ratio, then the
# medians, as a Markdown table for BENCHMARKS.md, with the load average before and after.
set -euo pipefail
cd "$(dirname "$0")/../.."

QPS=${QPS:-2}
DATAPATH=${DATAPATH:-xdp}
WRITES=${WRITES:-8192}
RUNS=${RUNS:-3}
# shellcheck source=pair.sh
. deploy/bench/pair.sh mq
need iperf3

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
rdma=()
tcp=()
echo "| run | write_bw -q $QPS, $DATAPATH, Gbit/s | iperf3 -P $QPS, Gbit/s | ratio |"
echo "|---|---|---|---|"
for run in $(seq "$RUNS"); do
    bw=$(write_bw_run "$DATAPATH" "$WRITES" | awk '$1 == 65536 { print $4 }')
    t=$(iperf3_run -t 5 -f g -P "$QPS" | awk '/receiver/ { v = $(NF-2) } END { print v }')
    rdma+=("$bw")
    tcp+=("$t")
    echo "| $run | $bw | $t | $(awk -v a="$bw" -v b="$t" 'BEGIN { printf "%.2f", a / b }')x |"
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
mr=$(median "${rdma[@]}")
mt=$(median "${tcp[@]}")
echo "| median | $mr | $mt | $(awk -v a="$mr" -v b="$mt" 'BEGIN { printf "%.2f", a / b }')x |"
echo
echo "load average before: $load_before; after: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) vCPUs"
