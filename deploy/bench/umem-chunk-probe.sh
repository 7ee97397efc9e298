#!/usr/bin/env bash
# Which AF_XDP UMEM chunk sizes this kernel registers ("One chunk per jumbo frame" in
# BENCHMARKS.md), as root: for chunk sizes 2048..16384, a UMEM of ordinary pages and one of
# 2 MiB huge pages (MAP_HUGETLB), aligned and unaligned mode (XDP_UMEM_UNALIGNED_CHUNK_FLAG),
# one XDP_UMEM_REG each on a fresh AF_XDP socket; prints a Markdown table of the results with
# the kernel release. A 4096-byte IBA MTU data frame (~4170 bytes) fits one received chunk only
# with chunks of 8 KiB (4170 + the kernel's 256-byte XDP_PACKET_HEADROOM > 4096): if this kernel
# accepts 8192 on huge pages, the attempt in commit c199adb (branch wt-chunk; reverted) can be
# measured. Reserves HUGEPAGES more huge pages for the run (default 40: each of the 8 mappings of
# huge pages takes 4, and a closed socket releases its UMEM later) and puts the count back.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$(id -u)" = 0 ] || { echo "needs root (AF_XDP sockets, /proc/sys/vm/nr_hugepages)" >&2; exit 1; }
command -v python3 >/dev/null || {
    echo "python3 is missing: deploy/tools.list's package python3; bash deploy/prereqs.sh installs it" >&2
    exit 1
}
NR=/proc/sys/vm/nr_hugepages
before=$(cat "$NR")
trap 'echo "$before" >"$NR"' EXIT
echo $((before + ${HUGEPAGES:-40})) >"$NR"
echo "Linux $(uname -r), huge page size $(awk '/^Hugepagesize:/ { print $2, $3 }' /proc/meminfo)"
echo
python3 - <<'EOF'
import ctypes, os, struct

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t] + [ctypes.c_int] * 3 + [ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
AF_XDP, SOCK_RAW, SOL_XDP, XDP_UMEM_REG = 44, 3, 283, 4
PROT_RW, MAP_PRIVATE_ANON, MAP_POPULATE, MAP_HUGETLB = 3, 0x22, 0x8000, 0x40000
UNALIGNED = 1
LEN = 8 << 20  # a multiple of every chunk size and of a 2 MiB huge page


def register(chunk, huge, flags):
    mflags = MAP_PRIVATE_ANON | MAP_POPULATE | (MAP_HUGETLB if huge else 0)
    p = libc.mmap(None, LEN, PROT_RW, mflags, -1, 0)
    if p in (None, ctypes.c_void_p(-1).value):
        return "mmap: " + os.strerror(ctypes.get_errno())
    fd = libc.socket(AF_XDP, SOCK_RAW, 0)
    try:
        # struct xdp_umem_reg: addr, len, chunk_size, headroom, flags, tx_metadata_len (32 bytes).
        raw = struct.pack("QQIIII", p, LEN, chunk, 0, flags, 0)
        buf = ctypes.create_string_buffer(raw, len(raw))
        rc = libc.setsockopt(fd, SOL_XDP, XDP_UMEM_REG, buf, len(raw))
        return "accepted" if rc == 0 else os.strerror(ctypes.get_errno())
    finally:
        os.close(fd)
        libc.munmap(p, LEN)


print("| chunk | pages, aligned | pages, unaligned | huge pages, aligned | huge pages, unaligned |")
print("|---|---|---|---|---|")
for chunk in (2048, 4096, 8192, 16384):
    cells = [register(chunk, huge, flags) for huge in (False, True) for flags in (0, UNALIGNED)]
    print(f"| {chunk} | " + " | ".join(cells) + " |")
EOF
