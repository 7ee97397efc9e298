#!/usr/bin/env bash
# rocev2 against the kernel's TCP between the two namespaces of a pair testbed (one veth link,
# MTU 4200), as root:
#   - goodput: write_bw (1 GiB of 64 KiB RDMA WRITEs, one QP) vs iperf3 (one TCP stream, 5 s),
#     and the ceiling of each datapath: dp_stream sends 1 GiB of raw MTU-byte frames with no
#     engine (write_bw's goodput as a ratio to it is what the stack costs; MTU, default 4096,
#     is write_bw's path MTU and dp_stream's payload per frame);
#   - latency: rc_pingpong --lat vs tcp_pingpong (TCP_NODELAY), 4096-byte messages, 5000
#     round trips, and vs sockperf's TCP ping-pong (3 s, --full-rtt; TCP_NODELAY is its
#     default), median and p99 as the clients measure them, in each of rc_pingpong's wait
#     modes (MODES, default "sleep adaptive spin"; SPIN_US sets adaptive's window), each median
#     as a ratio to tcp_pingpong's and to sockperf's of the same run, and the CPU time (user + system) both
#     processes of a pair used per round trip over their loops (each tool prints its own);
#   - the floor under the busy-polled round trip: dp_pingpong bounces one raw frame of the same
#     payload through each datapath with no engine (busy-polling as --poll spin does), alone and
#     with RC's acknowledgement frame sent first (`--acks first`: RC's four frames per round
#     trip, in the engine's order); rc_pingpong's spin median is printed as a ratio to the
#     latter (what the stack adds to the frames it must send). The floor sends a message as one
#     frame: above 1024 bytes rc_pingpong (IBA MTU 1024 by default, as rdma-core's) sends
#     several, so the ratio is like for like at SIZE 1024 and below only.
# Each rocev2 figure is taken over every datapath in DATAPATHS (default: "udp packet xdp"), and
# each goodput is printed as a ratio to iperf3's of the same run (goal: 0.5 or more).
# PEER (default 10.0.0.2; fd00::2 for IPv6) is the address write_bw and iperf3 connect to, and
# ROCEV2_FLAGS extra flags for both rocev2 tools on both sides (e.g. "--no-udp-gso" or
# "--no-udp-gro", turning UDP mode's offloads off).
# Prints two Markdown tables for BENCHMARKS.md. The testbed is torn down on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."

DATAPATHS=${DATAPATHS:-udp packet xdp}
MODES=${MODES:-sleep adaptive spin}
SPIN_US=${SPIN_US:-}
ITERS=${ITERS:-5000}
SIZE=${SIZE:-4096}
MTU=${MTU:-4096}
read -r -a FLAGS <<<"${ROCEV2_FLAGS:-}"
# shellcheck source=pair.sh
. deploy/bench/pair.sh bench

# "median p99 cpu" from a ping-pong tool's output (cpu: this process's usec per round trip).
figures() { awk '/^round trip/ { m = $4; p = $7 } /^cpu:/ { c = $2 } END { print m, p, c }' "$1"; }

# One ping-pong of tool $1 (server in h1, listening on TCP port $2; client in h0), $SIZE bytes
# x $ITERS, the other arguments to both sides. Sets med and p99 (the client's), ratio and sratio
# (med against tcp_pingpong's and sockperf's) and cpu (both sides, per round trip).
pingpong() {
    local tool=$1 port=$2 cpu_c cpu_s
    shift 2
    in_h1 "$BIN/$tool" -d "$IF1" "$@" -s "$SIZE" -n "$ITERS" >"$OUT/srv" &
    wait_port "$port"
    in_h0 "$BIN/$tool" -d "$IF0" "$@" -s "$SIZE" -n "$ITERS" 10.0.0.2 >"$OUT/cli"
    wait
    read -r med p99 cpu_c < <(figures "$OUT/cli")
    read -r _ _ cpu_s < <(figures "$OUT/srv")
    read -r ratio sratio cpu < <(awk -v m="$med" -v t="$tmed" -v s="$smed" -v a="$cpu_c" \
        -v b="$cpu_s" 'BEGIN { printf "%.2fx %.2fx %.1f\n", m / t, m / s, a + b }')
}

rows=()
lrows=()
declare -A goodput spin
for dp in $DATAPATHS; do
    bw=$(write_bw_run "$dp" 16384 -m "$MTU" "${FLAGS[@]}" | awk '$1 == 65536 { print $4 }')
    goodput[$dp]=$bw
    rows+=("| goodput, write_bw 64 KiB x 16384, MTU $MTU, $dp | $bw Gbit/s |")
done

tcp=$(iperf3_run -t 5 -f g | awk '/receiver/ { print $(NF-2) }')
rows+=("| goodput, iperf3 one TCP stream, 5 s | $tcp Gbit/s |")
for dp in $DATAPATHS; do
    ratio=$(awk -v a="${goodput[$dp]}" -v b="$tcp" 'BEGIN { printf "%.2f", a / b }')
    rows+=("| goodput ratio write_bw $dp / iperf3 | ${ratio}x |")
    # The same datapath with no engine: MTU-byte frames (one packet of write_bw's) as fast as
    # it takes them, received payload per second.
    in_h1 "$BIN/dp_stream" -d "$IF1" --datapath "$dp" -s "$MTU" >"$OUT/srv" &
    wait_port 18517
    in_h0 "$BIN/dp_stream" -d "$IF0" --datapath "$dp" -s "$MTU" 10.0.0.2 >/dev/null
    wait
    ceiling=$(awk '/^goodput:/ { print $2 }' "$OUT/srv")
    lost=$(awk '/^frames sent/ { sub(",", "", $7); print $7 }' "$OUT/srv")
    rows+=("| goodput, dp_stream $dp (no engine: the ceiling), $lost frames lost | $ceiling Gbit/s |")
    rows+=("| goodput ratio write_bw $dp / dp_stream $dp, dp_stream $dp / iperf3 | $(awk -v a="${goodput[$dp]}" -v b="$ceiling" -v t="$tcp" 'BEGIN { printf "%.2fx, %.2fx", a / b, b / t }') |")
done

in_h1 "$BIN/tcp_pingpong" -s "$SIZE" -n "$ITERS" >"$OUT/srv" &
wait_port 18516
in_h0 "$BIN/tcp_pingpong" -s "$SIZE" -n "$ITERS" 10.0.0.2 >"$OUT/cli"
wait
read -r tmed tp99 tcpu_c < <(figures "$OUT/cli")
read -r _ _ tcpu_s < <(figures "$OUT/srv")
tcpu=$(awk -v a="$tcpu_c" -v b="$tcpu_s" 'BEGIN { printf "%.1f", a + b }')
lrows+=("| tcp_pingpong (TCP_NODELAY) | kernel | $tmed | $tp99 | 1.00x | - | $tcpu |")

need sockperf
in_h1 sockperf server --tcp -i 10.0.0.2 -p 11111 >"$OUT/sp-srv" 2>&1 &
sp_srv=$!
wait_port 11111
in_h0 sockperf ping-pong --tcp -i 10.0.0.2 -p 11111 -m "$SIZE" -t 3 --full-rtt >"$OUT/sp" 2>&1
kill "$sp_srv"
wait "$sp_srv" || true
read -r smed sp99 < <(awk '/percentile 50.000 =/ { m = $NF } /percentile 99.000 =/ { p = $NF }
    END { print m, p }' "$OUT/sp")
sratio=$(awk -v m="$smed" -v t="$tmed" 'BEGIN { printf "%.2fx", m / t }')
lrows+=("| sockperf ping-pong (TCP) | kernel | $smed | $sp99 | $sratio | 1.00x | - |")

for dp in $DATAPATHS; do
    for mode in $MODES; do
        poll=(--poll "$mode")
        label=$mode
        if [ "$mode" = adaptive ] && [ -n "$SPIN_US" ]; then
            poll+=(--spin-us "$SPIN_US")
            label="adaptive, $SPIN_US µs"
        fi
        pingpong rc_pingpong 18515 --datapath "$dp" "${FLAGS[@]}" "${poll[@]}" --lat
        lrows+=("| rc_pingpong, $dp | $label | $med | $p99 | $ratio | $sratio | $cpu |")
        if [ "$mode" = spin ]; then spin[$dp]=$med; fi
    done
    pingpong dp_pingpong 18517 --datapath "$dp"
    lrows+=("| dp_pingpong, $dp (no engine, two frames) | spin | $med | $p99 | $ratio | $sratio | $cpu |")
    pingpong dp_pingpong 18517 --datapath "$dp" --acks first
    lrows+=("| dp_pingpong --acks first, $dp (no engine, RC's four frames) | spin | $med | $p99 | $ratio | $sratio | $cpu |")
    if [ -n "${spin[$dp]:-}" ]; then
        rows+=("| busy-polled round trip, rc_pingpong $dp / dp_pingpong --acks first $dp (the floor) | $(awk -v a="${spin[$dp]}" -v b="$med" 'BEGIN { printf "%.2fx", a / b }') |")
    fi
done

echo "| what | result |"
echo "|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "Round trips of $SIZE-byte messages, $ITERS per run (sockperf: 3 s), as the clients measure them; CPU: user +"
echo "system time of both processes over their loops, divided by the round trips."
echo
echo "| tool, datapath | wait | median µs | p99 µs | median / tcp_pingpong's | median / sockperf's | CPU µs per round trip (both sides) |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${lrows[@]}"
