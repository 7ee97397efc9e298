#!/usr/bin/env bash
# Wire hot paths against a plain CRC-32 of the same bytes (STYLE §4.6: measure the reference in
# the same run, print the ratio). Runs `benches/wire.rs` of rocev2-core, then reads criterion's
# estimates (target/criterion/<group>/<path>/new/estimates.json) and prints, per path, the mean
# time per frame, the throughput and the ratio to the plain CRC. Extra arguments go to criterion
# (e.g. `--measurement-time 10`). The BENCHMARKS.md target is a ratio within 1.25.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
cargo bench -p rocev2-core --bench wire -- --noplot "$@"

group="${CARGO_TARGET_DIR:-$root/target}/criterion/wire_write_only_4k"
reference="plain_crc32"
paths=(build_icrc parse_verify "$reference")

# The mean's point estimate in ns, from criterion's JSON, without needing jq.
mean_ns() {
    sed -nE 's/.*"mean":\{"confidence_interval":\{[^}]*\},"point_estimate":([0-9.eE+-]+).*/\1/p' \
        "$group/$1/new/estimates.json"
}
# Bytes per iteration as declared with Throughput::Bytes.
bytes() {
    sed -nE 's/.*"throughput":\{"Bytes":([0-9]+)\}.*/\1/p' "$group/$1/new/benchmark.json"
}

for p in "${paths[@]}"; do
    if [ ! -f "$group/$p/new/estimates.json" ]; then
        echo "wire-ratio: no criterion estimates for '$p' under $group" >&2
        exit 1
    fi
done

ref_ns="$(mean_ns "$reference")"
printf '\n%-14s %12s %10s %18s\n' "path" "mean (ns)" "GB/s" "x plain CRC-32"
for p in "${paths[@]}"; do
    ns="$(mean_ns "$p")"
    b="$(bytes "$p")"
    awk -v p="$p" -v ns="$ns" -v b="$b" -v ref="$ref_ns" \
        'BEGIN { printf "%-14s %12.1f %10.2f %18.3f\n", p, ns, b / ns, ns / ref }'
done
