#!/usr/bin/env bash
# rocev2 against the kernel's TCP between the two namespaces of a pair testbed (one veth link,
# MTU 4200), as root:
#   - goodput: write_bw (1 GiB of 64 KiB RDMA WRITEs, one QP) vs iperf3 (one TCP stream, 5 s);
#   - latency: rc_pingpong --lat vs tcp_pingpong (TCP_NODELAY), 4096-byte messages, 5000
#     round trips, median and p99 as the client measures them.
# Each rocev2 figure is taken over every datapath in DATAPATHS (default: "udp packet xdp"), and
# each goodput is printed as a ratio to iperf3's of the same run (goal: 0.5 or more).
# Prints a Markdown table for BENCHMARKS.md. The testbed is torn down on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."

[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 1; }
command -v iperf3 >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q iperf3 >/dev/null
DATAPATHS=${DATAPATHS:-udp packet xdp}
ITERS=${ITERS:-5000}
SIZE=${SIZE:-4096}

cargo build --release -q -p rocev2-examples -p rocev2-testbed --bins
BIN="${CARGO_TARGET_DIR:-target}/release"
TB="$BIN/rocev2-testbed"
NAME="bench$(($$ % 1000))"
trap '"$TB" down "$NAME" >/dev/null 2>&1 || true' EXIT
"$TB" up deploy/testbeds/pair.toml --name "$NAME" >/dev/null
ifname() { "$TB" exec "$NAME" "$1" -- ip -o link show | awk -F': ' '$2 != "lo" { sub(/@.*/, "", $2); print $2; exit }'; }
IF0=$(ifname h0)
IF1=$(ifname h1)
in_h0() { "$TB" exec "$NAME" h0 -- "$@"; }
in_h1() { "$TB" exec "$NAME" h1 -- "$@"; }
wait_port() {
    local i
    for i in $(seq 100); do
        in_h1 ss -Hltn "sport = :$1" | grep -q . && return 0
        sleep 0.1
    done
    echo "nothing listens on $1 in h1" >&2
    return 1
}

rows=()
declare -A goodput
for dp in $DATAPATHS; do
    in_h1 "$BIN/write_bw" -d "$IF1" --datapath "$dp" >/dev/null &
    wait_port 18515
    bw=$(in_h0 "$BIN/write_bw" -d "$IF0" --datapath "$dp" -s 65536 -n 16384 10.0.0.2 |
        awk '$1 == 65536 { print $4 }')
    wait
    goodput[$dp]=$bw
    rows+=("| goodput, write_bw 64 KiB x 16384, $dp | $bw Gbit/s |")

    in_h1 "$BIN/rc_pingpong" -d "$IF1" --datapath "$dp" -s "$SIZE" -n "$ITERS" >/dev/null &
    wait_port 18515
    lat=$(in_h0 "$BIN/rc_pingpong" -d "$IF0" --datapath "$dp" -s "$SIZE" -n "$ITERS" --lat 10.0.0.2 |
        awk '/^round trip/ { print $4 " / " $7 }')
    wait
    rows+=("| round trip median / p99, rc_pingpong $SIZE B, $dp | $lat µs |")
done

in_h1 iperf3 -s -1 >/dev/null &
wait_port 5201
tcp=$(in_h0 iperf3 -c 10.0.0.2 -t 5 -f g | awk '/receiver/ { print $(NF-2) }')
wait
rows+=("| goodput, iperf3 one TCP stream, 5 s | $tcp Gbit/s |")
for dp in $DATAPATHS; do
    ratio=$(awk -v a="${goodput[$dp]}" -v b="$tcp" 'BEGIN { printf "%.2f", a / b }')
    rows+=("| goodput ratio write_bw $dp / iperf3 | ${ratio}x |")
done

in_h1 "$BIN/tcp_pingpong" -s "$SIZE" -n "$ITERS" >/dev/null &
wait_port 18516
tlat=$(in_h0 "$BIN/tcp_pingpong" -s "$SIZE" -n "$ITERS" 10.0.0.2 | awk '/^round trip/ { print $4 " / " $7 }')
wait
rows+=("| round trip median / p99, tcp_pingpong $SIZE B (TCP_NODELAY) | $tlat µs |")

echo "| what | result |"
echo "|---|---|"
printf '%s\n' "${rows[@]}"
