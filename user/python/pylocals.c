// SPDX-License-Identifier: MIT
/*
 * pylocals (part of pyproc): the local variables of a Python frame, read from outside, with
 * the repr of simple values (pyrepr). See pyproc__frame_locals in pyproc.h.
 *
 * Where CPython keeps them:
 *   <= 3.10  PyFrameObject.f_localsplus[]: co_nlocals locals (names: co_varnames), then one
 *            cell per co_cellvars name, then one per co_freevars name (Objects/frameobject.c
 *            PyFrame_FastToLocalsWithError maps them in this order).
 *   3.11+    _PyInterpreterFrame.localsplus[co_nlocalsplus], names in co_localsplusnames and
 *            a CO_FAST_LOCAL / CELL / FREE (3.12+: HIDDEN) kind per slot in
 *            co_localspluskinds (bpo-43693, Include/internal/pycore_code.h).
 * The thread keeps running while we read: the frame may return and its memory be reused,
 * any object may be freed. Every count is bounded, every object's type is checked by identity
 * before its contents are interpreted, and the frame must still run the same code object
 * after the slots were read.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "python/pyproc_int.h"
#include "python/pyrepr.h"
#include "base/util.h"

#define MAX_LOCALS     65536 /* slots of one frame; CPython allows more, real code has fewer */
#define NS_MAX_ENTRIES 1000  /* entries of a module/class namespace reported */
#define TYPE_NAME_MAX  128
#define LEN_MAX	       ((int64_t)1 << 48) /* a container longer than this is garbage */
#define UNREADABLE     "<unreadable>"

/* Include/cpython/code.h (3.8-3.13) */
#define CO_OPTIMIZED   0x0001
#define CO_VARARGS     0x0004
#define CO_VARKEYWORDS 0x0008
/* Include/internal/pycore_code.h (3.11+) */
#define CO_FAST_LOCAL 0x20
#define CO_FAST_CELL  0x40
#define CO_FAST_FREE  0x80
/* Include/object.h */
#define TPFLAGS_TYPE_SUBCLASS (1ul << 31)

/* What we found out about one value. */
struct value {
	char type[TYPE_NAME_MAX];
	struct strbuf repr;
	bool has_repr;
	bool unreadable;
	uint64_t tp; /* its type object, 0 if unknown */
};

static bool is(const struct pyproc *pp, uint64_t addr, enum py_symobj s)
{
	return pp->objs[s] && addr == pp->objs[s];
}

static int read_i64(struct pyproc *pp, uint64_t addr, int64_t *v)
{
	return pp_read(pp, addr, v, sizeof(*v));
}

/* A container's length, bounded. */
static int read_len(struct pyproc *pp, uint64_t addr, int64_t *len)
{
	int err = read_i64(pp, addr, len);

	if (!err && (*len < 0 || *len > LEN_MAX))
		err = -EINVAL;
	return err;
}

static int int_repr(struct pyproc *pp, uint64_t obj, size_t max_repr, struct value *v)
{
	const struct py_offsets *o = &pp->off;
	uint64_t ndigits;
	uint32_t *digits = NULL;
	bool negative;
	int err;

	err = py_long_header(pp, obj, &ndigits, &negative);
	if (err)
		return err;
	if (ndigits > PYREPR_INT_MAX_DIGITS)
		return 0; /* too big to print: no repr */
	digits = malloc((ndigits + 1) * sizeof(*digits));
	if (!digits)
		return -ENOMEM;
	err = pp_read(pp, obj + o->long_digit, digits, ndigits * sizeof(*digits));
	if (!err)
		err = pyrepr_int(&v->repr, digits, ndigits, negative, max_repr);
	if (!err)
		v->has_repr = true;
	free(digits);
	return err;
}

static int str_repr(struct pyproc *pp, uint64_t obj, size_t max_repr, struct value *v)
{
	uint32_t *cps = NULL;
	size_t n, length;
	int err;

	err = py_read_str_cps(pp, obj, max_repr, &cps, &n, &length);
	if (!err)
		err = pyrepr_str(&v->repr, cps, n, length, max_repr);
	if (!err)
		v->has_repr = true;
	free(cps);
	return err;
}

static int bytes_repr(struct pyproc *pp, uint64_t obj, size_t max_repr, struct value *v)
{
	uint8_t *buf = NULL;
	int64_t size;
	size_t n;
	int err;

	err = read_len(pp, obj + pp->off.ob_size, &size);
	if (err)
		return err;
	n = (uint64_t)size > max_repr ? max_repr : (size_t)size;
	buf = malloc(n + 1);
	if (!buf)
		return -ENOMEM;
	err = pp_read(pp, obj + pp->off.bytes_sval, buf, n);
	if (!err)
		err = pyrepr_bytes(&v->repr, buf, n, (size_t)size, max_repr);
	if (!err)
		v->has_repr = true;
	free(buf);
	return err;
}

static int len_repr(struct pyproc *pp, uint64_t addr, const char *what, struct value *v)
{
	int64_t len;
	int err = read_len(pp, addr, &len);

	if (!err)
		err = sb_printf(&v->repr, "<%s of %lld>", what, (long long)len);
	if (!err)
		v->has_repr = true;
	return err;
}

static void set_type(struct value *v, const char *name)
{
	snprintf(v->type, sizeof(v->type), "%s", name);
}

/* Find @obj's type and, for simple values, its repr. Failures make v->unreadable. */
static int describe(struct pyproc *pp, uint64_t obj, size_t max_repr, struct value *v)
{
	const struct py_offsets *o = &pp->off;
	static const struct {
		enum py_symobj sym;
		const char *type, *repr;
	} singletons[] = {
		{PYS_NONE, "NoneType", "None"},
		{PYS_TRUE, "bool", "True"},
		{PYS_FALSE, "bool", "False"},
		{PYS_ELLIPSIS, "ellipsis", "Ellipsis"},
		{PYS_NOTIMPL, "NotImplementedType", "NotImplemented"},
	};
	size_t i;
	int err;

	sb_reset(&v->repr);
	v->has_repr = v->unreadable = false;
	v->tp = 0;
	for (i = 0; i < ARRAY_SIZE(singletons); i++) {
		if (is(pp, obj, singletons[i].sym)) {
			set_type(v, singletons[i].type);
			v->has_repr = true;
			return sb_puts(&v->repr, singletons[i].repr);
		}
	}
	err = pp_ptr(pp, obj + o->ob_type, &v->tp);
	if (!err && !v->tp)
		err = -EINVAL;
	if (!err)
		err = py_type_name(pp, v->tp, v->type, sizeof(v->type));
	if (err)
		goto unreadable;
	/* Exact types only: a subclass may define its own __repr__. */
	if (is(pp, v->tp, PYS_INT))
		err = int_repr(pp, obj, max_repr, v);
	else if (is(pp, v->tp, PYS_FLOAT)) {
		double d;

		err = pp_read(pp, obj + o->float_fval, &d, sizeof(d));
		if (!err)
			err = pyrepr_float(&v->repr, d);
		v->has_repr = !err;
	} else if (is(pp, v->tp, PYS_STR))
		err = str_repr(pp, obj, max_repr, v);
	else if (is(pp, v->tp, PYS_BYTES))
		err = bytes_repr(pp, obj, max_repr, v);
	else if (is(pp, v->tp, PYS_TUPLE))
		err = len_repr(pp, obj + o->ob_size, "tuple", v);
	else if (is(pp, v->tp, PYS_LIST))
		err = len_repr(pp, obj + o->ob_size, "list", v);
	else if (is(pp, v->tp, PYS_DICT))
		err = len_repr(pp, obj + o->dict_ma_used, "dict", v);
	else if (is(pp, v->tp, PYS_SET))
		err = len_repr(pp, obj + o->set_used, "set", v);
	else if (is(pp, v->tp, PYS_FROZENSET))
		err = len_repr(pp, obj + o->set_used, "frozenset", v);
	if (err == -ENOMEM)
		return err;
	if (!err)
		return 0;
	/* The type was known, its contents not (freed or changing under us). */
	sb_reset(&v->repr);
	v->has_repr = false;
	v->unreadable = true;
	return 0;
unreadable:
	set_type(v, "?");
	v->unreadable = true;
	return 0;
}

/* The code object the frame runs now. */
static int frame_code(struct pyproc *pp, uint64_t frame, uint64_t *code)
{
	int err = pp_ptr(
		pp, frame + (pp->frames == PY_FRAMES_OBJECT ? pp->off.f_code : pp->off.if_code),
		code);

	if (!err)
		*code = py_ref_obj(pp, *code);
	return err;
}

/* The items of the tuple at @tuple (at most @max of them; *@n gets the size). */
static int tuple_items(struct pyproc *pp, uint64_t tuple, size_t max, uint64_t **items, size_t *n)
{
	uint64_t tp;
	int64_t size;
	int err;

	*items = NULL;
	*n = 0;
	if (!tuple)
		return -EINVAL;
	err = pp_ptr(pp, tuple + pp->off.ob_type, &tp);
	if (!err && pp->objs[PYS_TUPLE] && tp != pp->objs[PYS_TUPLE])
		err = -EINVAL;
	if (!err)
		err = read_i64(pp, tuple + pp->off.ob_size, &size);
	if (err)
		return err;
	if (size < 0 || (uint64_t)size > max)
		return -EINVAL;
	*items = malloc(((size_t)size + 1) * sizeof(**items));
	if (!*items)
		return -ENOMEM;
	err = pp_read(pp, tuple + pp->off.tuple_item, *items, (size_t)size * 8);
	if (err) {
		free(*items);
		*items = NULL;
		return err;
	}
	*n = (size_t)size;
	return 0;
}

/* The slots of a frame: names (str addresses), kinds (CO_FAST_*), values. */
struct slots {
	size_t n;
	uint64_t *names;
	uint8_t *kinds;
	uint64_t *values;
	uint64_t base; /* address of slot 0 */
};

static void slots_release(struct slots *s)
{
	free(s->names);
	free(s->kinds);
	free(s->values);
}

static int slots_310(struct pyproc *pp, uint64_t frame, uint64_t code, struct slots *s)
{
	const struct py_offsets *o = &pp->off;
	uint64_t tup[3], *items[3] = {NULL, NULL, NULL};
	size_t cnt[3], i, at = 0;
	int32_t nlocals;
	int err, k;

	err = pp_read(pp, code + o->co_nlocals, &nlocals, sizeof(nlocals));
	if (!err)
		err = pp_ptr(pp, code + o->co_varnames, &tup[0]);
	if (!err)
		err = pp_ptr(pp, code + o->co_cellvars, &tup[1]);
	if (!err)
		err = pp_ptr(pp, code + o->co_freevars, &tup[2]);
	for (k = 0; !err && k < 3; k++)
		err = tuple_items(pp, tup[k], MAX_LOCALS, &items[k], &cnt[k]);
	if (err)
		goto cleanup;
	/* co_nlocals is len(co_varnames) (Objects/codeobject.c PyCode_NewWithPosOnlyArgs). */
	if (nlocals < 0 || (size_t)nlocals != cnt[0] || cnt[0] + cnt[1] + cnt[2] > MAX_LOCALS) {
		err = -EINVAL;
		goto cleanup;
	}
	s->n = cnt[0] + cnt[1] + cnt[2];
	s->names = malloc((s->n + 1) * sizeof(*s->names));
	s->kinds = malloc(s->n + 1);
	if (!s->names || !s->kinds) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (k = 0; k < 3; k++) {
		static const uint8_t kind[3] = {CO_FAST_LOCAL, CO_FAST_CELL, CO_FAST_FREE};

		for (i = 0; i < cnt[k]; i++, at++) {
			s->names[at] = items[k][i];
			s->kinds[at] = kind[k];
		}
	}
	s->base = frame + o->f_localsplus;
cleanup:
	for (k = 0; k < 3; k++)
		free(items[k]);
	return err;
}

static int slots_311(struct pyproc *pp, uint64_t frame, uint64_t code, struct slots *s)
{
	const struct py_offsets *o = &pp->off;
	uint64_t names, kinds, tp;
	int32_t nplus;
	int64_t klen;
	size_t n;
	int err;

	err = pp_read(pp, code + o->co_nlocalsplus, &nplus, sizeof(nplus));
	if (!err)
		err = pp_ptr(pp, code + o->co_localsplusnames, &names);
	if (!err)
		err = pp_ptr(pp, code + o->co_localspluskinds, &kinds);
	if (err)
		return err;
	if (nplus < 0 || nplus > MAX_LOCALS)
		return -EINVAL;
	err = tuple_items(pp, names, MAX_LOCALS, &s->names, &n);
	if (err)
		return err;
	/* One name and one kind byte per slot. */
	if (n != (size_t)nplus || !kinds)
		return -EINVAL;
	err = pp_ptr(pp, kinds + o->ob_type, &tp);
	if (!err && pp->objs[PYS_BYTES] && tp != pp->objs[PYS_BYTES])
		err = -EINVAL;
	if (!err)
		err = read_i64(pp, kinds + o->ob_size, &klen);
	if (!err && klen != nplus)
		err = -EINVAL;
	if (err)
		return err;
	s->n = n;
	s->kinds = malloc(n + 1);
	if (!s->kinds)
		return -ENOMEM;
	err = pp_read(pp, kinds + o->bytes_sval, s->kinds, n);
	if (err)
		return err;
	s->base = frame + o->if_localsplus;
	return 0;
}

/* The adapter from pyproc__frame_locals_ex to the simple callback. */
struct simple_ctx {
	int (*cb)(const char *name, const char *type, const char *repr, void *ctx);
	void *ctx;
};

static int simple_cb(const struct pyproc_local *l, void *ctx)
{
	struct simple_ctx *sc = ctx;

	return sc->cb(l->name, l->type, l->repr, sc->ctx);
}

/* Report one variable named by the str at @name_obj with value @obj. */
static int report(struct pyproc *pp, uint64_t name_obj, const char *name, uint64_t obj,
		  unsigned int flags, size_t max_repr, struct value *v,
		  int (*cb)(const struct pyproc_local *, void *), void *ctx)
{
	struct pyproc_local l;
	char *owned = NULL;
	size_t len;
	int err;

	if (!name && py_read_str(pp, name_obj, &owned, &len) == 0)
		name = owned;
	err = describe(pp, obj, max_repr, v);
	if (err) {
		free(owned);
		return err;
	}
	l.name = name ? name : "?";
	l.type = v->type;
	l.repr = v->has_repr ? sb_str(&v->repr) : v->unreadable ? UNREADABLE : NULL;
	l.addr = obj;
	l.flags = flags | (v->unreadable ? PYL_UNREADABLE : 0);
	err = cb(&l, ctx);
	free(owned);
	return err;
}

struct ns_ctx {
	size_t max_repr;
	struct value *v;
	int (*cb)(const struct pyproc_local *, void *);
	void *ctx;
	int cb_err; /* what the callback returned to stop the walk */
};

/* Is @obj an import or a definition (module, function, builtin, class)? */
static bool is_definition(struct pyproc *pp, uint64_t obj)
{
	uint64_t tp, flags;

	if (pp_ptr(pp, obj + pp->off.ob_type, &tp))
		return false;
	if (is(pp, tp, PYS_MODULE) || is(pp, tp, PYS_FUNCTION) || is(pp, tp, PYS_CFUNCTION))
		return true;
	/* A class: its type is type or a metaclass (Py_TPFLAGS_TYPE_SUBCLASS). */
	return !pp_ptr(pp, tp + pp->off.tp_flags, &flags) && (flags & TPFLAGS_TYPE_SUBCLASS);
}

static int ns_entry(struct pyproc *pp, uint64_t key, uint64_t value, void *ctx)
{
	struct ns_ctx *nc = ctx;
	uint64_t tp;
	char *name = NULL;
	size_t len;
	int err;

	if (pp_ptr(pp, key + pp->off.ob_type, &tp) || !is(pp, tp, PYS_STR) ||
	    py_read_str(pp, key, &name, &len))
		return 0; /* not a str key: not a variable */
	if (!strncmp(name, "__", 2) || is_definition(pp, value)) {
		free(name);
		return 0;
	}
	err = report(pp, key, name, value, PYL_NAMESPACE, nc->max_repr, nc->v, nc->cb, nc->ctx);
	free(name);
	if (err && err != -ENOMEM)
		nc->cb_err = err;
	return err;
}

int pyproc__frame_locals_ex(struct pyproc *pp, uint64_t frame, uint64_t code, size_t max_repr,
			    unsigned int opts,
			    int (*cb)(const struct pyproc_local *local, void *ctx), void *ctx)
{
	const struct py_offsets *o = &pp->off;
	struct slots s = {0};
	struct value v = {0};
	uint64_t tp, now, ns;
	int32_t cflags, argcount, kwonly;
	size_t i, k, nargs, *order = NULL;
	int err;

	if (max_repr < PYREPR_MIN)
		max_repr = PYREPR_MIN;
	if (!frame || !code)
		return -EINVAL;
	/* A newer interpreter than known is read with the newest known layout, confirmed for
	 * stacks only: its code object and frame fields beyond those are not trusted. */
	if (pp->newer)
		return -ENOTSUP;
	err = pp_ptr(pp, code + o->ob_type, &tp);
	if (!err && pp->code_type && tp != pp->code_type)
		err = -ESTALE; /* no longer a code object */
	if (!err)
		err = frame_code(pp, frame, &now);
	if (!err && now != code)
		err = -ESTALE; /* the frame returned; its memory runs something else */
	if (!err)
		err = pp_read(pp, code + o->co_flags, &cflags, sizeof(cflags));
	if (!err)
		err = pp_read(pp, code + o->co_argcount, &argcount, sizeof(argcount));
	if (!err)
		err = pp_read(pp, code + o->co_kwonlyargcount, &kwonly, sizeof(kwonly));
	if (err)
		goto cleanup;
	err = pp->frames == PY_FRAMES_OBJECT ? slots_310(pp, frame, code, &s)
					     : slots_311(pp, frame, code, &s);
	if (err)
		goto cleanup;
	s.values = malloc((s.n + 1) * sizeof(*s.values));
	if (!s.values) {
		err = -ENOMEM;
		goto cleanup;
	}
	err = pp_read(pp, s.base, s.values, s.n * sizeof(*s.values));
	/* Still the same frame after the slots were read? */
	if (!err)
		err = frame_code(pp, frame, &now);
	if (!err && now != code)
		err = -ESTALE;
	if (err)
		goto cleanup;
	/* Parameters come first: positional (positional-only included), keyword-only, then
	 * *args and **kwargs (Objects/codeobject.c, both layouts). */
	nargs = (argcount > 0 ? (size_t)argcount : 0) + (kwonly > 0 ? (size_t)kwonly : 0) +
		!!(cflags & CO_VARARGS) + !!(cflags & CO_VARKEYWORDS);
	/* <= 3.10 keeps a parameter that is also a cell in its cellvars slot and clears its
	 * varnames slot (ceval.c: "Clear the local copy"); report it in its parameter's place,
	 * where 3.11+ keeps it. Both tuples hold the same interned str for its name. */
	order = malloc((s.n + 1) * sizeof(*order));
	if (!order) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (i = 0; i < s.n; i++)
		order[i] = i;
	for (i = 0; pp->frames == PY_FRAMES_OBJECT && i < s.n; i++) {
		size_t a;

		if (!(s.kinds[i] & CO_FAST_CELL))
			continue;
		for (a = 0; a < nargs && a < s.n; a++) {
			if (s.names[a] == s.names[i] && !s.values[a]) {
				order[a] = i;
				order[i] = SIZE_MAX;
				break;
			}
		}
	}
	for (k = 0; k < s.n; k++) {
		size_t slot = order[k];
		uint64_t obj;
		unsigned int flags = 0;
		uint8_t kind;

		if (slot == SIZE_MAX)
			continue;
		obj = py_ref_obj(pp, s.values[slot]); /* 3.14+: a _PyStackRef */
		kind = s.kinds[slot];
		if (!obj)
			continue; /* unbound */
		/* Free variables of a class body are not its locals (frameobject.c: "We don't
		 * want to accidentally copy free variables into the locals dict used by the
		 * class"). */
		if ((kind & CO_FAST_FREE) && !(cflags & CO_OPTIMIZED))
			continue;
		if (k < nargs)
			flags |= PYL_ARG;
		if (kind & (CO_FAST_CELL | CO_FAST_FREE)) {
			flags |= kind & CO_FAST_FREE ? PYL_FREE : PYL_CELL;
			/* The slot holds a cell; on 3.11+ a parameter that is also a cell holds the
			 * plain argument until MAKE_CELL runs in the prologue. */
			if (!pp_ptr(pp, obj + o->ob_type, &tp) && is(pp, tp, PYS_CELL)) {
				err = pp_ptr(pp, obj + o->cell_ref, &obj);
				if (err == -ESRCH || err == -EPERM)
					goto cleanup;
				if (err) {
					obj = 0;
					err = 0;
				}
				if (!obj)
					continue; /* an empty cell: unbound */
			}
		}
		err = report(pp, s.names[slot], NULL, obj, flags, max_repr, &v, cb, ctx);
		if (err)
			goto cleanup;
	}
	/* Module level, class bodies, exec(): the variables live in a mapping (f_locals; a
	 * module's globals), not in slots. */
	if ((opts & PYLOCALS_NAMESPACE) && !(cflags & CO_OPTIMIZED)) {
		struct ns_ctx nc = {max_repr, &v, cb, ctx, 0};

		err = pp_ptr(pp,
			     frame + (pp->frames == PY_FRAMES_OBJECT ? o->f_locals : o->if_locals),
			     &ns);
		if (!err && ns && !pp_ptr(pp, ns + o->ob_type, &tp) && is(pp, tp, PYS_DICT)) {
			err = py_dict_foreach(pp, ns, NS_MAX_ENTRIES, ns_entry, &nc);
			/* A dict resized under us reads as garbage: what was reported stands. */
			if (!nc.cb_err && (err == -EINVAL || err == -EFAULT))
				err = 0;
		}
	}
cleanup:
	free(order);
	sb_free(&v.repr);
	slots_release(&s);
	return err;
}

int pyproc__frame_locals(struct pyproc *pp, uint64_t frame, uint64_t code, size_t max_repr,
			 int (*cb)(const char *name, const char *type, const char *repr, void *ctx),
			 void *ctx)
{
	struct simple_ctx sc = {cb, ctx};

	return pyproc__frame_locals_ex(pp, frame, code, max_repr, 0, simple_cb, &sc);
}
