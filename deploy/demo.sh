#!/usr/bin/env bash
# The main demo: builds one RoCEv2 frame for every verb and packet kind with rocev2-core's wire
# code, parses each back (ICRC verified), prints what the parser saw, writes them all to
# /tmp/rocev2-demo.pcap and lets tshark, an independent decoder, read that file.
# Nothing is sent on a network. Extra arguments go to the frames binary (e.g. --verb read).
set -euo pipefail
cd "$(dirname "$0")/.."

PCAP=/tmp/rocev2-demo.pcap

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
