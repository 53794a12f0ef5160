// SPDX-License-Identifier: MIT
/* probing memory: where a process's memory goes, from /proc and (with the agent) Python. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "live/agent_client.h"
#include "base/cli.h"
#include "base/escape.h"
#include "base/jsonq.h"
#include "live/live.h"
#include "live/livejob.h"
#include "base/log.h"
#include "base/procinfo.h"
#include "base/util.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: probing memory -p PID[,PID...] [--children] [OPTIONS]\n"
		"\n"
		"Where the memory of a process goes. From /proc (no agent needed): resident "
		"(RSS),\n"
		"proportional (PSS: shared pages divided among their users), swap, peak, and the\n"
		"mappings holding the most, grouped by file ([heap], [stack], [anon] for the "
		"rest).\n"
		"When the agent runs in the process: Python objects by type (count, total\n"
		"sys.getsizeof; the GIL is held while counting) and, where PyTorch has "
		"initialized\n"
		"CUDA, allocated/reserved GPU memory per device.\n"
		"\n"
		"With several PIDs or --children (each PID and all its descendants now: the\n"
		"ranks of a job under their launcher), each process in turn, under a header\n"
		"\"==> rank 3 (pid 1234) <==\" (the rank from its environment).\n"
		"\n"
		"Options:\n"
		"  -p, --pid PID[,PID...]  the process(es)\n"
		"  -t, --target PID     the same\n"
		"      --children       also every descendant of each PID\n"
		"  -n, --top N          rows per table (default 15 mappings, and the agent's\n"
		"                       memory_top setting for object types: 25)\n"
		"      --inject         load the agent if it is not running (for the Python part)\n"
		"      --no-python      skip the Python part even when the agent runs\n"
		"      --timeout SEC    how long to wait for the GIL (default 5)\n"
		"  -h, --help           this help\n"
		"\n"
		"Examples:\n"
		"  probing memory -p 1234\n"
		"  probing memory -p 1234 --inject -n 30\n"
		"  probing memory -p $(pgrep -f torchrun) --children\n");
}

static void human(char *out, size_t len, double bytes)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int u = 0;

	while (bytes >= 1024 && u < 4) {
		bytes /= 1024;
		u++;
	}
	snprintf(out, len, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
}

/* "Key:   1234 kB" -> bytes, or -1. */
static long long kb_field(const char *text, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\n%s:", key);
	p = strstr(text, pat);
	if (!p && !strncmp(text, pat + 1, strlen(pat + 1)))
		p = text - 1;
	if (!p)
		return -1;
	return strtoll(p + strlen(pat), NULL, 10) * 1024;
}

struct region {
	char *name;
	long long rss, pss, swap, size;
};

static int region_cmp(const void *a, const void *b)
{
	const struct region *x = a, *y = b;

	return x->rss < y->rss ? 1 : x->rss > y->rss ? -1 : 0;
}

/* Aggregate /proc/PID/smaps by file (anonymous mappings as [anon]). */
static int smaps_regions(pid_t pid, struct region **out, int *nr)
{
	char fn[64], *buf, *line, *save = NULL;
	struct region *r = NULL, *tmp, *cur = NULL;
	int n = 0, cap = 0, i;

	snprintf(fn, sizeof(fn), "/proc/%d/smaps", pid);
	buf = read_file(fn, 0, NULL);
	if (!buf)
		return -errno;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		unsigned long long lo, hi;
		char name[4096] = "";
		int pos = 0;

		if (sscanf(line, "%llx-%llx %*s %*s %*s %*s %n", &lo, &hi, &pos) >= 2 && pos) {
			snprintf(name, sizeof(name), "%s", line + pos);
			if (!name[0])
				snprintf(name, sizeof(name), "[anon]");
			cur = NULL;
			for (i = 0; i < n; i++)
				if (!strcmp(r[i].name, name))
					cur = &r[i];
			if (!cur) {
				if (n == cap) {
					cap = cap ? cap * 2 : 64;
					tmp = realloc(r, cap * sizeof(*r));
					if (!tmp)
						break;
					r = tmp;
				}
				cur = &r[n++];
				memset(cur, 0, sizeof(*cur));
				cur->name = strdup(name);
			}
			cur->size += hi - lo;
			continue;
		}
		if (!cur)
			continue;
		if (!strncmp(line, "Rss:", 4))
			cur->rss += strtoll(line + 4, NULL, 10) * 1024;
		else if (!strncmp(line, "Pss:", 4))
			cur->pss += strtoll(line + 4, NULL, 10) * 1024;
		else if (!strncmp(line, "Swap:", 5))
			cur->swap += strtoll(line + 5, NULL, 10) * 1024;
	}
	free(buf);
	qsort(r, n, sizeof(*r), region_cmp);
	*out = r;
	*nr = n;
	return 0;
}

/* The agent's rows come from the target: every string is escaped (escape.h) in @ctx's bufs. */
static int print_type(char **v, int n, void *ctx)
{
	struct strbuf *e = ctx;
	char size[32];
	bool builtin = !v[1] || !strcmp(v[1], "builtins");

	human(size, sizeof(size), v[3] ? atof(v[3]) : 0);
	printf("  %-12s %-10s %s%s%s\n", size, text_str(&e[0], v[2], 0),
	       builtin ? "" : text_str(&e[1], v[1], 0), builtin ? "" : ".",
	       text_str(&e[2], v[0], 0));
	return 0;
}

static int print_cuda(char **v, int n, void *ctx)
{
	struct strbuf *e = ctx;
	char a[32], r[32], ma[32];

	human(a, sizeof(a), v[2] ? atof(v[2]) : 0);
	human(r, sizeof(r), v[3] ? atof(v[3]) : 0);
	human(ma, sizeof(ma), v[4] ? atof(v[4]) : 0);
	printf("  cuda:%-3s %-28s allocated %-10s reserved %-10s peak allocated %s\n",
	       text_str(&e[0], v[0], 0), text_str(&e[1], v[1], 0), a, r, ma);
	return 0;
}

static int python_part(const struct live_target *t, bool inject, int top, int gil_ms)
{
	static const char *const opaths[] = {"$[0]", "$[1]", "$[2]", "$[3]"};
	static const char *const cpaths[] = {"$.device", "$.name", "$.allocated", "$.reserved",
					     "$.max_allocated"};
	struct agent_client *c = NULL;
	struct strbuf e[3] = {{0}};
	char body[64], *json = NULL, *note, tot[32];
	long long objs = 0, types = 0, size = 0;
	int rc, i;

	if (!inject && agent_client__connect_pid(t->pid, 1000, &c)) {
		printf("\nPython: the agent is not running in this process; 'probing memory -p %d "
		       "--inject' (or 'probing inject -p %d') adds Python objects and CUDA "
		       "memory.\n",
		       t->pid, t->pid);
		return EXIT_OK;
	}
	if (!c) {
		rc = live__connect("memory", t, true, &c);
		if (rc)
			return rc;
	}
	/* Without -n the agent's own memory_top setting decides. */
	if (top > 0)
		snprintf(body, sizeof(body), "{\"top\": %d}", top);
	else
		snprintf(body, sizeof(body), "{}");
	rc = live__request("memory", t, c, "memory", body, gil_ms, 600000, NULL, &json);
	agent_client__free(c);
	if (rc)
		return rc;
	jq_int(json, "$.total_objects", &objs);
	jq_int(json, "$.types", &types);
	jq_int(json, "$.total_size", &size);
	human(tot, sizeof(tot), size);
	printf("\nPython objects: %lld in %lld types, %s (sys.getsizeof)%s\n", objs, types, tot,
	       jq_bool(json, "$.truncated") ? ", counting stopped at memory_max_objects" : "");
	printf("  %-12s %-10s %s\n", "SIZE", "COUNT", "TYPE");
	jq_each(json, "$.objects", opaths, 4, print_type, e);
	note = jq_text(json, "$.cuda_note");
	if (note) {
		printf("\nCUDA: %s\n", text_str(&e[0], note, 0));
	} else {
		printf("\nCUDA (torch.cuda):\n");
		jq_each(json, "$.cuda", cpaths, 5, print_cuda, e);
	}
	free(note);
	free(json);
	for (i = 0; i < (int)ARRAY_SIZE(e); i++)
		sb_free(&e[i]);
	return EXIT_OK;
}

/* What memory shows, for each process. */
struct mem_req {
	bool inject, python;
	int top, gil_ms;
};

static int memory_one(const struct live_target *tp, const void *ctx)
{
	const struct mem_req *r = ctx;
	struct live_target t = *tp;
	struct region *reg = NULL;
	struct strbuf tmp = {0};
	char fn[64], *status = NULL, *rollup = NULL, a[32], b[32], c[32], d[32];
	bool inject = r->inject, python = r->python;
	int rc, i, nreg = 0, top = r->top;

	rc = cli_check_pid("memory", t.pid);
	if (rc)
		return rc;
	if (procinfo_is_kernel_thread(t.pid) == 1) {
		char desc[128];

		log_cmd("memory", "%s is a kernel thread: it has no user-space memory to report.",
			live__describe(&t, desc, sizeof(desc)));
		fputs("Give the PID of a user process (e.g. from 'ps -ef' or 'pgrep -f NAME').\n",
		      stderr);
		return EXIT_FAIL;
	}
	snprintf(fn, sizeof(fn), "/proc/%d/status", t.pid);
	status = read_file(fn, 0, NULL);
	snprintf(fn, sizeof(fn), "/proc/%d/smaps_rollup", t.pid);
	rollup = status ? read_file(fn, 0, NULL) : NULL;
	if (!status || !rollup) {
		int e = errno;

		if (e == EACCES || e == EPERM) {
			log_cmd("memory", "not allowed to read %s: %s.", fn, strerror(e));
			fputs("Only the process's owner or root may read its memory map; run "
			      "probing as that user or with sudo.\n",
			      stderr);
		} else if (e == ESRCH || e == ENOENT)
			log_cmd("memory", "process %d has exited", t.pid);
		else
			log_cmd("memory", "cannot read %s: %s", fn, strerror(e));
		rc = EXIT_FAIL;
		goto cleanup;
	}
	{
		char comm[64];

		printf("Process %d (%s)\n", t.pid, procinfo_comm_shown(t.pid, comm, sizeof(comm)));
	}
	human(a, sizeof(a), kb_field(status, "VmRSS"));
	human(b, sizeof(b), kb_field(status, "RssAnon"));
	human(c, sizeof(c), kb_field(status, "RssFile"));
	human(d, sizeof(d), kb_field(status, "RssShmem"));
	printf("  %-10s %-12s (anonymous %s, file %s, shared memory %s)\n", "RSS", a, b, c, d);
	human(a, sizeof(a), kb_field(rollup, "Pss"));
	human(b, sizeof(b), kb_field(rollup, "Pss_Anon"));
	human(c, sizeof(c), kb_field(rollup, "Pss_File"));
	human(d, sizeof(d), kb_field(rollup, "Pss_Shmem"));
	if (kb_field(rollup, "Pss_Anon") >= 0)
		printf("  %-10s %-12s (anonymous %s, file %s, shared memory %s)\n", "PSS", a, b, c,
		       d);
	else
		printf("  %-10s %s\n", "PSS", a);
	human(a, sizeof(a), kb_field(rollup, "Swap"));
	human(b, sizeof(b), kb_field(rollup, "SwapPss"));
	printf("  %-10s %-12s (proportional %s)\n", "Swap", a, b);
	human(a, sizeof(a), kb_field(status, "VmHWM"));
	printf("  %-10s %s\n", "Peak RSS", a);
	human(a, sizeof(a), kb_field(status, "VmSize"));
	printf("  %-10s %s\n", "Virtual", a);

	if (!smaps_regions(t.pid, &reg, &nreg) && nreg) {
		printf("\nLargest mappings (by RSS, grouped by file):\n");
		printf("  %-12s %-12s %-12s %-12s %s\n", "RSS", "PSS", "SWAP", "SIZE", "MAPPING");
		for (i = 0; i < nreg && i < (top ? top : 15); i++) {
			human(a, sizeof(a), reg[i].rss);
			human(b, sizeof(b), reg[i].pss);
			human(c, sizeof(c), reg[i].swap);
			human(d, sizeof(d), reg[i].size);
			/* File names are the target's choice: escaped (escape.h). */
			printf("  %-12s %-12s %-12s %-12s %s\n", a, b, c, d,
			       text_str(&tmp, reg[i].name, 0));
		}
	}
	fflush(stdout);
	if (python)
		rc = python_part(&t, inject, top, r->gil_ms);
cleanup:
	for (i = 0; i < nreg; i++)
		free(reg[i].name);
	free(reg);
	free(status);
	free(rollup);
	sb_free(&tmp);
	return rc;
}

static int cmd_memory(int argc, char **argv)
{
	static const struct option opts[] = {
		{"pid", required_argument, NULL, 'p'},
		{"target", required_argument, NULL, 't'},
		{"top", required_argument, NULL, 'n'},
		{"inject", no_argument, NULL, 'I'},
		{"no-python", no_argument, NULL, 'P'},
		{"timeout", required_argument, NULL, 'T'},
		{"children", no_argument, NULL, 'C'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct live_opts lo = LIVE_OPTS_INIT;
	struct mem_req r = {.python = true};
	struct live_sel sel;
	int ch, rc;
	long v;

	cli_getopt_reset();
	while ((ch = getopt_long(argc, argv, ":p:t:n:vh", opts, NULL)) != -1) {
		switch (ch) {
		case 'n':
			if (parse_long(optarg, 1, 100000, &v))
				return cli_usage_error("memory", "bad --top '%s'", optarg);
			r.top = v;
			break;
		case 'I':
			r.inject = true;
			break;
		case 'P':
			r.python = false;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			rc = live__shared_option("memory", ch, true, &lo);
			if (rc == LIVE_OPT_NOT_SHARED)
				return cli_bad_option("memory", ch, argv);
			if (rc)
				return rc;
		}
	}
	if (optind < argc)
		return cli_usage_error("memory", "unexpected argument '%s'", argv[optind]);
	r.gil_ms = lo.gil_ms;
	rc = livejob__select("memory", &lo, false, &sel);
	if (!rc && !sel.j.n && !sel.t.pid)
		rc = cli_usage_error("memory", "memory needs a process id (it reads /proc)");
	if (!rc)
		rc = livejob__run("memory", &sel, memory_one, &r);
	livejob__sel_free(&sel);
	return rc;
}

COMMAND(memory, cmd_memory, "process memory from /proc, Python objects and CUDA memory", 90);
