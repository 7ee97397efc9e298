#!/usr/bin/env bash
# Attached to rocev2d against in-process, between the two namespaces of a pair testbed (one veth
# link, MTU 4200), as root, for every datapath in DATAPATHS (default "packet xdp"):
#   - goodput: write_bw, 1 GiB of 64 KiB RDMA WRITEs on one QP, in-process, then with both
#     sides attached to a `rocev2d run` of the same datapath; the ratio attached / in-process
#     (goal: 0.9 or more);
#   - latency: rc_pingpong --lat, SIZE-byte messages (default 4096), ITERS round trips (default
#     5000), median and p99 as the client measures them, in wait mode MODE (default spin: the
#     daemons and tools busy-poll, so neither side's wake-up is measured), and the attached
#     median minus the in-process one (goal: +5 µs or less);
#   - the C ABI: Debian's ib_write_bw (1 GiB of 64 KiB WRITEs) and ib_send_lat (SIZE bytes,
#     10 x ITERS round trips, typical µs) with librocev2_ibverbs.so preloaded, in-process
#     (ROCEV2_DATAPATH=<datapath>) and attached (ROCEV2_DATAPATH=attach), and the CPU time per
#     ib_send_lat round trip of both programs, plus the daemons' when attached (the difference
#     of a run of ITERS and one of 10 x ITERS, so fixed costs cancel).
# CABI=0 leaves the C ABI out (a TREE from before the library could attach).
# Prints Markdown tables for BENCHMARKS.md. The testbed and daemons go away on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."

DATAPATHS=${DATAPATHS:-packet xdp}
MODE=${MODE:-spin}
CABI=${CABI:-1}
ITERS=${ITERS:-5000}
SIZE=${SIZE:-4096}
# The library is a cdylib, which pair.sh's `--bins` build leaves out.
cargo build --release -q -p rocev2-ibverbs -p rocev2-rdmacm
PACKAGES="-p rocev2-examples -p rocev2d"
# shellcheck source=pair.sh
. deploy/bench/pair.sh att
need ib_write_bw
need ib_send_lat
LIB="$(realpath "$BIN")/librocev2_ibverbs.so"

# write_bw's Gbit/s; $1: "in" or "at" (attached), $2: datapath.
goodput() {
    local extra0=() extra1=()
    if [ "$1" = at ]; then
        extra0=(--attach)
        extra1=(--attach)
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
        extra0=(--attach)
        extra1=(--attach)
    fi
    in_h1 "$BIN/rc_pingpong" -d "$IF1" --datapath "$2" --poll "$MODE" "${extra1[@]}" -s "$SIZE" -n "$ITERS" --lat >/dev/null &
    wait_port 18515
    in_h0 "$BIN/rc_pingpong" -d "$IF0" --datapath "$2" --poll "$MODE" "${extra0[@]}" -s "$SIZE" -n "$ITERS" --lat 10.0.0.2 >"$OUT/cli"
    wait %%
    awk '/^round trip/ { print $4, $7 }' "$OUT/cli"
}

# ROCEV2_DATAPATH for the C programs; $1: "in" or "at", $2: datapath.
c_mode() { if [ "$1" = at ]; then echo attach; else echo "$2"; fi; }

# ib_write_bw's Gbit/s through the library; arguments as goodput's.
c_goodput() {
    local args=(-s 65536 -n 16384 -x 1 -F --report_gbits)
    in_h1 env LD_PRELOAD="$LIB" ROCEV2_DATAPATH="$(c_mode "$@")" ib_write_bw -d "rocev2_$IF1" "${args[@]}" >/dev/null &
    wait_port 18515
    in_h0 env LD_PRELOAD="$LIB" ROCEV2_DATAPATH="$(c_mode "$@")" ib_write_bw -d "rocev2_$IF0" "${args[@]}" 10.0.0.2 |
        awk '$1 == 65536 { print $4 }'
    wait %%
}

# User plus system CPU seconds so far of the processes whose pids are the arguments and of
# their children (the testbed tool runs each daemon as its child).
cpu_of() {
    local t=0 p
    for p in "$@" $(for q in "$@"; do pgrep -P "$q"; done); do
        t=$(awk -v t="$t" -v hz="$(getconf CLK_TCK)" '{ print t + ($14 + $15) / hz }' "/proc/$p/stat")
    done
    echo "$t"
}

# "typical-µs cpu-seconds" of one ib_send_lat run of $3 round trips through the library;
# $1, $2 as goodput's. The programs' CPU comes from bash's `time`; the daemons' (attached) from
# /proc.
c_latency_run() {
    local args=(-s "$SIZE" -n "$3" -x 1 -F) dp d0 d1
    dp=$(c_mode "$1" "$2")
    d0=$(cpu_of "${DAEMONS[@]}")
    in_h1 bash -c 'TIMEFORMAT="%U %S"; time env LD_PRELOAD="$0" ROCEV2_DATAPATH="$1" ib_send_lat "${@:2}" >/dev/null' \
        "$LIB" "$dp" -d "rocev2_$IF1" "${args[@]}" 2>"$OUT/srv.cpu" &
    wait_port 18515
    in_h0 bash -c 'TIMEFORMAT="%U %S"; time env LD_PRELOAD="$0" ROCEV2_DATAPATH="$1" ib_send_lat "${@:2}"' \
        "$LIB" "$dp" -d "rocev2_$IF0" "${args[@]}" 10.0.0.2 >"$OUT/cli" 2>"$OUT/cli.cpu"
    wait %%
    d1=$(cpu_of "${DAEMONS[@]}")
    awk -v d="$(awk -v a="$d0" -v b="$d1" 'BEGIN { print b - a }')" '
        FNR == 1 && FILENAME ~ /cpu$/ { cpu += $1 + $2 }
        FILENAME !~ /cpu$/ && $1 == SIZE { typ = $5 }
        END { printf "%s %.4f\n", typ, cpu + d }' SIZE="$SIZE" "$OUT/srv.cpu" "$OUT/cli.cpu" "$OUT/cli"
}

# "typical-µs cpu-µs-per-round-trip" of ib_send_lat through the library: the typical round trip
# of a run of 10 x ITERS, and the CPU per round trip as the difference of that run and one of
# ITERS (so start-up and the exchange, the same in both, cancel out).
c_latency() {
    local typ small big
    read -r _ small < <(c_latency_run "$1" "$2" "$ITERS")
    read -r typ big < <(c_latency_run "$1" "$2" $((10 * ITERS)))
    awk -v t="$typ" -v a="$small" -v b="$big" -v n="$ITERS" \
        'BEGIN { printf "%s %.2f\n", t, (b - a) * 1e6 / (9 * n) }'
}

rows=()
crows=()
for dp in $DATAPATHS; do
    bw_in=$(goodput in "$dp")
    read -r med_in p99_in < <(latency in "$dp")
    if [ "$CABI" = 1 ]; then
        cbw_in=$(c_goodput in "$dp")
        read -r clat_in ccpu_in < <(c_latency in "$dp")
    fi
    start_daemons --datapath "$dp" $([ "$MODE" = spin ] && echo --busy-poll)
    bw_at=$(goodput at "$dp")
    read -r med_at p99_at < <(latency at "$dp")
    if [ "$CABI" = 1 ]; then
        cbw_at=$(c_goodput at "$dp")
        read -r clat_at ccpu_at < <(c_latency at "$dp")
    fi
    stop_daemons
    if [ "$CABI" = 1 ]; then
        crows+=("| $dp | $cbw_in | $cbw_at | $(awk -v a="$cbw_at" -v b="$cbw_in" 'BEGIN { printf "%.2fx", a / b }') | $clat_in | $clat_at | $ccpu_in | $ccpu_at |")
    fi
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
[ "$CABI" = 1 ] || exit 0
echo
echo "The C ABI (librocev2_ibverbs.so preloaded into Debian's perftest): ib_write_bw 1 GiB of 64 KiB"
echo "WRITEs, Gbit/s; ib_send_lat $SIZE bytes, $((10 * ITERS)) round trips, typical µs; CPU µs per round"
echo "trip (both programs, plus both daemons attached; runs of $ITERS and $((10 * ITERS)) round trips differenced)."
echo
echo "| datapath | ib_write_bw in-process | ib_write_bw attached | attached / in-process | ib_send_lat in-process | ib_send_lat attached | CPU/round trip in-process | CPU/round trip attached |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${crows[@]}"
