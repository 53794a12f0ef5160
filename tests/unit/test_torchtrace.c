// SPDX-License-Identifier: MIT
/* torchtrace__chrome on hand-made rows: event fields and units, track layout, errors. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>

#include <unistd.h>

#include "base/jsonq.h"
#include "live/livetables.h"
#include "test.h"
#include "report/torchtrace.h"

/* A day boundary + 1000 s, so that ts - base is exact in a double. */
#define T0 1795305600.0

static sqlite3 *db_with(const char *rows_sql)
{
	sqlite3 *db = NULL;
	char *err = NULL;

	if (sqlite3_open(":memory:", &db) != SQLITE_OK)
		return NULL;
	if (sqlite3_exec(
		    db,
		    "CREATE TABLE tt(step, module, stage, duration, allocated, max_allocated, "
		    "ts, rank, reserved, world_size, local_rank, pid, tid, thread, depth, seq);",
		    NULL, NULL, &err) != SQLITE_OK ||
	    (rows_sql && sqlite3_exec(db, rows_sql, NULL, NULL, &err) != SQLITE_OK)) {
		fprintf(stderr, "%s\n", err ? err : "?");
		sqlite3_free(err);
		sqlite3_close(db);
		return NULL;
	}
	return db;
}

/* Run the writer into a string. */
static char *chrome(sqlite3 *db, int *err, long long *n)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	*err = torchtrace__chrome(db, "tt", f, n);
	fclose(f);
	return buf;
}

struct ev {
	char name[64], cat[16], ph[4];
	double ts, dur;
	long long pid, tid;
};

static struct ev evs[64];
static int nev;

static int collect(char **v, int n, void *ctx)
{
	struct ev *e = &evs[nev++];

	(void)ctx;
	memset(e, 0, sizeof(*e));
	snprintf(e->name, sizeof(e->name), "%s", v[0] ? v[0] : "");
	snprintf(e->cat, sizeof(e->cat), "%s", v[1] ? v[1] : "");
	snprintf(e->ph, sizeof(e->ph), "%s", v[2] ? v[2] : "");
	e->ts = v[3] ? strtod(v[3], NULL) : -1;
	e->dur = v[4] ? strtod(v[4], NULL) : -1;
	e->pid = v[5] ? atoll(v[5]) : -1;
	e->tid = v[6] ? atoll(v[6]) : -1;
	return nev >= 64;
}

static void parse(const char *json)
{
	static const char *const paths[] = {"$.name", "$.cat", "$.ph", "$.ts",
					    "$.dur",  "$.pid", "$.tid"};

	nev = 0;
	jq_each(json, "$.traceEvents", paths, 7, collect, NULL);
}

static const struct ev *find(const char *name)
{
	for (int i = 0; i < nev; i++)
		if (!strcmp(evs[i].name, name) && !strcmp(evs[i].ph, "X"))
			return &evs[i];
	return NULL;
}

#define ROW(step, mod, stage, dur, ts, tid, depth, seq)                                           \
	"INSERT INTO tt VALUES(" #step ", '" mod "', '" stage "', " #dur ", 100, NULL, " #ts ", " \
	"NULL, NULL, NULL, NULL, 42, " #tid ", 'Main', " #depth ", " #seq ");"

TEST(events_units_and_names)
{
	sqlite3 *db = db_with(
		ROW(1, "model", "forward", 0.002, 1795306600.0, 42, 0, 0)
			ROW(1, "model.a", "forward", 0.0005, 1795306600.0005, 42, 1, 1)
				ROW(1, "model.a", "backward", 0.001, 1795306600.003, 42, 1, 2)
					ROW(1, "SGD", "step", 0.0002, 1795306600.005, 42, NULL, 3));
	const struct ev *e;
	long long n = 0;
	char *out, *v;
	int err;

	REQUIRE(db);
	out = chrome(db, &err, &n);
	CHECK_EQ(err, 0);
	CHECK_EQ(n, 4);
	REQUIRE(out);
	v = jq_text(out, "$.otherData.base_unix");
	CHECK_STR(v, "1795305600");
	free(v);
	v = jq_text(out, "$.displayTimeUnit");
	CHECK_STR(v, "ms");
	free(v);
	parse(out);
	e = find("model");
	REQUIRE(e);
	CHECK_STR(e->cat, "forward");
	/* 1000 s after the base, in microseconds; 2 ms long (times are doubles of unix
	 * seconds: a quarter of a microsecond apart). */
	CHECK(e->ts > 1000e6 - 0.5 && e->ts < 1000e6 + 0.5);
	CHECK(e->dur > 2000 - 0.5 && e->dur < 2000 + 0.5);
	CHECK_EQ(e->pid, 42);
	CHECK_EQ(e->tid, 42);
	CHECK(find("model.a"));
	e = find("model.a (backward)");
	REQUIRE(e);
	CHECK_STR(e->cat, "backward");
	e = find("SGD.step");
	REQUIRE(e);
	CHECK_STR(e->cat, "step");
	/* The steps track: one event for step 1 on its own track, from the first start to the
	 * last end. */
	e = find("step 1");
	REQUIRE(e);
	CHECK_EQ(e->tid, (1 << 30) - 1);
	CHECK(e->dur > 5200 - 0.5 && e->dur < 5200 + 0.5);
	free(out);
	sqlite3_close(db);
}

TEST(overlaps_go_to_another_track_and_rounding_is_clipped)
{
	/* b overlaps a (starts inside, ends 100 us after it): another track. c ends 0.5 us
	 * after its parent a: rounding, clipped to a's end, same track. */
	sqlite3 *db = db_with(ROW(1, "a", "forward", 0.001, 1795306600.0, 42, 0,
				  0) ROW(1, "b", "backward", 0.001, 1795306600.0001, 42, 0, 1)
				      ROW(1, "c", "forward", 0.0005005, 1795306600.0005, 42, 1, 2));
	const struct ev *a, *b, *c;
	long long n;
	char *out;
	int err, i;
	bool named = false;

	REQUIRE(db);
	out = chrome(db, &err, &n);
	CHECK_EQ(err, 0);
	REQUIRE(out);
	parse(out);
	a = find("a");
	b = find("b (backward)");
	c = find("c");
	REQUIRE(a && b && c);
	CHECK_EQ(a->tid, 42);
	CHECK_EQ(c->tid, 42);
	CHECK(b->tid != 42 && b->tid > (1 << 22)); /* never a real thread id */
	CHECK(c->ts + c->dur <= a->ts + a->dur + 1e-6);
	for (i = 0; i < nev; i++)
		if (!strcmp(evs[i].name, "thread_name") && evs[i].tid == b->tid)
			named = true;
	CHECK(named);
	free(out);
	sqlite3_close(db);
}

TEST(empty_and_bad_tables)
{
	sqlite3 *db = db_with(NULL);
	long long n = 7;
	char *out;
	int err;

	REQUIRE(db);
	out = chrome(db, &err, &n);
	CHECK_EQ(err, -ENOENT);
	CHECK_EQ(n, 0);
	CHECK(!out || !*out); /* nothing written */
	free(out);
	sqlite3_close(db);
	CHECK_EQ(sqlite3_open(":memory:", &db), SQLITE_OK);
	out = chrome(db, &err, &n); /* no table tt */
	CHECK_EQ(err, -EINVAL);
	free(out);
	sqlite3_close(db);
}

/* A stand-in for the live database: an in-memory one with python.torch_trace as a table. */
static sqlite3 *live_with(const char *rows_sql)
{
	sqlite3 *db = db_with(rows_sql);
	char *err = NULL;

	if (db && sqlite3_exec(db,
			       "ATTACH ':memory:' AS python; CREATE TABLE python.torch_trace AS "
			       "SELECT * FROM tt",
			       NULL, NULL, &err) != SQLITE_OK) {
		fprintf(stderr, "%s\n", err ? err : "?");
		sqlite3_free(err);
		sqlite3_close(db);
		return NULL;
	}
	return db;
}

static char *text_of(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st = NULL;
	char *v = NULL;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
		v = strdup((const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	return v;
}

/*
 * query --save: the recording's torch_trace has the columns python.torch_trace is declared
 * with (injector/py/torch.py, through livetables.h), in order, with their types; a row saved
 * twice is kept once.
 */
TEST(save_has_the_declared_columns_and_keeps_rows_once)
{
	char path[] = "/tmp/probing-test-torchtrace-XXXXXX.db";
	const struct live_table *t = live_table__find("python", "torch_trace");
	sqlite3 *live = live_with(ROW(1, "model", "forward", 0.002, 1795306600.0, 42, 0, 0) ROW(
		1, "SGD", "step", 0.0002, 1795306600.005, 42, NULL, 1));
	sqlite3 *file = NULL;
	sqlite3_stmt *st = NULL;
	long long added = -1, total = -1;
	size_t i = 0;
	char *sql;
	int fd;

	REQUIRE(t && live);
	fd = mkstemps(path, 3);
	REQUIRE(fd >= 0);
	close(fd);
	unlink(path); /* a new file: made a recording */
	CHECK_EQ(torchtrace__save(live, path, &added, &total), 0);
	CHECK_EQ(added, 2);
	CHECK_EQ(total, 2);
	CHECK_EQ(torchtrace__save(live, path, &added, &total), 0);
	CHECK_EQ(added, 0);
	CHECK_EQ(total, 2);
	REQUIRE(sqlite3_open_v2(path, &file, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
	REQUIRE(sqlite3_prepare_v2(file, "SELECT name, type FROM pragma_table_info('torch_trace')",
				   -1, &st, NULL) == SQLITE_OK);
	for (; sqlite3_step(st) == SQLITE_ROW; i++) {
		REQUIRE(i < t->ncolumns);
		CHECK_STR((const char *)sqlite3_column_text(st, 0), t->columns[i].name);
		CHECK_STR((const char *)sqlite3_column_text(st, 1), t->columns[i].type);
	}
	CHECK_EQ(i, t->ncolumns);
	sqlite3_finalize(st);
	sql = text_of(file, "SELECT sql FROM sqlite_master WHERE name = 'torch_trace'");
	CHECK(sql && strstr(sql, ", UNIQUE(pid, seq, ts))"));
	free(sql);
	sql = text_of(file, "SELECT module FROM torch_trace WHERE stage = 'step'");
	CHECK_STR(sql, "SGD");
	free(sql);
	sqlite3_close(file);
	sqlite3_close(live);
	unlink(path);
}

TEST_MAIN()
