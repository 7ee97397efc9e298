/*
 * Hostile and edge-case use of the rdma_cm API, run with librocev2_rdmacm.so and
 * librocev2_ibverbs.so preloaded (tests/hostile.rs): handles that are NULL, foreign or
 * destroyed, private data over the limits, unsupported port spaces and options. Every call
 * must fail with the errno named here, never crash. A resolved ID carries its device's PD; a
 * QP the program moves gets no RTR attributes before a connection, nor a number not the device's.
 * Usage: rdmacm_checks LOCAL_IP PEER_IP.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                      \
	do {                                                             \
		if (!(cond)) {                                           \
			fprintf(stderr, "line %d: %s (errno %d)\n", __LINE__, \
				#cond, errno);                           \
			failures++;                                      \
		}                                                        \
	} while (0)

/* A call that must fail with -1 and errno e. */
#define FAILS(call, e)                                   \
	do {                                             \
		errno = 0;                               \
		int r_ = (call);                         \
		CHECK(r_ == -1 && errno == (e));         \
	} while (0)

static struct sockaddr_in addr(const char *ip, int port)
{
	struct sockaddr_in a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s LOCAL_IP PEER_IP\n", argv[0]);
		return 2;
	}
	/* Readable, writable memory that is none of the library's objects. */
	static char junk[4096];
	memset(junk, 0xa5, sizeof junk);
	struct rdma_cm_id *id, *dead;
	struct rdma_cm_event *ev;

	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch != NULL);

	/* NULL and foreign handles. */
	FAILS(rdma_create_id(ch, NULL, NULL, RDMA_PS_TCP), EINVAL);
	FAILS(rdma_create_id((void *)junk, &id, NULL, RDMA_PS_TCP), EINVAL);
	FAILS(rdma_destroy_id(NULL), EINVAL);
	FAILS(rdma_destroy_id((void *)junk), EINVAL);
	FAILS(rdma_get_cm_event(NULL, &ev), EINVAL);
	FAILS(rdma_get_cm_event((void *)junk, &ev), EINVAL);
	FAILS(rdma_get_cm_event(ch, NULL), EINVAL);
	FAILS(rdma_ack_cm_event(NULL), EINVAL);
	FAILS(rdma_ack_cm_event((void *)junk), EINVAL);
	FAILS(rdma_bind_addr((void *)junk, NULL), EINVAL);
	FAILS(rdma_listen((void *)junk, 1), EINVAL);
	FAILS(rdma_connect((void *)junk, NULL), EINVAL);
	FAILS(rdma_accept((void *)junk, NULL), EINVAL);
	FAILS(rdma_reject((void *)junk, NULL, 0), EINVAL);
	FAILS(rdma_disconnect((void *)junk), EINVAL);
	FAILS(rdma_create_qp((void *)junk, NULL, (void *)junk), EINVAL);
	FAILS(rdma_migrate_id((void *)junk, ch), EINVAL);
	CHECK(rdma_get_src_port(NULL) == 0);
	CHECK(rdma_get_dst_port((void *)junk) == 0);
	CHECK(strcmp(rdma_event_str(99), "UNKNOWN EVENT") == 0);
	CHECK(strcmp(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED") == 0);
	rdma_destroy_qp((void *)junk);
	rdma_freeaddrinfo((void *)junk);
	rdma_free_devices((void *)junk);
	FAILS(rdma_create_ep(NULL, NULL, NULL, NULL), EINVAL);
	FAILS(rdma_get_request((void *)junk, &id), EINVAL);
	struct rdma_addrinfo hints, *res;
	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_UDP;
	hints.ai_qp_type = IBV_QPT_RC;
	FAILS(rdma_getaddrinfo(argv[2], "7471", &hints, &res), EOPNOTSUPP);
	hints.ai_qp_type = 0;
	CHECK(rdma_getaddrinfo(argv[2], "7471", &hints, &res) == 0 &&
	      res->ai_port_space == RDMA_PS_UDP && res->ai_qp_type == IBV_QPT_UD);
	rdma_freeaddrinfo(res);
	hints.ai_port_space = RDMA_PS_TCP;
	FAILS(rdma_getaddrinfo(NULL, NULL, &hints, &res), EINVAL);
	CHECK(rdma_getaddrinfo(argv[2], "7471", &hints, &res) == 0 && res->ai_dst_addr &&
	      res->ai_port_space == RDMA_PS_TCP && res->ai_qp_type == IBV_QPT_RC);
	rdma_freeaddrinfo(res);
	rdma_freeaddrinfo(res); /* twice: ignored */

	/* Unsupported port spaces and options. */
	FAILS(rdma_create_id(ch, &id, NULL, RDMA_PS_IB), EOPNOTSUPP);
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	uint8_t tos = 0;
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1) == 0);
	FAILS(rdma_set_option(id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, junk, 8), EOPNOTSUPP);
	FAILS(rdma_set_option(id, 7, 7, junk, 8), ENOSYS);
	struct sockaddr_in group = addr("239.1.1.1", 0);
	FAILS(rdma_join_multicast(id, (struct sockaddr *)&group, NULL), EOPNOTSUPP);

	/* Addresses: NULL, none of ours, not resolved yet. */
	FAILS(rdma_bind_addr(id, NULL), EINVAL);
	struct sockaddr_in nowhere = addr("192.0.2.77", 0);
	FAILS(rdma_bind_addr(id, (struct sockaddr *)&nowhere), EADDRNOTAVAIL);
	FAILS(rdma_resolve_route(id, 100), EINVAL);
	FAILS(rdma_connect(id, NULL), EINVAL);
	FAILS(rdma_accept(id, NULL), EINVAL);
	FAILS(rdma_disconnect(id), ENOTCONN);
	FAILS(rdma_get_request(id, &dead), EINVAL); /* not a synchronous listener */

	/* A non-blocking channel with nothing queued; then one event, readable through poll. */
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	FAILS(rdma_get_cm_event(ch, &ev), EAGAIN);
	struct sockaddr_in local = addr(argv[1], 0), peer = addr(argv[2], 7999);
	CHECK(rdma_resolve_addr(id, (struct sockaddr *)&local, (struct sockaddr *)&peer, 100) == 0);
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 0) == 1);
	CHECK(rdma_get_cm_event(ch, &ev) == 0 && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED && ev->id == id);
	CHECK(rdma_ack_cm_event(ev) == 0);
	FAILS(rdma_ack_cm_event(ev), EINVAL);
	CHECK(poll(&p, 1, 0) == 0);
	CHECK(rdma_get_src_port(id) != 0 && rdma_get_dst_port(id) == htons(7999));

	/* The resolved ID has its device's PD, as librdmacm gives one per device: programs make
	 * their own objects in it (UCX a UD QP whose number it announces). */
	CHECK(id->verbs && id->pd && id->pd->context == id->verbs);
	struct ibv_cq *own_cq = ibv_create_cq(id->verbs, 2, NULL, NULL, 0);
	CHECK(own_cq != NULL);
	struct ibv_qp_init_attr ua;
	memset(&ua, 0, sizeof ua);
	ua.send_cq = ua.recv_cq = own_cq;
	ua.qp_type = IBV_QPT_UD;
	ua.cap.max_send_wr = ua.cap.max_recv_wr = 2;
	ua.cap.max_send_sge = ua.cap.max_recv_sge = 1;
	struct ibv_qp *own_qp = ibv_create_qp(id->pd, &ua);
	CHECK(own_qp != NULL && own_qp->qp_num > 1);
	CHECK(own_qp && ibv_destroy_qp(own_qp) == 0);
	CHECK(own_cq && ibv_destroy_cq(own_cq) == 0);

	/* A QP on the ID: NULL attributes, then private data over the limits. */
	FAILS(rdma_create_qp(id, NULL, NULL), EINVAL);
	struct ibv_qp_init_attr qa;
	memset(&qa, 0, sizeof qa);
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	CHECK(rdma_create_qp(id, NULL, &qa) == 0 && id->qp && id->send_cq && id->recv_cq &&
	      id->qp->pd == id->pd);
	FAILS(rdma_create_qp(id, NULL, &qa), EINVAL);
	struct rdma_conn_param cp;
	memset(&cp, 0, sizeof cp);
	cp.private_data = junk;
	cp.private_data_len = 57; /* 92 - 36 (CMA header) = 56 */
	FAILS(rdma_connect(id, &cp), EINVAL);
	cp.private_data_len = 255;
	FAILS(rdma_connect(id, &cp), EINVAL);
	FAILS(rdma_reject(id, junk, 149), EINVAL);
	rdma_destroy_qp(id);
	CHECK(id->qp == NULL);

	/* A QP the program moves itself: no RTR attributes before a connection, no QP by a
	 * number the device does not have. */
	struct ibv_qp_attr ra;
	int rmask;
	memset(&ra, 0, sizeof ra);
	ra.qp_state = IBV_QPS_RTR;
	FAILS(rdma_init_qp_attr(id, &ra, &rmask), EINVAL);
	ra.qp_state = IBV_QPS_INIT;
	CHECK(rdma_init_qp_attr(id, &ra, &rmask) == 0 && (rmask & IBV_QP_STATE));
	cp.private_data_len = 0;
	cp.qp_num = 0xfffff0;
	FAILS(rdma_connect(id, &cp), EINVAL);
	cp.qp_num = 0;

	/* A UD ID: its QP is UD, in RTS with rdma_cm's Q_Key; no RC QP, no answer without a
	 * request, private data over the SIDR_REQ's limit. */
	struct rdma_cm_id *ud;
	CHECK(rdma_create_id(ch, &ud, NULL, RDMA_PS_UDP) == 0 && ud->qp_type == IBV_QPT_UD);
	CHECK(rdma_resolve_addr(ud, (struct sockaddr *)&local, (struct sockaddr *)&peer, 100) == 0);
	CHECK(rdma_get_cm_event(ch, &ev) == 0 && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED && ev->id == ud);
	CHECK(rdma_ack_cm_event(ev) == 0);
	FAILS(rdma_create_qp(ud, NULL, &qa), EOPNOTSUPP);
	qa.qp_type = IBV_QPT_UD;
	qa.send_cq = qa.recv_cq = NULL; /* the first ID's, destroyed with its QP */
	CHECK(rdma_create_qp(ud, NULL, &qa) == 0 && ud->qp);
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	CHECK(ibv_query_qp(ud->qp, &attr, IBV_QP_STATE | IBV_QP_QKEY, &init) == 0 &&
	      attr.qp_state == IBV_QPS_RTS && attr.qkey == 0x01234567 && init.qp_type == IBV_QPT_UD);
	FAILS(rdma_accept(ud, NULL), EINVAL);
	FAILS(rdma_reject(ud, NULL, 0), EINVAL);
	cp.private_data_len = 181; /* 216 - 36 (CMA header) = 180 */
	FAILS(rdma_connect(ud, &cp), EINVAL);
	CHECK(rdma_destroy_id(ud) == 0);

	/* Destroyed handles. */
	dead = id;
	CHECK(rdma_destroy_id(id) == 0);
	FAILS(rdma_destroy_id(dead), EINVAL);
	FAILS(rdma_bind_addr(dead, (struct sockaddr *)&local), EINVAL);
	FAILS(rdma_connect(dead, NULL), EINVAL);
	rdma_destroy_event_channel(ch);
	FAILS(rdma_get_cm_event(ch, &ev), EINVAL);
	FAILS(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), EINVAL);
	rdma_destroy_event_channel(ch);

	if (failures) {
		fprintf(stderr, "%d checks failed\n", failures);
		return 1;
	}
	printf("all checks passed\n");
	return 0;
}
