#!/usr/bin/env bash
# CPU per byte moved, rocev2 against the kernel's TCP, on a pair testbed (one veth link, MTU
# 4200), as root: write_bw (64 KiB RDMA WRITEs x WRITES, one QP; default 16384 = 1
# GiB) over each datapath of DATAPATHS (default "xdp packet udp") and iperf3 (one TCP stream,
# the same number of bytes, `-n`), each side under `perf stat -e task-clock,cycles`.
#
# task-clock is the CPU time (user + system) of the process and its threads, from exec to exit,
# including softirq work the kernel runs in its context (on veth, the sender's transmit runs
# the receiving side's softirq). Each transfer is also run with SETUP_WRITES blocks (default
# 16, 1 MiB), and the per-byte figures are (full run - short run) / (bytes beyond the short
# run's), so fixed costs (AF_XDP's program, UMEM and sockets: ~0.07 s per side) do not count
# as per-byte cost. Prints a Markdown table: bytes, goodput, CPU s of the sender and of the
# receiver, both sides' CPU s in the short run, CPU ns per byte (both sides), cycles per byte
# when the machine counts cycles (a virtual machine without a PMU: `perf stat -e cycles` says
# <not supported>, printed "-"), and ns per byte as a ratio to TCP's of the same run and to
# the datapath's own: dp_stream (raw 4096-byte frames, no engine, its receiver busy-polling)
# moving the same bytes over the same datapath, measured the same way.
#
# WAIT (default adaptive) is write_bw's wait mode on both sides (`--poll`: sleep, adaptive,
# spin): what waiting costs per byte.
#
# Not counted, for both: kernel work outside the two processes (softirq work that ksoftirqd or
# another CPU picks up). TREE=<checkout> runs another tree's binaries (pair.sh): before/after.
set -euo pipefail
cd "$(dirname "$0")/../.."

DATAPATHS=${DATAPATHS:-xdp packet udp}
WRITES=${WRITES:-16384}
SETUP_WRITES=${SETUP_WRITES:-16}
WAIT=${WAIT:-adaptive}
# shellcheck source=pair.sh
. deploy/bench/pair.sh cpb
need perf
BYTES=$((65536 * WRITES))
SETUP_BYTES=$((65536 * SETUP_WRITES))
load0=$(cut -d' ' -f1-3 /proc/loadavg)

# Runs transfer command "$@" with each side under perf stat; prints "gbps s0 c0 s1 c1": the
# goodput its client printed, then CPU seconds and cycles ("-" if not counted) of h0 and h1.
measured() {
    local gbps
    # shellcheck disable=SC2054 # -x, is one word: perf's field separator
    WRAP0=(perf stat -x, -o "$OUT/h0.stat" -e task-clock,cycles --)
    # shellcheck disable=SC2054
    WRAP1=(perf stat -x, -o "$OUT/h1.stat" -e task-clock,cycles --)
    gbps=$("$@")
    WRAP0=()
    WRAP1=()
    # perf stat -x, lines: value,unit,event,…; task-clock in msec; cycles "<not supported>".
    local side s c
    printf '%s' "$gbps"
    for side in h0 h1; do
        read -r s c < <(awk -F, '$3 ~ /^task-clock/ { ms = $1 }
            $3 ~ /^cycles/ { c = ($1 ~ /^[0-9]/) ? $1 : "-" }
            END { printf "%.3f %s\n", ms / 1000, c }' "$OUT/$side.stat")
        printf ' %s %s' "$s" "$c"
    done
    echo
}
# One transfer of $1 64 KiB blocks: write_bw over datapath $2, iperf3 when $2 is "tcp", or
# dp_stream over datapath D when $2 is "dp:D".
transfer() {
    if [ "$2" = tcp ]; then
        iperf3_run -n $((65536 * $1)) -f g | awk '/receiver/ { print $(NF-2) }'
    elif [ "${2%%:*}" = dp ]; then
        in_h1 "${WRAP1[@]}" "$BIN/dp_stream" -d "$IF1" --datapath "${2#dp:}" >"$OUT/dps" &
        local srv=$!
        wait_port 18517
        in_h0 "${WRAP0[@]}" "$BIN/dp_stream" -d "$IF0" --datapath "${2#dp:}" -n $((16 * $1)) 10.0.0.2 >/dev/null
        wait "$srv"
        awk '/^goodput:/ { print $2 }' "$OUT/dps"
    else
        write_bw_run "$2" "$1" --poll "$WAIT" | awk '$1 == 65536 { print $4 }'
    fi
}

# "ns cycles" per byte, both sides, of a transfer: the full run less the setup run, over the
# bytes the full run moved beyond the setup run's; "gbps s0 c0 s1 c1" of each as arguments.
per_byte() {
    local s0 c0 s1 c1 t0 k0 t1 k1
    read -r _ s0 c0 s1 c1 <<<"$1"
    read -r _ t0 k0 t1 k1 <<<"$2"
    awk -v b=$((BYTES - SETUP_BYTES)) -v s="$s0 $s1 $t0 $t1" -v c="$c0 $c1 $k0 $k1" 'BEGIN {
        split(s, t); split(c, k)
        ns = (t[1] + t[2] - t[3] - t[4]) * 1e9 / b
        cyc = (c ~ /-/) ? "-" : sprintf("%.2f", (k[1] + k[2] - k[3] - k[4]) / b)
        printf "%.3f %s\n", ns, cyc
    }'
}

declare -A full setup
need iperf3
WHAT="tcp"
for dp in $DATAPATHS; do WHAT="$WHAT dp:$dp $dp"; done
for what in $WHAT; do
    setup[$what]=$(measured transfer "$SETUP_WRITES" "$what")
    full[$what]=$(measured transfer "$WRITES" "$what")
done
read -r tcp_ns _ < <(per_byte "${full[tcp]}" "${setup[tcp]}")

echo "Binaries of $(git -C "${TREE:-.}" rev-parse --short HEAD); load average before: $load0, after: $(cut -d' ' -f1-3 /proc/loadavg)."
echo
echo "| sender -> receiver | bytes moved | Gbit/s | CPU s, sender | CPU s, receiver | CPU s, both, $((SETUP_BYTES / 1024)) KiB run | CPU ns per byte, both | cycles per byte, both | ns per byte / TCP's | ns per byte / dp_stream's |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for what in $WHAT; do
    case $what in
    tcp) label="iperf3, one TCP stream" ;;
    dp:*) label="dp_stream, ${what#dp:} (no engine)" ;;
    *) label="write_bw, $what, 1 QP, $WAIT" ;;
    esac
    read -r g s0 _ s1 _ <<<"${full[$what]}"
    read -r _ t0 _ t1 _ <<<"${setup[$what]}"
    read -r ns cyc < <(per_byte "${full[$what]}" "${setup[$what]}")
    dns=-
    [ "$what" = tcp ] || read -r dns _ < <(per_byte "${full[dp:${what#dp:}]}" "${setup[dp:${what#dp:}]}")
    awk -v l="$label" -v b="$BYTES" -v g="$g" -v s0="$s0" -v s1="$s1" -v t="$t0 $t1" \
        -v ns="$ns" -v cyc="$cyc" -v tns="$tcp_ns" -v dns="$dns" 'BEGIN {
            split(t, u)
            printf "| %s | %d | %s | %.3f | %.3f | %.3f | %.3f | %s | %.2fx | %s |\n",
                l, b, g, s0, s1, u[1] + u[2], ns, cyc, ns / tns,
                dns == "-" ? "-" : sprintf("%.2fx", ns / dns)
        }'
done
