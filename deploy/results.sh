#!/usr/bin/env bash
# One command that regenerates every measured row of docs/results.md: the model's experiments
# (CSV + SVG), the model tests that print a row's numbers, the scenario runs and, as root with
# --testbed, the testbed experiments with the real daemons and switch programs. Each row's
# command in docs/results.md is one of the steps below; the output of each lands in its own
# folder or log under OUT, named after the step.
#
#   bash deploy/results.sh                  # CI sizes: a few minutes on a laptop
#   bash deploy/results.sh --papers         # the papers' sizes (1024-host Clos, the grids)
#   sudo bash deploy/results.sh --testbed   # also the testbed experiments (root, ~1 h)
#   options: --out DIR (default out/results), --jobs N (model points at once; default all CPUs)
#
# The model is deterministic: the same command gives the same CSVs on any machine and with any
# --jobs. The testbed runs measure real processes and vary from run to run (docs/experiments.md).
set -euo pipefail
cd "$(dirname "$0")/.."

papers=0 testbed=0 out=out/results jobs=()
while [ $# -gt 0 ]; do
    case "$1" in
        --papers) papers=1 ;;
        --testbed) testbed=1 ;;
        --out) out="$2"; shift ;;
        --jobs) jobs=(--jobs "$2"); shift ;;
        *) echo "usage: $0 [--papers] [--testbed] [--out DIR] [--jobs N]" >&2; exit 2 ;;
    esac
    shift
done
if [ "$testbed" = 1 ] && [ "$(id -u)" != 0 ]; then
    echo "--testbed needs root (network namespaces, eBPF switch programs)" >&2
    exit 1
fi
if [ "$(id -u)" = 0 ]; then
    bash deploy/prereqs.sh experiment
fi
command -v cargo >/dev/null || export PATH="$HOME/.cargo/bin:$PATH" # rustup just installed it
mkdir -p "$out"

# Runs one step, its output teed into OUT/NAME.log; a failing step stops the script.
step() {
    local name=$1
    shift
    echo "== $name: $*"
    local start=$SECONDS
    "$@" 2>&1 | tee "$out/$name.log"
    echo "== $name: done in $((SECONDS - start)) s"
}

cargo build --release -q -p rocev2-sim --bins
sim=target/release/rocev2-sim

# Seeds 000, 001 and 002/004: many_flows, dart_incast, fairness, dcqcn_plus_grid, dart_clos,
# dart_clos_sensitivity (the 1024-host Clos with --papers; the 32-host one otherwise), mp_clos.
size=(--quick)
[ "$papers" = 1 ] && size=()
step experiments "$sim" experiments "${size[@]}" "${jobs[@]}" --out "$out/experiments"

# Rows measured by model tests (they print their numbers with --nocapture); the filter is the
# test's path in the model's one test binary, `suite` (its file, then its name).
model_test() {
    step "$1" cargo test --release -q -p rocev2-sim --test suite "$2" -- --nocapture
}
model_test iofd iofd::
model_test dvl dvl::
model_test mp_ip_id_loss ip_id_drop_rule
model_test mp_lossy_path multipath::mp_lossy_path_doubles_dcqcn
model_test dasr_second_flow cc_validation::dasr_second_flow

# Seed 001 §5.1.1 at the scenario's length.
step mp_rdma_lossy_paths "$sim" run -q deploy/scenarios/mp_rdma_lossy_paths.toml --no-plots \
    --out "$out/mp_rdma_lossy_paths"

if [ "$testbed" = 1 ]; then
    cargo build --release -q -p rocev2-testbed -p rocev2d -p rocev2-wiretest --bins
    for e in deploy/experiments/*.toml; do
        name=$(basename "$e" .toml)
        short=(--short)
        [ "$papers" = 1 ] && short=()
        step "testbed_$name" target/release/rocev2-testbed run "$e" --out "$out/testbed/$name" \
            "${short[@]}"
    done
fi
echo "results in $out (docs/results.md says which file holds each row)"
