// SPDX-License-Identifier: MIT
/*
 * agent_pyapi: how the agent enters Python (docs/live.md, "The agent"). The CPython C API is
 * resolved with dlsym at run time (RTLD_DEFAULT, then the libpython found with
 * dl_iterate_phdr), so one build serves CPython 3.8-3.13 with a static or a shared libpython.
 * A worker (agent_worker.c) runs each request here: it waits for Py_IsInitialized, takes the
 * GIL with PyGILState_Ensure, loads the embedded helpers (injector/py/NAME.py) on its first
 * request and hands the request to probing_agent.handle(kind, body). The helpers call back
 * into C through probing_native: interruptible sections, the instances of a type, crash
 * capture, and the atexit stop.
 *
 * Python is never called before Py_IsInitialized() nor once finalization began (ag.py_gone),
 * and never with one of our locks held while waiting for the GIL. A request whose client went
 * away (or cancelled) before the GIL came is dropped.
 */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "agent_crash.h"
#include "agent_int.h"

/* ---- the CPython C API, resolved at run time ----------------------------------------- */

/* PyMethodDef is part of the stable ABI: identical in 3.8-3.13. */
struct py_method_def {
	const char *name;
	PyObject *(*meth)(PyObject *self, PyObject *args);
	int flags;
	const char *doc;
};
#define METH_VARARGS  0x0001
#define Py_file_input 257

struct py_api py;

/* The embedded helpers: { "agent", probing_py_agent }, ... { NULL, NULL } (agent.mk). */
struct py_module {
	const char *name;
	const char *source;
};
extern const struct py_module probing_py_modules[];

/* Py_XDECREF: drop the reference @o holds, if any. */
static void py_xdecref(PyObject *o)
{
	if (o)
		py.DecRef(o);
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
bool py_resolve(void)
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
	py_xdecref(s);
	py.ErrClear();
	py_xdecref(t);
	py_xdecref(v);
	py_xdecref(tb);
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
		py_xdecref(t);
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
	if (!strcmp(op, "stop"))
		agent_stop(); /* called from atexit: from now on Python is going away */
	return py.BuildValue("");
}

static struct py_method_def native_def = {"probing_native", native_fn, METH_VARARGS,
					  "probing agent: C-side operations"};

/*
 * The agent module @mod is loaded (GIL held): take its handle and _drop_interrupt, and call
 * its _init(probing_native, info). 0, or -1 with ag.py_error set.
 */
static int py_init_agent(PyObject *mod)
{
	PyObject *init, *fn = NULL, *info = NULL, *r;
	char infobuf[1024], esc[256], esc2[160];
	int err = -1;

	ag.handle = py.GetAttrString(mod, "handle");
	ag.drop_interrupt = py.GetAttrString(mod, "_drop_interrupt");
	init = py.GetAttrString(mod, "_init");
	if (!ag.handle || !ag.drop_interrupt || !init) {
		py_error_text("probing_agent", ag.py_error, sizeof(ag.py_error));
		goto cleanup;
	}
	fn = py.CFunctionNewEx(&native_def, NULL, NULL);
	json_str(esc, sizeof(esc), ag.sockname);
	json_str(esc2, sizeof(esc2), ag.tcp_addr);
	snprintf(infobuf, sizeof(infobuf),
		 "{\"since\": %.6f, \"socket\": %s, \"tcp\": %s, \"agent\": \"%s\"}", ag.since, esc,
		 ag.tcp_addr[0] ? esc2 : "null", AGENT_VERSION);
	info = py.BytesFromStringAndSize(infobuf, strlen(infobuf));
	r = fn && info ? py.CallFunctionObjArgs(init, fn, info, NULL) : NULL;
	if (!r) {
		py_error_text("probing_agent._init", ag.py_error, sizeof(ag.py_error));
		goto cleanup;
	}
	py.DecRef(r);
	err = 0;
cleanup:
	py_xdecref(init);
	py_xdecref(fn);
	py_xdecref(info);
	return err;
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
	PyObject *code, *mod = NULL, *r;
	char name[128], file[160];
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
			py_xdecref(code);
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
		if (pass == 0 && py_init_agent(mod))
			goto fail;
	}
	py.DecRef(mod);
	ag.py_loaded = true;
	return 0;
fail:
	py_xdecref(mod);
	return -1;
}

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

/* What a request answers: a frame of @type with @n bytes of @out (malloc'ed; NULL: none). */
struct answer {
	char *out;
	Py_ssize_t n;
	char type;
};

static void error_answer(struct answer *a, const char *text)
{
	a->out = strdup(text);
	a->n = a->out ? strlen(a->out) : 0;
	a->type = FRAME_ERROR;
}

/*
 * Take the GIL for request @req on worker @w (in *@st, for PyGILState_Release): true with the
 * worker marked inside Python; false, the GIL not held, once @fd was told why (Python going
 * away, absent, not initialized yet, or the request cancelled or its client gone while the
 * GIL was awaited: it does not run late).
 */
static bool enter_python(struct worker *w, int fd, const struct pyreq *req, int *st)
{
	bool skip;

	if (ag.py_gone) {
		send_text(fd, FRAME_ERROR, "the Python interpreter of process %d is shutting down",
			  (int)getpid());
		return false;
	}
	if (!py_resolve()) {
		send_text(fd, FRAME_ERROR, "process %d has no Python interpreter", (int)getpid());
		return false;
	}
	if (!py_wait_initialized(w, req)) {
		send_text(fd, FRAME_ERROR,
			  "the Python interpreter of process %d is not initialized (yet)",
			  (int)getpid());
		return false;
	}
	*st = py.GILState_Ensure();
	pthread_mutex_lock(&wk.lock);
	w->ident = (unsigned long)pthread_self();
	skip = w->cancel_id == req->id || (req->slot >= 0 && ag.clients[req->slot].hup) ||
	       ag.py_gone;
	w->running_py = !skip;
	pthread_mutex_unlock(&wk.lock);
	if (skip) {
		py.GILState_Release(*st);
		send_text(fd, FRAME_ERROR, "the request was cancelled before it started");
		return false;
	}
	return true;
}

/* Whether @req, which @w runs, was cancelled. */
static bool cancelled(const struct worker *w, const struct pyreq *req)
{
	bool c;

	pthread_mutex_lock(&wk.lock);
	c = w->cancel_id == req->id;
	pthread_mutex_unlock(&wk.lock);
	return c;
}

/* probing_agent.handle(kind, body) for @req (GIL held): its answer into @a. */
static void call_handle(const struct pyreq *req, struct answer *a)
{
	PyObject *k, *b, *r = NULL;
	char *data;

	k = py.BytesFromStringAndSize(req->kind, strlen(req->kind));
	b = py.BytesFromStringAndSize(req->body, req->blen);
	if (k && b)
		r = py.CallFunctionObjArgs(ag.handle, k, b, NULL);
	if (r && !py.BytesAsStringAndSize(r, &data, &a->n) && a->n >= 1) {
		/* The dispatcher's answer: a frame type byte, then JSON. Copy it: the GIL goes
		 * before the (possibly slow) send. */
		a->type = data[0];
		a->out = malloc(a->n);
		if (a->out)
			memcpy(a->out, data + 1, a->n - 1);
		a->n = a->n - 1;
	} else {
		char msg[600];

		py_error_text("probing_agent.handle", msg, sizeof(msg));
		error_answer(a, msg);
	}
	py_xdecref(k);
	py_xdecref(b);
	py_xdecref(r);
}

/* Run @req on @w (GIL held): load the helpers (once), then call the dispatcher. */
static void run_request(const struct worker *w, const struct pyreq *req, struct answer *a)
{
	if (py_load())
		error_answer(a, ag.py_error);
	else if (cancelled(w, req))
		/* Cancelled while the helpers loaded (that is never interrupted): do not start. */
		error_answer(a, "the request was cancelled before it started");
	else
		call_handle(req, a);
}

/* Worker @w leaves Python and lets the GIL (@st) go. */
static void leave_python(struct worker *w, int st)
{
	bool sent;

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
}

void python_request(struct worker *w, int fd, struct pyreq *req)
{
	struct answer a = {NULL, 0, FRAME_ERROR};
	int st;

	if (!enter_python(w, fd, req, &st))
		return;
	/* Tell the client the GIL came (it times out on this, not on the work itself); for a
	 * client that is gone nothing runs. */
	if (fd < 0 || !send_frame(fd, FRAME_GIL, NULL, 0))
		run_request(w, req, &a);
	leave_python(w, st);
	if (a.out && fd >= 0)
		send_frame(fd, a.type, a.out, a.n);
	else if (a.out && a.type != FRAME_RESULT)
		/* An internal request (probing run --crash) has nobody else to tell. */
		fprintf(stderr, "probing: %s failed in process %d: %.*s\n", req->kind,
			(int)getpid(), (int)a.n, a.out);
	free(a.out);
}
