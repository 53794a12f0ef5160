// SPDX-License-Identifier: MIT
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>

#include "injector/agent.h"
#include "live/agent_client.h"
#include "injector/hostport.h"
#include "base/jsonq.h"
#include "base/log.h"
#include "base/procinfo.h"
#include "base/util.h"

struct agent_client {
	int fd;
	bool hung;
};

pid_t agent_client__ns_pid(pid_t pid)
{
	pid_t ns = procinfo_ns_pid(pid);

	return ns > 0 ? ns : pid;
}

/* Wait until @fd is ready for @events, up to @ms (-1 = for ever). 0, -ETIMEDOUT or -errno. */
static int wait_fd(int fd, short events, int ms)
{
	struct pollfd p = {fd, events, 0};
	int r;

	do
		r = poll(&p, 1, ms);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	return r ? 0 : -ETIMEDOUT;
}

static int connect_timeout(int fd, const struct sockaddr *sa, socklen_t sl, int timeout_ms)
{
	int flags = fcntl(fd, F_GETFL), err = 0;
	socklen_t el = sizeof(err);

	fcntl(fd, F_SETFL, flags | O_NONBLOCK);
	if (connect(fd, sa, sl)) {
		if (errno != EINPROGRESS && errno != EAGAIN)
			return -errno;
		err = wait_fd(fd, POLLOUT, timeout_ms);
		if (err)
			return err;
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el))
			return -errno;
		if (err)
			return -err;
	}
	fcntl(fd, F_SETFL, flags);
	return 0;
}

/*
 * Connect Unix socket @fd within @timeout_ms. A non-blocking connect() to a listener whose
 * queue is full fails at once with EAGAIN (Unix sockets have no connection in progress), so
 * the connect blocks instead, bounded by SO_SNDTIMEO: the kernel wakes it as soon as the
 * agent takes a connection, and it never waits behind a flood of connections. -ETIMEDOUT
 * when the queue stayed full.
 */
static int connect_unix(int fd, const struct sockaddr *sa, socklen_t sl, int timeout_ms)
{
	struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000}, none = {0, 0};
	uint64_t end = now_mono_ns() + (uint64_t)timeout_ms * 1000000ULL;
	int err = 0;

	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	while (connect(fd, sa, sl)) {
		err = -errno;
		if (err != -EINTR || now_mono_ns() >= end)
			break;
		err = 0;
	}
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof(none));
	return err == -EAGAIN || err == -EINTR ? -ETIMEDOUT : err;
}

static bool same_netns(pid_t pid)
{
	char fn[64];
	struct stat a, b;

	snprintf(fn, sizeof(fn), "/proc/%d/ns/net", pid);
	if (stat("/proc/self/ns/net", &a) || stat(fn, &b))
		return true;
	return a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

/*
 * The name of the agent's listening socket, found through the process's own file
 * descriptors and its network namespace's /proc/PID/net/unix: for when the usual name is
 * not the one (the agent added a random part because another process with the same pid, in
 * another pid namespace, had taken it). 0 and @name, or -ENOENT.
 */
static int find_socket_name(pid_t pid, char *name, size_t len)
{
	char fn[64], link[64], *buf, *line, *save = NULL;
	unsigned long long inodes[256], ino;
	struct dirent *de;
	int n = 0, i, err = -ENOENT;
	DIR *d;

	snprintf(fn, sizeof(fn), "/proc/%d/fd", pid);
	d = opendir(fn);
	if (!d)
		return -ENOENT;
	while ((de = readdir(d)) && n < 256) {
		char p[300];
		ssize_t l;

		snprintf(p, sizeof(p), "/proc/%d/fd/%s", pid, de->d_name);
		l = readlink(p, link, sizeof(link) - 1);
		if (l <= 0)
			continue;
		link[l] = '\0';
		if (sscanf(link, "socket:[%llu]", &ino) == 1)
			inodes[n++] = ino;
	}
	closedir(d);
	snprintf(fn, sizeof(fn), "/proc/%d/net/unix", pid);
	buf = read_file(fn, 0, NULL);
	if (!buf)
		return -ENOENT;
	for (line = strtok_r(buf, "\n", &save); line && err; line = strtok_r(NULL, "\n", &save)) {
		unsigned long flags = 0;
		char path[128] = "";

		if (sscanf(line, "%*s %*s %*s %lx %*s %*s %llu %127s", &flags, &ino, path) < 3)
			continue;
		if (!(flags & 0x10000) || path[0] != '@' ||
		    strncmp(path + 1, AGENT_SOCK_PREFIX, strlen(AGENT_SOCK_PREFIX)))
			continue;
		for (i = 0; i < n; i++)
			if (inodes[i] == ino) {
				snprintf(name, len, "%s", path + 1);
				err = 0;
				break;
			}
	}
	free(buf);
	return err;
}

/* Connect to the abstract socket @name (in the target's network namespace) and check that
 * the process listening on it is @pid. Return the fd or -errno. */
static int connect_name(pid_t pid, const char *name, int timeout_ms)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct ucred cr;
	socklen_t sl, crl = sizeof(cr);
	char fn[64];
	int fd = -1, self_ns = -1, target_ns = -1, err = 0;

	/* Abstract sockets belong to a network namespace: a containerized target's socket is
	 * only reachable from inside its namespace. Enter it for the connect (root only). */
	if (!same_netns(pid)) {
		snprintf(fn, sizeof(fn), "/proc/%d/ns/net", pid);
		self_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
		target_ns = open(fn, O_RDONLY | O_CLOEXEC);
		if (self_ns < 0 || target_ns < 0 || setns(target_ns, CLONE_NEWNET)) {
			err = errno == ENOENT ? -ESRCH : -EPERM;
			goto cleanup;
		}
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (self_ns >= 0 && setns(self_ns, CLONE_NEWNET))
		pr_warn("could not return to our network namespace: %s", strerror(errno));
	if (fd < 0) {
		err = -errno;
		goto cleanup;
	}
	snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "%s", name);
	sl = offsetof(struct sockaddr_un, sun_path) + 1 + strlen(sa.sun_path + 1);
	err = connect_unix(fd, (struct sockaddr *)&sa, sl, timeout_ms);
	if (err)
		goto cleanup;
	/* The kernel tells who listens (its pid in our namespace): never talk to the agent of
	 * another process that happens to have the same pid in its own namespace. */
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crl) || cr.pid != pid) {
		pr_debug("@%s is served by process %d, not %d", name, (int)cr.pid, (int)pid);
		err = -ESTALE;
		goto cleanup;
	}
cleanup:
	if (err && fd >= 0)
		close(fd);
	if (self_ns >= 0)
		close(self_ns);
	if (target_ns >= 0)
		close(target_ns);
	return err ? err : fd;
}

int agent_client__connect_pid(pid_t pid, int timeout_ms, struct agent_client **out)
{
	struct agent_client *c;
	char name[128];
	int fd, err;

	if (kill(pid, 0) && errno == ESRCH)
		return -ESRCH;
	snprintf(name, sizeof(name), "%s%d", AGENT_SOCK_PREFIX, (int)agent_client__ns_pid(pid));
	fd = connect_name(pid, name, timeout_ms);
	if (fd == -ECONNREFUSED || fd == -ENOENT || fd == -ESTALE) {
		err = find_socket_name(pid, name, sizeof(name));
		if (!err)
			fd = connect_name(pid, name, timeout_ms);
		else if (fd == -ESTALE)
			fd = -ECONNREFUSED; /* that name is someone else's; ours does not exist */
	}
	if (fd < 0)
		return fd;
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	c->fd = fd;
	*out = c;
	return 0;
}

int agent_client__connect_tcp(const char *hostport, const char *token, int timeout_ms,
			      struct agent_client **out)
{
	struct addrinfo hints = {0}, *res = NULL, *ai;
	struct agent_client *c = NULL;
	struct agent_reply r = {0};
	char host[256], port[8], why[200];
	unsigned int pn;
	int fd = -1, err = -EINVAL, one = 1, rc;

	if (hostport_parse(hostport, true, false, host, sizeof(host), &pn, why, sizeof(why)))
		return -EINVAL;
	snprintf(port, sizeof(port), "%u", pn);
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	rc = getaddrinfo(host, port, &hints, &res);
	if (rc == EAI_AGAIN)
		return -EHOSTDOWN; /* the name service did not answer */
	if (rc == EAI_MEMORY)
		return -ENOMEM;
	if (rc == EAI_SYSTEM)
		return errno ? -errno : -EIO;
	if (rc)
		return -ENXIO; /* no such host (or no address of a usable family) */
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		err = connect_timeout(fd, ai->ai_addr, ai->ai_addrlen, timeout_ms);
		if (!err)
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return err;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	c->fd = fd;
	err = agent_client__request(c, "auth", token ? token : "", timeout_ms, timeout_ms, NULL,
				    &r);
	if (!err && r.type != FRAME_RESULT)
		err = r.data && !strncmp(r.data, AGENT_AUTH_THROTTLED, strlen(AGENT_AUTH_THROTTLED))
			      ? -EAGAIN
			      : -EACCES;
	agent_reply__free(&r);
	if (err) {
		agent_client__free(c);
		return err;
	}
	*out = c;
	return 0;
}

void agent_client__free(struct agent_client *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	free(c);
}

bool agent_client__hung(const struct agent_client *c)
{
	return c && c->hung;
}

void agent_reply__free(struct agent_reply *r)
{
	if (!r)
		return;
	free(r->data);
	r->data = NULL;
	r->len = 0;
}

static int send_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return errno == EPIPE ? -ECONNRESET : -errno;
		p += w;
		n -= w;
	}
	return 0;
}

static int send_frame(int fd, char type, const char *a, size_t alen, const char *b, size_t blen)
{
	unsigned char hdr[5];
	uint32_t l = 1 + alen + blen;
	int err;

	hdr[0] = l;
	hdr[1] = l >> 8;
	hdr[2] = l >> 16;
	hdr[3] = l >> 24;
	hdr[4] = type;
	err = send_all(fd, hdr, 5);
	if (!err && alen)
		err = send_all(fd, a, alen);
	if (!err && blen)
		err = send_all(fd, b, blen);
	return err;
}

/*
 * Read exactly @n bytes before @deadline (monotonic ns, 0 = none). A set *@interrupt sends
 * one cancel frame (and is then cleared).
 */
static int read_full(struct agent_client *c, void *buf, size_t n, uint64_t deadline,
		     volatile sig_atomic_t *interrupt)
{
	char *p = buf;

	while (n) {
		int ms = -1, err;
		ssize_t r;

		if (interrupt && *interrupt) {
			*interrupt = 0;
			send_frame(c->fd, FRAME_CANCEL, NULL, 0, NULL, 0);
		}
		if (deadline) {
			uint64_t now = now_mono_ns();

			if (now >= deadline)
				return -ETIMEDOUT;
			ms = (deadline - now + 999999) / 1000000;
		}
		/* Wake up now and then to notice an interrupt set by a signal handler that came
		 * between the check above and poll. */
		if (interrupt && (ms < 0 || ms > 100))
			ms = 100;
		err = wait_fd(c->fd, POLLIN, ms);
		if (err == -ETIMEDOUT)
			continue;
		if (err)
			return err;
		r = recv(c->fd, p, n, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -ECONNRESET;
		p += r;
		n -= r;
	}
	return 0;
}

int agent_client__request(struct agent_client *c, const char *kind, const char *body, int gil_ms,
			  int run_ms, volatile sig_atomic_t *interrupt, struct agent_reply *r)
{
	unsigned char hdr[5];
	uint64_t deadline;
	bool got_gil = false;
	uint32_t l;
	char *data;
	int err;

	memset(r, 0, sizeof(*r));
	c->hung = false;
	if (!body)
		body = "";
	err = send_frame(c->fd, FRAME_REQUEST, kind, strlen(kind) + 1, body, strlen(body));
	if (err)
		return err;
	deadline = gil_ms >= 0 ? now_mono_ns() + (uint64_t)gil_ms * 1000000ULL : 0;
	for (;;) {
		err = read_full(c, hdr, 5, deadline, interrupt);
		if (err == -ETIMEDOUT && !got_gil)
			c->hung = true;
		if (err)
			return err;
		l = hdr[0] | hdr[1] << 8 | hdr[2] << 16 | (uint32_t)hdr[3] << 24;
		if (!l || l > AGENT_MAX_FRAME)
			return -EPROTO;
		if (hdr[4] == FRAME_GIL) {
			/* The GIL came: from now on the request's own time-out applies. */
			deadline = run_ms >= 0 ? now_mono_ns() + (uint64_t)run_ms * 1000000ULL : 0;
			got_gil = true;
			continue;
		}
		data = malloc(l);
		if (!data)
			return -ENOMEM;
		err = read_full(c, data, l - 1, deadline, interrupt);
		if (err) {
			free(data);
			return err;
		}
		data[l - 1] = '\0';
		r->type = hdr[4];
		r->data = data;
		r->len = l - 1;
		return 0;
	}
}
