# Sourced by the bench scripts that measure on a pair testbed (one veth link, MTU 4200, h0
# 10.0.0.1 <-> h1 10.0.0.2): checks root, builds the release binaries of the packages in
# PACKAGES, brings the testbed up as "$1" plus a number, and defines BIN, TB, NAME, OUT (a
# scratch folder), IF0 and IF1 (each host's interface), in_h0/in_h1 (run a command in a host)
# and wait_port (until h1 listens on a TCP port). On exit, ON_EXIT runs (if the script set it),
# then the testbed and OUT go away, also on failure.
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 1; }
# shellcheck disable=SC2086 # one word per package
cargo build --release -q ${PACKAGES:--p rocev2-examples} -p rocev2-testbed --bins
BIN="${CARGO_TARGET_DIR:-target}/release"
TB="$BIN/rocev2-testbed"
NAME="$1$(($$ % 1000))"
OUT=$(mktemp -d)
trap 'eval "${ON_EXIT:-}"; "$TB" down "$NAME" >/dev/null 2>&1 || true; rm -rf "$OUT"' EXIT
"$TB" up deploy/testbeds/pair.toml --name "$NAME" >/dev/null
ifname() { "$TB" exec "$NAME" "$1" -- ip -o link show | awk -F': ' '$2 != "lo" { sub(/@.*/, "", $2); print $2; exit }'; }
IF0=$(ifname h0)
IF1=$(ifname h1)
in_h0() { "$TB" exec "$NAME" h0 -- "$@"; }
in_h1() { "$TB" exec "$NAME" h1 -- "$@"; }
wait_port() {
    local i
    for i in $(seq 100); do
        in_h1 ss -Hltn "sport = :$1" | grep -q . && return 0
        sleep 0.1
    done
    echo "nothing listens on $1 in h1" >&2
    return 1
}
