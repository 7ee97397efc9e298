#!/usr/bin/env bash
# MP-RDMA's spread over the spines when the leaf's uplinks mark ECN (seed 001 §3.2 balances
# virtual paths on the marks): a measurement, not a test, since over ten runs the spread with
# RED marking was no tighter than without (0.7–53% per spine; docs/multipath.md, "On real
# wires"). As root: a leaf-spine of Linux routers (2 leaves, 4 spines at 50 Mbit/s), `rocev2d
# switch attach --shaper none` with RED on l0's four uplinks, `write_bw --multipath --verify`
# from l0h0 to l1h0 (16 MiB), then per run one Markdown row: packets per spine, shares, CE marks
# per uplink, goodput. RUNS (default 3) runs; the testbed is torn down on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."

[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 1; }
RUNS=${RUNS:-3}
cargo build --release -q -p rocev2d -p rocev2-examples -p rocev2-testbed
T=${CARGO_TARGET_DIR:-target}/release
NAME=mpe$(($$ % 100000))
topo=$(mktemp --suffix .toml)
trap '"$T/rocev2-testbed" down $NAME >/dev/null 2>&1 || true; rm -f "$topo"' EXIT
cat >"$topo" <<TOML
name = "$NAME"
[topology]
kind = "leaf-spine"
spines = 4
leaves = 2
hosts_per_leaf = 2
[topology.link]
mtu = 4200
[topology.fabric]
mtu = 4200
rate_bps = 50_000_000
buffer_bytes = 262_144
TOML
table=$("$T/rocev2-testbed" up "$topo")
# l0's uplinks in spine order: the `port` column of rows "l0 ... peer sN" (the addresses take two columns).
mapfile -t up < <(awk '$1 == "l0" && $7 ~ /^s[0-9]+$/ { print $7, $4 }' <<<"$table" | sort | awk '{ print $2 }')
ifname() { awk -v n="$1" '$1 == n { print $4; exit }' <<<"$table"; }
in_ns() { "$T/rocev2-testbed" exec "$NAME" "$@"; }
tx() { for p in "${up[@]}"; do in_ns l0 -- cat "/sys/class/net/$p/statistics/tx_packets"; done; }
ce() {
    for p in "${up[@]}"; do
        in_ns l0 -- "$T/rocev2d" switch stats --iface "$p" --json |
            python3 -c 'import json, sys; print(json.load(sys.stdin)["counters"]["ce_marked"])'
    done
}
for p in "${up[@]}"; do
    in_ns l0 -- "$T/rocev2d" switch attach --iface "$p" --rate 50mbit --buffer 256kb \
        --shaper none --red kmin=16kb,kmax=64kb,pmax=0.2 >/dev/null
done
srv_ip=$(awk '$1 == "l1h0" { print $5; exit }' <<<"$table")
echo "| run | packets per spine | shares | CE marks per uplink | goodput |"
echo "|---|---|---|---|---|"
for run in $(seq "$RUNS"); do
    port=$((18700 + run))
    mapfile -t before < <(tx)
    mapfile -t ce_before < <(ce)
    in_ns l1h0 -- "$T/write_bw" -d "$(ifname l1h0)" -p $port --datapath packet -s 65536 -t 4 \
        --multipath --vps 32 -n 256 --verify >/dev/null &
    srv=$!
    sleep 1
    out=$(in_ns l0h0 -- "$T/write_bw" -d "$(ifname l0h0)" -p $port --datapath packet -s 65536 \
        -t 4 --multipath --vps 32 --iw 64 -n 256 --verify "$srv_ip")
    wait $srv
    grep -q "verify: OK" <<<"$out" || { echo "run $run: data not verified" >&2; exit 1; }
    mapfile -t after < <(tx)
    mapfile -t ce_after < <(ce)
    sent=() marks=()
    for i in "${!up[@]}"; do
        sent+=($((after[i] - before[i])))
        marks+=($((ce_after[i] - ce_before[i])))
    done
    total=$(IFS=+; echo $((${sent[*]})))
    shares=$(for s in "${sent[@]}"; do awk -v s="$s" -v t="$total" 'BEGIN { printf "%.2f ", s / t }'; done)
    gbps=$(awk '$1 == 65536 { print $4 }' <<<"$out")
    echo "| $run | ${sent[*]} | ${shares% } | ${marks[*]} | $gbps Gb/s |"
done
