// SPDX-License-Identifier: MIT
/*
 * pystacks: print every thread's Python stack of a running process, read from outside with
 * pyproc (no ptrace, no agent). A test tool; `probing backtrace` builds on the same calls.
 *
 *   pystacks [-v] [--raw] [--depth N] [--locals [--namespace] [--max-repr N]] PID
 *   pystacks --info PID
 *   pystacks --waits PID
 *
 * Default output, per thread:
 *   Thread 1234 "MainThread"
 *       leaf (file.py:12)
 *       caller (file.py:40)
 * --raw prints one tab-separated line per frame for scripts:
 *   tid, thread name, depth (0 = leaf), func, qualname (or -), file, line, entry (0/1)
 * and "T<TAB>tid<TAB>name<TAB>frames<TAB>truncated<TAB>tss_bound" before each thread's frames.
 * --locals adds each frame's local variables (pyproc__frame_locals_ex) after it; with --raw
 *   L, tid, depth, name, type, flags (comma-separated: arg, cell, free, namespace,
 *   unreadable; - for none), address (hex), repr (- when there is none)
 * and "E<TAB>tid<TAB>depth<TAB>error" when a frame's locals could not be read.
 * --namespace also lists module-level / class-body namespaces (PYLOCALS_NAMESPACE);
 * --max-repr caps each repr (default 80 characters).
 * --info prints what was found about the interpreter, "key<TAB>value..." per line: version,
 * elf, runtime, eval (start end, once per range of _PyEval_EvalFrameDefault code),
 * pthread_specific, tss_key.
 * --waits prints, per thread, what it waits for, read from /proc (base/taskwait) and the GIL:
 *   "G<TAB>gil_lo<TAB>gil_hi<TAB>holder tstate" once (hex; holder 0: nobody), then
 *   "W<TAB>tid<TAB>name<TAB>stat letter<TAB>class (bpf/waitclass.h)<TAB>description<TAB>holds"
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/taskwait.h"
#include "python/pyproc.h"
#include "pyoffsets/pyoffsets.h"
#include "base/util.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: pystacks [-v] [--raw] [--depth N] [--locals [--namespace] [--max-repr N]] "
		"PID\n"
		"       pystacks --info PID\n"
		"       pystacks --waits PID\n"
		"Print the Python stack of every thread of PID, read from outside.\n");
}

struct locals_ctx {
	bool raw;
	int tid;
	int depth;
};

static int print_local(const struct pyproc_local *l, void *ctx)
{
	static const struct {
		unsigned int flag;
		const char *name;
	} names[] = {{PYL_ARG, "arg"},
		     {PYL_CELL, "cell"},
		     {PYL_FREE, "free"},
		     {PYL_NAMESPACE, "namespace"},
		     {PYL_UNREADABLE, "unreadable"}};
	struct locals_ctx *lc = ctx;
	char flags[64] = "";
	size_t i;

	for (i = 0; i < ARRAY_SIZE(names); i++)
		if (l->flags & names[i].flag)
			snprintf(flags + strlen(flags), sizeof(flags) - strlen(flags), "%s%s",
				 *flags ? "," : "", names[i].name);
	if (lc->raw) {
		printf("L\t%d\t%d\t%s\t%s\t%s\t%#llx\t%s\n", lc->tid, lc->depth, l->name, l->type,
		       *flags ? flags : "-", (unsigned long long)l->addr, l->repr ? l->repr : "-");
	} else if (l->repr) {
		printf("        %s = %s\n", l->name, l->repr);
	} else {
		printf("        %s = <%s object at %#llx>\n", l->name, l->type,
		       (unsigned long long)l->addr);
	}
	return 0;
}

/* --waits: every Python thread's state and wait class, and the GIL's holder. */
static int print_waits(struct pyproc *pp, pid_t pid)
{
	uint64_t lo = 0, hi = 0, holder = 0;
	const struct pythread *th;
	struct task_wait w;
	char desc[64];
	size_t nth, i;
	int err;

	err = pyproc__refresh_threads(pp);
	if (err < 0)
		return err;
	err = pyproc__gil_range(pp, &lo, &hi);
	if (!err)
		err = pyproc__gil_holder(pp, &holder);
	if (err)
		fprintf(stderr, "pystacks: the GIL: %s\n", strerror(-err));
	printf("G\t%#llx\t%#llx\t%#llx\n", (unsigned long long)lo, (unsigned long long)hi,
	       (unsigned long long)holder);
	th = pyproc__threads(pp, &nth);
	for (i = 0; i < nth; i++) {
		if (taskwait_read(pid, th[i].tid, &w))
			continue;
		printf("W\t%d\t%s\t%c\t%s\t%s\t%d\n", (int)th[i].tid, th[i].name, w.state,
		       wait_state_name(taskwait_classify(&w, lo, hi)),
		       taskwait_describe(&w, desc, sizeof(desc)), holder && th[i].tstate == holder);
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {{"raw", no_argument, NULL, 'r'},
						 {"depth", required_argument, NULL, 'd'},
						 {"info", no_argument, NULL, 'i'},
						 {"locals", no_argument, NULL, 'l'},
						 {"namespace", no_argument, NULL, 'n'},
						 {"max-repr", required_argument, NULL, 'm'},
						 {"waits", no_argument, NULL, 'w'},
						 {"help", no_argument, NULL, 'h'},
						 {NULL, 0, NULL, 0}};
	struct py_frame_rec *recs = NULL;
	uint64_t *frames = NULL;
	bool locals = false;
	unsigned int opts = 0;
	long max_repr = 80;
	struct pyproc *pp = NULL;
	const struct pythread *th;
	long pid, depth = SAMPLER_MAX_PYDEPTH;
	bool raw = false, info = false, waits = false;
	size_t nth, i;
	int c, n, ret = 1;

	while ((c = getopt_long(argc, argv, "vrd:ilnm:wh", longopts, NULL)) != -1) {
		switch (c) {
		case 'v':
			log_verbosity++;
			break;
		case 'r':
			raw = true;
			break;
		case 'i':
			info = true;
			break;
		case 'l':
			locals = true;
			break;
		case 'w':
			waits = true;
			break;
		case 'n':
			opts |= PYLOCALS_NAMESPACE;
			break;
		case 'm':
			if (parse_long(optarg, 1, 1000000, &max_repr)) {
				usage(stderr);
				return 2;
			}
			break;
		case 'd':
			if (parse_long(optarg, 1, SAMPLER_MAX_PYDEPTH, &depth)) {
				usage(stderr);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind + 1 != argc || parse_long(argv[optind], 1, 0x7fffffff, &pid)) {
		usage(stderr);
		return 2;
	}
	pp = pyproc__open((pid_t)pid);
	if (!pp) {
		fprintf(stderr, "pystacks: pid %ld: %s\n", pid,
			errno == ENOENT ? "no CPython " PY_VERSIONS " interpreter found"
					: strerror(errno));
		return 1;
	}
	if (info) {
		const struct pyproc_range *r;
		size_t nr;

		printf("version\t%s\nelf\t%s\nruntime\t%#llx\n", pyproc__version_str(pp),
		       pyproc__elf_path(pp), (unsigned long long)pyproc__runtime_addr(pp));
		r = pyproc__eval_ranges(pp, &nr);
		for (i = 0; i < nr; i++)
			printf("eval\t%#llx\t%#llx\n", (unsigned long long)r[i].start,
			       (unsigned long long)r[i].end);
		printf("pthread_specific\t%d\n", pyproc__pthread_specific(pp));
		printf("tss_key\t%d\n", pyproc__tss_key(pp));
		ret = 0;
		goto cleanup;
	}
	if (waits) {
		ret = print_waits(pp, (pid_t)pid) ? 1 : 0;
		goto cleanup;
	}
	recs = calloc(depth, sizeof(*recs));
	frames = calloc(depth, sizeof(*frames));
	if (!recs || !frames)
		goto cleanup;
	n = pyproc__refresh_threads(pp);
	if (n < 0) {
		fprintf(stderr, "pystacks: pid %ld: reading threads: %s\n", pid, strerror(-n));
		goto cleanup;
	}
	if (!raw)
		printf("Python %s (%s)\n", pyproc__version_str(pp), pyproc__elf_path(pp));
	th = pyproc__threads(pp, &nth);
	for (i = 0; i < nth; i++) {
		bool trunc;
		unsigned int partial = 0;
		int k;

		n = pyproc__walk_ex(pp, th[i].tstate, recs, frames, (unsigned int)depth, &trunc,
				    &partial);
		if (n < 0) {
			fprintf(stderr, "pystacks: thread %d: stack read failed part-way (%s)\n",
				(int)th[i].tid, strerror(-n));
			n = (int)partial;
		}
		if (raw)
			printf("T\t%d\t%s\t%d\t%d\t%d\n", (int)th[i].tid, th[i].name, n, trunc,
			       th[i].tss_bound);
		else
			printf("\nThread %d \"%s\"%s\n", (int)th[i].tid, th[i].name,
			       n ? "" : " (no Python frames)");
		for (k = 0; k < n; k++) {
			struct frame f;

			pyproc__resolve(pp, &recs[k], &f);
			if (raw)
				printf("F\t%d\t%s\t%d\t%s\t%s\t%s\t%d\t%d\n", (int)th[i].tid,
				       th[i].name, k, f.func, f.qualname ? f.qualname : "-",
				       f.file ? f.file : "-", f.line, !!(recs[k].meta & PYF_ENTRY));
			else
				printf("    %s (%s:%d)\n", f.qualname ? f.qualname : f.func,
				       f.file ? f.file : "?", f.line);
			if (locals) {
				struct locals_ctx lc = {raw, (int)th[i].tid, k};
				int err = pyproc__frame_locals_ex(pp, frames[k], recs[k].code,
								  (size_t)max_repr, opts,
								  print_local, &lc);

				if (err && raw)
					printf("E\t%d\t%d\t%s\n", (int)th[i].tid, k,
					       strerror(-err));
				else if (err)
					printf("        (locals unreadable: %s)\n", strerror(-err));
			}
		}
		if (trunc && !raw)
			printf("    ... (deeper than %ld frames)\n", depth);
	}
	ret = 0;
cleanup:
	free(recs);
	free(frames);
	pyproc__free(pp);
	return ret;
}
