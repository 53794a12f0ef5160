// SPDX-License-Identifier: MIT
/*
 * livesql: run SQL on the live tables of a process (user/live/livedb.c), as 'probing query -p'
 * does, for tests and benchmarks (the round trip without a process start). Rows are printed as
 * one JSON array per line.
 *
 *   livesql [-n REPEAT] [--timeout SEC] PID|HOST:PORT SQL
 *
 * With -n, the whole round trip (open, query, close) is repeated and its median, minimum and
 * maximum time printed on stderr ("livesql: N runs: median X ms ...").
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/jsonq.h"
#include "live/live.h"
#include "live/livedb.h"
#include "base/util.h"

static int dcmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int run_once(const struct live_target *t, int gil_ms, const char *sql, bool print)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	struct strbuf line = {0};
	int rc, i, n, err = 0;

	if (livedb__open_target(t, gil_ms, &db))
		return 1;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
		fprintf(stderr, "livesql: %s\n", sqlite3_errmsg(db));
		err = 1;
		goto out;
	}
	n = sqlite3_column_count(st);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		sb_reset(&line);
		sb_puts(&line, "[");
		for (i = 0; i < n; i++) {
			if (i)
				sb_puts(&line, ", ");
			switch (sqlite3_column_type(st, i)) {
			case SQLITE_NULL:
				sb_puts(&line, "null");
				break;
			case SQLITE_INTEGER:
				sb_printf(&line, "%lld", sqlite3_column_int64(st, i));
				break;
			case SQLITE_FLOAT:
				sb_printf(&line, "%.17g", sqlite3_column_double(st, i));
				break;
			default:
				jq_quote(&line, (const char *)sqlite3_column_text(st, i));
			}
		}
		sb_puts(&line, "]");
		if (print)
			puts(sb_str(&line));
	}
	if (rc != SQLITE_DONE) {
		fprintf(stderr, "livesql: %s\n", sqlite3_errmsg(db));
		err = 1;
	}
out:
	sqlite3_finalize(st);
	sqlite3_close(db);
	sb_free(&line);
	return err;
}

int main(int argc, char **argv)
{
	struct live_target t;
	int a = 1, repeat = 0, gil_ms = LIVE_GIL_TIMEOUT_MS, i, err = 0;
	double *ms;

	while (a < argc && argv[a][0] == '-') {
		if (!strcmp(argv[a], "-n") && a + 1 < argc) {
			repeat = atoi(argv[++a]);
		} else if (!strcmp(argv[a], "--timeout") && a + 1 < argc) {
			if (live__parse_timeout("livesql", argv[++a], &gil_ms))
				return 2;
		} else {
			fprintf(stderr,
				"usage: livesql [-n REPEAT] [--timeout SEC] PID|HOST:PORT SQL\n");
			return 2;
		}
		a++;
	}
	if (a + 2 != argc) {
		fprintf(stderr, "usage: livesql [-n REPEAT] [--timeout SEC] PID|HOST:PORT SQL\n");
		return 2;
	}
	if (live__target("livesql", NULL, argv[a], &t))
		return 2;
	if (repeat <= 0)
		return run_once(&t, gil_ms, argv[a + 1], true);
	ms = calloc(repeat, sizeof(*ms));
	if (!ms)
		return 1;
	for (i = 0; i < repeat && !err; i++) {
		uint64_t t0 = now_mono_ns();

		err = run_once(&t, gil_ms, argv[a + 1], i == 0);
		ms[i] = (now_mono_ns() - t0) / 1e6;
	}
	if (!err) {
		qsort(ms, repeat, sizeof(*ms), dcmp);
		fprintf(stderr, "livesql: %d runs: median %.3f ms, min %.3f ms, max %.3f ms\n",
			repeat, ms[repeat / 2], ms[0], ms[repeat - 1]);
	}
	free(ms);
	return err;
}
