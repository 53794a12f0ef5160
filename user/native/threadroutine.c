// SPDX-License-Identifier: MIT
/* threadroutine: a thread named by the routine it runs, read from outside. */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/procmaps.h"
#include "injector/elfsym.h"
#include "native/dwproc.h"
#include "native/symbolize.h"
#include "native/threadroutine.h"
#include "python/pymem.h"
#include "base/util.h"

#define MAX_THREADS  100000 /* a list longer than this is not glibc's */
#define MAX_RTTI     2048   /* longest RTTI name read */
#define STATE_WORDS  16	    /* words of a std::thread state searched for its callable */
#define STATE_PREFIX "NSt6thread11_State_impl"

static bool basename_is(const char *path, const char *prefix)
{
	const char *b = strrchr(path, '/');

	b = b ? b + 1 : path;
	return !strncmp(b, prefix, strlen(prefix));
}

/* The first mapping (lowest, file offset 0 where there is one) of the file whose basename
 * starts with one of @prefixes. */
static const struct procmap *find_file(const struct procmaps *pm, const char *const *prefixes)
{
	const char *const *p;
	size_t i;

	for (i = 0; i < pm->nr; i++)
		for (p = prefixes; *p; p++)
			if (pm->maps[i].path[0] == '/' && basename_is(pm->maps[i].path, *p))
				return &pm->maps[i];
	return NULL;
}

/* Open the ELF file of mapping @m and compute its load bias. */
static struct elfsym *open_elf(pid_t pid, const struct procmap *m, uint64_t *bias)
{
	struct elfsym *e;
	int fd = procmaps__open(pid, m);

	if (fd < 0)
		return NULL;
	e = elfsym__open_fd(fd);
	close(fd);
	if (e && elfsym__bias(e, m->start, m->offset, bias)) {
		elfsym__free(e);
		e = NULL;
	}
	return e;
}

/* One of glibc's thread_db descriptors {bits, count, offset}: the offset. */
static int descriptor(pid_t pid, struct elfsym *e, uint64_t bias, const char *name,
		      uint32_t *offset)
{
	uint32_t d[3];
	uint64_t value;
	int err;

	if (elfsym__lookup(e, name, NULL, &value, NULL))
		return -ENOTSUP;
	err = pymem_read(pid, value + bias, d, sizeof(d));
	if (err)
		return err;
	*offset = d[2];
	return 0;
}

int pthread_layout__read(pid_t pid, struct pthread_layout *out)
{
	static const char *const libc_names[] = {"libc.so", "libc-2.", NULL};
	static const char *const pthread_names[] = {"libpthread.so", "libpthread-", NULL};
	static const char *const ld_names[] = {"ld-linux", "ld-2.", NULL};
	static const char *const heads[2] = {"_thread_db_rtld_global__dl_stack_used",
					     "_thread_db_rtld_global__dl_stack_user"};
	const struct procmaps *pm = &out->maps;
	const struct procmap *m;
	struct elfsym *e = NULL, *ld = NULL;
	uint64_t bias = 0, ldbias = 0, rtld;
	uint32_t off;
	int err, i;

	memset(out, 0, sizeof(*out));
	err = procmaps__read(pid, &out->maps);
	if (err)
		return err;
	out->maps_read_ns = now_mono_ns();
	/* Older glibc keeps the descriptors in libpthread, 2.34+ in libc. */
	m = find_file(pm, pthread_names);
	if (m)
		e = open_elf(pid, m, &bias);
	if (!e || elfsym__lookup(e, "_thread_db_pthread_tid", NULL, NULL, NULL)) {
		elfsym__free(e);
		m = find_file(pm, libc_names);
		e = m ? open_elf(pid, m, &bias) : NULL;
	}
	if (!e)
		return -ENOTSUP;
	err = descriptor(pid, e, bias, "_thread_db_pthread_list", &out->off_list);
	err = err ?: descriptor(pid, e, bias, "_thread_db_pthread_tid", &out->off_tid);
	err = err ?: descriptor(pid, e, bias, "_thread_db_pthread_start_routine", &out->off_start);
	if (err)
		goto cleanup;
	/* The lists, where ld.so keeps them (glibc 2.34+); without them only threads whose fs
	 * base is known can be named. */
	m = find_file(pm, ld_names);
	ld = m ? open_elf(pid, m, &ldbias) : NULL;
	if (ld && !elfsym__lookup(ld, "_rtld_global", NULL, &rtld, NULL))
		for (i = 0; i < 2; i++)
			if (!descriptor(pid, e, bias, heads[i], &off))
				out->heads[i] = rtld + ldbias + off;
cleanup:
	elfsym__free(e);
	elfsym__free(ld);
	return err;
}

void pthread_layout__release(struct pthread_layout *l)
{
	procmaps__release(&l->maps);
	memset(l, 0, sizeof(*l));
}

int pthread_layout__threads(pid_t pid, const struct pthread_layout *l, struct pthread_entry **out,
			    int *n)
{
	struct pthread_entry *v = NULL, *tmp;
	uint64_t next, pd;
	uint32_t tid;
	int nv = 0, cap = 0, h, k, err = 0;

	*out = NULL;
	*n = 0;
	if (!l->heads[0] && !l->heads[1])
		return -ENOENT;
	for (h = 0; h < 2 && !err; h++) {
		if (!l->heads[h])
			continue;
		err = pymem_read_u64(pid, l->heads[h], &next);
		for (k = 0; !err && next && next != l->heads[h]; k++) {
			if (k >= MAX_THREADS) {
				err = -ELOOP;
				break;
			}
			pd = next - l->off_list;
			err = pymem_read_u32(pid, pd + l->off_tid, &tid);
			if (err)
				break;
			if (nv == cap) {
				cap = cap ? cap * 2 : 64;
				tmp = realloc(v, cap * sizeof(*v));
				if (!tmp) {
					err = -ENOMEM;
					break;
				}
				v = tmp;
			}
			v[nv].tid = (pid_t)tid;
			v[nv++].pd = pd;
			err = pymem_read_u64(pid, next, &next);
		}
	}
	/* A list changing while read (a thread starting or ending) can end in a bad pointer:
	 * what was read before is still good. */
	if (err == -EFAULT || err == -ELOOP)
		err = 0;
	if (err) {
		free(v);
		return err;
	}
	*out = v;
	*n = nv;
	return 0;
}

/*
 * The mapping of @a, from the maps read last, or read again (at most every 100 ms) when no
 * mapping holds it: a library may have been loaded since (dlopen).
 */
static const struct procmap *mapping(pid_t pid, struct pthread_layout *l, uint64_t a)
{
	const struct procmap *m = procmaps__find(&l->maps, a);
	struct procmaps fresh;
	uint64_t now;

	if (m)
		return m;
	now = now_mono_ns();
	if (now - l->maps_read_ns < 100000000ULL || procmaps__read(pid, &fresh))
		return NULL;
	procmaps__release(&l->maps);
	l->maps = fresh;
	l->maps_read_ns = now;
	return procmaps__find(&l->maps, a);
}

static bool code_address(pid_t pid, struct pthread_layout *l, uint64_t a)
{
	const struct procmap *m = a > 4096 ? mapping(pid, l, a) : NULL;

	return m && m->x;
}

/* The function at code address @pc ("Foo::bar(int)"), or "[libfoo.so]" without a symbol;
 * NULL when no module holds it. The string belongs to @sym. */
static const char *code_name(struct dwproc *dp, struct symbolizer *sym, uint64_t pc)
{
	Dwfl_Module *mod = dwproc__module(dp, pc);
	const struct frame *f;
	int n;

	if (!mod || symbolizer__lookup(sym, mod, pc, true, &f, &n) || n < 1)
		return NULL;
	return f[n - 1].func;
}

/* Copy @name into @buf without a trailing parameter list ("Foo::run(int) const" -> Foo::run). */
static void strip_params(const char *name, char *buf, size_t size)
{
	size_t len = strlen(name);
	const char *p;
	int depth = 0;

	while (len && name[len - 1] == ' ')
		len--;
	if (len > 6 && !strncmp(name + len - 6, " const", 6))
		len -= 6;
	if (len && name[len - 1] == ')') {
		for (p = name + len - 1; p >= name; p--) {
			if (*p == ')')
				depth++;
			else if (*p == '(' && !--depth)
				break;
		}
		if (p > name)
			len = (size_t)(p - name);
	}
	snprintf(buf, size, "%.*s", (int)len, name);
}

/* Remove every "(anonymous namespace)::" of @s, in place. */
static void drop_anonymous(char *s)
{
	static const char anon[] = "(anonymous namespace)::";
	char *p;

	while ((p = strstr(s, anon)))
		memmove(p, p + sizeof(anon) - 1, strlen(p + sizeof(anon) - 1) + 1);
}

/*
 * The first type argument of "…std::tuple<T0, T1…>…" in @d, into @buf: the callable's type.
 * Return 0 or -ENOENT.
 */
static int tuple_first(const char *d, char *buf, size_t size)
{
	const char *p = strstr(d, "std::tuple<"), *s;
	int angle = 0, paren = 0;

	if (!p)
		return -ENOENT;
	s = p += strlen("std::tuple<");
	for (; *p; p++) {
		if (*p == '<')
			angle++;
		else if (*p == '>' && angle)
			angle--;
		else if (*p == '(')
			paren++;
		else if (*p == ')' && paren)
			paren--;
		else if ((*p == ',' || *p == '>') && !angle && !paren)
			break;
	}
	if (!*p || p == s)
		return -ENOENT;
	snprintf(buf, size, "%.*s", (int)(p - s), s);
	return 0;
}

/* "void (C::*)(int)" -> C into @cls; return 0, or -ENOENT if @type is no pointer to member. */
static int member_class(const char *type, char *cls, size_t size)
{
	const char *end = strstr(type, "::*)"), *p;
	int depth = 0;

	if (!end)
		return -ENOENT;
	for (p = end - 1; p >= type; p--) {
		if (*p == ')')
			depth++;
		else if (*p == '(' && !depth--)
			break;
	}
	if (p < type || p + 1 >= end)
		return -ENOENT;
	snprintf(cls, size, "%.*s", (int)(end - p - 1), p + 1);
	return 0;
}

/*
 * A std::thread: @arg is its std::thread::_State_impl<_Invoker<tuple<F, Args…>>>. Name it by
 * F: a pointer to member function by its symbol where a code pointer in the state has one of
 * C's members (else by C), a function pointer by the symbol of the one code pointer the state
 * holds, a lambda or functor by its type.
 */
static int std_thread_name(pid_t pid, struct pthread_layout *l, struct dwproc *dp,
			   struct symbolizer *sym, uint64_t arg, char *buf, size_t size)
{
	char rtti[MAX_RTTI + 8], type[512], cls[512], fn[512];
	uint64_t vptr, ti, np, words[STATE_WORDS];
	const char *name, *s, *code = NULL;
	char *demangled = NULL;
	ssize_t got;
	int err = -ENOENT, i, ncode = 0, nwords;

	if (pymem_read_u64(pid, arg, &vptr) || pymem_read_u64(pid, vptr - 8, &ti) ||
	    pymem_read_u64(pid, ti + 8, &np))
		return -ENOENT;
	memcpy(rtti, "_ZTS", 4);
	got = pymem_read_partial(pid, np, rtti + 4, MAX_RTTI);
	if (got <= 0)
		return -ENOENT;
	rtti[4 + got] = '\0';
	if (strlen(rtti + 4) == (size_t)got)
		return -ENOENT; /* no end within MAX_RTTI: not a name */
	for (s = rtti + 4; *s; s++)
		if (!isgraph((unsigned char)*s))
			return -ENOENT;
	/* A local type's name starts with '*' (not unique across objects). */
	if (rtti[4] == '*')
		memmove(rtti + 4, rtti + 5, strlen(rtti + 5) + 1);
	if (strncmp(rtti + 4, STATE_PREFIX, strlen(STATE_PREFIX)))
		return -ENOENT;
	demangled = symbolize_demangle(rtti);
	if (!demangled || tuple_first(demangled, type, sizeof(type)))
		goto cleanup;
	/* The state's words after its vtable pointer: the tuple, whose first element (the
	 * callable) libstdc++ stores last. */
	nwords = STATE_WORDS;
	while (nwords && pymem_read(pid, arg + 8, words, nwords * sizeof(words[0])))
		nwords /= 2;
	if (!member_class(type, cls, sizeof(cls))) {
		drop_anonymous(cls);
		for (i = 0; i < nwords && !code; i++) {
			if (!code_address(pid, l, words[i]) ||
			    !(name = code_name(dp, sym, words[i])))
				continue;
			strip_params(name, fn, sizeof(fn));
			drop_anonymous(fn);
			if (!strncmp(fn, cls, strlen(cls)) && !strncmp(fn + strlen(cls), "::", 2))
				code = fn;
		}
		snprintf(buf, size, "%s", code ? code : cls);
		err = 0;
	} else if (strstr(type, "(*)(")) {
		/* A function pointer: the state holds it and the arguments; name it only if it
		 * is the one code pointer there. */
		for (i = 0; i < nwords; i++)
			if (code_address(pid, l, words[i]) &&
			    (name = code_name(dp, sym, words[i]))) {
				code = name;
				ncode++;
			}
		if (ncode != 1)
			goto cleanup;
		strip_params(code, buf, size);
		drop_anonymous(buf);
		err = 0;
	} else {
		/* A lambda or a functor: its type, without parameter lists. */
		strip_params(type, fn, sizeof(fn));
		drop_anonymous(fn);
		snprintf(buf, size, "%s", fn);
		err = 0;
	}
cleanup:
	free(demangled);
	return err;
}

int thread_routine__name(pid_t pid, struct pthread_layout *l, struct dwproc *dp,
			 struct symbolizer *sym, pid_t ns_tid, uint64_t pd, char *buf, size_t size)
{
	const struct procmap *m;
	const char *name;
	uint64_t v[2]; /* start_routine, arg */
	uint32_t tid;
	int err;

	if (!l->off_start || !pd)
		return -ENOENT;
	err = pymem_read_u32(pid, pd + l->off_tid, &tid);
	if (err)
		return err == -EFAULT ? -ESTALE : err;
	if ((pid_t)tid != ns_tid)
		return -ESTALE;
	err = pymem_read(pid, pd + l->off_start, v, sizeof(v));
	if (err)
		return err == -EFAULT ? -ESTALE : err;
	if (!v[0])
		return -ENOENT; /* the main thread */
	m = mapping(pid, l, v[0]);
	if (!m || !m->x)
		return -ENOENT;
	if (basename_is(m->path, "libstdc++") && v[1] &&
	    !std_thread_name(pid, l, dp, sym, v[1], buf, size))
		return 0;
	name = code_name(dp, sym, v[0]);
	if (!name)
		return -ENOENT;
	strip_params(name, buf, size);
	drop_anonymous(buf);
	return buf[0] ? 0 : -ENOENT;
}
