#!/usr/bin/env bash
# Fuzz smoke run: every cargo-fuzz target of every fuzz crate (rocev2d/core/fuzz: wire, transport,
# engine, mad, cm (the CM behind QP1); rocev2d/daemon/fuzz: the configuration file, the control protocol) for a bounded time, failing on the first
# crash (a panic, an assertion in the target, or a sanitizer report).
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

ran=0
for crate in "$root/rocev2d/core" "$root/rocev2d/daemon"; do
    cd "$crate"
    mapfile -t targets < <(cargo +nightly fuzz list)
    if [ "${#targets[@]}" -eq 0 ]; then
        echo "fuzz-smoke: no fuzz targets found in $crate/fuzz" >&2
        exit 1
    fi
    for t in "${targets[@]}"; do
        echo "==> fuzz target '$t' ($crate) for ${FUZZ_SECONDS}s"
        mkdir -p "fuzz/corpus/$t"
        dirs=("fuzz/corpus/$t")
        [ -d "fuzz/seeds/$t" ] && dirs+=("fuzz/seeds/$t")
        # -max_total_time bounds the run; -timeout flags a single input that hangs; the RSS
        # limit turns runaway allocation into a reported crash instead of an OOM kill.
        if ! cargo +nightly fuzz run "$t" "${dirs[@]}" -- \
            -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1; then
            echo "fuzz-smoke: target '$t' FAILED; reproducer in $crate/fuzz/artifacts/$t/" >&2
            exit 1
        fi
        ran=$((ran + 1))
    done
done
echo "fuzz-smoke: $ran targets ran ${FUZZ_SECONDS}s each without a crash"
