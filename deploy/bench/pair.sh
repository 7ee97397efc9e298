# shellcheck shell=bash
# Sourced by the bench scripts that measure on a pair testbed (one veth link, MTU 4200, h0
# 10.0.0.1 <-> h1 10.0.0.2): checks root, builds the release binaries of the packages in
# PACKAGES, brings the testbed up as "$1" plus a number, and defines BIN, TB, NAME, OUT (a
# scratch folder), IF0 and IF1 (each host's interface), in_h0/in_h1 (run a command in a host),
# start_daemons/stop_daemons (a `rocev2d run` in each host),
# wait_port (until h1 listens on a TCP port), need (a program of deploy/tools.list, or fail with
# its install line), write_bw_run and iperf3_run (one transfer from h0 to h1, to PEER: default
# 10.0.0.2, fd00::2 for IPv6). On exit, ON_EXIT runs (if the script set it), then the testbed
# and OUT go away, also on failure.
#
# QPS, when set above 1, gives each veth end that many queues (`numtxqueues`/`numrxqueues`) and
# makes write_bw_run run `write_bw -q QPS`: one QP per engine shard, shard k on queue k.
#
# TREE, when set, is another checkout (e.g. a worktree of an older commit, for a before/after):
# the packages of PACKAGES are built there, in its own target/, and BIN points at them; the
# testbed tool is still this tree's.
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 1; }
# shellcheck disable=SC2086 # one word per package
cargo build --release -q ${PACKAGES:--p rocev2-examples} -p rocev2-testbed --bins
BIN="${CARGO_TARGET_DIR:-target}/release"
TB="$BIN/rocev2-testbed"
if [ -n "${TREE:-}" ]; then
    # shellcheck disable=SC2086
    (cd "$TREE" && env -u CARGO_TARGET_DIR cargo build --release -q ${PACKAGES:--p rocev2-examples} --bins)
    BIN="$(cd "$TREE" && pwd)/target/release"
fi
NAME="$1$(($$ % 1000))"
OUT=$(mktemp -d)
# `rocev2d run --iface <the host's interface> "$@"` in h0 and in h1, until both serve (logs in
# $OUT/daemon-h0.log and daemon-h1.log); DAEMONS holds the testbed tool's pid of each.
DAEMONS=()
start_daemons() {
    local h
    for h in h0 h1; do
        # A log of an earlier daemon would say "serving" before this one does.
        rm -f "$OUT/daemon-$h.log"
        "$TB" exec "$NAME" "$h" -- "$BIN/rocev2d" run --iface "$(ifname "$h")" "$@" \
            >"$OUT/daemon-$h.log" 2>&1 &
        DAEMONS+=($!)
    done
    for h in h0 h1; do
        for _ in $(seq 100); do
            grep -qs '^rocev2d: serving' "$OUT/daemon-$h.log" && break
            sleep 0.1
        done
        grep -qs '^rocev2d: serving' "$OUT/daemon-$h.log" || {
            echo "the daemon of $h does not serve:" >&2
            cat "$OUT/daemon-$h.log" >&2
            return 1
        }
    done
}
# Stops the daemons and waits until they are gone, so an in-process run after them finds the
# interfaces free; the testbed tool does not pass signals on, so its child is the one killed.
# Also runs on exit.
stop_daemons() {
    local p c
    for p in "${DAEMONS[@]}"; do
        for c in $(pgrep -P "$p"); do kill "$c" 2>/dev/null || true; done
    done
    for p in "${DAEMONS[@]}"; do wait "$p" 2>/dev/null || true; done
    DAEMONS=()
}
trap 'stop_daemons; eval "${ON_EXIT:-}"; "$TB" down "$NAME" >/dev/null 2>&1 || true; rm -rf "$OUT"' EXIT
QPS=${QPS:-1}
TOPOLOGY=deploy/testbeds/pair.toml
if [ "$QPS" -gt 1 ]; then
    TOPOLOGY="$OUT/pair-$QPS-queues.toml"
    sed "/^\[topology.link\]/a queues = $QPS" deploy/testbeds/pair.toml >"$TOPOLOGY"
fi
"$TB" up "$TOPOLOGY" --name "$NAME" >/dev/null
ifname() { "$TB" exec "$NAME" "$1" -- ip -o link show | awk -F': ' '$2 != "lo" { sub(/@.*/, "", $2); print $2; exit }'; }
IF0=$(ifname h0)
IF1=$(ifname h1)
in_h0() { "$TB" exec "$NAME" h0 -- "$@"; }
in_h1() { "$TB" exec "$NAME" h1 -- "$@"; }
wait_port() {
    for _ in $(seq 100); do
        in_h1 ss -Hltn "sport = :$1" | grep -q . && return 0
        sleep 0.1
    done
    echo "nothing listens on $1 in h1" >&2
    return 1
}
need() {
    command -v "$1" >/dev/null && return 0
    local pkg
    pkg=$(awk -v p="$1" '$1 == p { print $2 }' deploy/tools.list)
    echo "$1 is missing: deploy/tools.list's package ${pkg:-(none)}; bash deploy/prereqs.sh installs it" >&2
    exit 1
}
# The words of the arrays WRAP0 and WRAP1, when a script sets them, go before the program each
# transfer runs in h0 and in h1 (e.g. `perf stat … --`).
WRAP0=()
WRAP1=()
CLIENT_ARGS=()
# One write_bw over datapath $1: h0 WRITEs 64 KiB $2 times (on each of QPS QPs) to h1; further
# arguments go to both sides, the words of the array CLIENT_ARGS (when a script sets it) to the
# client in h0 only. Prints the client's output; `awk '$1 == 65536 { print $4 }'` reads
# its Gbit/s (all QPs together).
write_bw_run() {
    local dp=$1 n=$2
    shift 2
    if [ "$QPS" -gt 1 ]; then
        set -- -q "$QPS" "$@"
    fi
    in_h1 "${WRAP1[@]}" "$BIN/write_bw" -d "$IF1" --datapath "$dp" "$@" >/dev/null &
    local srv=$!
    wait_port 18515
    in_h0 "${WRAP0[@]}" "$BIN/write_bw" -d "$IF0" --datapath "$dp" "$@" "${CLIENT_ARGS[@]}" -s 65536 -n "$n" "${PEER:-10.0.0.2}"
    wait "$srv"
}
# One iperf3 TCP stream from h0 to h1, the client's arguments "$@"; prints the client's output.
iperf3_run() {
    need iperf3
    in_h1 "${WRAP1[@]}" iperf3 -s -1 >/dev/null &
    local srv=$!
    wait_port 5201
    in_h0 "${WRAP0[@]}" iperf3 -c "${PEER:-10.0.0.2}" "$@"
    wait "$srv"
}
