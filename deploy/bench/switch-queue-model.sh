#!/usr/bin/env bash
# The switch program's queue model against the real shaper (docs/switch.md, "Accuracy"), as
# root: tx — router — rx in three namespaces, `rocev2d switch attach` on the router's port
# toward rx (RATE, BUFFER 512 KiB, SHAPER htb|tbf), iperf3 offering OFFER of 1400-byte UDP so
# the queue stays full, then SAMPLES pairs of (`switch stats` queue, `tc -s qdisc` backlog)
# read back to back, and the port's transmit rate over the sampling window. Prints a Markdown
# row: shaper, rate while backlogged, mean / min / max of (shaper backlog − model).
# ROCEV2D overrides the binary (default: a release build). Namespaces are removed on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."

[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 1; }
SHAPER=${SHAPER:-htb}
RATE=${RATE:-100mbit}
OFFER=${OFFER:-105M}
SAMPLES=${SAMPLES:-20}
if [ -z "${ROCEV2D:-}" ]; then
    cargo build --release -q -p rocev2d
    ROCEV2D="${CARGO_TARGET_DIR:-target}/release/rocev2d"
fi
N=$$
H0=swq-h0-$N R=swq-r-$N H1=swq-h1-$N
trap 'ip netns del $H0 2>/dev/null; ip netns del $R 2>/dev/null; ip netns del $H1 2>/dev/null; true' EXIT
for ns in $H0 $R $H1; do ip netns add $ns; ip -n $ns link set lo up; done
ip link add qa$N netns $H0 type veth peer name ra$N netns $R
ip link add qb$N netns $H1 type veth peer name rb$N netns $R
ip -n $H0 addr add 10.231.1.2/24 dev qa$N; ip -n $R addr add 10.231.1.1/24 dev ra$N
ip -n $H1 addr add 10.231.2.2/24 dev qb$N; ip -n $R addr add 10.231.2.1/24 dev rb$N
ip -n $H0 link set qa$N up; ip -n $R link set ra$N up; ip -n $R link set rb$N up; ip -n $H1 link set qb$N up
ip -n $H0 route add default via 10.231.1.1; ip -n $H1 route add default via 10.231.2.1
ip netns exec $R sysctl -qw net.ipv4.ip_forward=1

ip netns exec $R "$ROCEV2D" switch attach --iface rb$N --rate "$RATE" --buffer 512kb \
    --shaper "$SHAPER" >/dev/null 2>&1
ip netns exec $H1 iperf3 -s -1 -D -p 5299
sleep 0.3
ip netns exec $H0 iperf3 -c 10.231.2.2 -p 5299 -u -b "$OFFER" -l 1400 -t 6 >/dev/null 2>&1 &
sleep 1.5
ip netns exec $R python3 - "$ROCEV2D" "rb$N" "$SAMPLES" "$SHAPER" <<'PY'
import json, subprocess, sys, time
rocev2d, port, samples, shaper = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def tx_bytes():
    return int(open(f"/sys/class/net/{port}/statistics/tx_bytes").read())
def model():
    out = subprocess.run([rocev2d, "switch", "stats", "--iface", port, "--json"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["queue_bytes"]
def backlog():
    # The root qdisc's backlog in bytes (JSON: the text output rounds to "514Kb").
    out = subprocess.run(["tc", "-s", "-j", "qdisc", "show", "dev", port],
                         capture_output=True, text=True, check=True).stdout
    return next(q["backlog"] for q in json.loads(out) if q.get("root"))
t0, b0 = time.monotonic(), tx_bytes()
diffs = []
for _ in range(samples):
    m = model()
    diffs.append(backlog() - m)
    time.sleep(0.05)
rate = (tx_bytes() - b0) * 8 / (time.monotonic() - t0) / 1e6
mean = sum(diffs) / len(diffs)
print(f"| {shaper} | {rate:.3f} Mbit/s | {mean / 1000:+.1f} kB | {min(diffs) / 1000:+.1f} … {max(diffs) / 1000:+.1f} kB |")
PY
wait
ip netns exec $R "$ROCEV2D" switch detach --iface rb$N >/dev/null
