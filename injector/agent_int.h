/* SPDX-License-Identifier: MIT */
/*
 * agent_int.h: what the modules of libprobing-agent.so share, private to the agent (nothing
 * here is exported: the library is built with -fvisibility=hidden). The modules:
 *
 *   agent.c            entry and lifecycle: the state (ag), start, fork, constructor
 *   agent_server.c     the agent (I/O) thread: sockets, poll loop, frames, C-side kinds
 *   agent_auth.c       who may connect and how much they may send: peer credentials,
 *                      slots, the TCP token, failure limits, buffer limits
 *   agent_worker.c     the worker threads that run Python requests, and the watchdog
 *   agent_pyapi.c      how Python is entered: the C API found at run time, the GIL, the
 *                      embedded helpers, the dispatcher call
 *   agent_crashgate.c  'probing run --crash': the start-up gate of crash capture
 *   agent_crash.c      the fatal-signal handlers (agent_crash.h)
 *
 * Threads: the agent thread owns ag.clients (but .inflight, guarded by wk.lock); the workers
 * own the Python side of ag; wk is guarded by wk.lock.
 */
#ifndef PROBING_AGENT_INT_H
#define PROBING_AGENT_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

/* Client slots in all (agent_auth.c splits them by kind of peer). */
#define MAX_CLIENTS 64
#define BUF_MIN	    65536 /* an authenticated peer's buffer; more only for a bigger frame */

/* ---- the CPython C API, resolved at run time (agent_pyapi.c) --------------------------- */

typedef void PyObject;
typedef ssize_t Py_ssize_t;
struct py_method_def;

struct py_api {
	bool resolved, missing;
	int (*IsInitialized)(void);
	int (*GILState_Ensure)(void);
	void (*GILState_Release)(int);
	const char *(*GetVersion)(void);
	PyObject *(*CompileStringExFlags)(const char *, const char *, int, void *, int);
	PyObject *(*ImportExecCodeModule)(const char *, PyObject *);
	PyObject *(*GetAttrString)(PyObject *, const char *);
	PyObject *(*CallFunctionObjArgs)(PyObject *, ...);
	PyObject *(*BytesFromStringAndSize)(const char *, Py_ssize_t);
	int (*BytesAsStringAndSize)(PyObject *, char **, Py_ssize_t *);
	void (*DecRef)(PyObject *);
	void (*ErrClear)(void);
	void (*ErrFetch)(PyObject **, PyObject **, PyObject **);
	PyObject *(*ObjectStr)(PyObject *);
	const char *(*UnicodeAsUTF8)(PyObject *);
	int (*SetAsyncExc)(unsigned long, PyObject *);
	PyObject **ExcKeyboardInterrupt;
	void (*ErrSetNone)(PyObject *);
	PyObject *(*CFunctionNewEx)(struct py_method_def *, PyObject *, PyObject *);
	int (*ArgParseTuple)(PyObject *, const char *, ...);
	PyObject *(*BuildValue)(const char *, ...);
	PyObject *(*ListNew)(Py_ssize_t);
	Py_ssize_t (*ListSize)(PyObject *);
	PyObject *(*ListGetItem)(PyObject *, Py_ssize_t);
	int (*ListAppend)(PyObject *, PyObject *);
	PyObject *(*ObjectType)(PyObject *);
	int (*TypeIsSubtype)(PyObject *, PyObject *);
};

/* The C API, valid once py_resolve() returned true. */
extern struct py_api py;

/* ---- state (agent.c) ------------------------------------------------------------------- */

enum client_state {
	CL_FREE,
	CL_OWNER,   /* Unix peer with the target's uid or root */
	CL_TCP,	    /* TCP peer that gave the token */
	CL_PREAUTH, /* TCP peer that has not authenticated yet: only an "auth" frame is read */
	CL_DENIED,  /* another user's Unix peer, told "permission denied": drained, then closed */
};

struct client {
	enum client_state state;
	int fd;
	double since;		/* when it connected (CL_PREAUTH: the oldest is evicted) */
	double deadline;	/* CL_PREAUTH, CL_DENIED: when it is closed anyway */
	unsigned char addr[16]; /* CL_PREAUTH: its address, the key of the failure limit */
	bool inflight;		/* its Python request is queued or running (guarded by wk.lock) */
	bool hup;		/* it hung up while inflight: closed once the request is done */
	unsigned char *buf;
	size_t len, cap;
};

struct agent_state {
	pthread_mutex_t lock;  /* guards running/stopping across threads and fork */
	bool running;	       /* the agent thread exists */
	volatile bool stop;    /* asked to shut down */
	volatile bool py_gone; /* Python finalization began: never call it again */
	pthread_t thread;
	pid_t pid;
	double since;
	int listen_fd, tcp_fd, wake[2];
	char sockname[64];
	char tcp_addr[96];
	/* 'probing run --listen': PROBING_LISTEN and PROBING_TOKEN, taken out of the environment
	 * by the constructor before the program could pass them to its children */
	char env_listen[256];
	char env_token[33];
	double accept_pause; /* out of file descriptors: accept again at this time */
	pthread_t io_thread; /* the agent thread, once io_thread_set */
	bool io_thread_set;
	struct client clients[MAX_CLIENTS];
	/* Python side (worker thread only) */
	bool py_loaded;
	PyObject *handle;
	PyObject *drop_interrupt; /* agent.py's _drop_interrupt */
	char py_error[512];
};

/* The agent's state: one per process. */
extern struct agent_state ag;

/* ---- requests and workers (agent_worker.c) --------------------------------------------- */

/* A queued Python request. */
struct pyreq {
	struct pyreq *next;
	int slot; /* ag.clients index */
	uint64_t id;
	char *kind;
	char *body;
	size_t blen;
};

/*
 * A worker thread. One serves the queue at a time; a worker whose request was cancelled but
 * does not end within STUCK_S of it (blocked in C code that an exception cannot stop until
 * it returns: time.sleep(600), a read) is retired: it is left to that request and ends with
 * it, and a fresh worker serves the queue. At most MAX_WORKERS exist, retired ones included.
 */
#define MAX_WORKERS 8
#define STUCK_S	    0.5

struct worker {
	bool used;	     /* the slot holds a thread */
	bool retired;	     /* left to its stuck request: it ends with it, takes no other */
	uint64_t running;    /* id of the request it runs (0: none) */
	int slot;	     /* ...its client (ag.clients index), -1 the agent's own */
	char kind[32];	     /* ...its kind, for the message when every worker is stuck */
	double started;	     /* ...when it started (mono_time) */
	bool running_py;     /* ...and it is inside Python (between Ensure and Release) */
	bool interruptible;  /* ...in a section the helper declared interruptible */
	bool sent;	     /* the watchdog sent it a KeyboardInterrupt, maybe not raised yet */
	uint64_t cancel_id;  /* its running request, to interrupt */
	uint64_t delivered;  /* the last id the watchdog interrupted */
	double cancel_at;    /* when the watchdog came to interrupt it (mono_time) */
	unsigned long ident; /* its thread ident, for PyThreadState_SetAsyncExc */
};

/* The workers, their queue, and the watchdog's orders; all guarded by wk.lock. */
struct workers {
	pthread_mutex_t lock;
	pthread_cond_t work;   /* the worker waits for requests */
	pthread_cond_t cancel; /* the watchdog waits for cancels */
	bool watchdog_started;
	struct worker *cur; /* the worker serving the queue (NULL: none yet, or retired) */
	struct worker workers[MAX_WORKERS];
	struct pyreq *head, *tail;
	uint64_t next_id;
};

/* The workers of this process. */
extern struct workers wk;

/* The length field of the frame at @b (4 bytes at least). */
static inline uint32_t frame_len(const unsigned char *b)
{
	return b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24;
}

/* ---- agent.c --------------------------------------------------------------------------- */

/* CLOCK_REALTIME and CLOCK_MONOTONIC, in seconds. */
double wall_time(void);
double mono_time(void);
/* Close *@fd if open, and set it to -1. */
void close_fd(int *fd);
/* @s as a JSON string, quotes included, into @out (@len bytes; cut short if too long). */
void json_str(char *out, size_t len, const char *s);
/* Wake the agent thread from its poll (any thread; a no-op before the pipe exists). */
void wake_io(void);
/* Python is going away (atexit, exit()): never call it again, and stop serving. */
void agent_stop(void);

/* ---- agent_server.c: the agent thread -------------------------------------------------- */

/* The agent (I/O) thread: serves the sockets until ag.stop. */
void *agent_main(void *arg);
/* Send one frame (@type, @len bytes of @payload) on @fd: 0, or -1 (the peer is gone or does
 * not read: the agent thread never waits on a send). */
int send_frame(int fd, char type, const void *payload, size_t len);
/* Send one frame of formatted text: as send_frame. */
int send_text(int fd, char type, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Close client @i and free its slot. */
void drop_client(int i);

/* ---- agent_auth.c: who may connect, and how much they may send ------------------------- */

/* A new Unix connection @fd: an owner slot for the owner, a short refusal for anyone else. */
void admit_unix(int fd);
/* A new TCP connection @fd from @ss: a pre-auth slot, a short time to authenticate. */
void admit_tcp(int fd, const struct sockaddr_storage *ss);
/* The first frame of TCP client @i (@p, @n bytes: KIND '\0' TOKEN): true if it gave the
 * token (the client is CL_TCP now), false to drop it. */
bool authenticate(int i, const char *p, size_t n);
/* Whether the frame at the head of pre-auth client @c's buffer (4 bytes at least) is no
 * "auth" request that fits its limit: then it is refused at once (auth_refused). */
bool auth_frame_bad(const struct client *c);
/* Refuse pre-auth client @i, its failure counted: always false (drop it). */
bool auth_refused(int i);
/* Pre-auth client @i did not authenticate in time (a failure, counted at @now): told why. */
void auth_timed_out(int i, double now);
/* How many bytes client @c may have buffered (one more is allocated: see agent_auth.c). */
size_t buf_limit(const struct client *c);
/* A new random TCP token: 0, or -errno (no randomness). */
int auth_new_token(void);
/* The token 'probing run --listen' gave (@t, 16-32 characters). */
void auth_set_token(const char *t);
/* The TCP token ("" when TCP is not served). */
const char *auth_token(void);
/* In a child after fork(): forget the token and the failures. */
void auth_atfork_child(void);

/* ---- agent_worker.c: the workers and the watchdog -------------------------------------- */

/*
 * Queue a Python request of client @slot (-1: the agent's own, answered by nobody). False: out
 * of memory, or no worker (@why says why, @whylen bytes; "" out of memory).
 */
bool queue_request(int slot, const char *kind, const char *body, size_t blen, char *why,
		   size_t whylen);
/* Interrupt or drop the Python request of client @slot (called by the I/O thread). Return
 * true if it was still queued (and is now dropped: nobody will answer it). */
bool cancel_request(int slot);
/* Whether client @slot has a Python request queued or running. */
bool is_inflight(int slot);
/* Whether the worker serving the queue runs a request now. */
bool workers_busy(void);
/* Wake the workers and the watchdog to see ag.stop (the agent thread, when it ends). */
void workers_wake_all(void);
/* In a child after fork(): no worker, no watchdog, an empty queue. */
void workers_atfork_child(void);

/* ---- agent_pyapi.c: how Python is entered ---------------------------------------------- */

/* Find the C API (once): true when every function is there. */
bool py_resolve(void);
/* Run request @req on worker @w (its thread), answer on @fd (-1: an internal request, whose
 * failure goes to stderr). */
void python_request(struct worker *w, int fd, struct pyreq *req);

/* ---- agent_crashgate.c ----------------------------------------------------------------- */

/* 'probing run --crash' (from the constructor, before main()): the handlers and the gate. */
void crash_from_env(void);
/* The start-up request ran (or failed): let the main thread go on. */
void crash_gate_open(void);

#endif
