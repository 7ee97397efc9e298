#!/usr/bin/env bash
# A/B of the wire hot paths: this tree against a base revision, runs alternating (base, head,
# base, head, ...) so both see the same machine load, each run printing its own ratios through
# `wire-ratio.sh` (the references are measured in the same run). Prints, per side, the min and
# median over the runs of `build_icrc` / `copy_crc32`, `build_template` / `copy_crc32` (the
# engine's way to build a frame; "-" for a tree without it) and `parse_verify` / `plain_crc32`.
#
# Usage: deploy/bench/wire-ab.sh [BASE_REV] [criterion args...]   (BASE_REV defaults to main)
# Env: RUNS (default 5); BASE_DIR to reuse an extracted, already built base tree.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
base_rev="${1:-main}"
shift || true
runs="${RUNS:-5}"
base_dir="${BASE_DIR:-}"
if [ -z "$base_dir" ]; then
    base_dir="$(mktemp -d)"
    git archive "$base_rev" | tar -x -C "$base_dir"
fi
echo "wire-ab: base $base_rev in $base_dir, head $(git rev-parse --short HEAD) (+ work tree), $runs runs each"

# One run of wire-ratio.sh in tree $1; prints "build_over_copy template_over_copy parse_over_crc".
one() {
    local out
    out="$(cd "$1" && CARGO_TARGET_DIR="$1/target" bash deploy/bench/wire-ratio.sh "${@:2}" 2>/dev/null)"
    echo "$out" | awk '/^build_icrc/ { b = $5 } /^build_template/ { t = $5 } /^parse_verify/ { p = $4 }
        END { print b, (t == "" ? "-" : t), p }'
}

summary() { # label, file with "build template parse" lines
    awk -v l="$1" '{ b[NR] = $1; t[NR] = $2; p[NR] = $3 }
        function med(a, n,   i, j, x) {
            for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { x = a[i]; a[i] = a[j]; a[j] = x }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        END { n = NR; mb = med(b, n); mp = med(p, n)
              # med() sorts its array, so [1] is the minimum afterwards.
              if (t[1] == "-") tt = "-"; else { mt = med(t, n); tt = sprintf("min %.3f median %.3f", t[1], mt) }
              printf "%-6s build_icrc/copy_crc32 min %.3f median %.3f | build_template/copy_crc32 %s | parse_verify/plain_crc32 min %.3f median %.3f\n", l, b[1], mb, tt, p[1], mp }' "$2"
}

a="$(mktemp)"
b="$(mktemp)"
for i in $(seq "$runs"); do
    r="$(one "$base_dir" "$@")"
    echo "run $i base: $r (load $(cut -d' ' -f1-3 /proc/loadavg))"
    echo "$r" >>"$a"
    r="$(one "$root" "$@")"
    echo "run $i head: $r (load $(cut -d' ' -f1-3 /proc/loadavg))"
    echo "$r" >>"$b"
done
summary base "$a"
summary head "$b"
rm -f "$a" "$b"
