/* SPDX-License-Identifier: MIT */
/*
 * gate: the door of `probing serve`. One thread accepts the connections and holds each one
 * until the head of its first request shows that it carries the token; only then is it
 * handed to the web server (http.c), which checks the token again, exactly, on every request.
 * So a connection that has not shown the token never takes a place in the web server.
 *
 * Before that it costs a small slot here, never a thread: its bytes are only peeked at (they
 * stay in the kernel's socket buffer for the web server to read), at most GATE_HEAD_MAX of
 * them; it has GATE_REQUEST_MS to send a head with the token, else it is answered 408 ("timed
 * out") and closed; a complete head without the token is answered 401 and closed. Each kind of
 * peer has slots of its own, as in the agent (docs/live.md): the server's own user and root
 * (found by the peer socket's owner, NETLINK_SOCK_DIAG, on this machine), then every other
 * user, or remote address, with a few each out of a shared few. When a peer's slots are full
 * its own oldest connection is dropped, so nobody who cannot authenticate holds the owner's
 * way in (docs/serve.md, "Security").
 */
#ifndef PROBING_GATE_H
#define PROBING_GATE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#define GATE_HEAD_MAX	 8192 /* bytes of a request's head looked at for the token */
#define GATE_REQUEST_MS	 3000 /* time for a connection to show a head with the token */
#define GATE_OWNER_SLOTS 32   /* connections of the server's user or root waiting here */
#define GATE_OTHER_SLOTS 16   /* connections of everyone else waiting here, together */
#define GATE_PEER_SLOTS	 4    /* of one other user (or one remote address or IPv6 /64) */

struct gate_ops {
	/* Does the request head @head (@n bytes, not NUL-terminated) carry the token? */
	bool (*has_token)(void *ctx, const char *head, size_t n);
	/* Take the connection @fd (peer @sa); it is the callee's from now on, even on failure. */
	void (*pass)(void *ctx, int fd, const struct sockaddr *sa, socklen_t len);
	/* The body of the 401 answer (plain text). */
	const char *refusal;
};

struct gate;

/*
 * Accept the connections of the listening socket @lfd (which stays the caller's) on a thread
 * of its own, with @ops and @ctx. Store the gate in *@out and return 0, or return -errno.
 */
int gate__start(int lfd, const struct gate_ops *ops, void *ctx, struct gate **out);

/* Stop accepting, close the connections still waiting, free. NULL is a no-op. */
void gate__stop(struct gate *g);

#endif
