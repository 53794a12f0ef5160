// SPDX-License-Identifier: MIT
/* pytasks: asyncio tasks read from outside (pytasks.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strpool.h"
#include "base/util.h"
#include "bpf/sampler.h"
#include "python/pyaiolayout.h"
#include "python/pyproc_int.h"
#include "python/pytasks.h"

#define MAX_INTERPS  16
#define MAX_SET	     (1u << 18) /* set slots read at most (16 bytes each) */
#define MAX_TASKS    100000
#define MAX_CHILDREN 4096 /* a gather's children looked at */
#define MAX_BASES    32	  /* tp_base steps from a class to _asyncio.Task */
#define MAX_THREADS  4096 /* thread states of an interpreter looked at */

/* fut_state of Modules/_asynciomodule.c: STATE_PENDING, STATE_CANCELLED, STATE_FINISHED. */
#define FUT_PENDING 0

/* enum _framestate (Include/internal/pycore_frame.h): FRAME_SUSPENDED (3.11, 3.12) and
 * FRAME_SUSPENDED_YIELD_FROM (3.13, 3.14: suspended in an await or yield from; 3.15
 * renumbered the states from 0). */
#define FRAME_SUSPENDED_311	       (-1)
#define FRAME_SUSPENDED_YIELD_FROM_313 (-1)
#define FRAME_SUSPENDED_YIELD_FROM_315 2

/* _PyStackRef (3.14+, Include/internal/pycore_stackref.h): a PyObject * with tag bits. */
#define STACKREF_TAG_BITS 3u

/* YIELD_FROM, the instruction an await suspends on up to 3.10 (dis.opmap of 3.8-3.10). */
#define OP_YIELD_FROM 72

/*
 * 3.11 and 3.12: a coroutine suspended in an await resumes at a RESUME whose oparg is 2 (after
 * yield from) or 3 (after await), as _PyGen_yf() checks; RESUME may be quickened (3.11
 * RESUME_QUICK) or instrumented (3.12 INSTRUMENTED_RESUME). Opcodes from each version's dis
 * (_all_opmap).
 */
static bool is_resume_after_await(unsigned int version, uint8_t op, uint8_t arg)
{
	if (arg < 2)
		return false;
	if (version == 0x030b)
		return op == 151 || op == 150; /* RESUME, RESUME_QUICK */
	if (version == 0x030c)
		return op == 151 || op == 240; /* RESUME, INSTRUMENTED_RESUME */
	return false;
}

const char *pytask_state_name(enum pytask_state s)
{
	switch (s) {
	case PYTASK_RUNNING:
		return "running";
	case PYTASK_WAITING:
		return "waiting";
	case PYTASK_READY:
		return "ready";
	}
	return "?";
}

/* What one interpreter's asyncio gives: the classes and the task registries. */
struct aio {
	uint64_t ctask, cfuture; /* _asyncio.Task, _asyncio.Future */
	uint64_t pytask;	 /* asyncio.tasks._PyTask, the pure-Python Task */
	uint64_t current;	 /* _current_tasks: {loop: task} */
	uint64_t loopbase;	 /* asyncio.events.AbstractEventLoop, every loop's base */
};

struct reader {
	struct pyproc *pp;
	struct pytasks *out;
	struct py_aio_layout lay; /* valid when lay_read and lay_err is 0 */
	bool lay_read;		  /* pyaio__layout was asked */
	int lay_err;
	char why[160]; /* why lay_err */
	struct aio aio;
	uint64_t *cands; /* task candidates */
	size_t ncands, capcands;
	uint64_t (*cur)[2]; /* (loop, task) pairs of _current_tasks */
	size_t ncur, capcur;
};

static int type_of(struct pyproc *pp, uint64_t obj, uint64_t *tp)
{
	return pp_ptr(pp, obj + pp->off.ob_type, tp);
}

/* Is @obj an instance of class @base or a subclass of it? */
static bool instance_of(struct pyproc *pp, uint64_t obj, uint64_t base)
{
	uint64_t tp;
	int i;

	if (!obj || !base || type_of(pp, obj, &tp))
		return false;
	for (i = 0; tp && i < MAX_BASES; i++) {
		if (tp == base)
			return true;
		if (pp_ptr(pp, tp + pp->off.tp_base, &tp))
			return false;
	}
	return false;
}

static bool exact_type(struct pyproc *pp, uint64_t obj, enum py_symobj t)
{
	uint64_t tp;

	return obj && pp->objs[t] && !type_of(pp, obj, &tp) && tp == pp->objs[t];
}

static int add_cand(struct reader *r, uint64_t task)
{
	if (r->ncands >= MAX_TASKS)
		return 0;
	if (grow_array(&r->cands, &r->capcands, r->ncands + 1, sizeof(*r->cands)))
		return -ENOMEM;
	r->cands[r->ncands++] = task;
	return 0;
}

/*
 * Each key of the set at @set: @weak, the weakrefs of a WeakSet's data (their referents), or
 * the objects themselves.
 */
static int add_set(struct reader *r, uint64_t set, bool weak)
{
	struct pyproc *pp = r->pp;
	const struct py_offsets *o = &pp->off;
	uint64_t mask, table, key, obj;
	uint8_t *buf;
	size_t n, i, esz = o->setentry_size;
	int err = 0;

	if (!exact_type(pp, set, PYS_SET))
		return -EINVAL;
	if (pp_ptr(pp, set + o->set_mask, &mask) || pp_ptr(pp, set + o->set_table, &table))
		return -EFAULT;
	if (mask >= MAX_SET || esz < 8 || esz > 64)
		return -E2BIG;
	n = mask + 1;
	buf = malloc(n * esz);
	if (!buf)
		return -ENOMEM;
	if (pp_read(pp, table, buf, n * esz)) {
		free(buf);
		return -EFAULT;
	}
	for (i = 0; i < n && !err; i++) {
		memcpy(&key, buf + i * esz, 8);
		if (!key)
			continue;
		if (!weak) {
			err = add_cand(r, key);
			continue;
		}
		/* A dead reference's referent is None; the set's dummy is not a weakref. */
		if (!exact_type(pp, key, PYS_WEAKREF) || pp_ptr(pp, key + o->wr_object, &obj))
			continue;
		if (obj && obj != pp->objs[PYS_NONE])
			err = add_cand(r, obj);
	}
	free(buf);
	return err;
}

static int cur_pair(struct pyproc *pp, uint64_t loop, uint64_t task, void *ctx)
{
	struct reader *r = ctx;

	(void)pp;
	if (grow_array(&r->cur, &r->capcur, r->ncur + 1, sizeof(*r->cur)))
		return -ENOMEM;
	r->cur[r->ncur][0] = loop;
	r->cur[r->ncur][1] = task;
	r->ncur++;
	return 0;
}

/*
 * The tasks on the circular list whose head (a struct llist_node: next, prev) is at @head:
 * each node is a task's task_node. Bounded by MAX_TASKS; a list that changes while it is
 * walked ends the walk where it no longer reads (what was read is checked task by task).
 */
static int add_list(struct reader *r, uint64_t head)
{
	uint64_t node;
	size_t n;
	int err;

	if (pp_ptr(r->pp, head, &node))
		return 0;
	for (n = 0; node && node != head && n < MAX_TASKS; n++) {
		if (node < r->lay.task_node)
			break;
		err = add_cand(r, node - r->lay.task_node);
		if (err)
			return err;
		if (pp_ptr(r->pp, node, &node))
			break;
	}
	return 0;
}

/*
 * 3.14+: the tasks of the interpreter @interp, on its own list (tasks of threads that exited)
 * and on each thread's, and the (loop, task) each thread runs now.
 */
static int read_lists(struct reader *r, uint64_t interp)
{
	struct pyproc *pp = r->pp;
	const struct py_offsets *o = &pp->off;
	uint64_t ts, loop, task;
	int n, err;

	err = add_list(r, interp + r->lay.is_tasks_head);
	if (err || pp_ptr(pp, interp + o->is_tstate_head, &ts))
		return err;
	for (n = 0; ts && n < MAX_THREADS; n++) {
		err = add_list(r, ts + r->lay.ts_tasks_head);
		if (err)
			return err;
		if (!pp_ptr(pp, ts + r->lay.ts_running_loop, &loop) && loop &&
		    !pp_ptr(pp, ts + r->lay.ts_running_task, &task) && task) {
			err = cur_pair(pp, loop, task, r);
			if (err)
				return err;
		}
		if (pp_ptr(pp, ts + o->ts_next, &ts))
			break;
	}
	return 0;
}

/* The registries of the interpreter @interp (3.14+: its lists too). 0 (also: asyncio not
 * imported) or -errno (-ENOTSUP: asyncio is imported, and its tasks cannot be read). */
static int read_interp(struct reader *r, uint64_t interp)
{
	struct pyproc *pp = r->pp;
	const struct py_offsets *o = &pp->off;
	uint64_t modules, mod, tdict, fdict, edict, ws, data, eager;
	int err;

	if (pp_ptr(pp, interp + o->is_modules, &modules) || !modules)
		return 0;
	if (py_dict_get_str(pp, modules, "asyncio.tasks", &mod) ||
	    pp_ptr(pp, mod + o->md_dict, &tdict) || !tdict)
		return 0; /* asyncio not imported (yet) */
	r->out->asyncio = true;
	/* Known only once asyncio is imported (3.14: the _asyncio extension is loaded then). */
	if (!r->lay_read) {
		r->lay_read = true;
		r->lay_err = pyaio__layout(pp, &r->lay, r->why, sizeof(r->why));
	}
	if (r->lay_err)
		return r->lay_err;
	if (py_dict_get_str(pp, modules, "asyncio.futures", &mod) ||
	    pp_ptr(pp, mod + o->md_dict, &fdict) || !fdict)
		return 0;
	memset(&r->aio, 0, sizeof(r->aio));
	/* _CTask/_CFuture exist only with the C accelerator (_asyncio). */
	py_dict_get_str(pp, tdict, "_CTask", &r->aio.ctask);
	py_dict_get_str(pp, fdict, "_CFuture", &r->aio.cfuture);
	py_dict_get_str(pp, tdict, "_PyTask", &r->aio.pytask);
	py_dict_get_str(pp, tdict, "_current_tasks", &r->aio.current);
	if (!py_dict_get_str(pp, modules, "asyncio.events", &mod) &&
	    !pp_ptr(pp, mod + o->md_dict, &edict) && edict)
		py_dict_get_str(pp, edict, "AbstractEventLoop", &r->aio.loopbase);
	/* 3.8-3.11: _all_tasks; 3.12+: _scheduled_tasks and _eager_tasks. */
	if (!py_dict_get_str(pp, tdict, "_scheduled_tasks", &ws) ||
	    !py_dict_get_str(pp, tdict, "_all_tasks", &ws)) {
		if (!py_getattr_dict(pp, ws, "data", &data)) {
			err = add_set(r, data, true);
			if (err == -ENOMEM)
				return err;
		}
	}
	if (!py_dict_get_str(pp, tdict, "_eager_tasks", &eager)) {
		err = add_set(r, eager, false);
		if (err == -ENOMEM)
			return err;
	}
	if (r->aio.current && exact_type(pp, r->aio.current, PYS_DICT)) {
		err = py_dict_foreach(pp, r->aio.current, 4096, cur_pair, r);
		if (err == -ENOMEM)
			return err;
	}
	return r->lay.lists ? read_lists(r, interp) : 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int loop_index(struct reader *r, uint64_t loop)
{
	struct pyproc *pp = r->pp;
	struct pytasks *out = r->out;
	struct pyloop *l;
	uint64_t tp, v;
	char tname[128];
	int64_t ident;
	int i;

	for (i = 0; i < out->nloops; i++)
		if (out->loops[i].addr == loop)
			return i;
	l = realloc(out->loops, (out->nloops + 1) * sizeof(*l));
	if (!l)
		return -ENOMEM;
	out->loops = l;
	l = &out->loops[out->nloops];
	memset(l, 0, sizeof(*l));
	l->addr = loop;
	if (!type_of(pp, loop, &tp) && !py_type_name(pp, tp, tname, sizeof(tname)))
		l->type = strpool__intern(pp->strs, tname);
	/* BaseEventLoop.run_forever() sets _thread_id to the running thread's ident. */
	if (!py_getattr_dict(pp, loop, "_thread_id", &v) && exact_type(pp, v, PYS_INT) &&
	    !py_read_long(pp, v, &ident) && ident > 0) {
		const struct pythread *th = pyproc__thread_by_pthread(pp, (uint64_t)ident);

		l->ident = (uint64_t)ident;
		if (th) {
			l->tid = th->tid;
			l->thread = th->name && th->name[0] ? th->name : NULL;
		}
	}
	return out->nloops++;
}

/*
 * The frame of coroutine (or generator) @gen: a PyFrameObject (<= 3.10, 0 once finished)
 * or its inline _PyInterpreterFrame (3.11+).
 */
static int gen_frame(struct pyproc *pp, uint64_t gen, uint64_t *frame)
{
	if (pp->off.gen_iframe != PYO_NONE) {
		*frame = gen + pp->off.gen_iframe;
		return 0;
	}
	return pp_ptr(pp, gen + pp->off.gen_frame, frame);
}

/*
 * What suspended coroutine @gen (frame @frame) awaits, as CPython's _PyGen_yf() finds it:
 * the value on top of its stack when it is suspended in an await / yield from. 0 if none.
 */
static uint64_t gen_awaits(struct pyproc *pp, uint64_t gen, uint64_t frame)
{
	const struct py_offsets *o = &pp->off;
	uint64_t code, yf = 0, top;
	int32_t lasti, depth;
	int8_t state;
	uint8_t u[2];

	if (pp->version <= 0x030a) {
		if (pp_ptr(pp, frame + o->f_code, &code) ||
		    pp_read(pp, frame + o->f_lasti, &lasti, 4) || lasti < 0 ||
		    pp_ptr(pp, code + o->co_code, &code))
			return 0;
		if (pp->version <= 0x0309) {
			/* f_stacktop is NULL while the frame runs; f_lasti counts bytes. */
			if (pp_ptr(pp, frame + o->f_stacktop, &top) || !top ||
			    pp_read(pp, code + o->bytes_sval + (uint32_t)lasti + 2, u, 1) ||
			    u[0] != OP_YIELD_FROM || pp_ptr(pp, top - 8, &yf))
				return 0;
			return yf;
		}
		if (pp_read(pp, frame + o->f_stackdepth, &depth, 4) || depth <= 0 ||
		    pp_read(pp, code + o->bytes_sval + ((uint32_t)lasti + 1) * 2, u, 1) ||
		    u[0] != OP_YIELD_FROM || pp_ptr(pp, frame + o->f_valuestack, &top) ||
		    pp_ptr(pp, top + ((uint64_t)depth - 1) * 8, &yf))
			return 0;
		return yf;
	}
	if (pp_read(pp, gen + o->gen_frame_state, &state, 1))
		return 0;
	if (o->if_stackpointer != PYO_NONE) {
		/* 3.14+: _PyGen_yf() peeks the tagged reference under stackpointer (3.14), or
		 * the one below it (3.15: SEND keeps the value sent on top of the receiver). */
		uint64_t sp, below = pp->version >= 0x030f ? 16 : 8;

		if (state != (pp->version >= 0x030f ? FRAME_SUSPENDED_YIELD_FROM_315
						    : FRAME_SUSPENDED_YIELD_FROM_313) ||
		    pp_ptr(pp, frame + o->if_stackpointer, &sp) ||
		    sp < frame + o->if_localsplus + below || sp - frame > 1 << 20 ||
		    pp_ptr(pp, sp - below, &yf))
			return 0;
		return yf & ~(uint64_t)STACKREF_TAG_BITS;
	}
	if (pp->version >= 0x030d) {
		if (state != FRAME_SUSPENDED_YIELD_FROM_313)
			return 0;
	} else {
		uint64_t instr;

		if (state != FRAME_SUSPENDED_311 || pp_ptr(pp, frame + o->if_instr, &instr) ||
		    pp_read(pp, instr + 2, u, 2) || !is_resume_after_await(pp->version, u[0], u[1]))
			return 0;
	}
	if (pp_read(pp, frame + o->if_stacktop, &depth, 4) || depth <= 0 || depth > 1 << 20 ||
	    pp_ptr(pp, frame + o->if_localsplus + ((uint64_t)depth - 1) * 8, &yf))
		return 0;
	return yf;
}

static int add_frame(struct pyproc *pp, struct pytask *t, const struct py_frame_rec *rec)
{
	struct frame *f = realloc(t->frames, (t->nframes + 1) * sizeof(*f));

	if (!f)
		return -ENOMEM;
	t->frames = f;
	pyproc__resolve(pp, rec, &t->frames[t->nframes]);
	t->nframes++;
	return 0;
}

/* The chain of a suspended task: its coroutine, what that awaits, ... */
static int suspended_chain(struct pyproc *pp, uint64_t coro, struct pytask *t)
{
	struct py_frame_rec recs[PYTASK_MAX_DEPTH];
	uint64_t gen = coro, frame;
	int n = 0, i, err;

	while (gen && (exact_type(pp, gen, PYS_CORO) || exact_type(pp, gen, PYS_GEN))) {
		if (n == PYTASK_MAX_DEPTH) {
			t->truncated = true;
			break;
		}
		if (gen_frame(pp, gen, &frame) || !frame || py_frame_record(pp, frame, &recs[n])) {
			t->truncated = n > 0; /* finished meanwhile, or unreadable */
			break;
		}
		n++;
		gen = gen_awaits(pp, gen, frame);
	}
	/* Innermost first, as stacks are. */
	for (i = n - 1; i >= 0; i--) {
		err = add_frame(pp, t, &recs[i]);
		if (err)
			return err;
	}
	return 0;
}

/*
 * The chain of the task running now: the frames of the thread running its loop, from the
 * top down to the task's coroutine. 1 if found there, 0 if not (then read as suspended).
 */
static int running_chain(struct pyproc *pp, const struct pyloop *l, uint64_t coro, struct pytask *t)
{
	struct py_frame_rec recs[SAMPLER_MAX_PYDEPTH];
	uint64_t addrs[SAMPLER_MAX_PYDEPTH], frame;
	const struct pythread *th = l->ident ? pyproc__thread_by_pthread(pp, l->ident) : NULL;
	unsigned int partial = 0;
	bool truncated;
	int n, i, k, err;

	if (!th || gen_frame(pp, coro, &frame) || !frame)
		return 0;
	n = pyproc__walk_ex(pp, th->tstate, recs, addrs, SAMPLER_MAX_PYDEPTH, &truncated, &partial);
	if (n < 0)
		n = (int)partial;
	for (k = 0; k < n && addrs[k] != frame; k++)
		;
	if (k == n)
		return 0;
	if (k >= PYTASK_MAX_DEPTH) {
		k = PYTASK_MAX_DEPTH - 1;
		t->truncated = true;
	}
	for (i = 0; i <= k; i++) {
		err = add_frame(pp, t, &recs[i]);
		if (err)
			return err;
	}
	return 1;
}

static int add_await(struct pytask *t, uint64_t task)
{
	uint64_t *a = realloc(t->awaits, (t->nawaits + 1) * sizeof(*a));

	if (!a)
		return -ENOMEM;
	t->awaits = a;
	a[t->nawaits++] = task;
	return 0;
}

/* What the future @fw a task waits on stands for: a task, or a gather's child tasks. */
static int read_waiter(struct reader *r, uint64_t fw, struct pytask *t)
{
	struct pyproc *pp = r->pp;
	const struct py_offsets *o = &pp->off;
	uint64_t tp, children, items, child;
	char tname[128];
	int64_t n;
	int i, err;

	if (!type_of(pp, fw, &tp) && !py_type_name(pp, tp, tname, sizeof(tname)))
		t->waits_on = strpool__intern(pp->strs, tname);
	if (instance_of(pp, fw, r->aio.ctask))
		return add_await(t, fw);
	/* asyncio.gather's _GatheringFuture keeps its children in _children. */
	if (!instance_of(pp, fw, r->aio.cfuture) ||
	    py_getattr_dict(pp, fw, "_children", &children) ||
	    !exact_type(pp, children, PYS_LIST) || pp_read(pp, children + o->ob_size, &n, 8) ||
	    n <= 0 || pp_ptr(pp, children + o->list_item, &items))
		return 0;
	for (i = 0; i < n && i < MAX_CHILDREN; i++) {
		if (pp_ptr(pp, items + (uint64_t)i * 8, &child))
			break;
		if (instance_of(pp, child, r->aio.ctask)) {
			err = add_await(t, child);
			if (err)
				return err;
		}
	}
	return 0;
}

static int read_task(struct reader *r, uint64_t addr)
{
	struct pyproc *pp = r->pp;
	const struct py_aio_layout *lay = &r->lay;
	struct pytasks *out = r->out;
	struct pytask *t;
	uint64_t loop, waiter, coro, name, v;
	const char *tname = NULL;
	int32_t state;
	uint8_t is_task;
	int64_t num;
	size_t i;
	int li, err, found;

	if (!instance_of(pp, addr, r->aio.ctask)) {
		/* A pure-Python task; anything else is a registry entry that changed while it
		 * was read (a task freed meanwhile, its memory reused). */
		if (instance_of(pp, addr, r->aio.pytask))
			out->unreadable++;
		return 0;
	}
	if (pp_ptr(pp, addr + lay->fut_loop, &loop) ||
	    pp_read(pp, addr + lay->fut_state, &state, 4) ||
	    pp_ptr(pp, addr + lay->task_fut_waiter, &waiter) ||
	    pp_ptr(pp, addr + lay->task_coro, &coro) || pp_ptr(pp, addr + lay->task_name, &name))
		return 0; /* freed meanwhile */
	if (state != FUT_PENDING || !loop)
		return 0; /* done: asyncio.all_tasks() leaves those out too */
	if (lay->lists && (pp_read(pp, addr + lay->task_is_task, &is_task, 1) || is_task != 1))
		return 0; /* not a Task (any more) */
	if (exact_type(pp, name, PYS_STR)) {
		tname = py_str_interned(pp, name);
	} else if (exact_type(pp, name, PYS_INT) && !py_read_long(pp, name, &num)) {
		char buf[32];

		/* A name not asked for may be kept as its counter, formatted when read. */
		snprintf(buf, sizeof(buf), "Task-%lld", (long long)num);
		tname = strpool__intern(pp->strs, buf);
	}
	if (!tname)
		return 0; /* a pending task always has a name: this one is being freed */
	/*
	 * A task freed while it was read keeps its type in memory another object now uses:
	 * its "loop" is then not an event loop, or its fields no longer read the same.
	 */
	if (r->aio.loopbase && !instance_of(pp, loop, r->aio.loopbase))
		return 0;
	if (pp_ptr(pp, addr + lay->fut_loop, &v) || v != loop ||
	    pp_ptr(pp, addr + lay->task_name, &v) || v != name)
		return 0;
	li = loop_index(r, loop);
	if (li < 0)
		return li;
	t = realloc(out->tasks, (out->ntasks + 1) * sizeof(*t));
	if (!t)
		return -ENOMEM;
	out->tasks = t;
	t = &out->tasks[out->ntasks++];
	memset(t, 0, sizeof(*t));
	t->addr = addr;
	t->loop = loop;
	t->name = tname;
	t->state = waiter ? PYTASK_WAITING : PYTASK_READY;
	for (i = 0; i < r->ncur; i++)
		if (r->cur[i][0] == loop && r->cur[i][1] == addr)
			t->state = PYTASK_RUNNING;
	if (waiter) {
		err = read_waiter(r, waiter, t);
		if (err)
			return err;
	}
	found = t->state == PYTASK_RUNNING ? running_chain(pp, &out->loops[li], coro, t) : 0;
	if (found < 0)
		return found;
	err = found ? 0 : suspended_chain(pp, coro, t);
	if (!err && !t->nframes &&
	    (exact_type(pp, coro, PYS_CORO) || exact_type(pp, coro, PYS_GEN))) {
		/* Its coroutine's frame is gone: it finished while it was read, and so did the
		 * task. Done tasks are not listed. */
		free(t->awaits);
		out->ntasks--;
	}
	return err;
}

/* Tasks by the thread running their loop (main thread first), loop, then address. */
static const struct pytasks *sort_out;

static uint64_t loop_key(uint64_t loop)
{
	int i;

	for (i = 0; i < sort_out->nloops; i++)
		if (sort_out->loops[i].addr == loop)
			return sort_out->loops[i].tid ? (uint64_t)sort_out->loops[i].tid
						      : UINT64_MAX;
	return UINT64_MAX;
}

static int cmp_task(const void *a, const void *b)
{
	const struct pytask *x = a, *y = b;
	uint64_t kx = loop_key(x->loop), ky = loop_key(y->loop);

	if (kx != ky)
		return kx < ky ? -1 : 1;
	if (x->loop != y->loop)
		return x->loop < y->loop ? -1 : 1;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

int pytasks__read(struct pyproc *pp, struct pytasks *out)
{
	const struct py_offsets *o = &pp->off;
	struct reader r = {.pp = pp, .out = out};
	uint64_t interp;
	size_t i;
	int n, err = 0;

	memset(out, 0, sizeof(*out));
	if (o->wr_object == PYO_NONE || o->set_table == PYO_NONE) {
		snprintf(out->why, sizeof(out->why), "no offsets of asyncio's registries");
		return -ENOTSUP;
	}
	err = pyproc__refresh_threads(pp);
	if (err == -ESRCH)
		return err;
	err = pp_ptr(pp, pp->runtime + o->rt_interpreters_head, &interp);
	if (err)
		return err == -ESRCH ? err : -EFAULT;
	for (n = 0; interp && n < MAX_INTERPS && !err; n++) {
		r.ncands = 0;
		r.ncur = 0;
		err = read_interp(&r, interp);
		if (err)
			break;
		qsort(r.cands, r.ncands, sizeof(*r.cands), cmp_u64);
		for (i = 0; i < r.ncands && !err; i++)
			if (!i || r.cands[i] != r.cands[i - 1])
				err = read_task(&r, r.cands[i]);
		if (!err && pp_ptr(pp, interp + o->is_next, &interp))
			break;
	}
	free(r.cands);
	free(r.cur);
	if (err) {
		pytasks__release(out);
		if (err == -ENOTSUP)
			snprintf(out->why, sizeof(out->why), "%s", r.why);
		return err;
	}
	sort_out = out;
	qsort(out->tasks, out->ntasks, sizeof(*out->tasks), cmp_task);
	return 0;
}

void pytasks__release(struct pytasks *t)
{
	int i;

	if (!t)
		return;
	for (i = 0; i < t->ntasks; i++) {
		free(t->tasks[i].awaits);
		free(t->tasks[i].frames);
	}
	free(t->tasks);
	free(t->loops);
	memset(t, 0, sizeof(*t));
}
