#!/usr/bin/env bash
# One command from a fresh Debian machine to a plotted testbed experiment (docs/experiments.md):
# installs what it needs (deploy/prereqs.sh experiment, idempotent), builds the runner and the
# programs it starts in release mode, and runs `rocev2-testbed run` with the arguments given.
#
#   sudo bash deploy/experiment.sh deploy/experiments/dcqcn_incast.toml --out out/dcqcn_incast
#
# Root: the testbed is network namespaces and eBPF switch programs.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
    echo "usage: $0 EXPERIMENT.toml [--out DIR] [--short]" >&2
    exit 2
fi
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces, eBPF switch programs)" >&2; exit 1; }
bash deploy/prereqs.sh experiment
command -v cargo >/dev/null || export PATH="$HOME/.cargo/bin:$PATH" # rustup just installed it
cargo build --release -q -p rocev2-testbed -p rocev2d -p rocev2-wiretest -p rocev2-sim --bins
exec target/release/rocev2-testbed run "$@"
