#!/usr/bin/env bash
# Installs what rocev2's demo and test suite need on Debian, as root. Idempotent: every step
# checks first and returns at once when its tool is already there, so running it again costs
# about a second.
#
#   bash deploy/prereqs.sh        everything deploy/test.sh needs
#   bash deploy/prereqs.sh demo   only what deploy/demo.sh needs (Rust, nightly, bpf-linker, the
#                                 programs of deploy/tools.list)
#   bash deploy/prereqs.sh experiment   what deploy/experiment.sh needs (the demo's, plus the
#                                 plots' font)
#
# What and why:
#   Rust stable + rustfmt + clippy   build, format check, lints
#   python3 + scapy                  independent RoCEv2 encoder/decoder in interop tests
#   nightly rust-src                 eBPF builds (-Z build-std=core) and cargo-fuzz (sanitizers)
#   bpf-linker (+ LLVM 22 dev libs)  links the eBPF programs; rustc's LLVM is 22, so bpf-linker
#                                    is built against llvm-22 (llvm-config must be on PATH)
#   cargo-fuzz                       the fuzz smoke run (deploy/fuzz-smoke.sh)
#   inferno                          flame graphs (deploy/bench/flamegraph.sh); tools.list names
#                                    its programs with package cargo:inferno
#   cargo-public-api (pinned)        rocev2's public-API listing test (rocev2d/verbs/tests/
#                                    public_api.rs); the version reads the installed nightly's
#                                    rustdoc JSON (a new nightly may need a new pin)
#   Rust MSRV toolchain (minimal)    deploy/test.sh checks `rocev2` with the workspace's
#                                    rust-version (Cargo.toml)
#   libibverbs-dev, librdmacm-dev    <infiniband/verbs.h>, <rdma/rdma_cma.h> and libibverbs.so,
#                                    which rocev2d/verbs-abi's layout test compiles against,
#                                    librocev2_rdmacm.so and the C test programs link with
#   deploy/tools.list                every external program a test, tool or script runs (iproute2,
#                                    procps, iperf3, tcpdump, tshark, …), with its package
#
#   bash deploy/prereqs.sh check  installs nothing: fails, naming the install line, when a
#                                 program of deploy/tools.list is missing (CI runs it before tests)
set -euo pipefail

log() { printf '[prereqs] %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ] && [ "${1:-all}" != check ]; then
    log "run as root (installs Debian packages)" >&2
    exit 1
fi

# Debian packages, installed only when one is missing; `apt-get update` only then too.
apt_install() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # tshark's package would otherwise ask whether non-root users may capture.
    echo 'wireshark-common wireshark-common/install-setuid boolean false' | debconf-set-selections
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
}

ensure_rust() {
    if ! command -v cargo >/dev/null && [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
    if ! command -v cargo >/dev/null; then
        # A fresh machine: rustup's installer, stable toolchain; cc is Rust's linker.
        apt_install ca-certificates curl gcc libc6-dev
        log "installing Rust (rustup, stable)"
        curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs |
            sh -s -- -y --profile minimal --default-toolchain stable
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
    local have
    have=$(rustup component list --installed)
    for c in rustfmt clippy; do
        grep -q "^$c" <<<"$have" || { log "adding $c"; rustup component add "$c"; }
    done
}

TOOLS_LIST="$(dirname "${BASH_SOURCE[0]}")/tools.list"

# "program package" for every program of deploy/tools.list that is not on PATH.
missing_tools() {
    local prog pkg _
    while read -r prog pkg _; do
        case "$prog" in '' | '#'*) continue ;; esac
        command -v "$prog" >/dev/null || echo "$prog $pkg"
    done <"$TOOLS_LIST"
}

# The command that installs package $1 of the list: apt for a Debian package, cargo for cargo:NAME.
install_line() {
    case "$1" in
        cargo:*) echo "cargo install ${1#cargo:} --locked" ;;
        *) echo "apt-get install -y $1" ;;
    esac
}

# The Debian packages of missing programs; the crates (cargo:NAME) have their own ensure_ step.
ensure_tools() {
    local pkgs
    pkgs=$(missing_tools | awk '$2 !~ /^cargo:/ { print $2 }' | sort -u)
    [ -z "$pkgs" ] && return 0
    # shellcheck disable=SC2086 # one word per package
    apt_install $pkgs
}

check_tools() {
    local missing
    missing=$(missing_tools)
    if [ -n "$missing" ]; then
        while read -r prog pkg; do
            log "missing: $prog (install: $(install_line "$pkg"), or bash deploy/prereqs.sh)" >&2
        done <<<"$missing"
        exit 1
    fi
}

# The headers the preloaded libraries' structs are checked against
# (rocev2d/verbs-abi/tests/layout.rs).
ensure_verbs_header() {
    apt_install libibverbs-dev librdmacm-dev
}

# The font the plots of rocev2-testbed and rocev2-sim write their text in
# (rocev2d/sim/src/plot.rs, register_font).
ensure_fonts() {
    apt_install fonts-dejavu-core
}

ensure_scapy() {
    apt_install python3-pip
    python3 -c 'import scapy' 2>/dev/null && return 0
    # PEP 668: a distribution's python3 is marked EXTERNALLY-MANAGED and pip refuses to install
    # into it unless told to; a pyenv or venv python3 is not marked and needs no flag.
    local flags=(--quiet --root-user-action=ignore)
    if python3 -c 'import os, sysconfig, sys
sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'; then
        flags+=(--break-system-packages)
    fi
    log "installing scapy for $(command -v python3)"
    python3 -m pip install "${flags[@]}" scapy
}

ensure_nightly_src() {
    if ! rustup toolchain list | grep -q '^nightly'; then
        log "installing nightly toolchain with rust-src"
        rustup toolchain install nightly --profile minimal --component rust-src
    elif ! rustup component list --toolchain nightly --installed | grep -q '^rust-src'; then
        log "adding rust-src to nightly"
        rustup component add rust-src --toolchain nightly
    fi
}

ensure_bpf_linker() {
    command -v bpf-linker >/dev/null && return 0
    apt_install llvm-22-dev libpolly-22-dev
    log "installing bpf-linker (builds against LLVM 22, a few minutes)"
    PATH=/usr/lib/llvm-22/bin:$PATH LLVM_SYS_221_PREFIX=/usr/lib/llvm-22 \
        cargo install bpf-linker --locked
}

ensure_cargo_fuzz() {
    command -v cargo-fuzz >/dev/null && return 0
    log "installing cargo-fuzz"
    cargo install cargo-fuzz --locked
}

ensure_inferno() {
    command -v inferno-flamegraph >/dev/null && command -v inferno-collapse-perf >/dev/null && return 0
    log "installing inferno (flame graphs)"
    cargo install inferno --locked
}

# The version of the public-API listing; 0.52.0 reads nightly 2026-05-19's rustdoc JSON. About
# 3.5 minutes to build with one job.
PUBLIC_API_VERSION=0.52.0
ensure_cargo_public_api() {
    cargo public-api --version 2>/dev/null | grep -qx "cargo-public-api $PUBLIC_API_VERSION" && return 0
    log "installing cargo-public-api $PUBLIC_API_VERSION"
    cargo install cargo-public-api --version "$PUBLIC_API_VERSION" --locked
}

# The minimum supported Rust version, as the workspace states it (about 15 s to install).
ensure_msrv() {
    local msrv
    msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' "$(dirname "$0")/../Cargo.toml")
    rustup toolchain list | grep -q "^$msrv-" && return 0
    log "installing Rust $msrv (the MSRV)"
    rustup toolchain install "$msrv" --profile minimal
}

case "${1:-all}" in
    demo)
        ensure_rust
        ensure_tools
        ensure_nightly_src
        ensure_bpf_linker
        ;;
    experiment)
        ensure_rust
        ensure_tools
        ensure_fonts
        ensure_nightly_src
        ensure_bpf_linker
        ;;
    all)
        ensure_rust
        ensure_tools
        ensure_verbs_header
        ensure_fonts
        ensure_scapy
        ensure_nightly_src
        ensure_bpf_linker
        ensure_cargo_fuzz
        ensure_inferno
        ensure_cargo_public_api
        ensure_msrv
        ;;
    check)
        check_tools
        ;;
    *)
        log "usage: $0 [all|demo|experiment|check]" >&2
        exit 2
        ;;
esac
log "ok (${1:-all})"
