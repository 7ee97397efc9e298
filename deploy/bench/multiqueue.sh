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
#
# ATTACHED=1 adds a column: the same QPS QPs as QPS applications attached to a `rocev2d run
# --queues QPS` of DATAPATH on each side (`write_bw --attach` pairs on ports 18515 + k, WRITES
# each, started one by one so application k lands on shard k on both sides, as QP k of
# `write_bw -q QPS` does), their Gbit/s summed, and its ratio to `write_bw -q QPS` in-process
# (target 0.95x). The daemons run for that column only: an in-process shard refuses an
# interface a daemon serves.
set -euo pipefail
cd "$(dirname "$0")/../.."

QPS=${QPS:-2}
DATAPATH=${DATAPATH:-xdp}
WRITES=${WRITES:-8192}
RUNS=${RUNS:-3}
ATTACHED=${ATTACHED:-0}
if [ "$ATTACHED" = 1 ]; then
    PACKAGES="-p rocev2-examples -p rocev2d"
fi
# shellcheck source=rows.sh
. deploy/bench/rows.sh
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
# Applications attached to the daemon of $1, from its stats.
apps_on() { "$TB" exec "$NAME" "$1" -- "$BIN/rocev2d" stats | awk '$1 == "applications" { print $2 }'; }
# Waits until the daemon of $1 has $2 applications.
wait_apps() {
    for _ in $(seq 100); do
        [ "$(apps_on "$1")" = "$2" ] && return 0
        sleep 0.1
    done
    echo "the daemon of $1 has no $2 applications" >&2
    return 1
}
# QPS attached write_bw pairs through `rocev2d run --queues QPS` daemons; prints their summed
# Gbit/s.
attached_run() {
    local k pids=()
    start_daemons --datapath "$DATAPATH" --queues "$QPS"
    for k in $(seq 0 $((QPS - 1))); do
        in_h1 "$BIN/write_bw" -d "$IF1" --attach -p $((18515 + k)) >/dev/null &
        pids+=($!)
        wait_port $((18515 + k))
    done
    for k in $(seq 0 $((QPS - 1))); do
        in_h0 "$BIN/write_bw" -d "$IF0" --attach -p $((18515 + k)) -s 65536 -n "$WRITES" \
            "${PEER:-10.0.0.2}" >"$OUT/att$k" &
        pids+=($!)
        wait_apps h0 $((k + 1))
    done
    wait "${pids[@]}"
    stop_daemons
    cat "$OUT"/att* | awk '$1 == 65536 { s += $4 } END { print s }'
    rm -f "$OUT"/att*
}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
rdma=()
tcp=()
procs=()
cross=()
att=()
xhead="" xrule="" xcell="" ahead="" arule="" acell=""
if [ "$CROSSED" = 1 ]; then
    xhead=" crossed steering, Gbit/s | crossed / straight |"
    xrule="---|---|"
fi
if [ "$ATTACHED" = 1 ]; then
    ahead=" $QPS attached QPs, rocev2d --queues $QPS, Gbit/s | attached / in-process (target 0.95x) |"
    arule="---|---|"
fi
echo "| run | write_bw -q $QPS, $DATAPATH, Gbit/s | iperf3 -P $QPS, Gbit/s | $QPS iperf3 processes, Gbit/s | ratio to -P | ratio to processes |$xhead$ahead"
echo "|---|---|---|---|---|---|$xrule$arule"
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
    if [ "$ATTACHED" = 1 ]; then
        a=$(attached_run)
        att+=("$a")
        acell=" $a | $(ratio "$a" "$bw")x |"
    fi
    echo "| $run | $bw | $t | $p | $(ratio "$bw" "$t")x | $(ratio "$bw" "$p")x |$xcell$acell"
done
mr=$(median "${rdma[@]}")
mt=$(median "${tcp[@]}")
mp=$(median "${procs[@]}")
if [ "$CROSSED" = 1 ]; then
    mx=$(median "${cross[@]}")
    xcell=" $mx | $(ratio "$mx" "$mr")x |"
fi
if [ "$ATTACHED" = 1 ]; then
    ma=$(median "${att[@]}")
    acell=" $ma | $(ratio "$ma" "$mr")x |"
fi
echo "| median | $mr | $mt | $mp | $(ratio "$mr" "$mt")x | $(ratio "$mr" "$mp")x |$xcell$acell"
echo
echo "load average before: $load_before; after: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) vCPUs"
