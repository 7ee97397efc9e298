#!/usr/bin/env bash
# Fuzz smoke run: every cargo-fuzz target of every fuzz crate (rocev2d/core/fuzz: wire,
# transport, engine, mad, cm (the CM behind QP1); rocev2d/daemon/fuzz: the configuration file,
# the control protocol) for a bounded time, failing on the first crash (a panic, an assertion
# in the target, or a sanitizer report). Targets run as many at a time as there are cores; the
# builds go to target/fuzz.
#
#   FUZZ_SECONDS=20   seconds per target (default 20)
#
# Each target starts from its corpus (<crate>/fuzz/corpus/<target>, kept between runs,
# git-ignored) plus the committed seeds (<crate>/fuzz/seeds/<target>: real rxe frames from
# ../shared/captures, example configuration files). A crash leaves its input in
# <crate>/fuzz/artifacts/<target>/; turn it into a unit test with the input inline (STYLE §4.3)
# before fixing the parser.
set -euo pipefail

FUZZ_SECONDS="${FUZZ_SECONDS:-20}"
case "$FUZZ_SECONDS" in
'' | *[!0-9]*)
    echo "fuzz-smoke: FUZZ_SECONDS must be a whole number of seconds, got '$FUZZ_SECONDS'" >&2
    exit 2
    ;;
esac

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# cargo-fuzz needs a nightly toolchain (libFuzzer instrumentation, -Zsanitizer).
if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz-smoke: installing the nightly toolchain"
    rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz-smoke: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

# One target dir for both fuzz crates: the libFuzzer runtime, a minute of C++ on one core, and
# the crates they share build once, not twice, as long as the two lockfiles hold the same
# versions of them (a version only one of them has builds on its own).
target_dir="$root/target/fuzz"

# Every crate's targets build first, then run as many at a time as there are cores: a run is
# bounded by wall time, and each target has a core of its own.
crates=() targets_all=()
for crate in "$root/rocev2d/core" "$root/rocev2d/daemon"; do
    cd "$crate"
    mapfile -t targets < <(cargo +nightly fuzz list)
    if [ "${#targets[@]}" -eq 0 ]; then
        echo "fuzz-smoke: no fuzz targets found in $crate/fuzz" >&2
        exit 1
    fi
    echo "==> building the fuzz targets of $crate: ${targets[*]}"
    cargo +nightly fuzz build --target-dir "$target_dir"
    for t in "${targets[@]}"; do
        crates+=("$crate")
        targets_all+=("$t")
    done
done

logs="$(mktemp -d)"
# On a failure, the targets still running stop with the script.
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$logs"' EXIT

# Target i of the list, its output in $logs/i.
run_target() {
    local i="$1" crate="${crates[$1]}" t="${targets_all[$1]}"
    cd "$crate"
    mkdir -p "fuzz/corpus/$t"
    local dirs=("fuzz/corpus/$t")
    [ -d "fuzz/seeds/$t" ] && dirs+=("fuzz/seeds/$t")
    # -max_total_time bounds the run; -timeout flags a single input that hangs; the RSS limit
    # turns runaway allocation into a reported crash instead of an OOM kill.
    cargo +nightly fuzz run --target-dir "$target_dir" "$t" "${dirs[@]}" -- \
        -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        >"$logs/$i" 2>&1
}

# Waits for one running target; prints its output and fails on its failure.
declare -A running=() # pid -> index into crates/targets_all
reap() {
    local pid rc=0
    wait -n -p pid || rc=$?
    local i="${running[$pid]}"
    local crate="${crates[$i]}" t="${targets_all[$i]}"
    unset "running[$pid]"
    echo "==> fuzz target '$t' ($crate), ${FUZZ_SECONDS}s"
    cat "$logs/$i"
    if [ "$rc" -ne 0 ]; then
        echo "fuzz-smoke: target '$t' FAILED; reproducer in $crate/fuzz/artifacts/$t/" >&2
        exit 1
    fi
}

jobs_max="$(nproc)"
for i in "${!targets_all[@]}"; do
    [ "${#running[@]}" -lt "$jobs_max" ] || reap
    run_target "$i" &
    running[$!]="$i"
done
while [ "${#running[@]}" -gt 0 ]; do
    reap
done
echo "fuzz-smoke: ${#targets_all[@]} targets ran ${FUZZ_SECONDS}s each without a crash"
