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
 * Usage: verbs_checks DEVICE PEER_IPV4 srq-server|srq-client|ud-server|ud-client PORT
 * The two exchange QP numbers over TCP on PORT (the server listens once its receives are
 * posted). Exits 1 with a message on the first check that fails.
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

static int exchange(int server, const char *peer, int port, uint32_t mine, uint32_t *theirs)
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
	if (write(c, &mine, 4) != 4 || read(c, theirs, 4) != 4)
		FAIL("exchange failed");
	return c;
}

static void set_gid(union ibv_gid *g, const char *ipv4)
{
	memset(g, 0, sizeof *g);
	g->raw[10] = 0xff;
	g->raw[11] = 0xff;
	inet_pton(AF_INET, ipv4, &g->raw[12]);
}

static void connect_qp(struct ibv_qp *qp, const char *peer, uint32_t dest)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE };
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
	connect_qp(qp, peer, peer_qpn);
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

int main(int argc, char **argv)
{
	if (argc != 5)
		FAIL("usage: verbs_checks DEVICE PEER_IPV4 srq-server|srq-client|ud-server|ud-client PORT");
	const char *mode = argv[3];
	int server = strstr(mode, "-server") != NULL;
	struct rig r = open_rig(argv[1]);
	if (!strncmp(mode, "ud-", 3))
		return ud(&r, server, argv[2], atoi(argv[4]));
	if (strncmp(mode, "srq-", 4))
		FAIL("unknown mode %s", mode);
	return srq(&r, server, argv[2], atoi(argv[4]));
}
