#!/usr/bin/env bash
# A UDP-mode write_bw client in h0 against an AF_PACKET write_bw server in h1 over IPv6 (pair
# testbed, one veth link), as root: UDP_SEGMENT on (the default; the server cuts the GSO
# buffers the veth passes whole, `rx_gso_split`) against --no-udp-gso (one datagram per send
# entry), alternated ROUNDS times (default 3) so that both see the same machine, plus an
# AF_PACKET client as the reference of the same run. Each round moves 64 KiB x N (default
# 16384, 1 GiB) with one QP. Prints a Markdown table of the medians and the ratio on/off.
set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=${ROUNDS:-3}
N=${N:-16384}
export PEER=fd00::2
# shellcheck source=rows.sh
. deploy/bench/rows.sh
# shellcheck source=pair.sh
. deploy/bench/pair.sh gso

# One transfer: client datapath $1, client flags after it; prints Gbit/s.
run() {
    local dp=$1
    shift
    in_h1 "$BIN/write_bw" -d "$IF1" --datapath packet >/dev/null &
    local srv=$!
    wait_port 18515
    in_h0 "$BIN/write_bw" -d "$IF0" --datapath "$dp" "$@" -s 65536 -n "$N" "$PEER" |
        awk '$1 == 65536 { print $4 }'
    wait "$srv"
}

on=()
off=()
ref=()
for _ in $(seq "$ROUNDS"); do
    on+=("$(run udp)")
    off+=("$(run udp --no-udp-gso)")
    ref+=("$(run packet)")
done
m_on=$(median "${on[@]}")
m_off=$(median "${off[@]}")
m_ref=$(median "${ref[@]}")
echo "| client → AF_PACKET server, IPv6, 64 KiB WRITEs x $N | median Gbit/s | runs |"
echo "|---|---|---|"
echo "| udp, UDP_SEGMENT (default) | $m_on | ${on[*]} |"
echo "| udp, --no-udp-gso | $m_off | ${off[*]} |"
echo "| packet (reference) | $m_ref | ${ref[*]} |"
awk -v a="$m_on" -v b="$m_off" -v r="$m_ref" \
    'BEGIN { printf "\nratio GSO on / off: %.2fx; GSO on / packet client: %.2fx\n", a / b, a / r }'
