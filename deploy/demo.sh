#!/usr/bin/env bash
# The main demo: builds one RoCEv2 frame for every verb and packet kind with rocev2-core's wire
# code, parses each back (ICRC verified), prints what the parser saw, writes them all to
# /tmp/rocev2-demo.pcap and lets tshark, an independent decoder, read that file.
# The tour sends nothing on a network. Extra arguments go to the frames binary (e.g. --verb read).
# Then write_bw and rc_pingpong run over AF_XDP between the two namespaces of a pair
# testbed (see part two below), torn down on exit, also on failure.
set -euo pipefail
cd "$(dirname "$0")/.."

PCAP=/tmp/rocev2-demo.pcap

if [ "$(id -u)" != 0 ]; then
    # Both parts need root: the prerequisites install with apt, the second part builds network
    # namespaces and attaches XDP programs.
    echo "deploy/demo.sh needs root (it installs its prerequisites with apt and builds network" \
        "namespaces): run it with sudo" >&2
    exit 1
fi

bash deploy/prereqs.sh demo
command -v cargo >/dev/null || export PATH="$HOME/.cargo/bin:$PATH" # rustup just installed it

cargo run --release -q -p rocev2-examples --bin frames -- --pcap "$PCAP" "$@"

if command -v tshark >/dev/null; then
    printf '\ntshark -r %s (Wireshark'"'"'s own RoCEv2 dissector):\n' "$PCAP"
    # tshark warns on stderr when run as root; that warning is noise here.
    tshark -n -r "$PCAP" 2> >(grep -v '^Running as user' >&2)
else
    printf '\ntshark is not installed; open %s in Wireshark to inspect the frames.\n' "$PCAP"
fi

# Part two: two processes in two network namespaces (a pair testbed: one veth link) move data
# over RoCEv2 with the rocev2 user API: write_bw (RDMA WRITE bandwidth, data CRC-checked at the
# receiver) and rc_pingpong (ibv_rc_pingpong's SEND ping-pong), over AF_XDP: each process
# attaches rocev2's steering XDP program to its veth end and moves frames through AF_XDP rings
# (copy mode on veth). DATAPATH=packet (or
# udp, auto) picks another datapath.
cargo build --release -q -p rocev2-examples -p rocev2-testbed -p rocev2d --bins
BIN="${CARGO_TARGET_DIR:-target}/release"
TB="$BIN/rocev2-testbed"
NAME="demo$(($$ % 10000))"
DAEMONS=()
cleanup() {
    local p
    for p in "${DAEMONS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${DAEMONS[@]}"; do wait "$p" 2>/dev/null || true; done
    "$TB" down "$NAME" >/dev/null 2>&1 || true
    rm -f /tmp/rocev2-demo-h0.sock /tmp/rocev2-demo-h1.sock
}
trap cleanup EXIT
printf '\nBringing up a pair testbed (%s): h0 10.0.0.1 <-> h1 10.0.0.2, one veth link\n' "$NAME"
"$TB" up deploy/testbeds/pair.toml --name "$NAME" >/dev/null
ifname() { "$TB" exec "$NAME" "$1" -- ip -o link show | awk -F': ' '$2 != "lo" { sub(/@.*/, "", $2); print $2; exit }'; }
IF0=$(ifname h0)
IF1=$(ifname h1)
DP=${DATAPATH:-xdp}

# Runs "$@" as server in h1 and, once it listens (on PORT, default 18515), as client in h0
# toward 10.0.0.2. With ATTACH set, each side attaches to its host's rocev2d.
run_pair() {
    local port=${PORT:-18515} a0=() a1=() server i
    if [ -n "${ATTACH:-}" ]; then
        a0=(--attach --socket /tmp/rocev2-demo-h0.sock)
        a1=(--attach --socket /tmp/rocev2-demo-h1.sock)
    fi
    "$TB" exec "$NAME" h1 -- "$@" -d "$IF1" "${a1[@]}" -p "$port" >"/tmp/rocev2-demo-server-$port.txt" 2>&1 &
    server=$!
    for i in $(seq 100); do
        "$TB" exec "$NAME" h1 -- ss -Hltn "sport = :$port" | grep -q . && break
        sleep 0.1
    done
    "$TB" exec "$NAME" h0 -- "$@" -d "$IF0" "${a0[@]}" -p "$port" 10.0.0.2 | sed "s/^/  client $port| /"
    wait "$server"
    sed "s/^/  server $port| /" "/tmp/rocev2-demo-server-$port.txt"
}

printf '\n$ write_bw --datapath %s --verify -s 65536 -n 1024   (64 MiB of RDMA WRITEs, h0 -> h1)\n' "$DP"
run_pair "$BIN/write_bw" --datapath "$DP" --verify -s 65536 -n 1024
printf '\n$ write_bw --datapath %s -s 65536 -n 16384   (1 GiB of RDMA WRITEs, h0 -> h1)\n' "$DP"
run_pair "$BIN/write_bw" --datapath "$DP" -s 65536 -n 16384
printf '\n$ rc_pingpong --datapath %s -s 4096 -n 1000   (as ibv_rc_pingpong)\n' "$DP"
run_pair "$BIN/rc_pingpong" --datapath "$DP" -s 4096 -n 1000
# Part three: rocev2d as each host's RoCE device. One daemon per namespace owns the interface
# (datapath, engine, every QP); applications attach to it over its control socket and share
# memory with it, so several run at once on one interface: here a verified WRITE stream and a
# ping-pong side by side, then `rocev2d stats` lists what attached (docs/daemon.md).
printf '\n$ rocev2d run --datapath %s   (in h0 and h1: the RoCE device of each host)\n' "$DP"
for h in h0 h1; do
    ifc=$IF0
    [ "$h" = h1 ] && ifc=$IF1
    "$TB" exec "$NAME" "$h" -- "$BIN/rocev2d" run --iface "$ifc" --datapath "$DP" \
        --socket "/tmp/rocev2-demo-$h.sock" >"/tmp/rocev2-demo-daemon-$h.txt" 2>&1 &
    DAEMONS+=($!)
done
for h in h0 h1; do
    for i in $(seq 100); do
        grep -q '^rocev2d: serving' "/tmp/rocev2-demo-daemon-$h.txt" && break
        sleep 0.1
    done
    grep '^rocev2d: serving' "/tmp/rocev2-demo-daemon-$h.txt" | sed "s/^/  $h| /"
done
printf '\n$ write_bw --attach --verify -s 65536 -n 4096  &  rc_pingpong --attach -s 4096 -n 2000   (both at once)\n'
ATTACH=1 PORT=18515 run_pair "$BIN/write_bw" --verify -s 65536 -n 4096 &
stream=$!
ATTACH=1 PORT=18516 run_pair "$BIN/rc_pingpong" -s 4096 -n 2000
wait "$stream"
printf '\n$ rocev2d stats --socket /tmp/rocev2-demo-h0.sock   (applications, attachments, counters)\n'
"$BIN/rocev2d" stats --socket /tmp/rocev2-demo-h0.sock | grep -E '^(applications|  app |iface|datapath|tx_|rx_)' | sed 's/^/  /'
printf '\nTearing the testbed down.\n'
