#!/usr/bin/env bash
# Wire hot paths against a plain CRC-32 of the same bytes (STYLE §4.6: measure the reference in
# the same run, print the ratio). Runs `benches/wire.rs` of rocev2-core, then reads criterion's
# estimates (target/criterion/<group>/<path>/new/estimates.json) and prints, per path, the median
# time per frame, the throughput, the ratio to the plain CRC and the ratio to the path's own
# floor (for the build paths: payload copy + plain CRC). Extra arguments go to criterion
# (e.g. `--measurement-time 10`). The BENCHMARKS.md target is a ratio within 1.25.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
cargo bench -p rocev2-core --bench wire -- --noplot "$@"

group="${CARGO_TARGET_DIR:-$root/target}/criterion/wire_write_only_4k"
# Each path with the reference it is held against besides the plain CRC: the build paths also
# copy the payload into the frame, so their own floor is a payload copy plus the plain CRC.
# `build_template` (the engine's way: a path's header template built once) is skipped with a
# note when the tree has no such path (an older base in `wire-ab.sh`).
paths=(build_icrc build_template parse_verify receive icrc_verify copy_crc32 plain_crc32)
floor() { case "$1" in build_*) echo copy_crc32 ;; *) echo plain_crc32 ;; esac; }

# The median's point estimate in ns, from criterion's JSON, without needing jq. The median, not
# the mean: on a shared machine a few descheduled samples drag the mean up, and they do not hit
# every path equally, which would distort exactly the ratios this script exists to print.
median_ns() {
    sed -nE 's/.*"median":\{"confidence_interval":\{[^}]*\},"point_estimate":([0-9.eE+-]+).*/\1/p' \
        "$group/$1/new/estimates.json"
}
# Bytes per iteration as declared with Throughput::Bytes.
bytes() {
    sed -nE 's/.*"throughput":\{"Bytes":([0-9]+)\}.*/\1/p' "$group/$1/new/benchmark.json"
}

present=()
for p in "${paths[@]}"; do
    if [ -f "$group/$p/new/estimates.json" ]; then
        present+=("$p")
    elif [ "$p" = build_template ]; then
        echo "wire-ratio: this tree has no build_template path (older than the header template)" >&2
    else
        echo "wire-ratio: no criterion estimates for '$p' under $group" >&2
        exit 1
    fi
done

crc_ns="$(median_ns plain_crc32)"
printf '\n%-14s %12s %8s %16s %18s\n' "path" "median (ns)" "GB/s" "x plain CRC-32" "x own floor"
for p in "${present[@]}"; do
    ns="$(median_ns "$p")"
    f="$(floor "$p")"
    awk -v p="$p" -v ns="$ns" -v b="$(bytes "$p")" -v crc="$crc_ns" -v fl="$(median_ns "$f")" -v f="$f" \
        'BEGIN { printf "%-14s %12.1f %8.2f %16.3f %18s\n", p, ns, b / ns, ns / crc, sprintf("%.3f (%s)", ns / fl, f) }'
done
