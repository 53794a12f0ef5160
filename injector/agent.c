// SPDX-License-Identifier: MIT
/*
 * libprobing-agent.so: the in-process side of live diagnosis (docs/design.md §6, docs/live.md).
 *
 * The constructor only starts one thread (no Python call, no allocation beyond what
 * pthread_create does) and returns. That thread ("probing-agent") serves the abstract Unix
 * socket "@probing-<pid>" (and TCP when asked) with a poll() loop and never touches the GIL,
 * so it always answers "hello" and "list", even when the target never lets the GIL go.
 * Requests that need Python are queued to a worker thread ("probing-python", started on
 * the first such request), which runs them one at a time under PyGILState_Ensure. The
 * CPython C API is resolved with dlsym at run time (RTLD_DEFAULT, then the libpython found
 * with dl_iterate_phdr), so one build serves CPython 3.8-3.13 with a static or a shared
 * libpython. The C side stays small: the worker loads the embedded Python helpers
 * (injector/py/NAME.py) on its first request and hands every request to
 * probing_agent.handle(kind, body).
 *
 * Rules that keep the target safe:
 *  - the agent's threads block every signal (the target's handlers never run on them);
 *  - Python is never called before Py_IsInitialized() nor once finalization began (an atexit
 *    callback registered by the helper tells us), and never with one of our locks held
 *    while waiting for the GIL;
 *  - after fork() the child has no agent threads: an atfork handler closes the inherited
 *    sockets and marks the agent stopped (probing_agent_start() starts it again there);
 *  - a request whose client went away (or cancelled) before the GIL came is dropped;
 *  - a running request whose client disconnects or sends 'C' gets KeyboardInterrupt raised
 *    in it (PyThreadState_SetAsyncExc) by a small watchdog thread ("probing-watch", started
 *    on first use), which waits for the GIL on its own so that nobody else blocks; but only
 *    while it runs code the helper declared interruptible (user code of eval, read-only
 *    kinds): never into the loading of the helpers, nor into code that changes the agent's
 *    state, which an exception at any bytecode could leave half done. A request cancelled
 *    before or between such sections does not enter the next one;
 *  - a cancelled request blocked in C (the interrupt waits for the call to return) does not
 *    block the others: its worker is retired (left to it) and a fresh one serves the queue
 *    (struct worker).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "agent.h"
#include "agent_crash.h"
#include "hostport.h"

#define EXPORT __attribute__((visibility("default")))

/*
 * Who may hold a connection, and how many (docs/live.md, "Security model"). Each kind of
 * peer has its own slots, so that nobody who cannot authenticate ever takes a place the
 * owner needs: peers that are not the owner over the Unix socket, and TCP peers that have not
 * given the token, only ever use DENIED and PREAUTH slots, which are few, short-lived and
 * hold a few bytes.
 */
#define OWNER_SLOTS   32 /* Unix peers with the target's uid or root */
#define TCP_SLOTS     16 /* TCP peers that gave the token */
#define PREAUTH_SLOTS 8	 /* TCP peers that have not authenticated yet (the oldest is evicted) */
#define DENIED_SLOTS  8	 /* other users' Unix peers, told why, closed within DENIED_LINGER_S */
#define MAX_CLIENTS   (OWNER_SLOTS + TCP_SLOTS + PREAUTH_SLOTS + DENIED_SLOTS)

#define AUTH_TIMEOUT_S	2.0 /* a TCP peer must have authenticated this soon after connecting */
#define DENIED_LINGER_S 1.0 /* a refused peer's time to read why before it is closed */
/* A TCP peer's whole input before it has authenticated: one "auth" frame with the token. */
#define PREAUTH_MAX  128
#define BUF_MIN	     65536 /* an authenticated peer's buffer; more only for a bigger frame */
#define ACCEPT_BATCH 256   /* connections accepted per wake-up of the agent thread */
/* A short queue of connections waiting to be accepted: a connection waits behind all those
 * queued before it, and a flood of another user's connections keeps any queue full. With
 * 128 the owner's waits behind at most 128 of them (measured: ~1 s behind SOMAXCONN's 4096
 * under a flood, ~15 ms behind 128); when the queue is full its connect() sleeps in the
 * kernel and is woken as soon as there is room. */
#define LISTEN_BACKLOG 128

/* Failed authentications (wrong token, garbage, time-out) per source address (IPv4, or
 * IPv6 /64): FAIL_BURST at once, then one per 1/FAIL_RATE seconds. FAIL_ADDRS addresses are
 * remembered; an address that has failed nothing lately takes no room. */
#define FAIL_BURST 5.0
#define FAIL_RATE  0.5
#define FAIL_ADDRS 64

/* ---- the CPython C API, resolved at run time ----------------------------------------- */

typedef void PyObject;
typedef ssize_t Py_ssize_t;

/* PyMethodDef is part of the stable ABI: identical in 3.8-3.13. */
struct py_method_def {
	const char *name;
	PyObject *(*meth)(PyObject *self, PyObject *args);
	int flags;
	const char *doc;
};
#define METH_VARARGS  0x0001
#define Py_file_input 257

static struct {
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
} py;

/* ---- state -------------------------------------------------------------------------- */

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

/* Recent failed authentications of one source address (see FAIL_BURST). */
struct auth_fails {
	bool used;
	unsigned char addr[16];
	double credit; /* failures it may still make now, refilled at FAIL_RATE */
	double at;     /* when credit was computed */
};

static struct {
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
	char token[33];
	/* 'probing run --listen': PROBING_LISTEN and PROBING_TOKEN, taken out of the environment
	 * by the constructor before the program could pass them to its children */
	char env_listen[256];
	char env_token[33];
	double accept_pause; /* out of file descriptors: accept again at this time */
	pthread_t io_thread; /* the agent thread, once io_thread_set */
	bool io_thread_set;
	struct client clients[MAX_CLIENTS];
	struct auth_fails fails[FAIL_ADDRS];
	/* Python side (worker thread only) */
	bool py_loaded;
	PyObject *handle;
	PyObject *drop_interrupt; /* agent.py's _drop_interrupt */
	char py_error[512];
} ag = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.listen_fd = -1,
	.tcp_fd = -1,
	.wake = {-1, -1},
};

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
static struct {
	pthread_mutex_t lock;
	pthread_cond_t work;   /* the worker waits for requests */
	pthread_cond_t cancel; /* the watchdog waits for cancels */
	bool watchdog_started;
	struct worker *cur; /* the worker serving the queue (NULL: none yet, or retired) */
	struct worker workers[MAX_WORKERS];
	struct pyreq *head, *tail;
	uint64_t next_id;
} wk = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.work = PTHREAD_COND_INITIALIZER,
	.cancel = PTHREAD_COND_INITIALIZER,
	.next_id = 1,
};

/* The embedded helpers: { "agent", probing_py_agent }, ... { NULL, NULL } (agent.mk). */
struct py_module {
	const char *name;
	const char *source;
};
extern const struct py_module probing_py_modules[];

static double wall_time(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double mono_time(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* ---- resolving Python --------------------------------------------------------------- */

struct find_libpython {
	char path[4096];
};

static int find_libpython_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct find_libpython *f = arg;
	const char *b = strrchr(info->dlpi_name, '/');

	b = b ? b + 1 : info->dlpi_name;
	if (!strncmp(b, "libpython3", 10)) {
		snprintf(f->path, sizeof(f->path), "%s", info->dlpi_name);
		return 1;
	}
	return 0;
}

static void *sym(void *h, const char *name)
{
	void *p = dlsym(RTLD_DEFAULT, name);

	if (!p && h)
		p = dlsym(h, name);
	return p;
}

/*
 * Find the C API. RTLD_DEFAULT covers a python executable with the interpreter linked in or
 * a libpython it depends on; an embedding program that dlopen'ed libpython with RTLD_LOCAL
 * needs the handle of that libpython (RTLD_NOLOAD: never load one ourselves).
 */
static bool py_resolve(void)
{
	struct find_libpython f = {""};
	void *h = NULL;

	if (py.resolved)
		return true;
	if (!dlsym(RTLD_DEFAULT, "Py_IsInitialized")) {
		dl_iterate_phdr(find_libpython_cb, &f);
		if (f.path[0])
			h = dlopen(f.path, RTLD_LAZY | RTLD_NOLOAD);
		if (!h)
			return false;
	}
#define R(field, name)                              \
	do {                                        \
		*(void **)&py.field = sym(h, name); \
		if (!py.field)                      \
			return false;               \
	} while (0)
	R(IsInitialized, "Py_IsInitialized");
	R(GILState_Ensure, "PyGILState_Ensure");
	R(GILState_Release, "PyGILState_Release");
	R(GetVersion, "Py_GetVersion");
	R(CompileStringExFlags, "Py_CompileStringExFlags");
	R(ImportExecCodeModule, "PyImport_ExecCodeModule");
	R(GetAttrString, "PyObject_GetAttrString");
	R(CallFunctionObjArgs, "PyObject_CallFunctionObjArgs");
	R(BytesFromStringAndSize, "PyBytes_FromStringAndSize");
	R(BytesAsStringAndSize, "PyBytes_AsStringAndSize");
	R(DecRef, "Py_DecRef");
	R(ErrClear, "PyErr_Clear");
	R(ErrFetch, "PyErr_Fetch");
	R(ObjectStr, "PyObject_Str");
	R(UnicodeAsUTF8, "PyUnicode_AsUTF8");
	R(SetAsyncExc, "PyThreadState_SetAsyncExc");
	R(ExcKeyboardInterrupt, "PyExc_KeyboardInterrupt");
	R(ErrSetNone, "PyErr_SetNone");
	R(CFunctionNewEx, "PyCFunction_NewEx");
	R(ArgParseTuple, "PyArg_ParseTuple");
	R(BuildValue, "Py_BuildValue");
	R(ListNew, "PyList_New");
	R(ListSize, "PyList_Size");
	R(ListGetItem, "PyList_GetItem");
	R(ListAppend, "PyList_Append");
	R(ObjectType, "PyObject_Type");
	R(TypeIsSubtype, "PyType_IsSubtype");
#undef R
	py.resolved = true;
	return true;
}

/* ---- Python side: loading the helpers, calling the dispatcher (GIL held) ---------------- */

/* Describe and clear the current Python exception into @out. */
static void py_error_text(const char *what, char *out, size_t len)
{
	PyObject *t = NULL, *v = NULL, *tb = NULL, *s = NULL;
	const char *txt = NULL;

	py.ErrFetch(&t, &v, &tb);
	if (v)
		s = py.ObjectStr(v);
	if (s)
		txt = py.UnicodeAsUTF8(s);
	snprintf(out, len, "%s: %s", what, txt ? txt : "unknown error");
	if (s)
		py.DecRef(s);
	py.ErrClear();
	if (t)
		py.DecRef(t);
	if (v)
		py.DecRef(v);
	if (tb)
		py.DecRef(tb);
}

/*
 * The objects @get_objects() (gc.get_objects) returns whose type is @cls (a type) or a
 * subclass of it, as a new list. All in C with the GIL held from start to end: no Python
 * code runs (type checks only), so no other thread runs while the full list exists. A
 * Python loop over that list would let other threads run between bytecodes, and torch warns
 * ("Deallocating Tensor that still has live PyObject references", on the program's stderr)
 * when C++ frees a tensor whose PyObject such a list holds.
 */
static PyObject *instances_of(PyObject *get_objects, PyObject *cls)
{
	PyObject *all, *out, *o, *t;
	Py_ssize_t i, n;
	int sub;

	all = py.CallFunctionObjArgs(get_objects, NULL);
	if (!all)
		return NULL;
	n = py.ListSize(all);
	out = n >= 0 ? py.ListNew(0) : NULL;
	for (i = 0; out && i < n; i++) {
		o = py.ListGetItem(all, i); /* borrowed */
		t = o ? py.ObjectType(o) : NULL;
		sub = t ? py.TypeIsSubtype(t, cls) : 0;
		if (t)
			py.DecRef(t);
		if (sub && py.ListAppend(out, o)) {
			py.DecRef(out);
			out = NULL;
		}
	}
	py.DecRef(all); /* no object dies here: every one of them is referenced elsewhere */
	return out;
}

/*
 * Drop the KeyboardInterrupt the watchdog sent to the worker (GIL held, on the worker, wk.lock
 * not held, wk.sent already cleared), whether it was raised already or is still pending.
 * PyThreadState_SetAsyncExc(ident, NULL) must not be used for this: up to Python 3.12 it
 * raises the interpreter's "asynchronous exception pending" flag even when it clears, and
 * only a thread that raises an asynchronous exception lowers it again. Left up, the flag
 * keeps the eval breaker set for good: every thread of the program runs slower (6-30%), and
 * on 3.11 every function called under a trace function (debuggers, coverage) spins for ever
 * in its RESUME. So the interrupt is sent again (exactly one is pending now) and raised, in
 * agent.py's _drop_interrupt(), which swallows it; raising it lowers the flag.
 */
static void drop_sent_interrupt(const struct worker *w)
{
	PyObject *r;

	if (!ag.drop_interrupt || ag.py_gone)
		return;
	py.SetAsyncExc(w->ident, *py.ExcKeyboardInterrupt);
	r = py.CallFunctionObjArgs(ag.drop_interrupt, NULL);
	if (r)
		py.DecRef(r);
	else
		py.ErrClear(); /* raised before its try (3.11+: at the function's RESUME) */
}

/*
 * "interruptible" / "uninterruptible": the worker enters or leaves a section where the
 * watchdog may raise KeyboardInterrupt (agent.py, interruptible()). Entering fails with
 * KeyboardInterrupt when the request was cancelled already: the interrupt was not delivered
 * while nothing was interruptible, so it is delivered now, before the section runs. Leaving
 * drops an interrupt sent but maybe not raised yet (drop_sent_interrupt): it would fire in
 * the agent's own code after the section. Called with the GIL held; a no-op on any thread
 * but the worker in a request.
 */
static PyObject *set_interruptible(bool on)
{
	bool cancelled = false, sent = false;
	struct worker *w = NULL;
	int i;

	pthread_mutex_lock(&wk.lock);
	for (i = 0; i < MAX_WORKERS && !w; i++)
		if (wk.workers[i].used && wk.workers[i].running_py &&
		    wk.workers[i].ident == (unsigned long)pthread_self())
			w = &wk.workers[i];
	if (w) {
		cancelled = on && w->cancel_id == w->running;
		w->interruptible = on && !cancelled;
		if (!on) {
			sent = w->sent;
			w->sent = false;
		}
	}
	pthread_mutex_unlock(&wk.lock);
	if (sent)
		drop_sent_interrupt(w);
	if (cancelled) {
		py.ErrSetNone(*py.ExcKeyboardInterrupt);
		return NULL;
	}
	return py.BuildValue("");
}

static PyObject *native_fn(PyObject *self, PyObject *args)
{
	PyObject *a = NULL, *b = NULL;
	const char *op = NULL;

	if (!py.ArgParseTuple(args, "s|OO", &op, &a, &b))
		return NULL;
	if (!strcmp(op, "instances") && a && b) {
		/* "instances", gc.get_objects, cls: b must be a type (checked by the caller). */
		return instances_of(a, b);
	}
	if (!strcmp(op, "interruptible") || !strcmp(op, "uninterruptible"))
		return set_interruptible(op[0] == 'i');
	if (!strcmp(op, "crash")) {
		/* "crash", bin, file: install the fatal-signal handlers (agent_crash.h); returns
		 * (0 installed | 1 already: file replaced | -errno, previous file or why, file). */
		const char *bin = NULL, *file = NULL;
		char was[4096] = "", err[512] = "", now[4096] = "";
		int rc;

		if (!py.ArgParseTuple(args, "sss", &op, &bin, &file))
			return NULL;
		rc = agent_crash_install(bin, file, was, sizeof(was), err, sizeof(err));
		agent_crash_installed(now, sizeof(now));
		return py.BuildValue("(iss)", rc, rc < 0 ? err : was, now);
	}
	if (!strcmp(op, "stop")) {
		/* Called from atexit: from now on Python is going away. */
		ag.py_gone = true;
		ag.stop = true;
		if (ag.wake[1] >= 0) {
			char c = 's';
			ssize_t r = write(ag.wake[1], &c, 1);
			(void)r;
		}
	}
	return py.BuildValue("");
}

static struct py_method_def native_def = {"probing_native", native_fn, METH_VARARGS,
					  "probing agent: C-side operations"};

static void json_str(char *out, size_t len, const char *s)
{
	size_t o = 0;

	if (len < 3)
		return;
	out[o++] = '"';
	for (; s && *s && o + 8 < len; s++) {
		unsigned char c = *s;

		if (c == '"' || c == '\\') {
			out[o++] = '\\';
			out[o++] = c;
		} else if (c < 0x20) {
			o += snprintf(out + o, len - o, "\\u%04x", c);
		} else {
			out[o++] = c;
		}
	}
	out[o++] = '"';
	out[o] = '\0';
}

/*
 * Load the embedded helpers and call probing_agent._init (GIL held, worker thread), once:
 * 0 when they are loaded, -1 with ag.py_error set. The watchdog never interrupts this (the
 * request is not in an interruptible section), and a failure is not remembered: the next
 * request loads again from the start (an import that failed left nothing in sys.modules;
 * re-running agent.py starts its registries afresh, and the other helpers register again).
 * A broken extra helper is reported in ag.py_error but does not fail the load.
 */
static int py_load(void)
{
	const struct py_module *m, *agent_mod = NULL;
	PyObject *code, *mod = NULL, *init = NULL, *fn = NULL, *info = NULL, *r;
	char name[128], file[160], infobuf[1024], esc[256], esc2[160];
	int pass;

	if (ag.py_loaded)
		return 0;
	ag.py_error[0] = '\0';
	for (m = probing_py_modules; m->name; m++)
		if (!strcmp(m->name, "agent"))
			agent_mod = m;
	if (!agent_mod) {
		snprintf(ag.py_error, sizeof(ag.py_error), "the agent has no embedded agent.py");
		goto fail;
	}
	/* agent.py first (the others import it), then every other helper. */
	for (pass = 0; pass < 2; pass++) {
		for (m = probing_py_modules; m->name; m++) {
			if ((m == agent_mod) != (pass == 0))
				continue;
			snprintf(name, sizeof(name), "probing_%s", m->name);
			snprintf(file, sizeof(file), "<probing:%s.py>", m->name);
			code = py.CompileStringExFlags(m->source, file, Py_file_input, NULL, -1);
			r = code ? py.ImportExecCodeModule(name, code) : NULL;
			if (code)
				py.DecRef(code);
			if (!r) {
				py_error_text(name, ag.py_error, sizeof(ag.py_error));
				if (pass == 0)
					goto fail;
				continue; /* a broken extra helper must not take the agent down */
			}
			if (pass == 0)
				mod = r;
			else
				py.DecRef(r);
		}
		if (pass == 0) {
			ag.handle = py.GetAttrString(mod, "handle");
			ag.drop_interrupt = py.GetAttrString(mod, "_drop_interrupt");
			init = py.GetAttrString(mod, "_init");
			if (!ag.handle || !ag.drop_interrupt || !init) {
				py_error_text("probing_agent", ag.py_error, sizeof(ag.py_error));
				goto fail;
			}
			fn = py.CFunctionNewEx(&native_def, NULL, NULL);
			json_str(esc, sizeof(esc), ag.sockname);
			json_str(esc2, sizeof(esc2), ag.tcp_addr);
			snprintf(
				infobuf, sizeof(infobuf),
				"{\"since\": %.6f, \"socket\": %s, \"tcp\": %s, \"agent\": \"%s\"}",
				ag.since, esc, ag.tcp_addr[0] ? esc2 : "null", AGENT_VERSION);
			info = py.BytesFromStringAndSize(infobuf, strlen(infobuf));
			r = fn && info ? py.CallFunctionObjArgs(init, fn, info, NULL) : NULL;
			if (!r) {
				py_error_text("probing_agent._init", ag.py_error,
					      sizeof(ag.py_error));
				goto fail;
			}
			py.DecRef(r);
			py.DecRef(init);
			py.DecRef(fn);
			py.DecRef(info);
			init = fn = info = NULL;
		}
	}
	py.DecRef(mod);
	ag.py_loaded = true;
	return 0;
fail:
	if (init)
		py.DecRef(init);
	if (fn)
		py.DecRef(fn);
	if (info)
		py.DecRef(info);
	if (mod)
		py.DecRef(mod);
	return -1;
}

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

static int send_frame(int fd, char type, const void *payload, size_t len)
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

static int send_text(int fd, char type, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int send_text(int fd, char type, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return send_frame(fd, type, buf, strlen(buf));
}

static void wake_io(void)
{
	char c = 'w';

	if (ag.wake[1] >= 0) {
		ssize_t r = write(ag.wake[1], &c, 1);
		(void)r;
	}
}

static bool start_thread_arg(void *(*fn)(void *), void *arg, const char *name)
{
	pthread_t t;

	/* Every signal stays blocked: this thread inherits the agent thread's mask. */
	if (pthread_create(&t, NULL, fn, arg))
		return false;
	pthread_setname_np(t, name);
	pthread_detach(t);
	return true;
}

static bool start_thread(void *(*fn)(void *), const char *name)
{
	return start_thread_arg(fn, NULL, name);
}

/* ---- the watchdog: interrupts a running request -------------------------------------- */

static bool start_worker(void);

/* A worker whose request is to be interrupted and was not yet (wk.lock held), or NULL. */
static struct worker *to_interrupt(void)
{
	struct worker *w;
	int i;

	for (i = 0; i < MAX_WORKERS; i++) {
		w = &wk.workers[i];
		if (w->used && w->running && w->cancel_id == w->running &&
		    w->delivered != w->cancel_id)
			return w;
	}
	return NULL;
}

/*
 * Retire the workers whose cancelled request has run STUCK_S past the interrupt (wk.lock
 * held): a fresh worker serves the queue. Return when the next one is due (mono_time), or
 * 0 if none is.
 */
static double retire_stuck(double now)
{
	double next = 0, due;
	struct worker *w;
	int i;

	for (i = 0; i < MAX_WORKERS; i++) {
		w = &wk.workers[i];
		if (!w->used || w->retired || !w->running || w->delivered != w->running)
			continue;
		due = w->cancel_at + STUCK_S;
		if (now < due) {
			next = next && next < due ? next : due;
			continue;
		}
		w->retired = true;
		if (wk.cur == w)
			wk.cur = NULL;
		if (wk.head)
			start_worker();
	}
	return next;
}

static void *watchdog_main(void *arg)
{
	struct worker *w;
	struct timespec ts;
	double next, now;
	uint64_t id;
	int st;

	pthread_mutex_lock(&wk.lock);
	for (;;) {
		if (ag.stop || ag.py_gone)
			break;
		w = to_interrupt();
		if (!w) {
			next = retire_stuck(mono_time());
			if (!next) {
				pthread_cond_wait(&wk.cancel, &wk.lock);
				continue;
			}
			/* The condition variable waits on CLOCK_REALTIME: the delay, from now. */
			now = mono_time();
			clock_gettime(CLOCK_REALTIME, &ts);
			next = ts.tv_sec + ts.tv_nsec / 1e9 + (next - now) + 0.001;
			ts.tv_sec = (time_t)next;
			ts.tv_nsec = (long)((next - ts.tv_sec) * 1e9);
			pthread_cond_timedwait(&wk.cancel, &wk.lock, &ts);
			continue;
		}
		id = w->cancel_id;
		w->delivered = id;
		w->cancel_at = mono_time();
		pthread_mutex_unlock(&wk.lock);
		/* Taking the GIL works whenever the running code lets it go (every switch
		 * interval for Python code, or a call into C that releases it). wk.lock is not
		 * held meanwhile: the others take it. Outside an interruptible section nothing
		 * is raised: entering the next section fails instead (set_interruptible), and the
		 * request ends at its next one. */
		st = py.GILState_Ensure();
		pthread_mutex_lock(&wk.lock);
		if (w->running == id && w->running_py && w->interruptible) {
			py.SetAsyncExc(w->ident, *py.ExcKeyboardInterrupt);
			w->sent = true;
		}
		/* An interrupt is raised at the next bytecode: code blocked in C meets it only
		 * when the call returns. Counted from now: retired if not over by then. */
		w->cancel_at = mono_time();
		pthread_mutex_unlock(&wk.lock);
		py.GILState_Release(st);
		pthread_mutex_lock(&wk.lock);
	}
	wk.watchdog_started = false;
	pthread_mutex_unlock(&wk.lock);
	return NULL;
}

/* Interrupt or drop the Python request of client @slot (called by the I/O thread). Return
 * true if it was still queued (and is now dropped: nobody will answer it). */
static bool cancel_request(int slot)
{
	struct pyreq **pp, *r;
	bool dropped = false;
	int i;

	pthread_mutex_lock(&wk.lock);
	for (pp = &wk.head; *pp; pp = &(*pp)->next) {
		if ((*pp)->slot != slot)
			continue;
		r = *pp;
		*pp = r->next;
		if (wk.tail == r) {
			wk.tail = NULL;
			for (struct pyreq *q = wk.head; q; q = q->next)
				wk.tail = q;
		}
		free(r->kind);
		free(r->body);
		free(r);
		ag.clients[slot].inflight = false;
		dropped = true;
		break;
	}
	for (i = 0; !dropped && i < MAX_WORKERS && ag.clients[slot].inflight; i++) {
		struct worker *w = &wk.workers[i];

		if (!w->used || !w->running || w->slot != slot)
			continue;
		w->cancel_id = w->running;
		if (!wk.watchdog_started)
			wk.watchdog_started = start_thread(watchdog_main, "probing-watch");
		pthread_cond_signal(&wk.cancel);
	}
	pthread_mutex_unlock(&wk.lock);
	return dropped;
}

/* ---- the worker: runs Python requests one at a time ------------------------------------ */

static int hello(int fd);

/* How long a request waits for an interpreter that is still starting up (injected, or
 * launched with PROBING=1, before Py_Initialize finished). Starting takes tens of ms. */
#define PY_INIT_WAIT_MS 2000

/* Wait, up to PY_INIT_WAIT_MS, for Python to be initialized; give up early if @req is
 * cancelled or its client leaves. Return true once Python can be called. */
static bool py_wait_initialized(const struct worker *w, const struct pyreq *req)
{
	bool stop;
	int i;

	for (i = 0; i < PY_INIT_WAIT_MS / 5; i++) {
		if (py.IsInitialized())
			return true;
		pthread_mutex_lock(&wk.lock);
		stop = w->cancel_id == req->id || (req->slot >= 0 && ag.clients[req->slot].hup) ||
		       ag.py_gone;
		pthread_mutex_unlock(&wk.lock);
		if (stop)
			return false;
		usleep(5000);
	}
	return py.IsInitialized();
}

/* 'probing run --crash': the start-up gate (crash_audit, below). */
#define CRASH_GATE_MS 10000

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;	 /* crash.install ran (or failed): the main thread goes on */
	bool used;	 /* the audit hook did its work: from now on it returns at once */
	char body[8300]; /* the request, made by the constructor */
} gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

static void crash_gate_open(void)
{
	pthread_mutex_lock(&gate.lock);
	gate.done = true;
	pthread_cond_broadcast(&gate.cond);
	pthread_mutex_unlock(&gate.lock);
}

static void python_request(struct worker *w, int fd, struct pyreq *req)
{
	PyObject *k = NULL, *b = NULL, *r = NULL;
	char *out = NULL, *data;
	Py_ssize_t n = 0;
	char type = FRAME_ERROR;
	bool skip, sent;
	int st;

	if (ag.py_gone) {
		send_text(fd, FRAME_ERROR, "the Python interpreter of process %d is shutting down",
			  (int)getpid());
		return;
	}
	if (!py_resolve()) {
		send_text(fd, FRAME_ERROR, "process %d has no Python interpreter", (int)getpid());
		return;
	}
	if (!py_wait_initialized(w, req)) {
		send_text(fd, FRAME_ERROR,
			  "the Python interpreter of process %d is not initialized (yet)",
			  (int)getpid());
		return;
	}
	st = py.GILState_Ensure();
	pthread_mutex_lock(&wk.lock);
	w->ident = (unsigned long)pthread_self();
	/* Cancelled, or its client left, while we waited for the GIL: do not run it late. */
	skip = w->cancel_id == req->id || (req->slot >= 0 && ag.clients[req->slot].hup) ||
	       ag.py_gone;
	w->running_py = !skip;
	pthread_mutex_unlock(&wk.lock);
	if (skip) {
		py.GILState_Release(st);
		send_text(fd, FRAME_ERROR, "the request was cancelled before it started");
		return;
	}
	/* Tell the client the GIL came (it times out on this, not on the work itself). */
	if (fd >= 0 && send_frame(fd, FRAME_GIL, NULL, 0))
		goto release;
	if (py_load()) {
		out = strdup(ag.py_error);
		n = out ? strlen(out) : 0;
		type = FRAME_ERROR;
		goto release;
	}
	/* Cancelled while the helpers loaded (that is never interrupted): do not start it. */
	pthread_mutex_lock(&wk.lock);
	skip = w->cancel_id == req->id;
	pthread_mutex_unlock(&wk.lock);
	if (skip) {
		out = strdup("the request was cancelled before it started");
		n = out ? strlen(out) : 0;
		type = FRAME_ERROR;
		goto release;
	}
	k = py.BytesFromStringAndSize(req->kind, strlen(req->kind));
	b = py.BytesFromStringAndSize(req->body, req->blen);
	if (k && b)
		r = py.CallFunctionObjArgs(ag.handle, k, b, NULL);
	if (r && !py.BytesAsStringAndSize(r, &data, &n) && n >= 1) {
		/* The dispatcher's answer: a frame type byte, then JSON. Copy it: the GIL goes
		 * before the (possibly slow) send. */
		type = data[0];
		out = malloc(n);
		if (out)
			memcpy(out, data + 1, n - 1);
		n = n - 1;
	} else {
		char msg[600];

		py_error_text("probing_agent.handle", msg, sizeof(msg));
		out = strdup(msg);
		n = out ? strlen(out) : 0;
		type = FRAME_ERROR;
	}
release:
	if (k)
		py.DecRef(k);
	if (b)
		py.DecRef(b);
	if (r)
		py.DecRef(r);
	pthread_mutex_lock(&wk.lock);
	/* An interrupt that came too late to be raised in a section dies with the request (it
	 * was sent once: w->delivered; nothing is sent once running_py is false). */
	sent = w->sent;
	w->sent = w->interruptible = false;
	pthread_mutex_unlock(&wk.lock);
	if (sent)
		drop_sent_interrupt(w);
	pthread_mutex_lock(&wk.lock);
	w->running_py = false;
	pthread_mutex_unlock(&wk.lock);
	py.GILState_Release(st);
	if (out && fd >= 0)
		send_frame(fd, type, out, n);
	else if (out && type != FRAME_RESULT)
		/* An internal request (probing run --crash) has nobody else to tell. */
		fprintf(stderr, "probing: %s failed in process %d: %.*s\n", req->kind,
			(int)getpid(), (int)n, out);
	free(out);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct pyreq *req;
	int fd;

	pthread_mutex_lock(&wk.lock);
	for (;;) {
		while (!ag.stop && !w->retired && !wk.head)
			pthread_cond_wait(&wk.work, &wk.lock);
		if (ag.stop || w->retired)
			break;
		req = wk.head;
		wk.head = req->next;
		if (!wk.head)
			wk.tail = NULL;
		w->running = req->id;
		w->slot = req->slot;
		snprintf(w->kind, sizeof(w->kind), "%s", req->kind);
		w->started = mono_time();
		/* The I/O thread never closes the socket of a client with a request in flight. */
		fd = req->slot >= 0 ? ag.clients[req->slot].fd : -1;
		pthread_mutex_unlock(&wk.lock);

		python_request(w, fd, req);
		if (req->slot < 0 && !strcmp(req->kind, "crash.install"))
			crash_gate_open();

		pthread_mutex_lock(&wk.lock);
		w->running = 0;
		w->slot = -1;
		if (req->slot >= 0)
			ag.clients[req->slot].inflight = false;
		free(req->kind);
		free(req->body);
		free(req);
		wake_io(); /* it may now read that client's next request, or close it */
	}
	/* Retired (its stuck request is over now) or stopping: the slot is free again. */
	if (wk.cur == w)
		wk.cur = NULL;
	memset(w, 0, sizeof(*w));
	pthread_mutex_unlock(&wk.lock);
	return NULL;
}

/* Start a worker to serve the queue, if there is room for one (wk.lock held). */
static bool start_worker(void)
{
	struct worker *w = NULL;
	int i;

	for (i = 0; i < MAX_WORKERS && !w; i++)
		if (!wk.workers[i].used)
			w = &wk.workers[i];
	if (!w)
		return false;
	memset(w, 0, sizeof(*w));
	w->used = true;
	w->slot = -1;
	if (!start_thread_arg(worker_main, w, "probing-python")) {
		w->used = false;
		return false;
	}
	wk.cur = w;
	return true;
}

/*
 * Every worker is stuck (wk.lock held): what they run, for the client's error message.
 */
static void stuck_workers(char *out, size_t len)
{
	double now = mono_time();
	size_t n = 0;
	int i;

	out[0] = '\0';
	for (i = 0; i < MAX_WORKERS && n < len; i++) {
		const struct worker *w = &wk.workers[i];

		if (w->used && w->running)
			n += snprintf(out + n, len - n, "%s'%s' for %.0f s", n ? ", " : "", w->kind,
				      now - w->started);
	}
}

/*
 * Queue a Python request of client @slot (-1: the agent's own, answered by nobody). False: out
 * of memory, or no worker (@why says why, @whylen bytes; "" out of memory).
 */
static bool queue_request(int slot, const char *kind, const char *body, size_t blen, char *why,
			  size_t whylen)
{
	struct pyreq *r = calloc(1, sizeof(*r));
	char stuck[512];
	bool ok = false;

	if (why)
		why[0] = '\0';
	if (!r)
		return false;
	r->slot = slot;
	r->kind = strdup(kind);
	r->body = malloc(blen + 1);
	if (!r->kind || !r->body)
		goto fail;
	memcpy(r->body, body, blen);
	r->body[blen] = '\0';
	r->blen = blen;
	pthread_mutex_lock(&wk.lock);
	if (!wk.cur && !start_worker() && why) {
		stuck_workers(stuck, sizeof(stuck));
		snprintf(why, whylen,
			 "the agent of process %d cannot run Python requests now: its %d workers "
			 "are each stuck in a request whose client left, blocked in code that "
			 "cannot be interrupted until the call it is in returns (%s); each is "
			 "free again once its call returns (e.g. time.sleep ends)",
			 (int)getpid(), MAX_WORKERS, stuck);
	}
	if (wk.cur) {
		r->id = wk.next_id++;
		if (wk.tail)
			wk.tail->next = r;
		else
			wk.head = r;
		wk.tail = r;
		if (slot >= 0)
			ag.clients[slot].inflight = true;
		pthread_cond_broadcast(&wk.work);
		ok = true;
	}
	pthread_mutex_unlock(&wk.lock);
	if (ok)
		return true;
fail:
	free(r->kind);
	free(r->body);
	free(r);
	return false;
}

/* ---- clients (I/O thread) --------------------------------------------------------------- */

static bool is_inflight(int slot)
{
	bool v;

	pthread_mutex_lock(&wk.lock);
	v = ag.clients[slot].inflight;
	pthread_mutex_unlock(&wk.lock);
	return v;
}

static void drop_client(int i)
{
	struct client *c = &ag.clients[i];

	close_fd(&c->fd);
	free(c->buf);
	memset(c, 0, sizeof(*c));
	c->fd = -1;
}

static int hello(int fd)
{
	char buf[1536], ver[400] = "null", sock[96], tcp[128] = "null", err[600] = "null";
	bool ready = py_resolve() && !ag.py_gone && py.IsInitialized(), busy;

	pthread_mutex_lock(&wk.lock);
	busy = wk.cur && wk.cur->running != 0;
	pthread_mutex_unlock(&wk.lock);
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

/* ---- who may connect, and how much they may send -------------------------------------- */

static int count_clients(enum client_state st)
{
	int i, n = 0;

	for (i = 0; i < MAX_CLIENTS; i++)
		n += ag.clients[i].state == st;
	return n;
}

static int free_slot(void)
{
	int i;

	for (i = 0; i < MAX_CLIENTS; i++)
		if (ag.clients[i].state == CL_FREE)
			return i;
	return -1;
}

/* The length field of the frame at @b (4 bytes at least). */
static uint32_t frame_len(const unsigned char *b)
{
	return b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24;
}

/* Who the failure limit counts: an IPv4 address (as ::ffff:a.b.c.d), or an IPv6 /64 (one
 * host usually has a whole /64). */
static void addr_key(const struct sockaddr_storage *ss, unsigned char key[16])
{
	memset(key, 0, 16);
	if (ss->ss_family == AF_INET) {
		key[10] = key[11] = 0xff;
		memcpy(key + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
	} else if (ss->ss_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;

		memcpy(key, a->s6_addr, IN6_IS_ADDR_V4MAPPED(a) ? 16 : 8);
	}
}

static void fails_refill(struct auth_fails *f, double now)
{
	f->credit += (now - f->at) * FAIL_RATE;
	f->at = now;
	if (f->credit >= FAIL_BURST)
		f->used = false; /* back to a clean slate: nothing to remember */
}

/* The failure record of @key, refilled up to @now; NULL when it has nothing to remember. */
static struct auth_fails *fails_of(const unsigned char key[16], double now)
{
	int i;

	for (i = 0; i < FAIL_ADDRS; i++) {
		struct auth_fails *f = &ag.fails[i];

		if (!f->used || memcmp(f->addr, key, 16))
			continue;
		fails_refill(f, now);
		return f->used ? f : NULL;
	}
	return NULL;
}

/* Seconds before @key may try to authenticate again (0: now). */
static double auth_wait(const unsigned char key[16], double now)
{
	struct auth_fails *f = fails_of(key, now);

	return !f || f->credit >= 1 ? 0 : (1 - f->credit) / FAIL_RATE;
}

/* Count one failed authentication of @key. */
static void auth_failed(const unsigned char key[16], double now)
{
	struct auth_fails *f = fails_of(key, now), *g;
	int i;

	if (!f) {
		/* A free record, else the one closest to a clean slate. */
		for (i = 0; i < FAIL_ADDRS; i++) {
			g = &ag.fails[i];
			if (g->used)
				fails_refill(g, now);
			if (!g->used) {
				f = g;
				break;
			}
			if (!f || g->credit > f->credit)
				f = g;
		}
		*f = (struct auth_fails){.used = true, .credit = FAIL_BURST, .at = now};
		memcpy(f->addr, key, 16);
	}
	f->credit -= 1;
}

/* Is @given (@glen bytes) the token? In constant time: every byte of the token's buffer is
 * compared, with no early exit, whatever was given. */
static bool token_ok(const char *given, size_t glen)
{
	size_t i, n = strlen(ag.token);
	unsigned char diff = glen != n;

	for (i = 0; i < sizeof(ag.token) - 1; i++)
		diff |= (unsigned char)ag.token[i] ^ (unsigned char)(i < glen ? given[i] : 0);
	return n && !diff;
}

/* Refuse pre-auth client @i (its failure counted); false: drop it. */
static bool auth_refused(int i)
{
	struct client *c = &ag.clients[i];

	auth_failed(c->addr, mono_time());
	send_text(c->fd, FRAME_ERROR, "authentication failed: a valid token is required");
	return false;
}

/* Owner and token holders: blocking sends, bounded by a time-out so that a client that stops
 * reading cannot hold the agent for ever. */
static void set_trusted_io(int fd)
{
	struct timeval tv = {10, 0};
	int fl = fcntl(fd, F_GETFL);

	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* The first frame of TCP client @i, "auth" + the token (@p, @n bytes: KIND '\0' TOKEN).
 * Return false to drop it. */
static bool authenticate(int i, const char *p, size_t n)
{
	struct client *c = &ag.clients[i];
	double now = mono_time(), wait = auth_wait(c->addr, now);
	size_t klen = strnlen(p, n);

	if (wait > 0) {
		/* Not even compared: guessing goes no faster than FAIL_RATE. */
		send_text(c->fd, FRAME_ERROR, "%s from this address: try again in %d s",
			  AGENT_AUTH_THROTTLED, (int)wait + 1);
		return false;
	}
	if (klen == n || strcmp(p, "auth") || !token_ok(p + klen + 1, n - klen - 1))
		return auth_refused(i);
	if (count_clients(CL_TCP) >= TCP_SLOTS) {
		send_text(c->fd, FRAME_ERROR, "too many clients: %d TCP connections are open",
			  TCP_SLOTS);
		return false;
	}
	c->state = CL_TCP;
	set_trusted_io(c->fd);
	return !send_text(c->fd, FRAME_RESULT, "{\"ok\": true}");
}

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
				      ag.token, already ? "true" : "false");
		}
	} else if (!queue_request(i, kind, body, n - klen - 1, err, sizeof(err))) {
		r = send_text(c->fd, FRAME_ERROR, "%s",
			      err[0] ? err : "out of memory in the agent");
	}
	return !r;
}

/*
 * How many bytes client @c may have buffered: a pre-auth client its auth frame at most;
 * others BUF_MIN, or the whole frame at the head of the buffer when it is bigger (up to
 * AGENT_MAX_FRAME). One more byte is allocated: a payload is NUL-terminated in place.
 */
static size_t buf_limit(const struct client *c)
{
	uint32_t l;

	if (c->state == CL_PREAUTH)
		return PREAUTH_MAX;
	l = c->len >= 4 ? frame_len(c->buf) : 0;
	return l <= AGENT_MAX_FRAME && 4 + (size_t)l > BUF_MIN ? 4 + (size_t)l : BUF_MIN;
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

		/* Before authentication only one small "auth" request is read: anything else
		 * (a big frame announced, garbage) ends the connection at once. */
		if (c->state == CL_PREAUTH &&
		    (!l || l > PREAUTH_MAX - 4 || (c->len >= 5 && c->buf[4] != FRAME_REQUEST)))
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

/* Only the target's own user or root may talk to it over the Unix socket. */
static bool peer_allowed(int fd)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len))
		return false;
	return cr.uid == 0 || cr.uid == geteuid() || cr.uid == getuid();
}

/* A new Unix connection: the owner gets an owner slot; anyone else is told no and closed
 * (after a moment to read why, while a DENIED slot is free): never a slot the owner needs. */
static void admit_unix(int fd)
{
	double now = mono_time();
	int slot;

	if (!peer_allowed(fd)) {
		/* New, empty and non-blocking: this short message never blocks the agent. */
		send_text(
			fd, FRAME_ERROR,
			"permission denied: only the owner of process %d or root may use its agent",
			(int)getpid());
		shutdown(fd, SHUT_WR);
		slot = count_clients(CL_DENIED) < DENIED_SLOTS ? free_slot() : -1;
		if (slot < 0) {
			close(fd);
			return;
		}
		ag.clients[slot] = (struct client){.state = CL_DENIED,
						   .fd = fd,
						   .since = now,
						   .deadline = now + DENIED_LINGER_S};
		return;
	}
	slot = count_clients(CL_OWNER) < OWNER_SLOTS ? free_slot() : -1;
	if (slot < 0) {
		send_text(fd, FRAME_ERROR, "too many clients: %d connections of the owner are open",
			  OWNER_SLOTS);
		close(fd);
		return;
	}
	set_trusted_io(fd);
	ag.clients[slot] = (struct client){.state = CL_OWNER, .fd = fd, .since = now};
}

/* A new TCP connection: a PREAUTH slot (the oldest one's holder is dropped when all are
 * taken, except for an address that may not try now), AUTH_TIMEOUT_S to authenticate. */
static void admit_tcp(int fd, const struct sockaddr_storage *ss)
{
	double now = mono_time();
	unsigned char key[16];
	int one = 1, slot, i, oldest = -1;

	addr_key(ss, key);
	if (count_clients(CL_PREAUTH) >= PREAUTH_SLOTS) {
		if (auth_wait(key, now) > 0) {
			close(fd);
			return;
		}
		for (i = 0; i < MAX_CLIENTS; i++)
			if (ag.clients[i].state == CL_PREAUTH &&
			    (oldest < 0 || ag.clients[i].since < ag.clients[oldest].since))
				oldest = i;
		drop_client(oldest);
	}
	slot = free_slot();
	if (slot < 0) {
		close(fd);
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	ag.clients[slot] = (struct client){
		.state = CL_PREAUTH, .fd = fd, .since = now, .deadline = now + AUTH_TIMEOUT_S};
	memcpy(ag.clients[slot].addr, key, 16);
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

/*
 * Serve TCP on @spec (hostport.h: PORT, HOST:PORT, [IPV6]:PORT) with a new random token.
 * Already serving: *@already is set if @spec names the same address (port 0: any), an error
 * otherwise (one TCP address per process). Return 0, or -1 with the reason in @err.
 */
static int start_tcp(const char *spec, bool *already, char *err, size_t errlen)
{
	struct addrinfo hints = {0}, *res = NULL, *ai;
	char host[256], port[8], why[200];
	unsigned char rnd[16];
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	unsigned int pn;
	int fd = -1, one = 1, rc, i;

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
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (!bind(fd, ai->ai_addr, ai->ai_addrlen) && !listen(fd, LISTEN_BACKLOG))
			break;
		close_fd(&fd);
	}
	freeaddrinfo(res);
	if (fd < 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", spec, strerror(errno));
		return -1;
	}
	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
		snprintf(err, errlen, "no randomness for the token: %s", strerror(errno));
		close(fd);
		return -1;
	}
	memset(ag.token, 0, sizeof(ag.token));
	for (i = 0; i < 16; i++)
		snprintf(ag.token + 2 * i, 3, "%02x", rnd[i]);
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
		memset(ag.token, 0, sizeof(ag.token));
		memcpy(ag.token, ag.env_token, strlen(ag.env_token));
	}
	explicit_bzero(ag.env_token, sizeof(ag.env_token));
	ag.env_listen[0] = '\0';
}

static void *agent_main(void *arg)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct pollfd p[MAX_CLIENTS + 3];
	socklen_t sl;
	int i, n;

	pthread_setname_np(pthread_self(), "probing-agent");
	ag.io_thread = pthread_self();
	ag.io_thread_set = true;
	ag.pid = getpid();
	ag.since = wall_time();
	/* Abstract socket: no file to clean up, gone with the process. Non-blocking: every
	 * connection waiting is taken at each wake-up (accept_clients). */
	ag.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (ag.listen_fd < 0)
		goto out;
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
			goto out;
	}
	snprintf(ag.sockname, sizeof(ag.sockname), "@%s", sa.sun_path + 1);
	if (listen(ag.listen_fd, LISTEN_BACKLOG))
		goto out;
	if (pipe2(ag.wake, O_CLOEXEC | O_NONBLOCK))
		goto out;
	start_env_tcp();

	while (!ag.stop) {
		int timeout = -1, slot_of[MAX_CLIENTS + 3];
		double now = mono_time(), next = 0;
		bool accepting = ag.accept_pause <= now;

		for (i = 0; i < MAX_CLIENTS; i++) {
			struct client *c = &ag.clients[i];
			bool timed = c->state == CL_DENIED || c->state == CL_PREAUTH;

			if (c->state == CL_FREE)
				continue;
			if (timed && c->deadline <= now) {
				/* Denied clients had their second to hang up; pre-auth ones their
				 * time to authenticate (a failure, as a wrong token is). */
				if (c->state == CL_PREAUTH) {
					auth_failed(c->addr, now);
					send_text(c->fd, FRAME_ERROR,
						  "authentication timed out: send the token "
						  "first");
				}
				drop_client(i);
			} else if (timed) {
				if (!next || c->deadline < next)
					next = c->deadline;
			} else if (!is_inflight(i)) {
				/* A request just ended: close a client that left, or run what it
				 * sent meanwhile. */
				if (c->hup || !client_process(i))
					drop_client(i);
			}
		}
		if (!accepting && (!next || ag.accept_pause < next))
			next = ag.accept_pause;
		if (next)
			timeout = (int)((next - now) * 1000) + 1;
		n = 0;
		p[n++] = (struct pollfd){ag.wake[0], POLLIN, 0};
		/* -1 is ignored by poll */
		p[n++] = (struct pollfd){accepting ? ag.listen_fd : -1, POLLIN, 0};
		p[n++] = (struct pollfd){accepting ? ag.tcp_fd : -1, POLLIN, 0};
		for (i = 0; i < MAX_CLIENTS; i++) {
			struct client *c = &ag.clients[i];

			if (c->state == CL_FREE || c->hup)
				continue;
			slot_of[n] = i;
			p[n++] = (struct pollfd){c->fd, POLLIN, 0};
		}
		if (poll(p, n, timeout) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[0].revents) {
			char drain[64];
			ssize_t r = read(ag.wake[0], drain, sizeof(drain));
			(void)r;
		}
		if (ag.stop)
			break;
		/* The owner's way in first: it never waits behind anyone. */
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
out:
	/* Leave the sockets of requests in flight to the worker (the process is exiting). */
	for (i = 0; i < MAX_CLIENTS; i++)
		if (ag.clients[i].state != CL_FREE && !is_inflight(i))
			drop_client(i);
	pthread_mutex_lock(&wk.lock);
	pthread_cond_broadcast(&wk.work);
	pthread_cond_broadcast(&wk.cancel);
	pthread_mutex_unlock(&wk.lock);
	close_fd(&ag.listen_fd);
	close_fd(&ag.tcp_fd);
	pthread_mutex_lock(&ag.lock);
	ag.running = false;
	pthread_mutex_unlock(&ag.lock);
	return NULL;
}

/*
 * Start serving (idempotent): 0 started, 1 already running, -errno. Called by the
 * constructor, and by the injector (inject__call) when the library is mapped but not serving
 * (in a child after fork, or preloaded without PROBING=1).
 */
EXPORT int probing_agent_start(void)
{
	sigset_t all, old;
	int err = 0;

	pthread_mutex_lock(&ag.lock);
	if (ag.running) {
		err = 1;
		goto out;
	}
	ag.stop = false;
	/* The thread inherits this mask: it never runs the target's signal handlers. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = -pthread_create(&ag.thread, NULL, agent_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!err) {
		pthread_detach(ag.thread);
		ag.running = true;
	}
out:
	pthread_mutex_unlock(&ag.lock);
	return err;
}

/* fork(): the child has no agent thread and must not serve the parent's sockets. */
static void atfork_prepare(void)
{
	pthread_mutex_lock(&ag.lock);
}

static void atfork_parent(void)
{
	pthread_mutex_unlock(&ag.lock);
}

static void atfork_child(void)
{
	int i;

	agent_crash_atfork_child();
	/* Only this thread exists in the child: no agent, worker or watchdog. Reset the locks
	 * (another thread may have held them at fork time) and forget the parent's sockets
	 * and queue (leaked on purpose: no free() of state other threads were using). */
	pthread_mutex_init(&ag.lock, NULL);
	pthread_mutex_init(&wk.lock, NULL);
	pthread_cond_init(&wk.work, NULL);
	pthread_cond_init(&wk.cancel, NULL);
	for (i = 0; i < MAX_CLIENTS; i++) {
		if (ag.clients[i].state != CL_FREE)
			close_fd(&ag.clients[i].fd);
		memset(&ag.clients[i], 0, sizeof(ag.clients[i]));
		ag.clients[i].fd = -1;
	}
	close_fd(&ag.listen_fd);
	close_fd(&ag.tcp_fd);
	close_fd(&ag.wake[0]);
	close_fd(&ag.wake[1]);
	ag.running = false;
	ag.stop = false;
	ag.tcp_addr[0] = '\0';
	memset(ag.token, 0, sizeof(ag.token));
	memset(ag.env_token, 0, sizeof(ag.env_token));
	ag.env_listen[0] = '\0';
	memset(ag.fails, 0, sizeof(ag.fails));
	ag.accept_pause = 0;
	ag.io_thread_set = false;
	wk.watchdog_started = false;
	wk.head = wk.tail = NULL;
	wk.cur = NULL;
	memset(wk.workers, 0, sizeof(wk.workers));
}

/*
 * 'probing run --listen' hands the agent its address and token in PROBING_LISTEN and
 * PROBING_TOKEN. Take both out of the environment before the program runs: otherwise every
 * child it starts (workers, subprocesses, whatever it hands its environment to) would carry
 * the token, and os.environ would show it. The token's bytes are also wiped where they
 * were, so /proc/PID/environ no longer holds it. Only called from the constructor of a
 * preloaded library: the process is still single-threaded, before main().
 */
static void take_listen_env(void)
{
	char *v = getenv("PROBING_LISTEN");
	size_t n;

	/* Without PROBING_LISTEN a PROBING_TOKEN is not ours (a client's, for -t): left alone. */
	if (!v || !*v)
		return;
	snprintf(ag.env_listen, sizeof(ag.env_listen), "%s", v);
	v = getenv("PROBING_TOKEN");
	if (v) {
		n = strlen(v);
		if (n >= 16 && n < sizeof(ag.env_token))
			memcpy(ag.env_token, v, n);
		explicit_bzero(v, n);
	}
	unsetenv("PROBING_LISTEN");
	unsetenv("PROBING_TOKEN");
}

/*
 * 'probing run --crash': the exception hooks must be in place before the program's first
 * line. An audit hook (PEP 578), added before the interpreter starts, sees "cpython.run_file"
 * (run_module, run_command, run_stdin...), raised on the main thread just before that line
 * and outside any import: there it queues "crash.install" to the worker, lets the GIL go
 * and waits until the request has run (CRASH_GATE_MS at most), once. The program cannot
 * end while the worker runs Python (which could crash it as the interpreter finalizes). A
 * program that embeds Python and raises no such event gets no exception hooks.
 */
static int crash_audit(const char *event, PyObject *args, void *data)
{
	void *(*save)(void);
	void (*restore)(void *);
	struct timespec until;
	sigset_t all, old;
	bool queued;
	void *ts;

	(void)args;
	(void)data;
	if (gate.used || strncmp(event, "cpython.run_", 12))
		return 0;
	gate.used = true; /* the main thread, GIL held: no race with itself */
	*(void **)&save = dlsym(RTLD_DEFAULT, "PyEval_SaveThread");
	*(void **)&restore = dlsym(RTLD_DEFAULT, "PyEval_RestoreThread");
	if (!save || !restore)
		return 0;
	/* The worker, if started here, must not take the program's signals. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	queued = queue_request(-1, "crash.install", gate.body, strlen(gate.body), NULL, 0);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!queued) {
		fprintf(stderr,
			"probing: crash capture of uncaught exceptions is off in process %d: no "
			"worker thread\n",
			(int)getpid());
		return 0;
	}
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += CRASH_GATE_MS / 1000;
	ts = save();
	pthread_mutex_lock(&gate.lock);
	while (!gate.done)
		if (pthread_cond_timedwait(&gate.cond, &gate.lock, &until))
			break;
	pthread_mutex_unlock(&gate.lock);
	restore(ts);
	return 0;
}

/*
 * Whether this interpreter may use a debug memory allocator (PYTHONMALLOC=*debug, -X dev,
 * PYTHONDEVMODE, a debug build): then an audit hook added before it starts is freed at exit
 * by another allocator than the one that made it, which aborts the process. Read from the
 * environment and /proc/self/cmdline (the constructor runs before main()).
 */
static bool debug_allocator_possible(void)
{
	const char *m = getenv("PYTHONMALLOC"), *d = getenv("PYTHONDEVMODE");
	char buf[8192];
	ssize_t n;
	size_t i;
	int fd;

	if ((m && *m && strcmp(m, "malloc") && strcmp(m, "pymalloc")) || (d && *d) ||
	    dlsym(RTLD_DEFAULT, "_Py_NegativeRefcount"))
		return true;
	fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return true;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return true;
	buf[n] = '\0';
	for (i = 0; i < (size_t)n; i += strlen(buf + i) + 1) {
		const char *a = buf + i;

		if (!strcmp(a, "-Xdev") ||
		    (!strcmp(a, "-X") && i + 3 < (size_t)n && !strncmp(buf + i + 3, "dev", 3)))
			return true;
	}
	return false;
}

/*
 * 'probing run --crash': install the fatal-signal handlers now (before main(), so that a crash
 * at any point is captured) and the audit hook that installs the Python side (the exception
 * hooks, crash.py) before the program's first line. Inherited by the Python processes the program starts ("%p" in
 * the file name is each one's pid).
 */
static void crash_from_env(void)
{
	const char *file = getenv(CRASH_ENV_FILE), *bin = getenv(CRASH_ENV_BIN);
	char err[512], f[4096 + 16], b[4096 + 16];
	int (*add_hook)(int (*)(const char *, PyObject *, void *), void *);

	if (!file || !*file)
		return;
	if (agent_crash_install(bin, file, NULL, 0, err, sizeof(err)) < 0) {
		fprintf(stderr, "probing: crash capture is off in process %d: %s\n", (int)getpid(),
			err);
		return;
	}
	/*
	 * The exception hooks are installed by the worker while the program's first line waits
	 * at the audit hook. Without that hook (a debug allocator, or no PEP 578) the program
	 * would run meanwhile, and a short one could finalize the interpreter under the
	 * worker's feet: then fatal signals only.
	 */
	add_hook = dlsym(RTLD_DEFAULT, "PySys_AddAuditHook");
	if (!add_hook || debug_allocator_possible()) {
		fprintf(stderr,
			"probing: crash capture in process %d covers fatal signals only (uncaught "
			"exceptions need 'probing inject -p PID --crash' with a debug memory "
			"allocator)\n",
			(int)getpid());
		return;
	}
	json_str(f, sizeof(f), file);
	json_str(b, sizeof(b), bin);
	snprintf(gate.body, sizeof(gate.body), "{\"file\": %s, \"bin\": %s, \"boot\": true}", f, b);
	add_hook(crash_audit, NULL);
}

__attribute__((constructor)) static void agent_init(void)
{
	const char *pre = getenv("LD_PRELOAD"), *en = getenv("PROBING");

	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
	if (pre && strstr(pre, AGENT_LIB_PREFIX)) {
		/* Preloaded ('probing run', or inherited by a child): serve only when asked, and
		 * only in Python processes (not in the shell or tools a job starts). */
		if (!en || strcmp(en, "1"))
			return;
		if (!dlsym(RTLD_DEFAULT, "Py_IsInitialized"))
			return;
		take_listen_env();
		probing_agent_start();
		crash_from_env();
		return;
	}
	probing_agent_start();
}

__attribute__((destructor)) static void agent_fini(void)
{
	/* exit(): Python is finalized (or about to vanish). Stop touching it. */
	ag.py_gone = true;
	ag.stop = true;
	if (ag.wake[1] >= 0) {
		char c = 'x';
		ssize_t r = write(ag.wake[1], &c, 1);
		(void)r;
	}
}
