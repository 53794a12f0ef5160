// SPDX-License-Identifier: MIT
/*
 * pyproc: find the CPython interpreter of a process, its threads and their Python stacks,
 * from outside (process_vm_readv). See pyproc.h for the contract and DESIGN.md §5.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>

#include "log.h"
#include "pyelf.h"
#include "pyproc_int.h"
#include "util.h"

#define MAX_INTERPS 256
#define MAX_THREADS 65536
#define MAX_FRAMES  100000 /* a frame chain longer than this is a loop */

/*
 * glibc's struct pthread (nptl/descr.h), x86_64, glibc 2.26-2.38 (Debian 12 ships 2.36):
 * `pid_t tid` at 0x2d0 and `struct pthread_key_data specific_1stblock[32]` at 0x310, followed
 * by `struct pthread_key_data *specific[32]`. Both are calibrated from the live threads;
 * these values only break ties and serve when no thread can confirm them.
 */
#define GLIBC_PTHREAD_TID_DEFAULT      0x2d0
#define GLIBC_PTHREAD_SPECIFIC_DEFAULT 0x310
#define PTHREAD_KEY_2NDLEVEL_SIZE      32 /* keys per block */
#define PTHREAD_KEY_1STLEVEL_SIZE      32 /* blocks */
#define PTHREAD_KEY_DATA_SIZE	       16 /* struct pthread_key_data { uintptr_t seq; void *data; } */
#define PTHREAD_SCAN_SIZE	       0xc00 /* bytes of struct pthread scanned by calibration */

/* ---- /proc/PID/maps ----------------------------------------------------------------------- */

struct maps {
	struct pyelf_map *m;
	size_t nr;
	char *text;
};

static void maps_release(struct maps *mp)
{
	free(mp->m);
	free(mp->text);
	memset(mp, 0, sizeof(*mp));
}

static int maps_read(pid_t pid, struct maps *mp)
{
	char path[64], *line, *save = NULL;
	size_t len, cap = 0;
	int err;

	memset(mp, 0, sizeof(*mp));
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	mp->text = read_file(path, 0, &len);
	if (!mp->text)
		return errno == ENOENT ? -ESRCH : -errno;
	for (line = strtok_r(mp->text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		struct pyelf_map m = {0};
		unsigned long long start, end, off, inode;
		char perms[8];
		int pathoff = 0;
		size_t pl;

		if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %n", &start, &end, perms, &off,
			   &m.dev_major, &m.dev_minor, &inode, &pathoff) < 7)
			continue;
		m.start = start;
		m.end = end;
		m.offset = off;
		m.inode = inode;
		m.path = pathoff ? line + pathoff : "";
		pl = strlen(m.path);
		if (pl > 10 && !strcmp(m.path + pl - 10, " (deleted)")) {
			line[pathoff + pl - 10] = 0;
			m.deleted = true;
		}
		if (mp->nr == cap) {
			size_t ncap = cap ? cap * 2 : 256;
			struct pyelf_map *tmp = realloc(mp->m, ncap * sizeof(*tmp));

			if (!tmp) {
				err = -ENOMEM;
				maps_release(mp);
				return err;
			}
			mp->m = tmp;
			cap = ncap;
		}
		mp->m[mp->nr++] = m;
	}
	return 0;
}

/* ---- discovery ---------------------------------------------------------------------------- */

enum { SYM_RUNTIME, SYM_VERSION, SYM_CODE_TYPE, SYM_EVAL, SYM_EVAL_COLD, SYM_NR };
static const char *const sym_names[SYM_NR] = {
	"_PyRuntime",
	"Py_Version",
	"PyCode_Type",
	"_PyEval_EvalFrameDefault",
	"_PyEval_EvalFrameDefault.cold",
};

static bool looks_pythonic(const char *path)
{
	const char *base = strrchr(path, '/');

	return strstr(base ? base + 1 : path, "python") != NULL;
}

/* "python3.9", "libpython3.10.so.1.0", "python3.10d" -> minor version; 0 if none. */
static unsigned int name_minor(const char *path)
{
	const char *base = strrchr(path, '/'), *p;

	base = base ? base + 1 : path;
	for (p = strstr(base, "python3."); p; p = strstr(p + 1, "python3."))
		if (isdigit((unsigned char)p[8]))
			return (unsigned int)strtoul(p + 8, NULL, 10);
	return 0;
}

/* Look for a separate debug file (/usr/lib/debug/.build-id/xx/yyyy.debug) with a .symtab. */
static struct pyelf *open_debug_file(pid_t pid, struct pyelf *e)
{
	char id[129], path[512];
	struct pyelf *d;
	int i;

	if (pyelf__build_id(e, id, sizeof(id)) || strlen(id) < 3)
		return NULL;
	for (i = 0; i < 2; i++) {
		if (i == 0)
			snprintf(path, sizeof(path),
				 "/proc/%d/root/usr/lib/debug/.build-id/%.2s/%s.debug", (int)pid,
				 id, id + 2);
		else
			snprintf(path, sizeof(path), "/usr/lib/debug/.build-id/%.2s/%s.debug", id,
				 id + 2);
		d = pyelf__open_path(path);
		if (d && pyelf__has_symtab(d))
			return d;
		pyelf__free(d);
	}
	return NULL;
}

static void add_eval_range(struct pyproc *pp, uint64_t start, uint64_t size)
{
	size_t i;

	if (!start || !size || pp->neval >= ARRAY_SIZE(pp->eval))
		return;
	for (i = 0; i < pp->neval; i++)
		if (pp->eval[i].start == start)
			return;
	pp->eval[pp->neval++] = (struct pyproc_range){start, start + size};
}

/* Take what we need from the interpreter's ELF @e mapped with @bias. */
static int setup_from_elf(struct pyproc *pp, struct pyelf *e, const uint64_t *vals,
			  const uint64_t *sizes)
{
	pp->runtime = pp->bias + vals[SYM_RUNTIME];
	pp->code_type = vals[SYM_CODE_TYPE] ? pp->bias + vals[SYM_CODE_TYPE] : 0;
	add_eval_range(pp, vals[SYM_EVAL] ? pp->bias + vals[SYM_EVAL] : 0, sizes[SYM_EVAL]);
	add_eval_range(pp, vals[SYM_EVAL_COLD] ? pp->bias + vals[SYM_EVAL_COLD] : 0,
		       sizes[SYM_EVAL_COLD]);
	if (!vals[SYM_EVAL_COLD] && !pyelf__has_symtab(e)) {
		/* Stripped (Debian's python3.11): the .cold part has no symbol; a debug file with
		 * the same build ID (python3.11-dbgsym) names it. */
		struct pyelf *d = open_debug_file(pp->pid, e);
		uint64_t dv[SYM_NR], ds[SYM_NR];

		if (d && pyelf__symbols(d, sym_names, SYM_NR, true, dv, ds) > 0) {
			add_eval_range(pp, dv[SYM_EVAL] ? pp->bias + dv[SYM_EVAL] : 0,
				       ds[SYM_EVAL]);
			add_eval_range(pp, dv[SYM_EVAL_COLD] ? pp->bias + dv[SYM_EVAL_COLD] : 0,
				       ds[SYM_EVAL_COLD]);
		}
		pyelf__free(d);
	}
	if (pp->neval == 1 && !pyelf__has_symtab(e)) {
		/* No name for the cold part anywhere: find it from the jumps into it. */
		uint64_t cs, ce;

		if (!pyelf__cold_part(e, vals[SYM_EVAL], sizes[SYM_EVAL], &cs, &ce))
			add_eval_range(pp, pp->bias + cs, ce - cs);
	}
	return 0;
}

/* Find the ELF defining _PyRuntime among the mappings; fill pp->elf_path, bias, symbols. */
static int find_interpreter(struct pyproc *pp, const struct maps *mp, uint64_t *py_version)
{
	size_t i, j;
	int pass, err = -ENOENT;

	/* Pass 0: files named like python (fast path); pass 1: every other file-backed mapping
	 * (an embedding program that links libpython statically). Only .dynsym is searched in
	 * pass 1: that is where an exported _PyRuntime lives and it is small. */
	for (pass = 0; pass < 2; pass++) {
		for (i = 0; i < mp->nr; i++) {
			const struct pyelf_map *m = &mp->m[i];
			uint64_t vals[SYM_NR], sizes[SYM_NR];
			struct pyelf *e;
			bool seen = false;

			if (m->path[0] != '/' || !strncmp(m->path, "/dev/", 5) ||
			    looks_pythonic(m->path) != (pass == 0))
				continue;
			for (j = 0; j < i && !seen; j++)
				seen = !strcmp(mp->m[j].path, m->path);
			if (seen)
				continue; /* the first mapping of each file stands for it */
			e = pyelf__open(pp->pid, m);
			if (!e)
				continue;
			if (pyelf__symbols(e, sym_names, SYM_NR, pass == 0, vals, sizes) <= 0 ||
			    !vals[SYM_RUNTIME]) {
				pyelf__free(e);
				continue;
			}
			if (pass == 1 && pyelf__has_symtab(e))
				pyelf__symbols(e, sym_names, SYM_NR, true, vals, sizes);
			err = pyelf__bias(e, m->start, m->offset, &pp->bias);
			if (!err) {
				pp->elf_path = strdup(m->path);
				err = pp->elf_path ? setup_from_elf(pp, e, vals, sizes) : -ENOMEM;
			}
			/* Py_Version (3.11+): the constant, read from the file (no process read
			 * needed, and it works before the interpreter initialises). */
			*py_version = 0;
			if (!err && vals[SYM_VERSION])
				pyelf__read(e, vals[SYM_VERSION], py_version, 4);
			pyelf__free(e);
			return err;
		}
	}
	return err;
}

static void format_version(struct pyproc *pp, uint64_t hex)
{
	if (hex)
		snprintf(pp->version_str, sizeof(pp->version_str), "%u.%u.%u",
			 (unsigned int)(hex >> 24) & 0xff, (unsigned int)(hex >> 16) & 0xff,
			 (unsigned int)(hex >> 8) & 0xff);
	else
		snprintf(pp->version_str, sizeof(pp->version_str), "3.%u", pp->version & 0xff);
}

struct pyproc *pyproc__open(pid_t pid)
{
	struct pyproc *pp = NULL;
	struct maps mp = {0};
	const struct py_offsets *table;
	uint64_t hex = 0;
	unsigned int minor;
	uint8_t *dbg = NULL;
	int err;

	pp = calloc(1, sizeof(*pp));
	if (!pp) {
		err = -ENOMEM;
		goto cleanup;
	}
	pp->pid = pid;
	pp->pthread_specific = -2;
	pp->pthread_tid_off = -2;
	pp->strs = bmap__new();
	pp->codes = bmap__new();
	pp->lines = bmap__new();
	if (!pp->strs || !pp->codes || !pp->lines) {
		err = -ENOMEM;
		goto cleanup;
	}
	err = maps_read(pid, &mp);
	if (err)
		goto cleanup;
	err = find_interpreter(pp, &mp, &hex);
	if (err)
		goto cleanup;
	minor = hex ? (unsigned int)(hex >> 16) & 0xff : name_minor(pp->elf_path);
	if (!hex && !minor) {
		/* 3.13+ without Py_Version would still carry _Py_DebugOffsets; try it. */
		char cookie[16];

		if (!pp_read(pp, pp->runtime, cookie, sizeof(cookie)) &&
		    !memcmp(cookie, PY_DEBUG_COOKIE, 8)) {
			memcpy(&hex, cookie + 8, 8);
			minor = (unsigned int)(hex >> 16) & 0xff;
		}
	}
	if (!minor || (hex && (hex >> 24) != 3)) {
		pr_warn("pid %d: cannot tell the Python version of %s (no Py_Version symbol, no "
			"version in the file name, no _Py_DebugOffsets); Python frames will be "
			"missing",
			(int)pid, pp->elf_path);
		err = -ENOTSUP;
		goto cleanup;
	}
	pp->version = 0x0300 | minor;
	format_version(pp, hex);
	table = py_offsets_for(pp->version);
	if (!table) {
		pr_warn("pid %d: Python %s (%s) is not supported (3.8-3.13 are); Python frames "
			"will "
			"be missing",
			(int)pid, pp->version_str, pp->elf_path);
		err = -ENOTSUP;
		goto cleanup;
	}
	pp->off = *table;
	if (table->dbg_size != PYO_NONE) {
		/* 3.13+: the interpreter describes its own layout; prefer it to our table. */
		uint64_t dhex = 0;

		dbg = malloc(table->dbg_size);
		if (!dbg) {
			err = -ENOMEM;
			goto cleanup;
		}
		err = pp_read(pp, pp->runtime, dbg, table->dbg_size);
		if (!err)
			err = py_offsets_apply_debug(table, dbg, table->dbg_size, &pp->off, &dhex);
		if (err == -ENOTSUP) {
			pr_warn("pid %d: free-threaded Python %s is not supported; Python frames "
				"will be "
				"missing",
				(int)pid, pp->version_str);
			goto cleanup;
		}
		if (err == -ESRCH)
			goto cleanup;
		if (err)
			pr_debug("pid %d: _Py_DebugOffsets unusable (%s); using the built-in table",
				 (int)pid, strerror(-err));
		if (!hex && dhex)
			format_version(pp, dhex);
		err = 0;
	}
	pr_debug("pid %d: Python %s in %s, _PyRuntime at %#llx", (int)pid, pp->version_str,
		 pp->elf_path, (unsigned long long)pp->runtime);
cleanup:
	free(dbg);
	maps_release(&mp);
	if (err) {
		pyproc__free(pp);
		errno = -err;
		return NULL;
	}
	return pp;
}

void pyproc__free(struct pyproc *pp)
{
	size_t i;

	if (!pp)
		return;
	for (i = 0; i < pp->ncode; i++)
		free(pp->code_arr[i].table);
	free(pp->code_arr);
	while (pp->chunks) {
		struct strchunk *next = pp->chunks->next;

		free(pp->chunks);
		pp->chunks = next;
	}
	bmap__free(pp->strs);
	bmap__free(pp->codes);
	bmap__free(pp->lines);
	free(pp->threads);
	free(pp->elf_path);
	free(pp);
}

pid_t pyproc__pid(const struct pyproc *pp)
{
	return pp->pid;
}

unsigned int pyproc__version(const struct pyproc *pp)
{
	return pp->version;
}

const char *pyproc__version_str(const struct pyproc *pp)
{
	return pp->version_str;
}

const char *pyproc__elf_path(const struct pyproc *pp)
{
	return pp->elf_path;
}

uint64_t pyproc__runtime_addr(const struct pyproc *pp)
{
	return pp->runtime;
}

const struct pyproc_range *pyproc__eval_ranges(const struct pyproc *pp, size_t *nr)
{
	*nr = pp->neval;
	return pp->eval;
}

bool pyproc__in_eval(const struct pyproc *pp, uint64_t pc)
{
	size_t i;

	for (i = 0; i < pp->neval; i++)
		if (pc >= pp->eval[i].start && pc < pp->eval[i].end)
			return true;
	return false;
}

/* ---- tasks and pid namespaces ------------------------------------------------------------- */

struct task {
	pid_t tid;    /* as our /proc sees it */
	pid_t ns_tid; /* in the target's own pid namespace (last NSpid field) */
};

/* The target's tasks, with their tids in its namespace (NSpid, Linux 4.1+). */
static int read_tasks(pid_t pid, struct task **out, size_t *nr)
{
	char path[96];
	struct task *t = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return errno == ENOENT ? -ESRCH : -errno;
	while ((de = readdir(d))) {
		char *status, *p;
		long tid;

		if (parse_long(de->d_name, 1, 0x7fffffff, &tid))
			continue;
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			struct task *tmp = realloc(t, ncap * sizeof(*tmp));

			if (!tmp) {
				free(t);
				closedir(d);
				return -ENOMEM;
			}
			t = tmp;
			cap = ncap;
		}
		t[n].tid = (pid_t)tid;
		t[n].ns_tid = (pid_t)tid;
		snprintf(path, sizeof(path), "/proc/%d/task/%ld/status", (int)pid, tid);
		status = read_file(path, 1 << 16, NULL);
		p = status ? strstr(status, "\nNSpid:") : NULL;
		if (p) {
			char *end = strchr(p + 1, '\n'), *tok, *last = NULL, *save = NULL;

			if (end)
				*end = 0;
			for (tok = strtok_r(p + 7, " \t", &save); tok;
			     tok = strtok_r(NULL, " \t", &save))
				last = tok;
			if (last)
				t[n].ns_tid = (pid_t)atoi(last);
		}
		free(status);
		n++;
	}
	closedir(d);
	*out = t;
	*nr = n;
	return 0;
}

static pid_t ns_to_ours(const struct task *t, size_t n, pid_t ns_tid)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (t[i].ns_tid == ns_tid)
			return t[i].tid;
	return 0;
}

/* ---- calibration of glibc's struct pthread ------------------------------------------------ */

static ssize_t read_pthread(struct pyproc *pp, uint64_t pthread, uint8_t *buf)
{
	ssize_t n = pymem_read_partial(pp->pid, pthread, buf, PTHREAD_SCAN_SIZE);

	/* Not a struct pthread: its header starts with tcb and self, both equal to it. */
	if (n >= 24) {
		uint64_t tcb, self;

		memcpy(&tcb, buf, 8);
		memcpy(&self, buf + 16, 8);
		if (tcb != pthread || self != pthread)
			return -EINVAL;
	}
	return n;
}

/*
 * Offset of `tid` in struct pthread: where the main thread holds the process's pid (in its
 * namespace) and every other thread a tid of the process.
 */
static int calibrate_tid(struct pyproc *pp, const struct task *tasks, size_t ntasks)
{
	uint8_t buf[PTHREAD_SCAN_SIZE];
	uint64_t main_pthread;
	bool cand[PTHREAD_SCAN_SIZE / 4];
	pid_t ns_pid = 0;
	ssize_t n;
	size_t i, k, t;
	int best = -1;

	for (i = 0; i < ntasks; i++)
		if (tasks[i].tid == pp->pid)
			ns_pid = tasks[i].ns_tid;
	if (!ns_pid || pp_ptr(pp, pp->runtime + pp->off.rt_main_thread, &main_pthread) ||
	    !main_pthread)
		return -1;
	n = read_pthread(pp, main_pthread, buf);
	if (n < 8)
		return -1;
	for (k = 0; k < ARRAY_SIZE(cand); k++) {
		int32_t v;

		cand[k] = false;
		if (k * 4 + 4 > (size_t)n || k * 4 < 24)
			continue;
		memcpy(&v, buf + k * 4, 4);
		cand[k] = v == ns_pid;
	}
	/* Every other thread must hold one of the process's tids there, all different. */
	for (t = 0; t < pp->nthreads; t++) {
		uint64_t pt = pp->threads[t].pthread;

		if (!pt || pt == main_pthread)
			continue;
		n = read_pthread(pp, pt, buf);
		if (n < 0)
			continue;
		for (k = 0; k < ARRAY_SIZE(cand); k++) {
			int32_t v;
			bool ok = false;

			if (!cand[k])
				continue;
			if (k * 4 + 4 <= (size_t)n) {
				memcpy(&v, buf + k * 4, 4);
				for (i = 0; i < ntasks && !ok; i++)
					ok = tasks[i].ns_tid == v && v != ns_pid;
			}
			cand[k] = ok;
		}
	}
	for (k = 0; k < ARRAY_SIZE(cand); k++) {
		if (!cand[k])
			continue;
		if (k * 4 == GLIBC_PTHREAD_TID_DEFAULT)
			return GLIBC_PTHREAD_TID_DEFAULT;
		if (best < 0)
			best = (int)(k * 4);
	}
	return best;
}

struct tss {
	int32_t initialized;
	uint32_t key;
};

static int read_tss(struct pyproc *pp, struct tss *tss)
{
	uint8_t buf[16];
	int err;

	if (pp->off.rt_tss == PYO_NONE)
		return -ENOTSUP;
	err = pp_read(pp, pp->runtime + pp->off.rt_tss, buf, sizeof(buf));
	if (err)
		return err;
	memcpy(&tss->initialized, buf + pp->off.tss_initialized, 4);
	memcpy(&tss->key, buf + pp->off.tss_key, 4);
	return 0;
}

/* The TSS value of @key in the thread @pthread if glibc's specific_1stblock is at @off. */
static int tss_value(struct pyproc *pp, const uint8_t *buf, ssize_t n, int off, uint32_t key,
		     uint64_t *value)
{
	uint64_t slot[2], l2;

	if (key < PTHREAD_KEY_2NDLEVEL_SIZE) {
		size_t at = (size_t)off + key * PTHREAD_KEY_DATA_SIZE;

		if (at + 16 > (size_t)n)
			return -EFAULT;
		memcpy(slot, buf + at, 16);
	} else {
		size_t at = (size_t)off + PTHREAD_KEY_2NDLEVEL_SIZE * PTHREAD_KEY_DATA_SIZE +
			    (key / PTHREAD_KEY_2NDLEVEL_SIZE) * 8;

		if (key >= PTHREAD_KEY_2NDLEVEL_SIZE * PTHREAD_KEY_1STLEVEL_SIZE ||
		    at + 8 > (size_t)n)
			return -EFAULT;
		memcpy(&l2, buf + at, 8);
		if (!l2 ||
		    pp_read(pp, l2 + (key % PTHREAD_KEY_2NDLEVEL_SIZE) * PTHREAD_KEY_DATA_SIZE,
			    slot, 16))
			return -EFAULT;
	}
	/* glibc stores the key's sequence number with the value; an odd one is a live key. */
	if (!(slot[0] & 1))
		return -ENOENT;
	*value = slot[1];
	return 0;
}

/* The same, reading only the slot (what the BPF walker does). */
static int thread_tss_value(struct pyproc *pp, uint64_t pthread, int off, uint32_t key,
			    uint64_t *value)
{
	uint64_t slot[2], l2, base = pthread + (uint64_t)off;
	int err;

	if (!pthread)
		return -EFAULT;
	if (key < PTHREAD_KEY_2NDLEVEL_SIZE) {
		err = pp_read(pp, base + key * PTHREAD_KEY_DATA_SIZE, slot, sizeof(slot));
	} else if (key < PTHREAD_KEY_2NDLEVEL_SIZE * PTHREAD_KEY_1STLEVEL_SIZE) {
		err = pp_ptr(pp,
			     base + PTHREAD_KEY_2NDLEVEL_SIZE * PTHREAD_KEY_DATA_SIZE +
				     (key / PTHREAD_KEY_2NDLEVEL_SIZE) * 8,
			     &l2);
		if (!err)
			err = l2 ? pp_read(pp,
					   l2 + (key % PTHREAD_KEY_2NDLEVEL_SIZE) *
							   PTHREAD_KEY_DATA_SIZE,
					   slot, sizeof(slot))
				 : -ENOENT;
	} else {
		err = -EINVAL;
	}
	if (err)
		return err;
	if (!(slot[0] & 1))
		return -ENOENT;
	*value = slot[1];
	return 0;
}

/* Find offsetof(struct pthread, specific_1stblock) from the threads bound to the TSS key. */
static int calibrate_specific(struct pyproc *pp)
{
	uint8_t(*bufs)[PTHREAD_SCAN_SIZE];
	ssize_t lens[8];
	uint64_t tss_[8];
	struct tss tss;
	size_t t, nb = 0;
	int off, best = -1, best_count = 0;

	if (read_tss(pp, &tss) || !tss.initialized ||
	    tss.key >= PTHREAD_KEY_2NDLEVEL_SIZE * PTHREAD_KEY_1STLEVEL_SIZE)
		return -1;
	bufs = malloc(ARRAY_SIZE(lens) * sizeof(*bufs));
	if (!bufs)
		return GLIBC_PTHREAD_SPECIFIC_DEFAULT;
	/* A handful of threads is plenty to agree on one offset. */
	for (t = 0; t < pp->nthreads && nb < ARRAY_SIZE(lens); t++) {
		if (!pp->threads[t].pthread)
			continue;
		lens[nb] = read_pthread(pp, pp->threads[t].pthread, bufs[nb]);
		if (lens[nb] <= 0)
			continue;
		tss_[nb] = pp->threads[t].tstate;
		nb++;
	}
	for (off = 24; off + PTHREAD_KEY_DATA_SIZE <= PTHREAD_SCAN_SIZE; off += 8) {
		int count = 0;

		for (t = 0; t < nb; t++) {
			uint64_t v;

			if (!tss_value(pp, bufs[t], lens[t], off, tss.key, &v) && v == tss_[t])
				count++;
		}
		if (count > best_count ||
		    (count && count == best_count && off == GLIBC_PTHREAD_SPECIFIC_DEFAULT)) {
			best = off;
			best_count = count;
		}
	}
	free(bufs);
	if (best < 0) {
		pr_debug("pid %d: no thread confirms the pthread TSS layout; assuming glibc's %#x",
			 (int)pp->pid, GLIBC_PTHREAD_SPECIFIC_DEFAULT);
		return GLIBC_PTHREAD_SPECIFIC_DEFAULT;
	}
	if (best != GLIBC_PTHREAD_SPECIFIC_DEFAULT)
		pr_debug("pid %d: pthread specific_1stblock at %#x (%d threads agree)",
			 (int)pp->pid, best, best_count);
	return best;
}

int pyproc__pthread_specific(struct pyproc *pp)
{
	if (pp->pthread_specific == -2) {
		if (!pp->nthreads)
			pyproc__refresh_threads(pp);
		pp->pthread_specific = calibrate_specific(pp);
	}
	return pp->pthread_specific;
}

int pyproc__tss_key(struct pyproc *pp)
{
	struct tss tss;

	if (read_tss(pp, &tss) || !tss.initialized || tss.key > 0x7fffffff)
		return -1;
	return (int)tss.key;
}

/* ---- threads ------------------------------------------------------------------------------ */

static int add_thread(struct pyproc *pp, const struct pythread *th)
{
	if (pp->nthreads == pp->capthreads) {
		size_t ncap = pp->capthreads ? pp->capthreads * 2 : 16;
		struct pythread *tmp = realloc(pp->threads, ncap * sizeof(*tmp));

		if (!tmp)
			return -ENOMEM;
		pp->threads = tmp;
		pp->capthreads = ncap;
	}
	pp->threads[pp->nthreads++] = *th;
	return 0;
}

struct name_ctx {
	uint64_t interp;
};

/* threading._active: {ident: Thread}; name each of our threads from its Thread._name. */
static int name_from_active(struct pyproc *pp, uint64_t key, uint64_t value, void *ctx)
{
	struct name_ctx *nc = ctx;
	uint64_t name_obj;
	int64_t ident;
	size_t i;

	if (py_read_long(pp, key, &ident))
		return 0;
	for (i = 0; i < pp->nthreads; i++) {
		struct pythread *th = &pp->threads[i];
		const char *name;

		if (th->interp != nc->interp || th->pthread != (uint64_t)ident)
			continue;
		if (py_getattr_dict(pp, value, "_name", &name_obj))
			return 0;
		name = py_str_interned(pp, name_obj);
		if (name)
			th->name = name;
	}
	return 0;
}

/* Thread names from each interpreter's threading module, read like a debugger would. */
static void read_thread_names(struct pyproc *pp, uint64_t interp)
{
	struct name_ctx nc = {interp};
	uint64_t modules, mod, mdict, active;

	if (pp_ptr(pp, interp + pp->off.is_modules, &modules) || !modules ||
	    py_dict_get_str(pp, modules, "threading", &mod) ||
	    pp_ptr(pp, mod + pp->off.md_dict, &mdict) || !mdict ||
	    py_dict_get_str(pp, mdict, "_active", &active))
		return; /* threading not imported (yet): the OS names stand */
	py_dict_foreach(pp, active, MAX_THREADS, name_from_active, &nc);
}

static const char *comm_name(struct pyproc *pp, pid_t tid)
{
	char path[96], *s;
	size_t len;
	const char *r;

	if (!tid)
		return "";
	snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", (int)pp->pid, (int)tid);
	s = read_file(path, 256, &len);
	if (!s)
		return "";
	while (len && s[len - 1] == '\n')
		len--;
	r = pp_intern(pp, s, len);
	free(s);
	return r ? r : "";
}

int pyproc__refresh_threads(struct pyproc *pp)
{
	const struct py_offsets *o = &pp->off;
	uint64_t interp, tstate, interps[MAX_INTERPS];
	struct task *tasks = NULL;
	size_t ntasks = 0, ninterp = 0, i;
	struct tss tss;
	int err;

	pp->nthreads = 0;
	err = read_tasks(pp->pid, &tasks, &ntasks);
	if (err)
		return err;
	err = pp_ptr(pp, pp->runtime + o->rt_interpreters_head, &interp);
	if (err)
		goto cleanup;
	for (; interp && ninterp < MAX_INTERPS; ninterp++) {
		interps[ninterp] = interp;
		err = pp_ptr(pp, interp + o->is_tstate_head, &tstate);
		if (err)
			goto cleanup;
		while (tstate && pp->nthreads < MAX_THREADS) {
			struct pythread th = {.tstate = tstate, .interp = interp, .name = ""};

			err = pp_ptr(pp, tstate + o->ts_thread_id, &th.pthread);
			if (!err && o->ts_native_thread_id != PYO_NONE) {
				uint64_t ntid;

				err = pp_ptr(pp, tstate + o->ts_native_thread_id, &ntid);
				if (!err)
					th.tid = ns_to_ours(tasks, ntasks, (pid_t)ntid);
			}
			if (!err)
				err = add_thread(pp, &th);
			if (!err)
				err = pp_ptr(pp, tstate + o->ts_next, &tstate);
			if (err)
				goto cleanup;
		}
		err = pp_ptr(pp, interp + o->is_next, &interp);
		if (err)
			goto cleanup;
	}
	/* <= 3.10 has no native_thread_id: take the tid from glibc's struct pthread. */
	if (o->ts_native_thread_id == PYO_NONE) {
		if (pp->pthread_tid_off < 0)
			pp->pthread_tid_off = calibrate_tid(pp, tasks, ntasks);
		for (i = 0; i < pp->nthreads && pp->pthread_tid_off >= 0; i++) {
			int32_t ns_tid;

			if (pp->threads[i].pthread &&
			    !pp_read(pp, pp->threads[i].pthread + pp->pthread_tid_off, &ns_tid, 4))
				pp->threads[i].tid = ns_to_ours(tasks, ntasks, ns_tid);
		}
	}
	/* Which thread states are what their thread's TSS slot holds (what BPF will find). */
	if (pp->pthread_specific == -2 && pp->nthreads)
		pp->pthread_specific = calibrate_specific(pp);
	if (pp->pthread_specific >= 0 && !read_tss(pp, &tss) && tss.initialized) {
		for (i = 0; i < pp->nthreads; i++) {
			uint64_t v;

			pp->threads[i].tss_bound =
				!thread_tss_value(pp, pp->threads[i].pthread, pp->pthread_specific,
						  tss.key, &v) &&
				v == pp->threads[i].tstate;
		}
	}
	for (i = 0; i < ninterp; i++)
		read_thread_names(pp, interps[i]);
	for (i = 0; i < pp->nthreads; i++)
		if (!*pp->threads[i].name)
			pp->threads[i].name = comm_name(pp, pp->threads[i].tid);
	err = (int)pp->nthreads;
cleanup:
	free(tasks);
	if (err < 0)
		pp->nthreads = 0;
	return err;
}

const struct pythread *pyproc__threads(const struct pyproc *pp, size_t *nr)
{
	*nr = pp->nthreads;
	return pp->threads;
}

const struct pythread *pyproc__thread_by_tid(const struct pyproc *pp, pid_t tid)
{
	size_t i;

	for (i = 0; i < pp->nthreads; i++)
		if (pp->threads[i].tid == tid && tid)
			return &pp->threads[i];
	return NULL;
}

const struct pythread *pyproc__thread_by_pthread(const struct pyproc *pp, uint64_t pthread)
{
	size_t i;

	for (i = 0; i < pp->nthreads; i++)
		if (pp->threads[i].pthread == pthread && pthread)
			return &pp->threads[i];
	return NULL;
}

int pyproc__fill_tstates(struct pyproc *pp, int map_fd, __u32 kernel_pid)
{
	struct py_tstate_key key, next, *prev = NULL;
	size_t i;
	int err, n = 0;

	err = pyproc__refresh_threads(pp);
	if (err < 0)
		return err;
	/* Drop this process's entries for threads that are gone. */
	while (!bpf_map_get_next_key(map_fd, prev, &next)) {
		key = next;
		prev = &key;
		if (next.pid != kernel_pid || pyproc__thread_by_pthread(pp, next.pthread))
			continue;
		bpf_map_delete_elem(map_fd, &next);
		prev = NULL; /* deletion invalidates the iteration: restart */
	}
	for (i = 0; i < pp->nthreads; i++) {
		__u64 value = pp->threads[i].tstate;

		if (!pp->threads[i].pthread)
			continue;
		memset(&key, 0, sizeof(key));
		key.pid = kernel_pid;
		key.pthread = pp->threads[i].pthread;
		if (bpf_map_update_elem(map_fd, &key, &value, BPF_ANY))
			return -errno;
		n++;
	}
	return n;
}

/* ---- BPF configuration -------------------------------------------------------------------- */

static __u16 off16(uint32_t v)
{
	return v == PYO_NONE || v >= PY_OFF_NONE ? PY_OFF_NONE : (__u16)v;
}

/* Bytes to read so that every present field [off, off + size) is covered. */
static void cover(uint32_t *size, uint32_t off, uint32_t len)
{
	if (off != PYO_NONE && off + len > *size)
		*size = off + len;
}

int pyproc__bpf_cfg(struct pyproc *pp, unsigned int max_depth, struct py_proc_cfg *cfg)
{
	const struct py_offsets *o = &pp->off;
	uint32_t fsize = 0, csize = 0;

	memset(cfg, 0, sizeof(*cfg));
	cfg->version = pp->version;
	cfg->max_depth = max_depth > SAMPLER_MAX_PYDEPTH ? SAMPLER_MAX_PYDEPTH : max_depth;
	cfg->tss_key_addr = pp->runtime + o->rt_tss;
	cfg->code_type_addr = pp->code_type;
	cfg->pthread_specific = pyproc__pthread_specific(pp);
	if (cfg->pthread_specific < 0)
		cfg->tss_key_addr = 0;
	cfg->off.ts_thread_id = off16(o->ts_thread_id);
	cfg->off.ts_native_tid = off16(o->ts_native_thread_id);
	cfg->off.ts_frame = off16(o->ts_frame);
	cfg->off.ts_cframe = off16(o->ts_cframe);
	cfg->off.cframe_current = off16(o->cf_current_frame);
	cfg->off.ts_current_frame = off16(o->ts_current_frame);
	if (pp->version <= 0x030a) {
		cfg->off.frame_back = off16(o->f_back);
		cfg->off.frame_code = off16(o->f_code);
		cfg->off.frame_lasti = off16(o->f_lasti);
		cfg->off.frame_instr = PY_OFF_NONE;
		cfg->off.frame_owner = PY_OFF_NONE;
		cfg->off.frame_is_entry = PY_OFF_NONE;
		cover(&fsize, o->f_back, 8);
		cover(&fsize, o->f_code, 8);
		cover(&fsize, o->f_lasti, 4);
	} else {
		cfg->off.frame_back = off16(o->if_previous);
		cfg->off.frame_code = off16(o->if_code);
		cfg->off.frame_lasti = PY_OFF_NONE;
		cfg->off.frame_instr = off16(o->if_instr);
		cfg->off.frame_owner = pp->version >= 0x030c ? off16(o->if_owner) : PY_OFF_NONE;
		cfg->off.frame_is_entry = off16(o->if_is_entry);
		cover(&fsize, o->if_previous, 8);
		cover(&fsize, o->if_code, 8);
		cover(&fsize, o->if_instr, 8);
		if (pp->version >= 0x030c)
			cover(&fsize, o->if_owner, 1);
		cover(&fsize, o->if_is_entry, 1);
	}
	cfg->off.code_firstlineno = off16(o->co_firstlineno);
	cfg->off.code_name = off16(o->co_name);
	cfg->off.code_adaptive = off16(o->co_code_adaptive);
	cfg->off.ob_type = off16(o->ob_type);
	cfg->off.code_filename = off16(o->co_filename);
	cfg->off.tss_key = off16(o->tss_key);
	/* 3.13 pushes a shim frame running the static code object _Py_InitCleanup under an
	 * __init__ called by CALL_ALLOC_AND_ENTER_INIT (gh-91095); like every "incomplete" frame
	 * (_PyFrame_IsIncomplete: instr_ptr before _co_firsttraceable) CPython hides it. */
	if (pp->version >= 0x030d) {
		cfg->off.code_firsttraceable = off16(o->co_firsttraceable);
		cover(&csize, o->co_firsttraceable, 4);
	} else {
		cfg->off.code_firsttraceable = PY_OFF_NONE;
	}
	cover(&csize, o->ob_type, 8);
	cover(&csize, o->co_firstlineno, 4);
	cover(&csize, o->co_name, 8);
	cover(&csize, o->co_filename, 8);
	if (fsize > PY_HDR_MAX || csize > PY_HDR_MAX || !fsize || !csize)
		return -EINVAL; /* cannot happen with the shipped tables */
	/* Round up to 8 so BPF reads whole words. */
	cfg->off.frame_size = (__u16)((fsize + 7) & ~7u);
	cfg->off.code_size = (__u16)((csize + 7) & ~7u);
	return 0;
}

/* ---- walking from outside ----------------------------------------------------------------- */

static int first_frame(struct pyproc *pp, uint64_t tstate, uint64_t *frame)
{
	const struct py_offsets *o = &pp->off;
	uint64_t cframe;
	int err;

	if (o->ts_frame != PYO_NONE)
		return pp_ptr(pp, tstate + o->ts_frame, frame); /* <= 3.10 */
	if (o->ts_current_frame != PYO_NONE)
		return pp_ptr(pp, tstate + o->ts_current_frame, frame); /* 3.13+ */
	/* 3.11, 3.12: tstate->cframe->current_frame */
	err = pp_ptr(pp, tstate + o->ts_cframe, &cframe);
	if (err)
		return err;
	if (!cframe) {
		*frame = 0;
		return 0;
	}
	return pp_ptr(pp, cframe + o->cf_current_frame, frame);
}

static uint64_t get64(const uint8_t *b, uint32_t off)
{
	uint64_t v;

	memcpy(&v, b + off, 8);
	return v;
}

int pyproc__walk(struct pyproc *pp, uint64_t tstate, struct py_frame_rec *out, unsigned int max,
		 bool *truncated, unsigned int *n_partial)
{
	struct py_proc_cfg cfg;
	uint8_t fb[PY_HDR_MAX], cb[PY_HDR_MAX];
	uint64_t frame;
	unsigned int n = 0, steps;
	int err;

	*truncated = false;
	if (n_partial)
		*n_partial = 0;
	/* The same read sizes and fields as the BPF walker. */
	err = pyproc__bpf_cfg(pp, max, &cfg);
	if (err)
		return err;
	err = first_frame(pp, tstate, &frame);
	if (err)
		return err;
	for (steps = 0; frame && steps < MAX_FRAMES; steps++) {
		uint64_t code, prev, name, filename;
		uint32_t firstlineno, meta = 0;
		int32_t lasti = -1;

		err = pp_read(pp, frame, fb, cfg.off.frame_size);
		if (err)
			goto partial;
		prev = get64(fb, cfg.off.frame_back);
		code = get64(fb, cfg.off.frame_code);
		/* 3.12+: the C stack pushes a shim frame under each entry into the interpreter
		 * (gh-100762 trampoline, FRAME_OWNED_BY_CSTACK): mark the frame above it as the
		 * entry frame and skip it. */
		if (cfg.off.frame_owner != PY_OFF_NONE &&
		    fb[cfg.off.frame_owner] == PY_FRAME_OWNED_BY_CSTACK) {
			if (n)
				out[n - 1].meta |= PYF_ENTRY;
			frame = prev;
			continue;
		}
		if (n >= max) {
			*truncated = true;
			break;
		}
		err = code ? pp_read(pp, code, cb, cfg.off.code_size) : -EFAULT;
		if (err)
			goto partial;
		if (cfg.code_type_addr && get64(cb, cfg.off.ob_type) != cfg.code_type_addr) {
			/* 3.13: f_executable may be something else than code (None for a shim
			 * that is not marked CSTACK): not a Python frame. Before 3.13 f_code is
			 * always code: the frame was rewritten under us. */
			if (pp->version >= 0x030d) {
				frame = prev;
				continue;
			}
			err = -EFAULT;
			goto partial;
		}
		name = get64(cb, cfg.off.code_name);
		filename = get64(cb, cfg.off.code_filename);
		memcpy(&firstlineno, cb + cfg.off.code_firstlineno, 4);
		if (pp->version <= 0x030a) {
			int32_t fl;

			memcpy(&fl, fb + cfg.off.frame_lasti, 4);
			/* f_lasti counts bytes in 3.8/3.9 (bpo-27129 made it instructions). */
			lasti = pp->version <= 0x0309 && fl > 0 ? fl >> 1 : fl;
			meta = PYF_ENTRY; /* one PyFrameObject per C-level eval call */
		} else {
			uint64_t instr = get64(fb, cfg.off.frame_instr);
			int64_t d = (int64_t)(instr - (code + cfg.off.code_adaptive));

			/* Exactly as the BPF walker computes it. */
			lasti = d < 0 || d > 0x7ffffffe ? -1 : (int32_t)(d >> 1);
			if (cfg.off.frame_is_entry != PY_OFF_NONE && fb[cfg.off.frame_is_entry])
				meta = PYF_ENTRY; /* 3.11 */
			/* An incomplete frame below another one is a 3.13 _Py_InitCleanup shim
			 * (the only frames that call before their prologue ends): skip it. A leaf
			 * in its prologue stays: it is the function being entered. */
			if (cfg.off.code_firsttraceable != PY_OFF_NONE && n > 0) {
				int32_t ft;

				memcpy(&ft, cb + cfg.off.code_firsttraceable, 4);
				if (lasti < ft) {
					frame = prev;
					continue;
				}
			}
		}
		out[n].code = code;
		out[n].lasti = lasti;
		out[n].meta = meta | py_code_checksum(name, filename, firstlineno) << 1;
		n++;
		frame = prev;
	}
	return (int)n;
partial:
	if (n_partial)
		*n_partial = n;
	return err;
}
