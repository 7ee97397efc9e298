#!/usr/bin/env bash
# The rocev2 API's costs, between the two namespaces of a pair testbed (one veth link,
# MTU 4200), UDP datapath, as root, in one run of rocev2's api_bench example
# (rocev2d/verbs/examples/api_bench.rs; device A in h0, device B opened from a thread moved into
# h1's namespace):
#   - idle: CPU of the process, in % of one core, while a task awaits the completion stream of
#     a CQ on which nothing arrives, for IDLE seconds (default 5), progress threads in the default adaptive mode
#     (goal: 1% or less);
#   - async against blocking: median 64 B SEND ping-pong round trip over ITERS round trips
#     (default 20000), progress threads busy-polling, A reaping with Device::wait_cq, then with
#     next_completion on a tokio runtime; the difference (goal: +2 µs or less);
#   - progress thread against caller-driven: the blocking ping-pong with a busy-polling
#     progress thread and with ProgressMode::Caller; the ratio (goal: 1.10 or less).
# Prints the numbers and the ratios. The testbed goes away on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."

ITERS=${ITERS:-20000}
IDLE=${IDLE:-5}
# UDP datapath only: built without the `xdp` feature (no nightly, no eBPF build).
PACKAGES="-p rocev2 --no-default-features --features rocev2/tokio --examples"
# shellcheck source=pair.sh
. deploy/bench/pair.sh api

NS1=$(in_h1 sh -c 'ip netns identify $$')
in_h0 "$BIN/examples/api_bench" --a "$IF0" --b "$IF1" --b-netns "$NS1" \
    --iters "$ITERS" --idle-secs "$IDLE"
