// SPDX-License-Identifier: MIT
/*
 * agent_server: the agent (I/O) thread, "probing-agent" (docs/live.md, "The agent"). It serves
 * the abstract Unix socket "@probing-<pid>", and TCP when asked, with one poll() loop, and
 * never touches the GIL: it answers the C-side kinds ("hello", "auth", "listen", "token")
 * itself and queues every other request to the workers (agent_worker.c). The protocol is in
 * agent.h; who may connect, and how much they may send, is agent_auth.c's business.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "agent.h"
#include "agent_int.h"
#include "hostport.h"

#define ACCEPT_BATCH 256 /* connections accepted per wake-up of the agent thread */
/* A short queue of connections waiting to be accepted: a connection waits behind all those
 * queued before it, and a flood of another user's connections keeps any queue full. With
 * 128 the owner's waits behind at most 128 of them (measured: ~1 s behind SOMAXCONN's 4096
 * under a flood, ~15 ms behind 128); when the queue is full its connect() sleeps in the
 * kernel and is woken as soon as there is room. */
#define LISTEN_BACKLOG 128

/* ---- frames ------------------------------------------------------------------------- */

/*
 * Send all of @buf. On the agent (I/O) thread a send never waits: its answers are small, and
 * a client that does not read them fills its socket and is dropped (-1 here) instead of
 * stopping the thread that lets everyone else in. The worker's sends may wait (SO_SNDTIMEO).
 */
static int write_full(int fd, const void *buf, size_t n)
{
	int flags = MSG_NOSIGNAL;
	const char *p = buf;

	if (ag.io_thread_set && pthread_equal(pthread_self(), ag.io_thread))
		flags |= MSG_DONTWAIT;
	while (n) {
		ssize_t w = send(fd, p, n, flags);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= w;
	}
	return 0;
}

int send_frame(int fd, char type, const void *payload, size_t len)
{
	unsigned char hdr[5];
	uint32_t l = len + 1;

	hdr[0] = l;
	hdr[1] = l >> 8;
	hdr[2] = l >> 16;
	hdr[3] = l >> 24;
	hdr[4] = type;
	if (write_full(fd, hdr, 5))
		return -1;
	return len ? write_full(fd, payload, len) : 0;
}

int send_text(int fd, char type, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return send_frame(fd, type, buf, strlen(buf));
}

/* ---- clients (I/O thread) --------------------------------------------------------------- */

void drop_client(int i)
{
	struct client *c = &ag.clients[i];

	close_fd(&c->fd);
	free(c->buf);
	memset(c, 0, sizeof(*c));
	c->fd = -1;
}

/* The answer to "hello": the agent's status, without the GIL. */
static int hello(int fd)
{
	char buf[1536], ver[400] = "null", sock[96], tcp[128] = "null", err[600] = "null";
	bool ready = py_resolve() && !ag.py_gone && py.IsInitialized(), busy;

	busy = workers_busy();
	if (ready)
		json_str(ver, sizeof(ver), py.GetVersion());
	json_str(sock, sizeof(sock), ag.sockname);
	if (ag.tcp_addr[0])
		json_str(tcp, sizeof(tcp), ag.tcp_addr);
	if (ag.py_error[0])
		json_str(err, sizeof(err), ag.py_error);
	snprintf(buf, sizeof(buf),
		 "{\"pid\": %d, \"since\": %.6f, \"agent\": \"%s\", \"socket\": %s, \"tcp\": %s, "
		 "\"python\": %s, \"python_ready\": %s, \"helpers_loaded\": %s, \"busy\": %s, "
		 "\"error\": %s}",
		 (int)getpid(), ag.since, AGENT_VERSION, sock, tcp, ver, ready ? "true" : "false",
		 ag.py_loaded ? "true" : "false", busy ? "true" : "false", err);
	return send_frame(fd, FRAME_RESULT, buf, strlen(buf));
}

static int start_tcp(const char *spec, bool *already, char *err, size_t errlen);

/* One complete frame from an owner or an authenticated client @i. Return false to drop it
 * (also when it does not read its answers). */
static bool handle_frame(int i, char type, char *p, size_t n)
{
	struct client *c = &ag.clients[i];
	char *kind, *body, err[1024], a[160];
	bool already = false;
	size_t klen;
	int r = 0;

	if (type == FRAME_CANCEL) {
		/* Cancel the request in flight; one that already ended needs nothing. */
		if (is_inflight(i) && cancel_request(i))
			r = send_text(c->fd, FRAME_ERROR,
				      "the request was cancelled before it started");
		return !r;
	}
	if (type != FRAME_REQUEST) {
		send_text(c->fd, FRAME_ERROR, "bad frame type 0x%02x", (unsigned char)type);
		return false;
	}
	kind = p;
	klen = strnlen(p, n);
	if (klen == n) {
		send_text(c->fd, FRAME_ERROR, "bad request: no kind");
		return false;
	}
	body = p + klen + 1;
	if (!strcmp(kind, "hello")) {
		r = hello(c->fd);
	} else if (!strcmp(kind, "auth")) {
		r = send_text(c->fd, FRAME_RESULT, "{\"ok\": true}");
	} else if (!strcmp(kind, "listen") || !strcmp(kind, "token")) {
		/* Starting TCP, and the token, are for the owner only (the peer-checked socket). */
		if (c->state != CL_OWNER) {
			r = send_text(c->fd, FRAME_ERROR,
				      "'%s' is only answered on the Unix socket", kind);
		} else if (!strcmp(kind, "listen") && start_tcp(body, &already, err, sizeof(err))) {
			r = send_text(c->fd, FRAME_ERROR, "%s", err);
		} else if (ag.tcp_fd < 0) {
			r = send_text(c->fd, FRAME_ERROR,
				      "the agent of process %d serves no TCP port (start one "
				      "with 'probing inject -p PID --listen ADDR')",
				      (int)getpid());
		} else {
			json_str(a, sizeof(a), ag.tcp_addr);
			r = send_text(c->fd, FRAME_RESULT,
				      "{\"listen\": %s, \"token\": \"%s\", \"already\": %s}", a,
				      auth_token(), already ? "true" : "false");
		}
	} else if (!queue_request(i, kind, body, n - klen - 1, err, sizeof(err))) {
		r = send_text(c->fd, FRAME_ERROR, "%s",
			      err[0] ? err : "out of memory in the agent");
	}
	return !r;
}

/*
 * Run the complete frames buffered for client @i. While a request of it is in flight only
 * cancel frames are taken; the rest waits for the answer. Return false to drop the client.
 */
static bool client_process(int i)
{
	struct client *c = &ag.clients[i];
	size_t want;

	while (c->len >= 4) {
		uint32_t l = frame_len(c->buf);
		unsigned char saved;
		bool keep;

		if (c->state == CL_PREAUTH && auth_frame_bad(c))
			return auth_refused(i);
		if (!l || l > AGENT_MAX_FRAME)
			return false;
		if (c->len < 4 + (size_t)l)
			break;
		if (c->buf[4] != FRAME_CANCEL && is_inflight(i))
			break;
		saved = c->buf[4 + l]; /* the next frame's first byte, or the spare byte */
		c->buf[4 + l] = '\0';
		if (c->state == CL_PREAUTH)
			keep = authenticate(i, (char *)c->buf + 5, l - 1);
		else
			keep = handle_frame(i, c->buf[4], (char *)c->buf + 5, l - 1);
		if (!keep)
			return false;
		c = &ag.clients[i];
		c->buf[4 + l] = saved;
		memmove(c->buf, c->buf + 4 + l, c->len - 4 - l);
		c->len -= 4 + l;
	}
	/* Give back the room a big frame needed. */
	want = buf_limit(c) + 1;
	if (c->cap > BUF_MIN + 1 && c->cap > want) {
		unsigned char *tmp = realloc(c->buf, want);

		if (tmp) {
			c->buf = tmp;
			c->cap = want;
		}
	}
	return true;
}

/* Read what client @i sent and run what is complete. Return false to drop it. */
static bool client_input(int i)
{
	struct client *c = &ag.clients[i];
	char sink[4096];
	size_t want;
	ssize_t r;

	if (c->state == CL_DENIED) {
		/* Read and drop what it sent: closing with unread data would reset the
		 * connection before it could read why it was refused. */
		r = recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT);
		return r > 0 || (r < 0 && (errno == EINTR || errno == EAGAIN));
	}
	/* A full buffer: the client sent more than BUF_MIN (or its next frame) behind a
	 * request that runs. Our client sends nothing but cancel frames meanwhile; holding
	 * more would be memory without bound, and not reading it would keep us from seeing
	 * it hang up. So it goes, as if it had hung up (its request is interrupted). */
	want = buf_limit(c);
	if (c->len >= want)
		goto gone;
	if (c->cap < want + 1) {
		unsigned char *tmp = realloc(c->buf, want + 1);

		if (!tmp)
			return false;
		c->buf = tmp;
		c->cap = want + 1;
	}
	r = recv(c->fd, c->buf + c->len, want - c->len, MSG_DONTWAIT);
	if (r < 0 && (errno == EINTR || errno == EAGAIN))
		return true;
	if (r <= 0) {
gone:
		if (is_inflight(i)) {
			/* Gone while its request waits or runs: drop or interrupt it, and close
			 * the socket once the worker is done with it. */
			c->hup = true;
			cancel_request(i);
			return true;
		}
		return false;
	}
	c->len += r;
	return client_process(i);
}

/* Take the connections waiting on listening socket @lfd (up to ACCEPT_BATCH). */
static void accept_clients(int lfd, bool tcp)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	int fd, n;

	for (n = 0; n < ACCEPT_BATCH; n++) {
		sl = sizeof(ss);
		fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
			continue;
		if (fd < 0) {
			/* The target is out of descriptors: the connection stays queued and poll
			 * would report it at once; try again a little later. */
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM)
				ag.accept_pause = mono_time() + 0.1;
			return;
		}
		if (tcp)
			admit_tcp(fd, &ss);
		else
			admit_unix(fd);
	}
}

/* Is listening socket ag.tcp_fd bound to one of @res (port 0 there: any port)? */
static bool same_listen(const struct addrinfo *res)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	const struct addrinfo *ai;

	if (getsockname(ag.tcp_fd, (struct sockaddr *)&ss, &sl))
		return false;
	for (ai = res; ai; ai = ai->ai_next) {
		if (ai->ai_family != ss.ss_family)
			continue;
		if (ss.ss_family == AF_INET) {
			const struct sockaddr_in *a = (const void *)ai->ai_addr, *b = (void *)&ss;

			if (a->sin_addr.s_addr == b->sin_addr.s_addr &&
			    (!a->sin_port || a->sin_port == b->sin_port))
				return true;
		} else if (ss.ss_family == AF_INET6) {
			const struct sockaddr_in6 *a = (const void *)ai->ai_addr, *b = (void *)&ss;

			if (!memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(a->sin6_addr)) &&
			    (!a->sin6_port || a->sin6_port == b->sin6_port))
				return true;
		}
	}
	return false;
}

/* A listening socket on the first address of @res that takes one: its fd, or -1 (errno). */
static int listen_any(const struct addrinfo *res)
{
	const struct addrinfo *ai;
	int fd = -1, one = 1;

	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (!bind(fd, ai->ai_addr, ai->ai_addrlen) && !listen(fd, LISTEN_BACKLOG))
			break;
		close_fd(&fd);
	}
	return fd;
}

/* ag.tcp_addr: the address listening socket @fd is bound to (HOST:PORT, [IPV6]:PORT). */
static void name_tcp(int fd)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	getsockname(fd, (struct sockaddr *)&ss, &sl);
	if (ss.ss_family == AF_INET6) {
		char a[INET6_ADDRSTRLEN];
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

		inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof(a));
		snprintf(ag.tcp_addr, sizeof(ag.tcp_addr), "[%s]:%d", a, ntohs(s6->sin6_port));
	} else {
		char a[INET_ADDRSTRLEN];
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

		inet_ntop(AF_INET, &s4->sin_addr, a, sizeof(a));
		snprintf(ag.tcp_addr, sizeof(ag.tcp_addr), "%s:%d", a, ntohs(s4->sin_port));
	}
}

/*
 * Serve TCP on @spec (hostport.h: PORT, HOST:PORT, [IPV6]:PORT) with a new random token.
 * Already serving: *@already is set if @spec names the same address (port 0: any), an error
 * otherwise (one TCP address per process). Return 0, or -1 with the reason in @err.
 */
static int start_tcp(const char *spec, bool *already, char *err, size_t errlen)
{
	struct addrinfo hints = {0}, *res = NULL;
	char host[256], port[8], why[200];
	unsigned int pn;
	int fd, rc;

	if (hostport_parse(spec, false, true, host, sizeof(host), &pn, why, sizeof(why))) {
		snprintf(err, errlen, "bad address: %s", why);
		return -1;
	}
	snprintf(port, sizeof(port), "%u", pn);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	rc = getaddrinfo(host[0] ? host : HOSTPORT_DEFAULT_HOST, port, &hints, &res);
	if (rc) {
		snprintf(err, errlen, "bad address '%s': %s", spec, gai_strerror(rc));
		return -1;
	}
	if (ag.tcp_fd >= 0) {
		*already = same_listen(res);
		freeaddrinfo(res);
		if (*already)
			return 0; /* report the same address and token */
		snprintf(err, errlen,
			 "the agent already serves TCP on %s, not %s: one address per process "
			 "('probing inject -p PID --show-token' prints it with its token)",
			 ag.tcp_addr, spec);
		return -1;
	}
	fd = listen_any(res);
	freeaddrinfo(res);
	if (fd < 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", spec, strerror(errno));
		return -1;
	}
	rc = auth_new_token();
	if (rc) {
		snprintf(err, errlen, "no randomness for the token: %s", strerror(-rc));
		close(fd);
		return -1;
	}
	name_tcp(fd);
	ag.tcp_fd = fd;
	return 0;
}

/* ---- the agent thread ----------------------------------------------------------------- */

/* 'probing run --listen': serve TCP from the start, on the address and with the token the
 * constructor took out of the environment; a failure is said on the program's stderr, the
 * only place its user will look. */
static void start_env_tcp(void)
{
	char err[256], msg[400];
	bool already = false;
	ssize_t w;
	int len;

	if (!ag.env_listen[0])
		return;
	if (start_tcp(ag.env_listen, &already, err, sizeof(err))) {
		len = snprintf(msg, sizeof(msg),
			       "probing agent (process %d): not serving TCP: %s\n", (int)getpid(),
			       err);
		w = write(STDERR_FILENO, msg, len > 0 && len < (int)sizeof(msg) ? len : 0);
		(void)w;
	} else if (ag.env_token[0]) {
		auth_set_token(ag.env_token);
	}
	explicit_bzero(ag.env_token, sizeof(ag.env_token));
	ag.env_listen[0] = '\0';
}

/*
 * Bind the abstract Unix socket "@probing-<pid>" (ag.listen_fd, ag.sockname: no file to clean
 * up, gone with the process; non-blocking: every connection waiting is taken at each wake-up,
 * accept_clients), listen, and make the wake-up pipe. 0, or -1.
 */
static int serve_unix(void)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	socklen_t sl;
	int i;

	ag.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (ag.listen_fd < 0)
		return -1;
	for (i = 0; i < 2; i++) {
		unsigned int rnd = 0;

		/* The name is taken when another process with the same pid (in another pid
		 * namespace) shares our network namespace: then add a random part. Clients
		 * find the name through our file descriptors and check the peer's pid. */
		if (i && getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
			rnd = (unsigned int)(mono_time() * 1e9);
		if (i)
			snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "%s%d-%08x",
				 AGENT_SOCK_PREFIX, (int)ag.pid, rnd);
		else
			snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "%s%d",
				 AGENT_SOCK_PREFIX, (int)ag.pid);
		sl = offsetof(struct sockaddr_un, sun_path) + 1 + strlen(sa.sun_path + 1);
		if (!bind(ag.listen_fd, (struct sockaddr *)&sa, sl))
			break;
		if (errno != EADDRINUSE || i)
			return -1;
	}
	snprintf(ag.sockname, sizeof(ag.sockname), "@%s", sa.sun_path + 1);
	if (listen(ag.listen_fd, LISTEN_BACKLOG))
		return -1;
	if (pipe2(ag.wake, O_CLOEXEC | O_NONBLOCK))
		return -1;
	return 0;
}

/*
 * Drop the clients whose time is up (denied ones had their second to hang up; pre-auth ones
 * their time to authenticate), and serve again those whose request just ended. Return the
 * next deadline (mono_time), 0 if none.
 */
static double sweep_clients(double now)
{
	double next = 0;
	int i;

	for (i = 0; i < MAX_CLIENTS; i++) {
		struct client *c = &ag.clients[i];
		bool timed = c->state == CL_DENIED || c->state == CL_PREAUTH;

		if (c->state == CL_FREE)
			continue;
		if (timed && c->deadline <= now) {
			if (c->state == CL_PREAUTH)
				auth_timed_out(i, now);
			drop_client(i);
		} else if (timed) {
			if (!next || c->deadline < next)
				next = c->deadline;
		} else if (!is_inflight(i)) {
			/* A request just ended: close a client that left, or run what it sent
			 * meanwhile. */
			if (c->hup || !client_process(i))
				drop_client(i);
		}
	}
	return next;
}

/*
 * Fill @p for poll(): the wake-up pipe, the Unix and TCP listening sockets (-1, which poll
 * ignores, while not @accepting), then every client that may send, @slot_of[n] the client of
 * entry n. Return how many entries.
 */
static int poll_set(struct pollfd *p, int *slot_of, bool accepting)
{
	int i, n = 0;

	p[n++] = (struct pollfd){ag.wake[0], POLLIN, 0};
	p[n++] = (struct pollfd){accepting ? ag.listen_fd : -1, POLLIN, 0};
	p[n++] = (struct pollfd){accepting ? ag.tcp_fd : -1, POLLIN, 0};
	for (i = 0; i < MAX_CLIENTS; i++) {
		struct client *c = &ag.clients[i];

		if (c->state == CL_FREE || c->hup)
			continue;
		slot_of[n] = i;
		p[n++] = (struct pollfd){c->fd, POLLIN, 0};
	}
	return n;
}

/* What poll() reported in @p (@n entries, poll_set): the owner's way in first, so that it
 * never waits behind anyone, then the clients' input, then TCP connections. */
static void serve_ready(const struct pollfd *p, const int *slot_of, int n)
{
	int i;

	if (p[0].revents) {
		char drain[64];
		ssize_t r = read(ag.wake[0], drain, sizeof(drain));
		(void)r;
	}
	if (ag.stop)
		return;
	if (p[1].revents & POLLIN)
		accept_clients(ag.listen_fd, false);
	for (i = 3; i < n; i++) {
		if (!p[i].revents || ag.clients[slot_of[i]].state == CL_FREE)
			continue;
		if (!client_input(slot_of[i]))
			drop_client(slot_of[i]);
		if (ag.stop)
			break;
	}
	if (ag.tcp_fd >= 0 && (p[2].revents & POLLIN))
		accept_clients(ag.tcp_fd, true);
}

void *agent_main(void *arg)
{
	struct pollfd p[MAX_CLIENTS + 3];
	int i, n;

	pthread_setname_np(pthread_self(), "probing-agent");
	ag.io_thread = pthread_self();
	ag.io_thread_set = true;
	ag.pid = getpid();
	ag.since = wall_time();
	if (serve_unix())
		goto cleanup;
	start_env_tcp();

	while (!ag.stop) {
		int timeout = -1, slot_of[MAX_CLIENTS + 3];
		double now = mono_time(), next;
		bool accepting = ag.accept_pause <= now;

		next = sweep_clients(now);
		if (!accepting && (!next || ag.accept_pause < next))
			next = ag.accept_pause;
		if (next)
			timeout = (int)((next - now) * 1000) + 1;
		n = poll_set(p, slot_of, accepting);
		if (poll(p, n, timeout) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		serve_ready(p, slot_of, n);
	}
cleanup:
	/* Leave the sockets of requests in flight to the worker (the process is exiting). */
	for (i = 0; i < MAX_CLIENTS; i++)
		if (ag.clients[i].state != CL_FREE && !is_inflight(i))
			drop_client(i);
	workers_wake_all();
	close_fd(&ag.listen_fd);
	close_fd(&ag.tcp_fd);
	pthread_mutex_lock(&ag.lock);
	ag.running = false;
	pthread_mutex_unlock(&ag.lock);
	return NULL;
}
