/*
 * The SRQ limit event through libibverbs' own API, for tests/netns_srq.rs: a server whose RC QP
 * takes its receives from an SRQ of 4 requests with the limit armed at 2, and a client that
 * sends it 3 messages. The server checks each receive completion (status, qp_num, data), waits
 * for IBV_EVENT_SRQ_LIMIT_REACHED in ibv_get_async_event (naming its SRQ, once), queries the
 * disarmed limit, and checks that the SRQ cannot be destroyed while its QP lives.
 *
 * Usage: srq_limit DEVICE PEER_IPV4 server|client PORT
 * The two exchange QP numbers over TCP on PORT (the server listens once its SRQ is ready).
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
	a.ah_attr.grh.dgid.raw[10] = 0xff;
	a.ah_attr.grh.dgid.raw[11] = 0xff;
	inet_pton(AF_INET, peer, &a.ah_attr.grh.dgid.raw[12]);
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

int main(int argc, char **argv)
{
	if (argc != 5)
		FAIL("usage: srq_limit DEVICE PEER_IPV4 server|client PORT");
	int server = !strcmp(argv[3], "server"), port = atoi(argv[4]), n, i;
	struct ibv_device **list = ibv_get_device_list(&n), *dev = NULL;
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			dev = list[i];
	if (!dev)
		FAIL("no device %s", argv[1]);
	struct ibv_context *ctx = ibv_open_device(dev);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	char *buf = calloc(4, MSG);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4 * MSG, IBV_ACCESS_LOCAL_WRITE);
	if (!ctx || !pd || !cq || !mr)
		FAIL("setup: %s", strerror(errno));
	struct ibv_srq *srq = NULL;
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
	if (server) {
		struct ibv_srq_init_attr sa = { .srq_context = buf, .attr = { .max_wr = 4, .max_sge = 1 } };
		srq = ibv_create_srq(pd, &sa);
		if (!srq || srq->context != ctx || srq->srq_context != buf || srq->pd != pd)
			FAIL("ibv_create_srq: %s", strerror(errno));
		for (i = 0; i < 4; i++) {
			struct ibv_sge sge = { (uintptr_t)(buf + i * MSG), MSG, mr->lkey };
			struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;
			if (ibv_post_srq_recv(srq, &wr, &bad))
				FAIL("ibv_post_srq_recv %d", i);
		}
		struct ibv_srq_attr lim = { .srq_limit = 2 };
		if (ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT))
			FAIL("ibv_modify_srq");
		if (ibv_query_srq(srq, &lim) || lim.srq_limit != 2 || lim.max_wr != 4)
			FAIL("ibv_query_srq: limit %u, max_wr %u", lim.srq_limit, lim.max_wr);
		qa.srq = srq;
	}
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	if (!qp)
		FAIL("ibv_create_qp: %s", strerror(errno));
	uint32_t peer_qpn;
	int sock = exchange(server, argv[2], port, qp->qp_num, &peer_qpn);
	connect_qp(qp, argv[2], peer_qpn);
	if (!server) {
		for (i = 0; i < 3; i++) {
			snprintf(buf + i * MSG, MSG, "message %d", i);
			struct ibv_sge sge = { (uintptr_t)(buf + i * MSG), MSG, mr->lkey };
			struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1,
				.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
			if (ibv_post_send(qp, &wr, &bad))
				FAIL("ibv_post_send %d", i);
			wait_one(cq);
		}
		char done;
		if (read(sock, &done, 1) != 1)
			FAIL("the server did not answer");
		printf("client: sent 3\n");
		return 0;
	}
	for (i = 0; i < 3; i++) {
		struct ibv_wc wc = wait_one(cq);
		char want[MSG];
		snprintf(want, MSG, "message %d", i);
		if (wc.opcode != IBV_WC_RECV || wc.wr_id != (uint64_t)i || wc.qp_num != qp->qp_num ||
		    strcmp(buf + i * MSG, want))
			FAIL("receive %d: opcode %d, wr_id %llu, qp_num %#x (QP %#x), %.*s", i, wc.opcode,
			     (unsigned long long)wc.wr_id, wc.qp_num, qp->qp_num, MSG, buf + i * MSG);
	}
	struct ibv_async_event ev;
	if (ibv_get_async_event(ctx, &ev))
		FAIL("ibv_get_async_event: %s", strerror(errno));
	if (ev.event_type != IBV_EVENT_SRQ_LIMIT_REACHED || ev.element.srq != srq)
		FAIL("event %s for %p (SRQ %p)", ibv_event_type_str(ev.event_type), (void *)ev.element.srq,
		     (void *)srq);
	ibv_ack_async_event(&ev);
	if (srq->events_completed != 1)
		FAIL("events_completed %u", srq->events_completed);
	fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
	if (ibv_get_async_event(ctx, &ev) != -1 || errno != EAGAIN)
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
