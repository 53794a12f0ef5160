// SPDX-License-Identifier: MIT
/*
 * pyproc: find the CPython interpreter of a process, its threads and their Python stacks,
 * from outside (process_vm_readv). See pyproc.h for the contract and docs/design.md §5.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/procmaps.h"
#include "python/pyelf.h"
#include "python/pyproc_int.h"
#include "base/util.h"

/* ---- discovery ---------------------------------------------------------------------------- */

enum {
	SYM_RUNTIME,
	SYM_VERSION,
	SYM_CODE_TYPE,
	SYM_EVAL,
	SYM_EVAL_COLD,
	SYM_OBJ0,
	SYM_NR = SYM_OBJ0 + PYS_NR
};
#define SYMOBJ_NAME_(id, sym) sym,
static const char *const sym_names[SYM_NR] = {"_PyRuntime",
					      "Py_Version",
					      "PyCode_Type",
					      "_PyEval_EvalFrameDefault",
					      "_PyEval_EvalFrameDefault.cold",
					      PY_SYMOBJS(SYMOBJ_NAME_)};
#undef SYMOBJ_NAME_

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
	for (int i = 0; i < PYS_NR; i++)
		pp->objs[i] = vals[SYM_OBJ0 + i] ? pp->bias + vals[SYM_OBJ0 + i] : 0;
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
static int find_interpreter(struct pyproc *pp, const struct procmaps *mp, uint64_t *py_version)
{
	size_t i, j;
	int pass, err = -ENOENT;

	/* Pass 0: files named like python (fast path); pass 1: every other file-backed mapping
	 * (an embedding program that links libpython statically). Only .dynsym is searched in
	 * pass 1: that is where an exported _PyRuntime lives and it is small. */
	for (pass = 0; pass < 2; pass++) {
		for (i = 0; i < mp->nr; i++) {
			const struct procmap *m = &mp->maps[i];
			uint64_t vals[SYM_NR], sizes[SYM_NR];
			struct pyelf *e;
			bool seen = false;

			if (m->path[0] != '/' || !strncmp(m->path, "/dev/", 5) ||
			    looks_pythonic(m->path) != (pass == 0))
				continue;
			for (j = 0; j < i && !seen; j++)
				seen = !strcmp(mp->maps[j].path, m->path);
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
		snprintf(pp->version_str, sizeof(pp->version_str), "%u.%u",
			 PY_VER_MAJOR(pp->version), PY_VER_MINOR(pp->version));
}

/*
 * How this interpreter's frames are walked (bpf/pywalk.h), by both walkers: the one place
 * where a version picks a layout and its rules.
 */
static void choose_walk(struct pyproc *pp)
{
	unsigned int v = pp->version;

	if (v <= PY_VER(3, 10))
		pp->frames = PY_FRAMES_OBJECT;
	else if (v <= PY_VER(3, 12))
		pp->frames = PY_FRAMES_CFRAME;
	else
		pp->frames = PY_FRAMES_CURRENT;
	pp->rules = 0;
	if (v <= PY_VER(3, 9))
		pp->rules |= PY_RULE_LASTI_BYTES;
	if (v == PY_VER(3, 11))
		pp->rules |= PY_RULE_ENTRY_FLAG;
	if (v >= PY_VER(3, 12))
		pp->rules |= PY_RULE_ENTRY_SHIM;
	if (pp->frames == PY_FRAMES_CFRAME)
		pp->rules |= PY_RULE_ENDS_AT_ENTRY;
	if (v >= PY_VER(3, 13))
		pp->rules |= PY_RULE_EXEC_ANY | PY_RULE_HIDE_INCOMPLETE;
	if (v >= PY_VER(3, 14))
		pp->rules |= PY_RULE_STACKREF;
}

/*
 * The newest version whose layout probing knows: PY_VERSION_MAX, or for tests the minor
 * version in PROBING_PY_KNOWN_MAX ("3.14": read a 3.15 process as an unknown newer one).
 */
static unsigned int known_max(void)
{
	const char *env = getenv("PROBING_PY_KNOWN_MAX");
	unsigned int minor;

	if (env && sscanf(env, "3.%u", &minor) == 1 && minor >= 13 && minor <= PY_MINOR_MAX)
		return PY_VER(3, minor);
	return PY_VERSION_MAX;
}

/*
 * A newer interpreter than probing knows, read with the newest known layout and its own
 * _Py_DebugOffsets: keep that reading only if the process confirms it. Every thread state's
 * native thread id must be one of the process's threads (/proc/PID/task), every frame's code
 * object must be a code object (its type is PyCode_Type, from the ELF symbols) with readable
 * names, and each thread's chain must end at an entry frame (the bottom frame of a thread is
 * the entry of the outermost eval call). Return 0, or -ENOTSUP with @why set.
 */
static int confirm_layout(struct pyproc *pp, char *why, size_t len)
{
	struct py_frame_rec recs[SAMPLER_MAX_PYDEPTH];
	unsigned int nframes = 0;
	size_t i, n;
	int nthreads, k, r;

	if (!pp->code_type) {
		snprintf(why, len, "no PyCode_Type symbol to check code objects against");
		return -ENOTSUP;
	}
	nthreads = pyproc__refresh_threads(pp);
	if (nthreads <= 0) {
		snprintf(why, len, "no thread state found through the interpreter list");
		return -ENOTSUP;
	}
	n = (size_t)nthreads;
	for (i = 0; i < n; i++) {
		const struct pythread *th = &pp->threads[i];
		struct frame f;
		bool truncated;

		if (!th->tid || !th->pthread) {
			snprintf(why, len, "thread state %#llx names no thread of the process",
				 (unsigned long long)th->tstate);
			return -ENOTSUP;
		}
		for (k = 0; k < 4; k++) {
			r = pyproc__walk_ex(pp, th->tstate, recs, NULL, SAMPLER_MAX_PYDEPTH,
					    &truncated, NULL);
			if (r != -EAGAIN && r != -EFAULT)
				break;
		}
		if (r < 0) {
			snprintf(why, len, "the frames of thread %d cannot be walked (%s)",
				 (int)th->tid, strerror(-r));
			return -ENOTSUP;
		}
		if (r > 0 && !truncated && !(recs[r - 1].meta & PYF_ENTRY)) {
			snprintf(why, len, "the bottom frame of thread %d is no entry frame",
				 (int)th->tid);
			return -ENOTSUP;
		}
		for (k = 0; k < r; k++) {
			if (pyproc__resolve(pp, &recs[k], &f) == -EFAULT) {
				snprintf(why, len, "a code object of thread %d cannot be read",
					 (int)th->tid);
				return -ENOTSUP;
			}
		}
		nframes += (unsigned int)r;
	}
	if (!nframes) {
		snprintf(why, len, "no thread shows a Python frame to check the layout with");
		return -ENOTSUP;
	}
	return 0;
}

struct pyproc *pyproc__open(pid_t pid)
{
	struct pyproc *pp = NULL;
	struct procmaps mp = {};
	const struct py_offsets *table;
	uint64_t hex = 0;
	unsigned int minor;
	uint8_t *dbg = NULL;
	bool newer = false;
	int err;

	pp = calloc(1, sizeof(*pp));
	if (!pp) {
		err = -ENOMEM;
		goto cleanup;
	}
	pp->pid = pid;
	pp->pthread_specific = -2;
	pp->pthread_tid_off = -2;
	pp->strs = strpool__new();
	pp->codes = bmap__new();
	pp->lines = bmap__new();
	if (!pp->strs || !pp->codes || !pp->lines) {
		err = -ENOMEM;
		goto cleanup;
	}
	err = procmaps__read(pid, &mp);
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
	pp->version = PY_VER(3, minor);
	format_version(pp, hex);
	/* The family (how frames are walked) and the layout are chosen here, once. */
	table = pp->version <= known_max() ? py_offsets_for(pp->version) : NULL;
	if (!table && pp->version > known_max()) {
		/* Newer than known: the newest known layout, if the process confirms it. */
		table = py_offsets_for(known_max());
		newer = true;
	}
	if (!table) {
		pr_warn("pid %d: Python %s (%s) is not supported (" PY_VERSIONS " are); Python "
			"frames will be missing",
			(int)pid, pp->version_str, pp->elf_path);
		err = -ENOTSUP;
		goto cleanup;
	}
	pp->off = *table;
	choose_walk(pp);
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
			err = py_offsets_apply_debug(table, dbg, table->dbg_size, pp->version,
						     &pp->off, &dhex);
		if (err == -ENOTSUP) {
			pr_warn("pid %d: Python %s (%s) is a free-threaded build (its "
				"_Py_DebugOffsets say so), which probing cannot read; Python "
				"frames will be missing",
				(int)pid, pp->version_str, pp->elf_path);
			goto cleanup;
		}
		if (err == -ESRCH)
			goto cleanup;
		if (err && newer) {
			pr_warn("pid %d: Python %s (%s) is newer than probing knows (3.%u-3.%u), "
				"and its _Py_DebugOffsets cannot be read as %u.%u's (%s); Python "
				"frames will be missing",
				(int)pid, pp->version_str, pp->elf_path, PY_MINOR_MIN,
				PY_VER_MINOR(table->version), PY_VER_MAJOR(table->version),
				PY_VER_MINOR(table->version), strerror(-err));
			err = -ENOTSUP;
			goto cleanup;
		}
		if (err)
			pr_debug("pid %d: _Py_DebugOffsets unusable (%s); using the built-in table",
				 (int)pid, strerror(-err));
		if (!hex && dhex)
			format_version(pp, dhex);
		err = 0;
	}
	/* PROBING_PY_CONFIRM=1: the same confirmation for a known version (tests: a correct
	 * layout must pass it). */
	if (newer || (table->dbg_size != PYO_NONE && getenv("PROBING_PY_CONFIRM"))) {
		char why[160];

		err = confirm_layout(pp, why, sizeof(why));
		if (err && !newer) {
			pr_warn("pid %d: Python %s (%s): the process does not confirm probing's "
				"layout: %s",
				(int)pid, pp->version_str, pp->elf_path, why);
			goto cleanup;
		}
		if (err) {
			pr_warn("pid %d: Python %s (%s) is newer than probing knows (3.%u-3.%u); "
				"read with %u.%u's layout, the process does not confirm it: %s. "
				"Python frames will be missing",
				(int)pid, pp->version_str, pp->elf_path, PY_MINOR_MIN,
				PY_VER_MINOR(table->version), PY_VER_MAJOR(table->version),
				PY_VER_MINOR(table->version), why);
			goto cleanup;
		}
	}
	if (newer) {
		/* What only the table says (no debug offset) is not trusted for a newer
		 * version: no GIL (off-CPU states), no TSS key (BPF uses its map), no locals. */
		pp->off.rt_gil = PYO_NONE;
		pp->off.rt_tss = PYO_NONE;
		pp->newer = true;
		pr_info("pid %d: Python %s is newer than probing knows (3.%u-3.%u); %u.%u's "
			"layout with the interpreter's own _Py_DebugOffsets reads it, confirmed by "
			"its threads and frames",
			(int)pid, pp->version_str, PY_MINOR_MIN, PY_VER_MINOR(table->version),
			PY_VER_MAJOR(table->version), PY_VER_MINOR(table->version));
	}
	pr_debug("pid %d: Python %s in %s, _PyRuntime at %#llx", (int)pid, pp->version_str,
		 pp->elf_path, (unsigned long long)pp->runtime);
cleanup:
	free(dbg);
	procmaps__release(&mp);
	if (err) {
		pyproc__free(pp);
		errno = -err;
		return NULL;
	}
	return pp;
}

struct pyproc *pyproc__dup(const struct pyproc *src, pid_t pid)
{
	struct pyproc *pp = malloc(sizeof(*pp));

	if (!pp)
		goto nomem;
	/* The layout facts are shared; every cache and everything owned starts empty. */
	*pp = *src;
	pp->pid = pid;
	pp->threads = NULL;
	pp->nthreads = pp->capthreads = 0;
	pp->filled = NULL; /* its own process's entries: none written yet */
	pp->nfilled = pp->capfilled = 0;
	pp->filled_known = false;
	pp->code_arr = NULL;
	pp->ncode = pp->capcode = 0;
	pp->elf_path = src->elf_path ? strdup(src->elf_path) : NULL;
	pp->strs = strpool__new();
	pp->codes = bmap__new();
	pp->lines = bmap__new();
	if ((src->elf_path && !pp->elf_path) || !pp->strs || !pp->codes || !pp->lines) {
		pyproc__free(pp);
		goto nomem;
	}
	return pp;
nomem:
	errno = ENOMEM;
	return NULL;
}

void pyproc__free(struct pyproc *pp)
{
	size_t i;

	if (!pp)
		return;
	for (i = 0; i < pp->ncode; i++) {
		free(pp->code_arr[i].table);
		free(pp->code_arr[i].code);
	}
	free(pp->code_arr);
	strpool__free(pp->strs);
	bmap__free(pp->codes);
	bmap__free(pp->lines);
	free(pp->threads);
	free(pp->filled);
	free(pp->elf_path);
	free(pp);
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

int pyproc__gil_range(const struct pyproc *pp, uint64_t *lo, uint64_t *hi)
{
	if (!pp->runtime || pp->off.rt_gil == PYO_NONE || pp->off.gil_size == PYO_NONE ||
	    !pp->off.gil_size)
		return -ENOENT;
	*lo = pp->runtime + pp->off.rt_gil;
	*hi = *lo + pp->off.gil_size;
	return 0;
}

int pyproc__gil_holder(struct pyproc *pp, uint64_t *tstate)
{
	uint64_t lo, hi, sw1, sw2, holder;
	uint32_t locked;
	int err, i;

	err = pyproc__gil_range(pp, &lo, &hi);
	if (err)
		return err;
	/* take_gil sets locked, then last_holder, then bumps switch_number: a hand-over between
	 * our reads shows as a changed switch_number. */
	for (i = 0; i < 8; i++) {
		err = pp_ptr(pp, lo + pp->off.gil_switch_number, &sw1);
		if (!err)
			err = pymem_read_u32(pp->pid, lo + pp->off.gil_locked, &locked);
		if (!err)
			err = pp_ptr(pp, lo + pp->off.gil_last_holder, &holder);
		if (!err)
			err = pp_ptr(pp, lo + pp->off.gil_switch_number, &sw2);
		if (err)
			return err;
		if (sw1 == sw2) {
			*tstate = locked ? holder : 0;
			return 0;
		}
	}
	return -EAGAIN;
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

/* Everything but the TSS lookup (which needs the live threads to calibrate). */
static int walk_cfg(struct pyproc *pp, unsigned int max_depth, struct py_proc_cfg *cfg)
{
	const struct py_offsets *o = &pp->off;
	uint32_t fsize = 0, csize = 0;

	memset(cfg, 0, sizeof(*cfg));
	cfg->frames = pp->frames;
	cfg->rules = pp->rules;
	cfg->max_depth = max_depth > SAMPLER_MAX_PYDEPTH ? SAMPLER_MAX_PYDEPTH : max_depth;
	cfg->code_type_addr = pp->code_type;
	cfg->pthread_specific = -1;
	cfg->off.ts_thread_id = off16(o->ts_thread_id);
	cfg->off.ts_native_tid = off16(o->ts_native_thread_id);
	cfg->off.ts_frame = off16(o->ts_frame);
	cfg->off.ts_cframe = off16(o->ts_cframe);
	cfg->off.cframe_current = off16(o->cf_current_frame);
	cfg->off.ts_current_frame = off16(o->ts_current_frame);
	cfg->off.frame_lasti = PY_OFF_NONE;
	cfg->off.frame_instr = PY_OFF_NONE;
	cfg->off.frame_owner = PY_OFF_NONE;
	cfg->off.frame_is_entry = PY_OFF_NONE;
	cfg->off.code_firsttraceable = PY_OFF_NONE;
	if (pp->frames == PY_FRAMES_OBJECT) {
		cfg->off.frame_back = off16(o->f_back);
		cfg->off.frame_code = off16(o->f_code);
		cfg->off.frame_lasti = off16(o->f_lasti);
		cover(&fsize, o->f_back, 8);
		cover(&fsize, o->f_code, 8);
		cover(&fsize, o->f_lasti, 4);
	} else {
		cfg->off.frame_back = off16(o->if_previous);
		cfg->off.frame_code = off16(o->if_code);
		cfg->off.frame_instr = off16(o->if_instr);
		cover(&fsize, o->if_previous, 8);
		cover(&fsize, o->if_code, 8);
		cover(&fsize, o->if_instr, 8);
	}
	if (pp->rules & PY_RULE_ENTRY_SHIM) {
		cfg->off.frame_owner = off16(o->if_owner);
		cover(&fsize, o->if_owner, 1);
	}
	if (pp->rules & PY_RULE_ENTRY_FLAG) {
		cfg->off.frame_is_entry = off16(o->if_is_entry);
		cover(&fsize, o->if_is_entry, 1);
	}
	/* 3.13 pushes a shim frame running the static code object _Py_InitCleanup under an
	 * __init__ called by CALL_ALLOC_AND_ENTER_INIT (gh-91095); like every "incomplete" frame
	 * (_PyFrame_IsIncomplete: instr_ptr before _co_firsttraceable) CPython hides it. */
	if (pp->rules & PY_RULE_HIDE_INCOMPLETE) {
		cfg->off.code_firsttraceable = off16(o->co_firsttraceable);
		cover(&csize, o->co_firsttraceable, 4);
	}
	cfg->off.code_firstlineno = off16(o->co_firstlineno);
	cfg->off.code_name = off16(o->co_name);
	cfg->off.code_adaptive = off16(o->co_code_adaptive);
	cfg->off.ob_type = off16(o->ob_type);
	cfg->off.code_filename = off16(o->co_filename);
	cfg->off.tss_key = off16(o->tss_key);
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

int pyproc__bpf_cfg(struct pyproc *pp, unsigned int max_depth, struct py_proc_cfg *cfg)
{
	uint64_t lo, hi;
	int err = walk_cfg(pp, max_depth, cfg);

	if (err)
		return err;
	cfg->pthread_specific = pyproc__pthread_specific(pp);
	if (cfg->pthread_specific >= 0 && pp->off.rt_tss != PYO_NONE)
		cfg->tss_key_addr = pp->runtime + pp->off.rt_tss;
	if (pp->off.rt_tss == PYO_NONE && pyproc__tls_tstate(pp, &cfg->tls_tstate))
		cfg->tls_tstate = 0;
	/* For off-CPU recording: a futex wait inside it is a wait for the GIL. */
	if (!pyproc__gil_range(pp, &lo, &hi)) {
		cfg->gil_lo = lo;
		cfg->gil_hi = hi;
	}
	return 0;
}

/* ---- walking from outside ----------------------------------------------------------------- */

/* The innermost frame of @tstate, as the BPF walker finds it (py_first_frame_offsets). */
static int first_frame(struct pyproc *pp, const struct py_proc_cfg *cfg, uint64_t tstate,
		       uint64_t *frame)
{
	uint64_t p;
	__u16 off, off2;
	int err;

	if (py_first_frame_offsets(cfg, &off, &off2) == 1)
		return pp_ptr(pp, tstate + off, frame);
	err = pp_ptr(pp, tstate + off, &p);
	if (err)
		return err;
	if (!p) {
		*frame = 0;
		return 0;
	}
	return pp_ptr(pp, p + off2, frame);
}

int py_frame_record(struct pyproc *pp, uint64_t frame, struct py_frame_rec *rec)
{
	struct py_proc_cfg cfg;
	uint8_t fb[PY_HDR_MAX + 8] = {0}, cb[PY_HDR_MAX + 8] = {0};
	struct py_walk w;
	__u32 sz;
	int err;

	err = walk_cfg(pp, 1, &cfg);
	if (err)
		return err;
	py_walk_begin(&w, &cfg, frame);
	sz = py_frame_hdr_size(&cfg);
	err = sz ? pp_read(pp, frame, fb, sz) : -EINVAL;
	if (err)
		return err;
	if (py_walk_frame(&cfg, &w, fb, rec) != PY_NEXT_CODE)
		return -EFAULT;
	sz = py_code_hdr_size(&cfg);
	err = sz ? pp_read(pp, w.code, cb, sz) : -EINVAL;
	if (err)
		return err;
	py_walk_code(&cfg, &w, fb, cb, rec);
	return w.n == 1 ? 0 : -EFAULT;
}

int pyproc__walk_ex(struct pyproc *pp, uint64_t tstate, struct py_frame_rec *out, uint64_t *frames,
		    unsigned int max, bool *truncated, unsigned int *n_partial)
{
	struct py_proc_cfg cfg;
	/* Header copies, as large as the BPF walker's (pywalk.h masks offsets into them). */
	uint8_t fb[PY_HDR_MAX + 8] = {0}, cb[PY_HDR_MAX + 8] = {0};
	struct py_walk w;
	uint64_t frame;
	unsigned int steps, n0;
	__u32 sz;
	int err = 0, next;

	*truncated = false;
	if (n_partial)
		*n_partial = 0;
	/* The same config, read sizes and rules (bpf/pywalk.h) as the BPF walker. */
	err = walk_cfg(pp, max, &cfg);
	if (err)
		return err;
	err = first_frame(pp, &cfg, tstate, &frame);
	if (err)
		return err;
	py_walk_begin(&w, &cfg, frame);
	for (steps = 0; steps < PY_WALK_MAX_STEPS && !py_walk_at_end(&w); steps++) {
		frame = w.frame;
		sz = py_frame_hdr_size(&cfg);
		err = sz ? pp_read(pp, w.frame, fb, sz) : -EINVAL;
		if (err) {
			py_walk_fail(&w);
			break;
		}
		next = py_walk_frame(&cfg, &w, fb, out);
		if (next == PY_NEXT_FRAME)
			continue;
		if (next == PY_NEXT_STOP)
			break;
		sz = py_code_hdr_size(&cfg);
		err = sz ? pp_read(pp, w.code, cb, sz) : -EINVAL;
		if (err) {
			py_walk_fail(&w);
			break;
		}
		n0 = w.n;
		next = py_walk_code(&cfg, &w, fb, cb, out);
		if (frames && w.n > n0)
			frames[n0] = frame;
		if (next == PY_NEXT_STOP)
			break;
	}
	py_walk_end(&cfg, &w);
	*truncated = w.flags & SAMPLE_F_PY_TRUNCATED;
	switch (w.status) {
	case PY_OK:
		return (int)w.n;
	case PY_TORN:
		return -EAGAIN;
	default: /* PY_READ_ERROR: a read failed, or a frame changed under us */
		if (n_partial)
			*n_partial = w.n;
		return err;
	}
}
