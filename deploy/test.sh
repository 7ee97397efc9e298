#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run): prerequisites, the docs check, format, lints (which
# type-check the benchmarks too: --all-targets), tests (interop tests may not skip:
# ROCEV2_REQUIRE_TOOLS=1), docs, fuzz smoke.
# Stops at the first failing step and names it.
set -euo pipefail
cd "$(dirname "$0")/.."

STEP="start"
START=$SECONDS
STEP_START=$SECONDS
PASSED=0
# "<seconds> <step>" per passed step, printed at the end: the suite must stay under 25 minutes
# on CI's 2 cores, and this says which step to look at when it grows.
TIMES=()
on_exit() {
    local rc=$?
    [ "$rc" -eq 0 ] || printf '\ntest.sh: FAILED at step "%s" (exit %d)\n' "$STEP" "$rc" >&2
}
trap on_exit EXIT

step() {
    STEP="$1"
    STEP_START=$SECONDS
    printf '\n==> %s\n' "$STEP"
}
ok() {
    PASSED=$((PASSED + 1))
    TIMES+=("$(printf '%5ds  %s' "$((SECONDS - STEP_START))" "$STEP")")
}

# A build from scratch (CI's clean clone) only writes incremental caches, never reads them:
# without them the workspace's own crates build ~17% faster (their part of the test build:
# 228 against 275 s on two cores). An existing target dir (CARGO_TARGET_DIR's, if set) keeps
# them for its next build.
[ -d "${CARGO_TARGET_DIR:-target}/debug/incremental" ] || export CARGO_INCREMENTAL=0

step "prerequisites (deploy/prereqs.sh)"
bash deploy/prereqs.sh
command -v cargo >/dev/null || export PATH="$HOME/.cargo/bin:$PATH" # rustup just installed it
ok

step "external programs the tests run are installed (deploy/prereqs.sh check)"
bash deploy/prereqs.sh check
ok

step "ground-truth captures present (../shared/captures)"
if ! ls ../shared/captures/*.pcap >/dev/null 2>&1; then
    echo "../shared/captures/*.pcap not found: the shared folder must sit beside the repository" >&2
    exit 1
fi
ok

# It builds the test binaries (cargo test --no-run) to check the tools' --help, so the test
# step below builds nothing more.
step "docs name only what exists (deploy/docs-check.sh)"
bash deploy/docs-check.sh
ok

step "cargo fmt --all -- --check"
cargo fmt --all -- --check
ok

# The kernel programs (rocev2-ebpf) only build for the BPF target: the host steps exclude them
# and one step lints them for bpfel-unknown-none. The loader's build script compiles them.
HOST=(--workspace --exclude rocev2-ebpf)

step "cargo clippy (host crates) --all-targets --all-features -- -D warnings"
cargo clippy "${HOST[@]}" --all-targets --all-features -- -D warnings
ok

# AF_XDP sits behind the default `xdp` feature of rocev2-datapath and rocev2, so that everything
# but it builds on stable without bpf-linker (the loader's build script needs it). Checked with
# a PATH holding the stable toolchain and the system only, in the workspace's target dir: the
# dependencies clippy checked are not checked again, and the loader is not among these crates.
step "crates above the core build without bpf-linker (cargo check --no-default-features)"
STABLE_BIN="$(rustc +stable --print sysroot)/bin"
env PATH="/usr/bin:/bin:$STABLE_BIN" bash -c '
    if command -v bpf-linker >/dev/null; then
        echo "bpf-linker is reachable at $(command -v bpf-linker): the check would prove nothing" >&2
        exit 1
    fi
    cargo check -p rocev2-datapath -p rocev2 --no-default-features --all-targets'
ok

# The user API builds with the minimum supported Rust version the workspace states.
MSRV=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
step "rocev2 builds with the MSRV (cargo +$MSRV check -p rocev2 --no-default-features --features tokio,serde)"
cargo "+$MSRV" check -p rocev2 --no-default-features --features tokio,serde --target-dir target/msrv
ok

step "cargo +nightly clippy -p rocev2-ebpf --target bpfel-unknown-none -- -D warnings"
cargo +nightly clippy -p rocev2-ebpf --target bpfel-unknown-none -Z build-std=core -- -D warnings
ok

# The daemon's switch scenarios also run rocev2-wiretest, whose path Cargo gives only to its own
# package's tests: they look for it beside rocev2d. This step builds it (its own scenarios need
# it), and Cargo builds everything before it runs any test.
step "cargo test (host crates) --all-features (ROCEV2_REQUIRE_TOOLS=1)"
export ROCEV2_REQUIRE_TOOLS=1
cargo test "${HOST[@]}" --all-features
ok

# No `cargo bench --no-run`: clippy's --all-targets has type-checked every bench, and a release
# build of them all took 4.6 of CI's 25 minutes; the bench scripts build what they run.
# --all-features as the tests, so the docs of every feature's API are checked too.
step "cargo doc (host crates) --all-features --no-deps (RUSTDOCFLAGS=-D warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc "${HOST[@]}" --all-features --no-deps
ok

# 10 s per target: a smoke run that each target still starts, parses and survives (seven
# targets, as many at a time as there are cores). Longer runs: FUZZ_SECONDS=300
# deploy/fuzz-smoke.sh.
step "fuzz smoke run (FUZZ_SECONDS=10 deploy/fuzz-smoke.sh)"
FUZZ_SECONDS=10 bash deploy/fuzz-smoke.sh
ok

STEP="done"
printf '\ntest.sh: seconds per step\n'
printf '%s\n' "${TIMES[@]}"
printf '\ntest.sh: all %d steps passed in %ds\n' "$PASSED" "$((SECONDS - START))"
