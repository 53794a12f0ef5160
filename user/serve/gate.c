// SPDX-License-Identifier: MIT
/* gate: connections wait here, in slots per peer, until their request shows the token. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>

#include "base/log.h"
#include "base/util.h"
#include "serve/gate.h"

#define NSLOTS	     (GATE_OWNER_SLOTS + GATE_OTHER_SLOTS)
#define ACCEPT_BATCH 64		  /* connections accepted per wake-up */
#define REPEEK_NS    20000000ull  /* a head seen incomplete is looked at again 20 ms later */
#define LINGER_NS    500000000ull /* a refused peer's time to read why, its rest is drained */
#define MS	     1000000ull
#define STR_(x)	     #x
#define STR(x)	     STR_(x)

enum slot_state {
	SLOT_FREE,
	SLOT_WAITING,	/* its request's head has not shown the token yet */
	SLOT_LINGERING, /* answered 401 or 408; what it still sends is read and dropped */
};

struct slot {
	enum slot_state state;
	int fd;
	bool owner;		  /* the server's user or root */
	unsigned char peer[20];	  /* who, for the slots per peer: "u" + uid or "a" + address */
	uint64_t since, deadline; /* CLOCK_MONOTONIC ns */
	uint64_t next_look;	  /* not looked at before (a head seen incomplete) */
	struct sockaddr_storage sa;
	socklen_t salen;
};

struct gate {
	int lfd, wake, diag;
	uid_t self;
	pthread_t thread;
	bool started;
	const struct gate_ops *ops;
	void *ctx;
	struct slot slots[NSLOTS];
	char head[GATE_HEAD_MAX];
};

/* ---- who is connecting ---------------------------------------------------------------------- */

/*
 * The uid owning the peer's socket of connection @fd, if that socket is on this machine (in
 * this network namespace): the kernel's socket table (NETLINK_SOCK_DIAG, an exact lookup of
 * the peer's end). 0 and *@uid set, or -1 (a remote peer, or no answer).
 */
static int peer_uid(struct gate *g, int fd, const struct sockaddr_storage *peer, uid_t *uid)
{
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 r;
	} req = {0};
	union {
		struct nlmsghdr nlh;
		char buf[1024];
	} ans;
	struct sockaddr_storage me;
	socklen_t len = sizeof(me);
	struct sockaddr_nl nl = {.nl_family = AF_NETLINK};
	struct inet_diag_msg *m;
	ssize_t n;

	if (g->diag < 0 || getsockname(fd, (struct sockaddr *)&me, &len) ||
	    me.ss_family != peer->ss_family)
		return -1;
	req.nlh.nlmsg_len = sizeof(req);
	req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	req.nlh.nlmsg_flags = NLM_F_REQUEST;
	req.r.sdiag_family = peer->ss_family;
	req.r.sdiag_protocol = IPPROTO_TCP;
	req.r.idiag_states = ~0u;
	req.r.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
	req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
	/* The peer's socket: its source is the peer, its destination us. */
	if (peer->ss_family == AF_INET) {
		const struct sockaddr_in *p = (const void *)peer, *s = (const void *)&me;

		req.r.id.idiag_sport = p->sin_port;
		req.r.id.idiag_dport = s->sin_port;
		memcpy(req.r.id.idiag_src, &p->sin_addr, 4);
		memcpy(req.r.id.idiag_dst, &s->sin_addr, 4);
	} else if (peer->ss_family == AF_INET6) {
		const struct sockaddr_in6 *p = (const void *)peer, *s = (const void *)&me;

		req.r.id.idiag_sport = p->sin6_port;
		req.r.id.idiag_dport = s->sin6_port;
		memcpy(req.r.id.idiag_src, &p->sin6_addr, 16);
		memcpy(req.r.id.idiag_dst, &s->sin6_addr, 16);
	} else {
		return -1;
	}
	if (sendto(g->diag, &req, sizeof(req), 0, (struct sockaddr *)&nl, sizeof(nl)) < 0)
		return -1;
	n = recv(g->diag, &ans, sizeof(ans), 0);
	if (n < (ssize_t)(NLMSG_HDRLEN + sizeof(*m)) || !NLMSG_OK(&ans.nlh, (size_t)n) ||
	    ans.nlh.nlmsg_type != SOCK_DIAG_BY_FAMILY)
		return -1;
	m = NLMSG_DATA(&ans.nlh);
	*uid = m->idiag_uid;
	return 0;
}

/* Fill @s's peer key and owner flag: a local user by uid, else the address (IPv6: its /64). */
static void identify(struct gate *g, struct slot *s)
{
	uid_t uid;

	memset(s->peer, 0, sizeof(s->peer));
	if (!peer_uid(g, s->fd, &s->sa, &uid)) {
		s->owner = uid == g->self || uid == 0;
		pr_debug("serve: a connection of uid %u%s", (unsigned int)uid,
			 s->owner ? " (the owner)" : "");
		s->peer[0] = 'u';
		memcpy(s->peer + 1, &uid, sizeof(uid));
		return;
	}
	s->owner = false;
	s->peer[0] = 'a';
	if (s->sa.ss_family == AF_INET)
		memcpy(s->peer + 1, &((struct sockaddr_in *)&s->sa)->sin_addr, 4);
	else if (s->sa.ss_family == AF_INET6)
		memcpy(s->peer + 1, &((struct sockaddr_in6 *)&s->sa)->sin6_addr, 8);
}

/* ---- slots ---------------------------------------------------------------------------------- */

static void drop(struct slot *s)
{
	if (s->state != SLOT_FREE)
		close(s->fd);
	s->state = SLOT_FREE;
	s->fd = -1;
}

/* Answer @s with @status and @text, then let it linger: what it still sends is dropped. */
static void refuse(struct gate *g, struct slot *s, const char *status, const char *text,
		   uint64_t now)
{
	char msg[1024];
	int n;

	n = snprintf(msg, sizeof(msg),
		     "HTTP/1.1 %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
		     "Content-Length: %zu\r\nConnection: close\r\nCache-Control: no-store\r\n"
		     "X-Content-Type-Options: nosniff\r\n\r\n%s",
		     status, strlen(text), text);
	/* What it sent is read first: closing with unread bytes would reset the connection and
	 * lose the answer. */
	while (recv(s->fd, g->head, sizeof(g->head), MSG_DONTWAIT) > 0)
		;
	if (n > 0 && (size_t)n < sizeof(msg))
		(void)!send(s->fd, msg, n, MSG_DONTWAIT | MSG_NOSIGNAL);
	shutdown(s->fd, SHUT_WR);
	s->state = SLOT_LINGERING;
	s->deadline = now + LINGER_NS;
	s->next_look = 0;
}

/*
 * A free slot for a new connection of @peer (owner or not), made by dropping the oldest
 * connection of that peer's own kind when it has all its slots: the owner's oldest for the
 * owner; another peer's own oldest when it has GATE_PEER_SLOTS, else the oldest of the peer
 * with the most when all others' slots are taken.
 */
static struct slot *make_room(struct gate *g, const struct slot *peer)
{
	struct slot *free_one = NULL, *victim = NULL;
	unsigned int kind = 0, mine = 0, count[NSLOTS] = {0}, most = 0;
	int i, j;

	for (i = 0; i < NSLOTS; i++) {
		struct slot *s = &g->slots[i];

		if (s->state == SLOT_FREE) {
			free_one = free_one ?: s;
			continue;
		}
		if (s->owner != peer->owner)
			continue;
		kind++;
		if (!memcmp(s->peer, peer->peer, sizeof(s->peer)))
			mine++;
	}
	if (peer->owner) {
		if (kind < GATE_OWNER_SLOTS)
			return free_one;
		for (i = 0; i < NSLOTS; i++)
			if (g->slots[i].state != SLOT_FREE && g->slots[i].owner &&
			    (!victim || g->slots[i].since < victim->since))
				victim = &g->slots[i];
	} else if (mine >= GATE_PEER_SLOTS || kind >= GATE_OTHER_SLOTS) {
		/* How many each other peer holds; the victim is the oldest of the biggest. */
		for (i = 0; i < NSLOTS; i++) {
			if (g->slots[i].state == SLOT_FREE || g->slots[i].owner)
				continue;
			for (j = 0; j < NSLOTS; j++)
				if (g->slots[j].state != SLOT_FREE && !g->slots[j].owner &&
				    !memcmp(g->slots[i].peer, g->slots[j].peer, sizeof(peer->peer)))
					count[i]++;
			if (mine >= GATE_PEER_SLOTS &&
			    memcmp(g->slots[i].peer, peer->peer, sizeof(peer->peer)))
				continue;
			if (!victim || count[i] > most ||
			    (count[i] == most && g->slots[i].since < victim->since)) {
				victim = &g->slots[i];
				most = count[i];
			}
		}
	} else {
		return free_one;
	}
	if (!victim)
		return NULL;
	drop(victim);
	return victim;
}

/* A new connection @fd from @sa: a slot (returned; NULL: closed), GATE_REQUEST_MS to show the
 * token. */
static struct slot *admit(struct gate *g, int fd, const struct sockaddr_storage *sa,
			  socklen_t salen, uint64_t now)
{
	struct slot peer = {.fd = fd, .sa = *sa, .salen = salen}, *s;
	int one = 1;

	identify(g, &peer);
	s = make_room(g, &peer);
	if (!s) {
		close(fd);
		return NULL;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	*s = peer;
	s->state = SLOT_WAITING;
	s->since = now;
	s->deadline = now + GATE_REQUEST_MS * MS;
	s->next_look = 0;
	return s;
}

/* Look at what @s has sent: hand it on with the token, refuse it without, or wait for more. */
static void look(struct gate *g, struct slot *s, uint64_t now)
{
	ssize_t n;

	if (s->state == SLOT_LINGERING) {
		n = recv(s->fd, g->head, sizeof(g->head), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			drop(s);
		return;
	}
	n = recv(s->fd, g->head, sizeof(g->head), MSG_PEEK | MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) { /* gone without a request, or broken */
		drop(s);
		return;
	}
	if (g->ops->has_token(g->ctx, g->head, n)) {
		int fd = s->fd;

		s->state = SLOT_FREE;
		s->fd = -1;
		g->ops->pass(g->ctx, fd, (struct sockaddr *)&s->sa, s->salen);
		return;
	}
	if (memmem(g->head, n, "\r\n\r\n", 4) || memmem(g->head, n, "\n\n", 2) ||
	    n == (ssize_t)sizeof(g->head)) {
		pr_info("serve: a request refused: no valid token");
		refuse(g, s, "401 Unauthorized", g->ops->refusal, now);
		return;
	}
	s->next_look = now + REPEEK_NS;
}

/* ---- the thread ----------------------------------------------------------------------------- */

static void take_new(struct gate *g, uint64_t now)
{
	struct sockaddr_storage sa;
	struct slot *s;
	socklen_t len;
	int fd, i;

	for (i = 0; i < ACCEPT_BATCH; i++) {
		len = sizeof(sa);
		fd = accept4(g->lfd, (struct sockaddr *)&sa, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
			continue;
		if (fd < 0)
			return;
		s = admit(g, fd, &sa, len, now);
		/* Its request may be there already: looked at before more are accepted. */
		if (s)
			look(g, s, now);
	}
}

static const char timed_out[] = "probing serve: timed out: a request with the token must "
				"come within " STR(GATE_REQUEST_MS) " ms of connecting\n";

static void *run(void *arg)
{
	struct gate *g = arg;
	struct pollfd pfd[2 + NSLOTS];
	int idx[2 + NSLOTS];
	uint64_t now, next;
	int i, n, timeout;

	for (;;) {
		now = now_mono_ns();
		next = UINT64_MAX;
		pfd[0] = (struct pollfd){.fd = g->wake, .events = POLLIN};
		pfd[1] = (struct pollfd){.fd = g->lfd, .events = POLLIN};
		n = 2;
		for (i = 0; i < NSLOTS; i++) {
			struct slot *s = &g->slots[i];

			if (s->state == SLOT_FREE)
				continue;
			if (now >= s->deadline) {
				if (s->state == SLOT_WAITING) {
					pr_info("serve: a connection closed: no request in %d ms",
						GATE_REQUEST_MS);
					refuse(g, s, "408 Request Timeout", timed_out, now);
				} else {
					drop(s);
					continue;
				}
			}
			next = s->deadline < next ? s->deadline : next;
			if (s->next_look > now) {
				next = s->next_look < next ? s->next_look : next;
				continue;
			}
			idx[n] = i;
			pfd[n++] = (struct pollfd){.fd = s->fd, .events = POLLIN};
		}
		timeout = next == UINT64_MAX ? -1 : (int)((next - now) / MS) + 1;
		if (poll(pfd, n, timeout) < 0 && errno != EINTR)
			break;
		if (pfd[0].revents)
			break;
		now = now_mono_ns();
		for (i = 2; i < n; i++)
			if (pfd[i].revents && g->slots[idx[i]].fd == pfd[i].fd)
				look(g, &g->slots[idx[i]], now);
		if (pfd[1].revents & POLLIN)
			take_new(g, now);
		else if (pfd[1].revents & (POLLERR | POLLNVAL))
			break;
	}
	return NULL;
}

int gate__start(int lfd, const struct gate_ops *ops, void *ctx, struct gate **out)
{
	struct timeval tv = {.tv_usec = 100000}; /* a SOCK_DIAG answer takes microseconds */
	struct gate *g;
	int err, i;

	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->lfd = lfd;
	g->ops = ops;
	g->ctx = ctx;
	g->self = geteuid();
	for (i = 0; i < NSLOTS; i++)
		g->slots[i].fd = -1;
	/* Accepted in batches until none is left: the socket must not block. */
	i = fcntl(lfd, F_GETFL);
	if (i < 0 || fcntl(lfd, F_SETFL, i | O_NONBLOCK)) {
		err = -errno;
		free(g);
		return err;
	}
	g->wake = eventfd(0, EFD_CLOEXEC);
	g->diag = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (g->diag >= 0)
		setsockopt(g->diag, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	else
		pr_debug("serve: no NETLINK_SOCK_DIAG (%s): peers are told apart by address",
			 strerror(errno));
	if (g->wake < 0) {
		err = -errno;
		goto fail;
	}
	err = -pthread_create(&g->thread, NULL, run, g);
	if (err)
		goto fail;
	g->started = true;
	*out = g;
	return 0;
fail:
	gate__stop(g);
	return err;
}

void gate__stop(struct gate *g)
{
	uint64_t one = 1;
	int i;

	if (!g)
		return;
	if (g->started) {
		(void)!write(g->wake, &one, sizeof(one));
		pthread_join(g->thread, NULL);
	}
	for (i = 0; i < NSLOTS; i++)
		drop(&g->slots[i]);
	if (g->wake >= 0)
		close(g->wake);
	if (g->diag >= 0)
		close(g->diag);
	free(g);
}
