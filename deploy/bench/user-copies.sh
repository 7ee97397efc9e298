#!/usr/bin/env bash
# Where write_bw's user-space CPU goes, as root, on a pair testbed: one write_bw over
# DATAPATH (default xdp), 64 KiB RDMA WRITEs x WRITES (default 16384 = 1 GiB, one QP), with
# `--poll sleep` (no busy polling, so CPU time is work), each side under `perf record -e
# cpu-clock -F FREQ` (default 4999 Hz; no PMU needed). Prints one line: the goodput, then per
# side (h0 the sender, h1 the receiver) the CPU time sampled, its user-space part, and the part
# in libc's memcpy/memmove (every user-space copy of payload: MR -> frame, frame -> MR, and any
# copy between UMEM chunks and spare buffers), in ms; then each side's five busiest user-space
# symbols. TREE=<checkout> runs another tree's binaries (pair.sh): before/after, alternating.
set -euo pipefail
cd "$(dirname "$0")/../.."

DATAPATH=${DATAPATH:-xdp}
WRITES=${WRITES:-16384}
FREQ=${FREQ:-4999}
# shellcheck source=pair.sh
. deploy/bench/pair.sh cpy
need perf
WRAP0=(perf record -q -F "$FREQ" -e cpu-clock -o "$OUT/h0.data" --)
WRAP1=(perf record -q -F "$FREQ" -e cpu-clock -o "$OUT/h1.data" --)
load=$(cut -d' ' -f1 /proc/loadavg)
gbps=$(write_bw_run "$DATAPATH" "$WRITES" --poll sleep | awk '$1 == 65536 { print $4 }')
printf 'load %s | %s Gbit/s' "$load" "$gbps"
for h in h0 h1; do
    perf report -q -i "$OUT/$h.data" --sort symbol -F sample,symbol 2>/dev/null |
        awk -v h="$h" -v f="$FREQ" '{ all += $1 } $2 == "[.]" { user += $1 }
            $2 == "[.]" && /memmove|memcpy/ { cp += $1 }
            END { printf " | %s: CPU %.0f ms, user %.0f ms, user copies %.0f ms", h, all * 1000 / f, user * 1000 / f, cp * 1000 / f }'
done
echo
for h in h0 h1; do
    echo "  $h:"
    perf report -q -i "$OUT/$h.data" --sort symbol -F sample,symbol 2>/dev/null |
        awk '$2 == "[.]" { print "   ", $1, $3 }' | sort -k1,1 -rn | head -5
done
