/*
 * Verbs no rdma-core or perftest tool calls, through libibverbs' own API, for
 * tests/netns_tools.rs. Two modes, each a server and a client:
 *
 * srq: the server's RC QP takes its receives from an SRQ of 4 requests with the limit armed at
 * 2, and the client sends it 3 messages. The server checks each receive completion (status,
 * qp_num, data), waits for IBV_EVENT_SRQ_LIMIT_REACHED in ibv_get_async_event (naming its SRQ,
 * once), queries the disarmed limit, and checks that the SRQ cannot be destroyed while its QP
 * lives.
 *
 * ud: the client sends a datagram to the server's UD QP; the server answers through an address
 * handle made from the receive completion (ibv_create_ah_from_wc, and ibv_init_ah_from_wc's
 * attributes checked), and the client checks the answer.
 *
 * ex: the extended verbs. Both query the device (ibv_query_device_ex, ibv_query_port through
 * the extended op), make an extended CQ (one with timestamps is refused) and an RC QP through
 * ibv_create_qp_ex with send operations (one with memory-window binds is refused; a plain QP has
 * no ibv_qp_ex). The client first checks the errors ibv_wr_complete returns (a setter with no
 * request, an operation the QP lacks, local invalidate, too much inline data, too many SGEs, a
 * UD address on RC) and that ibv_wr_abort drops a request, then posts, through ibv_wr_*, an
 * RDMA WRITE, an inline SEND, a SEND with immediate from an SGE list, an RDMA WRITE with
 * immediate and a fetch-and-add in one batch, then a compare-and-swap and an RDMA READ; it
 * checks each completion (ibv_start_poll/ibv_next_poll and the ibv_wc_read_* accessors) and the
 * values fetched and read. The server checks its three receive completions the same way, then
 * the memory the client wrote.
 *
 * Usage: verbs_checks DEVICE PEER_IPV4 {srq,ud,ex}-{server,client} PORT
 * The two exchange QP numbers (ex: and a region's address and rkey) over TCP on PORT (the
 * server listens once its receives are posted). Exits 1 with a message on the first check
 * that fails.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MSG 64
#define QKEY 0x11111111
#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

static struct ibv_wc wait_one(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	int n;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		;
	if (n < 0)
		FAIL("ibv_poll_cq: %d", n);
	if (wc.status != IBV_WC_SUCCESS)
		FAIL("completion %llu: %s", (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
	return wc;
}

static int exchange_bytes(int server, const char *peer, int port, const void *mine, void *theirs,
			  size_t n)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	int s = socket(AF_INET, SOCK_STREAM, 0), c, one = 1;
	if (server) {
		setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		a.sin_addr.s_addr = htonl(INADDR_ANY);
		if (bind(s, (void *)&a, sizeof a) || listen(s, 1))
			FAIL("listen: %s", strerror(errno));
		c = accept(s, NULL, NULL);
	} else {
		inet_pton(AF_INET, peer, &a.sin_addr);
		if (connect(s, (void *)&a, sizeof a))
			FAIL("connect: %s", strerror(errno));
		c = s;
	}
	if (write(c, mine, n) != (ssize_t)n || read(c, theirs, n) != (ssize_t)n)
		FAIL("exchange failed");
	return c;
}

static int exchange(int server, const char *peer, int port, uint32_t mine, uint32_t *theirs)
{
	return exchange_bytes(server, peer, port, &mine, theirs, sizeof mine);
}

static void set_gid(union ibv_gid *g, const char *ipv4)
{
	memset(g, 0, sizeof *g);
	g->raw[10] = 0xff;
	g->raw[11] = 0xff;
	inet_pton(AF_INET, ipv4, &g->raw[12]);
}

static void connect_qp(struct ibv_qp *qp, const char *peer, uint32_t dest, unsigned access)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = access };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		FAIL("INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = 1;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.grh.sgid_index = 1;
	set_gid(&a.ah_attr.grh.dgid, peer);
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		FAIL("RTR");
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 1;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		FAIL("RTS");
}

struct rig {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	char *buf;
	struct ibv_mr *mr;
};

static struct rig open_rig(const char *name)
{
	struct rig r;
	int n, i;
	struct ibv_device **list = ibv_get_device_list(&n), *dev = NULL;
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			dev = list[i];
	if (!dev)
		FAIL("no device %s", name);
	r.ctx = ibv_open_device(dev);
	r.pd = r.ctx ? ibv_alloc_pd(r.ctx) : NULL;
	r.cq = r.ctx ? ibv_create_cq(r.ctx, 16, NULL, NULL, 0) : NULL;
	r.buf = calloc(4, MSG);
	r.mr = r.pd ? ibv_reg_mr(r.pd, r.buf, 4 * MSG, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!r.ctx || !r.pd || !r.cq || !r.mr)
		FAIL("setup: %s", strerror(errno));
	return r;
}

static void post_recv(struct rig *r, struct ibv_qp *qp, struct ibv_srq *srq, int i, int len)
{
	struct ibv_sge sge = { (uintptr_t)(r->buf + i * MSG), len, r->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (srq ? ibv_post_srq_recv(srq, &wr, &bad) : ibv_post_recv(qp, &wr, &bad))
		FAIL("post receive %d", i);
}

static void send_msg(struct rig *r, struct ibv_qp *qp, struct ibv_ah *ah, uint32_t qpn, int i,
		     const char *text)
{
	snprintf(r->buf + i * MSG, MSG, "%s", text);
	struct ibv_sge sge = { (uintptr_t)(r->buf + i * MSG), MSG, r->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED }, *bad;
	if (ah) {
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = qpn;
		wr.wr.ud.remote_qkey = QKEY;
	}
	if (ibv_post_send(qp, &wr, &bad))
		FAIL("ibv_post_send %d", i);
	wait_one(r->cq);
}

static void ud_up(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		FAIL("UD INIT");
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		FAIL("UD RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		FAIL("UD RTS");
}

/* ud-server and ud-client. */
static int ud(struct rig *r, int server, const char *peer, int port)
{
	struct ibv_qp_init_attr qa = { .send_cq = r->cq, .recv_cq = r->cq, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(r->pd, &qa);
	if (!qp)
		FAIL("ibv_create_qp: %s", strerror(errno));
	ud_up(qp);
	/* A receive is the 40-byte GRH area, then the message. */
	post_recv(r, qp, NULL, 0, 40 + MSG);
	uint32_t peer_qpn;
	int sock = exchange(server, peer, port, qp->qp_num, &peer_qpn);
	if (!server) {
		struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
			.grh = { .hop_limit = 64, .sgid_index = 1 } };
		set_gid(&aa.grh.dgid, peer);
		struct ibv_ah *ah = ibv_create_ah(r->pd, &aa);
		if (!ah)
			FAIL("ibv_create_ah: %s", strerror(errno));
		send_msg(r, qp, ah, peer_qpn, 2, "ping");
		struct ibv_wc wc = wait_one(r->cq);
		if (wc.opcode != IBV_WC_RECV || strcmp(r->buf + 40, "pong"))
			FAIL("answer: opcode %d, %.*s", wc.opcode, MSG, r->buf + 40);
		printf("client: pong\n");
		return 0;
	}
	struct ibv_wc wc = wait_one(r->cq);
	if (wc.opcode != IBV_WC_RECV || !(wc.wc_flags & IBV_WC_GRH) || wc.src_qp != peer_qpn ||
	    strcmp(r->buf + 40, "ping"))
		FAIL("datagram: opcode %d, flags %#x, src_qp %#x (peer %#x), %.*s", wc.opcode,
		     wc.wc_flags, wc.src_qp, peer_qpn, MSG, r->buf + 40);
	struct ibv_ah_attr got;
	union ibv_gid want;
	set_gid(&want, peer);
	if (ibv_init_ah_from_wc(r->ctx, 1, &wc, (struct ibv_grh *)r->buf, &got))
		FAIL("ibv_init_ah_from_wc: %s", strerror(errno));
	if (!got.is_global || got.port_num != 1 || memcmp(&got.grh.dgid, &want, sizeof want) ||
	    got.grh.sgid_index != 1)
		FAIL("ah_attr: global %d, port %d, sgid_index %d", got.is_global, got.port_num,
		     got.grh.sgid_index);
	wc.wc_flags &= ~IBV_WC_GRH;
	if (ibv_create_ah_from_wc(r->pd, &wc, (struct ibv_grh *)r->buf, 1) || errno != EINVAL)
		FAIL("an address handle from a completion without a GRH");
	wc.wc_flags |= IBV_WC_GRH;
	struct ibv_ah *ah = ibv_create_ah_from_wc(r->pd, &wc, (struct ibv_grh *)r->buf, 1);
	if (!ah)
		FAIL("ibv_create_ah_from_wc: %s", strerror(errno));
	send_msg(r, qp, ah, wc.src_qp, 2, "pong");
	char done;
	if (read(sock, &done, 1) != 0)
		FAIL("the client did not close");
	printf("server: answered through an address handle from the completion\n");
	return 0;
}

/* srq-server and srq-client. */
static int srq(struct rig *r, int server, const char *peer, int port)
{
	struct ibv_srq *srq = NULL;
	struct ibv_qp_init_attr qa = { .send_cq = r->cq, .recv_cq = r->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
	int i;
	if (server) {
		struct ibv_srq_init_attr sa = { .srq_context = r->buf,
			.attr = { .max_wr = 4, .max_sge = 1 } };
		srq = ibv_create_srq(r->pd, &sa);
		if (!srq || srq->context != r->ctx || srq->srq_context != r->buf || srq->pd != r->pd)
			FAIL("ibv_create_srq: %s", strerror(errno));
		for (i = 0; i < 4; i++)
			post_recv(r, NULL, srq, i, MSG);
		struct ibv_srq_attr lim = { .srq_limit = 2 };
		if (ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT))
			FAIL("ibv_modify_srq");
		if (ibv_query_srq(srq, &lim) || lim.srq_limit != 2 || lim.max_wr != 4)
			FAIL("ibv_query_srq: limit %u, max_wr %u", lim.srq_limit, lim.max_wr);
		qa.srq = srq;
	}
	struct ibv_qp *qp = ibv_create_qp(r->pd, &qa);
	if (!qp)
		FAIL("ibv_create_qp: %s", strerror(errno));
	uint32_t peer_qpn;
	int sock = exchange(server, peer, port, qp->qp_num, &peer_qpn);
	connect_qp(qp, peer, peer_qpn, IBV_ACCESS_LOCAL_WRITE);
	if (!server) {
		for (i = 0; i < 3; i++) {
			char text[MSG];
			snprintf(text, MSG, "message %d", i);
			send_msg(r, qp, NULL, 0, i, text);
		}
		char done;
		if (read(sock, &done, 1) != 1)
			FAIL("the server did not answer");
		printf("client: sent 3\n");
		return 0;
	}
	for (i = 0; i < 3; i++) {
		struct ibv_wc wc = wait_one(r->cq);
		char want[MSG];
		snprintf(want, MSG, "message %d", i);
		if (wc.opcode != IBV_WC_RECV || wc.wr_id != (uint64_t)i || wc.qp_num != qp->qp_num ||
		    strcmp(r->buf + i * MSG, want))
			FAIL("receive %d: opcode %d, wr_id %llu, qp_num %#x (QP %#x), %.*s", i, wc.opcode,
			     (unsigned long long)wc.wr_id, wc.qp_num, qp->qp_num, MSG, r->buf + i * MSG);
	}
	struct ibv_async_event ev;
	if (ibv_get_async_event(r->ctx, &ev))
		FAIL("ibv_get_async_event: %s", strerror(errno));
	if (ev.event_type != IBV_EVENT_SRQ_LIMIT_REACHED || ev.element.srq != srq)
		FAIL("event %s for %p (SRQ %p)", ibv_event_type_str(ev.event_type), (void *)ev.element.srq,
		     (void *)srq);
	ibv_ack_async_event(&ev);
	if (srq->events_completed != 1)
		FAIL("events_completed %u", srq->events_completed);
	int fl = fcntl(r->ctx->async_fd, F_GETFL);
	fcntl(r->ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
	if (ibv_get_async_event(r->ctx, &ev) != -1 || errno != EAGAIN)
		FAIL("a second event");
	struct ibv_srq_attr now;
	if (ibv_query_srq(srq, &now) || now.srq_limit != 0)
		FAIL("limit %u after the event", now.srq_limit);
	if (ibv_destroy_srq(srq) != EBUSY)
		FAIL("an SRQ in use was destroyed");
	if (write(sock, "k", 1) != 1)
		FAIL("answer");
	if (ibv_destroy_qp(qp) || ibv_destroy_srq(srq))
		FAIL("destroy");
	printf("server: limit event ok\n");
	return 0;
}

/* One completion read through the extended CQ's accessors. */
struct ex_wc {
	uint64_t wr_id;
	int status, opcode;
	uint32_t byte_len, imm, qp_num;
	unsigned flags;
};

/* Polls n completions with ibv_start_poll/ibv_next_poll/ibv_end_poll. */
static void poll_ex(struct ibv_cq_ex *cq, int n, struct ex_wc *out)
{
	struct ibv_poll_cq_attr pa = { .comp_mask = 0 };
	int got = 0, ret;
	while (got < n) {
		ret = ibv_start_poll(cq, &pa);
		if (ret == ENOENT)
			continue;
		if (ret)
			FAIL("ibv_start_poll: %d", ret);
		do {
			struct ex_wc *w = &out[got++];
			w->wr_id = cq->wr_id;
			w->status = cq->status;
			w->opcode = ibv_wc_read_opcode(cq);
			w->byte_len = ibv_wc_read_byte_len(cq);
			w->imm = ibv_wc_read_imm_data(cq);
			w->qp_num = ibv_wc_read_qp_num(cq);
			w->flags = ibv_wc_read_wc_flags(cq);
			if (w->status != IBV_WC_SUCCESS)
				FAIL("completion %llu: %s", (unsigned long long)w->wr_id,
				     ibv_wc_status_str(w->status));
		} while (got < n && (ret = ibv_next_poll(cq)) == 0);
		if (ret && ret != ENOENT)
			FAIL("ibv_next_poll: %d", ret);
		ibv_end_poll(cq);
	}
}

/* What the ex-mode peers tell each other. */
struct ex_peer {
	uint32_t qpn, rkey;
	uint64_t addr;
};

#define EX_OPS (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND | \
		IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | \
		IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)
#define EX_ATOMIC_START 100
#define EX_RECV 1024

/* The errors the wr_* path returns: each batch posts nothing. */
static void ex_errors(struct ibv_qp_ex *qx, struct ibv_mr *mr, char *mem)
{
	char big[128] = { 0 };
	struct ibv_sge many[3] = { { (uintptr_t)mem, 8, mr->lkey }, { (uintptr_t)mem, 8, mr->lkey },
				   { (uintptr_t)mem, 8, mr->lkey } };
	int ret;
	ibv_wr_start(qx);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)mem, 8);
	if ((ret = ibv_wr_complete(qx)) != EINVAL)
		FAIL("a setter with no request open: %d", ret);
	ibv_wr_start(qx);
	ibv_wr_send_inv(qx, 1);
	if ((ret = ibv_wr_complete(qx)) != EOPNOTSUPP)
		FAIL("an operation the QP was not created with: %d", ret);
	ibv_wr_start(qx);
	ibv_wr_local_inv(qx, 1);
	if ((ret = ibv_wr_complete(qx)) != EOPNOTSUPP)
		FAIL("local invalidate: %d", ret);
	ibv_wr_start(qx);
	ibv_wr_send(qx);
	ibv_wr_set_inline_data(qx, big, sizeof big);
	if ((ret = ibv_wr_complete(qx)) != EINVAL)
		FAIL("inline data beyond max_inline_data: %d", ret);
	ibv_wr_start(qx);
	ibv_wr_send(qx);
	ibv_wr_set_sge_list(qx, 3, many);
	if ((ret = ibv_wr_complete(qx)) != EINVAL)
		FAIL("more SGEs than max_send_sge: %d", ret);
	ibv_wr_start(qx);
	ibv_wr_send(qx);
	ibv_wr_set_ud_addr(qx, NULL, 1, 1);
	if ((ret = ibv_wr_complete(qx)) != EINVAL)
		FAIL("a UD address on an RC QP: %d", ret);
	/* Dropped: its wr_id 99 must never complete. */
	qx->wr_id = 99;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_start(qx);
	ibv_wr_send(qx);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)mem, 8);
	ibv_wr_abort(qx);
}

/* ex-server and ex-client: extended CQ, QP and device queries, and the ibv_wr_* post path. */
static int ex(struct rig *r, int server, const char *peer, int port)
{
	struct ibv_cq_init_attr_ex ca = { .cqe = 16, .wc_flags = IBV_WC_STANDARD_FLAGS };
	struct ibv_device_attr_ex dx;
	struct ibv_port_attr pa;
	unsigned access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			  IBV_ACCESS_REMOTE_ATOMIC;
	int i, ret;

	if ((ret = ibv_query_device_ex(r->ctx, NULL, &dx)) || dx.orig_attr.phys_port_cnt != 1 ||
	    dx.phys_port_cnt_ex != 1 || dx.orig_attr.max_qp_wr <= 0)
		FAIL("ibv_query_device_ex: %d, ports %d/%u", ret, dx.orig_attr.phys_port_cnt,
		     dx.phys_port_cnt_ex);
	if (ibv_query_port(r->ctx, 1, &pa) || pa.link_layer != IBV_LINK_LAYER_ETHERNET ||
	    pa.state != IBV_PORT_ACTIVE)
		FAIL("ibv_query_port: link layer %d, state %d", pa.link_layer, pa.state);
	ca.wc_flags |= IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
	if (ibv_create_cq_ex(r->ctx, &ca) || errno != EOPNOTSUPP)
		FAIL("a CQ with completion timestamps");
	ca.wc_flags = IBV_WC_STANDARD_FLAGS;
	struct ibv_cq_ex *cq = ibv_create_cq_ex(r->ctx, &ca);
	if (!cq)
		FAIL("ibv_create_cq_ex: %s", strerror(errno));
	char *mem = aligned_alloc(4096, 4096);
	memset(mem, 0, 4096);
	struct ibv_mr *mr = ibv_reg_mr(r->pd, mem, 4096, access);
	if (!mr)
		FAIL("ibv_reg_mr: %s", strerror(errno));
	struct ibv_qp_init_attr_ex qa = { .send_cq = ibv_cq_ex_to_cq(cq), .recv_cq = ibv_cq_ex_to_cq(cq),
		.qp_type = IBV_QPT_RC, .cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 2,
		.max_recv_sge = 1, .max_inline_data = 64 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = r->pd,
		.send_ops_flags = EX_OPS };
	struct ibv_qp *qp = ibv_create_qp_ex(r->ctx, &qa);
	if (!qp)
		FAIL("ibv_create_qp_ex: %s", strerror(errno));
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(qp);
	if (!qx || &qx->qp_base != qp)
		FAIL("ibv_qp_to_qp_ex");
	struct ibv_qp_init_attr plain = { .send_cq = r->cq, .recv_cq = r->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *pq = ibv_create_qp(r->pd, &plain);
	if (!pq || ibv_qp_to_qp_ex(pq) || ibv_destroy_qp(pq))
		FAIL("a QP without send operations has an extended QP");
	qa.send_ops_flags = IBV_QP_EX_WITH_BIND_MW;
	if (ibv_create_qp_ex(r->ctx, &qa) || errno != EOPNOTSUPP)
		FAIL("a QP with memory-window binds");

	struct ex_peer me = { qp->qp_num, mr->rkey, (uintptr_t)mem }, them;
	if (server) {
		uint64_t start = EX_ATOMIC_START;
		memcpy(mem + 128, &start, 8);
		snprintf(mem + 192, 64, "read me via wr_rdma_read");
	}
	int sock = exchange_bytes(server, peer, port, &me, &them, sizeof me);
	connect_qp(qp, peer, them.qpn, access);
	if (server) {
		/* A Send that comes first waits for these (RNR retry). */
		for (i = 0; i < 3; i++) {
			struct ibv_sge sge = { (uintptr_t)(mem + EX_RECV + i * MSG), MSG, mr->lkey };
			struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;
			if (ibv_post_recv(qp, &wr, &bad))
				FAIL("post receive %d", i);
		}
		struct ex_wc wc[3];
		char done;
		poll_ex(cq, 3, wc);
		static const int want_op[3] = { IBV_WC_RECV, IBV_WC_RECV, IBV_WC_RECV_RDMA_WITH_IMM };
		static const uint32_t want_imm[3] = { 0, 0x1234, 0x5678 };
		for (i = 0; i < 3; i++)
			if (wc[i].wr_id != (uint64_t)i || wc[i].opcode != want_op[i] ||
			    wc[i].qp_num != qp->qp_num ||
			    (i > 0 && (!(wc[i].flags & IBV_WC_WITH_IMM) || ntohl(wc[i].imm) != want_imm[i])))
				FAIL("receive %d: wr_id %llu, opcode %d, qp_num %#x, flags %#x, imm %#x", i,
				     (unsigned long long)wc[i].wr_id, wc[i].opcode, wc[i].qp_num, wc[i].flags,
				     ntohl(wc[i].imm));
		if (wc[0].byte_len != 12 || strcmp(mem + EX_RECV, "inline send") ||
		    wc[1].byte_len != 18 || strcmp(mem + EX_RECV + MSG, "part one|part two"))
			FAIL("received %u \"%s\", %u \"%s\"", wc[0].byte_len, mem + EX_RECV, wc[1].byte_len,
			     mem + EX_RECV + MSG);
		if (read(sock, &done, 1) != 1)
			FAIL("the client did not finish");
		uint64_t word;
		memcpy(&word, mem + 128, 8);
		if (strcmp(mem, "written by wr_rdma_write") || strcmp(mem + 64, "written with immediate") ||
		    word != 777)
			FAIL("memory: \"%s\", \"%s\", word %llu", mem, mem + 64, (unsigned long long)word);
		if (write(sock, "k", 1) != 1)
			FAIL("answer");
		printf("server: wr_* requests and extended completions ok\n");
		return 0;
	}
	ex_errors(qx, mr, mem);
	snprintf(mem, 64, "written by wr_rdma_write");
	snprintf(mem + 64, 64, "written with immediate");
	snprintf(mem + 256, 64, "part one|");
	snprintf(mem + 320, 64, "part two");
	struct ibv_sge parts[2] = { { (uintptr_t)(mem + 256), 9, mr->lkey },
				    { (uintptr_t)(mem + 320), 9, mr->lkey } };
	char text[] = "inline send";
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_start(qx);
	qx->wr_id = 1;
	ibv_wr_rdma_write(qx, them.rkey, them.addr);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)mem, 25);
	qx->wr_id = 2;
	ibv_wr_send(qx);
	ibv_wr_set_inline_data(qx, text, sizeof text);
	memset(text, 'x', sizeof text - 1); /* copied by ibv_wr_set_inline_data */
	qx->wr_id = 3;
	ibv_wr_send_imm(qx, htonl(0x1234));
	ibv_wr_set_sge_list(qx, 2, parts);
	qx->wr_id = 4;
	ibv_wr_rdma_write_imm(qx, them.rkey, them.addr + 64, htonl(0x5678));
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)(mem + 64), 23);
	qx->wr_id = 5;
	ibv_wr_atomic_fetch_add(qx, them.rkey, them.addr + 128, 5);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)(mem + 128), 8);
	if ((ret = ibv_wr_complete(qx)))
		FAIL("ibv_wr_complete: %d", ret);
	struct ex_wc wc[5];
	poll_ex(cq, 5, wc);
	static const int want_op[5] = { IBV_WC_RDMA_WRITE, IBV_WC_SEND, IBV_WC_SEND, IBV_WC_RDMA_WRITE,
					IBV_WC_FETCH_ADD };
	for (i = 0; i < 5; i++)
		if (wc[i].wr_id != (uint64_t)i + 1 || wc[i].opcode != want_op[i])
			FAIL("send completion %d: wr_id %llu, opcode %d", i,
			     (unsigned long long)wc[i].wr_id, wc[i].opcode);
	ibv_wr_start(qx);
	qx->wr_id = 6;
	ibv_wr_atomic_cmp_swp(qx, them.rkey, them.addr + 128, EX_ATOMIC_START + 5, 777);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)(mem + 136), 8);
	qx->wr_id = 7;
	ibv_wr_rdma_read(qx, them.rkey, them.addr + 192);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)(mem + 192), 64);
	if ((ret = ibv_wr_complete(qx)))
		FAIL("ibv_wr_complete: %d", ret);
	poll_ex(cq, 2, wc);
	uint64_t fetched, swapped;
	memcpy(&fetched, mem + 128, 8);
	memcpy(&swapped, mem + 136, 8);
	if (wc[0].wr_id != 6 || wc[0].opcode != IBV_WC_COMP_SWAP || wc[1].wr_id != 7 ||
	    wc[1].opcode != IBV_WC_RDMA_READ || fetched != EX_ATOMIC_START ||
	    swapped != EX_ATOMIC_START + 5 || strcmp(mem + 192, "read me via wr_rdma_read"))
		FAIL("wr_id %llu/%llu, opcodes %d/%d, fetched %llu, swapped %llu, read \"%.64s\"",
		     (unsigned long long)wc[0].wr_id, (unsigned long long)wc[1].wr_id, wc[0].opcode,
		     wc[1].opcode, (unsigned long long)fetched, (unsigned long long)swapped, mem + 192);
	char done;
	if (write(sock, "d", 1) != 1 || read(sock, &done, 1) != 1)
		FAIL("the server did not answer");
	printf("client: wr_* path ok, errors ok\n");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 5)
		FAIL("usage: verbs_checks DEVICE PEER_IPV4 {srq,ud,ex}-{server,client} PORT");
	const char *mode = argv[3];
	int server = strstr(mode, "-server") != NULL;
	struct rig r = open_rig(argv[1]);
	if (!strncmp(mode, "ud-", 3))
		return ud(&r, server, argv[2], atoi(argv[4]));
	if (!strncmp(mode, "ex-", 3))
		return ex(&r, server, argv[2], atoi(argv[4]));
	if (strncmp(mode, "srq-", 4))
		FAIL("unknown mode %s", mode);
	return srq(&r, server, argv[2], atoi(argv[4]));
}
