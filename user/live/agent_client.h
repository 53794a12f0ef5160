/* SPDX-License-Identifier: MIT */
/*
 * agent_client: talk to the agent inside a process (injector/agent.h has the protocol):
 * connect to its abstract Unix socket (entering the target's network namespace when it has
 * its own, and using the pid the target sees itself as) or to its TCP port with a token,
 * send length-prefixed requests, wait for answers with time-outs.
 *
 * Two time-outs per request: @gil_ms for the agent to take the GIL (it says so with a 'G'
 * frame); when that passes the target "looks hung" (a thread holds the GIL). Then @run_ms
 * for the request itself (user code may legitimately run long; -1 waits for ever).
 */
#ifndef PROBING_AGENT_CLIENT_H
#define PROBING_AGENT_CLIENT_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct agent_client;

struct agent_reply {
	char type;  /* 'R' result (JSON), 'X' dispatcher failure (JSON), 'E' agent error (text) */
	char *data; /* NUL-terminated; owned by the reply */
	size_t len;
};

/*
 * Connect to the agent of @pid within @timeout_ms. Return 0 and *@out, or -errno:
 * -ECONNREFUSED / -ENOENT no agent serves that process, -ESRCH no such process,
 * -EPERM cannot enter its network namespace.
 */
int agent_client__connect_pid(pid_t pid, int timeout_ms, struct agent_client **out);

/*
 * Connect to an agent serving TCP at @hostport ("HOST:PORT", "[V6]:PORT", hostport.h) and
 * authenticate with @token. Return 0 and *@out, or -errno: -EINVAL a bad address, -EACCES the
 * token was refused, -EAGAIN too many failed authentications from this address lately (the
 * token was not looked at: try again in a few seconds), -ENXIO HOST does not resolve (no such
 * name), -EHOSTDOWN the name service did not answer, -ECONNREFUSED nothing listens there,
 * -ETIMEDOUT no answer within @timeout_ms.
 */
int agent_client__connect_tcp(const char *hostport, const char *token, int timeout_ms,
			      struct agent_client **out);

/* Close and free. NULL is a no-op. */
void agent_client__free(struct agent_client *c);

/*
 * Send request @kind with @body (JSON or "", may be NULL) and wait for its answer (see the
 * time-outs above). Return 0 with *@r filled (free with agent_reply__free), or -errno:
 *   -ETIMEDOUT  no 'G' within @gil_ms (agent_client__hung() is then true) or no result
 *               within @run_ms
 *   -ECONNRESET the agent closed the connection (the process exited?)
 * If *@interrupt becomes non-zero while waiting (a SIGINT handler sets it), a cancel frame is
 * sent once (the agent raises KeyboardInterrupt in the running code) and waiting goes on.
 */
int agent_client__request(struct agent_client *c, const char *kind, const char *body, int gil_ms,
			  int run_ms, volatile sig_atomic_t *interrupt, struct agent_reply *r);

/* Did the last request time out waiting for the GIL? */
bool agent_client__hung(const struct agent_client *c);

void agent_reply__free(struct agent_reply *r);

/* The pid the process has in its own pid namespace (NSpid), for the socket name. */
pid_t agent_client__ns_pid(pid_t pid);

#endif
