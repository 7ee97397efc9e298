#!/usr/bin/env bash
# Opt-in interop check against a real rdma_rxe peer (not in CI: it boots two QEMU VMs, ~3 min):
# Debian's own `udaddy` (librdmacm's UD test: RDMA_PS_UDP IDs resolved through SIDR, then UD
# datagrams with immediate data each way), unmodified, in the netns with librocev2_rdmacm.so and
# librocev2_ibverbs.so preloaded, against rdma-core's `udaddy` on Linux soft-RoCE, in both roles:
#
#   A. rdma-core `udaddy` on rxe serves, the preloaded one resolves it from the netns and sends;
#   B. the preloaded `udaddy` serves in the netns, rdma-core's on rxe resolves it and sends.
#
# The client sends ten datagrams to the QPN and Q_Key of its SIDR_REP; the server answers each
# sender through an address handle made from its completion (`ibv_create_ah_from_wc`). A case
# passes when both sides exit 0 and print `data transfers complete`.
#
# As root; DATAPATH picks our datapath (packet or xdp: the libraries take no option to accept
# rxe's unverifiable ICRCs over UDP sockets). Uses the namespace `rxetest` that rxe-vm creates
# and removes; prints PASS or FAIL per case. Both cases passed on 2026-11-29.
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
COUNT=10
interop_preload
ours() { preloaded udaddy "$@"; }
rxe_up
# Before rxe's server listens, the SIDR_REQ is answered "not supported" (UNREACHABLE, status 1);
# before the VM answers ARP, the address does not resolve.
RETRY="RDMA_CM_EVENT_ADDR_ERROR\|RDMA_CM_EVENT_UNREACHABLE"
done_both() { grep -q "data transfers complete" "$mine" && grep -q "data transfers complete" "$theirs"; }

echo "== A: rdma-core udaddy (rxe) serves, Debian's udaddy (preloaded) resolves and sends ($DP)"
mine=/tmp/rxe-udaddy-client.txt
rxe_serves "udaddy -C $COUNT" "$RETRY" -s 192.168.77.10 -C $COUNT
verdict A "$COUNT datagrams each way after SIDR" done_both

echo "== B: Debian's udaddy (preloaded) serves, rdma-core udaddy (rxe) resolves and sends ($DP)"
mine=/tmp/rxe-udaddy-server.txt
rxe_connects "udaddy -s 192.168.77.1 -C $COUNT" -b 192.168.77.1 -C $COUNT
verdict B "$COUNT datagrams each way after SIDR" done_both
exit $fail
