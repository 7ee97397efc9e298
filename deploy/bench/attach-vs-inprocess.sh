#!/usr/bin/env bash
# Attached to rocev2d against in-process, between the two namespaces of a pair testbed (one veth
# link, MTU 4200), as root, for every datapath in DATAPATHS (default "packet xdp"):
#   - goodput: write_bw, 1 GiB of 64 KiB RDMA WRITEs on one QP, in-process, then with both
#     sides attached to a `rocev2d run` of the same datapath; the ratio attached / in-process
#     (issue 15's goal: 0.9 or more);
#   - latency: rc_pingpong --lat, SIZE-byte messages (default 4096), ITERS round trips (default
#     5000), median and p99 as the client measures them, in wait mode MODE (default spin: the
#     daemons and tools busy-poll, so neither side's wake-up is measured), and the attached
#     median minus the in-process one (goal: +5 µs or less).
# Prints a Markdown table for BENCHMARKS.md. The testbed and daemons go away on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."

DATAPATHS=${DATAPATHS:-packet xdp}
MODE=${MODE:-spin}
ITERS=${ITERS:-5000}
SIZE=${SIZE:-4096}
DAEMONS=()
stop_daemons() {
    local p
    for p in "${DAEMONS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${DAEMONS[@]}"; do wait "$p" 2>/dev/null || true; done
    DAEMONS=()
}
ON_EXIT=stop_daemons
PACKAGES="-p rocev2-examples -p rocev2d"
# shellcheck source=pair.sh
. deploy/bench/pair.sh att

# Starts a daemon in each namespace, serving datapath $1, and waits until both serve.
start_daemons() {
    local h if
    for h in h0 h1; do
        if=$IF0
        [ "$h" = h1 ] && if=$IF1
        "$TB" exec "$NAME" "$h" -- "$BIN/rocev2d" run --iface "$if" --datapath "$1" \
            --socket "$OUT/$h.sock" $([ "$MODE" = spin ] && echo --busy-poll) >"$OUT/$h.log" 2>&1 &
        DAEMONS+=($!)
    done
    for h in h0 h1; do
        for _ in $(seq 100); do
            grep -q '^rocev2d: serving' "$OUT/$h.log" && break
            sleep 0.1
        done
    done
}

# write_bw's Gbit/s; $1: "in" or "at" (attached), $2: datapath.
goodput() {
    local extra0=() extra1=()
    if [ "$1" = at ]; then
        extra0=(--attach --socket "$OUT/h0.sock")
        extra1=(--attach --socket "$OUT/h1.sock")
    fi
    in_h1 "$BIN/write_bw" -d "$IF1" --datapath "$2" --poll "$MODE" "${extra1[@]}" >/dev/null &
    wait_port 18515
    in_h0 "$BIN/write_bw" -d "$IF0" --datapath "$2" --poll "$MODE" "${extra0[@]}" -s 65536 -n 16384 10.0.0.2 |
        awk '$1 == 65536 { print $4 }'
    wait %%
}

# "median p99" of rc_pingpong --lat; arguments as goodput's.
latency() {
    local extra0=() extra1=()
    if [ "$1" = at ]; then
        extra0=(--attach --socket "$OUT/h0.sock")
        extra1=(--attach --socket "$OUT/h1.sock")
    fi
    in_h1 "$BIN/rc_pingpong" -d "$IF1" --datapath "$2" --poll "$MODE" "${extra1[@]}" -s "$SIZE" -n "$ITERS" --lat >/dev/null &
    wait_port 18515
    in_h0 "$BIN/rc_pingpong" -d "$IF0" --datapath "$2" --poll "$MODE" "${extra0[@]}" -s "$SIZE" -n "$ITERS" --lat 10.0.0.2 >"$OUT/cli"
    wait %%
    awk '/^round trip/ { print $4, $7 }' "$OUT/cli"
}

rows=()
for dp in $DATAPATHS; do
    bw_in=$(goodput in "$dp")
    read -r med_in p99_in < <(latency in "$dp")
    start_daemons "$dp"
    bw_at=$(goodput at "$dp")
    read -r med_at p99_at < <(latency at "$dp")
    stop_daemons
    read -r ratio delta < <(awk -v a="$bw_at" -v b="$bw_in" -v m="$med_at" -v n="$med_in" \
        'BEGIN { printf "%.2fx %+.1f\n", a / b, m - n }')
    rows+=("| $dp | $bw_in | $bw_at | $ratio | $med_in / $p99_in | $med_at / $p99_at | $delta |")
done

echo "write_bw: 1 GiB of 64 KiB WRITEs, Gbit/s. rc_pingpong --lat: $SIZE-byte messages, $ITERS"
echo "round trips, median / p99 µs as the client measures them. Wait mode: $MODE (tools and daemons)."
echo
echo "| datapath | write_bw in-process | write_bw attached | attached / in-process | rc_pingpong in-process | rc_pingpong attached | median attached − in-process µs |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
