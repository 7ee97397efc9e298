#!/usr/bin/env bash
# Unmodified RDMA software over rocev2 against rocev2's own tools, on one pair testbed (pair.sh:
# one veth link, MTU 4200), in one run, as root: each figure beside a reference measured in the
# same run the same way (datapath DATAPATH, default xdp; same message size; same wait mode),
# the ratio, and its target:
#   - in-process (librocev2_ibverbs.so preloaded, ROCEV2_DATAPATH=DATAPATH): ucx_perftest
#     tag_bw over rc_verbs (UCX_TLS=rc_v: rc_verbs, with ud_verbs only to set connections up;
#     docs/ibverbs.md, "UCX"), 64 KiB messages, against write_bw (64 KiB WRITEs, adaptive
#     waits), and ucp_put_bw (RDMA WRITEs, as write_bw) the same way; ucx_perftest tag_lat,
#     64 B, against rc_pingpong --poll spin (UCX busy-polls);
#   - attached to a `rocev2d run --datapath DATAPATH` in each namespace (qperf's server forks a
#     process per test, each opening the device: docs/rdmacm.md), both libraries preloaded:
#     qperf -cm1 rc_bw (SENDs) and rc_rdma_write_bw, 64 KiB messages, and ucx_perftest tag_bw
#     (its receives posted to a shared receive queue), against write_bw --attach;
#     qperf -cm1 -cp1 rc_lat (polling its CQs), 64 B, against rc_pingpong --attach --poll spin.
# Bandwidths in Gbit/s (target >= 0.80x). Latencies one-way, half the round trip, as qperf and
# ucx_perftest report them (target <= 1.25x): ucx_perftest's median against rc_pingpong's median
# (--lat), qperf's mean (it prints no percentile) against rc_pingpong's mean (usec/iter), since
# on a shared 2-vCPU machine a few descheduled round trips move a mean by several times.
# QPERF_BW_FLAGS (default empty: qperf waits for completion events, its default) adds options
# to qperf's bandwidth tests, e.g. -cp1. qperf posts 1024 messages at once (its NCQE), write_bw
# keeps 128 outstanding (-t).
#
# UCX needs device names of at most 15 characters and a node /dev/infiniband/<device>
# (docs/ibverbs.md): the script renames the two interfaces `rs<n>a` and `rs<n>b` and makes the
# nodes, removed on exit. BW_ITERS (default 16384: 1 GiB), LAT_ITERS (default 20000) and
# QPERF_SECONDS (default 5) size the runs. Prints the summary table for BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/../.."

DP=${DATAPATH:-xdp}
BW_ITERS=${BW_ITERS:-16384}
LAT_ITERS=${LAT_ITERS:-20000}
QPERF_SECONDS=${QPERF_SECONDS:-5}
read -r -a QPERF_BW_FLAGS <<<"${QPERF_BW_FLAGS:-}"
# The libraries are cdylibs, which pair.sh's `--bins` build leaves out.
cargo build --release -q -p rocev2-ibverbs -p rocev2-rdmacm
PACKAGES="-p rocev2-examples -p rocev2d"
# shellcheck source=pair.sh
. deploy/bench/pair.sh rs
# shellcheck source=rows.sh
. deploy/bench/rows.sh
need qperf
need ucx_perftest
need mknod
R=$(realpath "$BIN")
PRELOAD=$R/librocev2_rdmacm.so:$R/librocev2_ibverbs.so
SERVER=10.0.0.2

# Short interface names for UCX: host $1's interface becomes $2 (a name changes only while
# the link is down; back up, it keeps its IPv4 address).
rename() {
    local old
    old=$(ifname "$1")
    "$TB" exec "$NAME" "$1" -- ip link set dev "$old" down
    "$TB" exec "$NAME" "$1" -- ip link set dev "$old" name "$2"
    "$TB" exec "$NAME" "$1" -- ip link set dev "$2" up
}
n=${NAME#rs}
rename h0 "rs${n}a"
rename h1 "rs${n}b"
IF0=rs${n}a
IF1=rs${n}b
NODES=(/dev/infiniband/rocev2_$IF0 /dev/infiniband/rocev2_$IF1)
mkdir -p /dev/infiniband
for d in "${NODES[@]}"; do mknod -m 666 "$d" c 1 3; done
ON_EXIT='rm -f "${NODES[@]}"; [ -z "${qserver:-}" ] || stop_server "$qserver"'

# Stops the background server of testbed tool $1 (qperf's server never exits; the tool does
# not pass signals on, so its child is the one killed).
stop_server() {
    local c
    for c in $(pgrep -P "$1"); do kill "$c" 2>/dev/null || true; done
    wait "$1" 2>/dev/null || true
}

# write_bw's Gbit/s, 64 KiB WRITEs x BW_ITERS; arguments after --datapath to both sides.
write_bw() { write_bw_run "$DP" "$BW_ITERS" "$@" | awk '$1 == 65536 { print $4 }'; }

# "mean median" one-way latency in µs of rc_pingpong (its usec/iter and its --lat median round
# trip, halved), 64 B x LAT_ITERS, busy-polled; further arguments to both sides.
rc_pingpong() {
    local args=(--datapath "$DP" --poll spin --lat -s 64 -n "$LAT_ITERS" "$@")
    in_h1 "$BIN/rc_pingpong" -d "$IF1" "${args[@]}" >/dev/null &
    local srv=$!
    wait_port 18515
    in_h0 "$BIN/rc_pingpong" -d "$IF0" "${args[@]}" "$SERVER" >"$OUT/rc_pingpong"
    wait "$srv"
    awk '/usec\/iter/ { a = $(NF - 1) / 2 } /^round trip/ { m = $4 / 2 }
        END { printf "%.2f %.2f\n", a, m }' "$OUT/rc_pingpong"
}

# ucx_perftest test $1, $2-byte messages, $3 iterations, in-process (or with ROCEV2_DATAPATH
# $4, e.g. attach); prints its client's `Final:` row (iterations, latency 50th percentile,
# mean, overall µs; bandwidth mean, overall MB/s of 2^20 bytes; message rates).
ucx() {
    local args=(-t "$1" -s "$2" -n "$3" -p 13337)
    local env=(UCX_TLS=rc_v UCX_UD_VERBS_ETH_DGID_CHECK=n
        LD_PRELOAD="$PRELOAD" ROCEV2_DATAPATH="${4:-$DP}")
    in_h1 env "${env[@]}" UCX_NET_DEVICES="rocev2_$IF1:1" ucx_perftest "${args[@]}" >/dev/null &
    local srv=$!
    wait_port 13337
    in_h0 env "${env[@]}" UCX_NET_DEVICES="rocev2_$IF0:1" ucx_perftest "${args[@]}" "$SERVER" >"$OUT/ucx"
    wait "$srv"
    grep '^Final:' "$OUT/ucx" || { cat "$OUT/ucx" >&2; return 1; }
}

# qperf's figure of its test $1 (the client's other arguments after it), attached: Gbit/s for
# a bandwidth, µs for a latency. qperf prints decimal units ("bw = 1.2 GB/sec", "latency = 9
# us").
qperf_run() {
    local test=$1
    shift
    in_h0 env LD_PRELOAD="$PRELOAD" ROCEV2_DATAPATH=attach \
        qperf -cm1 -t "$QPERF_SECONDS" "$@" "$SERVER" "$test" >"$OUT/qperf"
    awk '$2 == "=" {
        u = $4; v = $3
        if (u ~ /\/sec$/) {
            m["bytes/sec"] = 1; m["KB/sec"] = 1e3; m["MB/sec"] = 1e6; m["GB/sec"] = 1e9
            printf "%.3f\n", v * m[u] * 8 / 1e9
        } else {
            m["ns"] = 1e-3; m["us"] = 1; m["ms"] = 1e3; m["sec"] = 1e6
            printf "%.2f\n", v * m[u]
        }
    }' "$OUT/qperf"
}

# Gbit/s of a `Final:` row's overall bandwidth.
gbits() { awk '{ printf "%.3f\n", $7 * 1048576 * 8 / 1e9 }'; }

echo "rdma-software: in-process ($DP)" >&2
ref_bw=$(write_bw)
ucx_bw=$(ucx tag_bw 65536 "$BW_ITERS" | gbits)
ucx_put=$(ucx ucp_put_bw 65536 "$BW_ITERS" | gbits)
read -r _ ref_lat < <(rc_pingpong)
ucx_lat=$(ucx tag_lat 64 "$LAT_ITERS" | awk '{ print $3 }')

echo "rdma-software: attached ($DP daemons)" >&2
start_daemons --datapath "$DP"
att_bw=$(write_bw --attach)
read -r att_lat _ < <(rc_pingpong --attach)
in_h1 env LD_PRELOAD="$PRELOAD" ROCEV2_DATAPATH=attach qperf >/dev/null 2>&1 &
qserver=$!
wait_port 19765
qperf_bw=$(qperf_run rc_bw -m 64K "${QPERF_BW_FLAGS[@]}")
qperf_write=$(qperf_run rc_rdma_write_bw -m 64K "${QPERF_BW_FLAGS[@]}")
qperf_lat=$(qperf_run rc_lat -m 64 -cp1)
stop_server "$qserver"
qserver=
ucx_att=$(ucx tag_bw 65536 "$BW_ITERS" attach | gbits)
stop_daemons

flags=${QPERF_BW_FLAGS[*]:+${QPERF_BW_FLAGS[*]} }
row "ucx_perftest tag_bw, UCX_TLS=rc_v, 64 KiB, in-process $DP" "$ucx_bw Gbit/s" "write_bw 64 KiB $ref_bw Gbit/s" "$(ratio "$ucx_bw" "$ref_bw")" ">= 0.80x"
row "ucx_perftest ucp_put_bw (RDMA WRITE), 64 KiB, in-process $DP" "$ucx_put Gbit/s" "write_bw 64 KiB $ref_bw Gbit/s" "$(ratio "$ucx_put" "$ref_bw")" ">= 0.80x"
row "ucx_perftest tag_bw, UCX_TLS=rc_v, 64 KiB, attached ($DP daemons)" "$ucx_att Gbit/s" "write_bw --attach 64 KiB $att_bw Gbit/s" "$(ratio "$ucx_att" "$att_bw")" ">= 0.80x"
row "qperf -cm1 rc_bw ${flags}64 KiB, attached ($DP daemons)" "$qperf_bw Gbit/s" "write_bw --attach 64 KiB $att_bw Gbit/s" "$(ratio "$qperf_bw" "$att_bw")" ">= 0.80x"
row "qperf -cm1 rc_rdma_write_bw ${flags}64 KiB, attached ($DP daemons)" "$qperf_write Gbit/s" "write_bw --attach 64 KiB $att_bw Gbit/s" "$(ratio "$qperf_write" "$att_bw")" ">= 0.80x"
row "ucx_perftest tag_lat, UCX_TLS=rc_v, 64 B one-way median, in-process $DP, busy-polled" "$ucx_lat µs" "rc_pingpong --poll spin median $ref_lat µs" "$(ratio "$ucx_lat" "$ref_lat")" "<= 1.25x"
row "qperf -cm1 -cp1 rc_lat, 64 B one-way mean, attached ($DP daemons), busy-polled" "$qperf_lat µs" "rc_pingpong --attach --poll spin mean $att_lat µs" "$(ratio "$qperf_lat" "$att_lat")" "<= 1.25x"

echo "Binaries of $(git rev-parse --short HEAD), $(date -u +%F); load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
echo "Wait mode: write_bw adaptive (default); latencies busy-polled on both sides (ucx_perftest always"
echo "polls, qperf -cp1, rc_pingpong --poll spin); daemons adaptive (busy-polling 200 µs after activity)."
echo "Latencies are one-way, half the round trip: ucx_perftest's median against rc_pingpong's median,"
echo "qperf's mean (all it prints) against rc_pingpong's mean."
echo
print_rows
