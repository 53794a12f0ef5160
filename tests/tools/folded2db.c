// SPDX-License-Identifier: MIT
/*
 * folded2db: make a recording (the file 'probing record' writes) from folded stacks, through
 * the same store API the recorder uses. For tests and benchmarks of the analysis commands.
 *
 *   folded2db -o OUT.db [-F HZ] [--seconds N] [--start T] [INPUT | -]
 *
 * Input, one item per line:
 *   root;caller;leaf COUNT     a stack, root first, with its sample count
 *   # text                     a comment; blank lines are ignored too
 *   @pid PID [TID [NAME...]]   the process and thread of the stacks that follow (default
 *                              pid 1, tid = pid); NAME is the thread's name
 *   @process PID COMMAND...    the command line of process PID
 *   @exe PID PATH              the executable of process PID (before its @process line)
 *   @meta KEY VALUE            a meta row (an integer VALUE is stored as an integer)
 *
 * Frames are named as 'probing flamegraph --folded' prints them, so its output is the input:
 *   name (file:line)   Python      func_[k]   kernel      func [module]   native, with module
 *   anything else      native
 * and "py:", "native:", "kernel:" prefixes force a kind (framename.h).
 *
 * --seconds N spreads every stack's count over N consecutive seconds from --start (default
 * 1700000000), as a long recording would store it (one row per second and stack).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report/framename.h"
#include "record/store.h"
#include "base/util.h"

struct ctx {
	struct store *st;
	int pid, tid;
	long seconds;
	long long start;
	uint64_t *ids;
	size_t cap;
	int lineno;
	const char *input;
	int exe_pid;
	char exe[4096];
};

static int fail(struct ctx *c, const char *what)
{
	fprintf(stderr, "folded2db: %s:%d: %s\n", c->input, c->lineno, what);
	return -EINVAL;
}

static int directive(struct ctx *c, char *line)
{
	char *save = NULL, *word = strtok_r(line, " \t", &save), *rest;
	long v, w;

	if (!strcmp(word, "@pid")) {
		char *p = strtok_r(NULL, " \t", &save), *t = strtok_r(NULL, " \t", &save);

		if (!p || parse_long(p, 1, INT_MAX, &v))
			return fail(c, "@pid needs a process id");
		w = v;
		if (t && parse_long(t, 1, INT_MAX, &w))
			return fail(c, "@pid: bad thread id");
		c->pid = v;
		c->tid = w;
		rest = strtok_r(NULL, "", &save);
		return store__thread(c->st, c->pid, c->tid, rest, (double)c->start);
	}
	if (!strcmp(word, "@process")) {
		struct store_process p = {.ppid = 1,
					  .rank = -1,
					  .local_rank = -1,
					  .world_size = -1,
					  .group_rank = -1};
		char *pid = strtok_r(NULL, " \t", &save);

		if (!pid || parse_long(pid, 1, INT_MAX, &v))
			return fail(c, "@process needs a process id");
		p.pid = v;
		p.command = strtok_r(NULL, "", &save);
		p.exe = c->exe_pid == p.pid ? c->exe : NULL;
		p.start_time = c->start;
		return store__process(c->st, &p);
	}
	if (!strcmp(word, "@exe")) {
		char *pid = strtok_r(NULL, " \t", &save), *path = strtok_r(NULL, "", &save);

		if (!pid || parse_long(pid, 1, INT_MAX, &v) || !path)
			return fail(c, "@exe needs a process id and a path");
		c->exe_pid = v;
		snprintf(c->exe, sizeof(c->exe), "%s", path);
		return 0;
	}
	if (!strcmp(word, "@meta")) {
		char *key = strtok_r(NULL, " \t", &save), *value = strtok_r(NULL, "", &save);

		if (!key || !value)
			return fail(c, "@meta needs a key and a value");
		if (!parse_long(value, LONG_MIN, LONG_MAX, &v))
			return store__meta_int(c->st, key, v);
		return store__meta_text(c->st, key, value);
	}
	return fail(c, "unknown directive");
}

static int stack_line(struct ctx *c, char *line)
{
	char *sp = strrchr(line, ' '), *frame, *next;
	struct frame f;
	uint64_t stack_id, id;
	size_t n = 0, i;
	long count, s, part;
	int err;

	if (!sp || parse_long(sp + 1, 1, LONG_MAX, &count))
		return fail(c, "expected 'frame;frame;... COUNT'");
	*sp = '\0';
	for (frame = line; frame; frame = next) {
		next = strchr(frame, ';');
		if (next)
			*next++ = '\0';
		if (frame_parse_folded(frame, &f))
			return fail(c, "empty frame name");
		err = store__frame_id(c->st, &f, &id);
		if (err)
			return err;
		if (n == c->cap) {
			size_t cap = c->cap ? c->cap * 2 : 64;
			uint64_t *tmp = realloc(c->ids, cap * sizeof(*tmp));

			if (!tmp)
				return -ENOMEM;
			c->ids = tmp;
			c->cap = cap;
		}
		c->ids[n++] = id;
	}
	/* The store wants the leaf first. */
	for (i = 0; i < n / 2; i++) {
		id = c->ids[i];
		c->ids[i] = c->ids[n - 1 - i];
		c->ids[n - 1 - i] = id;
	}
	err = store__stack_id(c->st, c->ids, n, 0, &stack_id);
	for (s = 0; !err && s < c->seconds; s++) {
		part = count / c->seconds + (s < count % c->seconds);
		if (part)
			err = store__count(c->st, c->pid, c->tid, stack_id, c->start + s, part);
	}
	return err;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"output", required_argument, NULL, 'o'},
		{"frequency", required_argument, NULL, 'F'},
		{"seconds", required_argument, NULL, 's'},
		{"start", required_argument, NULL, 't'},
		{NULL, 0, NULL, 0},
	};
	struct ctx c = {.pid = 1, .tid = 1, .seconds = 1, .start = 1700000000, .input = "-"};
	const char *output = NULL;
	long freq = 99, v;
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	FILE *in = stdin;
	int opt, err = 0;

	while ((opt = getopt_long(argc, argv, "o:F:", opts, NULL)) != -1) {
		switch (opt) {
		case 'o':
			output = optarg;
			break;
		case 'F':
			if (parse_long(optarg, 1, 100000, &freq))
				goto usage;
			break;
		case 's':
			if (parse_long(optarg, 1, 1000000, &c.seconds))
				goto usage;
			break;
		case 't':
			if (parse_long(optarg, 0, LONG_MAX, &v))
				goto usage;
			c.start = v;
			break;
		default:
			goto usage;
		}
	}
	if (!output || argc - optind > 1)
		goto usage;
	if (optind < argc && strcmp(argv[optind], "-")) {
		c.input = argv[optind];
		in = fopen(c.input, "r");
		if (!in) {
			fprintf(stderr, "folded2db: %s: %s\n", c.input, strerror(errno));
			return 1;
		}
	}
	if (store__create(output, STORE_FORCE, &c.st))
		return 1;
	store__set_frequency(c.st, freq);
	store__meta_int(c.st, "frequency", freq);
	store__meta_int(c.st, "start", c.start);
	store__meta_int(c.st, "duration", c.seconds);
	while (!err && (len = getline(&line, &cap, in)) >= 0) {
		c.lineno++;
		while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = '\0';
		if (!len || line[0] == '#')
			continue;
		err = line[0] == '@' ? directive(&c, line) : stack_line(&c, line);
	}
	if (!err)
		err = store__close(c.st);
	else
		store__discard(c.st);
	if (in != stdin)
		fclose(in);
	free(line);
	free(c.ids);
	return err ? 1 : 0;
usage:
	fprintf(stderr, "usage: folded2db -o OUT.db [-F HZ] [--seconds N] [--start T] [INPUT|-]\n");
	return 2;
}
