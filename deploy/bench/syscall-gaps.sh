#!/usr/bin/env bash
# Where a busy-polled round trip spends its time, from the outside: runs dp_pingpong --acks
# first (the datapath alone, RC's four frames) and rc_pingpong --poll spin between the two
# namespaces of a pair testbed, records the `sendto` (AF_XDP kick) and `sched_yield` syscall
# tracepoints of both sides for WINDOW seconds mid-run (`perf record -a`), and prints, per tool
# and per side, the median of:
#   - `sendto`: one kick (in copy mode it carries the frame through veth and the peer's steering
#     program into its ring);
#   - `yield`: one sched_yield;
#   - `look`: user time from one sched_yield to the next (a busy-polled look that found nothing);
#   - `rx->kick`: from the sched_yield before a frame was seen to the kick that follows (receive,
#     handle, build the ACK);
#   - `kick->kick`: between two kicks in a row (the ACK's, then the answer's: the application
#     takes its completion and posts);
# and the round trip's median. A side's excess over dp_pingpong's in `rx->kick` and
# `kick->kick` is what the stack adds per message (BENCHMARKS.md, "What the stack adds to a
# busy-polled round trip"). SIZE (default 64), ITERS (default 200000, enough to outlast the
# window), DATAPATH (default xdp), WINDOW (default 0.3). Root (network namespaces, perf -a).
set -euo pipefail
cd "$(dirname "$0")/../.."

SIZE=${SIZE:-64}
ITERS=${ITERS:-200000}
DATAPATH=${DATAPATH:-xdp}
WINDOW=${WINDOW:-0.3}
# shellcheck source=pair.sh
. deploy/bench/pair.sh gaps
need perf

# The gaps of tool $1 (further arguments to both sides).
gaps() {
    local tool=$1
    shift
    in_h1 "$BIN/$tool" -d "$IF1" --datapath "$DATAPATH" "$@" -s "$SIZE" -n "$ITERS" >/dev/null &
    sleep 0.5
    in_h0 "$BIN/$tool" -d "$IF0" --datapath "$DATAPATH" "$@" -s "$SIZE" -n "$ITERS" 10.0.0.2 >"$OUT/cli" &
    local cli=$!
    sleep 1
    perf record -q -a -o "$OUT/perf.data" \
        -e syscalls:sys_enter_sendto -e syscalls:sys_exit_sendto \
        -e syscalls:sys_enter_sched_yield -e syscalls:sys_exit_sched_yield \
        -- sleep "$WINDOW" >/dev/null 2>&1
    wait "$cli"
    wait
    local rtt
    rtt=$(awk '/^round trip/ { print $4 }' "$OUT/cli")
    # One line per sample: "tid measure µs"; then the median per (tid, measure).
    perf script --ns -i "$OUT/perf.data" -F comm,tid,time,event 2>/dev/null |
        awk -v comm="$tool" '$1 == comm {
            tid = $2; t = $3; sub(/:$/, "", t); t *= 1e6; ev = $4
            kind = (ev ~ /sendto/) ? "sendto" : "yield"
            if (ev ~ /sys_enter/) {
                if (tid in last) {
                    m = ""
                    if (lastkind[tid] == "yield" && kind == "yield") m = "look"
                    if (lastkind[tid] == "yield" && kind == "sendto") m = "rx->kick"
                    if (lastkind[tid] == "sendto" && kind == "sendto") m = "kick->kick"
                    if (m != "") print tid, m, t - last[tid]
                }
                enter[tid] = t
            } else if (tid in enter) {
                print tid, kind, t - enter[tid]
                last[tid] = t; lastkind[tid] = kind
            }
        }' | sort -k1,1 -k2,2 -k3,3g |
        awk -v tool="$tool" -v rtt="$rtt" '
            function flush() { if (n) med[cur] = sprintf("%.2f", v[int((n - 1) / 2)]) }
            { k = $1 " " $2
              if (k != cur) { flush(); cur = k; n = 0; if (!($1 in seen)) { seen[$1]; order[++sides] = $1 } }
              v[n++] = $3 }
            END { flush()
                  split("sendto yield look rx->kick kick->kick", m, " ")
                  for (i = 1; i <= sides; i++) {
                      row = sprintf("| %s | side %d | %s |", tool, i, rtt)
                      for (j = 1; j <= 5; j++) { k = order[i] " " m[j]; row = row " " ((k in med) ? med[k] : "-") " |" }
                      print row } }'
}

echo "| tool | side | round trip median µs | sendto | yield | look | rx->kick | kick->kick |"
echo "|---|---|---|---|---|---|---|---|"
gaps dp_pingpong --acks first
gaps rc_pingpong --poll spin --lat
